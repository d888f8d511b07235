"""Unit tests of the VM harness (tests/vm/vm.py) that need no VM: disk specs, sizes, the command
script, module load order from modules.dep, and the initramfs archive format (read back by an
independent reader). Suite "unit": every build runs it."""
import os
import stat
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vm  # noqa: E402


class DiskSpec(unittest.TestCase):
    def test_full(self):
        d = vm.parse_disk("ext4:/mnt/ext4:size=128M:mkfs=-O quota,project:o=prjquota,noatime")
        self.assertEqual(d, {"fs": "ext4", "mount": "/mnt/ext4", "size": 128 << 20,
                             "mkfs": "-O quota,project", "mountopts": "prjquota,noatime"})

    def test_any_order_and_defaults(self):
        d = vm.parse_disk("xfs:/mnt/x:o=prjquota")
        self.assertEqual((d["size"], d["mkfs"], d["mountopts"]), (320 << 20, "", "prjquota"))
        d = vm.parse_disk("xfs:/mnt/x:o=pquota:mkfs=-m crc=1:size=1G")
        self.assertEqual((d["size"], d["mkfs"], d["mountopts"]), (1 << 30, "-m crc=1", "pquota"))
        self.assertEqual(vm.parse_disk("ext4:/mnt/e")["size"], 128 << 20)
        self.assertEqual(vm.parse_disk("raw:")["fs"], "raw")
        self.assertEqual(vm.parse_disk("raw::size=1M")["size"], 1 << 20)

    def test_refused(self):
        for bad, why in [("xfs", "FS:MOUNTPOINT"), ("xfs:rel/dir", "absolute"),
                         ("XFS:/m", "is not a name"), ("xfs:/m::o=x", "is not size="),
                         ("xfs:/m:prjquota", "is not size="), ("xfs:/m:o=a:o=b", "once each"),
                         ("xfs:/m:opts=x", "is not size="),
                         ("ext4:/m:size=12Q", "size"), ("ext4:/m\tx", "tabs")]:
            with self.assertRaises(vm.VMError) as cm:
                vm.parse_disk(bad)
            self.assertIn(why, str(cm.exception), bad)

    def test_sizes(self):
        for s, n in [("1", 1), ("4K", 4096), ("320M", 320 << 20), ("2G", 2 << 30),
                     ("64MiB", 64 << 20), ("1g", 1 << 30)]:
            self.assertEqual(vm.parse_size(s), n, s)


class CommandScript(unittest.TestCase):
    def test_quoting(self):
        with tempfile.TemporaryDirectory() as d:
            cwd = os.path.join(d, "a b")
            os.mkdir(cwd)
            code = ("import os,sys; print(os.getcwd().endswith('a b'), os.environ['X'], "
                    "sys.argv[1:])")
            script = vm.command_script(cwd, [("HP_VM", "1"), ("X", "it's $HOME")],
                                       [sys.executable, "-c", code, 'a"b'])
            path = os.path.join(d, "cmd")
            with open(path, "w") as f:
                f.write(script)
            out = subprocess.run(["/bin/bash", path], capture_output=True, text=True,
                                 timeout=60).stdout
        self.assertEqual(out.strip(), "True it's $HOME ['a\"b']")

    def test_missing_directory(self):
        r = subprocess.run(["/bin/bash", "-c", vm.command_script("/nonexistent/x", [], ["true"])],
                           capture_output=True, timeout=60)
        self.assertEqual(r.returncode, 125)


class ModuleOrder(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()
        with open(os.path.join(self.dir, "modules.dep"), "w") as f:
            f.write("kernel/fs/9p/9p.ko: kernel/fs/netfs/netfs.ko kernel/net/9p/9pnet.ko\n"
                    "kernel/net/9p/9pnet_virtio.ko: kernel/net/9p/9pnet.ko "
                    "kernel/drivers/virtio/virtio_ring.ko kernel/drivers/virtio/virtio.ko\n"
                    "kernel/net/9p/9pnet.ko:\n"
                    "kernel/fs/netfs/netfs.ko:\n"
                    "kernel/drivers/virtio/virtio_ring.ko: kernel/drivers/virtio/virtio.ko\n"
                    "kernel/drivers/virtio/virtio.ko:\n"
                    "kernel/fs/overlayfs/overlay.ko:\n")
        with open(os.path.join(self.dir, "modules.builtin"), "w") as f:
            f.write("kernel/drivers/virtio/virtio_pci.ko\n")

    def tearDown(self):
        import shutil
        shutil.rmtree(self.dir)

    def test_dependencies_first(self):
        order = vm.module_order(self.dir, ["virtio_pci", "9pnet_virtio", "9p", "overlay"])
        names = [os.path.basename(p) for p in order]
        self.assertEqual(len(names), len(set(names)))
        self.assertEqual(set(names), {"virtio.ko", "virtio_ring.ko", "9pnet.ko",
                                      "9pnet_virtio.ko", "netfs.ko", "9p.ko", "overlay.ko"})
        for mod, deps in [("9p.ko", ["netfs.ko", "9pnet.ko"]),
                          ("9pnet_virtio.ko", ["9pnet.ko", "virtio_ring.ko", "virtio.ko"]),
                          ("virtio_ring.ko", ["virtio.ko"])]:
            for d in deps:
                self.assertLess(names.index(d), names.index(mod), (d, mod, names))

    def test_unknown(self):
        with self.assertRaises(vm.VMError) as cm:
            vm.module_order(self.dir, ["nosuch"])
        self.assertIn("neither built in nor in", str(cm.exception))


class Cpio(unittest.TestCase):
    def test_read_back(self):
        """The archive as the kernel reads it: newc headers, names, 4-byte padding, modes,
        device numbers, and the trailer."""
        entries = [("dev", stat.S_IFDIR | 0o755, None),
                   ("dev/console", stat.S_IFCHR | 0o600, None, (5, 1)),
                   ("init", stat.S_IFREG | 0o755, b"\x7fELF" + b"x" * 1001),
                   ("modules/order", stat.S_IFREG | 0o644, b"a.ko\n")]
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "a.cpio")
            vm.cpio_newc(entries, path)
            with open(path, "rb") as f:
                data = f.read()
        got, at = [], 0
        while True:
            hdr = data[at:at + 110]
            self.assertEqual(hdr[:6], b"070701")
            fields = [int(hdr[6 + 8 * i:14 + 8 * i], 16) for i in range(13)]
            mode, size, rmaj, rmin, namesize = (fields[1], fields[6], fields[9], fields[10],
                                                fields[11])
            name = data[at + 110:at + 110 + namesize - 1].decode()
            self.assertEqual(data[at + 110 + namesize - 1], 0)
            at += 110 + namesize
            at += (4 - at % 4) % 4
            body = data[at:at + size]
            at += size
            at += (4 - at % 4) % 4
            if name == "TRAILER!!!":
                break
            got.append((name, mode, body, (rmaj, rmin)))
        self.assertEqual(at, len(data))
        self.assertEqual([g[0] for g in got], [e[0] for e in entries])
        self.assertEqual(got[1][1], stat.S_IFCHR | 0o600)
        self.assertEqual(got[1][3], (5, 1))
        self.assertEqual(got[2][2], entries[2][2])
        self.assertEqual(got[3][2], b"a.ko\n")


if __name__ == "__main__":
    unittest.main(verbosity=2)
