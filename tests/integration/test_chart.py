"""The Helm chart (charts/hostpath-provisioner) rendered by the pinned helm, no cluster needed.

- helm lint --strict passes, with the default values and with every kind of values below.
- With default values the chart renders exactly manifests/install.yaml's objects, compared
  object by object, but the Namespace (helm install --namespace hostpath-provisioner
  --create-namespace makes it, and a chart that made its own release namespace could not be
  installed into it); with mode=DaemonSet exactly rbac.yaml + storageclass.yaml +
  daemonset.yaml (the multi-node install of README). A change to one side alone fails here.
- Every flag of the binary's --help has a value (or is listed below as having no place in a
  pod), renders to that flag, and the binary accepts everything rendered at once.
- nodePathMap, sharedFileSystemPath and storageClassConfigs render the ConfigMap's config.json
  byte for byte as local-path-provisioner's own chart (v0.0.37, rendered by the same helm with
  the same values) does, and the same StorageClasses; the provisioner gets --config and every
  path mounted at the same path.
- Values that make no sense fail `helm template` with a message naming them: the schema
  (values.schema.json) for types, names and allowed values, the templates (`fail`) for
  combinations.

Skips (exit 77) when helm is not built (tests/realcluster/build-helm.sh).
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

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import binary_path, require_binary, skip_module  # noqa: E402
from helmtool import (CHART, SRC, Helm, args_of, by_key, container, helm_binary,  # noqa: E402
                      key, load_yaml_files, lpp_chart, missing_reason, workload)

MANIFESTS = os.path.join(SRC, "manifests")
NS = "hostpath-provisioner"

# Flags of --help that have no value, and why.
NOT_APPLICABLE = {
    "kubeconfig": "in a pod the service account's credentials are used",
    "master": "in a pod the service account's credentials are used",
    "context": "in a pod the service account's credentials are used",
    "node-name": "the pod's spec.nodeName, through NODE_NAME",
    "pv-dir": "pvDir, or the ConfigMap",
    "config": "rendered from nodePathMap, sharedFileSystemPath, storageClassConfigs",
    "help": "not a setting",
    "version": "not a setting",
}
# Every other flag: the values that set it, and the flag's rendered value.
ALL_VALUES = {
    "storageClass": {"provisionerName": "example.org/disks"},
    "leaderElection": {"enabled": True, "namespace": "kube-system", "leaseDuration": "30s",
                       "renewDeadline": "20s", "retryPeriod": "4s"},
    "metrics": {"enabled": True, "port": 9100},
    "identity": "disk-owner",
    "defaultReclaimPolicy": "Retain",
    "workerThreads": 8,
    "provisioningRetryCount": 0,
    "addFinalizer": True,
    "capacity": {"enabled": False, "pollInterval": "30s", "updateInterval": "10s"},
    "takeOver": True,
    "usageScanPeriod": "5m",
    "resyncPeriod": "1h30m",
    "retryBaseDelay": "250ms",
    "retryMaxDelay": "2m",
    "kubeApiQps": 2.5,
    "kubeApiBurst": 1000000,
    "logVerbosity": 2,
    "logFormat": "json",
}
ALL_FLAGS = {
    "provisioner-name": "example.org/disks", "pv-dir": "/var/lib/hostpath-provisioner",
    "leader-elect": None, "leader-elect-namespace": "kube-system",
    "leader-elect-lease-duration": "30s", "leader-elect-renew-deadline": "20s",
    "leader-elect-retry-period": "4s", "metrics-address": ":9100", "identity": "disk-owner",
    "default-reclaim-policy": "Retain", "workers": "8", "failed-retry-threshold": "0",
    "add-finalizer": None, "take-over": None, "enable-capacity": "false",
    "capacity-poll-interval": "30s", "capacity-update-interval": "10s",
    "usage-scan-period": "5m", "resync-period": "1h30m",
    "retry-base-delay": "250ms", "retry-max-delay": "2m", "kube-api-qps": "2.5",
    "kube-api-burst": "1000000", "v": "2", "log-format": "json",
}

# local-path-provisioner's shapes of config.json (its README and its chart's values.yaml),
# as values of both charts.
LPP_SHAPES = {
    "nodePathMap": {
        "nodePathMap": [
            {"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES", "paths": ["/opt/local-path-provisioner"]},
            {"node": "yasker-lp-dev1", "paths": ["/opt/local-path-provisioner", "/data1"]},
            {"node": "yasker-lp-dev3", "paths": []}],
        "storageClass": {"name": "local-path", "provisionerName": "rancher.io/local-path",
                         "defaultClass": True, "defaultVolumeType": "local",
                         "reclaimPolicy": "Delete", "volumeBindingMode": "WaitForFirstConsumer",
                         "pathPattern": "{{ .PVC.Namespace }}/{{ .PVC.Name }}"}},
    "sharedFileSystemPath": {
        "nodePathMap": [],
        "sharedFileSystemPath": "/shared/fs/mounted/on/every/node",
        "storageClass": {"name": "local-path-shared", "provisionerName": "rancher.io/local-path",
                         "defaultClass": False, "defaultVolumeType": "hostPath",
                         "reclaimPolicy": "Retain", "volumeBindingMode": "Immediate"}},
    "storageClassConfigs": {
        "nodePathMap": [],
        "storageClass": {"provisionerName": "rancher.io/local-path"},
        "storageClassConfigs": {
            "local-path": {
                "storageClass": {"create": True, "defaultClass": False,
                                 "defaultVolumeType": "local", "reclaimPolicy": "Delete",
                                 "volumeBindingMode": "WaitForFirstConsumer"},
                "nodePathMap": [
                    {"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES",
                     "paths": ["/opt/local-path-provisioner"]},
                    {"node": "kind-worker", "paths": ["/opt/ssd", "/opt/ssd2"]}]},
            "shared": {
                "storageClass": {"create": True, "defaultClass": True,
                                 "defaultVolumeType": "hostPath", "reclaimPolicy": "Retain",
                                 "volumeBindingMode": "Immediate",
                                 "pathPattern": "{{ .PVC.Namespace }}-{{ .PVC.Name }}"},
                "sharedFileSystemPath": "/mnt/nfs"},
            "no-class-made": {
                "storageClass": {"create": False},
                "sharedFileSystemPath": "/mnt/other"}}},
}
# Ours only: our own keys of a node entry pass through.
OURS_NODE_KEYS = {"nodePathMap": [
    {"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES", "paths": ["/var/lib/hostpath-provisioner"]},
    {"node": "node-a", "paths": ["/mnt/ssd1", "/mnt/ssd2"], "capacity": {"/mnt/ssd1": "900Gi"},
     "allowRootFilesystem": {"/mnt/ssd2": False}, "overcommit": 2,
     "hardLimits": {"/mnt/ssd1": True}}]}


def diff(a, b, what):
    """A unified diff of two objects' JSON, for a failure message."""
    ja = json.dumps(a, indent=1, sort_keys=True).splitlines()
    jb = json.dumps(b, indent=1, sort_keys=True).splitlines()
    return "%s:\n%s" % (what, "\n".join(difflib.unified_diff(ja, jb, "chart", "manifests",
                                                             lineterm="")))


class ChartTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="hp-chart-")
        cls.helm = Helm(helm_binary(), cls.tmp)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def assertSameObjects(self, chart_objs, manifest_objs):
        chart, manifests = by_key(chart_objs), by_key(manifest_objs)
        self.assertEqual(sorted(chart), sorted(manifests))
        for k in sorted(manifests):
            self.assertEqual(chart[k], manifests[k], diff(chart[k], manifests[k], k))

    def manifests(self, *files):
        """The objects of manifests/ files, less the Namespace (the chart's objects live in
        the release namespace, made by helm install --create-namespace)."""
        objs = load_yaml_files(*(os.path.join(MANIFESTS, f) for f in files))
        self.assertIn(("Namespace", "", NS), [key(o) for o in objs])
        return [o for o in objs if o["kind"] != "Namespace"]

    # -- lint --------------------------------------------------------------------------------

    def test_lint(self):
        for values in (None, {"mode": "DaemonSet"}, ALL_VALUES, OURS_NODE_KEYS,
                       *LPP_SHAPES.values()):
            r = self.helm.run("lint", "--strict", CHART,
                              *self.helm.value_args(values))
            self.assertIn("1 chart(s) linted, 0 chart(s) failed", r.stdout, values)
            self.assertNotRegex(r.stdout, r"\[(WARNING|ERROR)\]", values)

    def test_package(self):
        # The chart's version and appVersion (the image tag) are the project's.
        with open(os.path.join(SRC, "meson.build")) as f:
            version = re.search(r"version\s*:\s*'([^']+)'", f.read()).group(1)
        with open(os.path.join(CHART, "Chart.yaml")) as f:
            chart = yaml.safe_load(f)
        self.assertEqual((chart["version"], chart["appVersion"]), (version, version))
        # README's `helm package`: the archive holds the schema and renders the same objects.
        out = os.path.join(self.tmp, "pkg")
        r = self.helm.run("package", CHART, "-d", out)
        tgz = os.path.join(out, "hostpath-provisioner-%s.tgz" % version)
        self.assertIn(tgz, r.stdout)
        self.assertEqual(self.helm.template(chart=tgz), self.helm.template())
        self.assertIn("at '/mode'", self.helm.run("template", "x", tgz, "--set", "mode=x",
                                                  ok=False).stderr)

    # -- the same objects as manifests/ ------------------------------------------------------

    def test_default_values_render_install_yaml(self):
        objs = self.helm.template()
        self.assertSameObjects(objs, self.manifests("install.yaml"))
        # Equality, not just a subset: no Helm label or annotation was added anywhere.
        for o in objs:
            self.assertNotIn("helm.sh/chart", str(o))

    def test_daemonset_mode_renders_the_multi_node_manifests(self):
        objs = self.helm.template(None, "mode=DaemonSet")
        self.assertSameObjects(objs, self.manifests("rbac.yaml", "storageclass.yaml",
                                                    "daemonset.yaml"))

    def test_install_yaml_is_the_kustomization(self):
        # The chart is compared with install.yaml; test_manifests keeps install.yaml equal to
        # the kustomization, and the kustomization must list exactly these files for the
        # comparison above to cover every object a user installs.
        with open(os.path.join(MANIFESTS, "kustomization.yaml")) as f:
            text = f.read()
        self.assertEqual(re.findall(r"^  - (\S+)$", text, re.M),
                         ["rbac.yaml", "storageclass.yaml", "deployment.yaml"])

    # -- flags -------------------------------------------------------------------------------

    def test_every_flag_has_a_value_and_the_binary_takes_them(self):
        require_binary()
        from test_manifests import help_flags
        flags = help_flags(binary_path())
        self.assertIn("provisioner-name", flags)  # the parser works
        self.assertEqual(set(flags) - set(NOT_APPLICABLE), set(ALL_FLAGS) - {"pv-dir"},
                         "a flag of --help has no chart value (or a value renders a flag the "
                         "binary lacks): add it to values.yaml, workload.yaml, the schema, "
                         "README's values table and ALL_VALUES here, or to NOT_APPLICABLE")
        w = workload(self.helm.template(ALL_VALUES))
        self.assertEqual(args_of(w), ALL_FLAGS)
        for name, val in args_of(w).items():
            # A boolean that defaults to true is turned off with =false.
            self.assertEqual(flags[name], val not in (None, "false"),
                             "--%s takes a value or not" % name)
        c = container(w)
        self.assertEqual(c["ports"], [{"name": "metrics", "containerPort": 9100}])
        r = subprocess.run([binary_path()] + c["args"] + ["--help"], capture_output=True,
                           text=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        # The Roles follow the Lease into its namespace (where the capacity objects are too).
        vals = dict(ALL_VALUES, capacity={"enabled": True})
        roles = [o for o in self.helm.template(vals) if o["kind"] in ("Role", "RoleBinding")]
        self.assertEqual({o["metadata"]["namespace"] for o in roles}, {"kube-system"})
        self.assertEqual(len(roles), 4)
        # extraArgs come last, as given; extraEnv after NODE_NAME and POD_NAMESPACE.
        w = workload(self.helm.template({"extraArgs": ["--v=3"], "extraEnv": [
            {"name": "PV_RECLAIM_POLICY", "value": "Retain"}]}))
        self.assertEqual(container(w)["args"][-1], "--v=3")
        self.assertEqual([e["name"] for e in container(w)["env"]],
                         ["NODE_NAME", "POD_NAMESPACE", "PV_RECLAIM_POLICY"])

    def test_switches(self):
        base = by_key(self.helm.template())
        # Leader election off: no --leader-elect, no Lease Role; the capacity Role stays, in
        # the pod's namespace (POD_NAMESPACE: where the objects go without the flag).
        objs = self.helm.template(None, "leaderElection.enabled=false",
                                  "leaderElection.namespace=kube-system")
        self.assertNotIn("leader-elect", args_of(workload(objs)))
        self.assertLess(set(by_key(objs)), set(base))
        self.assertEqual(set(base) - set(by_key(objs)), {
            ("Role", NS, "hostpath-provisioner-leader-election"),
            ("RoleBinding", NS, "hostpath-provisioner-leader-election")})
        # Capacity-aware scheduling off: the flag, and none of its RBAC (nodes get stays: the
        # PVs' nodeAffinityKey reads the node's label).
        objs = self.helm.template(None, "capacity.enabled=false")
        self.assertEqual(args_of(workload(objs))["enable-capacity"], "false")
        self.assertEqual(set(base) - set(by_key(objs)), {
            ("Role", NS, "hostpath-provisioner-capacity"),
            ("RoleBinding", NS, "hostpath-provisioner-capacity")})
        rules = by_key(objs)[("ClusterRole", "", "hostpath-provisioner")]["rules"]
        self.assertEqual([r for r in rules if r["resources"] == ["csidrivers"]], [])
        # Metrics off: no port, no probes, the server off.
        w = workload(self.helm.template(None, "metrics.enabled=false"))
        self.assertEqual(args_of(w)["metrics-address"], "")
        for k in ("ports", "livenessProbe", "readinessProbe"):
            self.assertNotIn(k, container(w))
        # No RBAC, an existing service account.
        objs = self.helm.template(None, "rbac.create=false", "serviceAccount.create=false",
                                  "serviceAccount.name=provisioner")
        self.assertEqual({k[0] for k in by_key(objs)}, {"StorageClass", "Deployment"})
        self.assertEqual(workload(objs)["spec"]["template"]["spec"]["serviceAccountName"],
                         "provisioner")
        # Scheduling and disruption values land in the pod and a PodDisruptionBudget.
        objs = self.helm.template({
            "replicaCount": 2, "nodeSelector": {"disk": "ssd"}, "priorityClassName": "high",
            "tolerations": [{"key": "dedicated", "operator": "Exists"}],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "disk", "operator": "In", "values": ["ssd"]}]}]}}},
            "podDisruptionBudget": {"enabled": True, "maxUnavailable": 1},
            "podAnnotations": {"a": "b"}, "commonLabels": {"team": "storage"},
            "imagePullSecrets": [{"name": "regcred"}],
            "image": {"repository": "registry.example.com/hp", "tag": "9.9"}})
        w = workload(objs)
        pod = w["spec"]["template"]["spec"]
        self.assertEqual(w["spec"]["replicas"], 2)
        self.assertEqual(pod["nodeSelector"], {"disk": "ssd"})
        self.assertEqual(pod["priorityClassName"], "high")
        self.assertEqual(pod["tolerations"], [{"key": "dedicated", "operator": "Exists"}])
        self.assertIn("nodeAffinity", pod["affinity"])
        self.assertEqual(pod["imagePullSecrets"], [{"name": "regcred"}])
        self.assertEqual(container(w)["image"], "registry.example.com/hp:9.9")
        self.assertEqual(w["spec"]["template"]["metadata"]["annotations"], {"a": "b"})
        pdb = by_key(objs)[("PodDisruptionBudget", NS, "hostpath-provisioner")]
        self.assertEqual(pdb["spec"], {"selector": {"matchLabels": w["spec"]["selector"][
            "matchLabels"]}, "maxUnavailable": 1})
        for o in objs:
            self.assertEqual(o["metadata"]["labels"]["team"], "storage", key(o))
        self.assertEqual(w["spec"]["selector"]["matchLabels"],
                         {"app.kubernetes.io/name": "hostpath-provisioner"})

    def test_names_follow_the_release(self):
        objs = self.helm.template(None, release="hp", namespace="storage")
        names = {k[2] for k in by_key(objs)} - {"hostpath", "hostpath-local"}
        self.assertEqual(names, {"hp-hostpath-provisioner",
                                 "hp-hostpath-provisioner-leader-election",
                                 "hp-hostpath-provisioner-capacity"})
        for o in objs:
            if o["kind"] not in ("StorageClass", "ClusterRole", "ClusterRoleBinding"):
                self.assertEqual(o["metadata"]["namespace"], "storage", key(o))
        w = workload(self.helm.template(None, "mode=DaemonSet", release="hp"))
        self.assertEqual(w["metadata"]["name"], "hp-hostpath-provisioner-node")
        self.assertEqual(w["spec"]["selector"]["matchLabels"],
                         {"app.kubernetes.io/name": "hp-hostpath-provisioner-node"})

    # -- config.json as local-path-provisioner's chart ---------------------------------------

    def lpp(self, values):
        return self.helm.template(values, release="local-path-provisioner",
                                  namespace="local-path-storage", chart=lpp_chart(self.helm.binary))

    def test_config_json_and_classes_as_local_path_provisioner_renders_them(self):
        self.assertTrue(os.path.isfile(os.path.join(lpp_chart(self.helm.binary), "Chart.yaml")),
                        "local-path-provisioner's chart is missing: run build-helm.sh again")
        for shape, values in LPP_SHAPES.items():
            with self.subTest(shape=shape):
                theirs = self.lpp(values)
                # Ours: the same values, less our own second class and the two parameters our
                # defaults write: mode (local-path-provisioner's setup script makes directories
                # 0777 too) and pathPattern (the provisioner's default, written out).
                ours_values = json.loads(json.dumps(values))
                sc = ours_values.setdefault("storageClass", {})
                sc["mode"] = ""
                sc.setdefault("pathPattern", "")
                ours_values["localStorageClass"] = {"create": False}
                ours = self.helm.template(ours_values, release="local-path-provisioner",
                                          namespace="local-path-storage")
                cm_theirs = [o for o in theirs if o["kind"] == "ConfigMap"]
                cm_ours = [o for o in ours if o["kind"] == "ConfigMap"]
                self.assertEqual(len(cm_theirs), 1)
                self.assertEqual(len(cm_ours), 1)
                # Byte for byte.
                self.assertEqual(cm_ours[0]["data"]["config.json"],
                                 cm_theirs[0]["data"]["config.json"])
                self.assertEqual(set(cm_ours[0]["data"]), {"config.json"})
                # The same StorageClasses, but local-path-provisioner's Helm labels.
                sc_theirs = {o["metadata"]["name"]: o for o in theirs
                             if o["kind"] == "StorageClass"}
                sc_ours = {o["metadata"]["name"]: o for o in ours if o["kind"] == "StorageClass"}
                for o in sc_theirs.values():
                    del o["metadata"]["labels"]
                self.assertEqual(sc_ours, sc_theirs)
                self.check_config_workload(ours, cm_ours[0])

    def check_config_workload(self, objs, cm):
        """--config points at the mounted ConfigMap, and every path of config.json is mounted
        from the node at the same path."""
        w = workload(objs)
        args = args_of(w)
        self.assertNotIn("pv-dir", args)
        pod = w["spec"]["template"]["spec"]
        vols = {v["name"]: v for v in pod["volumes"]}
        mounts = {m["mountPath"]: m for m in container(w)["volumeMounts"]}
        cfg_dir, _, fname = args["config"].rpartition("/")
        self.assertEqual(fname, "config.json")
        self.assertEqual(vols[mounts[cfg_dir]["name"]]["configMap"]["name"],
                         cm["metadata"]["name"])
        self.assertIs(mounts[cfg_dir]["readOnly"], True)
        config = json.loads(cm["data"]["config.json"])
        paths = set()
        for m in [config] + list((config.get("storageClassConfigs") or {}).values()):
            for n in m.get("nodePathMap") or []:
                paths |= set(n.get("paths") or [])
            if m.get("sharedFileSystemPath"):
                paths.add(m["sharedFileSystemPath"])
        self.assertTrue(paths)
        host = {v["hostPath"]["path"]: n for n, v in vols.items() if "hostPath" in v}
        self.assertEqual(set(host), paths)
        for p, n in host.items():
            self.assertEqual(vols[n]["hostPath"]["type"], "DirectoryOrCreate")
            self.assertEqual(mounts[p]["name"], n)
        self.assertEqual(set(mounts), paths | {cfg_dir})

    def test_our_node_keys_pass_through(self):
        objs = self.helm.template(OURS_NODE_KEYS)
        cm = [o for o in objs if o["kind"] == "ConfigMap"][0]
        self.assertEqual(cm["metadata"]["name"], "hostpath-provisioner-config")
        self.assertEqual(json.loads(cm["data"]["config.json"]), OURS_NODE_KEYS)
        self.check_config_workload(objs, cm)
        # The ConfigMap's name is configmap.name when given (local-path-provisioner's key).
        objs = self.helm.template(OURS_NODE_KEYS, "configmap.name=local-path-config")
        self.assertIn(("ConfigMap", NS, "local-path-config"), by_key(objs))
        self.check_config_workload(objs, by_key(objs)[("ConfigMap", NS, "local-path-config")])
        # No ConfigMap without a path map.
        self.assertNotIn("ConfigMap", {o["kind"] for o in self.helm.template()})

    # -- values that make no sense -----------------------------------------------------------

    def test_schema_refuses_wrong_types_and_names(self):
        cases = [
            (["mode=Foo"], "at '/mode': value must be one of 'Deployment', 'DaemonSet'"),
            (["workerThreads=abc"], "at '/workerThreads': got string, want null or integer"),
            (["workerThreads=0"], "at '/workerThreads': minimum: got 0, want 1"),
            (["metrics.port=70000"], "at '/metrics/port': maximum: got 70,000, want 65,535"),
            (["helperImage.tag=latest"], "additional properties 'helperImage' not allowed"),
            (["storageClass.reclaimPolicy=Recycle"],
             "at '/storageClass/reclaimPolicy': value must be one of 'Delete', 'Retain'"),
            (["storageClass.mode=0999"], "at '/storageClass/mode'"),
            (["storageClass.defaultVolumeType=nfs"], "at '/storageClass/defaultVolumeType'"),
            (["nodePathMap[0].node=a", "nodePathMap[0].paths[0]=relative/path"],
             "at '/nodePathMap/0/paths/0'"),
            (["pvDir=/"], "at '/pvDir'"),
            (["resyncPeriod=5 minutes"], "at '/resyncPeriod'"),
            (["resyncPeriod=300"], "at '/resyncPeriod': got number, want string"),
            (["podDisruptionBudget.maxUnavailable=1", "podDisruptionBudget.minAvailable=1"],
             "at '/podDisruptionBudget'"),
            (["logFormat=yaml"], "at '/logFormat': value must be one of '', 'text', 'json'"),
            (["storageClassConfigs.Bad_Name.sharedFileSystemPath=/x"],
             "invalid propertyName 'Bad_Name'"),
        ]
        for sets, message in cases:
            with self.subTest(sets=sets):
                err = self.helm.template_error(None, *sets)
                self.assertIn("values don't meet the specifications of the schema", err)
                self.assertIn(message, err)

    def test_combinations_that_make_no_sense_fail(self):
        cases = [
            ({"mode": "DaemonSet", "leaderElection": {"enabled": False}},
             "mode DaemonSet needs leaderElection.enabled"),
            ({"replicaCount": 2, "leaderElection": {"enabled": False}},
             "replicaCount 2 needs leaderElection.enabled"),
            ({"nodePathMap": [{"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES", "paths": ["/a"]}],
              "sharedFileSystemPath": "/mnt/nfs"},
             "nodePathMap and sharedFileSystemPath are both given"),
            ({"storageClassConfigs": {"c": {"sharedFileSystemPath": "/x", "nodePathMap": [
                {"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES", "paths": ["/a"]}]}}},
             "storageClassConfigs.c has both nodePathMap and sharedFileSystemPath"),
            ({"storageClassConfigs": {"c": {"storageClass": {"create": True}}}},
             "storageClassConfigs.c has neither nodePathMap nor sharedFileSystemPath"),
            ({"localStorageClass": {"name": "hostpath"}},
             'storageClass.name and localStorageClass.name are both "hostpath"'),
            ({"storageClass": {"defaultClass": True}, "localStorageClass": {"defaultClass": True}},
             "StorageClasses hostpath, hostpath-local all have defaultClass true"),
        ]
        for values, message in cases:
            with self.subTest(values=values):
                err = self.helm.template_error(values)
                self.assertIn("execution error", err)
                self.assertIn("hostpath-provisioner: " + message, err)
        # The templates check what the schema checks too, for --skip-schema-validation.
        err = self.helm.template_error(None, "mode=Foo", extra=["--skip-schema-validation"])
        self.assertIn('hostpath-provisioner: mode "Foo" is not Deployment or DaemonSet', err)


if __name__ == "__main__":
    if not helm_binary():
        skip_module(missing_reason())
    unittest.main(verbosity=2)
