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
    if (status < 0) {
        char msg[1200];
        snprintf(msg, sizeof(msg), "failed to clean up directory %s: %s", f->abs, f->msg);
        hp_log_error("controller: %s claim=%s", msg, op->claim_key);
        hp__claim_event(op, 1, "ProvisioningCleanupFailed", msg);
        hp_metrics_fs_error("cleanup", -status);
    } else {
        if (f->have_out)
            hp__index_record(op->c, f); /* retained (again), or as another replica left it */
        else
            hp_volindex_remove_record(op->c->index, op->pv_name);
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
    hp__add_others(op->c, f, op->pv_name);
    f->rec.pv = hp_xstrdup(op->pv_name);
    f->rec.claim_uid = hp_xstrdup(op->claim_uid);
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
    if (!hp_informer_get(c->volumes, v->name)) { /* else the watch's copy, newer, counts */
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
    free(v);
    if (ours) {
        provision_succeeded(op);
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
    const struct hp_claim *cl = hp_informer_get(c->claims, op->claim_key);
    int conflict = f->status == -EEXIST || f->status == -EPERM || f->status == -EBUSY;
    int resched = !conflict && cl && cl->selected_node && reschedulable(-f->status) &&
                  c->cfg->node_name;
    hp__set_error(op, "%s", f->msg);
    if (f->status == -ENODEV)
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
    if (!(f = hp__fs_ended(op)))
        return;
    hp__root_seen(c, op->root, &f->stats);
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
    }
    const struct hp_claim *cl = hp_informer_get(c->claims, op->claim_key);
    if (!cl || strcmp(cl->uid, op->claim_uid) != 0 || cl->deleting) {
        hp_fsop_free(f);
        hp__compensate(op);
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
            hp__set_error(op, "the directory path %s is not valid UTF-8", op->path);
            hp__op_finish(op, OUT_GIVE_UP, 0);
            return;
        }
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
    const struct hp_volume *v = hp_informer_get(c->volumes, r->pv);
    return v && !hp__volume_holds(c, v, hp__root_named(c, r->root), r->path);
}

static void find_half_made(const struct hp_record *r, void *data)
{
    struct half_made_q *q = data;
    struct hp_controller *c = q->c;
    if ((r->state != HP_REC_CREATING && r->state != HP_REC_CREATED) || !r->identity ||
        strcmp(r->identity, c->cfg->identity) != 0 || !hp__root_named(c, r->root) ||
        hp__op_in_flight(c, r->pv))
        return;
    const struct hp_volume *v = hp_informer_get(c->volumes, r->pv);
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
    const char *slash = strchr(key, '/');
    if (!slash || (size_t)(slash - key) >= sizeof(ns) ||
        !hp__works_on_disks(c, c->cfg->node_name))
        return 0;
    memcpy(ns, key, (size_t)(slash - key));
    ns[slash - key] = '\0';
    struct half_made_q q = {c, cl, NULL, 0};
    hp_volindex_foreach_claim_record(c->index, ns, slash + 1, find_half_made, &q);
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
    op->path = hp_fsop_path(root->path, r->path);
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

void hp__reconcile_claim(struct hp_controller *c, const char *qkey, const char *key)
{
    const struct hp_claim *cl = hp_informer_get(c->claims, key);
    const struct hp_class *cls = NULL;
    struct hp_object_ref ref;
    char err[1024], pv_name[128], rel[4096];
    struct hp_class_params params;
    struct hp_serve_env env = {c->cfg->provisioner_name, c->cfg->node_name, c->leading};

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
    if (!cl || hp_policy_skip_claim(cl, cls, &env)) {
        hp__nothing_to_do(c, qkey);
        return;
    }
    hp__claim_ref(cl, &ref);
    const struct class_keys *ck = hp_store_get(c->class_keys, cls->name);
    if (!cl->maps_kept && ck && (ck->ann || ck->labels)) {
        /* Cached before its class said which labels and annotations to keep: the claims are
         * being listed again, and this one is reconciled when its full copy arrives. */
        hp__nothing_to_do(c, qkey);
        return;
    }
    if (hp_pv_name(cl, pv_name, sizeof(pv_name)) < 0 || hp_informer_get(c->volumes, pv_name) ||
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
        if (r && !hp_informer_get(c->volumes, r->pv) && (root = hp__root_named(c, r->root))) {
            op->adopt = hp_xstrdup(r->pv);
            snprintf(rel, sizeof(rel), "%s", r->path);
        }
    }
    if (!root) {
        char why[2048];
        int rc = hp__place(c, &params, need, &root, why, sizeof(why));
        if (rc == -ENOENT) { /* the class names a path this node does not have */
            refuse_claim(op, cl, cls->name, why);
            return;
        }
        if (rc < 0) {
            no_room(op, cl, cls, why);
            return;
        }
    }
    op->root = root;
    op->reserved = need;
    root->reserved += need;
    hp__root_metrics(c, root);
    char *abs = hp_fsop_path(root->path, rel);
    struct hp_volindex_conflict k;
    int conflict = hp_volindex_conflict(c->index, abs, pv_name, op->adopt, &k);
    if (conflict) {
        char what[900];
        hp__describe_conflict(c, &k, what, sizeof(what));
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
    op->reserving = 1;
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
    hp__announce_later(op);

    struct hp_fsop *f = hp_fsop_new(HP_FSOP_PROVISION, root->path);
    hp__add_others(c, f, pv_name);
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
    hp__run_fs(op, f, on_dir_created);
}

