#!/usr/bin/env python3
"""In-cluster credentials (issue 4).

With no --kubeconfig and no KUBECONFIG, and KUBERNETES_SERVICE_HOST set, the provisioner uses
the pod's service account: token, ca.crt and namespace from $HOSTPATH_SERVICEACCOUNT_DIR (laid
out like kubelet's projected volume: files behind a "..data" symlink that is swapped
atomically), and https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT. It wins over a
~/.kube/config. A rotated token is picked up (re-read on 401). With --leader-elect and neither
--leader-elect-namespace nor POD_NAMESPACE, the Lease lives in the service account's
namespace. A CA that did not sign the server's certificate is refused.

The harness's Provisioner always passes --kubeconfig, so the binary is run here directly
(stopped by pid, every wait bounded).
"""

import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (LEASE_PATH, PVS_PATH, Provisioner, ProvisionerTestCase,  # noqa: E402
                     wait_for)

NS = "default"
SA_NS = "hp-system"
LEASE = "hostpath-provisioner.io"
SHORT_LE = ["--leader-elect", "--leader-elect-lease-duration", "3s",
            "--leader-elect-renew-deadline", "2s", "--leader-elect-retry-period", "500ms"]


class ServiceAccountDir:
    """A service-account volume as kubelet projects it: DIR/{token,ca.crt,namespace} are
    symlinks to ..data/<file>, ..data a symlink to a timestamped directory; an update writes a
    new directory and renames a new ..data symlink over the old one."""

    def __init__(self, path):
        self.path = path
        self.n = 0
        os.makedirs(path)

    def write(self, token, ca_file, namespace):
        self.n += 1
        ts = "..2026_01_01_00_00_%02d.%d" % (self.n, os.getpid())
        d = os.path.join(self.path, ts)
        os.makedirs(d)
        with open(os.path.join(d, "token"), "w") as f:
            f.write(token + "\n")
        if ca_file:
            shutil.copyfile(ca_file, os.path.join(d, "ca.crt"))
        with open(os.path.join(d, "namespace"), "w") as f:
            f.write(namespace)
        tmp = os.path.join(self.path, "..data_tmp")
        os.symlink(ts, tmp)
        os.rename(tmp, os.path.join(self.path, "..data"))
        for f in ("token", "ca.crt", "namespace"):
            link = os.path.join(self.path, f)
            if not os.path.islink(link):
                os.symlink(os.path.join("..data", f), link)


class Proc(Provisioner):
    """The provisioner binary with exactly the given environment and without --kubeconfig:
    BINARY --pv-dir D --metrics-address 127.0.0.1:0 ARGS..."""

    def command(self):
        return [self.binary, "--pv-dir", self.pv_dir, "--metrics-address",
                self.metrics_address] + self.args

    def environment(self):
        return dict(self.env)

    def wait_exit(self, timeout):
        try:
            self.returncode = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
            raise AssertionError("%s did not exit within %.0fs" % (self.name, timeout))
        return self.returncode

    def stop(self, timeout=10.0):
        if self.proc is None:
            return self.returncode
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.wait_exit(timeout)


def get_url(url, timeout=5):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


class InClusterTest(ProvisionerTestCase):
    tmp_prefix = "hp-incluster-"

    def setUp(self):
        super().setUp()
        self.admin = self.api.token
        self.add_class()
        self.sa = ServiceAccountDir(os.path.join(self.tmp, "serviceaccount"))
        # A home whose kubeconfig points nowhere: in-cluster credentials must win over it.
        self.home = os.path.join(self.tmp, "home")
        os.makedirs(os.path.join(self.home, ".kube"))
        self.api.write_kubeconfig(os.path.join(self.home, ".kube", "config"),
                                  token="decoy-" + secrets.token_hex(8),
                                  url="https://127.0.0.1:1")

    def env(self, **extra):
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": self.home,
               "KUBERNETES_SERVICE_HOST": "127.0.0.1",
               "KUBERNETES_SERVICE_PORT": str(self.api.port),
               "HOSTPATH_SERVICEACCOUNT_DIR": self.sa.path}
        for k, v in os.environ.items():  # sanitizer settings of the ASan build
            if k.endswith("SAN_OPTIONS") or k.endswith("SAN_SYMBOLIZER_PATH"):
                env[k] = v
        env.update(extra)
        return env

    def start(self, name, *args, env=None):
        return self.spawn(*args, name=name, cls=Proc, env=env or self.env())

    # -- tests ---------------------------------------------------------------------------

    def test_service_account_credentials_rotation_and_lease_namespace(self):
        t1, t2 = "sa1-" + secrets.token_hex(24), "sa2-" + secrets.token_hex(24)
        self.sa.write(t1, self.api.ca, SA_NS)
        self.api.set_tokens([self.admin, t1])
        p = self.start("incluster", "--identity", "pod-1", *SHORT_LE)
        m = p.wait_log(r"api=(\S+) credentials=(\S+)")
        self.assertEqual(m.groups(), ("https://127.0.0.1:%d" % self.api.port, "in-cluster"))

        # The Lease goes to the service account's namespace (no flag, no POD_NAMESPACE).
        lease = wait_for(lambda: self.api.get(LEASE_PATH % (SA_NS, LEASE)), 10,
                         what="Lease in %s" % SA_NS)
        self.assertRegex(lease["spec"]["holderIdentity"], r"^pod-1_[0-9a-f]+$")
        self.assertFalse(self.api.exists(LEASE_PATH % (NS, LEASE)))
        p.wait_log(r"became leader", 10)

        self.add_claim("c1")
        self.wait_bound("c1")
        status, body = get_url(p.metrics_url() + "/readyz")
        self.assertEqual(status, 200, body)

        # Rotation: kubelet swaps the files, the API server accepts only the new token.
        self.sa.write(t2, self.api.ca, SA_NS)
        self.api.set_tokens([self.admin, t2])
        rotated = time.time()
        # Several claims at once: many requests are in flight with the old token when the
        # first 401 comes back, and each of them must be repeated with the new token.
        after = ["c%d" % i for i in range(2, 8)]
        for n in after:
            self.add_claim(n)
        for n in after:
            self.wait_bound(n)
        p.wait_log(r"token changed after 401", 5)
        # Leadership survived the rotation: the lease keeps being renewed by pod-1.
        r0 = self.api.get(LEASE_PATH % (SA_NS, LEASE))["spec"]["renewTime"]
        wait_for(lambda: self.api.get(LEASE_PATH % (SA_NS, LEASE))["spec"]["renewTime"] != r0,
                 5, what="lease renewed with the new token")
        self.assertEqual(self.api.get(LEASE_PATH % (SA_NS, LEASE))["spec"]["holderIdentity"],
                         lease["spec"]["holderIdentity"])
        self.assertNotIn("stepping down", p.log)
        # After the switch the old token is not used again: no 401 a second after it.
        time.sleep(1.0)
        late401 = [r for r in self.api.requests() if r["status"] == 401 and
                   r["time"] > rotated + 1.0]
        self.assertEqual(late401, [])

        # Each claim exactly one PV, in the pv-dir.
        pvs = self.api.list(PVS_PATH)["items"]
        self.assertEqual(sorted(pv["spec"]["claimRef"]["name"] for pv in pvs), ["c1"] + after)
        for pv in pvs:
            self.assertTrue(pv["spec"]["hostPath"]["path"].startswith(p.pv_dir + "/"))
            self.assertEqual(pv["metadata"]["annotations"]["hostPathProvisionerIdentity"],
                             "pod-1")

        self.assertEqual(p.stop(10), 0)
        self.assertEqual((self.api.get(LEASE_PATH % (SA_NS, LEASE))["spec"]
                          .get("holderIdentity") or ""), "")
        for secret in (t1, t2, t1[:16], t2[:16]):
            self.assertNotIn(secret, p.log)

    def test_lease_namespace_precedence(self):
        tok = "sa-" + secrets.token_hex(24)
        self.sa.write(tok, self.api.ca, SA_NS)
        self.api.set_tokens([self.admin, tok])
        cases = [("pod-ns", [], {"POD_NAMESPACE": "from-env"}, "from-env"),
                 ("flag-ns", ["--leader-elect-namespace", "from-flag"],
                  {"POD_NAMESPACE": "from-env"}, "from-flag")]
        for name, args, extra, want in cases:
            p = self.start(name, *(SHORT_LE + args), env=self.env(**extra))
            lease = wait_for(lambda: self.api.get(LEASE_PATH % (want, LEASE)), 10,
                             what="Lease in %s" % want)
            self.assertTrue(lease["spec"]["holderIdentity"])
            self.assertFalse(self.api.exists(LEASE_PATH % (SA_NS, LEASE)))
            self.assertEqual(p.stop(10), 0)
            self.api.delete(LEASE_PATH % (want, LEASE))

    def test_ca_that_did_not_sign_the_server_is_refused(self):
        openssl = shutil.which("openssl")
        if not openssl:
            self.skipTest("openssl not installed")
        other = os.path.join(self.tmp, "other")
        os.makedirs(other)
        r = subprocess.run([openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt",
                            "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1",
                            "-subj", "/CN=not-the-cluster-ca", "-keyout",
                            os.path.join(other, "key.pem"), "-out",
                            os.path.join(other, "ca.crt")], capture_output=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        tok = "sa-" + secrets.token_hex(24)
        self.sa.write(tok, os.path.join(other, "ca.crt"), SA_NS)
        self.api.set_tokens([self.admin, tok])
        self.add_claim("c1")
        self.api.clear_requests()
        p = self.start("wrong-ca")
        p.wait_log(r"(?i)certificate|ssl|tls", 10)
        url = p.metrics_url()
        time.sleep(1.5)
        self.assertTrue(p.alive(), "it keeps retrying rather than exiting")
        status, body = get_url(url + "/readyz")
        self.assertEqual(status, 503, body)
        self.assertEqual(self.api.requests(), [], "a request got through with a bad CA")
        self.assertEqual(self.api.list(PVS_PATH)["items"], [])
        self.assertNotIn(tok, p.log)
        self.assertEqual(p.stop(10), 0)

    def test_service_host_without_token_file_is_a_clear_error(self):
        # KUBERNETES_SERVICE_HOST set but no service account mounted, and no kubeconfig at all.
        shutil.rmtree(os.path.join(self.home, ".kube"))
        p = self.start("no-token")
        self.assertEqual(p.wait_exit(10), 2)
        self.assertIn(os.path.join(self.sa.path, "token"), p.log)
        self.assertRegex(p.log, r"(?i)kubeconfig")


if __name__ == "__main__":
    unittest.main(verbosity=2)
