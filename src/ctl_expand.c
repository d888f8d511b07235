/* controller room: online expansion of a bound claim's volume.
 *
 * Loop thread only; see controller_internal.h for the rooms and their order.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "controller_internal.h"
#include "hostpath/buf.h"
#include "hostpath/config.h"
#include "hostpath/crashpoint.h"
#include "hostpath/expect.h"
#include "hostpath/informer.h"
#include "hostpath/log.h"
#include "hostpath/metrics.h"
#include "hostpath/quantity.h"

/* ---- online expansion -------------------------------------------------------------------- */

const struct op_type hp__op_expand = {
    .name = "expand",
    .give_up_reason = "VolumeFailedDelete",
};

static void expand_failed(struct op *op, const char *why, enum outcome out)
{
    char *msg = hp_xasprintf("resize volume %s failed: %s", op->pv_name, why);
    hp_log_warn("controller: %s claim=%s", msg, op->claim_key);
    hp__claim_event(op, 1, "VolumeResizeFailed", msg);
    hp__set_error(op, "%s", why);
    free(msg);
    hp__op_finish(op, out, 0);
}

/* The expectation that this process finished growing the claim with this uid to request. */
static char *expanded_key(const char *claim_uid, const char *request)
{
    return hp_xasprintf("%s%s/%s", EXPECT_EXPANDED_PREFIX, claim_uid, request);
}

static void on_claim_status_patched(struct hp_kube_req *req, int status,
                                    const struct hp_kube_response *resp, void *data)
{
    struct op *op = data;
    uint64_t ra;
    op->req = NULL;
    enum outcome out = hp__api_outcome(op, "update claim status.capacity", status, resp, &ra);
    if (out != OUT_OK) {
        expand_failed(op, op->last_error, hp__retry_on_give_up(out));
        return;
    }
    /* Until the claim watch shows this status, a run of the claim's key (queued meanwhile by
     * the watch showing the mark or the PV) finds the claim not done, and the PV grown or not
     * yet: neither a status left behind by a crash nor a growth to make (hp__maybe_expand). */
    char *ek = expanded_key(op->claim_uid, op->request);
    hp_expect_created(op->c->expect, ek, uv_now(op->c->loop));
    free(ek);
    char msg[512];
    snprintf(msg, sizeof(msg), "resize volume %s successful", op->pv_name);
    hp__claim_event(op, 0, "VolumeResizeSuccessful", msg);
    hp_log_info("controller: expanded volume claim=%s pv=%s size=%s", op->claim_key, op->pv_name,
                op->size);
    hp__op_finish(op, OUT_OK, 0);
}

/* The claim's status/subresource, patched with body (a strategic merge patch: its conditions
 * merge by type, so others' conditions stay). */
static void patch_claim(struct op *op, const char *body, hp_kube_response_cb done)
{
    const char *slash = strchr(op->claim_key, '/');
    char *p = hp_xasprintf("/api/v1/namespaces/%.*s/persistentvolumeclaims/%s/status",
                           (int)(slash - op->claim_key), op->claim_key, slash + 1);
    op->req = hp_kube_request(op->c->client, "PATCH", p, body,
                              "application/strategic-merge-patch+json", done, op);
    free(p);
}

/* The PV has the new size: the claim's status says so last, as the external resizer does:
 * status.capacity and status.allocatedResources (what Kubernetes >= 1.34, where
 * RecoverVolumeExpansionFailure is GA, reads as the size the volume was expanded to), its
 * allocatedResourceStatuses entry and Resizing condition gone (no node expansion follows). */
static void patch_claim_status(struct op *op)
{
    char *body = hp_xasprintf("{\"status\":{\"capacity\":{\"storage\":\"%s\"},"
                              "\"allocatedResources\":{\"storage\":\"%s\"},"
                              "\"allocatedResourceStatuses\":null,"
                              "\"conditions\":[{\"$patch\":\"delete\",\"type\":\"Resizing\"}]}}",
                              op->size, op->size);
    patch_claim(op, body, on_claim_status_patched);
    free(body);
}

static void on_pv_resized(struct hp_kube_req *req, int status, const struct hp_kube_response *resp,
                          void *data)
{
    struct op *op = data;
    uint64_t ra;
    op->req = NULL;
    enum outcome out = hp__api_outcome(op, "update PersistentVolume spec.capacity", status, resp, &ra);
    if (out != OUT_OK) {
        expand_failed(op, op->last_error, hp__retry_on_give_up(out));
        return;
    }
    patch_claim_status(op);
}

static void grow_pv(struct op *op)
{
    char *body = hp_xasprintf("{\"spec\":{\"capacity\":{\"storage\":\"%s\"}}}", op->size);
    hp__pv_request(op, "PATCH", body, "application/merge-patch+json", on_pv_resized);
    free(body);
}

/* The volume's hard limit is its new size now: the PV may say so. */
static void on_limit_raised(struct hp_fsop *f, int status, void *data)
{
    struct op *op = data;
    if (!(f = hp__fs_ended(op)))
        return;
    hp__quota_seen(op->c, op->root, f);
    if (status < 0) {
        char why[HP_FSOP_MSG_LEN + 64];
        snprintf(why, sizeof(why), "raising its hard limit failed: %s", f->msg);
        hp_metrics_fs_error("expand", -status);
        hp_fsop_free(f);
        expand_failed(op, why, OUT_RETRY);
        return;
    }
    if (!f->already_done)
        hp_log_info("controller: raised the hard limit of volume pv=%s project=%u size=%s",
                    op->pv_name, f->out.project_id, op->size);
    hp_fsop_free(f);
    hp_crashpoint("expand-limit-raised");
    grow_pv(op);
}

static void grow_volume(struct op *op);

static void on_claim_marked(struct hp_kube_req *req, int status,
                            const struct hp_kube_response *resp, void *data)
{
    struct op *op = data;
    uint64_t ra;
    (void)req;
    op->req = NULL;
    enum outcome out = hp__api_outcome(op, "mark the claim's status as resizing", status, resp,
                                       &ra);
    if (out != OUT_OK) {
        expand_failed(op, op->last_error, hp__retry_on_give_up(out));
        return;
    }
    grow_volume(op);
}

/* The claim is marked: its hard limit grows first if it has one (a PV, and a claim, never
 * says more than the volume takes), then the PV. */
static void grow_volume(struct op *op)
{
    struct hp_controller *c = op->c;
    uint64_t want = 0;
    const struct hp_record *rec = hp_volindex_record(c->index, op->pv_name);
    if (rec && rec->project_id && hp_quantity_parse(op->size, &want, NULL, 0) == 0) {
        struct hp_fsop *f = hp_fsop_new(HP_FSOP_LIMIT, op->root->path);
        f->rec.pv = hp_xstrdup(op->pv_name);
        f->rec.path = hp_xstrdup(op->rel);
        f->limit_bytes = want;
        f->have_expect_fs = 1;
        f->expect_fs.dev = rec->dev;
        f->expect_fs.fsid = rec->fsid;
        hp__quota_request(c, op->root, f, op->pv_name);
        hp__run_fs(op, f, on_limit_raised);
        return;
    }
    grow_pv(op);
}

/* Before the volume grows, the claim says it is being resized, as the external resizer does:
 * a Resizing condition (until the status patch above removes it, the upstream e2e specs wait
 * for the resize to finish; without it they read the claim between the PV's new size and
 * its status), allocatedResources the new size, and allocatedResourceStatuses
 * ControllerResizeInProgress. */
static void mark_resizing(struct op *op)
{
    char ts[32];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%SZ", &tm);
    char *body = hp_xasprintf(
        "{\"status\":{\"allocatedResources\":{\"storage\":\"%s\"},"
        "\"allocatedResourceStatuses\":{\"storage\":\"ControllerResizeInProgress\"},"
        "\"conditions\":[{\"type\":\"Resizing\",\"status\":\"True\",\"lastProbeTime\":null,"
        "\"lastTransitionTime\":\"%s\"}]}}",
        op->size, ts);
    patch_claim(op, body, on_claim_marked);
    free(body);
}

/* A bound claim of an expandable class asks for more than its volume has: check the room for
 * the difference, raise its hard limit if it has one, grow the PV, then the claim's status.
 * Returns 1 when it took the key. */
int hp__maybe_expand(struct hp_controller *c, const char *qkey, const struct hp_claim *cl,
                        const struct hp_class *cls)
{
    char rel[4096], err[256], a[32], b[32];
    uint64_t want = 0, pv_cap = 0, st_cap = 0;
    const struct hp_volume *v = hp__volume(c, cl->volume_name);
    if (!cls || !cls->allow_expansion || !v || cl->deleting ||
        strcmp(cls->provisioner, c->cfg->provisioner_name) != 0 ||
        strcmp(v->provisioned_by, c->cfg->provisioner_name) != 0 ||
        strcmp(v->identity, c->cfg->identity) != 0 || strcmp(v->claim_uid, cl->uid) != 0 ||
        hp_quantity_parse(cl->request, &want, err, sizeof(err)) < 0 ||
        hp_quantity_parse(v->capacity, &pv_cap, NULL, 0) < 0)
        return 0;
    /* A claim just bound has no status.capacity until the binder writes it: nothing to grow
     * (taking it for a status left behind by a crash made a resize event out of nothing). */
    if (hp_quantity_parse(cl->status_capacity, &st_cap, NULL, 0) < 0)
        return 0;
    struct root *root = hp__root_of(c, v->path, rel, sizeof(rel));
    /* Done as the claim's copy shows it: its status has the size and no mark (a status
     * capacity copied from the PV while it is still marked is not done). */
    int claim_done = want <= st_cap && !cl->resize_marked;
    char *ek = expanded_key(cl->uid, cl->request);
    enum hp_expect_state finished = hp_expect_get(c->expect, ek, uv_now(c->loop));
    if (claim_done && want <= pv_cap) /* both watches show what this process wrote */
        hp_expect_observed(c->expect, ek, 1);
    free(ek);
    if (!root || (want <= pv_cap && claim_done) || finished == HP_EXPECT_PRESENT)
        return 0; /* nothing to do, or finished here and the watches show it next */
    if (want <= pv_cap) { /* the PV grew before a crash: only the claim's status is left */
        struct op *op = hp__op_new(c, qkey, &hp__op_expand);
        op->claim_key = hp_xstrdup(cl->key);
        op->claim_uid = hp_xstrdup(cl->uid);
        op->pv_name = hp_xstrdup(v->name);
        op->size = hp_xstrdup(v->capacity);
        op->request = hp_xstrdup(cl->request);
        patch_claim_status(op);
        return 1;
    }
    struct op *op = hp__op_new(c, qkey, &hp__op_expand);
    op->claim_key = hp_xstrdup(cl->key);
    op->claim_uid = hp_xstrdup(cl->uid);
    op->pv_name = hp_xstrdup(v->name);
    op->class_name = hp_xstrdup(cls->name);
    op->size = hp_xstrdup(cl->request);
    op->request = hp_xstrdup(cl->request);
    op->root = root;
    char msg[512];
    snprintf(msg, sizeof(msg), "External resizer is resizing volume %s", v->name);
    hp__claim_event(op, 0, "Resizing", msg);
    /* The volume's own capacity is already counted in reserved: only the growth needs room. */
    struct hp_place_path p = {root->path, hp__root_budget(root), root->reserved, root->stats.ok,
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
    op->rel = hp_xstrdup(rel);
    if (cl->resize_marked) /* by an earlier attempt: marked again, it would run again at once */
        grow_volume(op);
    else
        mark_resizing(op);
    return 1;
}
