"""Discovery (APIResourceList, APIGroup) and the minimal OpenAPI v3 documents kubectl's
field-validation probe reads.
"""

import base64
import hashlib

from .common import dumps
from .kinds import GROUPS, KIND_LIST
from .kinds.rbac import RBAC_GROUP


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
