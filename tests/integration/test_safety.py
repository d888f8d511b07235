"""Safety of the filesystem side: the provisioner never removes or creates anything outside
--pv-dir, never follows a symlink, never touches a volume it does not own, and reports a full
disk instead of pretending.

Every test gets a fresh API server and a fresh temporary --pv-dir. Volumes are removed only
when all of these hold: PV Released, reclaim Delete, provisioned-by us, identity ours, and the
path is a real directory strictly inside --pv-dir (docs/design.md "Data safety").
"""

import os
import subprocess
import sys
import time
import unittest
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (PROVISIONER as PROV, PV_PATH, PVC_PATH, PVS_PATH,  # noqa: E402
                     ProvisionerTestCase, metric, volume, volume_dirs, JOURNAL_DIR,
                     journal_records)

IDENTITY = "safety-node"
ANN_BY = "pv.kubernetes.io/provisioned-by"
ANN_ID = "hostPathProvisionerIdentity"


def tree(path):
    """Every path under path (relative), with a type letter: a stable fingerprint."""
    out = []
    for root, dirs, files in os.walk(path, followlinks=False):
        dirs[:] = [d for d in dirs if d != JOURNAL_DIR]  # the provisioner's own bookkeeping
        for n in dirs + files:
            p = os.path.join(root, n)
            kind = "l" if os.path.islink(p) else ("d" if os.path.isdir(p) else "f")
            out.append((os.path.relpath(p, path), kind))
    return sorted(out)


class Base(ProvisionerTestCase):
    tmp_prefix = "hp-safety-"
    fast = ("--retry-base-delay", "50ms", "--retry-max-delay", "2s", "--kube-api-qps", "0",
            "--resync-period", "0", "--v", "2", "--identity", IDENTITY)
    make_pv_dir = True

    def outside(self, name):
        """A directory next to --pv-dir (outside it) holding a sentinel file."""
        d = os.path.join(self.tmp, name)
        os.makedirs(d)
        with open(os.path.join(d, "sentinel"), "w") as f:
            f.write("must survive\n")
        return d

    def assert_sentinel(self, d):
        self.assertTrue(os.path.isdir(d) and not os.path.islink(d), d)
        with open(os.path.join(d, "sentinel")) as f:
            self.assertEqual(f.read(), "must survive\n")

    def released_pv(self, name, path, identity=IDENTITY, provisioner=PROV, cls="hostpath"):
        """A PV that looks provisioned (annotations), whose claim never existed: the binder
        marks it Released at once."""
        pv = volume(name, path=path, cls=cls, reclaim="Delete",
                    annotations={ANN_BY: provisioner, ANN_ID: identity},
                    host_path_type="DirectoryOrCreate")
        pv["spec"]["claimRef"] = {"kind": "PersistentVolumeClaim", "apiVersion": "v1",
                                  "namespace": "default", "name": "gone-" + name,
                                  "uid": str(uuid.uuid4())}
        self.api.create(PVS_PATH, pv)
        self.wait(lambda: self.api.get(PV_PATH % name).get("status", {}).get("phase") ==
                  "Released", 20, "PV %s Released" % name)

    def cycle_claim(self, name):
        """Provisions and deletes one claim end to end: proof that the provisioner is alive
        and reconciling volumes."""
        c = self.add_claim(name)
        self.wait_bound(name)
        pv_name = "pvc-" + c["metadata"]["uid"]
        path = self.api.get(PV_PATH % pv_name)["spec"]["hostPath"]["path"]
        self.assertTrue(os.path.isdir(path))
        self.api.delete(PVC_PATH % ("default", name))
        self.wait(lambda: not self.api.exists(PV_PATH % pv_name) and not os.path.lexists(path),
                  30, "claim %s's PV and directory removed" % name)


class SymlinkTest(Base):
    def test_volume_directory_replaced_by_symlink_is_not_followed(self):
        self.add_class()
        self.provisioner()
        c = self.add_claim("victim")
        self.wait_bound("victim")
        pv_name = "pvc-" + c["metadata"]["uid"]
        path = self.api.get(PV_PATH % pv_name)["spec"]["hostPath"]["path"]
        self.assertTrue(path.startswith(self.pv_dir + "/"))
        target = self.outside("precious")
        os.rmdir(path)
        os.symlink(target, path)
        self.api.delete(PVC_PATH % ("default", "victim"))
        ev = self.wait_event(pv_name, "VolumeFailedDelete", kind="PersistentVolume")
        self.assertEqual(ev["type"], "Warning")
        self.assertIn("symlink", ev["message"])
        # Still there, still a symlink, target and sentinel untouched; the PV stays for an
        # administrator to look at.
        self.assertTrue(os.path.islink(path))
        self.assertEqual(os.readlink(path), target)
        self.assert_sentinel(target)
        self.assertEqual(tree(target), [("sentinel", "f")])
        self.assertTrue(self.api.exists(PV_PATH % pv_name))
        # It is reported, not retried hot: one event (maybe aggregated), directory untouched
        # over a while.
        time.sleep(1.0)
        self.assert_sentinel(target)
        evs = self.events_for(pv_name, "VolumeFailedDelete")
        self.assertEqual(len(evs), 1, evs)

    def test_symlink_inside_volume_is_removed_not_followed(self):
        self.add_class()
        self.provisioner()
        c = self.add_claim("links")
        self.wait_bound("links")
        pv_name = "pvc-" + c["metadata"]["uid"]
        path = self.api.get(PV_PATH % pv_name)["spec"]["hostPath"]["path"]
        target = self.outside("linked")
        # What a pod could leave behind: symlinks to outside, to a file outside, nested.
        os.symlink(target, os.path.join(path, "dir-link"))
        os.symlink(os.path.join(target, "sentinel"), os.path.join(path, "file-link"))
        os.makedirs(os.path.join(path, "a", "b"))
        os.symlink(target, os.path.join(path, "a", "b", "deep-link"))
        os.symlink("../../..", os.path.join(path, "a", "up"))
        self.api.delete(PVC_PATH % ("default", "links"))
        self.wait(lambda: not os.path.lexists(path) and not self.api.exists(PV_PATH % pv_name),
                  30, "volume with symlinks removed")
        self.assert_sentinel(target)
        self.assertEqual(tree(target), [("sentinel", "f")])
        self.assertFalse(self.events_for(pv_name, "VolumeFailedDelete"))

    def test_symlink_on_the_way_to_a_new_volume_is_refused(self):
        # pathPattern "sub/<pv>": --pv-dir/sub is a symlink to a directory outside.
        self.add_class(parameters={"pathPattern": "sub/{{.PVName}}"})
        target = self.outside("escape")
        os.symlink(target, os.path.join(self.pv_dir, "sub"))
        self.provisioner()
        c = self.add_claim("sneaky")
        ev = self.wait_event("sneaky", "ProvisioningFailed")
        self.assertEqual(ev["type"], "Warning")
        self.assertIn("symlink", ev["message"])
        self.assertEqual(tree(target), [("sentinel", "f")])
        self.assertFalse(self.api.exists(PV_PATH % ("pvc-" + c["metadata"]["uid"])))


class OutsidePathTest(Base):
    def test_released_volume_outside_pv_dir_is_not_removed(self):
        self.add_class()
        self.provisioner()
        # Elsewhere, outside by a shared name prefix only, and --pv-dir itself. (A path
        # with ".." is refused by the API server's validation, as in Kubernetes.)
        far = self.outside("far")
        sibling = self.outside("volumes-sibling")  # <tmp>/volumes-sibling: a prefix trap
        cases = {
            "pv-far": far,
            "pv-sibling": sibling,
            "pv-root": self.pv_dir,
            "pv-root-slash": self.pv_dir + "/",
        }
        marker = os.path.join(self.pv_dir, "keep-me")
        with open(marker, "w") as f:
            f.write("x")
        before = tree(self.tmp)
        for name, path in cases.items():
            self.released_pv(name, path)
        for name in cases:
            ev = self.wait_event(name, "VolumeFailedDelete", kind="PersistentVolume")
            self.assertEqual(ev["type"], "Warning")
        for name in cases:
            self.assertTrue(self.api.exists(PV_PATH % name), name)
        for d in (far, sibling):
            self.assert_sentinel(d)
        self.assertTrue(os.path.isfile(marker))
        # And the provisioner still works normally meanwhile.
        self.cycle_claim("normal")
        after = [t for t in tree(self.tmp) if not t[0].startswith(("apiserver", "provisioner-"))]
        self.assertEqual(after, [t for t in before
                                 if not t[0].startswith(("apiserver", "provisioner-"))])


class OwnershipTest(Base):
    def test_volume_of_another_identity_or_provisioner_is_never_deleted(self):
        self.add_class()
        prov = self.provisioner()
        prov.wait_log(r"caches synced", 20)
        theirs = os.path.join(self.pv_dir, "default-theirs-pvc-other")
        os.makedirs(theirs)
        with open(os.path.join(theirs, "data"), "w") as f:
            f.write("theirs\n")
        foreign = os.path.join(self.pv_dir, "foreign")
        os.makedirs(foreign)
        self.released_pv("pvc-other-identity", theirs, identity="another-node")
        self.released_pv("pvc-other-provisioner", foreign, provisioner="example.com/other")
        self.released_pv("pvc-no-identity", foreign, identity="")
        # The provisioner is demonstrably active: it provisions and deletes a claim meanwhile.
        self.cycle_claim("mine-1")
        self.cycle_claim("mine-2")
        for name in ("pvc-other-identity", "pvc-other-provisioner", "pvc-no-identity"):
            pv = self.api.get(PV_PATH % name)
            self.assertEqual(pv["status"]["phase"], "Released", name)
            self.assertFalse(pv["metadata"].get("deletionTimestamp"), name)
            self.assertFalse(self.events_for(name), name)
        with open(os.path.join(theirs, "data")) as f:
            self.assertEqual(f.read(), "theirs\n")
        self.assertTrue(os.path.isdir(foreign))
        # No DELETE of these PVs was ever sent.
        deletes = [r["path"] for r in self.api.requests(method="DELETE")
                   if r["path"].startswith(PVS_PATH + "/")]
        for name in ("pvc-other-identity", "pvc-other-provisioner", "pvc-no-identity"):
            self.assertNotIn(PV_PATH % name, deletes)


class PathPatternTest(Base):
    def test_annotation_values_cannot_escape_pv_dir(self):
        # --pv-dir three levels down, so "../../etc" would land inside the temp dir.
        pv_dir = os.path.join(self.tmp, "a", "b", "volumes")
        os.makedirs(pv_dir)
        self.add_class(parameters={"pathPattern": "{{.PVC.Annotations.dir}}"})
        self.add_class("nested", parameters={
            "pathPattern": "{{.PVC.Namespace}}/{{.PVC.Annotations.dir}}/{{.PVName}}"})
        self.provisioner(pv_dir=pv_dir)
        before = tree(self.tmp)
        bad = {"up": "../../etc", "slash": "x/y", "dotdot": "..", "dot": ".",
               "abs": "/etc", "nested-up": ("nested", "../..")}
        claims = {}
        for name, v in bad.items():
            cls, val = v if isinstance(v, tuple) else ("hostpath", v)
            claims[name] = self.add_claim(name, cls=cls, annotations={"dir": val})
        for name in bad:
            ev = self.wait_event(name, "ProvisioningFailed")
            self.assertEqual(ev["type"], "Warning")
            self.assertFalse(self.api.exists(PV_PATH % ("pvc-" +
                                                        claims[name]["metadata"]["uid"])))
        # A good value still works with the same class (the refusals were per claim).
        good = self.add_claim("good", annotations={"dir": "fine"})
        self.wait_bound("good")
        pv = self.api.get(PV_PATH % ("pvc-" + good["metadata"]["uid"]))
        self.assertEqual(pv["spec"]["hostPath"]["path"], os.path.join(pv_dir, "fine"))
        for name in bad:
            self.assertNotEqual(self.api.get(PVC_PATH % ("default", name))["status"].get(
                "phase"), "Bound")
        self.assertFalse(os.path.lexists(os.path.join(self.tmp, "a", "etc")))
        self.assertFalse(os.path.lexists(os.path.join(self.tmp, "etc")))
        new = set(tree(self.tmp)) - set(before)
        new = {t for t in new if not t[0].startswith(("apiserver", "a/b/provisioner-"))}
        self.assertEqual(new, {("a/b/volumes/fine", "d")})


class MountMixin:
    def mount_tmpfs(self, path, opts):
        os.makedirs(path, exist_ok=True)
        if os.geteuid() != 0:
            self.skipTest("mounting a tmpfs needs root")
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", path],
                           capture_output=True, text=True, timeout=30)
        if r.returncode != 0:
            self.skipTest("mount not permitted here: %s" % r.stderr.strip())
        # Registered after the provisioner's cleanup would be too late: cleanups run last
        # in, first out, so this one (registered first) runs after the provisioner stopped.
        self.addCleanup(self.umount, path)

    def umount(self, path):
        for _ in range(50):
            r = subprocess.run(["umount", path], capture_output=True, text=True, timeout=30)
            if r.returncode == 0:
                return
            time.sleep(0.1)
        raise AssertionError("could not unmount %s: %s" % (path, r.stderr))


class FullDiskTest(MountMixin, Base):
    def test_no_space_left_is_reported(self):
        pv_dir = os.path.join(self.tmp, "small")
        # 8 inodes: the root takes one, so at most 7 volume directories fit.
        self.mount_tmpfs(pv_dir, "size=256k,nr_inodes=8,mode=0755")
        self.add_class()
        prov = self.provisioner(pv_dir=pv_dir)
        prov.wait_log(r"caches synced", 20)
        base_errors = metric(prov, "hostpath_filesystem_errors_total")
        failed = None
        bound = []
        for i in range(12):
            c = self.add_claim("fill-%d" % i, size="1Ki")
            name = "fill-%d" % i

            def settled():
                ph = self.api.get(PVC_PATH % ("default", name)).get("status", {}).get("phase")
                if ph == "Bound":
                    return "bound"
                if self.events_for(name, "ProvisioningFailed"):
                    return "failed"
                return None
            state = self.wait(settled, 30, "claim %s bound or failed" % name)
            if state == "failed":
                failed = c
                break
            bound.append(c)
        self.assertIsNotNone(failed, "12 directories fit on an 8-inode tmpfs?")
        self.assertGreaterEqual(len(bound), 1)
        fname = failed["metadata"]["name"]
        ev = self.events_for(fname, "ProvisioningFailed")[0]
        self.assertEqual(ev["type"], "Warning")
        self.assertIn("No space left on device", ev["message"])
        self.assertFalse(self.api.exists(PV_PATH % ("pvc-" + failed["metadata"]["uid"])))
        self.assertEqual(len(self.api.list(PVS_PATH)["items"]), len(bound))
        # The failed claim's directory exists only if its record says it is being made.
        recs = journal_records(pv_dir)
        bound_paths = {os.path.basename(self.api.get(PV_PATH % ("pvc-" + c["metadata"]["uid"]))
                                        ["spec"]["hostPath"]["path"]) for c in bound}
        extra = set(volume_dirs(pv_dir)) - bound_paths
        self.assertLessEqual(len(extra), 1, extra)
        for d in extra:
            self.assertEqual(recs["pvc-" + failed["metadata"]["uid"]]["path"], d)
            self.assertEqual(recs["pvc-" + failed["metadata"]["uid"]]["state"], "creating")
        self.assertGreater(metric(prov, "hostpath_filesystem_errors_total"), base_errors)
        self.assertGreaterEqual(
            metric(prov, "hostpath_filesystem_errors_total", 'errno="ENOSPC"'), 1)
        # Space comes back: the failed claim is retried (backoff) and gets its volume.
        self.api.delete(PVC_PATH % ("default", bound[0]["metadata"]["name"]))
        self.wait_bound(fname, timeout=60)
        self.assertTrue(self.api.exists(PV_PATH % ("pvc-" + failed["metadata"]["uid"])))


class MountCrossingTest(MountMixin, Base):
    def test_mount_inside_volume_is_left_alone(self):
        self.add_class()
        self.provisioner()
        c = self.add_claim("mounted")
        self.wait_bound("mounted")
        pv_name = "pvc-" + c["metadata"]["uid"]
        path = self.api.get(PV_PATH % pv_name)["spec"]["hostPath"]["path"]
        inner = os.path.join(path, "mnt")
        self.mount_tmpfs(inner, "size=64k")
        with open(os.path.join(inner, "sentinel"), "w") as f:
            f.write("must survive\n")
        self.api.delete(PVC_PATH % ("default", "mounted"))
        ev = self.wait_event(pv_name, "VolumeFailedDelete", kind="PersistentVolume")
        self.assertIn("mount", ev["message"])
        with open(os.path.join(inner, "sentinel")) as f:
            self.assertEqual(f.read(), "must survive\n")
        self.assertTrue(self.api.exists(PV_PATH % pv_name))


if __name__ == "__main__":
    unittest.main(verbosity=2)
