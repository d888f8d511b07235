/* controller room: measuring what bound volumes use (one worker of its own) and exporting it
 * under kubelet's volume metric names.
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
#include "hostpath/metrics.h"
#include "hostpath/quantity.h"
#include "hostpath/store.h"

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
    int over;    /* used > capacity as last measured */
    int limited; /* measured from its hard limit's project (README "Hard limits") */
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
void hp__track_usage(struct hp_controller *c, const char *name, const struct hp_volume *v)
{
    char rel[4096];
    struct root *r = NULL;
    const char *node = c->cfg->node_name;
    if (v && strcmp(v->phase, "Bound") == 0 &&
        strcmp(v->provisioned_by, c->cfg->provisioner_name) == 0 &&
        (!v->node || !node || strcmp(v->node, node) == 0))
        r = hp__root_of(c, v->path, rel, sizeof(rel));
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

void hp__on_usage_timer(uv_timer_t *t)
{
    struct hp_controller *c = hp_container_of(t, struct hp_controller, usage_timer);
    usage_next(c);
}

static void collect_usage_name(void *obj, void *data)
{
    struct hp_controller *c = data;
    c->usage_round[c->usage_n++] = hp_xstrdup(((struct usage *)obj)->pv);
}

void hp__free_round(struct hp_controller *c)
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
    const struct hp_claim *cl = hp__claim(c, key);
    const struct hp_volume *v = hp__volume(c, u->pv);
    struct hp_object_ref ref;
    if (cl) {
        hp__claim_ref(cl, &ref);
    } else if (v && v->claim_uid[0]) {
        /* Per node, a claim bound before the claim labels is not cached (docs/design.md, "A
         * thousand nodes"): its PV names it. */
        ref = (struct hp_object_ref){.kind = "PersistentVolumeClaim", .api_version = "v1",
                                     .namespace_ = v->claim_namespace, .name = v->claim_name,
                                     .uid = v->claim_uid};
    } else {
        return;
    }
    hp_events_emit(c->events, &ref, 1, "VolumeOverCapacity",
                   "volume %s uses %s, more than its capacity of %s (%s)", u->pv,
                   hp_quantity_format(u->used, a, sizeof(a)),
                   hp_quantity_format(u->capacity, b, sizeof(b)),
                   u->limited ? "past its hard limit: written by a process with "
                                "CAP_SYS_RESOURCE, which ext4 lets through"
                              : "hostPath sizes are not enforced on its path: the disk is "
                                "shared with other volumes");
    hp_log_warn("controller: volume over capacity pv=%s claim=%s used=%llu capacity=%llu", u->pv,
                key, (unsigned long long)u->used, (unsigned long long)u->capacity);
}

static void on_usage_measured(struct hp_fsop *f, int status, void *data)
{
    struct hp_controller *c = data;
    c->usage_op = NULL;
    if (c->stopping) {
        hp_fsop_free(f);
        c->maybe_closed(c);
        return;
    }
    struct usage *u = hp_store_get(c->usage, f->rec.pv);
    if (u)
        hp__quota_seen(c, u->root, f);
    if (u && status == 0) {
        u->measured = 1;
        u->used = f->used_bytes;
        u->inodes_used = f->used_inodes;
        u->fs = f->stats;
        u->limited = f->by_quota && f->limit_hard;
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
    (void)uv_timer_start(&c->usage_timer, hp__on_usage_timer, pause, 0);
}

/* Measures the next volume of the round; a new round starts every --usage-scan-period. */
static void usage_next(struct hp_controller *c)
{
    if (c->stopping || c->usage_op || !c->cfg->usage_scan_period_ms)
        return;
    if (c->usage_i == c->usage_n) {
        if (c->usage_round) { /* a round ended: the next one after a period */
            hp__free_round(c);
            (void)uv_timer_start(&c->usage_timer, hp__on_usage_timer, c->cfg->usage_scan_period_ms,
                                 0);
            return;
        }
        c->usage_round = hp_xcalloc(hp_store_len(c->usage) + 1, sizeof(char *));
        hp_store_foreach(c->usage, collect_usage_name, c);
        if (c->usage_n == 0) {
            hp__free_round(c);
            (void)uv_timer_start(&c->usage_timer, hp__on_usage_timer, c->cfg->usage_scan_period_ms,
                                 0);
            return;
        }
    }
    char *pv = c->usage_round[c->usage_i++];
    struct usage *u = hp_store_get(c->usage, pv);
    if (!u) {
        free(pv);
        (void)uv_timer_start(&c->usage_timer, hp__on_usage_timer, 0, 0);
        return;
    }
    struct hp_fsop *f = hp_fsop_new(HP_FSOP_USAGE, u->root->path);
    const struct hp_record *rec = hp_volindex_record(c->index, pv);
    f->rec.pv = pv;
    f->rec.path = hp_xstrdup(u->rel);
    /* A volume with a hard limit is read from its project's counters: no walk. */
    if (rec && rec->project_id && rec->root && strcmp(rec->root, u->root->path) == 0 &&
        strcmp(rec->path, u->rel) == 0)
        f->rec.project_id = rec->project_id;
    hp__quota_request(c, u->root, f, pv);
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
void hp__render_usage(struct hp_buf *out, void *data)
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

void hp__usage_init(struct hp_controller *c)
{
    c->usage = hp_store_new(&usage_ops);
    c->usage_hp = hp_hostpath_new(c->loop, 1);
    (void)hp_metrics_add_collector(NULL, hp__render_usage, c); /* cannot fail without a family */
}

/* The worker (usage_hp) is closed by the controller's close, before this. */
void hp__usage_free(struct hp_controller *c)
{
    hp_metrics_remove_collector(hp__render_usage, c);
    hp_store_free(c->usage);
    hp__free_round(c);
}
