"""Resource quantities (k8s.io/apimachinery/pkg/api/resource) and timestamps: parsing,
canonical forms, human durations.
"""

import datetime
import math
import re
import time
from fractions import Fraction

from .errors import _fmt_value


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
