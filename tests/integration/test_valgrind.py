"""Memory check: the provisioner under valgrind (memcheck) through provisioning and deleting
5 claims, a forced watch reconnect and a graceful SIGTERM. It must exit 0 with no memory error
and no definite or indirect leak.

Runs only when valgrind exists and $HP_BINARY is not built with a sanitizer (ASan/UBSan
binaries cannot run under valgrind); otherwise the module exits 77 (meson: skipped) with a
loud SKIPPED message. Valgrind makes the process ~20x slower: every wait is generous.
"""

import os
import re
import shutil
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (PV_PATH, PVC_PATH, PVS_PATH, Provisioner,  # noqa: E402
                     ProvisionerTestCase, binary_path, read_text, skip_module, volume_dirs)

VALGRIND = shutil.which("valgrind")
SLOW = 180.0


def sanitized(binary):
    """True when the binary links a sanitizer runtime (dynamically or statically)."""
    try:
        out = subprocess.run(["ldd", binary], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        out = ""
    if re.search(r"lib(asan|ubsan|tsan|lsan|msan)", out):
        return True
    with open(binary, "rb") as f:
        data = f.read()
    return b"__asan_init" in data or b"__ubsan_handle" in data or b"__tsan_init" in data


def skip_reason():
    b = binary_path()
    if not (os.path.isfile(b) and os.access(b, os.X_OK)):
        return "provisioner binary not found: %s" % b
    if not VALGRIND:
        return "valgrind is not installed"
    if sanitized(b):
        return "%s is built with a sanitizer; valgrind cannot run it" % b
    if os.environ.get("HP_SKIP_VALGRIND"):
        return "HP_SKIP_VALGRIND is set"
    return None


class ValgrindProvisioner(Provisioner):
    def __init__(self, *a, vg_log, **kw):
        super().__init__(*a, **kw)
        self.vg_log = vg_log

    def command(self):
        return [VALGRIND, "--leak-check=full", "--errors-for-leak-kinds=definite,indirect",
                "--show-leak-kinds=definite,indirect", "--error-exitcode=99",
                "--track-fds=no", "--num-callers=30", "--log-file=" + self.vg_log] + \
            super().command()


class ValgrindTest(ProvisionerTestCase):
    tmp_prefix = "hp-valgrind-"

    def setUp(self):
        super().setUp()
        self.vg_log = os.path.join(self.tmp, "valgrind.log")

    def vg_text(self):
        return read_text(self.vg_log)

    def failure_context(self):
        return "%s\n--- valgrind ---\n%s" % (super().failure_context(), self.vg_text()[-4000:])

    def slow_wait(self, pred, what):
        return self.wait(pred, SLOW, what, interval=0.2)

    def test_no_leaks_or_errors(self):
        self.add_class()
        prov = self.prov = ValgrindProvisioner(
            self.api, self.pv_dir, "--kube-api-qps", "0", "--resync-period", "0",
            "--retry-base-delay", "50ms", "--retry-max-delay", "2s", "--v", "2",
            vg_log=self.vg_log)
        prov.start()
        self.addCleanup(lambda: prov.alive() and prov.kill9())
        self.slow_wait(lambda: re.search(r"caches synced", prov.log), "caches synced")

        names = ["vg-%d" % i for i in range(5)]
        claims = [self.add_claim(n) for n in names]
        self.slow_wait(lambda: len(self.bound_names()) == 5, "5 claims bound")
        self.assertEqual(len(volume_dirs(self.pv_dir)), 5)

        # Break every watch; the provisioner resumes them.
        closed = self.api.close_watches()
        self.assertGreaterEqual(closed, 3)
        self.slow_wait(lambda: len(self.api.open_watches()) >= 3, "watches resumed")

        for n in names:
            self.api.delete(PVC_PATH % ("default", n))
        self.slow_wait(lambda: not volume_dirs(self.pv_dir) and
                       not self.api.list(PVS_PATH)["items"], "5 volumes deleted")
        for c in claims:
            self.assertFalse(self.api.exists(PV_PATH % ("pvc-" + c["metadata"]["uid"])))

        code = prov.stop(timeout=SLOW)
        vg = self.vg_text()
        report = "exit %s\n--- valgrind ---\n%s\n--- provisioner log ---\n%s" % (
            code, vg[-6000:], prov.log[-2000:])
        self.assertEqual(code, 0, report)
        self.assertRegex(prov.log, r"main: stopped")
        self.assertRegex(vg, r"ERROR SUMMARY: 0 errors", report)
        if "All heap blocks were freed" not in vg:
            self.assertRegex(vg, r"definitely lost: 0 bytes in 0 blocks", report)
            self.assertRegex(vg, r"indirectly lost: 0 bytes in 0 blocks", report)
        # Informational: what is still reachable at exit (library singletons).
        m = re.search(r"still reachable: ([\d,]+) bytes in ([\d,]+) blocks", vg)
        print("\nvalgrind: %s" % (m.group(0) if m else "All heap blocks were freed"))


if __name__ == "__main__":
    why = skip_reason()
    if why:
        skip_module(why)
    unittest.main(verbosity=2)
