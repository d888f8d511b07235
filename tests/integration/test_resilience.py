"""Robustness against a misbehaving API server: broken watches, compaction (410 -> relist),
a malformed watch line, PV creation failing with 500 and 429 + Retry-After, and the API server
going away and coming back.

Every test gets a fresh API server and a fresh --pv-dir. Assertions are on facts (objects,
directories, the server's request log), never on how fast things happened, except for the
Retry-After gaps that the spec asks for.
"""

import collections
import os
import re
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (NODES_PATH, PV_PATH, PVS_PATH,  # noqa: E402
                     ProvisionerTestCase, metric, node, wait_for, volume_dirs, SMALL)

HARNESS_UA = "hp-test-harness"


class Base(ProvisionerTestCase):
    tmp_prefix = "hp-resil-"
    fast = ("--retry-base-delay", "50ms", "--retry-max-delay", "2s", "--kube-api-qps", "0",
            "--resync-period", "0", "--v", "2")

    def provisioner_requests(self, **kw):
        """The request log without this harness's own requests."""
        return [r for r in self.api.requests(**kw)
                if not r.get("user_agent", "").startswith(HARNESS_UA)]

    def check_volumes(self, claims):
        """Exactly one PV per claim, named pvc-<uid>, claimRef matching, directory present."""
        pvs = {p["metadata"]["name"]: p for p in self.api.list(PVS_PATH)["items"]}
        self.assertEqual(len(pvs), len(claims), sorted(pvs))
        for c in claims:
            uid = c["metadata"]["uid"]
            pv = pvs.get("pvc-" + uid)
            self.assertIsNotNone(pv, "no PV for claim %s" % c["metadata"]["name"])
            self.assertEqual(pv["spec"]["claimRef"]["uid"], uid)
            self.assertEqual(pv["spec"]["claimRef"]["name"], c["metadata"]["name"])
            self.assertTrue(os.path.isdir(pv["spec"]["hostPath"]["path"]))
        self.assertEqual(len(volume_dirs(self.pv_dir)), len(claims), volume_dirs(self.pv_dir))


class WatchChaosTest(Base):
    # No periodic bookmarks: a watch's resourceVersion then only moves with its own events, so
    # after a change to an unwatched kind (a Node) and a compaction every resumed watch is
    # certain to get 410 Expired and must relist.
    api_kw = {"bookmark_interval": 3600}

    def inject_malformed(self, prov):
        """One malformed line into the open claim watch, confirmed by the provisioner's
        counter. A line queued to a stream that was closing at that instant is never written,
        so it is sent again then (bounded)."""
        mal = 'hostpath_watch_malformed_events_total'
        lbl = 'resource="persistentvolumeclaims"'
        for _ in range(5):
            self.wait(lambda: self.api.malformed("/api/v1/persistentvolumeclaims"), 20,
                      "a claim watch open for the malformed line")
            try:
                wait_for(lambda: metric(prov, mal, lbl) >= 1, 5, what="malformed line seen")
                return
            except TimeoutError:
                continue
        self.fail("the provisioner never reported the malformed line:\n" + prov.log[-3000:])

    def test_claims_survive_closed_watches_compaction_and_malformed_line(self):
        self.add_class()
        prov = self.provisioner()
        prov.wait_log(r"caches synced", 20)
        claims = []
        closes = 0
        for batch in range(5):
            for i in range(10):
                claims.append(self.add_claim("c-%d-%d" % (batch, i), size=SMALL))
            if batch == 3:
                self.inject_malformed(prov)
            # Break every watch stream of the provisioner (5 times in all).
            self.wait(lambda: self.api.open_watches("/api/v1/persistentvolumeclaims"), 20,
                      "a claim watch open before closing it")
            self.api.close_watches()
            closes += 1
            if batch == 2:
                # Once everything so far is settled, an unwatched change, then compaction:
                # every resume point is now older than the history kept, so every watch
                # gets 410 Expired and must relist.
                done = {c["metadata"]["name"] for c in claims}
                self.wait(lambda: self.bound_names() >= done, 60, "first 30 claims bound")
                self.api.wait_idle(20)
                time.sleep(0.3)
                self.api.create(NODES_PATH, node("chaos-node"))
                self.api.compact()
                self.api.close_watches()
            time.sleep(0.2)
        self.assertEqual(closes, 5)
        names = {c["metadata"]["name"] for c in claims}
        self.wait(lambda: self.bound_names() >= names, 90, "all 50 claims bound")
        self.check_volumes(claims)

        reqs = self.provisioner_requests()
        # A list is a LIST, or a streaming list (a watch with sendInitialEvents).
        lists = [r for r in reqs if r["method"] == "GET" and
                 r["path"] == "/api/v1/persistentvolumeclaims" and
                 (not r["watch"] or "sendInitialEvents=true" in (r["query"] or ""))]
        self.assertGreaterEqual(len(lists), 2, "expected a relist of claims after the first "
                                "LIST; requests: %s" % [(r["path"], r["query"]) for r in lists])
        watches = collections.Counter(r["path"] for r in reqs if r["watch"])
        for path in ("/api/v1/persistentvolumeclaims", "/api/v1/persistentvolumes",
                     "/apis/storage.k8s.io/v1/storageclasses"):
            self.assertGreaterEqual(watches[path], 2, "watch of %s never resumed" % path)
            self.assertLess(watches[path], 30, "reconnect storm on %s: %s" % (path, watches))
        self.assertTrue(prov.alive())
        # The relists were counted.
        self.assertGreaterEqual(
            metric(prov, "hostpath_watch_relists_total", 'resource="persistentvolumeclaims"'), 1)


class WriteRetryTest(Base):
    def test_pv_create_retries_500_then_honours_retry_after(self):
        self.add_class()
        # The claim exists and the server's binder has annotated it before the provisioner
        # starts: nothing changes the claim during the retries, so no watch event re-queues
        # it early and the gaps are the provisioner's own backoff.
        c = self.add_claim("flaky")
        self.api.wait_idle(20)
        self.api.fail_next("POST", PVS_PATH, status=500, count=3)
        self.api.fail_next("POST", PVS_PATH, status=429, count=2, retry_after=1)
        self.provisioner()
        self.wait_bound("flaky", timeout=60)
        self.check_volumes([c])
        posts = [r for r in self.provisioner_requests(method="POST", path_prefix=PVS_PATH)
                 if r["path"] == PVS_PATH]
        codes = [r["status"] for r in posts]
        self.assertEqual(codes, [500, 500, 500, 429, 429, 201], codes)
        times = [r["time"] for r in posts]
        gaps = [b - a for a, b in zip(times, times[1:])]
        msg = "POST gaps %s" % ["%.3f" % g for g in gaps]
        # Backoff after the 500s grows: at least 50, 100, 200 ms (base 50ms doubling; a
        # loaded machine may add to any gap, so only the floors are checked).
        self.assertGreaterEqual(gaps[0], 0.04, msg)
        self.assertGreaterEqual(gaps[1], 0.08, msg)
        self.assertGreaterEqual(gaps[2], 0.16, msg)
        # After each 429 the server asked for 1 s.
        self.assertGreaterEqual(gaps[3], 0.9, msg)
        self.assertGreaterEqual(gaps[4], 0.9, msg)
        # Exactly one PV exists.
        self.assertEqual(len(self.api.list(PVS_PATH)["items"]), 1)


class ApiServerRestartTest(Base):
    def test_reconnects_after_api_server_restart(self):
        self.add_class()
        prov = self.provisioner()
        prov.wait_log(r"caches synced", 20)
        c1 = self.add_claim("before")
        self.wait_bound("before")
        # A pod wrote into it.
        before_dir = os.path.join(self.pv_dir, "default-before-pvc-" + c1["metadata"]["uid"])
        with open(os.path.join(before_dir, "data"), "w") as f:
            f.write("written by a pod\n")
        n_log = len(prov.log)
        # Down for a few seconds, then a new, empty server on the same port with the same
        # credentials (its resourceVersions start again from 1).
        self.api.stop()
        time.sleep(3)
        self.api.start()
        self.add_class()
        c2 = self.add_claim("after")
        self.wait_bound("after", timeout=90)
        self.assertTrue(prov.alive())
        pv = self.api.get(PV_PATH % ("pvc-" + c2["metadata"]["uid"]))
        self.assertEqual(pv["spec"]["claimRef"]["uid"], c2["metadata"]["uid"])
        self.assertTrue(os.path.isdir(pv["spec"]["hostPath"]["path"]))
        # The new server knows nothing of the old claim or its PV: whichever the provisioner
        # learns first (the claim gone while its PV looks unmade, or the PV gone), a directory
        # that holds data is never removed for it (an empty one may be undone).
        with open(os.path.join(before_dir, "data")) as f:
            self.assertEqual(f.read(), "written by a pod\n")
        # It noticed the outage and retried with growing delays, not in a tight loop.
        log = prov.log[n_log:]
        retries = collections.defaultdict(list)
        for m in re.finditer(r"watch: retrying resource=(\S+) in (\d+)ms failures=(\d+)", log):
            retries[m.group(1)].append((int(m.group(3)), int(m.group(2))))
        self.assertTrue(retries, "no watch retry logged after the outage:\n" + log[-3000:])
        for res, seq in retries.items():
            self.assertLess(len(seq), 15, "%s retried too often: %s" % (res, seq))
            fails = [f for f, _ in seq]
            if len(seq) >= 2:
                self.assertGreater(max(fails), 1, "%s: failures never grew: %s" % (res, seq))
        # The new server saw a bounded number of requests.
        reqs = self.provisioner_requests()
        self.assertLess(len([r for r in reqs if r["method"] == "GET"]), 60,
                        [(r["method"], r["path"], r["status"]) for r in reqs])


if __name__ == "__main__":
    unittest.main(verbosity=2)
