"""README's two commands when something is missing: the provisioner builds without any test
dependency, and a step that fails says what failed, with its whole output, on the terminal.

Each test runs the scripts in a copy of the checkout (its own build directory) with
pkg-config made blind to some packages (PKG_CONFIG_LIBDIR: a directory of links to every .pc
file of the machine but the hidden ones), which is what a machine without those -dev packages
looks like to meson. scripts/setup.sh finds everything installed (dpkg), so nothing is
installed and nothing is downloaded.
"""

import glob
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import skip_module  # noqa: E402

SRC = os.environ.get("HP_SOURCE_ROOT") or os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
PC_DIRS = subprocess.run(["pkg-config", "--variable", "pc_path", "pkg-config"],
                         capture_output=True, text=True).stdout.strip().split(":")


def copy_checkout(dst):
    files = subprocess.run(["git", "-C", SRC, "ls-files", "-z", "--cached", "--others",
                            "--exclude-standard"], capture_output=True, check=True).stdout
    for rel in files.decode().split("\0"):
        if not rel or not os.path.lexists(os.path.join(SRC, rel)):
            continue
        os.makedirs(os.path.join(dst, os.path.dirname(rel)), exist_ok=True)
        shutil.copy2(os.path.join(SRC, rel), os.path.join(dst, rel), follow_symlinks=False)


class ScriptsTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="hp-scripts-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.src = os.path.join(self.tmp, "src")
        copy_checkout(self.src)
        self.home = os.path.join(self.tmp, "home")  # no ~/.kube/config: the demo path
        os.makedirs(self.home)

    def pc_without(self, *hidden):
        """A pkg-config directory with every .pc file of the machine but the hidden ones."""
        d = os.path.join(self.tmp, "pc")
        os.makedirs(d, exist_ok=True)
        for pc_dir in PC_DIRS:
            for f in glob.glob(os.path.join(pc_dir, "*.pc")):
                name = os.path.basename(f)
                if name[:-3] not in hidden and not os.path.exists(os.path.join(d, name)):
                    os.symlink(f, os.path.join(d, name))
        return d

    def run_script(self, script, pc_dir, *args, timeout=600, kubeconfig=None):
        env = {k: v for k, v in os.environ.items()
               if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "HP_BINARY")}
        # HP_HELM: test.sh builds helm for the chart's tests first, which these runs do not
        # reach (and, with an empty HOME, would build from a cold Go cache).
        env.update(HOME=self.home, PKG_CONFIG_LIBDIR=pc_dir, TMPDIR=self.tmp,
                   HP_HELM="/nonexistent/helm")
        if kubeconfig:
            env["KUBECONFIG"] = kubeconfig
        return subprocess.run([os.path.join(self.src, "scripts", script), *args],
                              cwd=self.src, env=env, capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)

    def test_run_builds_without_cmocka_and_says_the_tests_are_off(self):
        """No cmocka (a test-only dependency): the provisioner still builds; meson's warning
        names the package. (The demo itself is tested in test_demo; here a bad flag makes the
        provisioner exit at once after the build.)"""
        kubeconfig = os.path.join(self.tmp, "kubeconfig")  # run.sh's cluster path: it execs
        with open(kubeconfig, "w") as f:                    # the provisioner, which refuses
            f.write("apiVersion: v1\nkind: Config\n")       # the flag at once
        r = self.run_script("run.sh", self.pc_without("cmocka"), "--no-such-flag",
                            kubeconfig=kubeconfig)
        self.assertTrue(os.access(os.path.join(self.src, "build", "hostpath-provisioner"),
                                  os.X_OK), r.stderr[-3000:])
        with open(os.path.join(self.src, "build.setup.log")) as f:
            setup_log = f.read()
        self.assertIn("unit tests and benchmarks are off: cmocka was not found", setup_log)
        self.assertIn("libcmocka-dev", setup_log)
        self.assertIn("unknown flag", r.stderr)

    def test_run_says_why_the_build_failed(self):
        r = self.run_script("run.sh", self.pc_without("libuv", "libuv-static"))
        self.assertEqual(r.returncode, 1, r.stderr[-3000:])
        self.assertIn("run: configuring the build failed", r.stderr)
        self.assertIn("libuv", r.stderr)  # meson's own words, not thrown away
        self.assertNotIn("starting a demo cluster", r.stderr)

    def test_test_says_why_the_build_failed(self):
        r = self.run_script("test.sh", self.pc_without("cmocka"), "--suite", "unit")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("test: configuring build failed", r.stdout)
        self.assertIn("cmocka", r.stdout)
        self.assertRegex(r.stdout.strip().splitlines()[-1], r"^0 passed, 2 failed")


if __name__ == "__main__":
    # .git is a directory in a clone, a file in a worktree.
    if not shutil.which("git") or not os.path.exists(os.path.join(SRC, ".git")):
        skip_module("needs git and a git checkout of the project (scripts/setup.sh --test "
                    "installs git)")
    unittest.main()
