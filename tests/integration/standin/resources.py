"""Handler methods serving a resource's verbs: get, list (selectors, paging, snapshots),
create, update, patch, delete, deletecollection.
"""

import json

from .common import dumps, parse_go_bool
from .errors import (ApiError, _details, err_bad_request, err_expired, err_invalid,
                     err_method_not_allowed, err_path_not_found, forbidden, not_supported)
from .protobuf import decode_protobuf
from .registry import decode_continue, encode_continue, parse_rv, too_large_rv
from .selectors import fields_match, labels_match, parse_field_selector, parse_label_selector
from .tables import make_table, table_accept


class ResourceMixin:
    """Handler methods serving resource requests (mixed into handler.Handler)."""

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
