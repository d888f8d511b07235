"""helm for the chart's tests (charts/hostpath-provisioner), and the chart itself.

The helm binary is the one tests/realcluster/build-helm.sh builds from the Go module proxy:
$HP_HELM, else <build dir>/realcluster/helm-<version>/helm next to $HP_BINARY, else
build/realcluster/helm-<version>/helm of the source tree. local-path-provisioner's own chart
lies next to it (build-helm.sh copies it out of its Go module).

helm runs with homes of its own in a temporary directory (no repository, no plugin, no
registry login: nothing of the user's), and HTTP(S)_PROXY pointing at a closed loopback port:
anything it tried to fetch from outside would fail instead of reaching out. Requests to the
API server on 127.0.0.1 are never proxied.
"""

import os
import re
import subprocess

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("HP_SOURCE_ROOT") or os.path.dirname(os.path.dirname(HERE))
CHART = os.path.join(SRC, "charts", "hostpath-provisioner")
REALCLUSTER = os.path.join(SRC, "tests", "realcluster")


def _read(path):
    with open(path) as f:
        return f.read()


def helm_version():
    m = re.search(r"^\s*helm\.sh/helm/v4 (v\S+)", _read(os.path.join(REALCLUSTER, "helm",
                                                                      "go.mod")), re.M)
    return m.group(1)


def lpp_version():
    m = re.search(r"^lpp_version=(\S+)$", _read(os.path.join(REALCLUSTER, "build-helm.sh")),
                  re.M)
    return m.group(1)


def helm_binary():
    """The pinned helm's path, or None when it is not built."""
    if os.environ.get("HP_HELM"):
        return os.environ["HP_HELM"]
    rel = os.path.join("realcluster", "helm-" + helm_version(), "helm")
    candidates = []
    if os.environ.get("HP_BINARY"):
        candidates.append(os.path.join(os.path.dirname(os.environ["HP_BINARY"]), rel))
    candidates.append(os.path.join(SRC, "build", rel))
    for c in candidates:
        if os.access(c, os.X_OK):
            return c
    return None


def missing_reason():
    return ("helm %s is not built: run tests/realcluster/build-helm.sh build/realcluster "
            "(scripts/test.sh does; it needs Go at /usr/local/go)" % helm_version())


def lpp_chart(binary):
    """local-path-provisioner's chart, next to the helm binary."""
    return os.path.join(os.path.dirname(binary), "local-path-provisioner-" + lpp_version())


class Helm:
    """helm with isolated homes under tmp; kubeconfig for the commands that reach a cluster
    (none: helm template and lint never contact one)."""

    def __init__(self, binary, tmp, kubeconfig=None):
        self.binary = binary
        self.tmp = tmp
        home = os.path.join(tmp, "helm-home")
        os.makedirs(home, exist_ok=True)
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("HELM_") and k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
        closed = "http://127.0.0.1:9"  # discard port: nothing listens
        env.update(HOME=home, HELM_CONFIG_HOME=os.path.join(home, "config"),
                   HELM_CACHE_HOME=os.path.join(home, "cache"),
                   HELM_DATA_HOME=os.path.join(home, "data"),
                   HTTP_PROXY=closed, HTTPS_PROXY=closed, http_proxy=closed,
                   https_proxy=closed, NO_PROXY="", no_proxy="",
                   KUBECONFIG=kubeconfig or os.path.join(home, "no-cluster.conf"))
        self.env = env
        self._n = 0

    def run(self, *args, ok=True, timeout=120):
        r = subprocess.run([self.binary] + list(args), capture_output=True, text=True,
                           env=self.env, timeout=timeout)
        if ok and r.returncode != 0:
            raise AssertionError("helm %s failed (%d):\n%s%s" % (" ".join(args), r.returncode,
                                                                 r.stdout, r.stderr))
        return r

    def values_file(self, values):
        """values (a dict) written to a file of its own; returns its path."""
        self._n += 1
        path = os.path.join(self.tmp, "values-%d.yaml" % self._n)
        with open(path, "w") as f:
            yaml.safe_dump(values, f, default_flow_style=False)
        return path

    def value_args(self, values=None, sets=()):
        args = []
        if values is not None:
            args += ["-f", self.values_file(values)]
        for s in sets:
            args += ["--set", s]
        return args

    def template(self, values=None, *sets, release="hostpath-provisioner",
                 namespace="hostpath-provisioner", chart=CHART, extra=()):
        """The objects `helm template` renders, in its order; fails on an error."""
        r = self.run("template", release, chart, "--namespace", namespace,
                     *(self.value_args(values, sets) + list(extra)))
        return [d for d in yaml.safe_load_all(r.stdout) if d]

    def template_error(self, values=None, *sets, extra=()):
        """helm template that must fail: its stderr."""
        r = self.run("template", "hostpath-provisioner", CHART,
                     *(self.value_args(values, sets) + list(extra)), ok=False)
        if r.returncode == 0:
            raise AssertionError("helm template succeeded with %r %r:\n%s" % (
                values, sets, r.stdout[-3000:]))
        return r.stderr


def key(obj):
    """(kind, namespace, name) of an object."""
    md = obj["metadata"]
    return (obj["kind"], md.get("namespace", ""), md["name"])


def by_key(objs):
    out = {}
    for o in objs:
        k = key(o)
        assert k not in out, "two objects %s" % (k,)
        out[k] = o
    return out


def load_yaml_files(*paths):
    objs = []
    for p in paths:
        with open(p) as f:
            objs += [d for d in yaml.safe_load_all(f) if d]
    return objs


def workload(objs):
    ws = [o for o in objs if o["kind"] in ("Deployment", "DaemonSet")]
    assert len(ws) == 1, [key(o) for o in ws]
    return ws[0]


def container(w):
    cs = w["spec"]["template"]["spec"]["containers"]
    assert len(cs) == 1, cs
    return cs[0]


def args_of(w):
    """The container args as {flag: value or None} (each flag once)."""
    out = {}
    for a in container(w)["args"]:
        assert a.startswith("--"), a
        name, eq, val = a[2:].partition("=")
        assert name not in out, "--%s twice" % name
        out[name] = val if eq else None
    return out
