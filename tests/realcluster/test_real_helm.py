#!/usr/bin/env python3
"""The Helm chart on a real control plane: helm install, upgrade and uninstall, with claims
provisioned by the release's own pods in between.

helm is v4.3.1, built from the Go module proxy by tests/realcluster/build-helm.sh; it runs with
homes of its own and a proxy that reaches nothing (tests/integration/helmtool.py): it talks to
the API server on 127.0.0.1 and to nothing else.

This tier has no kubelet, so PodRunner does the kubelet's part for the release's pods, from
the pod objects the real Deployment and DaemonSet controllers made and the real scheduler
placed: it runs the provisioner binary with the container's args and env (fieldRefs resolved
from the pod), its hostPath volumes made as DirectoryOrCreate (they are mounted at the same
path, which the pod spec must say), its ConfigMap volumes written out from the API, and its
ServiceAccount's token from the TokenRequest API bound to the pod, as the kubelet's projected
token is; it reports a pod Ready once the process's /readyz answers 200, and stops the
process and confirms the deletion (grace period 0) of a pod being deleted. Two deviations
from a real pod: the metrics server listens on 127.0.0.1:0 (no pod network), and a ConfigMap
path in the args is rewritten to where it was written out. When the tier has a real node,
PodRunner is what to replace: the tests only ask it to sync and for each pod's process.
"""

import json
import os
import re
import shutil
import sys
import time
import unittest
from datetime import datetime, timezone
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from realharness import (PV_PATH, PVC_PATH, SC_PATH, ApiError, Provisioner,  # noqa: E402
                         RealClusterTestCase, require_cluster, skip_module, wait_for)
from helmtool import CHART, Helm, helm_binary, missing_reason  # noqa: E402

PODS = "/api/v1/namespaces/%s/pods"
POD = "/api/v1/namespaces/%s/pods/%s"
RBAC = "/apis/rbac.authorization.k8s.io/v1"
DEFAULT_NODE = "DEFAULT_PATH_FOR_NON_LISTED_NODES"


def setUpModule():
    if not helm_binary():
        skip_module(missing_reason())
    require_cluster()


class PodProcess(Provisioner):
    """The provisioner as a pod's container runs it: exactly `args` (and --kubeconfig, this
    tier's stand-in for the projected token), nothing of the harness's own."""

    def __init__(self, server, workdir, args, kubeconfig, env, name):
        super().__init__(server, os.path.join(workdir, "unused"), *args, env=env,
                         kubeconfig=kubeconfig, name=name, metrics_address=None)

    def command(self):
        return [self.binary, "--kubeconfig", self.kubeconfig] + self.args


class PodRunner:
    """The kubelet's part for the pods of one namespace and label selector (see the module
    docstring). sync() brings processes in line with the pods; `procs` maps a pod's name to
    its process."""

    def __init__(self, test, namespace, selector, fast=()):
        self.t = test
        self.ns = namespace
        self.selector = selector
        self.fast = list(fast)
        self.procs = {}   # pod name -> PodProcess
        self.uids = {}    # pod name -> uid
        self.ready = set()
        self.started = 0

    def pods(self):
        return self.t.api.list(PODS % self.ns, labelSelector=self.selector)["items"]

    def sync(self):
        seen = set()
        for pod in self.pods():
            name = pod["metadata"]["name"]
            seen.add(name)
            if pod["metadata"].get("deletionTimestamp"):
                self._stop(name)
                self.t._delete_quietly(POD % (self.ns, name), {"gracePeriodSeconds": 0})
            elif pod["spec"].get("nodeName") and name not in self.procs:
                self.procs[name] = self._start(pod)
                self.uids[name] = pod["metadata"]["uid"]
            elif name in self.procs and name not in self.ready and self._ready(name):
                self._report_ready(pod)
        for name in list(self.procs):
            if name not in seen:
                self._stop(name)
        return self.procs

    def wait(self, pred, timeout, what):
        """Waits for pred(procs), syncing meanwhile; returns its value."""
        return self.t.wait(lambda: pred(self.sync()), timeout, what, interval=0.3)

    def stop_all(self):
        for name in list(self.procs):
            self._stop(name)

    # -- one pod ---------------------------------------------------------------------------

    def _start(self, pod):
        name, node = pod["metadata"]["name"], pod["spec"]["nodeName"]
        spec = pod["spec"]
        self.t.assertEqual(len(spec["containers"]), 1, spec["containers"])
        c = spec["containers"][0]
        workdir = os.path.join(self.t.tmp, "pods", name)
        os.makedirs(workdir, exist_ok=True)
        env = {}
        for e in c.get("env") or []:
            ref = ((e.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
            env[e["name"]] = {"spec.nodeName": node, "metadata.namespace": self.ns,
                              "metadata.name": name, None: e.get("value")}[ref]
        volumes = {v["name"]: v for v in spec.get("volumes") or []}
        rewrite = {}
        for m in c.get("volumeMounts") or []:
            v = volumes[m["name"]]
            if "hostPath" in v:
                # No mount namespace here: the process sees the host's path itself.
                self.t.assertEqual(m["mountPath"], v["hostPath"]["path"], m)
                self.t.assertEqual(v["hostPath"].get("type"), "DirectoryOrCreate", v)
                os.makedirs(v["hostPath"]["path"], exist_ok=True)
            elif "configMap" in v:
                cm = self.t.api.get("/api/v1/namespaces/%s/configmaps/%s"
                                    % (self.ns, v["configMap"]["name"]))
                d = os.path.join(workdir, "cm-" + m["name"])
                os.makedirs(d, exist_ok=True)
                for k, text in (cm.get("data") or {}).items():
                    with open(os.path.join(d, k), "w") as f:
                        f.write(text)
                rewrite[m["mountPath"].rstrip("/")] = d
            elif "projected" in v:
                pass  # the service account token: --kubeconfig below
            else:
                self.t.fail("volume %s of pod %s: a kind PodRunner does not run" % (v, name))
        args = []
        for a in c.get("args") or []:
            if a.startswith("--metrics-address="):
                a = "--metrics-address=127.0.0.1:0"
            for src, dst in rewrite.items():
                a = a.replace("=" + src + "/", "=" + dst + "/")
            args.append(a)
        kubeconfig = self._token_kubeconfig(pod, workdir)
        self.t.wait_rbac(self.ns, spec.get("serviceAccountName") or "default")
        p = PodProcess(self.t.cluster, workdir, args + self.fast, kubeconfig, env,
                       name="pod-" + name)
        p.pod_args = c.get("args") or []
        p.node = node
        p.start()
        self.started += 1
        self.t.procs.append(p)
        return p

    def _token_kubeconfig(self, pod, workdir):
        """A token of the pod's ServiceAccount bound to the pod (the kubelet's kind)."""
        sa = pod["spec"].get("serviceAccountName") or "default"
        tr = self.t.api.create("/api/v1/namespaces/%s/serviceaccounts/%s/token" % (self.ns, sa), {
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"expirationSeconds": 3600, "boundObjectRef": {
                "kind": "Pod", "apiVersion": "v1", "name": pod["metadata"]["name"],
                "uid": pod["metadata"]["uid"]}}})
        path = os.path.join(workdir, "token.conf")
        from standin import certs
        certs.write_kubeconfig(path, self.t.cluster.url, self.t.cluster.ca,
                               token=tr["status"]["token"], namespace=self.ns)
        return path

    def _ready(self, name):
        p = self.procs[name]
        m = re.search(r"listen\w*\b.*?(127\.0\.0\.1:\d+)", p.log)
        if not m or not p.alive():
            return False
        try:
            with urllib.request.urlopen("http://%s/readyz" % m.group(1), timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def _report_ready(self, pod):
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        conds = [{"type": t, "status": "True", "lastTransitionTime": now}
                 for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")]
        try:
            self.t.api.patch(POD % (self.ns, pod["metadata"]["name"]) + "/status", {
                "status": {"phase": "Running", "startTime": now, "conditions": conds}})
            self.ready.add(pod["metadata"]["name"])
        except ApiError as e:
            if e.status != 404:
                raise

    def _stop(self, name):
        p = self.procs.pop(name, None)
        self.ready.discard(name)
        if p is not None and p.alive():
            code = p.stop(timeout=30)
            self.t.assertEqual(code, 0, "%s exit code; log:\n%s" % (p.name, p.log[-3000:]))


def utc_now():
    """Now, as the provisioner's log lines say it (UTC, no zone)."""
    return datetime.now(timezone.utc).replace(tzinfo=None)


class HelmTest(RealClusterTestCase):
    def setUp(self):
        super().setUp()
        self.helm = Helm(helm_binary(), self.tmp, kubeconfig=self.cluster.kubeconfig)
        # The release's own namespace (made by helm install --create-namespace) and names.
        self.rel = "hp"
        self.rel_ns = ("hp-" + self.id_)[:63].strip("-")
        self.fullname = ("hp-" + self.id_)[:50].strip("-")
        self.classes += [self.cls_name("hostpath"), self.cls_name("local")]
        # Cleanups run last-in first-out: the processes, the release, the leftovers.
        self.addCleanup(self.delete_namespace, self.rel_ns)
        for path in (RBAC + "/clusterroles/%s", RBAC + "/clusterrolebindings/%s"):
            self.addCleanup(self._delete_quietly, path % self.fullname)
        self.addCleanup(self.helm.run, "uninstall", self.rel, "-n", self.rel_ns,
                        "--ignore-not-found", ok=False)

    def values(self, **extra):
        # The Deployment pinned to one node, as README says for a cluster of several: its
        # volumes are on that node's disk, and only that node's instance deletes them.
        v = {"fullnameOverride": self.fullname,
             "nodeSelector": {"kubernetes.io/hostname": "node-a"},
             "storageClass": {"provisionerName": self.prov_name,
                              "name": self.cls_name("hostpath")},
             "localStorageClass": {"name": self.cls_name("local")},
             "pvDir": os.path.join(self.tmp, "volumes")}
        v.update(extra)
        return v

    def runner(self, mode="Deployment"):
        name = self.fullname + ("-node" if mode == "DaemonSet" else "")
        r = PodRunner(self, self.rel_ns, "app.kubernetes.io/name=" + name, fast=self.fast)
        self.addCleanup(r.stop_all)
        return r

    def helm_ok(self, *args):
        if args and args[0] in ("install", "uninstall"):
            # When each began: a pod's requests between an uninstall and the next install
            # may be refused (the Role goes before the pod is stopped).
            self.__dict__.setdefault("helm_steps", []).append((args[0], utc_now()))
        r = self.helm.run(*args, timeout=180)
        self.assertEqual(r.stderr.strip(), "", r.stderr)
        return r.stdout

    def release(self):
        out = json.loads(self.helm_ok("list", "-n", self.rel_ns, "-o", "json"))
        return out[0] if out else None

    def chart_objects(self):
        """The paths of the objects the release makes (default values, Deployment mode)."""
        ns = self.rel_ns
        return ["/api/v1/namespaces/%s/serviceaccounts/%s" % (ns, self.fullname),
                RBAC + "/clusterroles/" + self.fullname,
                RBAC + "/clusterrolebindings/" + self.fullname,
                RBAC + "/namespaces/%s/roles/%s-leader-election" % (ns, self.fullname),
                RBAC + "/namespaces/%s/rolebindings/%s-leader-election" % (ns, self.fullname),
                SC_PATH % self.cls_name("hostpath"), SC_PATH % self.cls_name("local")]

    def only(self, procs):
        """The one process, once exactly one runs and leads."""
        if len(procs) != 1:
            return None
        p = next(iter(procs.values()))
        return p if re.search(r"became leader", p.log) else None

    def uninstalling(self, when):
        """Whether a log line's time falls after an uninstall began and before the next
        install."""
        state = None
        for step, t in getattr(self, "helm_steps", []):
            if t > when:
                break
            state = step
        return state == "uninstall"

    def assert_nothing_refused(self):
        """The chart's RBAC let every pod do its work: no request refused (403) before the
        pod was told to stop, or its release began to be uninstalled. (Helm deletes the
        Deployment, then the Role, while the pod is still stopping: a pod of a release being
        uninstalled finds its Role gone and cannot renew or release its Lease: README says
        so.)"""
        year = utc_now().year
        for p in self.procs:
            work = p.log.split("SIGTERM received")[0]
            refused, seen = [], 0
            for m in re.finditer(r"(?m)^[IWEF](\d\d)(\d\d) (\d\d:\d\d:\d\d\.\d+) .*request "
                                 r"method=\S+ path=(\S+) status=403", work):
                when = datetime.strptime("%d-%s-%s %s" % (year, m.group(1), m.group(2),
                                                          m.group(3)), "%Y-%m-%d %H:%M:%S.%f")
                seen += 1
                if not self.uninstalling(when):
                    refused.append(m.group(4))
            self.assertEqual(refused, [], p.name)
            self.assertEqual(seen, len(re.findall(r"request method=\S+ path=\S+ status=403",
                                                  work)), p.name)  # each one's time was read
        self.assertTrue(self.procs)

    def volume_dir(self, claim_name):
        c = self.claim_of(claim_name)
        pv = self.pv(c["spec"]["volumeName"])
        return pv, pv["spec"]["hostPath"]["path"]

    def test_install_upgrade_uninstall(self):
        vol, vol2 = os.path.join(self.tmp, "volumes"), os.path.join(self.tmp, "volumes2")

        # 1. Install: the chart's objects, owned by the release; the real Deployment
        # controller and scheduler make and place its pod, which provisions.
        out = self.helm_ok("install", self.rel, CHART, "-n", self.rel_ns, "--create-namespace",
                           "-f", self.helm.values_file(self.values()))
        self.assertIn("STATUS: deployed", out)
        self.assertIn("StorageClasses: %s, %s." % (self.cls_name("hostpath"),
                                                     self.cls_name("local")), out)
        rel = self.release()
        self.assertEqual((rel["status"], rel["revision"], rel["chart"], rel["app_version"]),
                         ("deployed", "1", "hostpath-provisioner-0.1.0", "0.1.0"))
        for path in self.chart_objects():
            md = self.api.get(path)["metadata"]
            self.assertEqual(md["annotations"]["meta.helm.sh/release-name"], self.rel, path)
            self.assertEqual(md["labels"]["app.kubernetes.io/managed-by"], "Helm", path)
        runner = self.runner()
        p1 = runner.wait(self.only, 90, "the Deployment's pod running and leading")
        self.assertIn("--pv-dir=" + vol, p1.pod_args)
        self.assertEqual(p1.node, "node-a")
        self.add_claim("c1")
        self.wait_bound("c1")
        pv1, dir1 = self.volume_dir("c1")
        self.assertTrue(dir1.startswith(vol + "/"), dir1)
        self.assertTrue(os.path.isdir(dir1))
        self.assertEqual(pv1["metadata"]["annotations"]["pv.kubernetes.io/provisioned-by"],
                         self.prov_name)
        # The Deployment's status comes from the pod PodRunner reported Ready.
        dep_path = "/apis/apps/v1/namespaces/%s/deployments/%s" % (self.rel_ns, self.fullname)
        self.wait(lambda: self.api.get(dep_path).get("status", {}).get("availableReplicas") == 1,
                  60, "the Deployment available")

        # 2. Upgrade, switching from --pv-dir to a node path map of two paths (the first the
        # old --pv-dir): a ConfigMap appears, the pod is replaced (Recreate), the new one
        # runs with --config, keeps the old volume and provisions on the map.
        v2 = self.values(nodePathMap=[{"node": DEFAULT_NODE, "paths": [vol, vol2]}])
        out = self.helm_ok("upgrade", self.rel, CHART, "-n", self.rel_ns,
                           "-f", self.helm.values_file(v2))
        self.assertIn("REVISION: 2", out)
        cm = self.api.get("/api/v1/namespaces/%s/configmaps/%s-config" % (self.rel_ns,
                                                                          self.fullname))
        self.assertEqual(json.loads(cm["data"]["config.json"]),
                         {"nodePathMap": [{"node": DEFAULT_NODE, "paths": [vol, vol2]}]})
        p2 = runner.wait(lambda procs: self.only(procs) if self.only(procs) is not p1 else None,
                         120, "the new pod running and leading")
        self.assertFalse(p1.alive())
        self.assertIn("--config=/etc/hostpath-provisioner/config.json", p2.pod_args)
        self.assertFalse([a for a in p2.pod_args if a.startswith("--pv-dir")])
        self.add_claim("c2")
        self.wait_bound("c2")
        _, dir2 = self.volume_dir("c2")
        self.assertTrue(dir2.startswith((vol + "/", vol2 + "/")), dir2)
        self.assertTrue(os.path.isdir(dir2))
        # The old volume is the upgraded release's: its claim goes, its directory goes.
        self.api.delete(PVC_PATH % (self.ns, "c1"))
        self.wait_gone(PV_PATH % pv1["metadata"]["name"])
        self.wait(lambda: not os.path.exists(dir1), 30, "c1's directory removed")

        # 3. A StorageClass cannot change in place (Kubernetes forbids it): the upgrade fails
        # and says so; README's procedure (delete the class, upgrade again) works, and the
        # existing volume keeps its own reclaim policy.
        v3 = dict(v2, storageClass=dict(v2["storageClass"], reclaimPolicy="Retain"))
        r = self.helm.run("upgrade", self.rel, CHART, "-n", self.rel_ns,
                          "-f", self.helm.values_file(v3), ok=False, timeout=180)
        self.assertNotEqual(r.returncode, 0, r.stdout)
        self.assertRegex(r.stderr, r"UPGRADE FAILED: .*StorageClass.storage.k8s.io \"%s\" is "
                         r"invalid: reclaimPolicy: .*(immutable|forbidden)"
                         % self.cls_name("hostpath"))
        self.kubectl("delete", "storageclass", self.cls_name("hostpath"))
        out = self.helm_ok("upgrade", self.rel, CHART, "-n", self.rel_ns,
                           "-f", self.helm.values_file(v3))
        self.assertIn("STATUS: deployed", out)
        self.assertEqual(self.api.get(SC_PATH % self.cls_name("hostpath"))["reclaimPolicy"],
                         "Retain")
        pv2 = self.pv(self.claim_of("c2")["spec"]["volumeName"])
        self.assertEqual(pv2["spec"]["persistentVolumeReclaimPolicy"], "Delete")
        self.assertEqual(list(runner.sync().values()), [p2],
                         "no new pod: the Deployment did not change")

        # 4. Uninstall with c2 still bound: the release's objects and its pod go; the
        # namespace, the claim, its PersistentVolume and its directory stay.
        out = self.helm_ok("uninstall", self.rel, "-n", self.rel_ns)
        self.assertIn('release "%s" uninstalled' % self.rel, out)
        runner.wait(lambda procs: not procs, 90, "the pod gone")
        for path in self.chart_objects() + [dep_path, "/api/v1/namespaces/%s/configmaps/%s-"
                                            "config" % (self.rel_ns, self.fullname)]:
            self.wait_gone(path)
        self.assertIsNone(self.release())
        self.assertTrue(self.api.exists("/api/v1/namespaces/" + self.rel_ns))
        self.assertEqual(self.phase("c2"), "Bound")
        self.assertTrue(self.api.exists(PV_PATH % pv2["metadata"]["name"]))
        self.assertTrue(os.path.isdir(dir2))

        # 5. README's clean-up of what an uninstall leaves: install again with the same
        # provisioner name, delete the claims, wait for their volumes to go, uninstall.
        self.helm_ok("install", self.rel, CHART, "-n", self.rel_ns,
                     "-f", self.helm.values_file(v3))
        p3 = runner.wait(self.only, 120, "the reinstalled release's pod running and leading")
        self.assertEqual(p3.node, "node-a")
        self.api.delete(PVC_PATH % (self.ns, "c2"))
        self.wait_gone(PV_PATH % pv2["metadata"]["name"])
        self.wait(lambda: not os.path.exists(dir2), 30, "c2's directory removed")
        self.helm_ok("uninstall", self.rel, "-n", self.rel_ns)
        runner.wait(lambda procs: not procs, 90, "the pod gone")
        for path in self.chart_objects():
            self.wait_gone(path)
        self.assertEqual(self.my_pvs(), [])
        # What stays on the node: the volume paths, holding at most the ownership journal,
        # with no record left in it.
        for d in (vol, vol2):
            self.assertLessEqual(set(os.listdir(d)), {".hostpath-provisioner"}, d)
        self.assertEqual(os.listdir(os.path.join(vol, ".hostpath-provisioner", "records")), [])
        print("\nleft on the node: %s" % sorted(
            os.path.relpath(os.path.join(r, f), self.tmp) for top in (vol, vol2)
            for r, ds, fs in os.walk(top) for f in ds + fs), file=sys.stderr)
        self.assertEqual(runner.started, 3)
        self.assert_nothing_refused()

    def test_daemonset_mode(self):
        # One path per node: each node's instance provisions on its own directory.
        paths = {n: os.path.join(self.tmp, "disk-" + n) for n in self.cluster.nodes}
        v = self.values(mode="DaemonSet", nodeSelector={}, nodePathMap=[
            {"node": n, "paths": [p]} for n, p in sorted(paths.items())])
        self.helm_ok("install", self.rel, CHART, "-n", self.rel_ns, "--create-namespace",
                     "-f", self.helm.values_file(v))
        runner = self.runner("DaemonSet")
        nodes = set(self.cluster.nodes)
        runner.wait(lambda procs: {p.node for p in procs.values()} == nodes and all(
            re.search(r"caches synced", p.log) for p in procs.values()), 90,
            "one running pod per node")
        self.add_claim("c1", cls="local")
        self.add_pod("p1", ["c1"], node="node-b")
        self.wait_bound("c1", timeout=90)
        pv1, dir1 = self.volume_dir("c1")
        self.assertTrue(dir1.startswith(paths["node-b"] + "/"), dir1)
        self.assertTrue(os.path.isdir(dir1))
        self.assertEqual(pv1["metadata"]["annotations"]["hostPathProvisionerIdentity"],
                         "node-b")
        terms = pv1["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]
        self.assertEqual(terms[0]["matchExpressions"][0]["values"], ["node-b"])

        # An upgrade that changes the pod: the real DaemonSet controller rolls it node by
        # node, each step waiting for the new pod to be Ready (PodRunner reports it).
        before = {n: p for n, p in runner.sync().items()}
        self.helm_ok("upgrade", self.rel, CHART, "-n", self.rel_ns,
                     "-f", self.helm.values_file(dict(v, logVerbosity=2)))
        runner.wait(lambda procs: len(procs) == 3 and not set(procs) & set(before) and all(
            "--v=2" in p.pod_args for p in procs.values()), 180,
            "every node's pod replaced with --v=2")
        self.delete_pod("p1")
        self.api.delete(PVC_PATH % (self.ns, "c1"))
        self.wait_gone(PV_PATH % pv1["metadata"]["name"])
        self.wait(lambda: not os.path.exists(dir1), 30, "c1's directory removed")
        self.helm_ok("uninstall", self.rel, "-n", self.rel_ns)
        runner.wait(lambda procs: not procs, 90, "the DaemonSet's pods gone")
        self.assertEqual(runner.started, 6)
        self.assert_nothing_refused()

    def test_rendered_objects_pass_server_validation(self):
        # Every kind of values the fast tier renders, validated by this release's API server
        # (strict field validation, server-side dry run: nothing is created).
        sys.path.insert(0, os.path.join(os.path.dirname(HERE), "integration"))
        from test_chart import ALL_VALUES, LPP_SHAPES, OURS_NODE_KEYS
        self.kubectl("create", "namespace", self.rel_ns)
        for values in (None, {"mode": "DaemonSet"}, ALL_VALUES, OURS_NODE_KEYS,
                       {"podDisruptionBudget": {"enabled": True, "minAvailable": 1},
                        "tolerations": [{"key": "k", "operator": "Exists"}]},
                       *LPP_SHAPES.values()):
            with self.subTest(values=values):
                r = self.helm.run("template", self.rel, CHART, "-n", self.rel_ns,
                                  *self.helm.value_args(values))
                out = self.kubectl("apply", "--dry-run=server", "--validate=strict", "-f",
                                   "-", input=r.stdout, ok=False)
                self.assertEqual(out.returncode, 0, out.stderr)
                self.assertNotIn("Warning", out.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
