"""Crash and restart: kill -9 in the middle of provisioning, then a restart converges to exactly
one PV and one directory per claim; SIGTERM stops cleanly (exit 0), idle or while filesystem
work runs, and a restart finishes what was left.

Every test gets a fresh API server and a fresh --pv-dir.
"""

import os
import signal
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (PV_PATH, PVC_PATH, PVS_PATH, ProvisionerTestCase, wait_for,  # noqa: E402
                     volume_dirs, SMALL)


class Base(ProvisionerTestCase):
    tmp_prefix = "hp-restart-"
    fast = ("--retry-base-delay", "50ms", "--retry-max-delay", "2s", "--resync-period", "0",
            "--v", "2")

    def provisioner(self, *args, qps="0"):
        return super().provisioner("--kube-api-qps", qps, *args)

    def pvs(self):
        return self.api.list(PVS_PATH)["items"]


class KillTest(Base):
    def test_kill_9_mid_provisioning_then_restart_converges(self):
        self.add_class()
        # Slow PV creation down so that, when the provisioner dies, some PVs exist, some
        # POSTs are still being answered (the server completes them after the client died:
        # a lost reply) and some were never sent (paced by a low write rate).
        self.api.fail_next("POST", PVS_PATH, delay_ms=700, count=40)
        p1 = self.provisioner("--kube-api-burst", "1", qps="8")
        p1.wait_log(r"caches synced", 20)
        claims = [self.add_claim("c%02d" % i, size=SMALL) for i in range(20)]
        self.wait(lambda: len(self.pvs()) >= 2, 60, "the first PVs")
        self.assertEqual(p1.kill9(), -signal.SIGKILL)
        n_at_kill = len(self.pvs())
        time.sleep(1.0)  # the server finishes the POSTs it was holding
        n_after = len(self.pvs())
        dirs_at_restart = len(volume_dirs(self.pv_dir))
        self.assertLess(n_at_kill, 20, "all PVs were made before the kill: nothing tested")
        self.api.clear_faults()

        self.provisioner()
        names = {c["metadata"]["name"] for c in claims}
        self.wait(lambda: self.bound_names() >= names, 90, "all 20 claims bound after restart")
        time.sleep(0.5)  # anything a duplicate would do has had time to show up

        pvs = self.pvs()
        self.assertEqual(len(pvs), 20, sorted(p["metadata"]["name"] for p in pvs))
        by_uid = {}
        for pv in pvs:
            ref = pv["spec"]["claimRef"]
            self.assertEqual(pv["metadata"]["name"], "pvc-" + ref["uid"])
            by_uid[ref["uid"]] = pv
        paths = set()
        for c in claims:
            m = c["metadata"]
            pv = by_uid.get(m["uid"])
            self.assertIsNotNone(pv, "no PV with claimRef uid of %s" % m["name"])
            self.assertEqual(pv["spec"]["claimRef"]["name"], m["name"])
            bound = self.api.get(PVC_PATH % ("default", m["name"]))
            self.assertEqual(bound["spec"]["volumeName"], pv["metadata"]["name"])
            path = pv["spec"]["hostPath"]["path"]
            self.assertEqual(path, os.path.join(
                self.pv_dir, "default-%s-%s" % (m["name"], pv["metadata"]["name"])))
            self.assertTrue(os.path.isdir(path))
            paths.add(path)
        self.assertEqual(len(paths), 20)
        self.assertEqual(volume_dirs(self.pv_dir),
                         sorted(os.path.basename(p) for p in paths))
        # Informational: the state the restart had to repair.
        print("\nat kill: %d PVs; 1 s later: %d PVs; %d directories at restart"
              % (n_at_kill, n_after, dirs_at_restart))


class SigtermTest(Base):
    def test_sigterm_idle_exits_0_quickly(self):
        self.add_class()
        p = self.provisioner()
        p.wait_log(r"caches synced", 20)
        self.add_claim("one")
        self.wait(lambda: "one" in self.bound_names(), 30, "claim bound")
        t0 = time.monotonic()
        code = p.stop(signal.SIGTERM, timeout=5)
        elapsed = time.monotonic() - t0
        self.assertEqual(code, 0, p.log[-3000:])
        self.assertLess(elapsed, 5.0)
        self.assertRegex(p.log, r"SIGTERM received")
        self.assertRegex(p.log.rstrip().splitlines()[-1], r"main: stopped")

    def test_sigint_idle_exits_0(self):
        p = self.provisioner()
        p.wait_log(r"caches synced", 20)
        code = p.stop(signal.SIGINT, timeout=5)
        self.assertEqual(code, 0, p.log[-3000:])
        self.assertRegex(p.log, r"SIGINT received")
        self.assertRegex(p.log, r"main: stopped")

    def test_sigterm_while_removing_directories(self):
        self.add_class()
        # One filesystem job at a time, ten volumes full of files to remove: when the first
        # is gone, the second is being removed and the rest are waiting.
        p = self.provisioner("--workers", "1")
        p.wait_log(r"caches synced", 20)
        n, files = 10, 1500
        claims = [self.add_claim("big-%d" % i) for i in range(n)]
        names = {c["metadata"]["name"] for c in claims}
        self.wait(lambda: self.bound_names() >= names, 60, "claims bound")
        paths = {}
        for c in claims:
            pv_name = "pvc-" + c["metadata"]["uid"]
            path = self.api.get(PV_PATH % pv_name)["spec"]["hostPath"]["path"]
            paths[pv_name] = path
            for d in range(files // 10):
                sub = os.path.join(path, "d%03d" % d)
                os.mkdir(sub)
                for f in range(9):
                    with open(os.path.join(sub, "f%d" % f), "w") as fh:
                        fh.write("x")
        for c in claims:
            self.api.delete(PVC_PATH % ("default", c["metadata"]["name"]))
        # Catch a removal in progress: a directory that lost some of its subdirectories
        # (st_nlink is 2 + subdirectories) but still exists.
        full = 2 + files // 10

        def in_progress():
            for x in paths.values():
                try:
                    if os.lstat(x).st_nlink < full:
                        return x
                except FileNotFoundError:
                    pass
            if not any(os.path.lexists(x) for x in paths.values()):
                return "all-gone"
            return None
        busy = wait_for(in_progress, 60, interval=0.001, what="a removal in progress")
        t0 = time.monotonic()
        code = p.stop(signal.SIGTERM, timeout=35)
        elapsed = time.monotonic() - t0
        self.assertEqual(code, 0, p.log[-3000:])
        self.assertRegex(p.log, r"main: stopped")
        if busy == "all-gone":
            self.skipTest("removals too fast to catch one in progress")
        # The job that was running finished...
        self.assertFalse(os.path.lexists(busy), "%s was left half-removed" % busy)
        # ...and the waiting ones never started: every other directory is gone or complete.
        left = [x for x in paths.values() if os.path.lexists(x)]
        self.assertTrue(left, "all removed: SIGTERM did not stop the waiting jobs")
        for x in left:
            count = sum(len(fs) + len(ds) for _, ds, fs in os.walk(x))
            self.assertEqual(count, files, "%s was left half-removed" % x)
        # A restart deletes what was left (and PVs whose directory is already gone).
        self.provisioner()
        self.wait(lambda: not self.pvs() and not any(os.path.lexists(x)
                                                     for x in paths.values()),
                  90, "every volume and PV removed after the restart")
        print("\nSIGTERM with %d of %d volumes left; exit after %.2fs" % (len(left), n, elapsed))

    def test_second_signal_exits_at_once(self):
        """A second signal while the first one's stop waits for a removal: exit 1 at once,
        saying so (a person pressing Ctrl-C twice, or a supervisor that will not wait)."""
        self.add_class()
        p = self.provisioner("--workers", "1")
        p.wait_log(r"caches synced", 20)
        c = self.add_claim("huge")
        self.wait(lambda: "huge" in self.bound_names(), 30, "claim bound")
        path = self.api.get(PV_PATH % ("pvc-" + c["metadata"]["uid"]))["spec"]["hostPath"]["path"]
        subdirs, per = 400, 60
        for d in range(subdirs):
            sub = os.path.join(path, "d%03d" % d)
            os.mkdir(sub)
            for f in range(per):
                open(os.path.join(sub, "f%d" % f), "w").close()
        self.api.delete(PVC_PATH % ("default", "huge"))
        full = 2 + subdirs

        def removing():
            try:
                return os.lstat(path).st_nlink < full
            except FileNotFoundError:
                return "gone"
        state = wait_for(removing, 60, interval=0.001, what="the removal under way")
        if state == "gone":
            self.skipTest("the removal was too fast to catch")
        p.proc.send_signal(signal.SIGTERM)
        p.wait_log(r"SIGTERM received; stopping", 5)
        if not os.path.lexists(path):
            self.skipTest("the removal ended before the second signal")
        t0 = time.monotonic()
        code = p.stop(signal.SIGINT, timeout=5)
        self.assertEqual(code, 1, p.log[-2000:])
        self.assertLess(time.monotonic() - t0, 5.0)
        self.assertRegex(p.log, r"main: SIGINT received while stopping; exiting now")
        # What was left is removed by the next instance.
        self.provisioner()
        self.wait(lambda: not self.pvs() and not os.path.lexists(path), 90,
                  "the volume removed after the restart")


if __name__ == "__main__":
    unittest.main(verbosity=2)
