"""Storage kinds: PersistentVolume, PersistentVolumeClaim, StorageClass, CSIDriver,
CSIStorageCapacity."""

from ..common import clone, now_time
from ..errors import (FieldError, forbidden, go_label_selector, invalid, not_supported,
                      required)
from .base import (ACCESS_MODES, access_modes_str, AGE_COL, ANN_BETA_CLASS, claim_class, col,
                   go_order, HOSTPATH_TYPES, is_default_class, Kind, NAME_COL, pv_class,
                   PV_SOURCES, SMP_META, _spec_diff, VOLUME_MODES)
from ..quantity import (age, canon_quantity, canon_resource_list, canon_status, canon_time,
                        DecodeError, parse_quantity, QTY_MSG, quantity_value)
from ..validation import is_dns1123_subdomain, is_qualified_name, is_valid_label_value


def _validate_access_modes(modes, path, errs, required_detail=""):
    if not modes:
        errs.append(required(path, required_detail))
    rwop = other = False
    for m in modes or []:
        if m not in ACCESS_MODES:
            errs.append(not_supported(path, m, ACCESS_MODES))
        elif m == "ReadWriteOncePod":
            rwop = True
        else:
            other = True
    if rwop and other:
        errs.append(forbidden(path, "may not use ReadWriteOncePod with other access modes"))


def _validate_class_and_mode(spec, errs):
    """spec.storageClassName and spec.volumeMode of a PV or PVC."""
    sc = spec.get("storageClassName")
    if sc:
        for m in is_dns1123_subdomain(sc):
            errs.append(invalid("spec.storageClassName", sc, m))
    vm = spec.get("volumeMode")
    if vm is not None and vm not in VOLUME_MODES:
        errs.append(not_supported("spec.volumeMode", vm, VOLUME_MODES))


def _validate_positive_qty(v, path, errs):
    try:
        val, _ = parse_quantity(v)
    except DecodeError:
        errs.append(invalid(path, v, QTY_MSG))
        return
    if val <= 0:
        errs.append(invalid(path, v, "must be greater than zero"))


class PersistentVolumeKind(Kind):
    resource, kind, namespaced, short, has_status = ("persistentvolumes", "PersistentVolume",
                                                     False, ("pv",), True)
    extra_fields = ("name",)

    def normalize(self, obj):
        super().normalize(obj)
        spec = obj.get("spec")
        if isinstance(spec, dict) and "capacity" in spec:
            spec["capacity"] = canon_resource_list(spec["capacity"])
        st = obj.get("status")
        if isinstance(st, dict) and "lastPhaseTransitionTime" in st:
            st["lastPhaseTransitionTime"] = canon_time(st["lastPhaseTransitionTime"])
            if st["lastPhaseTransitionTime"] is None:
                del st["lastPhaseTransitionTime"]

    def defaults(self, obj):
        spec = obj.setdefault("spec", {})
        st = obj.setdefault("status", {})
        if not st.get("phase"):
            st["phase"] = "Pending"
        if not spec.get("persistentVolumeReclaimPolicy"):
            spec["persistentVolumeReclaimPolicy"] = "Retain"
        if not spec.get("volumeMode"):
            spec["volumeMode"] = "Filesystem"
        hp = spec.get("hostPath")
        if isinstance(hp, dict) and hp.get("type") is None:
            hp["type"] = ""

    def prepare_create(self, obj):
        obj["status"] = {"phase": "Pending", "lastPhaseTransitionTime": now_time()}

    def prepare_status(self, new, old):
        super().prepare_status(new, old)
        ost, nst = old.get("status") or {}, new.setdefault("status", {})
        if ost.get("phase") != nst.get("phase") and (
                not nst.get("lastPhaseTransitionTime") or
                nst.get("lastPhaseTransitionTime") == ost.get("lastPhaseTransitionTime")):
            nst["lastPhaseTransitionTime"] = now_time()

    def validate_spec(self, obj, errs):
        spec = obj.get("spec") or {}
        _validate_access_modes(spec.get("accessModes"), "spec.accessModes", errs)
        cap = spec.get("capacity")
        if not cap:
            errs.append(required("spec.capacity"))
        if not cap or "storage" not in cap or len(cap) > 1:
            errs.append(FieldError("notsupported", "spec.capacity",
                                   "map[%s]" % " ".join("%s:{%s}" % kv for kv in
                                                        sorted((cap or {}).items())),
                                   'supported values: "storage"'))
        for r, q in (cap or {}).items():
            _validate_positive_qty(q, "spec.capacity[%s]" % r, errs)
        pol = spec.get("persistentVolumeReclaimPolicy")
        if pol and pol not in ("Delete", "Recycle", "Retain"):
            errs.append(not_supported("spec.persistentVolumeReclaimPolicy", pol,
                                      ["Delete", "Recycle", "Retain"]))
        na = spec.get("nodeAffinity")
        if na is not None:
            req = (na or {}).get("required")
            if req is not None and not (req or {}).get("nodeSelectorTerms"):
                errs.append(required("spec.nodeAffinity.required.nodeSelectorTerms",
                                     "must have at least one node selector term"))
            for i, t in enumerate((req or {}).get("nodeSelectorTerms") or []):
                for j, e in enumerate((t or {}).get("matchExpressions") or []):
                    p = ("spec.nodeAffinity.required.nodeSelectorTerms[%d].matchExpressions[%d]"
                         % (i, j))
                    op = e.get("operator")
                    if op not in ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"):
                        errs.append(not_supported(p + ".operator", op,
                                                  ["DoesNotExist", "Exists", "Gt", "In", "Lt",
                                                   "NotIn"]))
                    elif op in ("In", "NotIn") and not e.get("values"):
                        errs.append(required(p + ".values",
                                             "must be specified when `operator` is 'In' or "
                                             "'NotIn'"))
                    for m in is_qualified_name(e.get("key") or ""):
                        errs.append(invalid(p + ".key", e.get("key") or "", m))
        n = 0
        for src in PV_SOURCES:
            if spec.get(src) is None:
                continue
            if n > 0:
                errs.append(forbidden("spec." + src, "may not specify more than 1 volume type"))
                continue
            n += 1
            v = spec[src] if isinstance(spec[src], dict) else {}
            if src == "hostPath":
                path = v.get("path") or ""
                if not path:
                    errs.append(required("spec.hostPath.path"))
                elif ".." in path.split("/"):
                    errs.append(invalid("spec.hostPath.path", path, "must not contain '..'"))
                t = v.get("type", "")
                if t not in HOSTPATH_TYPES:
                    errs.append(not_supported("spec.hostPath.type", t, HOSTPATH_TYPES))
            elif src == "local":
                if not v.get("path"):
                    errs.append(required("spec.local.path"))
                if not spec.get("nodeAffinity"):
                    errs.append(required("spec.nodeAffinity",
                                         "Local volume requires node affinity"))
            elif src == "nfs":
                if not v.get("server"):
                    errs.append(required("spec.nfs.server"))
                if not v.get("path"):
                    errs.append(required("spec.nfs.path"))
            elif src == "csi":
                if not v.get("driver"):
                    errs.append(required("spec.csi.driver"))
                if not v.get("volumeHandle"):
                    errs.append(required("spec.csi.volumeHandle"))
        if n == 0:
            errs.append(required("spec", "must specify a volume type"))
        _validate_class_and_mode(spec, errs)

    def validate_update(self, new, old):
        errs = self.validate(new)
        ns, os_ = new.get("spec") or {}, old.get("spec") or {}
        if any(ns.get(s) != os_.get(s) for s in PV_SOURCES):
            errs.append(forbidden("spec.persistentvolumesource",
                                  "spec.persistentvolumesource is immutable after creation\n"))
        if ns.get("volumeMode") != os_.get("volumeMode"):
            errs.append(invalid("volumeMode", ns.get("volumeMode"), "field is immutable"))
        if os_.get("nodeAffinity") is not None and ns.get("nodeAffinity") != os_["nodeAffinity"]:
            errs.append(invalid("nodeAffinity", ns.get("nodeAffinity"), "field is immutable"))
        return errs

    def validate_status_update(self, new, old):
        errs = super().validate_status_update(new, old)
        if not new["metadata"].get("resourceVersion"):
            errs.append(required("resourceVersion"))
        return errs

    def empty(self):
        return {"spec": {}, "status": {}}

    def columns(self):
        return [NAME_COL, col("Capacity"), col("Access Modes"), col("Reclaim Policy"),
                col("Status"), col("Claim"), col("StorageClass"),
                col("VolumeAttributesClass"), col("Reason"), AGE_COL,
                col("VolumeMode", priority=1)]

    def row(self, obj):
        spec, st, meta = obj.get("spec") or {}, obj.get("status") or {}, obj["metadata"]
        cr = spec.get("claimRef") or {}
        claim = "%s/%s" % (cr.get("namespace", ""), cr.get("name", "")) if cr else ""
        phase = "Terminating" if meta.get("deletionTimestamp") else st.get("phase", "")
        return [meta["name"], (spec.get("capacity") or {}).get("storage", ""),
                access_modes_str(spec.get("accessModes")),
                spec.get("persistentVolumeReclaimPolicy", ""), phase, claim, pv_class(obj),
                spec.get("volumeAttributesClassName") or "<unset>", st.get("reason", ""),
                age(meta), spec.get("volumeMode") or "<unset>"]


class PersistentVolumeClaimKind(Kind):
    resource, kind, short, has_status = ("persistentvolumeclaims", "PersistentVolumeClaim",
                                         ("pvc",), True)
    extra_fields = ("name",)
    smp = {**SMP_META, **{("status", "conditions"): ("merge", "type")}}

    def normalize(self, obj):
        super().normalize(obj)
        spec = obj.get("spec")
        if isinstance(spec, dict) and isinstance(spec.get("resources"), dict):
            for f in ("requests", "limits"):
                if f in spec["resources"]:
                    spec["resources"][f] = canon_resource_list(spec["resources"][f])
        canon_status(obj, ("capacity", "allocatedResources"),
                     ("lastProbeTime", "lastTransitionTime"))

    def defaults(self, obj):
        spec = obj.setdefault("spec", {})
        spec.setdefault("resources", {})
        st = obj.setdefault("status", {})
        if not st.get("phase"):
            st["phase"] = "Pending"
        if not spec.get("volumeMode"):
            spec["volumeMode"] = "Filesystem"

    def prepare_create(self, obj):
        obj["status"] = {}

    def validate_spec(self, obj, errs):
        spec = obj.get("spec") or {}
        _validate_access_modes(spec.get("accessModes"), "spec.accessModes", errs,
                               "at least 1 access mode is required")
        req = ((spec.get("resources") or {}).get("requests") or {})
        if "storage" not in req:
            errs.append(required("spec.resources[storage]"))
        else:
            _validate_positive_qty(req["storage"], "spec.resources[storage]", errs)
        _validate_class_and_mode(spec, errs)
        ds = spec.get("dataSource")
        if ds is not None:
            if not ds.get("name"):
                errs.append(required("spec.dataSource.name"))
            if not ds.get("kind"):
                errs.append(required("spec.dataSource.kind"))

    def validate_update(self, new, old):
        errs = self.validate(new)
        os_, ns_ = clone(old.get("spec") or {}), clone(new.get("spec") or {})
        if not os_.get("volumeName"):
            if "volumeName" in ns_:
                os_["volumeName"] = ns_["volumeName"]
            else:
                os_.pop("volumeName", None)
        oann = old["metadata"].get("annotations") or {}
        nann = new["metadata"].get("annotations") or {}
        if oann.get(ANN_BETA_CLASS) != nann.get(ANN_BETA_CLASS):
            errs.append(invalid("metadata.annotations[%s]" % ANN_BETA_CLASS,
                                nann.get(ANN_BETA_CLASS, ""), "field is immutable"))
        if "storageClassName" not in os_ and ns_.get("storageClassName") is not None and (
                ANN_BETA_CLASS not in oann or oann[ANN_BETA_CLASS] == ns_["storageClassName"]):
            os_["storageClassName"] = ns_["storageClassName"]
        old_size = quantity_value(((os_.get("resources") or {}).get("requests") or {})
                                  .get("storage", "0"))
        new_size = quantity_value(((ns_.get("resources") or {}).get("requests") or {})
                                  .get("storage", "0"))
        if (new.get("status") or {}).get("phase") == "Bound":
            if isinstance((ns_.get("resources") or {}).get("requests"), dict):
                ns_["resources"]["requests"]["storage"] = \
                    ((os_.get("resources") or {}).get("requests") or {}).get("storage")
        os_.pop("volumeAttributesClassName", None)
        ns_.pop("volumeAttributesClassName", None)
        if os_ != ns_:
            errs.append(forbidden("spec", "spec is immutable after creation except "
                                  "resources.requests and volumeAttributesClassName for bound "
                                  "claims\n" + _spec_diff(os_, ns_)))
        if new_size < old_size:
            status_size = quantity_value(((old.get("status") or {}).get("capacity") or {})
                                         .get("storage", "0"))
            if new_size <= status_size:
                errs.append(forbidden("spec.resources.requests.storage",
                                      "field can not be less than status.capacity"))
        return errs

    def empty(self):
        return {"spec": {"resources": {}}, "status": {}}

    def columns(self):
        return [NAME_COL, col("Status"), col("Volume"), col("Capacity"), col("Access Modes"),
                col("StorageClass"), col("VolumeAttributesClass"), AGE_COL,
                col("VolumeMode", priority=1)]

    def row(self, obj):
        spec, st, meta = obj.get("spec") or {}, obj.get("status") or {}, obj["metadata"]
        phase = "Terminating" if meta.get("deletionTimestamp") else st.get("phase", "")
        cap = modes = ""
        if spec.get("volumeName"):
            cap = (st.get("capacity") or {}).get("storage", "")
            modes = access_modes_str(st.get("accessModes"))
        return [meta["name"], phase, spec.get("volumeName", ""), cap, modes, claim_class(obj),
                spec.get("volumeAttributesClassName") or "<unset>", age(meta),
                spec.get("volumeMode") or "<unset>"]


class StorageClassKind(Kind):
    resource, kind, group, namespaced, short = ("storageclasses", "StorageClass",
                                                "storage.k8s.io", False, ("sc",))
    order = ("metadata", "provisioner", "parameters", "reclaimPolicy", "mountOptions",
             "allowVolumeExpansion", "volumeBindingMode", "allowedTopologies")

    def defaults(self, obj):
        if not obj.get("reclaimPolicy"):
            obj["reclaimPolicy"] = "Delete"
        if not obj.get("volumeBindingMode"):
            obj["volumeBindingMode"] = "Immediate"

    def validate_spec(self, obj, errs):
        prov = obj.get("provisioner")
        if not prov:
            errs.append(required("provisioner", prov or ""))
        else:
            for m in is_qualified_name(prov.lower()):
                errs.append(invalid("provisioner", prov, m))
        params = obj.get("parameters") or {}
        if not isinstance(params, dict):
            raise DecodeError("json: cannot unmarshal into Go struct field "
                              "StorageClass.parameters of type map[string]string")
        size = 0
        for k, v in params.items():
            if not k:
                errs.append(invalid("parameters", k, "invalid empty parameter name"))
            size += len(k) + len(str(v))
        if len(params) > 512:
            errs.append(invalid("parameters", params, "must have at most 512 parameters"))
        if size > 256 * 1024:
            errs.append(invalid("parameters", size, "must have at most 262144 bytes"))
        pol = obj.get("reclaimPolicy")
        if pol and pol not in ("Delete", "Retain"):
            errs.append(not_supported("reclaimPolicy", pol, ["Delete", "Retain"]))
        mode = obj.get("volumeBindingMode")
        if not mode:
            errs.append(required("volumeBindingMode"))
        elif mode not in ("Immediate", "WaitForFirstConsumer"):
            errs.append(not_supported("volumeBindingMode", mode,
                                      ["Immediate", "WaitForFirstConsumer"]))

    def validate_update(self, new, old):
        errs = self.validate(new)
        if (new.get("parameters") or {}) != (old.get("parameters") or {}):
            errs.append(forbidden("parameters", "updates to parameters are forbidden."))
        if new.get("provisioner") != old.get("provisioner"):
            errs.append(forbidden("provisioner", "updates to provisioner are forbidden."))
        if new.get("reclaimPolicy") != old.get("reclaimPolicy"):
            errs.append(forbidden("reclaimPolicy", "updates to reclaimPolicy are forbidden."))
        if new.get("volumeBindingMode") != old.get("volumeBindingMode"):
            errs.append(invalid("volumeBindingMode", new.get("volumeBindingMode"),
                                "field is immutable"))
        return errs

    def empty(self):
        return {"provisioner": ""}

    def columns(self):
        return [NAME_COL, col("Provisioner"), col("ReclaimPolicy"), col("VolumeBindingMode"),
                col("AllowVolumeExpansion"), AGE_COL]

    def row(self, obj):
        name = obj["metadata"]["name"]
        if is_default_class(obj):
            name += " (default)"
        return [name, obj.get("provisioner", ""), obj.get("reclaimPolicy", "Delete"),
                obj.get("volumeBindingMode", "Immediate"),
                bool(obj.get("allowVolumeExpansion", False)), age(obj["metadata"])]


def _validate_label_selector(sel, path, errs):
    """metav1validation.ValidateLabelSelector (no invalid label values allowed)."""
    if sel is None:
        return
    if not isinstance(sel, dict):
        raise DecodeError("json: cannot unmarshal %s into Go value of type v1.LabelSelector"
                          % type(sel).__name__)
    for k, v in (sel.get("matchLabels") or {}).items():
        for m in is_qualified_name(k):
            errs.append(invalid(path + ".matchLabels", k, m))
        for m in is_valid_label_value(v if isinstance(v, str) else ""):
            errs.append(invalid(path + ".matchLabels", v, m))
    for i, e in enumerate(sel.get("matchExpressions") or []):
        p = "%s.matchExpressions[%d]" % (path, i)
        e = e if isinstance(e, dict) else {}
        op, vals = e.get("operator") or "", e.get("values") or []
        if op in ("In", "NotIn"):
            if not vals:
                errs.append(required(p + ".values",
                                     "must be specified when `operator` is 'In' or 'NotIn'"))
        elif op in ("Exists", "DoesNotExist"):
            if vals:
                errs.append(forbidden(p + ".values", "may not be specified when `operator` is "
                                      "'Exists' or 'DoesNotExist'"))
        else:
            errs.append(invalid(p + ".operator", op, "not a valid selector operator"))
        for m in is_qualified_name(e.get("key") or ""):
            errs.append(invalid(p + ".key", e.get("key") or "", m))
        for j, v in enumerate(vals):
            for m in is_valid_label_value(v):
                errs.append(invalid("%s.values[%d]" % (p, j), v, m))


CSI_DRIVER_SPEC_ORDER = ("attachRequired", "podInfoOnMount", "volumeLifecycleModes",
                         "storageCapacity", "fsGroupPolicy", "tokenRequests",
                         "requiresRepublish", "seLinuxMount",
                         "nodeAllocatableUpdatePeriodSeconds", "serviceAccountTokenInSecrets",
                         "preventPodSchedulingIfMissing")
FS_GROUP_POLICIES = ["File", "None", "ReadWriteOnceWithFSType"]
LIFECYCLE_MODES = ["Persistent", "Ephemeral"]


class CSIDriverKind(Kind):
    """storage.k8s.io/v1 CSIDriver: cluster-scoped; defaults and validation of
    pkg/apis/storage (SetDefaults_CSIDriver, ValidateCSIDriver, ValidateCSIDriverUpdate)."""
    resource, kind, group, namespaced = ("csidrivers", "CSIDriver", "storage.k8s.io", False)
    order = ("metadata", "spec")

    def normalize(self, obj):
        super().normalize(obj)
        spec = obj.get("spec")
        if spec is not None and not isinstance(spec, dict):
            raise DecodeError("json: cannot unmarshal %s into Go struct field CSIDriver.spec "
                              "of type v1.CSIDriverSpec" % type(spec).__name__)
        for f in ("attachRequired", "podInfoOnMount", "storageCapacity", "requiresRepublish",
                  "seLinuxMount"):
            v = (spec or {}).get(f)
            if v is not None and not isinstance(v, bool):
                raise DecodeError("json: cannot unmarshal %s into Go struct field "
                                  "CSIDriverSpec.spec.%s of type bool" % (type(v).__name__, f))

    def defaults(self, obj):
        spec = obj.setdefault("spec", {})
        for f, v in (("attachRequired", True), ("podInfoOnMount", False),
                     ("storageCapacity", False), ("fsGroupPolicy", "ReadWriteOnceWithFSType"),
                     ("requiresRepublish", False), ("seLinuxMount", False),
                     ("preventPodSchedulingIfMissing", False)):
            if spec.get(f) is None:
                spec[f] = v
        if not spec.get("volumeLifecycleModes"):
            spec["volumeLifecycleModes"] = ["Persistent"]
        obj["spec"] = go_order(spec, CSI_DRIVER_SPEC_ORDER)

    def validate_spec(self, obj, errs):
        spec = obj.get("spec") or {}
        for f, p in (("attachRequired", "spec.attachedRequired"),
                     ("podInfoOnMount", "spec.podInfoOnMount"),
                     ("storageCapacity", "spec.storageCapacity")):
            if spec.get(f) is None:
                errs.append(required(p))
        pol = spec.get("fsGroupPolicy")
        if pol is not None and pol not in FS_GROUP_POLICIES:
            errs.append(not_supported("spec.fsGroupPolicy", pol, FS_GROUP_POLICIES))
        for m in spec.get("volumeLifecycleModes") or []:
            if m not in LIFECYCLE_MODES:
                errs.append(not_supported("spec.volumeLifecycleModes", m, LIFECYCLE_MODES))
        aud = set()
        for i, t in enumerate(spec.get("tokenRequests") or []):
            a = (t or {}).get("audience", "")
            if a in aud:
                errs.append(FieldError("duplicate", "spec.tokenRequests[%d].audience" % i, a))
            aud.add(a)

    def validate_update(self, new, old):
        errs = self.validate(new)
        ns, os_ = new.get("spec") or {}, old.get("spec") or {}
        if ns.get("attachRequired") != os_.get("attachRequired"):
            errs.append(invalid("spec.attachedRequired", ns.get("attachRequired"),
                                "field is immutable"))
        if ns.get("volumeLifecycleModes") != os_.get("volumeLifecycleModes"):
            errs.append(invalid("spec.volumeLifecycleModes", ns.get("volumeLifecycleModes"),
                                "field is immutable"))
        return errs

    def empty(self):
        return {"spec": {}}

    def columns(self):
        return [NAME_COL, col("AttachRequired", "boolean"), col("PodInfoOnMount", "boolean"),
                col("StorageCapacity", "boolean"), col("TokenRequests"),
                col("RequiresRepublish", "boolean"), col("Modes"), AGE_COL]

    def row(self, obj):
        spec = obj.get("spec") or {}
        toks = ",".join(t.get("audience", "") for t in spec.get("tokenRequests") or [])
        return [obj["metadata"]["name"], bool(spec.get("attachRequired")),
                bool(spec.get("podInfoOnMount")), bool(spec.get("storageCapacity")),
                toks or "<unset>", bool(spec.get("requiresRepublish")),
                ",".join(spec.get("volumeLifecycleModes") or []), age(obj["metadata"])]


class CSIStorageCapacityKind(Kind):
    """storage.k8s.io/v1 CSIStorageCapacity: namespaced; ValidateCSIStorageCapacity and
    ValidateCSIStorageCapacityUpdate (nodeTopology and storageClassName immutable)."""
    resource, kind, group, return_deleted = ("csistoragecapacities", "CSIStorageCapacity",
                                             "storage.k8s.io", False)
    order = ("metadata", "nodeTopology", "storageClassName", "capacity", "maximumVolumeSize")

    def normalize(self, obj):
        super().normalize(obj)
        for f in ("capacity", "maximumVolumeSize"):
            if obj.get(f) is not None:
                try:
                    obj[f] = canon_quantity(obj[f])
                except DecodeError:
                    raise DecodeError("quantities must match the regular expression "
                                      "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")
            elif f in obj:
                del obj[f]

    def validate_spec(self, obj, errs):
        _validate_label_selector(obj.get("nodeTopology"), "nodeTopology", errs)
        sc = obj.get("storageClassName") or ""
        for m in is_dns1123_subdomain(sc):
            errs.append(invalid("storageClassName", sc, m))
        cap = obj.get("capacity")
        if cap is not None and quantity_value(cap) < 0:
            errs.append(invalid("capacity", cap, "must be greater than or equal to 0"))

    def validate_update(self, new, old):
        errs = self.validate(new)
        if new.get("nodeTopology") != old.get("nodeTopology"):
            errs.append(invalid("nodeTopology", go_label_selector(new.get("nodeTopology")),
                                "field is immutable"))
        if new.get("storageClassName") != old.get("storageClassName"):
            errs.append(invalid("storageClassName", new.get("storageClassName") or "",
                                "field is immutable"))
        return errs

    def empty(self):
        return {"storageClassName": ""}

    def columns(self):
        return [NAME_COL, col("StorageClassName"), AGE_COL]

    def row(self, obj):
        return [obj["metadata"]["name"], obj.get("storageClassName", ""), age(obj["metadata"])]
