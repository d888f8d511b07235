#!/usr/bin/env python3
"""In-cluster credentials against the real authenticator: the provisioner runs without a
kubeconfig, as a pod would (KUBERNETES_SERVICE_HOST/PORT and a kubelet-style projected
service-account directory), with a bound ServiceAccount token from the TokenRequest API. The
token is rotated the way the kubelet does (a new ..data directory swapped in), and the old
one is revoked by deleting the Secret it is bound to: kube-apiserver then answers 401 to it,
and the provisioner must pick up the new token and carry on.
"""

import os
import sys
import unittest
from urllib.parse import urlsplit

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from realharness import (LEASE_PATH, PV_PATH, PVC_PATH, Client, Provisioner,  # noqa: E402
                         RealClusterTestCase, require_cluster)
from test_incluster import ServiceAccountDir  # noqa: E402

SA = "provisioner"


def setUpModule():
    require_cluster()


class InClusterProvisioner(Provisioner):
    """The harness's Provisioner without --kubeconfig (in-cluster credentials)."""

    def command(self):
        cmd = super().command()
        i = cmd.index("--kubeconfig")
        return cmd[:i] + cmd[i + 2:]


class InClusterTest(RealClusterTestCase):
    def bound_token(self, secret):
        """A token for ServiceAccount ns/provisioner bound to Secret `secret` (deleting the
        Secret revokes it)."""
        s = self.api.create("/api/v1/namespaces/%s/secrets" % self.ns, {
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": secret}})
        tr = self.api.create("/api/v1/namespaces/%s/serviceaccounts/%s/token" % (self.ns, SA), {
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"expirationSeconds": 3600, "boundObjectRef": {
                "kind": "Secret", "apiVersion": "v1", "name": secret,
                "uid": s["metadata"]["uid"]}}})
        return tr["status"]["token"]

    def test_service_account_token_rotation(self):
        self.api.create("/api/v1/namespaces/%s/serviceaccounts" % self.ns, {
            "apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": SA}})
        crb = "hp-test-%s" % self.ns
        self.api.create("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": crb},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": "cluster-admin"},
            "subjects": [{"kind": "ServiceAccount", "name": SA, "namespace": self.ns}]})
        self.addCleanup(self._delete_quietly,
                        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/" + crb)
        sa_dir = ServiceAccountDir(os.path.join(self.tmp, "sa"))
        token_a = self.bound_token("token-a")
        sa_dir.write(token_a, self.cluster.ca, self.ns)
        u = urlsplit(self.cluster.url)
        env = {"KUBERNETES_SERVICE_HOST": u.hostname, "KUBERNETES_SERVICE_PORT": str(u.port),
               "HOSTPATH_SERVICEACCOUNT_DIR": sa_dir.path}
        self.add_class()
        p = InClusterProvisioner(self.cluster, self.pv_dir,
                                 "--provisioner-name", self.prov_name, *self.fast,
                                 "--leader-elect", env=env, name="incluster")
        p.start()
        self.procs.append(p)
        self.addCleanup(self._stop, p)
        p.wait_log(r"became leader", 30)
        # The Lease lives in the service account's namespace.
        self.assertTrue(self.api.exists(LEASE_PATH % (self.ns, self.prov_name.replace("/", "-"))))
        c1 = self.add_claim("before")
        self.wait_bound("before")

        # Rotate as the kubelet does, then revoke the old token: the real authenticator
        # refuses it from now on.
        old = Client(self.cluster.url, token=token_a, ca=self.cluster.ca)
        self.addCleanup(old.close)
        sa_dir.write(self.bound_token("token-b"), self.cluster.ca, self.ns)
        self.api.delete("/api/v1/namespaces/%s/secrets/token-a" % self.ns)
        # kube-apiserver caches a token's successful authentication for 10 s.
        self.wait(lambda: old.request("GET", "/api/v1/namespaces/%s/persistentvolumeclaims"
                                      % self.ns, timeout=5).status == 401, 30,
                  "the revoked token refused")
        c2 = self.add_claim("after")
        self.wait_bound("after", timeout=90)
        self.api.delete(PVC_PATH % (self.ns, "before"))
        self.wait_gone(PV_PATH % ("pvc-" + c1["metadata"]["uid"]))
        self.assertTrue(self.api.exists(PV_PATH % ("pvc-" + c2["metadata"]["uid"])))
        # The first request with the revoked token got 401 and was repeated with the new one.
        self.assertRegex(p.log, r"token changed after 401, retrying")
        self.assertNotRegex(p.log, r"eyJ[A-Za-z0-9_-]{20}", "a token in the log")


if __name__ == "__main__":
    unittest.main(verbosity=2)
