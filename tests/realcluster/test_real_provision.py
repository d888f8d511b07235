#!/usr/bin/env python3
"""Provisioning against a real control plane: kube-apiserver's admission and validation,
kube-controller-manager's PV binder and protection controllers, kube-scheduler.

Immediate and WaitForFirstConsumer classes (the scheduler sets the selected node when a pod
using the claim is created), reclaim Retain/Delete and onDelete retain/archive, foreign
classes, identity, --add-finalizer with the real pv-protection finalizer.
"""

import os
import re
import stat
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from realharness import (FINALIZER, IDENTITY_ANN, POD_PATH, PV_PATH, PVC_PATH,  # noqa: E402
                         SELECTED, RealClusterTestCase, claim, require_cluster, wait_for)


def setUpModule():
    require_cluster()


class ProvisionTest(RealClusterTestCase):
    def test_immediate_provision_bind_delete(self):
        self.add_class(parameters={"mode": "0750"}, mount_options=["noatime"])
        self.provisioner("--node-name", "node-a")
        c = self.add_claim("data", size="3Gi", modes=["ReadWriteOnce", "ReadOnlyMany"])
        uid = c["metadata"]["uid"]
        name = "pvc-" + uid
        bound = self.wait_bound("data")
        self.assertEqual(bound["spec"]["volumeName"], name)
        # The real binder's marks on the claim: the provisioner annotations it set before we
        # provisioned, and bind-completed.
        ann = bound["metadata"]["annotations"]
        self.assertEqual(ann.get("volume.kubernetes.io/storage-provisioner"), self.prov_name)
        self.assertEqual(ann.get("volume.beta.kubernetes.io/storage-provisioner"),
                         self.prov_name)
        self.assertEqual(ann.get("pv.kubernetes.io/bind-completed"), "yes")
        self.assertEqual(bound["status"]["capacity"]["storage"], "3Gi")
        self.assertIn("kubernetes.io/pvc-protection", bound["metadata"]["finalizers"])

        pv = self.pv(name)
        meta, spec = pv["metadata"], pv["spec"]
        self.assertEqual(meta["annotations"]["pv.kubernetes.io/provisioned-by"],
                         self.prov_name)
        self.assertEqual(meta["annotations"][IDENTITY_ANN], "node-a")
        self.assertIn("kubernetes.io/pv-protection", meta["finalizers"])
        ref = spec["claimRef"]
        self.assertEqual((ref["kind"], ref["namespace"], ref["name"], ref["uid"]),
                         ("PersistentVolumeClaim", self.ns, "data", uid))
        self.assertEqual(spec["capacity"]["storage"], "3Gi")
        self.assertEqual(spec["accessModes"], ["ReadWriteOnce", "ReadOnlyMany"])
        self.assertEqual(spec["storageClassName"], self.cls_name())
        self.assertEqual(spec["persistentVolumeReclaimPolicy"], "Delete")
        self.assertEqual(spec["mountOptions"], ["noatime"])
        self.assertEqual(spec["volumeMode"], "Filesystem")
        path = os.path.join(self.pv_dir, "%s-data-%s" % (self.ns, name))
        self.assertEqual(spec["hostPath"], {"path": path, "type": "DirectoryOrCreate"})
        self.assertEqual(spec["nodeAffinity"]["required"]["nodeSelectorTerms"][0]
                         ["matchExpressions"], [{"key": "kubernetes.io/hostname",
                                                 "operator": "In", "values": ["node-a"]}])
        self.assertEqual(pv["status"]["phase"], "Bound")
        st = os.lstat(path)
        self.assertTrue(stat.S_ISDIR(st.st_mode))
        self.assertEqual(stat.S_IMODE(st.st_mode), 0o750)
        ev = self.wait_event("data", "ProvisioningSucceeded")
        self.assertEqual(ev["type"], "Normal")
        self.assertIn(name, ev["message"])
        self.assertEqual(ev["involvedObject"]["uid"], uid)
        # The real binder announced the external provisioner first.
        self.wait_event("data", "ExternalProvisioning", component="persistentvolume-controller")

        with open(os.path.join(path, "file"), "w") as f:
            f.write("data")
        self.api.delete(PVC_PATH % (self.ns, "data"))
        self.wait_gone(PV_PATH % name)
        self.assertFalse(os.path.lexists(path))
        self.wait(lambda: re.search(r"deleted volume", self.prov.log), 10,
                  "the 'deleted volume' line")

    def test_wait_for_first_consumer_scheduler_selects_the_node(self):
        self.add_class(binding="WaitForFirstConsumer")
        self.provisioner()
        c = self.add_claim("wffc")
        # Nothing happens until a pod uses it; the binder says so.
        self.wait_event("wffc", "WaitForFirstConsumer", component="persistentvolume-controller")
        time.sleep(1.0)
        self.assertEqual(self.phase("wffc"), "Pending")
        self.assertEqual(self.my_pvs(), [])
        self.assertEqual(self.events_for("wffc"), [])

        self.add_pod("user", ["wffc"], node="node-b")
        bound = self.wait_bound("wffc")
        self.assertEqual(bound["metadata"]["annotations"].get(SELECTED), "node-b")
        pv = self.pv("pvc-" + c["metadata"]["uid"])
        self.assertEqual(pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]
                         ["matchExpressions"][0]["values"], ["node-b"])
        # The scheduler binds the pod once the volume is bound (PreBind waits for it).
        self.wait(lambda: self.api.get(POD_PATH % (self.ns, "user"))["spec"].get("nodeName")
                  == "node-b", 60, "pod bound to node-b")

        # pvc-protection: the claim stays while the pod exists.
        self.api.delete(PVC_PATH % (self.ns, "wffc"))
        time.sleep(1.5)
        self.assertTrue(self.api.exists(PVC_PATH % (self.ns, "wffc")))
        self.assertTrue(self.api.exists(PV_PATH % pv["metadata"]["name"]))
        self.delete_pod("user")
        self.wait_gone(PV_PATH % pv["metadata"]["name"])
        self.assertFalse(os.path.lexists(pv["spec"]["hostPath"]["path"]))

    def test_scheduler_picks_a_node_when_the_pod_does_not(self):
        self.add_class(binding="WaitForFirstConsumer")
        self.provisioner()
        self.add_claim("any")
        self.add_pod("p", ["any"])
        bound = self.wait_bound("any")
        node = bound["metadata"]["annotations"][SELECTED]
        self.assertIn(node, self.cluster.nodes)
        self.wait(lambda: self.api.get(POD_PATH % (self.ns, "p"))["spec"].get("nodeName")
                  == node, 60, "pod bound to " + node)
        pv = self.pv(bound["spec"]["volumeName"])
        self.assertEqual(pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]
                         ["matchExpressions"][0]["values"], [node])
        self.delete_pod("p")

    def test_retain_keeps_directory_and_pv_released(self):
        self.add_class(reclaim="Retain")
        self.provisioner()
        c = self.add_claim("kept")
        self.wait_bound("kept")
        name = "pvc-" + c["metadata"]["uid"]
        pv = self.pv(name)
        self.assertEqual(pv["spec"]["persistentVolumeReclaimPolicy"], "Retain")
        path = pv["spec"]["hostPath"]["path"]
        self.api.delete(PVC_PATH % (self.ns, "kept"))
        self.wait(lambda: self.pv(name)["status"]["phase"] == "Released", 30, "PV Released")
        # A later claim is served: the provisioner has seen the Released PV and kept it.
        self.add_claim("later")
        self.wait_bound("later")
        time.sleep(1.0)
        self.assertEqual(self.pv(name)["status"]["phase"], "Released")
        self.assertTrue(os.path.isdir(path))

    def test_on_delete_archive_and_retain(self):
        self.add_class("arch", parameters={"onDelete": "archive"})
        self.add_class("keep", parameters={"onDelete": "retain"})
        self.provisioner()
        a = self.add_claim("a", cls="arch")
        k = self.add_claim("k", cls="keep")
        self.wait_bound("a")
        self.wait_bound("k")
        pa, pk = self.pv("pvc-" + a["metadata"]["uid"]), self.pv("pvc-" + k["metadata"]["uid"])
        path_a, path_k = pa["spec"]["hostPath"]["path"], pk["spec"]["hostPath"]["path"]
        with open(os.path.join(path_a, "keep"), "w") as f:
            f.write("x")
        self.api.delete(PVC_PATH % (self.ns, "a"))
        self.api.delete(PVC_PATH % (self.ns, "k"))
        self.wait_gone(PV_PATH % pa["metadata"]["name"])
        self.wait_gone(PV_PATH % pk["metadata"]["name"])
        archived = os.path.join(os.path.dirname(path_a), "archived-" + os.path.basename(path_a))
        self.assertFalse(os.path.lexists(path_a))
        self.assertTrue(os.path.isfile(os.path.join(archived, "keep")))
        self.assertTrue(os.path.isdir(path_k))

    def test_foreign_claims_untouched(self):
        self.add_class()
        self.add_class("other", provisioner="example.org/other")
        self.provisioner()
        self.add_claim("theirs", cls="other")
        self.add_claim("noclass", cls="")
        self.add_claim("missing", cls="does-not-exist")
        self.add_claim("ours")
        self.wait_bound("ours")
        time.sleep(1.0)
        self.assertEqual([p["spec"]["claimRef"]["name"] for p in self.my_pvs()], ["ours"])
        for n in ("theirs", "noclass", "missing"):
            self.assertEqual(self.events_for(n), [], n)
            self.assertEqual(self.phase(n), "Pending", n)
        # The real binder hands "theirs" to example.org/other.
        c = self.claim_of("theirs")
        self.assertEqual(c["metadata"]["annotations"].get(
            "volume.kubernetes.io/storage-provisioner"), "example.org/other")

    def test_identity_owns_deletion(self):
        self.add_class()
        first = self.provisioner("--identity", "disk-1")
        c = self.add_claim("x")
        self.wait_bound("x")
        name = "pvc-" + c["metadata"]["uid"]
        pv = self.pv(name)
        self.assertEqual(pv["metadata"]["annotations"][IDENTITY_ANN], "disk-1")
        self.assertEqual(first.stop(), 0)
        # Another identity does not delete disk-1's volume.
        self.provisioner("--identity", "disk-2")
        self.api.delete(PVC_PATH % (self.ns, "x"))
        self.wait(lambda: self.pv(name)["status"]["phase"] == "Released", 30, "Released")
        c2 = self.add_claim("y")
        self.wait_bound("y")
        self.api.delete(PVC_PATH % (self.ns, "y"))
        self.wait_gone(PV_PATH % ("pvc-" + c2["metadata"]["uid"]))
        self.assertTrue(self.api.exists(PV_PATH % name))
        self.assertTrue(os.path.isdir(pv["spec"]["hostPath"]["path"]))
        # disk-1 comes back and deletes its own.
        self.assertEqual(self.prov.stop(), 0)
        self.provisioner("--identity", "disk-1")
        self.wait_gone(PV_PATH % name)
        self.assertFalse(os.path.lexists(pv["spec"]["hostPath"]["path"]))

    def test_add_finalizer_with_real_pv_protection(self):
        self.add_class()
        self.provisioner("--add-finalizer")
        c = self.add_claim("fin")
        self.wait_bound("fin")
        name = "pvc-" + c["metadata"]["uid"]
        self.wait(lambda: FINALIZER in self.pv(name)["metadata"].get("finalizers", []), 30,
                  "our finalizer on the PV")
        fins = self.pv(name)["metadata"]["finalizers"]
        self.assertIn("kubernetes.io/pv-protection", fins)
        path = self.pv(name)["spec"]["hostPath"]["path"]
        # Deleting the PV first: it stays (Terminating) and so does the data.
        self.api.delete(PV_PATH % name)
        time.sleep(1.5)
        pv = self.pv(name)
        self.assertTrue(pv["metadata"].get("deletionTimestamp"))
        self.assertTrue(os.path.isdir(path), "data removed while the claim still exists")
        self.assertEqual(self.phase("fin"), "Bound")
        self.api.delete(PVC_PATH % (self.ns, "fin"))
        self.wait_gone(PV_PATH % name)
        self.assertFalse(os.path.lexists(path))

    def test_nul_in_an_annotation_stops_nothing(self):
        # Regression: kube-apiserver stores "\u0000" in an annotation value; the provisioner's
        # JSON reader refused the whole claim list for it, relisted for ever and served no
        # claim at all, in any namespace.
        self.add_class()
        other = "%s-x" % self.ns[:30]
        self.make_namespace(other)
        self.api.create("/api/v1/namespaces/%s/persistentvolumeclaims" % other,
                        claim(other, "hostile", None,
                              annotations={"note": "a\u0000b"}))
        self.assertEqual(self.claim_of("hostile", other)["metadata"]["annotations"]["note"],
                         "a\u0000b")
        p = self.provisioner()
        nul = self.add_claim("nul", annotations={"note": "x\u0000y"})
        self.add_claim("plain")
        self.wait_bound("plain")
        self.wait_bound("nul")
        self.assertEqual(self.pv("pvc-" + nul["metadata"]["uid"])["spec"]["claimRef"]["name"],
                         "nul")
        self.assertNotRegex(p.log, r"watch: .*(failed|not a list|malformed)")

    # A PV with "\u0000" in an annotation (found by the realcluster tier): our finalizer
    # still comes off and the PV goes.
    def test_add_finalizer_pv_with_a_nul_annotation_is_deleted(self):
        self.add_class()
        self.provisioner("--add-finalizer")
        c = self.add_claim("nulpv")
        self.wait_bound("nulpv")
        name = "pvc-" + c["metadata"]["uid"]
        path = self.pv(name)["spec"]["hostPath"]["path"]
        self.api.patch(PV_PATH % name, {"metadata": {"annotations": {"note": "a\u0000b"}}})
        self.api.delete(PVC_PATH % (self.ns, "nulpv"))
        self.wait(lambda: not os.path.lexists(path), 30, "directory removed")
        wait_for(lambda: self.gone(PV_PATH % name), 15, what="PV deleted")

    def test_refused_claim_event(self):
        self.add_class(parameters={"sizeLimit": "1Gi"})
        self.provisioner()
        self.add_claim("u")
        ev = self.wait_event("u", "ProvisioningFailed")
        self.assertEqual(ev["type"], "Warning")
        self.assertIn('unknown StorageClass parameter "sizeLimit"', ev["message"])
        self.assertEqual(self.my_pvs(), [])


if __name__ == "__main__":
    unittest.main(verbosity=2)
