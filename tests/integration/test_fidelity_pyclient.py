"""Fidelity of the local API server as seen by the official Python client (Debian's
python3-kubernetes), configured from the kubeconfig the server writes. Skips (exit 77)
when the module is not installed."""

import datetime
import json
import os
import shutil
import sys
import tempfile
import threading
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (PV_PATH, PVC_PATH, PVCS_PATH, ApiServer, claim,  # noqa: E402
                     skip_module, storage_class, wait_for)

try:
    import kubernetes
    from kubernetes import client, config, watch
    from kubernetes.client.rest import ApiException
except ImportError:
    kubernetes = None
else:
    RESOURCES = getattr(client, "V1VolumeResourceRequirements", None) or \
        client.V1ResourceRequirements


class PyClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="hp-pyclient-")
        cls.api = ApiServer(cls.tmp).start()
        cfg = client.Configuration()
        config.load_kube_config(config_file=cls.api.kubeconfig, client_configuration=cfg)
        cls.client = client.ApiClient(cfg)
        cls.v1 = client.CoreV1Api(cls.client)
        cls.storage = client.StorageV1Api(cls.client)
        cls.coord = client.CoordinationV1Api(cls.client)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.api.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_list_all_namespaces(self):
        for ns in ("py-a", "py-b"):
            self.api.create(PVCS_PATH % ns, claim(ns, "claim-" + ns, "fast", size="3Gi"))
        got = self.v1.list_persistent_volume_claim_for_all_namespaces()
        names = {(c.metadata.namespace, c.metadata.name) for c in got.items}
        self.assertLessEqual({("py-a", "claim-py-a"), ("py-b", "claim-py-b")}, names)
        self.assertTrue(got.metadata.resource_version.isdigit())
        c = next(c for c in got.items if c.metadata.name == "claim-py-a")
        self.assertIsInstance(c, client.V1PersistentVolumeClaim)
        self.assertEqual(c.spec.resources.requests["storage"], "3Gi")
        self.assertEqual(c.status.phase, "Pending")
        self.assertIsInstance(c.metadata.creation_timestamp, datetime.datetime)
        page = self.v1.list_persistent_volume_claim_for_all_namespaces(limit=1)
        self.assertEqual(len(page.items), 1)
        self.assertTrue(page.metadata._continue)
        rest = self.v1.list_persistent_volume_claim_for_all_namespaces(
            limit=100, _continue=page.metadata._continue)
        self.assertEqual(len(page.items) + len(rest.items), len(got.items))
        sel = self.v1.list_namespaced_persistent_volume_claim(
            "py-b", field_selector="metadata.name=claim-py-b")
        self.assertEqual([c.metadata.name for c in sel.items], ["claim-py-b"])

    def test_watch_resumes_from_resource_version(self):
        rv = self.v1.list_persistent_volume_claim_for_all_namespaces().metadata.resource_version
        self.api.create(PVCS_PATH % "py-w", claim("py-w", "after", "fast"))
        w = watch.Watch()
        seen = []
        timer = threading.Timer(15, w.stop)  # bound the test even if nothing arrives
        timer.start()
        try:
            for ev in w.stream(self.v1.list_persistent_volume_claim_for_all_namespaces,
                               resource_version=rv, timeout_seconds=10):
                seen.append((ev["type"], ev["object"].metadata.name))
                if ev["object"].metadata.name == "after" and ev["type"] == "MODIFIED":
                    break
                if len(seen) == 1:  # a change made while the watch is open also arrives
                    self.api.patch(PVC_PATH % ("py-w", "after"),
                                   {"metadata": {"labels": {"x": "y"}}})
        finally:
            w.stop()
            timer.cancel()
        self.assertEqual(seen[0], ("ADDED", "after"))
        self.assertIn(("MODIFIED", "after"), seen)

    def test_persistent_volume_crud(self):
        pv = client.V1PersistentVolume(
            metadata=client.V1ObjectMeta(name="py-pv", labels={"a": "1"}),
            spec=client.V1PersistentVolumeSpec(
                capacity={"storage": "1Gi"}, access_modes=["ReadWriteOnce"],
                persistent_volume_reclaim_policy="Delete", storage_class_name="fast",
                host_path=client.V1HostPathVolumeSource(path="/tmp/py-pv",
                                                        type="DirectoryOrCreate")))
        created = self.v1.create_persistent_volume(pv)
        self.assertEqual(created.metadata.name, "py-pv")
        self.assertEqual(created.spec.volume_mode, "Filesystem")
        self.assertEqual(created.status.phase, "Pending")
        # The binder stand-in makes it Available; wait so nothing else changes it below.
        wait_for(lambda: self.v1.read_persistent_volume("py-pv").status.phase == "Available",
                 5, what="pv available")
        # A JSON merge patch; this client version has no _content_type, so go through its
        # call_api as the generated method would.
        patched = self.client.call_api(
            "/api/v1/persistentvolumes/{name}", "PATCH", path_params={"name": "py-pv"},
            header_params={"Content-Type": "application/merge-patch+json",
                           "Accept": "application/json"},
            body={"metadata": {"labels": {"a": None, "b": "2"}}},
            response_type="V1PersistentVolume", auth_settings=["BearerToken"],
            _return_http_data_only=True)
        self.assertEqual(patched.metadata.labels, {"b": "2"})
        again = self.v1.read_persistent_volume("py-pv")
        self.assertEqual(again.metadata.labels, {"b": "2"})
        self.assertEqual(again.metadata.resource_version, patched.metadata.resource_version)
        # A strategic-merge patch (the client's default for a dict body).
        self.v1.patch_persistent_volume("py-pv", {"metadata": {"annotations": {"k": "v"}}})
        self.assertEqual(self.api.get(PV_PATH % "py-pv")["metadata"]["annotations"],
                         {"k": "v"})
        patches = self.api.requests(method="PATCH", path_prefix=PV_PATH % "py-pv")
        self.assertEqual([r["content_type"] for r in patches],
                         ["application/merge-patch+json",
                          "application/strategic-merge-patch+json"])
        deleted = self.v1.delete_persistent_volume("py-pv")
        self.assertEqual(deleted.metadata.name, "py-pv")
        wait_for(lambda: not self.api.exists(PV_PATH % "py-pv"), 5, what="pv gone")
        with self.assertRaises(ApiException) as cm:
            self.v1.read_persistent_volume("py-pv")
        self.assertEqual(cm.exception.status, 404)

    def test_not_found_and_conflict(self):
        with self.assertRaises(ApiException) as cm:
            self.v1.read_namespaced_persistent_volume_claim("nope", "default")
        self.assertEqual(cm.exception.status, 404)
        body = json.loads(cm.exception.body)
        self.assertEqual((body["reason"], body["message"]),
                         ("NotFound", 'persistentvolumeclaims "nope" not found'))
        c = self.v1.create_namespaced_persistent_volume_claim(
            "default", client.V1PersistentVolumeClaim(
            metadata=client.V1ObjectMeta(name="py-conflict"),
            spec=client.V1PersistentVolumeClaimSpec(
                access_modes=["ReadWriteOnce"],
                resources=RESOURCES(requests={"storage": "1Gi"}))))
        c.metadata.labels = {"v": "1"}
        self.v1.replace_namespaced_persistent_volume_claim("py-conflict", "default", c)
        c.metadata.labels = {"v": "2"}  # stale resourceVersion
        with self.assertRaises(ApiException) as cm:
            self.v1.replace_namespaced_persistent_volume_claim("py-conflict", "default", c)
        self.assertEqual(cm.exception.status, 409)

    def test_storage_class_lease_and_event(self):
        sc = self.storage.create_storage_class(client.V1StorageClass(
            metadata=client.V1ObjectMeta(name="py-sc"), provisioner="hostpath-provisioner.io",
            parameters={"pathPattern": "{{.PVC.Namespace}}/{{.PVC.Name}}"}))
        self.assertEqual((sc.reclaim_policy, sc.volume_binding_mode), ("Delete", "Immediate"))
        self.assertEqual(self.api.get("/apis/storage.k8s.io/v1/storageclasses/py-sc")
                         ["parameters"], storage_class("x", "y", parameters={
                             "pathPattern": "{{.PVC.Namespace}}/{{.PVC.Name}}"})["parameters"])
        now = datetime.datetime(2024, 5, 1, 10, 0, 0, 123456, tzinfo=datetime.timezone.utc)
        lease = self.coord.create_namespaced_lease("kube-system", client.V1Lease(
            metadata=client.V1ObjectMeta(name="py-lease"),
            spec=client.V1LeaseSpec(holder_identity="me", lease_duration_seconds=15,
                                    acquire_time=now, renew_time=now)))
        self.assertEqual(lease.spec.renew_time, now)
        lease.spec.holder_identity = "you"
        lease = self.coord.replace_namespaced_lease("py-lease", "kube-system", lease)
        self.assertEqual(lease.spec.holder_identity, "you")
        ev = self.v1.create_namespaced_event("default", client.CoreV1Event(
            metadata=client.V1ObjectMeta(generate_name="py-claim."),
            involved_object=client.V1ObjectReference(kind="PersistentVolumeClaim",
                                                     namespace="default", name="py-claim"),
            reason="ProvisioningSucceeded", message="done", type="Normal",
            source=client.V1EventSource(component="hostpath-provisioner.io"),
            first_timestamp=now, last_timestamp=now, count=1))
        self.assertTrue(ev.metadata.name.startswith("py-claim."))
        evs = self.v1.list_namespaced_event("default",
                                            field_selector="involvedObject.name=py-claim")
        self.assertEqual([e.reason for e in evs.items], ["ProvisioningSucceeded"])
        self.assertEqual(evs.items[0].first_timestamp, now.replace(microsecond=0))


if __name__ == "__main__":
    if kubernetes is None:
        skip_module("the Python kubernetes client (python3-kubernetes) is not installed")
    unittest.main()
