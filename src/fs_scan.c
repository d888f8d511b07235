/* fs_scan: SCAN and ROOTS, the journal of a root read as a whole. A room of the fsops module
 * (fsops_internal.h).
 *
 *  - SCAN loads every record, settles a takeover a crash cut short, reads (and updates) the
 *    roots file, probes the root's project quotas when asked (hard_limits), and counts the
 *    directories under the root that no record, live volume or parent marker accounts for; with clean_leftovers, it also removes what only a crash
 *    leaves (temporary record files, staging directories without a record, empty parents no
 *    volume needs).
 *  - ROOTS reads (and updates) the roots file and counts the record files.
 *
 * Any thread; blocking.
 */
#include "fsops_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef STATX_MNT_ID
#define STATX_MNT_ID 0x00001000U /* Linux 5.8 */
#endif

/* A growing array of strings: appends s (taken). */
static void push(char ***v, size_t *n, size_t *cap, char *s)
{
    if (*n == *cap) {
        *cap = *cap ? 2 * *cap : 64;
        *v = hp_xrealloc(*v, *cap * sizeof(**v));
    }
    (*v)[(*n)++] = s;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int in_sorted(char **v, size_t n, const char *s)
{
    return n && bsearch(&s, v, n, sizeof(*v), cmp_str) != NULL;
}

/* The roots file and the journals file of the journal jfd: read into *known and *seen (caller
 * frees); each replaced by its write_ list when that is given and differs. 0, or -errno with
 * the reason. */
static int roots_file(const char *root, int jfd, const char *write_roots, char **known,
                      const char *write_seen, char **seen, char *msg, size_t len)
{
    char err[HP_FSOP_MSG_LEN];
    int rc = hp_journal_roots_read(jfd, known, err, sizeof(err));

    if (rc == 0 && write_roots && !hp_journal_lists_equal(write_roots, *known))
        rc = hp_journal_roots_write(jfd, write_roots, err, sizeof(err));
    if (rc == 0)
        rc = hp_journal_seen_read(jfd, seen, err, sizeof(err));
    if (rc == 0 && write_seen && !hp_journal_lists_equal(write_seen, *seen))
        rc = hp_journal_seen_write(jfd, write_seen, err, sizeof(err));
    return rc < 0 ? hp__err(msg, len, rc, "%s: %s", root, err) : 0;
}

/* The root's journal, when it has one: opened and journal_found set; -1 when there is none
 * (nothing to read, and no failure); -2 after recording why it could not be opened. */
static int open_journal_if_any(struct hp_fsop *j, int rootfd)
{
    char msg[HP_FSOP_MSG_LEN];
    int jfd = hp__open_journal(j->root, rootfd, 0, msg, sizeof(msg));

    if (jfd >= 0)
        j->journal_found = 1;
    else if (jfd != -ENOENT)
        hp__fsop_fail(j, jfd, "%s", msg);
    return jfd >= 0 ? jfd : jfd == -ENOENT ? -1 : -2;
}

/* hp_journal_list, a failure recorded. */
static int list_journal(struct hp_fsop *j, int jfd, int clean_tmp,
                        void (*fn)(const char *name, int status, const struct hp_record *r,
                                   const char *reason, void *data),
                        void *data)
{
    char eb[128];
    int rc = hp_journal_list(jfd, clean_tmp, fn, data);

    if (rc < 0)
        hp__fsop_fail(j, rc, "read the ownership journal %s/%s: %s", j->root, HP_JOURNAL_DIR,
                      hp__errtext(-rc, eb, sizeof(eb)));
    return rc;
}

/* The roots file read into the request (and written when asked), a failure recorded. */
static void read_roots(struct hp_fsop *j, int jfd)
{
    char msg[HP_FSOP_MSG_LEN];
    int rc = roots_file(j->root, jfd, j->write_roots, &j->known_roots, j->write_journals,
                        &j->known_journals, msg, sizeof(msg));

    if (rc < 0)
        hp__fsop_fail(j, rc, "%s", msg);
}

/* ---- ROOTS ---- */

static void count_record(const char *name, int status, const struct hp_record *r,
                         const char *reason, void *data)
{
    (void)name;
    (void)status;
    (void)r;
    (void)reason;
    (*(size_t *)data)++; /* an unreadable one holds its directory too */
}

void hp__fsop_roots(struct hp_fsop *j)
{
    char msg[HP_FSOP_MSG_LEN];
    int rootfd = hp__open_root(j->root, 0, msg, sizeof(msg)), jfd;

    if (rootfd < 0) {
        hp__fsop_fail(j, rootfd, "%s", msg);
        return;
    }
    if ((jfd = open_journal_if_any(j, rootfd)) >= 0) {
        read_roots(j, jfd);
        (void)list_journal(j, jfd, 0, count_record, &j->record_files);
        (void)close(jfd);
    }
    (void)close(rootfd);
}

/* ---- SCAN ---- */

/* The records read, and the first unreadable one's reason. */
struct listed {
    const char *root;
    struct hp_record *records;
    size_t n, cap;
    size_t invalid;
    char reason[HP_FSOP_MSG_LEN];
};

static void on_listed(const char *name, int status, const struct hp_record *r,
                      const char *reason, void *data)
{
    struct listed *l = data;

    (void)name;
    if (status < 0) {
        if (!l->invalid++)
            (void)snprintf(l->reason, sizeof(l->reason), "%s", reason);
        return;
    }
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->records = hp_xrealloc(l->records, l->cap * sizeof(*l->records));
    }
    struct hp_record *dst = &l->records[l->n++];
    hp_record_copy(dst, r);
    free(dst->root);
    dst->root = hp_xstrdup(l->root);
}

/* A takeover cut short leaves the old record next to the new one: finish it. */
static void settle_takeovers(struct hp_record *records, size_t *n, int jfd)
{
    for (size_t i = 0; i < *n; i++) {
        const struct hp_record *r = &records[i];
        if (!r->adopted_from)
            continue;
        for (size_t k = 0; k < *n; k++) {
            struct hp_record *o = &records[k];
            if (k != i && strcmp(o->pv, r->adopted_from) == 0 && strcmp(o->path, r->path) == 0 &&
                o->state == HP_REC_RETAINED) {
                if (hp_journal_remove(jfd, o->pv, 0) == 0) {
                    hp_record_free(o);
                    *o = records[--*n];
                    if (i == *n)
                        i = k; /* the entry at i moved to k */
                    memset(&records[*n], 0, sizeof(*o));
                }
                break;
            }
        }
    }
}

/* Staging directories of records that are not "creating" any more, or of no record at all, are
 * leftovers of a crash: they are private and empty unless a crash came between the staging mkdir
 * and the rename, so rmdir (never a recursive removal) is enough. */
static void clean_staging(int jfd, char **pvs, size_t n)
{
    DIR *d = hp__dir_of_fd(hp__open_beneath(jfd, HP_STAGING_DIR, O_RDONLY | O_DIRECTORY, 1));
    struct dirent *de;

    if (!d)
        return;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.' || in_sorted(pvs, n, de->d_name))
            continue;
        (void)unlinkat(dirfd(d), de->d_name, AT_REMOVEDIR);
    }
    (void)closedir(d);
}

/* What the scan knows to be accounted for: the sorted paths of records and live volumes, and
 * the directories above them (and the parents we made). */
struct known {
    char **paths;
    size_t np;
    char **anc;
    size_t na, cap_anc;
    size_t n_rec_anc; /* how many of anc come from records and live volumes (sorted) */
};

/* Adds the ancestors of p ("a" and "a/b" of "a/b/c"). */
static void add_ancestors(struct known *k, const char *p)
{
    for (const char *s = strchr(p, '/'); s; s = strchr(s + 1, '/'))
        push(&k->anc, &k->na, &k->cap_anc, hp_xstrndup(p, (size_t)(s - p)));
}

static int marker_needed(const char *rel, void *data)
{
    const struct known *k = data;
    return in_sorted(k->anc, k->n_rec_anc, rel) || in_sorted(k->paths, k->np, rel);
}

static void marker_found(const char *rel, void *data)
{
    struct known *k = data;
    push(&k->anc, &k->na, &k->cap_anc, hp_xstrdup(rel));
}

/* Counts directories below dirfd (at rel prefix) that nothing known accounts for. */
static void count_unrecorded(struct hp_fsop *j, int dirfd, const char *prefix,
                             const struct known *k, int depth)
{
    DIR *d = hp__dir_of_fd(dup(dirfd));
    struct dirent *de;

    if (!d)
        return;
    while ((de = readdir(d)) != NULL) {
        struct stat st;
        if (hp__is_dot_or_dotdot(de->d_name))
            continue;
        if (!*prefix && strcmp(de->d_name, HP_JOURNAL_DIR) == 0)
            continue;
        if (de->d_type != DT_DIR &&
            (de->d_type != DT_UNKNOWN ||
             fstatat(dirfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode)))
            continue;
        char *rel = *prefix ? hp_xasprintf("%s/%s", prefix, de->d_name) : hp_xstrdup(de->d_name);
        if (in_sorted(k->paths, k->np, rel)) {
            /* a recorded directory */
        } else if (in_sorted(k->anc, k->na, rel) && depth < HP_MAX_DEPTH) {
            int sub = hp__open_beneath(dirfd, de->d_name, O_RDONLY | O_DIRECTORY, 1);
            if (sub >= 0) {
                count_unrecorded(j, sub, rel, k, depth + 1);
                (void)close(sub);
            }
        } else {
            j->unrecorded++;
            if (j->n_unrecorded_names < HP_FSOP_MAX_UNRECORDED_NAMES) {
                j->unrecorded_names[j->n_unrecorded_names++] = rel;
                rel = NULL;
            }
        }
        free(rel);
    }
    (void)closedir(d);
}

/* Loads the records (settling takeovers) and the roots file into the request. */
static void load_journal(struct hp_fsop *j, int jfd)
{
    struct listed l = {.root = j->root};
    int rc = list_journal(j, jfd, j->clean_leftovers, on_listed, &l);

    j->records = l.records;
    j->nrecords = l.n;
    j->invalid_records = l.invalid;
    if (l.invalid && !j->status)
        (void)snprintf(j->msg, sizeof(j->msg), "%s", l.reason); /* not a failure: a note */
    if (rc == 0)
        settle_takeovers(j->records, &j->nrecords, jfd);
    read_roots(j, jfd);
}

/* Cuts the last component off p ("/a/b" -> "/a", "/a" -> "/"); 0 when there is no parent
 * to go to ("/", or a relative path's first component). */
static int cut_last(char *p)
{
    char *slash = strrchr(p, '/');
    if (!slash || (slash == p && p[1] == '\0'))
        return 0;
    if (slash == p)
        p[1] = '\0';
    else
        *slash = '\0';
    return 1;
}

uint64_t hp__mount_id_of(const char *path)
{
    char p[PATH_MAX];
    struct statx stx;
    size_t len = strlen(path);
    if (len == 0 || len >= sizeof(p))
        return 0;
    memcpy(p, path, len + 1);
    while (len > 1 && p[len - 1] == '/')
        p[--len] = '\0';
    for (;;) {
        if (statx(AT_FDCWD, p, 0, STATX_MNT_ID, &stx) == 0)
            return (stx.stx_mask & STATX_MNT_ID) ? (uint64_t)stx.stx_mnt_id : 0;
        if (errno != ENOENT || !cut_last(p))
            return 0;
    }
}

/* 1 when mount id is in this process's mount table, 0 when not, -1 when it cannot be read. */
static int mount_listed(uint64_t id)
{
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (!f)
        return -1;
    char line[8192];
    int found = 0;
    while (!found && fgets(line, sizeof(line), f)) {
        char *end;
        unsigned long long v = strtoull(line, &end, 10);
        found = end != line && *end == ' ' && v == id;
        while (!strchr(line, '\n') && fgets(line, sizeof(line), f)) /* the rest of a long line */
            ;
    }
    int bad = ferror(f);
    (void)fclose(f);
    return found ? 1 : bad ? -1 : 0;
}

void hp__fsop_scan(struct hp_fsop *j)
{
    char msg[HP_FSOP_MSG_LEN];
    struct known k = {0};
    char **pvs;
    j->mount_id = hp__mount_id_of(j->root);
    j->prev_mount_gone = j->prev_mount_id && j->mount_id != j->prev_mount_id &&
                         mount_listed(j->prev_mount_id) == 0;
    int rootfd = hp__open_root_ident(j->root, 0, &j->fs, &j->stats, msg, sizeof(msg)), jfd;

    if (rootfd < 0) {
        hp__fsop_fail(j, rootfd, "%s", msg);
        return;
    }
    if (j->hard_limits) {
        /* Whether the root can enforce hard limits now (a disk remounted without prjquota
         * cannot): the loop places no new volume there until it can. */
        const struct hp_quota_fs *fs;
        j->quota_status = hp__quota_fs(j, rootfd, &fs, msg, sizeof(msg));
        if (j->quota_status < 0)
            j->quota_msg = hp_xstrdup(msg);
    }
    if ((jfd = open_journal_if_any(j, rootfd)) >= 0)
        load_journal(j, jfd);
    /* Sorted recorded paths (the archived name for archived records) and their ancestors. */
    k.paths = hp_xcalloc(j->nrecords + j->nlive + 1, sizeof(*k.paths));
    pvs = hp_xcalloc(j->nrecords + 1, sizeof(*pvs));
    for (size_t i = 0; i < j->nrecords; i++) {
        const struct hp_record *r = &j->records[i];
        char *p = r->state == HP_REC_ARCHIVED ? r->archived_as : r->path;
        pvs[i] = r->state == HP_REC_CREATING ? r->pv : (char *)"";
        k.paths[k.np++] = p;
        add_ancestors(&k, p);
    }
    for (size_t i = 0; i < j->nlive; i++) {
        k.paths[k.np++] = j->live[i];
        add_ancestors(&k, j->live[i]);
    }
    qsort(k.paths, k.np, sizeof(*k.paths), cmp_str);
    qsort(pvs, j->nrecords, sizeof(*pvs), cmp_str);
    if (k.na)
        qsort(k.anc, k.na, sizeof(*k.anc), cmp_str);
    if (jfd >= 0 && j->clean_leftovers)
        clean_staging(jfd, pvs, j->nrecords);
    if (jfd >= 0) {
        /* Parents we made are ours too: walked into, not counted; an empty one that no volume
         * needs any more (a crash between its volume's removal and its own) goes at start. */
        k.n_rec_anc = k.na;
        hp__parents_scan(rootfd, jfd, j->clean_leftovers, marker_needed, marker_found, &k);
        if (k.na != k.n_rec_anc)
            qsort(k.anc, k.na, sizeof(*k.anc), cmp_str);
    }
    if (!j->status)
        count_unrecorded(j, rootfd, "", &k, 0);
    for (size_t i = 0; i < k.na; i++)
        free(k.anc[i]);
    free(k.anc);
    free(k.paths);
    free(pvs);
    if (jfd >= 0)
        (void)close(jfd);
    (void)close(rootfd);
}
