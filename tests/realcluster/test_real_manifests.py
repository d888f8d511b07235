#!/usr/bin/env python3
"""manifests/ on a real control plane, and the provisioner run as their ServiceAccount.

`kubectl apply -k manifests/` (kubectl of the pinned release) creates everything; the real
Deployment controller makes a ReplicaSet and a Pod, the real scheduler places it, and the
DaemonSet (applied on its own) gets one pod per node. The provisioner then runs with the
Deployment's (then the DaemonSet's) args and environment, authenticated by a ServiceAccount
token from the TokenRequest API, so the real authenticator and the real Node,RBAC authorizer
decide every request: provisioning, deletion, aggregated events, leader election,
--add-finalizer and a reschedule. Nothing may be refused; and the authorizer refuses what
rbac.yaml does not grant.
"""

import os
import re
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from realharness import (LEASE_PATH, PV_PATH, PVC_PATH, SELECTED, SRC,  # noqa: E402
                         RealClusterTestCase, require_cluster, scrape, storage_class)
from test_manifests import (CLUSTER_GRANTS, DEPLOY_PATH, DS_PATH, NS, ROLE_GRANTS,  # noqa: E402
                            SA, container)

MANIFESTS = os.path.join(SRC, "manifests")
PROV = "hostpath-provisioner.io"
SA_USER = "system:serviceaccount:%s:%s" % (NS, SA)


def setUpModule():
    require_cluster()


class ManifestsTest(RealClusterTestCase):
    def setUp(self):
        super().setUp()
        self.prov_name = PROV  # the manifests' provisioner name
        self.delete_namespace(NS)  # a leftover of an earlier run
        # Cleanups run last-in first-out: the objects, then the namespace (waited for, so the
        # next test can create it again).
        self.addCleanup(self.delete_namespace, NS)
        # The CSIDriver the leader made (capacity-aware scheduling): not a manifest object, and
        # a later test of the same provisioner name must not find a stale one.
        self.addCleanup(self.kubectl, "delete", "csidriver", PROV, "--ignore-not-found",
                        ok=False)
        self.addCleanup(self.kubectl, "delete", "-f", os.path.join(MANIFESTS, "daemonset.yaml"),
                        "--ignore-not-found", "--wait=false", ok=False)
        self.addCleanup(self.kubectl, "delete", "-k", MANIFESTS, "--ignore-not-found",
                        "--wait=false", ok=False)

    def start(self, workload_path, node_name, kubeconfig, pv_dir, *extra, name):
        """The provisioner as the workload's pod runs it: its args (--pv-dir and
        --metrics-address pointed at test locations) and environment, fieldRefs resolved as
        the kubelet would."""
        c = container(self.api.get(workload_path))
        args = [a for a in c["args"] if not a.startswith(("--pv-dir", "--metrics-address"))]
        env = {}
        for e in c["env"]:
            ref = (e.get("valueFrom") or {}).get("fieldRef", {}).get("fieldPath")
            env[e["name"]] = {"spec.nodeName": node_name, "metadata.namespace": NS,
                              None: e.get("value")}[ref]
        # The test's own fast flags come after the manifest's args; --provisioner-name is the
        # manifest's (self.fast does not set it).
        from harness import Provisioner
        p = Provisioner(self.cluster, pv_dir, *(args + list(self.fast) + list(extra)),
                        kubeconfig=kubeconfig, env=env, name=name)
        p.start()
        self.procs.append(p)
        self.addCleanup(self._stop, p)
        return p

    def refused(self, p):
        return re.findall(r"kube_client: request method=(\S+) path=(\S+) status=403", p.log)

    def test_apply_k_and_run_as_the_service_account(self):
        out = self.kubectl("apply", "-k", MANIFESTS).stdout
        for what in ("namespace/hostpath-provisioner", "serviceaccount/hostpath-provisioner",
                     "clusterrole.rbac.authorization.k8s.io/hostpath-provisioner",
                     "storageclass.storage.k8s.io/hostpath",
                     "deployment.apps/hostpath-provisioner"):
            self.assertRegex(out, re.escape(what) + r" (created|unchanged|configured)")
        # Applying again changes nothing.
        again = self.kubectl("apply", "-k", MANIFESTS).stdout
        self.assertNotRegex(again, r" (created|configured)$")
        # The real controllers run the Deployment: a ReplicaSet, a Pod with the service
        # account's projected token, placed on a node by the scheduler (it never runs: no
        # kubelet).
        pods = self.wait(lambda: [p for p in self.api.list(
            "/api/v1/namespaces/%s/pods" % NS)["items"] if p["spec"].get("nodeName")], 90,
            "the Deployment's pod scheduled")
        pod = pods[0]
        self.assertEqual(pod["spec"]["serviceAccountName"], SA)
        self.assertTrue(any(v.get("projected") for v in pod["spec"]["volumes"]),
                        "ServiceAccount admission adds the projected token volume")
        node = pod["spec"]["nodeName"]
        self.assertIn(node, self.cluster.nodes)
        # The DaemonSet: one pod per node.
        self.kubectl("apply", "-f", os.path.join(MANIFESTS, "daemonset.yaml"))
        self.wait(lambda: len({p["spec"].get("nodeName") for p in self.api.list(
            "/api/v1/namespaces/%s/pods" % NS, labelSelector="app.kubernetes.io/name="
            "hostpath-provisioner-node")["items"]} & set(self.cluster.nodes)) == 3, 90,
            "one DaemonSet pod on each node")

        kubeconfig, token = self.service_account_kubeconfig(NS, SA)
        self.wait_rbac(NS, SA)
        self.classes.append("hp-bad-" + self.id_)
        self.api.create("/apis/storage.k8s.io/v1/storageclasses", storage_class(
            "hp-bad-" + self.id_, PROV, parameters={"sizeLimit": "1Gi"}))

        # 1. As the Deployment runs it, with --add-finalizer (the PV patch path).
        dep = self.start(DEPLOY_PATH, node, kubeconfig, os.path.join(self.tmp, "volumes"),
                         "--add-finalizer", name="deployment")
        dep.wait_log(r"became leader", 30)
        lease = self.api.get(LEASE_PATH % (NS, PROV.replace("/", "-")))
        self.assertTrue(lease["spec"]["holderIdentity"])
        c1 = self.api.create("/api/v1/namespaces/%s/persistentvolumeclaims" % self.ns,
                             claim_for(self.ns, "c1", "hostpath"))
        self.wait_bound("c1")
        pv1 = "pvc-" + c1["metadata"]["uid"]
        self.wait(lambda: "external-provisioner.volume.kubernetes.io/finalizer" in
                  self.pv(pv1)["metadata"].get("finalizers", []), 30, "finalizer patched")
        # A refused claim, touched twice: the event is aggregated (created, then patched).
        self.api.create("/api/v1/namespaces/%s/persistentvolumeclaims" % self.ns,
                        claim_for(self.ns, "bad", "hp-bad-" + self.id_))
        self.wait_event("bad", "ProvisioningFailed")
        for i in range(2):
            self.api.patch(PVC_PATH % (self.ns, "bad"), {"metadata": {"labels": {"t": str(i)}}})
        self.wait(lambda: self.events_for("bad", "ProvisioningFailed")[0].get("count", 1) >= 3,
                  30, "aggregated event")
        self.api.delete(PVC_PATH % (self.ns, "c1"))
        self.wait_gone(PV_PATH % pv1)
        self.assertEqual(self.refused(dep), [])
        m = scrape(dep)
        self.assertEqual(m.sum("rest_client_requests_total", code="403"), 0)
        self.assertGreaterEqual(m.sum("rest_client_requests_total", method="PATCH"), 2)
        self.assertEqual(dep.stop(), 0)

        # 2. As the DaemonSet runs it on node-c, whose disk is read-only: the selected-node
        # annotation is removed (a PVC patch) so the scheduler picks again.
        ro = os.path.join(self.tmp, "ro")
        os.makedirs(ro)
        mounted = os.geteuid() == 0 and subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", ro],
            capture_output=True, timeout=30).returncode == 0
        if mounted:
            self.addCleanup(subprocess.run, ["umount", "-l", ro], capture_output=True,
                            timeout=30)
            ds = self.start(DS_PATH, "node-c", kubeconfig, ro, name="daemonset-node-c")
            good = self.start(DS_PATH, "node-a", kubeconfig, os.path.join(self.tmp, "pv-a"),
                              name="daemonset-node-a")
            ds.wait_log(r"caches synced", 30)
            good.wait_log(r"caches synced", 30)
            # The disk turns read-only after start (a read-only --pv-dir is refused at start).
            r = subprocess.run(["mount", "-o", "remount,ro", ro], capture_output=True,
                               text=True, timeout=30)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.api.create("/api/v1/namespaces/%s/persistentvolumeclaims" % self.ns,
                            claim_for(self.ns, "c3", "hostpath-local", size="1Ki"))
            self.add_pod("p3", ["c3"], node="node-c")
            self.wait_event("c3", "ProvisioningFailed")
            # The scheduler retries; the pod is pinned to node-c, so unpin it by recreating
            # it for node-a: node-a's instance provisions.
            self.delete_pod("p3")
            self.wait(lambda: SELECTED not in (self.claim_of("c3")["metadata"]
                                               .get("annotations") or {}), 30,
                      "selected-node removed from c3")
            self.add_pod("p3b", ["c3"], node="node-a")
            self.wait_bound("c3", timeout=90)
            self.assertEqual(self.refused(ds), [])
            self.assertEqual(self.refused(good), [])
            self.delete_pod("p3b")
        else:
            sys.stderr.write("\nNOTE: no read-only tmpfs (not root or mount refused): the "
                             "reschedule path is not exercised\n")

        # 3. The authorizer refuses what rbac.yaml does not grant.
        from harness import Client
        sa = Client(self.cluster.url, token=token, ca=self.cluster.ca)
        self.addCleanup(sa.close)
        r = sa.request("DELETE", PVC_PATH % (self.ns, "bad"))
        self.assertEqual(r.status, 403)
        self.assertEqual(r.body["message"], 'persistentvolumeclaims "bad" is forbidden: User '
                         '"%s" cannot delete resource "persistentvolumeclaims" in API group "" '
                         'in the namespace "%s"' % (SA_USER, self.ns))
        r = sa.request("GET", "/api/v1/namespaces/%s/secrets" % NS)
        self.assertEqual(r.status, 403)
        # ... and allows exactly the grants the code needs (SubjectAccessReview through
        # kubectl auth can-i, impersonating the service account).
        for group, res, verb in sorted(CLUSTER_GRANTS):
            rr = res + ("." + group if group else "")
            self.assertEqual(self.can_i(verb, rr), "yes", (verb, rr))
        for group, res, verb in sorted(ROLE_GRANTS):
            self.assertEqual(self.can_i(verb, res + "." + group, "-n", NS), "yes", (verb, res))
            self.assertEqual(self.can_i(verb, res + "." + group, "-n", "default"), "no",
                             (verb, res))
        for verb, rr in (("update", "persistentvolumes"), ("delete", "persistentvolumeclaims"),
                         ("create", "persistentvolumeclaims"), ("list", "secrets"),
                         ("create", "storageclasses.storage.k8s.io")):
            self.assertEqual(self.can_i(verb, rr), "no", (verb, rr))

    def can_i(self, verb, resource, *args):
        r = self.kubectl("auth", "can-i", verb, resource, "--as", SA_USER, *args, ok=False)
        return r.stdout.strip()

    def test_deployment_validates_with_kubectl_of_this_release(self):
        # A server-side dry run creates nothing, so the namespaced objects need the namespace
        # to exist already (the stand-in creates missing namespaces on first use).
        self.kubectl("create", "namespace", NS)
        r = self.kubectl("apply", "-k", MANIFESTS, "--dry-run=server", "--validate=strict")
        self.assertIn("deployment.apps/hostpath-provisioner", r.stdout)
        r = self.kubectl("apply", "-f", os.path.join(MANIFESTS, "daemonset.yaml"),
                         "--dry-run=server", "--validate=strict")
        self.assertIn("daemonset.apps/hostpath-provisioner-node", r.stdout)
        for f in ("test-claim.yaml", "test-pod.yaml"):
            self.kubectl("apply", "-f", os.path.join(MANIFESTS, f),
                         "--dry-run=server", "--validate=strict")


def claim_for(ns, name, cls, size="1Gi"):
    from harness import claim
    return claim(ns, name, cls, size=size)


if __name__ == "__main__":
    unittest.main(verbosity=2)
