"""The manifests in manifests/ against the local API server, with the real kubectl (v1.32).

ManifestsTest: `kubectl apply -k manifests/` and `kubectl apply -f` of every file succeed with
kubectl's default (strict, server-side) field validation; what was stored is what the
provisioner needs (RBAC rules, Deployment/DaemonSet wiring, StorageClasses); applying twice is
idempotent; an edited manifest re-applies through strategic merge patch and back; every flag
in the workload args exists in the binary's --help.

InstallManifestTest: manifests/install.yaml is exactly `kubectl kustomize manifests/` (after its
comment header), so `kubectl apply -f manifests/install.yaml` installs what `kubectl apply -k`
does; the image the manifests run is the one scripts/build-image.sh builds, tagged with the
project version.

RbacCoverageTest: the server enforces RBAC (--authorization RBAC). The provisioner runs as the
manifests' ServiceAccount (a client certificate for system:serviceaccount:<ns>:<name>) with the
Deployment's (then the DaemonSet's) args and environment, through provisioning, deletion,
aggregated events, leader election and a reschedule. Every request it made is mapped to
(apiGroup, resource, verb): each must be granted by rbac.yaml (nothing was refused), and
rbac.yaml must grant nothing the code never uses.

Skips (exit 77) when kubectl is not installed.
"""

import difflib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (EVENTS_PATH, NODES_PATH, PV_PATH, PVC_PATH, PVCS_PATH,  # noqa: E402
                     SANITIZER, ApiServer, Client, ProvisionerTestCase, binary_path, claim, node,
                     require_binary, skip_module, wait_for)

KUBECTL = shutil.which("kubectl")
SRC = os.environ.get("HP_SOURCE_ROOT") or os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
MANIFESTS = os.path.join(SRC, "manifests")
FILES = ("rbac.yaml", "storageclass.yaml", "deployment.yaml", "daemonset.yaml",
         "test-claim.yaml", "test-pod.yaml")
INSTALL = os.path.join(MANIFESTS, "install.yaml")
NS = "hostpath-provisioner"
SA = "hostpath-provisioner"
SA_USER = "system:serviceaccount:%s:%s" % (NS, SA)
RBAC = "/apis/rbac.authorization.k8s.io/v1"
DEPLOY_PATH = "/apis/apps/v1/namespaces/%s/deployments/%s" % (NS, "hostpath-provisioner")
DS_PATH = "/apis/apps/v1/namespaces/%s/daemonsets/%s" % (NS, "hostpath-provisioner-node")
CR_PATH = RBAC + "/clusterroles/hostpath-provisioner"
CRB_PATH = RBAC + "/clusterrolebindings/hostpath-provisioner"
ROLE_PATH = RBAC + "/namespaces/%s/roles/hostpath-provisioner-leader-election" % NS
RB_PATH = RBAC + "/namespaces/%s/rolebindings/hostpath-provisioner-leader-election" % NS
CAP_ROLE_PATH = RBAC + "/namespaces/%s/roles/hostpath-provisioner-capacity" % NS
CAP_RB_PATH = RBAC + "/namespaces/%s/rolebindings/hostpath-provisioner-capacity" % NS
DRIVER_PATH = "/apis/storage.k8s.io/v1/csidrivers/hostpath-provisioner.io"
CAPS_PATH = "/apis/storage.k8s.io/v1/namespaces/%s/csistoragecapacities" % NS
SA_PATH = "/api/v1/namespaces/%s/serviceaccounts/%s" % (NS, SA)
SC_PATH = "/apis/storage.k8s.io/v1/storageclasses/%s"
SELECTED = "volume.kubernetes.io/selected-node"

# The ClusterRole and Role the provisioner needs, as (apiGroup, resource, verb).
CLUSTER_GRANTS = {("", "persistentvolumes", v)
                  for v in ("get", "list", "watch", "create", "delete", "patch")} | \
    {("", "persistentvolumeclaims", v) for v in ("get", "list", "watch", "patch")} | \
    {("", "persistentvolumeclaims/status", "patch")} | \
    {("storage.k8s.io", "storageclasses", v) for v in ("get", "list", "watch")} | \
    {("", "events", v) for v in ("create", "patch")} | \
    {("storage.k8s.io", "csidrivers", v) for v in ("get", "create", "update")} | \
    {("", "nodes", "get")}
ROLE_GRANTS = {("coordination.k8s.io", "leases", v) for v in ("get", "create", "update")}
CAP_ROLE_GRANTS = {("storage.k8s.io", "csistoragecapacities", v)
                   for v in ("list", "watch", "create", "patch", "delete")}


def kubectl_env(tmp, kubeconfig):
    home = os.path.join(tmp, "home")
    os.makedirs(home, exist_ok=True)
    env = dict(os.environ, KUBECONFIG=kubeconfig, HOME=home,
               KUBECACHEDIR=os.path.join(tmp, "kcache"))
    env.pop("KUBERNETES_SERVICE_HOST", None)
    return env


def run_kubectl(env, *args, ok=True, timeout=60):
    r = subprocess.run([KUBECTL] + list(args), capture_output=True, text=True, env=env,
                       timeout=timeout)
    if ok and r.returncode != 0:
        raise AssertionError("kubectl %s failed (%d):\n%s%s" % (" ".join(args), r.returncode,
                                                               r.stdout, r.stderr))
    return r


def rule_set(rules):
    """A role's rules as a set of (apiGroup, resource, verb); resourceNames and wildcards
    would widen the grant and are refused here."""
    out = set()
    for r in rules or []:
        assert not r.get("resourceNames") and not r.get("nonResourceURLs"), r
        for g in r["apiGroups"]:
            for res in r["resources"]:
                for v in r["verbs"]:
                    assert "*" not in (g, res, v), "wildcard in %s" % r
                    out.add((g, res, v))
    return out


def container(obj):
    cs = obj["spec"]["template"]["spec"]["containers"]
    assert len(cs) == 1, cs
    return cs[0]


def help_flags(binary):
    """{flag name: takes a value} from the provisioner's --help."""
    r = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    flags = {}
    for line in r.stdout.splitlines():
        m = re.match(r"^\s+(?:-\w, )?--([a-z0-9][a-z0-9-]*)(?: (\w+))?(?:\s{2,}|$)", line)
        if m:
            flags[m.group(1)] = m.group(2) is not None
    return flags


def workload_args(obj):
    """The container args as {flag: value or None}."""
    out = {}
    for a in container(obj)["args"]:
        assert a.startswith("--"), a
        name, eq, val = a[2:].partition("=")
        out[name] = val if eq else None
    return out


class ManifestsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="hp-manifests-")
        cls.api = ApiServer(cls.tmp, authorization="RBAC").start()
        cls.env = kubectl_env(cls.tmp, cls.api.kubeconfig)

    @classmethod
    def tearDownClass(cls):
        cls.api.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def kubectl(self, *args, ok=True):
        return run_kubectl(self.env, *args, ok=ok)

    def apply_all(self):
        """kubectl apply -k, then -f of every file; returns {object: action} of the -f runs."""
        if not self.api.exists(DEPLOY_PATH):
            r = self.kubectl("apply", "-k", MANIFESTS)
            self.assertEqual(r.stderr, "")
        actions = {}
        for f in FILES:
            r = self.kubectl("apply", "-f", os.path.join(MANIFESTS, f))
            self.assertEqual(r.stderr, "", f)
            for line in r.stdout.splitlines():
                obj, _, action = line.rpartition(" ")
                actions[obj] = action
        return actions

    def write(self, name, text):
        path = os.path.join(self.tmp, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def test_01_apply_kustomization_then_each_file(self):
        r = self.kubectl("apply", "-k", MANIFESTS)
        self.assertEqual(r.stderr, "")
        self.assertEqual(sorted(r.stdout.splitlines()), sorted([
            "namespace/hostpath-provisioner created",
            "serviceaccount/hostpath-provisioner created",
            "role.rbac.authorization.k8s.io/hostpath-provisioner-leader-election created",
            "role.rbac.authorization.k8s.io/hostpath-provisioner-capacity created",
            "clusterrole.rbac.authorization.k8s.io/hostpath-provisioner created",
            "rolebinding.rbac.authorization.k8s.io/hostpath-provisioner-leader-election "
            "created",
            "rolebinding.rbac.authorization.k8s.io/hostpath-provisioner-capacity created",
            "clusterrolebinding.rbac.authorization.k8s.io/hostpath-provisioner created",
            "storageclass.storage.k8s.io/hostpath created",
            "storageclass.storage.k8s.io/hostpath-local created",
            "deployment.apps/hostpath-provisioner created"]))
        # kubectl validated on the server (it found the kinds in /openapi/v3): no client-side
        # schema download, strict field validation, no warnings.
        for req in self.api.requests(method="POST"):
            self.assertIn("fieldValidation=Strict", req["query"], req)
            self.assertEqual(req["warnings"], [], req)
            self.assertEqual(req["status"], 201, req)
        actions = self.apply_all()
        self.assertEqual(actions["deployment.apps/hostpath-provisioner"], "unchanged")
        self.assertEqual(actions["daemonset.apps/hostpath-provisioner-node"], "created")
        self.assertEqual(actions["persistentvolumeclaim/hostpath-test-claim"], "created")
        self.assertEqual(actions["pod/hostpath-test-pod"], "created")
        for obj in ("namespace/hostpath-provisioner", "serviceaccount/hostpath-provisioner",
                    "clusterrole.rbac.authorization.k8s.io/hostpath-provisioner",
                    "storageclass.storage.k8s.io/hostpath-local"):
            self.assertEqual(actions[obj], "unchanged", obj)

    def test_02_apply_twice_is_idempotent(self):
        self.apply_all()
        rvs = {p: self.api.get(p)["metadata"]["resourceVersion"]
               for p in (DEPLOY_PATH, DS_PATH, CR_PATH, ROLE_PATH, SA_PATH)}
        since = self.api.requests()[-1]["seq"]
        actions = self.apply_all()
        self.assertEqual(len(actions), 14, actions)
        self.assertEqual({a for a in actions.values()}, {"unchanged"}, actions)
        r = self.kubectl("apply", "-k", MANIFESTS)
        self.assertEqual({line.rpartition(" ")[2] for line in r.stdout.splitlines()},
                         {"unchanged"}, r.stdout)
        writes = [q for q in self.api.requests(since=since) if q["method"] != "GET"]
        self.assertEqual(writes, [])
        for p, rv in rvs.items():
            self.assertEqual(self.api.get(p)["metadata"]["resourceVersion"], rv, p)
        # kubectl diff (a server-side dry-run of the same patch) sees nothing either.
        for f in FILES:
            r = self.kubectl("diff", "-f", os.path.join(MANIFESTS, f), ok=False)
            self.assertEqual((r.returncode, r.stdout), (0, ""), f + r.stderr)

    def test_03_rbac(self):
        self.apply_all()
        sa = self.api.get(SA_PATH)
        self.assertEqual(sa["metadata"]["namespace"], NS)
        cr = self.api.get(CR_PATH)
        self.assertEqual(rule_set(cr["rules"]), CLUSTER_GRANTS)
        self.assertNotIn("aggregationRule", cr)
        role = self.api.get(ROLE_PATH)
        self.assertEqual(role["metadata"]["namespace"], NS)
        self.assertEqual(rule_set(role["rules"]), ROLE_GRANTS)
        subject = [{"kind": "ServiceAccount", "name": SA, "namespace": NS}]
        crb = self.api.get(CRB_PATH)
        self.assertEqual(crb["roleRef"], {"apiGroup": "rbac.authorization.k8s.io",
                                          "kind": "ClusterRole", "name": "hostpath-provisioner"})
        self.assertEqual(crb["subjects"], subject)
        rb = self.api.get(RB_PATH)
        self.assertEqual(rb["roleRef"], {"apiGroup": "rbac.authorization.k8s.io",
                                         "kind": "Role",
                                         "name": "hostpath-provisioner-leader-election"})
        self.assertEqual(rb["subjects"], subject)
        # The CSIStorageCapacity objects live in the provisioner's namespace (POD_NAMESPACE).
        role = self.api.get(CAP_ROLE_PATH)
        self.assertEqual(role["metadata"]["namespace"], NS)
        self.assertEqual(rule_set(role["rules"]), CAP_ROLE_GRANTS)
        rb = self.api.get(CAP_RB_PATH)
        self.assertEqual(rb["roleRef"], {"apiGroup": "rbac.authorization.k8s.io",
                                         "kind": "Role", "name": "hostpath-provisioner-capacity"})
        self.assertEqual(rb["subjects"], subject)
        r = self.kubectl("get", "clusterrolebinding", "hostpath-provisioner", "-o", "wide",
                         "--no-headers")
        self.assertIn("ClusterRole/hostpath-provisioner", r.stdout)
        self.assertIn("%s/%s" % (NS, SA), r.stdout)

    def check_workload(self, obj, kind):
        self.assertEqual(obj["kind"], kind)
        self.assertEqual(obj["metadata"]["namespace"], NS)
        self.assertEqual(obj["metadata"]["generation"], 1)
        spec = obj["spec"]
        pod = spec["template"]["spec"]
        labels = spec["template"]["metadata"]["labels"]
        for k, v in spec["selector"]["matchLabels"].items():
            self.assertEqual(labels.get(k), v)
        self.assertEqual(pod["serviceAccountName"], SA)
        self.assertEqual(pod["securityContext"]["seccompProfile"], {"type": "RuntimeDefault"})
        c = container(obj)
        self.assertEqual(c["image"], "localhost/hostpath-provisioner:0.1.0")
        args = workload_args(obj)
        self.assertEqual(set(args), {"provisioner-name", "pv-dir", "leader-elect",
                                     "metrics-address"})
        self.assertEqual(args["provisioner-name"], "hostpath-provisioner.io")
        self.assertIsNone(args["leader-elect"])
        env = {e["name"]: e for e in c["env"]}
        self.assertEqual(env["NODE_NAME"]["valueFrom"]["fieldRef"],
                         {"apiVersion": "v1", "fieldPath": "spec.nodeName"})
        self.assertEqual(env["POD_NAMESPACE"]["valueFrom"]["fieldRef"],
                         {"apiVersion": "v1", "fieldPath": "metadata.namespace"})
        # The volume directory is a hostPath mounted where --pv-dir points.
        vols = {v["name"]: v for v in pod["volumes"]}
        mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
        self.assertIn(args["pv-dir"], mounts)
        hp = vols[mounts[args["pv-dir"]]]["hostPath"]
        self.assertEqual(hp, {"path": "/var/lib/hostpath-provisioner",
                              "type": "DirectoryOrCreate"})
        # Probes reach the metrics server on the port --metrics-address listens on.
        ports = {p["name"]: p for p in c["ports"]}
        self.assertEqual(args["metrics-address"], ":%d" % ports["metrics"]["containerPort"])
        self.assertEqual(c["livenessProbe"]["httpGet"]["path"], "/healthz")
        self.assertEqual(c["readinessProbe"]["httpGet"]["path"], "/readyz")
        for p in ("livenessProbe", "readinessProbe"):
            self.assertEqual(c[p]["httpGet"]["port"], "metrics")
            self.assertEqual(c[p]["httpGet"]["scheme"], "HTTP")  # defaulted
        sc = c["securityContext"]
        self.assertIs(sc["readOnlyRootFilesystem"], True)
        self.assertIs(sc["allowPrivilegeEscalation"], False)
        self.assertEqual(sc["capabilities"]["drop"], ["ALL"])
        self.assertEqual(c["terminationMessagePolicy"], "File")  # defaulted like a real server
        return args

    def test_04_deployment_and_daemonset(self):
        self.apply_all()
        dep = self.api.get(DEPLOY_PATH)
        self.check_workload(dep, "Deployment")
        self.assertEqual(dep["spec"]["replicas"], 1)
        self.assertEqual(dep["spec"]["strategy"], {"type": "Recreate"})
        self.assertEqual(dep["status"], {})
        ds = self.api.get(DS_PATH)
        self.check_workload(ds, "DaemonSet")
        self.assertEqual(ds["metadata"]["annotations"]
                         ["deprecated.daemonset.template.generation"], "1")
        self.assertEqual(ds["spec"]["updateStrategy"]["type"], "RollingUpdate")
        # Same provisioner, same flags: the two differ only in how they are scheduled.
        self.assertEqual(container(dep), container(ds))
        r = self.kubectl("get", "deploy,ds", "-n", NS, "--no-headers")
        self.assertRegex(r.stdout, r"deployment.apps/hostpath-provisioner\s+0/1\s+0\s+0\s")
        self.assertRegex(r.stdout, r"daemonset.apps/hostpath-provisioner-node(\s+0){5}\s+"
                         r"<none>\s")

    def test_05_storage_classes(self):
        self.apply_all()
        dep_args = workload_args(self.api.get(DEPLOY_PATH))
        imm = self.api.get(SC_PATH % "hostpath")
        wffc = self.api.get(SC_PATH % "hostpath-local")
        self.assertEqual(imm["volumeBindingMode"], "Immediate")
        self.assertEqual(wffc["volumeBindingMode"], "WaitForFirstConsumer")
        for sc in (imm, wffc):
            self.assertEqual(sc["provisioner"], dep_args["provisioner-name"])
            self.assertEqual(sc["reclaimPolicy"], "Delete")
            self.assertLessEqual(set(sc.get("parameters") or {}),
                                 {"pathPattern", "mode", "uid", "gid", "onDelete"})
        c = self.api.get(PVC_PATH % ("default", "hostpath-test-claim"))
        self.assertEqual(c["spec"]["storageClassName"], "hostpath")

    def test_06_flags_exist_in_the_binary(self):
        require_binary()
        flags = help_flags(binary_path())
        self.assertIn("kubeconfig", flags)  # the parser works
        self.assertIn("leader-elect", flags)
        self.apply_all()
        for path in (DEPLOY_PATH, DS_PATH):
            for name, val in workload_args(self.api.get(path)).items():
                self.assertIn(name, flags, "%s passes --%s, which the binary does not have"
                              % (path, name))
                if val is None:
                    self.assertFalse(flags[name], "--%s needs a value" % name)
            # And the binary accepts them together (it fails fast on a bad flag): a dry start
            # with the manifest's args and --help exits 0.
            args = ["--" + n + ("=" + v if v is not None else "")
                    for n, v in workload_args(self.api.get(path)).items()]
            r = subprocess.run([binary_path()] + args + ["--help"], capture_output=True,
                               text=True, timeout=30)
            self.assertEqual(r.returncode, 0, r.stderr)

    def test_07_edit_and_reapply_uses_strategic_merge(self):
        self.apply_all()
        with open(os.path.join(MANIFESTS, "deployment.yaml")) as f:
            orig = f.read()
        edited = orig.replace("image: localhost/hostpath-provisioner:0.1.0",
                              "image: localhost/hostpath-provisioner:0.2.0")
        edited = edited.replace("    type: Recreate", "    type: RollingUpdate")
        edited = edited.replace("            - --leader-elect\n",
                                "            - --leader-elect\n            - --v=2\n")
        edited = edited.replace("""          env:
""", """          env:
            - name: PV_RECLAIM_POLICY
              value: Retain
""")
        start = edited.index("          readinessProbe:")
        end = edited.index("          resources:")
        edited = edited[:start] + edited[end:]
        for change in ("0.2.0", "--v=2", "PV_RECLAIM_POLICY", "type: RollingUpdate"):
            self.assertIn(change, edited)
        self.assertNotIn("readinessProbe", edited)
        since = self.api.requests()[-1]["seq"]
        r = self.kubectl("apply", "-f", self.write("deployment-edited.yaml", edited))
        self.assertEqual(r.stdout.strip(), "deployment.apps/hostpath-provisioner configured")
        patches = self.api.requests(since=since, method="PATCH")
        self.assertEqual(len(patches), 1, patches)
        self.assertEqual(patches[0]["content_type"], "application/strategic-merge-patch+json")
        self.assertEqual(patches[0]["status"], 200)
        dep = self.api.get(DEPLOY_PATH)
        c = container(dep)
        self.assertEqual(c["image"], "localhost/hostpath-provisioner:0.2.0")
        self.assertEqual(c["args"][-2:], ["--v=2", "--metrics-address=:8080"])
        self.assertEqual([e["name"] for e in c["env"]],
                         ["PV_RECLAIM_POLICY", "NODE_NAME", "POD_NAMESPACE"])
        self.assertNotIn("readinessProbe", c)
        self.assertEqual(c["livenessProbe"]["httpGet"]["path"], "/healthz")
        self.assertEqual(dep["spec"]["strategy"], {"type": "RollingUpdate", "rollingUpdate": {
            "maxUnavailable": "25%", "maxSurge": "25%"}})
        self.assertEqual(dep["metadata"]["generation"], 2)
        # Back to the file: the three-way merge removes what the edit added, and $retainKeys
        # drops the defaulted rollingUpdate of the old strategy.
        r = self.kubectl("apply", "-f", os.path.join(MANIFESTS, "deployment.yaml"))
        self.assertEqual(r.stdout.strip(), "deployment.apps/hostpath-provisioner configured")
        dep = self.api.get(DEPLOY_PATH)
        self.assertEqual(dep["spec"]["strategy"], {"type": "Recreate"})
        self.assertEqual(dep["metadata"]["generation"], 3)
        c = container(dep)
        self.assertEqual([e["name"] for e in c["env"]], ["NODE_NAME", "POD_NAMESPACE"])
        self.assertEqual(c["readinessProbe"]["httpGet"]["path"], "/readyz")
        self.assertNotIn("--v=2", c["args"])
        self.assertEqual(c["image"], "localhost/hostpath-provisioner:0.1.0")
        r = self.kubectl("apply", "-f", os.path.join(MANIFESTS, "deployment.yaml"))
        self.assertEqual(r.stdout.strip(), "deployment.apps/hostpath-provisioner unchanged")

        # A DaemonSet template change bumps its template generation.
        with open(os.path.join(MANIFESTS, "daemonset.yaml")) as f:
            ds_orig = f.read()
        r = self.kubectl("apply", "-f", self.write("ds-edited.yaml", ds_orig.replace(
            "memory: 64Mi", "memory: 96Mi")))
        self.assertEqual(r.stdout.strip(), "daemonset.apps/hostpath-provisioner-node configured")
        ds = self.api.get(DS_PATH)
        self.assertEqual(container(ds)["resources"]["limits"], {"memory": "96Mi"})
        self.assertEqual(ds["metadata"]["annotations"]
                         ["deprecated.daemonset.template.generation"], "2")
        self.kubectl("apply", "-f", os.path.join(MANIFESTS, "daemonset.yaml"))

        # A ClusterRole rule edit and back (rules are an atomic list: replaced whole).
        with open(os.path.join(MANIFESTS, "rbac.yaml")) as f:
            rbac = f.read()
        narrowed = rbac.replace('verbs: ["create", "patch"]', 'verbs: ["create"]')
        self.assertNotEqual(narrowed, rbac)
        r = self.kubectl("apply", "-f", self.write("rbac-edited.yaml", narrowed))
        self.assertIn("clusterrole.rbac.authorization.k8s.io/hostpath-provisioner configured",
                      r.stdout)
        self.assertEqual(rule_set(self.api.get(CR_PATH)["rules"]),
                         CLUSTER_GRANTS - {("", "events", "patch")})
        self.kubectl("apply", "-f", os.path.join(MANIFESTS, "rbac.yaml"))
        self.assertEqual(rule_set(self.api.get(CR_PATH)["rules"]), CLUSTER_GRANTS)

    def test_08_strict_validation_refuses_a_typo(self):
        with open(os.path.join(MANIFESTS, "deployment.yaml")) as f:
            text = f.read().replace("name: hostpath-provisioner\n  namespace",
                                    "name: typo\n  namespace")
        text = text.replace("readinessProbe:", "readinesProbe:")
        r = self.kubectl("apply", "-f", self.write("typo.yaml", text), ok=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn('Deployment in version "v1" cannot be handled as a Deployment: strict '
                      'decoding error: unknown field "spec.template.spec.containers[0].'
                      'readinesProbe"', r.stderr)
        self.assertFalse(self.api.exists("/apis/apps/v1/namespaces/%s/deployments/typo" % NS))

    def test_09_install_yaml_matches_what_is_applied(self):
        # After `kubectl apply -k` (and the other files), the single-file install changes
        # nothing: same objects, accepted by strict server-side validation.
        self.apply_all()
        r = self.kubectl("apply", "-f", INSTALL)
        self.assertEqual(r.stderr, "")
        lines = r.stdout.splitlines()
        self.assertEqual(len(lines), 11, r.stdout)
        self.assertEqual({line.rpartition(" ")[2] for line in lines}, {"unchanged"}, r.stdout)


DEPLOYMENT = {
    "apiVersion": "apps/v1", "kind": "Deployment",
    "metadata": {"name": "web", "namespace": "default"},
    "spec": {"selector": {"matchLabels": {"app": "web"}},
             "template": {"metadata": {"labels": {"app": "web"}},
                          "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}}


class ServedKindsTest(unittest.TestCase):
    """The new kinds and the RBAC authorizer, straight through the API (what kubectl relies
    on above, checked where a client sees it)."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="hp-kinds-")
        cls.api = ApiServer(cls.tmp, authorization="RBAC").start()

    @classmethod
    def tearDownClass(cls):
        cls.api.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def fails(self, code, fn, *args, **kw):
        with self.assertRaises(Exception) as cm:
            fn(*args, **kw)
        self.assertEqual(getattr(cm.exception, "status", None), code, cm.exception)
        return cm.exception.body

    def test_discovery_and_openapi(self):
        apps = {r["name"]: r for r in self.api.get("/apis/apps/v1")["resources"]}
        self.assertEqual(apps["deployments"]["shortNames"], ["deploy"])
        self.assertEqual(apps["deployments"]["categories"], ["all"])
        self.assertEqual(apps["daemonsets"]["shortNames"], ["ds"])
        self.assertTrue(apps["daemonsets"]["namespaced"])
        self.assertEqual(apps["deployments/status"]["verbs"], ["get", "patch", "update"])
        core = {r["name"]: r for r in self.api.get("/api/v1")["resources"]}
        self.assertEqual(core["serviceaccounts"]["shortNames"], ["sa"])
        self.assertEqual(core["serviceaccounts"]["kind"], "ServiceAccount")
        rbac = {r["name"]: r for r in self.api.get(RBAC)["resources"]}
        self.assertEqual({n: r["namespaced"] for n, r in rbac.items()},
                         {"clusterroles": False, "clusterrolebindings": False, "roles": True,
                          "rolebindings": True})
        self.assertEqual(rbac["roles"]["verbs"], ["create", "delete", "deletecollection", "get",
                                                  "list", "patch", "update", "watch"])
        root = self.api.get("/openapi/v3")["paths"]
        doc = self.api.client.request("GET", root["apis/apps/v1"]["serverRelativeURL"]).body
        patch = doc["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"]["patch"]
        self.assertEqual(patch["x-kubernetes-group-version-kind"],
                         {"group": "apps", "version": "v1", "kind": "Deployment"})
        self.assertIn("fieldValidation", [p["name"] for p in patch["parameters"]])
        self.assertIn("apis/rbac.authorization.k8s.io/v1", root)

    def test_deployment_defaults_generation_and_validation(self):
        path = "/apis/apps/v1/namespaces/default/deployments"
        d = self.api.create(path, DEPLOYMENT)
        self.assertEqual(d["metadata"]["generation"], 1)
        self.assertEqual(d["spec"]["strategy"], {"type": "RollingUpdate", "rollingUpdate": {
            "maxUnavailable": "25%", "maxSurge": "25%"}})
        self.assertEqual(d["spec"]["template"]["metadata"]["creationTimestamp"], None)
        c = d["spec"]["template"]["spec"]["containers"][0]
        self.assertEqual(c["imagePullPolicy"], "Always")  # no tag: latest
        self.assertEqual(d["status"], {})
        one = path + "/web"
        d = self.api.patch(one, {"metadata": {"labels": {"x": "y"}}})
        self.assertEqual(d["metadata"]["generation"], 1)  # labels only
        d = self.api.patch(one, {"spec": {"replicas": 3}})
        self.assertEqual(d["metadata"]["generation"], 2)
        d = self.api.patch(one, {"metadata": {"annotations": {"a": "b"}}})
        self.assertEqual(d["metadata"]["generation"], 3)  # copied to ReplicaSets: bumps
        d = self.api.patch(one + "/status", {"status": {"replicas": 3, "readyReplicas": 1}})
        self.assertEqual((d["metadata"]["generation"], d["status"]["readyReplicas"]), (3, 1))
        d = self.api.patch(one, {"spec": {"replicas": 4}, "status": {"readyReplicas": 9}})
        self.assertEqual(d["status"]["readyReplicas"], 1)  # the main resource keeps status
        body = self.fails(422, self.api.patch, one, {"spec": {"selector": {
            "matchLabels": {"app": "other"}}}})
        self.assertIn('spec.selector: Invalid value: &v1.LabelSelector{MatchLabels:map[string]'
                      'string{"app":"other"}, MatchExpressions:[]v1.LabelSelectorRequirement(nil)'
                      '}: field is immutable', body["message"])
        bad = json.loads(json.dumps(DEPLOYMENT))
        bad["metadata"]["name"] = "bad"
        bad["spec"]["template"]["metadata"]["labels"] = {"app": "nope"}
        body = self.fails(422, self.api.create, path, bad)
        self.assertEqual(body["message"], 'Deployment.apps "bad" is invalid: spec.template.'
                         'metadata.labels: Invalid value: map[string]string{"app":"nope"}: '
                         '`selector` does not match template `labels`')
        bad["spec"]["template"]["metadata"]["labels"] = {"app": "web"}
        bad["spec"]["template"]["spec"]["containers"][0]["imagePullPolicee"] = "x"
        body = self.fails(400, self.api.create, path, bad, fieldValidation="Strict")
        self.assertIn('strict decoding error: unknown field "spec.template.spec.containers[0].'
                      'imagePullPolicee"', body["message"])
        self.api.delete(one)

    def test_rbac_validation(self):
        crbs = RBAC + "/clusterrolebindings"
        body = self.fails(422, self.api.create, crbs, {
            "metadata": {"name": "x"}, "roleRef": {"kind": "Role", "name": "r"},
            "subjects": [{"kind": "ServiceAccount", "name": "s"}]})
        self.assertEqual(body["message"], 'ClusterRoleBinding.rbac.authorization.k8s.io "x" is '
                         'invalid: [roleRef.kind: Unsupported value: "Role": supported values: '
                         '"ClusterRole", subjects[0].namespace: Required value]')
        crb = self.api.create(crbs, {"metadata": {"name": "system:x"},
                                     "roleRef": {"kind": "ClusterRole", "name": "a"},
                                     "subjects": [{"kind": "User", "name": "u"}]})
        self.assertEqual(crb["roleRef"]["apiGroup"], "rbac.authorization.k8s.io")  # defaulted
        self.assertEqual(crb["subjects"][0]["apiGroup"], "rbac.authorization.k8s.io")
        body = self.fails(422, self.api.patch, crbs + "/system:x", {"roleRef": {"name": "b"}})
        self.assertIn('roleRef: Invalid value: rbac.RoleRef{APIGroup:"rbac.authorization.k8s.io'
                      '", Kind:"ClusterRole", Name:"b"}: cannot change roleRef', body["message"])
        body = self.fails(422, self.api.create, RBAC + "/namespaces/default/roles", {
            "metadata": {"name": "r"}, "rules": [{"apiGroups": [""], "resources": ["pods"]},
                                                 {"verbs": ["get"],
                                                  "nonResourceURLs": ["/x"]}]})
        self.assertEqual(body["message"], 'Role.rbac.authorization.k8s.io "r" is invalid: '
                         '[rules[0].verbs: Required value: verbs must contain at least one '
                         'value, rules[1].nonResourceURLs: Invalid value: ["/x"]: namespaced '
                         'rules cannot apply to non-resource URLs]')

    def test_rbac_authorizer(self):
        ns = "authz"
        cr = {"metadata": {"name": "claims-reader"}, "rules": [
            {"apiGroups": [""], "resources": ["persistentvolumeclaims"],
             "verbs": ["get", "list"]},
            {"apiGroups": [""], "resources": ["persistentvolumeclaims/status"],
             "verbs": ["patch"], "resourceNames": ["only"]}]}
        self.api.create(RBAC + "/clusterroles", cr)
        self.api.create(RBAC + "/namespaces/%s/rolebindings" % ns, {
            "metadata": {"name": "readers"},
            "roleRef": {"kind": "ClusterRole", "name": "claims-reader",
                        "apiGroup": "rbac.authorization.k8s.io"},
            "subjects": [{"kind": "Group", "name": "readers"}]})
        self.api.create(PVCS_PATH % ns, claim(ns, "only", None))
        self.api.create(PVCS_PATH % ns, claim(ns, "other", None))
        cert, key = self.api.mint_client_cert("jane", orgs=("readers",), name="jane")
        jane = Client(self.api.url, ca=self.api.ca, cert=cert, key=key)
        self.addCleanup(jane.close)
        cert, key = self.api.mint_client_cert("bob", name="bob")
        bob = Client(self.api.url, ca=self.api.ca, cert=cert, key=key)
        self.addCleanup(bob.close)
        self.assertEqual(jane.request("GET", PVCS_PATH % ns).status, 200)
        self.assertEqual(jane.request("GET", PVC_PATH % (ns, "other")).status, 200)
        # A RoleBinding grants in its namespace only.
        r = jane.request("GET", PVCS_PATH % "default")
        self.assertEqual(r.status, 403)
        self.assertEqual(r.body["message"], 'persistentvolumeclaims is forbidden: User "jane" '
                         'cannot list resource "persistentvolumeclaims" in API group "" in the '
                         'namespace "default"')
        self.assertEqual(r.body["details"], {"kind": "persistentvolumeclaims"})
        r = jane.request("GET", "/api/v1/persistentvolumeclaims")
        self.assertIn("at the cluster scope", r.body["message"])
        r = jane.request("GET", PVCS_PATH % ns, query={"watch": "1"})
        self.assertEqual(r.status, 403)
        self.assertIn("cannot watch resource", r.body["message"])
        # resourceNames, and subresources named as resource/subresource.
        st = {"status": {"phase": "Pending"}}
        r = jane.request("PATCH", PVC_PATH % (ns, "only") + "/status", st,
                         content_type="application/merge-patch+json")
        self.assertEqual(r.status, 200, r.body)
        r = jane.request("PATCH", PVC_PATH % (ns, "other") + "/status", st,
                         content_type="application/merge-patch+json")
        self.assertEqual(r.status, 403)
        self.assertEqual(r.body["message"], 'persistentvolumeclaims "other" is forbidden: User '
                         '"jane" cannot patch resource "persistentvolumeclaims/status" in API '
                         'group "" in the namespace "%s"' % ns)
        r = jane.request("DELETE", PVC_PATH % (ns, "only"))
        self.assertEqual(r.status, 403)
        # Discovery is open to every authenticated user; the rest is not.
        for path in ("/api", "/api/v1", "/apis/apps/v1", "/openapi/v3", "/version"):
            self.assertEqual(bob.request("GET", path).status, 200, path)
        self.assertEqual(bob.request("GET", PVCS_PATH % ns).status, 403)
        r = bob.request("GET", "/metrics")
        self.assertEqual((r.status, r.body["message"]),
                         (403, 'forbidden: User "bob" cannot get path "/metrics"'))
        # The admin token is in system:masters.
        self.assertEqual(self.api.request("GET", PVCS_PATH % "default").status, 200)


def split_header(text):
    """(leading comment lines, the rest) of a file's text."""
    lines = text.splitlines(keepends=True)
    n = 0
    while n < len(lines) and lines[n].startswith("#"):
        n += 1
    return "".join(lines[:n]), "".join(lines[n:])


class InstallManifestTest(unittest.TestCase):
    def test_install_yaml_is_the_kustomize_output(self):
        with tempfile.TemporaryDirectory(prefix="hp-kustomize-") as tmp:
            env = dict(os.environ, HOME=tmp, KUBECACHEDIR=os.path.join(tmp, "kcache"))
            r = subprocess.run([KUBECTL, "kustomize", MANIFESTS], capture_output=True,
                               text=True, env=env, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(INSTALL) as f:
            header, body = split_header(f.read())
        self.assertIn("kubectl kustomize manifests/", header)
        if body != r.stdout:
            diff = "".join(difflib.unified_diff(
                body.splitlines(keepends=True), r.stdout.splitlines(keepends=True),
                "manifests/install.yaml", "kubectl kustomize manifests/"))
            self.fail("manifests/install.yaml is out of date with manifests/kustomization.yaml; "
                      "regenerate it (keep its comment header):\n"
                      "  { sed -n '/^#/!q;p' manifests/install.yaml; kubectl kustomize "
                      "manifests/; } > /tmp/install.yaml && mv /tmp/install.yaml "
                      "manifests/install.yaml\n" + diff)

    def test_image_is_the_one_build_image_makes(self):
        def read(*path):
            with open(os.path.join(SRC, *path)) as f:
                return f.read()
        version = re.search(r"^\s*version\s*:\s*'([^']+)'", read("meson.build"), re.M).group(1)
        tag = re.search(r"^tag=\$\{1:-([^}]+)\}", read("scripts", "build-image.sh"),
                        re.M).group(1)
        self.assertEqual(tag, "localhost/hostpath-provisioner:" + version)
        self.assertIn('org.opencontainers.image.version="%s"' % version, read("Containerfile"))
        for f in ("install.yaml", "deployment.yaml", "daemonset.yaml"):
            images = re.findall(r"^\s*image:\s*(\S+)\s*$", read("manifests", f), re.M)
            self.assertEqual(images, [tag], f)


def request_verb(req):
    """(apiGroup, resource, namespace, verb) of a request-log entry, as RBAC sees it; None
    for a non-resource request (discovery, /version), which every user may make."""
    segs = [s for s in req["path"].split("/") if s]
    if len(segs) >= 3 and segs[0] == "api":
        group, parts = "", segs[2:]
    elif len(segs) >= 4 and segs[0] == "apis":
        group, parts = segs[1], segs[3:]
    else:
        return None
    watch = req["watch"]
    if parts[0] == "watch":
        watch, parts = True, parts[1:]
    ns = ""
    if parts[0] == "namespaces" and len(parts) > 2:
        ns, parts = parts[1], parts[2:]
    named = len(parts) > 1
    verb = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(
        req["method"])
    if req["method"] == "GET":
        verb = "watch" if watch else ("get" if named else "list")
    elif verb == "delete" and not named:
        verb = "deletecollection"
    res = parts[0] + ("/" + parts[2] if len(parts) > 2 else "")
    return group, res, ns, verb


class RbacCoverageTest(ProvisionerTestCase):
    tmp_prefix = "hp-rbac-"
    api_kw = {"authorization": "RBAC"}

    def setUp(self):
        super().setUp()
        self.env = kubectl_env(self.tmp, self.api.kubeconfig)

    def as_service_account(self):
        """A kubeconfig, and a Client, authenticating as the manifests' service account."""
        cert, key = self.api.mint_client_cert(SA_USER, orgs=(
            "system:serviceaccounts", "system:serviceaccounts:" + NS), name="sa")
        cl = Client(self.api.url, ca=self.api.ca, cert=cert, key=key)
        self.addCleanup(cl.close)
        return self.api.write_kubeconfig(os.path.join(self.tmp, "sa.kubeconfig"), cert=cert,
                                         key=key), cl

    def start(self, workload_path, node_name, pv_dir, extra=()):
        """The provisioner as the workload's pod would run it: its args (--pv-dir and
        --metrics-address pointed at test locations) and its environment, the fieldRefs
        resolved as kubelet would."""
        obj = self.api.get(workload_path)
        c = container(obj)
        args = [a for a in c["args"] if not a.startswith(("--pv-dir", "--metrics-address"))]
        env = {}
        for e in c["env"]:
            ref = (e.get("valueFrom") or {}).get("fieldRef", {}).get("fieldPath")
            env[e["name"]] = {"spec.nodeName": node_name, "metadata.namespace": NS,
                              None: e.get("value")}[ref]
        return self.spawn(*args, "--retry-base-delay", "50ms", "--retry-max-delay", "1s",
                          "--kube-api-qps", "0", "--v", "2", *extra, env=env,
                          kubeconfig=self.kubeconfig, name="prov-" + node_name, pv_dir=pv_dir)

    def stop(self, p):
        self.assertEqual(p.stop(timeout=15), 0, p.log[-3000:])
        self.assertNotRegex(p.log, SANITIZER)

    def scenario(self):
        """Provisioning, deletion, events, leader election and a reschedule as the service
        account. Returns whether the reschedule (a read-only tmpfs) could run."""
        # 1. As the Deployment runs it (leader election, NODE_NAME, POD_NAMESPACE), with
        # --add-finalizer: the only path that patches PersistentVolumes (and reads one back).
        # A CSIDriver an earlier install left with storageCapacity false: the leader updates
        # it (the csidrivers update permission).
        self.api.create("/apis/storage.k8s.io/v1/csidrivers", {
            "apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver",
            "metadata": {"name": "hostpath-provisioner.io"},
            "spec": {"attachRequired": False, "storageCapacity": False}})
        dep = self.start(DEPLOY_PATH, "node-a", os.path.join(self.tmp, "volumes"),
                         extra=("--add-finalizer",))
        dep.wait_log(r"became leader", timeout=15)
        wait_for(lambda: self.api.get(DRIVER_PATH)["spec"]["storageCapacity"], 15,
                 what="CSIDriver updated to storageCapacity: true")
        # Its capacity objects: one per class; a class deleted takes its object along (the
        # csistoragecapacities delete permission).
        self.api.create("/apis/storage.k8s.io/v1/storageclasses", {
            "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": "short-lived"}, "provisioner": "hostpath-provisioner.io"})
        wait_for(lambda: len(self.api.list(CAPS_PATH)["items"]) == 3, 15,
                 what="three CSIStorageCapacity objects")
        self.api.delete(SC_PATH % "short-lived")
        wait_for(lambda: len(self.api.list(CAPS_PATH)["items"]) == 2, 15,
                 what="the deleted class's CSIStorageCapacity object gone")
        patched = len([q for q in self.api.requests(method="PATCH", path_prefix=CAPS_PATH)
                       if q["user"] == SA_USER])
        c1 = self.add_claim("c1")
        self.wait_bound("c1")
        # The shipped class allows expansion: growing c1 patches its PV and its status.
        self.api.patch(PVC_PATH % ("default", "c1"),
                       {"spec": {"resources": {"requests": {"storage": "2Gi"}}}})
        wait_for(lambda: ((self.api.get(PVC_PATH % ("default", "c1")).get("status") or {})
                          .get("capacity") or {}).get("storage") == "2Gi", 20,
                 what="c1 grown to 2Gi")
        # Two slow PV creates that fail: each attempt outlives the half second after which a
        # "Provisioning" event is written, and the second one is aggregated by a PATCH of the
        # first (the events patch permission).
        self.api.fail_next("POST", "/api/v1/persistentvolumes", status=500, count=2,
                           delay_ms=900)
        self.add_claim("c2")
        self.wait_bound("c2")
        wait_for(lambda: any(e["reason"] == "Provisioning" and e.get("count", 1) >= 2
                             for e in self.api.list(EVENTS_PATH % "default")["items"]), 15,
                 what="an aggregated Provisioning event")
        # A class whose PVs have node affinity on another label (nodeAffinityKey): the node's
        # label is read (the nodes get permission).
        from harness import SCS_PATH, storage_class
        self.api.create(SCS_PATH, storage_class("racked", "hostpath-provisioner.io", parameters={
            "nodeAffinityKey": "topology.example.io/rack"}))
        self.api.create(PVCS_PATH % "default", claim("default", "racked", "racked"))
        self.wait_bound("racked")
        pv1 = "pvc-" + c1["metadata"]["uid"]
        self.api.delete(PVC_PATH % ("default", "c1"))
        wait_for(lambda: not self.api.exists(PV_PATH % pv1), 30, what="PV of c1 deleted")
        # The volumes changed the room: the objects followed (the patch permission).
        wait_for(lambda: len([q for q in self.api.requests(method="PATCH",
                                                           path_prefix=CAPS_PATH)
                              if q["user"] == SA_USER and q["status"] == 200]) > patched, 20,
                 what="a CSIStorageCapacity object patched")
        self.stop(dep)  # releases the lease
        # The next leader finds no CSIDriver (the create permission).
        self.api.delete(DRIVER_PATH)

        # 2. As the DaemonSet runs it on a node whose disk is read-only: the claim's
        # selected-node annotation is removed (a PVC patch) so the scheduler picks again.
        resched = True
        ro = os.path.join(self.tmp, "ro")
        m = self.mount_tmpfs(ro, "size=64k")
        if m.returncode != 0:
            resched = False
            print("\nNOTE: cannot mount a tmpfs (%s): the reschedule path (PVC "
                  "patch) is not exercised" % m.stderr.strip(), file=sys.stderr)
        else:
            # The disk turns read-only after start (a read-only --pv-dir is refused at start).
            ds = self.start(DS_PATH, "node-ro", ro)
            ds.wait_log(r"caches synced", timeout=20)
            # As leader it makes the CSIDriver again and looks node-a up: its objects are
            # node-a's, which still exists (the nodes get permission).
            wait_for(lambda: self.api.exists(DRIVER_PATH), 20, what="CSIDriver made again")
            wait_for(lambda: any(q["user"] == SA_USER for q in
                                 self.api.requests(path_prefix=NODES_PATH + "/node-a")), 20,
                     what="node-a looked up")
            r = subprocess.run(["mount", "-o", "remount,ro", ro], capture_output=True,
                               text=True, timeout=30)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.add_claim("c3", "hostpath-local", selected_node="node-ro", size="1Ki")
            wait_for(lambda: SELECTED not in (self.api.get(PVC_PATH % ("default", "c3"))
                                              ["metadata"].get("annotations") or {}), 20,
                     what="selected-node removed from c3")
            self.stop(ds)
        return resched

    def test_cluster_role_covers_exactly_what_the_code_uses(self):
        r = run_kubectl(self.env, "apply", "-k", MANIFESTS)
        self.assertNotIn("error", r.stderr.lower())
        run_kubectl(self.env, "apply", "-f", os.path.join(MANIFESTS, "daemonset.yaml"))
        granted_cluster = rule_set(self.api.get(CR_PATH)["rules"])
        granted_ns = rule_set(self.api.get(ROLE_PATH)["rules"]) | \
            rule_set(self.api.get(CAP_ROLE_PATH)["rules"])
        self.kubeconfig, sa = self.as_service_account()
        # The server enforces the stored RBAC: what rbac.yaml grants, and nothing else.
        self.assertEqual(sa.request("GET", "/api/v1/persistentvolumes").status, 200)
        r = sa.request("GET", "/apis/apps/v1/namespaces/%s/deployments" % NS)
        self.assertEqual(r.status, 403)
        self.assertEqual(r.body["message"], 'deployments.apps is forbidden: User "%s" cannot '
                         'list resource "deployments" in API group "apps" in the namespace '
                         '"%s"' % (SA_USER, NS))
        r = sa.request("GET", "/apis/coordination.k8s.io/v1/namespaces/default/leases/x")
        self.assertEqual(r.status, 403)
        self.assertIn('cannot get resource "leases" in API group "coordination.k8s.io" in '
                      'the namespace "default"', r.body["message"])
        self.api.create(NODES_PATH, node("node-a", {"topology.example.io/rack": "r1"}))
        self.api.create(NODES_PATH, node("node-ro"))
        self.api.clear_requests()

        try:
            resched = self.scenario()
        except TimeoutError:
            # A refused request is the likely cause: say so first.
            self.assertEqual([q for q in self.api.requests() if q["user"] == SA_USER and
                              q["status"] == 403], [], "the manifests' RBAC refused requests "
                             "the code makes")
            raise

        reqs = [q for q in self.api.requests() if q["user"] == SA_USER]
        self.assertTrue(reqs)
        refused = [q for q in reqs if q["status"] == 403]
        self.assertEqual(refused, [], "the manifests' RBAC refused requests the code makes")
        used_cluster, used_ns = set(), set()
        for q in reqs:
            rv = request_verb(q)
            if rv is None:
                continue
            group, res, ns, verb = rv
            if (group, res) in (("coordination.k8s.io", "leases"),
                                ("storage.k8s.io", "csistoragecapacities")):
                self.assertEqual(ns, NS, q)  # only in its own namespace: the Roles
                used_ns.add((group, res, verb))
            else:
                used_cluster.add((group, res, verb))
        # Every verb the code used is granted ...
        self.assertLessEqual(used_cluster, granted_cluster)
        self.assertLessEqual(used_ns, granted_ns)
        # ... and nothing is granted that the code does not use, except:
        # - "get" where "list" is granted and used: a list already returns every object
        #   whole, so "get" adds no access; it keeps the role usable by the same tools that
        #   read the objects (kubectl describe, other controllers' informers) and matches
        #   the sig-storage provisioner roles. The code reads PVs by name (on a lost create
        #   reply, before removing its finalizer) but never claims or classes.
        # - "list" (and so "get") where "watch" is used: the informers read their collections
        #   with streaming lists (a watch with sendInitialEvents=true, authorized as a watch),
        #   and fall back to a LIST on a server without them (older than 1.27, or the WatchList
        #   feature off); the stand-in streams, so the LIST is not seen here.
        allowed_unused = {(g, r, "get") for (g, r, v) in used_cluster if v == "list"}
        allowed_unused |= {(g, r, x) for (g, r, v) in used_cluster if v == "watch"
                           for x in ("list", "get")}
        if not resched:  # the DaemonSet's part did not run
            allowed_unused |= {("", "persistentvolumeclaims", "patch"),
                               ("storage.k8s.io", "csidrivers", "create")}
        self.assertEqual(granted_cluster - used_cluster - allowed_unused, set())
        self.assertEqual(granted_ns - used_ns, set())
        self.assertIn(("", "persistentvolumes", "patch"), used_cluster)
        self.assertIn(("", "events", "patch"), used_cluster)
        self.assertEqual(used_ns, ROLE_GRANTS | CAP_ROLE_GRANTS)


if __name__ == "__main__":
    if not KUBECTL:
        skip_module("kubectl is not installed: the manifests cannot be applied")
    unittest.main(verbosity=2)
