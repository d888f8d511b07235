"""Certificates and kubeconfig: the CA, certificates signed by it (openssl CLI), and
kubeconfig files. The test harnesses use these too (client certificates, kubeconfigs).
"""

import os
import random
import subprocess


def _openssl(*args, cwd=None):
    r = subprocess.run(["openssl"] + list(args), cwd=cwd, capture_output=True, text=True,
                       timeout=60)
    if r.returncode != 0:
        raise RuntimeError("openssl %s failed: %s" % (args[0], r.stderr.strip()))


def _ecparam_args():
    return ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


def make_ca(state_dir):
    ca_crt = os.path.join(state_dir, "ca.crt")
    ca_key = os.path.join(state_dir, "ca.key")
    if os.path.exists(ca_crt) and os.path.exists(ca_key):
        return ca_crt, ca_key
    _openssl("req", "-x509", "-new", *_ecparam_args(), "-keyout", ca_key, "-out", ca_crt,
             "-days", "3650", "-subj", "/CN=hostpath-test-ca",
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign",
             "-addext", "subjectKeyIdentifier=hash")
    os.chmod(ca_key, 0o600)
    return ca_crt, ca_key


def sign_cert(state_dir, name, cn, usage, san=None, orgs=()):
    """Creates name.crt/name.key signed by the state dir's CA. Returns (crt, key)."""
    ca_crt, ca_key = make_ca(state_dir)
    crt = os.path.join(state_dir, name + ".crt")
    key = os.path.join(state_dir, name + ".key")
    csr = os.path.join(state_dir, name + ".csr")
    ext = os.path.join(state_dir, name + ".ext")
    subj = "".join("/O=%s" % o for o in orgs) + "/CN=%s" % cn
    _openssl("req", "-new", *_ecparam_args(), "-keyout", key, "-out", csr, "-subj", subj)
    lines = ["basicConstraints=critical,CA:FALSE",
             "keyUsage=critical,digitalSignature,keyEncipherment",
             "extendedKeyUsage=%s" % usage, "subjectKeyIdentifier=hash",
             "authorityKeyIdentifier=keyid"]
    if san:
        lines.append("subjectAltName=%s" % san)
    with open(ext, "w") as f:
        f.write("\n".join(lines) + "\n")
    _openssl("x509", "-req", "-in", csr, "-CA", ca_crt, "-CAkey", ca_key, "-set_serial",
             "0x%x" % random.getrandbits(63), "-days", "3650", "-out", crt, "-extfile", ext)
    os.chmod(key, 0o600)
    for p in (csr, ext):
        os.unlink(p)
    return crt, key


def write_kubeconfig(path, url, ca, token=None, cert=None, key=None, namespace="default"):
    user = []
    if token:
        user.append("    token: %s" % token)
    if cert:
        user.append("    client-certificate: %s" % cert)
        user.append("    client-key: %s" % key)
    text = "\n".join([
        "apiVersion: v1", "kind: Config", "clusters:", "- cluster:",
        "    certificate-authority: %s" % ca, "    server: %s" % url, "  name: local",
        "contexts:", "- context:", "    cluster: local", "    namespace: %s" % namespace,
        "    user: test-admin", "  name: local", "current-context: local",
        "preferences: {}", "users:", "- name: test-admin", "  user:"] + user) + "\n"
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)
