"""Fidelity of the local API server as seen by the real kubectl (v1.32), driven through the
kubeconfig the server writes. Skips (exit 77) when kubectl is not installed."""

import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (LEASE_PATH, PV_PATH, PVC_PATH, PVCS_PATH, ApiServer,  # noqa: E402
                     claim, skip_module, wait_for)

KUBECTL = shutil.which("kubectl")

SC_YAML = """\
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: kc-hostpath
  annotations:
    storageclass.kubernetes.io/is-default-class: "true"
provisioner: hostpath-provisioner.io
reclaimPolicy: Delete
volumeBindingMode: Immediate
"""

PVC_YAML = """\
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: {name}
  namespace: {ns}
  labels:
    app: {label}
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: kc-hostpath
  resources:
    requests:
      storage: 2Gi
"""

PV_YAML = """\
apiVersion: v1
kind: PersistentVolume
metadata:
  name: {name}
spec:
  capacity:
    storage: 3Gi
  accessModes: [ReadWriteOnce, ReadOnlyMany]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: manual
  hostPath:
    path: /tmp/{name}
"""

LEASE_YAML = """\
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata:
  name: kc-lease
  namespace: kube-system
spec:
  holderIdentity: node-a_1234
  leaseDurationSeconds: 15
  renewTime: "2024-05-01T10:00:00.5Z"
"""


class LineReader:
    """Reads a subprocess's stdout on a thread so lines can be awaited with a timeout."""

    def __init__(self, proc):
        self.q = queue.Queue()
        self.lines = []
        self.t = threading.Thread(target=self._run, args=(proc.stdout,), daemon=True)
        self.t.start()

    def _run(self, f):
        for line in f:
            self.q.put(line.rstrip("\n"))
        self.q.put(None)

    def wait_for(self, text, timeout):
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            try:
                line = self.q.get(timeout=left)
            except queue.Empty:
                return None
            if line is None:
                return None
            self.lines.append(line)
            if text in line:
                return line


class KubectlTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="hp-kubectl-")
        cls.api = ApiServer(cls.tmp).start()
        home = os.path.join(cls.tmp, "home")
        os.makedirs(home)
        cls.env = dict(os.environ, KUBECONFIG=cls.api.kubeconfig, HOME=home,
                       KUBECACHEDIR=os.path.join(cls.tmp, "kcache"))
        cls.env.pop("KUBERNETES_SERVICE_HOST", None)

    @classmethod
    def tearDownClass(cls):
        cls.api.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def kubectl(self, *args, stdin=None, ok=True, timeout=30):
        r = subprocess.run([KUBECTL] + list(args), input=stdin, capture_output=True, text=True,
                           env=self.env, timeout=timeout)
        if ok and r.returncode != 0:
            self.fail("kubectl %s failed (%d):\n%s%s" % (" ".join(args), r.returncode,
                                                         r.stdout, r.stderr))
        return r

    def write(self, name, text):
        path = os.path.join(self.tmp, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def setUp(self):
        if not self.api.exists("/apis/storage.k8s.io/v1/storageclasses/kc-hostpath"):
            r = self.kubectl("create", "-f", self.write("sc.yaml", SC_YAML))
            self.assertIn("storageclass.storage.k8s.io/kc-hostpath created", r.stdout)

    def test_version_and_discovery(self):
        r = self.kubectl("version", "-o", "json")
        self.assertIn('"gitVersion": "v1.32.0"', r.stdout)
        r = self.kubectl("api-resources", "--no-headers")
        rows = {line.split()[0]: line.split() for line in r.stdout.splitlines()}
        self.assertIn("pvc", rows["persistentvolumeclaims"])
        self.assertIn("pv", rows["persistentvolumes"])
        self.assertIn("storage.k8s.io/v1", rows["storageclasses"])
        self.assertIn("coordination.k8s.io/v1", rows["leases"])

    def test_create_apply_get_describe_delete(self):
        ns = "kc-apply"
        self.kubectl("create", "namespace", ns)
        f = self.write("pvc-apply.yaml", PVC_YAML.format(name="applied", ns=ns, label="one"))
        r = self.kubectl("apply", "-f", f)
        self.assertIn("persistentvolumeclaim/applied created", r.stdout)
        self.assertEqual(r.stderr, "")
        c = self.api.get(PVC_PATH % (ns, "applied"))
        self.assertIn("kubectl.kubernetes.io/last-applied-configuration",
                      c["metadata"]["annotations"])
        self.assertEqual(c["spec"]["resources"]["requests"]["storage"], "2Gi")
        r = self.kubectl("apply", "-f", f)
        self.assertIn("persistentvolumeclaim/applied unchanged", r.stdout)
        f = self.write("pvc-apply.yaml", PVC_YAML.format(name="applied", ns=ns, label="two"))
        r = self.kubectl("apply", "-f", f)
        self.assertIn("persistentvolumeclaim/applied configured", r.stdout)
        self.assertEqual(r.stderr, "")
        c = self.api.get(PVC_PATH % (ns, "applied"))
        self.assertEqual(c["metadata"]["labels"], {"app": "two"})
        # The binder annotated it (the annotation survives apply's three-way merge).
        wait_for(lambda: "volume.kubernetes.io/storage-provisioner" in self.api.get(
            PVC_PATH % (ns, "applied"))["metadata"]["annotations"], 5, what="annotation")
        r = self.kubectl("get", "pvc", "applied", "-n", ns, "-o", "json")
        obj = json.loads(r.stdout)
        self.assertEqual(obj["kind"], "PersistentVolumeClaim")
        self.assertEqual(obj["status"]["phase"], "Pending")
        self.assertEqual(obj["spec"]["storageClassName"], "kc-hostpath")
        r = self.kubectl("create", "-f", self.write("pvc2.yaml", PVC_YAML.format(
            name="created", ns=ns, label="x")))
        self.assertIn("persistentvolumeclaim/created created", r.stdout)
        r = self.kubectl("get", "pvc", "-A")
        lines = r.stdout.splitlines()
        self.assertEqual(lines[0].split()[:5], ["NAMESPACE", "NAME", "STATUS", "VOLUME",
                                                "CAPACITY"])
        self.assertTrue(any(line.split()[:3] == [ns, "applied", "Pending"] for line in lines),
                        r.stdout)
        self.assertTrue(any(line.split()[:2] == [ns, "created"] for line in lines))
        r = self.kubectl("get", "pvc", "-n", ns, "-l", "app=two", "-o", "name")
        self.assertEqual(r.stdout.split(), ["persistentvolumeclaim/applied"])
        r = self.kubectl("describe", "pvc", "applied", "-n", ns)
        self.assertEqual(r.stderr, "")
        for text in ("Name:", "applied", "StorageClass:", "kc-hostpath", "Status:", "Pending",
                     "Events:", "ExternalProvisioning"):
            self.assertIn(text, r.stdout)
        r = self.kubectl("label", "pvc", "created", "-n", ns, "tier=gold")
        self.assertIn("labeled", r.stdout)
        r = self.kubectl("annotate", "pvc", "created", "-n", ns, "note=hi")
        self.assertIn("annotated", r.stdout)
        r = self.kubectl("patch", "pvc", "created", "-n", ns, "--type", "merge", "-p",
                         '{"metadata":{"labels":{"tier":"silver"}}}')
        self.assertIn("patched", r.stdout)
        c = self.api.get(PVC_PATH % (ns, "created"))
        self.assertEqual(c["metadata"]["labels"]["tier"], "silver")
        self.assertEqual(c["metadata"]["annotations"]["note"], "hi")
        r = self.kubectl("delete", "pvc", "applied", "created", "-n", ns, timeout=60)
        self.assertIn('persistentvolumeclaim "applied" deleted', r.stdout)
        self.assertFalse(self.api.exists(PVC_PATH % (ns, "applied")))
        r = self.kubectl("get", "pvc", "-n", ns)
        self.assertIn("No resources found in %s namespace." % ns, r.stderr)
        r = self.kubectl("delete", "namespace", ns, timeout=60)
        self.assertIn('namespace "%s" deleted' % ns, r.stdout)

    def test_watch(self):
        ns = "kc-watch"
        self.api.create(PVCS_PATH % ns, claim(ns, "first", "kc-hostpath"))
        p = subprocess.Popen([KUBECTL, "get", "pvc", "-n", ns, "-w"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=self.env)
        try:
            rd = LineReader(p)
            self.assertIsNotNone(rd.wait_for("first", 15), rd.lines)
            self.assertIn("STATUS", rd.lines[0])
            wait_for(lambda: self.api.open_watches(PVCS_PATH % ns), 10, what="kubectl watch")
            self.api.create(PVCS_PATH % ns, claim(ns, "second", "kc-hostpath"))
            line = rd.wait_for("second", 15)
            self.assertIsNotNone(line, rd.lines)
            self.assertIn("Pending", line)
            self.api.delete(PVC_PATH % (ns, "first"))
            self.assertIsNotNone(rd.wait_for("Terminating", 15), rd.lines)
        finally:
            p.kill()  # by pid, the process this test started
            p.wait(10)
            p.stdout.close()
            p.stderr.close()

    def test_storageclass_pv_and_lease(self):
        r = self.kubectl("get", "storageclass")
        self.assertIn("kc-hostpath (default)", r.stdout)
        self.assertIn("hostpath-provisioner.io", r.stdout)
        r = self.kubectl("apply", "-f", self.write("pv.yaml", PV_YAML.format(name="kc-pv")))
        self.assertIn("persistentvolume/kc-pv created", r.stdout)
        wait_for(lambda: self.api.get(PV_PATH % "kc-pv")["status"]["phase"] == "Available",
                 5, what="pv available")
        r = self.kubectl("get", "pv", "kc-pv")
        self.assertEqual(r.stdout.splitlines()[1].split()[:7],
                         ["kc-pv", "3Gi", "RWO,ROX", "Retain", "Available", "manual", "<unset>"])
        r = self.kubectl("create", "-f", self.write("lease.yaml", LEASE_YAML))
        self.assertIn("lease.coordination.k8s.io/kc-lease created", r.stdout)
        lease = self.api.get(LEASE_PATH % ("kube-system", "kc-lease"))
        self.assertEqual(lease["spec"]["renewTime"], "2024-05-01T10:00:00.500000Z")
        r = self.kubectl("get", "lease", "-n", "kube-system")
        self.assertIn("node-a_1234", r.stdout)
        r = self.kubectl("get", "lease", "kc-lease", "-n", "kube-system", "-o",
                         "jsonpath={.spec.holderIdentity}")
        self.assertEqual(r.stdout, "node-a_1234")
        self.kubectl("delete", "lease", "kc-lease", "-n", "kube-system")
        self.assertFalse(self.api.exists(LEASE_PATH % ("kube-system", "kc-lease")))
        self.kubectl("delete", "pv", "kc-pv", timeout=60)
        self.assertFalse(self.api.exists(PV_PATH % "kc-pv"))

    def test_large_gzipped_list(self):
        ns = "kc-big"
        for i in range(3):
            self.api.create(PVCS_PATH % ns, claim(ns, "big%d" % i, "kc-hostpath", annotations={
                "example.com/blob": "x" * 60000}))
        r = self.kubectl("get", "pvc", "-n", ns, "-o", "name")
        self.assertEqual(r.stdout.split(), ["persistentvolumeclaim/big%d" % i for i in range(3)])
        r = self.kubectl("get", "pvc", "-n", ns, "-o", "json")
        self.assertEqual(len(json.loads(r.stdout)["items"]), 3)

    def test_errors(self):
        r = self.kubectl("get", "pvc", "nope", ok=False)
        self.assertEqual(r.returncode, 1)
        self.assertIn('Error from server (NotFound): persistentvolumeclaims "nope" not found',
                      r.stderr)
        bad = PVC_YAML.format(name="Bad_Name", ns="default", label="x")
        r = self.kubectl("create", "-f", "-", stdin=bad, ok=False)
        self.assertEqual(r.returncode, 1)
        self.assertIn('PersistentVolumeClaim "Bad_Name" is invalid: metadata.name: Invalid '
                      'value: "Bad_Name"', r.stderr)
        good = PVC_YAML.format(name="twice", ns="default", label="x")
        self.kubectl("create", "-f", "-", stdin=good)
        r = self.kubectl("create", "-f", "-", stdin=good, ok=False)
        self.assertIn('Error from server (AlreadyExists): error when creating "STDIN": '
                      'persistentvolumeclaims "twice" already exists', r.stderr)
        self.kubectl("delete", "pvc", "twice", timeout=60)


if __name__ == "__main__":
    if not KUBECTL:
        skip_module("kubectl not installed")
    unittest.main()
