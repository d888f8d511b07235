"""Tables: server-side printing for kubectl get (Accept negotiation, rows, columns)."""

from .errors import ApiError


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
