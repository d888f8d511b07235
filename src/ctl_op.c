/* controller room: the operation core -- an operation's life (new, finish, free), its API
 * and filesystem requests, its events, and what its outcome tells the work queue.
 *
 * Loop thread only; see controller_internal.h for the rooms and their order.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "controller_internal.h"
#include "hostpath/buf.h"
#include "hostpath/config.h"
#include "hostpath/events.h"
#include "hostpath/informer.h"
#include "hostpath/log.h"
#include "hostpath/store.h"
#include "hostpath/workqueue.h"

/* ---- operations --------------------------------------------------------------------------- */

struct op *hp__op_new(struct hp_controller *c, const char *qkey, const struct op_type *type)
{
    struct op *op = hp_xcalloc(1, sizeof(*op));
    op->c = c;
    op->qkey = qkey;
    op->type = type;
    op->start_ms = uv_now(c->loop);
    hp_list_insert_tail(&c->ops, &op->link);
    hp_list_init(&op->announce_link);
    return op;
}

void hp__op_free(struct op *op)
{
    struct hp_controller *c = op->c;
    hp_list_remove(&op->link);
    hp_list_remove(&op->announce_link);
    if (op->reserving)
        hp_volindex_release(c->index, HP_SRC_RESERVED, op->pv_name);
    if (op->reserved && op->root) {
        op->root->reserved -= op->root->reserved >= op->reserved ? op->reserved
                                                                  : op->root->reserved;
        hp__root_metrics(c, op->root);
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
    free(op->request);
    hp_fsop_free(op->fsop);
    free(op->pv_body);
    free(op->node);
    free(op->affinity_key);
    free(op->mount_options);
    free(op);
    if (c->stopping)
        c->maybe_closed(c);
}

int hp__op_in_flight(const struct hp_controller *c, const char *pv)
{
    const struct hp_list *l;
    hp_list_foreach(l, &c->ops) {
        const struct op *op = hp_list_entry(l, struct op, link);
        if (op->pv_name && strcmp(op->pv_name, pv) == 0)
            return 1;
    }
    return 0;
}

/* The PV of a provisioning still running was indexed (the volume watch showed it before the
 * create's answer came): its size counts on its root from now on (struct acct), so the
 * provisioning's reservation of the same bytes ends here rather than when the op ends -- until
 * then the root counted the volume twice, and placement and the capacity objects said there was
 * less room than there is. */
void hp__reservation_taken_over(struct hp_controller *c, const char *pv)
{
    const struct acct *a = hp_store_get(c->acct, pv);
    struct hp_list *l;
    if (!a)
        return;
    hp_list_foreach(l, &c->ops) {
        struct op *op = hp_list_entry(l, struct op, link);
        if (op->type != &hp__op_provision || !op->reserved || op->root != a->root ||
            !op->pv_name || strcmp(op->pv_name, pv) != 0)
            continue;
        op->root->reserved -= op->root->reserved >= op->reserved ? op->reserved
                                                                  : op->root->reserved;
        op->reserved = 0;
        hp__root_metrics(c, op->root);
    }
}

void hp__claim_ref(const struct hp_claim *cl, struct hp_object_ref *ref)
{
    ref->kind = "PersistentVolumeClaim";
    ref->api_version = "v1";
    ref->namespace_ = cl->namespace_;
    ref->name = cl->name;
    ref->uid = cl->uid;
    ref->resource_version = cl->resource_version;
}

void hp__set_error(struct op *op, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void hp__set_error(struct op *op, const char *fmt, ...)
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
const char *hp__claim_key_split(const char *key, char *ns, size_t len)
{
    const char *slash = key ? strchr(key, '/') : NULL;
    if (!slash || (size_t)(slash - key) >= len)
        return NULL;
    memcpy(ns, key, (size_t)(slash - key));
    ns[slash - key] = '\0';
    return slash + 1;
}

void hp__claim_event(struct op *op, int warning, const char *reason, const char *msg)
{
    const struct hp_claim *cl = hp__claim(op->c, op->claim_key);
    struct hp_object_ref ref;
    char ns[256];
    const char *name;
    if (cl) {
        if (strcmp(cl->uid, op->claim_uid) != 0)
            return; /* another claim of that name now */
        hp__claim_ref(cl, &ref);
    } else {
        /* Not (or no longer) cached: a node's leader keeps no bound claim it has nothing more
         * to do with, and the claim's binding may reach it before its PV create's answer. The
         * event names the claim the op worked for. */
        if (!op->claim_uid || !(name = hp__claim_key_split(op->claim_key, ns, sizeof(ns))))
            return;
        ref = (struct hp_object_ref){.kind = "PersistentVolumeClaim", .api_version = "v1",
                                     .namespace_ = ns, .name = name, .uid = op->claim_uid};
    }
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
        hp__claim_event(op, 0, "Provisioning", msg);
    }
}

void hp__announce_later(struct op *op)
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

void hp__volume_event(struct op *op, int warning, const char *reason, const char *msg)
{
    struct hp_object_ref ref = {.kind = "PersistentVolume", .api_version = "v1",
                                .name = op->pv_name};
    hp_events_emit(op->c->events, &ref, warning, reason, "%s", msg);
}

/* Operations that must not be abandoned (reads back, cleanups, expansion) retry what another
 * operation would give up on. */
enum outcome hp__retry_on_give_up(enum outcome out)
{
    return out == OUT_GIVE_UP ? OUT_RETRY : out;
}

/* Ends an operation: reports the outcome to the queue and frees the op. */
void hp__op_finish(struct op *op, enum outcome out, uint64_t retry_after_ms)
{
    struct hp_controller *c = op->c;
    const char *qkey = op->qkey;
    double secs = (double)(uv_now(c->loop) - op->start_ms) / 1000.0;

    if (op->type->finished)
        op->type->finished(op, out);
    if (op->type->metrics)
        op->type->metrics(op, out == OUT_OK, secs);

    if (out == OUT_RETRY || out == OUT_RETRY_AFTER) {
        unsigned failures = hp_workqueue_num_requeues(c->queue, qkey) + 1;
        unsigned limit = (unsigned)c->cfg->failed_retry_threshold;
        if (limit && failures >= limit) {
            char msg[1200];
            snprintf(msg, sizeof(msg), "giving up after %u failed attempts: %s", failures,
                     op->last_error ? op->last_error : "unknown error");
            hp_log_error("controller: %s key=%s", msg, qkey);
            if (op->type->give_up_on_claim)
                hp__claim_event(op, 1, op->type->give_up_reason, msg);
            else
                hp__volume_event(op, 1, op->type->give_up_reason, msg);
            out = OUT_GIVE_UP;
        }
    }
    switch (out) {
    case OUT_OK:
    case OUT_GIVE_UP:
        hp_workqueue_forget(c->queue, qkey);
        if (out == OUT_OK && op->requeue)
            hp_workqueue_add(c->queue, qkey); /* runs again once done */
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
    hp__op_free(op);
    hp_workqueue_done(c->queue, qkey);
}

/* Ends a reconcile that had nothing to do. */
void hp__nothing_to_do(struct hp_controller *c, const char *qkey)
{
    hp_workqueue_forget(c->queue, qkey);
    hp_workqueue_done(c->queue, qkey);
}

/* Classifies an API response: OK, retry (5xx, 429, network), or permanent. */
enum outcome hp__api_outcome(struct op *op, const char *what, int status,
                                const struct hp_kube_response *resp, uint64_t *retry_after)
{
    char reason[64] = "", message[512] = "";
    *retry_after = 0;
    if (status < 0) {
        hp__set_error(op, "%s: %s", what, resp->error ? resp->error : strerror(-status));
        return OUT_RETRY;
    }
    if (resp->code >= 200 && resp->code < 300)
        return OUT_OK;
    hp_kube_status_parse(resp->body, reason, sizeof(reason), message, sizeof(message));
    hp__set_error(op, "%s: HTTP %ld %s%s%s", what, resp->code, reason, message[0] ? ": " : "",
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
void hp__pv_request(struct op *op, const char *method, const char *body, const char *ctype,
                       hp_kube_response_cb cb)
{
    char *p = hp_xasprintf("/api/v1/persistentvolumes/%s", op->pv_name);
    op->req = hp_kube_request(op->c->client, method, p, body, ctype, cb, op);
    free(p);
}

/* Queues a filesystem request of the operation; cb takes it back. */
void hp__run_fs(struct op *op, struct hp_fsop *f, hp_hostpath_done_cb cb)
{
    op->fsop = f;
    hp_hostpath_submit(op->c->hostpath, f, cb, op);
}

/* A filesystem request of the operation finished: hands it back to the caller (who frees it).
 * When the controller is stopping, the operation ends here (its queue is gone) and NULL is
 * returned. */
struct hp_fsop *hp__fs_ended(struct op *op)
{
    struct hp_fsop *f = op->fsop;
    op->fsop = NULL;
    if (!op->c->stopping)
        return f;
    hp_fsop_free(f);
    hp__op_free(op);
    return NULL;
}

void hp__enqueue(struct hp_controller *c, char kind, const char *key)
{
    char qkey[KEY_MAX];
    if (c->stopping)
        return;
    if ((size_t)snprintf(qkey, sizeof(qkey), "%c:%s", kind, key) >= sizeof(qkey))
        return; /* longer than any valid namespace/name */
    hp_workqueue_add(c->queue, qkey);
}
