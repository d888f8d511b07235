/* controller: reconcile claims into volumes, and released volumes into removed directories.
 *
 * Loop thread only. Three reflectors feed three stores; every change enqueues a key in one work
 * queue ("c:<namespace>/<name>" for claims, "v:<name>" for volumes, "o:<name>" for a journal
 * record the orphan sweep found without a volume). A reconcile reads the store, asks the policy
 * module what to do (policy.h), and runs one operation: a chain of filesystem requests on the
 * threadpool (fsops.h, which keeps the ownership journal) and API requests. Every step is
 * idempotent, so a retry simply reconciles again from the top; nothing but the work queue's
 * failure count and the journal survives between attempts.
 *
 * Paths: a volume is a root (struct root) and a path relative to it (what the journal records).
 * Its absolute form exists only in the PV's spec.hostPath.path and in messages, and only fsops
 * converts (hp_fsop_path, hp_fsop_relative): once for a new volume, once for a PV read.
 *
 * Start: the reflectors list; once all three are in sync the journal is scanned (records loaded
 * into the volume index, leftovers of a crash removed, orphans settled) and only then does
 * reconciling begin, so that every decision sees every record. The scan repeats every resync.
 */
#include "hostpath/controller.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysmacros.h>
#include <time.h>

#include "hostpath/buf.h"
#include "hostpath/common.h"
#include "hostpath/config.h"
#include "hostpath/crashpoint.h"
#include "hostpath/events.h"
#include "hostpath/fsops.h"
#include "hostpath/hostpath.h"
#include "hostpath/informer.h"
#include "hostpath/kube_client.h"
#include "hostpath/list.h"
#include "hostpath/log.h"
#include "hostpath/metrics.h"
#include "hostpath/nodemap.h"
#include "hostpath/objects.h"
#include "hostpath/pathpattern.h"
#include "hostpath/policy.h"
#include "hostpath/quantity.h"
#include "hostpath/store.h"
#include "hostpath/volindex.h"
#include "hostpath/watch.h"
#include "hostpath/workqueue.h"

#define KEY_MAX 600
#define QUEUE_NAME "hostpath"
/* Unrecorded directories remembered as already logged (a bound on memory, not on logging). */
#define MAX_LOGGED_UNRECORDED 10000
/* A failed journal scan is tried again after this long. */
#define SCAN_RETRY_MS 5000
#define GONE_MAX 1024

/* OUT_WAIT: retried with backoff for as long as it takes (a disk that is not mounted), never
 * given up on. */
enum outcome { OUT_OK, OUT_RETRY, OUT_RETRY_AFTER, OUT_WAIT, OUT_GIVE_UP };
/* OP_FINALIZE: --add-finalizer on a bound volume made before the flag was on. OP_MIGRATE: record
 * a volume made before the journal existed. OP_ORPHAN: settle a record the sweep found. */
enum op_kind { OP_PROVISION, OP_DELETE, OP_FINALIZE, OP_MIGRATE, OP_ORPHAN, OP_EXPAND };

struct op {
    struct hp_controller *c;
    struct hp_list link; /* in c->ops */
    /* provision: in c->announcing while its Provisioning event is due if it is still running */
    struct hp_list announce_link;
    uint64_t announce_due; /* uv_now ms */
    const char *qkey; /* the work queue's key, valid until hp_workqueue_done */
    enum op_kind kind;
    char *claim_key;  /* namespace/name */
    char *claim_uid;
    char *pv_name;
    char *class_name;
    char *rel;        /* the directory, relative to the root */
    char *path;       /* the directory, absolute */
    char *last_error; /* for the give-up event */
    char *adopt;      /* provision: the retained volume whose directory is taken over */
    struct root *root; /* the volume root the directory is (to be) under */
    uint64_t reserved; /* provision: bytes reserved on root while in flight (expand: the
                          growth) */
    char *size;        /* expand: the claim's new request, as written */
    int finalizer;    /* delete: the PV carries our finalizer */
    int pv_deleting;  /* delete: the PV already has a deletionTimestamp */
    enum hp_on_delete on_delete;
    enum hp_sweep_action sweep; /* orphan */
    struct hp_kube_req *req;
    struct hp_fsop *fsop; /* the filesystem request while it runs */
    uint64_t start_ms;
    int announce; /* provision: the Provisioning event is due if still running (on_announce) */
    int dir_made; /* provision: the directory exists (recorded), its PV may not */
    /* provision: the PV to create (JSON text), and what it is built from besides the claim */
    char *pv_body;
    char *node;          /* node affinity, or NULL */
    char *mount_options; /* the class's, packed, or NULL */
    enum hp_reclaim reclaim;
};

struct hp_controller {
    uv_loop_t *loop;
    const struct hp_config *cfg;
    struct hp_kube_client *client;
    struct hp_events *events;
    struct hp_hostpath *hostpath;
    struct root **roots; /* this node's volume roots (--pv-dir, or its --config paths) */
    size_t nroots;
    struct hp_store *acct; /* PV name -> the root and capacity it takes (struct acct) */
    struct hp_informer *claims, *volumes, *classes; /* claims start once classes are in */
    struct hp_store *class_keys; /* class name -> what its pathPattern reads (struct class_keys) */
    struct hp_volindex *index;
    struct hp_store *logged_unrecorded;
    struct hp_store *logged_identity; /* released PVs of another identity, said once */
    struct hp_store *unfinished; /* claim key -> struct unfinished */
    struct hp_store *gone;       /* names of PVs we deleted lately (remember_gone) */
    char *gone_ring[GONE_MAX];
    size_t gone_next;
    int node_lease_required; /* per-node replicas take turns on the node lease (main) */
    int node_held;           /* ... and this one holds it (always 1 when not required) */
    int all_synced;
    int journal_loaded; /* every root's journal was read once */
    int scans;          /* root scans in flight */
    struct hp_workqueue *queue;
    uv_timer_t resync, rescan, usage_timer;
    uv_timer_t announce; /* the Provisioning events of slow provisionings */
    struct hp_store *usage;         /* PV name -> struct usage: bound volumes of ours here */
    struct hp_hostpath *usage_hp;   /* one worker: a huge volume never stalls provisioning */
    struct hp_fsop *usage_op;       /* the measurement in flight */
    char **usage_round;             /* PV names still to measure this round */
    size_t usage_n, usage_i;
    size_t orphans_recorded, orphans_unrecorded; /* summed over the roots' last scans */
    int leading;
    int stopping;
    int closing_handles;
    int closing_informers;
    struct hp_claim_filter claim_filter;
    struct hp_list ops;        /* every operation running */
    struct hp_list announcing; /* provisionings whose Provisioning event is due, oldest first */
    hp_close_cb close_cb;
    void *close_data;
};

/* What a class's pathPattern reads of a claim: a claim of that class keeps these labels and
 * annotations while it may be provisioned, and nothing else (informer.h, the memory rule). */
struct class_keys {
    char *name;
    char *fingerprint; /* the keys, to see whether a class update changed them */
    char *ann, *labels; /* packed lists, or NULL */
};

/* A provisioning that made its directory (recorded) but not its PV, waiting for a retry. If the
 * claim goes (or is re-created) meanwhile, the retry has nothing to provision and the directory
 * is removed instead (reconcile_claim), not left for the next orphan sweep. */
struct unfinished {
    char *claim_key; /* namespace/name */
    char *claim_uid;
    char *pv;
};

static const char *unfinished_key(const void *obj)
{
    return ((const struct unfinished *)obj)->claim_key;
}

static void unfinished_free(void *obj)
{
    struct unfinished *u = obj;
    if (!u)
        return;
    free(u->claim_key);
    free(u->claim_uid);
    free(u->pv);
    free(u);
}

static const struct hp_store_ops unfinished_ops = {unfinished_key, unfinished_free};

/* ---- volume roots --------------------------------------------------------------------------- */

/* One directory volumes are made under, with its own journal: --pv-dir, or a path of this node
 * in --config. */
struct root {
    struct hp_controller *c;
    char *path;        /* absolute, normalised */
    uint64_t budget;   /* bytes; 0 = the filesystem's size */
    int allow_rootfs;
    int retired;       /* no longer configured: no new volumes, the rest as usual */
    struct hp_fs_stats stats; /* as the last filesystem request saw it */
    uint64_t reserved; /* live volumes' capacity + provisionings in flight */
    struct hp_fsop *scan; /* the journal scan in flight, or NULL */
    int64_t scan_started;
    int journal_loaded;
    int leftovers_cleaned; /* crash leftovers were removed (by a scan that works on disks) */
    int rootfs_said;   /* the "on the root filesystem" warning was given */
    size_t orphans_recorded, orphans_unrecorded;
    /* The filesystem its journal was read from (fs_known), and whether the path now shows
     * another one while volumes of ours were made on that one: an unmounted disk, whose empty
     * mount point must not take new volumes (fs_moved). */
    struct hp_fs_ident fs;
    int fs_known, fs_moved;
};

/* What a live volume takes from its root (for placement). */
struct acct {
    char *pv;
    struct root *root;
    uint64_t bytes;
};

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

static void root_metrics(const struct hp_controller *c, const struct root *r)
{
    struct hp_place_path p = {r->path, r->budget, r->reserved, r->stats.ok, r->stats.size,
                              r->stats.free, NULL};
    uint64_t capacity = r->budget ? r->budget : r->stats.size;
    /* A path no longer in --config takes nothing new: no room to advertise. */
    hp_metrics_path(r->path, c->cfg->node_name ? c->cfg->node_name : "", capacity, r->reserved,
                    r->retired ? 0 : hp_policy_room(&p), r->stats.ok && r->stats.on_rootfs);
}

/* A filesystem request on root r answered: what it saw of the root's size and room. */
static void root_seen(struct hp_controller *c, struct root *r, const struct hp_fs_stats *st)
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
    root_metrics(c, r);
}

/* The root a volume's hostPath lies strictly inside, with the path relative to it in rel (fsops
 * converts: hp_fsop_relative); NULL when none. */
static struct root *root_of(const struct hp_controller *c, const char *abs, char *rel, size_t len)
{
    for (size_t i = 0; i < c->nroots; i++) {
        struct root *r = c->roots[i];
        if (hp_fsop_relative(r->path, abs, rel, len) == 0)
            return r;
    }
    return NULL;
}

static struct root *root_named(const struct hp_controller *c, const char *path)
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
static int volume_holds(const struct hp_controller *c, const struct hp_volume *v,
                        const struct root *root, const char *rel)
{
    char vrel[4096];
    if (!v)
        return 0;
    if (c->cfg->node_name && v->node && strcmp(v->node, c->cfg->node_name) != 0)
        return 0;
    const struct root *vroot = v->path ? root_of(c, v->path, vrel, sizeof(vrel)) : NULL;
    if (!vroot || !root || !rel)
        return 1;
    return vroot == root && strcmp(vrel, rel) == 0;
}

/* The same for the PV of an API answer; an answer that cannot be decoded proves nothing: it
 * holds. */
static int answer_holds(const struct hp_controller *c, const struct hp_kube_response *resp,
                        const char *pv, const struct root *root, const char *rel)
{
    struct hp_json j;
    hp_json_init(&j);
    struct hp_volume *v =
        hp_json_parse(&j, resp->body, resp->body_len) == 0 ? hp_volume_decode(&j, 0) : NULL;
    hp_json_free(&j);
    int holds = !v || strcmp(v->name, pv) != 0 || volume_holds(c, v, root, rel);
    free(v);
    return holds;
}

static void account(struct hp_controller *c, const char *pv, struct root *r, uint64_t bytes)
{
    struct acct *old = hp_store_remove(c->acct, pv);
    if (old) {
        old->root->reserved -= old->root->reserved >= old->bytes ? old->bytes
                                                                  : old->root->reserved;
        root_metrics(c, old->root);
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
    root_metrics(c, r);
}

/* The index holds a live volume's path when it is on this node's disk (no node affinity, or
 * affinity to this node) and under one of our roots, whatever its identity; its capacity counts
 * against that root. */
static void index_volume(struct hp_controller *c, const struct hp_volume *v)
{
    char rel[4096];
    const char *node = c->cfg->node_name;
    struct root *r = NULL;
    if (v->path[0] && (!v->node || !node || strcmp(v->node, node) == 0))
        r = root_of(c, v->path, rel, sizeof(rel));
    if (!r) {
        hp_volindex_release(c->index, HP_SRC_VOLUME, v->name);
        account(c, v->name, NULL, 0);
        return;
    }
    char *abs = hp_fsop_path(r->path, rel);
    hp_volindex_hold(c->index, HP_SRC_VOLUME, v->name, abs);
    free(abs);
    uint64_t bytes = 0;
    (void)hp_quantity_parse(v->capacity, &bytes, NULL, 0); /* a PV without a size takes none */
    account(c, v->name, r, bytes);
}

static void unindex_volume(struct hp_controller *c, const char *name)
{
    hp_volindex_release(c->index, HP_SRC_VOLUME, name);
    account(c, name, NULL, 0);
}

/* ---- queue helpers ------------------------------------------------------------------------ */

static void enqueue(struct hp_controller *c, char kind, const char *key)
{
    char qkey[KEY_MAX];
    if (c->stopping)
        return;
    if ((size_t)snprintf(qkey, sizeof(qkey), "%c:%s", kind, key) >= sizeof(qkey))
        return; /* longer than any valid namespace/name */
    hp_workqueue_add(c->queue, qkey);
}

static void enqueue_claim_obj(const void *obj, void *data)
{
    enqueue(data, 'c', ((const struct hp_claim *)obj)->key);
}

static void enqueue_volume_obj(const void *obj, void *data)
{
    enqueue(data, 'v', ((const struct hp_volume *)obj)->key);
}

/* Whether this process does the disk work of a volume of `node` (NULL: none) now. Replicas of
 * one Deployment share an identity and usually a disk, so without --node-name only the leader
 * touches volumes (as only it provisions); with it, a node's volumes are that node's
 * instance's (the replica holding the node lease, when several run for one node), and the
 * rest the leader's. */
static int works_on_disks(const struct hp_controller *c, const char *node)
{
    if (!c->node_held) /* another replica on this node works on its disks now */
        return 0;
    return c->leading || (c->cfg->node_name && node && node[0]);
}

static void enqueue_all(struct hp_controller *c)
{
    hp_informer_foreach(c->claims, enqueue_claim_obj, c);
    hp_informer_foreach(c->volumes, enqueue_volume_obj, c);
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
        enqueue(m->c, 'c', cl->key);
}

/* ---- operations --------------------------------------------------------------------------- */

static struct op *op_new(struct hp_controller *c, const char *qkey, enum op_kind kind)
{
    struct op *op = hp_xcalloc(1, sizeof(*op));
    op->c = c;
    op->qkey = qkey;
    op->kind = kind;
    op->start_ms = uv_now(c->loop);
    hp_list_insert_tail(&c->ops, &op->link);
    hp_list_init(&op->announce_link);
    return op;
}

static void maybe_finish_close(struct hp_controller *c);
static void reschedule(struct op *op, const struct hp_claim *cl);

static void op_free(struct op *op)
{
    struct hp_controller *c = op->c;
    hp_list_remove(&op->link);
    hp_list_remove(&op->announce_link);
    if (op->kind == OP_PROVISION && op->pv_name)
        hp_volindex_release(c->index, HP_SRC_RESERVED, op->pv_name);
    if (op->reserved && op->root) {
        op->root->reserved -= op->root->reserved >= op->reserved ? op->reserved
                                                                  : op->root->reserved;
        root_metrics(c, op->root);
    }
    free(op->claim_key);
    free(op->claim_uid);
    free(op->pv_name);
    free(op->class_name);
    free(op->rel);
    free(op->path);
    free(op->last_error);
    free(op->adopt);
    free(op->size);
    hp_fsop_free(op->fsop);
    free(op->pv_body);
    free(op->node);
    free(op->mount_options);
    free(op);
    if (c->stopping)
        maybe_finish_close(c);
}

static int op_in_flight(const struct hp_controller *c, const char *pv)
{
    const struct hp_list *l;
    hp_list_foreach(l, &c->ops) {
        const struct op *op = hp_list_entry(l, struct op, link);
        if (op->pv_name && strcmp(op->pv_name, pv) == 0)
            return 1;
    }
    return 0;
}

static void claim_ref(const struct hp_claim *cl, struct hp_object_ref *ref)
{
    ref->kind = "PersistentVolumeClaim";
    ref->api_version = "v1";
    ref->namespace_ = cl->namespace_;
    ref->name = cl->name;
    ref->uid = cl->uid;
    ref->resource_version = cl->resource_version;
}

static void set_error(struct op *op, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_error(struct op *op, const char *fmt, ...)
{
    struct hp_buf b;
    va_list ap;
    hp_buf_init(&b, 0);
    va_start(ap, fmt);
    (void)hp_buf_vprintf(&b, fmt, ap);
    va_end(ap);
    free(op->last_error);
    op->last_error = hp_buf_steal(&b);
}

/* Emits an event on the operation's claim, if it is still in the store. */
static void claim_event(struct op *op, int warning, const char *reason, const char *msg)
{
    const struct hp_claim *cl = hp_informer_get(op->c->claims, op->claim_key);
    struct hp_object_ref ref;
    if (!cl || strcmp(cl->uid, op->claim_uid) != 0)
        return;
    claim_ref(cl, &ref);
    hp_events_emit(op->c->events, &ref, warning, reason, "%s", msg);
}

/* The Provisioning event says a volume is on its way. A provisioning that ends within
 * ANNOUNCE_DELAY_MS needs none (its ProvisioningSucceeded or ProvisioningFailed says it all),
 * which saves one API write per volume; a slower one gets it once the delay has passed. */
#define ANNOUNCE_DELAY_MS 500

/* Provisionings are announced in the order they started (their start times never decrease),
 * so the head of c->announcing is always the next one due. */
static void on_announce(uv_timer_t *t)
{
    struct hp_controller *c = hp_container_of(t, struct hp_controller, announce);
    uint64_t now = uv_now(c->loop);
    struct op *op;

    while ((op = hp_list_first_entry(&c->announcing, struct op, announce_link)) != NULL) {
        if (op->announce_due > now) {
            (void)uv_timer_start(&c->announce, on_announce, op->announce_due - now, 0);
            return;
        }
        char msg[1200];
        hp_list_remove(&op->announce_link);
        if (op->req && hp_kube_req_queued(op->req)) {
            /* Waiting in our own write queue (a client-side limit): the PV is written once it
             * leaves, and its ProvisioningSucceeded comes then; looked at again later. */
            op->announce_due = now + ANNOUNCE_DELAY_MS;
            hp_list_insert_tail(&c->announcing, &op->announce_link);
            continue;
        }
        snprintf(msg, sizeof(msg), "External provisioner is provisioning volume for claim \"%s\"",
                 op->claim_key);
        claim_event(op, 0, "Provisioning", msg);
    }
}

static void announce_later(struct op *op)
{
    struct hp_controller *c = op->c;

    op->announce_due = op->start_ms + ANNOUNCE_DELAY_MS;
    hp_list_insert_tail(&c->announcing, &op->announce_link);
    if (!uv_is_active((uv_handle_t *)&c->announce)) {
        uint64_t now = uv_now(c->loop);
        (void)uv_timer_start(&c->announce, on_announce,
                             op->announce_due > now ? op->announce_due - now : 0, 0);
    }
}

static void volume_event(struct op *op, int warning, const char *reason, const char *msg)
{
    struct hp_object_ref ref = {.kind = "PersistentVolume", .api_version = "v1",
                                .name = op->pv_name};
    hp_events_emit(op->c->events, &ref, warning, reason, "%s", msg);
}

/* Keeps track of provisionings that made a directory without its PV (struct unfinished). */
static void track_unfinished(struct op *op, enum outcome out)
{
    struct hp_controller *c = op->c;
    if (!op->claim_key || !op->pv_name || (op->kind != OP_PROVISION && op->kind != OP_ORPHAN))
        return;
    struct unfinished *have = hp_store_get(c->unfinished, op->claim_key);
    if (out == OUT_OK) {
        if (have && strcmp(have->pv, op->pv_name) == 0)
            unfinished_free(hp_store_remove(c->unfinished, op->claim_key));
        return;
    }
    if (op->kind != OP_PROVISION || !op->dir_made || (have && !strcmp(have->pv, op->pv_name)))
        return;
    struct unfinished *u = hp_xcalloc(1, sizeof(*u));
    u->claim_key = hp_xstrdup(op->claim_key);
    u->claim_uid = hp_xstrdup(op->claim_uid);
    u->pv = hp_xstrdup(op->pv_name);
    /* An entry of an earlier claim of this name is replaced: its record stays for the sweep. */
    unfinished_free(hp_store_put(c->unfinished, u));
}

/* Operations that must not be abandoned (reads back, cleanups, expansion) retry what another
 * operation would give up on. */
static enum outcome retry_on_give_up(enum outcome out)
{
    return out == OUT_GIVE_UP ? OUT_RETRY : out;
}

/* Ends an operation: reports the outcome to the queue and frees the op. */
static void op_finish(struct op *op, enum outcome out, uint64_t retry_after_ms)
{
    struct hp_controller *c = op->c;
    const char *qkey = op->qkey;
    double secs = (double)(uv_now(c->loop) - op->start_ms) / 1000.0;
    const char *cls = op->class_name ? op->class_name : "";

    track_unfinished(op, out);

    if (op->kind == OP_PROVISION)
        hp_metrics_provision(cls, "", out == OUT_OK, secs);
    else if (op->kind == OP_DELETE)
        hp_metrics_delete(cls, out == OUT_OK, secs);

    if (out == OUT_RETRY || out == OUT_RETRY_AFTER) {
        unsigned failures = hp_workqueue_num_requeues(c->queue, qkey) + 1;
        unsigned limit = (unsigned)c->cfg->failed_retry_threshold;
        if (limit && failures >= limit) {
            char msg[1200];
            snprintf(msg, sizeof(msg), "giving up after %u failed attempts: %s", failures,
                     op->last_error ? op->last_error : "unknown error");
            hp_log_error("controller: %s key=%s", msg, qkey);
            if (op->kind == OP_PROVISION)
                claim_event(op, 1, "ProvisioningFailed", msg);
            else
                volume_event(op, 1, "VolumeFailedDelete", msg);
            out = OUT_GIVE_UP;
        }
    }
    switch (out) {
    case OUT_OK:
    case OUT_GIVE_UP:
        hp_workqueue_forget(c->queue, qkey);
        break;
    case OUT_RETRY:
    case OUT_WAIT:
        hp_workqueue_add_rate_limited(c->queue, qkey);
        break;
    case OUT_RETRY_AFTER:
        /* Honour Retry-After, but keep counting failures for the threshold. (A separate
         * add_after after add_rate_limited would be ignored: the earlier wake-up wins.) */
        hp_workqueue_add_rate_limited_min(c->queue, qkey, retry_after_ms);
        break;
    }
    op_free(op);
    hp_workqueue_done(c->queue, qkey);
}

/* Ends a reconcile that had nothing to do. */
static void nothing_to_do(struct hp_controller *c, const char *qkey)
{
    hp_workqueue_forget(c->queue, qkey);
    hp_workqueue_done(c->queue, qkey);
}

/* Classifies an API response: OK, retry (5xx, 429, network), or permanent. */
static enum outcome api_outcome(struct op *op, const char *what, int status,
                                const struct hp_kube_response *resp, uint64_t *retry_after)
{
    char reason[64] = "", message[512] = "";
    *retry_after = 0;
    if (status < 0) {
        set_error(op, "%s: %s", what, resp->error ? resp->error : strerror(-status));
        return OUT_RETRY;
    }
    if (resp->code >= 200 && resp->code < 300)
        return OUT_OK;
    hp_kube_status_parse(resp->body, reason, sizeof(reason), message, sizeof(message));
    set_error(op, "%s: HTTP %ld %s%s%s", what, resp->code, reason, message[0] ? ": " : "",
              message);
    if (resp->code == 429 || resp->code == 503 || resp->code == 504) {
        *retry_after = resp->retry_after_ms;
        return *retry_after ? OUT_RETRY_AFTER : OUT_RETRY;
    }
    /* 401/403 are credentials or RBAC an administrator fixes without touching the claim:
     * keep retrying with backoff rather than giving up until the next resync. */
    if (resp->code >= 500 || resp->code == 409 || resp->code == 408 || resp->code == 401 ||
        resp->code == 403)
        return OUT_RETRY;
    return OUT_GIVE_UP;
}

/* Sends method to the operation's PV object; cb gets the response. */
static void pv_request(struct op *op, const char *method, const char *body, const char *ctype,
                       hp_kube_response_cb cb)
{
    char *p = hp_xasprintf("/api/v1/persistentvolumes/%s", op->pv_name);
    op->req = hp_kube_request(op->c->client, method, p, body, ctype, cb, op);
    free(p);
}

/* Queues a filesystem request of the operation; cb takes it back. */
static void run_fs(struct op *op, struct hp_fsop *f, hp_hostpath_done_cb cb)
{
    op->fsop = f;
    hp_hostpath_submit(op->c->hostpath, f, cb, op);
}

/* A filesystem request of the operation finished: hands it back to the caller (who frees it).
 * When the controller is stopping, the operation ends here (its queue is gone) and NULL is
 * returned. */
static struct hp_fsop *fs_ended(struct op *op)
{
    struct hp_fsop *f = op->fsop;
    op->fsop = NULL;
    if (!op->c->stopping)
        return f;
    hp_fsop_free(f);
    op_free(op);
    return NULL;
}

/* The journal changed on disk: mirror the record the request left (or its absence). */
static void index_record(struct hp_controller *c, const struct hp_fsop *f)
{
    if (f->have_out)
        hp_volindex_put_record(c->index, &f->out);
}

/* ---- provisioning ------------------------------------------------------------------------- */

static void on_cleanup_done(struct hp_fsop *f, int status, void *data)
{
    struct op *op = data;
    if (!(f = fs_ended(op)))
        return;
    if (status < 0) {
        char msg[1200];
        snprintf(msg, sizeof(msg), "failed to clean up directory %s: %s", f->abs, f->msg);
        hp_log_error("controller: %s claim=%s", msg, op->claim_key);
        claim_event(op, 1, "ProvisioningCleanupFailed", msg);
        hp_metrics_fs_error("cleanup", -status);
    } else {
        if (f->have_out)
            index_record(op->c, f); /* a taken-over directory is retained again */
        else
            hp_volindex_remove_record(op->c->index, op->pv_name);
        if (f->already_done)
            hp_log_v(2, "controller: nothing of this provisioning to clean up claim=%s pv=%s",
                     op->claim_key, op->pv_name);
        else if (f->have_out)
            hp_log_info("controller: directory %s is retained again (its new PersistentVolume "
                        "was not created) claim=%s",
                        f->abs, op->claim_key);
        else
            hp_log_info("controller: removed the directory this provisioning made claim=%s "
                        "path=%s reason=%s",
                        op->claim_key, f->abs,
                        op->last_error ? "the API server refused the PersistentVolume"
                                       : "the claim is gone");
    }
    int failed = status < 0;
    hp_fsop_free(f);
    op_finish(op, failed ? OUT_RETRY : (op->last_error ? OUT_GIVE_UP : OUT_OK), 0);
}

/* The claim went away (or the PV was refused): undo what this provisioning made, and only
 * that (fsops checks the record names this PV and claim). */
static void provision_cleanup(struct op *op)
{
    struct hp_fsop *f = hp_fsop_new(HP_FSOP_CLEANUP, op->root->path);
    f->rec.pv = hp_xstrdup(op->pv_name);
    f->rec.claim_uid = hp_xstrdup(op->claim_uid);
    run_fs(op, f, on_cleanup_done);
}

/* The claim is gone before its PV was created; but an earlier attempt may have created it (a
 * lost reply). The volume is then the deletion path's business, not the cleanup's. */
static void on_pv_checked_before_cleanup(struct hp_kube_req *req, int status,
                                         const struct hp_kube_response *resp, void *data)
{
    struct op *op = data;
    uint64_t ra;
    op->req = NULL;
    if (status == 0 && resp->code == 404) {
        provision_cleanup(op);
        return;
    }
    enum outcome out = api_outcome(op, "read PersistentVolume", status, resp, &ra);
    if (out == OUT_OK && !answer_holds(op->c, resp, op->pv_name, op->root, op->rel)) {
        hp_log_info("controller: the PersistentVolume of this claim was made on another node "
                    "or path; this node's unfinished directory is removed claim=%s pv=%s",
                    op->claim_key, op->pv_name);
        provision_cleanup(op);
        return;
    }
    if (out == OUT_OK) {
        hp_log_info("controller: the claim is gone but its PersistentVolume exists; it is "
                    "released and deleted like any other claim=%s pv=%s",
                    op->claim_key, op->pv_name);
        op_finish(op, OUT_OK, 0);
        return;
    }
    op_finish(op, retry_on_give_up(out), ra);
}

static void provision_succeeded(struct op *op)
{
    char msg[1024];
    if (op->adopt)
        snprintf(msg, sizeof(msg),
                 "Successfully provisioned volume %s, reusing the retained directory %s of "
                 "volume %s (StorageClass reuseRetained)",
                 op->pv_name, op->path, op->adopt);
    else
        snprintf(msg, sizeof(msg), "Successfully provisioned volume %s", op->pv_name);
    claim_event(op, 0, "ProvisioningSucceeded", msg);
    hp_log_info("controller: provisioned volume claim=%s pv=%s path=%s%s%s", op->claim_key,
                op->pv_name, op->path, op->adopt ? " reused-from=" : "",
                op->adopt ? op->adopt : "");
    op_finish(op, OUT_OK, 0);
}

/* Puts the PV of an API answer into the store unless the watch already delivered it (its copy
 * is then newer): until the watch event arrives, a claim update would otherwise find no PV and
 * provision the claim again. Returns the stored volume, or NULL when the body is no PV. */
static const struct hp_volume *store_answered_volume(struct op *op,
                                                     const struct hp_kube_response *resp)
{
    const struct hp_volume *have = hp_informer_get(op->c->volumes, op->pv_name);
    if (have)
        return have;
    struct hp_json j;
    hp_json_init(&j);
    struct hp_volume *v =
        hp_json_parse(&j, resp->body, resp->body_len) == 0 ? hp_volume_decode(&j, 0) : NULL;
    hp_json_free(&j);
    if (!v || strcmp(v->name, op->pv_name) != 0) {
        free(v);
        return NULL;
    }
    have = hp_informer_put_if_absent(op->c->volumes, v);
    index_volume(op->c, have);
    return have;
}

static void on_pv_get(struct hp_kube_req *req, int status, const struct hp_kube_response *resp,
                      void *data)
{
    struct op *op = data;
    uint64_t ra;
    op->req = NULL;
    enum outcome out = api_outcome(op, "read back existing PersistentVolume", status, resp, &ra);
    if (out != OUT_OK) {
        op_finish(op, retry_on_give_up(out), ra);
        return;
    }
    const struct hp_volume *v = store_answered_volume(op, resp);
    if (v && strcmp(v->claim_uid, op->claim_uid) == 0) {
        provision_succeeded(op);
        return;
    }
    set_error(op, "PersistentVolume %s already exists and belongs to another claim",
              op->pv_name);
    claim_event(op, 1, "ProvisioningFailed", op->last_error);
    op_finish(op, OUT_GIVE_UP, 0);
}

static void on_pv_created(struct hp_kube_req *req, int status, const struct hp_kube_response *resp,
                          void *data)
{
    struct op *op = data;
    uint64_t ra;
    op->req = NULL;
    if (status == 0 && resp->code == 409) {
        /* Created by an earlier attempt (we crashed or the reply was lost): read it back. */
        pv_request(op, "GET", NULL, NULL, on_pv_get);
        return;
    }
    enum outcome out = api_outcome(op, "create PersistentVolume", status, resp, &ra);
    if (out == OUT_OK) {
        hp_crashpoint("provision-pv-created");
        (void)store_answered_volume(op, resp); /* the binder annotates the claim at once */
        provision_succeeded(op);
        return;
    }
    char msg[1200];
    snprintf(msg, sizeof(msg), "failed to provision volume with StorageClass \"%s\": %s",
             op->class_name, op->last_error);
    hp_log_warn("controller: %s claim=%s", msg, op->claim_key);
    claim_event(op, 1, "ProvisioningFailed", msg);
    if (out == OUT_GIVE_UP) {
        /* The server refuses this PV for good: undo what this attempt made. */
        provision_cleanup(op);
        return;
    }
    op_finish(op, out, ra);
}

static int reschedulable(int err)
{
    return err == ENOSPC || err == EDQUOT || err == EROFS || err == EIO;
}

static void on_reschedule_patched(struct hp_kube_req *req, int status,
                                  const struct hp_kube_response *resp, void *data)
{
    struct op *op = data;
    uint64_t ra;
    op->req = NULL;
    if (api_outcome(op, "remove selected-node annotation", status, resp, &ra) != OUT_OK)
        hp_log_warn("controller: could not ask the scheduler to pick another node claim=%s",
                    op->claim_key);
    op_finish(op, OUT_RETRY, 0);
}

static void rescan_root(struct hp_controller *c, struct root *r);

static void provision_fs_failed(struct op *op, const struct hp_fsop *f)
{
    struct hp_controller *c = op->c;
    char msg[1400];
    const struct hp_claim *cl = hp_informer_get(c->claims, op->claim_key);
    int conflict = f->status == -EEXIST || f->status == -EPERM;
    int resched = !conflict && cl && cl->selected_node && reschedulable(-f->status) &&
                  c->cfg->node_name;
    set_error(op, "%s", f->msg);
    if (f->status == -ENODEV)
        rescan_root(c, op->root); /* which filesystem is there now, and is it ours? */
    snprintf(msg, sizeof(msg), "failed to provision volume with StorageClass \"%s\": %s%s",
             op->class_name, f->msg,
             resched ? "; asking the scheduler to pick another node" : "");
    hp_log_warn("controller: %s claim=%s", msg, op->claim_key);
    if (!conflict)
        hp_metrics_fs_error("create", -f->status);
    claim_event(op, 1, "ProvisioningFailed", msg);
    if (resched) {
        reschedule(op, cl);
        return;
    }
    /* A directory that is somebody else's stays so until a person acts: no hot retry (the
     * resync tries again). A root on another filesystem is retried once its journal is read
     * again: placement then skips it if its disk is gone (and per node asks the scheduler). */
    op_finish(op, conflict ? OUT_GIVE_UP : OUT_RETRY, 0);
}

/* A copy of a packed list ("a\0b\0\0"), or NULL for NULL or an empty one. */
static char *packed_dup(const char *packed)
{
    const char *p = packed;
    if (!p || !*p)
        return NULL;
    while (*p)
        p = hp_packed_next(p);
    char *copy = hp_xmalloc((size_t)(p - packed) + 1);
    memcpy(copy, packed, (size_t)(p - packed) + 1);
    return copy;
}

/* The PersistentVolume of a provisioning for claim cl at op->path, as JSON text (caller frees),
 * or NULL when a string is not valid UTF-8. */
static char *pv_body(const struct op *op, const struct hp_claim *cl)
{
    const struct hp_config *cfg = op->c->cfg;
    struct hp_pv_spec spec = {
        .name = op->pv_name,
        .claim = cl,
        .class_name = op->class_name,
        .mount_options = op->mount_options,
        .provisioner = cfg->provisioner_name,
        .identity = cfg->identity,
        .path = op->path,
        .node = op->node,
        .on_delete = hp_on_delete_name(op->on_delete),
        .reclaim = op->reclaim,
        .add_finalizer = cfg->add_finalizer,
    };
    return hp_pv_build(&spec);
}

static void on_dir_created(struct hp_fsop *f, int status, void *data)
{
    struct op *op = data;
    struct hp_controller *c = op->c;
    if (!(f = fs_ended(op)))
        return;
    root_seen(c, op->root, &f->stats);
    if (status < 0) {
        provision_fs_failed(op, f);
        hp_fsop_free(f);
        return;
    }
    index_record(c, f);
    op->dir_made = 1;
    if (!op->root->fs_known) { /* a root made with its first volume */
        op->root->fs = f->fs;
        op->root->fs_known = 1;
    }
    const struct hp_claim *cl = hp_informer_get(c->claims, op->claim_key);
    if (!cl || strcmp(cl->uid, op->claim_uid) != 0 || cl->deleting) {
        hp_fsop_free(f);
        pv_request(op, "GET", NULL, NULL, on_pv_checked_before_cleanup);
        return;
    }
    if (f->have_out && strcmp(f->out.path, op->rel) != 0) {
        /* The record of an earlier attempt names another path (the class changed): it wins,
         * and the PV says where the directory is (fsops made its absolute path). */
        free(op->rel);
        op->rel = hp_xstrdup(f->out.path);
        free(op->path);
        op->path = hp_xstrdup(f->abs);
        free(op->pv_body);
        op->pv_body = pv_body(op, cl);
        if (!op->pv_body) {
            hp_fsop_free(f);
            set_error(op, "the directory path %s is not valid UTF-8", op->path);
            op_finish(op, OUT_GIVE_UP, 0);
            return;
        }
    }
    hp_fsop_free(f);
    op->req = hp_kube_request(c->client, "POST", "/api/v1/persistentvolumes", op->pv_body, NULL,
                              on_pv_created, op);
}

/* One line naming what holds a colliding path, for the event. */
static void describe_conflict(struct hp_controller *c, const struct hp_volindex_conflict *k,
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

/* Refuses a claim for good (until the next resync or change): event, log, give up. */
static void refuse_claim(struct op *op, const struct hp_claim *cl, const char *cls,
                         const char *why)
{
    struct hp_object_ref ref;
    char *msg = hp_xasprintf("failed to provision volume with StorageClass \"%s\": %s", cls, why);
    hp_log_warn("controller: %s claim=%s", msg, cl->key);
    claim_ref(cl, &ref);
    hp_events_emit(op->c->events, &ref, 1, "ProvisioningFailed", "%s", msg);
    free(msg);
    set_error(op, "%s", why);
    op_finish(op, OUT_GIVE_UP, 0);
}

/* Asks the scheduler to pick another node for a claim with a selected node (per-node mode):
 * removes the annotation; the operation ends when the patch is answered. */
static void reschedule(struct op *op, const struct hp_claim *cl)
{
    char *p = hp_xasprintf("/api/v1/namespaces/%s/persistentvolumeclaims/%s", cl->namespace_,
                           cl->name);
    const char *body = "{\"metadata\":{\"annotations\":{\"" HP_ANN_SELECTED_NODE
                       "\":null,\"" HP_ANN_ALPHA_SELECTED_NODE "\":null}}}";
    op->req = hp_kube_request(op->c->client, "PATCH", p, body, "application/merge-patch+json",
                              on_reschedule_patched, op);
    free(p);
}

/* The root a new volume of need bytes goes on: among this node's paths (or the class's
 * nodePath), the one with the most room that fits. NULL when none: the claim got a
 * ProvisioningFailed event with every path's numbers and, per node, was handed back to the
 * scheduler; the operation is finished. */
static struct root *place(struct op *op, const struct hp_claim *cl, const struct hp_class *cls,
                          const struct hp_class_params *params, uint64_t need)
{
    struct hp_controller *c = op->c;
    struct hp_place_path *cand = hp_xcalloc(c->nroots + 1, sizeof(*cand));
    struct root **which = hp_xcalloc(c->nroots + 1, sizeof(*which));
    size_t n = 0;
    char why[2048];

    for (size_t i = 0; i < c->nroots; i++) {
        struct root *r = c->roots[i];
        if (params->node_path && !hp_policy_same_path(r->path, params->node_path))
            continue;
        if (r->retired && !params->node_path)
            continue;
        struct hp_place_path *p = &cand[n];
        p->path = r->path;
        p->budget = r->budget;
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
        which[n++] = r;
    }
    if (params->node_path && n == 0) {
        struct hp_buf b;
        hp_buf_init(&b, 0);
        for (size_t i = 0; i < c->nroots; i++)
            if (!c->roots[i]->retired)
                (void)hp_buf_printf(&b, "%s%s", b.len ? ", " : "", c->roots[i]->path);
        snprintf(why, sizeof(why), "parameter nodePath=\"%s\" is not one of this node's paths "
                                   "(%s)",
                 params->node_path, b.data ? b.data : "none");
        hp_buf_free(&b);
        free(cand);
        free(which);
        refuse_claim(op, cl, cls->name, why);
        return NULL;
    }
    int i = hp_policy_place(cand, n, need, why, sizeof(why));
    struct root *r = i >= 0 ? which[i] : NULL;
    free(cand);
    free(which);
    if (r)
        return r;
    int resched = cl->selected_node && cl->selected_node[0] && c->cfg->node_name;
    char *msg = hp_xasprintf("failed to provision volume with StorageClass \"%s\": no room: "
                             "%s%s",
                             cls->name, why,
                             resched ? "; asking the scheduler to pick another node" : "");
    hp_log_warn("controller: %s claim=%s", msg, cl->key);
    claim_event(op, 1, "ProvisioningFailed", msg);
    set_error(op, "no room: %s", why);
    free(msg);
    if (resched)
        reschedule(op, cl);
    else
        op_finish(op, OUT_RETRY, 0);
    return NULL;
}

/* ---- online expansion -------------------------------------------------------------------- */

static void expand_failed(struct op *op, const char *why, enum outcome out)
{
    char *msg = hp_xasprintf("resize volume %s failed: %s", op->pv_name, why);
    hp_log_warn("controller: %s claim=%s", msg, op->claim_key);
    claim_event(op, 1, "VolumeResizeFailed", msg);
    set_error(op, "%s", why);
    free(msg);
    op_finish(op, out, 0);
}

static void on_claim_status_patched(struct hp_kube_req *req, int status,
                                    const struct hp_kube_response *resp, void *data)
{
    struct op *op = data;
    uint64_t ra;
    op->req = NULL;
    enum outcome out = api_outcome(op, "update claim status.capacity", status, resp, &ra);
    if (out != OUT_OK) {
        expand_failed(op, op->last_error, retry_on_give_up(out));
        return;
    }
    char msg[512];
    snprintf(msg, sizeof(msg), "resize volume %s successful", op->pv_name);
    claim_event(op, 0, "VolumeResizeSuccessful", msg);
    hp_log_info("controller: expanded volume claim=%s pv=%s size=%s", op->claim_key, op->pv_name,
                op->size);
    op_finish(op, OUT_OK, 0);
}

/* The PV has the new size: the claim's status says so last, as the external resizer does:
 * status.capacity and status.allocatedResources (what Kubernetes >= 1.34, where
 * RecoverVolumeExpansionFailure is GA, reads as the size the volume was expanded to; no node
 * expansion follows, so no allocatedResourceStatuses entry). */
static void patch_claim_status(struct op *op)
{
    const char *slash = strchr(op->claim_key, '/');
    char *p = hp_xasprintf("/api/v1/namespaces/%.*s/persistentvolumeclaims/%s/status",
                           (int)(slash - op->claim_key), op->claim_key, slash + 1);
    char *body = hp_xasprintf("{\"status\":{\"capacity\":{\"storage\":\"%s\"},"
                              "\"allocatedResources\":{\"storage\":\"%s\"}}}",
                              op->size, op->size);
    op->req = hp_kube_request(op->c->client, "PATCH", p, body, "application/merge-patch+json",
                              on_claim_status_patched, op);
    free(body);
    free(p);
}

static void on_pv_resized(struct hp_kube_req *req, int status, const struct hp_kube_response *resp,
                          void *data)
{
    struct op *op = data;
    uint64_t ra;
    op->req = NULL;
    enum outcome out = api_outcome(op, "update PersistentVolume spec.capacity", status, resp, &ra);
    if (out != OUT_OK) {
        expand_failed(op, op->last_error, retry_on_give_up(out));
        return;
    }
    patch_claim_status(op);
}

/* A bound claim of an expandable class asks for more than its volume has: check the room for
 * the difference, grow the PV, then the claim's status. Returns 1 when it took the key. */
static int maybe_expand(struct hp_controller *c, const char *qkey, const struct hp_claim *cl,
                        const struct hp_class *cls)
{
    char rel[4096], err[256], a[32], b[32];
    uint64_t want = 0, pv_cap = 0, st_cap = 0;
    const struct hp_volume *v = hp_informer_get(c->volumes, cl->volume_name);
    if (!cls || !cls->allow_expansion || !v || cl->deleting ||
        strcmp(cls->provisioner, c->cfg->provisioner_name) != 0 ||
        strcmp(v->provisioned_by, c->cfg->provisioner_name) != 0 ||
        strcmp(v->identity, c->cfg->identity) != 0 || strcmp(v->claim_uid, cl->uid) != 0 ||
        hp_quantity_parse(cl->request, &want, err, sizeof(err)) < 0 ||
        hp_quantity_parse(v->capacity, &pv_cap, NULL, 0) < 0)
        return 0;
    (void)hp_quantity_parse(cl->status_capacity, &st_cap, NULL, 0);
    struct root *root = root_of(c, v->path, rel, sizeof(rel));
    if (!root || (want <= pv_cap && want <= st_cap))
        return 0;
    if (want <= pv_cap) { /* the PV grew before a crash: only the claim's status is left */
        struct op *op = op_new(c, qkey, OP_EXPAND);
        op->claim_key = hp_xstrdup(cl->key);
        op->claim_uid = hp_xstrdup(cl->uid);
        op->pv_name = hp_xstrdup(v->name);
        op->size = hp_xstrdup(v->capacity);
        patch_claim_status(op);
        return 1;
    }
    struct op *op = op_new(c, qkey, OP_EXPAND);
    op->claim_key = hp_xstrdup(cl->key);
    op->claim_uid = hp_xstrdup(cl->uid);
    op->pv_name = hp_xstrdup(v->name);
    op->class_name = hp_xstrdup(cls->name);
    op->size = hp_xstrdup(cl->request);
    op->root = root;
    char msg[512];
    snprintf(msg, sizeof(msg), "External resizer is resizing volume %s", v->name);
    claim_event(op, 0, "Resizing", msg);
    /* The volume's own capacity is already counted in reserved: only the growth needs room. */
    struct hp_place_path p = {root->path, root->budget, root->reserved, root->stats.ok,
                              root->stats.size, root->stats.free, NULL};
    uint64_t room = hp_policy_room(&p), grow = want - pv_cap;
    if (grow > room) {
        char why[512];
        snprintf(why, sizeof(why), "needs %s more on %s, which has %s left",
                 hp_quantity_format(grow, a, sizeof(a)), root->path,
                 hp_quantity_format(room, b, sizeof(b)));
        expand_failed(op, why, OUT_RETRY);
        return 1;
    }
    op->reserved = grow; /* held until the PV's new size is counted */
    root->reserved += grow;
    char *body = hp_xasprintf("{\"spec\":{\"capacity\":{\"storage\":\"%s\"}}}", cl->request);
    pv_request(op, "PATCH", body, "application/merge-patch+json", on_pv_resized);
    free(body);
    return 1;
}

/* The claim of an unfinished provisioning is gone (or is another claim of the same name now):
 * unless the PV was created after all (a lost reply), the directory this provisioning made is
 * removed, as when the claim goes while its directory is being made. */
static void clean_unfinished(struct hp_controller *c, const char *qkey, const struct unfinished *u)
{
    const struct hp_record *r = hp_volindex_record(c->index, u->pv);
    struct root *root = r ? root_named(c, r->root) : NULL;
    if (!root || !works_on_disks(c, c->cfg->node_name)) { /* the directory is on our disk */
        if (!r)
            unfinished_free(hp_store_remove(c->unfinished, u->claim_key));
        nothing_to_do(c, qkey);
        return;
    }
    struct op *op = op_new(c, qkey, OP_ORPHAN);
    op->claim_key = hp_xstrdup(u->claim_key);
    op->claim_uid = hp_xstrdup(u->claim_uid);
    op->pv_name = hp_xstrdup(u->pv);
    op->class_name = hp_xstrdup(r->class_name ? r->class_name : "");
    op->rel = hp_xstrdup(r->path);
    op->root = root;
    op->path = hp_fsop_path(root->path, r->path);
    hp_log_v(2, "controller: the claim of an unfinished provisioning is gone claim=%s pv=%s",
             u->claim_key, u->pv);
    pv_request(op, "GET", NULL, NULL, on_pv_checked_before_cleanup);
}

/* The claim of an unfinished provisioning is served elsewhere now: another node was selected
 * for it, or a PV of its name that does not hold this node's directory exists. */
static int moved_away(const struct hp_controller *c, const struct hp_claim *cl,
                      const struct unfinished *u)
{
    const char *node = c->cfg->node_name;
    if (node && cl->selected_node && cl->selected_node[0] && strcmp(cl->selected_node, node) != 0)
        return 1;
    const struct hp_volume *v = hp_informer_get(c->volumes, u->pv);
    const struct hp_record *r = hp_volindex_record(c->index, u->pv);
    return v && r && !volume_holds(c, v, root_named(c, r->root), r->path);
}

static void reconcile_claim(struct hp_controller *c, const char *qkey, const char *key)
{
    const struct hp_claim *cl = hp_informer_get(c->claims, key);
    const struct hp_class *cls = NULL;
    struct hp_object_ref ref;
    char err[1024], pv_name[128], rel[4096];
    struct hp_class_params params;
    struct hp_serve_env env = {c->cfg->provisioner_name, c->cfg->node_name, c->leading};

    const struct unfinished *u = hp_store_get(c->unfinished, key);
    if (u && (!cl || strcmp(cl->uid, u->claim_uid) != 0 || cl->deleting || moved_away(c, cl, u))) {
        clean_unfinished(c, qkey, u);
        return;
    }
    if (!c->node_held) { /* another replica on this node serves its claims now */
        nothing_to_do(c, qkey);
        return;
    }
    if (cl)
        cls = hp_informer_get(c->classes, cl->class_name ? cl->class_name : "");
    if (cl && cl->volume_name[0] && maybe_expand(c, qkey, cl, cls))
        return;
    if (!cl || hp_policy_skip_claim(cl, cls, &env)) {
        nothing_to_do(c, qkey);
        return;
    }
    claim_ref(cl, &ref);
    const struct class_keys *ck = hp_store_get(c->class_keys, cls->name);
    if (!cl->maps_kept && ck && (ck->ann || ck->labels)) {
        /* Cached before its class said which labels and annotations to keep: the claims are
         * being listed again, and this one is reconciled when its full copy arrives. */
        nothing_to_do(c, qkey);
        return;
    }
    if (hp_pv_name(cl, pv_name, sizeof(pv_name)) < 0 || hp_informer_get(c->volumes, pv_name) ||
        hp_store_get(c->gone, pv_name)) {
        /* Already provisioned: the binder will bind it (or we deleted its PV, and this copy
         * of the claim is stale: remember_gone). */
        nothing_to_do(c, qkey);
        return;
    }
    struct op *op = op_new(c, qkey, OP_PROVISION);
    op->claim_key = hp_xstrdup(key);
    op->claim_uid = hp_xstrdup(cl->uid);
    op->pv_name = hp_xstrdup(pv_name);
    op->class_name = hp_xstrdup(cls->name);

    enum hp_reclaim reclaim = cls->reclaim;
    if (reclaim == HP_RECLAIM_UNSET)
        reclaim = c->cfg->default_reclaim_policy ? c->cfg->default_reclaim_policy
                                                 : HP_RECLAIM_DELETE;
    if (cl->selector) {
        refuse_claim(op, cl, cls->name,
                     "the claim sets spec.selector, and a dynamically provisioned volume cannot "
                     "be chosen by labels; remove the selector, or bind the claim to a "
                     "PersistentVolume made by hand");
        return;
    }
    if (cl->data_source) {
        refuse_claim(op, cl, cls->name,
                     "the claim sets spec.dataSource or dataSourceRef (a clone or a snapshot "
                     "restore), and hostPath volumes cannot be pre-filled: rather than hand out "
                     "an empty volume, nothing is provisioned; remove the data source to get an "
                     "empty volume");
        return;
    }
    if (cl->block) {
        refuse_claim(op, cl, cls->name,
                     "volumeMode Block is not supported: hostPath volumes are directories; use "
                     "volumeMode Filesystem");
        return;
    }
    if (reclaim == HP_RECLAIM_RECYCLE) {
        refuse_claim(op, cl, cls->name,
                     "reclaimPolicy Recycle is not supported (it would hand the data to a "
                     "scrubber pod); use Delete or Retain");
        return;
    }
    if (hp_policy_class_params(cls->parameters, &params, err, sizeof(err)) < 0 ||
        hp_pathpattern_render(params.path_pattern, cl, pv_name, rel, sizeof(rel), err,
                              sizeof(err)) < 0) {
        refuse_claim(op, cl, cls->name, err);
        return;
    }
    uint64_t need = 0;
    if (hp_quantity_parse(cl->request, &need, err, sizeof(err)) < 0) {
        char why[1100];
        snprintf(why, sizeof(why), "spec.resources.requests.storage: %s", err);
        refuse_claim(op, cl, cls->name, why);
        return;
    }
    struct root *root = NULL;
    if (params.reuse_retained) {
        const struct hp_record *r =
            hp_volindex_find_retained(c->index, cl->namespace_, cl->name, cls->name);
        if (r && !hp_informer_get(c->volumes, r->pv) && (root = root_named(c, r->root))) {
            op->adopt = hp_xstrdup(r->pv);
            snprintf(rel, sizeof(rel), "%s", r->path);
        }
    }
    if (!root && !(root = place(op, cl, cls, &params, need)))
        return; /* refused, with an event */
    op->root = root;
    op->reserved = need;
    root->reserved += need;
    root_metrics(c, root);
    char *abs = hp_fsop_path(root->path, rel);
    struct hp_volindex_conflict k;
    int conflict = hp_volindex_conflict(c->index, abs, pv_name, op->adopt, &k);
    if (conflict) {
        char what[900];
        describe_conflict(c, &k, what, sizeof(what));
        char *why = hp_xasprintf("the volume directory %s %s %s; one directory, one owner: "
                                 "choose a pathPattern that gives every claim its own directory "
                                 "(e.g. include {{.PVName}})",
                                 rel, hp_policy_relation_words(k.relation), what);
        refuse_claim(op, cl, cls->name, why);
        free(why);
        free(abs);
        return;
    }
    hp_volindex_hold(c->index, HP_SRC_RESERVED, pv_name, abs);
    op->rel = hp_xstrdup(rel);
    op->path = abs;
    const char *node = cl->selected_node && cl->selected_node[0] ? cl->selected_node
                                                                 : c->cfg->node_name;
    op->node = node ? hp_xstrdup(node) : NULL;
    op->mount_options = packed_dup(cls->mount_options);
    op->reclaim = reclaim;
    op->on_delete = params.on_delete;
    op->pv_body = pv_body(op, cl);
    if (!op->pv_body) {
        refuse_claim(op, cl, cls->name, "the claim holds a string that is not valid UTF-8");
        return;
    }
    announce_later(op);

    struct hp_fsop *f = hp_fsop_new(HP_FSOP_PROVISION, root->path);
    f->create_root = 1;
    if (root->fs_known) {
        f->have_expect_fs = 1;
        f->expect_fs = root->fs;
    }
    f->rec.path = hp_xstrdup(rel);
    f->rec.pv = hp_xstrdup(pv_name);
    f->rec.claim_uid = hp_xstrdup(cl->uid);
    f->rec.claim_namespace = hp_xstrdup(cl->namespace_);
    f->rec.claim_name = hp_xstrdup(cl->name);
    f->rec.class_name = hp_xstrdup(cls->name);
    f->rec.identity = hp_xstrdup(c->cfg->identity);
    f->rec.on_delete = params.on_delete;
    f->mode = params.mode;
    f->uid = params.uid;
    f->gid = params.gid;
    f->set_owner = params.set_owner;
    f->adopt = op->adopt ? hp_xstrdup(op->adopt) : NULL;
    run_fs(op, f, on_dir_created);
}

/* ---- deletion ----------------------------------------------------------------------------- */

/* First step of a response in the finalizer chain: returns 1 when the chain goes on; else the
 * operation is finished (a PV that is already gone is success, an error is retried). */
static int pv_step_ok(struct op *op, int status, const struct hp_kube_response *resp,
                      const char *what);

static void on_forgotten(struct hp_fsop *f, int status, void *data)
{
    struct op *op = data;
    if (!(f = fs_ended(op)))
        return;
    if (status < 0) /* the sweep finds the "deleting" record and tries again */
        hp_log_warn("controller: could not remove the ownership record of a deleted volume "
                    "pv=%s err=%s",
                    op->pv_name, f->msg);
    else
        hp_volindex_remove_record(op->c->index, op->pv_name);
    hp_fsop_free(f);
    op_finish(op, OUT_OK, 0);
}

/* The PV object is gone: a deleted volume's record goes too; a retained or archived one stays
 * (it is how the directory stays accounted for). */
/* A PV this process deleted stays in the caches until its watch event arrives, and its claim
 * until the claim's does; a watch that lags (one being re-established, as happens under load)
 * keeps them there for a while. Neither may be acted on again meanwhile: the stale volume
 * would be released a second time (and fail: its record is gone), the stale claim, unbound
 * and without its PV, provisioned anew. The last GONE_MAX names are remembered. */
static void remember_gone(struct hp_controller *c, const char *pv)
{
    char **slot = &c->gone_ring[c->gone_next];
    if (hp_store_get(c->gone, pv))
        return;
    if (*slot) {
        free(hp_store_remove(c->gone, *slot));
        free(*slot);
    }
    *slot = hp_xstrdup(pv);
    free(hp_store_put(c->gone, hp_xstrdup(pv)));
    c->gone_next = (c->gone_next + 1) % GONE_MAX;
}

static void volume_gone(struct op *op)
{
    remember_gone(op->c, op->pv_name);
    if (op->on_delete != HP_ON_DELETE_DELETE) {
        op_finish(op, OUT_OK, 0);
        return;
    }
    hp_crashpoint("delete-pv-deleted");
    struct hp_fsop *f = hp_fsop_new(HP_FSOP_FORGET, op->root->path);
    f->rec.pv = hp_xstrdup(op->pv_name);
    run_fs(op, f, on_forgotten);
}

static void on_pv_deleted(struct hp_kube_req *req, int status, const struct hp_kube_response *resp,
                          void *data)
{
    struct op *op = data;
    uint64_t ra;
    op->req = NULL;
    if (status == 0 && resp->code == 404) {
        volume_gone(op);
        return;
    }
    enum outcome out = api_outcome(op, "delete PersistentVolume", status, resp, &ra);
    if (out == OUT_OK) {
        hp_log_info("controller: deleted volume pv=%s path=%s on-delete=%s", op->pv_name,
                    op->path, hp_on_delete_name(op->on_delete));
        volume_gone(op);
        return;
    }
    volume_event(op, 1, "VolumeFailedDelete", op->last_error);
    op_finish(op, retry_on_give_up(out), ra);
}

static void delete_pv_object(struct op *op)
{
    if (op->pv_deleting) {
        /* Already being deleted: removing our finalizer let it go. */
        hp_log_info("controller: deleted volume pv=%s path=%s on-delete=%s", op->pv_name,
                    op->path, hp_on_delete_name(op->on_delete));
        volume_gone(op);
        return;
    }
    pv_request(op, "DELETE", NULL, NULL, on_pv_deleted);
}

static int pv_step_ok(struct op *op, int status, const struct hp_kube_response *resp,
                      const char *what)
{
    uint64_t ra;
    op->req = NULL;
    if (status == 0 && resp->code == 404) {
        if (op->kind == OP_DELETE)
            volume_gone(op);
        else
            op_finish(op, OUT_OK, 0);
        return 0;
    }
    enum outcome out = api_outcome(op, what, status, resp, &ra);
    if (out != OUT_OK) {
        op_finish(op, retry_on_give_up(out), ra);
        return 0;
    }
    return 1;
}

static void on_finalizer_updated(struct hp_kube_req *req, int status,
                                 const struct hp_kube_response *resp, void *data)
{
    struct op *op = data;
    int adding = op->kind == OP_FINALIZE;
    if (!pv_step_ok(op, status, resp,
                    adding ? "add finalizer to PersistentVolume"
                           : "remove finalizer from PersistentVolume"))
        return;
    if (!adding) {
        delete_pv_object(op);
        return;
    }
    hp_log_v(2, "controller: added finalizer pv=%s", op->pv_name);
    op_finish(op, OUT_OK, 0);
}

/* Removes (or, for OP_FINALIZE, adds) our finalizer with a merge patch carrying the
 * resourceVersion we read (optimistic: a concurrent change fails it with 409 and the reconcile
 * runs again). */
static void on_pv_read_for_finalizer(struct hp_kube_req *req, int status,
                                     const struct hp_kube_response *resp, void *data)
{
    struct op *op = data;
    if (!pv_step_ok(op, status, resp, "read PersistentVolume"))
        return;
    struct hp_json j;
    struct hp_buf b;
    size_t len;
    const char *text;
    int meta = -1, rv, fins, any = 0;
    hp_json_init(&j);
    /* A "\u0000" in some annotation (the API server stores it) changes nothing here: the
     * patch copies the values it keeps as they were written. */
    if (hp_json_parse(&j, resp->body, resp->body_len) == 0)
        meta = hp_json_get(&j, 0, "metadata");
    rv = hp_json_get(&j, meta, "resourceVersion");
    if (rv < 0) {
        hp_json_free(&j);
        set_error(op, "read PersistentVolume: the answer has no metadata.resourceVersion");
        op_finish(op, OUT_RETRY, 0);
        return;
    }
    /* The patch carries what was read as it was written: the resourceVersion, and every other
     * finalizer in its order. */
    hp_buf_init(&b, 0);
    text = hp_json_text(&j, rv, &len);
    (void)hp_buf_appends(&b, "{\"metadata\":{\"resourceVersion\":");
    (void)hp_buf_append(&b, text, len);
    (void)hp_buf_appends(&b, ",\"finalizers\":[");
    fins = hp_json_get(&j, meta, "finalizers");
    if (hp_json_is(&j, fins, HP_JSON_ARRAY)) {
        for (int e = hp_json_first(&j, fins); e >= 0; e = hp_json_next(&j, fins, e)) {
            if (hp_json_str_eq(&j, e, HP_FINALIZER))
                continue;
            text = hp_json_text(&j, e, &len);
            (void)hp_buf_printf(&b, "%s%.*s", any++ ? "," : "", (int)len, text);
        }
    }
    if (op->kind == OP_FINALIZE)
        (void)hp_buf_printf(&b, "%s\"" HP_FINALIZER "\"", any ? "," : "");
    (void)hp_buf_appends(&b, "]}}");
    hp_json_free(&j);
    pv_request(op, "PATCH", b.data, "application/merge-patch+json", on_finalizer_updated);
    hp_buf_free(&b);
}

static void remove_finalizer_then_delete(struct op *op)
{
    if (!op->finalizer) {
        delete_pv_object(op);
        return;
    }
    pv_request(op, "GET", NULL, NULL, on_pv_read_for_finalizer);
}

/* Errors of a release that a person (or a mount) must fix before anything is removed: keep
 * the PV, say why, try again with backoff for as long as it takes. */
static int waits_for_disk(int status)
{
    return status == -ENOENT || status == -EPERM;
}

/* A release failed with status (op->last_error says how): log, event, and retry or not. */
static void release_failed(struct op *op, int status)
{
    char msg[1400];
    int wait = waits_for_disk(status);
    int permanent =
        status == -ELOOP || status == -ENOTDIR || status == -EXDEV || status == -EINVAL;
    snprintf(msg, sizeof(msg), "failed to %s volume directory %s: %s%s",
             op->on_delete == HP_ON_DELETE_ARCHIVE  ? "archive"
             : op->on_delete == HP_ON_DELETE_RETAIN ? "retain"
                                                    : "delete",
             op->path, op->last_error ? op->last_error : "",
             wait        ? "; the PersistentVolume is kept and this is retried"
             : permanent ? "; left in place for an administrator to inspect"
                         : "");
    set_error(op, "%s", msg);
    hp_log_error("controller: %s pv=%s", msg, op->pv_name);
    if (!wait)
        hp_metrics_fs_error("delete", -status);
    volume_event(op, 1, "VolumeFailedDelete", msg);
    op_finish(op, wait ? OUT_WAIT : permanent ? OUT_GIVE_UP : OUT_RETRY, 0);
}

/* The record of a released volume was missing: the API server's word on the PV first. Our
 * cache may lag behind it (a replica that just became leader, its watch broken a moment): the
 * PV another replica released and deleted a moment ago is no error. */
static void on_release_pv_checked(struct hp_kube_req *req, int status,
                                  const struct hp_kube_response *resp, void *data)
{
    struct op *op = data;
    uint64_t ra;
    (void)req;
    op->req = NULL;
    if (status == 0 && resp->code == 404) {
        hp_log_v(2, "controller: volume was deleted meanwhile (by another replica) pv=%s",
                 op->pv_name);
        remember_gone(op->c, op->pv_name);
        op_finish(op, OUT_OK, 0);
        return;
    }
    enum outcome out = api_outcome(op, "read PersistentVolume", status, resp, &ra);
    if (out != OUT_OK) {
        op_finish(op, retry_on_give_up(out), ra);
        return;
    }
    release_failed(op, -ENOENT);
}

static void on_released(struct hp_fsop *f, int status, void *data)
{
    struct op *op = data;
    if (!(f = fs_ended(op)))
        return;
    root_seen(op->c, op->root, &f->stats);
    if (status < 0) {
        set_error(op, "%s", f->msg);
        hp_fsop_free(f);
        if (status == -ENOENT && op->kind != OP_ORPHAN) {
            pv_request(op, "GET", NULL, NULL, on_release_pv_checked);
            return;
        }
        release_failed(op, status);
        return;
    }
    index_record(op->c, f);
    if (f->kept_in_use)
        op->on_delete = HP_ON_DELETE_RETAIN; /* what was done: the record stays */
    if (f->kept_in_use)
        hp_log_warn("controller: orphan sweep: keeping the directory of volume pv=%s path=%s "
                    "(retained): its PersistentVolume was deleted without being released here "
                    "(reclaimPolicy Retain, deleted by hand, or a new cluster) and the "
                    "directory holds data; remove it by hand if it is not wanted",
                    op->pv_name, op->path);
    else if (op->on_delete == HP_ON_DELETE_RETAIN)
        hp_log_info("controller: keeping directory (onDelete=retain) pv=%s path=%s", op->pv_name,
                    op->path);
    else if (op->on_delete == HP_ON_DELETE_ARCHIVE && f->archived_abs)
        hp_log_info("controller: archived volume directory pv=%s path=%s as=%s", op->pv_name,
                    op->path, f->archived_abs);
    hp_fsop_free(f);
    if (op->kind == OP_ORPHAN) {
        volume_gone(op); /* no PV object: straight to forgetting a deleted one */
        return;
    }
    remove_finalizer_then_delete(op);
}

/* A released volume's directory that another live PV mounts (or one above or below it: an
 * administrator made a PV of their own on it) is not removed or archived while that lasts: the
 * PV stays Released with a warning and is retried. 1 when blocked (op finished). */
static int release_blocked(struct op *op, const struct root *root, const char *rel)
{
    struct hp_volindex_conflict k;
    char *abs = hp_fsop_path(root->path, rel);
    int used = hp_volindex_volume_conflict(op->c->index, abs, op->pv_name, &k);
    free(abs);
    if (!used)
        return 0;
    char what[900];
    describe_conflict(op->c, &k, what, sizeof(what));
    set_error(op, "not %s volume directory %s: it %s %s, which is in use; the PersistentVolume is "
              "kept and this is retried",
              op->on_delete == HP_ON_DELETE_ARCHIVE ? "archiving" : "removing", op->path,
              hp_policy_relation_words(k.relation), what);
    hp_log_warn("controller: %s pv=%s", op->last_error, op->pv_name);
    volume_event(op, 1, "VolumeFailedDelete", op->last_error);
    op_finish(op, OUT_WAIT, 0);
    return 1;
}

/* Runs the release of op's directory (op->pv_name, op->rel, op->on_delete). */
static void release_dir(struct op *op)
{
    struct hp_fsop *f = hp_fsop_new(HP_FSOP_RELEASE, op->root->path);
    const struct hp_record *r = hp_volindex_record(op->c->index, op->pv_name);
    f->rec.pv = hp_xstrdup(op->pv_name);
    f->rec.path = hp_xstrdup(op->rel);
    f->action = op->on_delete;
    f->only_unused = op->kind == OP_ORPHAN;
    if (r) {
        /* What the loop knew before: an unmounted disk shows another filesystem. */
        f->have_expect_fs = 1;
        f->expect_fs.dev = r->dev;
        f->expect_fs.fsid = r->fsid;
    }
    run_fs(op, f, on_released);
}

static void on_migrated(struct hp_fsop *f, int status, void *data)
{
    struct op *op = data;
    if (!(f = fs_ended(op)))
        return;
    if (status < 0) {
        hp_log_warn("controller: could not record a volume made before the ownership journal "
                    "pv=%s path=%s err=%s",
                    op->pv_name, op->path, f->msg);
        set_error(op, "%s", f->msg);
        hp_fsop_free(f);
        op_finish(op, OUT_WAIT, 0);
        return;
    }
    index_record(op->c, f);
    if (!f->already_done)
        hp_log_info("controller: recorded a volume made before the ownership journal pv=%s "
                    "path=%s on-delete=%s",
                    op->pv_name, op->path, hp_on_delete_name(f->out.on_delete));
    hp_fsop_free(f);
    /* Reconcile it again, now with its record. */
    struct hp_controller *c = op->c;
    char *name = hp_xstrdup(op->pv_name);
    op_finish(op, OUT_OK, 0);
    enqueue(c, 'v', name);
    free(name);
}

/* A volume of ours without the on-delete annotation and without a record was made by an
 * earlier version: record it, with its class's on-delete policy when the class still exists,
 * else retain (and say so on the PV). */
static void migrate_volume(struct hp_controller *c, const char *qkey, const struct hp_volume *v,
                           struct root *root, const char *rel)
{
    struct op *op = op_new(c, qkey, OP_MIGRATE);
    const struct hp_class *cls = hp_informer_get(c->classes, v->class_name);
    struct hp_class_params params;
    char err[512];
    enum hp_on_delete policy = HP_ON_DELETE_RETAIN;
    struct hp_volindex_conflict k;

    op->pv_name = hp_xstrdup(v->name);
    op->class_name = hp_xstrdup(v->class_name);
    op->rel = hp_xstrdup(rel);
    op->path = hp_xstrdup(v->path);
    op->root = root;
    if (cls && hp_policy_class_params(cls->parameters, &params, err, sizeof(err)) == 0) {
        policy = params.on_delete;
    } else {
        char msg[1024];
        snprintf(msg, sizeof(msg),
                 "volume made by an earlier version without an on-delete decision, and its "
                 "StorageClass \"%s\" is %s: its directory %s will be kept (retain) when it is "
                 "released",
                 v->class_name, cls ? "not readable" : "gone", v->path);
        hp_log_warn("controller: %s pv=%s", msg, v->name);
        volume_event(op, 1, "VolumeFailedDelete", msg);
    }
    char *abs = hp_fsop_path(root->path, rel);
    int shared = hp_volindex_conflict(c->index, abs, v->name, NULL, &k);
    free(abs);
    if (policy == HP_ON_DELETE_DELETE && shared) {
        /* Two volumes of an earlier version on one directory: deleting it for one would take
         * the other's data. */
        char what[900];
        describe_conflict(c, &k, what, sizeof(what));
        char *msg = hp_xasprintf("its directory %s %s %s (made by an earlier version): it will "
                                 "be kept (retain), never deleted for this volume",
                                 rel, hp_policy_relation_words(k.relation), what);
        hp_log_warn("controller: %s pv=%s", msg, v->name);
        volume_event(op, 1, "VolumeFailedDelete", msg);
        free(msg);
        policy = HP_ON_DELETE_RETAIN;
    }
    struct hp_fsop *f = hp_fsop_new(HP_FSOP_MIGRATE, root->path);
    f->rec.path = hp_xstrdup(rel);
    f->rec.pv = hp_xstrdup(v->name);
    f->rec.claim_uid = hp_xstrdup(v->claim_uid);
    f->rec.claim_namespace = hp_xstrdup(v->claim_namespace);
    f->rec.claim_name = hp_xstrdup(v->claim_name);
    f->rec.class_name = hp_xstrdup(v->class_name);
    f->rec.identity = hp_xstrdup(c->cfg->identity);
    f->rec.on_delete = policy;
    f->rec.state = HP_REC_CREATED;
    run_fs(op, f, on_migrated);
}

/* A released volume of our provisioner but another identity is left alone, and stays Released:
 * say so once per volume, with what to change if it should be ours (a renamed node, moving from
 * out of cluster into it). Per node, another node's volume is that node's business: no word. */
static void other_identity(struct hp_controller *c, const struct hp_volume *v)
{
    const char *node = c->cfg->node_name;
    if (strcmp(v->phase, "Released") != 0 || (v->node && node && strcmp(v->node, node) != 0) ||
        hp_store_get(c->logged_identity, v->name))
        return;
    hp_log_info("controller: leaving a released volume of another identity alone pv=%s "
                "identity=\"%s\" ours=\"%s\" path=%s (to delete it here, run with --identity "
                "\"%s\")",
                v->name, v->identity, c->cfg->identity, v->path, v->identity);
    hp_metrics_other_identity();
    if (hp_store_len(c->logged_identity) < MAX_LOGGED_UNRECORDED)
        free(hp_store_put(c->logged_identity, hp_xstrdup(v->name)));
}

static void reconcile_volume(struct hp_controller *c, const char *qkey, const char *key)
{
    const struct hp_volume *v = hp_informer_get(c->volumes, key);
    const struct hp_config *cfg = c->cfg;
    char rel[4096];

    if (v && strcmp(v->provisioned_by, cfg->provisioner_name) == 0 &&
        strcmp(v->identity, cfg->identity) != 0)
        other_identity(c, v);
    if (!v || strcmp(v->provisioned_by, cfg->provisioner_name) != 0 ||
        strcmp(v->identity, cfg->identity) != 0 || !works_on_disks(c, v->node) ||
        hp_store_get(c->gone, v->name)) {
        nothing_to_do(c, qkey);
        return;
    }
    struct root *root = root_of(c, v->path, rel, sizeof(rel));
    int rel_ok = root != NULL;
    int on_this_disk = !v->node || !cfg->node_name || strcmp(v->node, cfg->node_name) == 0;
    const struct hp_record *rec = hp_volindex_record(c->index, v->name);
    if (!v->on_delete && !rec && rel_ok && on_this_disk && !v->deleting) {
        migrate_volume(c, qkey, v, root, rel);
        return;
    }
    int released = strcmp(v->phase, "Released") == 0 || strcmp(v->phase, "Failed") == 0;
    /* A PV being deleted without our finalizer is gone as far as we are concerned: after our
     * own DELETE, pv-protection keeps it a moment with a deletionTimestamp (as the sig-storage
     * library's shouldDelete, do not delete it twice). */
    int delete_data = released && v->reclaim == HP_RECLAIM_DELETE &&
                      (!v->deleting || v->our_finalizer);
    int drop_finalizer = v->our_finalizer && v->deleting && v->reclaim != HP_RECLAIM_DELETE;
    /* --add-finalizer also protects bound volumes provisioned before it was turned on. */
    int add_finalizer = cfg->add_finalizer && v->reclaim == HP_RECLAIM_DELETE &&
                        !v->our_finalizer && !v->deleting && strcmp(v->phase, "Bound") == 0;
    if (!delete_data && !drop_finalizer && !add_finalizer) {
        nothing_to_do(c, qkey);
        return;
    }
    struct op *op = op_new(c, qkey, add_finalizer ? OP_FINALIZE : OP_DELETE);
    op->pv_name = hp_xstrdup(v->name);
    op->class_name = hp_xstrdup(v->class_name);
    op->path = hp_xstrdup(v->path);
    op->finalizer = v->our_finalizer;
    op->pv_deleting = v->deleting;
    op->on_delete = HP_ON_DELETE_RETAIN; /* until decided: nothing is forgotten */
    if (add_finalizer) {
        pv_request(op, "GET", NULL, NULL, on_pv_read_for_finalizer);
        return;
    }
    if (!delete_data) {
        remove_finalizer_then_delete(op);
        return;
    }
    if (!rel_ok) {
        set_error(op, "volume path \"%s\" is not inside --pv-dir %s%s; not removing anything",
                  v->path, c->nroots ? c->roots[0]->path : "",
                  c->nroots > 1 ? " or another path of this node" : "");
        hp_log_error("controller: %s pv=%s", op->last_error, op->pv_name);
        volume_event(op, 1, "VolumeFailedDelete", op->last_error);
        op_finish(op, OUT_GIVE_UP, 0);
        return;
    }
    op->rel = hp_xstrdup(rel);
    op->root = root;
    const struct hp_class *cls = hp_informer_get(c->classes, v->class_name);
    struct hp_class_params params;
    char err[512];
    int have_params = cls && hp_policy_class_params(cls->parameters, &params, err,
                                                    sizeof(err)) == 0;
    enum hp_policy_source src;
    op->on_delete = hp_policy_on_delete(v->on_delete, rec, have_params ? &params : NULL, &src);
    if (src == HP_POLICY_FROM_DEFAULT || src == HP_POLICY_FROM_INVALID) {
        char msg[1024];
        if (src == HP_POLICY_FROM_INVALID)
            snprintf(msg, sizeof(msg),
                     "the annotation %s=\"%.100s\" is not delete, retain or archive: keeping "
                     "directory %s (retain); set the annotation to one of them to decide",
                     HP_ANN_ON_DELETE, v->on_delete, v->path);
        else
            snprintf(msg, sizeof(msg),
                     "no on-delete decision is recorded for this volume (annotation %s=\"%s\"): "
                     "keeping its directory %s (retain)",
                     HP_ANN_ON_DELETE, v->on_delete ? v->on_delete : "", v->path);
        hp_log_warn("controller: %s pv=%s", msg, v->name);
        volume_event(op, 1, "VolumeFailedDelete", msg);
    }
    if (op->on_delete != HP_ON_DELETE_RETAIN && release_blocked(op, root, rel))
        return;
    hp_log_v(2, "controller: releasing volume pv=%s path=%s on-delete=%s from=%s", v->name,
             v->path, hp_on_delete_name(op->on_delete), hp_policy_source_name(src));
    release_dir(op);
}

/* ---- usage of bound volumes --------------------------------------------------------------- */

/* What a bound volume of ours uses, measured every --usage-scan-period on its own worker, and
 * exported under kubelet's names (kubelet does not measure hostPath volumes). */
struct usage {
    char *pv;
    char *ns, *claim;
    struct root *root;
    char *rel;
    uint64_t capacity;
    int measured;
    uint64_t used, inodes_used;
    struct hp_fs_stats fs;
    int over; /* used > capacity as last measured */
};

static const char *usage_key(const void *o)
{
    return ((const struct usage *)o)->pv;
}

static void usage_free(void *o)
{
    struct usage *u = o;
    free(u->pv);
    free(u->ns);
    free(u->claim);
    free(u->rel);
    free(u);
}

static const struct hp_store_ops usage_ops = {usage_key, usage_free};

/* Keeps c->usage in step with a volume: bound, ours, on this node under one of our roots. */
static void track_usage(struct hp_controller *c, const char *name, const struct hp_volume *v)
{
    char rel[4096];
    struct root *r = NULL;
    const char *node = c->cfg->node_name;
    if (v && strcmp(v->phase, "Bound") == 0 &&
        strcmp(v->provisioned_by, c->cfg->provisioner_name) == 0 &&
        (!v->node || !node || strcmp(v->node, node) == 0))
        r = root_of(c, v->path, rel, sizeof(rel));
    struct usage *u = hp_store_get(c->usage, name);
    if (!r) {
        if (u)
            usage_free(hp_store_remove(c->usage, name));
        return;
    }
    if (!u) {
        u = hp_xcalloc(1, sizeof(*u));
        u->pv = hp_xstrdup(name);
        (void)hp_store_put(c->usage, u);
    }
    free(u->ns);
    free(u->claim);
    free(u->rel);
    u->ns = hp_xstrdup(v->claim_namespace);
    u->claim = hp_xstrdup(v->claim_name);
    u->rel = hp_xstrdup(rel);
    u->root = r;
    u->capacity = 0;
    (void)hp_quantity_parse(v->capacity, &u->capacity, NULL, 0);
}

static void usage_next(struct hp_controller *c);

static void on_usage_timer(uv_timer_t *t)
{
    struct hp_controller *c = hp_container_of(t, struct hp_controller, usage_timer);
    usage_next(c);
}

static void collect_usage_name(void *obj, void *data)
{
    struct hp_controller *c = data;
    c->usage_round[c->usage_n++] = hp_xstrdup(((struct usage *)obj)->pv);
}

static void free_round(struct hp_controller *c)
{
    for (size_t i = c->usage_i; i < c->usage_n; i++)
        free(c->usage_round[i]);
    free(c->usage_round);
    c->usage_round = NULL;
    c->usage_n = c->usage_i = 0;
}

static void over_capacity_event(struct hp_controller *c, const struct usage *u)
{
    char key[KEY_MAX], a[32], b[32];
    snprintf(key, sizeof(key), "%s/%s", u->ns, u->claim);
    const struct hp_claim *cl = hp_informer_get(c->claims, key);
    if (!cl)
        return;
    struct hp_object_ref ref;
    claim_ref(cl, &ref);
    hp_events_emit(c->events, &ref, 1, "VolumeOverCapacity",
                   "volume %s uses %s, more than its capacity of %s (hostPath sizes are not "
                   "enforced: the disk is shared with other volumes)",
                   u->pv, hp_quantity_format(u->used, a, sizeof(a)),
                   hp_quantity_format(u->capacity, b, sizeof(b)));
    hp_log_warn("controller: volume over capacity pv=%s claim=%s used=%llu capacity=%llu", u->pv,
                key, (unsigned long long)u->used, (unsigned long long)u->capacity);
}

static void on_usage_measured(struct hp_fsop *f, int status, void *data)
{
    struct hp_controller *c = data;
    c->usage_op = NULL;
    if (c->stopping) {
        hp_fsop_free(f);
        maybe_finish_close(c);
        return;
    }
    struct usage *u = hp_store_get(c->usage, f->rec.pv);
    if (u && status == 0) {
        u->measured = 1;
        u->used = f->used_bytes;
        u->inodes_used = f->used_inodes;
        u->fs = f->stats;
        int over = u->capacity && u->used > u->capacity;
        if (over && !u->over)
            over_capacity_event(c, u); /* once per crossing */
        u->over = over;
    } else if (u) {
        hp_log_v(2, "controller: could not measure volume pv=%s err=%s", f->rec.pv, f->msg);
    }
    /* Bounded work per second: the next volume waits in proportion to this one's entries
     * (100,000 a second), so a million files cost ten seconds of one worker, not a stall. */
    uint64_t pause = f->visited / 100 + 1;
    hp_fsop_free(f);
    (void)uv_timer_start(&c->usage_timer, on_usage_timer, pause, 0);
}

/* Measures the next volume of the round; a new round starts every --usage-scan-period. */
static void usage_next(struct hp_controller *c)
{
    if (c->stopping || c->usage_op || !c->cfg->usage_scan_period_ms)
        return;
    if (c->usage_i == c->usage_n) {
        if (c->usage_round) { /* a round ended: the next one after a period */
            free_round(c);
            (void)uv_timer_start(&c->usage_timer, on_usage_timer, c->cfg->usage_scan_period_ms,
                                 0);
            return;
        }
        c->usage_round = hp_xcalloc(hp_store_len(c->usage) + 1, sizeof(char *));
        hp_store_foreach(c->usage, collect_usage_name, c);
        if (c->usage_n == 0) {
            free_round(c);
            (void)uv_timer_start(&c->usage_timer, on_usage_timer, c->cfg->usage_scan_period_ms,
                                 0);
            return;
        }
    }
    char *pv = c->usage_round[c->usage_i++];
    struct usage *u = hp_store_get(c->usage, pv);
    if (!u) {
        free(pv);
        (void)uv_timer_start(&c->usage_timer, on_usage_timer, 0, 0);
        return;
    }
    struct hp_fsop *f = hp_fsop_new(HP_FSOP_USAGE, u->root->path);
    f->rec.pv = pv;
    f->rec.path = hp_xstrdup(u->rel);
    c->usage_op = f;
    hp_hostpath_submit(c->usage_hp, f, on_usage_measured, c);
}

static void family(struct hp_buf *out, const char *name, const char *help)
{
    (void)hp_buf_printf(out, "# HELP %s %s\n# TYPE %s gauge\n", name, help, name);
}

struct usage_render {
    struct hp_buf *out;
    int which;
};

static void render_usage_one(void *obj, void *data)
{
    static const char *const names[] = {
        "kubelet_volume_stats_capacity_bytes", "kubelet_volume_stats_used_bytes",
        "kubelet_volume_stats_available_bytes", "kubelet_volume_stats_inodes",
        "kubelet_volume_stats_inodes_used",     "kubelet_volume_stats_inodes_free",
        "hostpath_volume_over_capacity"};
    struct usage_render *r = data;
    const struct usage *u = obj;
    if (!u->measured)
        return;
    uint64_t avail = u->capacity > u->used ? u->capacity - u->used : 0;
    if (u->fs.ok && u->fs.free < avail)
        avail = u->fs.free;
    uint64_t v[] = {u->capacity, u->used, avail, u->fs.files, u->inodes_used, u->fs.files_free,
                    (uint64_t)u->over};
    (void)hp_buf_printf(r->out, "%s{namespace=\"", names[r->which]);
    hp_metrics_append_label_value(r->out, u->ns);
    (void)hp_buf_appends(r->out, "\",persistentvolumeclaim=\"");
    hp_metrics_append_label_value(r->out, u->claim);
    (void)hp_buf_appends(r->out, "\",persistentvolume=\"");
    hp_metrics_append_label_value(r->out, u->pv);
    (void)hp_buf_printf(r->out, "\"} %llu\n", (unsigned long long)v[r->which]);
}

/* The metrics collector: kubelet's volume families, from the last measurements. */
static void render_usage(struct hp_buf *out, void *data)
{
    static const char *const help[] = {
        "Capacity in bytes of the volume (its PersistentVolume's).",
        "Number of used bytes in the volume (measured by the provisioner).",
        "Number of available bytes in the volume: min(capacity - used, free bytes of its disk).",
        "Maximum number of inodes in the volume's filesystem.",
        "Number of used inodes in the volume.",
        "Number of free inodes in the volume's filesystem.",
        "1 while the volume uses more than its capacity (sizes are not enforced)."};
    static const char *const names[] = {
        "kubelet_volume_stats_capacity_bytes", "kubelet_volume_stats_used_bytes",
        "kubelet_volume_stats_available_bytes", "kubelet_volume_stats_inodes",
        "kubelet_volume_stats_inodes_used",     "kubelet_volume_stats_inodes_free",
        "hostpath_volume_over_capacity"};
    struct hp_controller *c = data;
    for (int i = 0; i < 7; i++) {
        family(out, names[i], help[i]);
        struct usage_render r = {out, i};
        hp_store_foreach(c->usage, render_usage_one, &r);
    }
}

/* ---- the orphan sweep --------------------------------------------------------------------- */

static int claim_of_record_exists(struct hp_controller *c, const struct hp_record *r)
{
    char key[KEY_MAX];
    if (!r->claim_namespace || !r->claim_name)
        return 0;
    snprintf(key, sizeof(key), "%s/%s", r->claim_namespace, r->claim_name);
    const struct hp_claim *cl = hp_informer_get(c->claims, key);
    return cl && strcmp(cl->uid, r->claim_uid) == 0;
}

/* Whether a live PV holds the directory record r names. */
static int record_held(const struct hp_controller *c, const struct hp_record *r)
{
    return volume_holds(c, hp_informer_get(c->volumes, r->pv), root_named(c, r->root), r->path);
}

/* 1 when a live PV other than the record's own mounts its directory, or one above or below
 * it (an administrator bound a retained directory to a PV of their own, say). */
static int record_path_in_use(const struct hp_controller *c, const struct hp_record *r)
{
    const struct root *root = root_named(c, r->root);
    if (!root)
        return 0;
    char *abs = hp_fsop_path(root->path, r->path);
    int used = hp_volindex_volume_conflict(c->index, abs, r->pv, NULL);
    free(abs);
    return used;
}

static enum hp_sweep_action sweep_decision(struct hp_controller *c, const struct hp_record *r)
{
    struct hp_sweep_facts facts = {
        .identity = c->cfg->identity,
        .pv_exists = record_held(c, r),
        .claim_exists = claim_of_record_exists(c, r),
        .in_flight = op_in_flight(c, r->pv),
        .path_in_use = record_path_in_use(c, r),
        .now = (int64_t)time(NULL),
        .grace_s = 0,
    };
    return hp_policy_sweep(r, &facts);
}

static void orphan_settle(struct op *op)
{
    static const enum hp_on_delete action[] = {
        [HP_SWEEP_DELETE] = HP_ON_DELETE_DELETE,
        [HP_SWEEP_RETAIN] = HP_ON_DELETE_RETAIN,
        [HP_SWEEP_ARCHIVE] = HP_ON_DELETE_ARCHIVE,
    };
    op->on_delete = action[op->sweep];
    /* Decided on facts a moment old: a PV made meanwhile on (or around) the directory wins. */
    const struct hp_record *r = hp_volindex_record(op->c->index, op->pv_name);
    if (r && record_path_in_use(op->c, r)) {
        hp_log_info("controller: orphan sweep: keeping the directory of volume pv=%s path=%s: "
                    "another PersistentVolume uses it now",
                    op->pv_name, op->path);
        op_finish(op, OUT_OK, 0);
        return;
    }
    int created = r && r->state == HP_REC_CREATED;
    hp_log_info("controller: orphan sweep: %s the directory of a volume whose claim and "
                "PersistentVolume are gone%s pv=%s path=%s",
                op->sweep == HP_SWEEP_DELETE    ? "removing"
                : op->sweep == HP_SWEEP_ARCHIVE ? "archiving"
                                                : "keeping",
                op->sweep != HP_SWEEP_RETAIN && created ? " (if it holds nothing: else it is kept)"
                                                        : "",
                op->pv_name, op->path);
    release_dir(op);
}

/* The API server's word that the PV does not exist (our store may lag behind it). */
static void on_orphan_pv_checked(struct hp_kube_req *req, int status,
                                 const struct hp_kube_response *resp, void *data)
{
    struct op *op = data;
    uint64_t ra;
    op->req = NULL;
    if (status == 0 && resp->code == 404) {
        orphan_settle(op);
        return;
    }
    enum outcome out = api_outcome(op, "read PersistentVolume", status, resp, &ra);
    if (out == OUT_OK && !answer_holds(op->c, resp, op->pv_name, op->root, op->rel)) {
        orphan_settle(op); /* a PV of that name on another node or path */
        return;
    }
    op_finish(op, retry_on_give_up(out), ra);
}

/* ... and that the claim is gone too, for a volume that was still being made. */
static void on_orphan_claim_checked(struct hp_kube_req *req, int status,
                                    const struct hp_kube_response *resp, void *data)
{
    struct op *op = data;
    uint64_t ra;
    op->req = NULL;
    if (!(status == 0 && resp->code == 404)) {
        enum outcome out = api_outcome(op, "read PersistentVolumeClaim", status, resp, &ra);
        if (out != OUT_OK) {
            op_finish(op, retry_on_give_up(out), ra);
            return;
        }
        struct hp_json j;
        hp_json_init(&j);
        int same = hp_json_parse(&j, resp->body, resp->body_len) == 0 &&
                   hp_json_str_eq(&j, hp_json_path(&j, 0, "metadata", "uid", NULL),
                                  op->claim_uid);
        hp_json_free(&j);
        if (same) { /* the claim lives: its provisioning carries on */
            op_finish(op, OUT_OK, 0);
            return;
        }
    }
    pv_request(op, "GET", NULL, NULL, on_orphan_pv_checked);
}

static void reconcile_orphan(struct hp_controller *c, const char *qkey, const char *pv)
{
    const struct hp_record *r = hp_volindex_record(c->index, pv);
    struct root *root = r ? root_named(c, r->root) : NULL;
    enum hp_sweep_action a = root ? sweep_decision(c, r) : HP_SWEEP_KEEP;
    if (a == HP_SWEEP_KEEP) {
        nothing_to_do(c, qkey);
        return;
    }
    struct op *op = op_new(c, qkey, OP_ORPHAN);
    op->pv_name = hp_xstrdup(r->pv);
    op->class_name = hp_xstrdup(r->class_name ? r->class_name : "");
    op->claim_uid = hp_xstrdup(r->claim_uid);
    op->rel = hp_xstrdup(r->path);
    op->root = root;
    op->path = hp_fsop_path(root->path, r->path);
    op->sweep = a;
    /* A record that does not name its claim (written by hand, or migrated from a PV without
     * a claimRef) cannot have it looked up: it is judged by its PV alone, as when the claim
     * is gone (an empty name would ask the server for a path that is not an object). */
    if (r->state == HP_REC_DELETING || !r->claim_namespace || !*r->claim_namespace ||
        !r->claim_name || !*r->claim_name) {
        pv_request(op, "GET", NULL, NULL, on_orphan_pv_checked);
        return;
    }
    char *p = hp_xasprintf("/api/v1/namespaces/%s/persistentvolumeclaims/%s",
                           r->claim_namespace, r->claim_name);
    op->req = hp_kube_request(c->client, "GET", p, NULL, NULL, on_orphan_claim_checked, op);
    free(p);
}

struct sweep_ctx {
    struct hp_controller *c;
    size_t recorded; /* records without a live volume */
};

static void sweep_record(const struct hp_record *r, void *data)
{
    struct sweep_ctx *s = data;
    if (record_held(s->c, r))
        return;
    if (!works_on_disks(s->c, s->c->cfg->node_name)) /* a standby leaves the disk alone */
        return;
    s->recorded++;
    if (sweep_decision(s->c, r) != HP_SWEEP_KEEP)
        enqueue(s->c, 'o', r->pv);
}

static void log_unrecorded(struct hp_controller *c, const struct root *r,
                           const struct hp_fsop *f)
{
    size_t fresh = 0;
    for (size_t i = 0; i < f->n_unrecorded_names; i++) {
        char *name = hp_fsop_path(r->path, f->unrecorded_names[i]);
        if (!hp_store_get(c->logged_unrecorded, name)) {
            fresh++;
            hp_log_warn("controller: orphan sweep: %s has no ownership record and no "
                        "PersistentVolume; it is not ours to touch and is left alone",
                        name);
            if (hp_store_len(c->logged_unrecorded) < MAX_LOGGED_UNRECORDED) {
                free(hp_store_put(c->logged_unrecorded, name));
                name = NULL;
            }
        }
        free(name);
    }
    if (fresh && f->unrecorded > f->n_unrecorded_names)
        hp_log_warn("controller: orphan sweep: %zu unrecorded directories under %s in all (the "
                    "first %zu are named above)",
                    f->unrecorded, r->path, f->n_unrecorded_names);
}

static void check_synced(struct hp_controller *c);
static void start_scan(struct hp_controller *c);
static int caches_synced(const struct hp_controller *c);

static void scan_roots(struct hp_controller *c, int only_unready);

/* Roots not read yet (or whose disk was gone) are read again. */
static void on_rescan(uv_timer_t *t)
{
    scan_roots(hp_container_of(t, struct hp_controller, rescan), 1);
}

static int all_roots_loaded(const struct hp_controller *c)
{
    for (size_t i = 0; i < c->nroots; i++)
        if (!c->roots[i]->journal_loaded)
            return 0;
    return 1;
}

struct root_records {
    const char *root;
    size_t n;
};

static void count_root_record(const struct hp_record *r, void *data)
{
    struct root_records *q = data;
    q->n += r->root && strcmp(r->root, q->root) == 0;
}

/* A journal read of r found filesystem fs with nrecords records. The first one is learnt. One
 * that differs is taken too, unless the records known for r were made on the old one and the
 * new one shows none: an unmounted disk (its mount point's filesystem, empty), which must take
 * no new volume and whose records stay as they were (1: do not merge this read). */
static int root_fs_read(struct hp_controller *c, struct root *r, const struct hp_fs_ident *fs,
                        size_t nrecords)
{
    struct hp_record probe = {.dev = r->fs.dev, .fsid = r->fs.fsid};
    if (!r->fs_known || hp_policy_same_fs(&probe, fs)) {
        if (r->fs_moved)
            hp_log_info("controller: volume path %s is back on its filesystem (device %u:%u): "
                        "new volumes are made there again",
                        r->path, major((dev_t)fs->dev), minor((dev_t)fs->dev));
        r->fs = *fs;
        r->fs_known = 1;
        r->fs_moved = 0;
        return 0;
    }
    struct root_records q = {r->path, 0};
    hp_volindex_foreach_record(c->index, count_root_record, &q);
    if (q.n && !nrecords) {
        if (!r->fs_moved)
            hp_log_error("controller: volume path %s is now on another filesystem (device %u:%u, "
                         "was %u:%u) that holds none of its %zu volumes: is its disk mounted? "
                         "No new volume is made there until it is back",
                         r->path, major((dev_t)fs->dev), minor((dev_t)fs->dev),
                         major((dev_t)r->fs.dev), minor((dev_t)r->fs.dev), q.n);
        r->fs_moved = 1;
        root_metrics(c, r);
        (void)uv_timer_start(&c->rescan, on_rescan, SCAN_RETRY_MS, 0); /* is it back? */
        return 1;
    }
    hp_log_info("controller: volume path %s is now on filesystem device %u:%u (was %u:%u; %zu "
                "records there): its journal is what counts from now on",
                r->path, major((dev_t)fs->dev), minor((dev_t)fs->dev), major((dev_t)r->fs.dev),
                minor((dev_t)r->fs.dev), nrecords);
    r->fs = *fs;
    r->fs_moved = 0;
    return 0;
}

static void on_scanned(struct hp_fsop *f, int status, void *data)
{
    struct root *r = data;
    struct hp_controller *c = r->c;
    r->scan = NULL;
    c->scans--;
    if (c->stopping) {
        hp_fsop_free(f);
        maybe_finish_close(c);
        return;
    }
    root_seen(c, r, &f->stats);
    int root_missing = status == -ENOENT && f->nrecords == 0;
    if (status < 0 && !root_missing) {
        hp_log_error("controller: cannot read the ownership journal under %s: %s (trying again "
                     "in %d s)",
                     r->path, f->msg, SCAN_RETRY_MS / 1000);
        hp_fsop_free(f);
        (void)uv_timer_start(&c->rescan, on_rescan, SCAN_RETRY_MS, 0);
        return;
    }
    if (root_missing && !r->journal_loaded)
        hp_log_info("controller: volume path %s does not exist yet; it is made with the first "
                    "volume",
                    r->path);
    if (f->invalid_records)
        hp_log_error("controller: %zu ownership records under %s could not be read and are "
                     "ignored (their directories are never touched): %s",
                     f->invalid_records, r->path, f->msg);
    int keep_index = !root_missing && root_fs_read(c, r, &f->fs, f->nrecords);
    if (!keep_index && (!root_missing || !r->journal_loaded))
        hp_volindex_merge_records(c->index, r->path, f->records, f->nrecords, r->scan_started);
    int first = !r->journal_loaded;
    r->journal_loaded = 1;
    if (f->clean_leftovers)
        r->leftovers_cleaned = 1;
    r->orphans_unrecorded = f->unrecorded;
    log_unrecorded(c, r, f);
    struct sweep_ctx sw = {c, 0};
    if (c->all_synced || caches_synced(c))
        hp_volindex_foreach_record(c->index, sweep_record, &sw);
    size_t unrecorded = 0;
    for (size_t i = 0; i < c->nroots; i++)
        unrecorded += c->roots[i]->orphans_unrecorded;
    hp_metrics_orphans(sw.recorded, unrecorded);
    hp_log_v(first ? 0 : 2,
             "controller: ownership journal read path=%s records=%zu orphans-recorded=%zu "
             "unrecorded-directories=%zu",
             r->path, f->nrecords, sw.recorded, f->unrecorded);
    hp_fsop_free(f);
    if (all_roots_loaded(c))
        c->journal_loaded = 1;
    check_synced(c);
}

struct live_paths {
    struct hp_controller *c;
    const struct root *root;
    char **v;
    size_t n, cap;
};

static void collect_live_path(const void *obj, void *data)
{
    struct live_paths *l = data;
    const struct hp_volume *v = obj;
    char rel[4096];
    if (root_of(l->c, v->path, rel, sizeof(rel)) != l->root)
        return;
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->v = hp_xrealloc(l->v, l->cap * sizeof(*l->v));
    }
    l->v[l->n++] = hp_xstrdup(rel);
}

/* Reads each root's whole journal on the threadpool (merged into the index, orphans settled)
 * and counts directories under it that nothing accounts for. */
static void start_scan(struct hp_controller *c)
{
    scan_roots(c, 0);
}

static void scan_root(struct hp_controller *c, struct root *r);

static void scan_roots(struct hp_controller *c, int only_unready)
{
    if (c->stopping)
        return;
    for (size_t i = 0; i < c->nroots; i++) {
        struct root *r = c->roots[i];
        if (r->scan || (only_unready && r->journal_loaded && !r->fs_moved))
            continue;
        scan_root(c, r);
    }
}

static void rescan_root(struct hp_controller *c, struct root *r)
{
    if (!c->stopping && !r->scan)
        scan_root(c, r);
}

static void scan_root(struct hp_controller *c, struct root *r)
{
    struct hp_fsop *f = hp_fsop_new(HP_FSOP_SCAN, r->path);
    struct live_paths l = {c, r, NULL, 0, 0};
    /* Crash leftovers (temporary records, staging directories) are removed only before any
     * operation of ours can have started on this root. */
    f->clean_leftovers = !r->leftovers_cleaned && works_on_disks(c, c->cfg->node_name);
    if (c->volumes)
        hp_informer_foreach(c->volumes, collect_live_path, &l);
    f->live = l.v;
    f->nlive = l.n;
    r->scan = f;
    r->scan_started = (int64_t)time(NULL);
    c->scans++;
    hp_hostpath_submit(c->hostpath, f, on_scanned, r);
}

static void process(struct hp_workqueue *q, const char *qkey, void *data)
{
    struct hp_controller *c = data;
    (void)q;
    if (qkey[0] == 'c')
        reconcile_claim(c, qkey, qkey + 2);
    else if (qkey[0] == 'v')
        reconcile_volume(c, qkey, qkey + 2);
    else
        reconcile_orphan(c, qkey, qkey + 2);
}

/* ---- informers ---------------------------------------------------------------------------- */

static int caches_synced(const struct hp_controller *c)
{
    return c->claims && hp_informer_synced(c->claims) && hp_informer_synced(c->volumes) &&
           hp_informer_synced(c->classes);
}

static void check_synced(struct hp_controller *c)
{
    if (c->all_synced || !caches_synced(c))
        return;
    if (!c->journal_loaded && c->nroots == 0) {
        c->journal_loaded = 1; /* no volume paths on this node (--config): nothing to read */
    } else if (!c->journal_loaded) {
        /* The journal is read once the volumes are known (their paths are not orphans). */
        start_scan(c);
        return;
    }
    c->all_synced = 1;
    if (c->cfg->usage_scan_period_ms)
        (void)uv_timer_start(&c->usage_timer, on_usage_timer, 0, 0);
    hp_log_info("controller: caches synced claims=%zu volumes=%zu classes=%zu records=%zu",
                hp_informer_len(c->claims), hp_informer_len(c->volumes),
                hp_informer_len(c->classes), hp_volindex_nrecords(c->index));
    enqueue_all(c);
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
        hp_policy_class_params(cls->parameters, &params, err, sizeof(err)) < 0) {
        if (old)
            class_keys_free(hp_store_remove(c->class_keys, name));
        return 0;
    }
    hp_buf_init(&ann, 0);
    hp_buf_init(&labels, 0);
    (void)hp_pathpattern_keys(params.path_pattern, &ann, &labels);
    struct class_keys *k = hp_xcalloc(1, sizeof(*k));
    k->name = hp_xstrdup(name);
    k->fingerprint = hp_xasprintf("%zu:%zu", ann.len, labels.len);
    k->ann = ann.len > 1 ? hp_buf_steal(&ann) : NULL;
    k->labels = labels.len > 1 ? hp_buf_steal(&labels) : NULL;
    hp_buf_free(&ann);
    hp_buf_free(&labels);
    int needs = (k->ann || k->labels) &&
                (!old || strcmp(old->fingerprint, k->fingerprint) != 0 ||
                 (k->ann && (!old->ann || memcmp(k->ann, old->ann, strlen(k->fingerprint)) != 0)));
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
static const struct hp_informer_type class_type = {
    "storageclasses", "/apis/storage.k8s.io/v1/storageclasses", 0, decode_class, class_key_of,
    free};

static void on_claim_changed(struct hp_informer *inf, const char *key, const void *obj,
                             void *data)
{
    struct hp_controller *c = data;
    (void)inf;
    (void)obj;
    if (c->all_synced)
        enqueue(c, 'c', key);
}

static void on_volume_changed(struct hp_informer *inf, const char *key, const void *obj,
                              void *data)
{
    struct hp_controller *c = data;
    (void)inf;
    if (obj)
        index_volume(c, obj);
    else
        unindex_volume(c, key);
    track_usage(c, key, obj);
    if (c->all_synced)
        enqueue(c, 'v', key);
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
    }
    if (c->all_synced) {
        struct class_match m = {c, key};
        hp_informer_foreach(c->claims, enqueue_claim_of_class, &m);
    }
}

static void on_informer_synced(struct hp_informer *inf, void *data)
{
    struct hp_controller *c = data;
    if (inf == c->classes && !c->claims) {
        /* Claims are decoded against the classes (what to keep of them): list them now. */
        struct hp_informer_opts o = {&c->claim_filter, on_claim_changed, on_informer_synced, c,
                                     NULL};
        c->claims = hp_informer_new(c->loop, c->client, &claim_type, &o);
        return;
    }
    check_synced(c);
}

static const struct hp_store_ops class_keys_ops = {class_keys_key, class_keys_free};

static const char *string_key_of(const void *obj)
{
    return obj;
}

static const struct hp_store_ops string_ops = {string_key_of, free};

/* ---- lifecycle ---------------------------------------------------------------------------- */

static void on_resync(uv_timer_t *t)
{
    struct hp_controller *c = hp_container_of(t, struct hp_controller, resync);
    if (c->all_synced) {
        hp_log_v(2, "controller: periodic resync claims=%zu volumes=%zu",
                 hp_informer_len(c->claims), hp_informer_len(c->volumes));
        enqueue_all(c);
        start_scan(c);
    }
}

static struct root *add_root(struct hp_controller *c, const char *path, uint64_t budget,
                             int allow_rootfs)
{
    struct root *r = hp_xcalloc(1, sizeof(*r));
    r->c = c;
    r->path = hp_xstrdup(path); /* absolute and normalised by config.c / nodemap.c */
    r->budget = budget;
    r->allow_rootfs = allow_rootfs;
    c->roots = hp_xrealloc(c->roots, (c->nroots + 1) * sizeof(*c->roots));
    c->roots[c->nroots++] = r;
    return r;
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
    c->acct = hp_store_new(&acct_ops);
    hp_list_init(&c->ops);
    hp_list_init(&c->announcing);
    c->usage = hp_store_new(&usage_ops);
    c->usage_hp = hp_hostpath_new(loop, 1);
    (void)hp_metrics_add_collector(NULL, render_usage, c); /* cannot fail without a family */
    add_root(c, cfg->pv_dir, 0, 1);
    c->class_keys = hp_store_new(&class_keys_ops);
    c->claim_filter.wanted = claim_wanted;
    c->claim_filter.ctx = c;
    c->logged_unrecorded = hp_store_new(&string_ops);
    c->logged_identity = hp_store_new(&string_ops);
    c->unfinished = hp_store_new(&unfinished_ops);
    c->gone = hp_store_new(&string_ops);
    c->node_held = 1;
    c->index = hp_volindex_new();
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
            free(r->path);
            free(r);
            c->roots[i--] = c->roots[--c->nroots];
        } else if (!r->retired) {
            r->retired = 1;
            root_metrics(c, r);
            hp_log_info("controller: volume path %s is no longer configured: no new volumes "
                        "there, existing ones are still deleted as their policy says",
                        r->path);
        }
    }
    for (size_t k = 0; e && k < e->npaths; k++) {
        const struct hp_node_path *p = &e->paths[k];
        struct root *r = root_named(c, p->path);
        if (!r) {
            r = add_root(c, p->path, p->budget, p->allow_rootfs);
            if (started)
                hp_log_info("controller: new volume path %s budget=%llu", r->path,
                            (unsigned long long)r->budget);
            continue;
        }
        if (r->retired || r->budget != p->budget || r->allow_rootfs != p->allow_rootfs)
            hp_log_info("controller: volume path %s updated budget=%llu allowRootFilesystem=%s",
                        r->path, (unsigned long long)p->budget,
                        p->allow_rootfs ? "true" : "false");
        r->retired = 0;
        r->budget = p->budget;
        r->allow_rootfs = p->allow_rootfs;
        root_metrics(c, r);
    }
    if (started)
        start_scan(c); /* new roots are read before volumes go there */
}

void hp_controller_start(struct hp_controller *c)
{
    struct hp_informer_opts o = {NULL, on_class_changed, on_informer_synced, c, NULL};
    if (c->classes || c->stopping)
        return; /* started already (or closing): nothing to do */
    c->classes = hp_informer_new(c->loop, c->client, &class_type, &o);
    o.on_change = on_volume_changed;
    c->volumes = hp_informer_new(c->loop, c->client, &volume_type, &o);
    if (c->cfg->resync_period_ms)
        (void)uv_timer_start(&c->resync, on_resync, c->cfg->resync_period_ms,
                             c->cfg->resync_period_ms); /* cannot fail on an initialised timer */
}

void hp_controller_set_leader(struct hp_controller *c, int leading)
{
    if (c->leading == !!leading)
        return;
    c->leading = !!leading;
    if (c->leading && c->all_synced && !c->stopping) {
        /* Everything a standby left alone; the journal is read again first (the previous
         * leader changed it), and its orphans swept. */
        enqueue_all(c);
        start_scan(c);
    }
}

int hp_controller_synced(const struct hp_controller *c)
{
    return c->all_synced;
}

void hp_controller_set_node_lease(struct hp_controller *c, int held)
{
    c->node_lease_required = 1;
    if (c->node_held == !!held)
        return;
    c->node_held = !!held;
    if (c->node_held && c->all_synced && !c->stopping) {
        /* What the other replica on this node did meanwhile is in the journal. */
        enqueue_all(c);
        start_scan(c);
    }
}

static void on_part_closed(void *data)
{
    struct hp_controller *c = data;
    if (--c->closing_handles > 0)
        return;
    hp_store_free(c->class_keys);
    hp_store_free(c->logged_unrecorded);
    hp_store_free(c->logged_identity);
    hp_store_free(c->unfinished);
    hp_store_free(c->gone);
    for (size_t i = 0; i < GONE_MAX; i++)
        free(c->gone_ring[i]);
    hp_volindex_free(c->index);
    for (size_t i = 0; i < c->nroots; i++) {
        free(c->roots[i]->path);
        free(c->roots[i]);
    }
    free(c->roots);
    hp_store_free(c->acct);
    hp_metrics_remove_collector(render_usage, c);
    hp_store_free(c->usage);
    free_round(c);
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
    maybe_finish_close(c);
}

static void maybe_finish_close(struct hp_controller *c)
{
    if (!hp_list_empty(&c->ops) || c->scans || c->usage_op || c->closing_informers ||
        c->closing_handles)
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
    struct hp_informer **infs[] = {&c->claims, &c->volumes, &c->classes};
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
    /* API steps are cancelled; filesystem requests are left to finish and free their op. */
    struct hp_list *l, *tmp;
    hp_list_foreach_safe(l, tmp, &c->ops) {
        struct op *op = hp_list_entry(l, struct op, link);
        if (!op->fsop) {
            if (op->req)
                hp_kube_cancel(op->req);
            op_free(op);
        }
    }
    maybe_finish_close(c);
}
