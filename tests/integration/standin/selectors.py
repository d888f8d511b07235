"""Label selectors (string and metav1.LabelSelector forms) and field selectors: parsing
and matching.
"""

import re

from .errors import err_bad_request, _fmt_value
from .validation import is_qualified_name, is_valid_label_value


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
