"""ServiceAccount and the RBAC kinds (Role, ClusterRole, RoleBinding, ClusterRoleBinding):
what manifests/ installs. The authorizer that reads them is in ..auth.
"""

from ..errors import go_quote, GoRepr, invalid, not_supported, required
from .base import AGE_COL, col, go_order, Kind, NAME_COL, SMP_META
from ..quantity import age
from ..validation import is_dns1123_subdomain, is_path_segment_name


class ServiceAccountKind(Kind):
    resource, kind, short = "serviceaccounts", "ServiceAccount", ("sa",)
    order = ("metadata", "secrets", "imagePullSecrets", "automountServiceAccountToken")
    smp = {**SMP_META, ("secrets",): ("merge", "name")}

    def columns(self):
        return [NAME_COL, col("Secrets", desc="Secrets is a list of the secrets in the same "
                              "namespace that pods running using this ServiceAccount are "
                              "allowed to use."), AGE_COL]

    def row(self, obj):
        return [obj["metadata"]["name"], len(obj.get("secrets") or []), age(obj["metadata"])]


RBAC_GROUP = "rbac.authorization.k8s.io"
RULE_ORDER = ("verbs", "apiGroups", "resources", "resourceNames", "nonResourceURLs")


class RoleKind(Kind):
    resource, kind, group = "roles", "Role", RBAC_GROUP
    order = ("metadata", "rules", "aggregationRule")

    def name_errors(self, name):
        return is_path_segment_name(name)

    def defaults(self, obj):
        if "rules" not in obj:
            obj["rules"] = None  # not omitempty
        for i, r in enumerate(obj.get("rules") or []):
            if isinstance(r, dict):
                obj["rules"][i] = go_order(r, RULE_ORDER)

    def validate_spec(self, obj, errs):
        for i, r in enumerate(obj.get("rules") or []):
            p = "rules[%d]" % i
            r = r if isinstance(r, dict) else {}
            if not r.get("verbs"):
                errs.append(required(p + ".verbs", "verbs must contain at least one value"))
            if r.get("nonResourceURLs"):
                if self.namespaced:
                    errs.append(invalid(p + ".nonResourceURLs", r["nonResourceURLs"],
                                        "namespaced rules cannot apply to non-resource URLs"))
                if r.get("apiGroups") or r.get("resources") or r.get("resourceNames"):
                    errs.append(invalid(p + ".nonResourceURLs", r["nonResourceURLs"],
                                        "rules cannot apply to both regular resources and "
                                        "non-resource URLs"))
                continue
            if not r.get("apiGroups"):
                errs.append(required(p + ".apiGroups",
                                     "resource rules must supply at least one api group"))
            if not r.get("resources"):
                errs.append(required(p + ".resources",
                                     "resource rules must supply at least one resource"))

    def empty(self):
        return {"rules": None}

    def columns(self):
        return [NAME_COL, col("Created At", "date", desc="CreationTimestamp is a timestamp "
                              "representing the server time when this object was created.")]

    def row(self, obj):
        return [obj["metadata"]["name"], obj["metadata"].get("creationTimestamp")]


class ClusterRoleKind(RoleKind):
    resource, kind, namespaced = "clusterroles", "ClusterRole", False

    def validate_spec(self, obj, errs):
        super().validate_spec(obj, errs)
        ag = obj.get("aggregationRule")
        if ag is not None and not (ag or {}).get("clusterRoleSelectors"):
            errs.append(required("aggregationRule.clusterRoleSelectors", "at least one "
                                 "clusterRoleSelector required if aggregationRule is non-nil"))


SUBJECT_ORDER = ("kind", "apiGroup", "name", "namespace")


def go_role_ref(rr):
    return GoRepr('rbac.RoleRef{APIGroup:%s, Kind:%s, Name:%s}' % (
        go_quote(rr.get("apiGroup", "")), go_quote(rr.get("kind", "")),
        go_quote(rr.get("name", ""))))


class RoleBindingKind(Kind):
    resource, kind, group = "rolebindings", "RoleBinding", RBAC_GROUP
    order = ("metadata", "subjects", "roleRef")
    role_kinds = ["Role", "ClusterRole"]

    def name_errors(self, name):
        return is_path_segment_name(name)

    def defaults(self, obj):
        rr = obj.get("roleRef")
        if not isinstance(rr, dict):
            rr = {}
        if not rr.get("apiGroup"):
            rr["apiGroup"] = RBAC_GROUP
        obj["roleRef"] = go_order(rr, ("apiGroup", "kind", "name"))
        for i, s in enumerate(obj.get("subjects") or []):
            if not isinstance(s, dict):
                continue
            if not s.get("apiGroup") and s.get("kind") in ("User", "Group"):
                s["apiGroup"] = RBAC_GROUP
            obj["subjects"][i] = go_order(s, SUBJECT_ORDER)

    def validate_spec(self, obj, errs):
        rr = obj.get("roleRef") or {}
        if rr.get("apiGroup") != RBAC_GROUP:
            errs.append(not_supported("roleRef.apiGroup", rr.get("apiGroup", ""), [RBAC_GROUP]))
        if rr.get("kind") not in self.role_kinds:
            errs.append(not_supported("roleRef.kind", rr.get("kind", ""), self.role_kinds))
        if not rr.get("name"):
            errs.append(required("roleRef.name"))
        else:
            for m in is_path_segment_name(rr["name"]):
                errs.append(invalid("roleRef.name", rr["name"], m))
        for i, s in enumerate(obj.get("subjects") or []):
            p = "subjects[%d]" % i
            s = s if isinstance(s, dict) else {}
            if not s.get("name"):
                errs.append(required(p + ".name"))
            k = s.get("kind")
            if k == "ServiceAccount":
                if s.get("name"):
                    for m in is_dns1123_subdomain(s["name"]):
                        errs.append(invalid(p + ".name", s["name"], m))
                if s.get("apiGroup"):
                    errs.append(not_supported(p + ".apiGroup", s["apiGroup"], [""]))
                if not self.namespaced and not s.get("namespace"):
                    errs.append(required(p + ".namespace"))
            elif k in ("User", "Group"):
                if s.get("apiGroup") != RBAC_GROUP:
                    errs.append(not_supported(p + ".apiGroup", s.get("apiGroup", ""),
                                              [RBAC_GROUP]))
            else:
                errs.append(not_supported(p + ".kind", k or "",
                                          ["ServiceAccount", "User", "Group"]))

    def validate_update(self, new, old):
        errs = self.validate(new)
        if new.get("roleRef") != old.get("roleRef"):
            errs.append(invalid("roleRef", go_role_ref(new.get("roleRef") or {}),
                                "cannot change roleRef"))
        return errs

    def empty(self):
        return {"roleRef": {"apiGroup": "", "kind": "", "name": ""}}

    def columns(self):
        return [NAME_COL, col("Role", desc="RoleRef can reference a Role in the current "
                              "namespace or a ClusterRole in the global namespace."), AGE_COL,
                col("Users", priority=1, desc="Users in the roleBinding"),
                col("Groups", priority=1, desc="Groups in the roleBinding"),
                col("ServiceAccounts", priority=1, desc="ServiceAccounts in the roleBinding")]

    def row(self, obj):
        rr = obj.get("roleRef") or {}
        users, groups, sas = [], [], []
        for s in obj.get("subjects") or []:
            k = s.get("kind")
            if k == "User":
                users.append(s.get("name", ""))
            elif k == "Group":
                groups.append(s.get("name", ""))
            elif k == "ServiceAccount":
                sas.append("%s/%s" % (s["namespace"], s.get("name", "")) if s.get("namespace")
                           else s.get("name", ""))
        return [obj["metadata"]["name"], "%s/%s" % (rr.get("kind", ""), rr.get("name", "")),
                age(obj["metadata"]), ", ".join(users), ", ".join(groups), ", ".join(sas)]


class ClusterRoleBindingKind(RoleBindingKind):
    resource, kind, namespaced = "clusterrolebindings", "ClusterRoleBinding", False
    role_kinds = ["ClusterRole"]
