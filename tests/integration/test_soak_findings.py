#!/usr/bin/env python3
"""Regression tests for the bugs the chaos soak (tests/soak/soak.py, issue 13) found, one
focused reproduction each, small enough to run in seconds.

Each test's docstring says what goes wrong. Run one with the binary to test:
    HP_BINARY=build/hostpath-provisioner python3 tests/integration/test_soak_findings.py -v

1. Replicas of one Deployment on one node (--leader-elect, the same --identity, the same
   --pv-dir) all release a volume whose claim is deleted, at the same time: the standbys do
   not wait for the lease. Their record writes collide ("write ownership record ...: No such
   file or directory"), and with onDelete archive one replica renames the directory to
   archived-<name> while another, finding the directory gone, records it as archived where it
   was: the archived data ends up in a directory that no record owns (an "unrecorded"
   orphan, never cleaned up) and the record points at nothing. The same replicas with
   --node-name (manifests/deployment.yaml sets NODE_NAME) both provision every claim whose
   selected node is theirs.
2. A provisioning that fails to write its ownership record (a full disk: mkdir needs no data
   block on tmpfs, the record does) leaves its staging directory
   (.hostpath-provisioner/staging/<pv>) behind after the claim went elsewhere or away; only a
   restart of the provisioner removes it.
3. A claim deleted while its provisioning backs off after a failed PV create leaves its
   directory and 'created' record behind, without a PV, until the next orphan sweep (the
   --resync-period; never with 0).
4. A provisioner killed between writing the intent record and renaming the directory into place,
   and the claim deleted meanwhile: with onDelete retain or archive, the orphan sweep records a
   retained/archived directory that never existed.
5. A deleted claim is provisioned again (a second PV object, a second directory) when the
   provisioner's claim cache lags behind its volume cache: its released PV is deleted, then the
   stale, unbound copy of the claim is reconciled and its PV is not in the cache any more.
6. A provisioner killed between renaming a directory to archived-<name> and recording it: the
   archived data is left in a directory that no record owns, and the record points at nothing.
7. A volume reconciled again from a stale cache right after its deletion: an ERROR line and a
   VolumeFailedDelete Warning event ("no ownership record") about a volume deleted correctly.
"""

import os
import re
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (JOURNAL_DIR, LEASES_PATH, PROVISIONER, PV_PATH,  # noqa: E402
                     PVC_PATH, PVS_PATH, ProvisionerTestCase, journal_records, volume,
                     volume_dirs, wait_for)

NS = "default"
SHORT_LEASE = ["--leader-elect", "--leader-elect-lease-duration", "3s",
               "--leader-elect-renew-deadline", "2s", "--leader-elect-retry-period", "500ms"]
FAST = ["--retry-base-delay", "50ms", "--retry-max-delay", "1s", "--kube-api-qps", "0",
        "--resync-period", "0", "--v", "2"]


def error_lines(text):
    return [ln for ln in text.splitlines() if ln.startswith("E")]


def invalid_records(root):
    """Record files that are not all comments and key=value lines, or lack version=."""
    d = os.path.join(root, JOURNAL_DIR, "records")
    bad = {}
    for n in sorted(os.listdir(d)) if os.path.isdir(d) else []:
        if n.startswith("."):
            continue
        with open(os.path.join(d, n), errors="replace") as f:
            lines = f.read().splitlines()
        junk = [ln for ln in lines if ln and not ln.startswith("#") and "=" not in ln]
        if junk or "version=1" not in lines:
            bad[n] = junk or ["(no version=1)"]
    return bad


class SharedDiskReplicasTest(ProvisionerTestCase):
    """Two replicas of a Deployment on one node: one identity, one --pv-dir, leader election.
    Only one of them may work on the disk at a time."""

    tmp_prefix = "hp-soakfind-"
    N = 20

    def replicas(self, n=2):
        self.shared = os.path.join(self.tmp, "volumes")
        reps = [self.spawn("--identity", "node-1", *(SHORT_LEASE + FAST), name="rep-%d" % i,
                           pv_dir=self.shared) for i in range(n)]
        for r in reps:
            r.wait_log(r"caches synced", 20)
        return reps

    def bound_with_data(self, n):
        claims = self.make_claims("c", n, size="1Ki")
        self.wait_bound(claims, timeout=60)
        paths = {}
        for c in claims:
            pv = self.api.get("/api/v1/persistentvolumes/pvc-" + c["metadata"]["uid"])
            path = pv["spec"]["hostPath"]["path"]
            with open(os.path.join(path, "data"), "w") as f:
                f.write(c["metadata"]["uid"])
            paths[c["metadata"]["uid"]] = path
        return claims, paths

    def delete_all(self, claims):
        for c in claims:
            self.api.delete(PVC_PATH % (NS, c["metadata"]["name"]))
        self.wait(lambda: not self.api.list(PVS_PATH)["items"], 60, "every PV deleted")
        time.sleep(1.0)

    def test_archive_by_replicas_sharing_a_disk(self):
        reps = self.replicas()
        self.add_class(parameters={"onDelete": "archive"})
        claims, paths = self.bound_with_data(self.N)
        self.delete_all(claims)
        recs = journal_records(self.shared)
        archived = set()
        for c in claims:
            uid = c["metadata"]["uid"]
            rec = recs.get("pvc-" + uid)
            self.assertIsNotNone(rec, "no record for pvc-%s" % uid)
            self.assertEqual(rec["state"], "archived")
            where = os.path.join(self.shared, rec["archivedAs"])
            self.assertNotEqual(rec["archivedAs"], rec["path"],
                                "pvc-%s recorded as archived in place, but %s was renamed"
                                % (uid, paths[uid]))
            with open(os.path.join(where, "data")) as f:
                self.assertEqual(f.read(), uid)
            archived.add(rec["archivedAs"])
        # Every directory on the disk is an archived volume that a record owns, and every
        # record is whole (two writers share one temporary file name, .tmp-<hash of the PV>,
        # opened with O_TRUNC: the soak found records with a stray tail, ignored as invalid,
        # their PVs stuck Released after "giving up after 15 failed attempts").
        self.assertEqual(invalid_records(self.shared), {})
        self.assertEqual(set(volume_dirs(self.shared)), archived)
        for r in reps:
            self.assertEqual(error_lines(r.log), [], "%s logged errors" % r.name)

    def test_selected_node_claims_with_replicas_sharing_a_disk(self):
        """As manifests/deployment.yaml runs it with more than one replica: NODE_NAME set (per-
        node mode), one disk. A claim whose selected node is that node must still be
        provisioned once, by one replica."""
        self.shared = os.path.join(self.tmp, "volumes")
        self.api.create("/api/v1/nodes", {"apiVersion": "v1", "kind": "Node",
                                          "metadata": {"name": "node-1"}})
        reps = [self.spawn("--node-name", "node-1", *(SHORT_LEASE + FAST), name="rep-%d" % i,
                           pv_dir=self.shared) for i in range(2)]
        for r in reps:
            r.wait_log(r"caches synced", 20)
        self.add_class(binding="WaitForFirstConsumer")
        claims = self.make_claims("w", self.N, size="1Ki", selected_node="node-1")
        self.wait_bound(claims, timeout=60)
        time.sleep(1.0)
        made = {}
        for r in reps:
            for pv in re.findall(r"provisioned volume claim=\S+ pv=(\S+)", r.log):
                made.setdefault(pv, set()).add(r.name)
        self.assertEqual({pv: sorted(who) for pv, who in made.items() if len(who) > 1}, {},
                         "volumes provisioned by more than one replica")
        self.assertEqual(len(volume_dirs(self.shared)), self.N)
        for r in reps:
            self.assertEqual(error_lines(r.log), [], "%s logged errors" % r.name)

    def test_standby_sweep_leaves_the_leaders_provisioning_alone(self):
        """The full soak: a standby's orphan sweep removed the directory and record of a volume
        whose claim had just been deleted while the leader was still creating its PV; the PV
        (created next) then had no record and stayed Released for ever, VolumeFailedDelete
        every resync."""
        self.shared = os.path.join(self.tmp, "volumes")
        lead = self.spawn("--identity", "node-1", *(SHORT_LEASE + FAST[:-4]),
                          "--resync-period", "1s", "--v", "2", name="rep-0", pv_dir=self.shared)
        lead.wait_log(r"became leader", 20)
        standby = self.spawn("--identity", "node-1", *(SHORT_LEASE + FAST[:-4]),
                             "--resync-period", "1s", "--v", "2", name="rep-1",
                             pv_dir=self.shared)
        standby.wait_log(r"caches synced", 20)
        self.add_class()
        # The leader's PV create hangs for 4 s: its directory and record are made, no PV yet.
        self.api.fail_next("POST", PVS_PATH, delay_ms=4000, count=1)
        c = self.add_claim("brief", size="1Ki")
        pv = "pvc-" + c["metadata"]["uid"]
        self.wait(lambda: pv in journal_records(self.shared), 10, "record of " + pv)
        self.api.delete(PVC_PATH % ("default", "brief"))
        # The PV comes, is released, and is deleted with its directory and record.
        lead.wait_log(r"provisioned volume claim=default/brief", 30)
        self.wait(lambda: not self.api.exists(PV_PATH % pv) and
                  not journal_records(self.shared), 15, "released PV deleted, record gone")
        self.assertEqual(volume_dirs(self.shared), [])
        self.assertNotIn("orphan sweep: removing", standby.log)

    def test_delete_by_replicas_sharing_a_disk(self):
        reps = self.replicas()
        self.add_class()
        claims, _ = self.bound_with_data(self.N)
        self.delete_all(claims)
        self.assertEqual(volume_dirs(self.shared), [])
        # A record is removed in a job of its own after its PV is deleted.
        self.wait(lambda: journal_records(self.shared) == {}, 15, "every record removed")
        # One release per volume, by one replica: a standby does not touch the disk.
        releases = {}
        for r in reps:
            for pv in re.findall(r"releasing volume pv=(\S+)", r.log):
                releases.setdefault(pv, set()).add(r.name)
        self.assertEqual({pv: len(who) for pv, who in releases.items() if len(who) > 1}, {},
                         "volumes released by more than one replica")
        for r in reps:
            self.assertEqual(error_lines(r.log), [], "%s logged errors" % r.name)


class FullDiskStagingTest(ProvisionerTestCase):
    tmp_prefix = "hp-soakfind-"

    def test_failed_record_write_leaves_no_staging_directory(self):
        if os.geteuid() != 0:
            self.skipTest("mounting a tmpfs needs root")
        disk = os.path.join(self.tmp, "disk")
        r = self.mount_tmpfs(disk, "size=1m")
        if r.returncode != 0:
            self.skipTest("mount not permitted here: %s" % r.stderr.strip())
        pv_dir = os.path.join(disk, "pv")
        os.makedirs(pv_dir)
        self.add_class()
        self.provisioner(*FAST, pv_dir=pv_dir)
        first = self.add_claim("first", size="1Ki")
        self.wait_bound("first")
        staging = os.path.join(pv_dir, JOURNAL_DIR, "staging")
        self.assertEqual(os.listdir(staging), [])
        # Fill the disk: directories still fit (tmpfs gives them no data block), records not.
        filler = os.path.join(disk, "filler")
        with open(filler, "wb") as f:
            for _ in range(1000):
                try:
                    f.write(b"\0" * 65536)
                    f.flush()
                except OSError:
                    break
        c = self.add_claim("second", size="1Ki")
        ev = self.wait_event("second", "ProvisioningFailed")
        self.assertIn("No space left on device", ev["message"])
        # The claim goes away and the disk has room again: nothing of it may stay behind.
        self.api.delete(PVC_PATH % ("default", "second"))
        os.unlink(filler)
        self.wait(lambda: not self.api.exists(PVC_PATH % ("default", "second")), 10,
                  "claim second gone")
        time.sleep(2.0)
        self.assertEqual(os.listdir(staging), [], "staging directory of pvc-%s left behind"
                         % c["metadata"]["uid"])
        self.assertEqual(sorted(journal_records(pv_dir)), ["pvc-" + first["metadata"]["uid"]])


class DeletedBetweenRetriesTest(ProvisionerTestCase):
    """3. A claim deleted while its provisioning waits to retry a failed PV create (a 5xx, or
    a 409 that turns out not to be our PV): its directory and 'created' record stay behind, no
    PV, until the next orphan sweep (--resync-period: 15 minutes by default, never with 0). The
    retry finds the claim gone or terminating and does nothing; nothing else looks at the
    record when the claim goes."""

    tmp_prefix = "hp-soakfind-"

    def test_claim_deleted_while_pv_create_backs_off(self):
        self.add_class()
        prov = self.provisioner("--retry-base-delay", "2s", "--retry-max-delay", "5s",
                                "--kube-api-qps", "0", "--resync-period", "0", "--v", "2")
        prov.wait_log(r"caches synced", 20)
        # Every PV create fails until the claim is gone (a retry must not just succeed).
        self.api.fail_next("POST", PVS_PATH, status=503, count=0)
        c = self.add_claim("brief", size="1Ki")
        pv = "pvc-" + c["metadata"]["uid"]
        self.wait_event("brief", "ProvisioningFailed")
        recs = journal_records(self.pv_dir)
        self.assertEqual(recs[pv]["state"], "created")
        path = os.path.join(self.pv_dir, recs[pv]["path"])
        self.assertTrue(os.path.isdir(path))
        # Deleted before the retry: nothing of it may stay.
        self.api.delete(PVC_PATH % ("default", "brief"))
        self.wait(lambda: not self.api.exists(PVC_PATH % ("default", "brief")), 10,
                  "claim gone")
        self.api.clear_faults()
        self.wait(lambda: not os.path.lexists(path) and pv not in journal_records(self.pv_dir),
                  15, "directory and record of the deleted claim's volume gone")
        self.assertFalse(self.api.exists(PV_PATH % pv))


class RescheduledBetweenRetriesTest(ProvisionerTestCase):
    """8. (soak_short in CI, seed 117262018) A claim moved to another node while this node's
    provisioning waits to retry a failed PV create: the other node provisions it (a PV of the
    same name, pvc-<uid>, with its own path and node), and this node's directory and 'created'
    record stayed behind. The orphan sweep took the PV of that name for the record's volume
    and kept them while the claim lived."""

    tmp_prefix = "hp-soakfind-"
    leader_elect = False

    def setUp(self):
        super().setUp()
        for n in ("node-a", "node-b"):
            self.api.create("/api/v1/nodes", {"apiVersion": "v1", "kind": "Node",
                                              "metadata": {"name": n}})
        self.add_class(binding="WaitForFirstConsumer")
        args = ["--node-name", "node-a", "--retry-base-delay", "2s", "--retry-max-delay", "5s",
                "--kube-api-qps", "0", "--resync-period", "0", "--v", "2"]
        if self.leader_elect:
            # As in a DaemonSet: another node's instance leads the provisioner-wide campaign;
            # this one holds only its node's lease, and its disk is still its own to clean.
            now = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
            self.api.create(LEASES_PATH % NS, {
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": "hostpath-provisioner.io", "namespace": NS},
                "spec": {"holderIdentity": "node-z_1", "leaseDurationSeconds": 3600,
                         "acquireTime": now, "renewTime": now}})
            args.append("--leader-elect")
        p = self.provisioner(*args)
        p.wait_log(r"caches synced", 20)
        if self.leader_elect:
            p.wait_log(r"holds the node lease", 20)
            self.assertNotIn("became leader", p.log)
        # node-a's PV creates fail: its directory and record are made, no PV.
        self.api.fail_next("POST", PVS_PATH, status=503, count=0,
                           user_agent="hostpath-provisioner")
        # Labelled for node-a as the leader labels claims for their node (issue 22; here the
        # leader is another node's instance, or this one without --leader-elect).
        self.claim = self.add_claim("moved", size="1Ki", selected_node="node-a",
                                    labels={"hostpath-provisioner.io/node": "node-a"})
        self.pv = "pvc-" + self.claim["metadata"]["uid"]
        self.wait_event("moved", "ProvisioningFailed")
        rec = journal_records(self.pv_dir)[self.pv]
        self.assertEqual(rec["state"], "created")
        self.path = os.path.join(self.pv_dir, rec["path"])
        self.assertTrue(os.path.isdir(self.path))

    def node_b_provisions(self):
        """What node-b's instance does: a PV of the claim's name on its own disk."""
        self.api.create(PVS_PATH, volume(
            self.pv, size="1Ki", path="/srv/node-b/moved", cls="hostpath", claim_ref=self.claim,
            reclaim="Delete", node="node-b",
            annotations={"pv.kubernetes.io/provisioned-by": PROVISIONER,
                         "hostPathProvisionerIdentity": "node-b"}))

    def assert_cleaned(self):
        self.wait(lambda: not os.path.lexists(self.path) and
                  self.pv not in journal_records(self.pv_dir),
                  15, "node-a's directory and record of the moved claim gone")
        self.assertTrue(self.api.exists(PV_PATH % self.pv), "node-b's PV was left alone")
        self.assertTrue(self.api.exists(PVC_PATH % ("default", "moved")))
        self.assertEqual(error_lines(self.prov.log), [])

    def test_claim_reselected_to_another_node(self):
        self.api.patch(PVC_PATH % ("default", "moved"), {"metadata": {
            "annotations": {"volume.kubernetes.io/selected-node": "node-b"},
            "labels": {"hostpath-provisioner.io/node": "node-b"}}})
        self.node_b_provisions()
        self.api.clear_faults()
        self.assert_cleaned()

    def test_claim_deleted_meanwhile(self):
        # Bug 3 on a node: the same cleanup, whoever leads the provisioner-wide campaign.
        self.api.delete(PVC_PATH % ("default", "moved"))
        self.wait(lambda: not os.path.lexists(self.path) and
                  self.pv not in journal_records(self.pv_dir),
                  15, "node-a's directory and record of the deleted claim gone")
        self.assertEqual(error_lines(self.prov.log), [])

    def test_pv_of_the_claim_made_on_another_node(self):
        # The claim's copy still names node-a (a lagging watch): the PV tells.
        self.node_b_provisions()
        self.api.clear_faults()
        self.assert_cleaned()


class RescheduledBetweenRetriesNotLeaderTest(RescheduledBetweenRetriesTest):
    """8, with --leader-elect on an instance that does not lead the provisioner-wide campaign."""

    leader_elect = True


class CrashBeforeRenameTest(ProvisionerTestCase):
    """4. kill -9 after the intent record is written and before the directory is renamed into
    place (provision-recorded), and the claim deleted while the provisioner is down: with
    onDelete retain (or archive) the orphan sweep "keeps" a directory that never existed. The
    journal then holds a 'retained' ('archived') record for nothing, kept for ever, that an
    administrator is told to clean up by hand."""

    tmp_prefix = "hp-soakfind-"
    make_pv_dir = True

    def crash_then_delete(self, on_delete):
        self.add_class(parameters={"onDelete": on_delete})
        victim = self.spawn(*FAST, name="victim", pv_dir=self.pv_dir,
                            env={"HOSTPATH_TEST_CRASH_AT": "provision-recorded:1"})
        c = self.add_claim("brief", size="1Ki")
        self.wait(lambda: not victim.alive(), 20, "the crash at provision-recorded")
        pv = "pvc-" + c["metadata"]["uid"]
        rec = journal_records(self.pv_dir)[pv]
        self.assertEqual(rec["state"], "creating")
        self.assertFalse(os.path.lexists(os.path.join(self.pv_dir, rec["path"])))
        self.api.delete(PVC_PATH % ("default", "brief"))
        self.wait(lambda: not self.api.exists(PVC_PATH % ("default", "brief")), 10,
                  "claim gone")
        after = self.spawn(*FAST, name="after", pv_dir=self.pv_dir)
        after.wait_log(r"caches synced", 20)
        # The start-up sweep settles the leftover 'creating' record (two API reads and a
        # filesystem job): wait until it is gone or names a directory that exists.

        def settled():
            r = journal_records(self.pv_dir).get(pv)
            if r is None:
                return True
            where = r.get("archivedAs") if r["state"] == "archived" else r["path"]
            return os.path.isdir(os.path.join(self.pv_dir, where))
        try:
            wait_for(settled, 20, what="the leftover record settled")
        except TimeoutError:
            pass  # the assertion below says what is wrong
        recs = journal_records(self.pv_dir)
        # Nothing was ever handed out: nothing to keep. A record that stays must name a
        # directory that exists.
        if pv in recs:
            r = recs[pv]
            where = r.get("archivedAs") if r["state"] == "archived" else r["path"]
            self.assertTrue(os.path.isdir(os.path.join(self.pv_dir, where)),
                            "record %s is %s but %s does not exist (the directory was never "
                            "made)" % (pv, r["state"], where))
        self.assertEqual(os.listdir(os.path.join(self.pv_dir, JOURNAL_DIR, "staging")), [])

    def test_retain(self):
        self.crash_then_delete("retain")

    def test_archive(self):
        self.crash_then_delete("archive")


class CrashAfterArchiveRenameTest(ProvisionerTestCase):
    """6. kill -9 after the directory was renamed to archived-<name> and before the record says
    so (release-archived): the next attempt finds the directory gone, records the volume as
    archived where it was (archivedAs = path, which does not exist), and the archived data sits
    in a directory no record owns: an unrecorded orphan, "not ours to touch", for ever."""

    tmp_prefix = "hp-soakfind-"
    make_pv_dir = True

    def test_crash_between_archive_rename_and_record(self):
        self.add_class(parameters={"onDelete": "archive"})
        victim = self.spawn(*FAST, name="victim", pv_dir=self.pv_dir,
                            env={"HOSTPATH_TEST_CRASH_AT": "release-archived:1"})
        victim.wait_log(r"caches synced", 20)
        c = self.add_claim("kept", size="1Ki")
        self.wait_bound("kept")
        pv = "pvc-" + c["metadata"]["uid"]
        path = self.pv(pv)["spec"]["hostPath"]["path"]
        with open(os.path.join(path, "data"), "w") as f:
            f.write("precious\n")
        self.api.delete(PVC_PATH % ("default", "kept"))
        self.wait(lambda: not victim.alive(), 20, "the crash at release-archived")
        after = self.spawn(*FAST, name="after", pv_dir=self.pv_dir)
        after.wait_log(r"caches synced", 20)
        self.wait(lambda: not self.api.exists(PV_PATH % pv), 20, "PV deleted")
        time.sleep(1.0)
        rec = journal_records(self.pv_dir).get(pv)
        self.assertIsNotNone(rec, "the archived volume has no record")
        self.assertEqual(rec["state"], "archived")
        where = os.path.join(self.pv_dir, rec["archivedAs"])
        self.assertTrue(os.path.isdir(where), "record %s says archived as %s, which does not "
                        "exist; on disk: %s" % (pv, rec["archivedAs"], volume_dirs(self.pv_dir)))
        with open(os.path.join(where, "data")) as f:
            self.assertEqual(f.read(), "precious\n")
        self.assertEqual(volume_dirs(self.pv_dir), [rec["archivedAs"]])


class StaleVolumeTest(ProvisionerTestCase):
    """7. A volume deleted while the provisioner's volume watch lags (the DELETE answered, its
    watch events not in yet) and its key reconciled again meanwhile (a resync, another event):
    the stale Released copy is released a second time, finds no record, and the provisioner
    logs an ERROR and writes a VolumeFailedDelete Warning event ("no ownership record ...; the
    PersistentVolume is kept and this is retried") about a volume it has just deleted."""

    tmp_prefix = "hp-soakfind-"

    def test_no_failure_reported_for_a_volume_just_deleted(self):
        self.add_class()
        prov = self.provisioner("--retry-base-delay", "50ms", "--retry-max-delay", "1s",
                                "--kube-api-qps", "0", "--resync-period", "1s", "--v", "2")
        prov.wait_log(r"caches synced", 20)
        c = self.add_claim("big", size="1Ki")
        self.wait_bound("big")
        pv = "pvc-" + c["metadata"]["uid"]
        path = self.pv(pv)["spec"]["hostPath"]["path"]
        for i in range(200):  # removal takes a moment
            d = os.path.join(path, "d%d" % i)
            os.mkdir(d)
            for j in range(100):
                open(os.path.join(d, "f%d" % j), "w").close()
        self.api.delete(PVC_PATH % ("default", "big"))
        prov.wait_log(r"releasing volume pv=%s" % pv, 20)
        # The volume watch goes down while the directory is being removed.
        self.api.fail_next("GET", PVS_PATH, status=500, count=0)
        self.api.close_watches(PVS_PATH, abrupt=True)
        prov.wait_log(r"deleted volume pv=%s" % pv, 30)
        time.sleep(3.0)  # resyncs reconcile the stale copy
        self.api.clear_faults()
        self.assertFalse(self.api.exists(PV_PATH % pv))
        self.assertNotIn("no ownership record for %s" % pv, prov.log)
        self.assertEqual(self.events_for(pv, "VolumeFailedDelete"), [])


class StaleClaimTest(ProvisionerTestCase):
    """5. A claim deleted while the provisioner's claim watch lags behind its volume watch (a
    watch being re-established, as happens all the time under load): the provisioner deletes
    the released PV, then reconciles its stale copy of the claim (unbound, and its PV gone
    from the cache) and provisions it again: a second PV object and a second directory for a
    claim that no longer exists."""

    tmp_prefix = "hp-soakfind-"

    def test_deleted_claim_not_provisioned_again(self):
        self.add_class()
        # No binding yet: the claim stays unbound in every cache.
        self.api.set_binder(False)
        prov = self.provisioner("--retry-base-delay", "50ms", "--retry-max-delay", "1s",
                                "--kube-api-qps", "0", "--resync-period", "1s", "--v", "2")
        prov.wait_log(r"caches synced", 20)
        c = self.add_claim("brief", size="1Ki")
        pv = "pvc-" + c["metadata"]["uid"]
        self.wait(lambda: self.api.exists(PV_PATH % pv), 10, "PV of claim brief")
        uid_first = self.pv(pv)["metadata"]["uid"]
        # The provisioner's claim watch goes down (and cannot come back) before the claim goes.
        self.api.fail_next("GET", "/api/v1/persistentvolumeclaims", status=500, count=0)
        self.api.close_watches("/api/v1/persistentvolumeclaims", abrupt=True)
        self.api.delete(PVC_PATH % ("default", "brief"))
        self.wait(lambda: not self.api.exists(PVC_PATH % ("default", "brief")), 10,
                  "claim gone")
        # The binder releases the PV; the provisioner deletes it (its volume watch works).
        self.api.set_binder(True)
        self.wait(lambda: not self.api.exists(PV_PATH % pv), 15, "released PV deleted")
        time.sleep(3.0)  # resyncs: the stale claim is reconciled again
        again = self.api.exists(PV_PATH % pv) and self.pv(pv)["metadata"]["uid"] != uid_first
        self.assertEqual(len(re.findall(r"provisioned volume claim=default/brief", prov.log)),
                         1, "the deleted claim was provisioned again")
        self.assertFalse(again, "a second PV %s exists for the deleted claim" % pv)
        self.api.clear_faults()


if __name__ == "__main__":
    unittest.main(verbosity=2)
