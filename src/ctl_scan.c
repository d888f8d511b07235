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
#include "hostpath/store.h"

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

static int journal_expected(const struct hp_controller *c, const struct root *r)
{
    return hp_store_get(c->seen_journals, r->path) != NULL;
}

/* r takes no new volume (fs_moved) and is read again in 5 s: is its disk back? */
static void hold_root(struct hp_controller *c, struct root *r)
{
    r->fs_moved = 1;
    hp__root_metrics(c, r);
    (void)uv_timer_start(&c->rescan, on_rescan, SCAN_RETRY_MS, 0);
}

/* Root r shows no journal (or does not exist) where one is known to have been: its disk is not
 * mounted. No new volume goes there and its records stay as they were until it is back. */
static void disk_missing(struct hp_controller *c, struct root *r, const struct hp_fs_ident *fs,
                         int root_missing, size_t recorded_volumes)
{
    if (!r->fs_moved && !r->retired) { /* a retired one's warning said it (on_scanned) */
        char seen[64];
        if (root_missing)
            (void)snprintf(seen, sizeof(seen), "does not exist");
        else
            (void)snprintf(seen, sizeof(seen), "(device %u:%u) shows no ownership journal",
                           major((dev_t)fs->dev), minor((dev_t)fs->dev));
        char why[256];
        if (recorded_volumes)
            (void)snprintf(why, sizeof(why), "%zu PersistentVolumes of ours were made there",
                           recorded_volumes);
        else
            (void)snprintf(why, sizeof(why),
                           "an ownership journal was seen there before (the file %s/journals "
                           "under this node's volume paths lists it)",
                           HP_JOURNAL_DIR);
        hp_log_error("controller: volume path %s %s, yet %s: is its disk mounted? No new "
                     "volume is made there until its journal is back%s",
                     r->path, seen, why,
                     recorded_volumes ? ""
                                      : " (if the disk was replaced on purpose: stop the "
                                        "provisioner, remove the path's line from that file "
                                        "under every volume path, start it)");
    }
    hold_root(c, r);
}

/* r's disk was unmounted under this process (the mount its filesystem was seen on is gone),
 * and the mount point shows no journal: however few volumes it held, the empty mount point
 * (or the filesystem it lies on) is not where its volumes go. Checked again every 5 s until
 * the disk is back; a restart takes the path as it is then. */
static void disk_unmounted(struct hp_controller *c, struct root *r, const struct hp_fs_ident *fs,
                           int root_missing)
{
    if (!r->fs_moved && !r->retired) {
        char seen[96];
        if (root_missing)
            (void)snprintf(seen, sizeof(seen), "no longer exists");
        else
            (void)snprintf(seen, sizeof(seen), "is now on device %u:%u",
                           major((dev_t)fs->dev), minor((dev_t)fs->dev));
        hp_log_error("controller: volume path %s %s: the mount of its disk (device %u:%u) is "
                     "gone, and it shows no ownership journal: is its disk mounted? No new "
                     "volume is made there until it is back (if it was unmounted for good, "
                     "restart the provisioner to use the path as it is now)",
                     r->path, seen, major((dev_t)r->fs.dev), minor((dev_t)r->fs.dev));
    }
    hold_root(c, r);
}

/* A journal read of r found filesystem fs with nrecords records (root_missing: the path does
 * not exist). The first filesystem is learnt, unless the path shows no journal at all while
 * PVs of ours made with a record name directories under r, or a journals file says r had a
 * journal: the process started while the disk was not mounted, and fs is its mount point's
 * filesystem. One that differs is taken too, unless the records known for r were made on the
 * old one and the new one shows none, or it shows no journal where one was seen. Each is an
 * unmounted disk, which must take no new volume and whose records stay as they were (1: do not
 * merge this read). */
static int root_fs_read(struct hp_controller *c, struct root *r, const struct hp_fsop *f,
                        int root_missing)
{
    const struct hp_fs_ident *fs = &f->fs;
    size_t nrecords = f->nrecords;
    int journal_found = f->journal_found;
    struct hp_record probe = {.dev = r->fs.dev, .fsid = r->fs.fsid};
    /* The mount its filesystem was seen on is gone from the mount table: its disk was
     * unmounted (the path, or its nearest existing ancestor, lies on what was below). */
    int unmounted = r->fs_known && !journal_found && f->prev_mount_gone;
    if (root_missing && r->made != r->made_at_scan) {
        /* A volume made the path while this read ran: what it saw is gone. Read again. */
        hp__rescan_root(c, r);
        return 1;
    }
    if (!journal_found && !nrecords && (root_missing || !r->fs_known)) {
        struct root_volumes q = {c, r, 0};
        if (c->volumes)
            hp_informer_foreach(c->volumes, count_recorded_volume, &q);
        if (c->foreign) /* ours from before the node labels, until labelled */
            hp_informer_foreach(c->foreign, count_recorded_volume, &q);
        int same_mount = f->mount_id && r->mount_id && f->mount_id == r->mount_id;
        /* fs_known, or forgotten by the branch below (the mount of its ancestor kept) */
        int forgotten = !r->fs_known && r->mount_id;
        if (root_missing && (r->fs_known || forgotten) && !unmounted && !q.n) {
            /* Removed on the filesystem it was on (its nearest ancestor is on the same mount),
             * holding nothing of ours: made again with the next volume. Records still indexed
             * for it (a removal that failed once the directory was gone) name nothing left.
             * Until that volume makes it, each read finds it so again (same mount), not a
             * missing disk; if that mount goes, it is one. */
            struct root_records k = {r->path, 0};
            hp_volindex_foreach_record(c->index, count_root_record, &k);
            if (same_mount || (!f->mount_id && !k.n && !journal_expected(c, r))) {
                if (r->fs_known)
                    hp_log_info("controller: volume path %s was removed (its disk is mounted); "
                                "it is made again with the next volume",
                                r->path);
                r->fs_known = 0;
                r->fs_moved = 0;
                r->mount_id = f->mount_id;
                hp__root_metrics(c, r);
                return 0;
            }
        }
        if (!root_missing && forgotten && same_mount && !q.n) {
            /* made again by hand on that mount: learnt below like a new one */
        } else if (q.n || journal_expected(c, r)) {
            disk_missing(c, r, fs, root_missing, q.n);
            return 1;
        }
        if (root_missing && unmounted) {
            disk_unmounted(c, r, fs, root_missing);
            return 1;
        }
        if (root_missing)
            return 0; /* nothing to learn: it is made with the first volume */
    }
    if (!r->fs_known || hp_policy_same_fs(&probe, fs)) {
        if (r->fs_moved)
            hp_log_info("controller: volume path %s is back on its filesystem (device %u:%u): "
                        "new volumes are made there again",
                        r->path, major((dev_t)fs->dev), minor((dev_t)fs->dev));
        r->fs = *fs;
        r->fs_known = 1;
        r->fs_moved = 0;
        r->mount_id = f->mount_id;
        return 0;
    }
    struct root_records q = {r->path, 0};
    hp_volindex_foreach_record(c->index, count_root_record, &q);
    if (!q.n && !journal_found && journal_expected(c, r)) {
        disk_missing(c, r, fs, 0, 0);
        return 1;
    }
    if (q.n && !nrecords) {
        if (!r->fs_moved)
            hp_log_error("controller: volume path %s is now on another filesystem (device %u:%u, "
                         "was %u:%u) that holds none of its %zu volumes: is its disk mounted? "
                         "No new volume is made there until it is back",
                         r->path, major((dev_t)fs->dev), minor((dev_t)fs->dev),
                         major((dev_t)r->fs.dev), minor((dev_t)r->fs.dev), q.n);
        hold_root(c, r);
        return 1;
    }
    if (unmounted) {
        disk_unmounted(c, r, fs, 0);
        return 1;
    }
    hp_log_info("controller: volume path %s is now on filesystem device %u:%u (was %u:%u; %zu "
                "records there): its journal is what counts from now on",
                r->path, major((dev_t)fs->dev), minor((dev_t)fs->dev), major((dev_t)r->fs.dev),
                minor((dev_t)r->fs.dev), nrecords);
    r->fs = *fs;
    r->fs_moved = 0;
    r->mount_id = f->mount_id;
    return 0;
}

static char *roots_list(const struct hp_controller *c);
static char *journals_list(const struct hp_controller *c);

/* Writes the roots and journals files of root r (where it has a journal) as they should be
 * now: a journal seen for the first time is named under every other root at once, not at the
 * next scan, so that a restart with its disk unmounted finds it missing. */
static void write_lists(struct hp_controller *c, struct root *r);
static void sync_lists_after(struct hp_controller *c, struct root *r, const struct hp_fsop *f);

/* A scan or list write (c->scans) ended: 1 when the controller is stopping (f freed, the
 * close told), the caller then does nothing more. */
static int root_request_ended(struct hp_controller *c, struct hp_fsop *f)
{
    c->scans--;
    if (!c->stopping)
        return 0;
    hp_fsop_free(f);
    c->maybe_closed(c);
    return 1;
}

static void on_lists_written(struct hp_fsop *f, int status, void *data)
{
    struct root *r = data;
    struct hp_controller *c = r->c;
    r->lists = NULL;
    if (root_request_ended(c, f))
        return;
    if (status < 0 && status != -ENOENT)
        hp_log_warn("controller: cannot write the journal lists under %s: %s (written again at "
                    "its next read)",
                    r->path, f->msg);
    if (r->scan_pending) { /* a read waited for this write: it writes the lists too */
        r->scan_pending = 0;
        hp__rescan_root(c, r);
    } else if (status >= 0 || status == -ENOENT) {
        sync_lists_after(c, r, f);
    }
    hp_fsop_free(f);
}

/* A read or write of r's lists (f) ended: written again when what they should say changed
 * meanwhile. */
static void sync_lists_after(struct hp_controller *c, struct root *r, const struct hp_fsop *f)
{
    if (!f->journal_found || r->shared || !hp__works_on_root(c, r, c->cfg->node_name))
        return;
    char *want = journals_list(c);
    int same = hp_journal_lists_equal(want, f->write_journals ? f->write_journals : f->known_journals);
    free(want);
    if (!same)
        write_lists(c, r);
}

static void write_lists(struct hp_controller *c, struct root *r)
{
    if (c->stopping || r->scan || r->lists || !r->journal_found || r->shared ||
        !hp__works_on_root(c, r, c->cfg->node_name))
        return; /* the read or write in flight looks again when it ends */
    struct hp_fsop *f = hp_fsop_new(HP_FSOP_ROOTS, r->path);
    f->write_roots = roots_list(c);
    f->write_journals = journals_list(c);
    r->lists = f;
    c->scans++;
    hp_hostpath_submit(c->hostpath, f, on_lists_written, r);
}

/* path's journal was seen (observed: by this process, else named by a journals file): a new
 * one is written into the journals file of every root that has a journal. */
static void note_journal(struct hp_controller *c, const char *path, int observed)
{
    struct root *seen = hp__root_named(c, path);
    if (seen && observed)
        seen->journal_found = 1;
    if (hp_store_get(c->seen_journals, path))
        return;
    free(hp_store_put(c->seen_journals, hp_xstrdup(path)));
    for (size_t i = 0; i < c->nroots; i++) /* its own too: it has a journal now */
        write_lists(c, c->roots[i]);
}

void hp__journal_seen(struct hp_controller *c, const char *path)
{
    note_journal(c, path, 1);
}

static void on_scanned(struct hp_fsop *f, int status, void *data)
{
    struct root *r = data;
    struct hp_controller *c = r->c;
    r->scan = NULL;
    if (root_request_ended(c, f))
        return;
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
    /* Only this node's own lists name its paths: not a shared path's (another node's list),
     * not a retired one's (kept for its records, its list as it was), and only the paths
     * configured now. */
    for (const char *p = f->known_journals; p && *p && !r->shared && !r->retired;
         p += strlen(p) + 1) {
        const struct root *named = hp__root_named(c, p);
        if (named && !named->retired)
            note_journal(c, p, 0);
    }
    int keep_index = root_fs_read(c, r, f, root_missing);
    if (f->journal_found && !keep_index)
        note_journal(c, r->path, 1);
    if (r->retired && r->listed && !f->journal_found) {
        if (!r->missing_said)
            hp_log_warn("controller: volume path %s is no longer configured, and its ownership "
                        "journal cannot be seen (is its disk mounted?): its volumes are "
                        "released once it is back. To forget it for good, remove its line from "
                        "the file .hostpath-provisioner/roots under each configured path",
                        r->path);
        r->missing_said = 1;
    } else if (root_missing && !r->journal_loaded && !r->fs_moved) {
        hp_log_info("controller: volume path %s does not exist yet; it is made with the first "
                    "volume",
                    r->path);
    }
    if (f->invalid_records)
        hp_log_error("controller: %zu ownership records under %s could not be read and are "
                     "ignored (their directories are never touched): %s",
                     f->invalid_records, r->path, f->msg);
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
    sync_lists_after(c, r, f);
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

/* What every root's journals file should say: the roots of roots_list whose journal was seen. */
static char *journals_list(const struct hp_controller *c)
{
    struct hp_buf b;
    hp_buf_init(&b, 0);
    for (size_t i = 0; i < c->nroots; i++) {
        const struct root *r = c->roots[i];
        if ((!r->retired || hp__root_holds(c, r)) && journal_expected(c, r)) {
            (void)hp_buf_append(&b, r->path, strlen(r->path));
            (void)hp_buf_append(&b, "", 1);
        }
    }
    (void)hp_buf_append(&b, "", 1);
    return hp_buf_steal(&b);
}

static void scan_root(struct hp_controller *c, struct root *r)
{
    if (r->lists) { /* one request at a time writes a root's lists: after this one */
        r->scan_pending = 1;
        return;
    }
    struct hp_fsop *f = hp_fsop_new(HP_FSOP_SCAN, r->path);
    f->prev_mount_id = r->fs_known ? r->mount_id : 0;
    r->made_at_scan = r->made;
    if (hp__works_on_root(c, r, c->cfg->node_name)) {
        f->write_roots = roots_list(c);
        if (!r->shared) /* every node reads a shared path: a list there would be one node's */
            f->write_journals = journals_list(c);
    }
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
