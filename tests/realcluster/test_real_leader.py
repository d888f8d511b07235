#!/usr/bin/env python3
"""Leader election on a real coordination.k8s.io Lease: one leader provisions, a standby
takes over after kill -9 (once the lease expired) or at once after a SIGTERM release; the
Lease is validated and stored by the real API server.
"""

import datetime
import os
import signal
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from realharness import (IDENTITY_ANN, LEASE_PATH, RealClusterTestCase,  # noqa: E402
                         require_cluster, scrape, wait_for)


def setUpModule():
    require_cluster()


# Short, with room for a loaded machine (a leader that misses its renew deadline steps down).
SHORT = ("--leader-elect", "--leader-elect-lease-duration", "5s",
         "--leader-elect-renew-deadline", "4s", "--leader-elect-retry-period", "500ms")
LEASE_S = 5.0


class LeaderTest(RealClusterTestCase):
    def lease_name(self):
        return self.prov_name.replace("/", "-")

    def lease(self):
        return self.api.get(LEASE_PATH % (self.ns, self.lease_name()))

    def holder(self):
        try:
            return (self.lease().get("spec") or {}).get("holderIdentity") or ""
        except Exception:  # noqa: BLE001 - not created yet
            return ""

    def replica(self, name, *args):
        return self.spawn("--identity", name, "--leader-elect-namespace", self.ns, *args,
                          name=name)

    def holder_of(self, p):
        return p.wait_log(r"leader election on lease=\S+ identity=(\S+)", 15).group(1)

    def master(self, p):
        return scrape(p).get("leader_election_master_status", name=self.lease_name())

    def wait_leader(self, reps, timeout=30):
        holders = {self.holder_of(p): p for p in reps}

        def check():
            lead = holders.get(self.holder())
            if lead is None:
                return None
            if self.master(lead) == 1 and all(self.master(p) == 0 for p in reps
                                              if p is not lead):
                return lead
            return None
        lead = self.wait(check, timeout, "exactly one leader")
        return lead, [p for p in reps if p is not lead]

    def provisioned_by(self, names):
        out = {}
        for pv in self.my_pvs():
            if pv["spec"]["claimRef"]["name"] in names:
                out[pv["spec"]["claimRef"]["name"]] = pv["metadata"]["annotations"][IDENTITY_ANN]
        return out

    def test_kill_leader_standby_takes_over_after_expiry(self):
        self.add_class()
        a = self.replica("rep-a", *SHORT)
        b = self.replica("rep-b", *SHORT)
        lead, (standby,) = self.wait_leader([a, b])
        lease = self.lease()
        self.assertEqual(lease["spec"]["leaseDurationSeconds"], int(LEASE_S))
        self.assertRegex(lease["spec"]["holderIdentity"], r"^%s_[0-9a-f]{16}$" % lead.name)
        self.assertTrue(lease["spec"].get("acquireTime"))
        r0 = lease["spec"]["renewTime"]
        self.wait(lambda: self.lease()["spec"]["renewTime"] != r0, 5, "lease renewed")

        for i in range(3):
            self.add_claim("c%d" % i)
        for i in range(3):
            self.wait_bound("c%d" % i)
        self.assertEqual(set(self.provisioned_by({"c0", "c1", "c2"}).values()), {lead.name})
        self.assertNotIn("provisioned volume", standby.log)

        standby_holder = self.holder_of(standby)
        # The lease may be taken LEASE_S after its last renewal: measured from the renewTime
        # read just before the kill (a renewal after it only makes the take-over later), not
        # from the kill (a loaded leader may have renewed well before it).
        renewed = datetime.datetime.strptime(self.lease()["spec"]["renewTime"],
                                             "%Y-%m-%dT%H:%M:%S.%fZ").replace(
                                                 tzinfo=datetime.timezone.utc).timestamp()
        lead.kill9()
        for i in range(3):
            self.add_claim("d%d" % i)
        wait_for(lambda: self.holder() == standby_holder, LEASE_S + 20.0, interval=0.05,
                 what="standby takes the lease")
        took = time.time() - renewed
        self.assertGreaterEqual(took, LEASE_S - 0.05,
                                "took a live lease %.2fs after its last renewal" % took)
        self.assertEqual(self.lease()["spec"].get("leaseTransitions"), 1)
        for i in range(3):
            self.wait_bound("d%d" % i)
        self.assertEqual(set(self.provisioned_by({"d0", "d1", "d2"}).values()),
                         {standby.name})
        self.assertEqual(len(self.my_pvs()), 6)

    def test_lease_with_a_nul_annotation_is_still_acquired(self):
        # Regression: the real server stores "\u0000" in an annotation value; the Lease was then
        # "not valid JSON" to the provisioner, and no replica ever became leader.
        self.api.create("/apis/coordination.k8s.io/v1/namespaces/%s/leases" % self.ns, {
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": self.lease_name(), "annotations": {"note": "a\u0000b"}},
            "spec": {}})
        self.add_class()
        a = self.replica("rep-a", *SHORT)
        self.wait_leader([a])
        self.add_claim("c")
        self.wait_bound("c")
        lease = self.lease()
        self.assertEqual(lease["metadata"]["annotations"], {"note": "a\u0000b"})
        self.assertEqual(lease["spec"].get("leaseTransitions"), 1)
        self.assertNotIn("not valid JSON", a.log)

    def test_sigterm_releases_the_lease(self):
        self.add_class()
        long_lease = ("--leader-elect", "--leader-elect-lease-duration", "30s",
                      "--leader-elect-renew-deadline", "20s", "--leader-elect-retry-period",
                      "500ms")
        a = self.replica("rep-a", *long_lease)
        a_holder = self.holder_of(a)
        self.wait(lambda: self.holder() == a_holder, 15, "rep-a leads")
        b = self.replica("rep-b", *long_lease)
        b_holder = self.holder_of(b)
        self.wait_leader([a, b])
        t0 = time.monotonic()
        self.assertEqual(a.stop(signal.SIGTERM, timeout=10), 0)
        self.assertRegex(a.log, r"released lease")
        self.wait(lambda: self.holder() == b_holder, 10, "rep-b takes the released lease")
        self.assertLess(time.monotonic() - t0, 10.0, "well within the 30 s lease")
        self.add_claim("after")
        self.wait_bound("after")
        self.assertEqual(self.provisioned_by({"after"}), {"after": "rep-b"})
        self.assertEqual(b.stop(signal.SIGTERM, timeout=10), 0)
        self.assertEqual(self.holder(), "")


if __name__ == "__main__":
    unittest.main(verbosity=2)
