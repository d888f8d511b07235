/* controller room: reading each volume root's ownership journal (and roots file) into the
 * volume index, and noticing a disk that is not mounted.
 *
 * Loop thread only; see controller_internal.h for the rooms and their order.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysmacros.h>
#include <time.h>

#include "controller_internal.h"
#include "hostpath/buf.h"
#include "hostpath/config.h"
#include "hostpath/informer.h"
#include "hostpath/log.h"

/* Roots not read yet (or whose disk was gone) are read again. */
static void on_rescan(uv_timer_t *t)
{
    hp__scan_roots(hp_container_of(t, struct hp_controller, rescan), 1);
}

static int all_roots_loaded(const struct hp_controller *c)
{
    for (size_t i = 0; i < c->nroots; i++)
        if (!c->roots[i]->journal_loaded)
            return 0;
    return 1;
}

struct root_records {
    const char *root;
    size_t n;
};

static void count_root_record(const struct hp_record *r, void *data)
{
    struct root_records *q = data;
    q->n += r->root && strcmp(r->root, q->root) == 0;
}

struct root_volumes {
    const struct hp_controller *c;
    const struct root *root;
    size_t n;
};

/* Counts the PVs of ours on this node's disk under q->root that were made with a record (they
 * carry the on-delete annotation; an earlier version's do not, and are recorded by migration). */
static void count_recorded_volume(const void *obj, void *data)
{
    struct root_volumes *q = data;
    const struct hp_volume *v = obj;
    const struct hp_config *cfg = q->c->cfg;
    char rel[4096];
    if (!v->on_delete || !v->path[0] || strcmp(v->provisioned_by, cfg->provisioner_name) != 0 ||
        strcmp(v->identity, cfg->identity) != 0)
        return;
    if (v->node && cfg->node_name && strcmp(v->node, cfg->node_name) != 0)
        return;
    q->n += hp__root_of(q->c, v->path, rel, sizeof(rel)) == q->root;
}

/* A journal read of r found filesystem fs with nrecords records. The first one is learnt, unless
 * it shows no journal at all while PVs of ours made with a record name directories under r: the
 * process started while the disk was not mounted, and fs is its mount point's filesystem. One
 * that differs is taken too, unless the records known for r were made on the old one and the
 * new one shows none. Either is an unmounted disk, which must take no new volume and whose
 * records stay as they were (1: do not merge this read). */
static int root_fs_read(struct hp_controller *c, struct root *r, const struct hp_fs_ident *fs,
                        size_t nrecords, int journal_found)
{
    struct hp_record probe = {.dev = r->fs.dev, .fsid = r->fs.fsid};
    if (!r->fs_known && !journal_found && !nrecords && c->volumes) {
        struct root_volumes q = {c, r, 0};
        hp_informer_foreach(c->volumes, count_recorded_volume, &q);
        if (c->foreign) /* ours from before the node labels, until labelled */
            hp_informer_foreach(c->foreign, count_recorded_volume, &q);
        if (q.n) {
            if (!r->fs_moved)
                hp_log_error("controller: volume path %s (device %u:%u) shows no ownership "
                             "journal, yet %zu PersistentVolumes of ours were made there: is its "
                             "disk mounted? No new volume is made there until its journal is "
                             "back",
                             r->path, major((dev_t)fs->dev), minor((dev_t)fs->dev), q.n);
            r->fs_moved = 1;
            hp__root_metrics(c, r);
            (void)uv_timer_start(&c->rescan, on_rescan, SCAN_RETRY_MS, 0); /* is it back? */
            return 1;
        }
    }
    if (!r->fs_known || hp_policy_same_fs(&probe, fs)) {
        if (r->fs_moved)
            hp_log_info("controller: volume path %s is back on its filesystem (device %u:%u): "
                        "new volumes are made there again",
                        r->path, major((dev_t)fs->dev), minor((dev_t)fs->dev));
        r->fs = *fs;
        r->fs_known = 1;
        r->fs_moved = 0;
        return 0;
    }
    struct root_records q = {r->path, 0};
    hp_volindex_foreach_record(c->index, count_root_record, &q);
    if (q.n && !nrecords) {
        if (!r->fs_moved)
            hp_log_error("controller: volume path %s is now on another filesystem (device %u:%u, "
                         "was %u:%u) that holds none of its %zu volumes: is its disk mounted? "
                         "No new volume is made there until it is back",
                         r->path, major((dev_t)fs->dev), minor((dev_t)fs->dev),
                         major((dev_t)r->fs.dev), minor((dev_t)r->fs.dev), q.n);
        r->fs_moved = 1;
        hp__root_metrics(c, r);
        (void)uv_timer_start(&c->rescan, on_rescan, SCAN_RETRY_MS, 0); /* is it back? */
        return 1;
    }
    hp_log_info("controller: volume path %s is now on filesystem device %u:%u (was %u:%u; %zu "
                "records there): its journal is what counts from now on",
                r->path, major((dev_t)fs->dev), minor((dev_t)fs->dev), major((dev_t)r->fs.dev),
                minor((dev_t)r->fs.dev), nrecords);
    r->fs = *fs;
    r->fs_moved = 0;
    return 0;
}

static void on_scanned(struct hp_fsop *f, int status, void *data)
{
    struct root *r = data;
    struct hp_controller *c = r->c;
    r->scan = NULL;
    c->scans--;
    if (c->stopping) {
        hp_fsop_free(f);
        c->maybe_closed(c);
        return;
    }
    hp__root_seen(c, r, &f->stats);
    hp__quota_seen(c, r, f);
    int root_missing = status == -ENOENT && f->nrecords == 0;
    if (status < 0 && !root_missing) {
        hp_log_error("controller: cannot read the ownership journal under %s: %s (trying again "
                     "in %d s)",
                     r->path, f->msg, SCAN_RETRY_MS / 1000);
        hp_fsop_free(f);
        (void)uv_timer_start(&c->rescan, on_rescan, SCAN_RETRY_MS, 0);
        return;
    }
    r->journal_found = f->journal_found;
    if (r->retired && r->listed && !f->journal_found) {
        if (!r->missing_said)
            hp_log_warn("controller: volume path %s is no longer configured, and its ownership "
                        "journal cannot be seen (is its disk mounted?): its volumes are "
                        "released once it is back. To forget it for good, remove its line from "
                        "the file .hostpath-provisioner/roots under each configured path",
                        r->path);
        r->missing_said = 1;
    } else if (root_missing && !r->journal_loaded) {
        hp_log_info("controller: volume path %s does not exist yet; it is made with the first "
                    "volume",
                    r->path);
    }
    if (f->invalid_records)
        hp_log_error("controller: %zu ownership records under %s could not be read and are "
                     "ignored (their directories are never touched): %s",
                     f->invalid_records, r->path, f->msg);
    int keep_index = !root_missing && root_fs_read(c, r, &f->fs, f->nrecords, f->journal_found);
    if (!keep_index && (!root_missing || !r->journal_loaded)) {
        hp_volindex_merge_records(c->index, r->path, f->records, f->nrecords, r->scan_started);
        hp__retrack_volumes(c);
    }
    int first = !r->journal_loaded;
    r->journal_loaded = 1;
    if (f->clean_leftovers)
        r->leftovers_cleaned = 1;
    r->orphans_unrecorded = f->unrecorded;
    if (all_roots_loaded(c))
        c->journal_loaded = 1;
    c->scanned(c, r, f, first);
    hp_fsop_free(f);
}

struct live_paths {
    struct hp_controller *c;
    const struct root *root;
    char **v;
    size_t n, cap;
};

static void collect_live_path(const void *obj, void *data)
{
    struct live_paths *l = data;
    const struct hp_volume *v = obj;
    char rel[4096];
    if (hp__root_of(l->c, v->path, rel, sizeof(rel)) != l->root)
        return;
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->v = hp_xrealloc(l->v, l->cap * sizeof(*l->v));
    }
    l->v[l->n++] = hp_xstrdup(rel);
}

/* Reads each root's whole journal on the threadpool (merged into the index, orphans settled)
 * and counts directories under it that nothing accounts for. */
void hp__start_scan(struct hp_controller *c)
{
    hp__scan_roots(c, 0);
}

static void scan_root(struct hp_controller *c, struct root *r);

void hp__scan_roots(struct hp_controller *c, int only_unready)
{
    if (c->stopping)
        return;
    for (size_t i = 0; i < c->nroots; i++) {
        struct root *r = c->roots[i];
        if (r->scan || (only_unready && r->journal_loaded && !r->fs_moved))
            continue;
        scan_root(c, r);
    }
}

void hp__rescan_root(struct hp_controller *c, struct root *r)
{
    if (!c->stopping && !r->scan)
        scan_root(c, r);
}

static size_t root_nrecords(const struct hp_controller *c, const struct root *r)
{
    struct root_records q = {r->path, 0};
    hp_volindex_foreach_record(c->index, count_root_record, &q);
    return q.n;
}

/* A root that stays known when no longer configured: it holds records, or nobody read it yet,
 * or a roots file listed it and its journal cannot be seen now (its disk not mounted?). */
int hp__root_holds(const struct hp_controller *c, const struct root *r)
{
    return !r->journal_loaded || (r->listed && !r->journal_found) || root_nrecords(c, r) > 0;
}

/* What every root's roots file should say (journal.h): the configured roots and the retired
 * ones that still hold volumes. Packed; caller frees. */
static char *roots_list(const struct hp_controller *c)
{
    struct hp_buf b;
    hp_buf_init(&b, 0);
    for (size_t i = 0; i < c->nroots; i++) {
        const struct root *r = c->roots[i];
        if (!r->retired || hp__root_holds(c, r)) {
            (void)hp_buf_append(&b, r->path, strlen(r->path));
            (void)hp_buf_append(&b, "", 1);
        }
    }
    (void)hp_buf_append(&b, "", 1);
    return hp_buf_steal(&b);
}

static void scan_root(struct hp_controller *c, struct root *r)
{
    struct hp_fsop *f = hp_fsop_new(HP_FSOP_SCAN, r->path);
    if (hp__works_on_root(c, r, c->cfg->node_name))
        f->write_roots = roots_list(c);
    struct live_paths l = {c, r, NULL, 0, 0};
    /* Crash leftovers (temporary records, staging directories) are removed only before any
     * operation of ours can have started on this root. */
    f->clean_leftovers = !r->leftovers_cleaned && hp__works_on_root(c, r, c->cfg->node_name);
    hp__foreach_volume(c, collect_live_path, &l);
    f->live = l.v;
    f->nlive = l.n;
    hp__quota_request(c, r, f, NULL); /* whether it can enforce hard limits now */
    r->scan = f;
    r->scan_started = (int64_t)time(NULL);
    c->scans++;
    hp_hostpath_submit(c->hostpath, f, on_scanned, r);
}
