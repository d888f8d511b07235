"""The Kind base class (defaulting, strategies, validation, field selectors, tables) and
what the kinds share: table columns, access modes, storage class helpers, Go field order.
"""

from ..common import clone, dumps
from ..quantity import age, canon_time, DecodeError
from ..validation import is_dns1123_subdomain, validate_object_meta


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
