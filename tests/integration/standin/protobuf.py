"""Protobuf request bodies (kubectl's typed clients send them, e.g. `kubectl create
namespace`): a decoder for the few kinds that need one.
"""

import datetime

from .errors import ApiError, err_bad_request
from .quantity import DecodeError


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
