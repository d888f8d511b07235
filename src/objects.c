/* objects: compact views of PersistentVolumeClaims, PersistentVolumes and StorageClasses, and the
 * PersistentVolume JSON the provisioner writes.
 *
 * Any thread (pure functions, no shared state). The decoders read the tokens of an hp_json
 * reader (no DOM is built): each measures every string it keeps first, then makes ONE allocation
 * holding the struct followed by the unescaped strings, and copies them in. That keeps 20,000
 * cached claims within the memory budget of docs/design.md ("Targets") and costs one malloc per watch event.
 * Absent strings point at a static "" (never NULL) unless the header says NULL. The reader has
 * validated the text (UTF-8, no \u0000), so every copied string is valid UTF-8 without NUL.
 * hp_pv_build writes with jansson (CONTRIBUTING.md: hp_json reads, jansson builds).
 */
#include "hostpath/objects.h"

#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hostpath/buf.h"
#include "hostpath/common.h"

#define ANN_LAST_APPLIED "kubectl.kubernetes.io/last-applied-configuration"

static const char empty[] = "";

/* A string token and its unescaped length: tok < 0 means absent (or not a string). */
struct span {
    int tok;
    size_t n;
    int nul; /* the value holds a NUL: it cannot be kept as a C string */
};

static struct span span_of(const struct hp_json *j, int tok)
{
    struct span sp = {-1, 0, 0};
    int n = hp_json_str_len(j, tok);

    if (n >= 0) {
        sp.tok = tok;
        sp.n = (size_t)n;
        sp.nul = hp_json_str_has_nul(j, tok);
    }
    return sp;
}

/* hp_json_get answers -1 for a non-object or a missing key, so lookups chain safely. */
static struct span str_at(const struct hp_json *j, int obj, const char *key)
{
    return span_of(j, hp_json_get(j, obj, key));
}

/* Bytes a span needs in the block: nothing when absent or empty (it points at static ""). */
static size_t span_size(struct span sp)
{
    return sp.tok >= 0 && sp.n ? sp.n + 1 : 0;
}

/* Write cursor into the single allocation. */
struct cursor {
    const struct hp_json *j;
    char *p;
};

static const char *put_span(struct cursor *c, struct span sp)
{
    const char *r = c->p;

    if (sp.tok < 0 || !sp.n)
        return empty;
    (void)hp_json_str_copy(c->j, sp.tok, c->p, sp.n + 1); /* fits: measured */
    c->p += sp.n + 1;
    return r;
}

/* As put_span, but NULL stays NULL (for the fields the header allows to be NULL). */
static const char *put_nullable(struct cursor *c, struct span sp)
{
    return sp.tok >= 0 ? put_span(c, sp) : NULL;
}

/* ---- string-to-string maps (annotations, labels, parameters) ---- */

/* Which members of a map are copied. Empty keys would end a packed map early; non-string
 * values are not strings to keep; the last-applied annotation can be hundreds of KiB that
 * nothing here reads. A repeated key keeps its last value only, as jansson and Go read it. */
struct map_keep {
    int obj;       /* the map, or -1 when absent / not an object */
    uint8_t *keep; /* per member, in order */
    uint8_t small[32];
    size_t bytes; /* packed size, terminator included; 0 when nothing is kept */
    int bad;      /* a member that had to be kept holds a NUL */
};

/* Which keys of a map to keep: NULL keeps all. must_keep: a NUL in the value of a kept key that
 * matches it makes the whole object unrepresentable (the decision depends on it). */
struct key_filter {
    int (*keep)(const char *key, size_t n, void *ctx);
    int (*must)(const char *key, size_t n);
    void *ctx;
};

struct key_ref {
    uint64_t hash;
    int member;
    int key;
};

static int key_ref_cmp(const void *a, const void *b)
{
    const struct key_ref *x = a, *y = b;

    if (x->hash != y->hash)
        return x->hash < y->hash ? -1 : 1;
    return x->member - y->member;
}

/* Clears keep[] for every member whose key occurs again later. Small maps compare pairwise;
 * large ones sort key hashes, so a hostile map with 100,000 keys costs n log n, not n^2. */
static void drop_repeated_keys(const struct hp_json *j, int obj, int n, uint8_t *keep)
{
    struct key_ref *refs;
    int i, m, k;

    if (n <= 16) {
        int keys[16];
        for (i = 0, k = hp_json_first(j, obj); k >= 0; k = hp_json_next(j, obj, k))
            keys[i++] = k;
        for (i = 0; i < n; i++) {
            const struct hp_json_tok *a = &j->toks[keys[i]];
            for (m = i + 1; keep[i] && m < n; m++) {
                const struct hp_json_tok *b = &j->toks[keys[m]];
                /* raw lengths differ and neither is escaped: cannot be equal */
                if (!a->escaped && !b->escaped && a->end - a->start != b->end - b->start)
                    continue;
                if (hp_json_str_eq_tok(j, keys[i], keys[m]))
                    keep[i] = 0;
            }
        }
        return;
    }
    refs = hp_xmalloc((size_t)n * sizeof(*refs));
    for (i = 0, k = hp_json_first(j, obj); k >= 0; k = hp_json_next(j, obj, k), i++) {
        refs[i].hash = hp_json_str_hash(j, k);
        refs[i].member = i;
        refs[i].key = k;
    }
    qsort(refs, (size_t)n, sizeof(*refs), key_ref_cmp);
    for (i = 0; i < n; i++) {
        for (m = i + 1; m < n && refs[m].hash == refs[i].hash; m++) {
            if (hp_json_str_eq_tok(j, refs[i].key, refs[m].key)) {
                keep[refs[i].member] = 0; /* refs[m] comes later in the document */
                break;
            }
        }
    }
    free(refs);
}

/* The key of member k (a key token) as bytes, for filters: keys with escapes are decoded into
 * buf (cut at its size, which no Kubernetes key reaches). */
static const char *key_bytes(const struct hp_json *j, int k, char *buf, size_t cap, size_t *n)
{
    int len = hp_json_str_len(j, k);
    if (!j->toks[k].escaped) {
        *n = (size_t)len;
        return j->text + j->toks[k].start;
    }
    (void)hp_json_str_copy(j, k, buf, cap);
    *n = strlen(buf);
    return buf;
}

static void map_keep_init(struct map_keep *mk, const struct hp_json *j, int obj,
                          const struct key_filter *f)
{
    int n = hp_json_count(j, obj), i, k;

    mk->obj = hp_json_is(j, obj, HP_JSON_OBJECT) ? obj : -1;
    mk->keep = mk->small;
    mk->bytes = 0;
    mk->bad = 0;
    if (mk->obj < 0 || n == 0)
        return;
    if ((size_t)n > sizeof(mk->small))
        mk->keep = hp_xmalloc((size_t)n);
    for (i = 0, k = hp_json_first(j, obj); k >= 0; k = hp_json_next(j, obj, k), i++) {
        mk->keep[i] = hp_json_str_len(j, k) > 0 && hp_json_is(j, k + 1, HP_JSON_STRING) &&
                      !hp_json_str_eq(j, k, ANN_LAST_APPLIED) && !hp_json_str_has_nul(j, k);
        if (mk->keep[i] && f) {
            char buf[512];
            size_t kn;
            const char *key = key_bytes(j, k, buf, sizeof(buf), &kn);
            int must = f->must && f->must(key, kn);
            mk->keep[i] = must || !f->keep || f->keep(key, kn, f->ctx);
            if (mk->keep[i] && must && hp_json_str_has_nul(j, k + 1))
                mk->bad = 1;
        }
        if (mk->keep[i] && hp_json_str_has_nul(j, k + 1))
            mk->keep[i] = 0; /* a value we cannot hold: as if absent */
    }
    drop_repeated_keys(j, obj, n, mk->keep);
    for (i = 0, k = hp_json_first(j, obj); k >= 0; k = hp_json_next(j, obj, k), i++) {
        if (mk->keep[i])
            mk->bytes += (size_t)hp_json_str_len(j, k) + 1 + (size_t)hp_json_str_len(j, k + 1) + 1;
    }
    if (mk->bytes)
        mk->bytes++;
}

static void map_keep_free(struct map_keep *mk)
{
    if (mk->keep != mk->small)
        free(mk->keep);
}

static const char *put_packed_map(struct cursor *c, const struct map_keep *mk)
{
    const char *start = c->p;
    int i, k;

    if (!mk->bytes)
        return empty;
    for (i = 0, k = hp_json_first(c->j, mk->obj); k >= 0; k = hp_json_next(c->j, mk->obj, k), i++) {
        if (!mk->keep[i])
            continue;
        struct span v = span_of(c->j, k + 1);
        (void)put_span(c, span_of(c->j, k));
        /* the value may be "": unlike put_span, it still takes its terminator here */
        (void)hp_json_str_copy(c->j, v.tok, c->p, v.n + 1);
        c->p += v.n + 1;
    }
    *c->p++ = '\0';
    return start;
}

/* ---- lists ---- */

static size_t packed_list_size(const struct hp_json *j, int arr)
{
    size_t n = 0;
    int e;

    for (e = hp_json_first(j, arr); e >= 0; e = hp_json_next(j, arr, e)) {
        if (hp_json_str_has_nul(j, e))
            return SIZE_MAX; /* unrepresentable: the caller refuses the object */
        n += span_size(span_of(j, e)); /* non-empty strings only */
    }
    return n ? n + 1 : 0;
}

static const char *put_packed_list(struct cursor *c, int arr)
{
    const char *start = c->p;
    int e;

    for (e = hp_json_first(c->j, arr); e >= 0; e = hp_json_next(c->j, arr, e))
        (void)put_span(c, span_of(c->j, e));
    if (c->p == start)
        return empty;
    *c->p++ = '\0';
    return start;
}

int hp_parse_reclaim(const char *s, enum hp_reclaim *out)
{
    if (!s)
        return -EINVAL;
    if (strcmp(s, "Delete") == 0)
        *out = HP_RECLAIM_DELETE;
    else if (strcmp(s, "Retain") == 0)
        *out = HP_RECLAIM_RETAIN;
    else if (strcmp(s, "Recycle") == 0)
        *out = HP_RECLAIM_RECYCLE;
    else
        return -EINVAL;
    return 0;
}

const char *hp_reclaim_name(enum hp_reclaim r)
{
    switch (r) {
    case HP_RECLAIM_DELETE:
        return "Delete";
    case HP_RECLAIM_RETAIN:
        return "Retain";
    case HP_RECLAIM_RECYCLE:
        return "Recycle";
    case HP_RECLAIM_UNSET:
        break;
    }
    return "";
}

static enum hp_reclaim parse_reclaim(const struct hp_json *j, int tok)
{
    if (hp_json_str_eq(j, tok, "Delete"))
        return HP_RECLAIM_DELETE;
    if (hp_json_str_eq(j, tok, "Retain"))
        return HP_RECLAIM_RETAIN;
    if (hp_json_str_eq(j, tok, "Recycle"))
        return HP_RECLAIM_RECYCLE;
    return HP_RECLAIM_UNSET;
}

static uint8_t parse_access_modes(const struct hp_json *j, int arr)
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
    size_t m;
    int e;

    for (e = hp_json_first(j, arr); e >= 0; e = hp_json_next(j, arr, e)) {
        for (m = 0; m < HP_ARRAY_SIZE(modes); m++) {
            if (hp_json_str_eq(j, e, modes[m].name))
                bits |= modes[m].bit;
        }
    }
    return bits;
}

/* deletionTimestamp set: any non-null value counts (the API server writes an RFC 3339 string). */
static uint8_t is_deleting(const struct hp_json *j, int meta)
{
    enum hp_json_type t = hp_json_type(j, hp_json_get(j, meta, "deletionTimestamp"));
    return t != HP_JSON_NONE && t != HP_JSON_NULL;
}

/* A required identifying string: present, a string, non-empty. */
static int required(struct span sp)
{
    return sp.tok >= 0 && sp.n;
}

/* The first of two annotations that is present (even when empty), or NULL. The pointers point
 * into the packed map, so they cost no extra bytes. */
static const char *ann_either(const char *packed, const char *first, const char *second)
{
    const char *v = hp_packed_get(packed, first);
    return v ? v : hp_packed_get(packed, second);
}

/* The object token, or -1 when the reader is missing or tok is not an object. */
static int object_tok(const struct hp_json *j, int tok)
{
    return j && hp_json_is(j, tok, HP_JSON_OBJECT) ? tok : -1;
}

/* 1 when key (n bytes) is one of list[0..count). */
static int key_in(const char *const *list, size_t count, const char *key, size_t n)
{
    for (size_t i = 0; i < count; i++)
        if (strlen(list[i]) == n && memcmp(list[i], key, n) == 0)
            return 1;
    return 0;
}

/* Annotations every decision reads, whatever the claim's class. */
static const char *const claim_annotations[] = {
    HP_ANN_BETA_STORAGE_CLASS, HP_ANN_STORAGE_PROVISIONER, HP_ANN_BETA_STORAGE_PROVISIONER,
    HP_ANN_SELECTED_NODE, HP_ANN_ALPHA_SELECTED_NODE, HP_ANN_VOLUME_TYPE,
};

static int claim_must(const char *key, size_t n)
{
    return key_in(claim_annotations, HP_ARRAY_SIZE(claim_annotations), key, n);
}

/* The label the claim labeller writes (the node a claim is for), whatever the class. */
static int claim_label_must(const char *key, size_t n)
{
    return n == strlen(HP_LABEL_NODE) && memcmp(key, HP_LABEL_NODE, n) == 0;
}

/* A key in a packed list of keys ("a\0b\0\0")? */
static int in_keys(const char *keys, const char *key, size_t n)
{
    for (const char *p = keys; p && *p; p += strlen(p) + 1)
        if (strlen(p) == n && memcmp(p, key, n) == 0)
            return 1;
    return 0;
}

static int keep_listed(const char *key, size_t n, void *ctx)
{
    return in_keys(ctx, key, n);
}

static int keep_none(const char *key, size_t n, void *ctx)
{
    (void)key;
    (void)n;
    (void)ctx;
    return 0;
}

/* A field that is present and not null ({} counts: Kubernetes tests `!= nil`). */
static uint8_t present(const struct hp_json *j, int tok)
{
    enum hp_json_type t = hp_json_type(j, tok);
    return t != HP_JSON_NONE && t != HP_JSON_NULL;
}

/* The class a claim names before anything is copied: the beta annotation wins (even empty). */
static struct span claim_class(const struct hp_json *j, int meta, int spec)
{
    int ann = hp_json_get(j, meta, "annotations");
    int tok = hp_json_get(j, ann, HP_ANN_BETA_STORAGE_CLASS);
    if (hp_json_is(j, tok, HP_JSON_STRING))
        return span_of(j, tok);
    return str_at(j, spec, "storageClassName");
}

/* hp_claim resize_marked: status (a token, or -1) says this claim is being resized to req. */
static uint8_t resize_marked(const struct hp_json *j, int status, int req)
{
    int alloc = hp_json_path(j, status, "allocatedResources", "storage", NULL);
    if (req < 0 || alloc < 0 || !hp_json_str_eq_tok(j, alloc, req) ||
        !hp_json_str_eq(j, hp_json_path(j, status, "allocatedResourceStatuses", "storage", NULL),
                        "ControllerResizeInProgress"))
        return 0;
    int conds = hp_json_get(j, status, "conditions");
    for (int e = hp_json_first(j, conds); e >= 0; e = hp_json_next(j, conds, e)) {
        if (hp_json_str_eq(j, hp_json_get(j, e, "type"), "Resizing") &&
            hp_json_str_eq(j, hp_json_get(j, e, "status"), "True"))
            return 1;
    }
    return 0;
}

struct hp_claim *hp_claim_decode_filtered(const struct hp_json *j, int obj,
                                          const struct hp_claim_filter *filter)
{
    int meta, spec;
    struct span ns, name, uid, rv, vol, sc, req, cls, scap;
    struct map_keep ann, labels;
    size_t total;
    struct hp_claim *c;
    struct cursor cur;
    const char *ann_keys = NULL, *label_keys = NULL;
    int wanted = 1;

    if ((obj = object_tok(j, obj)) < 0)
        return NULL;
    meta = hp_json_get(j, obj, "metadata");
    spec = hp_json_get(j, obj, "spec");
    ns = str_at(j, meta, "namespace");
    name = str_at(j, meta, "name");
    if (!required(ns) || !required(name))
        return NULL;
    uid = str_at(j, meta, "uid");
    rv = str_at(j, meta, "resourceVersion");
    vol = str_at(j, spec, "volumeName");
    sc = str_at(j, spec, "storageClassName");
    req = str_at(j, hp_json_path(j, spec, "resources", "requests", NULL), "storage");
    scap = str_at(j, hp_json_path(j, obj, "status", "capacity", NULL), "storage");
    if (ns.nul || name.nul || uid.nul || rv.nul || vol.nul || sc.nul || req.nul || scap.nul)
        return NULL;
    if (filter) {
        /* Labels and annotations cost memory only while the claim may still be provisioned by
         * us, and then only those a pathPattern of its class reads. */
        char cbuf[256] = "";
        cls = claim_class(j, meta, spec);
        if (!cls.nul && cls.tok >= 0)
            (void)hp_json_str_copy(j, cls.tok, cbuf, sizeof(cbuf));
        wanted = !(vol.tok >= 0 && vol.n) && cls.tok >= 0 && !cls.nul &&
                 filter->wanted(cbuf, &ann_keys, &label_keys, filter->ctx);
    }
    struct key_filter af = {keep_listed, claim_must, (void *)ann_keys};
    struct key_filter lf = {keep_listed, claim_label_must, (void *)label_keys};
    if (!filter) {
        af.keep = NULL; /* everything */
        lf.keep = NULL;
    } else if (!wanted) {
        af.keep = keep_none; /* what decisions read, nothing else */
        lf.keep = keep_none;
    }
    map_keep_init(&ann, j, hp_json_get(j, meta, "annotations"), &af);
    map_keep_init(&labels, j, hp_json_get(j, meta, "labels"), &lf);
    if (ann.bad) { /* a NUL in an annotation every decision reads */
        map_keep_free(&ann);
        map_keep_free(&labels);
        return NULL;
    }
    total = sizeof(*c) + ns.n + 1 + name.n + 1 /* key */ + span_size(ns) + span_size(uid) +
            span_size(rv) + span_size(vol) + span_size(sc) + span_size(req) + span_size(scap) +
            ann.bytes + labels.bytes;
    c = hp_xmalloc(total);
    cur.j = j;
    cur.p = c->key;
    (void)put_span(&cur, ns);
    cur.p[-1] = '/';
    (void)put_span(&cur, name); /* "namespace/name", NUL-terminated */

    c->name = c->key + ns.n + 1; /* the tail of "namespace/name" is the name, NUL and all */
    c->namespace_ = put_span(&cur, ns);
    c->uid = put_span(&cur, uid);
    c->resource_version = put_span(&cur, rv);
    c->volume_name = put_span(&cur, vol);
    c->request = put_span(&cur, req);
    c->status_capacity = put_span(&cur, scap);
    c->annotations = put_packed_map(&cur, &ann);
    c->labels = put_packed_map(&cur, &labels);
    map_keep_free(&ann);
    map_keep_free(&labels);
    /* Kubernetes' GetPersistentVolumeClaimClass: the beta annotation wins when present (even
     * empty), then spec.storageClassName; "" means "no class", NULL means "not set". */
    c->class_name = hp_packed_get(c->annotations, HP_ANN_BETA_STORAGE_CLASS);
    if (!c->class_name)
        c->class_name = put_nullable(&cur, sc);
    c->provisioner =
        ann_either(c->annotations, HP_ANN_STORAGE_PROVISIONER, HP_ANN_BETA_STORAGE_PROVISIONER);
    c->selected_node = ann_either(c->annotations, HP_ANN_SELECTED_NODE, HP_ANN_ALPHA_SELECTED_NODE);
    c->label_node = hp_packed_get(c->labels, HP_LABEL_NODE);
    c->access_modes = parse_access_modes(j, hp_json_get(j, spec, "accessModes"));
    c->block = hp_json_str_eq(j, hp_json_get(j, spec, "volumeMode"), "Block");
    c->deleting = is_deleting(j, meta);
    c->selector = present(j, hp_json_get(j, spec, "selector"));
    c->resize_marked = resize_marked(j, hp_json_get(j, obj, "status"), req.tok);
    c->data_source = present(j, hp_json_get(j, spec, "dataSource")) ||
                     present(j, hp_json_get(j, spec, "dataSourceRef"));
    c->maps_kept = (uint8_t)(filter ? wanted : 1);
    return c;
}

struct hp_claim *hp_claim_decode(const struct hp_json *j, int obj)
{
    return hp_claim_decode_filtered(j, obj, NULL);
}

static int has_string(const struct hp_json *j, int arr, const char *s)
{
    int e;

    for (e = hp_json_first(j, arr); e >= 0; e = hp_json_next(j, arr, e)) {
        if (hp_json_str_eq(j, e, s))
            return 1;
    }
    return 0;
}

/* The first value of a required kubernetes.io/hostname "In" expression of the PV's node
 * affinity (the shape hp_pv_build and the sig-storage library write), or -1. */
static int hostname_affinity(const struct hp_json *j, int spec)
{
    int terms = hp_json_path(j, spec, "nodeAffinity", "required", "nodeSelectorTerms", NULL);
    for (int t = hp_json_first(j, terms); t >= 0; t = hp_json_next(j, terms, t)) {
        int exprs = hp_json_get(j, t, "matchExpressions");
        for (int e = hp_json_first(j, exprs); e >= 0; e = hp_json_next(j, exprs, e)) {
            int vals = hp_json_get(j, e, "values");
            if (hp_json_str_eq(j, hp_json_get(j, e, "key"), HP_LABEL_HOSTNAME) &&
                hp_json_str_eq(j, hp_json_get(j, e, "operator"), "In") &&
                hp_json_count(j, vals) >= 1 && hp_json_is(j, hp_json_first(j, vals), HP_JSON_STRING))
                return hp_json_first(j, vals);
        }
    }
    return -1;
}

/* Whether the PV's required node affinity lets exactly one node mount it, the one `node` names
 * (hp_volume.node_only): one term (terms are ORed), holding an "In" expression of one value,
 * and every kubernetes.io/hostname expression of it an "In" of one value: the node itself when
 * `node` was read from that affinity (from_ann 0); when it was read from the selected-node
 * annotation, the node's hostname label, which may differ from its name. Anything else
 * (several terms, several values, NotIn) may be mounted on other nodes too. */
static int pinned_to_node(const struct hp_json *j, int spec, struct span node, int from_ann)
{
    int terms = hp_json_path(j, spec, "nodeAffinity", "required", "nodeSelectorTerms", NULL);
    int single_in = 0;

    if (node.tok < 0 || !node.n || hp_json_count(j, terms) != 1)
        return 0;
    int exprs = hp_json_get(j, hp_json_first(j, terms), "matchExpressions");
    for (int e = hp_json_first(j, exprs); e >= 0; e = hp_json_next(j, exprs, e)) {
        int vals = hp_json_get(j, e, "values");
        int in1 = hp_json_str_eq(j, hp_json_get(j, e, "operator"), "In") &&
                  hp_json_count(j, vals) == 1;
        single_in |= in1;
        if (hp_json_str_eq(j, hp_json_get(j, e, "key"), HP_LABEL_HOSTNAME) &&
            !(in1 && (from_ann || hp_json_str_eq_tok(j, hp_json_first(j, vals), node.tok))))
            return 0;
    }
    return single_in;
}

/* The node a PV's directory is on, as hp_volume_decode reads it (span tok -1: none). */
static struct span volume_node(const struct hp_json *j, int ann, int spec)
{
    /* local-path-provisioner's annotation when the PV has node affinity (on nodeAffinityKey,
     * the affinity holds a label's value), else the hostname affinity. */
    struct span node = str_at(j, ann, HP_ANN_LPP_SELECTED_NODE);
    if (node.tok < 0 || !node.n ||
        !present(j, hp_json_path(j, spec, "nodeAffinity", "required", NULL)))
        node = span_of(j, hostname_affinity(j, spec));
    return node;
}

int hp_volume_peek(const struct hp_json *j, int obj, char *node, size_t len, char *path,
                   size_t plen)
{
    if ((obj = object_tok(j, obj)) < 0)
        return -1;
    int spec = hp_json_get(j, obj, "spec");
    int ann = hp_json_path(j, obj, "metadata", "annotations", NULL);
    int local = !present(j, hp_json_get(j, spec, "hostPath")) &&
                present(j, hp_json_get(j, spec, "local"));
    struct span p = str_at(j, hp_json_get(j, spec, local ? "local" : "hostPath"), "path");
    if (p.tok < 0 || !p.n)
        return -1;
    if (plen)
        (void)hp_json_str_copy(j, p.tok, path, plen);
    struct span n = volume_node(j, ann, spec);
    int from_ann = n.tok >= 0 && n.tok == str_at(j, ann, HP_ANN_LPP_SELECTED_NODE).tok;
    if (n.tok < 0 || !n.n || !pinned_to_node(j, spec, n, from_ann))
        return 0;
    if (len)
        (void)hp_json_str_copy(j, n.tok, node, len);
    return 1;
}

struct hp_volume *hp_volume_decode(const struct hp_json *j, int obj)
{
    int meta, spec, ann, ref, labels;
    struct span name, rv, phase, by, ident, sc, cns, cname, cuid, path, ondel, node, cap, lnode,
        lprov;
    struct hp_volume *v;
    struct cursor cur;

    if ((obj = object_tok(j, obj)) < 0)
        return NULL;
    meta = hp_json_get(j, obj, "metadata");
    name = str_at(j, meta, "name");
    if (!required(name))
        return NULL;
    spec = hp_json_get(j, obj, "spec");
    ann = hp_json_get(j, meta, "annotations");
    ref = hp_json_get(j, spec, "claimRef");
    rv = str_at(j, meta, "resourceVersion");
    phase = str_at(j, hp_json_get(j, obj, "status"), "phase");
    by = str_at(j, ann, HP_ANN_PROVISIONED_BY);
    ident = str_at(j, ann, HP_ANN_IDENTITY);
    sc = str_at(j, spec, "storageClassName");
    cns = str_at(j, ref, "namespace");
    cname = str_at(j, ref, "name");
    cuid = str_at(j, ref, "uid");
    /* A hostPath volume, else a local one (its path is a node path just the same). */
    int local = !present(j, hp_json_get(j, spec, "hostPath")) &&
                present(j, hp_json_get(j, spec, "local"));
    path = str_at(j, hp_json_get(j, spec, local ? "local" : "hostPath"), "path");
    ondel = str_at(j, ann, HP_ANN_ON_DELETE);
    node = volume_node(j, ann, spec);
    /* Read from local-path-provisioner's annotation, or from the hostname affinity. */
    int from_ann = node.tok >= 0 && node.tok == str_at(j, ann, HP_ANN_LPP_SELECTED_NODE).tok;
    int node_only = pinned_to_node(j, spec, node, from_ann);
    cap = str_at(j, hp_json_get(j, spec, "capacity"), "storage");
    labels = hp_json_get(j, meta, "labels");
    lnode = str_at(j, labels, HP_LABEL_NODE);
    lprov = str_at(j, labels, HP_LABEL_PROVISIONER);
    /* A field a decision reads that a C string cannot hold: the object cannot be represented. */
    if (name.nul || rv.nul || phase.nul || by.nul || ident.nul || sc.nul || cns.nul ||
        cname.nul || cuid.nul || path.nul || ondel.nul || node.nul || cap.nul)
        return NULL;
    if (lnode.nul) /* not a label value we wrote: as if absent (it is rewritten) */
        lnode.tok = -1;
    if (lprov.nul)
        lprov.tok = -1;
    v = hp_xmalloc(sizeof(*v) + name.n + 1 + span_size(rv) + span_size(phase) + span_size(by) +
                   span_size(ident) + span_size(sc) + span_size(cns) + span_size(cname) +
                   span_size(cuid) + span_size(path) + span_size(ondel) + span_size(node) +
                   span_size(cap) + span_size(lnode) + span_size(lprov));
    cur.j = j;
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
    v->on_delete = put_nullable(&cur, ondel);
    v->capacity = put_span(&cur, cap);
    v->node = put_nullable(&cur, node);
    if (v->node && !*v->node)
        v->node = NULL;
    v->label_node = put_nullable(&cur, lnode);
    v->label_provisioner = put_nullable(&cur, lprov);
    v->reclaim = parse_reclaim(j, hp_json_get(j, spec, "persistentVolumeReclaimPolicy"));
    v->our_finalizer = has_string(j, hp_json_get(j, meta, "finalizers"), HP_FINALIZER);
    v->deleting = is_deleting(j, meta);
    v->local = (uint8_t)local;
    v->node_only = (uint8_t)(v->node && node_only);
    return v;
}

static int params_must(const char *key, size_t n)
{
    (void)key;
    (void)n;
    return 1;
}

/* The class annotations read as local-path-provisioner reads them; the rest is not kept. */
static const char *const class_annotations[] = {
    HP_ANN_DEFAULT_VOLUME_TYPE, HP_ANN_USER_PATTERN, HP_ANN_GROUP_PATTERN, HP_ANN_PERM_PATTERN,
    HP_ANN_ALLOW_UNSAFE_PATH,
};

static int class_ann_must(const char *key, size_t n)
{
    return key_in(class_annotations, HP_ARRAY_SIZE(class_annotations), key, n);
}

struct hp_class *hp_class_decode(const struct hp_json *j, int obj)
{
    int meta, opts;
    struct span name, rv, prov;
    struct map_keep params, ann;
    struct hp_class *k;
    struct cursor cur;

    if ((obj = object_tok(j, obj)) < 0)
        return NULL;
    meta = hp_json_get(j, obj, "metadata");
    name = str_at(j, meta, "name");
    if (!required(name))
        return NULL;
    rv = str_at(j, meta, "resourceVersion");
    prov = str_at(j, obj, "provisioner");
    opts = hp_json_get(j, obj, "mountOptions");
    if (name.nul || rv.nul || prov.nul || packed_list_size(j, opts) == SIZE_MAX)
        return NULL;
    /* Every parameter decides something: one that cannot be held refuses the class. */
    static const struct key_filter all_params = {NULL, params_must, NULL};
    map_keep_init(&params, j, hp_json_get(j, obj, "parameters"), &all_params);
    /* So do the annotations that stand in for parameters; the others cost nothing. */
    static const struct key_filter lpp_ann = {keep_none, class_ann_must, NULL};
    map_keep_init(&ann, j, hp_json_get(j, meta, "annotations"), &lpp_ann);
    if (params.bad || ann.bad) {
        map_keep_free(&params);
        map_keep_free(&ann);
        return NULL;
    }
    k = hp_xmalloc(sizeof(*k) + name.n + 1 + span_size(rv) + span_size(prov) + params.bytes +
                   ann.bytes + packed_list_size(j, opts));
    cur.j = j;
    cur.p = k->key;
    k->name = put_span(&cur, name);
    k->resource_version = put_span(&cur, rv);
    k->provisioner = put_span(&cur, prov);
    k->parameters = put_packed_map(&cur, &params);
    k->annotations = put_packed_map(&cur, &ann);
    map_keep_free(&params);
    map_keep_free(&ann);
    k->mount_options = put_packed_list(&cur, opts);
    k->reclaim = parse_reclaim(j, hp_json_get(j, obj, "reclaimPolicy"));
    k->wait_for_first_consumer =
        hp_json_str_eq(j, hp_json_get(j, obj, "volumeBindingMode"), "WaitForFirstConsumer");
    k->allow_expansion = hp_json_is(j, hp_json_get(j, obj, "allowVolumeExpansion"), HP_JSON_TRUE);
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

static json_t *node_affinity_json(const char *key, const char *value)
{
    json_t *expr = json_object(), *values = json_array(), *exprs = json_array();
    json_t *term = json_object(), *terms = json_array(), *req = json_object();
    json_t *aff = json_object();

    append(values, json_string(value));
    set(expr, "key", json_string(key));
    set(expr, "operator", json_string("In"));
    set(expr, "values", values);
    append(exprs, expr);
    set(term, "matchExpressions", exprs);
    append(terms, term);
    set(req, "nodeSelectorTerms", terms);
    set(aff, "required", req);
    return aff;
}

/* The node affinity of a PV with a node: its key and value. */
static const char *affinity_key(const struct hp_pv_spec *sp)
{
    return sp->affinity_key ? sp->affinity_key : HP_LABEL_HOSTNAME;
}

static const char *affinity_value(const struct hp_pv_spec *sp)
{
    return sp->affinity_value ? sp->affinity_value : sp->node;
}

static int label_char(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           ch == '-' || ch == '_' || ch == '.';
}

static int label_alnum(char ch)
{
    return label_char(ch) && ch != '-' && ch != '_' && ch != '.';
}

int hp_label_value(const char *s, char *out, size_t len)
{
    size_t n = s ? strlen(s) : 0, i, k = 0;
    int valid = n > 0 && n <= 63 && label_alnum(s[0]) && label_alnum(s[n - 1]);

    if (!n || len < HP_LABEL_VALUE_MAX)
        return -EINVAL;
    for (i = 0; valid && i < n; i++)
        valid = label_char(s[i]);
    if (valid) {
        memcpy(out, s, n + 1);
        return 0;
    }
    uint64_t h = 14695981039346656037ull; /* FNV-1a, 64-bit */
    for (i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    for (i = 0; i < n && k < 46; i++)
        out[k++] = label_char(s[i]) ? s[i] : '_';
    while (k && !label_alnum(out[k - 1]))
        k--;
    size_t start = 0;
    while (start < k && !label_alnum(out[start]))
        start++;
    if (start == k) {
        out[0] = 'x';
        start = 0;
        k = 1;
    }
    memmove(out, out + start, k - start);
    k -= start;
    snprintf(out + k, len - k, "-%016llx", (unsigned long long)h);
    return 0;
}

char *hp_pv_labels_patch(const char *node_value, const char *provisioner_value)
{
    /* Label values (hp_label_value) need no escaping. */
    if (node_value)
        return hp_xasprintf("{\"metadata\":{\"labels\":{\"" HP_LABEL_NODE "\":\"%s\",\""
                            HP_LABEL_PROVISIONER "\":\"%s\"}}}",
                            node_value, provisioner_value);
    return hp_xasprintf("{\"metadata\":{\"labels\":{\"" HP_LABEL_NODE "\":null,\""
                        HP_LABEL_PROVISIONER "\":\"%s\"}}}",
                        provisioner_value);
}

static int valid_text(const char *s);

char *hp_claim_label_patch(const char *node_value, const char *resource_version)
{
    if (!valid_text(node_value) || (resource_version && !valid_text(resource_version)))
        return NULL;
    json_t *meta = json_object(), *labels = json_object(), *patch = json_object();
    set(labels, HP_LABEL_NODE, json_string(node_value));
    set(meta, "labels", labels);
    if (resource_version && *resource_version)
        set(meta, "resourceVersion", json_string(resource_version));
    set(patch, "metadata", meta);
    char *text = json_dumps(patch, JSON_COMPACT);
    json_decref(patch);
    if (!text) {
        fprintf(stderr, "hostpath-provisioner: out of memory writing JSON\n");
        abort();
    }
    return text;
}

static json_t *pv_metadata_json(const struct hp_pv_spec *sp, enum hp_reclaim reclaim)
{
    json_t *meta = json_object(), *ann = json_object(), *labels = json_object();
    char value[HP_LABEL_VALUE_MAX];

    set(meta, "name", json_string(sp->name));
    /* A node instance watches the PVs of its node by this label (docs/design.md). */
    if (hp_label_value(sp->provisioner, value, sizeof(value)) == 0)
        set(labels, HP_LABEL_PROVISIONER, json_string(value));
    if (sp->node && *sp->node && hp_label_value(sp->node, value, sizeof(value)) == 0)
        set(labels, HP_LABEL_NODE, json_string(value));
    set(meta, "labels", labels);
    set(ann, HP_ANN_PROVISIONED_BY, json_string(sp->provisioner));
    set(ann, HP_ANN_IDENTITY, json_string(sp->identity));
    if (sp->on_delete)
        set(ann, HP_ANN_ON_DELETE, json_string(sp->on_delete));
    /* An affinity that does not name the node (nodeAffinityKey, or a hostname label that is
     * not the node's name) would leave hp_volume_decode without the node. */
    if (sp->node && *sp->node &&
        (strcmp(affinity_key(sp), HP_LABEL_HOSTNAME) != 0 ||
         strcmp(affinity_value(sp), sp->node) != 0))
        set(ann, HP_ANN_LPP_SELECTED_NODE, json_string(sp->node));
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
        !valid_text(sp->path) || (sp->node && !valid_text(sp->node)) ||
        (sp->on_delete && !valid_text(sp->on_delete)))
        return 0;
    /* An affinity needs a node to be about, and a local volume needs an affinity (the API
     * server refuses a local PV without one). */
    int has_node = sp->node && *sp->node;
    if ((sp->affinity_key || sp->affinity_value || sp->local) && !has_node)
        return 0;
    if (has_node && (!valid_text(affinity_key(sp)) || !*affinity_key(sp) ||
                     !valid_text(affinity_value(sp)) || !*affinity_value(sp)))
        return 0;
    if (!valid_text(c->namespace_) || !valid_text(c->name) || !valid_text(c->uid) ||
        !valid_text(c->resource_version) || !valid_text(c->request) ||
        (c->class_name && !valid_text(c->class_name)))
        return 0;
    if (sp->class_name && !valid_text(sp->class_name))
        return 0;
    for (p = sp->mount_options; p && *p; p = hp_packed_next(p)) {
        if (!valid_text(p))
            return 0;
    }
    return 1;
}

/* NULL when a required input is missing or a string is not valid UTF-8. */
char *hp_pv_build(const struct hp_pv_spec *sp)
{
    const struct hp_claim *c = sp->claim;
    enum hp_reclaim reclaim = sp->reclaim == HP_RECLAIM_UNSET ? HP_RECLAIM_DELETE : sp->reclaim;
    const char *class_name, *p;
    json_t *pv, *spec, *cap, *source;

    if (!pv_inputs_valid(sp))
        return NULL;
    /* The claim's class, as the sig-storage library writes it; the class object's name is the
     * same string whenever both exist. */
    class_name = c->class_name && *c->class_name ? c->class_name : sp->class_name;
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
    set(spec, "persistentVolumeReclaimPolicy", json_string(hp_reclaim_name(reclaim)));
    if (sp->mount_options && *sp->mount_options) {
        json_t *opts = json_array();
        for (p = sp->mount_options; *p; p = hp_packed_next(p))
            append(opts, json_string(p));
        set(spec, "mountOptions", opts);
    }
    set(spec, "volumeMode", json_string("Filesystem"));
    /* local-path-provisioner's createPersistentVolumeSource: local {path}, or hostPath {path,
     * DirectoryOrCreate}. */
    source = json_object();
    set(source, "path", json_string(sp->path));
    if (!sp->local)
        set(source, "type", json_string("DirectoryOrCreate"));
    set(spec, sp->local ? "local" : "hostPath", source);
    if (sp->node && *sp->node)
        set(spec, "nodeAffinity", node_affinity_json(affinity_key(sp), affinity_value(sp)));
    set(pv, "spec", spec);
    char *text = json_dumps(pv, JSON_COMPACT);
    json_decref(pv);
    if (!text) {
        fprintf(stderr, "hostpath-provisioner: out of memory writing JSON\n");
        abort();
    }
    return text;
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

char *hp_pv_takeover_patch(const char *identity, const char *on_delete)
{
    json_t *patch = json_pack("{s:{s:{s:s, s:s}}}", "metadata", "annotations", HP_ANN_IDENTITY,
                              identity, HP_ANN_ON_DELETE, on_delete);
    if (!patch)
        return NULL; /* not UTF-8 */
    char *text = json_dumps(patch, JSON_COMPACT);
    json_decref(patch);
    return text;
}
