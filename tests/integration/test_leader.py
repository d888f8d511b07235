#!/usr/bin/env python3
"""Leader election among replicas (issue 4).

Two (or more) replicas run with --leader-elect against one local API server. Exactly one
holds the coordination.k8s.io Lease and only that one provisions claims that have no selected
node; a standby takes over when the leader dies (after the lease expires, never before) or as
soon as a leader stopped with SIGTERM releases the lease; a leader that cannot renew steps down
within the renew deadline. No claim is ever provisioned twice.
"""

import os
import signal
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (LEASE_PATH, LEASES_PATH, PVC_PATH, PVS_PATH,  # noqa: E402
                     ProvisionerTestCase, scrape, wait_for, volume_dirs, SMALL)

NS = "default"
LEASE = "hostpath-provisioner.io"
LEASE_S = 3.0
RENEW_S = 2.0
RETRY_S = 0.5
SHORT = ["--leader-elect", "--leader-elect-lease-duration", "3s",
         "--leader-elect-renew-deadline", "2s", "--leader-elect-retry-period", "500ms"]
IDENTITY_ANN = "hostPathProvisionerIdentity"
MASTER = "leader_election_master_status"


def master_status(prov):
    """leader_election_master_status{name=<lease>} of one replica (None when absent)."""
    return scrape(prov).samples.get((MASTER, frozenset({("name", LEASE)})))


# -- helpers -------------------------------------------------------------------------------

def lease(api, ns=NS):
    return api.get(LEASE_PATH % (ns, LEASE))


def holder(api, ns=NS):
    return (lease(api, ns).get("spec") or {}).get("holderIdentity") or ""


def holder_of(prov):
    """The holder identity a replica announced in its log (identity + "_" + hex)."""
    m = prov.wait_log(r"leader election on lease=\S+ identity=(\S+)", 10)
    return m.group(1)


def pvs_by_claim_uid(api):
    out = {}
    for pv in api.list(PVS_PATH)["items"]:
        uid = ((pv.get("spec") or {}).get("claimRef") or {}).get("uid")
        out.setdefault(uid, []).append(pv)
    return out


class LeaderTest(ProvisionerTestCase):
    tmp_prefix = "hp-leader-"

    def setUp(self):
        super().setUp()
        self.add_class()

    def replica(self, name, *args):
        return self.spawn("--identity", name, *args, name=name)

    def assert_provisioned_by(self, claims, identity, pv_dir):
        by_uid = pvs_by_claim_uid(self.api)
        for c in claims:
            pvs = by_uid.get(c["metadata"]["uid"], [])
            self.assertEqual(len(pvs), 1, "claim %s has %d PVs" % (c["metadata"]["name"],
                                                                   len(pvs)))
            pv = pvs[0]
            self.assertEqual(pv["metadata"]["annotations"].get(IDENTITY_ANN), identity,
                             "PV %s identity" % pv["metadata"]["name"])
            path = pv["spec"]["hostPath"]["path"]
            self.assertEqual(os.path.dirname(path), pv_dir, "PV %s path" % pv["metadata"]["name"])
            self.assertTrue(os.path.isdir(path), path)

    def wait_leader(self, reps, timeout=15):
        """Waits until exactly one replica reports master_status 1 and the others 0, and the
        Lease names it; returns (leader, standbys)."""
        holders = {holder_of(p): p for p in reps}

        def check():
            h = holder(self.api)
            if h not in holders:
                return None
            st = {p.name: master_status(p) for p in reps}
            lead = holders[h]
            if st[lead.name] == 1 and all(st[p.name] == 0 for p in reps if p is not lead):
                return lead
            return None
        lead = wait_for(check, timeout, interval=0.1, what="exactly one leader")
        return lead, [p for p in reps if p is not lead]

    # -- tests ---------------------------------------------------------------------------

    def test_one_leader_provisions_and_standby_takes_over_after_kill(self):
        a = self.replica("rep-a", *SHORT)
        b = self.replica("rep-b", *SHORT)
        lead, (standby,) = self.wait_leader([a, b])
        lead_holder, standby_holder = holder_of(lead), holder_of(standby)
        self.assertRegex(lead_holder, r"^%s_[0-9a-f]{16}$" % lead.name)
        self.assertRegex(standby_holder, r"^%s_[0-9a-f]{16}$" % standby.name)
        self.assertNotEqual(lead_holder, standby_holder)

        # The Lease is client-go's: duration in seconds, renewed every retry period by the
        # holder, no transitions yet. Over a few renewals the roles stay put.
        l0 = lease(self.api)
        self.assertEqual(l0["spec"]["leaseDurationSeconds"], int(LEASE_S))
        self.assertEqual(l0["spec"].get("leaseTransitions", 0), 0)
        self.assertTrue(l0["spec"].get("acquireTime"))
        deadline = time.monotonic() + 4 * RETRY_S + 0.5
        while time.monotonic() < deadline:
            self.assertEqual(master_status(lead), 1)
            self.assertEqual(master_status(standby), 0)
            time.sleep(0.2)
        l1 = lease(self.api)
        self.assertEqual(l1["spec"]["holderIdentity"], lead_holder)
        self.assertNotEqual(l1["spec"]["renewTime"], l0["spec"]["renewTime"], "lease renewed")
        self.assertEqual(l1["spec"]["acquireTime"], l0["spec"]["acquireTime"])

        # Only the leader provisions.
        first = self.make_claims("c", 4)
        self.wait_bound(first)
        self.assert_provisioned_by(first, lead.name, lead.pv_dir)
        self.assertEqual(volume_dirs(standby.pv_dir), [])
        self.assertNotIn("provisioned volume", standby.log)

        # kill -9 the leader: its lease is not released; the standby must wait for it to
        # expire (by its own clock) and then take over. Claims created meanwhile are served.
        t0 = time.monotonic()
        lead.kill9()
        second = self.make_claims("d", 4)
        wait_for(lambda: holder(self.api) == standby_holder, LEASE_S + 4.0, interval=0.05,
                 what="standby %s takes the lease" % standby.name)
        took = time.monotonic() - t0
        # Last renewal was at most one retry period (+20% jitter is for acquiring only) before
        # the kill, so the standby cannot have taken a live lease earlier than this.
        self.assertGreaterEqual(took, LEASE_S - RETRY_S - 0.6,
                                "standby took the lease after %.2fs: before it expired" % took)
        self.assertLessEqual(took, LEASE_S + 4.0)
        self.assertEqual(lease(self.api)["spec"].get("leaseTransitions"), 1)
        wait_for(lambda: master_status(standby) == 1, 5, what="standby master_status 1")
        self.wait_bound(second)
        self.assert_provisioned_by(second, standby.name, standby.pv_dir)
        standby.wait_log(r"became leader", 5)

        # No claim provisioned twice: one PV per claim and one successful create per claim.
        by_uid = pvs_by_claim_uid(self.api)
        for c in first + second:
            self.assertEqual(len(by_uid.get(c["metadata"]["uid"], [])), 1)
        self.assertEqual(len(self.api.list(PVS_PATH)["items"]), 8)
        creates = [r for r in self.api.requests(method="POST", path_prefix=PVS_PATH)
                   if r["path"] == PVS_PATH]
        self.assertEqual(sorted(r["status"] for r in creates if r["status"] < 300), [201] * 8,
                         creates)
        self.assertEqual(volume_dirs(lead.pv_dir),
                         sorted("%s-%s-pvc-%s" % (NS, c["metadata"]["name"], c["metadata"]["uid"])
                                for c in first))
        self.assertEqual(len(volume_dirs(standby.pv_dir)), 4)
        self.assertTrue(standby.alive())
        self.assertEqual(standby.stop(), 0)

    def test_lease_with_a_nul_annotation_is_still_acquired(self):
        # Found by the realcluster tier: kube-apiserver stores "\u0000" in an annotation
        # value; such a Lease was "not valid JSON" to the provisioner, which then never led.
        self.api.create(LEASES_PATH % NS, {
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": LEASE, "annotations": {"note": "a\u0000b"}}, "spec": {}})
        a = self.replica("rep-a", *SHORT)
        self.wait_leader([a])
        c = self.make_claims("c", 1)
        self.wait_bound(c)
        self.assertEqual(lease(self.api)["metadata"]["annotations"], {"note": "a\u0000b"})
        self.assertNotIn("not valid JSON", a.log)

    def test_sigterm_releases_lease_and_standby_takes_over_at_once(self):
        # A long lease: a takeover well within it can only come from the release.
        long_lease = ["--leader-elect", "--leader-elect-lease-duration", "20s",
                      "--leader-elect-renew-deadline", "15s", "--leader-elect-retry-period",
                      "500ms"]
        a = self.replica("rep-a", *long_lease)
        a_holder = holder_of(a)
        wait_for(lambda: holder(self.api) == a_holder, 10, what="rep-a leads")
        b = self.replica("rep-b", *long_lease)
        b_holder = holder_of(b)
        lead, _ = self.wait_leader([a, b])
        self.assertIs(lead, a)
        c1 = self.make_claims("c", 1)
        self.wait_bound(c1)
        self.assert_provisioned_by(c1, "rep-a", a.pv_dir)

        rv = lease(self.api)["metadata"]["resourceVersion"]
        with self.api.watch(LEASES_PATH % NS, timeout=30, resourceVersion=rv) as w:
            t0 = time.monotonic()
            code = a.stop(signal.SIGTERM, timeout=10)
            stopped = time.monotonic() - t0
            self.assertEqual(code, 0)
            self.assertLess(stopped, 5.0, "SIGTERM to exit took %.2fs" % stopped)
            self.assertRegex(a.log, r"released lease")
            holders = []
            deadline = time.monotonic() + 5.0
            while time.monotonic() < deadline and b_holder not in holders:
                ev = w.next(max(0.05, deadline - time.monotonic()))
                if ev and ev.get("type") == "MODIFIED":
                    holders.append((ev["object"].get("spec") or {}).get("holderIdentity") or "")
            took = time.monotonic() - t0
        # The lease went from rep-a to nobody (released) and then to rep-b, in that order.
        self.assertIn("", holders, holders)
        self.assertIn(b_holder, holders, "rep-b did not take over within 5 s: %r" % holders)
        self.assertLess(holders.index(""), holders.index(b_holder))
        self.assertNotIn(a_holder, holders[holders.index(""):])
        self.assertLess(took, 5.0)
        wait_for(lambda: master_status(b) == 1, 5, what="rep-b master_status 1")
        spec = lease(self.api)["spec"]
        self.assertEqual(spec["leaseDurationSeconds"], 20)
        self.assertEqual(spec.get("leaseTransitions"), 1)

        c2 = self.make_claims("d", 2)
        self.wait_bound(c2)
        self.assert_provisioned_by(c2, "rep-b", b.pv_dir)
        # The last replica releases too: nobody holds the lease afterwards.
        self.assertEqual(b.stop(signal.SIGTERM, timeout=10), 0)
        self.assertEqual(holder(self.api), "")

    def test_leader_steps_down_when_it_cannot_renew(self):
        a = self.replica("rep-a", *SHORT)
        a_holder = holder_of(a)
        wait_for(lambda: holder(self.api) == a_holder, 10, what="rep-a leads")
        b = self.replica("rep-b", *SHORT)
        lead, _ = self.wait_leader([a, b])
        self.assertIs(lead, a)

        # Every write to the Lease fails: the leader cannot renew and must step down within
        # the renew deadline (2 s) plus one retry period; the standby cannot acquire either.
        self.api.fail_next("PUT", "/apis/coordination.k8s.io/", status=503, count=100000)
        self.api.fail_next("POST", "/apis/coordination.k8s.io/", status=503, count=100000)
        t0 = time.monotonic()
        wait_for(lambda: master_status(a) == 0, RENEW_S + 3.0, interval=0.05,
                 what="rep-a steps down")
        took = time.monotonic() - t0
        self.assertGreaterEqual(took, RENEW_S - RETRY_S - 0.6, "stepped down too early")
        a.wait_log(r"stepping down", 5)
        self.assertEqual(master_status(b), 0)

        # Without a leader nobody provisions a claim without a selected node.
        pending = self.make_claims("p", 2)
        time.sleep(1.5)
        for c in pending:
            self.assertEqual(self.api.get(PVC_PATH % (NS, c["metadata"]["name"]))
                             ["status"]["phase"], "Pending")
        self.assertEqual(self.api.list(PVS_PATH)["items"], [])

        # The API server recovers: one replica leads again and provisions them, once.
        self.api.clear_faults()
        lead, (standby,) = self.wait_leader([a, b], timeout=LEASE_S + 6.0)
        self.wait_bound(pending)
        self.assert_provisioned_by(pending, lead.name, lead.pv_dir)
        self.assertEqual(volume_dirs(standby.pv_dir), [])
        self.assertTrue(a.alive() and b.alive())

    def test_three_replicas_one_leader_and_no_double_provisioning(self):
        reps = [self.replica("rep-%s" % n, *SHORT) for n in "xyz"]
        lead, standbys = self.wait_leader(reps)
        claims = self.make_claims("m", 20, size=SMALL)
        self.wait_bound(claims, timeout=30)
        self.assert_provisioned_by(claims, lead.name, lead.pv_dir)
        for s in standbys:
            self.assertEqual(volume_dirs(s.pv_dir), [])
        # Fail over twice in a row (kill -9, then the next leader too): each new leader is
        # one of the survivors, and claims made in between are provisioned exactly once.
        made = list(claims)
        alive = list(reps)
        for round_ in range(2):
            lead.kill9()
            alive.remove(lead)
            more = self.make_claims("r%d-" % round_, 3, size=SMALL)
            made += more
            lead, standbys = self.wait_leader(alive, timeout=LEASE_S + 6.0)
            self.wait_bound(more)
            self.assert_provisioned_by(more, lead.name, lead.pv_dir)
        by_uid = pvs_by_claim_uid(self.api)
        self.assertEqual(sorted(len(by_uid.get(c["metadata"]["uid"], [])) for c in made),
                         [1] * len(made))
        creates = [r for r in self.api.requests(method="POST", path_prefix=PVS_PATH)
                   if r["path"] == PVS_PATH and r["status"] < 300]
        self.assertEqual(len(creates), len(made))
        self.assertEqual(lease(self.api)["spec"].get("leaseTransitions"), 2)


if __name__ == "__main__":
    unittest.main(verbosity=2)
