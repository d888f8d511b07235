/* controller room: capacity-aware scheduling (docs/design.md, "Capacity-aware scheduling").
 *
 * kube-scheduler checks storage capacity for a WaitForFirstConsumer claim when a CSIDriver
 * object named after the class's provisioner says storageCapacity: true, against the
 * CSIStorageCapacity objects whose storageClassName and nodeTopology match the node it weighs
 * (hasEnoughCapacity in pkg/scheduler/framework/plugins/volumebinding/binder.go; the
 * provisioner need not be a CSI driver). This room keeps both true:
 *
 *  - the leader (or the single instance) keeps the CSIDriver object as it must be:
 *    attachRequired false, podInfoOnMount false, volumeLifecycleModes [Persistent], and
 *    storageCapacity true exactly when this instance publishes capacity (with --node-name; a
 *    Deployment without one publishes nothing, and storageCapacity true would then make every
 *    WaitForFirstConsumer claim unschedulable). It also removes the CSIStorageCapacity objects
 *    of nodes that no longer exist;
 *  - each node's instance (--node-name, holding its node's disks) publishes one
 *    CSIStorageCapacity per StorageClass of ours, in the provisioner's namespace (the leader
 *    election Lease's): capacity = the total room placement could still grant there for that
 *    class, maximumVolumeSize = the largest volume it would grant now (hp__place_room, the same
 *    candidates as hp__place). It watches its own objects (label selector
 *    csi.storage.k8s.io/drivername + csi.storage.k8s.io/managed-by, as external-provisioner
 *    labels them), creates what is missing, updates what drifted, deletes the objects of
 *    classes that are gone. A write is rate-limited per object (one per
 *    --capacity-update-interval, but less room after a placement goes at once: write_or_wait)
 *    and made only when the value changed meaningfully (hp__capacity_differs); the free bytes
 *    of each path are read every --capacity-poll-interval (uv_fs_statfs), so a disk filling up
 *    shows.
 *
 * Names: a CSIDriver name must be a lower-case DNS subdomain of at most 63 characters (the
 * drivername label carries it too); any other --provisioner-name turns all of this off, said
 * once at start.
 *
 * Loop thread only; see controller_internal.h for the rooms and their order. JSON is read with
 * hp_json; bodies are built with jansson, and a CSIDriver update sends the object as the server
 * wrote it with only our spec members replaced (as leader.c does with the Lease).
 */
#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "controller_internal.h"
#include "hostpath/buf.h"
#include "hostpath/config.h"
#include "hostpath/informer.h"
#include "hostpath/json.h"
#include "hostpath/log.h"
#include "hostpath/metrics.h"
#include "hostpath/quantity.h"
#include "hostpath/store.h"

#define API "/apis/storage.k8s.io/v1"
#define LABEL_DRIVER "csi.storage.k8s.io/drivername"
#define LABEL_MANAGED_BY "csi.storage.k8s.io/managed-by"
#define TOPOLOGY_KEY "kubernetes.io/hostname"
#define MANAGER "hostpath-provisioner"
/* The managed-by label of the objects of classes on a sharedFileSystemPath (the leader's). */
#define MANAGED_SHARED MANAGER "-shared"
/* A failed CSIDriver step is tried again after this long (and at every resync). */
#define DRIVER_RETRY_MS 30000
/* A page of the leader's sweep of stale objects. */
#define GC_PAGE 500
/* Drift below both is not worth a write (hp__capacity_differs). */
#define DRIFT_MIN_BYTES (1024ULL * 1024 * 1024)
#define QUANTITY_MAX ((uint64_t)INT64_MAX)

enum cap_op { CAP_CREATE, CAP_UPDATE, CAP_DELETE, CAP_NOPS };
static const char *const op_names[CAP_NOPS] = {"create", "update", "delete"};

/* A CSIStorageCapacity object of ours as the watch shows it. */
struct cap_seen {
    char *class_name; /* storageClassName */
    char *node;       /* nodeTopology {matchLabels: {kubernetes.io/hostname: node}}, else NULL */
    int all_nodes;    /* nodeTopology {}: every node (a class on a shared path) */
    int shared;       /* labelled managed-by hostpath-provisioner-shared: the leader's */
    uint64_t capacity, max_size;
    int has_capacity, has_max;
    char name[];
};

/* What this instance knows of one of its objects beyond the cache: its write in flight, its
 * rate limit, and the accounting signature its values came from. */
struct cap_obj {
    char *name;
    struct hp_capacity *cap;
    struct hp_kube_req *req;
    enum cap_op op;
    uint64_t next_write; /* uv_now from which a write that can wait may go; 0 = at once */
    uint64_t sig, sent_sig;
    int sig_known;
    int created;  /* created by us and not deleted since: exists, whatever the cache says yet */
    int shared;   /* of a class on a shared path: every node's, written by the leader */
    int wanted;   /* a class of ours wants it (this pass) */
};

struct gc_item {
    char *name, *node;
};

struct hp_capacity {
    struct hp_controller *c;
    int driver;  /* the name may name a CSIDriver: the leader manages it */
    int publish; /* this instance publishes its node's objects */
    char *ns;
    char managed_by[64];
    char *coll;  /* .../namespaces/<ns>/csistoragecapacities */
    char *watch_path; /* coll?labelSelector=<ours> */
    struct hp_informer_type itype;
    struct hp_informer *inf;
    struct hp_store *objs; /* name -> struct cap_obj */
    uv_timer_t sync_timer, driver_timer, poll_timer;
    uint64_t sync_due; /* uv_now when sync_timer fires; 0 = not armed */
    size_t statfs_inflight;
    /* the CSIDriver */
    struct hp_kube_req *driver_req;
    int driver_creating; /* driver_req is the create (else the read or the update) */
    char *driver_said; /* the last state logged, so a steady state is said once */
    /* the leader's sweep of objects of nodes that no longer exist */
    struct hp_kube_req *gc_req;
    struct gc_item *gc_items;
    size_t gc_n, gc_i, gc_deleted;
    char *gc_cont;
    char *gc_node; /* the node last looked up */
    int gc_node_gone;
    int gc_again; /* asked again while one ran */
    /* metrics */
    uint64_t written[CAP_NOPS], failed[CAP_NOPS], driver_written[2], gc_deleted_total;
};

/* ---- pure decisions ------------------------------------------------------------------------ */

static int alnum_lower(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9');
}

static int alnum(char ch)
{
    return alnum_lower(ch) || (ch >= 'A' && ch <= 'Z');
}

int hp__capacity_driver_name_ok(const char *name, char *why, size_t len)
{
    size_t n = strlen(name);
    if (n == 0 || n > 63) {
        hp_seterr(why, len, "it is %zu characters long; a CSIDriver name has 1 to 63", n);
        return -EINVAL;
    }
    /* IsDNS1123Subdomain: dot-separated labels of [a-z0-9-], each starting and ending with a
     * letter or digit. */
    for (size_t i = 0; i < n; i++) {
        char ch = name[i];
        int first = i == 0 || name[i - 1] == '.', last = i + 1 == n || name[i + 1] == '.';
        if (ch == '.' && !first && !last)
            continue;
        if (alnum_lower(ch) || (ch == '-' && !first && !last))
            continue;
        hp_seterr(why, len,
                  "a CSIDriver name must be a lower-case DNS subdomain (letters, digits, '-' "
                  "and '.', each part starting and ending with a letter or digit) and '%c' at "
                  "position %zu is not allowed there",
                  ch, i + 1);
        return -EINVAL;
    }
    return 0;
}

/* A label value: at most 63 characters, [A-Za-z0-9] at both ends, [-_.A-Za-z0-9] between. */
static int label_value_ok(const char *v)
{
    size_t n = strlen(v);
    if (n > 63)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char ch = v[i];
        if (!alnum(ch) && (i == 0 || i + 1 == n || (ch != '-' && ch != '_' && ch != '.')))
            return 0;
    }
    return 1;
}

static uint32_t hash32(const char *a, const char *b)
{
    uint64_t h = 1469598103934665603ULL;
    for (const char *s = a; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    h = (h ^ 0) * 1099511628211ULL; /* the separator: ("ab","c") and ("a","bc") differ */
    for (const char *s = b; b && *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return (uint32_t)(h ^ (h >> 32));
}

/* Up to max characters of s, lower-cased, anything but [a-z0-9] as '-'. */
static void name_part(struct hp_buf *b, const char *s, size_t max)
{
    for (size_t i = 0; s[i] && i < max; i++) {
        char ch = s[i];
        if (ch >= 'A' && ch <= 'Z')
            ch = (char)(ch - 'A' + 'a');
        (void)hp_buf_append(b, alnum_lower(ch) ? &ch : "-", 1);
    }
}

void hp__capacity_object_name(const char *node, const char *class_name, char *out, size_t len)
{
    struct hp_buf b;
    hp_buf_init(&b, 0);
    /* A name must start with a letter or digit; the hash at the end makes it end with one and
     * keeps (node, class) pairs apart however the parts were shortened. A class on a shared
     * path (node NULL) is "shared-<class>-<hash>", its hash of a "node" no node name can be. */
    if (node && !alnum(node[0]))
        (void)hp_buf_appends(&b, "n");
    name_part(&b, node ? node : "shared", 60);
    (void)hp_buf_appends(&b, "-");
    name_part(&b, class_name, 60);
    (void)hp_buf_printf(&b, "-%08x", hash32(node ? node : "\001shared", class_name));
    snprintf(out, len, "%s", b.data);
    hp_buf_free(&b);
}

void hp__capacity_managed_by(const char *node, char *out, size_t len)
{
    char v[128];
    snprintf(v, sizeof(v), "%s-%s", MANAGER, node);
    if (strlen(node) < 100 && label_value_ok(v)) {
        snprintf(out, len, "%s", v);
        return;
    }
    /* external-provisioner's getNameWithMaxLength: a prefix of the node and a hash of it. */
    struct hp_buf b;
    hp_buf_init(&b, 0);
    (void)hp_buf_appends(&b, MANAGER "-");
    for (size_t i = 0; node[i] && b.len < 63 - 9; i++) {
        char ch = node[i];
        (void)hp_buf_append(&b, alnum(ch) || ch == '-' || ch == '_' || ch == '.' ? &ch : "-", 1);
    }
    (void)hp_buf_printf(&b, "-%08x", hash32(node, NULL));
    snprintf(out, len, "%s", b.data);
    hp_buf_free(&b);
}

int hp__capacity_differs(uint64_t have, uint64_t want, int exact)
{
    if (have == want)
        return 0;
    if (exact)
        return 1;
    uint64_t d = have > want ? have - want : want - have, big = have > want ? have : want;
    /* Free bytes move with every write a pod makes: only a drift of 1 % (or 1 GiB) is news. */
    return d >= DRIFT_MIN_BYTES || d >= big / 100;
}

/* ---- the watch of this node's objects ------------------------------------------------------- */

static const char *seen_key(const void *o)
{
    return ((const struct cap_seen *)o)->name;
}

static void seen_free(void *o)
{
    struct cap_seen *s = o;
    free(s->class_name);
    free(s->node);
    free(s);
}

static int quantity_of(const struct hp_json *j, int tok, uint64_t *out)
{
    char q[64];
    if (hp_json_str_len(j, tok) <= 0 || hp_json_str_copy(j, tok, q, sizeof(q)) >= (int)sizeof(q))
        return 0;
    return hp_quantity_parse(q, out, NULL, 0) == 0;
}

/* The node of a nodeTopology that selects exactly kubernetes.io/hostname=<node>, else NULL. */
static char *topology_node(const struct hp_json *j, int topo)
{
    int ml = hp_json_get(j, topo, "matchLabels"), me = hp_json_get(j, topo, "matchExpressions");
    if (hp_json_count(j, ml) != 1 || hp_json_count(j, me) != 0)
        return NULL;
    return hp_json_str_dup(j, hp_json_get(j, ml, TOPOLOGY_KEY));
}

static void *decode_seen(const struct hp_json *j, int obj, void *ctx)
{
    (void)ctx;
    int name = hp_json_path(j, obj, "metadata", "name", NULL);
    int n = hp_json_str_len(j, name);
    if (n <= 0 || n > 253 || hp_json_str_has_nul(j, name))
        return NULL;
    struct cap_seen *s = hp_xcalloc(1, sizeof(*s) + (size_t)n + 1);
    (void)hp_json_str_copy(j, name, s->name, (size_t)n + 1);
    s->class_name = hp_json_str_dup(j, hp_json_get(j, obj, "storageClassName"));
    int topo = hp_json_get(j, obj, "nodeTopology");
    s->node = topology_node(j, topo);
    s->shared = hp_json_str_eq(j, hp_json_path(j, obj, "metadata", "labels", LABEL_MANAGED_BY,
                                               NULL),
                               MANAGED_SHARED);
    s->all_nodes = hp_json_is(j, topo, HP_JSON_OBJECT) &&
                   hp_json_count(j, hp_json_get(j, topo, "matchLabels")) == 0 &&
                   hp_json_count(j, hp_json_get(j, topo, "matchExpressions")) == 0;
    s->has_capacity = quantity_of(j, hp_json_get(j, obj, "capacity"), &s->capacity);
    s->has_max = quantity_of(j, hp_json_get(j, obj, "maximumVolumeSize"), &s->max_size);
    return s;
}

static const char *obj_key(const void *o)
{
    return ((const struct cap_obj *)o)->name;
}

static void obj_free(void *o)
{
    struct cap_obj *b = o;
    if (b->req)
        hp_kube_cancel(b->req);
    free(b->name);
    free(b);
}

static const struct hp_store_ops obj_ops = {obj_key, obj_free};

static struct cap_obj *obj_get(struct hp_capacity *cap, const char *name)
{
    struct cap_obj *o = hp_store_get(cap->objs, name);
    if (!o) {
        o = hp_xcalloc(1, sizeof(*o));
        o->name = hp_xstrdup(name);
        o->cap = cap;
        (void)hp_store_put(cap->objs, o);
    }
    return o;
}

static void on_seen_changed(struct hp_informer *inf, const char *key, const void *obj, void *data)
{
    struct hp_capacity *cap = data;
    (void)inf;
    (void)obj;
    struct cap_obj *o = hp_store_get(cap->objs, key);
    if (o)
        o->created = 0; /* the cache knows it now */
    hp__capacity_changed(cap->c);
}

static void on_seen_synced(struct hp_informer *inf, void *data)
{
    struct hp_capacity *cap = data;
    (void)inf;
    hp__capacity_changed(cap->c);
}

/* ---- publishing ----------------------------------------------------------------------------- */

static void arm_sync(struct hp_capacity *cap, uint64_t delay);

static void on_written(struct hp_kube_req *req, int status, const struct hp_kube_response *resp,
                       void *data)
{
    struct cap_obj *o = data;
    struct hp_capacity *cap = o->cap;
    (void)req;
    o->req = NULL;
    long code = status == 0 ? resp->code : 0;
    int ok = code >= 200 && code < 300;
    /* Already there (a create the cache did not show yet) or already gone: nothing failed. */
    int settled = (o->op == CAP_CREATE && code == 409) || (o->op != CAP_CREATE && code == 404);
    if (o->op == CAP_CREATE && (ok || code == 409))
        o->created = 1; /* it exists, whether the cache shows it yet or not */
    else if (o->op == CAP_DELETE && (ok || code == 404))
        o->created = 0;
    if (ok) {
        cap->written[o->op]++;
        if (o->op != CAP_DELETE) {
            o->sig = o->sent_sig;
            o->sig_known = 1;
        }
        hp_log_v(o->op == CAP_UPDATE ? 2 : 0, "capacity: %s CSIStorageCapacity %s/%s",
                 o->op == CAP_CREATE   ? "created"
                 : o->op == CAP_UPDATE ? "updated"
                                       : "deleted",
                 cap->ns, o->name);
    } else if (!settled) {
        char reason[128], msg[512];
        cap->failed[o->op]++;
        msg[0] = '\0';
        if (status == 0)
            (void)hp_kube_status_parse(resp->body, reason, sizeof(reason), msg, sizeof(msg));
        hp_log_warn("capacity: could not %s CSIStorageCapacity %s/%s code=%ld err=\"%s\"",
                    op_names[o->op], cap->ns, o->name, code,
                    status < 0 ? (resp && resp->error ? resp->error : strerror(-status)) : msg);
    }
    /* The rate limit paces the next attempt, whatever this one said. */
    arm_sync(cap, 0);
}

static void send_write(struct hp_capacity *cap, struct cap_obj *o, enum cap_op op,
                       const char *class_name, uint64_t total, uint64_t largest, uint64_t sig)
{
    int shared = o->shared;
    const struct hp_config *cfg = cap->c->cfg;
    char path[1024], tq[32], lq[32];
    char *body = NULL;
    const char *method;
    snprintf(tq, sizeof(tq), "%llu", (unsigned long long)(total > QUANTITY_MAX ? QUANTITY_MAX
                                                                               : total));
    snprintf(lq, sizeof(lq), "%llu", (unsigned long long)(largest > QUANTITY_MAX ? QUANTITY_MAX
                                                                                 : largest));
    if (op == CAP_CREATE) {
        /* A class on a shared path reaches every node: an empty selector (nil would be none). */
        json_t *topo = shared ? json_object()
                              : json_pack("{s:{s:s}}", "matchLabels", TOPOLOGY_KEY, cfg->node_name);
        json_t *j = json_pack(
            "{s:s, s:s, s:{s:s, s:s, s:{s:s, s:s}}, s:s, s:o, s:s, s:s}", "apiVersion",
            "storage.k8s.io/v1", "kind", "CSIStorageCapacity", "metadata", "name", o->name,
            "namespace", cap->ns, "labels", LABEL_DRIVER, cfg->provisioner_name,
            LABEL_MANAGED_BY, shared ? MANAGED_SHARED : cap->managed_by, "storageClassName",
            class_name, "nodeTopology", topo, "capacity", tq, "maximumVolumeSize", lq);
        body = j ? json_dumps(j, JSON_COMPACT) : NULL;
        json_decref(j);
        if (!body) { /* a class name jansson refuses (not UTF-8) cannot be a name anyway */
            hp_log_warn("capacity: cannot write an object for class %s", class_name);
            return;
        }
        method = "POST";
        snprintf(path, sizeof(path), "%s", cap->coll);
    } else if (op == CAP_UPDATE) {
        /* Two quantities the code formatted: nothing to escape (CONTRIBUTING.md, JSON). */
        body = hp_xasprintf("{\"capacity\":\"%s\",\"maximumVolumeSize\":\"%s\"}", tq, lq);
        method = "PATCH";
        snprintf(path, sizeof(path), "%s/%s", cap->coll, o->name);
    } else {
        method = "DELETE";
        snprintf(path, sizeof(path), "%s/%s", cap->coll, o->name);
    }
    o->op = op;
    o->sent_sig = sig;
    o->req = hp_kube_request(cap->c->client, method, path, body,
                             op == CAP_UPDATE ? "application/merge-patch+json" : NULL, on_written,
                             o);
    hp_log_v(2, "capacity: %s %s class=%s capacity=%s maximumVolumeSize=%s", op_names[op],
             o->name, class_name ? class_name : "", tq, lq);
    free(body);
}

/* The write o needs, now or when the rate limit lets it: 1 when it was sent, 0 when it waits
 * (next_due lowered to when it may go). The limit: one write per object per
 * --capacity-update-interval, except an urgent one, which goes at once and leaves the limit
 * as it was. Urgent is less room because volumes were placed (or a budget shrank):
 * kube-scheduler does not count the claims it has just sent, so every moment such an object
 * lags is a chance to send one more claim to a node that is full by then (measured in
 * test_real_capacity: a burst of 14 claims, 5 of them handed back with a 1 s limit on every
 * write, 0-1 this way). Those writes are bounded by the provisioning itself (one per placement
 * at most, coalesced per loop turn); what is not bounded - free bytes moving with every write a
 * pod makes, room coming back - waits its turn; only those take a turn (an urgent write or the
 * object's creation does not). */
static int write_or_wait(struct hp_capacity *cap, struct cap_obj *o, enum cap_op op,
                         const char *class_name, uint64_t total, uint64_t largest, uint64_t sig,
                         int urgent, uint64_t *next_due)
{
    uint64_t now = uv_now(cap->c->loop), every = cap->c->cfg->capacity_update_interval_ms;
    if (!urgent && now < o->next_write) {
        if (o->next_write < *next_due)
            *next_due = o->next_write;
        return 0;
    }
    if (!urgent && op != CAP_CREATE)
        o->next_write = now + every;
    send_write(cap, o, op, class_name, total, largest, sig);
    return 1;
}

struct sync_pass {
    struct hp_capacity *cap;
    uint64_t next_due;
};

/* One class: the object it should have, against what the cache (or our own create) says. */
static void sync_class(const void *obj, void *data)
{
    const struct hp_class *cls = obj;
    struct sync_pass *p = data;
    struct hp_capacity *cap = p->cap;
    struct hp_controller *c = cap->c;
    struct hp_class_params params;
    char name[256], err[256];
    uint64_t total, largest, sig;

    if (strcmp(cls->provisioner, c->cfg->provisioner_name) != 0 ||
        hp_policy_class_params_of(cls, &params, err, sizeof(err)) < 0)
        return; /* not ours, or never provisioned (its claims get the event that says why) */
    /* A class on a sharedFileSystemPath: one object for every node, the leader's (it alone
     * provisions there). */
    int shared = hp__class_shared(c, cls->name) == 1;
    if (shared && !c->leading)
        return;
    hp__place_room(c, cls->name, &params, &total, &largest, &sig);
    hp__capacity_object_name(shared ? NULL : c->cfg->node_name, cls->name, name, sizeof(name));
    struct cap_obj *o = obj_get(cap, name);
    o->wanted = 1;
    o->shared = shared;
    if (o->req)
        return; /* its completion looks again */
    const struct cap_seen *s = hp_informer_get(cap->inf, name);
    if (!s) {
        if (!o->created)
            (void)write_or_wait(cap, o, CAP_CREATE, cls->name, total, largest, sig, 0,
                                &p->next_due);
        return;
    }
    if (!s->class_name || strcmp(s->class_name, cls->name) != 0 ||
        (shared ? !s->all_nodes : !s->node || strcmp(s->node, c->cfg->node_name) != 0)) {
        /* Not what this name stands for (both fields are immutable): made again. */
        (void)write_or_wait(cap, o, CAP_DELETE, cls->name, 0, 0, 0, 0, &p->next_due);
        return;
    }
    if (total > QUANTITY_MAX)
        total = QUANTITY_MAX;
    if (largest > QUANTITY_MAX)
        largest = QUANTITY_MAX;
    int exact = !o->sig_known || o->sig != sig;
    int urgent = exact && o->sig_known && (total < s->capacity || largest < s->max_size);
    if (!s->has_capacity || !s->has_max || hp__capacity_differs(s->capacity, total, exact) ||
        hp__capacity_differs(s->max_size, largest, exact))
        (void)write_or_wait(cap, o, CAP_UPDATE, cls->name, total, largest, sig, urgent,
                            &p->next_due);
    else if (exact) {
        o->sig = sig; /* the values are right for this accounting */
        o->sig_known = 1;
    }
}

static void mark_unwanted(void *obj, void *data)
{
    (void)data;
    ((struct cap_obj *)obj)->wanted = 0;
}

/* A cached object no class wants: deleted (this node's objects are this instance's to clean). */
static void sync_stale(const void *obj, void *data)
{
    const struct cap_seen *s = obj;
    struct sync_pass *p = data;
    if (s->shared && !p->cap->c->leading)
        return; /* a class on a shared path: the leader's to clean */
    struct cap_obj *o = obj_get(p->cap, s->name);
    if (!o->wanted && !o->req)
        (void)write_or_wait(p->cap, o, CAP_DELETE, s->class_name, 0, 0, 0, 0, &p->next_due);
}

struct forget_ctx {
    struct hp_capacity *cap;
    char **names;
    size_t n;
};

static void collect_forgettable(void *obj, void *data)
{
    struct cap_obj *o = obj;
    struct forget_ctx *f = data;
    if (!o->wanted && !o->req && !o->created && !hp_informer_get(f->cap->inf, o->name))
        f->names[f->n++] = o->name;
}

/* Entries of objects that neither exist nor are wanted go once their rate limit has run out, so
 * a class deleted and made again still waits its turn. */
static void forget_idle(struct hp_capacity *cap)
{
    struct forget_ctx f = {cap, hp_xcalloc(hp_store_len(cap->objs) + 1, sizeof(char *)), 0};
    hp_store_foreach(cap->objs, collect_forgettable, &f);
    uint64_t now = uv_now(cap->c->loop);
    for (size_t i = 0; i < f.n; i++) {
        struct cap_obj *o = hp_store_get(cap->objs, f.names[i]);
        if (now >= o->next_write)
            obj_free(hp_store_remove(cap->objs, f.names[i]));
    }
    free(f.names);
}

/* What this node's objects should say, against what they say: the writes that are due. */
static void sync_objects(struct hp_capacity *cap)
{
    struct hp_controller *c = cap->c;
    if (!cap->publish || c->stopping || !c->all_synced || !c->node_held || !cap->inf ||
        !hp_informer_synced(cap->inf) || !hp_informer_synced(c->classes))
        return;
    struct sync_pass p = {cap, UINT64_MAX};
    hp_store_foreach(cap->objs, mark_unwanted, NULL);
    hp_informer_foreach(c->classes, sync_class, &p);
    hp_informer_foreach(cap->inf, sync_stale, &p);
    forget_idle(cap);
    if (p.next_due != UINT64_MAX) {
        uint64_t now = uv_now(c->loop);
        arm_sync(cap, p.next_due > now ? p.next_due - now : 0);
    }
}

static void on_sync_timer(uv_timer_t *t)
{
    struct hp_capacity *cap = t->data;
    cap->sync_due = 0;
    sync_objects(cap);
}

/* Runs a sync after delay ms, unless one is due sooner already. */
static void arm_sync(struct hp_capacity *cap, uint64_t delay)
{
    struct hp_controller *c = cap->c;
    if (c->stopping || !cap->publish)
        return;
    uint64_t due = uv_now(c->loop) + delay;
    if (cap->sync_due && cap->sync_due <= due)
        return;
    cap->sync_due = due;
    (void)uv_timer_start(&cap->sync_timer, on_sync_timer, delay, 0); /* initialised: no error */
}

void hp__capacity_changed(const struct hp_controller *c)
{
    if (c->capacity)
        arm_sync(c->capacity, 0);
}

/* ---- free bytes: each path's filesystem, every --capacity-poll-interval ---------------------- */

struct statfs_req {
    uv_fs_t req;
    struct hp_capacity *cap;
    struct root *root;
};

static void on_statfs(uv_fs_t *req)
{
    struct statfs_req *s = hp_container_of(req, struct statfs_req, req);
    struct hp_capacity *cap = s->cap;
    struct hp_controller *c = cap->c;
    cap->statfs_inflight--;
    c->capacity_busy--;
    if (req->result == 0 && !c->stopping) {
        const uv_statfs_t *sf = req->ptr;
        /* statfs(2)'s f_bsize is the fragment size statvfs reports for the filesystems
         * volumes live on (ext4, XFS, tmpfs); whether the path is on "/" does not change. */
        struct hp_fs_stats st = s->root->stats;
        st.ok = 1;
        st.size = sf->f_blocks * sf->f_bsize;
        st.free = sf->f_bavail * sf->f_bsize;
        st.files = sf->f_files;
        st.files_free = sf->f_ffree;
        hp__root_seen(c, s->root, &st);
    }
    uv_fs_req_cleanup(req);
    free(s);
    if (c->stopping)
        c->maybe_closed(c);
}

static void on_poll_timer(uv_timer_t *t)
{
    struct hp_capacity *cap = t->data;
    struct hp_controller *c = cap->c;
    if (c->stopping || cap->statfs_inflight || !c->node_held)
        return;
    for (size_t i = 0; i < c->nroots; i++) {
        struct root *r = c->roots[i];
        /* A path not read yet, retired or whose disk is not mounted takes nothing anyway; the
         * empty mount point's numbers would only mislead. */
        if (r->retired || !r->journal_loaded || r->fs_moved)
            continue;
        struct statfs_req *s = hp_xcalloc(1, sizeof(*s));
        s->cap = cap;
        s->root = r;
        if (uv_fs_statfs(c->loop, &s->req, r->path, on_statfs) < 0) {
            free(s);
            continue;
        }
        cap->statfs_inflight++;
        c->capacity_busy++;
    }
}

/* ---- the CSIDriver (the leader) ------------------------------------------------------------- */

static void driver_step(struct hp_capacity *cap);

static void on_driver_timer(uv_timer_t *t)
{
    driver_step(t->data);
}

static void driver_retry(struct hp_capacity *cap, uint64_t delay)
{
    if (!cap->c->stopping)
        (void)uv_timer_start(&cap->driver_timer, on_driver_timer, delay, 0);
}

/* A request that failed in a way that passes by itself: the connection, 5xx, 429. */
static int transient(int status, const struct hp_kube_response *resp)
{
    return status < 0 || !resp || resp->code >= 500 || resp->code == 429 || resp->code == 0;
}

/* Logs what the leader found or did with the CSIDriver, once per distinct state: level 0 info,
 * 1 warning (a failure that passes by itself: the connection, 5xx, 429), 2 error. */
static void driver_say(struct hp_capacity *cap, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void driver_say(struct hp_capacity *cap, int level, const char *fmt, ...)
{
    struct hp_buf b;
    va_list ap;
    hp_buf_init(&b, 0);
    va_start(ap, fmt);
    (void)hp_buf_vprintf(&b, fmt, ap);
    va_end(ap);
    if (!cap->driver_said || strcmp(cap->driver_said, b.data) != 0) {
        if (level >= 2)
            hp_log_error("capacity: %s", b.data);
        else if (level == 1)
            hp_log_warn("capacity: %s", b.data);
        else
            hp_log_info("capacity: %s", b.data);
        free(cap->driver_said);
        cap->driver_said = hp_buf_steal(&b);
    }
    hp_buf_free(&b);
}

/* Our spec members, as JSON members text (constants: nothing to escape). */
static void driver_spec_members(const struct hp_capacity *cap, struct hp_buf *b)
{
    (void)hp_buf_printf(b,
                        "\"attachRequired\":false,\"podInfoOnMount\":false,"
                        "\"storageCapacity\":%s,\"volumeLifecycleModes\":[\"Persistent\"]",
                        cap->publish ? "true" : "false");
}

static int spec_key_ours(const struct hp_json *j, int k)
{
    return hp_json_str_eq(j, k, "attachRequired") || hp_json_str_eq(j, k, "podInfoOnMount") ||
           hp_json_str_eq(j, k, "storageCapacity") || hp_json_str_eq(j, k, "volumeLifecycleModes");
}

/* The CSIDriver as the server wrote it, with our members of spec in place of its own (every
 * other member, and everything outside spec, sent back as written). NULL without a spec. */
static char *driver_with_spec(const struct hp_capacity *cap, const struct hp_json *j, int spec)
{
    size_t rlen, slen;
    const char *root = hp_json_text(j, 0, &rlen), *s = hp_json_text(j, spec, &slen);
    struct hp_buf b;
    if (!s || !hp_json_is(j, spec, HP_JSON_OBJECT))
        return NULL;
    hp_buf_init(&b, 0);
    (void)hp_buf_append(&b, root, (size_t)(s - root));
    (void)hp_buf_append(&b, "{", 1);
    for (int k = hp_json_first(j, spec); k >= 0; k = hp_json_next(j, spec, k)) {
        size_t kl, vl;
        const char *kt = hp_json_text(j, k, &kl), *vt = hp_json_text(j, k + 1, &vl);
        if (spec_key_ours(j, k))
            continue;
        (void)hp_buf_append(&b, kt, kl);
        (void)hp_buf_append(&b, ":", 1);
        (void)hp_buf_append(&b, vt, vl);
        (void)hp_buf_append(&b, ",", 1);
    }
    driver_spec_members(cap, &b);
    (void)hp_buf_append(&b, "}", 1);
    (void)hp_buf_append(&b, s + slen, rlen - (size_t)(s + slen - root));
    return hp_buf_steal(&b);
}

static int bool_is(const struct hp_json *j, int tok, int want)
{
    return hp_json_is(j, tok, want ? HP_JSON_TRUE : HP_JSON_FALSE);
}

static void on_driver_written(struct hp_kube_req *req, int status,
                              const struct hp_kube_response *resp, void *data);

/* The CSIDriver read back (200): as it must be, updated, or (a field that cannot change
 * differs) said to need deleting. */
static void driver_compare(struct hp_capacity *cap, const struct hp_kube_response *resp)
{
    const char *name = cap->c->cfg->provisioner_name;
    struct hp_json j;
    hp_json_init(&j);
    int spec = hp_json_parse(&j, resp->body, resp->body_len) == 0 ? hp_json_get(&j, 0, "spec")
                                                                   : -1;
    int modes = hp_json_get(&j, spec, "volumeLifecycleModes");
    int attach_ok = bool_is(&j, hp_json_get(&j, spec, "attachRequired"), 0);
    int modes_ok = hp_json_count(&j, modes) == 1 &&
                   hp_json_str_eq(&j, hp_json_first(&j, modes), "Persistent");
    int rest_ok = bool_is(&j, hp_json_get(&j, spec, "podInfoOnMount"), 0) &&
                  bool_is(&j, hp_json_get(&j, spec, "storageCapacity"), cap->publish);
    if (spec < 0) {
        driver_say(cap, 2, "CSIDriver %s cannot be read (code %ld): will try again", name,
                   resp->code);
        driver_retry(cap, DRIVER_RETRY_MS);
    } else if (!attach_ok || !modes_ok) {
        /* attachRequired and volumeLifecycleModes are immutable: only a new object fixes
         * them, and deleting one is not this provisioner's permission. */
        driver_say(cap, 1,
                   "CSIDriver %s has %s, which cannot be changed in place: delete it (kubectl "
                   "delete csidriver %s) and the leader makes it again",
                   name,
                   !attach_ok ? "attachRequired other than false"
                              : "volumeLifecycleModes other than [Persistent]",
                   name);
    } else if (rest_ok) {
        driver_say(cap, 0, "CSIDriver %s is as needed storageCapacity=%s", name,
                   cap->publish ? "true" : "false");
    } else {
        char *body = driver_with_spec(cap, &j, spec);
        char path[512];
        snprintf(path, sizeof(path), API "/csidrivers/%s", name);
        hp_log_v(2, "capacity: updating CSIDriver %s storageCapacity=%s", name,
                 cap->publish ? "true" : "false");
        cap->driver_creating = 0;
        cap->driver_req = hp_kube_request(cap->c->client, "PUT", path, body, NULL,
                                          on_driver_written, cap);
        free(body);
    }
    hp_json_free(&j);
}

static void on_driver_written(struct hp_kube_req *req, int status,
                              const struct hp_kube_response *resp, void *data)
{
    struct hp_capacity *cap = data;
    const char *name = cap->c->cfg->provisioner_name;
    int create = cap->driver_creating;
    (void)req;
    cap->driver_req = NULL;
    if (status == 0 && resp->code >= 200 && resp->code < 300) {
        cap->driver_written[create ? 0 : 1]++;
        driver_say(cap, 0,
                   "%s CSIDriver %s storageCapacity=%s attachRequired=false "
                   "volumeLifecycleModes=Persistent",
                   create ? "created" : "updated", name, cap->publish ? "true" : "false");
    } else if (status == 0 && resp->code == 409) {
        driver_retry(cap, 0); /* made or changed meanwhile: read it again */
    } else {
        char reason[128], msg[512] = "";
        if (status == 0)
            (void)hp_kube_status_parse(resp->body, reason, sizeof(reason), msg, sizeof(msg));
        driver_say(cap, transient(status, resp) ? 1 : 2,
                   "could not %s CSIDriver %s (code %ld: %s): will try again",
                   create ? "create" : "update", name, status == 0 ? resp->code : 0,
                   status < 0 ? (resp && resp->error ? resp->error : strerror(-status)) : msg);
        driver_retry(cap, DRIVER_RETRY_MS);
    }
}

static void on_driver_read(struct hp_kube_req *req, int status,
                           const struct hp_kube_response *resp, void *data)
{
    struct hp_capacity *cap = data;
    const char *name = cap->c->cfg->provisioner_name;
    (void)req;
    cap->driver_req = NULL;
    if (!cap->c->leading)
        return;
    if (status == 0 && resp->code == 200) {
        driver_compare(cap, resp);
    } else if (status == 0 && resp->code == 404) {
        json_t *o = json_pack("{s:s, s:s, s:{s:s}, s:{s:b, s:b, s:b, s:[s]}}", "apiVersion",
                              "storage.k8s.io/v1", "kind", "CSIDriver", "metadata", "name", name,
                              "spec", "attachRequired", 0, "podInfoOnMount", 0,
                              "storageCapacity", cap->publish, "volumeLifecycleModes",
                              "Persistent");
        char *body = o ? json_dumps(o, JSON_COMPACT) : NULL;
        json_decref(o);
        cap->driver_creating = 1;
        cap->driver_req = hp_kube_request(cap->c->client, "POST", API "/csidrivers", body, NULL,
                                          on_driver_written, cap);
        free(body);
    } else {
        driver_say(cap, transient(status, resp) ? 1 : 2,
                   "cannot read CSIDriver %s (code %ld%s%s): will try again", name,
                   status == 0 ? resp->code : 0, status < 0 ? ": " : "",
                   status < 0 ? (resp && resp->error ? resp->error : strerror(-status)) : "");
        driver_retry(cap, DRIVER_RETRY_MS);
    }
}

static void driver_step(struct hp_capacity *cap)
{
    char path[512];
    if (!cap->driver || cap->c->stopping || !cap->c->leading || cap->driver_req)
        return;
    snprintf(path, sizeof(path), API "/csidrivers/%s", cap->c->cfg->provisioner_name);
    cap->driver_req = hp_kube_request(cap->c->client, "GET", path, NULL, NULL, on_driver_read,
                                      cap);
}

/* ---- the leader's sweep: objects of nodes that no longer exist ------------------------------ */

static void gc_step(struct hp_capacity *cap);
static void gc_list(struct hp_capacity *cap);

static void gc_clear_page(struct hp_capacity *cap)
{
    for (size_t i = 0; i < cap->gc_n; i++) {
        free(cap->gc_items[i].name);
        free(cap->gc_items[i].node);
    }
    free(cap->gc_items);
    cap->gc_items = NULL;
    cap->gc_n = cap->gc_i = 0;
}

static void gc_reset(struct hp_capacity *cap)
{
    gc_clear_page(cap);
    free(cap->gc_cont);
    free(cap->gc_node);
    cap->gc_cont = cap->gc_node = NULL;
}

static int by_node(const void *a, const void *b)
{
    const struct gc_item *x = a, *y = b;
    return strcmp(x->node ? x->node : "", y->node ? y->node : "");
}

static void gc_failed(struct hp_capacity *cap, const char *what, int status,
                      const struct hp_kube_response *resp)
{
    hp_log_warn("capacity: sweep of stale CSIStorageCapacity objects stopped: %s code=%ld%s%s",
                what, status == 0 ? resp->code : 0L, status < 0 ? " err=" : "",
                status < 0 && resp && resp->error ? resp->error : "");
    gc_reset(cap);
}

static void on_gc_deleted(struct hp_kube_req *req, int status, const struct hp_kube_response *resp,
                          void *data)
{
    struct hp_capacity *cap = data;
    (void)req;
    cap->gc_req = NULL;
    const struct gc_item *it = &cap->gc_items[cap->gc_i];
    if (status == 0 && ((resp->code >= 200 && resp->code < 300) || resp->code == 404)) {
        if (resp->code != 404) {
            cap->gc_deleted++;
            cap->gc_deleted_total++;
            cap->written[CAP_DELETE]++;
        }
        hp_log_info("capacity: deleted CSIStorageCapacity %s/%s of node %s, which no longer "
                    "exists",
                    cap->ns, it->name, it->node);
    } else {
        cap->failed[CAP_DELETE]++;
        gc_failed(cap, "deleting an object", status, resp);
        return;
    }
    cap->gc_i++;
    gc_step(cap);
}

static void on_gc_node(struct hp_kube_req *req, int status, const struct hp_kube_response *resp,
                       void *data)
{
    struct hp_capacity *cap = data;
    (void)req;
    cap->gc_req = NULL;
    if (status < 0 || (resp->code != 200 && resp->code != 404)) {
        gc_failed(cap, "reading a node", status, resp);
        return;
    }
    free(cap->gc_node);
    cap->gc_node = hp_xstrdup(cap->gc_items[cap->gc_i].node);
    cap->gc_node_gone = resp->code == 404;
    gc_step(cap);
}

/* The next step of the sweep: a node to look up, an object to delete, or the next page. */
static void gc_step(struct hp_capacity *cap)
{
    struct hp_controller *c = cap->c;
    char path[1024];
    if (c->stopping || !c->leading) {
        gc_reset(cap);
        return;
    }
    while (cap->gc_i < cap->gc_n) {
        const struct gc_item *it = &cap->gc_items[cap->gc_i];
        /* Objects without a node topology of ours were not made by an instance; this node's
         * own are its instance's (it exists: this process runs on it). */
        if (!it->node || (c->cfg->node_name && strcmp(it->node, c->cfg->node_name) == 0)) {
            cap->gc_i++;
            continue;
        }
        if (!cap->gc_node || strcmp(cap->gc_node, it->node) != 0) {
            snprintf(path, sizeof(path), "/api/v1/nodes/%s", it->node);
            cap->gc_req = hp_kube_request(c->client, "GET", path, NULL, NULL, on_gc_node, cap);
            hp_kube_req_set_max_body(cap->gc_req, 4u * 1024 * 1024);
            return;
        }
        if (cap->gc_node_gone) {
            snprintf(path, sizeof(path), "%s/%s", cap->coll, it->name);
            cap->gc_req = hp_kube_request(c->client, "DELETE", path, NULL, NULL, on_gc_deleted,
                                          cap);
            return;
        }
        cap->gc_i++;
    }
    gc_clear_page(cap);
    if (cap->gc_cont) {
        gc_list(cap);
        return;
    }
    if (cap->gc_deleted)
        hp_log_info("capacity: swept %zu CSIStorageCapacity objects of nodes that no longer "
                    "exist",
                    cap->gc_deleted);
    gc_reset(cap);
    if (cap->gc_again) {
        cap->gc_again = 0;
        gc_list(cap);
    }
}

static void on_gc_listed(struct hp_kube_req *req, int status, const struct hp_kube_response *resp,
                         void *data)
{
    struct hp_capacity *cap = data;
    struct hp_json j;
    (void)req;
    cap->gc_req = NULL;
    free(cap->gc_cont);
    cap->gc_cont = NULL;
    hp_json_init(&j);
    if (status < 0 || resp->code != 200 || hp_json_parse(&j, resp->body, resp->body_len) < 0) {
        hp_json_free(&j);
        gc_failed(cap, "listing the objects", status, resp);
        return;
    }
    int items = hp_json_get(&j, 0, "items");
    cap->gc_items = hp_xcalloc((size_t)hp_json_count(&j, items) + 1, sizeof(*cap->gc_items));
    for (int e = hp_json_first(&j, items); e >= 0; e = hp_json_next(&j, items, e)) {
        char *name = hp_json_str_dup(&j, hp_json_path(&j, e, "metadata", "name", NULL));
        if (!name)
            continue;
        cap->gc_items[cap->gc_n].name = name;
        cap->gc_items[cap->gc_n++].node = topology_node(&j, hp_json_get(&j, e, "nodeTopology"));
    }
    qsort(cap->gc_items, cap->gc_n, sizeof(*cap->gc_items), by_node);
    int cont = hp_json_path(&j, 0, "metadata", "continue", NULL);
    if (hp_json_str_len(&j, cont) > 0)
        cap->gc_cont = hp_json_str_dup(&j, cont);
    hp_json_free(&j);
    gc_step(cap);
}

static void gc_list(struct hp_capacity *cap)
{
    struct hp_buf q;
    hp_buf_init(&q, 0);
    (void)hp_buf_printf(&q, "%s?limit=%d&labelSelector=", cap->coll, GC_PAGE);
    char sel[512];
    snprintf(sel, sizeof(sel), LABEL_DRIVER "=%s", cap->c->cfg->provisioner_name);
    (void)hp_buf_append_urlenc(&q, sel);
    if (cap->gc_cont) {
        (void)hp_buf_appends(&q, "&continue=");
        (void)hp_buf_append_urlenc(&q, cap->gc_cont);
    }
    cap->gc_req = hp_kube_request(cap->c->client, "GET", q.data, NULL, NULL, on_gc_listed, cap);
    hp_buf_free(&q);
}

void hp__capacity_leader_work(struct hp_controller *c)
{
    struct hp_capacity *cap = c->capacity;
    if (!cap || !cap->driver || c->stopping || !c->leading)
        return;
    arm_sync(cap, 0); /* the objects of classes on a shared path are the leader's */
    driver_step(cap);
    if (cap->gc_req || cap->gc_items)
        cap->gc_again = 1;
    else {
        cap->gc_deleted = 0;
        gc_list(cap);
    }
}

/* ---- metrics -------------------------------------------------------------------------------- */

static void render_published(const void *obj, void *data)
{
    const struct cap_seen *s = obj;
    struct hp_buf *out = data;
    for (int f = 0; f < 2 && s->class_name; f++) {
        if (!(f ? s->has_max : s->has_capacity))
            continue;
        (void)hp_buf_appends(out, "hostpath_capacity_published_bytes{storageclass=\"");
        hp_metrics_append_label_value(out, s->class_name);
        (void)hp_buf_printf(out, "\",field=\"%s\"} %llu\n", f ? "maximumVolumeSize" : "capacity",
                            (unsigned long long)(f ? s->max_size : s->capacity));
    }
}

static void render_metrics(struct hp_buf *out, void *data)
{
    struct hp_capacity *cap = data;
    (void)hp_buf_appends(
        out, "# HELP hostpath_capacity_publishing 1 while this instance publishes "
             "CSIStorageCapacity objects for its node (--node-name, a valid CSIDriver name, "
             "--enable-capacity).\n# TYPE hostpath_capacity_publishing gauge\n");
    (void)hp_buf_printf(out, "hostpath_capacity_publishing %d\n", cap->publish);
    (void)hp_buf_appends(
        out, "# HELP hostpath_capacity_objects_written_total CSIStorageCapacity writes that "
             "succeeded, by operation.\n# TYPE hostpath_capacity_objects_written_total counter\n");
    for (int i = 0; i < CAP_NOPS; i++)
        (void)hp_buf_printf(out, "hostpath_capacity_objects_written_total{operation=\"%s\"} %llu\n",
                            op_names[i], (unsigned long long)cap->written[i]);
    (void)hp_buf_appends(
        out, "# HELP hostpath_capacity_write_failures_total CSIStorageCapacity writes that "
             "failed, by operation.\n# TYPE hostpath_capacity_write_failures_total counter\n");
    for (int i = 0; i < CAP_NOPS; i++)
        (void)hp_buf_printf(out, "hostpath_capacity_write_failures_total{operation=\"%s\"} %llu\n",
                            op_names[i], (unsigned long long)cap->failed[i]);
    (void)hp_buf_appends(
        out, "# HELP hostpath_capacity_stale_objects_deleted_total CSIStorageCapacity objects of "
             "nodes that no longer exist, deleted by the leader.\n"
             "# TYPE hostpath_capacity_stale_objects_deleted_total counter\n");
    (void)hp_buf_printf(out, "hostpath_capacity_stale_objects_deleted_total %llu\n",
                        (unsigned long long)cap->gc_deleted_total);
    (void)hp_buf_appends(
        out, "# HELP hostpath_csidriver_writes_total Writes of the CSIDriver object by the "
             "leader, by operation.\n# TYPE hostpath_csidriver_writes_total counter\n");
    (void)hp_buf_printf(out, "hostpath_csidriver_writes_total{operation=\"create\"} %llu\n",
                        (unsigned long long)cap->driver_written[0]);
    (void)hp_buf_printf(out, "hostpath_csidriver_writes_total{operation=\"update\"} %llu\n",
                        (unsigned long long)cap->driver_written[1]);
    (void)hp_buf_appends(
        out, "# HELP hostpath_capacity_published_bytes What this node's CSIStorageCapacity "
             "objects say, by class: capacity and maximumVolumeSize.\n"
             "# TYPE hostpath_capacity_published_bytes gauge\n");
    if (cap->inf)
        hp_informer_foreach(cap->inf, render_published, out);
}

/* ---- lifecycle ------------------------------------------------------------------------------ */

void hp_controller_set_namespace(struct hp_controller *c, const char *ns)
{
    struct hp_capacity *cap = c->capacity;
    free(cap->ns);
    cap->ns = hp_xstrdup(ns && *ns ? ns : "default");
}

void hp__capacity_init(struct hp_controller *c)
{
    struct hp_capacity *cap = hp_xcalloc(1, sizeof(*cap));
    cap->c = c;
    cap->ns = hp_xstrdup("default");
    cap->objs = hp_store_new(&obj_ops);
    uv_timer_t *timers[] = {&cap->sync_timer, &cap->driver_timer, &cap->poll_timer};
    for (size_t i = 0; i < HP_ARRAY_SIZE(timers); i++) {
        (void)uv_timer_init(c->loop, timers[i]); /* cannot fail on a live loop */
        timers[i]->data = cap;
    }
    c->capacity = cap;
    (void)hp_metrics_add_collector(NULL, render_metrics, cap); /* no family: cannot fail */
}

/* Decides, once, what this instance does, and says it. */
static void decide(struct hp_capacity *cap)
{
    const struct hp_config *cfg = cap->c->cfg;
    char why[256];
    if (!cfg->enable_capacity) {
        hp_log_info("capacity: capacity-aware scheduling is off (--enable-capacity=false): no "
                    "CSIDriver or CSIStorageCapacity object is written");
        return;
    }
    if (hp__capacity_driver_name_ok(cfg->provisioner_name, why, sizeof(why)) < 0) {
        hp_log_warn("capacity: capacity-aware scheduling is off: --provisioner-name %s cannot "
                    "name a CSIDriver (%s); kube-scheduler will not know which nodes have room "
                    "(a claim on a full node is handed back to it, one node at a time)",
                    cfg->provisioner_name, why);
        return;
    }
    cap->driver = 1;
    if (!cfg->node_name) {
        hp_log_info("capacity: no --node-name: this instance publishes no CSIStorageCapacity "
                    "objects (per-node instances do), and as leader keeps the CSIDriver at "
                    "storageCapacity=false");
        return;
    }
    if (!label_value_ok(cfg->node_name)) {
        hp_log_warn("capacity: --node-name %s is not a label value (at most 63 characters, "
                    "letters, digits, '-', '_', '.'): no CSIStorageCapacity objects can select "
                    "it; capacity publishing is off",
                    cfg->node_name);
        return;
    }
    cap->publish = 1;
    hp__capacity_managed_by(cfg->node_name, cap->managed_by, sizeof(cap->managed_by));
    hp_log_info("capacity: publishing CSIStorageCapacity objects namespace=%s node=%s "
                "managed-by=%s update-interval=%llums poll-interval=%llums",
                cap->ns, cfg->node_name, cap->managed_by,
                (unsigned long long)cfg->capacity_update_interval_ms,
                (unsigned long long)cfg->capacity_poll_interval_ms);
}

void hp__capacity_start(struct hp_controller *c)
{
    struct hp_capacity *cap = c->capacity;
    decide(cap);
    cap->coll = hp_xasprintf(API "/namespaces/%s/csistoragecapacities", cap->ns);
    if (!cap->publish)
        return;
    struct hp_buf q;
    char sel[512];
    hp_buf_init(&q, 0);
    /* This node's objects, and those of classes on a shared path (the leader writes them). */
    snprintf(sel, sizeof(sel), LABEL_DRIVER "=%s," LABEL_MANAGED_BY " in (%s," MANAGED_SHARED ")",
             c->cfg->provisioner_name, cap->managed_by);
    (void)hp_buf_printf(&q, "%s?labelSelector=", cap->coll);
    (void)hp_buf_append_urlenc(&q, sel);
    cap->watch_path = hp_buf_steal(&q);
    hp_buf_free(&q);
    /* One namespace: names are unique keys. */
    cap->itype = (struct hp_informer_type){"csistoragecapacities", cap->watch_path, 0, decode_seen,
                                           seen_key, seen_free};
    struct hp_informer_opts o = {.on_change = on_seen_changed, .on_synced = on_seen_synced,
                                 .data = cap};
    cap->inf = hp_informer_new(c->loop, c->client, &cap->itype, &o);
    if (c->cfg->capacity_poll_interval_ms)
        (void)uv_timer_start(&cap->poll_timer, on_poll_timer, c->cfg->capacity_poll_interval_ms,
                             c->cfg->capacity_poll_interval_ms);
}

static void on_part_closed(void *data)
{
    struct hp_controller *c = data;
    c->capacity_busy--;
    c->maybe_closed(c);
}

static void on_handle_closed(uv_handle_t *h)
{
    struct hp_capacity *cap = h->data;
    on_part_closed(cap->c);
}

static void cancel_obj(void *obj, void *data)
{
    struct cap_obj *o = obj;
    (void)data;
    if (o->req) {
        hp_kube_cancel(o->req);
        o->req = NULL;
    }
}

void hp__capacity_stop(struct hp_controller *c)
{
    struct hp_capacity *cap = c->capacity;
    hp_store_foreach(cap->objs, cancel_obj, NULL);
    struct hp_kube_req **reqs[] = {&cap->driver_req, &cap->gc_req};
    for (size_t i = 0; i < HP_ARRAY_SIZE(reqs); i++) {
        if (*reqs[i])
            hp_kube_cancel(*reqs[i]);
        *reqs[i] = NULL;
    }
    if (cap->inf) {
        c->capacity_busy++;
        hp_informer_close(cap->inf, on_part_closed, c);
        cap->inf = NULL;
    }
    uv_timer_t *timers[] = {&cap->sync_timer, &cap->driver_timer, &cap->poll_timer};
    for (size_t i = 0; i < HP_ARRAY_SIZE(timers); i++) {
        c->capacity_busy++;
        uv_close((uv_handle_t *)timers[i], on_handle_closed);
    }
}

/* After hp__capacity_stop's handles and requests have all ended. */
void hp__capacity_free(struct hp_controller *c)
{
    struct hp_capacity *cap = c->capacity;
    if (!cap)
        return;
    hp_metrics_remove_collector(render_metrics, cap);
    hp_store_free(cap->objs);
    gc_reset(cap);
    free(cap->driver_said);
    free(cap->ns);
    free(cap->coll);
    free(cap->watch_path);
    free(cap);
    c->capacity = NULL;
}
