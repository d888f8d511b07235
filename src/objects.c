/* objects: compact views of PersistentVolumeClaims, PersistentVolumes and StorageClasses, and the
 * PersistentVolume JSON the provisioner writes.
 *
 * Any thread (pure functions, no shared state). Each decoder measures every string it keeps
 * first, then makes ONE allocation holding the struct followed by the strings, and copies them in.
 * That keeps 20,000 cached claims within the memory budget of DESIGN.md and costs one malloc per
 * watch event. Absent strings point at a static "" (never NULL) unless the header says NULL.
 */
#include "hostpath/objects.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hostpath/buf.h"

#define ANN_LAST_APPLIED "kubectl.kubernetes.io/last-applied-configuration"

static const char empty[] = "";

/* A string borrowed from a json_t: s == NULL means absent (or not a string). */
struct span {
    const char *s;
    size_t n;
};

static struct span span_of(json_t *v)
{
    struct span sp = {NULL, 0};

    if (json_is_string(v)) {
        sp.s = json_string_value(v);
        sp.n = json_string_length(v);
    }
    return sp;
}

static json_t *member(json_t *obj, const char *key)
{
    return json_is_object(obj) ? json_object_get(obj, key) : NULL;
}

static struct span str_at(json_t *obj, const char *key)
{
    return span_of(member(obj, key));
}

/* Bytes a span needs in the block: nothing when absent or empty (it points at static ""). */
static size_t span_size(struct span sp)
{
    return sp.s && sp.n ? sp.n + 1 : 0;
}

/* Write cursor into the single allocation. */
struct cursor {
    char *p;
};

static const char *put_span(struct cursor *c, struct span sp)
{
    const char *r = c->p;

    if (!sp.s || !sp.n)
        return empty;
    memcpy(c->p, sp.s, sp.n);
    c->p[sp.n] = '\0';
    c->p += sp.n + 1;
    return r;
}

/* As put_span, but NULL stays NULL (for the fields the header allows to be NULL). */
static const char *put_nullable(struct cursor *c, struct span sp)
{
    return sp.s ? put_span(c, sp) : NULL;
}

/* A string-to-string map entry worth keeping. Empty keys would end a packed map early, and the
 * last-applied annotation can be hundreds of KiB that nothing here reads. */
static int keep_entry(const char *k, json_t *v)
{
    return *k && json_is_string(v) && strcmp(k, ANN_LAST_APPLIED) != 0;
}

static size_t packed_map_size(json_t *map)
{
    const char *k;
    json_t *v;
    size_t n = 0;

    if (!json_is_object(map))
        return 0;
    json_object_foreach (map, k, v) {
        if (keep_entry(k, v))
            n += strlen(k) + 1 + json_string_length(v) + 1;
    }
    return n ? n + 1 : 0;
}

static const char *put_packed_map(struct cursor *c, json_t *map)
{
    const char *start = c->p;
    const char *k;
    json_t *v;
    size_t kl, vl;

    if (!json_is_object(map))
        return empty;
    json_object_foreach (map, k, v) {
        if (!keep_entry(k, v))
            continue;
        kl = strlen(k);
        vl = json_string_length(v);
        memcpy(c->p, k, kl + 1);
        c->p += kl + 1;
        memcpy(c->p, json_string_value(v), vl);
        c->p[vl] = '\0';
        c->p += vl + 1;
    }
    if (c->p == start)
        return empty;
    *c->p++ = '\0';
    return start;
}

static size_t packed_list_size(json_t *arr)
{
    size_t i, n = 0;
    json_t *v;

    if (!json_is_array(arr))
        return 0;
    json_array_foreach (arr, i, v) {
        if (json_is_string(v) && json_string_length(v))
            n += json_string_length(v) + 1;
    }
    return n ? n + 1 : 0;
}

static const char *put_packed_list(struct cursor *c, json_t *arr)
{
    const char *start = c->p;
    size_t i;
    json_t *v;

    if (!json_is_array(arr))
        return empty;
    json_array_foreach (arr, i, v) {
        if (json_is_string(v) && json_string_length(v))
            (void)put_span(c, span_of(v));
    }
    if (c->p == start)
        return empty;
    *c->p++ = '\0';
    return start;
}

static int span_eq(struct span sp, const char *lit)
{
    return sp.s && sp.n == strlen(lit) && memcmp(sp.s, lit, sp.n) == 0;
}

static enum hp_reclaim parse_reclaim(struct span sp)
{
    if (span_eq(sp, "Delete"))
        return HP_RECLAIM_DELETE;
    if (span_eq(sp, "Retain"))
        return HP_RECLAIM_RETAIN;
    if (span_eq(sp, "Recycle"))
        return HP_RECLAIM_RECYCLE;
    return HP_RECLAIM_UNSET;
}

static uint8_t parse_access_modes(json_t *arr)
{
    static const struct {
        const char *name;
        uint8_t bit;
    } modes[] = {
        {"ReadWriteOnce", HP_ACCESS_RWO},
        {"ReadOnlyMany", HP_ACCESS_ROX},
        {"ReadWriteMany", HP_ACCESS_RWX},
        {"ReadWriteOncePod", HP_ACCESS_RWOP},
    };
    uint8_t bits = 0;
    size_t i, m;
    json_t *v;

    if (!json_is_array(arr))
        return 0;
    json_array_foreach (arr, i, v) {
        for (m = 0; m < HP_ARRAY_SIZE(modes); m++) {
            if (span_eq(span_of(v), modes[m].name))
                bits |= modes[m].bit;
        }
    }
    return bits;
}

/* deletionTimestamp set: any non-null value counts (the API server writes an RFC 3339 string). */
static uint8_t is_deleting(json_t *meta)
{
    json_t *ts = member(meta, "deletionTimestamp");
    return ts && !json_is_null(ts);
}

/* A required identifying string: present, a string, non-empty. */
static int required(struct span sp)
{
    return sp.s && sp.n;
}

/* The first of two annotations that is present (even when empty), or NULL. The pointers point
 * into the packed map, so they cost no extra bytes. */
static const char *ann_either(const char *packed, const char *first, const char *second)
{
    const char *v = hp_packed_get(packed, first);
    return v ? v : hp_packed_get(packed, second);
}

struct hp_claim *hp_claim_decode(json_t *obj)
{
    json_t *meta = member(obj, "metadata"), *spec = member(obj, "spec");
    json_t *ann = member(meta, "annotations"), *labels = member(meta, "labels");
    struct span ns = str_at(meta, "namespace"), name = str_at(meta, "name");
    struct span uid = str_at(meta, "uid"), rv = str_at(meta, "resourceVersion");
    struct span vol = str_at(spec, "volumeName"), sc = str_at(spec, "storageClassName");
    struct span req = str_at(member(member(spec, "resources"), "requests"), "storage");
    size_t total;
    struct hp_claim *c;
    struct cursor cur;

    if (!required(ns) || !required(name))
        return NULL;
    total = sizeof(*c) + ns.n + 1 + name.n + 1 /* key */ + span_size(ns) + span_size(uid) +
            span_size(rv) + span_size(vol) + span_size(sc) + span_size(req) + packed_map_size(ann) +
            packed_map_size(labels);
    c = hp_xmalloc(total);
    cur.p = c->key;
    memcpy(cur.p, ns.s, ns.n);
    cur.p[ns.n] = '/';
    memcpy(cur.p + ns.n + 1, name.s, name.n);
    cur.p[ns.n + 1 + name.n] = '\0';
    cur.p += ns.n + 1 + name.n + 1;

    c->name = c->key + ns.n + 1; /* the tail of "namespace/name" is the name, NUL and all */
    c->namespace_ = put_span(&cur, ns);
    c->uid = put_span(&cur, uid);
    c->resource_version = put_span(&cur, rv);
    c->volume_name = put_span(&cur, vol);
    c->request = put_span(&cur, req);
    c->annotations = put_packed_map(&cur, ann);
    c->labels = put_packed_map(&cur, labels);
    /* Kubernetes' GetPersistentVolumeClaimClass: the beta annotation wins when present (even
     * empty), then spec.storageClassName; "" means "no class", NULL means "not set". */
    c->class_name = hp_packed_get(c->annotations, HP_ANN_BETA_STORAGE_CLASS);
    if (!c->class_name)
        c->class_name = put_nullable(&cur, sc);
    c->provisioner =
        ann_either(c->annotations, HP_ANN_STORAGE_PROVISIONER, HP_ANN_BETA_STORAGE_PROVISIONER);
    c->selected_node = ann_either(c->annotations, HP_ANN_SELECTED_NODE, HP_ANN_ALPHA_SELECTED_NODE);
    c->access_modes = parse_access_modes(member(spec, "accessModes"));
    c->block = span_eq(str_at(spec, "volumeMode"), "Block");
    c->deleting = is_deleting(meta);
    return c;
}

static int has_string(json_t *arr, const char *s)
{
    size_t i;
    json_t *v;

    if (!json_is_array(arr))
        return 0;
    json_array_foreach (arr, i, v) {
        if (span_eq(span_of(v), s))
            return 1;
    }
    return 0;
}

struct hp_volume *hp_volume_decode(json_t *obj)
{
    json_t *meta = member(obj, "metadata"), *spec = member(obj, "spec");
    json_t *ann = member(meta, "annotations"), *ref = member(spec, "claimRef");
    struct span name = str_at(meta, "name"), rv = str_at(meta, "resourceVersion");
    struct span phase = str_at(member(obj, "status"), "phase");
    struct span by = str_at(ann, HP_ANN_PROVISIONED_BY), ident = str_at(ann, HP_ANN_IDENTITY);
    struct span sc = str_at(spec, "storageClassName");
    struct span cns = str_at(ref, "namespace"), cname = str_at(ref, "name");
    struct span cuid = str_at(ref, "uid"), path = str_at(member(spec, "hostPath"), "path");
    struct hp_volume *v;
    struct cursor cur;

    if (!required(name))
        return NULL;
    v = hp_xmalloc(sizeof(*v) + name.n + 1 + span_size(rv) + span_size(phase) + span_size(by) +
                   span_size(ident) + span_size(sc) + span_size(cns) + span_size(cname) +
                   span_size(cuid) + span_size(path));
    cur.p = v->key;
    v->name = put_span(&cur, name); /* the key is the name itself */
    v->resource_version = put_span(&cur, rv);
    v->phase = put_span(&cur, phase);
    v->provisioned_by = put_span(&cur, by);
    v->identity = put_span(&cur, ident);
    v->class_name = put_span(&cur, sc);
    v->claim_namespace = put_span(&cur, cns);
    v->claim_name = put_span(&cur, cname);
    v->claim_uid = put_span(&cur, cuid);
    v->path = put_span(&cur, path);
    v->reclaim = parse_reclaim(str_at(spec, "persistentVolumeReclaimPolicy"));
    v->our_finalizer = has_string(member(meta, "finalizers"), HP_FINALIZER);
    v->deleting = is_deleting(meta);
    return v;
}

struct hp_class *hp_class_decode(json_t *obj)
{
    json_t *meta = member(obj, "metadata");
    json_t *params = member(obj, "parameters"), *opts = member(obj, "mountOptions");
    struct span name = str_at(meta, "name"), rv = str_at(meta, "resourceVersion");
    struct span prov = str_at(obj, "provisioner");
    struct hp_class *k;
    struct cursor cur;

    if (!required(name))
        return NULL;
    k = hp_xmalloc(sizeof(*k) + name.n + 1 + span_size(rv) + span_size(prov) +
                   packed_map_size(params) + packed_list_size(opts));
    cur.p = k->key;
    k->name = put_span(&cur, name);
    k->resource_version = put_span(&cur, rv);
    k->provisioner = put_span(&cur, prov);
    k->parameters = put_packed_map(&cur, params);
    k->mount_options = put_packed_list(&cur, opts);
    k->reclaim = parse_reclaim(str_at(obj, "reclaimPolicy"));
    k->wait_for_first_consumer = span_eq(str_at(obj, "volumeBindingMode"), "WaitForFirstConsumer");
    return k;
}

/* Packed maps alternate key and value; packed lists hold values only. Both end with an empty
 * string. hp_packed_next steps over ONE string, so a map walk steps twice per entry:
 *     for (p = m; *p; p = hp_packed_next(v)) { k = p; v = hp_packed_next(p); ... }
 */
const char *hp_packed_next(const char *p)
{
    return p + strlen(p) + 1;
}

const char *hp_packed_get(const char *packed, const char *key)
{
    const char *p, *v;

    if (!packed || !key)
        return NULL;
    for (p = packed; *p; p = hp_packed_next(v)) {
        v = hp_packed_next(p);
        if (strcmp(p, key) == 0)
            return v;
    }
    return NULL;
}

/* json_object_set_new for a value that must exist. hp_pv_build checks every input string for
 * valid UTF-8 first, so what is left to fail is allocation, which aborts like hp_xmalloc. */
static void set(json_t *obj, const char *key, json_t *val)
{
    if (!val || json_object_set_new(obj, key, val) != 0) {
        fprintf(stderr, "hostpath-provisioner: out of memory building JSON (%s)\n", key);
        abort();
    }
}

static void append(json_t *arr, json_t *val)
{
    if (!val || json_array_append_new(arr, val) != 0) {
        fprintf(stderr, "hostpath-provisioner: out of memory building JSON array\n");
        abort();
    }
}

static json_t *access_modes_json(uint8_t bits)
{
    static const char *const names[] = {"ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany",
                                        "ReadWriteOncePod"};
    json_t *arr = json_array();
    size_t i;

    for (i = 0; i < HP_ARRAY_SIZE(names); i++) {
        if (bits & (1u << i))
            append(arr, json_string(names[i]));
    }
    return arr;
}

static json_t *claim_ref_json(const struct hp_claim *c)
{
    json_t *ref = json_object();

    /* client-go's reference.GetReference, as the sig-storage library uses it. */
    set(ref, "kind", json_string("PersistentVolumeClaim"));
    set(ref, "apiVersion", json_string("v1"));
    set(ref, "namespace", json_string(c->namespace_));
    set(ref, "name", json_string(c->name));
    set(ref, "uid", json_string(c->uid));
    if (*c->resource_version)
        set(ref, "resourceVersion", json_string(c->resource_version));
    return ref;
}

static json_t *node_affinity_json(const char *node)
{
    json_t *expr = json_object(), *values = json_array(), *exprs = json_array();
    json_t *term = json_object(), *terms = json_array(), *req = json_object();
    json_t *aff = json_object();

    append(values, json_string(node));
    set(expr, "key", json_string("kubernetes.io/hostname"));
    set(expr, "operator", json_string("In"));
    set(expr, "values", values);
    append(exprs, expr);
    set(term, "matchExpressions", exprs);
    append(terms, term);
    set(req, "nodeSelectorTerms", terms);
    set(aff, "required", req);
    return aff;
}

static const char *reclaim_text(enum hp_reclaim r)
{
    switch (r) {
    case HP_RECLAIM_RETAIN:
        return "Retain";
    case HP_RECLAIM_RECYCLE:
        return "Recycle";
    case HP_RECLAIM_DELETE:
    case HP_RECLAIM_UNSET:
    default:
        return "Delete";
    }
}

static json_t *pv_metadata_json(const struct hp_pv_spec *sp, enum hp_reclaim reclaim)
{
    json_t *meta = json_object(), *ann = json_object();

    set(meta, "name", json_string(sp->name));
    set(ann, HP_ANN_PROVISIONED_BY, json_string(sp->provisioner));
    set(ann, HP_ANN_IDENTITY, json_string(sp->identity));
    set(meta, "annotations", ann);
    if (sp->add_finalizer && reclaim == HP_RECLAIM_DELETE) {
        json_t *fin = json_array();
        append(fin, json_string(HP_FINALIZER));
        set(meta, "finalizers", fin);
    }
    return meta;
}

/* jansson refuses strings that are not UTF-8; find that out before building anything. */
static int valid_text(const char *s)
{
    json_t *j;

    if (!s)
        return 0;
    j = json_string(s);
    if (!j)
        return 0;
    json_decref(j);
    return 1;
}

static int pv_inputs_valid(const struct hp_pv_spec *sp)
{
    const struct hp_claim *c = sp->claim;
    const char *p;

    if (!c || !valid_text(sp->name) || !valid_text(sp->provisioner) || !valid_text(sp->identity) ||
        !valid_text(sp->path) || (sp->node && !valid_text(sp->node)))
        return 0;
    if (!valid_text(c->namespace_) || !valid_text(c->name) || !valid_text(c->uid) ||
        !valid_text(c->resource_version) || !valid_text(c->request) ||
        (c->class_name && !valid_text(c->class_name)))
        return 0;
    if (sp->class_) {
        if (!valid_text(sp->class_->name))
            return 0;
        for (p = sp->class_->mount_options; p && *p; p = hp_packed_next(p)) {
            if (!valid_text(p))
                return 0;
        }
    }
    return 1;
}

/* NULL when a required input is missing or a string is not valid UTF-8. */
json_t *hp_pv_build(const struct hp_pv_spec *sp)
{
    const struct hp_claim *c = sp->claim;
    enum hp_reclaim reclaim = sp->reclaim == HP_RECLAIM_UNSET ? HP_RECLAIM_DELETE : sp->reclaim;
    const char *class_name, *p;
    json_t *pv, *spec, *cap, *hostpath;

    if (!pv_inputs_valid(sp))
        return NULL;
    /* The claim's class, as the sig-storage library writes it; the class object's name is the
     * same string whenever both exist. */
    class_name = c->class_name && *c->class_name ? c->class_name
                 : sp->class_                    ? sp->class_->name
                                                 : NULL;
    pv = json_object();
    spec = json_object();
    set(pv, "apiVersion", json_string("v1"));
    set(pv, "kind", json_string("PersistentVolume"));
    set(pv, "metadata", pv_metadata_json(sp, reclaim));

    set(spec, "claimRef", claim_ref_json(c));
    cap = json_object();
    set(cap, "storage", json_string(c->request));
    set(spec, "capacity", cap);
    set(spec, "accessModes", access_modes_json(c->access_modes));
    if (class_name && *class_name)
        set(spec, "storageClassName", json_string(class_name));
    set(spec, "persistentVolumeReclaimPolicy", json_string(reclaim_text(reclaim)));
    if (sp->class_ && sp->class_->mount_options && *sp->class_->mount_options) {
        json_t *opts = json_array();
        for (p = sp->class_->mount_options; *p; p = hp_packed_next(p))
            append(opts, json_string(p));
        set(spec, "mountOptions", opts);
    }
    set(spec, "volumeMode", json_string("Filesystem"));
    hostpath = json_object();
    set(hostpath, "path", json_string(sp->path));
    set(hostpath, "type", json_string("DirectoryOrCreate"));
    set(spec, "hostPath", hostpath);
    if (sp->node && *sp->node)
        set(spec, "nodeAffinity", node_affinity_json(sp->node));
    set(pv, "spec", spec);
    return pv;
}

int hp_pv_name(const struct hp_claim *claim, char *out, size_t outlen)
{
    int n;

    if (!claim->uid || !*claim->uid)
        return -EINVAL;
    n = snprintf(out, outlen, "pvc-%s", claim->uid);
    if (n < 0)
        return -EINVAL;
    if ((size_t)n >= outlen)
        return -ENAMETOOLONG;
    return 0;
}
