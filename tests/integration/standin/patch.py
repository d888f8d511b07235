"""Patches: RFC 7386 JSON merge patch, RFC 6902 JSON patch and strategic merge patch."""

from .common import clone, dumps
from .errors import ApiError


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
