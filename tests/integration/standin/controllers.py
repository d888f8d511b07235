"""The controller thread: PV binder, pvc/pv protection, garbage-collector finalizers,
namespace controller (what kube-controller-manager does for the objects the tests use).
"""

import threading
import time
import traceback

from .common import clone, log, now_time
from .errors import ApiError
from .kinds import BY_RES, KIND_LIST
from .kinds.base import ANN_BETA_CLASS, claim_class, pv_class
from .quantity import quantity_value
from .selectors import label_selector_from_struct, labels_match


# ---------------------------------------------------------------------------------------
# Controllers: PV binder, pvc/pv protection, garbage-collector finalizers, namespaces
# ---------------------------------------------------------------------------------------

PV_PROT = "kubernetes.io/pv-protection"
PVC_PROT = "kubernetes.io/pvc-protection"
ANN_BIND_COMPLETED = "pv.kubernetes.io/bind-completed"
ANN_BOUND_BY_CONTROLLER = "pv.kubernetes.io/bound-by-controller"
ANN_PROVISIONER = "volume.kubernetes.io/storage-provisioner"
ANN_BETA_PROVISIONER = "volume.beta.kubernetes.io/storage-provisioner"
ANN_SELECTED_NODE = "volume.kubernetes.io/selected-node"
ANN_PROVISIONED_BY = "pv.kubernetes.io/provisioned-by"
CTRL = "kube-controller-manager"


def _pods_claims(pod):
    if not pod:
        return []
    ns = pod["metadata"].get("namespace", "")
    out = []
    for v in (pod.get("spec") or {}).get("volumes") or []:
        c = (v.get("persistentVolumeClaim") or {}).get("claimName")
        if c:
            out.append("%s/%s" % (ns, c))
    return out


class Controllers(threading.Thread):
    def __init__(self, reg):
        super().__init__(daemon=True, name="controllers")
        self.reg = reg
        self.store = reg.store
        self.cv = threading.Condition(threading.Lock())
        self.dirty = {}
        self.pv_by_claim = {}
        self.claims_by_volume = {}
        self.unclaimed = set()  # PVs without spec.claimRef
        self.terminating = set()
        self.emitted = set()
        self.stopped = False
        self.busy = False
        self.store.listeners.append(self.on_change)

    def mark(self, item):
        with self.cv:
            self.dirty[item] = None
            self.cv.notify()

    def mark_all(self):
        with self.reg.lock:
            items = [("pvc", k) for k in self.store.objs["persistentvolumeclaims"]]
            items += [("pv", k) for k in self.store.objs["persistentvolumes"]]
        for it in items:
            self.mark(it)

    def idle(self):
        with self.cv:
            return not self.dirty and not self.busy

    @staticmethod
    def _claim_key_of_pv(pv):
        cr = ((pv or {}).get("spec") or {}).get("claimRef")
        if cr and cr.get("name"):
            return "%s/%s" % (cr.get("namespace", ""), cr["name"])
        return None

    def _index(self, idx, key, old_target, new_target):
        if old_target and old_target != new_target:
            s = idx.get(old_target)
            if s:
                s.discard(key)
                if not s:
                    del idx[old_target]
        if new_target:
            idx.setdefault(new_target, set()).add(key)

    def on_change(self, res, typ, key, obj, prev):
        """Called by the store with its lock held."""
        cur = None if typ == "DELETED" else obj
        if res == "persistentvolumeclaims":
            self.mark(("pvc", key))
            oldv = ((prev or {}).get("spec") or {}).get("volumeName")
            newv = ((cur or {}).get("spec") or {}).get("volumeName")
            self._index(self.claims_by_volume, key, oldv, newv)
            for pv in list(self.pv_by_claim.get(key, ())):
                self.mark(("pv", pv))
            if newv:
                self.mark(("pv", newv))
        elif res == "persistentvolumes":
            self.mark(("pv", key))
            oc, nc = self._claim_key_of_pv(prev), self._claim_key_of_pv(cur)
            self._index(self.pv_by_claim, key, oc, nc)
            if cur is not None and not nc:
                self.unclaimed.add(key)
            else:
                self.unclaimed.discard(key)
            for c in (oc, nc):
                if c:
                    self.mark(("pvc", c))
            for c in list(self.claims_by_volume.get(key, ())):
                self.mark(("pvc", c))
        elif res == "storageclasses":
            self.mark(("allclaims",))
        elif res == "pods":
            for c in set(_pods_claims(prev) + _pods_claims(cur)):
                self.mark(("pvc", c))
        elif res == "namespaces":
            if cur is not None and cur["metadata"].get("deletionTimestamp"):
                self.terminating.add(key)
                self.mark(("ns", key))
            elif cur is None:
                self.terminating.discard(key)
        if cur is not None and res not in ("persistentvolumeclaims", "persistentvolumes"):
            fins = cur["metadata"].get("finalizers") or ()
            if cur["metadata"].get("deletionTimestamp") and (
                    "orphan" in fins or "foregroundDeletion" in fins):
                self.mark(("gc", res, key))
        if BY_RES[res].namespaced and self.terminating:
            ns = key.split("/", 1)[0]
            if ns in self.terminating:
                self.mark(("ns", ns))

    def stop(self):
        with self.cv:
            self.stopped = True
            self.cv.notify()

    def run(self):
        while True:
            with self.cv:
                while not self.dirty and not self.stopped:
                    self.busy = False
                    self.cv.wait(1.0)
                if self.stopped:
                    return
                item = next(iter(self.dirty))
                del self.dirty[item]
                self.busy = True
            try:
                with self.reg.lock:
                    self.sync(item)
            except ApiError as e:
                log("controllers: %s: %s" % (item, e.message))
            except Exception:
                log("controllers: %s: %s" % (item, traceback.format_exc()))

    # -- sync ------------------------------------------------------------------------------

    def sync(self, item):
        if item[0] == "pvc":
            self.sync_claim(item[1])
        elif item[0] == "pv":
            self.sync_volume(item[1])
        elif item[0] == "allclaims":
            for k, c in list(self.store.objs["persistentvolumeclaims"].items()):
                if not (c.get("spec") or {}).get("volumeName"):
                    self.mark(("pvc", k))
        elif item[0] == "ns":
            self.sync_namespace(item[1])
        elif item[0] == "gc":
            self.sync_gc(item[1], item[2])

    def _update(self, res, new, old, sub=None):
        kind = BY_RES[res]
        if sub == "status":
            kind.prepare_status(new, old)
        return self.reg.commit_update(kind, new, old, CTRL, sub)

    def _remove_finalizer(self, res, obj, fin):
        new = clone(obj)
        new["metadata"]["finalizers"] = [f for f in new["metadata"]["finalizers"] if f != fin]
        if not new["metadata"]["finalizers"]:
            del new["metadata"]["finalizers"]
        return self._update(res, new, obj)

    def sync_gc(self, res, key):
        obj = self.store.get(res, key)
        if obj is None or not obj["metadata"].get("deletionTimestamp"):
            return
        for fin in ("orphan", "foregroundDeletion"):
            obj = self.store.get(res, key)
            if obj is not None and fin in (obj["metadata"].get("finalizers") or ()):
                self._remove_finalizer(res, obj, fin)

    def sync_namespace(self, name):
        ns = self.store.get("namespaces", name)
        if ns is None or not ns["metadata"].get("deletionTimestamp"):
            return
        remaining = 0
        for kind in KIND_LIST:
            if not kind.namespaced:
                continue
            objs = self.store.objs[kind.resource]
            for key in [k for k in objs if k.startswith(name + "/")]:
                obj = objs.get(key)
                if obj is None:
                    continue
                if not obj["metadata"].get("deletionTimestamp"):
                    self.reg._delete(kind, key, obj)
                if key in objs:
                    remaining += 1
        if remaining == 0:
            ns = self.store.get("namespaces", name)
            if ns is not None and (ns.get("spec") or {}).get("finalizers"):
                new = clone(ns)
                new["spec"]["finalizers"] = [f for f in new["spec"]["finalizers"]
                                             if f != "kubernetes"]
                if not new["spec"]["finalizers"]:
                    del new["spec"]["finalizers"]
                self.reg.commit_update(BY_RES["namespaces"], new, ns, "kube-controller-manager",
                                       "finalize")

    def _event(self, claim, reason, message, typ="Normal"):
        meta = claim["metadata"]
        tag = (meta["uid"], reason)
        if tag in self.emitted or self.reg.opts.binder_events != "on":
            return
        self.emitted.add(tag)
        now = now_time()
        ev = {"metadata": {"name": "%s.%x" % (meta["name"], time.time_ns()),
                           "namespace": meta["namespace"]},
              "involvedObject": {"kind": "PersistentVolumeClaim",
                                 "namespace": meta["namespace"], "name": meta["name"],
                                 "uid": meta["uid"], "apiVersion": "v1",
                                 "resourceVersion": meta["resourceVersion"]},
              "reason": reason, "message": message,
              "source": {"component": "persistentvolume-controller"},
              "firstTimestamp": now, "lastTimestamp": now, "count": 1, "type": typ,
              "eventTime": None, "reportingComponent": "persistentvolume-controller",
              "reportingInstance": ""}
        self.reg._create(BY_RES["events"], ev, CTRL, internal=True)

    def _pod_uses(self, ns, name):
        key = "%s/%s" % (ns, name)
        for pod in self.store.objs["pods"].values():
            if pod["metadata"].get("namespace") != ns:
                continue
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            if key in _pods_claims(pod):
                return True
        return False

    def sync_claim(self, key):
        claim = self.store.get("persistentvolumeclaims", key)
        if claim is None:
            return
        meta = claim["metadata"]
        if meta.get("deletionTimestamp") and PVC_PROT in (meta.get("finalizers") or ()):
            if not self._pod_uses(meta["namespace"], meta["name"]):
                self._remove_finalizer("persistentvolumeclaims", claim, PVC_PROT)
                return
        if not self.reg.binder:
            return
        spec = claim.get("spec") or {}
        ann = meta.get("annotations") or {}
        if "storageClassName" not in spec and ANN_BETA_CLASS not in ann and \
                not spec.get("volumeName"):
            dc = self.reg.default_class()
            if dc:
                new = clone(claim)
                new["spec"]["storageClassName"] = dc
                self._update("persistentvolumeclaims", new, claim)
                return
        if ann.get(ANN_BIND_COMPLETED) != "yes":
            self.sync_unbound_claim(claim)
        else:
            self.sync_bound_claim(claim)

    def _claim_phase(self, claim, phase):
        if (claim.get("status") or {}).get("phase") == phase:
            return claim
        new = clone(claim)
        new.setdefault("status", {})["phase"] = phase
        return self._update("persistentvolumeclaims", new, claim, "status")

    def sync_bound_claim(self, claim):
        spec = claim.get("spec") or {}
        vol = spec.get("volumeName")
        if not vol:
            self._claim_phase(claim, "Lost")
            return
        pv = self.store.get("persistentvolumes", vol)
        if pv is None:
            self._claim_phase(claim, "Lost")
            return
        cr = (pv.get("spec") or {}).get("claimRef")
        if not cr:
            self.bind(pv, claim)
        elif cr.get("uid") == claim["metadata"]["uid"] and \
                cr.get("name") == claim["metadata"]["name"]:
            self.bind(pv, claim)
        else:
            self._claim_phase(claim, "Lost")

    def _capacity_ok(self, pv, claim):
        req = quantity_value((((claim.get("spec") or {}).get("resources") or {})
                              .get("requests") or {}).get("storage", "0"))
        have = quantity_value(((pv.get("spec") or {}).get("capacity") or {})
                              .get("storage", "0"))
        return have >= req

    def _matches(self, pv, claim, prebound):
        pspec, cspec = pv.get("spec") or {}, claim.get("spec") or {}
        if pv["metadata"].get("deletionTimestamp"):
            return False
        if not self._capacity_ok(pv, claim):
            return False
        if (pspec.get("volumeMode") or "Filesystem") != (cspec.get("volumeMode") or "Filesystem"):
            return False
        if prebound:
            return True
        if (pv.get("status") or {}).get("phase") != "Available":
            return False
        if pv_class(pv) != claim_class(claim):
            return False
        if not set(cspec.get("accessModes") or []) <= set(pspec.get("accessModes") or []):
            return False
        sel = cspec.get("selector")
        if sel and not labels_match(label_selector_from_struct(sel),
                                    pv["metadata"].get("labels")):
            return False
        return True

    def sync_unbound_claim(self, claim):
        meta, spec = claim["metadata"], claim.get("spec") or {}
        key = "%s/%s" % (meta["namespace"], meta["name"])
        vol = spec.get("volumeName")
        if vol:
            pv = self.store.get("persistentvolumes", vol)
            if pv is None:
                self._claim_phase(claim, "Pending")
                return
            cr = (pv.get("spec") or {}).get("claimRef")
            if not cr or (cr.get("name") == meta["name"] and
                          cr.get("namespace") == meta["namespace"] and
                          cr.get("uid", meta["uid"]) in ("", meta["uid"])):
                self.bind(pv, claim)
            else:
                self._claim_phase(claim, "Pending")
            return
        sc_name = claim_class(claim)
        sc = self.store.get("storageclasses", sc_name) if sc_name else None
        wffc = sc is not None and sc.get("volumeBindingMode") == "WaitForFirstConsumer"
        best = None
        for pvname in sorted(self.pv_by_claim.get(key, ())):
            pv = self.store.get("persistentvolumes", pvname)
            cr = (pv or {}).get("spec", {}).get("claimRef") or {}
            if pv is not None and cr.get("uid", "") in ("", meta["uid"]) and \
                    self._matches(pv, claim, True):
                best = pv
                break
        if best is None and not wffc:
            pvs = self.store.objs["persistentvolumes"]
            cands = [pvs[n] for n in self.unclaimed if n in pvs and
                     not (pvs[n].get("spec") or {}).get("claimRef") and
                     self._matches(pvs[n], claim, False)]
            if cands:
                best = min(cands, key=lambda p: (quantity_value(
                    p["spec"]["capacity"]["storage"]), p["metadata"]["name"]))
        if best is not None:
            self.bind(best, claim)
            return
        if sc is None or not sc.get("provisioner") or \
                sc.get("provisioner") == "kubernetes.io/no-provisioner":
            return
        ann = meta.get("annotations") or {}
        if wffc and not ann.get(ANN_SELECTED_NODE):
            self._event(claim, "WaitForFirstConsumer",
                        "waiting for first consumer to be created before binding")
            return
        prov = sc["provisioner"]
        if ann.get(ANN_PROVISIONER) != prov or ann.get(ANN_BETA_PROVISIONER) != prov:
            new = clone(claim)
            a = new["metadata"].setdefault("annotations", {})
            a[ANN_PROVISIONER] = prov
            a[ANN_BETA_PROVISIONER] = prov
            claim = self._update("persistentvolumeclaims", new, claim)
        self._event(claim, "ExternalProvisioning",
                    "Waiting for a volume to be created either by the external provisioner "
                    "'%s' or manually by the system administrator. If volume creation is "
                    "delayed, please verify that the provisioner is running and correctly "
                    "registered." % prov)

    def bind(self, pv, claim):
        cm = claim["metadata"]
        cr = (pv.get("spec") or {}).get("claimRef") or {}
        if cr.get("name") != cm["name"] or cr.get("namespace") != cm["namespace"] or \
                cr.get("uid") != cm["uid"]:
            new = clone(pv)
            new["spec"]["claimRef"] = {"kind": "PersistentVolumeClaim",
                                       "namespace": cm["namespace"], "name": cm["name"],
                                       "uid": cm["uid"], "apiVersion": "v1",
                                       "resourceVersion": cm["resourceVersion"]}
            new["metadata"].setdefault("annotations", {})[ANN_BOUND_BY_CONTROLLER] = "yes"
            pv = self._update("persistentvolumes", new, pv)
        if (pv.get("status") or {}).get("phase") != "Bound":
            new = clone(pv)
            new.setdefault("status", {})["phase"] = "Bound"
            new["status"].pop("reason", None)
            new["status"].pop("message", None)
            pv = self._update("persistentvolumes", new, pv, "status")
        name = pv["metadata"]["name"]
        ann = cm.get("annotations") or {}
        if (claim.get("spec") or {}).get("volumeName") != name or \
                ann.get(ANN_BIND_COMPLETED) != "yes":
            new = clone(claim)
            a = new["metadata"].setdefault("annotations", {})
            if (new.get("spec") or {}).get("volumeName") != name:
                new["spec"]["volumeName"] = name
                a[ANN_BOUND_BY_CONTROLLER] = "yes"
            a[ANN_BIND_COMPLETED] = "yes"
            claim = self._update("persistentvolumeclaims", new, claim)
        st = claim.get("status") or {}
        want = {"phase": "Bound", "accessModes": (pv.get("spec") or {}).get("accessModes"),
                "capacity": (pv.get("spec") or {}).get("capacity")}
        if any(st.get(k) != v for k, v in want.items()):
            new = clone(claim)
            new.setdefault("status", {}).update(clone(want))
            self._update("persistentvolumeclaims", new, claim, "status")

    def _pv_phase(self, pv, phase):
        if (pv.get("status") or {}).get("phase") == phase:
            return pv
        new = clone(pv)
        new.setdefault("status", {})["phase"] = phase
        return self._update("persistentvolumes", new, pv, "status")

    def sync_volume(self, name):
        pv = self.store.get("persistentvolumes", name)
        if pv is None:
            return
        meta = pv["metadata"]
        if meta.get("deletionTimestamp") and PV_PROT in (meta.get("finalizers") or ()) and \
                (pv.get("status") or {}).get("phase") != "Bound":
            self._remove_finalizer("persistentvolumes", pv, PV_PROT)
            return
        if not self.reg.binder:
            return
        cr = (pv.get("spec") or {}).get("claimRef")
        if not cr:
            self._pv_phase(pv, "Available")
            return
        claim = self.store.get("persistentvolumeclaims",
                               "%s/%s" % (cr.get("namespace", ""), cr.get("name", "")))
        if claim is not None and cr.get("uid") and claim["metadata"]["uid"] != cr["uid"]:
            claim = None
        if claim is None:
            if not cr.get("uid"):
                self._pv_phase(pv, "Available")
            elif (pv.get("status") or {}).get("phase") not in ("Released", "Failed"):
                self._pv_phase(pv, "Released")
            return
        vol = (claim.get("spec") or {}).get("volumeName")
        if not vol:
            self.mark(("pvc", "%s/%s" % (claim["metadata"]["namespace"],
                                          claim["metadata"]["name"])))
        elif vol == name:
            self._pv_phase(pv, "Bound")
        else:
            ann = meta.get("annotations") or {}
            if ann.get(ANN_PROVISIONED_BY) and \
                    pv["spec"].get("persistentVolumeReclaimPolicy") == "Delete":
                self._pv_phase(pv, "Released")
            elif ann.get(ANN_BOUND_BY_CONTROLLER):
                new = clone(pv)
                del new["spec"]["claimRef"]
                new["metadata"]["annotations"].pop(ANN_BOUND_BY_CONTROLLER, None)
                pv = self._update("persistentvolumes", new, pv)
                self._pv_phase(pv, "Available")
