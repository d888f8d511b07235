#!/usr/bin/env python3
"""Data safety and capacity against a real control plane: online expansion through the real
admission (a class that allows it; shrinking refused by kube-apiserver itself) and the real
expand controller, two claims that render one directory (the second refused, the first's
data intact), and a class deleted before its claim (onDelete: retain keeps the data).
"""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from realharness import PV_PATH, PVC_PATH, RealClusterTestCase, require_cluster  # noqa: E402

SCS = "/apis/storage.k8s.io/v1/storageclasses/%s"


def setUpModule():
    require_cluster()


class SafetyTest(RealClusterTestCase):
    def test_online_expansion(self):
        self.add_class(allow_expansion=True)
        self.provisioner("--node-name", "node-a")
        c = self.add_claim("grow", size="1Gi")
        self.wait_bound("grow")
        name = "pvc-" + c["metadata"]["uid"]
        path = self.claim_of("grow")["spec"]["volumeName"]
        self.assertEqual(path, name)
        self.api.patch(PVC_PATH % (self.ns, "grow"),
                       {"spec": {"resources": {"requests": {"storage": "2Gi"}}}})
        self.wait(lambda: self.pv(name)["spec"]["capacity"]["storage"] == "2Gi", 30,
                  "PV capacity 2Gi")
        self.wait(lambda: ((self.claim_of("grow").get("status") or {}).get("capacity") or {})
                  .get("storage") == "2Gi", 30, "claim status capacity 2Gi")
        self.wait_event("grow", "VolumeResizeSuccessful")
        # The real API server took our status patches (strategic merge): marked while resizing
        # (the upstream e2e specs wait on the Resizing condition), done now.
        st = self.claim_of("grow")["status"]
        self.assertEqual(st.get("allocatedResources"), {"storage": "2Gi"}, st)
        self.assertNotIn("allocatedResourceStatuses", st)
        self.assertFalse([x for x in st.get("conditions") or [] if x["type"] == "Resizing"], st)
        # The real admission refuses shrinking: nothing for us to do, and nothing done.
        r = self.api.request("PATCH", PVC_PATH % (self.ns, "grow"),
                             {"spec": {"resources": {"requests": {"storage": "1Gi"}}}},
                             content_type="application/merge-patch+json")
        self.assertEqual(r.status, 422, r.body)
        self.assertIn("field can not be less than", str(r.body))
        self.assertEqual(self.pv(name)["spec"]["capacity"]["storage"], "2Gi")

    def test_expansion_refused_by_a_class_without_it(self):
        self.add_class()
        self.provisioner("--node-name", "node-a")
        self.add_claim("fixed", size="1Gi")
        self.wait_bound("fixed")
        r = self.api.request("PATCH", PVC_PATH % (self.ns, "fixed"),
                             {"spec": {"resources": {"requests": {"storage": "2Gi"}}}},
                             content_type="application/merge-patch+json")
        self.assertEqual(r.status, 403, r.body)
        self.assertIn("only dynamically provisioned pvc can be resized and the storageclass "
                      "that provisions the pvc must support resize", str(r.body))

    def test_two_claims_one_directory(self):
        # team-b/c-data and team/b-c-data would both render "team-b-c-data": here one
        # namespace, two names that render alike through an annotation.
        self.add_class(parameters={"pathPattern": "{{.PVC.Annotations.dir}}"})
        self.provisioner("--node-name", "node-a")
        self.add_claim("first", annotations={"dir": "shared"})
        self.wait_bound("first")
        path = os.path.join(self.pv_dir, "shared")
        with open(os.path.join(path, "data"), "w") as f:
            f.write("first's")
        self.add_claim("second", annotations={"dir": "shared"})
        ev = self.wait_event("second", "ProvisioningFailed")
        self.assertIn("shared", ev["message"])
        self.assertEqual(self.claim_of("second")["status"]["phase"], "Pending")
        self.api.delete(PVC_PATH % (self.ns, "second"))
        self.wait_gone(PVC_PATH % (self.ns, "second"))
        with open(os.path.join(path, "data")) as f:
            self.assertEqual(f.read(), "first's")
        self.assertEqual(self.claim_of("first")["status"]["phase"], "Bound")

    def test_class_deleted_before_its_claim_keeps_retained_data(self):
        self.add_class(parameters={"onDelete": "retain"})
        self.provisioner("--node-name", "node-a")
        c = self.add_claim("kept")
        self.wait_bound("kept")
        name = "pvc-" + c["metadata"]["uid"]
        path = self.pv(name)["spec"]["hostPath"]["path"]
        with open(os.path.join(path, "data"), "w") as f:
            f.write("keep me")
        self.api.delete(SCS % self.cls_name())
        self.api.delete(PVC_PATH % (self.ns, "kept"))
        self.wait_gone(PV_PATH % name)
        with open(os.path.join(path, "data")) as f:
            self.assertEqual(f.read(), "keep me")


if __name__ == "__main__":
    unittest.main(verbosity=2)
