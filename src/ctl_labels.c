/* controller room: the labels a node instance is watched by -- a PV of ours carries its node and
 * the provisioner (PVs made before the labels are labelled once, by their node's instance), and
 * a claim a node must act on carries that node (written by the leader, the claim labeller).
 *
 * Per node (--node-name), the API server sends each instance only the PVs and claims labelled
 * with its node (docs/design.md, "A thousand nodes"); these are the writes that make it so.
 * Nothing here decides anything about data: an unlabelled PV is still seen (through the watch of
 * PVs without a node label), and a claim the labeller has not reached yet is only seen later.
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
#include "hostpath/expect.h"
#include "hostpath/informer.h"
#include "hostpath/json.h"
#include "hostpath/log.h"
#include "hostpath/quantity.h"

/* ---- a PV of ours carries its node and the provisioner ----------------------------------- */

static const struct op_type op_label_volume = {
    .name = "label",
    .give_up_reason = "VolumeLabelFailed",
};

/* The node label value v should carry into want ("" for none); 1 when its labels differ. */
static int volume_needs_labels(const struct hp_controller *c, const struct hp_volume *v,
                               char *want)
{
    want[0] = '\0';
    if (!c->prov_label[0] || (v->node && hp_label_value(v->node, want, HP_LABEL_VALUE_MAX) < 0))
        return 0;
    if (!v->label_provisioner || strcmp(v->label_provisioner, c->prov_label) != 0)
        return 1;
    if (!want[0])
        return v->label_node != NULL;
    return !v->label_node || strcmp(v->label_node, want) != 0;
}

/* A PV we labelled leaves the unlabelled watch (DELETED there) before, or after, the node's
 * watch shows it: until the node's does, its removal from the other is not its end. */
static void relabel_expectation(struct op *op, int present)
{
    struct hp_controller *c = op->c;
    char key[300];
    if (!c->foreign)
        return; /* one watch sees every PV: nothing moves between watches */
    (void)snprintf(key, sizeof(key), "%s%s", EXPECT_RELABEL_PREFIX, op->pv_name);
    if (present)
        hp_expect_created(c->expect, key, uv_now(c->loop));
    else
        hp_expect_deleted(c->expect, key, uv_now(c->loop));
}

static void on_volume_labelled(struct hp_kube_req *req, int status,
                               const struct hp_kube_response *resp, void *data)
{
    struct op *op = data;
    uint64_t ra;
    (void)req;
    op->req = NULL;
    if (status == 0 && resp->code == 404) { /* gone meanwhile */
        relabel_expectation(op, 0);
        hp__op_finish(op, OUT_OK, 0);
        return;
    }
    enum outcome out = hp__api_outcome(op, "label PersistentVolume", status, resp, &ra);
    if (out != OUT_OK) {
        relabel_expectation(op, 0); /* nothing moves */
        hp_log_warn("controller: %s pv=%s", op->last_error, op->pv_name);
    } else {
        hp_log_v(1, "controller: labelled volume pv=%s", op->pv_name);
    }
    hp__op_finish(op, out, ra);
}

int hp__label_volume(struct hp_controller *c, const char *qkey, const struct hp_volume *v)
{
    char want[HP_LABEL_VALUE_MAX];
    if (!volume_needs_labels(c, v, want))
        return 0;
    struct op *op = hp__op_new(c, qkey, &op_label_volume);
    op->pv_name = hp_xstrdup(v->name);
    op->class_name = hp_xstrdup(v->class_name);
    char *body = hp_pv_labels_patch(want[0] ? want : NULL, c->prov_label);
    /* Before the request: the unlabelled watch may show it gone before the answer comes. */
    relabel_expectation(op, 1);
    hp__pv_request(op, "PATCH", body, "application/merge-patch+json", on_volume_labelled);
    free(body);
    return 1;
}

/* ---- the claim labeller: a claim a node must act on carries that node --------------------
 *
 * Claims cannot be selected by annotation, and the scheduler says which node a claim is for in
 * an annotation (volume.kubernetes.io/selected-node). The leader, which watches every claim,
 * copies it into the label HP_LABEL_NODE (as a label value) of every claim of ours that a node
 * instance must act on: a pending one with a selected node (not of a shared path: the leader's),
 * and a bound one whose request grew (an expansion), which has no selected node when it was
 * Immediate: its PV says where it is. The patch carries the claim's resourceVersion: a claim
 * that changed meanwhile (another node selected) is looked at again, never labelled from a
 * stale copy. */

static const struct op_type op_label_claim = {
    .name = "label-claim",
    .give_up_reason = "ProvisioningFailed",
    .give_up_on_claim = 1,
};

int hp__claim_resize_pending(const struct hp_claim *cl)
{
    uint64_t want = 0, have = 0;
    return cl->volume_name[0] && hp_quantity_parse(cl->request, &want, NULL, 0) == 0 &&
           hp_quantity_parse(cl->status_capacity, &have, NULL, 0) == 0 && want > have;
}

int hp__claim_for_own_node(const struct hp_controller *c, const struct hp_claim *cl)
{
    return c->cfg->node_name && cl->selected_node &&
           strcmp(cl->selected_node, c->cfg->node_name) == 0;
}

int hp__claim_needs_label(const struct hp_controller *c, const struct hp_claim *cl)
{
    char want[HP_LABEL_VALUE_MAX];
    const struct hp_class *cls = hp_informer_get(c->classes, cl->class_name ? cl->class_name : "");
    /* A claim selected for the leader's own node is served from the leader's own copy
     * (hp__claim): no label, so no PATCH of claims where that is all there is to do -- one
     * Deployment on local-path-provisioner's RBAC, which grants no patch of claims. A later
     * leader on another node labels it, if it is still pending or grows. */
    if (!c->cfg->node_name || !cls || strcmp(cls->provisioner, c->cfg->provisioner_name) != 0 ||
        cl->deleting || (cl->provisioner && strcmp(cl->provisioner, c->cfg->provisioner_name)) ||
        hp__claim_for_own_node(c, cl))
        return 0;
    if (!cl->volume_name[0]) {
        if (!cl->selected_node || !cl->selected_node[0] || hp__class_shared(c, cls->name) == 1 ||
            hp_label_value(cl->selected_node, want, sizeof(want)) < 0)
            return 0;
        return !cl->label_node || strcmp(cl->label_node, want) != 0;
    }
    if (!cls->allow_expansion || !hp__claim_resize_pending(cl))
        return 0;
    if (cl->selected_node && cl->selected_node[0] &&
        hp_label_value(cl->selected_node, want, sizeof(want)) == 0)
        return !cl->label_node || strcmp(cl->label_node, want) != 0;
    return !cl->label_node; /* its PV says where: read when labelling */
}

static void on_claim_labelled(struct hp_kube_req *req, int status,
                              const struct hp_kube_response *resp, void *data)
{
    struct op *op = data;
    uint64_t ra;
    (void)req;
    op->req = NULL;
    if (status == 0 && resp->code == 404) { /* gone meanwhile */
        hp__op_finish(op, OUT_OK, 0);
        return;
    }
    enum outcome out = hp__api_outcome(op, "label PersistentVolumeClaim", status, resp, &ra);
    if (out == OUT_OK)
        hp_log_v(1, "controller: labelled claim %s for node %s", op->claim_key, op->node);
    else
        hp_log_warn("controller: %s claim=%s", op->last_error, op->claim_key);
    hp__op_finish(op, hp__retry_on_give_up(out), ra);
}

static void patch_claim_label(struct op *op, const char *node, const char *resource_version)
{
    char value[HP_LABEL_VALUE_MAX];
    const char *slash = strchr(op->claim_key, '/');
    if (hp_label_value(node, value, sizeof(value)) < 0 || !slash) {
        hp__op_finish(op, OUT_OK, 0);
        return;
    }
    free(op->node);
    op->node = hp_xstrdup(node);
    char *p = hp_xasprintf("/api/v1/namespaces/%.*s/persistentvolumeclaims/%s",
                           (int)(slash - op->claim_key), op->claim_key, slash + 1);
    char *body = hp_claim_label_patch(value, resource_version);
    if (!body) { /* a resourceVersion that is not UTF-8: not the server's */
        free(p);
        hp__op_finish(op, OUT_OK, 0);
        return;
    }
    op->req = hp_kube_request(op->c->client, "PATCH", p, body, "application/merge-patch+json",
                              on_claim_labelled, op);
    free(body);
    free(p);
}

/* The PV of a bound claim to label, read: its node is where the claim must go. */
static void on_claim_volume_read(struct hp_kube_req *req, int status,
                                 const struct hp_kube_response *resp, void *data)
{
    struct op *op = data;
    uint64_t ra;
    (void)req;
    op->req = NULL;
    if (status == 0 && resp->code == 404) { /* a lost claim: nothing to expand */
        hp__op_finish(op, OUT_OK, 0);
        return;
    }
    enum outcome out = hp__api_outcome(op, "read PersistentVolume", status, resp, &ra);
    if (out != OUT_OK) {
        hp__op_finish(op, hp__retry_on_give_up(out), ra);
        return;
    }
    struct hp_json j;
    hp_json_init(&j);
    struct hp_volume *v =
        hp_json_parse(&j, resp->body, resp->body_len) == 0 ? hp_volume_decode(&j, 0) : NULL;
    hp_json_free(&j);
    const struct hp_claim *cl =
        op->c->claims_all ? hp_informer_get(op->c->claims_all, op->claim_key) : NULL;
    if (!v || !v->node || !cl || strcmp(cl->uid, op->claim_uid) != 0 ||
        strcmp(v->provisioned_by, op->c->cfg->provisioner_name) != 0) {
        /* No node (a shared path: the leader's own) or not ours: nobody to tell. */
        free(v);
        hp__op_finish(op, OUT_OK, 0);
        return;
    }
    patch_claim_label(op, v->node, cl->resource_version);
    free(v);
}

void hp__reconcile_claim_label(struct hp_controller *c, const char *qkey, const char *key)
{
    const struct hp_claim *cl = c->claims_all ? hp_informer_get(c->claims_all, key) : NULL;
    if (!cl || !c->leading || !c->node_held || !hp__claim_needs_label(c, cl)) {
        hp__nothing_to_do(c, qkey);
        return;
    }
    struct op *op = hp__op_new(c, qkey, &op_label_claim);
    op->claim_key = hp_xstrdup(key);
    op->claim_uid = hp_xstrdup(cl->uid);
    if (cl->selected_node && cl->selected_node[0]) {
        patch_claim_label(op, cl->selected_node, cl->resource_version);
        return;
    }
    op->pv_name = hp_xstrdup(cl->volume_name);
    hp__pv_request(op, "GET", NULL, NULL, on_claim_volume_read);
}
