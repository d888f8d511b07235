"""Tests of the local API server itself (apiserver.py through harness.py): the behaviour
the provisioner's integration tests rely on, checked against kube-apiserver's wording."""

import gzip
import http.client
import json
import os
import shutil
import socket
import ssl
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (ALL_PVCS_PATH, EVENTS_PATH, NS_PATH, NSS_PATH,  # noqa: E402
                     PODS_PATH, PV_PATH, PVC_PATH, PVCS_PATH, PVS_PATH, SC_PATH, SCS_PATH,
                     ApiError, ApiServer, Client, claim, namespace, pod, storage_class,
                     volume, wait_for)

DNS1123_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex "
    "used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")


class ServerTest(unittest.TestCase):
    """One server for the class, binder off unless a test turns it on."""

    binder = False
    protection = False

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="hp-apisrv-")
        cls.api = ApiServer(cls.tmp, binder=cls.binder, protection=cls.protection,
                            bookmark_interval=0.2).start()

    @classmethod
    def tearDownClass(cls):
        cls.api.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def setUp(self):
        self.api.clear_faults()

    def assertStatus(self, err, code, reason, message=None, kind=None, name=None):
        self.assertIsInstance(err, ApiError)
        self.assertEqual(err.status, code, err.body)
        b = err.body
        self.assertEqual(b["kind"], "Status")
        self.assertEqual(b["apiVersion"], "v1")
        if code != 410:
            self.assertEqual(b["metadata"], {})
        self.assertEqual(b["status"], "Failure")
        self.assertEqual(b["reason"], reason)
        self.assertEqual(b["code"], code)
        if message is not None:
            self.assertEqual(b["message"], message)
        if kind is not None:
            self.assertEqual(b["details"]["kind"], kind)
        if name is not None:
            self.assertEqual(b["details"]["name"], name)

    def raises(self, fn, *a, **kw):
        with self.assertRaises(ApiError) as cm:
            fn(*a, **kw)
        return cm.exception


class TestBasics(ServerTest):
    def test_auth(self):
        c = Client(self.api.url, None, self.api.ca)
        self.addCleanup(c.close)
        err = self.raises(c.get, PVCS_PATH % "default")
        self.assertStatus(err, 401, "Unauthorized", "Unauthorized")
        bad = Client(self.api.url, "wrong", self.api.ca)
        self.addCleanup(bad.close)
        err = self.raises(bad.get, "/api/v1")
        self.assertEqual(err.status, 401)
        r = c.request("GET", "/healthz")
        self.assertEqual((r.status, r.body), (200, "ok"))
        self.assertEqual(c.request("GET", "/readyz").status, 200)
        self.assertEqual(c.get("/version")["gitVersion"][:5], "v1.32")
        # A client certificate signed by the CA authenticates without a token.
        crt, key = self.api.mint_client_cert("alice")
        cc = Client(self.api.url, None, self.api.ca, cert=crt, key=key)
        self.addCleanup(cc.close)
        self.assertEqual(cc.get("/api/v1")["groupVersion"], "v1")
        self.assertEqual(self.api.requests(path_prefix="/api/v1")[-1]["user"], "alice")
        # A rotated token: the new one works, the old one does not.
        self.api.set_tokens(["new-token"])
        try:
            c1 = Client(self.api.url, "new-token", self.api.ca)
            self.addCleanup(c1.close)
            self.assertEqual(c1.get("/api/v1")["kind"], "APIResourceList")
            c2 = Client(self.api.url, self.api.token, self.api.ca)
            self.addCleanup(c2.close)
            self.assertEqual(self.raises(c2.get, "/api/v1").status, 401)
        finally:
            self.api.set_tokens([self.api.token])

    def test_apf_headers(self):
        """Every classified response carries the matched FlowSchema and priority level UIDs,
        as with API Priority and Fairness on; --apf off (or /admin/config) removes them."""
        fs_h, pl_h = "X-Kubernetes-Pf-Flowschema-Uid", "X-Kubernetes-Pf-Prioritylevel-Uid"
        cfg = self.api.admin("GET", "config")
        self.assertTrue(cfg["apf"])
        fss, pls = cfg["apf_uids"]["flowschemas"], cfg["apf_uids"]["prioritylevelconfigurations"]
        self.assertEqual(len(set(fss.values()) | set(pls.values())), len(fss) + len(pls))
        # The bearer token's user is in system:masters: exempt, for reads, writes, errors and
        # watches alike.
        for r in (self.api.request("GET", PVS_PATH),
                  self.api.request("POST", EVENTS_PATH % "default", {"bad": 1}),
                  self.api.request("GET", PV_PATH % "missing")):
            self.assertEqual(r.headers.get(fs_h), fss["exempt"], r)
            self.assertEqual(r.headers.get(pl_h), pls["exempt"], r)
        with self.api.watch(PVS_PATH, timeout=5, timeoutSeconds=1) as w:
            self.assertEqual(w.status, 200)
            self.assertEqual(w.resp.getheader(fs_h), fss["exempt"])
        # Health probes are exempt through the probes FlowSchema; a request that fails
        # authentication never reaches the APF filter.
        r = self.api.request("GET", "/readyz")
        self.assertEqual((r.headers.get(fs_h), r.headers.get(pl_h)),
                         (fss["probes"], pls["exempt"]))
        anon = Client(self.api.url, token="wrong", ca=self.api.ca)
        try:
            r = anon.request("GET", PVS_PATH)
            self.assertEqual(r.status, 401)
            self.assertNotIn(fs_h, r.headers)
        finally:
            anon.close()
        # A user outside system:masters (a client certificate) is global-default.
        cert, key = self.api.mint_client_cert("jane")
        jane = Client(self.api.url, ca=self.api.ca, cert=cert, key=key)
        try:
            r = jane.request("GET", PVS_PATH)
            self.assertEqual((r.headers.get(fs_h), r.headers.get(pl_h)),
                             (fss["global-default"], pls["global-default"]))
        finally:
            jane.close()
        # Switched off: no response carries them; on again: the same UIDs.
        self.assertFalse(self.api.set_apf(False)["apf"])
        try:
            for r in (self.api.request("GET", PVS_PATH), self.api.request("GET", "/healthz")):
                self.assertNotIn(fs_h, r.headers)
                self.assertNotIn(pl_h, r.headers)
        finally:
            self.assertEqual(self.api.set_apf(True)["apf_uids"], cfg["apf_uids"])
        self.assertEqual(self.api.request("GET", PVS_PATH).headers.get(fs_h), fss["exempt"])

    def test_apf_off_at_start(self):
        with tempfile.TemporaryDirectory(prefix="hp-apisrv-") as tmp, \
                ApiServer(tmp, apf=False) as api:
            r = api.request("GET", PVS_PATH)
            self.assertEqual(r.status, 200)
            self.assertNotIn("X-Kubernetes-Pf-Flowschema-Uid", r.headers)
            self.assertFalse(api.admin("GET", "config")["apf"])

    def test_priority_and_fairness_headers(self):
        # As kube-apiserver with API Priority and Fairness: every answer to an authenticated
        # request (error or not, watches too) and to an anonymous probe names its FlowSchema
        # and PriorityLevel by UID; a 401 names none. Same class, same UIDs.
        # Go's canonical spelling, as kube-apiserver writes them.
        fs, pl = "X-Kubernetes-Pf-Flowschema-Uid", "X-Kubernetes-Pf-Prioritylevel-Uid"
        anon = Client(self.api.url, None, self.api.ca)
        self.addCleanup(anon.close)
        r401 = anon.request("GET", PVCS_PATH % "default")
        self.assertEqual(r401.status, 401)
        self.assertNotIn(fs, r401.headers)
        admin = [self.api.request("GET", PVCS_PATH % "default"),
                 self.api.request("GET", PV_PATH % "missing")]
        self.assertEqual([r.status for r in admin], [200, 404])
        probe = anon.request("GET", "/readyz")
        version = anon.request("GET", "/version")
        crt, key = self.api.mint_client_cert("system:serviceaccount:ns:sa",
                                             orgs=("system:serviceaccounts",), name="apf-sa")
        sa = Client(self.api.url, None, self.api.ca, cert=crt, key=key)
        self.addCleanup(sa.close)
        by_sa = sa.request("GET", PVCS_PATH % "default")
        crt, key = self.api.mint_client_cert("bob", name="apf-bob")
        bob = Client(self.api.url, None, self.api.ca, cert=crt, key=key)
        self.addCleanup(bob.close)
        by_bob = bob.request("GET", PVCS_PATH % "default")
        uids = [(r.headers.get(fs), r.headers.get(pl))
                for r in admin + [probe, version, by_sa, by_bob]]
        for u in uids:
            self.assertRegex(u[0] or "", r"^[0-9a-f-]{36}$")
            self.assertRegex(u[1] or "", r"^[0-9a-f-]{36}$")
        exempt, probes, glob, sas = uids[0], uids[2], uids[3], uids[4]
        self.assertEqual(uids[1], exempt)               # errors too
        self.assertEqual(probes[1], exempt[1])          # probes: exempt priority level
        self.assertNotEqual(probes[0], exempt[0])
        self.assertEqual(uids[5], glob)                 # anyone else: global-default
        self.assertEqual(len({exempt[0], probes[0], glob[0], sas[0]}), 4)
        self.assertEqual(len({exempt[1], glob[1], sas[1]}), 3)
        with self.api.watch(PVS_PATH, timeoutSeconds="1") as w:
            self.assertEqual(w.resp.getheader(fs), exempt[0])
        # The admin API is not Kubernetes: no APF headers there.
        self.assertNotIn(fs, self.api.request("GET", "/admin/state").headers)

    def test_discovery(self):
        self.assertEqual(self.api.get("/api")["versions"], ["v1"])
        v1 = {r["name"]: r for r in self.api.get("/api/v1")["resources"]}
        self.assertEqual(v1["persistentvolumeclaims"]["shortNames"], ["pvc"])
        self.assertEqual(v1["persistentvolumes"]["shortNames"], ["pv"])
        self.assertFalse(v1["persistentvolumes"]["namespaced"])
        self.assertIn("watch", v1["events"]["verbs"])
        self.assertIn("persistentvolumeclaims/status", v1)
        groups = {g["name"] for g in self.api.get("/apis")["groups"]}
        self.assertEqual(groups, {"apps", "rbac.authorization.k8s.io", "storage.k8s.io",
                                  "coordination.k8s.io"})
        storage = {r["name"]: r for r in self.api.get("/apis/storage.k8s.io/v1")["resources"]}
        self.assertEqual(storage["storageclasses"]["kind"], "StorageClass")
        # Capacity-aware scheduling's kinds: one cluster-wide, one per namespace.
        self.assertEqual((storage["csidrivers"]["kind"], storage["csidrivers"]["namespaced"]),
                         ("CSIDriver", False))
        self.assertEqual((storage["csistoragecapacities"]["kind"],
                          storage["csistoragecapacities"]["namespaced"]),
                         ("CSIStorageCapacity", True))
        self.assertEqual(sorted(storage), ["csidrivers", "csistoragecapacities",
                                           "storageclasses"])
        self.assertEqual(self.api.get("/apis/coordination.k8s.io")["preferredVersion"]
                         ["groupVersion"], "coordination.k8s.io/v1")
        root = self.api.get("/openapi/v3")["paths"]
        doc = self.api.client.request("GET", root["api/v1"]["serverRelativeURL"])
        self.assertEqual(doc.status, 200)
        self.assertIn("/api/v1/namespaces/{namespace}/persistentvolumeclaims/{name}",
                      doc.body["paths"])
        self.assertEqual(self.api.request("GET", "/openapi/v2").status, 404)
        err = self.raises(self.api.get, "/api/v1/widgets")
        self.assertStatus(err, 404, "NotFound", "the server could not find the requested "
                          "resource")

    def test_keepalive_and_framing(self):
        conn = http.client.HTTPSConnection("127.0.0.1", self.api.port, timeout=10,
                                           context=ssl.create_default_context(
                                               cafile=self.api.ca))
        h = {"Authorization": "Bearer " + self.api.token}
        for _ in range(5):
            conn.request("GET", "/api/v1/namespaces", headers=h)
            r = conn.getresponse()
            body = r.read()
            self.assertEqual(r.status, 200)
            self.assertEqual(r.getheader("Content-Length"), str(len(body)))
            self.assertEqual(r.version, 11)
            self.assertFalse(r.will_close)
        sock = conn.sock
        conn.request("GET", "/api/v1/nope", headers=h)
        r = conn.getresponse()
        r.read()
        self.assertIs(conn.sock, sock)  # errors keep the connection open too
        conn.close()

    def test_bad_requests_do_not_kill_the_server(self):
        ctx = ssl.create_default_context(cafile=self.api.ca)
        for junk in (b"GARBAGE\r\n\r\n", b"GET / HTTP/1.1\r\nContent-Length: x\r\n\r\n",
                     b"\x00\xff" * 100):
            with socket.create_connection(("127.0.0.1", self.api.port), timeout=5) as s:
                with ctx.wrap_socket(s, server_hostname="127.0.0.1") as t:
                    t.sendall(junk)
                    try:
                        t.recv(100)
                    except (OSError, ssl.SSLError):
                        pass
        with socket.create_connection(("127.0.0.1", self.api.port), timeout=5) as s:
            s.sendall(b"not tls at all\r\n\r\n")  # a failed handshake
        r = self.api.request("POST", PVCS_PATH % "default", body=b"{not json",
                             content_type="application/json")
        self.assertEqual(r.status, 400)
        self.assertEqual(r.body["reason"], "BadRequest")
        self.assertTrue(r.body["message"].startswith(
            "the object provided is unrecognized (must be of type PersistentVolumeClaim): "
            "couldn't get version/kind; json parse error"), r.body["message"])
        self.assertEqual(self.api.get("/api/v1")["kind"], "APIResourceList")


class TestObjects(ServerTest):
    def test_nul_in_annotation_value_round_trips(self):
        """The real API server accepts \\u0000 in annotation values (validation checks keys and
        total size only) and serves it back escaped in lists and watch events."""
        w = self.api.watch(PVCS_PATH % "nul", timeout=10)
        c = self.api.create(PVCS_PATH % "nul", claim("nul", "n", "fast",
                                                     annotations={"note": "a\u0000b"}))
        self.assertEqual(c["metadata"]["annotations"]["note"], "a\u0000b")
        raw = self.api.request("GET", PVCS_PATH % "nul").raw
        self.assertIn(b'"a\\u0000b"', raw)
        ev = w.next(timeout=5)
        self.assertEqual(ev["object"]["metadata"]["annotations"]["note"], "a\u0000b")
        w.close()

    def test_create_defaults_and_shape(self):
        c = self.api.create(PVCS_PATH % "objs", claim("objs", "defaults", "fast",
                                                      size="1024Mi"))
        self.assertEqual(c["kind"], "PersistentVolumeClaim")
        self.assertEqual(c["apiVersion"], "v1")
        m = c["metadata"]
        self.assertRegex(m["uid"], r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-"
                                   r"[0-9a-f]{12}$")
        self.assertRegex(m["creationTimestamp"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
        self.assertRegex(m["resourceVersion"], r"^[1-9][0-9]*$")
        self.assertNotIn("generation", m)
        self.assertEqual(c["status"], {"phase": "Pending"})
        self.assertEqual(c["spec"]["volumeMode"], "Filesystem")
        self.assertEqual(c["spec"]["resources"]["requests"]["storage"], "1Gi")
        self.assertEqual(m["managedFields"][0]["manager"], "hp-test-harness")
        # The namespace was created on first use.
        self.assertEqual(self.api.get(NS_PATH % "objs")["status"]["phase"], "Active")
        pv = self.api.create(PVS_PATH, volume("defaults-pv", size="2048Mi"))
        self.assertEqual(pv["spec"]["persistentVolumeReclaimPolicy"], "Retain")
        self.assertEqual(pv["spec"]["volumeMode"], "Filesystem")
        self.assertEqual(pv["spec"]["hostPath"], {"path": "/tmp/pv", "type": ""})
        self.assertEqual(pv["spec"]["capacity"]["storage"], "2Gi")
        self.assertEqual(pv["status"]["phase"], "Pending")
        sc = self.api.create(SCS_PATH, {"apiVersion": "storage.k8s.io/v1",
                                        "kind": "StorageClass", "metadata": {"name": "objs-sc"},
                                        "provisioner": "hostpath-provisioner.io"})
        self.assertEqual((sc["reclaimPolicy"], sc["volumeBindingMode"]), ("Delete", "Immediate"))
        # resourceVersions are one global counter.
        self.assertGreater(int(sc["metadata"]["resourceVersion"]),
                           int(pv["metadata"]["resourceVersion"]))
        # The list's items carry no kind/apiVersion, like the real server's JSON.
        lst = self.api.list(PVCS_PATH % "objs")
        self.assertEqual((lst["kind"], lst["apiVersion"]), ("PersistentVolumeClaimList", "v1"))
        self.assertNotIn("kind", lst["items"][0])
        self.assertNotIn("apiVersion", lst["items"][0])
        self.assertRegex(lst["metadata"]["resourceVersion"], r"^\d+$")

    def test_error_shapes(self):
        err = self.raises(self.api.get, PVC_PATH % ("default", "nope"))
        self.assertStatus(err, 404, "NotFound", 'persistentvolumeclaims "nope" not found',
                          "persistentvolumeclaims", "nope")
        self.assertNotIn("group", err.body["details"])
        err = self.raises(self.api.get, SC_PATH % "nope")
        self.assertStatus(err, 404, "NotFound",
                          'storageclasses.storage.k8s.io "nope" not found')
        self.assertEqual(err.body["details"]["group"], "storage.k8s.io")
        self.api.create(PVCS_PATH % "errs", claim("errs", "dup", "x"))
        err = self.raises(self.api.create, PVCS_PATH % "errs", claim("errs", "dup", "x"))
        self.assertStatus(err, 409, "AlreadyExists",
                          'persistentvolumeclaims "dup" already exists')
        err = self.raises(self.api.create, PVCS_PATH % "errs", claim("errs", "Bad_Name", "x"))
        self.assertStatus(err, 422, "Invalid", 'PersistentVolumeClaim "Bad_Name" is invalid: '
                          'metadata.name: Invalid value: "Bad_Name": ' + DNS1123_SUBDOMAIN_MSG,
                          "PersistentVolumeClaim", "Bad_Name")
        self.assertEqual(err.body["details"]["causes"], [{
            "reason": "FieldValueInvalid", "field": "metadata.name",
            "message": 'Invalid value: "Bad_Name": ' + DNS1123_SUBDOMAIN_MSG}])
        bad = claim("errs", "empty", "x")
        bad["spec"] = {}
        err = self.raises(self.api.create, PVCS_PATH % "errs", bad)
        self.assertStatus(err, 422, "Invalid", 'PersistentVolumeClaim "empty" is invalid: '
                          '[spec.accessModes: Required value: at least 1 access mode is '
                          'required, spec.resources[storage]: Required value]')
        self.assertEqual([c["field"] for c in err.body["details"]["causes"]],
                         ["spec.accessModes", "spec.resources[storage]"])
        pv = volume("nocap")
        del pv["spec"]["capacity"]
        del pv["spec"]["hostPath"]
        err = self.raises(self.api.create, PVS_PATH, pv)
        self.assertEqual(err.status, 422)
        self.assertIn("spec.capacity: Required value", err.body["message"])
        self.assertIn("spec: Required value: must specify a volume type", err.body["message"])
        err = self.raises(self.api.create, SCS_PATH, storage_class("sc-bad", ""))
        self.assertIn("provisioner: Required value", err.body["message"])
        self.assertTrue(err.body["message"].startswith(
            'StorageClass.storage.k8s.io "sc-bad" is invalid'))
        bad = claim("errs", "q", "x", size="lots")
        err = self.raises(self.api.create, PVCS_PATH % "errs", bad)
        self.assertStatus(err, 400, "BadRequest")
        self.assertIn("quantities must match the regular expression", err.body["message"])
        err = self.raises(self.api.create, PVCS_PATH % "other", claim("errs", "ns", "x"))
        self.assertStatus(err, 400, "BadRequest", "the namespace of the provided object does "
                          "not match the namespace sent on the request")
        err = self.raises(self.api.client.call, "POST", PVC_PATH % ("errs", "dup"), {})
        self.assertStatus(err, 405, "MethodNotAllowed",
                          "the server does not allow this method on the requested resource")
        r = self.api.request("PATCH", PVC_PATH % ("errs", "dup"), body=b"{}",
                             content_type="text/plain")
        self.assertEqual(r.status, 415)
        self.assertEqual(r.body["reason"], "UnsupportedMediaType")
        c = claim("errs", "withrv", "x")
        c["metadata"]["resourceVersion"] = "5"
        err = self.raises(self.api.create, PVCS_PATH % "errs", c)
        self.assertStatus(err, 500, "InternalError", "Internal error occurred: resourceVersion "
                          "should not be set on objects to be created")

    def test_csidriver_and_csistoragecapacity(self):
        """The real API's defaults and validation (compare_standin.py checks them against
        kube-apiserver): names, required fields, immutable fields, scope."""
        drivers = "/apis/storage.k8s.io/v1/csidrivers"
        d = self.api.create(drivers, {"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver",
                                      "metadata": {"name": "hp.example.com"}, "spec": {}})
        self.assertEqual(d["spec"], {"attachRequired": True, "podInfoOnMount": False,
                                     "volumeLifecycleModes": ["Persistent"],
                                     "storageCapacity": False,
                                     "fsGroupPolicy": "ReadWriteOnceWithFSType",
                                     "requiresRepublish": False, "seLinuxMount": False,
                                     "preventPodSchedulingIfMissing": False})
        err = self.raises(self.api.create, drivers, {
            "apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver",
            "metadata": {"name": "rancher.io/local-path"}, "spec": {}})
        self.assertStatus(err, 422, "Invalid")
        self.assertIn('metadata.name: Invalid value: "rancher.io/local-path"',
                      err.body["message"])
        d["spec"]["storageCapacity"] = True
        self.assertTrue(self.api.update(drivers + "/hp.example.com", d)["spec"]
                        ["storageCapacity"])
        d = self.api.get(drivers + "/hp.example.com")
        d["spec"]["attachRequired"] = False
        err = self.raises(self.api.update, drivers + "/hp.example.com", d)
        self.assertStatus(err, 422, "Invalid", 'CSIDriver.storage.k8s.io "hp.example.com" is '
                          'invalid: spec.attachedRequired: Invalid value: false: field is '
                          'immutable')
        err = self.raises(self.api.get, "/apis/storage.k8s.io/v1/namespaces/x/csidrivers/a")
        self.assertEqual(err.status, 404)

        caps = "/apis/storage.k8s.io/v1/namespaces/capns/csistoragecapacities"
        body = {"apiVersion": "storage.k8s.io/v1", "kind": "CSIStorageCapacity",
                "metadata": {"name": "node-a-local", "namespace": "capns",
                             "labels": {"csi.storage.k8s.io/drivername": "hp.example.com"}},
                "storageClassName": "local",
                "nodeTopology": {"matchLabels": {"kubernetes.io/hostname": "node-a"}},
                "capacity": "1073741824", "maximumVolumeSize": "1024Mi"}
        c = self.api.create(caps, body)
        self.assertEqual((c["capacity"], c["maximumVolumeSize"]), ("1073741824", "1Gi"))
        bad = dict(body, metadata={"name": "nocls", "namespace": "capns"}, capacity="-1")
        del bad["storageClassName"]
        err = self.raises(self.api.create, caps, bad)
        self.assertStatus(err, 422, "Invalid")
        self.assertIn("storageClassName: Invalid value: \"\"", err.body["message"])
        self.assertIn("capacity: Invalid value: \"-1\": must be greater than or equal to 0",
                      err.body["message"])
        err = self.raises(self.api.patch, caps + "/node-a-local", {"storageClassName": "other"})
        self.assertStatus(err, 422, "Invalid", 'CSIStorageCapacity.storage.k8s.io '
                          '"node-a-local" is invalid: storageClassName: Invalid value: "other": '
                          'field is immutable')
        self.assertEqual(self.api.patch(caps + "/node-a-local", {"capacity": "2Gi"})
                         ["capacity"], "2Gi")
        self.assertEqual(len(self.api.list(caps, labelSelector="csi.storage.k8s.io/"
                                           "drivername=hp.example.com")["items"]), 1)
        err = self.raises(self.api.create, "/apis/storage.k8s.io/v1/csistoragecapacities", body)
        self.assertEqual(err.status, 405)
        self.assertEqual(self.api.delete(caps + "/node-a-local")["kind"], "Status")

    def test_unknown_fields(self):
        c = claim("unk", "w", "x")
        c["spec"]["storageClasName"] = "typo"
        c["spec"]["resources"]["request"] = {"storage": "1Gi"}
        r = self.api.request("POST", PVCS_PATH % "unk", c)
        self.assertEqual(r.status, 201)
        self.assertNotIn("storageClasName", r.body["spec"])
        self.assertEqual(r.headers.get("Warning"), '299 - "unknown field '
                         '\\"spec.resources.request\\"", 299 - "unknown field '
                         '\\"spec.storageClasName\\""')
        log = self.api.requests(method="POST", path_prefix=PVCS_PATH % "unk")[-1]
        self.assertEqual(log["warnings"], ['unknown field "spec.resources.request"',
                                           'unknown field "spec.storageClasName"'])
        c["metadata"]["name"] = "s"
        err = self.raises(self.api.create, PVCS_PATH % "unk", c, fieldValidation="Strict")
        self.assertStatus(err, 400, "BadRequest", 'PersistentVolumeClaim in version "v1" cannot '
                          'be handled as a PersistentVolumeClaim: strict decoding error: '
                          'unknown field "spec.resources.request", unknown field '
                          '"spec.storageClasName"')
        r = self.api.request("POST", PVCS_PATH % "unk", c, query={"fieldValidation": "Ignore"})
        self.assertEqual(r.status, 201)
        self.assertNotIn("Warning", r.headers)
        r = self.api.request("POST", PVCS_PATH % "unk", c, query={"fieldValidation": "Loose"})
        self.assertEqual(r.status, 400)

    def test_update_conflict_and_noop(self):
        c = self.api.create(PVCS_PATH % "upd", claim("upd", "c", "x"))
        c["metadata"]["labels"] = {"a": "1"}
        c2 = self.api.update(PVC_PATH % ("upd", "c"), c)
        self.assertEqual(c2["metadata"]["labels"], {"a": "1"})
        self.assertGreater(int(c2["metadata"]["resourceVersion"]),
                           int(c["metadata"]["resourceVersion"]))
        c["metadata"]["labels"] = {"a": "2"}  # still carries the old resourceVersion
        err = self.raises(self.api.update, PVC_PATH % ("upd", "c"), c)
        self.assertStatus(err, 409, "Conflict", 'Operation cannot be fulfilled on '
                          'persistentvolumeclaims "c": the object has been modified; please '
                          'apply your changes to the latest version and try again',
                          "persistentvolumeclaims", "c")
        del c["metadata"]["resourceVersion"]  # unconditional
        c3 = self.api.update(PVC_PATH % ("upd", "c"), c)
        self.assertEqual(c3["metadata"]["labels"], {"a": "2"})
        c4 = self.api.update(PVC_PATH % ("upd", "c"), c3)  # no change: no new version
        self.assertEqual(c4["metadata"]["resourceVersion"], c3["metadata"]["resourceVersion"])
        c3["spec"]["accessModes"] = ["ReadWriteMany"]
        err = self.raises(self.api.update, PVC_PATH % ("upd", "c"), c3)
        self.assertEqual(err.status, 422)
        self.assertIn("spec: Forbidden: spec is immutable after creation except "
                      "resources.requests and volumeAttributesClassName for bound claims",
                      err.body["message"])
        err = self.raises(self.api.update, PVC_PATH % ("upd", "other"), c4)
        self.assertStatus(err, 400, "BadRequest", "the name of the object (c) does not match "
                          "the name on the URL (other)")
        sc = self.api.create(SCS_PATH, storage_class("upd-sc", "example.com/a"))
        sc["parameters"] = {"x": "y"}
        err = self.raises(self.api.update, SC_PATH % "upd-sc", sc)
        self.assertIn("parameters: Forbidden: updates to parameters are forbidden.",
                      err.body["message"])

    def test_status_subresource(self):
        pv = self.api.create(PVS_PATH, volume("status-pv"))
        pv["status"]["phase"] = "Failed"
        pv["spec"]["persistentVolumeReclaimPolicy"] = "Delete"
        out = self.api.update(PV_PATH % "status-pv", pv)
        self.assertEqual(out["status"]["phase"], "Pending")  # status ignored on the main resource
        self.assertEqual(out["spec"]["persistentVolumeReclaimPolicy"], "Delete")
        out["status"]["phase"] = "Available"
        out["spec"]["persistentVolumeReclaimPolicy"] = "Retain"
        st = self.api.update(PV_PATH % "status-pv" + "/status", out)
        self.assertEqual(st["status"]["phase"], "Available")
        self.assertEqual(st["spec"]["persistentVolumeReclaimPolicy"], "Delete")  # spec ignored
        self.assertRegex(st["status"]["lastPhaseTransitionTime"], r"Z$")
        p = self.api.patch(PV_PATH % "status-pv" + "/status", {"status": {"phase": "Released"}})
        self.assertEqual(p["status"]["phase"], "Released")
        p = self.api.patch(PV_PATH % "status-pv", {"status": {"phase": "Bound"}})
        self.assertEqual(p["status"]["phase"], "Released")
        self.assertEqual(self.api.get(PV_PATH % "status-pv" + "/status")["status"]["phase"],
                         "Released")

    def test_patch_kinds(self):
        self.api.create(PVCS_PATH % "patch", claim("patch", "p", "x",
                                                   labels={"a": "1", "b": "2"}))
        path = PVC_PATH % ("patch", "p")
        out = self.api.patch(path, {"metadata": {"labels": {"a": None, "c": "3"}}}, "merge")
        self.assertEqual(out["metadata"]["labels"], {"b": "2", "c": "3"})
        out = self.api.patch(path, {"metadata": {"finalizers": ["example.com/one"]}},
                             "strategic")
        out = self.api.patch(path, {"metadata": {"finalizers": ["example.com/two"]}},
                             "strategic")
        self.assertEqual(out["metadata"]["finalizers"], ["example.com/one", "example.com/two"])
        out = self.api.patch(path, {"metadata": {
            "$deleteFromPrimitiveList/finalizers": ["example.com/one"]}}, "strategic")
        self.assertEqual(out["metadata"]["finalizers"], ["example.com/two"])
        out = self.api.patch(path, {"metadata": {"finalizers": ["example.com/three"]}},
                             "merge")  # merge patch replaces lists
        self.assertEqual(out["metadata"]["finalizers"], ["example.com/three"])
        out = self.api.patch(path, [
            {"op": "test", "path": "/metadata/labels/b", "value": "2"},
            {"op": "add", "path": "/metadata/annotations", "value": {"k/v": "x"}},
            {"op": "replace", "path": "/metadata/labels/b", "value": "20"},
            {"op": "remove", "path": "/metadata/finalizers"}], "json")
        self.assertEqual(out["metadata"]["labels"]["b"], "20")
        self.assertEqual(out["metadata"]["annotations"], {"k/v": "x"})
        self.assertNotIn("finalizers", out["metadata"])
        err = self.raises(self.api.patch, path, [
            {"op": "test", "path": "/metadata/labels/b", "value": "nope"}], "json")
        self.assertEqual((err.status, err.reason), (422, "Invalid"))
        rv = out["metadata"]["resourceVersion"]
        err = self.raises(self.api.patch, path, {"metadata": {
            "resourceVersion": str(int(rv) - 1), "labels": {"x": "y"}}}, "merge")
        self.assertEqual((err.status, err.reason), (409, "Conflict"))
        err = self.raises(self.api.patch, PVC_PATH % ("patch", "missing"), {}, "merge")
        self.assertEqual(err.status, 404)
        err = self.raises(self.api.patch, path, {"spec": {"storageClassName": "y"}},
                          "strategic")
        self.assertEqual(err.status, 422)

    def test_finalizer_delete_flow(self):
        pv = volume("fin-pv")
        pv["metadata"]["finalizers"] = ["example.com/hold"]
        self.api.create(PVS_PATH, pv)
        with self.api.watch(PVS_PATH, fieldSelector="metadata.name=fin-pv") as w:
            self.assertEqual(w.next()["type"], "ADDED")
            d = self.api.delete(PV_PATH % "fin-pv")
            self.assertEqual(d["kind"], "PersistentVolume")
            self.assertRegex(d["metadata"]["deletionTimestamp"], r"Z$")
            self.assertEqual(d["metadata"]["deletionGracePeriodSeconds"], 0)
            self.assertTrue(self.api.exists(PV_PATH % "fin-pv"))
            ev = w.next()
            self.assertEqual(ev["type"], "MODIFIED")
            self.assertIn("deletionTimestamp", ev["object"]["metadata"])
            again = self.api.delete(PV_PATH % "fin-pv")  # deleting again changes nothing
            self.assertEqual(again["metadata"]["resourceVersion"],
                             d["metadata"]["resourceVersion"])
            self.api.patch(PV_PATH % "fin-pv", {"metadata": {"finalizers": None}})
            types = [e["type"] for e in w.collect(2)]
            self.assertEqual(types, ["MODIFIED", "DELETED"])
        self.assertFalse(self.api.exists(PV_PATH % "fin-pv"))
        # Events answer delete with a Status, not the object.
        ev = self.api.create(EVENTS_PATH % "default", {
            "metadata": {"generateName": "x."}, "involvedObject": {"kind": "Pod",
                                                                   "namespace": "default"},
            "reason": "R", "message": "m", "type": "Normal"})
        self.assertRegex(ev["metadata"]["name"], r"^x\.[a-z0-9]{5}$")
        st = self.api.delete(EVENTS_PATH % "default" + "/" + ev["metadata"]["name"])
        self.assertEqual((st["kind"], st["status"]), ("Status", "Success"))
        # Preconditions.
        pv = self.api.create(PVS_PATH, volume("pre-pv"))
        err = self.raises(self.api.delete, PV_PATH % "pre-pv",
                          {"preconditions": {"uid": "not-the-uid"}})
        # kube-apiserver v1.37's wording (rest.BeforeDelete), checked by the realcluster tier.
        self.assertStatus(err, 409, "Conflict",
                          'Operation cannot be fulfilled on PersistentVolume "pre-pv": the UID '
                          'in the precondition (not-the-uid) does not match the UID in record '
                          '(%s). The object might have been deleted and then recreated'
                          % pv["metadata"]["uid"])
        self.assertEqual(err.body["details"], {"name": "pre-pv", "kind": "PersistentVolume"})
        err = self.raises(self.api.delete, PV_PATH % "pre-pv",
                          {"preconditions": {"resourceVersion": "1"}})
        self.assertEqual(err.body["message"],
                         'Operation cannot be fulfilled on PersistentVolume "pre-pv": the '
                         'ResourceVersion in the precondition (1) does not match the '
                         'ResourceVersion in record (%s). The object might have been modified'
                         % pv["metadata"]["resourceVersion"])
        self.api.delete(PV_PATH % "pre-pv")

    def test_events_and_field_selectors(self):
        for i, (kind, name) in enumerate((("PersistentVolumeClaim", "c1"),
                                          ("PersistentVolumeClaim", "c2"),
                                          ("PersistentVolume", "pv1"))):
            ns = "evs" if kind != "PersistentVolume" else "default"
            self.api.create(EVENTS_PATH % ns, {
                "metadata": {"name": "e%d" % i},
                "involvedObject": {"kind": kind, "name": name,
                                   "namespace": ns if kind != "PersistentVolume" else ""},
                "reason": "Provisioning", "message": "m", "type": "Normal",
                "source": {"component": "hostpath-provisioner.io"},
                "firstTimestamp": "2024-01-01T00:00:00.123Z", "count": 1})
        got = self.api.list(EVENTS_PATH % "evs", fieldSelector="involvedObject.name=c2")
        self.assertEqual([e["metadata"]["name"] for e in got["items"]], ["e1"])
        self.assertEqual(got["items"][0]["firstTimestamp"], "2024-01-01T00:00:00Z")
        got = self.api.list("/api/v1/events",
                            fieldSelector="involvedObject.kind=PersistentVolume,"
                                          "source=hostpath-provisioner.io")
        self.assertEqual([e["metadata"]["name"] for e in got["items"]], ["e2"])
        err = self.raises(self.api.list, EVENTS_PATH % "evs", fieldSelector="bogus=1")
        self.assertStatus(err, 400, "BadRequest", "field label not supported: bogus")
        # Kinds without a field label conversion of their own (PVs, claims, classes, leases)
        # answer in runtime.DefaultMetaV1FieldSelectorConversion's words (v1.37).
        err = self.raises(self.api.list, PVS_PATH, fieldSelector="spec.bogus=x")
        self.assertStatus(err, 400, "BadRequest", '"spec.bogus" is not a known field '
                          'selector: only "metadata.name", "metadata.namespace"')
        err = self.raises(self.api.create, EVENTS_PATH % "evs", {
            "metadata": {"name": "mismatch"}, "involvedObject": {"namespace": "other"},
            "reason": "R"})
        self.assertIn("involvedObject.namespace: Invalid value: \"other\": does not match "
                      "event.namespace", err.body["message"])

    def test_tables(self):
        self.api.create(PVCS_PATH % "tbl", claim("tbl", "t1", "fast"))
        r = self.api.request("GET", PVCS_PATH % "tbl", headers={
            "Accept": "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"})
        self.assertEqual(r.body["kind"], "Table")
        cols = [c["name"] for c in r.body["columnDefinitions"]]
        self.assertEqual(cols[:6], ["Name", "Status", "Volume", "Capacity", "Access Modes",
                                    "StorageClass"])
        self.assertEqual(r.body["rows"][0]["cells"][:2], ["t1", "Pending"])
        self.assertEqual(r.body["rows"][0]["object"]["kind"], "PartialObjectMetadata")
        r = self.api.request("GET", PVCS_PATH % "tbl",
                             headers={"Accept": "application/vnd.kubernetes.protobuf"})
        self.assertEqual(r.status, 406)

    def test_namespace_deletion(self):
        self.api.create(NSS_PATH, namespace("doomed"))
        c = claim("doomed", "c", "x")
        c["metadata"]["finalizers"] = ["example.com/slow"]
        self.api.create(PVCS_PATH % "doomed", c)
        self.api.create(PVCS_PATH % "doomed", claim("doomed", "d", "x"))
        ns = self.api.delete(NS_PATH % "doomed")
        self.assertEqual(ns["status"]["phase"], "Terminating")
        err = self.raises(self.api.create, PVCS_PATH % "doomed", claim("doomed", "e", "x"))
        self.assertEqual((err.status, err.reason), (403, "Forbidden"))
        self.assertIn("because it is being terminated", err.body["message"])
        wait_for(lambda: not self.api.exists(PVC_PATH % ("doomed", "d")), 5, what="d deleted")
        self.assertTrue(self.api.exists(NS_PATH % "doomed"))
        self.api.patch(PVC_PATH % ("doomed", "c"), {"metadata": {"finalizers": None}})
        wait_for(lambda: not self.api.exists(NS_PATH % "doomed"), 5, what="namespace gone")


class TestListAndWatch(ServerTest):
    def test_paging_and_selectors(self):
        ns = "paging"
        for i in range(25):
            self.api.create(PVCS_PATH % ns, claim(ns, "c%02d" % i, "x",
                                                  labels={"tier": ["a", "b", "c"][i % 3],
                                                          "n": str(i)}))
        page = self.api.list(PVCS_PATH % ns, limit=10)
        self.assertEqual(len(page["items"]), 10)
        self.assertEqual(page["metadata"]["remainingItemCount"], 15)
        rv = page["metadata"]["resourceVersion"]
        names = [i["metadata"]["name"] for i in page["items"]]
        # A change between pages does not show: the pages are one snapshot.
        self.api.create(PVCS_PATH % ns, claim(ns, "c05a", "x"))
        self.api.delete(PVC_PATH % (ns, "c20"))
        tok = page["metadata"]["continue"]
        while tok:
            page = self.api.list(PVCS_PATH % ns, limit=10, **{"continue": tok})
            self.assertEqual(page["metadata"]["resourceVersion"], rv)
            names += [i["metadata"]["name"] for i in page["items"]]
            tok = page["metadata"].get("continue")
        self.assertEqual(names, ["c%02d" % i for i in range(25)])
        self.assertNotIn("remainingItemCount", page["metadata"])

        def sel(s):
            return sorted(i["metadata"]["name"] for i in
                          self.api.list(PVCS_PATH % ns, labelSelector=s)["items"])
        self.assertEqual(sel("tier=a,n in (0,3,6,7)"), ["c00", "c03", "c06"])
        self.assertEqual(len(sel("tier!=a")), 16)
        self.assertEqual(sel("n notin (0),tier==c,n<9"), ["c02", "c05", "c08"])
        self.assertEqual(len(sel("tier")), 24)  # c20 was deleted
        self.assertEqual(sel("!tier"), ["c05a"])
        self.assertEqual(sel("n>22"), ["c23", "c24"])
        err = self.raises(self.api.list, PVCS_PATH % ns, labelSelector="a in b")
        self.assertEqual((err.status, err.reason), (400, "BadRequest"))
        got = self.api.list(ALL_PVCS_PATH, fieldSelector="metadata.name=c07")
        self.assertEqual([(i["metadata"]["namespace"], i["metadata"]["name"])
                          for i in got["items"]], [(ns, "c07")])
        got = self.api.list(ALL_PVCS_PATH, fieldSelector="metadata.namespace!=%s" % ns)
        self.assertTrue(all(i["metadata"]["namespace"] != ns for i in got["items"]))
        # resourceVersion=0 is served from the cache: limit is ignored.
        self.assertEqual(len(self.api.list(PVCS_PATH % ns, limit=5, resourceVersion="0")
                             ["items"]), 25)
        # Exact list at an older resourceVersion.
        old = self.api.list(PVCS_PATH % ns, resourceVersion=rv, resourceVersionMatch="Exact")
        self.assertEqual(len(old["items"]), 25)
        self.assertIn("c20", [i["metadata"]["name"] for i in old["items"]])

    def test_large_responses_are_gzipped(self):
        ns = "gz"
        small = self.api.request("GET", PVCS_PATH % ns, headers={"Accept-Encoding": "gzip"})
        self.assertNotIn("Content-Encoding", small.headers)
        for i in range(2):
            self.api.create(PVCS_PATH % ns, claim(ns, "big%d" % i, "x", annotations={
                "example.com/blob": "x" * 100000}))
        big = self.api.request("GET", PVCS_PATH % ns, headers={"Accept-Encoding": "gzip"})
        plain = self.api.request("GET", PVCS_PATH % ns)
        self.assertGreater(len(plain.raw), 128 * 1024)
        self.assertNotIn("Content-Encoding", plain.headers)
        self.assertEqual(big.headers.get("Content-Encoding"), "gzip")
        self.assertEqual(int(big.headers["Content-Length"]), len(big.raw))
        self.assertEqual(json.loads(gzip.decompress(big.raw)), plain.body)

    def test_continue_expires_after_compaction(self):
        ns = "expire"
        for i in range(4):
            self.api.create(PVCS_PATH % ns, claim(ns, "c%d" % i, "x"))
        page = self.api.list(PVCS_PATH % ns, limit=2)
        self.api.create(PVCS_PATH % ns, claim(ns, "late", "x"))
        self.api.compact()
        err = self.raises(self.api.list, PVCS_PATH % ns, limit=2,
                          **{"continue": page["metadata"]["continue"]})
        self.assertStatus(err, 410, "Expired")
        self.assertTrue(err.body["message"].startswith(
            "The provided continue parameter is too old to display a consistent list result. "
            "You can start a new list without the continue parameter, or use the continue "
            "token in this response to retrieve the remainder of the results."))
        inconsistent = err.body["metadata"]["continue"]
        rest = self.api.list(PVCS_PATH % ns, limit=10, **{"continue": inconsistent})
        self.assertEqual([i["metadata"]["name"] for i in rest["items"]], ["c2", "c3", "late"])
        err = self.raises(self.api.list, PVCS_PATH % ns, **{"continue": "garbage"})
        self.assertEqual(err.status, 400)

    def test_watch_resume_and_events(self):
        ns = "watch"
        first = self.api.create(PVCS_PATH % ns, claim(ns, "w0", "x"))
        with self.api.watch(PVCS_PATH % ns) as w:  # no resourceVersion: current state first
            ev = w.next()
            self.assertEqual(ev["type"], "ADDED")
            self.assertEqual(ev["object"]["kind"], "PersistentVolumeClaim")
            self.assertEqual(ev["object"]["metadata"]["name"], "w0")
        rv = first["metadata"]["resourceVersion"]
        self.api.create(PVCS_PATH % ns, claim(ns, "w1", "x"))
        self.api.patch(PVC_PATH % (ns, "w1"), {"metadata": {"labels": {"x": "1"}}})
        self.api.delete(PVC_PATH % (ns, "w1"))
        with self.api.watch(PVCS_PATH % ns, resourceVersion=rv) as w:
            evs = w.collect(3)
            self.assertEqual([e["type"] for e in evs], ["ADDED", "MODIFIED", "DELETED"])
            rvs = [int(e["object"]["metadata"]["resourceVersion"]) for e in evs]
            self.assertEqual(rvs, sorted(rvs))
            self.assertGreater(rvs[0], int(rv))
            self.api.create(PVCS_PATH % ns, claim(ns, "w2", "x"))
            ev = w.next()
            self.assertEqual((ev["type"], ev["object"]["metadata"]["name"]), ("ADDED", "w2"))
            self.assertIsNone(w.next(0.3))
        # The deprecated /watch/ path prefix, all namespaces.
        with self.api.watch("/api/v1/watch/persistentvolumeclaims", resourceVersion=rv) as w:
            self.assertEqual(w.next()["object"]["metadata"]["name"], "w1")

    def test_watch_label_selector_transitions(self):
        ns = "wsel"
        self.api.create(PVCS_PATH % ns, claim(ns, "s", "x", labels={"app": "no"}))
        st = self.api.list(PVCS_PATH % ns)["metadata"]["resourceVersion"]
        with self.api.watch(PVCS_PATH % ns, resourceVersion=st, labelSelector="app=yes") as w:
            self.api.patch(PVC_PATH % (ns, "s"), {"metadata": {"labels": {"app": "yes"}}})
            self.api.patch(PVC_PATH % (ns, "s"), {"metadata": {"annotations": {"a": "b"}}})
            self.api.patch(PVC_PATH % (ns, "s"), {"metadata": {"labels": {"app": "no"}}})
            self.assertEqual([e["type"] for e in w.collect(3)], ["ADDED", "MODIFIED", "DELETED"])

    def test_watch_too_old_after_compaction(self):
        ns = "wold"
        c = self.api.create(PVCS_PATH % ns, claim(ns, "o", "x"))
        rv = int(c["metadata"]["resourceVersion"])
        self.api.create(PVCS_PATH % ns, claim(ns, "o2", "x"))
        cur = self.api.compact()
        with self.api.watch(PVCS_PATH % ns, resourceVersion=str(rv)) as w:
            self.assertEqual(w.status, 200)
            ev = w.next()
            self.assertEqual(ev["type"], "ERROR")
            st = ev["object"]
            self.assertEqual((st["kind"], st["code"], st["reason"]), ("Status", 410, "Expired"))
            self.assertEqual(st["message"], "too old resource version: %d (%d)" % (rv, cur))
            self.assertTrue(w.wait_eof(3))
        with self.api.watch(PVCS_PATH % ns, resourceVersion=str(cur)) as w:  # current is fine
            self.api.create(PVCS_PATH % ns, claim(ns, "o3", "x"))
            self.assertEqual(w.next()["type"], "ADDED")
        err = self.api.request("GET", PVCS_PATH % ns, query={
            "watch": "1", "resourceVersion": str(cur + 10 ** 6)})
        self.assertEqual((err.status, err.body["reason"]), (504, "Timeout"))
        self.assertTrue(err.body["message"].startswith("Too large resource version"))

    def test_bookmarks_and_timeout(self):
        ns = "bm"
        self.api.create(PVCS_PATH % ns, claim(ns, "b", "x"))
        rv = self.api.list(PVCS_PATH % ns)["metadata"]["resourceVersion"]
        t0 = time.monotonic()
        with self.api.watch(PVCS_PATH % ns, resourceVersion=rv, allowWatchBookmarks="true",
                            timeoutSeconds="1") as w:
            evs = []
            while not w.eof and time.monotonic() - t0 < 5:
                e = w.next(0.5)
                if e:
                    evs.append(e)
            self.assertTrue(w.eof)
        self.assertLess(time.monotonic() - t0, 3.0)
        self.assertGreaterEqual(len(evs), 2)
        for e in evs:
            self.assertEqual(e["type"], "BOOKMARK")
            o = e["object"]
            self.assertEqual((o["kind"], o["apiVersion"]), ("PersistentVolumeClaim", "v1"))
            self.assertEqual(set(o["metadata"]), {"resourceVersion", "creationTimestamp"})
            self.assertGreaterEqual(int(o["metadata"]["resourceVersion"]), int(rv))
        # Initial events end with an annotated bookmark when asked (sendInitialEvents), and
        # in 1.32 a legacy watch from "" or "0" is defaulted to that when bookmarks are on.
        for q in ({"sendInitialEvents": "true", "resourceVersionMatch": "NotOlderThan"},
                  {"resourceVersion": "0"}):
            with self.api.watch(PVCS_PATH % ns, allowWatchBookmarks="true", **q) as w:
                a, b = w.next(), w.next()
                self.assertEqual(a["type"], "ADDED")
                self.assertEqual(b["type"], "BOOKMARK")
                self.assertEqual(b["object"]["metadata"]["annotations"],
                                 {"k8s.io/initial-events-end": "true"})
        err = self.api.request("GET", PVCS_PATH % ns, query={"watch": "1",
                                                             "sendInitialEvents": "true"})
        self.assertEqual(err.status, 422)
        self.assertIn("resourceVersionMatch: Forbidden: sendInitialEvents requires setting "
                      "resourceVersionMatch to NotOlderThan", err.body["message"])

    def test_close_watches_and_count(self):
        before = len(self.api.open_watches())
        w1 = self.api.watch(PVS_PATH)
        w2 = self.api.watch(PVCS_PATH % "default")
        try:
            wait_for(lambda: len(self.api.open_watches()) == before + 2, 5, what="2 watches")
            self.assertEqual(self.api.close_watches(PVS_PATH, user_agent="someone-else/"), 0)
            self.assertFalse(w1.wait_eof(0.3))
            self.assertEqual(self.api.close_watches(PVS_PATH, user_agent="hp-test-harness/"), 1)
            self.assertTrue(w1.wait_eof(3))
            self.assertFalse(w2.eof)
            self.assertGreaterEqual(self.api.close_watches(abrupt=True), 1)
            self.assertTrue(w2.wait_eof(3))
            wait_for(lambda: len(self.api.open_watches()) == 0, 5, what="no watches")
        finally:
            w1.close()
            w2.close()
        # A client that goes away is noticed without any event.
        w3 = self.api.watch(PVS_PATH)
        wait_for(lambda: len(self.api.open_watches()) == 1, 5, what="1 watch")
        w3.close()
        wait_for(lambda: len(self.api.open_watches()) == 0, 5, what="watch gone")

    def test_malformed_line(self):
        with self.api.watch(PVS_PATH, resourceVersion=str(self.api.state()["resourceVersion"])) \
                as w:
            wait_for(lambda: self.api.open_watches(PVS_PATH), 5, what="watch open")
            self.assertEqual(self.api.malformed(PVS_PATH), 1)
            ev = w.next()
            self.assertIn("raw", ev)
            self.assertTrue(ev["raw"].startswith(b'{"type":"MODIFIED"'))
            self.api.malformed(PVS_PATH, line="x" * 5000)
            self.assertEqual(len(w.next()["raw"]), 5001)


class TestFaultsAndLog(ServerTest):
    def test_fail_next(self):
        self.api.fail_next("GET", "/api/v1/persistentvolumes", 500, count=2)
        for _ in range(2):
            err = self.raises(self.api.list, PVS_PATH)
            self.assertStatus(err, 500, "InternalError")
        self.assertEqual(self.api.list(PVS_PATH)["kind"], "PersistentVolumeList")
        self.api.fail_next("POST", "/api/v1/namespaces/", 429, retry_after=3)
        r = self.api.request("POST", PVCS_PATH % "default", claim("default", "f", "x"))
        self.assertEqual(r.status, 429)
        self.assertEqual(r.headers["Retry-After"], "3")
        self.assertEqual(r.body, "Too many requests, please try again later.\n")
        self.assertFalse(self.api.exists(PVC_PATH % ("default", "f")))
        self.api.fail_next("*", "/api/v1/persistentvolumes", 503, body="status", retry_after=1)
        err = self.raises(self.api.list, PVS_PATH)
        self.assertStatus(err, 503, "ServiceUnavailable")
        self.assertEqual(err.body["details"]["retryAfterSeconds"], 1)
        self.api.fail_next("GET", "/api/v1/nodes", delay_ms=400)
        t0 = time.monotonic()
        self.api.list("/api/v1/nodes")
        self.assertGreaterEqual(time.monotonic() - t0, 0.39)
        self.api.fail_next("GET", "/api/v1/nodes", action="disconnect")
        conn = self.api.client.connect(5)
        conn.request("GET", "/api/v1/nodes", headers={"Authorization": "Bearer " + self.api.token})
        with self.assertRaises((OSError, http.client.HTTPException)):
            conn.getresponse()
        conn.close()
        # Faults can target watches only.
        self.api.fail_next("GET", PVS_PATH, 500, query_contains="watch=")
        self.assertEqual(self.api.list(PVS_PATH)["kind"], "PersistentVolumeList")
        w = self.api.watch(PVS_PATH)
        self.assertEqual(w.status, 500)
        self.assertEqual(self.api.admin("GET", "faults")["faults"], [])

    def test_probabilistic_faults_by_method_set_and_user_agent(self):
        # Only the writes (POST/PUT/PATCH/DELETE) of one client, about half of them.
        self.api.fail_next("POST,PUT,PATCH,DELETE", "/api/v1/namespaces/prob/", 503, count=0,
                           probability=0.5, user_agent="faulty-client/")
        faulty = Client(self.api.url, self.api.token, self.api.ca, user_agent="faulty-client/2")
        self.addCleanup(faulty.close)
        codes = []
        for i in range(60):
            r = faulty.request("POST", PVCS_PATH % "prob", claim("prob", "p%d" % i, "x"))
            codes.append(r.status)
        self.assertEqual(set(codes), {201, 503})
        self.assertTrue(10 <= codes.count(503) <= 50, codes)
        # Reads of that client and writes of another are never faulted
        # (patch a claim that was created: any of them may have drawn the 503).
        created = "p%d" % codes.index(201)
        for _ in range(20):
            faulty.get(PVCS_PATH % "prob")
            self.api.patch(PVC_PATH % ("prob", created), {"metadata": {"labels": {"a": "b"}}})
        f, = self.api.admin("GET", "faults")["faults"]
        self.assertEqual(f["hits"], codes.count(503))
        self.assertTrue(f["forever"])
        self.api.clear_faults()

    def test_request_log(self):
        self.api.clear_requests()
        self.api.list(PVS_PATH, limit=3)
        self.raises(self.api.get, PV_PATH % "absent")
        with self.api.watch(PVS_PATH) as w:
            w.next(0.2)
        reqs = self.api.requests()
        self.assertEqual([(r["method"], r["path"], r["status"], r["watch"]) for r in reqs],
                         [("GET", PVS_PATH, 200, False), ("GET", PV_PATH % "absent", 404, False),
                          ("GET", PVS_PATH, 200, True)])
        self.assertEqual(reqs[0]["query"], "limit=3")
        self.assertEqual(reqs[0]["user_agent"], "hp-test-harness/1.0")
        self.assertIsInstance(reqs[0]["time"], float)
        self.api.clear_requests()
        self.assertEqual(self.api.requests(), [])


class TestBinder(ServerTest):
    binder = True
    protection = True

    def test_provision_bind_release(self):
        self.api.create(SCS_PATH, storage_class("bind-sc", "hostpath-provisioner.io"))
        c = self.api.create(PVCS_PATH % "bind", claim("bind", "c", "bind-sc", size="1Gi"))
        self.assertEqual(c["metadata"]["finalizers"], ["kubernetes.io/pvc-protection"])
        path = PVC_PATH % ("bind", "c")
        ann = wait_for(lambda: (self.api.get(path)["metadata"].get("annotations") or {}).get(
            "volume.kubernetes.io/storage-provisioner") and
            self.api.get(path)["metadata"]["annotations"], 5, what="claim annotated")
        self.assertEqual(ann["volume.beta.kubernetes.io/storage-provisioner"],
                         "hostpath-provisioner.io")
        evs = wait_for(lambda: self.api.list(EVENTS_PATH % "bind", fieldSelector=(
            "involvedObject.name=c,reason=ExternalProvisioning"))["items"], 5, what="event")
        self.assertEqual(evs[0]["source"]["component"], "persistentvolume-controller")
        pv = volume("pvc-" + c["metadata"]["uid"], size="1Gi", cls="bind-sc", claim_ref=c,
                    reclaim="Delete",
                    annotations={"pv.kubernetes.io/provisioned-by": "hostpath-provisioner.io"})
        created = self.api.create(PVS_PATH, pv)
        self.assertEqual(created["metadata"]["finalizers"], ["kubernetes.io/pv-protection"])
        bound = wait_for(lambda: (lambda x: x if x["status"]["phase"] == "Bound" else None)(
            self.api.get(path)), 5, what="claim bound")
        self.assertEqual(bound["spec"]["volumeName"], pv["metadata"]["name"])
        self.assertEqual(bound["metadata"]["annotations"]["pv.kubernetes.io/bind-completed"],
                         "yes")
        self.assertEqual(bound["status"]["capacity"], {"storage": "1Gi"})
        self.assertEqual(bound["status"]["accessModes"], ["ReadWriteOnce"])
        pvp = PV_PATH % pv["metadata"]["name"]
        wait_for(lambda: self.api.get(pvp)["status"]["phase"] == "Bound", 5, what="pv bound")
        self.assertNotIn("pv.kubernetes.io/bound-by-controller",
                         self.api.get(pvp)["metadata"].get("annotations", {}))
        # A pod using the claim holds its deletion until it goes away (pvc-protection).
        self.api.create(PODS_PATH % "bind", pod("bind", "user", ["c"]))
        self.api.delete(path)
        time.sleep(0.3)
        self.assertTrue(self.api.exists(path))
        self.assertEqual(self.api.get(pvp)["status"]["phase"], "Bound")
        self.api.delete(PODS_PATH % "bind" + "/user")
        wait_for(lambda: not self.api.exists(path), 5, what="claim deleted")
        wait_for(lambda: self.api.get(pvp)["status"]["phase"] == "Released", 5,
                 what="pv released")
        self.api.delete(pvp)
        wait_for(lambda: not self.api.exists(pvp), 5, what="pv deleted")

    def test_wait_for_first_consumer_and_static_binding(self):
        self.api.create(SCS_PATH, storage_class("wffc", "hostpath-provisioner.io",
                                                binding="WaitForFirstConsumer"))
        self.api.create(PVCS_PATH % "wffc", claim("wffc", "w", "wffc"))
        path = PVC_PATH % ("wffc", "w")
        wait_for(lambda: self.api.list(EVENTS_PATH % "wffc", fieldSelector=(
            "reason=WaitForFirstConsumer"))["items"], 5, what="WaitForFirstConsumer event")
        self.assertNotIn("annotations", self.api.get(path)["metadata"])
        self.api.patch(path, {"metadata": {"annotations": {
            "volume.kubernetes.io/selected-node": "node-a"}}})
        wait_for(lambda: self.api.get(path)["metadata"]["annotations"].get(
            "volume.kubernetes.io/storage-provisioner") == "hostpath-provisioner.io", 5,
            what="annotated after selected-node")
        # A pre-existing Available PV of the claim's class is bound statically.
        self.api.create(SCS_PATH, storage_class("static", "kubernetes.io/no-provisioner"))
        self.api.create(PVS_PATH, volume("static-big", size="5Gi", cls="static"))
        self.api.create(PVS_PATH, volume("static-small", size="2Gi", cls="static"))
        wait_for(lambda: self.api.get(PV_PATH % "static-small")["status"]["phase"] ==
                 "Available", 5, what="pv available")
        self.api.create(PVCS_PATH % "wffc", claim("wffc", "s", "static", size="1500Mi"))
        got = wait_for(lambda: self.api.get(PVC_PATH % ("wffc", "s"))["spec"].get("volumeName"),
                       5, what="static bind")
        self.assertEqual(got, "static-small")
        pv = self.api.get(PV_PATH % "static-small")
        self.assertEqual(pv["spec"]["claimRef"]["name"], "s")
        self.assertEqual(pv["metadata"]["annotations"]["pv.kubernetes.io/bound-by-controller"],
                         "yes")

    def test_binder_switch_and_default_class(self):
        self.api.set_binder(False)
        try:
            self.api.create(SCS_PATH, storage_class("off-sc", "example.com/off"))
            self.api.create(PVCS_PATH % "off", claim("off", "c", "off-sc"))
            time.sleep(0.3)
            self.assertNotIn("annotations", self.api.get(PVC_PATH % ("off", "c"))["metadata"])
        finally:
            self.api.set_binder(True)
        wait_for(lambda: self.api.get(PVC_PATH % ("off", "c"))["metadata"].get("annotations"),
                 5, what="annotated once the binder is back")
        self.api.create(SCS_PATH, storage_class("dflt", "example.com/dflt", default=True))
        c = self.api.create(PVCS_PATH % "off", claim("off", "d", None))
        self.assertEqual(c["spec"]["storageClassName"], "dflt")
        self.api.delete(SC_PATH % "dflt")


class TestPersistence(unittest.TestCase):
    """--persist on: the objects and the resourceVersion counter survive a restart
    (SIGTERM); the watch history does not (an older resourceVersion is 410 Expired)."""

    def test_state_survives_restart(self):
        tmp = tempfile.mkdtemp(prefix="hp-apisrv-persist-")
        self.addCleanup(shutil.rmtree, tmp, True)
        api = ApiServer(tmp, persist=True, bookmark_interval=0.2).start()
        self.addCleanup(api.stop)
        api.create(SCS_PATH, storage_class("keep", "hostpath-provisioner.io"))
        c = api.create(PVCS_PATH % "keep", claim("keep", "c", "keep"))
        pv = api.create(PVS_PATH, volume("pvc-" + c["metadata"]["uid"], cls="keep",
                                         claim_ref=c, reclaim="Delete"))
        wait_for(lambda: api.get(PVC_PATH % ("keep", "c"))["status"]["phase"] == "Bound", 5,
                 what="claim bound before the restart")
        before = api.get(PVC_PATH % ("keep", "c"))
        rv = int(api.list(PVS_PATH)["metadata"]["resourceVersion"])
        port, pid = api.port, api.pid
        api.restart()
        self.assertEqual(api.port, port)
        self.assertNotEqual(api.pid, pid)
        after = api.get(PVC_PATH % ("keep", "c"))
        self.assertEqual(after, before)  # uid, resourceVersion, annotations, status
        self.assertEqual(api.get(PV_PATH % pv["metadata"]["name"])["metadata"]["uid"],
                         pv["metadata"]["uid"])
        self.assertEqual(api.get(SC_PATH % "keep")["provisioner"], "hostpath-provisioner.io")
        self.assertTrue(api.exists(NS_PATH % "keep"))
        # The counter goes on from where it was; the history starts empty at it.
        listed = api.list(PVS_PATH)
        self.assertGreaterEqual(int(listed["metadata"]["resourceVersion"]), rv)
        with api.watch(PVS_PATH, resourceVersion=str(rv - 1)) as w:
            ev = w.next(5)
            self.assertEqual(ev["type"], "ERROR")
            self.assertEqual(ev["object"]["code"], 410)
        with api.watch(PVS_PATH, resourceVersion=listed["metadata"]["resourceVersion"]) as w:
            api.patch(PV_PATH % pv["metadata"]["name"], {"metadata": {"labels": {"x": "y"}}})
            ev = w.next(5)
            self.assertEqual(ev["type"], "MODIFIED")
            self.assertGreater(int(ev["object"]["metadata"]["resourceVersion"]), rv)
        # The controllers know the objects again: deleting the claim releases the PV.
        api.delete(PVC_PATH % ("keep", "c"))
        wait_for(lambda: api.get(PV_PATH % pv["metadata"]["name"])["status"]["phase"] ==
                 "Released", 5, what="PV released after the restart")
        # Without --persist, a restart starts empty (as before).
        plain = ApiServer(tmp, name="plain").start()
        self.addCleanup(plain.stop)
        plain.create(SCS_PATH, storage_class("gone", "hostpath-provisioner.io"))
        plain.restart()
        self.assertFalse(plain.exists(SC_PATH % "gone"))


if __name__ == "__main__":
    unittest.main()
