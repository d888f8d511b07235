/* controller room: provisioning a claim -- deciding, placing, making the directory and the
 * PV -- and undoing a half-made volume.
 *
 * Loop thread only; see controller_internal.h for the rooms and their order.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "controller_internal.h"
#include "hostpath/volpath.h"
#include "hostpath/buf.h"
#include "hostpath/config.h"
#include "hostpath/crashpoint.h"
#include "hostpath/events.h"
#include "hostpath/expect.h"
#include "hostpath/informer.h"
#include "hostpath/log.h"
#include "hostpath/metrics.h"
#include "hostpath/pathpattern.h"
#include "hostpath/quantity.h"
#include "hostpath/store.h"

static void reschedule(struct op *op, const struct hp_claim *cl);

static void provision_metrics(const struct op *op, int ok, double seconds)
{
    hp_metrics_provision(op->class_name ? op->class_name : "", "", ok, seconds);
}

const struct op_type hp__op_provision = {
    .name = "provision",
    .give_up_reason = "ProvisioningFailed",
    .give_up_on_claim = 1,
    .metrics = provision_metrics,
};

/* Undoing a half-made volume for a claim that went or moved (hp__compensate). */
const struct op_type hp__op_cleanup = {
    .name = "cleanup",
    .give_up_reason = "VolumeFailedDelete",
};

/* ---- provisioning ------------------------------------------------------------------------- */

static void on_cleanup_done(struct hp_fsop *f, int status, void *data)
{
    struct op *op = data;
    if (!(f = hp__fs_ended(op)))
        return;
    hp__quota_seen(op->c, op->root, f);
    if (status < 0) {
        char msg[1200];
        snprintf(msg, sizeof(msg), "failed to clean up directory %s: %s", f->abs, f->msg);
        hp_log_error("controller: %s claim=%s", msg, op->claim_key);
        hp__claim_event(op, 1, "ProvisioningCleanupFailed", msg);
        hp_metrics_fs_error("cleanup", -status);
    } else {
        if (f->have_out)
            hp__index_record(op->c, f); /* retained (again), or as another replica left it */
        else {
            hp_volindex_remove_record(op->c->index, op->pv_name);
            hp__retrack_volume(op->c, op->pv_name);
        }
        if (f->already_done)
            hp_log_v(2, "controller: nothing of this provisioning to clean up claim=%s pv=%s",
                     op->claim_key, op->pv_name);
        else if (f->kept_in_use)
            hp_log_warn("controller: keeping the directory %s of a volume whose PersistentVolume "
                        "was never made (retained): it holds data, which nothing of ours wrote; "
                        "remove it by hand if it is not wanted claim=%s pv=%s",
                        f->abs, op->claim_key, op->pv_name);
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
    hp__op_finish(op, failed ? OUT_RETRY : (op->last_error ? OUT_GIVE_UP : OUT_OK), 0);
}

/* ---- undoing a half-made volume: the one compensation path -----------------------------
 *
 * A half-made volume is a record of ours in state creating or created whose PV was never
 * made; the journal is what says it exists (no state of the loop). Whatever went wrong -- the
 * claim went while its directory was made (on_dir_created), the API server refused the PV for
 * good (on_pv_created), the claim went or was sent to another node while a retry waited
 * (reconcile_claim, found in the journal), a crash before "created" (the orphan sweep) -- it
 * is undone the same way: the API server's word that the PV does not exist, then CLEANUP, which
 * touches only what the record proves this provisioning made, and removes a directory only
 * while it is empty (a volume without a PV never had a pod; one that holds anything is kept,
 * retained). */

/* CLEANUP of the half-made volume op->pv_name (op->root, op->claim_uid). */
void hp__cleanup_dir(struct op *op)
{
    struct hp_fsop *f = hp_fsop_new(HP_FSOP_CLEANUP, op->root->path);
    hp__add_others(op->c, f);
    f->rec.pv = hp_xstrdup(op->pv_name);
    f->rec.claim_uid = hp_xstrdup(op->claim_uid);
    hp__quota_request(op->c, op->root, f, op->pv_name);
    hp__run_fs(op, f, on_cleanup_done);
}

/* The PV of this provisioning is not there; but an earlier attempt may have created it (a
 * lost reply): it is then the deletion path's business, not this one's. */
static void on_pv_checked_before_cleanup(struct hp_kube_req *req, int status,
                                         const struct hp_kube_response *resp, void *data)
{
    struct op *op = data;
    uint64_t ra;
    op->req = NULL;
    if (status == 0 && resp->code == 404) {
        hp__cleanup_dir(op);
        return;
    }
    enum outcome out = hp__api_outcome(op, "read PersistentVolume", status, resp, &ra);
    if (out == OUT_OK && !hp__answer_holds(op->c, resp, op->pv_name, op->root, op->rel)) {
        hp_log_info("controller: the PersistentVolume of this claim was made on another node "
                    "or path; this node's unfinished directory is removed claim=%s pv=%s",
                    op->claim_key, op->pv_name);
        hp__cleanup_dir(op);
        return;
    }
    if (out == OUT_OK) {
        hp_log_info("controller: the claim is gone but its PersistentVolume exists; it is "
                    "released and deleted like any other claim=%s pv=%s",
                    op->claim_key, op->pv_name);
        hp__op_finish(op, OUT_OK, 0);
        return;
    }
    hp__op_finish(op, hp__retry_on_give_up(out), ra);
}

void hp__compensate(struct op *op)
{
    hp__pv_request(op, "GET", NULL, NULL, on_pv_checked_before_cleanup);
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
    hp__claim_event(op, 0, "ProvisioningSucceeded", msg);
    hp_log_info("controller: provisioned volume claim=%s pv=%s path=%s%s%s", op->claim_key,
                op->pv_name, op->path, op->adopt ? " reused-from=" : "",
                op->adopt ? op->adopt : "");
    hp__op_finish(op, OUT_OK, 0);
}

/* The PV of an API answer (a create, or the read-back after a 409): until the watch delivers
 * it, a claim update would find no PV and provision the claim again, and placement would not
 * count its size: it is expected (expect.h) and indexed now. Returns it decoded (caller frees),
 * or NULL when the body is no PV of that name. */
static struct hp_volume *answered_volume(struct op *op, const struct hp_kube_response *resp)
{
    struct hp_controller *c = op->c;
    struct hp_json j;
    hp_json_init(&j);
    struct hp_volume *v =
        hp_json_parse(&j, resp->body, resp->body_len) == 0 ? hp_volume_decode(&j, 0) : NULL;
    hp_json_free(&j);
    if (!v || strcmp(v->name, op->pv_name) != 0) {
        free(v);
        return NULL;
    }
    if (!hp__volume(c, v->name)) { /* else the watch's copy, newer, counts */
        hp_expect_created(c->expect, v->name, uv_now(c->loop));
        hp__index_volume(c, v);
    }
    return v;
}

static void on_pv_get(struct hp_kube_req *req, int status, const struct hp_kube_response *resp,
                      void *data)
{
    struct op *op = data;
    uint64_t ra;
    op->req = NULL;
    enum outcome out = hp__api_outcome(op, "read back existing PersistentVolume", status, resp, &ra);
    if (out != OUT_OK) {
        hp__op_finish(op, hp__retry_on_give_up(out), ra);
        return;
    }
    struct hp_volume *v = answered_volume(op, resp);
    int ours = v && strcmp(v->claim_uid, op->claim_uid) == 0;
    int here = v && hp__volume_holds(op->c, v, op->root, op->rel);
    free(v);
    if (ours && here) {
        provision_succeeded(op);
        return;
    }
    if (ours) {
        /* Made on another node (or path) while this attempt waited to retry: this node's
         * directory is a half-made volume (per node, other nodes' PVs never reach our cache,
         * so this answer is how we learn it). */
        hp_log_info("controller: the PersistentVolume of this claim was made on another node "
                    "or path; this node's unfinished directory is removed claim=%s pv=%s",
                    op->claim_key, op->pv_name);
        hp__cleanup_dir(op);
        return;
    }
    hp__set_error(op, "PersistentVolume %s already exists and belongs to another claim",
              op->pv_name);
    hp__claim_event(op, 1, "ProvisioningFailed", op->last_error);
    hp__op_finish(op, OUT_GIVE_UP, 0);
}

static void on_pv_created(struct hp_kube_req *req, int status, const struct hp_kube_response *resp,
                          void *data)
{
    struct op *op = data;
    uint64_t ra;
    op->req = NULL;
    if (status == 0 && resp->code == 409) {
        /* Created by an earlier attempt (we crashed or the reply was lost): read it back. */
        hp__pv_request(op, "GET", NULL, NULL, on_pv_get);
        return;
    }
    enum outcome out = hp__api_outcome(op, "create PersistentVolume", status, resp, &ra);
    if (out == OUT_OK) {
        hp_crashpoint("provision-pv-created");
        free(answered_volume(op, resp)); /* the binder annotates the claim at once */
        provision_succeeded(op);
        return;
    }
    char msg[1200];
    snprintf(msg, sizeof(msg), "failed to provision volume with StorageClass \"%s\": %s",
             op->class_name, op->last_error);
    hp_log_warn("controller: %s claim=%s", msg, op->claim_key);
    hp__claim_event(op, 1, "ProvisioningFailed", msg);
    if (out == OUT_GIVE_UP) {
        /* The server refuses this PV for good: undo what this attempt made. */
        hp__compensate(op);
        return;
    }
    hp__op_finish(op, out, ra);
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
    if (hp__api_outcome(op, "remove selected-node annotation", status, resp, &ra) != OUT_OK)
        hp_log_warn("controller: could not ask the scheduler to pick another node claim=%s",
                    op->claim_key);
    hp__op_finish(op, OUT_RETRY, 0);
}

static void provision_fs_failed(struct op *op, const struct hp_fsop *f)
{
    struct hp_controller *c = op->c;
    char msg[1400];
    const struct hp_claim *cl = hp__claim(c, op->claim_key);
    int conflict = f->status == -EEXIST || f->status == -EPERM || f->status == -EBUSY;
    int resched = !conflict && cl && cl->selected_node && reschedulable(-f->status) &&
                  c->cfg->node_name;
    hp__set_error(op, "%s", f->msg);
    if (f->status == -ENODEV || f->root_gone)
        hp__rescan_root(c, op->root); /* which filesystem is there now, and is it ours? */
    snprintf(msg, sizeof(msg), "failed to provision volume with StorageClass \"%s\": %s%s",
             op->class_name, f->msg,
             resched ? "; asking the scheduler to pick another node" : "");
    hp_log_warn("controller: %s claim=%s", msg, op->claim_key);
    if (!conflict)
        hp_metrics_fs_error("create", -f->status);
    hp__claim_event(op, 1, "ProvisioningFailed", msg);
    if (resched) {
        reschedule(op, cl);
        return;
    }
    /* A directory that is somebody else's stays so until a person acts: no hot retry (the
     * resync tries again). A root on another filesystem is retried once its journal is read
     * again: placement then skips it if its disk is gone (and per node asks the scheduler). */
    hp__op_finish(op, conflict ? OUT_GIVE_UP : OUT_RETRY, 0);
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


static void on_dir_created(struct hp_fsop *f, int status, void *data)
{
    struct op *op = data;
    struct hp_controller *c = op->c;
    if (!(f = hp__fs_ended(op)))
        return;
    hp__root_seen(c, op->root, &f->stats);
    hp__quota_seen(c, op->root, f);
    if (status < 0) {
        provision_fs_failed(op, f);
        hp_fsop_free(f);
        return;
    }
    hp__index_record(c, f);
    op->dir_made = 1;
    if (!op->root->fs_known) { /* a root made with its first volume */
        op->root->fs = f->fs;
        op->root->fs_known = 1;
        op->root->made++;
        hp__rescan_root(c, op->root); /* and the mount it is on (root_fs_read) */
    }
    const struct hp_claim *cl = hp__claim(c, op->claim_key);
    if (!cl || strcmp(cl->uid, op->claim_uid) != 0 || cl->deleting) {
        hp_fsop_free(f);
        hp__compensate(op);
        return;
    }
    if (f->have_out && strcmp(f->out.path, op->rel) != 0) {
        /* The path was looked up in the record before it was rendered (decide): a record that
         * names another one now was written meanwhile by another process. */
        hp__set_error(op, "the ownership record of %s names %s, not %s: written meanwhile by "
                          "another process?",
                      op->pv_name, f->out.path, op->rel);
        hp_fsop_free(f);
        hp__op_finish(op, OUT_RETRY, 0);
        return;
    }
    hp_fsop_free(f);
    op->req = hp_kube_request(c->client, "POST", "/api/v1/persistentvolumes", op->pv_body, NULL,
                              on_pv_created, op);
}

/* Refuses a claim for good (until the next resync or change): event, log, give up. */
static void refuse_claim(struct op *op, const struct hp_claim *cl, const char *cls,
                         const char *why)
{
    struct hp_object_ref ref;
    char *msg = hp_xasprintf("failed to provision volume with StorageClass \"%s\": %s", cls, why);
    hp_log_warn("controller: %s claim=%s", msg, cl->key);
    hp__claim_ref(cl, &ref);
    hp_events_emit(op->c->events, &ref, 1, "ProvisioningFailed", "%s", msg);
    free(msg);
    hp__set_error(op, "%s", why);
    hp__op_finish(op, OUT_GIVE_UP, 0);
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

/* A half-made volume (a record of ours, creating or created, without its PV) of a claim that is
 * gone, is another claim of that name now, is being deleted, or is served elsewhere now
 * (another node selected for it, or a PV of its name that does not hold this directory). */
struct half_made_q {
    struct hp_controller *c;
    const struct hp_claim *cl; /* the claim of that name now, or NULL */
    const struct hp_record *found;
    size_t more; /* others found besides */
};

static int moved_away(const struct hp_controller *c, const struct hp_claim *cl,
                      const struct hp_record *r)
{
    const char *node = c->cfg->node_name;
    if (node && cl->selected_node && cl->selected_node[0] && strcmp(cl->selected_node, node) != 0)
        return 1;
    const struct hp_volume *v = hp__volume(c, r->pv);
    if (v)
        return !hp__volume_holds(c, v, hp__root_named(c, r->root), r->path);
    /* Bound to a PV of the record's name that is not in our cache and not one we just made:
     * per node, another node's PV (other nodes' PVs never reach us). hp__compensate asks the
     * API server before anything is removed. */
    return node && cl->volume_name[0] && strcmp(cl->volume_name, r->pv) == 0 &&
           hp_expect_get(c->expect, r->pv, uv_now(c->loop)) != HP_EXPECT_PRESENT;
}

static void find_half_made(const struct hp_record *r, void *data)
{
    struct half_made_q *q = data;
    struct hp_controller *c = q->c;
    const struct root *root = hp__root_named(c, r->root);
    if ((r->state != HP_REC_CREATING && r->state != HP_REC_CREATED) || !r->identity ||
        strcmp(r->identity, c->cfg->identity) != 0 || !root ||
        !hp__works_on_root(c, root, c->cfg->node_name) || hp__op_in_flight(c, r->pv))
        return;
    const struct hp_volume *v = hp__volume(c, r->pv);
    if (v && hp__volume_holds(c, v, hp__root_named(c, r->root), r->path))
        return; /* made: the deletion path's business */
    if (q->cl && strcmp(q->cl->uid, r->claim_uid) == 0 && !q->cl->deleting &&
        !moved_away(c, q->cl, r))
        return; /* still its claim's, here: its provisioning goes on */
    if (q->found)
        q->more++;
    else
        q->found = r;
}

/* Undoes a half-made volume of claim key (ns/name) if there is one: 1 when it took the key. */
static int undo_half_made(struct hp_controller *c, const char *qkey, const char *key,
                          const struct hp_claim *cl)
{
    char ns[256];
    const char *name = hp__claim_key_split(key, ns, sizeof(ns));
    if (!name)
        return 0;
    struct half_made_q q = {c, cl, NULL, 0};
    hp_volindex_foreach_claim_record(c->index, ns, name, find_half_made, &q);
    const struct hp_record *r = q.found;
    if (!r)
        return 0;
    struct root *root = hp__root_named(c, r->root);
    struct op *op = hp__op_new(c, qkey, &hp__op_cleanup);
    op->claim_key = hp_xstrdup(key);
    op->claim_uid = hp_xstrdup(r->claim_uid);
    op->pv_name = hp_xstrdup(r->pv);
    op->class_name = hp_xstrdup(r->class_name ? r->class_name : "");
    op->rel = hp_xstrdup(r->path);
    op->root = root;
    op->path = hp_volpath_join(root->path, r->path);
    op->requeue = q.more > 0; /* the next one after this */
    hp_log_v(2, "controller: the claim of an unfinished provisioning is gone claim=%s pv=%s",
             key, r->pv);
    hp__compensate(op);
    return 1;
}

/* No path of this node has room for the claim: an event with every path's numbers; per node,
 * the claim goes back to the scheduler, else it is tried again. Finishes op. */
static void no_room(struct op *op, const struct hp_claim *cl, const struct hp_class *cls,
                    const char *why)
{
    int resched = cl->selected_node && cl->selected_node[0] && op->c->cfg->node_name;
    char *msg = hp_xasprintf("failed to provision volume with StorageClass \"%s\": no room: "
                             "%s%s",
                             cls->name, why,
                             resched ? "; asking the scheduler to pick another node" : "");
    hp_log_warn("controller: %s claim=%s", msg, cl->key);
    hp__claim_event(op, 1, "ProvisioningFailed", msg);
    hp__set_error(op, "no room: %s", why);
    free(msg);
    if (resched)
        reschedule(op, cl);
    else
        hp__op_finish(op, OUT_RETRY, 0);
}

/* We deleted the PV of this claim (pv_name is its uid's): the cached claim is a stale copy. */
static int claim_copy_stale(const struct hp_controller *c, const char *pv_name)
{
    char key[300];
    (void)snprintf(key, sizeof(key), "%s%s", EXPECT_CLAIM_PREFIX, pv_name);
    return hp_expect_get(c->expect, key, uv_now(c->loop)) == HP_EXPECT_GONE;
}

/* Why a claim cannot be provisioned, whatever the node: a reason for its event, or NULL. */
static const char *unprovisionable(const struct hp_claim *cl, enum hp_reclaim reclaim)
{
    if (cl->selector)
        return "the claim sets spec.selector, and a dynamically provisioned volume cannot be "
               "chosen by labels; remove the selector, or bind the claim to a "
               "PersistentVolume made by hand";
    if (cl->data_source)
        return "the claim sets spec.dataSource or dataSourceRef (a clone or a snapshot "
               "restore), and hostPath volumes cannot be pre-filled: rather than hand out an "
               "empty volume, nothing is provisioned; remove the data source to get an empty "
               "volume";
    if (cl->block)
        return "volumeMode Block is not supported: hostPath volumes are directories; use "
               "volumeMode Filesystem";
    if (reclaim == HP_RECLAIM_RECYCLE)
        return "reclaimPolicy Recycle is not supported (it would hand the data to a scrubber "
               "pod); use Delete or Retain";
    return NULL;
}

/* What the class and the claim decide about the new volume before it is placed. */
struct decision {
    struct hp_class_params params;
    enum hp_volume_type type;
    int shared;                     /* the class's paths are a sharedFileSystemPath */
    struct hp_dir_attrs attrs;
    uint64_t need;                  /* bytes requested */
    const struct hp_record *record; /* an earlier attempt's record of this PV: its path wins */
    char rel[4096];                 /* the directory, relative to its root */
};

/* 0, or -EINVAL with the reason for a ProvisioningFailed event in err. */
static int decide(struct hp_controller *c, const struct hp_claim *cl, const struct hp_class *cls,
                  const char *pv_name, struct decision *d, char *err, size_t errlen)
{
    char why[1100];
    if (hp_policy_class_params_of(cls, &d->params, err, errlen) < 0 ||
        hp_policy_volume_type(cl, cls, &d->type, err, errlen) < 0)
        return -EINVAL;
    d->shared = hp__class_shared(c, cls->name);
    if (d->shared < 0) {
        hp_seterr(err, errlen, "--config lists StorageClasses (storageClassConfigs) and not "
                               "\"%s\"",
                  cls->name);
        return -EINVAL;
    }
    if (hp_policy_dir_attrs(&d->params, cl, pv_name, &d->attrs, err, errlen) < 0)
        return -EINVAL;
    if (hp_quantity_parse(cl->request, &d->need, why, sizeof(why)) < 0) {
        hp_seterr(err, errlen, "spec.resources.requests.storage: %s", why);
        return -EINVAL;
    }
    /* One owner for the volume's path: a directory an earlier attempt began (the class's
     * pathPattern may have changed since) is where this volume is, not a new rendering. */
    const struct hp_record *r = hp_volindex_record(c->index, pv_name);
    if (r && (r->state == HP_REC_CREATING || r->state == HP_REC_CREATED) && r->claim_uid &&
        strcmp(r->claim_uid, cl->uid) == 0 && hp__root_named(c, r->root)) {
        d->record = r;
        snprintf(d->rel, sizeof(d->rel), "%s", r->path);
        return 0;
    }
    return hp_pathpattern_render_path(d->params.path_pattern, cl, pv_name,
                                      d->params.allow_unsafe_path ? HP_PATTERN_UNSAFE : 0,
                                      d->rel, sizeof(d->rel), err, errlen);
}

/* The root of the new volume (an earlier attempt's, a retained directory taken over, or
 * placement's), with the directory in d->rel. NULL when the op was finished (refused, no room:
 * with an event). */
static struct root *choose_root(struct op *op, const struct hp_claim *cl,
                                const struct hp_class *cls, struct decision *d)
{
    struct hp_controller *c = op->c;
    struct root *root = NULL;
    char why[2048];
    if (d->record)
        return hp__root_named(c, d->record->root);
    if (d->params.reuse_retained) {
        const struct hp_record *r =
            hp_volindex_find_retained(c->index, cl->namespace_, cl->name, cls->name);
        /* A class that requires hard limits takes back only a directory that can have one. */
        if (r && !hp__volume(c, r->pv) && (root = hp__root_named(c, r->root)) &&
            !hp__quota_excluded(root, &d->params)) {
            op->adopt = hp_xstrdup(r->pv);
            snprintf(d->rel, sizeof(d->rel), "%s", r->path);
            return root;
        }
    }
    int rc = hp__place(c, cls->name, &d->params, d->need, &root, why, sizeof(why));
    if (rc == -ENOENT) /* the class has no path on this node */
        refuse_claim(op, cl, cls->name, why);
    else if (rc < 0)
        no_room(op, cl, cls, why);
    return rc < 0 ? NULL : root;
}

/* The first claim that takes a root's reservations past 90% of its budget gets a Warning saying
 * that claims will soon be refused there, before the first one is: a cluster moving from
 * local-path-provisioner (which accounts nothing) learns what to set before it needs it. */
static void nearly_full(struct op *op, const struct hp_claim *cl, struct root *r)
{
    uint64_t budget = hp__root_budget(r);
    if (!budget && r->stats.ok)
        budget = r->stats.size;
    if (!budget)
        return;
    if (r->reserved <= budget / 10 * 8) {
        r->nearly_full = 0;
        return;
    }
    if (r->nearly_full || r->reserved <= budget / 10 * 9)
        return;
    r->nearly_full = 1;
    char a[32], b[32], msg[1024];
    snprintf(msg, sizeof(msg),
             "volume path %s has %s of its %s reserved by claims (over 90%%): a claim that does "
             "not fit is refused; give the path a larger \"capacity\", or an \"overcommit\" "
             "in --config (README \"Sizes\")",
             r->path, hp_quantity_format(r->reserved, a, sizeof(a)),
             hp_quantity_format(budget, b, sizeof(b)));
    hp_log_warn("controller: %s claim=%s", msg, cl->key);
    hp__claim_event(op, 1, "VolumePathNearlyFull", msg);
}

/* Holds the volume's path in the index for the provisioning (two claims rendering colliding
 * paths cannot both pass). 0, or the op was finished (refused: another volume holds it). */
static int reserve_path(struct op *op, const struct hp_claim *cl, const struct hp_class *cls,
                        struct root *root, const char *rel)
{
    struct hp_controller *c = op->c;
    struct hp_volindex_conflict k;
    char *abs = hp_volpath_join(root->path, rel);
    if (hp_volindex_conflict(c->index, abs, op->pv_name, op->adopt, &k)) {
        char what[900];
        hp__describe_conflict(c, &k, what, sizeof(what));
        char *why = hp_xasprintf("the volume directory %s %s %s; one directory, one owner: "
                                 "choose a pathPattern that gives every claim its own directory "
                                 "(e.g. include {{.PVName}})",
                                 rel, hp_policy_relation_words(k.relation), what);
        refuse_claim(op, cl, cls->name, why);
        free(why);
        free(abs);
        return -1;
    }
    hp_volindex_hold(c->index, HP_SRC_RESERVED, op->pv_name, abs);
    op->reserving = 1;
    op->rel = hp_xstrdup(rel);
    op->path = abs;
    return 0;
}

/* Makes the directory (fsops PROVISION): on_dir_created goes on. */
static void make_dir(struct op *op, const struct hp_claim *cl)
{
    struct hp_controller *c = op->c;
    struct hp_fsop *f = hp_fsop_new(HP_FSOP_PROVISION, op->root->path);
    hp__add_others(c, f);
    /* A root is made with its first volume; one seen before that is missing now is read
     * again first (ENOENT: rescanned): an unmounted disk's root is not made on its mount
     * point's filesystem. */
    f->create_root = !op->root->fs_known;
    if (!op->root->fs_known) /* a root removed by hand: made on the mount it was on, only */
        f->prev_mount_id = op->root->mount_id;
    if (op->root->fs_known) {
        f->have_expect_fs = 1;
        f->expect_fs = op->root->fs;
    }
    f->rec.path = hp_xstrdup(op->rel);
    f->rec.pv = hp_xstrdup(op->pv_name);
    f->rec.claim_uid = hp_xstrdup(cl->uid);
    f->rec.claim_namespace = hp_xstrdup(cl->namespace_);
    f->rec.claim_name = hp_xstrdup(cl->name);
    f->rec.class_name = hp_xstrdup(op->class_name);
    f->rec.identity = hp_xstrdup(c->cfg->identity);
    f->rec.on_delete = op->on_delete;
    f->mode = op->attrs.mode;
    f->uid = op->attrs.uid;
    f->gid = op->attrs.gid;
    f->set_owner = op->attrs.set_owner;
    f->adopt = op->adopt ? hp_xstrdup(op->adopt) : NULL;
    f->limit_bytes = op->reserved; /* the claim's request: its hard limit, where there is one */
    hp__quota_request(c, op->root, f, op->pv_name);
    hp__run_fs(op, f, on_dir_created);
}

/* The PV to create (op->pv_body), with the node affinity the class asks for; label_value is
 * the node's label nodeAffinityKey when the class names one (NULL: none, or not read). 0, or
 * the op was finished (refused, with an event). */
static int build_pv(struct op *op, const struct hp_claim *cl, const char *label_value)
{
    struct hp_class_params p = {.node_affinity_key = op->affinity_key};
    const char *key = NULL, *value = NULL;
    char err[512];
    if (hp_policy_node_affinity(&p, op->local ? HP_VOLUME_LOCAL : HP_VOLUME_HOSTPATH,
                                op->shared, op->node, label_value, &key, &value, err,
                                sizeof(err)) < 0) {
        refuse_claim(op, cl, op->class_name, err);
        return -1;
    }
    const struct hp_config *cfg = op->c->cfg;
    struct hp_pv_spec spec = {
        .name = op->pv_name,
        .claim = cl,
        .class_name = op->class_name,
        .mount_options = op->mount_options,
        .provisioner = cfg->provisioner_name,
        .identity = cfg->identity,
        .path = op->path,
        .node = key ? op->node : NULL,
        .affinity_key = key && strcmp(key, HP_LABEL_HOSTNAME) != 0 ? key : NULL,
        .affinity_value = value,
        .local = op->local,
        .on_delete = hp_on_delete_name(op->on_delete),
        .reclaim = op->reclaim,
        .add_finalizer = cfg->add_finalizer,
    };
    free(op->pv_body);
    op->pv_body = hp_pv_build(&spec);
    if (!op->pv_body) {
        refuse_claim(op, cl, op->class_name,
                     "the claim holds a string that is not valid UTF-8");
        return -1;
    }
    return 0;
}

/* The Node object of op->node, for the label its StorageClass's nodeAffinityKey names. */
static void on_node_read(struct hp_kube_req *req, int status, const struct hp_kube_response *resp,
                         void *data)
{
    struct op *op = data;
    uint64_t ra;
    (void)req;
    op->req = NULL;
    enum outcome out = hp__api_outcome(op, "read Node", status, resp, &ra);
    if (out != OUT_OK) {
        hp__op_finish(op, out == OUT_GIVE_UP ? OUT_RETRY : out, ra);
        return;
    }
    const struct hp_claim *cl = hp__claim(op->c, op->claim_key);
    if (!cl || strcmp(cl->uid, op->claim_uid) != 0) { /* gone meanwhile: nothing was made */
        hp__op_finish(op, OUT_OK, 0);
        return;
    }
    struct hp_json j;
    char *value = NULL;
    hp_json_init(&j);
    if (hp_json_parse(&j, resp->body, resp->body_len) == 0) {
        int labels = hp_json_path(&j, 0, "metadata", "labels", NULL);
        value = hp_json_str_dup(&j, hp_json_get(&j, labels, op->affinity_key));
    }
    hp_json_free(&j);
    int rc = build_pv(op, cl, value);
    free(value);
    if (rc == 0)
        make_dir(op, cl);
}

void hp__reconcile_claim(struct hp_controller *c, const char *qkey, const char *key)
{
    const struct hp_claim *cl = hp__claim(c, key);
    const struct hp_class *cls = NULL;
    char err[1024], pv_name[128];
    struct hp_serve_env env = {c->cfg->provisioner_name, c->cfg->node_name, c->leading, 0};

    if (undo_half_made(c, qkey, key, cl))
        return;
    if (!c->node_held) { /* another replica on this node serves its claims now */
        hp__nothing_to_do(c, qkey);
        return;
    }
    if (cl)
        cls = hp_informer_get(c->classes, cl->class_name ? cl->class_name : "");
    if (cl && cl->volume_name[0] && hp__maybe_expand(c, qkey, cl, cls))
        return;
    env.shared = cls && hp__class_shared(c, cls->name) == 1;
    if (!cl || hp_policy_skip_claim(cl, cls, &env)) {
        hp__nothing_to_do(c, qkey);
        return;
    }
    const struct class_keys *ck = hp_store_get(c->class_keys, cls->name);
    if (!cl->maps_kept && ck && (ck->ann || ck->labels)) {
        /* Cached before its class said which labels and annotations to keep: the claims are
         * being listed again, and this one is reconciled when its full copy arrives. */
        hp__nothing_to_do(c, qkey);
        return;
    }
    if (hp_pv_name(cl, pv_name, sizeof(pv_name)) < 0 || hp__volume(c, pv_name) ||
        hp_expect_get(c->expect, pv_name, uv_now(c->loop)) != HP_EXPECT_NONE ||
        claim_copy_stale(c, pv_name)) {
        /* Already provisioned, maybe a moment ago: the binder will bind it (or we deleted its
         * PV, and this copy of the claim is stale). */
        hp__nothing_to_do(c, qkey);
        return;
    }
    struct op *op = hp__op_new(c, qkey, &hp__op_provision);
    op->claim_key = hp_xstrdup(key);
    op->claim_uid = hp_xstrdup(cl->uid);
    op->pv_name = hp_xstrdup(pv_name);
    op->class_name = hp_xstrdup(cls->name);
    op->reclaim = cls->reclaim != HP_RECLAIM_UNSET ? cls->reclaim
                  : c->cfg->default_reclaim_policy ? c->cfg->default_reclaim_policy
                                                   : HP_RECLAIM_DELETE;
    const char *refusal = unprovisionable(cl, op->reclaim);
    if (refusal) {
        refuse_claim(op, cl, cls->name, refusal);
        return;
    }
    struct decision *d = hp_xcalloc(1, sizeof(*d));
    if (decide(c, cl, cls, pv_name, d, err, sizeof(err)) < 0) {
        refuse_claim(op, cl, cls->name, err);
        free(d);
        return;
    }
    struct root *root = choose_root(op, cl, cls, d);
    if (!root) {
        free(d);
        return;
    }
    op->root = root;
    op->reserved = d->need;
    root->reserved += d->need;
    hp__root_metrics(c, root);
    nearly_full(op, cl, root);
    if (reserve_path(op, cl, cls, root, d->rel) < 0) {
        free(d);
        return;
    }
    op->on_delete = d->params.on_delete;
    op->local = d->type == HP_VOLUME_LOCAL;
    op->mount_options = packed_dup(cls->mount_options);
    if (!d->shared) {
        const char *node = cl->selected_node && cl->selected_node[0] ? cl->selected_node
                                                                     : c->cfg->node_name;
        op->node = node ? hp_xstrdup(node) : NULL;
    }
    op->shared = d->shared;
    op->attrs = d->attrs;
    op->affinity_key = hp_xstrdup(d->params.node_affinity_key && d->params.node_affinity_key[0]
                                      ? d->params.node_affinity_key
                                      : HP_LABEL_HOSTNAME);
    free(d);
    hp__announce_later(op);
    if (strcmp(op->affinity_key, HP_LABEL_HOSTNAME) != 0 && op->node) {
        /* Node affinity on another label of the node: its value is read first (before
         * anything is made: a node without the label refuses the claim). */
        char *p = hp_xasprintf("/api/v1/nodes/%s", op->node);
        op->req = hp_kube_request(c->client, "GET", p, NULL, NULL, on_node_read, op);
        free(p);
        return;
    }
    if (build_pv(op, cl, NULL) == 0)
        make_dir(op, cl);
}

