"""apps/v1 workloads (what manifests/ installs): Deployment and DaemonSet, with the pod
template's defaulting and validation. No controllers run them: their status stays as
created, no pods appear.
"""

from ..errors import (FieldError, forbidden, go_label_selector, go_string_map, GoRepr, invalid,
                      not_supported, required)
from .base import AGE_COL, col, go_order, Kind, META_ORDER, NAME_COL, SMP_META
from ..quantity import age, canon_resource_list, canon_time
from ..selectors import label_selector_from_struct, labels_match
from ..validation import is_dns1123_label

CONTAINER_ORDER = ("name", "image", "command", "args", "workingDir", "ports", "envFrom", "env",
                   "resources", "resizePolicy", "restartPolicy", "volumeMounts",
                   "volumeDevices", "livenessProbe", "readinessProbe", "startupProbe",
                   "lifecycle", "terminationMessagePath", "terminationMessagePolicy",
                   "imagePullPolicy", "securityContext", "stdin", "stdinOnce", "tty")
POD_SPEC_ORDER = ("volumes", "initContainers", "containers", "ephemeralContainers",
                  "restartPolicy", "terminationGracePeriodSeconds", "activeDeadlineSeconds",
                  "dnsPolicy", "nodeSelector", "serviceAccountName", "serviceAccount",
                  "automountServiceAccountToken", "nodeName", "hostNetwork", "hostPID",
                  "hostIPC", "shareProcessNamespace", "securityContext", "imagePullSecrets",
                  "hostname", "subdomain", "affinity", "schedulerName", "tolerations",
                  "hostAliases", "priorityClassName", "priority", "dnsConfig",
                  "readinessGates", "runtimeClassName", "enableServiceLinks",
                  "preemptionPolicy", "overhead", "topologySpreadConstraints",
                  "setHostnameAsFQDN", "os", "hostUsers", "schedulingGates", "resourceClaims",
                  "resources")


def image_tag(image):
    """The tag of an image reference as docker's parser sees it ("latest" when none)."""
    name, _, digest = (image or "").partition("@")
    last = name.rsplit("/", 1)[-1]
    if ":" in last:
        return last.split(":", 1)[1]
    return "" if digest else "latest"


def _normalize_pod_template(spec):
    """Decode-level canonicalisation of spec.template (quantities of container resources)."""
    tmpl = spec.get("template") if isinstance(spec, dict) else None
    ps = tmpl.get("spec") if isinstance(tmpl, dict) else None
    if not isinstance(ps, dict):
        return
    for f in ("containers", "initContainers"):
        for c in ps.get(f) or []:
            r = c.get("resources") if isinstance(c, dict) else None
            if isinstance(r, dict):
                for k in ("limits", "requests"):
                    if k in r:
                        r[k] = canon_resource_list(r[k])
    m = tmpl.get("metadata")
    if isinstance(m, dict) and m.get("creationTimestamp"):
        m["creationTimestamp"] = canon_time(m["creationTimestamp"])


def _default_probe(p):
    if not isinstance(p, dict):
        return
    for k, v in (("timeoutSeconds", 1), ("periodSeconds", 10), ("successThreshold", 1),
                 ("failureThreshold", 3)):
        if not p.get(k):
            p[k] = v
    hg = p.get("httpGet")
    if isinstance(hg, dict):
        if not hg.get("path"):
            hg["path"] = "/"
        if not hg.get("scheme"):
            hg["scheme"] = "HTTP"


def _default_container(c):
    """k8s.io/kubernetes/pkg/apis/core/v1 SetDefaults_Container and friends."""
    if not c.get("terminationMessagePath"):
        c["terminationMessagePath"] = "/dev/termination-log"
    if not c.get("terminationMessagePolicy"):
        c["terminationMessagePolicy"] = "File"
    if not c.get("imagePullPolicy"):
        c["imagePullPolicy"] = "Always" if image_tag(c.get("image")) == "latest" \
            else "IfNotPresent"
    if c.get("resources") is None:
        c["resources"] = {}  # a struct, never omitted
    for p in c.get("ports") or []:
        if isinstance(p, dict) and not p.get("protocol"):
            p["protocol"] = "TCP"
    for f in ("livenessProbe", "readinessProbe", "startupProbe"):
        _default_probe(c.get(f))
    for e in c.get("env") or []:
        fr = ((e.get("valueFrom") or {}) if isinstance(e, dict) else {}).get("fieldRef")
        if isinstance(fr, dict) and not fr.get("apiVersion"):
            fr["apiVersion"] = "v1"
    ordered = go_order(c, CONTAINER_ORDER)
    c.clear()
    c.update(ordered)


def _default_pod_template(spec):
    """PodTemplateSpec defaults (SetDefaults_PodSpec: not the Pod-only ones)."""
    tmpl = spec.get("template")
    if not isinstance(tmpl, dict):
        tmpl = spec["template"] = {}
    m = tmpl.get("metadata")
    if not isinstance(m, dict):
        m = {}
    # ObjectMeta is a struct: the template's creationTimestamp is encoded as null.
    m.setdefault("creationTimestamp", None)
    tmpl["metadata"] = go_order(m, META_ORDER)
    ps = tmpl.get("spec")
    if not isinstance(ps, dict):
        ps = {}
    if not ps.get("restartPolicy"):
        ps["restartPolicy"] = "Always"
    if ps.get("terminationGracePeriodSeconds") is None:
        ps["terminationGracePeriodSeconds"] = 30
    if not ps.get("dnsPolicy"):
        ps["dnsPolicy"] = "ClusterFirst"
    if ps.get("securityContext") is None:
        ps["securityContext"] = {}
    if not ps.get("schedulerName"):
        ps["schedulerName"] = "default-scheduler"
    for f in ("containers", "initContainers"):
        for c in ps.get(f) or []:
            if isinstance(c, dict):
                _default_container(c)
    for v in ps.get("volumes") or []:
        if not isinstance(v, dict):
            continue
        if isinstance(v.get("hostPath"), dict) and v["hostPath"].get("type") is None:
            v["hostPath"]["type"] = ""
        if set(v) <= {"name"}:
            v["emptyDir"] = {}
    tmpl["spec"] = go_order(ps, POD_SPEC_ORDER)
    ordered = go_order(tmpl, ("metadata", "spec"))
    tmpl.clear()
    tmpl.update(ordered)


def _validate_pod_template(spec, kind_word, errs):
    """Selector and template checks shared by Deployment and DaemonSet (a subset of
    ValidateDeploymentSpec / ValidateDaemonSetSpec)."""
    sel = spec.get("selector")
    if sel is None:
        errs.append(required("spec.selector"))
    elif not isinstance(sel, dict) or not (sel.get("matchLabels") or
                                           sel.get("matchExpressions")):
        errs.append(invalid("spec.selector", go_label_selector(sel if isinstance(sel, dict)
                                                               else {}),
                            "empty selector is invalid for %s" % kind_word))
    tmpl = spec.get("template") or {}
    labels = (tmpl.get("metadata") or {}).get("labels")
    if isinstance(sel, dict) and (sel.get("matchLabels") or sel.get("matchExpressions")) and \
            not labels_match(label_selector_from_struct(sel), labels or {}):
        errs.append(invalid("spec.template.metadata.labels", GoRepr(go_string_map(labels)),
                            "`selector` does not match template `labels`"))
    ps = tmpl.get("spec") or {}
    cs = ps.get("containers")
    if not cs:
        errs.append(required("spec.template.spec.containers"))
    names = set()
    for i, c in enumerate(cs or []):
        p = "spec.template.spec.containers[%d]" % i
        name = c.get("name") if isinstance(c, dict) else None
        if not name:
            errs.append(required(p + ".name"))
            continue
        for m in is_dns1123_label(name):
            errs.append(invalid(p + ".name", name, m))
        if name in names:
            errs.append(FieldError("duplicate", p + ".name", name))
        names.add(name)
    rp = ps.get("restartPolicy")
    if rp != "Always":
        errs.append(not_supported("spec.template.spec.restartPolicy", rp or "", ["Always"]))
    vnames = set()
    for i, v in enumerate(ps.get("volumes") or []):
        n = v.get("name") if isinstance(v, dict) else None
        if not n:
            errs.append(required("spec.template.spec.volumes[%d].name" % i))
        elif n in vnames:
            errs.append(FieldError("duplicate", "spec.template.spec.volumes[%d].name" % i, n))
        vnames.add(n)
    for i, c in enumerate(cs or []):
        for j, vm in enumerate((c.get("volumeMounts") if isinstance(c, dict) else None) or []):
            if isinstance(vm, dict) and vm.get("name") not in vnames:
                errs.append(FieldError("notfound", "spec.template.spec.containers[%d]."
                                       "volumeMounts[%d].name" % (i, j), vm.get("name")))


def _pod_template_smp(prefix):
    """Strategic merge keys of a PodTemplateSpec at prefix (k8s.io/api/core/v1 tags)."""
    ps = prefix + ("spec",)
    d = {prefix + ("metadata", "finalizers"): ("merge", None),
         prefix + ("metadata", "ownerReferences"): ("merge", "uid"),
         ps + ("volumes",): ("merge", "name"),
         ps + ("imagePullSecrets",): ("merge", "name"),
         ps + ("hostAliases",): ("merge", "ip"),
         ps + ("topologySpreadConstraints",): ("merge", "topologyKey"),
         ps + ("schedulingGates",): ("merge", "name"),
         ps + ("resourceClaims",): ("merge", "name")}
    for cs in ("containers", "initContainers", "ephemeralContainers"):
        d[ps + (cs,)] = ("merge", "name")
        d[ps + (cs, "*", "env")] = ("merge", "name")
        d[ps + (cs, "*", "ports")] = ("merge", "containerPort")
        d[ps + (cs, "*", "volumeMounts")] = ("merge", "mountPath")
        d[ps + (cs, "*", "volumeDevices")] = ("merge", "devicePath")
    return d


def _template_cols():
    return [col("Containers", priority=1, desc="Names of each container in the template."),
            col("Images", priority=1, desc="Images referenced by each container in the "
                "template."),
            col("Selector", priority=1, desc="A label query over pods that are managed by the "
                "daemon set.")]


def _template_cells(obj):
    spec = obj.get("spec") or {}
    cs = ((spec.get("template") or {}).get("spec") or {}).get("containers") or []
    sel = spec.get("selector") or {}
    parts = ["%s=%s" % (k, v) for k, v in sorted((sel.get("matchLabels") or {}).items())]
    for e in sel.get("matchExpressions") or []:
        op = e.get("operator")
        vals = ",".join(sorted(e.get("values") or []))
        if op == "In":
            parts.append("%s in (%s)" % (e.get("key"), vals))
        elif op == "NotIn":
            parts.append("%s notin (%s)" % (e.get("key"), vals))
        elif op == "Exists":
            parts.append(e.get("key"))
        elif op == "DoesNotExist":
            parts.append("!" + e.get("key"))
    return [",".join(c.get("name", "") for c in cs), ",".join(c.get("image", "") for c in cs),
            ",".join(parts) or "<none>"]


def _default_rolling_update(spec, field, defaults):
    """spec[field] (a Deployment's strategy, a DaemonSet's updateStrategy) defaults to type
    RollingUpdate, whose rollingUpdate gets the (key, value) defaults that are unset."""
    st = spec.get(field)
    if not isinstance(st, dict):
        st = spec[field] = {}
    if not st.get("type"):
        st["type"] = "RollingUpdate"
    if st["type"] == "RollingUpdate":
        ru = st.get("rollingUpdate")
        if not isinstance(ru, dict):
            ru = st["rollingUpdate"] = {}
        for k, v in defaults:
            if ru.get(k) is None:
                ru[k] = v


class WorkloadKind(Kind):
    """Common strategy of Deployment and DaemonSet: generation, status kept on update."""
    group, has_status, categories = "apps", True, ("all",)

    def normalize(self, obj):
        super().normalize(obj)
        _normalize_pod_template(obj.get("spec"))

    def initial_status(self):
        return {}

    def defaults(self, obj):
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            spec = obj["spec"] = {}
        if spec.get("revisionHistoryLimit") is None:
            spec["revisionHistoryLimit"] = 10
        _default_pod_template(spec)
        if not isinstance(obj.get("status"), dict):
            obj["status"] = self.initial_status()

    def prepare_create(self, obj):
        obj["status"] = self.initial_status()
        obj["metadata"]["generation"] = 1

    def bumps_generation(self, new, old):
        return new.get("spec") != old.get("spec")

    def prepare_update(self, new, old):
        super().prepare_update(new, old)
        self.defaults(new)
        gen = old["metadata"].get("generation", 1)
        if self.bumps_generation(new, old):
            gen += 1
        new["metadata"]["generation"] = gen

    def prepare_status(self, new, old):
        super().prepare_status(new, old)
        if "generation" in old["metadata"]:
            new["metadata"]["generation"] = old["metadata"]["generation"]

    def validate_update(self, new, old):
        errs = self.validate(new)
        if (new.get("spec") or {}).get("selector") != (old.get("spec") or {}).get("selector"):
            errs.append(invalid("spec.selector", go_label_selector(
                (new.get("spec") or {}).get("selector")), "field is immutable"))
        return errs


class DeploymentKind(WorkloadKind):
    resource, kind, short = "deployments", "Deployment", ("deploy",)
    smp = {**SMP_META, **_pod_template_smp(("spec", "template")),
           ("status", "conditions"): ("merge", "type")}

    def defaults(self, obj):
        super().defaults(obj)
        spec = obj["spec"]
        if spec.get("replicas") is None:
            spec["replicas"] = 1
        _default_rolling_update(spec, "strategy", (("maxUnavailable", "25%"),
                                                   ("maxSurge", "25%")))
        if spec.get("progressDeadlineSeconds") is None:
            spec["progressDeadlineSeconds"] = 600
        obj["spec"] = go_order(spec, ("replicas", "selector", "template", "strategy",
                                      "minReadySeconds", "revisionHistoryLimit", "paused",
                                      "progressDeadlineSeconds"))

    def bumps_generation(self, new, old):
        # Annotations are copied to the ReplicaSets: they bump the generation too.
        return new.get("spec") != old.get("spec") or \
            (new["metadata"].get("annotations") or {}) != \
            (old["metadata"].get("annotations") or {})

    def validate_spec(self, obj, errs):
        spec = obj.get("spec") or {}
        r = spec.get("replicas")
        if isinstance(r, int) and r < 0:
            errs.append(invalid("spec.replicas", r, "must be greater than or equal to 0"))
        st = spec.get("strategy") or {}
        if st.get("type") not in ("Recreate", "RollingUpdate"):
            errs.append(not_supported("spec.strategy.type", st.get("type") or "",
                                      ["Recreate", "RollingUpdate"]))
        elif st["type"] == "Recreate" and st.get("rollingUpdate") is not None:
            errs.append(forbidden("spec.strategy.rollingUpdate", "may not be specified when "
                                  "strategy `type` is 'Recreate'"))
        _validate_pod_template(spec, "deployment", errs)

    def empty(self):
        return {"spec": {"selector": None, "template": {"metadata": {"creationTimestamp": None},
                                                        "spec": {"containers": None}},
                         "strategy": {}}, "status": {}}

    def columns(self):
        return [NAME_COL, col("Ready", desc="Number of the pod with ready state"),
                col("Up-to-date", desc="Total number of non-terminated pods targeted by this "
                    "deployment that have the desired template spec."),
                col("Available", desc="Total number of available pods (ready for at least "
                    "minReadySeconds) targeted by this deployment."),
                AGE_COL] + _template_cols()

    def row(self, obj):
        spec, st = obj.get("spec") or {}, obj.get("status") or {}
        return [obj["metadata"]["name"], "%d/%d" % (st.get("readyReplicas", 0),
                                                    spec.get("replicas", 0)),
                st.get("updatedReplicas", 0), st.get("availableReplicas", 0),
                age(obj["metadata"])] + _template_cells(obj)


DS_TEMPLATE_GENERATION = "deprecated.daemonset.template.generation"


class DaemonSetKind(WorkloadKind):
    resource, kind, short = "daemonsets", "DaemonSet", ("ds",)
    smp = {**SMP_META, **_pod_template_smp(("spec", "template")),
           ("status", "conditions"): ("merge", "type")}

    def initial_status(self):
        return {"currentNumberScheduled": 0, "numberMisscheduled": 0,
                "desiredNumberScheduled": 0, "numberReady": 0}

    def defaults(self, obj):
        super().defaults(obj)
        spec = obj["spec"]
        _default_rolling_update(spec, "updateStrategy", (("maxUnavailable", 1),
                                                         ("maxSurge", 0)))
        for k, v in self.initial_status().items():
            obj["status"].setdefault(k, v)
        obj["spec"] = go_order(spec, ("selector", "template", "updateStrategy",
                                      "minReadySeconds", "revisionHistoryLimit"))

    @staticmethod
    def _template_generation(meta):
        try:
            return int((meta.get("annotations") or {}).get(DS_TEMPLATE_GENERATION, "0"))
        except ValueError:
            return 0

    def prepare_create(self, obj):
        super().prepare_create(obj)
        # spec.templateGeneration of the internal type, shown in apps/v1 as an annotation.
        meta = obj["metadata"]
        tg = max(self._template_generation(meta), 1)
        meta.setdefault("annotations", {})[DS_TEMPLATE_GENERATION] = str(tg)

    def prepare_update(self, new, old):
        WorkloadKind.prepare_update(self, new, old)
        tg = self._template_generation(old["metadata"])
        gen = old["metadata"].get("generation", 1)
        if (new["spec"].get("template") != (old.get("spec") or {}).get("template")):
            tg += 1
            gen += 1
        elif new.get("spec") != old.get("spec"):
            gen += 1
        new["metadata"]["generation"] = gen
        if tg:
            new["metadata"].setdefault("annotations", {})[DS_TEMPLATE_GENERATION] = str(tg)

    def validate_spec(self, obj, errs):
        spec = obj.get("spec") or {}
        us = spec.get("updateStrategy") or {}
        if us.get("type") not in ("OnDelete", "RollingUpdate"):
            errs.append(not_supported("spec.updateStrategy.type", us.get("type") or "",
                                      ["OnDelete", "RollingUpdate"]))
        _validate_pod_template(spec, "daemonset", errs)

    def empty(self):
        return {"spec": {"selector": None, "template": {"metadata": {"creationTimestamp": None},
                                                        "spec": {"containers": None}},
                         "updateStrategy": {}}, "status": self.initial_status()}

    def columns(self):
        return [NAME_COL,
                col("Desired", "integer", desc="The total number of nodes that should be "
                    "running the daemon pod (including nodes correctly running the daemon "
                    "pod)."),
                col("Current", "integer", desc="The number of nodes that are running at least 1 "
                    "daemon pod and are supposed to run the daemon pod."),
                col("Ready", "integer", desc="The number of nodes that should be running the "
                    "daemon pod and have one or more of the daemon pod running with a Ready "
                    "Condition."),
                col("Up-to-date", "integer", desc="The total number of nodes that are running "
                    "updated daemon pod"),
                col("Available", "integer", desc="The number of nodes that should be running "
                    "the daemon pod and have one or more of the daemon pod running and "
                    "available (ready for at least spec.minReadySeconds)"),
                col("Node Selector", desc="NodeSelector is a selector which must be true for "
                    "the pod to fit on a node."),
                AGE_COL] + _template_cols()

    def row(self, obj):
        st = obj.get("status") or {}
        ns = ((obj.get("spec") or {}).get("template") or {}).get("spec", {}).get(
            "nodeSelector") or {}
        return [obj["metadata"]["name"], st.get("desiredNumberScheduled", 0),
                st.get("currentNumberScheduled", 0), st.get("numberReady", 0),
                st.get("updatedNumberScheduled", 0), st.get("numberAvailable", 0),
                ",".join("%s=%s" % kv for kv in sorted(ns.items())) or "<none>",
                age(obj["metadata"])] + _template_cells(obj)
