#!/usr/bin/env python3
"""local-path-provisioner v0.0.37's own e2e suite, against hostpath-provisioner, on the real
node (issue 25).

Its `test/pod_test.go` applies each of the 14 kustomize fixtures of `test/testdata/` (most of
them its `deploy/` plus one of its `examples/`), waits for the pod condition, checks the PV's
volume type, deletes everything and waits. Here the same fixtures, taken from its Go module
(`github.com/rancher/local-path-provisioner@v0.0.37`, fetched through the Go module proxy and
checked against the hash pinned below) and copied out unchanged, with three differences only:

- its Deployment is replaced by ours, as README's "Moving from local-path-provisioner" tells a
  user to: our image and container (manifests/deployment.yaml's, with its probes and security
  context), `--provisioner-name=rancher.io/local-path`, its ConfigMap's `config.json` (the
  fixture's, unchanged, still mounted at /etc/config/ as its own Deployment mounts it) as our
  `--config`, and the paths that config names mounted from the node at the same paths
  (local-path-provisioner makes directories with helper pods; we make them in process). Its
  Namespace, ServiceAccount, RBAC, StorageClasses and ConfigMap stay as the fixture renders
  them. This is a kustomize overlay on the fixture (lpp_overlay()), which also does what
  pod_test.go does with `kustomize edit` (the `app: local-path-provisioner` label) and what
  this sandbox forces (host network, the API server's address, a free metrics port: the
  same as nodeharness.sandbox_patch);
- `kind-worker`, the node its fixtures and pod_test.go name on its kind cluster, is this
  node's name (the only change to a fixture's text; kind_names() lists every substitution);
- its images (`nginx:stable-alpine`, `busybox`, `jenkins/jenkins`) are local stand-ins under
  the same names (images.py); node.py's registry serves them to a pull.

Each fixture is one test method; each checks what pod_test.go checks (the pod Ready, or
PodCompleted for pod-with-security-context; the PV's volume type; pod-with-custom-node-
affinity-key's affinity key and value; pod-with-perm-pattern's `stat` of /data through
`kubectl exec`), plus, for every claim, the PV's node affinity and the directory's path,
mode and owner on the node, and after deletion what its suite does not check: the PV is gone
and so is the directory, and nothing is left under the volume roots but our journal.

Where local-path-provisioner is unsafe we are not, and the test says so by name:
- test_pod_with_custom_node_affinity_key_directory_removed: it takes the label's value for a
  node name when it deletes, so its helper pod cannot run and the directory leaks; ours is
  removed;
- test_security_basic_traversal_path_refused: its suite runs this fixture with no provisioner
  at all (the fixture holds no deploy/, and the previous test's teardown deleted it), so the
  claim stays Pending whatever the pattern; here our provisioner runs (its deploy/ is added
  to the overlay) and refuses the pattern, naming the `..`, and nothing is made outside the
  volume root.

The time from `kubectl apply -k` to the pod Ready (or Completed) is printed per fixture and
kept in $HP_REALCLUSTER_LOGS/lpp-table.md.
"""

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import unittest

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nodeharness import (MANIFESTS, NodeTestCase, POD_PATH, PODS_PATH, PV_PATH,  # noqa: E402
                         PVC_PATH, require_node_cluster, sandbox_patch)
from realharness import PVCS_PATH  # noqa: E402
import images  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
LPP_MODULE = "github.com/rancher/local-path-provisioner"
LPP_VERSION = "v0.0.37"
# go.sum's hash of the module (`go mod download -json` prints it as Sum); build-helm.sh pins the
# same.
LPP_SUM = "h1:xRGhYXH31HtfbYWA9Qe8zAqCmHuw4dDRZNrDlWe0OQg="
LPP_PROV = "rancher.io/local-path"
LPP_NS = "local-path-storage"
LABEL = ("app", "local-path-provisioner")  # pod_test.go's LabelKey, LabelValue
FIXTURES = ("custom-path-pattern", "multiple-storage-classes", "pod",
            "pod-with-custom-node-affinity-key", "pod-with-default-local-volume",
            "pod-with-local-volume", "pod-with-node-affinity", "pod-with-perm-pattern",
            "pod-with-rwop-volume", "pod-with-security-context", "pod-with-subpath",
            "security-basic-traversal-path", "skip-path-pattern-check",
            "skip-path-pattern-check-by-annotation")
KIND_NODE = re.compile(r"\bkind-(?:worker\d*|control-plane)\b")
ROOT = "/opt/local-path-provisioner"          # its deploy's DEFAULT_PATH_FOR_NON_LISTED_NODES
SHARED = "/opt/local-path-provisioner-shared"  # multiple-storage-classes' sharedFilesystemPath
JOURNAL = ".hostpath-provisioner"
HOSTNAME_KEY = "kubernetes.io/hostname"
TIMES = {}  # fixture -> seconds from `kubectl apply -k` to Ready or Completed, or a refusal
OUTCOMES = {}  # fixture -> "pass" or what failed first
# HP_LPP_SUITE_PROVISIONER=lpp runs the same tests against local-path-provisioner v0.0.37
# itself (by hand, not in CI): its Deployment as the fixture renders it, with only the image
# pod_test.go's `kustomize edit set image` sets and the sandbox's changes. It shows what the
# checks catch: see tests/realcluster/README.md for its results.
TARGET = os.environ.get("HP_LPP_SUITE_PROVISIONER", "ours")
LPP_IMAGE = "docker.io/rancher/local-path-provisioner:" + LPP_VERSION


def setUpModule():
    require_node_cluster()


def tearDownModule():
    if not OUTCOMES:
        return
    lines = ["| fixture | result | `kubectl apply -k` to pod Ready (or Completed) |",
             "|---|---|---|"]
    for f in sorted(OUTCOMES):
        t = TIMES.get(f)
        lines.append("| %s | %s | %s |" % (f, OUTCOMES[f], "%.1f s" % t if isinstance(
            t, float) else t or "-"))
    table = "\n".join(lines) + "\n"
    sys.stderr.write("\nlocal-path-provisioner %s fixtures against %s:\n%s" % (
        LPP_VERSION, "us" if TARGET == "ours" else "local-path-provisioner itself", table))
    keep = os.environ.get("HP_REALCLUSTER_LOGS")
    if keep:
        os.makedirs(keep, exist_ok=True)
        with open(os.path.join(keep, "lpp-table%s.md" % ("" if TARGET == "ours" else "-" + TARGET)),
                  "w") as f:
            f.write(table)


def go_env():
    r = subprocess.run([os.path.join(HERE, "find-go.sh")], capture_output=True, text=True,
                       timeout=900)
    if r.returncode != 0:
        raise RuntimeError("no Go toolchain: " + r.stderr[-2000:])
    return dict(os.environ, GONOSUMDB="github.com/rancher", GOFLAGS="-mod=mod",
                PATH=r.stdout.strip() + os.pathsep + os.environ.get("PATH", ""))


def lpp_module_dir():
    """The module's directory in Go's module cache, fetched through the Go module proxy when
    missing; its hash must be LPP_SUM (the sum database is skipped for it, as build-helm.sh
    does: the hash is checked here instead)."""
    env = go_env()
    r = subprocess.run(["go", "mod", "download", "-json", "%s@%s" % (LPP_MODULE, LPP_VERSION)],
                       capture_output=True, text=True, timeout=600, env=env, cwd="/")
    if r.returncode != 0:
        raise RuntimeError("go mod download %s@%s: %s%s" % (LPP_MODULE, LPP_VERSION, r.stdout,
                                                            r.stderr))
    info = json.loads(r.stdout)
    if info.get("Sum") != LPP_SUM:
        raise RuntimeError("%s@%s: hash %r, expected %r" % (LPP_MODULE, LPP_VERSION,
                                                            info.get("Sum"), LPP_SUM))
    return info["Dir"]


def copy_fixtures(module_dir, dest, node):
    """deploy/, examples/ and test/testdata/ of the module into dest, as they are laid out
    there (the fixtures name ../../../deploy and ../../../examples/...), then kind's node
    names replaced by `node`. Returns [(file, old, new)] of the substitutions."""
    for d in ("deploy", "examples", os.path.join("test", "testdata")):
        shutil.copytree(os.path.join(module_dir, d), os.path.join(dest, d))
    subs = []
    for root, dirs, files in os.walk(dest):
        os.chmod(root, 0o755)  # the module cache is read-only
        for name in files:
            p = os.path.join(root, name)
            os.chmod(p, 0o644)
            if not name.endswith((".yaml", ".yml")):
                continue
            with open(p) as f:
                text = f.read()
            new = KIND_NODE.sub(node, text)
            if new != text:
                subs += [(os.path.relpath(p, dest), m, node) for m in KIND_NODE.findall(text)]
                with open(p, "w") as f:
                    f.write(new)
    return subs


def config_paths(config):
    """Every path a local-path-provisioner config.json names (keys matched ignoring case, as
    its Go decoder and our config reader match them)."""
    def get(d, key):
        for k, v in d.items():
            if k.lower() == key.lower():
                return v
        return None

    def of_map(d):
        out = []
        for e in get(d, "nodePathMap") or []:
            out += get(e, "paths") or []
        shared = get(d, "sharedFileSystemPath")
        if shared:
            out.append(shared)
        return out

    paths = of_map(config)
    for cfg in (get(config, "storageClassConfigs") or {}).values():
        paths += of_map(cfg)
    return sorted(set(paths))


def our_container(api_port, metrics_port, mounts):
    """manifests/deployment.yaml's container, run as local-path-provisioner's replacement:
    its name and config, no leader election (its deploy runs one replica without one and its
    RBAC grants no Leases), the config volume where its Deployment mounts it, the config's
    paths from the node at the same paths (mountPropagation as our manifests mount theirs)."""
    with open(os.path.join(MANIFESTS, "deployment.yaml")) as f:
        dep = yaml.safe_load(f)
    c = dep["spec"]["template"]["spec"]["containers"][0]
    assert c["args"][0].startswith("--provisioner-name="), c["args"]
    c["args"] = ["--provisioner-name=" + LPP_PROV, "--config=/etc/config/config.json",
                 "--metrics-address=:%d" % metrics_port]
    c["ports"] = [{"name": "metrics", "containerPort": metrics_port}]
    c["env"] = c["env"] + [{"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"},
                           {"name": "KUBERNETES_SERVICE_PORT", "value": str(api_port)}]
    c["volumeMounts"] = [{"name": "config-volume", "mountPath": "/etc/config/"}] + [
        {"name": "lpp-path-%d" % i, "mountPath": p, "mountPropagation": "HostToContainer"}
        for i, p in enumerate(mounts)]
    return c


def lpp_overlay(dest, fixture_dir, api_port, metrics_port, mounts, extra_resources=()):
    """A kustomization at dest over the fixture: the label pod_test.go adds with `kustomize
    edit add label app:local-path-provisioner -f`, and its Deployment's pod running our
    container instead (our_container; host network: sandbox_patch's reason)."""
    os.makedirs(dest, exist_ok=True)
    sp = "/spec/template/spec"
    # Only sandbox_patch's host-network change; the container is replaced whole.
    host_net = [op for op in sandbox_patch("Deployment", "x", api_port, metrics_port)["patch"]
                if op["path"] == sp + "/hostNetwork"]
    patch = [{"op": "test", "path": sp + "/containers/0/name",
              "value": "local-path-provisioner"},
             {"op": "test", "path": sp + "/volumes/0/name", "value": "config-volume"},
             {"op": "replace", "path": sp + "/containers/0",
              "value": our_container(api_port, metrics_port, mounts)}] + host_net
    patch += [{"op": "add", "path": sp + "/volumes/-",
               "value": {"name": "lpp-path-%d" % i,
                         "hostPath": {"path": p, "type": "DirectoryOrCreate"}}}
              for i, p in enumerate(mounts)]
    k = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
         "resources": [os.path.relpath(r, dest) for r in (fixture_dir,) + tuple(extra_resources)],
         "labels": [{"includeSelectors": True, "pairs": {LABEL[0]: LABEL[1]}}],
         "patches": [{"target": {"kind": "Deployment", "name": "local-path-provisioner"},
                      "patch": json.dumps(patch)}]}
    with open(os.path.join(dest, "kustomization.yaml"), "w") as f:
        json.dump(k, f, indent=1)
    return dest


def build_lpp_image(out):
    """For HP_LPP_SUITE_PROVISIONER=lpp: local-path-provisioner built from the module (go
    install, CGO off, as bench/bench_node.py builds it) in an image archive named as its
    deploy/ names it, on the busybox stand-in (its helper pods' image is that stand-in too)."""
    env = dict(go_env(), CGO_ENABLED="0", GOBIN=os.path.join(out, "bin"))
    subprocess.run(["go", "install", "%s@%s" % (LPP_MODULE, LPP_VERSION)], env=env, check=True,
                   timeout=3600, cwd="/")
    layer = images.busybox_layer(lambda ly: ly.host_file(
        "usr/bin/local-path-provisioner", os.path.join(out, "bin", "local-path-provisioner")))
    return images.write_oci_archive(os.path.join(out, "local-path-provisioner.tar"),
                                    [LPP_IMAGE], layer,
                                    {"Env": [images.PATH_ENV], "Cmd": ["local-path-provisioner"]})


def lpp_self_overlay(dest, fixture_dir, api_port, health_port, extra_resources=()):
    """For HP_LPP_SUITE_PROVISIONER=lpp: the fixture with local-path-provisioner's own
    Deployment, its image set as pod_test.go sets it (`kustomize edit set image`), the label
    it adds, and the sandbox's changes (host network, the API server's address, a free health
    port)."""
    os.makedirs(dest, exist_ok=True)
    c = "/spec/template/spec/containers/0"
    patch = [{"op": "add", "path": "/spec/template/spec/hostNetwork", "value": True},
             {"op": "add", "path": c + "/env/-",
              "value": {"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"}},
             {"op": "add", "path": c + "/env/-",
              "value": {"name": "KUBERNETES_SERVICE_PORT", "value": str(api_port)}},
             {"op": "test", "path": c + "/env/2/name", "value": "HEALTH_PORT"},
             {"op": "replace", "path": c + "/env/2/value", "value": str(health_port)},
             {"op": "replace", "path": c + "/ports/0/containerPort", "value": health_port}]
    name, tag = LPP_IMAGE.rsplit(":", 1)
    k = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
         "resources": [os.path.relpath(r, dest) for r in (fixture_dir,) + tuple(extra_resources)],
         "images": [{"name": name, "newTag": tag},
                    {"name": "rancher/local-path-provisioner", "newName": name, "newTag": tag}],
         "labels": [{"includeSelectors": True, "pairs": {LABEL[0]: LABEL[1]}}],
         "patches": [{"target": {"kind": "Deployment", "name": "local-path-provisioner"},
                      "patch": json.dumps(patch)}]}
    with open(os.path.join(dest, "kustomization.yaml"), "w") as f:
        json.dump(k, f, indent=1)
    return dest


def stat_of(path):
    st = os.lstat(path)
    return st.st_mode & 0o7777, st.st_uid, st.st_gid


def leftovers(root):
    """What is under a volume root besides our journal."""
    try:
        return sorted(n for n in os.listdir(root) if n != JOURNAL)
    except FileNotFoundError:
        return []


def file_digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest(), os.fstat(f.fileno()).st_mtime_ns


class LppSuiteTest(NodeTestCase):
    """One method per fixture of local-path-provisioner v0.0.37's test/testdata."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        import tempfile
        cls.module_dir = lpp_module_dir()
        cls.tree = tempfile.mkdtemp(prefix="hp-lpp-suite-")
        cls.subs = copy_fixtures(cls.module_dir, cls.tree, cls.cluster.node["name"])
        found = sorted(os.listdir(os.path.join(cls.tree, "test", "testdata")))
        assert sorted(FIXTURES) == sorted(f for f in found if os.path.isdir(
            os.path.join(cls.tree, "test", "testdata", f))), found
        cls.ours = TARGET == "ours"
        if not cls.ours:
            assert TARGET == "lpp", "HP_LPP_SUITE_PROVISIONER=%r: ours or lpp" % TARGET
            images.import_archives(cls.cluster.node["address"], [
                build_lpp_image(os.path.join(cls.tree, "lpp-image"))])

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tree, ignore_errors=True)

    # -- the steps of pod_test.go's runTest --------------------------------------------------

    def render(self, fixture_dir):
        r = self.kubectl("kustomize", fixture_dir)
        return [d for d in yaml.safe_load_all(r.stdout) if d]

    def setUp(self):
        super().setUp()
        self.claim_uids = set()
        self.expect_clean = True  # no Warning event, no error line (not for a refusal)

    def apply_fixture(self, fixture, with_deploy=False):
        """kubectl apply -k of the fixture through lpp_overlay; returns the rendered objects.
        Everything is deleted at cleanup (pods and claims first, while our provisioner still
        runs to remove their volumes)."""
        from cluster import free_port
        fixture_dir = os.path.join(self.tree, "test", "testdata", fixture)
        extra = (os.path.join(self.tree, "deploy"),) if with_deploy else ()
        objs = []
        for d in (fixture_dir,) + extra:
            objs += self.render(d)
        cms = [o for o in objs if o["kind"] == "ConfigMap"
               and o["metadata"]["name"] == "local-path-config"]
        self.assertEqual(len(cms), 1, "the fixture's ConfigMap local-path-config")
        self.config = json.loads(cms[0]["data"]["config.json"])
        self.roots = config_paths(self.config)
        self.delete_leftovers()
        # What an earlier fixture left (only with HP_LPP_SUITE_PROVISIONER=lpp, when a test
        # failed) is not this one's.
        self.before = {r: leftovers(r) for r in self.roots}
        self.addCleanup(self.check_roots_clean)
        dest = os.path.join(self.tree, "overlays", fixture)
        if self.ours:
            overlay = lpp_overlay(dest, fixture_dir, self.cluster.api_port, free_port(),
                                  self.roots, extra)
        else:
            overlay = lpp_self_overlay(dest, fixture_dir, self.cluster.api_port, free_port(),
                                       extra)
        self.overlay = overlay
        self.addCleanup(self.delete_fixture, overlay)
        self.t_apply = time.monotonic()
        self.kubectl("apply", "-k", overlay)
        self.wait_provisioner()
        return self.kubectl_objects(overlay)

    def kubectl_objects(self, overlay):
        r = self.kubectl("kustomize", overlay)
        return [d for d in yaml.safe_load_all(r.stdout) if d]

    def wait_provisioner(self, timeout=120):
        def ready():
            for p in self.api.list(PODS_PATH % LPP_NS,
                                   labelSelector="%s=%s" % LABEL)["items"]:
                conds = {c["type"]: c["status"] for c in
                         (p.get("status") or {}).get("conditions") or []}
                if conds.get("Ready") == "True" and not p["metadata"].get("deletionTimestamp"):
                    return p
            return None
        try:
            self.prov_pod = self.wait(ready, timeout, "our provisioner Ready in " + LPP_NS)
        except AssertionError:
            self.fail("provisioner not Ready:\n" + self.describe_pods(LPP_NS))
        c = self.prov_pod["spec"]["containers"][0]
        if self.ours:
            self.assertEqual(c["image"], images.OURS)
            self.assertIn("--provisioner-name=" + LPP_PROV, c["args"])
        else:
            self.assertEqual(c["image"], LPP_IMAGE)

    def fixture_pods(self):
        return self.api.list(PODS_PATH % "default", labelSelector="%s=%s" % LABEL)["items"]

    def wait_pods(self, condition="Ready", timeout=120):
        """pod_test.go's `kubectl wait pod -l app=local-path-provisioner --for condition=...`
        (every such pod of the namespace); "PodCompleted": Ready's reason, as its
        TestPodWithSecurityContext waits for it. Records the time since `kubectl apply`."""
        def done():
            pods = self.fixture_pods()
            if not pods:
                return None
            for p in pods:
                conds = {c["type"]: c for c in (p.get("status") or {}).get("conditions") or []}
                if condition == "PodCompleted":
                    if (conds.get("Ready") or {}).get("reason") != "PodCompleted":
                        return None
                elif (conds.get(condition) or {}).get("status") != "True":
                    return None
            return pods
        try:
            pods = self.wait(done, timeout, "pods %s" % condition, interval=0.2)
        except AssertionError as e:
            self.fail("%s\n%s\n--- our provisioner ---\n%s" % (
                e, self.describe_pods("default"), self.provisioner_log()))
        TIMES[self.fixture] = time.monotonic() - self.t_apply
        return pods

    def provisioner_log(self, tail=5000):
        try:
            log = self.pod_log(self.prov_pod["metadata"]["name"], LPP_NS)
            return log[-tail:] if tail else log
        except (AssertionError, AttributeError, KeyError):
            return "(no log)"

    def claims(self):
        return self.api.list(PVCS_PATH % "default", labelSelector="%s=%s" % LABEL)["items"]

    def check_volumes(self, expect):
        """For every claim of the fixture (expect: claim name -> dict of volume_type,
        affinity (key, value) or None, root, path (or None), mode, uid, gid): pod_test.go's
        volume type check, the node affinity, the directory on the node. Returns
        {claim: (pv name, path)}."""
        out = {}
        claims = {c["metadata"]["name"]: c for c in self.claims()}
        self.claim_uids |= {c["metadata"]["uid"] for c in claims.values()}
        self.assertEqual(sorted(claims), sorted(expect))
        for name, e in expect.items():
            c = self.wait_bound(name, ns="default")
            pv = self.pv(c["spec"]["volumeName"])
            ann = pv["metadata"].get("annotations") or {}
            self.assertEqual(ann.get("pv.kubernetes.io/provisioned-by"), LPP_PROV)
            if self.ours:
                self.assertIn("hostPathProvisionerIdentity", ann, "made by us")
            vt = e.get("volume_type", "hostPath")
            other = "local" if vt == "hostPath" else "hostPath"
            self.assertIn(vt, pv["spec"], json.dumps(pv["spec"]))
            self.assertNotIn(other, pv["spec"])
            path = pv["spec"][vt]["path"]
            if vt == "hostPath":
                self.assertEqual(pv["spec"]["hostPath"].get("type"), "DirectoryOrCreate")
            aff = e.get("affinity", (HOSTNAME_KEY, self.cluster.node["name"]))
            if aff is None:
                self.assertNotIn("nodeAffinity", pv["spec"])
            else:
                terms = pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]
                self.assertEqual(len(terms), 1, terms)
                self.assertEqual(terms[0]["matchExpressions"],
                                 [{"key": aff[0], "operator": "In", "values": [aff[1]]}])
            root = e.get("root", ROOT)
            self.assertTrue(path.startswith(root + "/"), "%s not under %s" % (path, root))
            if e.get("path"):
                self.assertEqual(path, e["path"])
            self.assertTrue(os.path.isdir(path) and not os.path.islink(path), path)
            self.assertEqual(stat_of(path), (e.get("mode", 0o777), e.get("uid", 0),
                                             e.get("gid", 0)),
                             "%s: mode, owner, group" % path)
            # What pod_test.go does not look at: the PV is the claim's.
            self.assertEqual(pv["spec"]["capacity"]["storage"],
                             c["spec"]["resources"]["requests"]["storage"])
            self.assertEqual(pv["spec"]["accessModes"], c["spec"]["accessModes"])
            self.assertEqual(pv["spec"]["storageClassName"], c["spec"]["storageClassName"])
            self.assertEqual(pv["spec"]["persistentVolumeReclaimPolicy"], "Delete")
            out[name] = (pv["metadata"]["name"], path)
        self.volumes = out
        if self.ours:
            self.assertEqual(self.warnings(), [], "Warning events of ours")
        return out

    def events_of(self, obj, reason):
        """Events about this very object (its uid: the events of an earlier fixture's object
        of the same name are still there), any source."""
        uid = obj["metadata"]["uid"]
        return [e for e in self.api.list("/api/v1/namespaces/default/events")["items"]
                if e["involvedObject"].get("uid") == uid and e["reason"] == reason]

    def warnings(self):
        """Warning events of our provisioner about this fixture's claims and PVs (a failure
        that a retry hid would show here)."""
        uids = {c["metadata"]["uid"] for c in self.claims()} | self.claim_uids
        names = {pv for pv, _ in getattr(self, "volumes", {}).values()}
        return ["%s %s: %s" % (e["reason"], e["involvedObject"]["name"], e["message"])
                for e in self.api.list("/api/v1/namespaces/default/events")["items"]
                if e.get("type") == "Warning"
                and ((e.get("source") or {}).get("component") or e.get("reportingComponent"))
                == LPP_PROV
                and (e["involvedObject"].get("uid") in uids
                     or e["involvedObject"].get("name") in names)]

    def delete_leftovers(self):
        """What an earlier, interrupted run left: its provisioner's namespace, its pods and
        claims."""
        self.delete_namespace(LPP_NS, timeout=180)
        for p in self.fixture_pods():
            self._delete_quietly(POD_PATH % ("default", p["metadata"]["name"]),
                                 {"gracePeriodSeconds": 0})
        for c in self.claims():
            self._delete_quietly(PVC_PATH % ("default", c["metadata"]["name"]))

    def keep_log(self):
        """Our provisioner's log, kept in $HP_REALCLUSTER_LOGS/lpp-<fixture>.log."""
        log = self.provisioner_log(tail=None)
        keep = os.environ.get("HP_REALCLUSTER_LOGS")
        if keep:
            os.makedirs(keep, exist_ok=True)
            with open(os.path.join(keep, "lpp-%s.log" % self.fixture), "w") as f:
                f.write(log)
        return log

    def delete_fixture(self, overlay):
        """pod_test.go's TearDownTest deletes everything at once; our provisioner would then be
        stopped with the claims, and a Released PV would wait for it (its own suite leaks the
        same way, with helper pods that cannot start in a namespace being deleted). So: the
        pods and claims first (grace 2 s: only the teardown's speed), the PVs and directories
        waited for while our provisioner runs, then the rest, waited for too. Then: no
        Warning event of ours about the fixture's claims and PVs, no error line in our log."""
        t0 = time.monotonic()
        for p in self.fixture_pods():
            self._delete_quietly(POD_PATH % ("default", p["metadata"]["name"]),
                                 {"gracePeriodSeconds": 2})
        for c in self.claims():
            self._delete_quietly(PVC_PATH % ("default", c["metadata"]["name"]))
        log = ""
        try:
            self.wait(lambda: not self.fixture_pods() and not self.claims(), 90,
                      "the fixture's pods and claims deleted")
            for pv, path in getattr(self, "volumes", {}).values():
                self.wait_gone(PV_PATH % pv, 60)
                self.wait(lambda: not os.path.lexists(path), 30, "%s removed" % path)
        finally:
            t1 = time.monotonic()
            if hasattr(self, "prov_pod"):
                log = self.keep_log()
            self.kubectl("delete", "-k", overlay, "--ignore-not-found", "--wait=true",
                         "--timeout=180s", ok=False)
            self.delete_namespace(LPP_NS, timeout=180)
            self.teardown_s = time.monotonic() - t0
            sys.stderr.write("(teardown %.1f s: volumes %.1f s, the rest %.1f s) "
                             % (self.teardown_s, t1 - t0, time.monotonic() - t1))
        if self.expect_clean and self.ours:
            self.assertEqual(self.warnings(), [], "Warning events of ours")
            self.assertEqual([line for line in log.splitlines() if line.startswith("E")], [],
                             "error lines in our provisioner's log")

    def check_roots_clean(self):
        """After the fixture is deleted: nothing left under the volume roots but our journal
        (a nested pathPattern's parents included)."""
        for r in self.roots:
            self.assertEqual([n for n in leftovers(r) if n not in self.before[r]], [],
                             "left under %s" % r)

    def run(self, result=None):
        """Records each fixture's outcome for the table."""
        result = result if result is not None else self.defaultTestResult()
        before = len(result.failures) + len(result.errors)
        r = super().run(result)
        if getattr(self, "fixture", None):
            bad = (result.failures + result.errors)[before:]
            # The assertion's line (a log line of a component may follow the traceback).
            lines = bad[0][1].strip().splitlines() if bad else ["pass"]
            msg = next((ln for ln in lines if re.match(r"\w*(Error|Exception)\b", ln)),
                       lines[-1])
            OUTCOMES[self.fixture] = msg.replace("|", "/")[:200]
        return r

    def run_fixture(self, fixture, volume_type="hostPath", condition="Ready", expect=None,
                    with_deploy=False):
        """pod_test.go's runTest: apply, wait for the pods, check the volumes."""
        self.fixture = fixture
        self.apply_fixture(fixture, with_deploy=with_deploy)
        self.wait_pods(condition)
        if expect is None:
            expect = {c["metadata"]["name"]: {} for c in self.claims()}
        for e in expect.values():
            e.setdefault("volume_type", volume_type)
        return self.check_volumes(expect)

    def exec_in(self, pod, *cmd, container=None):
        args = ["exec", "-n", "default", pod] + (["-c", container] if container else []) + [
            "--"] + list(cmd)
        return self.kubectl(*args).stdout

    # -- the fixtures ------------------------------------------------------------------------

    def test_pod(self):
        """TestPodWithHostPathVolume."""
        self.run_fixture("pod")

    def test_pod_with_local_volume(self):
        """TestPodWithLocalVolume: the claim's `volumeType: local` annotation."""
        self.run_fixture("pod-with-local-volume", "local")

    def test_pod_with_default_local_volume(self):
        """TestPodWithLocalVolumeDefault: the class's `defaultVolumeType: local`."""
        self.run_fixture("pod-with-default-local-volume", "local")

    def test_pod_with_node_affinity(self):
        """TestPodWithNodeAffinity (its kind-worker is this node)."""
        self.assertIn(("test/testdata/pod-with-node-affinity/patch.yaml", "kind-worker",
                       self.cluster.node["name"]), self.subs)
        self.run_fixture("pod-with-node-affinity")

    def test_pod_with_rwop_volume(self):
        """TestPodWithRWOPVolume: a ReadWriteOncePod claim, local."""
        vols = self.run_fixture("pod-with-rwop-volume", "local")
        c = self.claim_of("local-rwop-volume-pvc", "default")
        self.assertEqual(c["spec"]["accessModes"], ["ReadWriteOncePod"])
        self.assertEqual(self.pv(vols["local-rwop-volume-pvc"][0])["spec"]["accessModes"],
                         ["ReadWriteOncePod"])

    def test_pod_with_security_context(self):
        """TestPodWithSecurityContext: scheduled, then Completed (its script, as uid 1000 with
        fsGroup 1000, writes into the volume)."""
        vols = self.run_fixture("pod-with-security-context", condition="PodCompleted")
        path = vols["local-path-pvc"][1]
        with open(os.path.join(path, "test.txt")) as f:
            self.assertEqual(f.read(), "some test content\n")
        self.assertEqual(os.stat(os.path.join(path, "test.txt")).st_uid, 1000)
        self.assertEqual(os.stat(os.path.join(path, "foo")).st_uid, 1000)
        log = self.pod_log("local-path-test", "default")
        self.assertIn("Hello from local-path-test", log)
        # `jenkins/jenkins` has no tag: pulled at every start (imagePullPolicy Always), from
        # node.py's registry (images.Registry), which serves the imported stand-in.
        pod = self.api.get(POD_PATH % ("default", "local-path-test"))
        pulled = [e["message"] for e in self.events_of(pod, "Pulled")]
        self.assertTrue(any("Successfully pulled image \"jenkins/jenkins\"" in m
                            for m in pulled), pulled)

    def test_pod_with_subpath(self):
        """TestPodWithSubpath: two containers, each on its subPath of the one volume."""
        vols = self.run_fixture("pod-with-subpath")
        path = vols["local-path-pvc"][1]
        self.assertEqual(sorted(os.listdir(path)), ["busybox", "nginx"])

    def test_multiple_storage_classes(self):
        """xxTestPodWithMultipleStorageClasses (disabled in its suite, run here):
        storageClassConfigs with a node path map for `local-path` and a shared file system
        path (ReadWriteMany, no node affinity) for `local-path-shared`."""
        self.run_fixture("multiple-storage-classes", expect={
            "local-path-pvc": {},
            "local-path-shared-pvc": {"affinity": None, "root": SHARED}})
        self.assertEqual(self.claim_of("local-path-shared-pvc", "default")["spec"]
                         ["accessModes"], ["ReadWriteMany"])

    def test_pod_with_custom_node_affinity_key_directory_removed(self):
        """TestPodWithCustomNodeAffinityKey: the node labelled test.example.com/stable-id=
        my-stable-node, the PV's affinity on that key and value. Safer than local-path-
        provisioner: it takes the label's value for a node name when it deletes the volume
        (its helper pod is pinned to a node `my-stable-node` that does not exist), so the
        directory leaks; ours is removed (delete_fixture waits for it)."""
        key, value = "test.example.com/stable-id", "my-stable-node"
        node = self.cluster.node["name"]
        self.kubectl("label", "node", node, "%s=%s" % (key, value), "--overwrite")
        self.addCleanup(self.kubectl, "label", "node", node, key + "-", ok=False)
        self.run_fixture("pod-with-custom-node-affinity-key",
                         expect={"local-path-pvc": {"affinity": (key, value)}})

    def test_custom_path_pattern(self):
        """TestPodWithCustomPathPatternStorageClasses: its recommended pattern
        `{{ .PVC.Namespace }}/{{ .PVC.Name }}/`."""
        self.run_fixture("custom-path-pattern", expect={
            "local-path-pvc": {"path": ROOT + "/default/local-path-pvc"}})

    def test_pod_with_perm_pattern(self):
        """TestPodWithUserGroupPermPattern: userPattern 1000, groupPattern 2000, permPattern
        0700; its check is `stat -c '%a %u %g' /data` in the pod."""
        self.run_fixture("pod-with-perm-pattern", expect={
            "local-path-pvc": {"path": ROOT + "/default/local-path-pvc",
                               "mode": 0o700, "uid": 1000, "gid": 2000}})
        out = self.exec_in("volume-test", "stat", "-c", "%a %u %g", "/data")
        self.assertEqual(out.strip(), "700 1000 2000")

    def test_skip_path_pattern_check(self):
        """TestPodWithSkipPathPatternCheck: allowUnsafePathPattern "true" (a parameter) and
        `/opt/../{{ .PVC.Namespace }}_{{ .PVC.Name }}/../etc/`, cleaned as its filepath.Join
        cleans it: <root>/etc, in both."""
        self.run_fixture("skip-path-pattern-check", expect={
            "local-path-pvc": {"path": ROOT + "/etc"}})

    def test_skip_path_pattern_check_by_annotation(self):
        """TestPodWithSkipPathPatternCheckByAnnotation: the same, allowUnsafePathPattern as a
        StorageClass annotation."""
        self.run_fixture("skip-path-pattern-check-by-annotation", expect={
            "local-path-pvc": {"path": ROOT + "/etc"}})

    def test_security_basic_traversal_path_refused(self):
        """TestPathTraversalPrevention/BasicDirectoryTraversal: `{{ .PVC.Name }}/../../../etc/
        passwd`. Its suite applies this fixture with no provisioner running (the fixture holds
        no deploy/; the test before deleted its own), so nothing could bind the claim anyway;
        here its deploy/ is added and our provisioner refuses the pattern with a
        ProvisioningFailed event naming the `..` (local-path-provisioner itself refuses it
        too, for not starting with <namespace>/<name>/: HP_LPP_SUITE_PROVISIONER=lpp); the
        claim stays Pending (pod_test.go sleeps 10 s before it looks), nothing is made under
        or outside the volume root, /etc/passwd is untouched."""
        self.fixture = "security-basic-traversal-path"
        self.expect_clean = False
        passwd = file_digest("/etc/passwd")
        self.apply_fixture(self.fixture, with_deploy=True)
        claim = self.claim_of("security-test-pvc", "default")
        ev = self.wait(lambda: self.events_of(claim, "ProvisioningFailed"), 60,
                       "ProvisioningFailed on security-test-pvc")[0]
        if self.ours:
            src = (ev.get("source") or {}).get("component") or ev.get("reportingComponent")
            self.assertEqual(src, LPP_PROV)
        self.assertIn("..", ev["message"])
        TIMES[self.fixture] = "refused: " + ev["message"].replace("|", "/")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            self.assertEqual(self.phase("security-test-pvc", "default"), "Pending")
            time.sleep(2)
        pod = self.api.get(POD_PATH % ("default", "security-test-pod"))
        self.assertNotEqual((pod.get("status") or {}).get("phase"), "Running")
        self.assertEqual([n for n in leftovers(ROOT) if n not in self.before[ROOT]], [])
        self.assertEqual(file_digest("/etc/passwd"), passwd)
        for p in ("/opt/etc", "/etc/passwd/security-test-pvc"):
            self.assertFalse(os.path.lexists(p), p)


if __name__ == "__main__":
    unittest.main(verbosity=2)
