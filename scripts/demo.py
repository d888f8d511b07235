#!/usr/bin/env python3
"""The steps of the scripts/run.sh demo, against the project's local API server.

Python standard library only: no kubectl, no client library. For each step it prints the
kubectl command that does the same, so the reader can repeat it on a real cluster:

 1. create the StorageClass "hostpath" and the claim default/demo-claim;
 2. wait (bounded) until the claim is Bound;
 3. read the PersistentVolume, check its directory exists on disk, read /metrics;
 4. print a summary: the claim, the PV, the directory and the metrics URL.

    scripts/demo.py --state DIR --pv-dir DIR --provisioner-log FILE [--provisioner-pid PID]
                    [--timeout SECONDS]

DIR is the API server's --state-dir (it holds ready.json with the URL, token and CA). Exit 0
when the claim is Bound and its directory exists; 1 otherwise, with the provisioner's last log
lines and the claim's events; 130 on Ctrl-C.
"""

import argparse
import http.client
import json
import os
import re
import ssl
import stat
import sys
import time
import urllib.request

CLASS = "hostpath"
NS = "default"
CLAIM = "demo-claim"

STORAGE_CLASS = {
    "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
    "metadata": {"name": CLASS},
    "provisioner": "hostpath-provisioner.io",
    "reclaimPolicy": "Delete",
    "volumeBindingMode": "Immediate",
    "parameters": {"pathPattern": "{{.PVC.Namespace}}-{{.PVC.Name}}-{{.PVName}}",
                   "mode": "0777"},
}
PVC = {
    "apiVersion": "v1", "kind": "PersistentVolumeClaim",
    "metadata": {"name": CLAIM, "namespace": NS},
    "spec": {"storageClassName": CLASS, "accessModes": ["ReadWriteOnce"],
             "resources": {"requests": {"storage": "1Gi"}}},
}


class Api:
    """Just enough of a Kubernetes client: JSON over HTTPS with the demo server's CA and token."""

    def __init__(self, url, token, ca):
        m = re.match(r"https://([^:/]+):(\d+)$", url)
        if not m:
            raise ValueError("unexpected API server URL %r" % url)
        self.host, self.port = m.group(1), int(m.group(2))
        self.token = token
        self.ctx = ssl.create_default_context(cafile=ca)

    def call(self, method, path, body=None):
        """(status, decoded JSON body or None)."""
        conn = http.client.HTTPSConnection(self.host, self.port, context=self.ctx, timeout=10)
        try:
            headers = {"Authorization": "Bearer " + self.token, "Accept": "application/json",
                       "User-Agent": "hostpath-provisioner-demo"}
            data = None
            if body is not None:
                data = json.dumps(body).encode()
                headers["Content-Type"] = "application/json"
            conn.request(method, path, body=data, headers=headers)
            r = conn.getresponse()
            raw = r.read()
            try:
                return r.status, json.loads(raw) if raw else None
            except ValueError:
                return r.status, None
        finally:
            conn.close()

    def get(self, path):
        st, obj = self.call("GET", path)
        if st != 200:
            raise RuntimeError("GET %s: HTTP %d %s" % (path, st, (obj or {}).get("message", "")))
        return obj


def yaml_scalar(v):
    """A string plain when YAML reads it back as that string ("1Gi", "Delete"), else quoted
    ("0777", "{{...}}", "true")."""
    if isinstance(v, str) and re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9./-]*", v) and \
            not re.fullmatch(r"[0-9.eE+-]+", v) and \
            v.lower() not in ("true", "false", "yes", "no", "on", "off", "null", "y", "n"):
        return v
    return json.dumps(v)


def to_yaml(obj, indent=""):
    """Block-style YAML of nested dicts whose lists hold scalars only (enough for the demo)."""
    out = []
    for k, v in obj.items():
        if isinstance(v, dict):
            out.append("%s%s:" % (indent, k))
            out += to_yaml(v, indent + "  ")
        elif isinstance(v, list):
            out.append("%s%s: [%s]" % (indent, k, ", ".join(yaml_scalar(x) for x in v)))
        else:
            out.append("%s%s: %s" % (indent, k, yaml_scalar(v)))
    return out


def say(msg=""):
    print(msg, flush=True)


def kubectl(cmd):
    """Prints the kubectl command a reader would type for the next step."""
    say("\n$ kubectl " + cmd)


def create(api, path, obj, what):
    st, body = api.call("POST", path, obj)
    if st == 201:
        say("%s created" % what)
    elif st == 409:
        say("%s unchanged (it already exists)" % what)
    else:
        raise RuntimeError("creating %s: HTTP %d %s" % (what, st, (body or {}).get("message")))


def metrics_address(log_path, deadline):
    """host:port of the provisioner's /metrics, from its "listening" log line."""
    pat = re.compile(r"listening for /healthz /readyz /metrics address=(\S+)")
    while True:
        try:
            with open(log_path, errors="replace") as f:
                m = pat.search(f.read())
            if m:
                return m.group(1)
        except OSError:
            pass
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.1)


def scrape(addr, names):
    """The sample lines of /metrics whose metric name is in names ([] when unreachable)."""
    try:
        with urllib.request.urlopen("http://%s/metrics" % addr, timeout=5) as r:
            text = r.read().decode("utf-8", "replace")
    except OSError:
        return []
    return [line for line in text.splitlines()
            if not line.startswith("#") and re.split(r"[{ ]", line, 1)[0] in names]


def alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def tail(path, n=15):
    try:
        with open(path, errors="replace") as f:
            return f.read().splitlines()[-n:]
    except OSError:
        return []


def explain_failure(api, args, what):
    say("\ndemo: %s" % what)
    try:
        evs = api.get("/api/v1/namespaces/%s/events?fieldSelector=involvedObject.name%%3D%s"
                      % (NS, CLAIM))
        for e in evs.get("items", []):
            say("  event %s %s: %s" % (e.get("type"), e.get("reason"), e.get("message")))
    except (OSError, RuntimeError) as e:
        say("  (cannot read the claim's events: %s)" % e)
    say("demo: last lines of the provisioner's log (%s):" % args.provisioner_log)
    for line in tail(args.provisioner_log):
        say("  " + line)
    return 1


def run(args):
    with open(os.path.join(args.state, "ready.json")) as f:
        ready = json.load(f)
    api = Api(ready["url"], ready["token"], ready["ca"])
    deadline = time.monotonic() + args.timeout

    say("demo: each step below shows the kubectl command that does the same on a cluster; with "
        "kubectl installed you can run them here too:\n      export KUBECONFIG=%s"
        % ready["kubeconfig"])
    kubectl("apply -f - <<'EOF'\n%s\n---\n%s\nEOF" % ("\n".join(to_yaml(STORAGE_CLASS)),
                                                     "\n".join(to_yaml(PVC))))
    create(api, "/apis/storage.k8s.io/v1/storageclasses", STORAGE_CLASS,
           "storageclass.storage.k8s.io/" + CLASS)
    create(api, "/api/v1/namespaces/%s/persistentvolumeclaims" % NS, PVC,
           "persistentvolumeclaim/" + CLAIM)

    kubectl("get pvc %s --watch" % CLAIM)
    claim_path = "/api/v1/namespaces/%s/persistentvolumeclaims/%s" % (NS, CLAIM)
    shown = None
    while True:
        c = api.get(claim_path)
        phase = (c.get("status") or {}).get("phase", "Pending")
        volume = c["spec"].get("volumeName") or ""
        if (phase, volume) != shown:
            say("%-12s %-8s %s" % (CLAIM, phase, volume))
            shown = (phase, volume)
        if phase == "Bound" and volume:
            break
        if time.monotonic() >= deadline:
            return explain_failure(api, args, "the claim is still %s after %.0f s" %
                                   (phase, args.timeout))
        if args.provisioner_pid and not alive(args.provisioner_pid):
            return explain_failure(api, args, "the provisioner (pid %d) has exited" %
                                   args.provisioner_pid)
        time.sleep(0.1)

    pv = api.get("/api/v1/persistentvolumes/" + volume)
    path = pv["spec"]["hostPath"]["path"]
    kubectl("get pv %s -o jsonpath='{.spec.hostPath.path}'" % volume)
    say(path)
    say("\n$ ls -ld %s" % path)
    try:
        st = os.stat(path)
    except OSError as e:
        return explain_failure(api, args, "the volume's directory %s: %s" % (path, e.strerror))
    if not stat.S_ISDIR(st.st_mode):
        return explain_failure(api, args, "%s is not a directory" % path)
    say("%s %s" % (stat.filemode(st.st_mode), path))

    addr = metrics_address(args.provisioner_log, max(deadline, time.monotonic() + 2))
    url = "http://%s/metrics" % addr if addr else "(not found in %s)" % args.provisioner_log
    if addr:
        say("\n$ curl -s %s | grep -E '^(hostpath_build_info|controller_persistentvolumeclaim_"
            "provision_total)'" % url)
        for line in scrape(addr, ("hostpath_build_info",
                                  "controller_persistentvolumeclaim_provision_total")):
            say(line)

    cap = (c.get("status") or {}).get("capacity", {}).get("storage") or \
        pv["spec"].get("capacity", {}).get("storage", "?")
    rule = "=" * 78
    say("\n" + rule)
    say("demo: claim %s/%s is Bound" % (NS, CLAIM))
    say("  claim      %s/%s  Bound  volume %s  %s  class %s" % (NS, CLAIM, volume, cap, CLASS))
    say("  PV         %s  %s  reclaim %s" % (volume, (pv.get("status") or {}).get("phase", "?"),
                                              pv["spec"].get("persistentVolumeReclaimPolicy")))
    say("  directory  %s" % path)
    say("  metrics    %s" % url)
    say("  kubectl    KUBECONFIG=%s kubectl get pvc,pv" % ready["kubeconfig"])
    say("  log        %s" % args.provisioner_log)
    say("The provisioner keeps running: create more claims (kubectl, or curl with the token in "
        "the kubeconfig). Ctrl-C stops it and the demo API server and removes %s."
        % args.state)
    say(rule)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--state", required=True, help="the demo API server's --state-dir")
    ap.add_argument("--pv-dir", required=True, help="the provisioner's --pv-dir")
    ap.add_argument("--provisioner-log", required=True, help="the provisioner's stderr")
    ap.add_argument("--provisioner-pid", type=int, default=0,
                    help="stop waiting when this process has exited")
    ap.add_argument("--timeout", type=float, default=60.0,
                    help="seconds to wait for the claim to be bound")
    args = ap.parse_args()
    try:
        return run(args)
    except KeyboardInterrupt:
        return 130
    except (OSError, RuntimeError, ValueError, KeyError) as e:
        print("demo: %s" % e, file=sys.stderr, flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())
