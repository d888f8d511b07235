"""Authentication (bearer tokens, client certificates) and authorization (--authorization
RBAC: the RBAC authorizer over the stored Roles, ClusterRoles and their bindings).
"""

from urllib.parse import unquote

from .common import parse_go_bool
from .errors import ApiError, _details, qualified
from .validation import is_path_segment_name


# ---------------------------------------------------------------------------------------
# Authorization (--authorization RBAC): the RBAC authorizer over the stored Roles,
# ClusterRoles and their bindings, as plugin/pkg/auth/authorizer/rbac does it
# ---------------------------------------------------------------------------------------

# Non-resource paths every authenticated user may GET (the bootstrap roles system:discovery
# and system:public-info-viewer, bound to system:authenticated).
PUBLIC_PATHS = ("/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez", "/openapi",
                "/openapi/*", "/readyz", "/version", "/version/")
HTTP_VERBS = {"POST": "create", "GET": "get", "HEAD": "get", "PUT": "update", "PATCH": "patch",
              "DELETE": "delete"}


class RequestAttributes:
    """What k8s.io/apiserver's RequestInfoFactory derives from a request."""

    def __init__(self, method, path, q):
        self.path = path
        self.resource_request = False
        self.verb = method.lower()
        self.group = self.version = self.resource = self.sub = self.ns = self.name = ""
        segs = [unquote(s) for s in path.split("/") if s]
        if len(segs) >= 3 and segs[0] == "api":
            self.version, parts = segs[1], segs[2:]
        elif len(segs) >= 4 and segs[0] == "apis":
            self.group, self.version, parts = segs[1], segs[2], segs[3:]
        else:
            return
        if method not in HTTP_VERBS:
            return
        self.resource_request = True
        self.verb = HTTP_VERBS[method]
        if parts[0] == "watch" and self.verb == "get" and len(parts) > 1:
            self.verb = "watch"
            parts = parts[1:]
        if parts[0] == "namespaces" and len(parts) > 1:
            self.ns = parts[1]
            if len(parts) > 2 and parts[2] not in ("status", "finalize"):
                parts = parts[2:]
        self.resource = parts[0]
        if len(parts) >= 2:
            self.name = parts[1]
        if len(parts) >= 3:
            self.sub = parts[2]
        if not self.name and self.verb == "get":
            try:
                watch = parse_go_bool(q.get("watch") or "false")
            except ValueError:
                watch = False
            self.verb = "watch" if watch else "list"
            for term in (q.get("fieldSelector") or "").split(","):
                k, sep, v = term.partition("==") if "==" in term else term.partition("=")
                if sep and k.strip() == "metadata.name" and not is_path_segment_name(v):
                    self.name = v.strip()
        if not self.name and self.verb == "delete":
            self.verb = "deletecollection"


def _subject_applies(s, user, groups, binding_ns):
    k = s.get("kind")
    if k == "User":
        return s.get("name") == user
    if k == "Group":
        return s.get("name") in groups
    if k == "ServiceAccount":
        return user == "system:serviceaccount:%s:%s" % (s.get("namespace") or binding_ns,
                                                        s.get("name"))
    return False


def _rule_allows(r, a):
    verbs = r.get("verbs") or []
    if "*" not in verbs and a.verb not in verbs:
        return False
    if not a.resource_request:
        for u in r.get("nonResourceURLs") or []:
            if u == "*" or u == a.path or (u.endswith("*") and a.path.startswith(u[:-1])):
                return True
        return False
    groups = r.get("apiGroups") or []
    if "*" not in groups and a.group not in groups:
        return False
    combined = a.resource + ("/" + a.sub if a.sub else "")
    if not any(x == "*" or x == combined or (a.sub and x == "*/" + a.sub)
               for x in r.get("resources") or []):
        return False
    names = r.get("resourceNames") or []
    return not names or a.name in names


def rbac_allows(store, user, groups, a):
    """True when a ClusterRoleBinding, or a RoleBinding in the request's namespace, grants the
    request to the user. Caller holds the store lock."""
    if "system:masters" in groups:
        return True
    if not a.resource_request and a.verb == "get" and any(
            p == a.path or (p.endswith("*") and a.path.startswith(p[:-1]))
            for p in PUBLIC_PATHS):
        return True
    bindings = [(b, "") for b in store.objs["clusterrolebindings"].values()]
    if a.ns:
        bindings += [(b, a.ns) for k, b in store.objs["rolebindings"].items()
                     if k.startswith(a.ns + "/")]
    for b, bns in bindings:
        if not any(_subject_applies(s, user, groups, bns) for s in b.get("subjects") or []):
            continue
        rr = b.get("roleRef") or {}
        if rr.get("kind") == "ClusterRole":
            role = store.objs["clusterroles"].get(rr.get("name"))
        else:
            role = store.objs["roles"].get("%s/%s" % (bns, rr.get("name")))
        if role is not None and any(_rule_allows(r, a) for r in role.get("rules") or []):
            return True
    return False


def err_forbidden(user, a):
    if not a.resource_request:
        return ApiError(403, "Forbidden", 'forbidden: User "%s" cannot %s path "%s"'
                        % (user, a.verb, a.path), {})
    res = a.resource + ("/" + a.sub if a.sub else "")
    where = ('in the namespace "%s"' % a.ns) if a.ns else "at the cluster scope"
    why = 'User "%s" cannot %s resource "%s" in API group "%s" %s' % (user, a.verb, res,
                                                                        a.group, where)
    qr = qualified(a.resource, a.group)
    msg = ('%s "%s" is forbidden: %s' % (qr, a.name, why)) if a.name else \
        ("%s is forbidden: %s" % (qr, why))
    return ApiError(403, "Forbidden", msg, _details(a.name, a.group, a.resource))


class AuthMixin:
    """Handler methods: who is asking, and may they (mixed into handler.Handler)."""

    def authenticate(self):
        """The user name (None: unauthenticated); sets self._groups. The bearer tokens are
        the cluster admin's (system:masters); a client certificate's user is its CN and its
        groups are its O entries."""
        self._groups = ["system:authenticated"]
        auth = self.headers.get("Authorization") or ""
        if auth[:7].lower() == "bearer ":
            tok = auth[7:].strip()
            if tok in self.state.tokens:
                self._groups = ["system:masters", "system:authenticated"]
                return "admin"
        try:
            cert = self.connection.getpeercert()
        except (ValueError, AttributeError):
            cert = None
        if cert:
            cn = None
            for rdn in cert.get("subject", ()):
                for k, v in rdn:
                    if k == "commonName" and cn is None:
                        cn = v
                    elif k == "organizationName":
                        self._groups.insert(-1, v)
            return cn or "x509"
        return None

    def authorize(self, method, path, q):
        if self.state.opts.authorization != "RBAC":
            return
        a = RequestAttributes(method, path, q)
        with self.state.reg.lock:
            ok = rbac_allows(self.state.reg.store, self._user, self._groups, a)
        if not ok:
            raise err_forbidden(self._user, a)
