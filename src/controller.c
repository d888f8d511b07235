/* controller: reconcile claims into volumes, and released volumes into removed directories.
 *
 * Loop thread only. Three reflectors feed three stores; every change enqueues a key in one work
 * queue ("c:<namespace>/<name>" for claims, "v:<name>" for volumes). A reconcile reads the store,
 * decides (DESIGN.md "Decisions"), and runs one operation: a chain of a filesystem job on the
 * threadpool and API requests. Every step is idempotent, so a retry simply reconciles again from
 * the top; nothing but the work queue's failure count survives between attempts.
 */
#include "hostpath/controller.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hostpath/buf.h"
#include "hostpath/config.h"
#include "hostpath/events.h"
#include "hostpath/hostpath.h"
#include "hostpath/kube_client.h"
#include "hostpath/log.h"
#include "hostpath/metrics.h"
#include "hostpath/objects.h"
#include "hostpath/pathpattern.h"
#include "hostpath/store.h"
#include "hostpath/watch.h"
#include "hostpath/workqueue.h"

#define KEY_MAX 600
#define QUEUE_NAME "hostpath"

enum outcome { OUT_OK, OUT_RETRY, OUT_RETRY_AFTER, OUT_GIVE_UP };
/* OP_FINALIZE: --add-finalizer on a bound volume made before the flag was on. */
enum op_kind { OP_PROVISION, OP_DELETE, OP_FINALIZE };

struct op {
    struct hp_controller *c;
    struct op *prev, *next;
    const char *qkey; /* the work queue's key, valid until hp_workqueue_done */
    enum op_kind kind;
    char *claim_key;  /* namespace/name */
    char *claim_uid;
    char *pv_name;
    char *class_name;
    char *path;       /* absolute directory */
    char *last_error; /* for the give-up event */
    int delete_on_cleanup;
    int finalizer;    /* delete: the PV carries our finalizer */
    int pv_deleting;  /* delete: the PV already has a deletionTimestamp */
    enum hp_on_delete on_delete;
    struct hp_kube_req *req;
    int fs_running;
    uint64_t start_ms;
    json_t *pv; /* provision: the PV to create */
};

struct hp_controller {
    uv_loop_t *loop;
    const struct hp_config *cfg;
    struct hp_kube_client *client;
    struct hp_events *events;
    struct hp_hostpath *hostpath;
    struct hp_store *claims, *volumes, *classes;
    struct hp_watch *w_claims, *w_volumes, *w_classes;
    int synced_claims, synced_volumes, synced_classes, all_synced;
    struct hp_workqueue *queue;
    uv_timer_t resync;
    int leading;
    int stopping;
    int closing_handles;
    struct op *ops;
    void (*close_cb)(void *data);
    void *close_data;
};

/* ---- class parameters --------------------------------------------------------------------- */

struct class_params {
    const char *path_pattern;
    mode_t mode;
    uid_t uid;
    gid_t gid;
    int set_owner;
    enum hp_on_delete on_delete;
};

static int parse_id(const char *s, unsigned long *out)
{
    char *end;
    if (!*s || *s == '-' || *s == '+')
        return -EINVAL;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno || *end || v > 0x7fffffffUL)
        return -EINVAL;
    *out = v;
    return 0;
}

static int parse_params(const struct hp_class *cls, struct class_params *p, char *err,
                        size_t errlen)
{
    p->path_pattern = HP_DEFAULT_PATH_PATTERN;
    p->mode = 0777;
    p->uid = (uid_t)-1;
    p->gid = (gid_t)-1;
    p->set_owner = 0;
    p->on_delete = HP_ON_DELETE_DELETE;
    for (const char *k = cls->parameters; *k; k = hp_packed_next(hp_packed_next(k))) {
        const char *v = hp_packed_next(k);
        unsigned long n;
        if (strcmp(k, "pathPattern") == 0) {
            p->path_pattern = v;
        } else if (strcmp(k, "mode") == 0) {
            char *end;
            errno = 0;
            n = strtoul(v, &end, 8);
            if (!*v || *end || errno || n > 07777 || *v == '-') {
                snprintf(err, errlen, "parameter mode=\"%s\" is not an octal file mode like 0770",
                         v);
                return -EINVAL;
            }
            p->mode = (mode_t)n;
        } else if (strcmp(k, "uid") == 0 || strcmp(k, "gid") == 0) {
            if (parse_id(v, &n)) {
                snprintf(err, errlen, "parameter %s=\"%s\" is not a numeric id", k, v);
                return -EINVAL;
            }
            if (k[0] == 'u')
                p->uid = (uid_t)n;
            else
                p->gid = (gid_t)n;
            p->set_owner = 1;
        } else if (strcmp(k, "onDelete") == 0) {
            if (strcmp(v, "delete") == 0)
                p->on_delete = HP_ON_DELETE_DELETE;
            else if (strcmp(v, "retain") == 0)
                p->on_delete = HP_ON_DELETE_RETAIN;
            else if (strcmp(v, "archive") == 0)
                p->on_delete = HP_ON_DELETE_ARCHIVE;
            else {
                snprintf(err, errlen,
                         "parameter onDelete=\"%s\" is not one of delete, retain, archive", v);
                return -EINVAL;
            }
        } else {
            snprintf(err, errlen,
                     "unknown StorageClass parameter \"%s\" (supported: pathPattern, mode, uid, "
                     "gid, onDelete)",
                     k);
            return -EINVAL;
        }
    }
    return 0;
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
    hp_metrics_workqueue_add(QUEUE_NAME);
    hp_metrics_workqueue_depth(QUEUE_NAME, hp_workqueue_len(c->queue));
}

static void enqueue_claim_obj(void *obj, void *data)
{
    enqueue(data, 'c', ((struct hp_claim *)obj)->key);
}

static void enqueue_volume_obj(void *obj, void *data)
{
    enqueue(data, 'v', ((struct hp_volume *)obj)->key);
}

static void enqueue_all(struct hp_controller *c)
{
    hp_store_foreach(c->claims, enqueue_claim_obj, c);
    hp_store_foreach(c->volumes, enqueue_volume_obj, c);
}

struct class_match {
    struct hp_controller *c;
    const char *class_name;
};

static void enqueue_claim_of_class(void *obj, void *data)
{
    struct hp_claim *cl = obj;
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
    op->next = c->ops;
    if (c->ops)
        c->ops->prev = op;
    c->ops = op;
    return op;
}

static void maybe_finish_stop(struct hp_controller *c);

static void op_free(struct op *op)
{
    struct hp_controller *c = op->c;
    if (op->prev)
        op->prev->next = op->next;
    else
        c->ops = op->next;
    if (op->next)
        op->next->prev = op->prev;
    free(op->claim_key);
    free(op->claim_uid);
    free(op->pv_name);
    free(op->class_name);
    free(op->path);
    free(op->last_error);
    json_decref(op->pv);
    free(op);
    if (c->stopping)
        maybe_finish_stop(c);
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
    struct hp_claim *cl = hp_store_get(op->c->claims, op->claim_key);
    struct hp_object_ref ref;
    if (!cl || strcmp(cl->uid, op->claim_uid) != 0)
        return;
    claim_ref(cl, &ref);
    hp_events_emit(op->c->events, &ref, warning, reason, "%s", msg);
}

static void volume_event(struct op *op, const char *reason, const char *msg)
{
    struct hp_object_ref ref = {.kind = "PersistentVolume", .api_version = "v1",
                                .name = op->pv_name};
    hp_events_emit(op->c->events, &ref, 1, reason, "%s", msg);
}

/* Ends an operation: reports the outcome to the queue and frees the op. */
static void op_finish(struct op *op, enum outcome out, uint64_t retry_after_ms)
{
    struct hp_controller *c = op->c;
    const char *qkey = op->qkey;
    double secs = (double)(uv_now(c->loop) - op->start_ms) / 1000.0;
    const char *cls = op->class_name ? op->class_name : "";

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
                volume_event(op, "VolumeFailedDelete", msg);
            out = OUT_GIVE_UP;
        }
    }
    switch (out) {
    case OUT_OK:
    case OUT_GIVE_UP:
        hp_workqueue_forget(c->queue, qkey);
        break;
    case OUT_RETRY:
        hp_workqueue_add_rate_limited(c->queue, qkey);
        hp_metrics_workqueue_retry(QUEUE_NAME);
        break;
    case OUT_RETRY_AFTER:
        /* Honour Retry-After, but keep counting failures for the threshold. (A separate
         * add_after after add_rate_limited would be ignored: the earlier wake-up wins.) */
        hp_workqueue_add_rate_limited_min(c->queue, qkey, retry_after_ms);
        hp_metrics_workqueue_retry(QUEUE_NAME);
        break;
    }
    op_free(op);
    hp_workqueue_done(c->queue, qkey);
    hp_metrics_workqueue_depth(QUEUE_NAME, hp_workqueue_len(c->queue));
}

/* Classifies an API response: OK, retry (5xx, 429, network), or permanent. */
static enum outcome api_outcome(struct op *op, const char *what, struct hp_kube_response *resp,
                                uint64_t *retry_after)
{
    char reason[64] = "", message[512] = "";
    *retry_after = 0;
    if (resp->status < 0) {
        set_error(op, "%s: %s", what, resp->error ? resp->error : strerror(-resp->status));
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

/* A filesystem job of the operation finished. When the controller is stopping, the operation
 * ends here (its queue is gone) and 1 is returned. */
static int fs_job_ended(struct op *op)
{
    op->fs_running = 0;
    if (!op->c->stopping)
        return 0;
    op_free(op);
    return 1;
}

/* ---- provisioning ------------------------------------------------------------------------- */

static void on_cleanup_done(void *data, int status, const char *message, const char *path)
{
    struct op *op = data;
    if (fs_job_ended(op))
        return;
    if (status < 0) {
        char msg[1200];
        snprintf(msg, sizeof(msg), "failed to clean up directory %s: %s", path, message);
        hp_log_error("controller: %s claim=%s", msg, op->claim_key);
        claim_event(op, 1, "ProvisioningCleanupFailed", msg);
        hp_metrics_fs_error("cleanup", -status);
    } else if (op->last_error) {
        hp_log_info("controller: removed the new directory of a volume the API server refused "
                    "claim=%s path=%s",
                    op->claim_key, path);
    } else {
        hp_log_info("controller: claim is gone; removed its new directory claim=%s path=%s",
                    op->claim_key, path);
    }
    op_finish(op, status < 0 ? OUT_RETRY : (op->last_error ? OUT_GIVE_UP : OUT_OK), 0);
}

/* The claim went away (or the PV was refused): remove the directory we made for it. */
static void provision_cleanup(struct op *op)
{
    if (!op->delete_on_cleanup) {
        op_finish(op, op->last_error ? OUT_GIVE_UP : OUT_OK, 0);
        return;
    }
    op->fs_running = 1;
    hp_hostpath_remove(op->c->hostpath, op->path, HP_ON_DELETE_DELETE, on_cleanup_done, op);
}

static void provision_succeeded(struct op *op)
{
    char msg[512];
    snprintf(msg, sizeof(msg), "Successfully provisioned volume %s", op->pv_name);
    claim_event(op, 0, "ProvisioningSucceeded", msg);
    hp_log_info("controller: provisioned volume claim=%s pv=%s path=%s", op->claim_key,
                op->pv_name, op->path);
    op_finish(op, OUT_OK, 0);
}

/* Puts the PV of an API answer into the store unless the watch already delivered it (its copy
 * is then newer): until the watch event arrives, a claim update would otherwise find no PV and
 * provision the claim again. Returns the stored volume, or NULL when the body is no PV. */
static const struct hp_volume *store_answered_volume(struct op *op,
                                                     const struct hp_kube_response *resp)
{
    const struct hp_volume *have = hp_store_get(op->c->volumes, op->pv_name);
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
    free(hp_store_put(op->c->volumes, v));
    return v;
}

static void on_pv_get(struct hp_kube_response *resp, void *data)
{
    struct op *op = data;
    uint64_t ra;
    op->req = NULL;
    enum outcome out = api_outcome(op, "read back existing PersistentVolume", resp, &ra);
    if (out != OUT_OK) {
        op_finish(op, out == OUT_GIVE_UP ? OUT_RETRY : out, ra);
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

static void on_pv_created(struct hp_kube_response *resp, void *data)
{
    struct op *op = data;
    uint64_t ra;
    op->req = NULL;
    if (resp->status == 0 && resp->code == 409) {
        /* Created by an earlier attempt (we crashed or the reply was lost): read it back. */
        pv_request(op, "GET", NULL, NULL, on_pv_get);
        return;
    }
    enum outcome out = api_outcome(op, "create PersistentVolume", resp, &ra);
    if (out == OUT_OK) {
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
        /* The server refuses this PV for good: do not leave the directory behind. */
        provision_cleanup(op);
        return;
    }
    op_finish(op, out, ra);
}

static int reschedulable(int err)
{
    return err == ENOSPC || err == EDQUOT || err == EROFS || err == EIO;
}

static void on_reschedule_patched(struct hp_kube_response *resp, void *data)
{
    struct op *op = data;
    uint64_t ra;
    op->req = NULL;
    if (api_outcome(op, "remove selected-node annotation", resp, &ra) != OUT_OK)
        hp_log_warn("controller: could not ask the scheduler to pick another node claim=%s",
                    op->claim_key);
    op_finish(op, OUT_RETRY, 0);
}

static void on_dir_created(void *data, int status, const char *message, const char *path)
{
    struct op *op = data;
    struct hp_controller *c = op->c;
    if (fs_job_ended(op))
        return;
    if (status < 0) {
        char msg[1200];
        struct hp_claim *cl = hp_store_get(c->claims, op->claim_key);
        int resched = cl && cl->selected_node && reschedulable(-status) && c->cfg->node_name;
        set_error(op, "%s", message);
        snprintf(msg, sizeof(msg), "failed to provision volume with StorageClass \"%s\": %s%s",
                 op->class_name, message,
                 resched ? "; asking the scheduler to pick another node" : "");
        hp_log_warn("controller: %s claim=%s", msg, op->claim_key);
        hp_metrics_fs_error("create", -status);
        claim_event(op, 1, "ProvisioningFailed", msg);
        if (resched) {
            char *p = hp_xasprintf("/api/v1/namespaces/%s/persistentvolumeclaims/%s",
                                   cl->namespace_, cl->name);
            const char *body = "{\"metadata\":{\"annotations\":{\"" HP_ANN_SELECTED_NODE
                               "\":null,\"" HP_ANN_ALPHA_SELECTED_NODE "\":null}}}";
            op->req = hp_kube_request(c->client, "PATCH", p, body,
                                      "application/merge-patch+json", on_reschedule_patched, op);
            free(p);
            return;
        }
        op_finish(op, OUT_RETRY, 0);
        return;
    }
    struct hp_claim *cl = hp_store_get(c->claims, op->claim_key);
    if (!cl || strcmp(cl->uid, op->claim_uid) != 0 || cl->deleting) {
        provision_cleanup(op);
        return;
    }
    char *body = json_dumps(op->pv, JSON_COMPACT);
    op->req = hp_kube_request(c->client, "POST", "/api/v1/persistentvolumes", body, NULL,
                              on_pv_created, op);
    free(body);
}

/* Why a claim is not ours to provision, or NULL when it is. */
static const char *skip_reason(struct hp_controller *c, const struct hp_claim *cl,
                               const struct hp_class **cls_out)
{
    if (cl->volume_name[0])
        return "bound";
    if (cl->deleting)
        return "being deleted";
    if (!cl->class_name || !cl->class_name[0])
        return "no class";
    const struct hp_class *cls = hp_store_get(c->classes, cl->class_name);
    if (!cls)
        return "class not found";
    if (strcmp(cls->provisioner, c->cfg->provisioner_name) != 0)
        return "class of another provisioner";
    if (cl->provisioner && strcmp(cl->provisioner, c->cfg->provisioner_name) != 0)
        return "annotated for another provisioner";
    if (cls->wait_for_first_consumer && (!cl->selected_node || !cl->selected_node[0]))
        return "waiting for first consumer";
    if (cl->selected_node && cl->selected_node[0]) {
        if (c->cfg->node_name && strcmp(cl->selected_node, c->cfg->node_name) != 0)
            return "selected node is another node";
    } else if (!c->leading) {
        return "not leader";
    }
    *cls_out = cls;
    return NULL;
}

static void reconcile_claim(struct hp_controller *c, const char *qkey, const char *key)
{
    struct hp_claim *cl = hp_store_get(c->claims, key);
    const struct hp_class *cls = NULL;
    struct hp_object_ref ref;
    char err[512], pv_name[128], rel[4096];
    struct class_params params;

    if (!cl || skip_reason(c, cl, &cls)) {
        hp_workqueue_forget(c->queue, qkey);
        hp_workqueue_done(c->queue, qkey);
        return;
    }
    claim_ref(cl, &ref);
    if (hp_pv_name(cl, pv_name, sizeof(pv_name)) < 0 || hp_store_get(c->volumes, pv_name)) {
        /* Already provisioned: the binder will bind it. */
        hp_workqueue_forget(c->queue, qkey);
        hp_workqueue_done(c->queue, qkey);
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
    int bad = 0;
    if (cl->block) {
        snprintf(err, sizeof(err), "volumeMode Block is not supported: hostPath volumes are "
                                   "directories; use volumeMode Filesystem");
        bad = 1;
    } else if (reclaim == HP_RECLAIM_RECYCLE) {
        snprintf(err, sizeof(err), "reclaimPolicy Recycle is not supported (it would hand the "
                                   "data to a scrubber pod); use Delete or Retain");
        bad = 1;
    } else if (parse_params(cls, &params, err, sizeof(err)) < 0 ||
               hp_pathpattern_render(params.path_pattern, cl, pv_name, rel, sizeof(rel), err,
                                     sizeof(err)) < 0) {
        bad = 1;
    }
    if (bad) {
        char msg[1200];
        snprintf(msg, sizeof(msg), "failed to provision volume with StorageClass \"%s\": %s",
                 cls->name, err);
        hp_log_warn("controller: %s claim=%s", msg, key);
        hp_events_emit(c->events, &ref, 1, "ProvisioningFailed", "%s", msg);
        op_finish(op, OUT_GIVE_UP, 0);
        return;
    }
    op->path = hp_xasprintf("%s/%s", hp_hostpath_dir(c->hostpath), rel);
    op->delete_on_cleanup = reclaim == HP_RECLAIM_DELETE;
    const char *node = cl->selected_node && cl->selected_node[0] ? cl->selected_node
                                                                 : c->cfg->node_name;
    struct hp_pv_spec spec = {
        .name = pv_name,
        .claim = cl,
        .class_ = cls,
        .provisioner = c->cfg->provisioner_name,
        .identity = c->cfg->identity,
        .path = op->path,
        .node = node,
        .reclaim = reclaim,
        .add_finalizer = c->cfg->add_finalizer,
    };
    op->pv = hp_pv_build(&spec);
    hp_events_emit(c->events, &ref, 0, "Provisioning",
                   "External provisioner is provisioning volume for claim \"%s\"", key);
    op->fs_running = 1;
    hp_hostpath_create(c->hostpath, rel, params.mode, params.uid, params.gid, params.set_owner,
                       on_dir_created, op);
}

/* ---- deletion ----------------------------------------------------------------------------- */

/* First step of a response in the finalizer chain: returns 1 when the chain goes on; else the
 * operation is finished (a PV that is already gone is success, an error is retried). */
static int pv_step_ok(struct op *op, struct hp_kube_response *resp, const char *what)
{
    uint64_t ra;
    op->req = NULL;
    if (resp->status == 0 && resp->code == 404) {
        op_finish(op, OUT_OK, 0);
        return 0;
    }
    enum outcome out = api_outcome(op, what, resp, &ra);
    if (out != OUT_OK) {
        op_finish(op, out == OUT_GIVE_UP ? OUT_RETRY : out, ra);
        return 0;
    }
    return 1;
}

static void on_pv_deleted(struct hp_kube_response *resp, void *data)
{
    struct op *op = data;
    uint64_t ra;
    op->req = NULL;
    if (resp->status == 0 && resp->code == 404) {
        op_finish(op, OUT_OK, 0);
        return;
    }
    enum outcome out = api_outcome(op, "delete PersistentVolume", resp, &ra);
    if (out == OUT_OK)
        hp_log_info("controller: deleted volume pv=%s path=%s", op->pv_name, op->path);
    else
        volume_event(op, "VolumeFailedDelete", op->last_error);
    op_finish(op, out == OUT_GIVE_UP ? OUT_RETRY : out, ra);
}

static void delete_pv_object(struct op *op)
{
    if (op->pv_deleting) {
        /* Already being deleted: removing our finalizer let it go. */
        hp_log_info("controller: deleted volume pv=%s path=%s", op->pv_name, op->path);
        op_finish(op, OUT_OK, 0);
        return;
    }
    pv_request(op, "DELETE", NULL, NULL, on_pv_deleted);
}

static void on_finalizer_updated(struct hp_kube_response *resp, void *data)
{
    struct op *op = data;
    int adding = op->kind == OP_FINALIZE;
    if (!pv_step_ok(op, resp, adding ? "add finalizer to PersistentVolume"
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
static void on_pv_read_for_finalizer(struct hp_kube_response *resp, void *data)
{
    struct op *op = data;
    if (!pv_step_ok(op, resp, "read PersistentVolume"))
        return;
    json_t *pv = json_loadb(resp->body, resp->body_len, 0, NULL);
    json_t *meta = json_object_get(pv, "metadata");
    json_t *fins = json_object_get(meta, "finalizers");
    json_t *keep = json_array();
    size_t i;
    json_t *f;
    json_array_foreach(fins, i, f)
    {
        if (!json_is_string(f) || strcmp(json_string_value(f), HP_FINALIZER) != 0)
            json_array_append(keep, f);
    }
    if (op->kind == OP_FINALIZE)
        json_array_append_new(keep, json_string(HP_FINALIZER));
    json_t *patch = json_pack("{s:{s:O,s:o}}", "metadata", "resourceVersion",
                              json_object_get(meta, "resourceVersion"), "finalizers", keep);
    char *body = json_dumps(patch, JSON_COMPACT);
    pv_request(op, "PATCH", body, "application/merge-patch+json", on_finalizer_updated);
    free(body);
    json_decref(patch);
    json_decref(pv);
}

static void remove_finalizer_then_delete(struct op *op)
{
    if (!op->finalizer) {
        delete_pv_object(op);
        return;
    }
    pv_request(op, "GET", NULL, NULL, on_pv_read_for_finalizer);
}

static void on_dir_removed(void *data, int status, const char *message, const char *path)
{
    struct op *op = data;
    if (fs_job_ended(op))
        return;
    if (status < 0) {
        char msg[1200];
        int permanent = status == -ELOOP || status == -ENOTDIR || status == -EXDEV ||
                        status == -EINVAL;
        snprintf(msg, sizeof(msg), "failed to delete volume directory %s: %s%s", path, message,
                 permanent ? "; left in place for an administrator to inspect" : "");
        set_error(op, "%s", msg);
        hp_log_error("controller: %s pv=%s", msg, op->pv_name);
        hp_metrics_fs_error("delete", -status);
        volume_event(op, "VolumeFailedDelete", msg);
        op_finish(op, permanent ? OUT_GIVE_UP : OUT_RETRY, 0);
        return;
    }
    remove_finalizer_then_delete(op);
}

static void reconcile_volume(struct hp_controller *c, const char *qkey, const char *key)
{
    struct hp_volume *v = hp_store_get(c->volumes, key);
    const struct hp_config *cfg = c->cfg;
    char rel[4096];

    if (!v || strcmp(v->provisioned_by, cfg->provisioner_name) != 0 ||
        strcmp(v->identity, cfg->identity) != 0) {
        hp_workqueue_forget(c->queue, qkey);
        hp_workqueue_done(c->queue, qkey);
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
        hp_workqueue_forget(c->queue, qkey);
        hp_workqueue_done(c->queue, qkey);
        return;
    }
    struct op *op = op_new(c, qkey, add_finalizer ? OP_FINALIZE : OP_DELETE);
    op->pv_name = hp_xstrdup(v->name);
    op->class_name = hp_xstrdup(v->class_name);
    op->path = hp_xstrdup(v->path);
    op->finalizer = v->our_finalizer;
    op->pv_deleting = v->deleting;
    if (add_finalizer) {
        pv_request(op, "GET", NULL, NULL, on_pv_read_for_finalizer);
        return;
    }
    if (!delete_data) {
        remove_finalizer_then_delete(op);
        return;
    }
    if (hp_path_relative_to(hp_hostpath_dir(c->hostpath), v->path, rel, sizeof(rel)) < 0) {
        set_error(op, "volume path \"%s\" is not inside --pv-dir %s; not removing anything",
                  v->path, hp_hostpath_dir(c->hostpath));
        hp_log_error("controller: %s pv=%s", op->last_error, op->pv_name);
        volume_event(op, "VolumeFailedDelete", op->last_error);
        op_finish(op, OUT_GIVE_UP, 0);
        return;
    }
    op->on_delete = HP_ON_DELETE_DELETE;
    const struct hp_class *cls = hp_store_get(c->classes, v->class_name);
    struct class_params params;
    char err[512];
    if (cls && parse_params(cls, &params, err, sizeof(err)) == 0)
        op->on_delete = params.on_delete;
    if (op->on_delete == HP_ON_DELETE_RETAIN) {
        hp_log_info("controller: keeping directory (onDelete=retain) pv=%s path=%s", v->name,
                    v->path);
        remove_finalizer_then_delete(op);
        return;
    }
    op->fs_running = 1;
    hp_hostpath_remove(c->hostpath, v->path, op->on_delete, on_dir_removed, op);
}

static void process(struct hp_workqueue *q, const char *qkey, void *data)
{
    struct hp_controller *c = data;
    (void)q;
    hp_metrics_workqueue_depth(QUEUE_NAME, hp_workqueue_len(c->queue));
    if (qkey[0] == 'c')
        reconcile_claim(c, qkey, qkey + 2);
    else
        reconcile_volume(c, qkey, qkey + 2);
}

/* ---- reflector handlers ------------------------------------------------------------------- */

static void check_synced(struct hp_controller *c)
{
    if (c->all_synced || !c->synced_claims || !c->synced_volumes || !c->synced_classes)
        return;
    c->all_synced = 1;
    hp_log_info("controller: caches synced claims=%zu volumes=%zu classes=%zu",
                hp_store_len(c->claims), hp_store_len(c->volumes), hp_store_len(c->classes));
    enqueue_all(c);
}

static void store_event(struct hp_controller *c, struct hp_store *store, char kind,
                        enum hp_watch_type type, void *obj)
{
    if (!obj)
        return;
    const char *key = kind == 'c' ? ((struct hp_claim *)obj)->key : ((struct hp_volume *)obj)->key;
    char k[KEY_MAX];
    snprintf(k, sizeof(k), "%s", key);
    if (type == HP_WATCH_DELETED) {
        free(hp_store_remove(store, k));
        free(obj);
    } else {
        free(hp_store_put(store, obj));
    }
    if (c->all_synced)
        enqueue(c, kind, k);
}

static void on_claim(enum hp_watch_type type, const struct hp_json *j, int obj, void *data)
{
    struct hp_controller *c = data;
    store_event(c, c->claims, 'c', type, hp_claim_decode(j, obj));
}

static void on_volume(enum hp_watch_type type, const struct hp_json *j, int obj, void *data)
{
    struct hp_controller *c = data;
    store_event(c, c->volumes, 'v', type, hp_volume_decode(j, obj));
}

static void on_class(enum hp_watch_type type, const struct hp_json *j, int obj, void *data)
{
    struct hp_controller *c = data;
    struct hp_class *cls = hp_class_decode(j, obj);
    if (!cls)
        return;
    struct class_match m = {c, cls->name};
    if (c->all_synced)
        hp_store_foreach(c->claims, enqueue_claim_of_class, &m);
    if (type == HP_WATCH_DELETED) {
        free(hp_store_remove(c->classes, cls->key));
        free(cls);
    } else {
        free(hp_store_put(c->classes, cls));
    }
}

static void on_removed_claim(void *obj, void *data)
{
    struct hp_controller *c = data;
    if (c->all_synced)
        enqueue(c, 'c', ((struct hp_claim *)obj)->key);
    free(obj);
}

static void on_removed_volume(void *obj, void *data)
{
    free(obj);
    (void)data;
}

static void on_removed_class(void *obj, void *data)
{
    free(obj);
    (void)data;
}

#define LIST_HANDLERS(kind, store_field, synced_field, removed)                                   \
    static void on_##kind##_list_begin(void *data)                                               \
    {                                                                                              \
        struct hp_controller *c = data;                                                            \
        hp_store_replace_begin(c->store_field);                                                    \
    }                                                                                              \
    static void on_##kind##_list_end(void *data)                                                 \
    {                                                                                              \
        struct hp_controller *c = data;                                                            \
        hp_store_replace_end(c->store_field, removed, c);                                          \
        c->synced_field = 1;                                                                       \
        check_synced(c);                                                                           \
    }

LIST_HANDLERS(claims, claims, synced_claims, on_removed_claim)
LIST_HANDLERS(volumes, volumes, synced_volumes, on_removed_volume)
LIST_HANDLERS(classes, classes, synced_classes, on_removed_class)

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

static const struct hp_store_ops claim_ops = {claim_key_of, free};
static const struct hp_store_ops volume_ops = {volume_key_of, free};
static const struct hp_store_ops class_ops = {class_key_of, free};

/* ---- lifecycle ---------------------------------------------------------------------------- */

static void on_resync(uv_timer_t *t)
{
    struct hp_controller *c = hp_container_of(t, struct hp_controller, resync);
    if (c->all_synced) {
        hp_log_v(2, "controller: periodic resync claims=%zu volumes=%zu",
                 hp_store_len(c->claims), hp_store_len(c->volumes));
        enqueue_all(c);
    }
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
    c->claims = hp_store_new(&claim_ops);
    c->volumes = hp_store_new(&volume_ops);
    c->classes = hp_store_new(&class_ops);
    struct hp_workqueue_opts qo = {
        .base_delay_ms = cfg->retry_base_delay_ms,
        .max_delay_ms = cfg->retry_max_delay_ms,
        /* Enough concurrent reconciles to keep several API requests in flight; the threadpool
         * side is capped separately by --workers. */
        .max_active = 64,
    };
    c->queue = hp_workqueue_new(loop, &qo, process, c);
    int rc = uv_timer_init(loop, &c->resync);
    if (rc)
        hp_log_error("controller: uv_timer_init: %s", uv_strerror(rc));
    return c;
}

void hp_controller_start(struct hp_controller *c)
{
    static const struct hp_watch_handler claim_h = {on_claims_list_begin, on_claim,
                                                    on_claims_list_end};
    static const struct hp_watch_handler volume_h = {on_volumes_list_begin, on_volume,
                                                     on_volumes_list_end};
    static const struct hp_watch_handler class_h = {on_classes_list_begin, on_class,
                                                    on_classes_list_end};
    c->w_classes = hp_watch_start(c->loop, c->client, "storageclasses",
                                  "/apis/storage.k8s.io/v1/storageclasses", &class_h, c, NULL);
    c->w_volumes = hp_watch_start(c->loop, c->client, "persistentvolumes",
                                  "/api/v1/persistentvolumes", &volume_h, c, NULL);
    c->w_claims = hp_watch_start(c->loop, c->client, "persistentvolumeclaims",
                                 "/api/v1/persistentvolumeclaims", &claim_h, c, NULL);
    if (c->cfg->resync_period_ms)
        (void)uv_timer_start(&c->resync, on_resync, c->cfg->resync_period_ms,
                             c->cfg->resync_period_ms); /* cannot fail on an initialised timer */
}

void hp_controller_set_leader(struct hp_controller *c, int leading)
{
    if (c->leading == !!leading)
        return;
    c->leading = !!leading;
    if (c->leading && c->all_synced)
        hp_store_foreach(c->claims, enqueue_claim_obj, c);
}

int hp_controller_synced(const struct hp_controller *c)
{
    return c->all_synced;
}

static void on_part_closed(void *data)
{
    struct hp_controller *c = data;
    if (--c->closing_handles > 0)
        return;
    hp_store_free(c->claims);
    hp_store_free(c->volumes);
    hp_store_free(c->classes);
    void (*cb)(void *) = c->close_cb;
    void *cb_data = c->close_data;
    free(c);
    if (cb)
        cb(cb_data);
}

static void on_resync_closed(uv_handle_t *h)
{
    on_part_closed(h->data);
}

static void maybe_finish_stop(struct hp_controller *c)
{
    if (c->ops || c->closing_handles)
        return;
    /* Every operation is gone: close the queue and the timer. */
    c->closing_handles = 2;
    c->resync.data = c;
    uv_close((uv_handle_t *)&c->resync, on_resync_closed);
    hp_workqueue_shutdown(c->queue, on_part_closed, c);
}

void hp_controller_stop(struct hp_controller *c, void (*close_cb)(void *data), void *data)
{
    c->stopping = 1;
    c->close_cb = close_cb;
    c->close_data = data;
    hp_watch_stop(c->w_claims, NULL, NULL);
    hp_watch_stop(c->w_volumes, NULL, NULL);
    hp_watch_stop(c->w_classes, NULL, NULL);
    (void)uv_timer_stop(&c->resync);
    /* API steps are cancelled; filesystem jobs are left to finish and free their op. */
    struct op *op = c->ops, *next;
    for (; op; op = next) {
        next = op->next;
        if (!op->fs_running) {
            if (op->req)
                hp_kube_cancel(op->req);
            op_free(op);
        }
    }
    maybe_finish_stop(c);
}
