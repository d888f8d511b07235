/* controller room: the orphan sweep -- records whose claim and PV are gone, settled by their
 * recorded policy, and directories nothing accounts for, only counted.
 *
 * Loop thread only; see controller_internal.h for the rooms and their order.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "controller_internal.h"
#include "hostpath/volpath.h"
#include "hostpath/buf.h"
#include "hostpath/config.h"
#include "hostpath/informer.h"
#include "hostpath/log.h"
#include "hostpath/metrics.h"
#include "hostpath/store.h"

/* ---- the orphan sweep --------------------------------------------------------------------- */

const struct op_type hp__op_orphan = {
    .name = "orphan",
    .give_up_reason = "VolumeFailedDelete",
    .settles_record = 1,
};

static int claim_of_record_exists(struct hp_controller *c, const struct hp_record *r)
{
    char key[KEY_MAX];
    if (!r->claim_namespace || !r->claim_name)
        return 0;
    snprintf(key, sizeof(key), "%s/%s", r->claim_namespace, r->claim_name);
    const struct hp_claim *cl = hp__claim(c, key);
    return cl && strcmp(cl->uid, r->claim_uid) == 0;
}

/* Whether a live PV holds the directory record r names. */
static int record_held(const struct hp_controller *c, const struct hp_record *r)
{
    return hp__volume_holds(c, hp__volume(c, r->pv), hp__root_named(c, r->root), r->path);
}

/* 1 when a live PV other than the record's own mounts its directory, or one above or below
 * it (an administrator bound a retained directory to a PV of their own, say). */
static int record_path_in_use(const struct hp_controller *c, const struct hp_record *r)
{
    const struct root *root = hp__root_named(c, r->root);
    if (!root)
        return 0;
    char *abs = hp_volpath_join(root->path, r->path);
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
        .in_flight = hp__op_in_flight(c, r->pv),
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
        hp__op_finish(op, OUT_OK, 0);
        return;
    }
    int created = r && r->state == HP_REC_CREATED;
    if (r && r->state == HP_REC_CREATING && op->sweep == HP_SWEEP_DELETE) {
        /* Never completed: a half-made volume, undone as any other (ctl_provision.c). */
        hp_log_info("controller: orphan sweep: undoing a volume whose provisioning never "
                    "completed and whose claim and PersistentVolume are gone pv=%s path=%s",
                    op->pv_name, op->path);
        hp__cleanup_dir(op);
        return;
    }
    hp_log_info("controller: orphan sweep: %s the directory of a volume whose claim and "
                "PersistentVolume are gone%s pv=%s path=%s",
                op->sweep == HP_SWEEP_DELETE    ? "removing"
                : op->sweep == HP_SWEEP_ARCHIVE ? "archiving"
                                                : "keeping",
                op->sweep != HP_SWEEP_RETAIN && created ? " (if it holds nothing: else it is kept)"
                                                        : "",
                op->pv_name, op->path);
    hp__release_dir(op);
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
    enum outcome out = hp__api_outcome(op, "read PersistentVolume", status, resp, &ra);
    if (out == OUT_OK && !hp__answer_holds(op->c, resp, op->pv_name, op->root, op->rel)) {
        orphan_settle(op); /* a PV of that name on another node or path */
        return;
    }
    hp__op_finish(op, hp__retry_on_give_up(out), ra);
}

/* ... and that the claim is gone too, for a volume that was still being made. */
static void on_orphan_claim_checked(struct hp_kube_req *req, int status,
                                    const struct hp_kube_response *resp, void *data)
{
    struct op *op = data;
    uint64_t ra;
    op->req = NULL;
    if (!(status == 0 && resp->code == 404)) {
        enum outcome out = hp__api_outcome(op, "read PersistentVolumeClaim", status, resp, &ra);
        if (out != OUT_OK) {
            hp__op_finish(op, hp__retry_on_give_up(out), ra);
            return;
        }
        struct hp_json j;
        hp_json_init(&j);
        int same = hp_json_parse(&j, resp->body, resp->body_len) == 0 &&
                   hp_json_str_eq(&j, hp_json_path(&j, 0, "metadata", "uid", NULL),
                                  op->claim_uid);
        hp_json_free(&j);
        if (same) { /* the claim lives: its provisioning carries on */
            hp__op_finish(op, OUT_OK, 0);
            return;
        }
    }
    hp__pv_request(op, "GET", NULL, NULL, on_orphan_pv_checked);
}

void hp__reconcile_orphan(struct hp_controller *c, const char *qkey, const char *pv)
{
    const struct hp_record *r = hp_volindex_record(c->index, pv);
    struct root *root = r ? hp__root_named(c, r->root) : NULL;
    enum hp_sweep_action a = root ? sweep_decision(c, r) : HP_SWEEP_KEEP;
    if (a == HP_SWEEP_KEEP) {
        hp__nothing_to_do(c, qkey);
        return;
    }
    struct op *op = hp__op_new(c, qkey, &hp__op_orphan);
    op->pv_name = hp_xstrdup(r->pv);
    op->class_name = hp_xstrdup(r->class_name ? r->class_name : "");
    op->claim_uid = hp_xstrdup(r->claim_uid);
    op->claim_key = hp_xasprintf("%s/%s", r->claim_namespace ? r->claim_namespace : "",
                                 r->claim_name ? r->claim_name : "");
    op->rel = hp_xstrdup(r->path);
    op->root = root;
    op->path = hp_volpath_join(root->path, r->path);
    op->sweep = a;
    /* A record that does not name its claim (written by hand, or migrated from a PV without
     * a claimRef) cannot have it looked up: it is judged by its PV alone, as when the claim
     * is gone (an empty name would ask the server for a path that is not an object). */
    if (r->state == HP_REC_DELETING || !r->claim_namespace || !*r->claim_namespace ||
        !r->claim_name || !*r->claim_name) {
        hp__pv_request(op, "GET", NULL, NULL, on_orphan_pv_checked);
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
    /* A standby leaves the disk alone (and a shared root is the leader's). */
    if (!hp__works_on_root(s->c, hp__root_named(s->c, r->root), s->c->cfg->node_name))
        return;
    s->recorded++;
    if (sweep_decision(s->c, r) != HP_SWEEP_KEEP)
        hp__enqueue(s->c, 'o', r->pv);
}

static void log_unrecorded(struct hp_controller *c, const struct root *r,
                           const struct hp_fsop *f)
{
    size_t fresh = 0;
    for (size_t i = 0; i < f->n_unrecorded_names; i++) {
        char *name = hp_volpath_join(r->path, f->unrecorded_names[i]);
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

void hp__sweep_after_scan(struct hp_controller *c, const struct root *r,
                          const struct hp_fsop *f, int first, int synced)
{
    log_unrecorded(c, r, f);
    struct sweep_ctx sw = {c, 0};
    if (synced)
        hp_volindex_foreach_record(c->index, sweep_record, &sw);
    size_t unrecorded = 0;
    for (size_t i = 0; i < c->nroots; i++)
        unrecorded += c->roots[i]->orphans_unrecorded;
    hp_metrics_orphans(sw.recorded, unrecorded);
    hp_log_v(first ? 0 : 2,
             "controller: ownership journal read path=%s records=%zu orphans-recorded=%zu "
             "unrecorded-directories=%zu",
             r->path, f->nrecords, sw.recorded, f->unrecorded);
}

void hp__sweep_init(struct hp_controller *c)
{
    c->logged_unrecorded = hp_store_new(&hp_store_strings);
}

void hp__sweep_free(struct hp_controller *c)
{
    hp_store_free(c->logged_unrecorded);
}
