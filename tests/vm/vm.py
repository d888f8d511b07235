#!/usr/bin/env python3
"""The test VM: runs one command inside a virtual machine booting Debian's own kernel.

    tests/vm/vm.py prepare
    tests/vm/vm.py run [--disk FS:MOUNTPOINT[:size=SIZE][:mkfs=ARGS][:o=OPTIONS]]... [--timeout S]
                       [--mem MiB] [--cpus N] [--env K=V]... [--cwd DIR] [--keep] -- CMD [ARG]...

qemu-system-x86_64 (software emulation: TCG) boots the kernel of Debian's linux-image-amd64
package, downloaded with `apt-get download` and unpacked with `dpkg -x` into a cache (never
installed on the host), with a small initramfs built here (vminit.c, static, plus the modules to
reach the host). The guest's root is the host's own / shared read-only over 9p under a tmpfs
overlay: the build directory, python3 and every host tool are there at the same paths, and
nothing the guest writes reaches the host but the run directory (/hp-vm inside). The VM has no
network card (loopback only). Each --disk is a fresh sparse image, formatted and mounted inside
the guest before the command runs; the command sees HP_VM=1 and HP_VM_DISKS="FS:MOUNTPOINT ...".

The command's output is streamed to stdout and its exit code is this script's. 124: the
timeout killed qemu (by pid); 125: the VM failed before the command could run or report
(the kernel console's tail is printed). Timing goes to stderr as one line starting "vm: ".

The cache is $HP_VM_CACHE, else ~/.cache/hostpath-provisioner/vm (outside the repository,
shared by builds and worktrees; about 400 MB). HP_VM_KERNEL_PKG picks the kernel package
(default: what linux-image-amd64 depends on now).
"""
import argparse
import fcntl
import hashlib
import lzma
import os
import re
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# What the initramfs loads (from memory, fast): what mounts the host's root, and the scratch
# disks' driver (no udev in the guest would load it). The rest comes from the modules directory
# once the root is there, when the kernel asks (mount -t xfs, the ext4 quota format).
INITRAMFS_MODULES = ["virtio_pci", "9pnet_virtio", "9p", "overlay", "virtio_blk"]
DEFAULT_SIZE = {"xfs": 320 << 20, "raw": 64 << 20}  # mkfs.xfs refuses less than 300 MB
DEFAULT_OTHER_SIZE = 128 << 20
QBOOT = "/usr/share/qemu/qboot.rom"  # qemu-system-data


class VMError(Exception):
    pass


def log(msg):
    print("vm: " + msg, file=sys.stderr, flush=True)


# ---- the cache: kernel and initramfs ----

def cache_dir():
    d = os.environ.get("HP_VM_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "hostpath-provisioner", "vm")
    os.makedirs(d, exist_ok=True)
    return d


def kernel_package(cache):
    pkg = os.environ.get("HP_VM_KERNEL_PKG")
    if pkg:
        return pkg
    # apt-cache takes seconds: its answer is kept for a day.
    memo = os.path.join(cache, "kernel-package")
    try:
        if time.time() - os.path.getmtime(memo) < 86400:
            with open(memo) as f:
                pkg = f.read().strip()
            if pkg:
                return pkg
    except OSError:
        pass
    m = None
    for attempt in range(2):
        try:
            out = subprocess.run(["apt-cache", "depends", "linux-image-amd64"], check=True,
                                 capture_output=True, text=True, timeout=120).stdout
        except (OSError, subprocess.SubprocessError) as e:
            out = str(e)
        m = re.search(r"Depends:\s*(linux-image-[0-9][^\s]*)", out)
        if m or attempt:
            break
        apt_update()  # a fresh machine's package lists may be empty or old
    if not m:
        raise VMError("linux-image-amd64 depends on no linux-image-<version> package "
                      "(apt-cache says: %r); set HP_VM_KERNEL_PKG" % out.strip()[:200])
    with open(memo + ".tmp", "w") as f:
        f.write(m.group(1) + "\n")
    os.rename(memo + ".tmp", memo)
    return m.group(1)


def apt_update():
    log("apt-get update (the package lists do not know the kernel package)")
    subprocess.run(["apt-get", "-q", "-o", "DPkg::Lock::Timeout=900", "update"],
                   stdout=subprocess.DEVNULL, timeout=900)


def fetch_kernel(cache, pkg):
    """The unpacked package: (its root directory, kernel version). Downloaded once."""
    root = os.path.join(cache, pkg)
    done = os.path.join(root, ".done")
    if not os.path.exists(done):
        shutil.rmtree(root, ignore_errors=True)
        dl = tempfile.mkdtemp(prefix="download.", dir=cache)
        try:
            log("downloading %s (apt-get download)" % pkg)
            get = ["apt-get", "download", "-q", "-o", "APT::Sandbox::User=root", pkg]
            if subprocess.run(get, cwd=dl, stdout=subprocess.DEVNULL, timeout=900).returncode:
                apt_update()
                subprocess.run(get, cwd=dl, check=True, stdout=subprocess.DEVNULL, timeout=900)
            debs = [f for f in os.listdir(dl) if f.endswith(".deb")]
            if len(debs) != 1:
                raise VMError("apt-get download %s left %r" % (pkg, debs))
            os.makedirs(root)
            subprocess.run(["dpkg", "-x", os.path.join(dl, debs[0]), root], check=True,
                           timeout=900)
        except (OSError, subprocess.SubprocessError) as e:
            shutil.rmtree(root, ignore_errors=True)
            raise VMError("fetching %s failed: %s" % (pkg, e))
        finally:
            shutil.rmtree(dl, ignore_errors=True)
        kver = kernel_version(root)
        # modules.dep is made by the package's postinst, which never runs here.
        subprocess.run(["depmod", "-b", root, kver], check=True, timeout=600)
        open(done, "w").close()
    return root, kernel_version(root)


def kernel_version(root):
    mods = os.path.join(root, "lib", "modules")
    vers = sorted(os.listdir(mods)) if os.path.isdir(mods) else []
    if len(vers) != 1:
        raise VMError("%s holds %r, not one kernel version" % (mods, vers))
    return vers[0]


def module_order(moddir, names):
    """The module files (relative to moddir) to load for names, dependencies first, read from
    modules.dep; built-in modules need nothing."""
    deps = {}
    with open(os.path.join(moddir, "modules.dep")) as f:
        for line in f:
            path, _, rest = line.partition(":")
            deps[path.strip()] = rest.split()
    by_name = {}
    for path in deps:
        base = os.path.basename(path)
        by_name[re.sub(r"\.ko(\..*)?$", "", base).replace("-", "_")] = path
    builtin = set()
    bpath = os.path.join(moddir, "modules.builtin")
    if os.path.exists(bpath):
        with open(bpath) as f:
            for line in f:
                base = os.path.basename(line.strip())
                builtin.add(re.sub(r"\.ko(\..*)?$", "", base).replace("-", "_"))
    order = []

    def visit(path):
        for d in reversed(deps.get(path, [])):
            visit(d)
        if path not in order:
            order.append(path)

    for n in names:
        key = n.replace("-", "_")
        if key in builtin:
            continue
        if key not in by_name:
            raise VMError("module %s is neither built in nor in %s" % (n, moddir))
        visit(by_name[key])
    # modules.dep lists a module's dependencies in load-last-first order; visiting them
    # reversed and recursively puts every dependency before its users.
    return order


def cpio_newc(entries, out):
    """Writes a newc cpio archive: entries of (name, mode, data or None, rdev)."""
    ino = 1
    with open(out, "wb") as f:
        def put(name, mode, data, rdev=(0, 0)):
            nonlocal ino
            nb = name.encode() + b"\0"
            data = data or b""
            hdr = "070701" + "".join("%08x" % v for v in (
                ino, mode, 0, 0, 1, 0, len(data), 0, 0, rdev[0], rdev[1], len(nb), 0))
            ino += 1
            f.write(hdr.encode() + nb)
            f.write(b"\0" * ((4 - (110 + len(nb)) % 4) % 4))
            f.write(data)
            f.write(b"\0" * ((4 - len(data) % 4) % 4))
        for e in entries:
            put(*e)
        put("TRAILER!!!", 0, None)


def build_initramfs(cache, kroot, kver):
    moddir = os.path.join(kroot, "lib", "modules", kver)
    order = module_order(moddir, INITRAMFS_MODULES)
    src = os.path.join(HERE, "vminit.c")
    h = hashlib.sha256()
    with open(src, "rb") as f:
        h.update(f.read())
    h.update("\n".join(order).encode())
    out = os.path.join(kroot, "initramfs-%s.cpio" % h.hexdigest()[:16])
    if os.path.exists(out):
        return out
    work = tempfile.mkdtemp(prefix="initramfs.", dir=cache)
    try:
        cc = os.environ.get("CC", "cc")
        init = os.path.join(work, "init")
        r = subprocess.run([cc, "-static", "-O2", "-Wall", "-Wextra", "-Werror", "-o", init,
                            src], capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            raise VMError("building vminit failed:\n" + r.stdout + r.stderr)
        entries = []
        for d in ("dev", "proc", "sys", "modules", "lower", "upper", "newroot"):
            entries.append((d, stat.S_IFDIR | 0o755, None))
        entries.append(("dev/console", stat.S_IFCHR | 0o600, None, (5, 1)))
        with open(init, "rb") as f:
            entries.append(("init", stat.S_IFREG | 0o755, f.read()))
        names = []
        for rel in order:
            if not rel.endswith(".ko"):
                raise VMError("module %s is compressed: this harness loads plain .ko" % rel)
            base = os.path.basename(rel)
            with open(os.path.join(moddir, rel), "rb") as f:
                entries.append(("modules/" + base, stat.S_IFREG | 0o644, f.read()))
            names.append(base)
        entries.append(("modules/order", stat.S_IFREG | 0o644, ("\n".join(names) + "\n").encode()))
        tmp = out + ".tmp"
        cpio_newc(entries, tmp)
        os.rename(tmp, out)
        for old in os.listdir(kroot):  # those of earlier versions of vminit.c
            if old.startswith("initramfs-") and os.path.join(kroot, old) != out:
                os.unlink(os.path.join(kroot, old))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return out


def extract_vmlinux(kroot, kver):
    """The uncompressed kernel (ELF, booted through its PVH entry point): a bzImage's own xz
    decompression takes ~8 s under TCG, this takes none. Cached beside the package."""
    out = os.path.join(kroot, "vmlinux-" + kver)
    if os.path.exists(out):
        return out
    with open(os.path.join(kroot, "boot", "vmlinuz-" + kver), "rb") as f:
        image = f.read()
    at = image.find(b"\xfd7zXZ\x00")
    if at < 0:
        return None  # not xz (another packaging): boot the bzImage as it is
    try:
        elf = lzma.LZMADecompressor(format=lzma.FORMAT_XZ).decompress(image[at:])
    except lzma.LZMAError:
        return None
    if not elf.startswith(b"\x7fELF"):
        return None
    with open(out + ".tmp", "wb") as f:
        f.write(elf)
    os.rename(out + ".tmp", out)
    return out


def prepare():
    """Kernel, modules and initramfs, from the cache or made now: (kernel image, initramfs,
    modules directory)."""
    if not shutil.which("qemu-system-x86_64"):
        raise VMError("qemu-system-x86_64 is not installed (scripts/setup.sh --test installs "
                      "qemu-system-x86)")
    cache = cache_dir()
    with open(os.path.join(cache, ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one preparer at a time; others wait, then reuse
        kroot, kver = fetch_kernel(cache, kernel_package(cache))
        initramfs = build_initramfs(cache, kroot, kver)
        vmlinuz = os.path.join(kroot, "boot", "vmlinuz-" + kver)
        if not os.path.exists(vmlinuz):
            raise VMError("no kernel at " + vmlinuz)
        vmlinuz = extract_vmlinux(kroot, kver) or vmlinuz
    return vmlinuz, initramfs, os.path.join(kroot, "lib", "modules", kver)


# ---- running ----

def parse_size(s):
    m = re.fullmatch(r"(\d+)([KMG]?)", s.strip().upper().rstrip("IB") if s else "")
    if not m:
        raise VMError("size %r: use a number with K, M or G (e.g. 320M)" % s)
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2)]


def parse_disk(spec):
    """FS:MOUNTPOINT[:size=SIZE][:mkfs=MKFS-ARGS][:o=MOUNT-OPTIONS] -> dict. FS raw: attached,
    neither formatted nor mounted (MOUNTPOINT empty)."""
    parts = spec.split(":")
    usage = ("--disk %r: use FS:MOUNTPOINT[:size=SIZE][:mkfs=MKFS-ARGS][:o=MOUNT-OPTIONS], "
             "e.g. 'ext4:/mnt/ext4:size=128M:mkfs=-O quota,project:o=prjquota'" % spec)
    if len(parts) < 2:
        raise VMError(usage)
    fs, mnt = parts[0], parts[1]
    opts = {}
    for p in parts[2:]:
        k, sep, v = p.partition("=")
        if not sep or k not in ("size", "mkfs", "o") or k in opts:
            raise VMError(usage + ": %r is not size=, mkfs= or o= (once each)" % p)
        opts[k] = v
    if not re.fullmatch(r"[a-z0-9]+", fs):
        raise VMError("--disk %r: filesystem %r is not a name like xfs or ext4" % (spec, fs))
    if fs != "raw" and not mnt.startswith("/"):
        raise VMError("--disk %r: the mount point must be absolute" % spec)
    for field in [mnt] + list(opts.values()):
        if re.search(r"[\x00-\x1f]", field):
            raise VMError("--disk %r: no tabs, newlines or control characters" % spec)
    size = opts.get("size")
    return {"fs": fs, "mount": mnt,
            "size": parse_size(size) if size else DEFAULT_SIZE.get(fs, DEFAULT_OTHER_SIZE),
            "mkfs": opts.get("mkfs", ""), "mountopts": opts.get("o", "")}


def command_script(cwd, env, argv):
    lines = ["cd %s || exit 125" % shlex.quote(cwd)]
    for k, v in env:
        lines.append("export %s=%s" % (k, shlex.quote(v)))
    lines.append("exec " + " ".join(shlex.quote(a) for a in argv))
    return "\n".join(lines) + "\n"


def qemu_argv(vmlinuz, initramfs, rundir, disks, mem, cpus, accel):
    guest = os.path.join(HERE, "guest.sh")
    for p in (guest, rundir):
        if re.search(r"\s", p):
            raise VMError("path %r has white space: the kernel command line cannot carry it" % p)
    argv = ["qemu-system-x86_64", "-nodefaults", "-no-user-config", "-display", "none",
            "-machine", "pc", "-accel", accel,
            "-cpu", os.environ.get("HP_VM_CPU") or ("max" if accel == "tcg" else "host"),
            "-smp", str(cpus), "-m", str(mem),
            "-kernel", vmlinuz, "-initrd", initramfs,
            "-append", "console=ttyS0 rdinit=/init panic=-1 loglevel=4 hp.guest=%s %s" % (
                guest, os.environ.get("HP_VM_APPEND", "")),
            "-serial", "file:" + os.path.join(rundir, "console.log"),
            "-nic", "none", "-no-reboot",
            "-fsdev", "local,id=hostroot,path=/,security_model=none,readonly=on,"
                      "multidevs=remap",
            "-device", "virtio-9p-pci,fsdev=hostroot,mount_tag=hostroot",
            "-fsdev", "local,id=hprun,path=%s,security_model=none,multidevs=remap" % rundir,
            "-device", "virtio-9p-pci,fsdev=hprun,mount_tag=hprun"]
    if os.path.exists(QBOOT):
        argv += ["-bios", QBOOT]  # boots in milliseconds where SeaBIOS takes seconds under TCG
    argv += shlex.split(os.environ.get("HP_VM_QEMU_ARGS", ""))
    for i, d in enumerate(disks):
        img = os.path.join(rundir, "disk%d.img" % i)
        argv += ["-drive", "file=%s,format=raw,if=none,id=disk%d,cache=unsafe" % (img, i),
                 "-device", "virtio-blk-pci,drive=disk%d,serial=hpdisk%d" % (i, i)]
    return argv


def die_with_parent():
    """In qemu's child process before exec: SIGKILL when this script dies, however it dies
    (a SIGKILL from a test runner's timeout included), so no VM outlives its harness."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def tail(path, n=60):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return "(no %s)\n" % os.path.basename(path)


def read_times(rundir):
    t = {}
    try:
        with open(os.path.join(rundir, "times")) as f:
            for line in f:
                k, _, v = line.partition(" ")
                t[k] = float(v)
    except (OSError, ValueError):
        pass
    return t


def run(args):
    if not args.command:
        raise VMError("no command: vm.py run [options] -- CMD [ARG]...")
    disks = [parse_disk(s) for s in args.disk]
    env = [("HP_VM", "1")]
    for kv in args.env:
        k, sep, v = kv.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k):
            raise VMError("--env %r: use NAME=VALUE" % kv)
        env.append((k, v))
    cwd = os.path.abspath(args.cwd or os.getcwd())
    t0 = time.monotonic()
    vmlinuz, initramfs, moddir = prepare()
    t_prep = time.monotonic() - t0
    base = os.environ.get("HP_VM_RUN_DIR") or None
    rundir = tempfile.mkdtemp(prefix="hp-vm.", dir=base)
    proc = None
    try:
        with open(os.path.join(rundir, "modules"), "w") as f:
            f.write(moddir + "\n")
        with open(os.path.join(rundir, "cmd"), "w") as f:
            f.write(command_script(cwd, env, args.command))
        with open(os.path.join(rundir, "disks"), "w") as f:
            for i, d in enumerate(disks):
                # \x1f separates: a tab is white space to bash's read, and empty fields vanish
                f.write("\x1f".join(["hpdisk%d" % i, d["fs"], d["mount"], d["mkfs"],
                                     d["mountopts"]]) + "\n")
                with open(os.path.join(rundir, "disk%d.img" % i), "wb") as img:
                    img.truncate(d["size"])  # sparse
        open(os.path.join(rundir, "output"), "w").close()
        argv = qemu_argv(vmlinuz, initramfs, rundir, disks, args.mem, args.cpus, args.accel)
        t1 = time.monotonic()
        with open(os.path.join(rundir, "qemu.log"), "w") as qlog:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=qlog,
                                    stderr=subprocess.STDOUT, preexec_fn=die_with_parent)
        timed_out = False
        with open(os.path.join(rundir, "output"), "rb") as out:
            while True:
                chunk = out.read(65536)
                if chunk:
                    sys.stdout.buffer.write(chunk)
                    sys.stdout.flush()
                    continue
                if proc.poll() is not None:
                    break
                if time.monotonic() - t1 > args.timeout:
                    timed_out = True
                    proc.kill()  # SIGKILL to qemu's own pid
                    proc.wait()
                    break
                time.sleep(0.2)
            rest = out.read()
            if rest:
                sys.stdout.buffer.write(rest)
                sys.stdout.flush()
        wall = time.monotonic() - t1
        times = read_times(rundir)
        summary = "prepare %.1fs, qemu %.1fs wall" % (t_prep, wall)
        if "start" in times:
            summary += ", guest ready to run after %.1fs of guest uptime" % times.get(
                "ready", times["start"])
        if "ready" in times and "end" in times:
            summary += ", command %.1fs" % (times["end"] - times["ready"])
        if timed_out:
            log("timed out after %ds: qemu (pid %d) killed; %s" % (args.timeout, proc.pid,
                                                                  summary))
            sys.stderr.write(tail(os.path.join(rundir, "console.log")))
            return 124
        try:
            with open(os.path.join(rundir, "rc")) as f:
                rc = int(f.read().strip())
        except (OSError, ValueError):
            log("the VM ended without the command's exit code (qemu exit %s); console:"
                % proc.returncode)
            sys.stderr.write(tail(os.path.join(rundir, "console.log")))
            sys.stderr.write(tail(os.path.join(rundir, "qemu.log"), 20))
            sys.stderr.write(tail(os.path.join(rundir, "guest.log"), 30))
            return 125
        if rc == 125 or args.verbose:
            sys.stderr.write(tail(os.path.join(rundir, "guest.log"), 40))
        log("%s; exit %d" % (summary, rc))
        return rc
    finally:
        if proc and proc.poll() is None:
            proc.kill()
            proc.wait()
        if args.keep:
            log("run directory kept: " + rundir)
        else:
            shutil.rmtree(rundir, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    sub.add_parser("prepare", help="fetch the kernel and build the initramfs (cached)")
    r = sub.add_parser("run", help="run a command in the VM")
    r.add_argument("--disk", action="append", default=[],
                   help="FS:MOUNTPOINT[:size=SIZE][:mkfs=MKFS-ARGS][:o=MOUNT-OPTIONS], e.g. "
                        "'ext4:/mnt/ext4:size=128M:mkfs=-O quota,project:o=prjquota'; "
                        "FS raw: attached only")
    r.add_argument("--timeout", type=int, default=600, help="seconds before qemu is killed")
    r.add_argument("--mem", type=int, default=1024, help="MiB")
    r.add_argument("--cpus", type=int, default=2)
    r.add_argument("--accel", default=os.environ.get("HP_VM_ACCEL", "tcg"),
                   help="tcg (default: works everywhere) or kvm")
    r.add_argument("--env", action="append", default=[], help="NAME=VALUE for the command")
    r.add_argument("--cwd", help="directory the command runs in (default: this one)")
    r.add_argument("--keep", action="store_true", help="keep the run directory")
    r.add_argument("-v", "--verbose", action="store_true", help="print the guest's log")
    r.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    try:
        if args.what == "prepare":
            vmlinuz, initramfs, moddir = prepare()
            print("kernel %s\ninitramfs %s\nmodules %s" % (vmlinuz, initramfs, moddir))
            return 0
        if args.command and args.command[0] == "--":
            args.command = args.command[1:]
        return run(args)
    except VMError as e:
        log(str(e))
        return 125


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # runs the cleanup in run()
    sys.exit(main())
