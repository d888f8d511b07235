/* controller room: released volumes -- the release of their directory as recorded, our
 * finalizer, the PV's deletion -- and recording volumes made before the journal.
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
#include "hostpath/expect.h"
#include "hostpath/informer.h"
#include "hostpath/log.h"
#include "hostpath/metrics.h"
#include "hostpath/store.h"

/* ---- deletion ----------------------------------------------------------------------------- */

static void delete_metrics(const struct op *op, int ok, double seconds)
{
    hp_metrics_delete(op->class_name ? op->class_name : "", ok, seconds);
}

const struct op_type hp__op_delete = {
    .name = "delete",
    .give_up_reason = "VolumeFailedDelete",
    .metrics = delete_metrics,
};
/* --add-finalizer on a bound volume made before the flag was on. */
const struct op_type hp__op_finalize = {
    .name = "finalize",
    .give_up_reason = "VolumeFailedDelete",
};
/* Recording a volume made before the journal existed. */
const struct op_type hp__op_migrate = {
    .name = "migrate",
    .give_up_reason = "VolumeFailedDelete",
};

/* First step of a response in the finalizer chain: returns 1 when the chain goes on; else the
 * operation is finished (a PV that is already gone is success, an error is retried). */

static void on_forgotten(struct hp_fsop *f, int status, void *data)
{
    struct op *op = data;
    if (!(f = hp__fs_ended(op)))
        return;
    if (status < 0) /* the sweep finds the "deleting" record and tries again */
        hp_log_warn("controller: could not remove the ownership record of a deleted volume "
                    "pv=%s err=%s",
                    op->pv_name, f->msg);
    else {
        hp_volindex_remove_record(op->c->index, op->pv_name);
        hp__retrack_volume(op->c, op->pv_name);
    }
    hp_fsop_free(f);
    hp__op_finish(op, OUT_OK, 0);
}

/* A PV this process deleted stays in the caches until its watch event arrives, and its claim
 * until the claim's does; a watch that lags (one being re-established, as happens under load)
 * keeps them there for a while. Neither may be acted on again meanwhile: the stale volume
 * would be released a second time (and fail: its record is gone), the stale claim, unbound
 * and without its PV, provisioned anew. */
void hp__remember_gone(struct hp_controller *c, const char *pv)
{
    char key[300];
    hp_expect_deleted(c->expect, pv, uv_now(c->loop)); /* met by the volume watch */
    /* The claim's copy lags on another watch, whose deletion event names no uid: this one
     * only lapses (a claim's uid never comes back). */
    (void)snprintf(key, sizeof(key), "%s%s", EXPECT_CLAIM_PREFIX, pv);
    hp_expect_deleted(c->expect, key, uv_now(c->loop));
}

static void volume_gone(struct op *op)
{
    hp__remember_gone(op->c, op->pv_name);
    if (op->on_delete != HP_ON_DELETE_DELETE) {
        hp__op_finish(op, OUT_OK, 0);
        return;
    }
    hp_crashpoint("delete-pv-deleted");
    struct hp_fsop *f = hp_fsop_new(HP_FSOP_FORGET, op->root->path);
    f->rec.pv = hp_xstrdup(op->pv_name);
    hp__run_fs(op, f, on_forgotten);
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
    enum outcome out = hp__api_outcome(op, "delete PersistentVolume", status, resp, &ra);
    if (out == OUT_OK) {
        hp_log_info("controller: deleted volume pv=%s path=%s on-delete=%s", op->pv_name,
                    op->path, hp_on_delete_name(op->on_delete));
        volume_gone(op);
        return;
    }
    hp__volume_event(op, 1, "VolumeFailedDelete", op->last_error);
    hp__op_finish(op, hp__retry_on_give_up(out), ra);
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
    hp__pv_request(op, "DELETE", NULL, NULL, on_pv_deleted);
}

static int pv_step_ok(struct op *op, int status, const struct hp_kube_response *resp,
                      const char *what)
{
    uint64_t ra;
    op->req = NULL;
    if (status == 0 && resp->code == 404) {
        if (op->type == &hp__op_delete)
            volume_gone(op);
        else
            hp__op_finish(op, OUT_OK, 0);
        return 0;
    }
    enum outcome out = hp__api_outcome(op, what, status, resp, &ra);
    if (out != OUT_OK) {
        hp__op_finish(op, hp__retry_on_give_up(out), ra);
        return 0;
    }
    return 1;
}

static void on_finalizer_updated(struct hp_kube_req *req, int status,
                                 const struct hp_kube_response *resp, void *data)
{
    struct op *op = data;
    int adding = op->type == &hp__op_finalize;
    if (!pv_step_ok(op, status, resp,
                    adding ? "add finalizer to PersistentVolume"
                           : "remove finalizer from PersistentVolume"))
        return;
    if (!adding) {
        delete_pv_object(op);
        return;
    }
    hp_log_v(2, "controller: added finalizer pv=%s", op->pv_name);
    hp__op_finish(op, OUT_OK, 0);
}

/* Removes (or, for a finalize op, adds) our finalizer with a merge patch carrying the
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
        hp__set_error(op, "read PersistentVolume: the answer has no metadata.resourceVersion");
        hp__op_finish(op, OUT_RETRY, 0);
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
    if (op->type == &hp__op_finalize)
        (void)hp_buf_printf(&b, "%s\"" HP_FINALIZER "\"", any ? "," : "");
    (void)hp_buf_appends(&b, "]}}");
    hp_json_free(&j);
    hp__pv_request(op, "PATCH", b.data, "application/merge-patch+json", on_finalizer_updated);
    hp_buf_free(&b);
}

static void remove_finalizer_then_delete(struct op *op)
{
    if (!op->finalizer) {
        delete_pv_object(op);
        return;
    }
    hp__pv_request(op, "GET", NULL, NULL, on_pv_read_for_finalizer);
}

/* Errors of a release that a person (or a mount) must fix before anything is removed: keep
 * the PV, say why, try again with backoff for as long as it takes. */
static int waits_for_disk(int status)
{
    return status == -ENOENT || status == -EPERM;
}

/* Another live volume holds the directory by another spelling (fsops.h, others): kept, retried
 * for as long as that lasts. */
static int waits_for_other(int status)
{
    return status == -EBUSY;
}

/* A release failed with status (op->last_error says how): log, event, and retry or not. */
static void release_failed(struct op *op, int status)
{
    char msg[1400];
    int wait = waits_for_disk(status) || waits_for_other(status);
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
    hp__set_error(op, "%s", msg);
    hp_log_error("controller: %s pv=%s", msg, op->pv_name);
    if (!wait)
        hp_metrics_fs_error("delete", -status);
    hp__volume_event(op, 1, "VolumeFailedDelete", msg);
    hp__op_finish(op, wait ? OUT_WAIT : permanent ? OUT_GIVE_UP : OUT_RETRY, 0);
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
        hp__remember_gone(op->c, op->pv_name);
        hp__op_finish(op, OUT_OK, 0);
        return;
    }
    enum outcome out = hp__api_outcome(op, "read PersistentVolume", status, resp, &ra);
    if (out != OUT_OK) {
        hp__op_finish(op, hp__retry_on_give_up(out), ra);
        return;
    }
    release_failed(op, -ENOENT);
}

static void on_released(struct hp_fsop *f, int status, void *data)
{
    struct op *op = data;
    if (!(f = hp__fs_ended(op)))
        return;
    hp__root_seen(op->c, op->root, &f->stats);
    hp__quota_seen(op->c, op->root, f);
    if (status < 0) {
        hp__set_error(op, "%s", f->msg);
        hp_fsop_free(f);
        if (status == -ENOENT && !op->type->settles_record) {
            hp__pv_request(op, "GET", NULL, NULL, on_release_pv_checked);
            return;
        }
        release_failed(op, status);
        return;
    }
    hp__index_record(op->c, f);
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
    if (op->type->settles_record) {
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
    char *abs = hp_volpath_join(root->path, rel);
    int used = hp_volindex_volume_conflict(op->c->index, abs, op->pv_name, &k);
    free(abs);
    if (!used)
        return 0;
    char what[900];
    hp__describe_conflict(op->c, &k, what, sizeof(what));
    hp__set_error(op, "not %s volume directory %s: it %s %s, which is in use; the PersistentVolume is "
              "kept and this is retried",
              op->on_delete == HP_ON_DELETE_ARCHIVE ? "archiving" : "removing", op->path,
              hp_policy_relation_words(k.relation), what);
    hp_log_warn("controller: %s pv=%s", op->last_error, op->pv_name);
    hp__volume_event(op, 1, "VolumeFailedDelete", op->last_error);
    hp__op_finish(op, OUT_WAIT, 0);
    return 1;
}

/* Runs the release of op's directory (op->pv_name, op->rel, op->on_delete). */
void hp__release_dir(struct op *op)
{
    struct hp_fsop *f = hp_fsop_new(HP_FSOP_RELEASE, op->root->path);
    const struct hp_record *r = hp_volindex_record(op->c->index, op->pv_name);
    hp__add_others(op->c, f);
    f->rec.pv = hp_xstrdup(op->pv_name);
    f->rec.path = hp_xstrdup(op->rel);
    f->action = op->on_delete;
    f->only_unused = op->type->settles_record;
    if (r) {
        /* What the loop knew before: an unmounted disk shows another filesystem. */
        f->have_expect_fs = 1;
        f->expect_fs.dev = r->dev;
        f->expect_fs.fsid = r->fsid;
    }
    hp__quota_request(op->c, op->root, f, op->pv_name);
    hp__run_fs(op, f, on_released);
}

static void on_migrated(struct hp_fsop *f, int status, void *data)
{
    struct op *op = data;
    if (!(f = hp__fs_ended(op)))
        return;
    if (status < 0) {
        hp_log_warn("controller: could not record a volume made before the ownership journal "
                    "pv=%s path=%s err=%s",
                    op->pv_name, op->path, f->msg);
        hp__set_error(op, "%s", f->msg);
        hp_fsop_free(f);
        hp__op_finish(op, OUT_WAIT, 0);
        return;
    }
    hp__index_record(op->c, f);
    if (!f->already_done)
        hp_log_info("controller: recorded a volume made before the ownership journal pv=%s "
                    "path=%s on-delete=%s",
                    op->pv_name, op->path, hp_on_delete_name(f->out.on_delete));
    hp_fsop_free(f);
    /* Reconcile it again, now with its record. */
    struct hp_controller *c = op->c;
    char *name = hp_xstrdup(op->pv_name);
    hp__op_finish(op, OUT_OK, 0);
    hp__enqueue(c, 'v', name);
    free(name);
}

/* A volume of ours without the on-delete annotation and without a record was made by an
 * earlier version: record it, with its class's on-delete policy when the class still exists,
 * else retain (and say so on the PV). */
static void migrate_volume(struct hp_controller *c, const char *qkey, const struct hp_volume *v,
                           struct root *root, const char *rel)
{
    struct op *op = hp__op_new(c, qkey, &hp__op_migrate);
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
    if (cls && hp_policy_class_params_of(cls, &params, err, sizeof(err)) == 0) {
        policy = params.on_delete;
    } else {
        char msg[1024];
        snprintf(msg, sizeof(msg),
                 "volume made by an earlier version without an on-delete decision, and its "
                 "StorageClass \"%s\" is %s: its directory %s will be kept (retain) when it is "
                 "released",
                 v->class_name, cls ? "not readable" : "gone", v->path);
        hp_log_warn("controller: %s pv=%s", msg, v->name);
        hp__volume_event(op, 1, "VolumeFailedDelete", msg);
    }
    char *abs = hp_volpath_join(root->path, rel);
    int shared = hp_volindex_conflict(c->index, abs, v->name, NULL, &k);
    free(abs);
    if (policy == HP_ON_DELETE_DELETE && shared) {
        /* Two volumes of an earlier version on one directory: deleting it for one would take
         * the other's data. */
        char what[900];
        hp__describe_conflict(c, &k, what, sizeof(what));
        char *msg = hp_xasprintf("its directory %s %s %s (made by an earlier version): it will "
                                 "be kept (retain), never deleted for this volume",
                                 rel, hp_policy_relation_words(k.relation), what);
        hp_log_warn("controller: %s pv=%s", msg, v->name);
        hp__volume_event(op, 1, "VolumeFailedDelete", msg);
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
    hp__run_fs(op, f, on_migrated);
}

/* ---- taking over local-path-provisioner's volumes (--take-over) ----------------------------
 *
 * A cluster moving from local-path-provisioner runs us under its provisioner name: its PVs then
 * name us as provisioner but carry none of our annotations and have no record. With
 * --take-over, each one on this node whose path lies under a configured path, whose directory
 * exists and that no other live PV holds is recorded (MIGRATE, takeover), then annotated with
 * our identity and the on-delete decision (delete: what local-path-provisioner does when a
 * Delete volume is released; a Retain volume is never released by us anyway). From then on it
 * is a volume of ours like any other. One that does not verify is left alone, with a
 * VolumeNotTakenOver event saying why. */

static int lpp_volume(const struct hp_config *cfg, const struct hp_volume *v)
{
    return cfg->take_over && strcmp(v->provisioned_by, cfg->provisioner_name) == 0 &&
           !v->identity[0] && !v->on_delete;
}

static void not_taken_over(struct op *op, const char *why)
{
    char msg[1400];
    snprintf(msg, sizeof(msg), "not taking over volume %s (path %s): %s; it is left alone",
             op->pv_name, op->path, why);
    hp_log_warn("controller: %s", msg);
    hp__volume_event(op, 1, "VolumeNotTakenOver", msg);
    hp__set_error(op, "%s", why);
    hp__op_finish(op, OUT_GIVE_UP, 0);
}

static void on_taken_over(struct hp_kube_req *req, int status,
                          const struct hp_kube_response *resp, void *data)
{
    struct op *op = data;
    uint64_t ra;
    (void)req;
    op->req = NULL;
    enum outcome out = hp__api_outcome(op, "annotate PersistentVolume", status, resp, &ra);
    if (out != OUT_OK) { /* recorded already: the annotation is tried again */
        hp__op_finish(op, hp__retry_on_give_up(out), ra);
        return;
    }
    hp_log_info("controller: took over a volume of local-path-provisioner pv=%s path=%s "
                "on-delete=%s",
                op->pv_name, op->path, hp_on_delete_name(op->on_delete));
    struct hp_controller *c = op->c;
    char *name = hp_xstrdup(op->pv_name);
    hp__op_finish(op, OUT_OK, 0);
    hp__enqueue(c, 'v', name); /* reconciled again, as ours */
    free(name);
}

static void on_recorded_for_takeover(struct hp_fsop *f, int status, void *data)
{
    struct op *op = data;
    if (!(f = hp__fs_ended(op)))
        return;
    if (status < 0) {
        char why[HP_FSOP_MSG_LEN];
        snprintf(why, sizeof(why), "%s", f->msg);
        hp_fsop_free(f);
        not_taken_over(op, why);
        return;
    }
    hp__index_record(op->c, f);
    op->on_delete = f->out.on_delete;
    hp_fsop_free(f);
    char *body = hp_pv_takeover_patch(op->c->cfg->identity, hp_on_delete_name(op->on_delete));
    if (!body) {
        not_taken_over(op, "--identity is not valid UTF-8");
        return;
    }
    hp__pv_request(op, "PATCH", body, "application/merge-patch+json", on_taken_over);
    free(body);
}

static void take_over(struct hp_controller *c, const char *qkey, const struct hp_volume *v)
{
    char rel[4096];
    const struct hp_config *cfg = c->cfg;
    int on_this_disk = !v->node || !cfg->node_name || strcmp(v->node, cfg->node_name) == 0;
    if (v->deleting || !on_this_disk || !hp__works_on_disks(c, v->node)) {
        hp__nothing_to_do(c, qkey);
        return;
    }
    struct op *op = hp__op_new(c, qkey, &hp__op_migrate);
    op->pv_name = hp_xstrdup(v->name);
    op->class_name = hp_xstrdup(v->class_name);
    op->path = hp_xstrdup(v->path);
    struct root *root = hp__root_of(c, v->path, rel, sizeof(rel));
    if (!root) {
        not_taken_over(op, "its path is under none of this node's configured paths (--config, "
                           "or --pv-dir)");
        return;
    }
    struct hp_volindex_conflict k;
    char *abs = hp_volpath_join(root->path, rel);
    int shared = hp_volindex_conflict(c->index, abs, v->name, NULL, &k);
    free(abs);
    if (shared) {
        char what[900], why[1100];
        hp__describe_conflict(c, &k, what, sizeof(what));
        snprintf(why, sizeof(why), "its directory %s %s", hp_policy_relation_words(k.relation),
                 what);
        not_taken_over(op, why);
        return;
    }
    op->rel = hp_xstrdup(rel);
    op->root = root;
    struct hp_fsop *f = hp_fsop_new(HP_FSOP_MIGRATE, root->path);
    hp__add_others(c, f);
    f->takeover = 1;
    f->rec.path = hp_xstrdup(rel);
    f->rec.pv = hp_xstrdup(v->name);
    f->rec.claim_uid = hp_xstrdup(v->claim_uid);
    f->rec.claim_namespace = hp_xstrdup(v->claim_namespace);
    f->rec.claim_name = hp_xstrdup(v->claim_name);
    f->rec.class_name = hp_xstrdup(v->class_name);
    f->rec.identity = hp_xstrdup(cfg->identity);
    f->rec.on_delete = HP_ON_DELETE_DELETE;
    f->rec.state = HP_REC_CREATED;
    hp__run_fs(op, f, on_recorded_for_takeover);
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
    if (!v->identity[0] && !v->on_delete)
        hp_log_info("controller: leaving a released volume without our annotations alone pv=%s "
                    "path=%s (made by local-path-provisioner under this provisioner name? "
                    "--take-over takes its volumes over)",
                    v->name, v->path);
    else
        hp_log_info("controller: leaving a released volume of another identity alone pv=%s "
                    "identity=\"%s\" ours=\"%s\" path=%s (to delete it here, run with "
                    "--identity \"%s\")",
                    v->name, v->identity, c->cfg->identity, v->path, v->identity);
    hp_metrics_other_identity();
    if (hp_store_len(c->logged_identity) < MAX_LOGGED_UNRECORDED)
        free(hp_store_put(c->logged_identity, hp_xstrdup(v->name)));
}

void hp__reconcile_volume(struct hp_controller *c, const char *qkey, const char *key)
{
    const struct hp_volume *v = hp__volume(c, key);
    const struct hp_config *cfg = c->cfg;
    char rel[4096];

    if (v && lpp_volume(cfg, v)) {
        take_over(c, qkey, v);
        return;
    }
    if (v && strcmp(v->provisioned_by, cfg->provisioner_name) == 0 &&
        strcmp(v->identity, cfg->identity) != 0)
        other_identity(c, v);
    if (!v || strcmp(v->provisioned_by, cfg->provisioner_name) != 0 ||
        strcmp(v->identity, cfg->identity) != 0 || !hp__works_on_disks(c, v->node) ||
        hp_expect_get(c->expect, v->name, uv_now(c->loop)) == HP_EXPECT_GONE) {
        hp__nothing_to_do(c, qkey);
        return;
    }
    struct root *root = hp__root_of(c, v->path, rel, sizeof(rel));
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
        /* Labelled already, the node's watch not yet showing it: not again meanwhile. */
        if (!v->deleting && !hp__relabelling(c, v->name) && hp__label_volume(c, qkey, v))
            return;
        hp__nothing_to_do(c, qkey);
        return;
    }
    struct op *op = hp__op_new(c, qkey, add_finalizer ? &hp__op_finalize : &hp__op_delete);
    op->pv_name = hp_xstrdup(v->name);
    op->class_name = hp_xstrdup(v->class_name);
    op->path = hp_xstrdup(v->path);
    op->finalizer = v->our_finalizer;
    op->pv_deleting = v->deleting;
    op->on_delete = HP_ON_DELETE_RETAIN; /* until decided: nothing is forgotten */
    if (add_finalizer) {
        hp__pv_request(op, "GET", NULL, NULL, on_pv_read_for_finalizer);
        return;
    }
    if (!delete_data) {
        remove_finalizer_then_delete(op);
        return;
    }
    if (!rel_ok) {
        hp__set_error(op, "volume path \"%s\" is not inside --pv-dir %s%s; not removing anything",
                  v->path, c->nroots ? c->roots[0]->path : "",
                  c->nroots > 1 ? " or another path of this node" : "");
        hp_log_error("controller: %s pv=%s", op->last_error, op->pv_name);
        hp__volume_event(op, 1, "VolumeFailedDelete", op->last_error);
        hp__op_finish(op, OUT_GIVE_UP, 0);
        return;
    }
    op->rel = hp_xstrdup(rel);
    op->root = root;
    const struct hp_class *cls = hp_informer_get(c->classes, v->class_name);
    struct hp_class_params params;
    char err[512];
    int have_params = cls && hp_policy_class_params_of(cls, &params, err,
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
        hp__volume_event(op, 1, "VolumeFailedDelete", msg);
    }
    if (op->on_delete != HP_ON_DELETE_RETAIN && release_blocked(op, root, rel))
        return;
    hp_log_v(2, "controller: releasing volume pv=%s path=%s on-delete=%s from=%s", v->name,
             v->path, hp_on_delete_name(op->on_delete), hp_policy_source_name(src));
    hp__release_dir(op);
}

void hp__release_init(struct hp_controller *c)
{
    c->logged_identity = hp_store_new(&hp_store_strings);
}

void hp__release_free(struct hp_controller *c)
{
    hp_store_free(c->logged_identity);
}
