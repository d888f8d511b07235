#!/usr/bin/env python3
"""Sends one script of requests - the ones the provisioner makes, and their error paths - to
the stand-in (tests/integration/apiserver.py) and to a real kube-apiserver, and prints where
the answers differ (status, Status reason/message, the fields the provisioner reads, headers).

    compare_standin.py --real-state DIR        # DIR: a running `cluster.py up`'s state dir
    compare_standin.py --bin-dir BIN           # starts its own control plane

Used to find the differences listed in tests/integration/README.md; test_real_fidelity.py
asserts the ones that matter to the provisioner stay equal.
"""

import argparse
import json
import os
import re
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "integration"))
sys.path.insert(0, HERE)
from harness import ApiServer, claim, storage_class, volume  # noqa: E402

SFX = os.urandom(3).hex()
NS = "cmp-" + SFX
CLS = "cmp-class-" + SFX
DRIVER = "cmp-%s.example.com" % SFX


def pv_body(name, claim_obj=None, cls=None):
    cls = cls or CLS
    name = name + "-" + SFX
    pv = volume(name, size="1Gi", path="/srv/x/" + name, cls=cls, reclaim="Delete",
                node="node-a", annotations={"pv.kubernetes.io/provisioned-by": "example.com/cmp",
                                            "hostPathProvisionerIdentity": "node-a"},
                host_path_type="DirectoryOrCreate")
    if claim_obj is not None:
        m = claim_obj["metadata"]
        pv["spec"]["claimRef"] = {"kind": "PersistentVolumeClaim", "apiVersion": "v1",
                                  "namespace": m["namespace"], "name": m["name"],
                                  "uid": m["uid"]}
    pv["spec"]["volumeMode"] = "Filesystem"
    return pv


def script(c):
    """Runs the request script on client c; yields (step, response summary)."""
    def call(step, method, path, body=None, ctype=None, query=None):
        r = c.request(method, path, body, query=query, content_type=ctype)
        return step, summarize(r)

    yield call("create namespace", "POST", "/api/v1/namespaces",
               {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    yield call("create class", "POST", "/apis/storage.k8s.io/v1/storageclasses",
               storage_class(CLS, "example.com/cmp"))
    r = c.request("POST", "/api/v1/namespaces/%s/persistentvolumeclaims" % NS,
                  claim(NS, "c1", CLS))
    yield "create claim", summarize(r)
    cl = r.body
    yield call("create PV", "POST", "/api/v1/persistentvolumes", pv_body("cmp-pv1", cl))
    yield call("create PV again", "POST", "/api/v1/persistentvolumes", pv_body("cmp-pv1", cl))
    yield call("get missing PV", "GET", "/api/v1/persistentvolumes/cmp-nope")
    yield call("delete missing PV", "DELETE", "/api/v1/persistentvolumes/cmp-nope")
    bad = pv_body("cmp-bad")
    bad["spec"]["hostPath"]["path"] = ""
    yield call("create invalid PV", "POST", "/api/v1/persistentvolumes", bad)
    unk = pv_body("cmp-unknown", cls="cmp-none")
    unk["spec"]["bogusField"] = 1
    yield call("create PV with unknown field", "POST", "/api/v1/persistentvolumes", unk)
    yield call("merge-patch PV finalizer", "PATCH", "/api/v1/persistentvolumes/cmp-pv1-" + SFX,
               {"metadata": {"finalizers": [
                   "kubernetes.io/pv-protection",
                   "external-provisioner.volume.kubernetes.io/finalizer"]}},
               "application/merge-patch+json")
    yield call("json-patch PV test op fails", "PATCH", "/api/v1/persistentvolumes/cmp-pv1-" + SFX,
               [{"op": "test", "path": "/metadata/resourceVersion", "value": "1"},
                {"op": "remove", "path": "/metadata/finalizers/1"}],
               "application/json-patch+json")
    yield call("patch claim annotation away", "PATCH",
               "/api/v1/namespaces/%s/persistentvolumeclaims/c1" % NS,
               {"metadata": {"annotations": {"volume.kubernetes.io/selected-node": None}}},
               "application/merge-patch+json")
    ev = {"apiVersion": "v1", "kind": "Event",
          "metadata": {"name": "c1.cmp1", "namespace": NS},
          "involvedObject": {"kind": "PersistentVolumeClaim", "apiVersion": "v1",
                             "namespace": NS, "name": "c1", "uid": cl["metadata"]["uid"]},
          "reason": "Provisioning", "message": "External provisioner is provisioning volume",
          "type": "Normal", "count": 1, "source": {"component": "example.com/cmp"},
          "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:00:00Z",
          "reportingComponent": "example.com/cmp", "reportingInstance": "node-a"}
    yield call("create event", "POST", "/api/v1/namespaces/%s/events" % NS, ev)
    yield call("patch event count", "PATCH", "/api/v1/namespaces/%s/events/c1.cmp1" % NS,
               {"count": 2, "lastTimestamp": "2026-01-01T00:00:05Z"},
               "application/strategic-merge-patch+json")
    ev2 = json.loads(json.dumps(ev))
    ev2["metadata"]["name"] = "c1.cmp2"
    ev2["involvedObject"]["namespace"] = "default"
    yield call("create event in wrong namespace", "POST",
               "/api/v1/namespaces/%s/events" % NS, ev2)
    ev3 = json.loads(json.dumps(ev))
    ev3["metadata"]["name"] = "c1.cmp3"
    ev3["type"] = "Bogus"
    yield call("create event with bad type", "POST", "/api/v1/namespaces/%s/events" % NS, ev3)
    ev4 = json.loads(json.dumps(ev))
    ev4["metadata"]["name"] = "c1.cmp4"
    ev4["message"] = "x" * 5000
    yield call("create event with a 5000-byte message", "POST",
               "/api/v1/namespaces/%s/events" % NS, ev4)
    yield call("patch missing event", "PATCH", "/api/v1/namespaces/%s/events/nope" % NS,
               {"count": 2}, "application/strategic-merge-patch+json")
    lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
             "metadata": {"name": "cmp-lease", "namespace": NS},
             "spec": {"holderIdentity": "a_1", "leaseDurationSeconds": 15,
                      "acquireTime": "2026-01-01T00:00:00.000000Z",
                      "renewTime": "2026-01-01T00:00:00.000000Z", "leaseTransitions": 0}}
    r = c.request("POST", "/apis/coordination.k8s.io/v1/namespaces/%s/leases" % NS, lease)
    yield "create lease", summarize(r)
    stale = json.loads(json.dumps(r.body))
    stale["metadata"]["resourceVersion"] = "1"
    yield call("update lease with stale resourceVersion", "PUT",
               "/apis/coordination.k8s.io/v1/namespaces/%s/leases/cmp-lease" % NS, stale)
    zero = json.loads(json.dumps(r.body))
    zero["spec"]["leaseDurationSeconds"] = 0
    yield call("update lease with duration 0", "PUT",
               "/apis/coordination.k8s.io/v1/namespaces/%s/leases/cmp-lease" % NS, zero)
    yield call("list PVs limit 1", "GET", "/api/v1/persistentvolumes",
               query={"limit": "1"})
    yield call("list claims all namespaces rv=0", "GET", "/api/v1/persistentvolumeclaims",
               query={"resourceVersion": "0"})
    yield call("list with bad field selector", "GET", "/api/v1/persistentvolumes",
               query={"fieldSelector": "spec.bogus=x"})
    yield call("watch with ancient resourceVersion", "GET", "/api/v1/persistentvolumes",
               query={"watch": "1", "resourceVersion": "1", "timeoutSeconds": "1"})
    yield call("delete claim", "DELETE", "/api/v1/namespaces/%s/persistentvolumeclaims/c1" % NS)
    yield call("delete PV with finalizers", "DELETE", "/api/v1/persistentvolumes/cmp-pv1-" + SFX)
    yield call("delete PV with stale precondition", "DELETE",
               "/api/v1/persistentvolumes/cmp-pv1-" + SFX,
               {"preconditions": {"resourceVersion": "1"}})
    yield call("delete event", "DELETE", "/api/v1/namespaces/%s/events/c1.cmp1" % NS)
    yield call("server-side apply", "PATCH", "/api/v1/namespaces/%s/configmaps/x" % NS,
               {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}},
               "application/apply-patch+yaml", query={"fieldManager": "cmp"})
    # Capacity-aware scheduling (ctl_capacity.c): the CSIDriver and CSIStorageCapacity calls.
    drv = {"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver",
           "metadata": {"name": DRIVER},
           "spec": {"attachRequired": False, "podInfoOnMount": False, "storageCapacity": False,
                    "volumeLifecycleModes": ["Persistent"]}}
    r = c.request("POST", "/apis/storage.k8s.io/v1/csidrivers", drv)
    yield "create CSIDriver", summarize(r)
    made = r.body
    yield call("get missing CSIDriver", "GET", "/apis/storage.k8s.io/v1/csidrivers/cmp-nope.io")
    bad = json.loads(json.dumps(drv))
    bad["metadata"]["name"] = "example.com/cmp"
    yield call("create CSIDriver with a slash", "POST", "/apis/storage.k8s.io/v1/csidrivers", bad)
    bad = json.loads(json.dumps(drv))
    bad["metadata"]["name"] = "cmp2-" + DRIVER
    bad["spec"]["volumeLifecycleModes"] = ["Sometimes"]
    yield call("create CSIDriver with a bad mode", "POST", "/apis/storage.k8s.io/v1/csidrivers",
               bad)
    yield call("create CSIDriver in a namespace", "POST",
               "/apis/storage.k8s.io/v1/namespaces/%s/csidrivers" % NS, drv)
    if isinstance(made, dict) and made.get("spec"):
        up = json.loads(json.dumps(made))
        up["spec"]["storageCapacity"] = True
        r = c.request("PUT", "/apis/storage.k8s.io/v1/csidrivers/" + DRIVER, up)
        yield "update CSIDriver storageCapacity", summarize(r)
        up = r.body if r.status == 200 else up
        up = json.loads(json.dumps(up))
        up["spec"]["attachRequired"] = True
        up["spec"]["volumeLifecycleModes"] = ["Persistent", "Ephemeral"]
        yield call("update CSIDriver immutable fields", "PUT",
                   "/apis/storage.k8s.io/v1/csidrivers/" + DRIVER, up)
    csc_path = "/apis/storage.k8s.io/v1/namespaces/%s/csistoragecapacities" % NS
    csc = {"apiVersion": "storage.k8s.io/v1", "kind": "CSIStorageCapacity",
           "metadata": {"name": "node-a-" + CLS, "namespace": NS,
                        "labels": {"csi.storage.k8s.io/drivername": DRIVER,
                                   "csi.storage.k8s.io/managed-by": "hostpath-provisioner-node-a"}},
           "storageClassName": CLS,
           "nodeTopology": {"matchLabels": {"kubernetes.io/hostname": "node-a"}},
           "capacity": "3221225472", "maximumVolumeSize": "1073741824"}
    yield call("create CSIStorageCapacity", "POST", csc_path, csc)
    yield call("create CSIStorageCapacity again", "POST", csc_path, csc)
    bad = json.loads(json.dumps(csc))
    bad["metadata"]["name"] = "bad1"
    del bad["storageClassName"]
    bad["capacity"] = "-1"
    yield call("create CSIStorageCapacity without a class", "POST", csc_path, bad)
    bad = json.loads(json.dumps(csc))
    bad["metadata"]["name"] = "bad2"
    bad["nodeTopology"] = {"matchLabels": {"kubernetes.io/hostname": "-x-"},
                           "matchExpressions": [{"key": "a", "operator": "In"}]}
    yield call("create CSIStorageCapacity with a bad topology", "POST", csc_path, bad)
    yield call("create CSIStorageCapacity cluster-wide", "POST",
               "/apis/storage.k8s.io/v1/csistoragecapacities", csc)
    yield call("merge-patch CSIStorageCapacity", "PATCH", csc_path + "/node-a-" + CLS,
               {"capacity": "2147483648", "maximumVolumeSize": "1Gi"},
               "application/merge-patch+json")
    yield call("merge-patch CSIStorageCapacity class", "PATCH", csc_path + "/node-a-" + CLS,
               {"storageClassName": "other"}, "application/merge-patch+json")
    yield call("list CSIStorageCapacities by label", "GET", csc_path,
               query={"labelSelector": "csi.storage.k8s.io/drivername=%s,"
                      "csi.storage.k8s.io/managed-by=hostpath-provisioner-node-a" % DRIVER})
    yield call("delete CSIStorageCapacity", "DELETE", csc_path + "/node-a-" + CLS)
    yield call("delete missing CSIStorageCapacity", "DELETE", csc_path + "/node-a-" + CLS)
    yield call("delete CSIDriver", "DELETE", "/apis/storage.k8s.io/v1/csidrivers/" + DRIVER)


KEEP_META = ("finalizers", "annotations", "labels")


def summarize(r):
    out = {"status": r.status}
    b = r.body
    h = {k.lower(): v for k, v in r.headers.items()}
    if "warning" in h:
        out["warning"] = h["warning"]
    out["content-type"] = h.get("content-type")
    if isinstance(b, dict):
        if b.get("kind") == "Status":
            out["Status"] = {k: b.get(k) for k in ("status", "reason", "message", "code")}
            if b.get("details"):
                out["Status"]["details"] = {k: v for k, v in b["details"].items()
                                            if k != "uid"}
        else:
            out["kind"] = b.get("kind")
            md = b.get("metadata") or {}
            out["meta"] = {k: md.get(k) for k in KEEP_META if md.get(k) is not None}
            out["meta"]["has_deletionTimestamp"] = bool(md.get("deletionTimestamp"))
            if "continue" in md or "remainingItemCount" in md:
                out["meta"]["continue?"] = bool(md.get("continue"))
                out["meta"]["remainingItemCount"] = md.get("remainingItemCount")
            if "spec" in b:
                out["spec"] = b["spec"]
            if "status" in b:
                out["statusField"] = b["status"]
            for k in ("count", "type", "reason", "message"):
                if k in b:
                    out[k] = b[k] if k != "message" else len(b[k])
            for k in ("storageClassName", "nodeTopology", "capacity", "maximumVolumeSize"):
                if k in b:
                    out[k] = b[k]
            if isinstance(b.get("items"), list) and b.get("kind") == "CSIStorageCapacityList":
                out["items"] = [summarize_item(i) for i in b["items"]]
    elif isinstance(b, str) and b:
        lines = b.strip().splitlines()
        out["text"] = [ln[:300] for ln in lines[:3]]
    return out


def summarize_item(i):
    return {k: i.get(k) for k in ("storageClassName", "nodeTopology", "capacity",
                                  "maximumVolumeSize")} | {"name": i["metadata"]["name"]}


def scrub(v):
    """Drops values that differ by nature (uids, times, resource versions, names of the
    generated objects)."""
    if isinstance(v, str):
        return re.sub(r"in record \(\d+\)", "in record (N)", v)
    if isinstance(v, dict):
        return {k: scrub(x) for k, x in v.items()
                if k not in ("uid", "resourceVersion", "creationTimestamp",
                             "lastPhaseTransitionTime", "managedFields")}
    if isinstance(v, list):
        return [scrub(x) for x in v]
    return v


def diff(a, b, path=""):
    out = []
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a:
                out.append("%s.%s: stand-in -, real %s" % (path, k, json.dumps(b[k])[:400]))
            elif k not in b:
                out.append("%s.%s: stand-in %s, real -" % (path, k, json.dumps(a[k])[:400]))
            else:
                out += diff(a[k], b[k], path + "." + k)
    elif a != b:
        out.append("%s: stand-in %s, real %s" % (path, json.dumps(a)[:400],
                                                 json.dumps(b)[:400]))
    return out


# Steps where the stand-in is known to answer differently (tests/integration/README.md,
# "What the real server does that this one does not"), with the fields that differ.
KNOWN = {
    "json-patch PV test op fails": {".Status.message"},
    "patch claim annotation away": {".statusField.conditions"},   # PVC Unused condition
    "delete claim": {".statusField.conditions"},
    "watch with ancient resourceVersion": {".kind", ".meta", ".text", ".type"},
    "server-side apply": {".Status", ".kind", ".meta", ".status"},
}


def compare(real, tmp):
    """Runs the script on a fresh stand-in and on `real` (a harness.Client); returns
    [(step, [difference lines])] for the steps that differ, and cleans up on `real`."""
    out = []
    try:
        with ApiServer(tmp, binder=True, protection=True, require_namespaces=True) as standin:
            for (step, s), (_, r) in zip(script(standin.client), script(real)):
                d = diff(scrub(s), scrub(r))
                if d:
                    out.append((step, d))
                time.sleep(0.05)
    finally:
        real.request("DELETE", "/api/v1/namespaces/" + NS)
        real.request("DELETE", "/apis/storage.k8s.io/v1/storageclasses/" + CLS)
        real.request("DELETE", "/apis/storage.k8s.io/v1/csidrivers/" + DRIVER)
        for pv in ("cmp-pv1", "cmp-unknown"):
            path = "/api/v1/persistentvolumes/%s-%s" % (pv, SFX)
            real.request("DELETE", path)
            real.request("PATCH", path, {"metadata": {"finalizers": None}},
                         content_type="application/merge-patch+json")
    return out


def unexpected(diffs):
    """The differences not in KNOWN (a list of lines)."""
    bad = []
    for step, lines in diffs:
        for line in lines:
            field = line.split(":", 1)[0]
            top = "." + field.split(".")[1] if field.count(".") >= 1 else field
            if top not in KNOWN.get(step, ()) and field not in KNOWN.get(step, ()):
                bad.append("%s: %s" % (step, line))
    return bad


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--real-state")
    ap.add_argument("--bin-dir")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="hp-cmp-") as tmp:
        cluster = None
        if a.real_state:
            from realharness import SharedCluster
            real = SharedCluster(a.real_state).client
        else:
            from cluster import Cluster
            cluster = Cluster(a.bin_dir, os.path.join(tmp, "real")).start()
            real = cluster.client
        try:
            diffs = compare(real, tmp)
        finally:
            if cluster:
                cluster.stop()
    for step, lines in diffs:
        print("== %s%s" % (step, "" if step in KNOWN else "  (not known)"))
        for line in lines:
            print("   " + line)
    print("%d steps differ, %d differences not known" % (len(diffs), len(unexpected(diffs))))


if __name__ == "__main__":
    main()
