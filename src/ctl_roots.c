/* controller room: volume roots, the index of the directories live volumes, records and
 * provisionings in flight hold, the accounting of sizes per root, and placement.
 *
 * Loop thread only; see controller_internal.h for the rooms and their order.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "controller_internal.h"
#include "hostpath/volpath.h"
#include "hostpath/nodemap.h"
#include "hostpath/buf.h"
#include "hostpath/config.h"
#include "hostpath/expect.h"
#include "hostpath/informer.h"
#include "hostpath/log.h"
#include "hostpath/metrics.h"
#include "hostpath/quantity.h"
#include "hostpath/store.h"

/* ---- the caches --------------------------------------------------------------------------- */

const struct hp_volume *hp__volume(const struct hp_controller *c, const char *name)
{
    const struct hp_volume *v = c->volumes ? hp_informer_get(c->volumes, name) : NULL;
    if (!v && c->foreign)
        v = hp_informer_get(c->foreign, name);
    return v;
}

const struct hp_claim *hp__claim(const struct hp_controller *c, const char *key)
{
    const struct hp_claim *cl = c->claims ? hp_informer_get(c->claims, key) : NULL;
    if (cl || !c->claims_all)
        return cl;
    /* The leader's copy, unless it is another node's claim the leader only labels for it (that
     * node acts on it, from its own copy). A claim selected for the leader's own node is served
     * from this copy: the leader does not label those (hp__claim_needs_label). */
    cl = hp_informer_get(c->claims_all, key);
    if (cl && cl->selected_node && cl->selected_node[0] &&
        hp__class_shared(c, cl->class_name ? cl->class_name : "") != 1 &&
        !hp__claim_for_own_node(c, cl))
        return NULL;
    return cl;
}

struct each_volume {
    const struct hp_controller *c;
    void (*fn)(const void *obj, void *data);
    void *data;
};

static void foreign_one(const void *obj, void *data)
{
    const struct each_volume *e = data;
    const struct hp_volume *v = obj;
    if (!hp_informer_get(e->c->volumes, v->name)) /* else counted with the node's */
        e->fn(obj, e->data);
}

void hp__foreach_volume(const struct hp_controller *c, void (*fn)(const void *obj, void *data),
                        void *data)
{
    struct each_volume e = {c, fn, data};
    if (c->volumes)
        hp_informer_foreach(c->volumes, fn, data);
    if (c->foreign)
        hp_informer_foreach(c->foreign, foreign_one, &e);
}

int hp__relabelling(const struct hp_controller *c, const char *name)
{
    char key[300];
    (void)snprintf(key, sizeof(key), "%s%s", EXPECT_RELABEL_PREFIX, name);
    return hp_expect_get(c->expect, key, uv_now(c->loop)) == HP_EXPECT_PRESENT;
}

/* ---- volume roots --------------------------------------------------------------------------- */

static const char *acct_key(const void *o)
{
    return ((const struct acct *)o)->pv;
}
static void acct_free(void *o)
{
    struct acct *a = o;
    free(a->pv);
    free(a);
}
static const struct hp_store_ops acct_ops = {acct_key, acct_free};

uint64_t hp__root_budget(const struct root *r)
{
    if (r->overcommit <= 1.0)
        return r->budget;
    uint64_t base = r->budget ? r->budget : r->stats.ok ? r->stats.size : 0;
    double b = (double)base * r->overcommit;
    return b >= 18e18 ? UINT64_MAX / 2 : (uint64_t)b;
}

void hp__root_metrics(const struct hp_controller *c, const struct root *r)
{
    uint64_t budget = hp__root_budget(r);
    struct hp_place_path p = {r->path, budget, r->reserved, r->stats.ok, r->stats.size,
                              r->stats.free, NULL};
    uint64_t capacity = r->budget ? r->budget : r->stats.size; /* without overcommit */
    /* A path no longer in --config takes nothing new: no room to advertise. */
    hp_metrics_path(r->path, c->cfg->node_name ? c->cfg->node_name : "", capacity, r->reserved,
                    r->retired ? 0 : hp_policy_room(&p), r->stats.ok && r->stats.on_rootfs);
    /* Whatever changed here may change what capacity publishing says (ctl_capacity.c, below
     * this room: through the hook). */
    if (c->room_changed)
        c->room_changed(c);
}

/* A filesystem request on root r answered: what it saw of the root's size and room. */
void hp__root_seen(struct hp_controller *c, struct root *r, const struct hp_fs_stats *st)
{
    if (!st->ok)
        return;
    r->stats = *st;
    if (st->on_rootfs && !r->rootfs_said) {
        r->rootfs_said = 1;
        hp_log_warn("controller: volume path %s is on the root filesystem: volumes filling it "
                    "fill the node's system disk%s",
                    r->path,
                    r->allow_rootfs ? " (set \"allowRootFilesystem\": false in --config to "
                                      "refuse it)"
                                    : "; allowRootFilesystem is false, so no volume is made "
                                      "there");
    }
    hp__root_metrics(c, r);
}

/* The root a volume's hostPath lies strictly inside, with the path relative to it in rel (fsops
 * converts: hp_volpath_relative); NULL when none. */
struct root *hp__root_of(const struct hp_controller *c, const char *abs, char *rel, size_t len)
{
    /* Roots are never nested when configured (main.c checks on disk), but a retired root may
     * hold a current one written under it before this version: the innermost wins. */
    struct root *best = NULL;
    size_t best_len = 0;
    for (size_t i = 0; i < c->nroots; i++) {
        struct root *r = c->roots[i];
        size_t n = strlen(r->path);
        if ((!best || n > best_len) && hp_volpath_relative(r->path, abs, rel, len) == 0) {
            best = r;
            best_len = n;
        }
    }
    if (best)
        (void)hp_volpath_relative(best->path, abs, rel, len);
    return best;
}

struct root *hp__root_named(const struct hp_controller *c, const char *path)
{
    for (size_t i = 0; path && i < c->nroots; i++)
        if (strcmp(c->roots[i]->path, path) == 0)
            return c->roots[i];
    return NULL;
}

/* Whether PV v holds the directory rel under root: a PV of that name does unless it is shown
 * to be another volume. A PV of the same name can be another node's: a claim rescheduled while
 * this node's provisioning waited to retry its PV create is provisioned there, and that PV does
 * not hold this node's directory; nor does one naming another directory under our roots. A
 * path under none of our roots proves nothing (--pv-dir given another way since): it holds. */
int hp__volume_holds(const struct hp_controller *c, const struct hp_volume *v,
                        const struct root *root, const char *rel)
{
    char vrel[4096];
    if (!v)
        return 0;
    if (c->cfg->node_name && v->node && strcmp(v->node, c->cfg->node_name) != 0)
        return 0;
    const struct root *vroot = v->path ? hp__root_of(c, v->path, vrel, sizeof(vrel)) : NULL;
    if (!vroot || !root || !rel)
        return 1;
    return vroot == root && strcmp(vrel, rel) == 0;
}

/* The same for the PV of an API answer; an answer that cannot be decoded proves nothing: it
 * holds. */
int hp__answer_holds(const struct hp_controller *c, const struct hp_kube_response *resp,
                        const char *pv, const struct root *root, const char *rel)
{
    struct hp_json j;
    hp_json_init(&j);
    struct hp_volume *v =
        hp_json_parse(&j, resp->body, resp->body_len) == 0 ? hp_volume_decode(&j, 0) : NULL;
    hp_json_free(&j);
    int holds = !v || strcmp(v->name, pv) != 0 || hp__volume_holds(c, v, root, rel);
    free(v);
    return holds;
}

static void account(struct hp_controller *c, const char *pv, struct root *r, uint64_t bytes)
{
    struct acct *old = hp_store_remove(c->acct, pv);
    if (old) {
        old->root->reserved -= old->root->reserved >= old->bytes ? old->bytes
                                                                  : old->root->reserved;
        hp__root_metrics(c, old->root);
        acct_free(old);
    }
    if (!r)
        return;
    struct acct *a = hp_xcalloc(1, sizeof(*a));
    a->pv = hp_xstrdup(pv);
    a->root = r;
    a->bytes = bytes;
    r->reserved += bytes;
    (void)hp_store_put(c->acct, a);
    hp__root_metrics(c, r);
}

/* Keeps c->others up to date for v (gone: NULL name given); r and rel: the root v's path lies
 * under and the path relative to it, or NULL. Only a PV that our journal records at that very
 * path is ours and needs no resolving: one with our annotations and no such record (a PV an
 * administrator copied from one of ours, `kubectl get pv -o yaml`, onto a symlink under the
 * root; an earlier version's volume not recorded yet) is compared by identity like any other. */
static void track_other(struct hp_controller *c, const char *name, const struct hp_volume *v,
                        int on_this_disk, const struct root *r, const char *rel)
{
    const struct hp_config *cfg = c->cfg;
    const struct hp_record *rec = v ? hp_volindex_record(c->index, v->name) : NULL;
    int ours = v && r && rel && strcmp(v->provisioned_by, cfg->provisioner_name) == 0 &&
               strcmp(v->identity, cfg->identity) == 0 && rec && rec->root &&
               strcmp(rec->root, r->path) == 0 && strcmp(rec->path, rel) == 0;
    if (!v || !on_this_disk || ours || !v->path[0]) {
        uv_mutex_lock(&c->others_lock);
        char *gone = hp_store_remove(c->others, name);
        uv_mutex_unlock(&c->others_lock);
        free(gone);
        return;
    }
    const char *have = hp_store_get(c->others, name);
    if (have && strcmp(have + strlen(have) + 1, v->path) == 0)
        return;
    size_t n = strlen(name), p = strlen(v->path);
    char *e = hp_xmalloc(n + 1 + p + 1);
    memcpy(e, name, n + 1);
    memcpy(e + n + 1, v->path, p + 1);
    uv_mutex_lock(&c->others_lock);
    char *old = hp_store_put(c->others, e);
    uv_mutex_unlock(&c->others_lock);
    free(old);
}

struct others_ctx {
    struct hp_fsop *f;
    const char *except;
};

static void add_other(void *obj, void *data)
{
    struct others_ctx *x = data;
    const char *name = obj;
    if (!x->except || strcmp(name, x->except) != 0)
        hp_fsop_add_other(x->f, name, name + strlen(name) + 1);
}

/* refresh_others (fsops.h), on a worker thread right before a comparison: the other volumes
 * of this node as they are now, all but the request's own (rec.pv). */
static void refresh_others(struct hp_fsop *f, void *data)
{
    struct hp_controller *c = data;
    struct others_ctx x = {f, f->rec.pv};
    hp_fsop_clear_others(f);
    uv_mutex_lock(&c->others_lock);
    hp_store_foreach(c->others, add_other, &x);
    uv_mutex_unlock(&c->others_lock);
}

/* Gives a request that makes, takes over or removes the directory of its volume (rec.pv) the
 * other volumes of this node to compare it with (fsops.h, others), taken when its worker gets
 * there: a PV aliasing the directory made while the request waited for a worker is seen. */
void hp__add_others(struct hp_controller *c, struct hp_fsop *f)
{
    f->refresh_others = refresh_others;
    f->refresh_data = c;
}

/* The index holds a live volume's path when it is on this node's disk (no node affinity, or
 * affinity to this node) and under one of our roots, whatever its identity; its capacity counts
 * against that root. */
/* The root v's path lies under when v is on this node's disk (no node affinity, affinity to
 * this node, or a path under a shared root: one filesystem on every node, whatever node a PV
 * names), with the path relative to it in rel; NULL otherwise. *maybe_here: whether v may be
 * mounted on this node's disk, so compared with our volumes (also when its affinity names this
 * node among others). */
static struct root *disk_root(const struct hp_controller *c, const struct hp_volume *v, char *rel,
                              size_t len, int *maybe_here)
{
    const char *node = c->cfg->node_name;
    int on_this_disk = v->path[0] && (!v->node || !node || strcmp(v->node, node) == 0);
    struct root *r = v->path[0] ? hp__root_of(c, v->path, rel, len) : NULL;
    if (!on_this_disk && !(r && r->shared))
        r = NULL;
    *maybe_here = r || on_this_disk || (v->path[0] && !v->node_only);
    return r;
}

void hp__index_volume(struct hp_controller *c, const struct hp_volume *v)
{
    char rel[4096];
    int maybe_here;
    struct root *r = disk_root(c, v, rel, sizeof(rel), &maybe_here);
    track_other(c, v->name, v, maybe_here, r, r ? rel : NULL);
    if (!r) {
        hp_volindex_release(c->index, HP_SRC_VOLUME, v->name);
        account(c, v->name, NULL, 0);
        return;
    }
    char *abs = hp_volpath_join(r->path, rel);
    hp_volindex_hold(c->index, HP_SRC_VOLUME, v->name, abs);
    free(abs);
    uint64_t bytes = 0;
    (void)hp_quantity_parse(v->capacity, &bytes, NULL, 0); /* a PV without a size takes none */
    account(c, v->name, r, bytes);
}

void hp__unindex_volume(struct hp_controller *c, const char *name)
{
    track_other(c, name, NULL, 0, NULL, NULL);
    hp_volindex_release(c->index, HP_SRC_VOLUME, name);
    account(c, name, NULL, 0);
}

/* Whether this process does the disk work of a volume of `node` (NULL: none) now. Replicas of
 * one Deployment share an identity and usually a disk, so without --node-name only the leader
 * touches volumes (as only it provisions); with it, a node's volumes are that node's
 * instance's (the replica holding the node lease, when several run for one node), and the
 * rest the leader's. */
int hp__works_on_disks(const struct hp_controller *c, const char *node)
{
    if (!c->node_held) /* another replica on this node works on its disks now */
        return 0;
    return c->leading || (c->cfg->node_name && node && node[0]);
}

int hp__works_on_root(const struct hp_controller *c, const struct root *r, const char *node)
{
    if (r && r->shared)
        return c->node_held && c->leading;
    return hp__works_on_disks(c, node);
}

/* Whether the PV `name` is ours or another volume to compare with ours (track_other) depends on
 * its record: looked at again when the record changes. */
void hp__retrack_volume(struct hp_controller *c, const char *name)
{
    const struct hp_volume *v = hp__volume(c, name);
    char rel[4096];
    int maybe_here;
    if (!v)
        return;
    struct root *r = disk_root(c, v, rel, sizeof(rel), &maybe_here);
    track_other(c, v->name, v, maybe_here, r, r ? rel : NULL);
}

static void retrack_one(const void *obj, void *data)
{
    hp__retrack_volume(data, ((const struct hp_volume *)obj)->name);
}

void hp__retrack_volumes(struct hp_controller *c)
{
    hp_informer_foreach(c->volumes, retrack_one, c);
}

/* The journal changed on disk: mirror the record the request left (or its absence). */
void hp__index_record(struct hp_controller *c, const struct hp_fsop *f)
{
    if (f->have_out) {
        hp__journal_seen(c, f->root); /* a record is in it */
        hp_volindex_put_record(c->index, &f->out);
        hp__retrack_volume(c, f->out.pv);
    }
}

/* Whether root r is one of the class's paths on this node (storageClassConfigs), when --config
 * says. */
static int class_may_use(const struct hp_node_path *allowed, size_t n, const struct root *r)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(allowed[i].path, r->path) == 0)
            return 1;
    return 0;
}

int hp__class_shared(const struct hp_controller *c, const char *cls)
{
    return c->map ? hp_nodemap_class_shared(c->map, cls) : 0;
}

/* The paths a new volume of class cls may go on, as placement sees them: this node's paths
 * (those of the class when --config has storageClassConfigs; the class's nodePath when it names
 * one), each with its numbers and, when it takes nothing now, why. Fills cand and which
 * (c->nroots entries each at most) and returns how many, or -ENOENT with why when the class has
 * no path on this node. Shared by hp__place and hp__place_room (capacity publishing), so that
 * what the CSIStorageCapacity objects say is what placement grants. */
static int place_candidates(const struct hp_controller *c, const char *cls,
                            const struct hp_class_params *params, struct hp_place_path *cand,
                            struct root **which, char *why, size_t len)
{
    const struct hp_node_path *allowed = NULL;
    size_t nallowed = 0;
    int n = 0;

    if (c->map && hp_nodemap_class_paths(c->map, cls, c->cfg->node_name, &allowed, &nallowed,
                                         why, len) < 0)
        return -ENOENT;
    for (size_t i = 0; i < c->nroots; i++) {
        struct root *r = c->roots[i];
        if (params->node_path && !hp_policy_same_path(r->path, params->node_path))
            continue;
        if (c->map && !class_may_use(allowed, nallowed, r))
            continue;
        if (r->retired && !params->node_path)
            continue;
        struct hp_place_path *p = &cand[n];
        p->path = r->path;
        p->budget = hp__root_budget(r);
        p->reserved = r->reserved;
        p->stats_known = r->stats.ok;
        p->fs_size = r->stats.size;
        p->fs_free = r->stats.free;
        if (r->retired)
            p->excluded = "is no longer in --config";
        else if (!r->journal_loaded)
            p->excluded = "is being read (its ownership journal)";
        else if (r->fs_moved)
            p->excluded = "is not on the filesystem its volumes were made on (is its disk "
                          "mounted?)";
        else if (!r->allow_rootfs && r->stats.ok && r->stats.on_rootfs)
            p->excluded = "is on the root filesystem and allowRootFilesystem is false";
        else
            p->excluded = hp__quota_excluded(r, params);
        which[n++] = r;
    }
    return n;
}

/* The root a new volume of need bytes goes on: among this node's paths (those of the class
 * when --config has storageClassConfigs; the class's nodePath when it names one), the one with
 * the most room that fits. No side effect: 0 and the root in *out, or -ENOENT (nodePath is not
 * one of this node's paths, or the class has none here) or -ENOSPC (none fits: every path's
 * numbers) with the reason in why; the caller decides what to do about it. */
int hp__place(const struct hp_controller *c, const char *cls, const struct hp_class_params *params,
              uint64_t need, struct root **out, char *why, size_t len)
{
    struct hp_place_path *cand = hp_xcalloc(c->nroots + 1, sizeof(*cand));
    struct root **which = hp_xcalloc(c->nroots + 1, sizeof(*which));
    int n = place_candidates(c, cls, params, cand, which, why, len);
    int rc = 0;

    *out = NULL;
    if (n < 0) {
        rc = -ENOENT;
    } else if (params->node_path && n == 0) {
        struct hp_buf b;
        hp_buf_init(&b, 0);
        for (size_t i = 0; i < c->nroots; i++)
            if (!c->roots[i]->retired)
                (void)hp_buf_printf(&b, "%s%s", b.len ? ", " : "", c->roots[i]->path);
        snprintf(why, len, "parameter nodePath=\"%s\" is not one of this node's paths (%s)",
                 params->node_path, b.data ? b.data : "none");
        hp_buf_free(&b);
        rc = -ENOENT;
    } else {
        int i = hp_policy_place(cand, (size_t)n, need, why, len);
        if (i >= 0)
            *out = which[i];
        else
            rc = -ENOSPC;
    }
    free(cand);
    free(which);
    return rc;
}

/* What placement could grant a class now, for capacity publishing (ctl_capacity.c): over the
 * candidates hp__place would weigh (place_candidates), largest = the room of the roomiest path
 * (the biggest single volume hp__place accepts now) and total = the room of all of them, a
 * filesystem shared by several paths counted once (its free bytes bound their sum). sig changes
 * whenever the accounting behind the numbers does (a path's budget, reservations, exclusion,
 * whether its size is known), so a change of it is never mistaken for free-space drift. */
void hp__place_room(const struct hp_controller *c, const char *cls,
                    const struct hp_class_params *params, uint64_t *total, uint64_t *largest,
                    uint64_t *sig)
{
    struct hp_place_path *cand = hp_xcalloc(c->nroots + 1, sizeof(*cand));
    struct root **which = hp_xcalloc(c->nroots + 1, sizeof(*which));
    char why[512];
    int got = place_candidates(c, cls, params, cand, which, why, sizeof(why));
    size_t n = got < 0 ? 0 : (size_t)got; /* no path of the class here: no room */
    uint64_t h = 1469598103934665603ULL; /* FNV-1a over the accounting */
    int *done = hp_xcalloc(n + 1, sizeof(*done));

    *total = *largest = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t v[] = {(uint64_t)(uintptr_t)which[i], cand[i].budget, cand[i].reserved,
                        (uint64_t)(cand[i].excluded != NULL), (uint64_t)cand[i].stats_known};
        for (size_t k = 0; k < HP_ARRAY_SIZE(v); k++)
            for (int b = 0; b < 64; b += 8)
                h = (h ^ ((v[k] >> b) & 0xff)) * 1099511628211ULL;
        if (cand[i].excluded) {
            done[i] = 1;
            continue;
        }
        uint64_t room = hp_policy_room(&cand[i]);
        if (room > *largest)
            *largest = room;
    }
    /* The total, one filesystem at a time: the sum of its paths' budget room, bounded by its
     * free bytes (hp_policy_room of one path is already bounded by them). */
    for (size_t i = 0; i < n; i++) {
        if (done[i])
            continue;
        uint64_t sum = 0, free_bytes = UINT64_MAX;
        for (size_t k = i; k < n; k++) {
            if (done[k] || (k != i && !(which[i]->fs_known && which[k]->fs_known &&
                                        which[i]->fs.dev == which[k]->fs.dev)))
                continue;
            done[k] = 1;
            struct hp_place_path unbounded = cand[k];
            unbounded.stats_known = 0; /* the budget's room alone */
            if (!cand[k].budget && cand[k].stats_known)
                unbounded.budget = cand[k].fs_size;
            uint64_t room = hp_policy_room(&unbounded);
            sum = sum > UINT64_MAX - room ? UINT64_MAX : sum + room;
            if (cand[k].stats_known && cand[k].fs_free < free_bytes)
                free_bytes = cand[k].fs_free;
        }
        if (sum > free_bytes)
            sum = free_bytes;
        *total = *total > UINT64_MAX - sum ? UINT64_MAX : *total + sum;
    }
    *sig = h;
    free(done);
    free(cand);
    free(which);
}

/* One line naming what holds a colliding path, for the event. */
void hp__describe_conflict(struct hp_controller *c, const struct hp_volindex_conflict *k,
                              char *out, size_t len)
{
    const struct hp_record *r = hp_volindex_record(c->index, k->other_owner);
    if ((k->sources & HP_SRC_RECORD) && r)
        snprintf(out, len, "the directory %s of volume %s (claim %s/%s, %s)", k->other_path,
                 r->pv, r->claim_namespace ? r->claim_namespace : "",
                 r->claim_name ? r->claim_name : "", hp_record_state_name(r->state));
    else if (k->sources & HP_SRC_VOLUME)
        snprintf(out, len, "the directory %s of PersistentVolume %s", k->other_path,
                 k->other_owner);
    else
        snprintf(out, len, "the directory %s being provisioned for volume %s", k->other_path,
                 k->other_owner);
}

struct root *hp__add_root(struct hp_controller *c, const char *path, uint64_t budget,
                             int allow_rootfs)
{
    struct root *r = hp_xcalloc(1, sizeof(*r));
    r->c = c;
    r->overcommit = 1.0;
    r->path = hp_xstrdup(path); /* absolute and normalised by config.c / nodemap.c */
    r->budget = budget;
    r->allow_rootfs = allow_rootfs;
    c->roots = hp_xrealloc(c->roots, (c->nroots + 1) * sizeof(*c->roots));
    c->roots[c->nroots++] = r;
    return r;
}

void hp__roots_init(struct hp_controller *c)
{
    c->acct = hp_store_new(&acct_ops);
    c->others = hp_store_new(&hp_store_strings);
    if (uv_mutex_init(&c->others_lock) != 0)
        abort(); /* cannot fail on Linux but for resources the process does not have */
    c->index = hp_volindex_new();
    c->seen_journals = hp_store_new(&hp_store_strings);
}

void hp__roots_free(struct hp_controller *c)
{
    hp_volindex_free(c->index);
    for (size_t i = 0; i < c->nroots; i++) {
        hp__quota_root_free(c->roots[i]);
        free(c->roots[i]->path);
        free(c->roots[i]);
    }
    free(c->roots);
    hp_store_free(c->acct);
    hp_store_free(c->others);
    uv_mutex_destroy(&c->others_lock);
    hp_store_free(c->seen_journals);
}
