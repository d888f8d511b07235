/* volindex: which directories under the volume root are taken, and by whom (see volindex.h).
 *
 * Loop thread only. Four hp_store hash tables:
 *   records  pv -> copy of its record
 *   owners   owner -> the paths it holds as a live volume and as a reservation
 *   paths    path -> the owners holding it (with the sources each holds it through)
 *   ancestors path -> how many held paths lie below it
 * so that "does rel collide with anybody else's path" is: rel in paths (equal), rel in ancestors
 * (contains), any ancestor of rel in paths (inside) -- O(depth), whatever the number of volumes.
 */
#include "hostpath/volindex.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hostpath/buf.h"
#include "hostpath/common.h"
#include "hostpath/store.h"
#include "hostpath/volpath.h"

struct rec_ent {
    struct hp_record r;
};

struct owner_ent {
    char *owner;
    char *held[3]; /* by source bit index: record, volume, reserved */
};

struct holder {
    char *owner;
    unsigned src;
};

struct path_ent {
    char *path;
    struct holder *h;
    size_t n;
};

struct anc_ent {
    char *path;
    size_t count;
};

struct hp_volindex {
    struct hp_store *records, *owners, *paths, *ancestors;
    struct hp_store *removed; /* pv -> struct tomb: records removed lately */
    struct hp_store *claims;  /* "namespace/name" -> struct claim_ent: the records of a claim */
};

/* The records that name one claim (by namespace/name): usually one, more when a claim of that
 * name was re-created. */
struct claim_ent {
    char *key;
    char **pvs;
    size_t n;
};

static const char *claim_ent_key(const void *o)
{
    return ((const struct claim_ent *)o)->key;
}
static void claim_ent_free(void *o)
{
    struct claim_ent *e = o;
    for (size_t i = 0; i < e->n; i++)
        free(e->pvs[i]);
    free(e->pvs);
    free(e->key);
    free(e);
}
static const struct hp_store_ops claim_ent_ops = {claim_ent_key, claim_ent_free};

/* "ns/name" of a record's claim into buf; 0 when the record names none. */
static int claim_key_of(const struct hp_record *r, char *buf, size_t len)
{
    if (!r->claim_namespace || !r->claim_name || !*r->claim_namespace || !*r->claim_name)
        return 0;
    int n = snprintf(buf, len, "%s/%s", r->claim_namespace, r->claim_name);
    return n > 0 && (size_t)n < len;
}

static void claim_link(struct hp_volindex *x, const struct hp_record *r, int add)
{
    char key[600];
    if (!claim_key_of(r, key, sizeof(key)))
        return;
    struct claim_ent *e = hp_store_get(x->claims, key);
    if (add) {
        if (!e) {
            e = hp_xcalloc(1, sizeof(*e));
            e->key = hp_xstrdup(key);
            free(hp_store_put(x->claims, e)); /* NULL: it was absent */
        }
        for (size_t i = 0; i < e->n; i++)
            if (strcmp(e->pvs[i], r->pv) == 0)
                return;
        e->pvs = hp_xrealloc(e->pvs, (e->n + 1) * sizeof(*e->pvs));
        e->pvs[e->n++] = hp_xstrdup(r->pv);
        return;
    }
    for (size_t i = 0; e && i < e->n; i++) {
        if (strcmp(e->pvs[i], r->pv) != 0)
            continue;
        free(e->pvs[i]);
        e->pvs[i] = e->pvs[--e->n];
        if (e->n == 0)
            claim_ent_free(hp_store_remove(x->claims, key));
        return;
    }
}

/* A record removed from the index (its operation removed it from disk): a journal read that
 * began before the removal still holds it, and its merge must not bring it back. Kept until a
 * read of its root that began after the removal is merged. */
struct tomb {
    char *pv;
    char *root; /* NULL when the record had none */
    int64_t at; /* unix seconds */
};

static const char *tomb_key(const void *o)
{
    return ((const struct tomb *)o)->pv;
}
static void tomb_free(void *o)
{
    struct tomb *t = o;
    if (!t)
        return;
    free(t->pv);
    free(t->root);
    free(t);
}
static const struct hp_store_ops tomb_ops = {tomb_key, tomb_free};

static const char *rec_key(const void *o)
{
    return ((const struct rec_ent *)o)->r.pv;
}
static void rec_free(void *o)
{
    hp_record_free(&((struct rec_ent *)o)->r);
    free(o);
}
static const char *owner_key(const void *o)
{
    return ((const struct owner_ent *)o)->owner;
}
static void owner_free(void *o)
{
    struct owner_ent *e = o;
    for (size_t i = 0; i < HP_ARRAY_SIZE(e->held); i++)
        free(e->held[i]);
    free(e->owner);
    free(e);
}
static const char *path_key(const void *o)
{
    return ((const struct path_ent *)o)->path;
}
static void path_free(void *o)
{
    struct path_ent *e = o;
    for (size_t i = 0; i < e->n; i++)
        free(e->h[i].owner);
    free(e->h);
    free(e->path);
    free(e);
}
static const char *anc_key(const void *o)
{
    return ((const struct anc_ent *)o)->path;
}
static void anc_free(void *o)
{
    free(((struct anc_ent *)o)->path);
    free(o);
}

static const struct hp_store_ops rec_ops = {rec_key, rec_free};
static const struct hp_store_ops owner_ops = {owner_key, owner_free};
static const struct hp_store_ops path_ops = {path_key, path_free};
static const struct hp_store_ops anc_ops = {anc_key, anc_free};

struct hp_volindex *hp_volindex_new(void)
{
    struct hp_volindex *x = hp_xcalloc(1, sizeof(*x));
    x->records = hp_store_new(&rec_ops);
    x->owners = hp_store_new(&owner_ops);
    x->paths = hp_store_new(&path_ops);
    x->ancestors = hp_store_new(&anc_ops);
    x->removed = hp_store_new(&tomb_ops);
    x->claims = hp_store_new(&claim_ent_ops);
    return x;
}

void hp_volindex_free(struct hp_volindex *x)
{
    if (!x)
        return;
    hp_store_free(x->records);
    hp_store_free(x->owners);
    hp_store_free(x->paths);
    hp_store_free(x->ancestors);
    hp_store_free(x->removed);
    hp_store_free(x->claims);
    free(x);
}

static unsigned src_index(unsigned src)
{
    return src == HP_SRC_RECORD ? 0 : src == HP_SRC_VOLUME ? 1 : 2;
}

/* ---- paths ---- */

/* Adds delta to the count of every ancestor of path ("a" and "a/b" for "a/b/c"). */
static void ancestors_add(struct hp_volindex *x, const char *path, int delta)
{
    char buf[4096];
    size_t len = strlen(path);

    if (len >= sizeof(buf))
        return; /* longer than any path the validators accept */
    memcpy(buf, path, len + 1);
    for (char *s = strchr(buf, '/'); s; s = strchr(s + 1, '/')) {
        *s = '\0';
        struct anc_ent *a = hp_store_get(x->ancestors, buf);
        if (delta > 0) {
            if (!a) {
                a = hp_xcalloc(1, sizeof(*a));
                a->path = hp_xstrdup(buf);
                free(hp_store_put(x->ancestors, a)); /* NULL: it was absent */
            }
            a->count++;
        } else if (a && --a->count == 0) {
            anc_free(hp_store_remove(x->ancestors, buf));
        }
        *s = '/';
    }
}

static void path_add(struct hp_volindex *x, const char *path, const char *owner, unsigned src)
{
    struct path_ent *e = hp_store_get(x->paths, path);
    if (!e) {
        e = hp_xcalloc(1, sizeof(*e));
        e->path = hp_xstrdup(path);
        free(hp_store_put(x->paths, e));
        ancestors_add(x, path, 1);
    }
    for (size_t i = 0; i < e->n; i++) {
        if (strcmp(e->h[i].owner, owner) == 0) {
            e->h[i].src |= src;
            return;
        }
    }
    e->h = hp_xrealloc(e->h, (e->n + 1) * sizeof(*e->h));
    e->h[e->n].owner = hp_xstrdup(owner);
    e->h[e->n].src = src;
    e->n++;
}

static void path_del(struct hp_volindex *x, const char *path, const char *owner, unsigned src)
{
    struct path_ent *e = hp_store_get(x->paths, path);
    if (!e)
        return;
    for (size_t i = 0; i < e->n; i++) {
        if (strcmp(e->h[i].owner, owner) != 0)
            continue;
        e->h[i].src &= ~src;
        if (e->h[i].src == 0) {
            free(e->h[i].owner);
            e->h[i] = e->h[--e->n];
        }
        break;
    }
    if (e->n == 0) {
        char *p = hp_xstrdup(path);
        path_free(hp_store_remove(x->paths, p));
        ancestors_add(x, p, -1);
        free(p);
    }
}

void hp_volindex_hold(struct hp_volindex *x, unsigned src, const char *owner, const char *rel)
{
    struct owner_ent *o = hp_store_get(x->owners, owner);
    unsigned i = src_index(src);

    if (o && o->held[i]) {
        if (rel && strcmp(o->held[i], rel) == 0)
            return;
        path_del(x, o->held[i], owner, src);
        free(o->held[i]);
        o->held[i] = NULL;
    }
    if (!rel) {
        if (o && !o->held[0] && !o->held[1] && !o->held[2])
            owner_free(hp_store_remove(x->owners, owner));
        return;
    }
    if (!o) {
        o = hp_xcalloc(1, sizeof(*o));
        o->owner = hp_xstrdup(owner);
        free(hp_store_put(x->owners, o));
    }
    o->held[i] = hp_xstrdup(rel);
    path_add(x, rel, owner, src);
}

void hp_volindex_release(struct hp_volindex *x, unsigned src, const char *owner)
{
    hp_volindex_hold(x, src, owner, NULL);
}

/* ---- records ---- */

/* The path a record holds: its archived name once archived; absolute (hp_volpath_join) when the
 * record knows its root, so that several volume roots share one index. Caller frees. */
static char *record_path(const struct hp_record *r)
{
    const char *rel = r->state == HP_REC_ARCHIVED && r->archived_as ? r->archived_as : r->path;
    if (!r->root)
        return hp_xstrdup(rel);
    return hp_volpath_join(r->root, rel);
}

void hp_volindex_put_record(struct hp_volindex *x, const struct hp_record *r)
{
    struct rec_ent *e = hp_xcalloc(1, sizeof(*e));
    hp_record_copy(&e->r, r);
    char *path = record_path(r);
    hp_volindex_hold(x, HP_SRC_RECORD, r->pv, path);
    free(path);
    void *old = hp_store_put(x->records, e);
    if (old) {
        claim_link(x, &((struct rec_ent *)old)->r, 0);
        rec_free(old);
    }
    claim_link(x, &e->r, 1);
    tomb_free(hp_store_remove(x->removed, r->pv));
}

static void remove_record(struct hp_volindex *x, const char *pv, int remember)
{
    char *key = hp_xstrdup(pv); /* pv may point into the record being removed */
    struct rec_ent *old = hp_store_remove(x->records, key);
    if (old && remember) {
        struct tomb *t = hp_xcalloc(1, sizeof(*t));
        t->pv = hp_xstrdup(key);
        t->root = old->r.root ? hp_xstrdup(old->r.root) : NULL;
        t->at = (int64_t)time(NULL);
        tomb_free(hp_store_put(x->removed, t));
    }
    if (old) {
        claim_link(x, &old->r, 0);
        rec_free(old);
    }
    hp_volindex_hold(x, HP_SRC_RECORD, key, NULL);
    free(key);
}

void hp_volindex_remove_record(struct hp_volindex *x, const char *pv)
{
    remove_record(x, pv, 1);
}

const struct hp_record *hp_volindex_record(const struct hp_volindex *x, const char *pv)
{
    const struct rec_ent *e = hp_store_get(x->records, pv);
    return e ? &e->r : NULL;
}

struct name_list {
    char **v;
    size_t n, cap;
};

static void name_list_add(struct name_list *l, const char *name)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 16;
        l->v = hp_xrealloc(l->v, l->cap * sizeof(*l->v));
    }
    l->v[l->n++] = hp_xstrdup(name);
}

static void collect_pv(void *obj, void *data)
{
    name_list_add(data, ((struct rec_ent *)obj)->r.pv);
}

static const char *borrowed_rec_key(const void *o)
{
    return ((const struct hp_record *)o)->pv;
}
static void no_free(void *o)
{
    (void)o;
}

struct stale_ctx {
    struct name_list *drop;
    struct hp_store *seen; /* the records read, by PV name (borrowed) */
    int64_t since;
    const char *root; /* only records of this volume root were read */
};

static int same_root(const char *a, const char *b)
{
    return a == b || (a && b && strcmp(a, b) == 0);
}

static void collect_stale(void *obj, void *data)
{
    struct stale_ctx *s = data;
    const struct hp_record *r = &((struct rec_ent *)obj)->r;
    if (same_root(r->root, s->root) && r->updated < s->since && !hp_store_get(s->seen, r->pv))
        collect_pv(obj, s->drop);
}

static void collect_old_tomb(void *obj, void *data)
{
    struct stale_ctx *s = data;
    const struct tomb *t = obj;
    if (same_root(t->root, s->root) && t->at < s->since)
        name_list_add(s->drop, t->pv);
}

void hp_volindex_merge_records(struct hp_volindex *x, const char *root,
                               const struct hp_record *recs, size_t n, int64_t since)
{
    static const struct hp_store_ops seen_ops = {borrowed_rec_key, no_free};
    struct name_list drop = {0};
    struct stale_ctx s = {&drop, hp_store_new(&seen_ops), since, root};

    for (size_t i = 0; i < n; i++)
        (void)hp_store_put(s.seen, (void *)&recs[i]); /* a repeated name keeps the last */
    hp_store_foreach(x->records, collect_stale, &s);
    for (size_t i = 0; i < drop.n; i++) {
        remove_record(x, drop.v[i], 0);
        free(drop.v[i]);
    }
    free(drop.v);
    hp_store_free(s.seen);
    for (size_t i = 0; i < n; i++) {
        const struct hp_record *have = hp_volindex_record(x, recs[i].pv);
        const struct tomb *t = hp_store_get(x->removed, recs[i].pv);
        if (!have && t && t->at >= since)
            continue; /* removed after this read began: it read what is gone */
        if (!have || have->updated <= recs[i].updated)
            hp_volindex_put_record(x, &recs[i]);
    }
    /* Removals before this read began are in it: their tombs of this root are done. */
    struct name_list old = {0};
    struct stale_ctx o = {&old, NULL, since, root};
    hp_store_foreach(x->removed, collect_old_tomb, &o);
    for (size_t i = 0; i < old.n; i++) {
        tomb_free(hp_store_remove(x->removed, old.v[i]));
        free(old.v[i]);
    }
    free(old.v);
}

size_t hp_volindex_nrecords(const struct hp_volindex *x)
{
    return hp_store_len(x->records);
}

struct foreach_ctx {
    void (*fn)(const struct hp_record *r, void *data);
    void *data;
};

static void foreach_rec(void *obj, void *data)
{
    struct foreach_ctx *c = data;
    c->fn(&((struct rec_ent *)obj)->r, c->data);
}

void hp_volindex_foreach_record(const struct hp_volindex *x,
                                void (*fn)(const struct hp_record *r, void *data), void *data)
{
    struct foreach_ctx c = {fn, data};
    hp_store_foreach(x->records, foreach_rec, &c);
}

struct retained_q {
    const char *ns, *name, *cls;
    const struct hp_record *best;
};

static void find_retained(void *obj, void *data)
{
    struct retained_q *q = data;
    const struct hp_record *r = &((struct rec_ent *)obj)->r;
    if (!hp_policy_reuse_match(r, q->ns, q->name, q->cls))
        return;
    /* The newest; equal times are decided by name, so the answer does not depend on the hash
     * table's order. */
    if (!q->best || r->updated > q->best->updated ||
        (r->updated == q->best->updated && strcmp(r->pv, q->best->pv) > 0))
        q->best = r;
}

const struct hp_record *hp_volindex_find_retained(const struct hp_volindex *x, const char *ns,
                                                  const char *name, const char *cls)
{
    struct retained_q q = {ns, name, cls, NULL};
    hp_store_foreach(x->records, find_retained, &q);
    return q.best;
}

void hp_volindex_foreach_claim_record(const struct hp_volindex *x, const char *ns,
                                      const char *name,
                                      void (*fn)(const struct hp_record *r, void *data),
                                      void *data)
{
    char key[600];
    struct hp_record probe = {.claim_namespace = (char *)ns, .claim_name = (char *)name};
    if (!claim_key_of(&probe, key, sizeof(key)))
        return;
    const struct claim_ent *e = hp_store_get(x->claims, key);
    /* fn may not change the index: the names are visited from a copy of the list. */
    size_t n = e ? e->n : 0;
    char **pvs = hp_xcalloc(n + 1, sizeof(*pvs));
    for (size_t i = 0; i < n; i++)
        pvs[i] = hp_xstrdup(e->pvs[i]);
    for (size_t i = 0; i < n; i++) {
        const struct hp_record *r = hp_volindex_record(x, pvs[i]);
        if (r)
            fn(r, data);
        free(pvs[i]);
    }
    free(pvs);
}

/* ---- queries ---- */

/* 1 when some holder of e is not owner; fills c. */
/* The query of a conflict: who asks, whom to pass over, which sources count. */
struct conflict_q {
    const char *owner, *also;
    unsigned sources;
};

static int other_holder(const struct path_ent *e, const struct conflict_q *w,
                        enum hp_path_relation rel, struct hp_volindex_conflict *c)
{
    for (size_t i = 0; i < e->n; i++) {
        if (strcmp(e->h[i].owner, w->owner) == 0 ||
            (w->also && strcmp(e->h[i].owner, w->also) == 0) || !(e->h[i].src & w->sources))
            continue;
        if (c) {
            c->relation = rel;
            snprintf(c->other_path, sizeof(c->other_path), "%s", e->path);
            snprintf(c->other_owner, sizeof(c->other_owner), "%s", e->h[i].owner);
            c->sources = e->h[i].src;
        }
        return 1;
    }
    return 0;
}

struct below_q {
    const char *prefix;
    size_t n;
    const struct conflict_q *w;
    struct hp_volindex_conflict *c;
    int found;
};

static void find_below(void *obj, void *data)
{
    struct below_q *q = data;
    const struct path_ent *e = obj;
    if (q->found || strncmp(e->path, q->prefix, q->n) != 0 || e->path[q->n] != '/')
        return;
    q->found = other_holder(e, q->w, HP_PATH_CONTAINS, q->c);
}

static int conflict(const struct hp_volindex *x, const char *rel, const struct conflict_q *w,
                    struct hp_volindex_conflict *c)
{
    char buf[4096];
    size_t len = strlen(rel);
    const struct path_ent *e = hp_store_get(x->paths, rel);

    if (e && other_holder(e, w, HP_PATH_EQUAL, c))
        return 1;
    if (hp_store_get(x->ancestors, rel)) {
        /* Something lies below rel; it is a conflict unless all of it is owner's own. The scan
         * runs only when rel is somebody's ancestor, which a valid layout never makes it. */
        struct below_q q = {rel, len, w, c, 0};
        hp_store_foreach(x->paths, find_below, &q);
        if (q.found)
            return 1;
    }
    if (len >= sizeof(buf))
        return 0;
    memcpy(buf, rel, len + 1);
    for (char *s = strchr(buf, '/'); s; s = strchr(s + 1, '/')) {
        *s = '\0';
        e = hp_store_get(x->paths, buf);
        *s = '/';
        if (e && other_holder(e, w, HP_PATH_INSIDE, c))
            return 1;
    }
    return 0;
}

int hp_volindex_conflict(const struct hp_volindex *x, const char *rel, const char *owner,
                         const char *also, struct hp_volindex_conflict *c)
{
    struct conflict_q w = {owner, also, HP_SRC_RECORD | HP_SRC_VOLUME | HP_SRC_RESERVED};
    return conflict(x, rel, &w, c);
}

int hp_volindex_volume_conflict(const struct hp_volindex *x, const char *rel, const char *owner,
                                struct hp_volindex_conflict *c)
{
    struct conflict_q w = {owner, NULL, HP_SRC_VOLUME};
    return conflict(x, rel, &w, c);
}

/* ---- validation ---- */

struct validate_ctx {
    const struct hp_volindex *x;
    int bad;
};

static void check_owner(void *obj, void *data)
{
    struct validate_ctx *v = data;
    const struct owner_ent *o = obj;
    for (unsigned i = 0; i < 3; i++) {
        if (!o->held[i])
            continue;
        const struct path_ent *e = hp_store_get(v->x->paths, o->held[i]);
        int ok = 0;
        for (size_t k = 0; e && k < e->n; k++)
            ok |= strcmp(e->h[k].owner, o->owner) == 0 && (e->h[k].src & (1u << i));
        v->bad |= !ok;
    }
    if (!o->held[0] && !o->held[1] && !o->held[2])
        v->bad = 1;
}

static void check_record(void *obj, void *data)
{
    struct validate_ctx *v = data;
    const struct hp_record *r = &((const struct rec_ent *)obj)->r;
    const struct owner_ent *o = hp_store_get(v->x->owners, r->pv);
    char *path = record_path(r);
    v->bad |= !o || !o->held[0] || strcmp(o->held[0], path) != 0;
    free(path);
    char key[600];
    if (claim_key_of(r, key, sizeof(key))) { /* listed under its claim */
        const struct claim_ent *e = hp_store_get(v->x->claims, key);
        int found = 0;
        for (size_t i = 0; e && i < e->n; i++)
            found |= strcmp(e->pvs[i], r->pv) == 0;
        v->bad |= !found;
    }
}

int hp_volindex_validate(const struct hp_volindex *x)
{
    struct validate_ctx v = {x, 0};
    hp_store_foreach(x->owners, check_owner, &v);
    hp_store_foreach(x->records, check_record, &v);
    if (hp_store_validate(x->records) || hp_store_validate(x->owners) ||
        hp_store_validate(x->paths) || hp_store_validate(x->ancestors) ||
        hp_store_validate(x->claims))
        return -1;
    return v.bad ? -1 : 0;
}
