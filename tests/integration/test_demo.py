"""scripts/run.sh's demo, as a newcomer without kubectl and without a cluster runs it.

The script runs with a PATH in which no directory holds kubectl (directories that do are
replaced by a directory of links to everything else in them), HOME an empty directory (no
~/.kube/config), KUBECONFIG and KUBERNETES_SERVICE_HOST unset, TMPDIR a directory of the test,
and HP_BINARY the provisioner of this build (so the script does not build one of its own). It
must print the demo's summary with the claim Bound, the volume's directory (present on disk),
the metrics URL (answering, with hostpath_build_info) and the kubectl commands of each step.
Then Ctrl-C, as a terminal sends it: SIGINT to the script's process group. The script must exit
130 within a bounded time, every process it started must be gone, and its temporary directory
(which holds the demo CA's key) must have been removed.
"""

import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import require_binary  # noqa: E402

SRC = os.environ.get("HP_SOURCE_ROOT") or os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
RUN = os.path.join(SRC, "scripts", "run.sh")
BOUND = "demo: claim default/demo-claim is Bound"


def path_without_kubectl(tmp):
    """$PATH with every command but kubectl: each directory that holds a kubectl is replaced
    by a new directory of symlinks to its other entries."""
    out = []
    for i, d in enumerate(p for p in os.environ.get("PATH", "").split(os.pathsep) if p):
        if not os.path.lexists(os.path.join(d, "kubectl")):
            out.append(d)
            continue
        links = os.path.join(tmp, "path%d" % i)
        os.makedirs(links)
        for name in os.listdir(d):
            if name != "kubectl":
                os.symlink(os.path.join(d, name), os.path.join(links, name))
        out.append(links)
    return os.pathsep.join(out)


class Output:
    """The merged stdout/stderr of a process, read by a thread; wait_for(regex) is bounded."""

    def __init__(self, stream):
        self.lines = []
        self.cond = threading.Condition()
        self.eof = False
        self.thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self.thread.start()

    def _read(self, stream):
        for raw in iter(stream.readline, b""):
            with self.cond:
                self.lines.append(raw.decode("utf-8", "replace").rstrip("\n"))
                self.cond.notify_all()
        with self.cond:
            self.eof = True
            self.cond.notify_all()

    def text(self):
        with self.cond:
            return "\n".join(self.lines)

    def wait_for(self, regex, timeout, proc):
        """The first match of regex in a line; None on timeout, EOF or proc's exit."""
        deadline = time.monotonic() + timeout
        pat = re.compile(regex)
        with self.cond:
            while True:
                for line in self.lines:
                    m = pat.search(line)
                    if m:
                        return m
                left = deadline - time.monotonic()
                if left <= 0 or self.eof or proc.poll() is not None:
                    return None
                self.cond.wait(min(left, 0.5))


def group_alive(pgid):
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


class DemoTest(unittest.TestCase):
    def setUp(self):
        self.binary = require_binary()
        self.tmp = tempfile.mkdtemp(prefix="hp-demo-test-")
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)
        for d in ("home", "tmp"):
            os.makedirs(os.path.join(self.tmp, d))
        self.tmpdir = os.path.join(self.tmp, "tmp")
        path = path_without_kubectl(self.tmp)
        self.assertIsNone(shutil.which("kubectl", path=path))
        self.assertIsNotNone(shutil.which("bash", path=path))
        self.env = {k: v for k, v in os.environ.items()
                    if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST",
                                 "KUBERNETES_SERVICE_PORT")}
        self.env.update(PATH=path, HOME=os.path.join(self.tmp, "home"), TMPDIR=self.tmpdir,
                        HP_BINARY=self.binary)

    def start(self):
        p = subprocess.Popen([RUN], cwd=self.tmp, env=self.env, stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             start_new_session=True)
        self.addCleanup(self.kill_group, p)
        return p, Output(p.stdout)

    def kill_group(self, p):
        """Last resort at cleanup: SIGKILL to the script's own process group, by its pgid."""
        if group_alive(p.pid):
            os.killpg(p.pid, signal.SIGKILL)
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            pass
        p.stdout.close()

    def test_demo_without_kubectl_binds_and_cleans_up_on_ctrl_c(self):
        p, out = self.start()
        pgid = p.pid  # start_new_session: the script leads its own process group

        def fail(what):
            try:
                rc = p.wait(5)
            except subprocess.TimeoutExpired:
                rc = "still running"
            self.fail("%s (run.sh: %s)\n--- run.sh output ---\n%s" % (what, rc, out.text()))

        m = out.wait_for(r"^run: no kubeconfig found; .* in (/\S+)$", 60, p)
        if not m:
            fail("run.sh did not start the demo")
        state = m.group(1)
        self.assertEqual(os.path.dirname(state), self.tmpdir, "TMPDIR not honoured")
        if not out.wait_for("^" + re.escape(BOUND) + "$", 120, p):
            fail("no summary with the claim Bound within 120 s")
        if not out.wait_for(r"^The provisioner keeps running: .*Ctrl-C", 10, p):
            fail("the summary did not end")
        text = out.text()
        self.assertNotIn("command not found", text)
        self.assertIn("$ kubectl apply -f - <<'EOF'", text)
        self.assertIn("$ kubectl get pvc demo-claim --watch", text)
        self.assertRegex(text, r"(?m)^demo-claim\s+Bound\s+pvc-[0-9a-f-]{36}$")
        self.assertRegex(text, r"(?m)^  claim +default/demo-claim +Bound +volume pvc-")
        self.assertRegex(text, r"(?m)^  PV +pvc-[0-9a-f-]{36} +Bound +reclaim Delete$")
        m = out.wait_for(r"^  directory  (/\S+)$", 5, p)
        if not m:
            fail("the summary does not name the directory")
        directory = m.group(1)
        self.assertTrue(directory.startswith(state + os.sep), directory)
        self.assertTrue(os.path.isdir(directory), directory)
        m = out.wait_for(r"^  metrics    (http://127\.0\.0\.1:\d+/metrics)$", 5, p)
        if not m:
            fail("the summary does not give the metrics URL")
        metrics_url = m.group(1)
        with urllib.request.urlopen(metrics_url, timeout=5) as r:
            metrics = r.read().decode()
        self.assertRegex(metrics, r'(?m)^hostpath_build_info\{version="[^"]+",commit="[^"]+"\} 1$')
        self.assertRegex(metrics,
                         r'(?m)^controller_persistentvolumeclaim_provision_total\{class="hostpath"'
                         r',source="[^"]*"\} 1$')
        # The temporary directory holds the demo CA's key: private to its user.
        self.assertEqual(stat.S_IMODE(os.stat(state).st_mode), 0o700)
        self.assertTrue(os.path.exists(os.path.join(state, "ca.key")))
        # Still running after the summary, until Ctrl-C.
        time.sleep(1)
        self.assertIsNone(p.poll(), "run.sh ended without Ctrl-C")

        os.killpg(pgid, signal.SIGINT)
        try:
            rc = p.wait(60)
        except subprocess.TimeoutExpired:
            fail("run.sh still running 60 s after SIGINT")
        self.assertEqual(rc, 130, out.text())
        deadline = time.monotonic() + 10
        while group_alive(pgid) and time.monotonic() < deadline:
            time.sleep(0.1)
        self.assertFalse(group_alive(pgid), "processes of the demo outlived run.sh")
        out.thread.join(10)
        self.assertFalse(os.path.lexists(state), "the demo left %s behind" % state)
        self.assertEqual(os.listdir(self.tmpdir), [])
        self.assertIn("run: demo stopped; removed %s" % state, out.text())
        with self.assertRaises(OSError):
            urllib.request.urlopen(metrics_url, timeout=2)


if __name__ == "__main__":
    unittest.main(verbosity=2)
