"""Name, label, annotation and finalizer validation
(k8s.io/apimachinery/pkg/util/validation), ObjectMeta validation and path segment names.
"""

import re

from .errors import FieldError, forbidden, invalid, required


# Name and label validation (k8s.io/apimachinery/pkg/util/validation)
# ---------------------------------------------------------------------------------------

def _regex_error(msg, fmt, *examples):
    if not examples:
        return msg + " (regex used for validation is '" + fmt + "')"
    msg += " (e.g. "
    for i, ex in enumerate(examples):
        if i > 0:
            msg += " or "
        msg += "'" + ex + "', "
    return msg + "regex used for validation is '" + fmt + "')"


_DNS1123_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUB_FMT = _DNS1123_LABEL_FMT + "(\\." + _DNS1123_LABEL_FMT + ")*"
_DNS1123_LABEL_RE = re.compile("^" + _DNS1123_LABEL_FMT + "$")
_DNS1123_SUB_RE = re.compile("^" + _DNS1123_SUB_FMT + "$")
_QNAME_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_QNAME_RE = re.compile("^" + _QNAME_FMT + "$")
_LABELVAL_FMT = "(" + _QNAME_FMT + ")?"
_LABELVAL_RE = re.compile("^" + _LABELVAL_FMT + "$")


def is_dns1123_label(v):
    errs = []
    if len(v) > 63:
        errs.append("must be no more than 63 characters")
    if not _DNS1123_LABEL_RE.match(v):
        errs.append(_regex_error(
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or "
            "'-', and must start and end with an alphanumeric character",
            _DNS1123_LABEL_FMT, "my-name", "123-abc"))
    return errs


def is_dns1123_subdomain(v):
    errs = []
    if len(v) > 253:
        errs.append("must be no more than 253 characters")
    if not _DNS1123_SUB_RE.match(v):
        errs.append(_regex_error(
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
            "'-' or '.', and must start and end with an alphanumeric character",
            _DNS1123_SUB_FMT, "example.com"))
    return errs


def is_qualified_name(v):
    errs = []
    parts = v.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            errs.extend("prefix part " + m for m in is_dns1123_subdomain(prefix))
    else:
        return [_regex_error("a qualified name must consist of alphanumeric characters, '-', "
                             "'_' or '.', and must start and end with an alphanumeric "
                             "character", _QNAME_FMT, "MyName", "my.name", "123-abc")
                + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"]
    if not name:
        errs.append("name part must be non-empty")
    elif len(name) > 63:
        errs.append("name part must be no more than 63 characters")
    if name and not _QNAME_RE.match(name):
        errs.append(_regex_error("name part must consist of alphanumeric characters, '-', '_' "
                                 "or '.', and must start and end with an alphanumeric "
                                 "character", _QNAME_FMT, "MyName", "my.name", "123-abc"))
    return errs


def is_valid_label_value(v):
    errs = []
    if len(v) > 63:
        errs.append("must be no more than 63 characters")
    if not _LABELVAL_RE.match(v):
        errs.append(_regex_error("a valid label must be an empty string or consist of "
                                 "alphanumeric characters, '-', '_' or '.', and must start "
                                 "and end with an alphanumeric character", _LABELVAL_FMT,
                                 "MyValue", "my_value", "12345"))
    return errs


STANDARD_FINALIZERS = ("kubernetes", "orphan", "foregroundDeletion")


def validate_object_meta(meta, namespaced, name_fn, errs):
    name = meta.get("name") or ""
    if not name and not meta.get("generateName"):
        errs.append(required("metadata.name", "name or generateName is required"))
    elif name:
        for m in name_fn(name):
            errs.append(invalid("metadata.name", name, m))
    ns = meta.get("namespace") or ""
    if namespaced:
        if not ns:
            errs.append(required("metadata.namespace"))
        else:
            for m in is_dns1123_label(ns):
                errs.append(invalid("metadata.namespace", ns, m))
    elif ns:
        errs.append(forbidden("metadata.namespace", "not allowed on this type"))
    labels = meta.get("labels") or {}
    if not isinstance(labels, dict):
        labels = {}
    for k, v in labels.items():
        for m in is_qualified_name(k):
            errs.append(invalid("metadata.labels", k, m))
        for m in is_valid_label_value(v if isinstance(v, str) else ""):
            errs.append(invalid("metadata.labels", v, m))
    ann = meta.get("annotations") or {}
    total = 0
    for k, v in ann.items():
        for m in is_qualified_name(k.lower()):
            errs.append(invalid("metadata.annotations", k, m))
        total += len(k) + len(v or "")
    if total > 256 * 1024:
        errs.append(FieldError("toolong", "metadata.annotations", detail="must have at most "
                               "262144 bytes"))
    for f in meta.get("finalizers") or []:
        msgs = is_qualified_name(f)
        if msgs:
            for m in msgs:
                errs.append(invalid("metadata.finalizers", f, m))
        elif "/" not in f and f not in STANDARD_FINALIZERS:
            errs.append(forbidden("metadata.finalizers", "name is neither a standard finalizer "
                                  "name nor is it fully qualified"))
    seen = set()
    for f in meta.get("finalizers") or []:
        if f in seen:
            errs.append(FieldError("duplicate", "metadata.finalizers", f))
        seen.add(f)


def is_path_segment_name(name):
    """k8s.io/apimachinery/pkg/api/validation/path.IsValidPathSegmentName (RBAC names)."""
    for bad in (".", ".."):
        if name == bad:
            return ["may not be '%s'" % bad]
    return ["may not contain '%s'" % bad for bad in ("/", "%") if bad in name]
