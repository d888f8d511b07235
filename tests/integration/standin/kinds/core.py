"""core/v1 and coordination kinds: Event, Namespace, Node, Pod, Lease."""

import time

from ..common import clone
from ..errors import FieldError, invalid, not_supported, required
from .base import AGE_COL, col, Kind, NAME_COL, SMP_META
from ..quantity import (age, canon_micro, canon_status, canon_time, DecodeError, human_duration,
                        time_epoch)
from ..validation import is_dns1123_label, is_qualified_name


class EventKind(Kind):
    resource, kind, short, return_deleted, create_on_update = ("events", "Event", ("ev",),
                                                               False, True)
    order = ("metadata", "involvedObject", "reason", "message", "source", "firstTimestamp",
             "lastTimestamp", "count", "type", "eventTime", "series", "action", "related",
             "reportingComponent", "reportingInstance")
    extra_fields = ("involvedObject.kind", "involvedObject.namespace", "involvedObject.name",
                    "involvedObject.uid", "involvedObject.apiVersion",
                    "involvedObject.resourceVersion", "involvedObject.fieldPath", "reason",
                    "reportingComponent", "source", "type")

    def normalize(self, obj):
        super().normalize(obj)
        for f in ("firstTimestamp", "lastTimestamp"):
            if f in obj:
                obj[f] = canon_time(obj[f])
        if "eventTime" in obj:
            obj["eventTime"] = canon_micro(obj["eventTime"])
        if isinstance(obj.get("series"), dict) and "lastObservedTime" in obj["series"]:
            obj["series"]["lastObservedTime"] = canon_micro(obj["series"]["lastObservedTime"])
        if "count" in obj and (not isinstance(obj["count"], int) or
                               isinstance(obj["count"], bool)):
            raise DecodeError("json: cannot unmarshal %s into Go struct field Event.count of "
                              "type int32" % type(obj["count"]).__name__)

    def defaults(self, obj):
        obj.setdefault("involvedObject", {})
        obj.setdefault("source", {})
        for f in ("firstTimestamp", "lastTimestamp", "eventTime"):
            obj.setdefault(f, None)
        obj.setdefault("reportingComponent", "")
        obj.setdefault("reportingInstance", "")
        if obj.get("count") == 0:
            del obj["count"]

    def validate_spec(self, obj, errs):
        ns = obj["metadata"].get("namespace") or ""
        inv = obj.get("involvedObject") or {}
        ins = inv.get("namespace") or ""
        if not obj.get("eventTime"):
            if not ins:
                if ns not in ("", "default"):
                    errs.append(invalid("involvedObject.namespace", ins,
                                        "does not match event.namespace"))
            elif ns != ins:
                errs.append(invalid("involvedObject.namespace", ins,
                                    "does not match event.namespace"))
        else:
            if not ins and ns not in ("default", "kube-system"):
                errs.append(invalid("involvedObject.namespace", ins,
                                    "does not match event.namespace"))
            rc = obj.get("reportingComponent") or ""
            if not rc:
                errs.append(required("reportingComponent"))
            for m in is_qualified_name(rc):
                errs.append(invalid("reportingComponent", rc, m))
            if not obj.get("reportingInstance"):
                errs.append(required("reportingInstance"))
            if not obj.get("action"):
                errs.append(required("action"))
            if not obj.get("reason"):
                errs.append(required("reason"))
        if obj.get("type") and obj["type"] not in ("Normal", "Warning") and obj.get("eventTime"):
            errs.append(not_supported("type", obj["type"], ["Normal", "Warning"]))

    def field_value(self, obj, field):
        if field == "source":
            return (obj.get("source") or {}).get("component", "")
        return super().field_value(obj, field)

    def empty(self):
        return {"involvedObject": {}, "reportingComponent": "", "reportingInstance": "",
                "source": {}, "firstTimestamp": None, "lastTimestamp": None, "eventTime": None}

    def columns(self):
        return [col("Last Seen"), col("Type"), col("Reason"), col("Object"),
                col("Subobject", priority=1), col("Source", priority=1), col("Message"),
                col("First Seen", priority=1), col("Count", "integer", priority=1),
                col("Name", priority=1)]

    def row(self, obj):
        inv = obj.get("involvedObject") or {}
        src = obj.get("source") or {}
        first = obj.get("firstTimestamp") or obj.get("eventTime")
        last = obj.get("lastTimestamp") or (obj.get("series") or {}).get("lastObservedTime") \
            or first
        tl = time_epoch(last) if last else None
        tf = time_epoch(first) if first else None
        source = src.get("component", "") or obj.get("reportingComponent", "")
        if src.get("host"):
            source += ", " + src["host"]
        return ["<unknown>" if tl is None else human_duration(time.time() - tl),
                obj.get("type", ""), obj.get("reason", ""),
                "%s/%s" % ((inv.get("kind") or "").lower(), inv.get("name", "")),
                inv.get("fieldPath", ""), source, (obj.get("message") or "").strip(),
                "<unknown>" if tf is None else human_duration(time.time() - tf),
                int(obj.get("count") or 1), obj["metadata"]["name"]]


class NamespaceKind(Kind):
    resource, kind, namespaced, short, has_status = ("namespaces", "Namespace", False,
                                                     ("ns",), True)
    extra_fields = ("status.phase", "name")
    verbs = ["create", "delete", "get", "list", "patch", "update", "watch"]

    def name_errors(self, name):
        return is_dns1123_label(name)

    def defaults(self, obj):
        name = obj["metadata"].get("name")
        if name:
            obj["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = name
        obj.setdefault("spec", {})
        st = obj.setdefault("status", {})
        if not st.get("phase"):
            st["phase"] = "Active"

    def prepare_create(self, obj):
        obj["status"] = {"phase": "Active"}
        fins = obj.setdefault("spec", {}).setdefault("finalizers", [])
        if "kubernetes" not in fins:
            fins.append("kubernetes")

    def prepare_update(self, new, old):
        super().prepare_update(new, old)
        new.setdefault("spec", {})
        if "finalizers" in (old.get("spec") or {}):
            new["spec"]["finalizers"] = clone(old["spec"]["finalizers"])
        else:
            new["spec"].pop("finalizers", None)

    def empty(self):
        return {"spec": {}, "status": {}}

    def columns(self):
        return [NAME_COL, col("Status"), AGE_COL]

    def row(self, obj):
        return [obj["metadata"]["name"], (obj.get("status") or {}).get("phase", ""),
                age(obj["metadata"])]


class NodeKind(Kind):
    resource, kind, namespaced, short, has_status = ("nodes", "Node", False, ("no",), True)
    extra_fields = ("spec.unschedulable",)
    smp = {**SMP_META, **{("status", "conditions"): ("merge", "type"),
                            ("status", "addresses"): ("merge", "type"),
                            ("spec", "taints"): ("merge", "key")}}

    def normalize(self, obj):
        super().normalize(obj)
        canon_status(obj, ("capacity", "allocatable"),
                     ("lastHeartbeatTime", "lastTransitionTime"))

    def defaults(self, obj):
        obj.setdefault("spec", {})
        st = obj.setdefault("status", {})
        if st.get("capacity") and not st.get("allocatable"):
            st["allocatable"] = dict(st["capacity"])
        st.setdefault("daemonEndpoints", {"kubeletEndpoint": {"Port": 0}})
        st.setdefault("nodeInfo", {k: "" for k in (
            "machineID", "systemUUID", "bootID", "kernelVersion", "osImage",
            "containerRuntimeVersion", "kubeletVersion", "kubeProxyVersion",
            "operatingSystem", "architecture")})

    def empty(self):
        d = {"spec": {}, "status": {}}
        self.defaults(d)
        return d

    def columns(self):
        return [NAME_COL, col("Status"), col("Roles"), AGE_COL, col("Version"),
                col("Internal-IP", priority=1), col("External-IP", priority=1),
                col("OS-Image", priority=1), col("Kernel-Version", priority=1),
                col("Container-Runtime", priority=1)]

    def row(self, obj):
        st = obj.get("status") or {}
        status = "Unknown"
        for c in st.get("conditions") or []:
            if c.get("type") == "Ready":
                status = "Ready" if c.get("status") == "True" else "NotReady"
        if (obj.get("spec") or {}).get("unschedulable"):
            status += ",SchedulingDisabled"
        labels = obj["metadata"].get("labels") or {}
        roles = sorted(k.split("/", 1)[1] for k in labels
                       if k.startswith("node-role.kubernetes.io/") and "/" in k)
        addrs = {a.get("type"): a.get("address") for a in st.get("addresses") or []}
        info = st.get("nodeInfo") or {}
        return [obj["metadata"]["name"], status, ",".join(roles) or "<none>",
                age(obj["metadata"]), info.get("kubeletVersion", ""),
                addrs.get("InternalIP", "<none>"), addrs.get("ExternalIP", "<none>"),
                info.get("osImage", "<unknown>"), info.get("kernelVersion", "<unknown>"),
                info.get("containerRuntimeVersion", "<unknown>")]


class PodKind(Kind):
    resource, kind, short, has_status, categories = ("pods", "Pod", ("po",), True, ("all",))
    extra_fields = ("spec.nodeName", "spec.restartPolicy", "spec.schedulerName",
                    "spec.serviceAccountName", "spec.hostNetwork", "status.phase",
                    "status.podIP", "status.nominatedNodeName")
    smp = {**SMP_META, **{("spec", "containers"): ("merge", "name"),
                            ("spec", "initContainers"): ("merge", "name"),
                            ("spec", "volumes"): ("merge", "name"),
                            ("spec", "containers", "*", "env"): ("merge", "name"),
                            ("spec", "containers", "*", "ports"): ("merge", "containerPort"),
                            ("spec", "containers", "*", "volumeMounts"): ("merge", "mountPath"),
                            ("status", "conditions"): ("merge", "type")}}

    def defaults(self, obj):
        spec = obj.setdefault("spec", {})
        spec.setdefault("restartPolicy", "Always")
        spec.setdefault("dnsPolicy", "ClusterFirst")
        spec.setdefault("schedulerName", "default-scheduler")
        spec.setdefault("terminationGracePeriodSeconds", 30)
        st = obj.setdefault("status", {})
        if not st.get("phase"):
            st["phase"] = "Pending"

    def prepare_create(self, obj):
        obj["status"] = {"phase": "Pending", "qosClass": "BestEffort"}

    def validate_spec(self, obj, errs):
        spec = obj.get("spec") or {}
        if not spec.get("containers"):
            errs.append(required("spec.containers"))
        names = set()
        for i, c in enumerate(spec.get("containers") or []):
            if not c.get("name"):
                errs.append(required("spec.containers[%d].name" % i))
            elif c["name"] in names:
                errs.append(FieldError("duplicate", "spec.containers[%d].name" % i, c["name"]))
            names.add(c.get("name"))
            if not c.get("image"):
                errs.append(required("spec.containers[%d].image" % i))

    def empty(self):
        return {"spec": {"containers": None}, "status": {}}

    def columns(self):
        return [NAME_COL, col("Ready"), col("Status"), col("Restarts", "string"), AGE_COL,
                col("IP", priority=1), col("Node", priority=1),
                col("Nominated Node", priority=1), col("Readiness Gates", priority=1)]

    def row(self, obj):
        spec, st = obj.get("spec") or {}, obj.get("status") or {}
        total = len(spec.get("containers") or [])
        ready = sum(1 for c in st.get("containerStatuses") or [] if c.get("ready"))
        phase = st.get("phase", "")
        if obj["metadata"].get("deletionTimestamp"):
            phase = "Terminating"
        return [obj["metadata"]["name"], "%d/%d" % (ready, total), phase, "0",
                age(obj["metadata"]), st.get("podIP") or "<none>",
                spec.get("nodeName") or "<none>", "<none>", "<none>"]


class LeaseKind(Kind):
    resource, kind, group, return_deleted = ("leases", "Lease", "coordination.k8s.io", False)

    def normalize(self, obj):
        super().normalize(obj)
        spec = obj.get("spec")
        if isinstance(spec, dict):
            for f in ("acquireTime", "renewTime"):
                if f in spec:
                    spec[f] = canon_micro(spec[f])
                    if spec[f] is None:
                        del spec[f]
            for f in ("leaseDurationSeconds", "leaseTransitions"):
                v = spec.get(f)
                if v is not None and (not isinstance(v, int) or isinstance(v, bool)):
                    raise DecodeError("json: cannot unmarshal %s into Go struct field "
                                      "LeaseSpec.spec.%s of type int32"
                                      % (type(v).__name__, f))

    def defaults(self, obj):
        obj.setdefault("spec", {})

    def validate_spec(self, obj, errs):
        spec = obj.get("spec") or {}
        d = spec.get("leaseDurationSeconds")
        if d is not None and d <= 0:
            errs.append(invalid("spec.leaseDurationSeconds", d, "must be greater than 0"))
        t = spec.get("leaseTransitions")
        if t is not None and t < 0:
            errs.append(invalid("spec.leaseTransitions", t,
                                "must be greater than or equal to 0"))

    def empty(self):
        return {"spec": {}}

    def columns(self):
        return [NAME_COL, col("Holder"), AGE_COL]

    def row(self, obj):
        return [obj["metadata"]["name"], (obj.get("spec") or {}).get("holderIdentity", ""),
                age(obj["metadata"])]
