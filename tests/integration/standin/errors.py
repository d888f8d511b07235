"""Errors as kube-apiserver returns them: metav1.Status (ApiError and its constructors),
field errors (k8s.io/apimachinery/pkg/util/validation/field) and Go's %#v renderings of
field error values.
"""

import json

from .common import dumps


# ---------------------------------------------------------------------------------------
# Errors (metav1.Status)
# ---------------------------------------------------------------------------------------

class ApiError(Exception):
    def __init__(self, code, reason, message, details=None, headers=None, text=None,
                 status_metadata=None):
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.headers = headers or {}
        self.text = text  # plain-text body instead of a Status (APF 429)
        self.status_metadata = status_metadata or {}

    def status(self):
        st = {"kind": "Status", "apiVersion": "v1", "metadata": dict(self.status_metadata),
              "status": "Failure", "message": self.message, "reason": self.reason}
        if self.details is not None:
            st["details"] = self.details
        st["code"] = self.code
        return st


def _details(name, group, kind, **extra):
    d = {}
    if name:
        d["name"] = name
    if group:
        d["group"] = group
    if kind:
        d["kind"] = kind
    d.update(extra)
    return d


def qualified(resource, group):
    return resource if not group else resource + "." + group


def err_not_found(resource, group, name):
    return ApiError(404, "NotFound", '%s "%s" not found' % (qualified(resource, group), name),
                    _details(name, group, resource))


def err_already_exists(resource, group, name):
    return ApiError(409, "AlreadyExists",
                    '%s "%s" already exists' % (qualified(resource, group), name),
                    _details(name, group, resource))


def err_conflict(resource, group, name, why):
    return ApiError(409, "Conflict", 'Operation cannot be fulfilled on %s "%s": %s'
                    % (qualified(resource, group), name, why), _details(name, group, resource))


MSG_MODIFIED = ("the object has been modified; please apply your changes to the latest "
                "version and try again")


def err_bad_request(msg):
    return ApiError(400, "BadRequest", msg)


def err_method_not_allowed():
    return ApiError(405, "MethodNotAllowed",
                    "the server does not allow this method on the requested resource", {})


def err_path_not_found():
    return ApiError(404, "NotFound", "the server could not find the requested resource", {})


def err_expired(msg, **meta):
    return ApiError(410, "Expired", msg, status_metadata=meta)


def err_internal(msg):
    return ApiError(500, "InternalError", "Internal error occurred: %s" % msg,
                    {"causes": [{"message": msg}]})


# ---------------------------------------------------------------------------------------
# Field errors (k8s.io/apimachinery/pkg/util/validation/field)
# ---------------------------------------------------------------------------------------

_NOVAL = object()


def _fmt_value(v):
    if isinstance(v, GoRepr):
        return str(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return "null"
    if isinstance(v, (int, float)):
        return str(v)
    return dumps(v)


class FieldError:
    TYPES = {"required": ("FieldValueRequired", "Required value"),
             "invalid": ("FieldValueInvalid", "Invalid value"),
             "forbidden": ("FieldValueForbidden", "Forbidden"),
             "notsupported": ("FieldValueNotSupported", "Unsupported value"),
             "duplicate": ("FieldValueDuplicate", "Duplicate value"),
             "toolong": ("FieldValueTooLong", "Too long"),
             "notfound": ("FieldValueNotFound", "Not found")}

    def __init__(self, typ, field, value=_NOVAL, detail=""):
        self.typ, self.field, self.value, self.detail = typ, field, value, detail

    def body(self):
        _, text = self.TYPES[self.typ]
        s = text
        if self.typ in ("invalid", "notsupported", "duplicate", "notfound") and \
                self.value is not _NOVAL:
            s += ": " + _fmt_value(self.value)
        if self.detail:
            s += ": " + self.detail
        return s

    def __str__(self):
        return "%s: %s" % (self.field, self.body())


def required(field, detail=""):
    return FieldError("required", field, detail=detail)


def invalid(field, value, detail):
    return FieldError("invalid", field, value, detail)


def forbidden(field, detail):
    return FieldError("forbidden", field, detail=detail)


def not_supported(field, value, supported):
    return FieldError("notsupported", field, value,
                      "supported values: " + ", ".join('"%s"' % s for s in supported))


def err_invalid(kind, group, name, errs):
    qk = kind if not group else kind + "." + group
    if len(errs) == 1:
        agg = str(errs[0])
    else:
        agg = "[" + ", ".join(str(e) for e in errs) + "]"
    causes = [{"reason": FieldError.TYPES[e.typ][0], "message": e.body(), "field": e.field}
              for e in errs]
    return ApiError(422, "Invalid", '%s "%s" is invalid: %s' % (qk, name, agg),
                    _details(name, group, kind, causes=causes))


class GoRepr(str):
    """A field error value already rendered as Go's %#v renders it (structs, maps)."""


def go_quote(s):
    return json.dumps(s, ensure_ascii=False)


def go_string_map(m):
    if m is None:
        return "map[string]string(nil)"
    return "map[string]string{%s}" % ", ".join(
        "%s:%s" % (go_quote(k), go_quote(str(m[k]))) for k in sorted(m))


def go_label_selector(sel):
    if sel is None:
        return GoRepr("(*v1.LabelSelector)(nil)")
    exprs = sel.get("matchExpressions")
    if exprs is None:
        ex = "[]v1.LabelSelectorRequirement(nil)"
    else:
        ex = "[]v1.LabelSelectorRequirement{%s}" % ", ".join(
            'v1.LabelSelectorRequirement{Key:%s, Operator:"%s", Values:%s}' % (
                go_quote(e.get("key", "")), e.get("operator", ""),
                "[]string(nil)" if e.get("values") is None else
                "[]string{%s}" % ", ".join(go_quote(v) for v in e["values"]))
            for e in exprs if isinstance(e, dict))
    return GoRepr("&v1.LabelSelector{MatchLabels:%s, MatchExpressions:%s}"
                  % (go_string_map(sel.get("matchLabels")), ex))
