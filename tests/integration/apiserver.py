#!/usr/bin/env python3
"""A local Kubernetes API server for the hostpath-provisioner integration tests.

Python 3 standard library only. It serves HTTPS on 127.0.0.1 with a CA and server
certificate made by the openssl CLI, and behaves like kube-apiserver v1.32 wherever a
client can notice: core/v1 persistentvolumes, persistentvolumeclaims, events,
namespaces, nodes, pods; storage.k8s.io/v1 storageclasses; coordination.k8s.io/v1
leases. Verbs get, list (label/field selectors, limit/continue paging over a consistent
snapshot), watch (resume from a resourceVersion out of a bounded history, 410 when too
old, bookmarks, timeoutSeconds), create, update (optimistic concurrency), delete (with
finalizers), patch (JSON, merge, strategic merge), the status subresource, Table output
for kubectl, discovery and a minimal OpenAPI v3 for kubectl's field-validation probe.

A controller thread stands in for kube-controller-manager's PV controller (binder),
the pvc/pv-protection controllers and admission plugins (DefaultStorageClass,
StorageObjectInUseProtection), and the namespace controller.

The /admin/ endpoints (see README.md next to this file) let tests inject faults, close
watches, compact history, inject malformed watch lines and read a request log.

Usage: apiserver.py --state-dir DIR [--port 0] [--token T] [--binder on|off] ...
"""

import argparse
import base64
import bisect
import datetime
import gzip
import hashlib
import json
import math
import os
import queue
import random
import re
import select
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import traceback
import uuid
from fractions import Fraction
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

K8S_VERSION = {
    "major": "1",
    "minor": "32",
    "gitVersion": "v1.32.0",
    "gitCommit": "70d3cc986aa8221cd1dfb1121852688902d3bf53",
    "gitTreeState": "clean",
    "buildDate": "2024-12-11T17:59:15Z",
    "goVersion": "go1.23.3",
    "compiler": "gc",
    "platform": "linux/amd64",
}

LOG = None  # file object for DIR/apiserver.log


def log(msg):
    line = "%s %s\n" % (time.strftime("%H:%M:%S"), msg)
    f = LOG
    if f is not None:
        try:
            f.write(line)
            f.flush()
        except (OSError, ValueError):
            pass


_enc = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def dumps(obj):
    return _enc.encode(obj)


def clone(v):
    """Deep copy of a JSON value (faster than copy.deepcopy)."""
    if isinstance(v, dict):
        return {k: clone(x) for k, x in v.items()}
    if isinstance(v, list):
        return [clone(x) for x in v]
    return v


def new_uid():
    """A random (version 4) UUID without a getrandom() system call per object."""
    return str(uuid.UUID(int=random.getrandbits(128), version=4))


def now_time():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def now_micro():
    t = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + ".%06dZ" % int((t % 1) * 1e6)


def parse_go_bool(v):
    if v in ("1", "t", "T", "TRUE", "true", "True"):
        return True
    if v in ("0", "f", "F", "FALSE", "false", "False"):
        return False
    raise ValueError(v)


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


# ---------------------------------------------------------------------------------------
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


# ---------------------------------------------------------------------------------------
# Quantities (k8s.io/apimachinery/pkg/api/resource) and times
# ---------------------------------------------------------------------------------------

QTY_MSG = ("quantities must match the regular expression "
           "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")
_QTY_RE = re.compile(r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$")
_NUM_RE = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)$")
_BIN_SUFFIX = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DEC_SUFFIX = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15,
               "E": 18}
_DEC_BY_EXP = {v: k for k, v in _DEC_SUFFIX.items()}


class DecodeError(Exception):
    pass


def parse_quantity(s):
    """Returns (value as Fraction, format) where format is 'bin', 'dec' or 'exp'."""
    if isinstance(s, bool) or not isinstance(s, (str, int, float)):
        raise DecodeError(QTY_MSG)
    s = str(s).strip()
    m = _QTY_RE.match(s)
    if not m or not _NUM_RE.match(m.group(1)):
        raise DecodeError(QTY_MSG)
    num = Fraction(m.group(1))
    suf = m.group(2)
    if suf in _BIN_SUFFIX:
        return num * (2 ** _BIN_SUFFIX[suf]), "bin"
    if suf in _DEC_SUFFIX:
        return num * Fraction(10) ** _DEC_SUFFIX[suf], "dec"
    em = re.match(r"^[eE]([-+]?\d+)$", suf)
    if em:
        return num * Fraction(10) ** int(em.group(1)), "exp"
    raise DecodeError(QTY_MSG)


def format_quantity(v, fmt):
    # SetDefaults_ResourceList rounds every value up to milli scale.
    scaled = v * 1000
    if scaled.denominator != 1:
        scaled = Fraction(math.ceil(scaled) if v > 0 else math.floor(scaled))
    v = scaled / 1000
    if v == 0:
        return "0"
    if fmt == "bin":
        if -1024 < v < 1024 or v.denominator != 1:
            fmt = "dec"
        else:
            n = int(v)
            k = 0
            while k < 6 and n % 1024 == 0:
                n //= 1024
                k += 1
            return "%d%s" % (n, ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"][k])
    neg = v < 0
    a = -v if neg else v
    mant, exp = None, 0
    for e in range(18, -4, -3):
        q = a / Fraction(10) ** e
        if q.denominator == 1:
            mant, exp = int(q), e
            break
    sign = "-" if neg else ""
    if fmt == "exp":
        return "%s%d%s" % (sign, mant, "e%d" % exp if exp else "")
    return "%s%d%s" % (sign, mant, _DEC_BY_EXP[exp])


def canon_quantity(s):
    return format_quantity(*parse_quantity(s))


def quantity_value(s):
    try:
        return parse_quantity(s)[0]
    except DecodeError:
        return Fraction(0)


def canon_resource_list(rl):
    if rl is None:
        return None
    if not isinstance(rl, dict):
        raise DecodeError("json: cannot unmarshal into Go value of type v1.ResourceList")
    return {k: canon_quantity(v) for k, v in rl.items()}


def _parse_time(s):
    if not isinstance(s, str):
        raise DecodeError("parsing time %s: expected a string" % _fmt_value(s))
    try:
        t = s[:-1] + "+00:00" if s.endswith("Z") else s
        # Python 3.11 accepts at most 6 fractional digits; Go accepts nanoseconds.
        t = re.sub(r"(\.\d{6})\d+", r"\1", t)
        d = datetime.datetime.fromisoformat(t)
        if d.tzinfo is None or "T" not in s:
            raise ValueError
        return d.astimezone(datetime.timezone.utc)
    except ValueError:
        raise DecodeError('parsing time "%s" as "2006-01-02T15:04:05Z07:00": cannot parse "%s" '
                          'as "2006"' % (s, s)) from None


def canon_time(s):
    """metav1.Time: RFC 3339, seconds, UTC. Empty/None is null."""
    if s is None or s == "":
        return None
    return _parse_time(s).strftime("%Y-%m-%dT%H:%M:%SZ")


def canon_status(obj, quantities, condition_times):
    """Canonicalises, in place, the resource lists `quantities` of obj's status and the
    timestamps `condition_times` of its conditions."""
    st = obj.get("status")
    if isinstance(st, dict):
        for f in quantities:
            if f in st:
                st[f] = canon_resource_list(st[f])
        for c in st.get("conditions") or []:
            for f in condition_times:
                if f in c:
                    c[f] = canon_time(c[f])


def canon_micro(s):
    """metav1.MicroTime: RFC 3339 with microseconds, UTC."""
    if s is None or s == "":
        return None
    return _parse_time(s).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def time_epoch(s):
    try:
        return _parse_time(s).timestamp()
    except DecodeError:
        return None


def human_duration(sec):
    """k8s.io/apimachinery/pkg/util/duration.HumanDuration"""
    seconds = int(sec)
    if seconds < -1:
        return "<invalid>"
    if seconds < 0:
        return "0s"
    if seconds < 120:
        return "%ds" % seconds
    minutes = seconds // 60
    if minutes < 10:
        s = seconds % 60
        return "%dm" % minutes if s == 0 else "%dm%ds" % (minutes, s)
    if minutes < 180:
        return "%dm" % minutes
    hours = seconds // 3600
    if hours < 8:
        m = minutes % 60
        return "%dh" % hours if m == 0 else "%dh%dm" % (hours, m)
    if hours < 48:
        return "%dh" % hours
    if hours < 24 * 8:
        h = hours % 24
        return "%dd" % (hours // 24) if h == 0 else "%dd%dh" % (hours // 24, h)
    if hours < 24 * 365 * 2:
        return "%dd" % (hours // 24)
    if hours < 24 * 365 * 8:
        dy = (hours // 24) % 365
        return "%dy" % (hours // 24 // 365) if dy == 0 else "%dy%dd" % (hours // 24 // 365, dy)
    return "%dy" % (hours // 24 // 365)


def age(meta):
    t = time_epoch(meta.get("creationTimestamp") or "")
    return "<unknown>" if t is None else human_duration(time.time() - t)


# ---------------------------------------------------------------------------------------
# Label and field selectors
# ---------------------------------------------------------------------------------------

_SEL_SPECIAL = ("!=", "==", "=", "!", "(", ")", ",", ">", "<")


def _lex_selector(s):
    toks = []
    i, n = 0, len(s)
    while i < n:
        c = s[i]
        if c.isspace():
            i += 1
            continue
        for sp in _SEL_SPECIAL:
            if s.startswith(sp, i):
                toks.append(("op", sp))
                i += len(sp)
                break
        else:
            j = i
            while j < n and not s[j].isspace() and s[j] not in "!=(),<>":
                j += 1
            toks.append(("id", s[i:j]))
            i = j
    return toks


def parse_label_selector(s):
    """Returns a list of (key, op, values). Raises ApiError 400 on syntax errors."""
    reqs = []
    if s is None or not s.strip():
        return reqs
    toks = _lex_selector(s)
    pos = [0]

    def peek():
        return toks[pos[0]] if pos[0] < len(toks) else ("end", None)

    def take():
        t = peek()
        pos[0] += 1
        return t

    def fail(msg):
        raise err_bad_request("unable to parse requirement: %s" % msg)

    while True:
        t = take()
        if t == ("op", "!"):
            k = take()
            if k[0] != "id":
                fail("found '%s', expected: identifier" % (k[1] or ""))
            reqs.append((k[1], "!", None))
        elif t[0] == "id":
            key = t[1]
            nt = peek()
            if nt[0] == "end" or nt == ("op", ","):
                reqs.append((key, "exists", None))
            elif nt[0] == "op" and nt[1] in ("=", "==", "!="):
                take()
                op = "!=" if nt[1] == "!=" else "="
                v = peek()
                if v[0] == "id":
                    take()
                    reqs.append((key, op, v[1]))
                elif v[0] == "end" or v == ("op", ","):
                    reqs.append((key, op, ""))
                else:
                    fail("found '%s', expected: identifier" % v[1])
            elif nt[0] == "op" and nt[1] in (">", "<"):
                take()
                v = take()
                try:
                    num = int(v[1])
                except (TypeError, ValueError):
                    fail("for 'Gt', 'Lt' operators, the value must be an integer")
                reqs.append((key, nt[1], num))
            elif nt[0] == "id" and nt[1] in ("in", "notin"):
                take()
                if take() != ("op", "("):
                    fail("found '%s', expected: '('" % key)
                vals = []
                while True:
                    v = peek()
                    if v == ("op", ")"):
                        take()
                        if not vals:
                            vals.append("")
                        break
                    if v[0] == "id":
                        take()
                        vals.append(v[1])
                        nx = take()
                        if nx == ("op", ")"):
                            break
                        if nx != ("op", ","):
                            fail("found '%s', expected: ',' or ')'" % (nx[1] or ""))
                    elif v == ("op", ","):
                        take()
                        vals.append("")
                    else:
                        fail("found '%s', expected: ',', ')' or identifier" % (v[1] or ""))
                reqs.append((key, nt[1], set(vals)))
            else:
                fail("found '%s', expected: in, notin, =, ==, !=, gt, lt" % (nt[1] or ""))
        else:
            fail("found '%s', expected: !, identifier, or 'end of string'" % (t[1] or ""))
        t = take()
        if t[0] == "end":
            break
        if t != ("op", ","):
            fail("found '%s', expected: ',' or 'end of string'" % t[1])
    for key, op, vals in reqs:
        msgs = is_qualified_name(key)
        if msgs:
            raise err_bad_request("unable to parse requirement: key: Invalid value: %s: %s"
                                  % (_fmt_value(key), msgs[0]))
        check = [vals] if op in ("=", "!=") else (vals if op in ("in", "notin") else [])
        for v in check:
            m = is_valid_label_value(v)
            if m:
                raise err_bad_request("unable to parse requirement: values[0][%s]: Invalid "
                                      "value: %s: %s" % (key, _fmt_value(v), m[0]))
    return reqs


def label_selector_from_struct(sel):
    """metav1.LabelSelector (matchLabels/matchExpressions) as requirements."""
    reqs = []
    for k, v in (sel.get("matchLabels") or {}).items():
        reqs.append((k, "=", v))
    for e in sel.get("matchExpressions") or []:
        op = e.get("operator")
        vals = set(e.get("values") or [])
        if op == "In":
            reqs.append((e.get("key"), "in", vals))
        elif op == "NotIn":
            reqs.append((e.get("key"), "notin", vals))
        elif op == "Exists":
            reqs.append((e.get("key"), "exists", None))
        elif op == "DoesNotExist":
            reqs.append((e.get("key"), "!", None))
    return reqs


def labels_match(reqs, labels):
    if not reqs:
        return True
    labels = labels or {}
    for key, op, v in reqs:
        have = key in labels
        val = labels.get(key)
        if op == "exists":
            ok = have
        elif op == "!":
            ok = not have
        elif op == "=":
            ok = have and val == v
        elif op == "!=":
            ok = not have or val != v
        elif op == "in":
            ok = have and val in v
        elif op == "notin":
            ok = not have or val not in v
        else:
            try:
                n = int(val)
                ok = have and (n > v if op == ">" else n < v)
            except (TypeError, ValueError):
                ok = False
        if not ok:
            return False
    return True


# The core/v1 kinds that register their own field label conversion (and its wording); every
# other kind gets runtime.DefaultMetaV1FieldSelectorConversion's.
OWN_FIELD_LABEL_CONVERSION = ("Pod", "Node", "ReplicationController", "Event", "Namespace",
                              "Secret", "Service")


def parse_field_selector(s, kind):
    """Returns a list of (field, op, value); 400 for syntax errors or unsupported fields."""
    reqs = []
    if s is None or not s.strip():
        return reqs
    parts, cur, i = [], "", 0
    while i < len(s):
        c = s[i]
        if c == "\\" and i + 1 < len(s):
            cur += c + s[i + 1]
            i += 2
            continue
        if c == ",":
            parts.append(cur)
            cur = ""
        else:
            cur += c
        i += 1
    parts.append(cur)
    for p in parts:
        m = re.match(r"^(.*?)(!=|==|=)(.*)$", p)
        if not m:
            raise err_bad_request("invalid selector: '%s'; can't understand '%s'" % (s, p))
        field, op, val = m.group(1).strip(), m.group(2), m.group(3)
        val = re.sub(r"\\(.)", r"\1", val)
        if field not in kind.field_labels():
            if kind.kind in OWN_FIELD_LABEL_CONVERSION:
                raise err_bad_request("field label not supported: %s" % field)
            raise err_bad_request('"%s" is not a known field selector: only "metadata.name", '
                                  '"metadata.namespace"' % field)
        reqs.append((field, "!=" if op == "!=" else "=", val))
    return reqs


def fields_match(reqs, kind, obj):
    for field, op, val in reqs:
        have = kind.field_value(obj, field)
        if (have == val) != (op == "="):
            return False
    return True


# ---------------------------------------------------------------------------------------
# Patches: RFC 7386 merge patch, RFC 6902 JSON patch, strategic merge patch
# ---------------------------------------------------------------------------------------

def merge_patch(target, patch):
    if not isinstance(patch, dict):
        return clone(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            result.pop(k, None)
        else:
            result[k] = merge_patch(result.get(k), v)
    return result


class PatchError(Exception):
    pass


def _ptr_parts(ptr):
    if ptr == "":
        return []
    if not ptr.startswith("/"):
        raise PatchError('JSON pointer must be empty or start with a "/": %s' % ptr)
    return [p.replace("~1", "/").replace("~0", "~") for p in ptr[1:].split("/")]


def _ptr_parent(doc, parts, path):
    cur = doc
    for p in parts[:-1]:
        if isinstance(cur, dict) and p in cur:
            cur = cur[p]
        elif isinstance(cur, list) and p.isdigit() and int(p) < len(cur):
            cur = cur[int(p)]
        else:
            raise PatchError('doc is missing path: "%s": missing value' % path)
    return cur


def json_patch(doc, ops):
    if not isinstance(ops, list):
        raise ApiError(400, "BadRequest", "json: cannot unmarshal object into Go value of type "
                       "jsonpatch.Patch")
    doc = clone(doc)
    for op in ops:
        if not isinstance(op, dict):
            raise PatchError("invalid operation")
        kind = op.get("op")
        path = op.get("path")
        if not isinstance(path, str):
            raise PatchError("operation missing path")
        parts = _ptr_parts(path)

        def get_at(pth):
            pp = _ptr_parts(pth)
            if not pp:
                return doc
            par = _ptr_parent(doc, pp, pth)
            last = pp[-1]
            if isinstance(par, dict) and last in par:
                return par[last]
            if isinstance(par, list) and last.isdigit() and int(last) < len(par):
                return par[int(last)]
            raise PatchError('doc is missing path: "%s": missing value' % pth)

        def remove_at(pth):
            pp = _ptr_parts(pth)
            par = _ptr_parent(doc, pp, pth)
            last = pp[-1]
            if isinstance(par, dict) and last in par:
                return par.pop(last)
            if isinstance(par, list) and last.isdigit() and int(last) < len(par):
                return par.pop(int(last))
            raise PatchError('Unable to remove nonexistent key: %s: missing value' % last)

        def add_at(pth, value, replace=False):
            nonlocal doc
            pp = _ptr_parts(pth)
            if not pp:
                doc = value
                return
            par = _ptr_parent(doc, pp, pth)
            last = pp[-1]
            if isinstance(par, dict):
                if replace and last not in par:
                    raise PatchError('replace operation does not apply: doc is missing key: %s: '
                                     'missing value' % pth)
                par[last] = value
            elif isinstance(par, list):
                if last == "-" and not replace:
                    par.append(value)
                elif last.isdigit() and int(last) <= len(par) - (1 if replace else 0):
                    if replace:
                        par[int(last)] = value
                    else:
                        par.insert(int(last), value)
                else:
                    raise PatchError('add operation does not apply: doc is missing path: "%s": '
                                     'missing value' % pth)
            else:
                raise PatchError('doc is missing path: "%s": missing value' % pth)

        if kind == "add":
            add_at(path, clone(op.get("value")))
        elif kind == "remove":
            if not parts:
                raise PatchError("unable to remove the whole document")
            remove_at(path)
        elif kind == "replace":
            add_at(path, clone(op.get("value")), replace=True)
        elif kind == "move":
            v = remove_at(op.get("from", ""))
            add_at(path, v)
        elif kind == "copy":
            add_at(path, clone(get_at(op.get("from", ""))))
        elif kind == "test":
            if get_at(path) != op.get("value"):
                raise PatchError("testing value %s failed: test failed" % path)
        else:
            raise PatchError("Unexpected kind: %s" % kind)
    return doc


_DELETE = object()


def _smp_strip(v):
    """Removes strategic-merge directives from a value that is set as a whole."""
    if isinstance(v, dict):
        if v.get("$patch") == "delete":
            return _DELETE
        out = {}
        for k, x in v.items():
            if k.startswith("$"):
                continue
            r = _smp_strip(x)
            if r is not _DELETE and x is not None:
                out[k] = r
        return out
    if isinstance(v, list):
        return [r for r in (_smp_strip(x) for x in v
                            if not (isinstance(x, dict) and "$patch" in x))
                if r is not _DELETE]
    return v


def strategic_merge(orig, patch, schema, path=()):
    """Strategic merge patch of maps. schema maps a path tuple (list items as '*') to
    ('merge', mergeKey-or-None) for lists that merge; every other list is replaced."""
    if not isinstance(patch, dict):
        raise PatchError("strategic merge patch must be a JSON object")
    directive = patch.get("$patch")
    if directive == "replace":
        return _smp_strip({k: v for k, v in patch.items() if k != "$patch"})
    if directive == "delete":
        return _DELETE
    if directive not in (None, "merge"):
        raise PatchError("Unknown patch type: %s in map: %s" % (directive, dumps(patch)))
    result = dict(orig) if isinstance(orig, dict) else {}
    orders = {}
    deletes = {}
    for k, v in patch.items():
        if k in ("$patch", "$retainKeys"):
            continue
        if k.startswith("$setElementOrder/"):
            orders[k.split("/", 1)[1]] = v
            continue
        if k.startswith("$deleteFromPrimitiveList/"):
            deletes[k.split("/", 1)[1]] = v
            continue
        sub = path + (k,)
        if v is None:
            result.pop(k, None)
        elif isinstance(v, dict):
            r = strategic_merge(result.get(k), v, schema, sub)
            if r is _DELETE:
                result.pop(k, None)
            else:
                result[k] = r
        elif isinstance(v, list):
            strat = schema.get(sub)
            if strat and strat[0] == "merge":
                result[k] = _smp_list(result.get(k) or [], v, strat[1], schema, sub)
            else:
                result[k] = _smp_strip(v)
        else:
            result[k] = v
    for field, vals in deletes.items():
        if isinstance(result.get(field), list):
            result[field] = [x for x in result[field] if x not in (vals or [])]
    for field, order in orders.items():
        lst = result.get(field)
        if not isinstance(lst, list) or not isinstance(order, list):
            continue
        strat = schema.get(path + (field,))
        key = strat[1] if strat else None

        def ident(x, key=key):
            return dumps(x.get(key)) if (key and isinstance(x, dict)) else dumps(x)
        pos = {ident(o): i for i, o in enumerate(order)}
        listed = sorted([x for x in lst if ident(x) in pos], key=lambda x: pos[ident(x)])
        result[field] = listed + [x for x in lst if ident(x) not in pos]
    retain = patch.get("$retainKeys")
    if isinstance(retain, list):
        result = {k: v for k, v in result.items() if k in retain}
    return result


def _smp_list(orig, patch, key, schema, path):
    for p in patch:
        if isinstance(p, dict) and p.get("$patch") == "replace":
            return _smp_strip([x for x in patch if x is not p])
    if key is None:
        out = list(orig)
        for p in patch:
            if isinstance(p, dict):
                continue
            if p not in out:
                out.append(p)
        return out
    out = [clone(x) for x in orig]
    for p in patch:
        if not isinstance(p, dict):
            raise PatchError("found non-map element in a list with merge key %s" % key)
        if key not in p:
            raise PatchError("map: %s does not contain declared merge key: %s"
                             % (dumps(p), key))
        idx = next((i for i, x in enumerate(out)
                    if isinstance(x, dict) and x.get(key) == p[key]), None)
        if p.get("$patch") == "delete":
            if idx is not None:
                out.pop(idx)
            continue
        merged = strategic_merge(out[idx] if idx is not None else {}, p, schema,
                                 path + ("*",))
        if idx is not None:
            out[idx] = merged
        else:
            out.append(merged)
    return out


# ---------------------------------------------------------------------------------------
# Kinds: defaulting, strategies, validation, field selectors, tables
# ---------------------------------------------------------------------------------------

SMP_META = {("metadata", "finalizers"): ("merge", None),
            ("metadata", "ownerReferences"): ("merge", "uid")}
ACCESS_MODES = ["ReadOnlyMany", "ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod"]
VOLUME_MODES = ["Block", "Filesystem"]
PV_SOURCES = ["hostPath", "gcePersistentDisk", "awsElasticBlockStore", "glusterfs", "flocker",
              "nfs", "rbd", "quobyte", "cephfs", "iscsi", "cinder", "fc", "flexVolume",
              "azureFile", "vsphereVolume", "photonPersistentDisk", "portworxVolume",
              "azureDisk", "scaleIO", "local", "storageos", "csi"]
HOSTPATH_TYPES = ["", "BlockDevice", "CharDevice", "Directory", "DirectoryOrCreate", "File",
                  "FileOrCreate", "Socket"]
ANN_BETA_CLASS = "volume.beta.kubernetes.io/storage-class"
ANN_DEFAULT_CLASS = "storageclass.kubernetes.io/is-default-class"
ANN_BETA_DEFAULT_CLASS = "storageclass.beta.kubernetes.io/is-default-class"


def col(name, typ="string", fmt="", priority=0, desc=""):
    d = {"name": name, "type": typ, "format": fmt, "description": desc or name,
         "priority": priority}
    return d


NAME_COL = col("Name", fmt="name", desc="Name must be unique within a namespace. Is required "
               "when creating resources, although some resources may allow a client to request "
               "the generation of an appropriate name automatically. Name is primarily intended "
               "for creation idempotence and configuration definition. Cannot be updated. More "
               "info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#"
               "names")
AGE_COL = col("Age", desc="CreationTimestamp is a timestamp representing the server time when "
              "this object was created.")


def access_modes_str(modes):
    modes = modes or []
    out = []
    for m, s in (("ReadWriteOnce", "RWO"), ("ReadOnlyMany", "ROX"), ("ReadWriteMany", "RWX"),
                 ("ReadWriteOncePod", "RWOP")):
        if m in modes:
            out.append(s)
    return ",".join(out)


def claim_class(claim):
    ann = (claim.get("metadata") or {}).get("annotations") or {}
    if ANN_BETA_CLASS in ann:
        return ann[ANN_BETA_CLASS]
    return (claim.get("spec") or {}).get("storageClassName") or ""


def pv_class(pv):
    ann = (pv.get("metadata") or {}).get("annotations") or {}
    if ANN_BETA_CLASS in ann:
        return ann[ANN_BETA_CLASS]
    return (pv.get("spec") or {}).get("storageClassName") or ""


def is_default_class(sc):
    ann = (sc.get("metadata") or {}).get("annotations") or {}
    return ann.get(ANN_DEFAULT_CLASS) == "true" or ann.get(ANN_BETA_DEFAULT_CLASS) == "true"


def _spec_diff(old, new):
    lines = []
    for k in sorted(set(old) | set(new)):
        if old.get(k) != new.get(k):
            if k in old:
                lines.append("- \t%s: %s," % (k[0].upper() + k[1:], dumps(old[k])))
            if k in new:
                lines.append("+ \t%s: %s," % (k[0].upper() + k[1:], dumps(new[k])))
    return "  core.PersistentVolumeClaimSpec{\n" + "\n".join(lines) + "\n  }\n"


META_ORDER = ("name", "generateName", "namespace", "selfLink", "uid", "resourceVersion",
              "generation", "creationTimestamp", "deletionTimestamp",
              "deletionGracePeriodSeconds", "labels", "annotations", "ownerReferences",
              "finalizers", "managedFields")


def go_order(obj, order):
    """obj's keys in Go struct order (unknown keys last), as the real server encodes."""
    out = {k: obj[k] for k in order if k in obj}
    if len(out) != len(obj):
        for k, v in obj.items():
            if k not in out:
                out[k] = v
    return out


class Kind:
    resource = kind = ""
    order = ("metadata", "spec", "status")
    schema = None  # known fields, when complete enough to prune unknown ones
    group = ""
    version = "v1"
    namespaced = True
    short = ()
    categories = ()
    has_status = False
    return_deleted = True
    create_on_update = False
    smp = SMP_META
    extra_fields = ()
    verbs = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]

    @property
    def api_version(self):
        return self.version if not self.group else self.group + "/" + self.version

    @property
    def singular(self):
        return self.kind.lower()

    def name_errors(self, name):
        return is_dns1123_subdomain(name)

    def key(self, ns, name):
        return "%s/%s" % (ns, name) if self.namespaced else name

    # Decode-level canonicalisation (quantities, times). Raises DecodeError.
    def normalize(self, obj):
        meta = obj.get("metadata")
        if meta is None:
            meta = obj["metadata"] = {}
        if not isinstance(meta, dict):
            raise DecodeError("json: cannot unmarshal %s into Go struct field %s.metadata of "
                              "type v1.ObjectMeta" % (type(meta).__name__, self.kind))
        for f in ("creationTimestamp", "deletionTimestamp"):
            if f in meta:
                meta[f] = canon_time(meta[f])
                if meta[f] is None and f == "deletionTimestamp":
                    del meta[f]
        for f in ("labels", "annotations"):
            v = meta.get(f)
            if v is not None and (not isinstance(v, dict) or
                                  not all(isinstance(x, str) for x in v.values())):
                raise DecodeError("json: cannot unmarshal into Go struct field "
                                  "ObjectMeta.metadata.%s of type map[string]string" % f)
            if v == {}:
                del meta[f]
        for f in ("finalizers", "ownerReferences", "managedFields"):
            if meta.get(f) == [] or (f in meta and meta[f] is None):
                del meta[f]
        for mf in meta.get("managedFields") or []:
            if isinstance(mf, dict) and "time" in mf:
                mf["time"] = canon_time(mf["time"])

    def defaults(self, obj):
        pass

    def prepare_create(self, obj):
        pass

    def prepare_update(self, new, old):
        if self.has_status:
            if "status" in old:
                new["status"] = clone(old["status"])
            else:
                new.pop("status", None)

    def prepare_status(self, new, old):
        for k in list(new.keys()):
            if k not in ("metadata", "status"):
                del new[k]
        for k, v in old.items():
            if k not in ("metadata", "status"):
                new[k] = clone(v)

    def validate(self, obj):
        errs = []
        validate_object_meta(obj["metadata"], self.namespaced, self.name_errors, errs)
        self.validate_spec(obj, errs)
        return errs

    def validate_spec(self, obj, errs):
        pass

    def validate_update(self, new, old):
        return self.validate(new)

    def validate_status_update(self, new, old):
        errs = []
        validate_object_meta(new["metadata"], self.namespaced, self.name_errors, errs)
        return errs

    def field_labels(self):
        base = {"metadata.name"}
        if self.namespaced:
            base.add("metadata.namespace")
        return base | set(self.extra_fields)

    def field_value(self, obj, field):
        meta = obj.get("metadata") or {}
        if field in ("metadata.name", "name"):
            return meta.get("name", "")
        if field == "metadata.namespace":
            return meta.get("namespace", "")
        cur = obj
        for p in field.split("."):
            cur = cur.get(p) if isinstance(cur, dict) else None
        if isinstance(cur, bool):
            return "true" if cur else "false"
        return "" if cur is None else str(cur)

    def empty(self):
        return {}

    def columns(self):
        return [NAME_COL, AGE_COL]

    def row(self, obj):
        return [obj["metadata"]["name"], age(obj["metadata"])]


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


# ---------------------------------------------------------------------------------------
# ServiceAccount, RBAC and apps/v1 workloads (what manifests/ installs). No controllers run
# them: Deployment and DaemonSet status stays as created, no pods appear.
# ---------------------------------------------------------------------------------------

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


def is_path_segment_name(name):
    """k8s.io/apimachinery/pkg/api/validation/path.IsValidPathSegmentName (RBAC names)."""
    for bad in (".", ".."):
        if name == bad:
            return ["may not be '%s'" % bad]
    return ["may not contain '%s'" % bad for bad in ("/", "%") if bad in name]


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


# ---------------------------------------------------------------------------------------
# Known fields (for fieldValidation: unknown fields are dropped with a warning, or refused)
# A dict maps field names to their schema; None is a leaf or an opaque value; a 1-tuple
# (schema,) is a list of such objects.
# ---------------------------------------------------------------------------------------

def _leaves(*names):
    return {n: None for n in names}


SCH_OBJREF = _leaves("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion",
                     "fieldPath")
SCH_META = dict(_leaves(*META_ORDER), ownerReferences=(_leaves(
    "apiVersion", "kind", "name", "uid", "controller", "blockOwnerDeletion"),))
SCH_NODE_SELECTOR_TERM = {"matchExpressions": (_leaves("key", "operator", "values"),),
                          "matchFields": (_leaves("key", "operator", "values"),)}
SCH_PV = {
    "metadata": SCH_META,
    "spec": dict(_leaves(*PV_SOURCES, "capacity", "accessModes", "persistentVolumeReclaimPolicy",
                         "storageClassName", "mountOptions", "volumeMode",
                         "volumeAttributesClassName"),
                 hostPath=_leaves("path", "type"), local=_leaves("path", "fsType"),
                 claimRef=SCH_OBJREF,
                 nodeAffinity={"required": {"nodeSelectorTerms": (SCH_NODE_SELECTOR_TERM,)}}),
    "status": _leaves("phase", "message", "reason", "lastPhaseTransitionTime")}
SCH_PVC = {
    "metadata": SCH_META,
    "spec": dict(_leaves("accessModes", "selector", "volumeName", "storageClassName",
                         "volumeMode", "dataSource", "dataSourceRef",
                         "volumeAttributesClassName"),
                 resources=_leaves("limits", "requests")),
    "status": dict(_leaves("phase", "accessModes", "capacity", "allocatedResources",
                           "allocatedResourceStatuses", "currentVolumeAttributesClassName",
                           "modifyVolumeStatus"),
                   conditions=(_leaves("type", "status", "lastProbeTime", "lastTransitionTime",
                                       "reason", "message"),))}
SCH_SC = dict(_leaves("provisioner", "parameters", "reclaimPolicy", "mountOptions",
                      "allowVolumeExpansion", "volumeBindingMode", "allowedTopologies"),
              metadata=SCH_META)
SCH_EVENT = dict(_leaves("reason", "message", "firstTimestamp", "lastTimestamp", "count",
                         "type", "eventTime", "action", "reportingComponent",
                         "reportingInstance"),
                 metadata=SCH_META, involvedObject=SCH_OBJREF, related=SCH_OBJREF,
                 source=_leaves("component", "host"),
                 series=_leaves("count", "lastObservedTime"))
SCH_LEASE = {"metadata": SCH_META,
             "spec": _leaves("holderIdentity", "leaseDurationSeconds", "acquireTime",
                             "renewTime", "leaseTransitions", "strategy", "preferredHolder")}
SCH_NAMESPACE = {"metadata": SCH_META, "spec": _leaves("finalizers"),
                 "status": dict(_leaves("phase"), conditions=(_leaves(
                     "type", "status", "lastTransitionTime", "reason", "message"),))}

SCH_SECCOMP = _leaves("type", "localhostProfile")
SCH_PROBE = dict(_leaves("initialDelaySeconds", "timeoutSeconds", "periodSeconds",
                         "successThreshold", "failureThreshold",
                         "terminationGracePeriodSeconds"),
                 exec=_leaves("command"),
                 httpGet=dict(_leaves("path", "port", "host", "scheme"),
                              httpHeaders=(_leaves("name", "value"),)),
                 tcpSocket=_leaves("port", "host"), grpc=_leaves("port", "service"))
SCH_ENV_VAR = dict(_leaves("name", "value"), valueFrom={
    "fieldRef": _leaves("apiVersion", "fieldPath"),
    "resourceFieldRef": _leaves("containerName", "resource", "divisor"),
    "configMapKeyRef": _leaves("name", "key", "optional"),
    "secretKeyRef": _leaves("name", "key", "optional")})
SCH_CONTAINER = dict(
    _leaves("name", "image", "command", "args", "workingDir", "envFrom", "resizePolicy",
            "restartPolicy", "volumeDevices", "lifecycle", "terminationMessagePath",
            "terminationMessagePolicy", "imagePullPolicy", "stdin", "stdinOnce", "tty"),
    ports=(_leaves("name", "hostPort", "containerPort", "protocol", "hostIP"),),
    env=(SCH_ENV_VAR,), resources=_leaves("limits", "requests", "claims"),
    volumeMounts=(_leaves("name", "readOnly", "recursiveReadOnly", "mountPath", "subPath",
                          "mountPropagation", "subPathExpr"),),
    livenessProbe=SCH_PROBE, readinessProbe=SCH_PROBE, startupProbe=SCH_PROBE,
    securityContext=dict(_leaves("privileged", "seLinuxOptions", "windowsOptions",
                                 "runAsUser", "runAsGroup", "runAsNonRoot",
                                 "readOnlyRootFilesystem", "allowPrivilegeEscalation",
                                 "procMount"),
                         capabilities=_leaves("add", "drop"), seccompProfile=SCH_SECCOMP,
                         appArmorProfile=SCH_SECCOMP))
VOLUME_SOURCES = ("hostPath", "emptyDir", "gcePersistentDisk", "awsElasticBlockStore",
                  "gitRepo", "secret", "nfs", "iscsi", "glusterfs", "persistentVolumeClaim",
                  "rbd", "flexVolume", "cinder", "cephfs", "flocker", "downwardAPI", "fc",
                  "azureFile", "configMap", "vsphereVolume", "quobyte", "azureDisk",
                  "photonPersistentDisk", "projected", "portworxVolume", "scaleIO",
                  "storageos", "csi", "ephemeral", "image")
SCH_POD_SPEC = dict(
    _leaves(*(f for f in POD_SPEC_ORDER if f not in ("volumes", "initContainers", "containers",
                                                      "securityContext",
                                                      "imagePullSecrets"))),
    volumes=(dict(_leaves("name", *VOLUME_SOURCES), hostPath=_leaves("path", "type")),),
    initContainers=(SCH_CONTAINER,), containers=(SCH_CONTAINER,),
    imagePullSecrets=(_leaves("name"),),
    securityContext=dict(_leaves("seLinuxOptions", "windowsOptions", "runAsUser", "runAsGroup",
                                 "runAsNonRoot", "supplementalGroups",
                                 "supplementalGroupsPolicy", "fsGroup", "sysctls",
                                 "fsGroupChangePolicy", "seLinuxChangePolicy"),
                         seccompProfile=SCH_SECCOMP, appArmorProfile=SCH_SECCOMP))
SCH_POD_TEMPLATE = {"metadata": SCH_META, "spec": SCH_POD_SPEC}
SCH_ROLLING = _leaves("maxUnavailable", "maxSurge")
SCH_DEPLOYMENT = {
    "metadata": SCH_META,
    "spec": dict(_leaves("replicas", "selector", "minReadySeconds", "revisionHistoryLimit",
                         "paused", "progressDeadlineSeconds"),
                 template=SCH_POD_TEMPLATE,
                 strategy=dict(_leaves("type"), rollingUpdate=SCH_ROLLING)),
    "status": _leaves("observedGeneration", "replicas", "updatedReplicas", "readyReplicas",
                      "availableReplicas", "unavailableReplicas", "conditions",
                      "collisionCount")}
SCH_DAEMONSET = {
    "metadata": SCH_META,
    "spec": dict(_leaves("selector", "minReadySeconds", "revisionHistoryLimit"),
                 template=SCH_POD_TEMPLATE,
                 updateStrategy=dict(_leaves("type"), rollingUpdate=SCH_ROLLING)),
    "status": _leaves("currentNumberScheduled", "numberMisscheduled", "desiredNumberScheduled",
                      "numberReady", "observedGeneration", "updatedNumberScheduled",
                      "numberAvailable", "numberUnavailable", "collisionCount", "conditions")}
SCH_SERVICEACCOUNT = {"metadata": SCH_META, "secrets": (SCH_OBJREF,),
                      "imagePullSecrets": (_leaves("name"),),
                      "automountServiceAccountToken": None}
SCH_ROLE = {"metadata": SCH_META, "rules": (_leaves(*RULE_ORDER),)}
SCH_CLUSTERROLE = dict(SCH_ROLE, aggregationRule=_leaves("clusterRoleSelectors"))
SCH_BINDING = {"metadata": SCH_META, "subjects": (_leaves(*SUBJECT_ORDER),),
               "roleRef": _leaves("apiGroup", "kind", "name")}


def prune_unknown(obj, schema, path, out):
    """Removes fields the schema does not know; appends their paths to out."""
    if not isinstance(obj, dict):
        return
    for k in list(obj):
        if k not in schema:
            out.append(path + k)
            del obj[k]
            continue
        sub = schema[k]
        if isinstance(sub, dict):
            prune_unknown(obj[k], sub, path + k + ".", out)
        elif isinstance(sub, tuple) and isinstance(obj[k], list):
            for i, item in enumerate(obj[k]):
                prune_unknown(item, sub[0], "%s%s[%d]." % (path, k, i), out)


KIND_LIST = [PersistentVolumeKind(), PersistentVolumeClaimKind(), EventKind(),
             NamespaceKind(), NodeKind(), PodKind(), StorageClassKind(), LeaseKind(),
             ServiceAccountKind(), DeploymentKind(), DaemonSetKind(), ClusterRoleKind(),
             ClusterRoleBindingKind(), RoleKind(), RoleBindingKind()]
KINDS = {(k.group, k.version, k.resource): k for k in KIND_LIST}
BY_RES = {k.resource: k for k in KIND_LIST}
for _r, _sch in (("persistentvolumes", SCH_PV), ("persistentvolumeclaims", SCH_PVC),
                 ("events", SCH_EVENT), ("namespaces", SCH_NAMESPACE),
                 ("storageclasses", SCH_SC), ("leases", SCH_LEASE),
                 ("serviceaccounts", SCH_SERVICEACCOUNT), ("deployments", SCH_DEPLOYMENT),
                 ("daemonsets", SCH_DAEMONSET), ("clusterroles", SCH_CLUSTERROLE),
                 ("clusterrolebindings", SCH_BINDING), ("roles", SCH_ROLE),
                 ("rolebindings", SCH_BINDING)):
    BY_RES[_r].schema = _sch
REQUEST = threading.local()  # per-request: fieldValidation directive and warnings
# In kube-apiserver's order of /apis.
GROUPS = {"apps": ["v1"], RBAC_GROUP: ["v1"], "storage.k8s.io": ["v1"],
          "coordination.k8s.io": ["v1"]}


# ---------------------------------------------------------------------------------------
# managedFields (a simplified rendering of what the field manager records)
# ---------------------------------------------------------------------------------------

def _fields_v1(v, path=()):
    if isinstance(v, dict):
        out = {}
        if path in (("metadata", "labels"), ("metadata", "annotations")) or \
                (len(path) >= 2 and path[-1] in ("requests", "limits", "capacity",
                                                 "parameters")):
            out["."] = {}
        for k, x in v.items():
            out["f:" + k] = _fields_v1(x, path + (k,))
        return out
    if isinstance(v, list) and path == ("metadata", "finalizers"):
        out = {".": {}}
        for x in v:
            out["v:" + dumps(x)] = {}
        return out
    return {}


def managed_entry(kind, obj, manager, sub):
    if sub == "status":
        src = {"status": obj["status"]} if "status" in obj else {}
    else:
        meta = {k: obj["metadata"][k] for k in ("labels", "annotations", "finalizers",
                                                "ownerReferences") if k in obj["metadata"]}
        src = {"metadata": meta} if meta else {}
        for k, v in obj.items():
            if k not in ("metadata", "status"):
                src[k] = v
    e = {"manager": manager, "operation": "Update", "apiVersion": kind.api_version,
         "time": now_time(), "fieldsType": "FieldsV1", "fieldsV1": _fields_v1(src)}
    if sub:
        e["subresource"] = sub
    return e


def _same_object(a, b):
    if a.keys() != b.keys():
        return False
    for k in a:
        if k == "metadata":
            ma, mb = a[k], b[k]
            ka = set(ma) - {"managedFields", "resourceVersion"}
            kb = set(mb) - {"managedFields", "resourceVersion"}
            if ka != kb or any(ma[x] != mb[x] for x in ka):
                return False
        elif a[k] != b[k]:
            return False
    return True


# ---------------------------------------------------------------------------------------
# Store: objects, one resourceVersion counter, per-resource event history, watchers
# ---------------------------------------------------------------------------------------

class WEvent:
    __slots__ = ("rv", "type", "key", "obj", "prev", "cache")

    def __init__(self, rv, typ, key, obj, prev):
        self.rv, self.type, self.key, self.obj, self.prev = rv, typ, key, obj, prev
        self.cache = None


class History:
    def __init__(self, cap):
        self.cap = max(1, cap)
        self.rvs = []
        self.evs = []
        self.floor = 0  # resourceVersions below this are gone ("oldest - 1")

    def append(self, ev):
        self.rvs.append(ev.rv)
        self.evs.append(ev)
        if len(self.evs) > self.cap + self.cap // 4 + 16:
            drop = len(self.evs) - self.cap
            del self.rvs[:drop]
            del self.evs[:drop]
            self.floor = max(self.floor, self.rvs[0] - 1)

    def since(self, rv):
        return self.evs[bisect.bisect_right(self.rvs, rv):]

    def compact(self, rv):
        self.rvs, self.evs = [], []
        self.floor = max(self.floor, rv)


class Store:
    def __init__(self, history_cap):
        self.lock = threading.RLock()
        self.rv_cond = threading.Condition(self.lock)
        self.rv = 0
        self.objs = {k.resource: {} for k in KIND_LIST}
        self.jcache = {k.resource: {} for k in KIND_LIST}
        self.hist = {k.resource: History(history_cap) for k in KIND_LIST}
        self.watchers = {k.resource: set() for k in KIND_LIST}
        self.listeners = []

    def get(self, res, key):
        return self.objs[res].get(key)

    def obj_json(self, res, key, obj):
        c = self.jcache[res].get(key)
        if c is not None and c[0] is obj:
            return c[1]
        s = dumps(obj)
        self.jcache[res][key] = (obj, s)
        return s

    def _emit(self, res, typ, key, obj, prev):
        ev = WEvent(self.rv, typ, key, obj, prev)
        self.hist[res].append(ev)
        for w in self.watchers[res]:
            w.q.put(ev)
        for fn in self.listeners:
            fn(res, typ, key, obj, prev)
        self.rv_cond.notify_all()

    def put(self, res, key, obj, prev):
        """Stores obj (a new dict, owned by the store from now on). Caller holds lock."""
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        ordered = go_order(obj, BY_RES[res].order)
        ordered["metadata"] = go_order(obj["metadata"], META_ORDER)
        obj.clear()
        obj.update(ordered)
        self.objs[res][key] = obj
        self._emit(res, "ADDED" if prev is None else "MODIFIED", key, obj, prev)
        return obj

    def remove(self, res, key):
        prev = self.objs[res].pop(key)
        self.jcache[res].pop(key, None)
        self.rv += 1
        obj = dict(prev)
        obj["metadata"] = dict(prev["metadata"])
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self._emit(res, "DELETED", key, obj, prev)
        return obj

    def snapshot_at(self, res, rv):
        """The resource's objects as they were at rv, or None if history is too short."""
        h = self.hist[res]
        if rv < h.floor:
            return None
        objs = self.objs[res]
        later = h.since(rv)
        if not later:
            return objs
        objs = dict(objs)
        for ev in reversed(later):
            if ev.type == "ADDED":
                objs.pop(ev.key, None)
            else:
                objs[ev.key] = ev.prev
        return objs

    def compact(self):
        with self.lock:
            for h in self.hist.values():
                h.compact(self.rv)
            return self.rv

    # -- persistence (--persist on): what etcd would keep across a restart ------------------

    STATE_FILE = "state.json"

    def dump(self, path):
        """Writes every object and the resourceVersion counter to path (atomically: a temporary
        file, fsync, rename). Caller holds the lock, so the dump is one consistent moment."""
        state = {"version": 1, "resourceVersion": self.rv,
                 "objects": {res: list(objs.values()) for res, objs in self.objs.items()}}
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(state, f, separators=(",", ":"))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)

    def load(self, path):
        """Replaces the store's objects with a dump()'s (before any watch or controller
        runs). The watch history starts empty at the loaded resourceVersion, as the watch
        cache of a restarted kube-apiserver does: a watch resuming from an older
        resourceVersion gets 410 Expired and relists. Listeners see every object as ADDED
        (the controllers rebuild their indexes). Returns the number of objects loaded."""
        with open(path) as f:
            state = json.load(f)
        n = 0
        with self.lock:
            self.rv = max(self.rv, int(state["resourceVersion"]))
            for res in self.objs:
                self.objs[res] = {}
                self.jcache[res] = {}
                self.hist[res] = History(self.hist[res].cap)
                self.hist[res].floor = self.rv
            for res, items in state["objects"].items():
                kind = BY_RES[res]
                for obj in items:
                    m = obj["metadata"]
                    key = kind.key(m.get("namespace", ""), m["name"])
                    self.objs[res][key] = obj
                    n += 1
            for res, objs in self.objs.items():
                for key, obj in objs.items():
                    for fn in self.listeners:
                        fn(res, "ADDED", key, obj, None)
        return n


# ---------------------------------------------------------------------------------------
# Registry: the verbs, with admission, strategies and validation
# ---------------------------------------------------------------------------------------

NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"


class Registry:
    def __init__(self, opts):
        self.opts = opts
        self.store = Store(opts.history)
        self.lock = self.store.lock
        self.binder = opts.binder == "on"
        self.protection = opts.protection == "on"
        self.managed_fields = opts.managed_fields == "on"
        with self.lock:
            for ns in ("default", "kube-system", "kube-public", "kube-node-lease"):
                self._create_namespace(ns)

    # -- decoding ------------------------------------------------------------------------

    def decode(self, kind, body):
        if isinstance(body, (bytes, str)):
            try:
                obj = json.loads(body)
            except ValueError as e:
                raw = body if isinstance(body, bytes) else body.encode()
                raise err_bad_request(
                    "the object provided is unrecognized (must be of type %s): couldn't get "
                    "version/kind; json parse error: %s (%s)"
                    % (kind.kind, e, raw[:30].hex())) from None
        else:
            obj = body
        if not isinstance(obj, dict):
            raise err_bad_request("the object provided is unrecognized (must be of type %s): "
                                  "couldn't get version/kind; json parse error: json: cannot "
                                  "unmarshal %s into Go value of type struct { APIVersion "
                                  "string \"json:\\\"apiVersion,omitempty\\\"\"; Kind string "
                                  "\"json:\\\"kind,omitempty\\\"\" }"
                                  % (kind.kind, type(obj).__name__))
        k = obj.pop("kind", None)
        av = obj.pop("apiVersion", None)
        if av and av != kind.api_version:
            raise err_bad_request("the API version in the data (%s) does not match the expected "
                                  "API version (%s)" % (av, kind.api_version))
        if k and k != kind.kind:
            raise err_bad_request('%s in version "%s" cannot be handled as a %s: no kind "%s" is '
                                  'registered for version "%s"' % (k, kind.version, kind.kind,
                                                                  k, kind.api_version))
        if kind.schema is not None:
            unknown = []
            prune_unknown(obj, kind.schema, "", unknown)
            if unknown:
                how = getattr(REQUEST, "field_validation", "Warn")
                if how == "Strict":
                    raise err_bad_request('%s in version "%s" cannot be handled as a %s: strict '
                                          'decoding error: %s' % (
                                              kind.kind, kind.version, kind.kind, ", ".join(
                                                  'unknown field "%s"' % u for u in unknown)))
                if how != "Ignore":
                    w = getattr(REQUEST, "warnings", None)
                    if w is not None:
                        w.extend('unknown field "%s"' % u for u in unknown)
        try:
            kind.normalize(obj)
        except DecodeError as e:
            raise err_bad_request('%s in version "%s" cannot be handled as a %s: %s'
                                  % (kind.kind, kind.version, kind.kind, e)) from None
        return obj

    # -- helpers -------------------------------------------------------------------------

    def key_of(self, kind, obj):
        m = obj["metadata"]
        return kind.key(m.get("namespace", ""), m["name"])

    def get(self, kind, ns, name):
        with self.lock:
            obj = self.store.get(kind.resource, kind.key(ns, name))
        if obj is None:
            raise err_not_found(kind.resource, kind.group, name)
        return obj

    def _set_managed(self, kind, new, old, manager, sub):
        if not self.managed_fields or not manager:
            if old is not None and "managedFields" in old["metadata"]:
                new["metadata"]["managedFields"] = old["metadata"]["managedFields"]
            else:
                new["metadata"].pop("managedFields", None)
            return
        entries = list(old["metadata"].get("managedFields") or []) if old else []
        e = managed_entry(kind, new, manager, sub)
        for i, x in enumerate(entries):
            if (x.get("manager"), x.get("operation"), x.get("subresource")) == \
                    (manager, "Update", sub):
                entries[i] = e
                break
        else:
            entries.append(e)
        new["metadata"]["managedFields"] = entries

    def _create_namespace(self, name):
        kind = BY_RES["namespaces"]
        obj = {"metadata": {"name": name}}
        kind.prepare_create(obj)
        obj["metadata"]["uid"] = new_uid()
        obj["metadata"]["creationTimestamp"] = now_time()
        kind.defaults(obj)
        self._set_managed(kind, obj, None, "kube-apiserver", None)
        return self.store.put("namespaces", name, obj, None)

    def _check_namespace(self, kind, ns, name, dry_run):
        nsobj = self.store.get("namespaces", ns)
        if nsobj is None:
            if self.opts.require_namespaces == "on":
                raise err_not_found("namespaces", "", ns)
            if not dry_run:
                self._create_namespace(ns)
        elif nsobj["metadata"].get("deletionTimestamp"):
            raise ApiError(403, "Forbidden", '%s "%s" is forbidden: unable to create new content '
                           'in namespace %s because it is being terminated'
                           % (qualified(kind.resource, kind.group), name, ns),
                           _details(name, kind.group, kind.resource, causes=[
                               {"reason": "NamespaceTerminating",
                                "message": "namespace %s is being terminated" % ns,
                                "field": "metadata.namespace"}]))

    def default_class(self):
        best = None
        for sc in self.store.objs["storageclasses"].values():
            if is_default_class(sc):
                k = (sc["metadata"].get("creationTimestamp") or "", sc["metadata"]["name"])
                if best is None or k[0] > best[0] or (k[0] == best[0] and k[1] < best[1]):
                    best = k
        return best[1] if best else None

    # -- create --------------------------------------------------------------------------

    def create(self, kind, ns, body, manager, dry_run=False):
        obj = self.decode(kind, body)
        meta = obj["metadata"]
        _set_namespace(kind, meta, ns)
        return self._create(kind, obj, manager, dry_run)

    def _create(self, kind, obj, manager, dry_run=False, internal=False):
        meta = obj["metadata"]
        with self.lock:
            kind.defaults(obj)
            rv_set = meta.pop("resourceVersion", None)
            meta.pop("deletionTimestamp", None)
            meta.pop("deletionGracePeriodSeconds", None)
            meta.pop("selfLink", None)
            if not meta.get("name") and meta.get("generateName"):
                gn = meta["generateName"]
                for _ in range(8):
                    cand = gn + "".join(random.choice(NAME_CHARS) for _ in range(5))
                    if self.store.get(kind.resource, kind.key(meta.get("namespace", ""), cand)) \
                            is None:
                        break
                meta["name"] = cand
            name = meta.get("name") or ""
            if kind.namespaced and meta.get("namespace") and name and not internal:
                self._check_namespace(kind, meta["namespace"], name, dry_run)
            # Mutating admission.
            if kind.resource == "persistentvolumeclaims":
                spec = obj.setdefault("spec", {})
                if "storageClassName" not in spec and ANN_BETA_CLASS not in (
                        meta.get("annotations") or {}):
                    dc = self.default_class()
                    if dc:
                        spec["storageClassName"] = dc
            if self.protection and kind.resource in ("persistentvolumeclaims",
                                                      "persistentvolumes"):
                fin = ("kubernetes.io/pvc-protection" if kind.resource ==
                       "persistentvolumeclaims" else "kubernetes.io/pv-protection")
                fins = meta.setdefault("finalizers", [])
                if fin not in fins:
                    fins.append(fin)
            kind.prepare_create(obj)
            meta["uid"] = new_uid()
            meta["creationTimestamp"] = now_time()
            kind.defaults(obj)
            errs = kind.validate(obj)
            if errs:
                raise err_invalid(kind.kind, kind.group, name, errs)
            if rv_set:
                raise err_internal("resourceVersion should not be set on objects to be created")
            key = self.key_of(kind, obj)
            if self.store.get(kind.resource, key) is not None:
                raise err_already_exists(kind.resource, kind.group, name)
            self._set_managed(kind, obj, None, manager, None)
            if dry_run:
                return obj
            return self.store.put(kind.resource, key, obj, None)

    # -- update --------------------------------------------------------------------------

    def update(self, kind, ns, name, body, manager, sub=None, dry_run=False):
        obj = self.decode(kind, body)
        meta = obj["metadata"]
        if meta.get("name") and meta["name"] != name:
            raise err_bad_request("the name of the object (%s) does not match the name on the "
                                  "URL (%s)" % (meta["name"], name))
        meta["name"] = name
        _set_namespace(kind, meta, ns)
        with self.lock:
            old = self.store.get(kind.resource, kind.key(ns, name))
            if old is None:
                if kind.create_on_update and not sub:
                    return self._create(kind, obj, manager, dry_run), True
                raise err_not_found(kind.resource, kind.group, name)
            return self._update_from(kind, obj, old, manager, sub, dry_run), False

    def _update_from(self, kind, obj, old, manager, sub, dry_run):
        meta, om = obj["metadata"], old["metadata"]
        name = om["name"]
        rv = meta.get("resourceVersion")
        if rv and rv != om["resourceVersion"]:
            raise err_conflict(kind.resource, kind.group, name, MSG_MODIFIED)
        if meta.get("uid") and meta["uid"] != om["uid"]:
            raise err_conflict(kind.resource, kind.group, name,
                               "Precondition failed: UID in precondition: %s, UID in object "
                               "meta: %s" % (meta["uid"], om["uid"]))
        new = obj
        meta["uid"] = om["uid"]
        meta["creationTimestamp"] = om.get("creationTimestamp")
        for f in ("deletionTimestamp", "deletionGracePeriodSeconds"):
            if f in om:
                meta[f] = om[f]
            else:
                meta.pop(f, None)
        meta.pop("generation", None)
        if sub == "status":
            kind.prepare_status(new, old)
        elif sub == "finalize":
            fins = (new.get("spec") or {}).get("finalizers")
            new = clone(old)
            new.setdefault("spec", {})["finalizers"] = fins or []
            if not fins:
                new["spec"].pop("finalizers")
        else:
            kind.prepare_update(new, old)
        kind.defaults(new)
        if sub == "status":
            errs = kind.validate_status_update(new, old)
        else:
            errs = kind.validate_update(new, old)
        if errs:
            raise err_invalid(kind.kind, kind.group, name, errs)
        return self.commit_update(kind, new, old, manager, sub, dry_run)

    def commit_update(self, kind, new, old, manager, sub=None, dry_run=False):
        """Stores new in place of old (caller holds lock). No-op updates keep old."""
        new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
        if _same_object(new, old):
            return old
        self._set_managed(kind, new, old, manager, sub)
        if dry_run:
            return new
        key = self.key_of(kind, new)
        out = self.store.put(kind.resource, key, new, old)
        m = new["metadata"]
        if m.get("deletionTimestamp") and not m.get("finalizers") and (
                kind.resource != "namespaces" or not (new.get("spec") or {}).get("finalizers")):
            self.store.remove(kind.resource, key)
        return out

    # -- patch ---------------------------------------------------------------------------

    def patch(self, kind, ns, name, ctype, body, manager, sub=None, dry_run=False):
        try:
            p = json.loads(body or b"null")
        except ValueError as e:
            raise err_bad_request("error decoding patch: %s" % e) from None
        with self.lock:
            old = self.store.get(kind.resource, kind.key(ns, name))
            if old is None:
                raise err_not_found(kind.resource, kind.group, name)
            cur = dict(old)
            cur["kind"], cur["apiVersion"] = kind.kind, kind.api_version
            try:
                if ctype == "application/json-patch+json":
                    patched = json_patch(cur, p)
                elif ctype == "application/merge-patch+json":
                    if not isinstance(p, dict):
                        raise err_bad_request("error decoding patch: json: cannot unmarshal %s "
                                              "into Go value of type map[string]interface {}"
                                              % type(p).__name__)
                    patched = merge_patch(clone(cur), p)
                else:
                    if not isinstance(p, dict):
                        raise err_bad_request("error decoding patch: json: cannot unmarshal %s "
                                              "into Go value of type map[string]interface {}"
                                              % type(p).__name__)
                    patched = strategic_merge(clone(cur), p, kind.smp)
                    if patched is _DELETE:
                        patched = {}
            except PatchError as e:
                raise ApiError(422, "Invalid", str(e)) from None
            if not isinstance(patched, dict):
                raise ApiError(422, "Invalid", "the patch produced a document that is not an "
                               "object")
            patched = clone(patched)
            obj = self.decode(kind, patched)
            meta = obj["metadata"]
            if meta.get("name") != name:
                raise err_bad_request("the name of the object (%s) does not match the name on "
                                      "the URL (%s)" % (meta.get("name", ""), name))
            if kind.namespaced and meta.get("namespace") != ns:
                raise err_bad_request("the namespace of the provided object does not match the "
                                      "namespace sent on the request")
            return self._update_from(kind, obj, old, manager, sub, dry_run)

    # -- delete --------------------------------------------------------------------------

    def delete(self, kind, ns, name, opts, dry_run=False):
        """Returns (object, deleted_now)."""
        with self.lock:
            key = kind.key(ns, name)
            old = self.store.get(kind.resource, key)
            if old is None:
                raise err_not_found(kind.resource, kind.group, name)
            pre = opts.get("preconditions") or {}
            om = old["metadata"]
            # As rest.BeforeDelete words it: the Kind stands where the resource usually does.
            if pre.get("uid") and pre["uid"] != om["uid"]:
                raise err_conflict(kind.kind, kind.group, name,
                                   "the UID in the precondition (%s) does not match the UID in "
                                   "record (%s). The object might have been deleted and then "
                                   "recreated" % (pre["uid"], om["uid"]))
            if pre.get("resourceVersion") and pre["resourceVersion"] != om["resourceVersion"]:
                raise err_conflict(kind.kind, kind.group, name,
                                   "the ResourceVersion in the precondition (%s) does not match "
                                   "the ResourceVersion in record (%s). The object might have "
                                   "been modified" % (pre["resourceVersion"],
                                                      om["resourceVersion"]))
            return self._delete(kind, key, old, opts.get("propagationPolicy"), dry_run)

    def _delete(self, kind, key, old, policy=None, dry_run=False):
        om = old["metadata"]
        if kind.resource == "namespaces":
            if om.get("deletionTimestamp"):
                return old, False
            if not (old.get("spec") or {}).get("finalizers") and not om.get("finalizers"):
                if dry_run:
                    return old, True
                self.store.remove(kind.resource, key)
                return old, True
            new = clone(old)
            new["metadata"]["deletionTimestamp"] = now_time()
            new["metadata"]["deletionGracePeriodSeconds"] = 0
            new.setdefault("status", {})["phase"] = "Terminating"
            if dry_run:
                return new, False
            return self.store.put(kind.resource, key, new, old), False
        if om.get("deletionTimestamp"):
            return old, False
        fins = list(om.get("finalizers") or [])
        if policy == "Orphan" and "orphan" not in fins:
            fins.append("orphan")
        elif policy == "Foreground" and "foregroundDeletion" not in fins:
            fins.append("foregroundDeletion")
        if fins:
            new = clone(old)
            new["metadata"]["finalizers"] = fins
            new["metadata"]["deletionTimestamp"] = now_time()
            new["metadata"]["deletionGracePeriodSeconds"] = 0
            if dry_run:
                return new, False
            return self.store.put(kind.resource, key, new, old), False
        if dry_run:
            return old, True
        self.store.remove(kind.resource, key)
        return old, True

    # -- list ----------------------------------------------------------------------------

    def wait_for_rv(self, rv, timeout=3.0):
        deadline = time.monotonic() + timeout
        with self.store.rv_cond:
            while self.store.rv < rv:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.store.rv_cond.wait(left)
        return True


def _set_namespace(kind, meta, ns):
    """Puts a decoded object in the request's namespace (none for a cluster-scoped kind);
    400 when the body names another."""
    if kind.namespaced:
        if meta.get("namespace") and meta["namespace"] != ns:
            raise err_bad_request("the namespace of the provided object does not match the "
                                  "namespace sent on the request")
        meta["namespace"] = ns
    else:
        meta.pop("namespace", None)


def parse_rv(rv):
    """A resourceVersion query parameter as a number (0 when empty); 400 when not one."""
    if not rv:
        return 0
    try:
        return int(rv)
    except ValueError:
        raise err_bad_request('invalid resource version "%s": strconv.ParseUint: '
                              'parsing "%s": invalid syntax' % (rv, rv)) from None


def too_large_rv(rv, cur):
    return ApiError(504, "Timeout", "Too large resource version: %d, current: %d" % (rv, cur),
                    {"causes": [{"reason": "ResourceVersionTooLarge",
                                 "message": "Too large resource version"}],
                     "retryAfterSeconds": 1}, headers={"Retry-After": "1"})


def encode_continue(rv, key):
    tok = {"v": "meta.k8s.io/v1", "rv": rv, "start": key + "\x00"}
    return base64.urlsafe_b64encode(dumps(tok).encode()).decode().rstrip("=")


def decode_continue(tok):
    try:
        raw = base64.urlsafe_b64decode(tok + "=" * (-len(tok) % 4))
        d = json.loads(raw)
        if d.get("v") != "meta.k8s.io/v1":
            raise ValueError("continue key is not valid: incorrect encoded start "
                             "resourceVersion (version meta.k8s.io/v1)")
        rv = int(d["rv"])
        start = d["start"]
        if not isinstance(start, str) or not start:
            raise ValueError("continue key is not valid: encoded start key empty")
        return rv, start
    except (ValueError, KeyError, TypeError) as e:
        msg = str(e) if str(e).startswith("continue key") else \
            "continue key is not valid: %s" % e
        raise err_bad_request("invalid continue token: %s" % msg) from None


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


# ---------------------------------------------------------------------------------------
# Protobuf request bodies (kubectl's typed clients send them, e.g. `kubectl create namespace`)
# ---------------------------------------------------------------------------------------

PB_MAGIC = b"k8s\x00"
_PB_TIME = {1: ("seconds", "i"), 2: ("nanos", "i")}
_PB_META = {1: ("name", "s"), 2: ("generateName", "s"), 3: ("namespace", "s"),
            5: ("uid", "s"), 6: ("resourceVersion", "s"), 8: ("creationTimestamp", "t"),
            11: ("labels", "map"), 12: ("annotations", "map"), 14: ("finalizers", "rs")}
PB_KINDS = {
    "Namespace": {1: ("metadata", _PB_META), 2: ("spec", {1: ("finalizers", "rs")}),
                  3: ("status", {1: ("phase", "s")})},
    "Lease": {1: ("metadata", _PB_META),
              2: ("spec", {1: ("holderIdentity", "s"), 2: ("leaseDurationSeconds", "i"),
                           3: ("acquireTime", "mt"), 4: ("renewTime", "mt"),
                           5: ("leaseTransitions", "i")})},
    "Node": {1: ("metadata", _PB_META)},
}


def _pb_varint(buf, i):
    shift = result = 0
    while True:
        if i >= len(buf):
            raise DecodeError("proto: unexpected end of data")
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, i
        shift += 7
        if shift > 63:
            raise DecodeError("proto: integer overflow")


def _pb_fields(buf):
    i, out = 0, []
    while i < len(buf):
        key, i = _pb_varint(buf, i)
        fn, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _pb_varint(buf, i)
        elif wt == 2:
            n, i = _pb_varint(buf, i)
            v = bytes(buf[i:i + n])
            i += n
        elif wt == 1:
            v, i = buf[i:i + 8], i + 8
        elif wt == 5:
            v, i = buf[i:i + 4], i + 4
        else:
            raise DecodeError("proto: illegal wireType %d" % wt)
        out.append((fn, v))
    return out


def _pb_message(buf, schema):
    out = {}
    for fn, v in _pb_fields(buf):
        if fn not in schema:
            continue
        name, typ = schema[fn]
        if isinstance(typ, dict):
            out[name] = _pb_message(v, typ)
        elif typ == "s":
            out[name] = v.decode("utf-8")
        elif typ == "i":
            out[name] = v - (1 << 64) if v >= 1 << 63 else v
        elif typ == "rs":
            out.setdefault(name, []).append(v.decode("utf-8"))
        elif typ == "map":
            e = _pb_message(v, {1: ("k", "s"), 2: ("v", "s")})
            out.setdefault(name, {})[e.get("k", "")] = e.get("v", "")
        elif typ in ("t", "mt"):
            t = _pb_message(v, _PB_TIME)
            sec = t.get("seconds", 0) + t.get("nanos", 0) / 1e9
            d = datetime.datetime.fromtimestamp(sec, datetime.timezone.utc)
            out[name] = d.strftime("%Y-%m-%dT%H:%M:%S.%fZ" if typ == "mt"
                                   else "%Y-%m-%dT%H:%M:%SZ")
    return out


def decode_protobuf(kind, body):
    """A k8s protobuf envelope (runtime.Unknown) as a JSON-like dict."""
    if not body.startswith(PB_MAGIC):
        raise err_bad_request("provided data does not appear to be a protobuf message, "
                              "expected prefix [107 56 115 0]")
    try:
        env = _pb_message(body[4:], {1: ("typeMeta", {1: ("apiVersion", "s"),
                                                      2: ("kind", "s")})})
        raw = next((v for fn, v in _pb_fields(body[4:]) if fn == 2), b"")
        schema = PB_KINDS.get(kind.kind)
        if schema is None:
            raise ApiError(415, "UnsupportedMediaType", "the local test API server decodes "
                           "protobuf bodies only for %s; send application/json"
                           % ", ".join(sorted(PB_KINDS)), {})
        obj = _pb_message(raw, schema)
    except DecodeError as e:
        raise err_bad_request('%s in version "%s" cannot be handled as a %s: %s'
                              % (kind.kind, kind.version, kind.kind, e)) from None
    tm = env.get("typeMeta", {})
    out = {"kind": tm.get("kind") or kind.kind, "apiVersion": tm.get("apiVersion") or
           kind.api_version}
    out.update(obj)
    return out


# ---------------------------------------------------------------------------------------
# Tables (server-side printing for kubectl get)
# ---------------------------------------------------------------------------------------

def table_accept(accept):
    """Returns ('table', apiVersion) or ('json', None); raises 406 when nothing fits."""
    if not accept or not accept.strip():
        return "json", None
    for part in accept.split(","):
        params = [p.strip() for p in part.split(";")]
        mt = params[0].lower()
        d = {}
        for p in params[1:]:
            if "=" in p:
                k, v = p.split("=", 1)
                d[k.strip()] = v.strip()
        if mt not in ("application/json", "*/*", "application/*"):
            continue
        if d.get("as") == "Table" and d.get("g") == "meta.k8s.io" and \
                d.get("v") in ("v1", "v1beta1"):
            return "table", "meta.k8s.io/" + d["v"]
        if "as" not in d:
            return "json", None
    raise ApiError(406, "NotAcceptable", "only the following media types are accepted: "
                   "application/json, application/yaml, application/vnd.kubernetes.protobuf",
                   {})


def table_object(kind, obj, include):
    if include == "None":
        return None
    if include == "Object":
        d = {"kind": kind.kind, "apiVersion": kind.api_version}
        d.update(obj)
        return d
    meta = {k: v for k, v in obj["metadata"].items()}
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": meta}


def make_table(kind, objs, av, include, headers=True, list_meta=None):
    rows = []
    for o in objs:
        r = {"cells": kind.row(o)}
        ob = table_object(kind, o, include)
        if ob is not None:
            r["object"] = ob
        rows.append(r)
    return {"kind": "Table", "apiVersion": av, "metadata": list_meta or {},
            "columnDefinitions": kind.columns() if headers else None, "rows": rows}


# ---------------------------------------------------------------------------------------
# Discovery and OpenAPI v3
# ---------------------------------------------------------------------------------------

def resource_list(group, version):
    res = []
    for k in sorted((k for k in KIND_LIST if k.group == group and k.version == version),
                    key=lambda k: k.resource):
        d = {"name": k.resource, "singularName": k.singular, "namespaced": k.namespaced,
             "kind": k.kind, "verbs": list(k.verbs)}
        if k.short:
            d["shortNames"] = list(k.short)
        if k.categories:
            d["categories"] = list(k.categories)
        d["storageVersionHash"] = base64.b64encode(hashlib.sha256(
            ("%s/%s/%s" % (group, version, k.kind)).encode()).digest()[:8]).decode()
        res.append(d)
        if k.resource == "namespaces":
            res.append({"name": "namespaces/finalize", "singularName": "",
                        "namespaced": False, "kind": "Namespace", "verbs": ["update"]})
        if k.has_status:
            res.append({"name": k.resource + "/status", "singularName": "",
                        "namespaced": k.namespaced, "kind": k.kind,
                        "verbs": ["get", "patch", "update"]})
    out = {"kind": "APIResourceList"}
    if group:
        out["apiVersion"] = "v1"
    out["groupVersion"] = version if not group else group + "/" + version
    out["resources"] = res
    return out


def api_group(name):
    vs = [{"groupVersion": name + "/" + v, "version": v} for v in GROUPS[name]]
    return {"name": name, "versions": vs, "preferredVersion": vs[0]}


def openapi_gv_doc(group, version):
    paths, schemas = {}, {}
    pkg = {"": "core", "storage.k8s.io": "storage", "coordination.k8s.io": "coordination",
           "apps": "apps", RBAC_GROUP: "rbac"}
    prefix = "/api/v1" if not group else "/apis/%s/%s" % (group, version)
    params = [{"name": n, "in": "query", "schema": {"type": "string", "uniqueItems": True}}
              for n in ("dryRun", "fieldManager", "fieldValidation")]
    for k in KIND_LIST:
        if k.group != group or k.version != version:
            continue
        sname = "io.k8s.api.%s.%s.%s" % (pkg[group], version, k.kind)
        gvk = {"group": group, "version": version, "kind": k.kind}
        ref = {"$ref": "#/components/schemas/" + sname}
        schemas[sname] = {
            "description": "%s (minimal schema served by the local test API server)" % k.kind,
            "type": "object",
            "properties": {"apiVersion": {"type": "string"}, "kind": {"type": "string"},
                           "metadata": {"type": "object"}, "spec": {"type": "object"},
                           "status": {"type": "object"}},
            "x-kubernetes-group-version-kind": [gvk]}
        base = prefix + ("/namespaces/{namespace}/" if k.namespaced else "/") + k.resource
        body = {"content": {"application/json": {"schema": ref}}, "required": True}
        ok = {"200": {"description": "OK", "content": {"application/json": {"schema": ref}}}}
        paths[base] = {
            "get": {"operationId": "list" + k.kind, "x-kubernetes-action": "list",
                    "x-kubernetes-group-version-kind": gvk, "responses": ok},
            "post": {"operationId": "create" + k.kind, "x-kubernetes-action": "post",
                     "x-kubernetes-group-version-kind": gvk, "parameters": params,
                     "requestBody": body, "responses": ok}}
        paths[base + "/{name}"] = {
            "get": {"operationId": "read" + k.kind, "x-kubernetes-action": "get",
                    "x-kubernetes-group-version-kind": gvk, "responses": ok},
            "put": {"operationId": "replace" + k.kind, "x-kubernetes-action": "put",
                    "x-kubernetes-group-version-kind": gvk, "parameters": params,
                    "requestBody": body, "responses": ok},
            "patch": {"operationId": "patch" + k.kind, "x-kubernetes-action": "patch",
                      "x-kubernetes-group-version-kind": gvk,
                      "parameters": params + [{"name": "force", "in": "query",
                                               "schema": {"type": "boolean",
                                                          "uniqueItems": True}}],
                      "requestBody": {"content": {
                          "application/json-patch+json": {"schema": {"type": "object"}},
                          "application/merge-patch+json": {"schema": {"type": "object"}}},
                          "required": True},
                      "responses": ok},
            "delete": {"operationId": "delete" + k.kind, "x-kubernetes-action": "delete",
                       "x-kubernetes-group-version-kind": gvk, "responses": ok}}
    return {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": "v1.32.0"},
            "paths": paths, "components": {"schemas": schemas}}


def _gv_list():
    out = [("", "v1")]
    for g, vs in GROUPS.items():
        out += [(g, v) for v in vs]
    return out


OPENAPI_DOCS = {}
for _g, _v in _gv_list():
    _doc = dumps(openapi_gv_doc(_g, _v))
    _p = "api/v1" if not _g else "apis/%s/%s" % (_g, _v)
    OPENAPI_DOCS[_p] = (_doc, hashlib.sha512(_doc.encode()).hexdigest().upper()[:128])
OPENAPI_ROOT = dumps({"paths": {p: {"serverRelativeURL": "/openapi/v3/%s?hash=%s" % (p, h)}
                                for p, (d, h) in OPENAPI_DOCS.items()}})


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


# ---------------------------------------------------------------------------------------
# HTTP server
# ---------------------------------------------------------------------------------------

class Watcher:
    _ids = 0

    def __init__(self, kind, ns, lsel, fsel, path, query, ua):
        Watcher._ids += 1
        self.id = Watcher._ids
        self.q = queue.SimpleQueue()
        self.kind, self.ns, self.lsel, self.fsel = kind, ns, lsel, fsel
        self.path, self.query, self.ua = path, query, ua
        self.started = time.time()

    def matches(self, key, obj):
        if obj is None:
            return False
        if self.ns is not None and not key.startswith(self.ns + "/"):
            return False
        return labels_match(self.lsel, obj["metadata"].get("labels")) and \
            fields_match(self.fsel, self.kind, obj)

    def info(self):
        return {"id": self.id, "resource": self.kind.resource, "path": self.path,
                "query": self.query, "user_agent": self.ua, "started": self.started}


class Fault:
    _ids = 0

    def __init__(self, d):
        Fault._ids += 1
        self.id = Fault._ids
        self.method = (d.get("method") or "*").upper()
        # "POST,PUT": any of these methods.
        self.methods = frozenset(m.strip() for m in self.method.split(",") if m.strip())
        self.prefix = d.get("path_prefix") or d.get("prefix") or "/"
        self.query_contains = d.get("query_contains") or ""
        self.user_agent = d.get("user_agent") or ""  # a prefix of the User-Agent header
        self.probability = float(d.get("probability") or 1.0)  # of a matching request
        self.count = int(d.get("count", 1))
        self.forever = self.count <= 0  # until DELETE /admin/faults
        self.hits = 0
        self.status = d.get("status")
        self.retry_after = d.get("retry_after")
        self.delay_ms = int(d.get("delay_ms") or 0)
        self.action = d.get("action") or ("error" if self.status else "delay")
        self.body = d.get("body")
        self.message = d.get("message")

    def matches(self, method, path, query, user_agent=""):
        return (self.forever or self.count > 0) and \
            ("*" in self.methods or method in self.methods) and \
            path.startswith(self.prefix) and self.query_contains in query and \
            user_agent.startswith(self.user_agent) and \
            (self.probability >= 1.0 or random.random() < self.probability)

    def info(self):
        return {k: getattr(self, k) for k in ("id", "method", "prefix", "query_contains",
                                               "user_agent", "probability", "count", "forever",
                                               "hits", "status", "retry_after", "delay_ms",
                                               "action", "body", "message")}


# The mandatory API Priority and Fairness objects a request can be classified into.
APF_FLOWSCHEMAS = ("exempt", "probes", "service-accounts", "global-default")
APF_PRIORITY_LEVELS = ("exempt", "workload-low", "global-default")

REASONS = {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound",
           405: "MethodNotAllowed", 409: "Conflict", 410: "Expired", 422: "Invalid",
           429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable",
           504: "Timeout"}
MESSAGES = {500: "Internal error occurred: injected fault",
            503: "the server is currently unable to handle the request",
            429: "Too many requests, please try again later.",
            504: "Timeout: request did not complete within requested timeout - context deadline "
                 "exceeded",
            410: "too old resource version: 1 (2)", 403: "forbidden: injected fault",
            409: "Operation cannot be fulfilled: " + MSG_MODIFIED}


class State:
    def __init__(self, opts):
        self.opts = opts
        self.reg = Registry(opts)
        self.ctrl = Controllers(self.reg)
        self.admin_token = opts.token
        self.tokens = {opts.token}
        self.faults = []
        self.flock = threading.Lock()
        self.reqlog = []
        self.reqseq = 0
        self.rlock = threading.Lock()
        self.bookmark_interval = opts.bookmark_interval
        self.watch_list = opts.watch_list == "on"
        self.port = 0
        # API Priority and Fairness: the UIDs of the mandatory FlowSchemas and
        # PriorityLevelConfigurations a request is classified into (new at every start, as the
        # objects of a fresh cluster are).
        self.apf = opts.apf == "on"
        self.apf_uids = {"flowschemas": {n: new_uid() for n in APF_FLOWSCHEMAS},
                         "prioritylevelconfigurations": {n: new_uid()
                                                         for n in APF_PRIORITY_LEVELS}}

    def all_watchers(self):
        with self.reg.lock:
            return [w for ws in self.reg.store.watchers.values() for w in ws]

    def take_fault(self, method, path, query, user_agent=""):
        with self.flock:
            for f in self.faults:
                if f.matches(method, path, query, user_agent):
                    f.hits += 1
                    if not f.forever:
                        f.count -= 1
                        if f.count <= 0:
                            self.faults.remove(f)
                    return f
        return None

    def log_request(self, entry):
        with self.rlock:
            self.reqseq += 1
            entry["seq"] = self.reqseq
            self.reqlog.append(entry)
            if len(self.reqlog) > 200000:
                del self.reqlog[:50000]


IDLE_TIMEOUT = 300
MAX_BODY = 3 * 1024 * 1024
GZIP_THRESHOLD = 128 * 1024


class Headers:
    """Case-insensitive request headers (what the handler needs of email.message)."""

    def __init__(self):
        self.d = {}
        self.order = []

    def add(self, k, v):
        lk = k.lower()
        if lk in self.d:
            self.d[lk] = self.d[lk] + ", " + v
        else:
            self.d[lk] = v
            self.order.append(k)

    def get(self, k, default=None):
        return self.d.get(k.lower(), default)

    def __getitem__(self, k):
        return self.d.get(k.lower())

    def __contains__(self, k):
        return k.lower() in self.d

    def items(self):
        return [(k, self.d[k.lower()]) for k in self.order]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    state = None  # set by main

    def parse_request(self):
        """A leaner replacement for BaseHTTPRequestHandler.parse_request (whose use of
        email.parser costs more than the rest of a request)."""
        self.command = None
        self.request_version = "HTTP/0.9"
        self.close_connection = True
        line = self.raw_requestline.decode("iso-8859-1").rstrip("\r\n")
        self.requestline = line
        words = line.split()
        if len(words) != 3 or not words[2].startswith("HTTP/"):
            self.send_error(400, "Bad request syntax (%r)" % line)
            return False
        self.command, self.path, self.request_version = words
        if self.request_version not in ("HTTP/1.0", "HTTP/1.1"):
            self.send_error(505, "Invalid HTTP version (%s)" % self.request_version)
            return False
        hdrs = Headers()
        for _ in range(200):
            raw = self.rfile.readline(65537)
            if len(raw) > 65536:
                self.send_error(431, "Line too long")
                return False
            if raw in (b"\r\n", b"\n", b""):
                break
            k, sep, v = raw.decode("iso-8859-1").partition(":")
            if not sep or not k.strip():
                self.send_error(400, "Bad header line")
                return False
            hdrs.add(k.strip(), v.strip())
        else:
            self.send_error(431, "Too many headers")
            return False
        self.headers = hdrs
        conn = (hdrs.get("Connection") or "").lower()
        if self.request_version == "HTTP/1.1":
            self.close_connection = conn == "close"
        else:
            self.close_connection = conn != "keep-alive"
        if (hdrs.get("Expect") or "").lower() == "100-continue" and \
                self.request_version == "HTTP/1.1":
            return self.handle_expect_100()
        return True

    def setup(self):
        super().setup()
        self.connection.settimeout(IDLE_TIMEOUT)

    def log_message(self, fmt, *args):
        if self.state.opts.verbose:
            log("http: " + (fmt % args))

    def send_response(self, code, message=None):
        if not getattr(self, "_logged", True) and not self.path.startswith("/admin/"):
            self._logged = True
            u = urlsplit(self.path)
            self.state.log_request({
                "time": self._t0, "method": self.command, "path": u.path, "query": u.query,
                "status": code, "user_agent": self.headers.get("User-Agent", ""),
                "content_type": self.headers.get("Content-Type", ""),
                "warnings": list(getattr(REQUEST, "warnings", None) or ()),
                "user": getattr(self, "_user", None), "watch": getattr(self, "_watch", False),
                "duration_ms": round((time.time() - self._t0) * 1000, 3)})
        self._responded = True
        self.send_response_only(code, message)
        self.send_header("Date", self.date_time_string())
        self.send_apf_headers()

    def send_apf_headers(self):
        """What the WithPriorityAndFairness filter adds to every request it classifies (all but
        those refused by authentication, which runs before it): the matched FlowSchema's and
        PriorityLevelConfiguration's UIDs, under the names Go's canonical header form gives
        them. The classification is the mandatory objects' (health probes and system:masters
        are exempt; service accounts are workload-low; everybody else global-default)."""
        st = self.state
        if not st.apf or self.path.startswith("/admin/"):
            return
        path = urlsplit(self.path).path
        if path in ("/healthz", "/livez", "/readyz") or \
                path.startswith(("/healthz/", "/livez/", "/readyz/")):
            fs, pl = "probes", "exempt"
        elif path == "/version":
            fs, pl = "global-default", "global-default"
        elif getattr(self, "_user", None) is None:
            return
        elif "system:masters" in (getattr(self, "_groups", None) or ()):
            fs, pl = "exempt", "exempt"
        elif self._user.startswith("system:serviceaccount:"):
            fs, pl = "service-accounts", "workload-low"
        else:
            fs, pl = "global-default", "global-default"
        self.send_header("X-Kubernetes-Pf-Flowschema-Uid", st.apf_uids["flowschemas"][fs])
        self.send_header("X-Kubernetes-Pf-Prioritylevel-Uid",
                         st.apf_uids["prioritylevelconfigurations"][pl])

    # -- plumbing ----------------------------------------------------------------------------

    def do_GET(self):
        self.dispatch("GET")

    def do_POST(self):
        self.dispatch("POST")

    def do_PUT(self):
        self.dispatch("PUT")

    def do_PATCH(self):
        self.dispatch("PATCH")

    def do_DELETE(self):
        self.dispatch("DELETE")

    def do_HEAD(self):
        self.dispatch("HEAD")

    def do_OPTIONS(self):
        self.dispatch("OPTIONS")

    def read_body(self):
        te = (self.headers.get("Transfer-Encoding") or "").lower()
        if "chunked" in te:
            out = b""
            while True:
                line = self.rfile.readline(1024)
                size = int(line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                        pass
                    return out
                out += self.rfile.read(size)
                self.rfile.readline(1024)
                if len(out) > MAX_BODY:
                    raise ApiError(413, "RequestEntityTooLarge",
                                   "Request entity too large: limit is 3145728")
        n = int(self.headers.get("Content-Length") or 0)
        if n > MAX_BODY:
            self.close_connection = True
            raise ApiError(413, "RequestEntityTooLarge",
                           "Request entity too large: limit is 3145728")
        return self.rfile.read(n) if n > 0 else b""

    def send_body(self, code, body, ctype="application/json", headers=None):
        if isinstance(body, str):
            body = body.encode("utf-8")
        gz = False
        if len(body) >= GZIP_THRESHOLD and self.command == "GET" and \
                "gzip" in (self.headers.get("Accept-Encoding") or "").lower():
            # APIResponseCompression: large responses are gzipped at level 1.
            body = gzip.compress(body, compresslevel=1)
            gz = True
        self.send_response(code)
        self.send_header("Audit-Id", new_uid())
        self.send_header("Cache-Control", "no-cache, private")
        self.send_header("Content-Type", ctype)
        for k, v in (headers or {}).items():
            self.send_header(k, str(v))
        for w in getattr(REQUEST, "warnings", None) or ():
            self.send_header("Warning", '299 - "%s"' % w.replace('"', '\\"'))
        if gz:
            self.send_header("Content-Encoding", "gzip")
            self.send_header("Vary", "Accept-Encoding")
        self.send_header("Content-Length", str(len(body)))
        # Headers and body in one write: with separate small writes, Nagle's algorithm and
        # the peer's delayed ACK would stall every response by ~40 ms.
        self._headers_buffer.append(b"\r\n")
        if self.command != "HEAD":
            self._headers_buffer.append(body)
        self.flush_headers()

    def send_error_status(self, e):
        if e.text is not None:
            self.send_body(e.code, e.text, "text/plain; charset=utf-8", e.headers)
        else:
            self.send_body(e.code, dumps(e.status()), headers=e.headers)

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

    def dispatch(self, method):
        self._t0 = time.time()
        self._logged = False
        self._responded = False
        self._watch = False
        self._user = None
        try:
            body = self.read_body()
        except ApiError as e:
            self.send_error_status(e)
            return
        except (OSError, ValueError):
            self.close_connection = True
            return
        u = urlsplit(self.path)
        path = u.path
        q = {k: v[0] for k, v in parse_qs(u.query, keep_blank_values=True).items()}
        REQUEST.warnings = []
        REQUEST.field_validation = q.get("fieldValidation") or "Warn"
        try:
            if REQUEST.field_validation not in ("Ignore", "Warn", "Strict"):
                raise err_bad_request('fieldValidation parameter unsupported: "%s". Must be one '
                                      'of "Ignore", "Warn", or "Strict"'
                                      % REQUEST.field_validation)
            if path.startswith("/admin/"):
                self.handle_admin(method, path, q, body)
                return
            if path in ("/healthz", "/livez", "/readyz", "/version") or \
                    path.startswith(("/healthz/", "/livez/", "/readyz/")):
                if self.handle_public(path):
                    return
            self._user = self.authenticate()
            if self._user is None:
                raise ApiError(401, "Unauthorized", "Unauthorized")
            self.authorize(method, path, q)
            f = self.state.take_fault(method, path, u.query,
                                      self.headers.get("User-Agent", "") or "")
            if f is not None and self.apply_fault(f):
                return
            self.route(method, path, q, body)
        except ApiError as e:
            if self._responded:  # e.g. inside a watch stream: nothing sane left to send
                self.close_connection = True
            else:
                self.send_error_status(e)
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError, socket.timeout):
            self.close_connection = True
        except Exception:
            log("error: %s %s\n%s" % (method, self.path, traceback.format_exc()))
            if self._responded:
                self.close_connection = True
                return
            try:
                self.send_error_status(err_internal("unexpected server error"))
            except OSError:
                self.close_connection = True

    def apply_fault(self, f):
        """Returns True when the request was answered (or dropped) by the fault."""
        if f.delay_ms:
            time.sleep(f.delay_ms / 1000.0)
        if f.action == "delay" and not f.status:
            return False
        if f.action == "disconnect":
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return True
        code = int(f.status)
        headers = {}
        if f.retry_after is not None:
            headers["Retry-After"] = str(f.retry_after)
        msg = f.message or MESSAGES.get(code, "injected fault")
        text = None
        if f.body == "text" or (code == 429 and f.body != "status"):
            text = msg + "\n"
        details = {}
        if f.retry_after is not None:
            details["retryAfterSeconds"] = int(f.retry_after)
        e = ApiError(code, REASONS.get(code, "Unknown"), msg, details or None, headers, text)
        if f.action == "watch_error":
            # What the watch cache does: 200, then one ERROR event carrying the Status.
            self._watch = True
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.write_event_line(dumps({"type": "ERROR", "object": e.status()}))
            self.wfile.write(b"0\r\n\r\n")
            return True
        self.send_error_status(e)
        return True

    def handle_public(self, path):
        if path == "/version":
            self.send_body(200, json.dumps(K8S_VERSION, indent=2))
        else:
            self.send_body(200, "ok", "text/plain; charset=utf-8",
                           {"X-Content-Type-Options": "nosniff"})
        return True

    # -- routing -----------------------------------------------------------------------------

    def route(self, method, path, q, body):
        segs = [unquote(s) for s in path.split("/") if s]
        if not segs:
            paths = ["/api", "/api/v1", "/apis", "/healthz", "/livez", "/readyz", "/version",
                     "/openapi/v3"] + ["/apis/%s" % g for g in GROUPS] + \
                ["/apis/%s/%s" % (g, v) for g in GROUPS for v in GROUPS[g]]
            self.send_body(200, json.dumps({"paths": sorted(paths)}, indent=2))
            return
        if segs[0] == "openapi":
            return self.route_openapi(segs)
        if segs[0] == "api":
            if len(segs) == 1:
                if method != "GET":
                    raise err_method_not_allowed()
                self.send_body(200, dumps({"kind": "APIVersions", "versions": ["v1"],
                                           "serverAddressByClientCIDRs": [{
                                               "clientCIDR": "0.0.0.0/0",
                                               "serverAddress": "127.0.0.1:%d"
                                               % self.state.port}]}))
                return
            group, version, rest = "", segs[1], segs[2:]
        elif segs[0] == "apis":
            if len(segs) == 1:
                self.send_body(200, dumps({"kind": "APIGroupList", "apiVersion": "v1",
                                           "groups": [api_group(g) for g in GROUPS]}))
                return
            if segs[1] not in GROUPS:
                raise err_path_not_found()
            if len(segs) == 2:
                d = {"kind": "APIGroup", "apiVersion": "v1"}
                d.update(api_group(segs[1]))
                self.send_body(200, dumps(d))
                return
            group, version, rest = segs[1], segs[2], segs[3:]
        else:
            self.send_body(404, "404 page not found\n", "text/plain; charset=utf-8")
            return
        if (group, version) not in _gv_list():
            raise err_path_not_found()
        if not rest:
            if method != "GET":
                raise err_method_not_allowed()
            self.send_body(200, dumps(resource_list(group, version)))
            return
        watch_path = False
        if rest[0] == "watch":
            watch_path = True
            rest = rest[1:]
        ns = None
        if len(rest) >= 3 and rest[0] == "namespaces" and \
                (group, version, rest[2]) in KINDS and KINDS[(group, version, rest[2])].namespaced:
            ns = rest[1]
            rest = rest[2:]
        kind = KINDS.get((group, version, rest[0])) if rest else None
        if kind is None or len(rest) > 3:
            raise err_path_not_found()
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if (kind.namespaced and ns is None and name is not None) or \
                (not kind.namespaced and ns is not None):
            raise err_path_not_found()
        if sub is not None and not ((sub == "status" and kind.has_status) or
                                    (sub == "finalize" and kind.resource == "namespaces")):
            raise err_path_not_found()
        self.serve_resource(method, kind, ns, name, sub, q, body, watch_path)

    def route_openapi(self, segs):
        if segs[:2] == ["openapi", "v3"]:
            if len(segs) == 2:
                self.send_body(200, OPENAPI_ROOT)
                return
            doc = OPENAPI_DOCS.get("/".join(segs[2:]))
            if doc is not None:
                self.send_body(200, doc[0], headers={"Etag": '"%s"' % doc[1]})
                return
        self.send_body(404, "404 page not found\n", "text/plain; charset=utf-8")

    def manager(self, q):
        fm = q.get("fieldManager")
        if fm:
            return fm
        ua = self.headers.get("User-Agent") or "unknown"
        return ua.split("/", 1)[0]

    def dry_run(self, q):
        dr = q.get("dryRun")
        if dr is None:
            return False
        if dr != "All":
            raise err_bad_request('dryRun: Unsupported value: "%s": supported values: "All"'
                                  % dr)
        return True

    def serve_resource(self, method, kind, ns, name, sub, q, body, watch_path):
        reg = self.state.reg
        if method == "GET":
            watch = watch_path
            if "watch" in q:
                try:
                    watch = watch or parse_go_bool(q["watch"])
                except ValueError:
                    raise err_bad_request('strconv.ParseBool: parsing "%s": invalid syntax'
                                          % q["watch"]) from None
            if watch:
                if name is not None:
                    if sub is not None:
                        raise err_path_not_found()
                    q = dict(q)
                    extra = "metadata.name=" + name
                    q["fieldSelector"] = extra + ("," + q["fieldSelector"]
                                                  if q.get("fieldSelector") else "")
                return self.serve_watch(kind, ns, q)
            if name is None:
                return self.serve_list(kind, ns, q)
            mode, av = table_accept(self.headers.get("Accept"))
            obj = reg.get(kind, ns or "", name)
            if mode == "table":
                t = make_table(kind, [obj], av, q.get("includeObject", "Metadata"),
                               list_meta={"resourceVersion": obj["metadata"]["resourceVersion"]})
                return self.send_body(200, dumps(t))
            return self.send_object(200, kind, obj)
        if method == "POST":
            if name is not None:
                raise err_method_not_allowed()
            if kind.namespaced and ns is None:
                raise err_method_not_allowed()
            body = self.check_json(body, kind)
            obj = reg.create(kind, ns or "", body, self.manager(q), self.dry_run(q))
            return self.send_object(201, kind, obj)
        if method == "PUT":
            if name is None:
                raise err_method_not_allowed()
            body = self.check_json(body, kind)
            obj, created = reg.update(kind, ns or "", name, body, self.manager(q), sub,
                                      self.dry_run(q))
            return self.send_object(201 if created else 200, kind, obj)
        if method == "PATCH":
            if name is None or sub == "finalize":
                raise err_method_not_allowed()
            ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
            if ctype not in ("application/json-patch+json", "application/merge-patch+json",
                             "application/strategic-merge-patch+json"):
                if ctype == "application/apply-patch+yaml":
                    raise ApiError(415, "UnsupportedMediaType", "server-side apply is not "
                                   "supported by the local test API server", {})
                raise ApiError(415, "UnsupportedMediaType",
                               "the body of the request was in an unknown format - accepted "
                               "media types include: application/json-patch+json, "
                               "application/merge-patch+json, application/apply-patch+yaml, "
                               "application/strategic-merge-patch+json", {})
            obj = reg.patch(kind, ns or "", name, ctype, body, self.manager(q), sub,
                            self.dry_run(q))
            return self.send_object(200, kind, obj)
        if method == "DELETE":
            if sub is not None:
                raise err_method_not_allowed()
            opts = {}
            if body.strip():
                try:
                    opts = json.loads(body)
                except ValueError as e:
                    raise err_bad_request("json: %s" % e) from None
                if not isinstance(opts, dict):
                    raise err_bad_request("json: cannot unmarshal into Go value of type "
                                          "v1.DeleteOptions")
            if "propagationPolicy" in q:
                opts["propagationPolicy"] = q["propagationPolicy"]
            dry = self.dry_run(q) or opts.get("dryRun") == ["All"]
            if name is None:
                if kind.namespaced and ns is None:
                    raise err_method_not_allowed()
                return self.serve_delete_collection(kind, ns, q, opts, dry)
            obj, _ = reg.delete(kind, ns or "", name, opts, dry)
            if kind.return_deleted:
                return self.send_object(200, kind, obj)
            st = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                  "details": _details(name, kind.group, kind.resource,
                                      uid=obj["metadata"]["uid"])}
            return self.send_body(200, dumps(st))
        raise err_method_not_allowed()

    def check_json(self, body, kind):
        """The request body as JSON text or a decoded dict (protobuf)."""
        ctype = (self.headers.get("Content-Type") or "application/json").split(";")[0].strip()
        if ctype == "application/vnd.kubernetes.protobuf":
            return decode_protobuf(kind, body)
        if ctype not in ("application/json", "*/*", ""):
            raise ApiError(415, "UnsupportedMediaType",
                           'the body of the request was in an unknown format - accepted media '
                           'types include: application/json, application/yaml, '
                           'application/vnd.kubernetes.protobuf', {})
        return body

    def send_object(self, code, kind, obj):
        reg = self.state.reg
        key = reg.key_of(kind, obj)
        if reg.store.get(kind.resource, key) is obj:
            s = reg.store.obj_json(kind.resource, key, obj)
        else:
            s = dumps(obj)
        head = '{"kind":"%s","apiVersion":"%s",' % (kind.kind, kind.api_version)
        self.send_body(code, head + s[1:])

    # -- list --------------------------------------------------------------------------------

    def serve_list(self, kind, ns, q):
        reg, store = self.state.reg, self.state.reg.store
        mode, av = table_accept(self.headers.get("Accept"))
        lsel = parse_label_selector(q.get("labelSelector"))
        fsel = parse_field_selector(q.get("fieldSelector"), kind)
        try:
            limit = int(q.get("limit") or 0)
        except ValueError:
            raise err_bad_request('strconv.ParseInt: parsing "%s": invalid syntax'
                                  % q.get("limit")) from None
        cont = q.get("continue") or ""
        rv = q.get("resourceVersion") or ""
        rvm = q.get("resourceVersionMatch") or ""
        errs = []
        if "sendInitialEvents" in q:
            errs.append(forbidden("sendInitialEvents", "sendInitialEvents is forbidden for list"))
        if rvm:
            if rvm not in ("Exact", "NotOlderThan"):
                errs.append(not_supported("resourceVersionMatch", rvm,
                                          ["Exact", "NotOlderThan", ""]))
            if not rv:
                errs.append(forbidden("resourceVersionMatch", "resourceVersionMatch is forbidden "
                                      "unless resourceVersion is provided"))
            if cont:
                errs.append(forbidden("resourceVersionMatch", "resourceVersionMatch is forbidden "
                                      "when continue is provided"))
            if rvm == "Exact" and rv == "0":
                errs.append(forbidden("resourceVersionMatch", 'resourceVersionMatch "exact" is '
                                      'forbidden for resourceVersion "0"'))
        if errs:
            raise err_invalid("ListOptions", "meta.k8s.io", "", errs)
        if cont and rv not in ("", "0"):
            raise err_bad_request("specifying resource version is not allowed when using "
                                  "continue")
        n_rv = parse_rv(rv)
        if n_rv and rvm != "Exact" and not (limit and not rvm):
            if not reg.wait_for_rv(n_rv):
                raise too_large_rv(n_rv, store.rv)
        start = ""
        with reg.lock:
            cur = store.rv
            objs = store.objs[kind.resource]
            snap_rv = cur
            if cont:
                tok_rv, start = decode_continue(cont)
                if tok_rv > 0:
                    snap = store.snapshot_at(kind.resource, tok_rv)
                    if snap is None:
                        raise err_expired(
                            "The provided continue parameter is too old to display a consistent "
                            "list result. You can start a new list without the continue "
                            "parameter, or use the continue token in this response to retrieve "
                            "the remainder of the results. Continuing with the provided token "
                            "results in an inconsistent list - objects that were created, "
                            "modified, or deleted between the time the first chunk was returned "
                            "and now may show up in the list.",
                            **{"continue": encode_continue(-1, start.rstrip("\x00"))})
                    objs, snap_rv = snap, tok_rv
            elif n_rv and (rvm == "Exact" or (limit and not rvm)):
                if n_rv > cur:
                    raise too_large_rv(n_rv, cur)
                snap = store.snapshot_at(kind.resource, n_rv)
                if snap is None:
                    raise err_expired("The resourceVersion for the provided list is too old.")
                objs, snap_rv = snap, n_rv
            elif rv == "0" and not rvm:
                limit = 0  # served from the watch cache: the limit is ignored
            prefix = (ns + "/") if (ns is not None and kind.namespaced) else ""
            keys = sorted(k for k in objs if k.startswith(prefix) and k > start)
            items = []
            last = None
            i = 0
            for i, k in enumerate(keys):
                if limit and len(items) >= limit:
                    break
                o = objs[k]
                last = k
                if labels_match(lsel, o["metadata"].get("labels")) and \
                        fields_match(fsel, kind, o):
                    items.append((k, o))
            else:
                i = len(keys)
            remaining = len(keys) - i if (limit and len(items) >= limit) else 0
            list_meta = {"resourceVersion": str(snap_rv)}
            if remaining > 0 and last is not None:
                list_meta["continue"] = encode_continue(snap_rv, last)
                if not lsel and not fsel:
                    list_meta["remainingItemCount"] = remaining
            current = objs is store.objs[kind.resource]
        if mode == "table":
            t = make_table(kind, [o for _, o in items], av, q.get("includeObject", "Metadata"),
                           list_meta=list_meta)
            return self.send_body(200, dumps(t))
        if current:
            parts = [store.obj_json(kind.resource, k, o) for k, o in items]
        else:
            parts = [dumps(o) for _, o in items]
        s = '{"kind":"%sList","apiVersion":"%s","metadata":%s,"items":[%s]}' % (
            kind.kind, kind.api_version, dumps(list_meta), ",".join(parts))
        self.send_body(200, s)

    def serve_delete_collection(self, kind, ns, q, opts, dry):
        reg = self.state.reg
        lsel = parse_label_selector(q.get("labelSelector"))
        fsel = parse_field_selector(q.get("fieldSelector"), kind)
        out = []
        with reg.lock:
            objs = reg.store.objs[kind.resource]
            prefix = (ns + "/") if ns is not None else ""
            for k in sorted(k for k in objs if k.startswith(prefix)):
                o = objs[k]
                if labels_match(lsel, o["metadata"].get("labels")) and \
                        fields_match(fsel, kind, o):
                    obj, _ = reg._delete(kind, k, o, opts.get("propagationPolicy"), dry)
                    out.append(obj)
            rv = reg.store.rv
        s = '{"kind":"%sList","apiVersion":"%s","metadata":{"resourceVersion":"%d"},"items":[%s]}' \
            % (kind.kind, kind.api_version, rv, ",".join(dumps(o) for o in out))
        self.send_body(200, s)

    # -- watch -------------------------------------------------------------------------------

    def serve_watch(self, kind, ns, q):
        st, reg = self.state, self.state.reg
        store = reg.store
        mode, av = table_accept(self.headers.get("Accept"))
        lsel = parse_label_selector(q.get("labelSelector"))
        fsel = parse_field_selector(q.get("fieldSelector"), kind)
        rv = q.get("resourceVersion") or ""
        rvm = q.get("resourceVersionMatch") or ""
        try:
            allow_bm = parse_go_bool(q["allowWatchBookmarks"]) \
                if "allowWatchBookmarks" in q else False
            sie = parse_go_bool(q["sendInitialEvents"]) if "sendInitialEvents" in q else None
            timeout = int(q["timeoutSeconds"]) if q.get("timeoutSeconds") else None
        except ValueError as e:
            raise err_bad_request("invalid watch options: %s" % e) from None
        errs = []
        if sie is not None:
            if rvm != "NotOlderThan":
                errs.append(forbidden("resourceVersionMatch", "sendInitialEvents requires setting "
                                      "resourceVersionMatch to NotOlderThan"))
            if not st.watch_list:
                errs.append(forbidden("sendInitialEvents", "sendInitialEvents is forbidden for "
                                      "watch unless the WatchList feature gate is enabled"))
        if rvm:
            if sie is None:
                errs.append(forbidden("resourceVersionMatch", "resourceVersionMatch is forbidden "
                                      "for watch unless sendInitialEvents is provided"))
            if rvm != "NotOlderThan":
                errs.append(not_supported("resourceVersionMatch", rvm, ["NotOlderThan"]))
        if errs:
            raise err_invalid("ListOptions", "meta.k8s.io", "", errs)
        if st.watch_list and sie is None and not rvm and rv in ("", "0"):
            sie = True  # SetListOptionsDefaults with the WatchList feature enabled (1.32)
        n_rv = parse_rv(rv)
        if n_rv > 0 and not reg.wait_for_rv(n_rv):
            raise too_large_rv(n_rv, store.rv)
        u = urlsplit(self.path)
        w = Watcher(kind, ns, lsel, fsel, u.path, u.query, self.headers.get("User-Agent", ""))
        initial, backlog, expired = [], [], None
        with reg.lock:
            snap_rv = store.rv
            if rv in ("", "0") and sie is not False:
                objs = store.objs[kind.resource]
                initial = [(k, objs[k]) for k in sorted(objs) if w.matches(k, objs[k])]
            elif sie:
                objs = store.objs[kind.resource]
                initial = [(k, objs[k]) for k in sorted(objs) if w.matches(k, objs[k])]
            elif rv not in ("", "0"):
                h = store.hist[kind.resource]
                if n_rv < h.floor:
                    expired = err_expired("too old resource version: %d (%d)"
                                          % (n_rv, h.floor))
                else:
                    backlog = h.since(n_rv)
            if expired is None:
                store.watchers[kind.resource].add(w)
        self._watch = True
        try:
            self.send_response(200)
            self.send_header("Audit-Id", new_uid())
            self.send_header("Cache-Control", "no-cache, private")
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            if expired is not None:
                self.write_event_line(dumps({"type": "ERROR", "object": expired.status()}))
                self.wfile.write(b"0\r\n\r\n")
                return
            self.stream(w, kind, mode, av, q, initial, backlog, snap_rv, allow_bm,
                        bool(sie), timeout)
        finally:
            with reg.lock:
                store.watchers[kind.resource].discard(w)

    def write_event_line(self, line):
        data = line.encode("utf-8") + b"\n"
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def client_gone(self):
        try:
            r, _, _ = select.select([self.connection], [], [], 0)
        except (OSError, ValueError):
            return True
        if not r:
            return False
        try:
            self.connection.settimeout(0.05)
            data = self.connection.recv(4096)
            return not data
        except (ssl.SSLWantReadError, socket.timeout, BlockingIOError):
            return False
        except (OSError, ssl.SSLError):
            return True
        finally:
            try:
                self.connection.settimeout(IDLE_TIMEOUT)
            except OSError:
                pass

    def stream(self, w, kind, mode, av, q, initial, backlog, snap_rv, allow_bm, sie, timeout):
        reg = self.state.reg
        include = q.get("includeObject", "Metadata")
        headers_sent = [False]

        def obj_line(typ, obj):
            if mode == "table":
                t = make_table(kind, [obj], av, include, headers=not headers_sent[0],
                               list_meta={"resourceVersion": obj["metadata"]["resourceVersion"]})
                headers_sent[0] = True
                return dumps({"type": typ, "object": t})
            return '{"type":"%s","object":{"kind":"%s","apiVersion":"%s",%s}' % (
                typ, kind.kind, kind.api_version, dumps(obj)[1:])

        def ev_line(ev, typ):
            if mode != "table" and ev.type == typ:
                if ev.cache is None:
                    ev.cache = obj_line(typ, ev.obj)
                return ev.cache
            return obj_line(typ, ev.obj)

        def bookmark(rv, initial_end=False):
            if mode == "table":
                b = {"kind": "Table", "apiVersion": av,
                     "metadata": {"resourceVersion": str(rv)}, "columnDefinitions": None,
                     "rows": None}
            else:
                meta = {"resourceVersion": str(rv), "creationTimestamp": None}
                if initial_end:
                    meta["annotations"] = {"k8s.io/initial-events-end": "true"}
                b = {"kind": kind.kind, "apiVersion": kind.api_version, "metadata": meta}
                b.update(kind.empty())
            return dumps({"type": "BOOKMARK", "object": b})

        def translate(ev):
            """The event this watcher sees (ADDED/MODIFIED/DELETED), or None."""
            now = w.matches(ev.key, ev.obj) if ev.type != "DELETED" else False
            before = w.matches(ev.key, ev.prev) if ev.prev is not None else False
            if ev.type == "ADDED":
                return "ADDED" if now else None
            if ev.type == "DELETED":
                return "DELETED" if before else None
            if now and before:
                return "MODIFIED"
            if now:
                return "ADDED"
            if before:
                return "DELETED"
            return None

        out = []
        for k, o in initial:
            out.append(obj_line("ADDED", o))
        last_rv = snap_rv
        for ev in backlog:
            t = translate(ev)
            if t:
                out.append(ev_line(ev, t))
            last_rv = max(last_rv, ev.rv)
        if sie and allow_bm:
            out.append(bookmark(snap_rv, initial_end=True))
        if out:
            self.write_lines(out)
        start = time.monotonic()
        deadline = start + (timeout if timeout is not None
                            else self.state.opts.min_request_timeout * (1 + random.random()))
        interval = self.state.bookmark_interval
        next_bm = start + interval
        next_check = start + 0.5
        while True:
            now = time.monotonic()
            if now >= deadline:
                if allow_bm:
                    with reg.lock:
                        rv_now = reg.store.rv
                    self.drain(w, translate, ev_line)
                    self.write_lines([bookmark(rv_now)])
                self.wfile.write(b"0\r\n\r\n")
                return
            if allow_bm and now >= next_bm:
                with reg.lock:
                    rv_now = reg.store.rv
                if self.drain(w, translate, ev_line) == "closed":
                    return
                self.write_lines([bookmark(rv_now)])
                next_bm = now + self.state.bookmark_interval
            if now >= next_check:
                if self.client_gone():
                    self.close_connection = True
                    return
                next_check = now + 0.5
            wait = min(deadline, next_check, next_bm if allow_bm else deadline) - now
            try:
                item = w.q.get(timeout=max(0.0, wait))
            except queue.Empty:
                continue
            r = self.handle_item(item, w, translate, ev_line)
            if r == "closed":
                return
            if self.drain(w, translate, ev_line) == "closed":
                return

    def write_lines(self, lines):
        buf = b"".join(b"%x\r\n%s\n\r\n" % (len(x.encode("utf-8")) + 1, x.encode("utf-8"))
                       for x in lines)
        self.wfile.write(buf)

    def handle_item(self, item, w, translate, ev_line):
        if isinstance(item, tuple):
            if item[0] == "close":
                if item[1]:
                    self.close_connection = True
                    try:
                        self.connection.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                else:
                    self.wfile.write(b"0\r\n\r\n")
                return "closed"
            if item[0] == "malformed":
                data = item[1]
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            return None
        t = translate(item)
        if t:
            self.write_lines([ev_line(item, t)])
        return None

    def drain(self, w, translate, ev_line):
        lines = []
        while True:
            try:
                item = w.q.get_nowait()
            except queue.Empty:
                break
            if isinstance(item, tuple):
                if lines:
                    self.write_lines(lines)
                    lines = []
                if self.handle_item(item, w, translate, ev_line) == "closed":
                    return "closed"
                continue
            t = translate(item)
            if t:
                lines.append(ev_line(item, t))
        if lines:
            self.write_lines(lines)
        return None

    # -- admin -------------------------------------------------------------------------------

    def handle_admin(self, method, path, q, body):
        st = self.state
        auth = self.headers.get("Authorization") or ""
        if auth[:7].lower() != "bearer " or auth[7:].strip() != st.admin_token:
            raise ApiError(401, "Unauthorized", "Unauthorized")
        try:
            d = json.loads(body) if body.strip() else {}
        except ValueError as e:
            raise err_bad_request("admin: bad JSON: %s" % e) from None
        what = path[len("/admin/"):].rstrip("/")
        reg = st.reg
        out = None
        if what == "state" and method == "GET":
            with reg.lock:
                out = {"resourceVersion": reg.store.rv,
                       "objects": {r: len(o) for r, o in reg.store.objs.items()},
                       "floors": {r: h.floor for r, h in reg.store.hist.items()},
                       "watches": sum(len(x) for x in reg.store.watchers.values()),
                       "binder": reg.binder, "protection": reg.protection,
                       "controllers_idle": st.ctrl.idle(), "port": st.port}
        elif what == "watches" and method == "GET":
            ws = st.all_watchers()
            out = {"count": len(ws), "watches": [w.info() for w in ws]}
        elif what == "close-watches" and method == "POST":
            prefix = d.get("path_prefix") or ""
            ua = d.get("user_agent") or ""
            n = 0
            for w in st.all_watchers():
                if w.path.startswith(prefix) and (w.ua or "").startswith(ua):
                    w.q.put(("close", bool(d.get("abrupt"))))
                    n += 1
            out = {"closed": n}
        elif what == "faults":
            if method == "POST":
                f = Fault(d)
                with st.flock:
                    st.faults.append(f)
                out = f.info()
            elif method == "GET":
                with st.flock:
                    out = {"faults": [f.info() for f in st.faults]}
            elif method == "DELETE":
                with st.flock:
                    out = {"cleared": len(st.faults)}
                    st.faults.clear()
        elif what == "compact" and method == "POST":
            out = {"resourceVersion": reg.store.compact()}
        elif what == "malformed" and method == "POST":
            prefix = d.get("path_prefix") or ""
            line = d.get("line")
            if line is None:
                line = '{"type":"MODIFIED","object":{"kind":"PersistentVolumeClaim","metadata":'
            data = line.encode("utf-8") + (b"" if d.get("no_newline") else b"\n")
            if d.get("repeat"):
                data = data * int(d["repeat"])
            n = 0
            for w in st.all_watchers():
                if w.path.startswith(prefix):
                    w.q.put(("malformed", data))
                    n += 1
            out = {"sent": n}
        elif what == "controllers":
            if method == "POST":
                changed = False
                if "binder" in d:
                    changed = changed or (bool(d["binder"]) and not reg.binder)
                    reg.binder = bool(d["binder"])
                if "protection" in d:
                    changed = changed or (bool(d["protection"]) and not reg.protection)
                    reg.protection = bool(d["protection"])
                if "binder_events" in d:
                    st.opts.binder_events = "on" if d["binder_events"] else "off"
                if changed:
                    st.ctrl.mark_all()
            out = {"binder": reg.binder, "protection": reg.protection,
                   "binder_events": st.opts.binder_events == "on"}
        elif what == "requests":
            if method == "GET":
                since = int(q.get("since") or 0)
                with st.rlock:
                    out = {"requests": [r for r in st.reqlog if r["seq"] > since],
                           "next": st.reqseq}
            elif method == "DELETE":
                with st.rlock:
                    out = {"cleared": len(st.reqlog)}
                    st.reqlog = []
        elif what == "tokens":
            if method == "POST":
                st.tokens = set(d.get("tokens") or [])
            out = {"count": len(st.tokens)}
        elif what == "config":
            if method == "POST" and "bookmark_interval" in d:
                st.bookmark_interval = float(d["bookmark_interval"])
            if method == "POST" and "apf" in d:
                st.apf = bool(d["apf"])
            out = {"bookmark_interval": st.bookmark_interval, "apf": st.apf,
                   "apf_uids": st.apf_uids}
        if out is None:
            raise err_path_not_found()
        self.send_body(200, json.dumps(out))


class Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True
    request_queue_size = 256

    def __init__(self, addr, handler, ctx):
        super().__init__(addr, handler)
        self.ctx = ctx

    def process_request_thread(self, request, client_address):
        try:
            request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            request.settimeout(10)
            conn = self.ctx.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError) as e:
            if Handler.state.opts.verbose:
                log("tls: handshake failed from %s: %s" % (client_address, e))
            try:
                request.close()
            except OSError:
                pass
            return
        try:
            self.finish_request(conn, client_address)
        except (OSError, ssl.SSLError):
            pass
        except Exception:
            log("error: connection %s\n%s" % (client_address, traceback.format_exc()))
        finally:
            try:
                self.shutdown_request(conn)
            except OSError:
                pass

    def handle_error(self, request, client_address):
        log("error: %s\n%s" % (client_address, traceback.format_exc()))


# ---------------------------------------------------------------------------------------
# Certificates, kubeconfig, main
# ---------------------------------------------------------------------------------------

def _openssl(*args, cwd=None):
    r = subprocess.run(["openssl"] + list(args), cwd=cwd, capture_output=True, text=True,
                       timeout=60)
    if r.returncode != 0:
        raise RuntimeError("openssl %s failed: %s" % (args[0], r.stderr.strip()))


def _ecparam_args():
    return ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


def make_ca(state_dir):
    ca_crt = os.path.join(state_dir, "ca.crt")
    ca_key = os.path.join(state_dir, "ca.key")
    if os.path.exists(ca_crt) and os.path.exists(ca_key):
        return ca_crt, ca_key
    _openssl("req", "-x509", "-new", *_ecparam_args(), "-keyout", ca_key, "-out", ca_crt,
             "-days", "3650", "-subj", "/CN=hostpath-test-ca",
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign",
             "-addext", "subjectKeyIdentifier=hash")
    os.chmod(ca_key, 0o600)
    return ca_crt, ca_key


def sign_cert(state_dir, name, cn, usage, san=None, orgs=()):
    """Creates name.crt/name.key signed by the state dir's CA. Returns (crt, key)."""
    ca_crt, ca_key = make_ca(state_dir)
    crt = os.path.join(state_dir, name + ".crt")
    key = os.path.join(state_dir, name + ".key")
    csr = os.path.join(state_dir, name + ".csr")
    ext = os.path.join(state_dir, name + ".ext")
    subj = "".join("/O=%s" % o for o in orgs) + "/CN=%s" % cn
    _openssl("req", "-new", *_ecparam_args(), "-keyout", key, "-out", csr, "-subj", subj)
    lines = ["basicConstraints=critical,CA:FALSE",
             "keyUsage=critical,digitalSignature,keyEncipherment",
             "extendedKeyUsage=%s" % usage, "subjectKeyIdentifier=hash",
             "authorityKeyIdentifier=keyid"]
    if san:
        lines.append("subjectAltName=%s" % san)
    with open(ext, "w") as f:
        f.write("\n".join(lines) + "\n")
    _openssl("x509", "-req", "-in", csr, "-CA", ca_crt, "-CAkey", ca_key, "-set_serial",
             "0x%x" % random.getrandbits(63), "-days", "3650", "-out", crt, "-extfile", ext)
    os.chmod(key, 0o600)
    for p in (csr, ext):
        os.unlink(p)
    return crt, key


def write_kubeconfig(path, url, ca, token=None, cert=None, key=None, namespace="default"):
    user = []
    if token:
        user.append("    token: %s" % token)
    if cert:
        user.append("    client-certificate: %s" % cert)
        user.append("    client-key: %s" % key)
    text = "\n".join([
        "apiVersion: v1", "kind: Config", "clusters:", "- cluster:",
        "    certificate-authority: %s" % ca, "    server: %s" % url, "  name: local",
        "contexts:", "- context:", "    cluster: local", "    namespace: %s" % namespace,
        "    user: test-admin", "  name: local", "current-context: local",
        "preferences: {}", "users:", "- name: test-admin", "  user:"] + user) + "\n"
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


def main(argv=None):
    global LOG
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--state-dir", required=True)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--token", default=None, help="bearer token (default: random)")
    ap.add_argument("--binder", choices=("on", "off"), default="on",
                    help="PV controller stand-in: annotate, bind, release")
    ap.add_argument("--protection", choices=("on", "off"), default="on",
                    help="pvc/pv-protection finalizers and their controllers")
    ap.add_argument("--binder-events", choices=("on", "off"), default="on",
                    help="ExternalProvisioning/WaitForFirstConsumer events from the binder")
    ap.add_argument("--require-namespaces", choices=("on", "off"), default="off",
                    help="reject creates into missing namespaces (off: create them)")
    ap.add_argument("--managed-fields", choices=("on", "off"), default="on")
    ap.add_argument("--watch-list", choices=("on", "off"), default="on",
                    help="WatchList feature gate (on in v1.32)")
    ap.add_argument("--history", type=int, default=20000,
                    help="watch history kept per resource")
    ap.add_argument("--bookmark-interval", type=float, default=1.0)
    ap.add_argument("--min-request-timeout", type=float, default=1800.0)
    ap.add_argument("--client-ca", default=None,
                    help="'auto' (the generated CA) or a CA bundle path: accept client certs")
    ap.add_argument("--authorization", choices=("AlwaysAllow", "RBAC"), default="AlwaysAllow",
                    help="RBAC: authorize requests with the stored Roles, ClusterRoles and "
                    "bindings (the --token user is in system:masters)")
    ap.add_argument("--persist", choices=("on", "off"), default="off",
                    help="on: load DIR/state.json at start when it exists, write it on "
                    "SIGTERM/SIGINT (state survives a restart; SIGKILL loses it)")
    ap.add_argument("--apf", choices=("on", "off"), default="on",
                    help="API Priority and Fairness headers (X-Kubernetes-PF-FlowSchema-UID, "
                    "X-Kubernetes-PF-PriorityLevel-UID) on every response, as a real server "
                    "with APF (on by default since 1.20) sends them")
    ap.add_argument("--verbose", action="store_true")
    opts = ap.parse_args(argv)
    sd = os.path.abspath(opts.state_dir)
    os.makedirs(sd, exist_ok=True)
    LOG = open(os.path.join(sd, "apiserver.log"), "a", buffering=1)
    if not opts.token:
        opts.token = base64.b32encode(os.urandom(20)).decode().lower().rstrip("=")
    try:
        os.unlink(os.path.join(sd, "ready.json"))
    except FileNotFoundError:
        pass
    ca_crt, _ = make_ca(sd)
    srv_crt = os.path.join(sd, "server.crt")
    srv_key = os.path.join(sd, "server.key")
    if not (os.path.exists(srv_crt) and os.path.exists(srv_key)):
        sign_cert(sd, "server", "kube-apiserver", "serverAuth",
                  san="IP:127.0.0.1,DNS:localhost")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(srv_crt, srv_key)
    ctx.set_alpn_protocols(["http/1.1"])
    if opts.client_ca:
        ctx.load_verify_locations(ca_crt if opts.client_ca == "auto" else opts.client_ca)
        ctx.verify_mode = ssl.CERT_OPTIONAL
    state = State(opts)
    state_file = os.path.join(sd, Store.STATE_FILE)
    if opts.persist == "on" and os.path.exists(state_file):
        n = state.reg.store.load(state_file)
        log("loaded %d objects at resourceVersion %d from %s"
            % (n, state.reg.store.rv, state_file))
    Handler.state = state
    httpd = Server(("127.0.0.1", opts.port), Handler, ctx)
    port = httpd.server_address[1]
    state.port = port
    url = "https://127.0.0.1:%d" % port
    write_kubeconfig(os.path.join(sd, "kubeconfig"), url, ca_crt, token=opts.token)
    state.ctrl.start()

    def on_signal(signum, frame):
        threading.Thread(target=httpd.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    ready = {"port": port, "url": url, "token": opts.token, "pid": os.getpid(),
             "ca": ca_crt, "kubeconfig": os.path.join(sd, "kubeconfig")}
    tmp = os.path.join(sd, "ready.json.tmp")
    with open(tmp, "w") as f:
        json.dump(ready, f)
    os.replace(tmp, os.path.join(sd, "ready.json"))
    log("listening on %s (pid %d)" % (url, os.getpid()))
    print(port, flush=True)
    try:
        httpd.serve_forever(poll_interval=0.2)
    finally:
        state.ctrl.stop()
        if opts.persist == "on":
            # The lock is kept to the end: a request still in flight cannot change anything
            # after the dump (its client sees the connection drop, never a lost success).
            state.reg.lock.acquire()
            state.reg.store.dump(state_file)
            log("saved %d objects at resourceVersion %d to %s"
                % (sum(len(o) for o in state.reg.store.objs.values()), state.reg.store.rv,
                   state_file))
        log("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
