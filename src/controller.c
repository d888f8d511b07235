/* controller: reconcile claims into volumes, and released volumes into removed directories.
 *
 * Loop thread only. This file is the controller's front room: the three informers (claims,
 * volumes, classes) and what their changes enqueue, the dispatch of the work queue's keys
 * ("c:<namespace>/<name>" claims, "v:<name>" volumes, "o:<name>" journal records the orphan
 * sweep found), the lifecycle and the public API. The work itself is in the rooms listed in
 * controller_internal.h; docs/design.md ("The controller's rooms") says how they fit.
 *
 * A reconcile reads the store, asks the policy module what to do (policy.h), and runs one
 * operation: a chain of filesystem requests on the threadpool (fsops.h, which keeps the
 * ownership journal) and API requests. Every step is idempotent, so a retry simply reconciles
 * again from the top; nothing but the work queue's failure count and the journal survives
 * between attempts.
 *
 * Start: the reflectors list; once all three are in sync the journal is scanned (records loaded
 * into the volume index, leftovers of a crash removed, orphans settled) and only then does
 * reconciling begin, so that every decision sees every record. The scan repeats every resync.
 */
#include "hostpath/controller.h"

#include <stdlib.h>
#include <string.h>

#include "hostpath/buf.h"
#include "hostpath/common.h"
#include "hostpath/config.h"
#include "hostpath/expect.h"
#include "hostpath/fsops.h"
#include "hostpath/hostpath.h"
#include "hostpath/informer.h"
#include "hostpath/kube_client.h"
#include "hostpath/list.h"
#include "hostpath/log.h"
#include "hostpath/nodemap.h"
#include "hostpath/objects.h"
#include "hostpath/pathpattern.h"
#include "hostpath/policy.h"
#include "hostpath/quantity.h"
#include "hostpath/store.h"
#include "hostpath/volindex.h"
#include "hostpath/watch.h"
#include "hostpath/workqueue.h"
#include "controller_internal.h"

/* ---- queue helpers ------------------------------------------------------------------------ */

static void enqueue_claim_obj(const void *obj, void *data)
{
    hp__enqueue(data, 'c', ((const struct hp_claim *)obj)->key);
}

/* A claim of the leader's watch of every claim: reconciled, and labelled when it must be. */
static void enqueue_leader_claim(struct hp_controller *c, const struct hp_claim *cl)
{
    hp__enqueue(c, 'c', cl->key);
    if (hp__claim_needs_label(c, cl))
        hp__enqueue(c, 'l', cl->key);
}

static void enqueue_leader_claim_obj(const void *obj, void *data)
{
    enqueue_leader_claim(data, obj);
}

static void enqueue_volume_obj(const void *obj, void *data)
{
    hp__enqueue(data, 'v', ((const struct hp_volume *)obj)->key);
}

static void enqueue_all(struct hp_controller *c)
{
    hp_informer_foreach(c->claims, enqueue_claim_obj, c);
    if (c->claims_all)
        hp_informer_foreach(c->claims_all, enqueue_leader_claim_obj, c);
    hp__foreach_volume(c, enqueue_volume_obj, c);
}

struct class_match {
    struct hp_controller *c;
    const char *class_name;
};

static void enqueue_claim_of_class(const void *obj, void *data)
{
    const struct hp_claim *cl = obj;
    struct class_match *m = data;
    if (!cl->volume_name[0] && cl->class_name && strcmp(cl->class_name, m->class_name) == 0)
        hp__enqueue(m->c, 'c', cl->key);
}

static void enqueue_leader_claim_of_class(const void *obj, void *data)
{
    const struct hp_claim *cl = obj;
    struct class_match *m = data;
    if (cl->class_name && strcmp(cl->class_name, m->class_name) == 0)
        enqueue_leader_claim(m->c, cl);
}

static void process(struct hp_workqueue *q, const char *qkey, void *data)
{
    struct hp_controller *c = data;
    (void)q;
    if (qkey[0] == 'c')
        hp__reconcile_claim(c, qkey, qkey + 2);
    else if (qkey[0] == 'l')
        hp__reconcile_claim_label(c, qkey, qkey + 2);
    else if (qkey[0] == 'v')
        hp__reconcile_volume(c, qkey, qkey + 2);
    else
        hp__reconcile_orphan(c, qkey, qkey + 2);
}

/* ---- informers ---------------------------------------------------------------------------- */

static int volumes_synced(const struct hp_controller *c)
{
    return c->volumes && hp_informer_synced(c->volumes) &&
           (!c->foreign || hp_informer_synced(c->foreign));
}

static int caches_synced(const struct hp_controller *c)
{
    return c->claims && hp_informer_synced(c->claims) && volumes_synced(c) &&
           hp_informer_synced(c->classes);
}

static size_t volumes_len(const struct hp_controller *c)
{
    return hp_informer_len(c->volumes) + (c->foreign ? hp_informer_len(c->foreign) : 0);
}

static void check_synced(struct hp_controller *c)
{
    if (c->all_synced || !caches_synced(c))
        return;
    if (!c->journal_loaded && c->nroots == 0) {
        c->journal_loaded = 1; /* no volume paths on this node (--config): nothing to read */
    } else if (!c->journal_loaded) {
        /* The journal is read once the volumes are known (their paths are not orphans). */
        hp__start_scan(c);
        return;
    }
    c->all_synced = 1;
    if (c->cfg->usage_scan_period_ms)
        (void)uv_timer_start(&c->usage_timer, hp__on_usage_timer, 0, 0);
    hp_log_info("controller: caches synced claims=%zu volumes=%zu classes=%zu records=%zu",
                hp_informer_len(c->claims), volumes_len(c), hp_informer_len(c->classes),
                hp_volindex_nrecords(c->index));
    enqueue_all(c);
    hp__capacity_changed(c); /* capacity publishing starts once every number is known */
}

static void class_keys_free(void *obj)
{
    struct class_keys *k = obj;
    free(k->name);
    free(k->fingerprint);
    free(k->ann);
    free(k->labels);
    free(k);
}

static const char *class_keys_key(const void *obj)
{
    return ((const struct class_keys *)obj)->name;
}

/* Updates the keys of class `name` (cls NULL: gone, or not ours). Returns 1 when they changed
 * in a way cached claims may lack: a new key to keep. */
static int update_class_keys(struct hp_controller *c, const char *name, const struct hp_class *cls)
{
    struct class_keys *old = hp_store_get(c->class_keys, name);
    struct hp_class_params params;
    struct hp_buf ann, labels;
    char err[256];

    if (!cls || strcmp(cls->provisioner, c->cfg->provisioner_name) != 0 ||
        hp_policy_class_params_of(cls, &params, err, sizeof(err)) < 0) {
        if (old)
            class_keys_free(hp_store_remove(c->class_keys, name));
        return 0;
    }
    hp_buf_init(&ann, 0);
    hp_buf_init(&labels, 0);
    hp_policy_class_keys(&params, &ann, &labels); /* what its patterns read */
    struct class_keys *k = hp_xcalloc(1, sizeof(*k));
    size_t nann = ann.len, nlabels = labels.len;
    k->name = hp_xstrdup(name);
    k->fingerprint = hp_xasprintf("%zu:%zu", nann, nlabels);
    k->ann = nann > 1 ? hp_buf_steal(&ann) : NULL;
    k->labels = nlabels > 1 ? hp_buf_steal(&labels) : NULL;
    hp_buf_free(&ann);
    hp_buf_free(&labels);
    /* Equal fingerprints mean equal lengths: then the lists themselves are compared. */
    int same = old && strcmp(old->fingerprint, k->fingerprint) == 0 &&
               (!k->ann || (old->ann && memcmp(k->ann, old->ann, nann) == 0)) &&
               (!k->labels || (old->labels && memcmp(k->labels, old->labels, nlabels) == 0));
    int needs = (k->ann || k->labels) && !same;
    void *replaced = hp_store_put(c->class_keys, k);
    if (replaced)
        class_keys_free(replaced);
    return needs;
}

/* The claim decoder's question: may claims of class `name` be provisioned by us, and what do
 * they keep? */
static int claim_wanted(const char *name, const char **ann, const char **labels, void *ctx)
{
    struct hp_controller *c = ctx;
    const struct class_keys *k = hp_store_get(c->class_keys, name);
    if (!k)
        return 0;
    *ann = k->ann;
    *labels = k->labels;
    return 1;
}

static void *decode_claim(const struct hp_json *j, int obj, void *ctx)
{
    const struct hp_claim_filter *f = ctx;
    return hp_claim_decode_filtered(j, obj, f);
}

/* ---- the memory rule: what each informer keeps (docs/design.md, "A thousand nodes") ---- */

/* A bound claim is kept when its volume is one of ours on this node's disk: its expansion, its
 * events and the sweep read it. Ours: a live PV we made under our identity there, or a record
 * of ours (written before the PV is created, so a claim bound a moment after its PV was made is
 * kept even when its binding reaches us before the PV's watch event). */
static int volume_ours_here(const struct hp_controller *c, const char *pv)
{
    const struct hp_config *cfg = c->cfg;
    const struct hp_volume *v = hp__volume(c, pv);
    if (v)
        return strcmp(v->provisioned_by, cfg->provisioner_name) == 0 &&
               strcmp(v->identity, cfg->identity) == 0 &&
               (!v->node || !cfg->node_name || strcmp(v->node, cfg->node_name) == 0);
    const struct hp_record *r = hp_volindex_record(c->index, pv);
    return r && r->identity && strcmp(r->identity, cfg->identity) == 0;
}

/* A string member of obj into out ("" when absent, not a string, or too long). */
static void member(const struct hp_json *j, int obj, const char *key, char *out, size_t len)
{
    int tok = hp_json_get(j, obj, key);
    if (hp_json_str_len(j, tok) < 0 || hp_json_str_copy(j, tok, out, len) >= (int)len)
        out[0] = '\0';
}

/* What the keep filters read of a claim, from its JSON. */
struct claim_peek {
    char vol[256], cls[256], node[256], label[HP_LABEL_VALUE_MAX];
    const struct hp_class *k; /* its class when known */
    int ours;                 /* class and storage-provisioner do not name another provisioner */
    int shared;               /* its class goes to a shared path (the leader's) */
};

static void peek_claim(const struct hp_controller *c, const struct hp_json *j, int obj,
                       struct claim_peek *p)
{
    const struct hp_config *cfg = c->cfg;
    char prov[256];
    int meta = hp_json_get(j, obj, "metadata"), spec = hp_json_get(j, obj, "spec");
    int ann = hp_json_get(j, meta, "annotations");

    member(j, spec, "volumeName", p->vol, sizeof(p->vol));
    if (hp_json_get(j, ann, HP_ANN_BETA_STORAGE_CLASS) >= 0)
        member(j, ann, HP_ANN_BETA_STORAGE_CLASS, p->cls, sizeof(p->cls));
    else
        member(j, spec, "storageClassName", p->cls, sizeof(p->cls));
    p->k = p->cls[0] ? hp_informer_get(c->classes, p->cls) : NULL;
    member(j, ann, HP_ANN_STORAGE_PROVISIONER, prov, sizeof(prov));
    if (!prov[0])
        member(j, ann, HP_ANN_BETA_STORAGE_PROVISIONER, prov, sizeof(prov));
    /* No class: not ours to provision, ever; an unknown class may be ours (created later). */
    p->ours = p->cls[0] && (!p->k || strcmp(p->k->provisioner, cfg->provisioner_name) == 0) &&
              (!prov[0] || strcmp(prov, cfg->provisioner_name) == 0);
    member(j, ann, HP_ANN_SELECTED_NODE, p->node, sizeof(p->node));
    if (!p->node[0])
        member(j, ann, HP_ANN_ALPHA_SELECTED_NODE, p->node, sizeof(p->node));
    member(j, hp_json_get(j, meta, "labels"), HP_LABEL_NODE, p->label, sizeof(p->label));
    p->shared = p->k && hp__class_shared(c, p->cls) == 1;
}

/* The claims an instance keeps: those it may provision now and the bound claims of its volumes.
 * The rest -- other nodes' claims, bound claims of other volumes, other provisioners' -- is
 * dropped before it is decoded (a few lookups, no allocation); hp_policy_skip_claim still
 * decides on what is kept.
 *
 * Without --node-name (one instance, or Deployment replicas): every pending claim of ours while
 * leading. */
static int keep_claim(const struct hp_json *j, int obj, void *ctx)
{
    struct hp_controller *c = ctx;
    struct claim_peek p;
    peek_claim(c, j, obj, &p);
    if (p.vol[0])
        return volume_ours_here(c, p.vol);
    if (!p.ours || (p.k && p.k->wait_for_first_consumer && !p.node[0]))
        return 0; /* the scheduler's annotation comes as an update */
    return c->leading;
}

/* Per node, the claims labelled with this node (the labeller's): pending ones selected for it
 * (not of a shared path) and the bound ones of its volumes. */
static int keep_node_claim(const struct hp_json *j, int obj, void *ctx)
{
    struct hp_controller *c = ctx;
    struct claim_peek p;
    peek_claim(c, j, obj, &p);
    if (p.vol[0])
        return volume_ours_here(c, p.vol);
    return p.ours && p.node[0] && !p.shared && strcmp(p.node, c->cfg->node_name) == 0;
}

/* Per node, the leader's watch of every claim: the pending claims it serves itself (without a
 * selected node, of a shared path, or selected for its own node), and those it must label for
 * their node (a selected node its label does not name yet; a bound claim of an expandable
 * class of ours whose request grew). Everything else -- nearly every event of a large cluster -- is dropped. */
static int keep_leader_claim(const struct hp_json *j, int obj, void *ctx)
{
    struct hp_controller *c = ctx;
    struct claim_peek p;
    char want[HP_LABEL_VALUE_MAX];
    peek_claim(c, j, obj, &p);
    if (!p.ours || !c->leading)
        return 0;
    if (p.vol[0]) {
        char req[64], cap[64];
        uint64_t a = 0, b = 0;
        if (!p.k || !p.k->allow_expansion)
            return 0;
        member(j, hp_json_path(j, obj, "spec", "resources", "requests", NULL), "storage", req,
               sizeof(req));
        member(j, hp_json_path(j, obj, "status", "capacity", NULL), "storage", cap, sizeof(cap));
        return hp_quantity_parse(req, &a, NULL, 0) == 0 &&
               hp_quantity_parse(cap, &b, NULL, 0) == 0 && a > b;
    }
    if (!p.node[0])
        return !(p.k && p.k->wait_for_first_consumer);
    /* Of a shared path, or selected for this very node: the leader serves it from this copy
     * (hp__claim), kept until bound even once labelled (by an earlier leader elsewhere). */
    if (p.shared || strcmp(p.node, c->cfg->node_name) == 0)
        return 1;
    return hp_label_value(p.node, want, sizeof(want)) == 0 && strcmp(p.label, want) != 0;
}

/* The PVs an instance keeps: those that name a directory (hostPath or local) on this node's
 * disk -- on this node, or on none (no node affinity: on every node's disk). A CSI volume, or
 * another node's, is dropped. */
static int keep_volume(const struct hp_json *j, int obj, void *ctx)
{
    struct hp_controller *c = ctx;
    char node[256], path[4096], rel[4096];
    int has = hp_volume_peek(j, obj, node, sizeof(node), path, sizeof(path));
    if (has < 0)
        return 0;
    if (has == 0 || !c->cfg->node_name || strcmp(node, c->cfg->node_name) == 0)
        return 1;
    /* Pinned to another node: dropped, unless its path is under a shared root (one filesystem
     * on every node: compared with our volumes whatever node it names). */
    const struct root *r = hp__root_of(c, path, rel, sizeof(rel));
    return r && r->shared;
}

static void *decode_volume(const struct hp_json *j, int obj, void *ctx)
{
    (void)ctx;
    return hp_volume_decode(j, obj);
}

static void *decode_class(const struct hp_json *j, int obj, void *ctx)
{
    (void)ctx;
    return hp_class_decode(j, obj);
}

static const char *claim_key_of(const void *obj)
{
    return ((const struct hp_claim *)obj)->key;
}
static const char *volume_key_of(const void *obj)
{
    return ((const struct hp_volume *)obj)->key;
}
static const char *class_key_of(const void *obj)
{
    return ((const struct hp_class *)obj)->key;
}

static const struct hp_informer_type claim_type = {
    "persistentvolumeclaims", "/api/v1/persistentvolumeclaims", 1, decode_claim, claim_key_of,
    free};
static const struct hp_informer_type volume_type = {
    "persistentvolumes", "/api/v1/persistentvolumes", 0, decode_volume, volume_key_of, free};
/* Per node: the PVs without our node label (hand-made, other provisioners', ours from before
 * the label, shared paths'), for the identity check and the label migration. */
static const struct hp_informer_type unlabelled_volume_type = {
    "persistentvolumes-unlabelled", "/api/v1/persistentvolumes", 0, decode_volume, volume_key_of,
    free};
static const struct hp_informer_type class_type = {
    "storageclasses", "/apis/storage.k8s.io/v1/storageclasses", 0, decode_class, class_key_of,
    free};

static void on_claim_changed(struct hp_informer *inf, const char *key, const void *obj,
                             void *data)
{
    struct hp_controller *c = data;
    if (!c->all_synced)
        return;
    if (inf == c->claims_all && obj)
        enqueue_leader_claim(c, obj);
    else
        hp__enqueue(c, 'c', key);
}

static void on_volume_changed(struct hp_informer *inf, const char *key, const void *obj,
                              void *data)
{
    struct hp_controller *c = data;
    /* One PV may be in both informers a moment (labelled: in the node's, leaving the
     * unlabelled one): the node's copy wins, and it is gone only when gone from both. */
    const void *other = inf == c->volumes ? (c->foreign ? hp_informer_get(c->foreign, key) : NULL)
                                          : hp_informer_get(c->volumes, key);
    if (inf == c->foreign && other)
        return; /* the node's copy is what counts */
    if (!obj)
        obj = other;
    if (!obj && hp__relabelling(c, key))
        return; /* we labelled it: it leaves the unlabelled watch before the node's shows it */
    if (inf == c->volumes && obj && c->foreign) {
        char rk[300];
        (void)snprintf(rk, sizeof(rk), "%s%s", EXPECT_RELABEL_PREFIX, key);
        hp_expect_observed(c->expect, rk, 1); /* a relabelling, if any, is done */
    }
    hp_expect_observed(c->expect, key, obj != NULL);
    if (obj) {
        hp__index_volume(c, obj);
        /* Shown before its create's answer: not counted twice meanwhile (ctl_op.c). */
        hp__reservation_taken_over(c, key);
    } else
        hp__unindex_volume(c, key);
    hp__track_usage(c, key, obj);
    if (c->all_synced)
        hp__enqueue(c, 'v', key);
}

static void on_class_changed(struct hp_informer *inf, const char *key, const void *obj,
                             void *data)
{
    struct hp_controller *c = data;
    (void)inf;
    if (update_class_keys(c, key, obj) && c->claims && hp_informer_synced(c->claims)) {
        /* Cached claims of this class lack labels or annotations its pathPattern now reads. */
        hp_log_v(2, "controller: class %s reads other claim labels or annotations now; "
                    "listing claims again",
                 key);
        hp_informer_relist(c->claims);
        if (c->claims_all)
            hp_informer_relist(c->claims_all);
    }
    if (c->all_synced) {
        struct class_match m = {c, key};
        hp_informer_foreach(c->claims, enqueue_claim_of_class, &m);
        if (c->claims_all)
            hp_informer_foreach(c->claims_all, enqueue_leader_claim_of_class, &m);
    }
    hp__capacity_changed(c); /* capacity objects follow the classes (ctl_capacity.c) */
}

/* How the informers read the whole collection (watch.h): a streaming list, served by the
 * API server's watch cache object by object (or, where refused, a list from the cache). */
static struct hp_watch_opts watch_opts(const char *label_selector)
{
    struct hp_watch_opts w = {.initial = HP_WATCH_INITIAL_STREAM,
                              .label_selector = label_selector};
    return w;
}

static void on_informer_closed(void *data);
static void on_informer_synced(struct hp_informer *inf, void *data);

/* Per node, the leader (only) watches every claim: what it serves itself and what it labels for
 * its node. Started when it leads (once the caches it decides against are in), closed when it
 * stops. */
static void leader_claims(struct hp_controller *c)
{
    int want = c->cfg->node_name && c->leading && !c->stopping && c->claims;
    if (want && !c->claims_all) {
        struct hp_watch_opts w = watch_opts(NULL);
        struct hp_informer_opts o = {.decode_ctx = &c->claim_filter,
                                     .on_change = on_claim_changed,
                                     .on_synced = on_informer_synced,
                                     .data = c,
                                     .watch = &w,
                                     .keep = keep_leader_claim,
                                     .keep_ctx = c};
        c->claims_all = hp_informer_new(c->loop, c->client, &claim_type, &o);
    } else if (!want && c->claims_all) {
        /* What it held goes with it: operations on those claims find them gone (a
         * provisioning undoes what it made; the next leader provisions them). */
        c->closing_informers++;
        hp_informer_close(c->claims_all, on_informer_closed, c);
        c->claims_all = NULL;
    }
}

static void on_informer_synced(struct hp_informer *inf, void *data)
{
    struct hp_controller *c = data;
    if (!c->claims && hp_informer_synced(c->classes) && volumes_synced(c)) {
        /* Claims are decoded against the classes (what to keep of them) and kept against the
         * volumes (the bound claims of ours): list them now. Per node, the API server sends
         * only the claims labelled with this node (the leader's labeller writes the label). */
        char sel[sizeof(HP_LABEL_NODE) + HP_LABEL_VALUE_MAX + 2];
        struct hp_watch_opts w = watch_opts(NULL);
        struct hp_informer_opts o = {.decode_ctx = &c->claim_filter,
                                     .on_change = on_claim_changed,
                                     .on_synced = on_informer_synced,
                                     .data = c,
                                     .watch = &w,
                                     .keep = keep_claim,
                                     .keep_ctx = c};
        if (c->cfg->node_name) {
            snprintf(sel, sizeof(sel), "%s=%s", HP_LABEL_NODE, c->node_label);
            w.label_selector = sel;
            o.keep = keep_node_claim;
        }
        c->claims = hp_informer_new(c->loop, c->client, &claim_type, &o);
        leader_claims(c);
        return;
    }
    (void)inf;
    check_synced(c);
}

static const struct hp_store_ops class_keys_ops = {class_keys_key, class_keys_free};

/* ---- lifecycle ---------------------------------------------------------------------------- */

static void maybe_finish_close(struct hp_controller *c);

/* The scanned hook: after a journal read, the sweep; then perhaps the first sync. */
static void on_root_scanned(struct hp_controller *c, struct root *r, const struct hp_fsop *f,
                            int first)
{
    hp__sweep_after_scan(c, r, f, first, c->all_synced || caches_synced(c));
    check_synced(c);
}

/* A PV we created that the watch never showed (made and deleted before it looked): what the
 * answer indexed is dropped with the expectation. */
static void on_expect_lapsed(const char *name, enum hp_expect_state state, void *data)
{
    struct hp_controller *c = data;
    if (strncmp(name, EXPECT_RELABEL_PREFIX, strlen(EXPECT_RELABEL_PREFIX)) == 0) {
        name += strlen(EXPECT_RELABEL_PREFIX);
        if (!hp__volume(c, name)) /* labelled, then never shown again: gone meanwhile */
            hp__unindex_volume(c, name);
        return;
    }
    if (strncmp(name, EXPECT_EXPANDED_PREFIX, strlen(EXPECT_EXPANDED_PREFIX)) == 0)
        return; /* a claim's: nothing indexed */
    if (state == HP_EXPECT_PRESENT && !hp__volume(c, name))
        hp__unindex_volume(c, name);
}

static void on_resync(uv_timer_t *t)
{
    struct hp_controller *c = hp_container_of(t, struct hp_controller, resync);
    hp_expect_expire(c->expect, uv_now(c->loop), on_expect_lapsed, c);
    if (c->all_synced) {
        hp_log_v(2, "controller: periodic resync claims=%zu volumes=%zu",
                 hp_informer_len(c->claims), volumes_len(c));
        enqueue_all(c);
        hp__start_scan(c);
    }
    hp__capacity_leader_work(c); /* the CSIDriver and stale capacity objects, when leading */
}

struct hp_controller *hp_controller_new(uv_loop_t *loop, const struct hp_config *cfg,
                                        struct hp_kube_client *client, struct hp_events *events,
                                        struct hp_hostpath *hostpath)
{
    struct hp_controller *c = hp_xcalloc(1, sizeof(*c));
    c->loop = loop;
    c->cfg = cfg;
    c->client = client;
    c->events = events;
    c->hostpath = hostpath;
    c->maybe_closed = maybe_finish_close;
    c->scanned = on_root_scanned;
    c->room_changed = hp__capacity_changed; /* ctl_roots.c -> ctl_capacity.c */
    hp_list_init(&c->ops);
    hp_list_init(&c->announcing);
    c->expect = hp_expect_new(EXPECT_TTL_MS, EXPECT_MAX);
    hp__roots_init(c);
    hp__usage_init(c);
    hp__release_init(c);
    hp__sweep_init(c);
    hp__capacity_init(c);
    hp__add_root(c, cfg->pv_dir, 0, 1);
    c->class_keys = hp_store_new(&class_keys_ops);
    c->claim_filter.wanted = claim_wanted;
    c->claim_filter.ctx = c;
    c->node_held = 1;
    if (cfg->node_name && hp_label_value(cfg->node_name, c->node_label, sizeof(c->node_label)))
        c->node_label[0] = '\0';
    if (hp_label_value(cfg->provisioner_name, c->prov_label, sizeof(c->prov_label)))
        c->prov_label[0] = '\0';
    struct hp_workqueue_opts qo = {
        .base_delay_ms = cfg->retry_base_delay_ms,
        .max_delay_ms = cfg->retry_max_delay_ms,
        /* Enough concurrent reconciles to keep several API requests in flight; the threadpool
         * side is capped separately by --workers. */
        .max_active = 64,
        .name = QUEUE_NAME, /* workqueue_* {name="hostpath"} */
    };
    c->queue = hp_workqueue_new(loop, &qo, process, c);
    int rc = uv_timer_init(loop, &c->resync);
    if (rc == 0)
        rc = uv_timer_init(loop, &c->rescan);
    if (rc == 0)
        rc = uv_timer_init(loop, &c->usage_timer);
    if (rc == 0)
        rc = uv_timer_init(loop, &c->announce);
    if (rc)
        hp_log_error("controller: uv_timer_init: %s", uv_strerror(rc));
    return c;
}

const char *hp_controller_root(const struct hp_controller *c)
{
    return c->nroots ? c->roots[0]->path : "";
}

void hp_controller_set_paths(struct hp_controller *c, const struct hp_node_entry *e)
{
    if (c->stopping) /* running operations still point at the roots */
        return;
    int started = c->classes != NULL;
    /* Paths no longer listed: before start they go; after, they are retired (their volumes are
     * still deleted and swept, no new ones are made there). */
    for (size_t i = 0; i < c->nroots; i++) {
        struct root *r = c->roots[i];
        int listed = 0;
        for (size_t k = 0; e && k < e->npaths; k++)
            listed |= strcmp(e->paths[k].path, r->path) == 0;
        if (listed)
            continue;
        if (!started) {
            hp__quota_root_free(r);
            free(r->path);
            free(r);
            c->roots[i--] = c->roots[--c->nroots];
        } else if (!r->retired) {
            r->retired = 1;
            hp__root_metrics(c, r);
            hp_log_info("controller: volume path %s is no longer configured: no new volumes "
                        "there, existing ones are still deleted as their policy says",
                        r->path);
        }
    }
    for (size_t k = 0; e && k < e->npaths; k++) {
        const struct hp_node_path *p = &e->paths[k];
        struct root *r = hp__root_named(c, p->path);
        if (!r) {
            r = hp__add_root(c, p->path, p->budget, p->allow_rootfs);
            r->shared = p->shared;
            r->overcommit = p->overcommit;
            r->hard_limits = p->hard_limits;
            if (started)
                hp_log_info("controller: new volume path %s budget=%llu hardLimits=%s", r->path,
                            (unsigned long long)r->budget, r->hard_limits ? "true" : "false");
            continue;
        }
        if (r->retired || r->budget != p->budget || r->allow_rootfs != p->allow_rootfs ||
            r->overcommit != p->overcommit || r->hard_limits != p->hard_limits)
            hp_log_info("controller: volume path %s updated budget=%llu allowRootFilesystem=%s "
                        "overcommit=%g hardLimits=%s",
                        r->path, (unsigned long long)p->budget,
                        p->allow_rootfs ? "true" : "false", p->overcommit,
                        p->hard_limits ? "true" : "false");
        if (r->hard_limits != p->hard_limits) { /* probed again by the scan below */
            free(r->quota_err);
            r->quota_err = NULL;
        }
        r->retired = 0;
        r->budget = p->budget;
        r->allow_rootfs = p->allow_rootfs;
        r->shared = p->shared;
        r->overcommit = p->overcommit;
        r->hard_limits = p->hard_limits;
        hp__root_metrics(c, r);
    }
    if (started)
        hp__start_scan(c); /* new roots are read before volumes go there */
}

void hp_controller_set_map(struct hp_controller *c, const struct hp_nodemap *m)
{
    c->map = m;
}

void hp_controller_add_retired(struct hp_controller *c, const char *path)
{
    if (hp__root_named(c, path))
        return;
    struct root *r = hp__add_root(c, path, 0, 1);
    r->retired = 1;
    r->listed = 1;
    hp_log_info("controller: volume path %s is no longer configured but still holds volumes: "
                "no new volumes there, existing ones are deleted as their policy says",
                path);
}

void hp_controller_expect_journal(struct hp_controller *c, const char *path)
{
    if (!hp_store_get(c->seen_journals, path))
        free(hp_store_put(c->seen_journals, hp_xstrdup(path)));
}

int hp_controller_journal_seen(const struct hp_controller *c, const char *path)
{
    return hp_store_get(c->seen_journals, path) != NULL;
}

const char **hp_controller_kept_roots(const struct hp_controller *c, const struct hp_node_entry *e)
{
    const char **out = hp_xcalloc(c->nroots + 1, sizeof(*out));
    size_t n = 0;
    for (size_t i = 0; i < c->nroots; i++) {
        const struct root *r = c->roots[i];
        int listed = 0;
        for (size_t k = 0; e && k < e->npaths; k++)
            listed |= strcmp(e->paths[k].path, r->path) == 0;
        if (!listed && hp__root_holds(c, r))
            out[n++] = r->path;
    }
    return out;
}

void hp_controller_start(struct hp_controller *c)
{
    struct hp_watch_opts w = watch_opts(NULL);
    struct hp_informer_opts o = {
        .on_change = on_class_changed, .on_synced = on_informer_synced, .data = c, .watch = &w};
    if (c->classes || c->stopping)
        return; /* started already (or closing): nothing to do */
    c->classes = hp_informer_new(c->loop, c->client, &class_type, &o);
    o.on_change = on_volume_changed;
    o.keep = keep_volume;
    o.keep_ctx = c;
    if (c->cfg->node_name) {
        /* Per node: the API server sends this instance the PVs labelled with its node, and
         * those labelled with no node at all (which may be on any disk: hand-made, other
         * provisioners', ours from before the label). Other nodes' PVs of ours never come. */
        char sel[sizeof(HP_LABEL_NODE) + HP_LABEL_VALUE_MAX + 2];
        snprintf(sel, sizeof(sel), "%s=%s", HP_LABEL_NODE, c->node_label);
        w.label_selector = sel;
        c->volumes = hp_informer_new(c->loop, c->client, &volume_type, &o);
        w.label_selector = "!" HP_LABEL_NODE;
        c->foreign = hp_informer_new(c->loop, c->client, &unlabelled_volume_type, &o);
    } else {
        c->volumes = hp_informer_new(c->loop, c->client, &volume_type, &o);
    }
    hp__capacity_start(c);
    if (c->cfg->resync_period_ms)
        (void)uv_timer_start(&c->resync, on_resync, c->cfg->resync_period_ms,
                             c->cfg->resync_period_ms); /* cannot fail on an initialised timer */
}

void hp_controller_set_leader(struct hp_controller *c, int leading)
{
    if (c->leading == !!leading)
        return;
    c->leading = !!leading;
    /* What the claims informers keep depends on it (the unscheduled claims): without a node,
     * they are read again; per node, the leader's watch of every claim starts or stops. */
    if (c->claims && !c->stopping && !c->cfg->node_name)
        hp_informer_relist(c->claims);
    leader_claims(c);
    if (c->leading && c->all_synced && !c->stopping) {
        /* Everything a standby left alone; the journal is read again first (the previous
         * leader changed it), and its orphans swept. */
        enqueue_all(c);
        hp__start_scan(c);
    }
    if (c->leading && !c->stopping)
        hp__capacity_leader_work(c); /* the leader keeps the CSIDriver right (ctl_capacity.c) */
}

int hp_controller_synced(const struct hp_controller *c)
{
    return c->all_synced;
}

void hp_controller_set_node_lease(struct hp_controller *c, int held)
{
    if (c->node_held == !!held)
        return;
    c->node_held = !!held;
    if (c->node_held && c->all_synced && !c->stopping) {
        /* What the other replica on this node did meanwhile is in the journal. */
        enqueue_all(c);
        hp__start_scan(c);
    }
    hp__capacity_changed(c); /* only the holder publishes this node's capacity */
}

static void on_part_closed(void *data)
{
    struct hp_controller *c = data;
    if (--c->closing_handles > 0)
        return;
    hp_store_free(c->class_keys);
    hp__capacity_free(c);
    hp__sweep_free(c);
    hp__release_free(c);
    hp__usage_free(c);
    hp__roots_free(c);
    hp_expect_free(c->expect);
    hp_close_cb cb = c->close_cb;
    void *cb_data = c->close_data;
    free(c);
    if (cb)
        cb(cb_data);
}

static void on_timer_closed(uv_handle_t *h)
{
    on_part_closed(h->data);
}

static void on_informer_closed(void *data)
{
    struct hp_controller *c = data;
    c->closing_informers--;
    if (c->stopping) /* else the leader's watch of every claim closed: nothing else ends */
        maybe_finish_close(c);
}

static void maybe_finish_close(struct hp_controller *c)
{
    if (!hp_list_empty(&c->ops) || c->scans || c->usage_op || c->closing_informers ||
        c->capacity_busy || c->closing_handles)
        return;
    /* Every operation is gone: close the queue, the usage worker and the timers. */
    c->closing_handles = 6;
    c->resync.data = c;
    c->rescan.data = c;
    c->usage_timer.data = c;
    c->announce.data = c;
    uv_close((uv_handle_t *)&c->announce, on_timer_closed);
    uv_close((uv_handle_t *)&c->resync, on_timer_closed);
    uv_close((uv_handle_t *)&c->rescan, on_timer_closed);
    uv_close((uv_handle_t *)&c->usage_timer, on_timer_closed);
    hp_hostpath_close(c->usage_hp, on_part_closed, c);
    hp_workqueue_close(c->queue, on_part_closed, c);
}

void hp_controller_close(struct hp_controller *c, hp_close_cb close_cb, void *data)
{
    c->stopping = 1;
    c->close_cb = close_cb;
    c->close_data = data;
    /* Nothing is reconciled from now on, not even a key that was ready or whose retry comes
     * due while the filesystem requests below finish: the caches are closing. */
    hp_workqueue_shut_down(c->queue);
    /* A usage measurement is not worth waiting for (a removal is: it runs to its end). */
    if (c->usage_op)
        hp_fsop_abandon(c->usage_op);
    /* The informers go first (no change callback after this) but their objects stay readable
     * until their close completes; the operations still running do not read them. */
    struct hp_informer **infs[] = {&c->claims, &c->claims_all, &c->volumes, &c->foreign,
                                   &c->classes};
    for (size_t i = 0; i < HP_ARRAY_SIZE(infs); i++) {
        if (*infs[i]) {
            c->closing_informers++;
            hp_informer_close(*infs[i], on_informer_closed, c);
            *infs[i] = NULL;
        }
    }
    (void)uv_timer_stop(&c->resync);
    (void)uv_timer_stop(&c->rescan);
    (void)uv_timer_stop(&c->usage_timer);
    (void)uv_timer_stop(&c->announce);
    hp__capacity_stop(c); /* its requests cancelled, its informer and handles closing */
    /* API steps are cancelled; filesystem requests are left to finish and free their op. */
    struct hp_list *l, *tmp;
    hp_list_foreach_safe(l, tmp, &c->ops) {
        struct op *op = hp_list_entry(l, struct op, link);
        if (!op->fsop) {
            if (op->req)
                hp_kube_cancel(op->req);
            hp__op_free(op);
        }
    }
    maybe_finish_close(c);
}
