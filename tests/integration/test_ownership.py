"""Data safety: every volume directory has exactly one owner, and nothing is deleted that the
ownership journal does not prove is ours (README "Data safety").

Each test first reproduces one of the failures the journal fixes, against a fresh API server
and a fresh --pv-dir:
- two claims whose pathPattern renders one directory (by name, by annotation) and an
  administrator's directory at a rendered path: refused with a Warning event naming the
  conflict, the first claim's files and PV intact, the directory's mode and content unchanged;
- a refused PV create (422) and a re-created claim over a retained directory: the data stays;
- a StorageClass deleted before its claim, for retain and archive: the policy travels with the
  PV;
- reuseRetained: the same namespace/name gets the old data back, another name does not;
- --pv-dir unmounted while a volume is bound: nothing is deleted until the disk is back;
- kill -9 at every step of provisioning and deletion, 50 claims each: afterwards every claim
  has one PV, every PV one recorded directory, no unrecorded directory exists;
- the orphan sweep: a record whose claim went while the provisioner was down is settled; an
  unrecorded directory is counted and left alone;
- a volume of an earlier version (no journal) is recorded at start and deleted by its class.
"""

import json
import os
import re
import signal
import stat
import subprocess
import sys
import time
import unittest
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (JOURNAL_DIR, NSS_PATH, PROVISIONER as PROV, PV_PATH,  # noqa: E402
                     PVC_PATH, PVS_PATH, SC_PATH, ProvisionerTestCase, journal_records, metric,
                     namespace, phase, volume, volume_dirs, SMALL)

ANN_BY = "pv.kubernetes.io/provisioned-by"
ANN_ID = "hostPathProvisionerIdentity"
ANN_ON_DELETE = "hostpath.provisioner/on-delete"
IDENTITY = "owner-node"


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


def read(path):
    with open(path) as f:
        return f.read()


class Base(ProvisionerTestCase):
    tmp_prefix = "hp-ownership-"
    fast = ("--retry-base-delay", "50ms", "--retry-max-delay", "1s", "--kube-api-qps", "0",
            "--resync-period", "0", "--v", "2", "--identity", IDENTITY)
    make_pv_dir = True

    def pv_of(self, c):
        return "pvc-" + c["metadata"]["uid"]

    def path_of(self, c):
        return self.pv(self.pv_of(c))["spec"]["hostPath"]["path"]

    def bound_with_data(self, name, ns="default", data="first tenant's data\n", **kw):
        c = self.add_claim(name, ns=ns, **kw)
        self.wait_bound(name, ns=ns)
        path = self.path_of(c)
        write(os.path.join(path, "data"), data)
        return c, path

    def assert_no_pv(self, c, settle=0.5):
        time.sleep(settle)
        self.assertFalse(self.api.exists(PV_PATH % self.pv_of(c)))

    def wait_gone(self, c, path, timeout=30):
        name = self.pv_of(c)
        self.wait(lambda: not self.api.exists(PV_PATH % name), timeout, "PV %s deleted" % name)
        if path is not None:
            self.wait(lambda: not os.path.lexists(path), timeout, "%s removed" % path)


class CollisionTest(Base):
    def test_two_claims_one_rendered_path(self):
        self.add_class(parameters={"pathPattern": "{{.PVC.Namespace}}-{{.PVC.Name}}"})
        self.api.create(NSS_PATH, namespace("team-b"))
        self.api.create(NSS_PATH, namespace("team"))
        self.provisioner()
        first, path = self.bound_with_data("c-data", ns="team-b")
        self.assertEqual(os.path.basename(path), "team-b-c-data")
        second = self.add_claim("b-c-data", ns="team")
        ev = self.wait_event("b-c-data", "ProvisioningFailed")
        self.assertEqual(ev["type"], "Warning")
        self.assertIn("team-b-c-data", ev["message"])
        self.assertIn(self.pv_of(first), ev["message"])
        self.assertIn("team-b/c-data", ev["message"])
        self.assert_no_pv(second)
        # Deleting the refused claim touches nothing of the first.
        self.api.delete(PVC_PATH % ("team", "b-c-data"))
        time.sleep(1.0)
        self.assertEqual(read(os.path.join(path, "data")), "first tenant's data\n")
        self.assertEqual(phase(self.api, "c-data", "team-b"), "Bound")
        self.assertEqual(self.pv(self.pv_of(first))["status"]["phase"], "Bound")

    def test_two_claims_one_annotation_value(self):
        self.add_class(parameters={"pathPattern": "{{.PVC.Annotations.dir}}"})
        self.provisioner()
        first, path = self.bound_with_data("one", annotations={"dir": "shared"})
        second = self.add_claim("two", annotations={"dir": "shared"})
        ev = self.wait_event("two", "ProvisioningFailed")
        self.assertIn("shared", ev["message"])
        self.assertIn(self.pv_of(first), ev["message"])
        self.assert_no_pv(second)
        # Nested: a path inside the first volume, and one containing it.
        self.add_class("nested", parameters={"pathPattern": "{{.PVC.Annotations.dir}}/x"})
        inside = self.add_claim("inside", cls="nested", annotations={"dir": "shared"})
        ev = self.wait_event("inside", "ProvisioningFailed")
        self.assertIn("lies inside", ev["message"])
        self.assert_no_pv(inside)
        self.api.delete(PVC_PATH % ("default", "two"))
        self.api.delete(PVC_PATH % ("default", "inside"))
        time.sleep(1.0)
        self.assertEqual(read(os.path.join(path, "data")), "first tenant's data\n")
        self.assertEqual(sorted(os.listdir(path)), ["data"])

    def test_administrators_directory_is_not_taken_over(self):
        self.add_class(parameters={"pathPattern": "{{.PVC.Namespace}}-{{.PVC.Name}}"})
        admin = os.path.join(self.pv_dir, "default-backup")
        os.makedirs(admin)
        write(os.path.join(admin, "db.dump"), "admin's data\n")
        os.chmod(admin, 0o700)
        before = os.stat(admin)
        self.provisioner()
        c = self.add_claim("backup")
        ev = self.wait_event("backup", "ProvisioningFailed")
        self.assertIn("already exists", ev["message"])
        self.assertIn(admin, ev["message"])
        self.assert_no_pv(c)
        after = os.stat(admin)
        self.assertEqual(stat.S_IMODE(after.st_mode), 0o700)
        self.assertEqual((after.st_uid, after.st_gid, after.st_ino),
                         (before.st_uid, before.st_gid, before.st_ino))
        self.assertEqual(read(os.path.join(admin, "db.dump")), "admin's data\n")
        self.api.delete(PVC_PATH % ("default", "backup"))
        time.sleep(1.0)
        self.assertEqual(read(os.path.join(admin, "db.dump")), "admin's data\n")
        self.assertEqual(journal_records(self.pv_dir), {})


class RetainedDataTest(Base):
    def retained(self, name="data"):
        self.add_class(parameters={"pathPattern": "{{.PVC.Namespace}}/{{.PVC.Name}}",
                                   "onDelete": "retain"})
        self.provisioner()
        c, path = self.bound_with_data(name)
        self.api.delete(PVC_PATH % ("default", name))
        self.wait_gone(c, None)
        self.assertEqual(read(os.path.join(path, "data")), "first tenant's data\n")
        self.assertEqual(journal_records(self.pv_dir)[self.pv_of(c)]["state"], "retained")
        return c, path

    def test_recreated_claim_does_not_get_or_lose_retained_data(self):
        old, path = self.retained()
        new = self.add_claim("data")
        ev = self.wait_event("data", "ProvisioningFailed")
        self.assertIn("retained", ev["message"])
        self.assertIn(self.pv_of(old), ev["message"])
        self.assert_no_pv(new)
        # Deleted mid-way (nothing was made for it): the retained data stays.
        self.api.delete(PVC_PATH % ("default", "data"))
        time.sleep(1.0)
        self.assertEqual(read(os.path.join(path, "data")), "first tenant's data\n")

    def test_refused_pv_create_removes_only_its_own_directory(self):
        old, path = self.retained()
        # A fresh claim whose PV the API server refuses for good (every time: a change of the
        # claim, such as its protection finalizer, is reconciled again).
        self.api.fail_next("POST", PVS_PATH, status=422, count=1000,
                           message="PersistentVolume is invalid")
        c = self.add_claim("other")
        ev = self.wait_event("other", "ProvisioningFailed")
        self.assertIn("422", ev["message"])
        new_dir = os.path.join(self.pv_dir, "default", "other")
        # Retries go on (each change of the claim is reconciled again): wait for a moment
        # with neither the directory nor the record of an attempt.
        self.wait(lambda: not os.path.lexists(new_dir) and
                  self.pv_of(c) not in journal_records(self.pv_dir), 10,
                  "the refused volume's directory and record gone")
        self.assertEqual(read(os.path.join(path, "data")), "first tenant's data\n")
        self.assertIn(self.pv_of(old), journal_records(self.pv_dir))

    def test_reuse_retained(self):
        self.add_class(parameters={"onDelete": "retain", "reuseRetained": "true"})
        self.provisioner()
        old, path = self.bound_with_data("db")
        os.chmod(path, 0o700)
        self.api.delete(PVC_PATH % ("default", "db"))
        self.wait_gone(old, None)
        # The same namespace and name: the old directory, untouched, announced.
        new = self.add_claim("db")
        self.wait_bound("db")
        self.assertEqual(self.path_of(new), path)
        self.assertEqual(read(os.path.join(path, "data")), "first tenant's data\n")
        self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o700)
        uid = new["metadata"]["uid"]
        ev = self.wait(lambda: [e for e in self.events_for("db", "ProvisioningSucceeded")
                                if e["involvedObject"].get("uid") == uid], 20,
                       "ProvisioningSucceeded of the new claim")[0]
        self.assertIn("reusing the retained directory", ev["message"])
        self.assertIn(self.pv_of(old), ev["message"])
        recs = journal_records(self.pv_dir)
        self.assertNotIn(self.pv_of(old), recs)
        self.assertEqual(recs[self.pv_of(new)]["adoptedFrom"], self.pv_of(old))
        # Another name gets a new, empty directory.
        other = self.add_claim("other")
        self.wait_bound("other")
        self.assertNotEqual(self.path_of(other), path)
        self.assertEqual(os.listdir(self.path_of(other)), [])


class PolicyTravelsTest(Base):
    def class_gone_then_release(self, on_delete):
        self.add_class(parameters={"onDelete": on_delete})
        self.provisioner()
        c, path = self.bound_with_data("c")
        self.assertEqual(self.pv(self.pv_of(c))["metadata"]["annotations"][ANN_ON_DELETE],
                         on_delete)
        self.api.delete(SC_PATH % "hostpath")
        time.sleep(0.3)
        self.api.delete(PVC_PATH % ("default", "c"))
        self.wait_gone(c, None)
        return c, path

    def test_class_deleted_before_claim_retain(self):
        c, path = self.class_gone_then_release("retain")
        self.assertEqual(read(os.path.join(path, "data")), "first tenant's data\n")
        self.assertEqual(journal_records(self.pv_dir)[self.pv_of(c)]["state"], "retained")

    def test_class_deleted_before_claim_archive(self):
        c, path = self.class_gone_then_release("archive")
        self.assertFalse(os.path.lexists(path))
        archived = os.path.join(os.path.dirname(path), "archived-" + os.path.basename(path))
        self.assertEqual(read(os.path.join(archived, "data")), "first tenant's data\n")
        rec = journal_records(self.pv_dir)[self.pv_of(c)]
        self.assertEqual(rec["state"], "archived")
        self.assertEqual(rec["archivedAs"], os.path.basename(archived))

    def test_earlier_version_volume_recorded_and_deleted_by_class(self):
        """A PV made before the journal existed (no on-delete annotation, no record) is
        recorded at start and then handled by its class's policy."""
        self.add_class()
        d = os.path.join(self.pv_dir, "default-old-pvc-legacy")
        os.makedirs(d)
        write(os.path.join(d, "data"), "old\n")
        old = self.add_claim("old", volume_name="pvc-legacy")
        pv = volume("pvc-legacy", path=d, cls="hostpath", reclaim="Delete", claim_ref=old,
                    annotations={ANN_BY: PROV, ANN_ID: IDENTITY},
                    host_path_type="DirectoryOrCreate")
        self.api.create(PVS_PATH, pv)
        self.wait_bound("old")
        prov = self.provisioner()
        prov.wait_log(r"recorded a volume made before the ownership journal pv=pvc-legacy", 20)
        rec = journal_records(self.pv_dir)["pvc-legacy"]
        self.assertEqual(rec["migrated"], "true")
        self.assertEqual(rec["onDelete"], "delete")
        self.assertEqual(rec["path"], "default-old-pvc-legacy")
        # Released: deleted by the class's policy.
        self.api.delete(PVC_PATH % ("default", "old"))
        self.wait(lambda: not os.path.lexists(d) and not self.api.exists(PV_PATH % "pvc-legacy"),
                  30, "legacy volume deleted")
        self.wait(lambda: "pvc-legacy" not in journal_records(self.pv_dir), 10, "record gone")


class UnmountedDiskTest(Base):
    def disk_at_pv_dir(self):
        """A tmpfs disk, bind-mounted on --pv-dir; returns (disk, bind, unbind)."""
        if os.geteuid() != 0:
            self.skipTest("mounting needs root")
        disk = os.path.join(self.tmp, "disk")
        r = self.mount_tmpfs(disk, "size=4m")
        if r.returncode != 0:
            self.skipTest("mount not permitted here: %s" % r.stderr.strip())

        def bind():
            r = subprocess.run(["mount", "--bind", disk, self.pv_dir], capture_output=True,
                               text=True, timeout=30)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.mounts.append(self.pv_dir)

        def unbind():
            r = subprocess.run(["umount", self.pv_dir], capture_output=True, text=True,
                               timeout=30)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.mounts.remove(self.pv_dir)
        return disk, bind, unbind

    def test_no_new_volume_on_the_empty_mount_point(self):
        """A missing disk is not an empty disk for new volumes either: with the disk gone,
        its mount point (on the parent filesystem) takes no volume; back, it does."""
        disk, bind, unbind = self.disk_at_pv_dir()
        bind()
        self.add_class()
        p = self.provisioner()
        self.bound_with_data("first", size="1Mi")
        unbind()
        second = self.add_claim("second", size="1Mi")
        ev = self.wait_event("second", "ProvisioningFailed")
        self.assertRegex(ev["message"], r"is its disk mounted\?")
        p.wait_log(r"volume path %s is now on another filesystem .* that holds none of its 1 "
                   r"volumes: is its disk mounted\?" % re.escape(self.pv_dir), 20)
        time.sleep(1.0)  # retries meanwhile
        self.assertEqual(os.listdir(self.pv_dir), [])  # nothing made on the parent disk
        self.assertFalse(self.api.exists(PV_PATH % self.pv_of(second)))
        # The disk comes back: the claim is provisioned on it.
        bind()
        self.wait_bound("second", timeout=60)
        path = self.path_of(second)
        self.assertTrue(os.path.isdir(os.path.join(disk, os.path.basename(path))))

    def test_started_while_the_disk_is_unmounted(self):
        """A provisioner (re)started while its disk is not mounted learns nothing from the
        empty mount point: PVs of ours made with a record name directories there, and no
        journal shows, so no new volume goes there (the node soak found a claim provisioned
        on the mount point, its pod's data hidden once the disk came back)."""
        disk, bind, unbind = self.disk_at_pv_dir()
        bind()
        self.add_class()
        p1 = self.provisioner()
        self.bound_with_data("first", size="1Mi")
        p1.stop()
        unbind()
        p2 = self.provisioner()
        p2.wait_log(r"volume path %s \(device \d+:\d+\) shows no ownership journal, yet 1 "
                    r"PersistentVolumes of ours were made there: is its disk mounted\?"
                    % re.escape(self.pv_dir), 20)
        second = self.add_claim("second", size="1Mi")
        ev = self.wait_event("second", "ProvisioningFailed")
        self.assertRegex(ev["message"], r"is its disk mounted\?")
        time.sleep(1.0)  # retries meanwhile
        self.assertEqual(os.listdir(self.pv_dir), [])  # nothing made on the parent disk
        self.assertFalse(self.api.exists(PV_PATH % self.pv_of(second)))
        # The disk comes back: the claim is provisioned on it, next to the first.
        bind()
        p2.wait_log(r"volume path %s is back on its filesystem" % re.escape(self.pv_dir), 30)
        self.wait_bound("second", timeout=60)
        path = self.path_of(second)
        self.assertTrue(os.path.isdir(os.path.join(disk, os.path.basename(path))))

    def two_paths(self, sub):
        """--config with two paths: main, a directory, and small, a tmpfs bind-mounted on
        <tmp>/small (the volume path is <tmp>/small/sub); a class for each (nodePath).
        Returns (config, main, small, disk, bind, unbind)."""
        if os.geteuid() != 0:
            self.skipTest("mounting needs root")
        main = os.path.join(self.tmp, "main")
        point = os.path.join(self.tmp, "small")
        small = os.path.join(point, sub) if sub else point
        disk = os.path.join(self.tmp, "disk")
        os.makedirs(main)
        os.makedirs(point)
        r = self.mount_tmpfs(disk, "size=4m")
        if r.returncode != 0:
            self.skipTest("mount not permitted here: %s" % r.stderr.strip())
        if sub:
            os.makedirs(os.path.join(disk, sub))

        def bind():
            r = subprocess.run(["mount", "--bind", disk, point], capture_output=True,
                               text=True, timeout=30)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.mounts.append(point)

        def unbind():
            r = subprocess.run(["umount", point], capture_output=True, text=True, timeout=30)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.mounts.remove(point)
        cfg = os.path.join(self.tmp, "config.json")
        with open(cfg, "w") as f:
            json.dump({"nodePathMap": [{"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES",
                                        "paths": [main, small]}]}, f)
        self.add_class("main", parameters={"nodePath": main})
        self.add_class("small", parameters={"nodePath": small})
        return cfg, main, small, disk, bind, unbind

    def started_while_an_unused_disk_is_unmounted(self, sub):
        """The node soak's N3: a provisioner (re)started while a disk that holds none of its
        volumes is not mounted. No PV and no record tell the empty mount point from a new
        disk, but the other path's journals file says this one had a journal: no new volume
        goes there until it is back."""
        cfg, main, small, disk, bind, unbind = self.two_paths(sub)
        bind()
        p1 = self.provisioner("--config", cfg)
        a, _ = self.bound_with_data("a", cls="small", size="1Mi")
        self.bound_with_data("b", cls="main", size="1Mi")
        self.api.delete(PVC_PATH % ("default", "a"))
        self.wait_gone(a, None)
        # The journals file of each path names both (main's is what will be read).
        listed = os.path.join(main, JOURNAL_DIR, "journals")
        self.wait(lambda: os.path.exists(listed) and small + "\n" in read(listed), 10,
                  "main's journals file lists %s" % small)
        self.assertIn(main + "\n", read(listed))
        p1.stop()
        unbind()
        p2 = self.provisioner("--config", cfg)
        seen = (r"does not exist" if sub else r"\(device \d+:\d+\) shows no ownership journal")
        p2.wait_log(r"volume path %s %s, yet an ownership journal was seen there before \(the "
                    r"file \.hostpath-provisioner/journals under this node's volume paths lists "
                    r"it\): is its disk mounted\?"
                    % (re.escape(small), seen), 20)
        c = self.add_claim("c", cls="small", size="1Mi")
        ev = self.wait_event("c", "ProvisioningFailed")
        self.assertRegex(ev["message"], r"is its disk mounted\?")
        time.sleep(1.0)  # retries meanwhile
        point = os.path.join(self.tmp, "small")
        self.assertEqual(os.listdir(point), [])  # nothing made on the parent disk
        self.assertFalse(self.api.exists(PV_PATH % self.pv_of(c)))
        self.bound_with_data("d", cls="main", size="1Mi")  # the other path works as before
        # The disk comes back: the claim is provisioned on it.
        bind()
        self.wait_bound("c", timeout=60)
        path = self.path_of(c)
        self.assertTrue(path.startswith(small + "/"), path)
        self.assertTrue(os.path.isdir(os.path.join(disk, sub, os.path.basename(path))))

    def test_unused_disk_unmounted_while_running(self):
        """A disk that holds none of the volumes any more, unmounted under a running
        provisioner: its journal was seen, so the empty mount point takes no volume."""
        cfg, main, small, disk, bind, unbind = self.two_paths("")
        bind()
        self.provisioner("--config", cfg)
        a, _ = self.bound_with_data("a", cls="small", size="1Mi")
        self.api.delete(PVC_PATH % ("default", "a"))
        self.wait_gone(a, None)
        unbind()
        c = self.add_claim("c", cls="small", size="1Mi")
        ev = self.wait_event("c", "ProvisioningFailed")
        self.assertRegex(ev["message"], r"is its disk mounted\?")
        time.sleep(1.0)  # retries meanwhile
        self.assertEqual(os.listdir(small), [])  # nothing made on the parent disk
        self.assertFalse(self.api.exists(PV_PATH % self.pv_of(c)))
        bind()
        self.wait_bound("c", timeout=60)
        self.assertTrue(os.path.isdir(os.path.join(disk, os.path.basename(self.path_of(c)))))

    def never_used_disk_unmounted_while_running(self, sub):
        """The node soak's N3 once more: a disk that never held a volume (no journal, so no
        list names it), unmounted under a running provisioner. The path now lies on the
        filesystem its mount point is on: its disk's mount is gone, so no volume goes there
        (the soak saw pods' directories made on the mount point, hidden once it was back)."""
        cfg, main, small, disk, bind, unbind = self.two_paths(sub)
        bind()
        p = self.provisioner("--config", cfg)
        self.bound_with_data("b", cls="main", size="1Mi")  # the process has read both paths
        p.wait_log(r"ownership journal read path=%s " % re.escape(small), 10)
        unbind()
        c = self.add_claim("c", cls="small", size="1Mi")
        ev = self.wait_event("c", "ProvisioningFailed")
        self.assertRegex(ev["message"], r"is its disk mounted\?")
        p.wait_log(r"volume path %s (no longer exists|is now on device \d+:\d+): the mount of its "
                   r"disk \(device \d+:\d+\) is gone" % re.escape(small), 20)
        time.sleep(1.5)  # retries meanwhile
        point = os.path.join(self.tmp, "small")
        self.assertEqual(os.listdir(point), [])  # nothing made on the parent disk
        self.assertFalse(self.api.exists(PV_PATH % self.pv_of(c)))
        bind()
        p.wait_log(r"volume path %s is back on its filesystem" % re.escape(small), 30)
        self.wait_bound("c", timeout=60)
        path = self.path_of(c)
        self.assertTrue(os.path.isdir(os.path.join(disk, sub, os.path.basename(path))))

    def test_never_used_disk_unmounted_while_running(self):
        self.never_used_disk_unmounted_while_running("")

    def test_never_used_disk_unmounted_while_running_path_below(self):
        self.never_used_disk_unmounted_while_running("vols")

    def test_emptied_path_removed_by_hand_is_made_again(self):
        """A volume path that held volumes (its journal seen) and holds none now, removed by
        hand on its own filesystem under a running provisioner: not a missing disk (its
        parent is on the same mount), so the next volume makes it again."""
        self.add_class()
        p = self.provisioner()
        a, _ = self.bound_with_data("a", size="1Mi")
        self.api.delete(PVC_PATH % ("default", "a"))
        self.wait_gone(a, None)
        subprocess.run(["rm", "-rf", "--one-file-system", self.pv_dir], check=True, timeout=30)
        self.bound_with_data("b", size="1Mi")
        p.wait_log(r"volume path %s was removed \(its disk is mounted\); it is made again"
                   % re.escape(self.pv_dir), 10)
        self.assertTrue(os.path.isdir(os.path.join(self.pv_dir, JOURNAL_DIR)))

    def test_emptied_path_removed_by_hand_is_read_again_before_its_next_volume(self):
        """The same path, read again (periodic resync every second) while nothing makes it, then
        made again by hand (mkdir, no journal): neither read takes it for a missing disk,
        and the next claim binds there. (CI found the first: a second read before the next
        volume said "is its disk mounted?" and the claim never bound.)"""
        self.add_class()
        p = self.provisioner("--resync-period", "1s")
        a, _ = self.bound_with_data("a", size="1Mi")
        self.api.delete(PVC_PATH % ("default", "a"))
        self.wait_gone(a, None)
        subprocess.run(["rm", "-rf", "--one-file-system", self.pv_dir], check=True, timeout=30)
        p.wait_log(r"volume path %s was removed \(its disk is mounted\)" % re.escape(self.pv_dir),
                   10)
        reads = r"ownership journal read path=%s " % re.escape(self.pv_dir)

        def reads_after(n):
            start = len(p.log)
            self.wait(lambda: len(re.findall(reads, p.log[start:])) >= n, 20,
                      "%d more reads of %s" % (n, self.pv_dir))
        reads_after(3)
        self.assertFalse(os.path.exists(self.pv_dir))  # nothing made it meanwhile
        os.mkdir(self.pv_dir)
        reads_after(3)
        self.assertNotRegex(p.log, r"is its disk mounted\?")
        self.bound_with_data("b", size="1Mi")
        self.assertTrue(os.path.isdir(os.path.join(self.pv_dir, JOURNAL_DIR)))
        self.assertNotRegex(p.log, r"is its disk mounted\?")

    def test_removed_path_not_made_again_on_an_unmounted_disk(self):
        """A path on a disk (<point>/vols), emptied and removed by hand, is made again by the
        next volume, but only on the mount it was on: the disk unmounted before that volume
        (and before any read of the path could see it), the volume is refused, nothing is
        made on the mount point, and the path waits for its disk."""
        cfg, main, small, disk, bind, unbind = self.two_paths("vols")
        bind()
        p = self.provisioner("--config", cfg, "--resync-period", "3s")  # reads every 3 s
        a, _ = self.bound_with_data("a", cls="small", size="1Mi")
        self.api.delete(PVC_PATH % ("default", "a"))
        self.wait_gone(a, None)
        subprocess.run(["rm", "-rf", "--one-file-system", small], check=True, timeout=30)
        p.wait_log(r"volume path %s was removed \(its disk is mounted\)" % re.escape(small), 10)
        reads = len(re.findall(r"ownership journal read path=%s " % re.escape(small), p.log))
        unbind()  # and at once a claim: its volume comes before the next read (most times)
        point = os.path.join(self.tmp, "small")
        c = self.add_claim("c", cls="small", size="1Mi")
        ev = self.wait_event("c", "ProvisioningFailed")
        self.assertRegex(ev["message"], r"is its disk mounted\?")
        time.sleep(1.0)  # retries meanwhile
        self.assertEqual(os.listdir(point), [])  # not made on the mount point
        self.assertFalse(self.api.exists(PV_PATH % self.pv_of(c)))
        print("reads of %s between the unmount and the refusal: %d" % (small, len(re.findall(
            r"ownership journal read path=%s " % re.escape(small), p.log)) - reads))

    def test_unused_disk_unmounted_and_put_back_by_a_reload(self):
        """A path dropped from --config, its disk unmounted, and the path put back by a
        reload: its journal was seen by this process, so the reload does not make it on the
        mount point and no volume goes there until the disk is back."""
        cfg, main, small, disk, bind, unbind = self.two_paths("vols")
        bind()
        p = self.provisioner("--config", cfg)
        a, _ = self.bound_with_data("a", cls="small", size="1Mi")
        self.api.delete(PVC_PATH % ("default", "a"))
        self.wait_gone(a, None)

        def write_paths(paths):
            tmp = cfg + ".new"
            with open(tmp, "w") as f:
                json.dump({"nodePathMap": [{"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES",
                                            "paths": paths}]}, f)
            os.rename(tmp, cfg)
            p.proc.send_signal(signal.SIGHUP)
            p.wait_log(r"reloaded: paths=%s\n" % re.escape(",".join(paths)), 20)
        write_paths([main])
        unbind()
        write_paths([main, small])
        p.wait_log(r"--config path %s does not exist, yet an ownership journal was seen there "
                   r"before .*: is its disk mounted\? It is not made here" % re.escape(small), 5)
        point = os.path.join(self.tmp, "small")
        self.assertEqual(os.listdir(point), [])  # not made on the parent disk
        c = self.add_claim("c", cls="small", size="1Mi")
        ev = self.wait_event("c", "ProvisioningFailed")
        self.assertRegex(ev["message"], r"is its disk mounted\?")
        time.sleep(1.0)  # retries meanwhile
        self.assertEqual(os.listdir(point), [])
        self.assertFalse(self.api.exists(PV_PATH % self.pv_of(c)))
        bind()
        self.wait_bound("c", timeout=60)
        path = self.path_of(c)
        self.assertTrue(os.path.isdir(os.path.join(disk, "vols", os.path.basename(path))))

    def test_started_while_an_unused_disk_is_unmounted(self):
        self.started_while_an_unused_disk_is_unmounted("")

    def test_started_while_an_unused_disk_is_unmounted_path_below(self):
        """The same with the volume path a directory on the disk: unmounted, it does not
        exist, and must not be made on the mount point."""
        self.started_while_an_unused_disk_is_unmounted("vols")

    def test_pv_dir_unmounted_while_bound(self):
        disk, bind, unbind = self.disk_at_pv_dir()
        bind()
        self.add_class()
        self.provisioner()
        c, path = self.bound_with_data("c", size="1Mi")
        inner = os.path.join(disk, os.path.basename(path))
        unbind()
        self.assertFalse(os.path.exists(path))
        before = sorted(os.listdir(self.tmp))
        self.api.delete(PVC_PATH % ("default", "c"))
        ev = self.wait_event(self.pv_of(c), "VolumeFailedDelete", kind="PersistentVolume")
        self.assertEqual(ev["type"], "Warning")
        self.assertRegex(ev["message"], r"mounted")
        time.sleep(1.5)  # several retries
        self.assertTrue(self.api.exists(PV_PATH % self.pv_of(c)))
        self.assertEqual(self.pv(self.pv_of(c))["status"]["phase"], "Released")
        self.assertEqual(read(os.path.join(inner, "data")), "first tenant's data\n")
        self.assertEqual(sorted(os.listdir(self.tmp)), before)
        self.assertEqual(os.listdir(self.pv_dir), [])  # nothing made on the parent disk
        # The disk comes back: the deletion completes.
        bind()
        self.wait_gone(c, path, timeout=30)
        self.assertFalse(os.path.lexists(inner))


class OrphanSweepTest(Base):
    def test_orphan_settled_and_unrecorded_left_alone(self):
        self.add_class()
        stray = os.path.join(self.pv_dir, "someones-dir")
        os.makedirs(stray)
        write(os.path.join(stray, "f"), "x")
        # Dies after recording "created", before the PV create.
        p1 = self.spawn(name="p", pv_dir=self.pv_dir, env={"HOSTPATH_TEST_CRASH_AT":
                                                           "provision-created:1"},
                        *self.fast)
        c = self.add_claim("brief")
        self.wait(lambda: not p1.alive(), 20, "the provisioner killed at provision-created")
        rec = journal_records(self.pv_dir)[self.pv_of(c)]
        self.assertEqual(rec["state"], "created")
        d = os.path.join(self.pv_dir, rec["path"])
        self.assertTrue(os.path.isdir(d))
        # The claim goes while the provisioner is down.
        self.api.delete(PVC_PATH % ("default", "brief"))
        self.wait(lambda: not self.api.exists(PVC_PATH % ("default", "brief")), 10, "claim gone")
        prov = self.provisioner()
        self.wait(lambda: not os.path.lexists(d), 20, "orphaned directory removed by the sweep")
        self.wait(lambda: self.pv_of(c) not in journal_records(self.pv_dir), 10, "record gone")
        self.assertFalse(self.api.exists(PV_PATH % self.pv_of(c)))
        # The unrecorded directory: counted, logged once, untouched.
        self.assertEqual(read(os.path.join(stray, "f")), "x")
        self.assertEqual(metric(prov, "hostpath_orphan_directories", 'kind="unrecorded"'), 1)
        self.assertEqual(len(re.findall(r"someones-dir has no ownership record", prov.log)), 1)


class ParentsAndIdentityTest(Base):
    def test_parents_made_by_a_pattern_go_with_their_last_volume(self):
        self.add_class(parameters={
            "pathPattern": "{{.PVC.Namespace}}/{{.PVC.Labels.team}}/{{.PVC.Name}}"})
        self.provisioner()
        a = self.add_claim("a", labels={"team": "x"})
        b = self.add_claim("b", labels={"team": "x"})
        c = self.add_claim("c", labels={"team": "y"})
        self.wait_bound([a, b, c])
        ns = os.path.join(self.pv_dir, "default")
        self.assertTrue(os.path.isdir(os.path.join(ns, "x", "a")))
        write(os.path.join(ns, "notes.txt"), "a person's file\n")
        self.api.delete(PVC_PATH % ("default", "a"))
        self.wait_gone(a, os.path.join(ns, "x", "a"))
        self.assertTrue(os.path.isdir(os.path.join(ns, "x")))  # b is still in it
        self.api.delete(PVC_PATH % ("default", "b"))
        self.wait_gone(b, os.path.join(ns, "x"))  # the last volume of x: x goes too
        self.api.delete(PVC_PATH % ("default", "c"))
        self.wait_gone(c, os.path.join(ns, "y"))
        # default/ holds a person's file: it stays, and so does --pv-dir.
        self.assertEqual(read(os.path.join(ns, "notes.txt")), "a person's file\n")
        time.sleep(0.5)
        self.assertTrue(os.path.isdir(ns))
        os.unlink(os.path.join(ns, "notes.txt"))
        # Without the file, the next volume there and its deletion take default/ away.
        d = self.add_claim("d", labels={"team": "z"})
        self.wait_bound("d")
        self.api.delete(PVC_PATH % ("default", "d"))
        self.wait_gone(d, ns)
        self.assertTrue(os.path.isdir(self.pv_dir))

    def test_released_volume_of_another_identity_is_named_once(self):
        self.add_class()
        prov = self.provisioner()
        prov.wait_log(r"caches synced", 20)
        d = os.path.join(self.pv_dir, "theirs")
        os.makedirs(d)
        pv = volume("pvc-theirs", path=d, cls="hostpath", reclaim="Delete",
                    annotations={ANN_BY: PROV, ANN_ID: "old-hostname", ANN_ON_DELETE: "delete"})
        pv["spec"]["claimRef"] = {"kind": "PersistentVolumeClaim", "apiVersion": "v1",
                                  "namespace": "default", "name": "gone",
                                  "uid": str(uuid.uuid4())}
        self.api.create(PVS_PATH, pv)
        line = prov.wait_log(r"another identity alone pv=pvc-theirs .*", 20).group(0)
        self.assertIn('identity="old-hostname"', line)
        self.assertIn('ours="%s"' % IDENTITY, line)
        self.assertIn('--identity "old-hostname"', line)
        # A later change of the PV reconciles it again: still one line.
        self.api.patch(PV_PATH % "pvc-theirs", {"metadata": {"labels": {"x": "y"}}})
        c = self.add_claim("sync")
        self.wait_bound("sync")
        self.assertEqual(prov.log.count("another identity alone pv=pvc-theirs"), 1)
        self.assertEqual(metric(prov, "hostpath_volumes_of_other_identity_total"), 1)
        self.assertTrue(os.path.isdir(d))
        self.assertEqual(self.pv("pvc-theirs")["status"]["phase"], "Released")
        del c


STEPS_PROVISION = ["provision-staged", "provision-recorded", "provision-renamed",
                   "provision-created", "provision-pv-created"]
STEPS_DELETE = ["release-marked", "release-removing", "release-removed", "delete-pv-deleted"]
N = 50


class CrashConsistencyTest(Base):
    """kill -9 (a SIGKILL the process sends itself at a named step) in the middle of 50
    provisionings or deletions, then a clean restart."""

    def check_invariants(self, claims):
        pvs = {p["metadata"]["name"]: p for p in self.api.list(PVS_PATH)["items"]}
        recs = journal_records(self.pv_dir)
        for c in claims:
            m = c["metadata"]
            mine = [p for p in pvs.values() if p["spec"]["claimRef"]["uid"] == m["uid"]]
            self.assertEqual(len(mine), 1, "claim %s has %d PVs" % (m["name"], len(mine)))
        for name, pv in pvs.items():
            rel = os.path.relpath(pv["spec"]["hostPath"]["path"], self.pv_dir)
            self.assertIn(name, recs, "PV %s has no record" % name)
            self.assertEqual(recs[name]["path"], rel)
            self.assertEqual(recs[name]["state"], "created")
            self.assertTrue(os.path.isdir(os.path.join(self.pv_dir, rel)),
                            "recorded directory of %s missing" % name)
        recorded = {r["path"] for r in recs.values()}
        self.assertEqual(set(volume_dirs(self.pv_dir)) - recorded, set(),
                         "unrecorded directories")
        self.assertEqual(set(recs), set(pvs), "records without a PV")
        self.assertEqual(os.listdir(os.path.join(self.pv_dir, JOURNAL_DIR, "staging")), [])

    def crash_run(self, step, deleting):
        self.add_class()
        hit = 1 if step in ("provision-pv-created", "delete-pv-deleted") else N // 2
        env = {"HOSTPATH_TEST_CRASH_AT": "%s:%d" % (step, hit)}
        claims = []
        if deleting:
            first = self.spawn(name="setup", pv_dir=self.pv_dir, *self.fast)
            claims = self.make_claims("c", N, size=SMALL)
            self.wait_bound(claims, timeout=60)
            for c in claims:  # content to remove, so that removal has steps to crash in
                d = self.path_of(c)
                write(os.path.join(d, "a"), "a")
                write(os.path.join(d, "b"), "b")
            first.stop()
            victim = self.spawn(name="victim", pv_dir=self.pv_dir, env=env, *self.fast)
            victim.wait_log(r"caches synced", 20)
            for c in claims:
                self.api.delete(PVC_PATH % ("default", c["metadata"]["name"]))
        else:
            victim = self.spawn(name="victim", pv_dir=self.pv_dir, env=env, *self.fast)
            victim.wait_log(r"caches synced", 20)
            claims = self.make_claims("c", N, size=SMALL)
        self.wait(lambda: not victim.alive(), 60, "crash at %s" % step)
        self.assertIn("crashpoint: %s" % step, victim.log)
        self.spawn(name="after", pv_dir=self.pv_dir, *self.fast)
        if deleting:
            self.wait(lambda: not self.api.list(PVS_PATH)["items"] and
                      not volume_dirs(self.pv_dir), 90, "every volume deleted after %s" % step)
            self.wait(lambda: not journal_records(self.pv_dir), 30, "every record gone")
        else:
            self.wait_bound(claims, timeout=90)
            time.sleep(0.5)
        self.check_invariants([] if deleting else claims)



def _crash_test(step, deleting):
    def test(self):
        self.crash_run(step, deleting)
    test.__doc__ = "kill -9 at %s with %d claims" % (step, N)
    return test


for _step in STEPS_PROVISION:
    setattr(CrashConsistencyTest, "test_crash_at_" + _step.replace("-", "_"),
            _crash_test(_step, False))
for _step in STEPS_DELETE:
    setattr(CrashConsistencyTest, "test_crash_at_" + _step.replace("-", "_"),
            _crash_test(_step, True))


if __name__ == "__main__":
    unittest.main(verbosity=2)
