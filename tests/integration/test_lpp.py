"""local-path-provisioner v0.0.37's StorageClass parameters, annotations and config.json shapes,
end to end against the local API server (issue 20): what a cluster that uses it sets must work
here unchanged.

- volumeType (claim annotation) and defaultVolumeType (class annotation): local PVs with
  required node affinity; a value that is neither is a ProvisioningFailed event naming it;
- nodeAffinityKey: the affinity is on that label of the selected node (read from the Node); a
  node without the label refuses the claim instead of making a PV no pod can use;
- userPattern, groupPattern, permPattern (parameters, or class annotations when absent): the
  directory's owner, group and mode; a pattern that renders to no number is refused;
- its recommended pathPattern {{ .PVC.Namespace }}/{{ .PVC.Name }}/ (a trailing '/');
- allowUnsafePathPattern: a path outside the namespace/name prefix is accepted, one that leaves
  the volume root is still refused;
- config.json: storageClassConfigs (a class on its own paths), sharedFileSystemPath (no node
  affinity, the leader's alone).
"""

import json
import os
import re
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (NODES_PATH, PV_PATH, ProvisionerTestCase, node)  # noqa: E402

LOCAL_ANN = "volumeType"
DEFAULT_ANN = "defaultVolumeType"


def affinity(pv):
    terms = pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]
    e = terms[0]["matchExpressions"][0]
    return e["key"], e["operator"], e["values"]


class LppTest(ProvisionerTestCase):
    tmp_prefix = "hp-lpp-"
    fast = ("--retry-base-delay", "50ms", "--retry-max-delay", "1s", "--kube-api-qps", "0",
            "--resync-period", "0", "--v", "2")
    make_pv_dir = True

    def pv_of(self, c):
        return self.pv("pvc-" + c["metadata"]["uid"])

    def class_with_annotations(self, name, annotations, **kw):
        from harness import SCS_PATH, storage_class, PROVISIONER
        sc = storage_class(name, PROVISIONER, **kw)
        sc["metadata"].setdefault("annotations", {}).update(annotations)
        return self.api.create(SCS_PATH, sc)

    def test_volume_type_local_and_default(self):
        self.add_class()
        self.class_with_annotations("local-default", {DEFAULT_ANN: "Local"})
        self.provisioner("--node-name", "node-a")
        c = self.add_claim("l1", annotations={LOCAL_ANN: "local"})
        self.wait_bound("l1")
        pv = self.pv_of(c)
        self.assertNotIn("hostPath", pv["spec"])
        self.assertTrue(pv["spec"]["local"]["path"].startswith(self.pv_dir + "/"))
        self.assertTrue(os.path.isdir(pv["spec"]["local"]["path"]))
        self.assertEqual(affinity(pv), ("kubernetes.io/hostname", "In", ["node-a"]))
        # The class's default, and a claim that says hostPath over it.
        d = self.add_claim("l2", cls="local-default")
        h = self.add_claim("h1", cls="local-default", annotations={LOCAL_ANN: "hostPath"})
        self.wait_bound("l2")
        self.wait_bound("h1")
        self.assertIn("local", self.pv_of(d)["spec"])
        self.assertEqual(self.pv_of(h)["spec"]["hostPath"]["type"], "DirectoryOrCreate")
        # Anything else is refused, by name.
        bad = self.add_claim("bad", annotations={LOCAL_ANN: "block"})
        ev = self.wait_event("bad", "ProvisioningFailed")
        self.assertIn("block", ev["message"])
        time.sleep(0.5)
        self.assertFalse(self.api.exists(PV_PATH % ("pvc-" + bad["metadata"]["uid"])))
        # Deleting a local volume removes its directory like a hostPath one.
        path = self.pv_of(c)["spec"]["local"]["path"]
        from harness import PVC_PATH
        self.api.delete(PVC_PATH % ("default", "l1"))
        self.wait(lambda: not os.path.exists(path), 20, "local volume's directory removed")

    def test_node_affinity_key(self):
        self.api.create(NODES_PATH, node("node-a", {"topology.example.io/rack": "r7"}))
        self.api.create(NODES_PATH, node("node-b"))
        self.add_class(binding="WaitForFirstConsumer",
                       parameters={"nodeAffinityKey": "topology.example.io/rack"})
        self.provisioner("--node-name", "node-a")
        c = self.add_claim("racked", selected_node="node-a")
        self.wait_bound("racked")
        self.assertEqual(affinity(self.pv_of(c)), ("topology.example.io/rack", "In", ["r7"]))
        # A node without the label: refused (local-path-provisioner writes the node's name
        # under the key, a PV no pod could be scheduled with).
        p2 = self.provisioner("--node-name", "node-b", pv_dir=os.path.join(self.tmp, "b"))
        self.add_claim("unlabelled", selected_node="node-b")
        ev = self.wait_event("unlabelled", "ProvisioningFailed")
        self.assertIn("has no label topology.example.io/rack", ev["message"])
        self.assertEqual(os.listdir(os.path.join(self.tmp, "b")) if os.path.exists(
            os.path.join(self.tmp, "b")) else [], [])
        p2.stop()

    def test_user_group_perm_patterns(self):
        if os.geteuid() != 0:
            self.skipTest("chown needs root")
        self.add_class(parameters={"userPattern": "{{ .PVC.Annotations.uid }}",
                                   "groupPattern": "2000", "permPattern": "0750"})
        self.class_with_annotations("by-annotation", {"userPattern": "1500",
                                                      "permPattern": "{{ .PVC.Annotations.m }}"})
        self.provisioner()
        c = self.add_claim("owned", annotations={"uid": "1234"})
        self.wait_bound("owned")
        st = os.stat(self.pv_of(c)["spec"]["hostPath"]["path"])
        self.assertEqual((st.st_uid, st.st_gid, st.st_mode & 0o7777), (1234, 2000, 0o750))
        a = self.add_claim("annotated", cls="by-annotation", annotations={"m": "700"})
        self.wait_bound("annotated")
        st = os.stat(self.pv_of(a)["spec"]["hostPath"]["path"])
        self.assertEqual((st.st_uid, st.st_mode & 0o7777), (1500, 0o700))
        # Not a number: refused before anything is made.
        self.add_claim("named", annotations={"uid": "root"})
        ev = self.wait_event("named", "ProvisioningFailed")
        self.assertIn("root", ev["message"])
        # Ours and theirs together: refused, naming both.
        self.add_class("both", parameters={"uid": "1", "userPattern": "2"})
        self.add_claim("both", cls="both")
        ev = self.wait_event("both", "ProvisioningFailed")
        self.assertIn("userPattern", ev["message"])

    def test_recommended_and_unsafe_path_patterns(self):
        self.add_class(parameters={"pathPattern": "{{ .PVC.Namespace }}/{{ .PVC.Name }}/"})
        self.add_class("unsafe", parameters={"pathPattern": "shared-{{ .PVC.Name }}",
                                             "allowUnsafePathPattern": "true"})
        self.add_class("escape", parameters={"pathPattern": "../{{ .PVC.Name }}",
                                             "allowUnsafePathPattern": "true"})
        self.provisioner()
        c = self.add_claim("rec")
        self.wait_bound("rec")
        self.assertEqual(self.pv_of(c)["spec"]["hostPath"]["path"],
                         os.path.join(self.pv_dir, "default", "rec"))
        u = self.add_claim("free", cls="unsafe")
        self.wait_bound("free")
        self.assertEqual(self.pv_of(u)["spec"]["hostPath"]["path"],
                         os.path.join(self.pv_dir, "shared-free"))
        self.add_claim("out", cls="escape")
        ev = self.wait_event("out", "ProvisioningFailed")
        self.assertRegex(ev["message"], r"\.\.|outside|leaves")
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "out")))


class LppConfigTest(ProvisionerTestCase):
    tmp_prefix = "hp-lppcfg-"
    fast = LppTest.fast

    def config(self, doc):
        path = os.path.join(self.tmp, "config.json")
        with open(path + ".new", "w") as f:
            json.dump(doc, f)
        os.replace(path + ".new", path)
        return path

    def test_storage_class_configs_and_shared(self):
        a = os.path.join(self.tmp, "a")
        b = os.path.join(self.tmp, "b")
        shared = os.path.join(self.tmp, "nfs")
        for d in (a, b, shared):
            os.makedirs(d)
        cfg = self.config({"storageClassConfigs": {
            "on-a": {"nodePathMap": [{"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES",
                                      "paths": [a]}]},
            "on-b": {"nodePathMap": [{"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES",
                                      "paths": [b]}]},
            "rwx": {"sharedFileSystemPath": shared}}})
        for name in ("on-a", "on-b", "rwx"):
            self.add_class(name)
        self.add_class("unlisted")
        # Two node instances and a leader: the shared class is the leader's alone.
        p = self.provisioner("--config", cfg, "--node-name", "node-a")
        ca = self.add_claim("ca", cls="on-a")
        cb = self.add_claim("cb", cls="on-b")
        cr = self.add_claim("cr", cls="rwx", modes=("ReadWriteMany",))
        for n in ("ca", "cb", "cr"):
            self.wait_bound(n)
        pa, pb, pr = (self.pv("pvc-" + x["metadata"]["uid"]) for x in (ca, cb, cr))
        self.assertTrue(pa["spec"]["hostPath"]["path"].startswith(a + "/"))
        self.assertTrue(pb["spec"]["hostPath"]["path"].startswith(b + "/"))
        self.assertTrue(pr["spec"]["hostPath"]["path"].startswith(shared + "/"))
        self.assertNotIn("nodeAffinity", pr["spec"])  # every node reaches it
        self.assertIn("nodeAffinity", pa["spec"])
        self.add_claim("nowhere", cls="unlisted")
        ev = self.wait_event("nowhere", "ProvisioningFailed")
        self.assertIn("unlisted", ev["message"])
        self.assertNotRegex(p.log, r"has no entry for node")


class TakeOverTest(ProvisionerTestCase):
    """--take-over: local-path-provisioner's volumes (its PVs name this provisioner, since it
    runs under local-path-provisioner's name, but carry none of our annotations) are recorded
    and from then on released as ours; what does not verify is left alone, with an event."""

    tmp_prefix = "hp-takeover-"
    fast = LppTest.fast
    make_pv_dir = True

    def lpp_volume(self, claim_name, dirname, reclaim="Delete", make_dir=True, path=None):
        from harness import PVCS_PATH, PVS_PATH, PROVISIONER, claim, volume
        c = self.api.create(PVCS_PATH % "default", claim("default", claim_name, "local-path",
                                                           volume_name="pvc-" + claim_name))
        path = path or os.path.join(self.pv_dir, dirname)
        if make_dir:
            os.makedirs(path)
            with open(os.path.join(path, "data"), "w") as f:
                f.write("written under local-path-provisioner\n")
        self.api.create(PVS_PATH, volume(
            "pvc-" + claim_name, path=path, cls="local-path", claim_ref=c, reclaim=reclaim,
            node="node-a", host_path_type="DirectoryOrCreate",
            annotations={"pv.kubernetes.io/provisioned-by": PROVISIONER,
                         "local.path.provisioner/selected-node": "node-a"}))
        self.wait_bound(claim_name)
        return c, path

    def test_take_over_then_release(self):
        from harness import PVC_PATH, journal_records
        self.add_class("local-path")
        kept, kept_path = self.lpp_volume("kept", "pvc-kept_default_kept", reclaim="Retain")
        gone, gone_path = self.lpp_volume("gone", "pvc-gone_default_gone")
        out, out_path = self.lpp_volume("outside", None,
                                        path=os.path.join(self.tmp, "elsewhere", "x"))
        miss, miss_path = self.lpp_volume("missing", "pvc-missing_d_m", make_dir=False)
        # Without the flag: left alone.
        p = self.provisioner("--node-name", "node-a")
        p.wait_log(r"caches synced", 20)
        time.sleep(1.0)
        self.assertEqual(journal_records(self.pv_dir), {})
        p.stop()
        p = self.provisioner("--node-name", "node-a", "--take-over")
        p.wait_log(r"took over a volume of local-path-provisioner pv=pvc-gone", 20)
        p.wait_log(r"took over a volume of local-path-provisioner pv=pvc-kept", 20)
        recs = journal_records(self.pv_dir)
        self.assertEqual(recs["pvc-gone"]["path"], "pvc-gone_default_gone")
        self.assertEqual(recs["pvc-gone"]["onDelete"], "delete")
        pv = self.pv("pvc-gone")
        self.assertEqual(pv["metadata"]["annotations"]["hostPathProvisionerIdentity"], "node-a")
        self.assertEqual(pv["metadata"]["annotations"]["hostpath.provisioner/on-delete"],
                         "delete")
        # What does not verify is left alone, said with an event.
        ev = self.wait_event("pvc-outside", "VolumeNotTakenOver", kind="PersistentVolume")
        self.assertIn("under none of this node's configured paths", ev["message"])
        ev = self.wait_event("pvc-missing", "VolumeNotTakenOver", kind="PersistentVolume")
        self.assertIn("does not exist", ev["message"])
        self.assertNotIn("pvc-missing", journal_records(self.pv_dir))
        self.assertTrue(os.path.isfile(os.path.join(out_path, "data")))
        # Released as ours: Delete removes the directory, Retain keeps it.
        self.api.delete(PVC_PATH % ("default", "gone"))
        self.api.delete(PVC_PATH % ("default", "kept"))
        self.wait(lambda: not os.path.exists(gone_path) and
                  not self.api.exists(PV_PATH % "pvc-gone"), 20, "taken-over volume deleted")
        time.sleep(1.0)
        self.assertTrue(os.path.isfile(os.path.join(kept_path, "data")))
        self.assertEqual(self.pv("pvc-kept")["status"]["phase"], "Released")

    def test_switch_of_an_overcommitted_cluster(self):
        """local-path-provisioner accounts nothing: its claims may add up to more than the
        disk. Taken over, they count against the path's budget, so new claims are refused until
        the path is given an overcommit; a claim that takes a path past 90% is warned first."""
        cfg = os.path.join(self.tmp, "config.json")

        def config(**extra):
            e = {"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES", "paths": [self.pv_dir],
                 "capacity": {self.pv_dir: "100Mi"}}
            e.update(extra)
            with open(cfg + ".new", "w") as f:
                json.dump({"nodePathMap": [e]}, f)
            os.replace(cfg + ".new", cfg)

        config()
        self.add_class("local-path")
        for n in ("a", "b", "c"):
            self.lpp_volume(n, "pvc-%s_default_%s" % (n, n))
        for n in ("a", "b", "c"):  # 1Gi each (the harness's size): 3Gi of a 100Mi budget
            self.api.patch(PV_PATH % ("pvc-" + n), {"spec": {"capacity": {"storage": "50Mi"}}})
        p = self.provisioner("--config", cfg, "--node-name", "node-a", "--take-over")
        for n in ("a", "b", "c"):
            p.wait_log(r"took over a volume of local-path-provisioner pv=pvc-%s " % n, 20)
        self.add_claim("new", cls="local-path", size="10Mi")
        ev = self.wait_event("new", "ProvisioningFailed")
        self.assertIn("no room", ev["message"])
        config(overcommit=4)
        p.wait_log(r"overcommit=4", 15)
        self.wait_bound("new", timeout=30)
        # Near the (overcommitted) budget of 400Mi: 150 + 10 + 220 = 380Mi, over 90%.
        self.add_claim("big", cls="local-path", size="220Mi")
        self.wait_bound("big")
        ev = self.wait_event("big", "VolumePathNearlyFull")
        self.assertEqual(ev["type"], "Warning")
        self.assertIn("overcommit", ev["message"])


if __name__ == "__main__":
    unittest.main()
