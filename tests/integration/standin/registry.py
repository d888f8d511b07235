"""The registry: the verbs (create, update, patch, delete) with decoding, admission,
strategies and validation; managedFields; resourceVersion and continue-token helpers of
list and watch.
"""

import base64
import json
import random
import time

from .common import clone, dumps, new_uid, now_time, REQUEST
from .errors import (ApiError, _details, err_already_exists, err_bad_request, err_conflict,
                     err_internal, err_invalid, err_not_found, MSG_MODIFIED, qualified)
from .kinds import BY_RES
from .kinds.base import ANN_BETA_CLASS, is_default_class
from .kinds.schemas import prune_unknown
from .patch import _DELETE, json_patch, merge_patch, PatchError, strategic_merge
from .quantity import DecodeError
from .store import Store


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
