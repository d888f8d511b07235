"""Data whose PersistentVolume was not released through this provisioner is kept.

The ownership journal proves a directory is ours; only a PV's own release (its claim gone, its
reclaimPolicy Delete, its on-delete decision) proves its data may go. Each test reproduces a
way the orphan sweep or a release used to delete data Kubernetes says to keep (found by an
adversarial review, see the commit that added this file):
- a StorageClass with reclaimPolicy Retain: the claim goes, then an administrator deletes the
  Released PV; the sweep at the next start (or resync) deleted the directory;
- the documented reuse of a retained volume: a PV of the administrator's own made on the
  directory and bound to a new claim; the sweep deleted it under the bound PV;
- a provisioner started against a new, empty cluster (a rebuilt control plane, a backup restore
  that runs later): every volume with data was deleted at start;
- a reuseRetained takeover interrupted by a crash, its claim deleted meanwhile: the retained
  data was deleted;
- a released volume whose directory another bound PV names: deleted under that PV.
Now: a directory that holds data and whose PV went without a release is recorded `retained`
and left in place (an empty one is still removed: nothing is lost); a directory another live
PV uses is never touched, and its own release waits (VolumeFailedDelete) until that PV is gone.
"""

import os
import re
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (NSS_PATH, PV_PATH, PVC_PATH, PVCS_PATH, PVS_PATH,  # noqa: E402
                     journal_records, namespace, volume)
from harness import claim as claim_obj  # noqa: E402
from test_ownership import ANN_ON_DELETE, Base, read, write  # noqa: E402


class KeepDataTest(Base):
    tmp_prefix = "hp-keep-"

    def release_then_delete_pv(self, c):
        """The claim goes; once its PV is Released, an administrator deletes the PV object."""
        name = self.pv_of(c)
        self.api.delete(PVC_PATH % (c["metadata"]["namespace"], c["metadata"]["name"]))
        self.wait(lambda: self.pv(name)["status"]["phase"] == "Released", 20, "PV Released")
        self.api.delete(PV_PATH % name)
        self.wait(lambda: not self.api.exists(PV_PATH % name), 20, "PV deleted")

    def assert_retained(self, c, path, p, *earlier):
        """Retained by p's orphan sweep, or by one of the earlier processes' (a process still
        running when the PV was deleted sweeps it at once, if its watch shows the deletion
        before the process is stopped)."""
        name = self.pv_of(c)
        self.wait(lambda: journal_records(self.pv_dir).get(name, {}).get("state") == "retained",
                  20, "record of %s retained" % name)
        self.assertEqual(read(os.path.join(path, "data")), "first tenant's data\n")
        said = re.compile(r"orphan sweep: keeping the directory of volume pv=%s .*\(retained\): "
                          r"its PersistentVolume was deleted without being released here"
                          % re.escape(name))
        self.wait(lambda: any(said.search(q.log) for q in (p,) + earlier), 10,
                  "the sweep's log line for %s" % name)

    def test_reclaim_retain_pv_deleted_by_hand_keeps_data(self):
        self.add_class(reclaim="Retain")
        p = self.provisioner()
        c, path = self.bound_with_data("kept")
        self.release_then_delete_pv(c)
        p.stop()
        p2 = self.provisioner()  # the sweep at start
        self.assert_retained(c, path, p2, p)
        time.sleep(0.5)
        self.assertTrue(os.path.isfile(os.path.join(path, "data")))

    def test_pv_patched_to_retain_then_deleted_keeps_data_at_resync(self):
        self.add_class()
        p = self.provisioner("--resync-period", "1s")
        c, path = self.bound_with_data("kept")
        self.api.patch(PV_PATH % self.pv_of(c),
                       {"spec": {"persistentVolumeReclaimPolicy": "Retain"}})
        self.wait(lambda: self.pv(self.pv_of(c))["spec"]["persistentVolumeReclaimPolicy"]
                  == "Retain", 10, "PV patched")
        self.release_then_delete_pv(c)
        self.assert_retained(c, path, p)

    def test_new_empty_cluster_keeps_volumes_with_data(self):
        self.add_class()
        p = self.provisioner()
        full, full_path = self.bound_with_data("full")
        empty = self.add_claim("empty")
        self.wait_bound("empty")
        empty_path = self.path_of(empty)
        p.stop()
        self.api.restart()  # a new cluster at the same address: no claims, no PVs
        self.add_class()
        p2 = self.provisioner()
        self.assert_retained(full, full_path, p2)
        # The empty one held nothing anybody wrote: removed, with its record.
        self.wait(lambda: not os.path.lexists(empty_path), 20, "the empty volume removed")
        # The record goes in a job of its own, after the directory.
        self.wait(lambda: self.pv_of(empty) not in journal_records(self.pv_dir), 10,
                  "the empty volume's record removed")

    def test_administrators_pv_on_a_retained_directory_is_left_alone(self):
        self.add_class(reclaim="Retain")
        p = self.provisioner("--resync-period", "1s")
        c, path = self.bound_with_data("old")
        self.release_then_delete_pv(c)
        # Kubernetes' documented reuse: a PV of one's own on the directory, bound to a claim.
        new = self.api.create(PVCS_PATH % "default",
                              claim_obj("default", "new", "", volume_name="rebound"))
        self.api.create(PVS_PATH, volume("rebound", path=path, reclaim="Retain", claim_ref=new))
        self.wait_bound("new")
        time.sleep(3)  # three sweeps
        self.assertEqual(read(os.path.join(path, "data")), "first tenant's data\n")
        self.assertNotRegex(p.log, r"orphan sweep: (removing|archiving) .*pv=%s"
                            % self.pv_of(c))

    def test_release_waits_while_another_pv_uses_the_directory(self):
        self.add_class()
        p = self.provisioner()
        c, path = self.bound_with_data("orig")
        self.api.create(NSS_PATH, namespace("other"))
        other = self.api.create(PVCS_PATH % "other",
                                claim_obj("other", "share", "", volume_name="shared"))
        self.api.create(PVS_PATH, volume("shared", path=path, reclaim="Retain",
                                         claim_ref=other))
        self.wait_bound("share", ns="other")
        self.api.delete(PVC_PATH % ("default", "orig"))
        name = self.pv_of(c)
        p.wait_log(r"not removing volume directory %s: it is the directory %s of "
                   r"PersistentVolume shared, which is in use" % (path, path), 20)
        ev = self.wait_event(name, "VolumeFailedDelete", timeout=10)
        self.assertIn("PersistentVolume shared", ev["message"])
        time.sleep(1)
        self.assertEqual(read(os.path.join(path, "data")), "first tenant's data\n")
        self.assertEqual(self.pv(name)["status"]["phase"], "Released")
        # Once the other PV is gone, the release goes on.
        self.api.delete(PVC_PATH % ("other", "share"))
        self.api.delete(PV_PATH % "shared")
        self.wait_gone(c, path, 30)

    def test_interrupted_takeover_keeps_the_retained_data(self):
        self.add_class(parameters={"reuseRetained": "true",
                                   "pathPattern": "{{.PVC.Namespace}}-{{.PVC.Name}}"})
        p = self.provisioner()
        old, path = self.bound_with_data("db")
        self.api.patch(PV_PATH % self.pv_of(old),
                       {"metadata": {"annotations": {ANN_ON_DELETE: "retain"}}})
        self.wait(lambda: self.pv(self.pv_of(old))["metadata"]["annotations"].get(
            ANN_ON_DELETE) == "retain", 10, "PV annotated")
        self.api.delete(PVC_PATH % ("default", "db"))
        self.wait(lambda: not self.api.exists(PV_PATH % self.pv_of(old)), 20, "old PV gone")
        p.stop()
        # The takeover is recorded, then the process dies before the new PV exists...
        victim = self.spawn(*self.fast, name="victim", pv_dir=self.pv_dir,
                            env={"HOSTPATH_TEST_CRASH_AT": "provision-adopted:1"})
        new = self.add_claim("db")
        self.wait(lambda: not victim.alive(), 20, "the crash after the takeover")
        # ...and the new claim is deleted while it is down.
        self.api.delete(PVC_PATH % ("default", "db"))
        self.wait(lambda: not self.api.exists(PVC_PATH % ("default", "db")), 10, "claim gone")
        p3 = self.provisioner()
        name = self.pv_of(new)
        self.wait(lambda: journal_records(self.pv_dir).get(name, {}).get("state") == "retained",
                  20, "the takeover's record retained again")
        p3.wait_log(r"orphan sweep: keeping the directory of a volume whose claim and "
                    r"PersistentVolume are gone pv=%s" % name, 10)
        time.sleep(0.5)
        self.assertEqual(read(os.path.join(path, "data")), "first tenant's data\n")


if __name__ == "__main__":
    unittest.main(verbosity=2)
