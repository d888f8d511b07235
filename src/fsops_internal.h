/* fsops_internal: what the rooms of the fsops module share -- private to src/fsops.c and
 * src/fs_*.c, as libuv's src/unix/internal.h is to its handle files; nothing else includes it
 * (include/hostpath/fsops.h is the module's public surface).
 *
 * fsops is one module in rooms, one layer each, their dependencies running one way (a room
 * calls only rooms above it in this list):
 *
 *   fs_beneath.c  reaching a path below a root one component at a time; the root, the journal
 *                 and a path's parent opened; which filesystem a descriptor is on
 *   fs_others.c   other PersistentVolumes' paths compared with ours on disk (pathid.h)
 *   fs_parents.c  parent directories a pathPattern made: their markers, made and removed
 *   fs_remove.c   removing a volume's tree (never following a symlink or crossing a mount)
 *   fs_quota.c    project quotas of volume directories: the root's filesystem probed, IDs
 *                 handed out, directories tagged and limited, limits cleared
 *   fs_usage.c    USAGE: a volume's size, measured
 *   fs_scan.c     SCAN and ROOTS: the root's journal read as a whole
 *   fsops.c       the request (hp_fsop_new/free/run) and the kinds that make, change and take
 *                 away a volume: PROVISION, CLEANUP, RELEASE, FORGET, MIGRATE, LIMIT
 *
 * Errors (CONTRIBUTING.md): a helper returns 0 or a negative errno and writes its reason into
 * a buffer of its caller's (msg, len; NULL asks for no reason). Only an operation's top level
 * (the function hp_fsop_run calls for its kind) records a failure into the request, with
 * hp__fsop_fail / hp__fsop_failed.
 *
 * Any thread; blocking.
 */
#ifndef HOSTPATH_FSOPS_INTERNAL_H
#define HOSTPATH_FSOPS_INTERNAL_H

#include <dirent.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>

#include "hostpath/buf.h"
#include "hostpath/fsops.h"

#define HP_MAX_DEPTH 256 /* directory levels below a volume root that the walks descend */
#define HP_STAGING_DIR "staging" /* in the journal: volume directories being made */

/* ---- failures ---------------------------------------------------------------------------- */

/* Counts a failure into *n and keeps the first one: its status and its message. */
static inline void hp__failv(int *status, unsigned *n, char *msg, size_t len, int st,
                             const char *fmt, va_list ap)
{
    (*n)++;
    if (*status)
        return;
    *status = st;
    if (msg && len)
        (void)vsnprintf(msg, len, fmt, ap);
}

/* Records a failure into the request (the first one is the one reported; all are counted).
 * Only an operation's top level calls it. */
static inline void hp__fsop_fail(struct hp_fsop *j, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline void hp__fsop_fail(struct hp_fsop *j, int status, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    hp__failv(&j->status, &j->nerrors, j->msg, sizeof(j->msg), status, fmt, ap);
    va_end(ap);
}

/* Records what a helper reported: n failures, the first with status and msg. */
static inline void hp__fsop_failed(struct hp_fsop *j, int status, unsigned n, const char *msg)
{
    hp__fsop_fail(j, status, "%s", msg);
    j->nerrors += n ? n - 1 : 0;
}

/* hp_seterr, then status: `return hp__err(msg, len, -EEXIST, "...", ...);` */
static inline int hp__err(char *msg, size_t len, int status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static inline int hp__err(char *msg, size_t len, int status, const char *fmt, ...)
{
    va_list ap;

    if (msg && len) {
        va_start(ap, fmt);
        (void)vsnprintf(msg, len, fmt, ap);
        va_end(ap);
    }
    return status;
}

/* strerror, thread-safe. */
static inline const char *hp__errtext(int err, char *buf, size_t len)
{
    return strerror_r(err, buf, len); /* GNU variant: returns the text */
}

/* "<what> <root>/<first n bytes of rel>: <strerror(err)>" (no "/rel" when n is 0) into msg;
 * returns -err. */
static inline int hp__fail_errno(char *msg, size_t len, const char *root, int err,
                                 const char *what, const char *rel, size_t n)
{
    char eb[128];

    if (n)
        return hp__err(msg, len, -err, "%s %s/%.*s: %s", what, root, (int)n, rel,
                       hp__errtext(err, eb, sizeof(eb)));
    return hp__err(msg, len, -err, "%s %s: %s", what, root, hp__errtext(err, eb, sizeof(eb)));
}

/* ---- fs_beneath.c ------------------------------------------------------------------------- */

/* Which filesystem and which mount a descriptor is on. A bind mount of a directory of the same
 * filesystem has the same st_dev, so the mount id (statx, Linux 5.8+) is compared too. */
struct hp__fs_id {
    dev_t dev;
    uint64_t mnt_id;
    int has_mnt_id;
};

/* Opens name (one component, no '/') below dirfd without following a symlink (openat2
 * RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS where the kernel has it, else openat O_NOFOLLOW). no_xdev
 * also refuses to step onto another mount (EXDEV) with openat2; callers compare fs ids for the
 * fallback. An fd or -errno. */
int hp__open_beneath(int dirfd, const char *name, int flags, int no_xdev);
/* fdopendir that owns fd: the stream, or NULL with fd closed (also for fd < 0); errno kept. */
DIR *hp__dir_of_fd(int fd);
int hp__is_dot_or_dotdot(const char *name);
int hp__fs_id_of(int fd, struct hp__fs_id *id);
int hp__same_fs(const struct hp__fs_id *a, const struct hp__fs_id *b);
/* Copies the n-byte component at s into name (cut at NAME_MAX: validated before). */
void hp__comp_name(char name[NAME_MAX + 1], const char *s, size_t n);
/* rename(2) that never replaces an existing target; -errno. */
int hp__rename_noreplace(int fromfd, const char *from, int tofd, const char *to);
/* What stands at leaf below parentfd: 0 and its inode when it is a directory (never following a
 * symlink), -ENOENT when nothing, -ELOOP for a symlink, -ENOTDIR for anything else. */
int hp__dir_inode(int parentfd, const char *leaf, uint64_t *ino);
/* A small file of the journal opened for reading: never blocks (a FIFO planted there), and
 * anything but a regular file is refused. The descriptor, or -1. */
int hp__open_journal_file(int dirfd, const char *name);

/* Why name below dirfd could not be opened as a directory (err, negative): the refusals
 * (symlink, non-directory) get their own status and words; anything else is err. upto is the
 * length of rel up to and including name, verb what was done instead ("refusing"). Returns the
 * status. */
int hp__explain_open_failure(const char *root, int dirfd, const char *name, int err,
                             const char *rel, size_t upto, const char *verb, char *msg,
                             size_t len);
/* An O_DIRECTORY fd of the absolute root (symlinks in it are the administrator's and are
 * followed), made first (with missing parents, 0755) when create is set and it is missing. A
 * missing root is an error too: whoever asked needs it. */
int hp__open_root(const char *root, int create, char *msg, size_t len);
/* The root's identity and size (for the records and placement; statvfs, and whether it is on
 * the filesystem of "/"). 0 or -errno (no message). */
int hp__root_ident(int rootfd, struct hp_fs_ident *fs, struct hp_fs_stats *stats);
/* hp__open_root then hp__root_ident: the root's fd, or -errno with the reason. */
int hp__open_root_ident(const char *root, int create, struct hp_fs_ident *fs,
                        struct hp_fs_stats *stats, char *msg, size_t len);
/* The mount ID (statx STATX_MNT_ID) of the mount that holds path, or its nearest existing
 * ancestor when it is missing; 0 when the kernel does not say. */
uint64_t hp__mount_id_of(const char *path);
/* The root's journal (hp_journal_open), made when create is set: an fd, or -errno with the
 * reason (-ENOENT: there is none). */
int hp__open_journal(const char *root, int rootfd, int create, char *msg, size_t len);
/* Walks rel's parent components from rootfd and returns an fd of the directory that holds its
 * leaf (the leaf's name in leaf), or -errno with the reason (-ENOENT: a parent is missing).
 * With make set, missing parents are made (0755): the caller marked them first
 * (hp__mark_missing_parents). */
int hp__open_parent(const char *root, int rootfd, const char *rel, int make,
                    char leaf[NAME_MAX + 1], char *msg, size_t len);

/* ---- fs_others.c -------------------------------------------------------------------------- */

/* Whether one of the PersistentVolumes others[0..n) (fsops.h, others) holds the directory rel
 * of root -- is it, lies inside it, or holds it -- compared by what the paths are on disk.
 * -EBUSY with the reason naming it, 0 when none does, another -errno when the root itself
 * cannot be told. doing says what was about to happen ("making"), for the reason. */
int hp__held_by_other(const char *root, const struct hp_fsop_other *others, size_t n,
                      const char *rel, const char *doing, char *msg, size_t len);

/* ---- fs_parents.c ------------------------------------------------------------------------- */

/* Held while parent directories are made and a volume is renamed into them, and while empty
 * ones are removed: one worker never removes a parent another is about to use. */
void hp__parents_lock(void);
void hp__parents_unlock(void);
/* The ancestors of rel that do not exist yet, as a packed list ("a\0a/b\0\0") in *out (caller
 * frees), or NULL when all exist. 0, or -errno with the reason when a component exists but is
 * not a directory (or is a symlink). */
int hp__missing_parents(const char *root, int rootfd, const char *rel, char **out, char *msg,
                        size_t len);
/* Marks every path of the packed list as a parent we made (one fsync). abs names the volume
 * in the reason. 0 or -errno with the reason. */
int hp__mark_parents(const char *root, const char *abs, int jfd, const char *list, char *msg,
                     size_t len);
/* Marks the parents of rel that are missing now (made again next; parents lock held). */
int hp__mark_missing_parents(const char *root, const char *abs, int rootfd, int jfd,
                             const char *rel, char *msg, size_t len);
/* Removes the parents of rel that we made and that are empty now, deepest first, stopping at
 * the first that is not ours or still holds something. Never the root. Takes the lock. */
void hp__remove_empty_parents(int rootfd, int jfd, const char *rel);
/* Calls found(rel) for every parent directory marked as ours. With clean set (no operation
 * can be running), one that needed(rel) says no volume needs is removed when it is empty (its
 * marker with it, or alone when the directory is gone) and is not reported. */
void hp__parents_scan(int rootfd, int jfd, int clean,
                      int (*needed)(const char *rel, void *data),
                      void (*found)(const char *rel, void *data), void *data);

/* ---- fs_remove.c -------------------------------------------------------------------------- */

/* Removes the directory leaf below parentfd (the volume rel of root, abs in messages) with
 * everything in it, never following a symlink nor crossing a mount; what it cannot remove is
 * left and the removal goes on. 0 (also when leaf is gone), or the first failure's -errno with
 * its reason, and in *nfailed how many there were. */
int hp__remove_tree(const char *root, int parentfd, const char *leaf, const char *rel,
                    const char *abs, unsigned *nfailed, char *msg, size_t len);

/* ---- fs_quota.c --------------------------------------------------------------------------- */

/* The first project ID handed out on a filesystem with no hint above it: IDs below are left to
 * the administrator's own projects. */
#define HP_QUOTA_ID_FIRST 1000000u

/* The request's root filesystem as probed (quota.h): j->quota_fs when it was given and rootfd
 * is on it, else probed now and kept in j->quota_fs. 0 with *fs borrowed from j, or -errno with
 * the probe's reason (which says what to mount with). */
int hp__quota_fs(struct hp_fsop *j, int rootfd, const struct hp_quota_fs **fs, char *msg,
                 size_t len);
/* Hands out a project ID on fs (fd: any descriptor on it): the lowest one >= hint and
 * >= HP_QUOTA_ID_FIRST that this process never handed out before on that filesystem and that
 * nothing carries and no limit is set for (hp_quota_id_in_use). Process-wide (a mutex): two
 * workers never get one ID. 0 with *id, or -errno with the reason (-ENOSPC: none free). */
int hp__quota_alloc(const struct hp_quota_fs *fs, int fd, uint32_t hint, uint32_t *id,
                    char *msg, size_t len);
/* Whether id may be given to the directory dirfd: 1 when it carries it already or nothing else
 * does (no usage, no limit), 0 when something else does, -errno with the reason. */
int hp__quota_id_free_for(const struct hp_quota_fs *fs, int dirfd, uint32_t id, char *msg,
                          size_t len);
/* Tags the directory dirfd with id (and FS_XFLAG_PROJINHERIT), unless it carries both already.
 * 0 or -errno with the reason. */
int hp__quota_tag(int dirfd, uint32_t id, char *msg, size_t len);
/* Sets (bytes > 0) or clears (bytes 0) project id's hard block limit on fs; fd is any
 * descriptor on it. 0 or -errno with the reason. */
int hp__quota_limit(const struct hp_quota_fs *fs, int fd, uint32_t id, uint64_t bytes,
                    char *msg, size_t len);

/* ---- the kinds in their own rooms (hp_fsop_run calls them) -------------------------------- */

void hp__fsop_usage(struct hp_fsop *j); /* fs_usage.c */
void hp__fsop_scan(struct hp_fsop *j);  /* fs_scan.c */
void hp__fsop_roots(struct hp_fsop *j); /* fs_scan.c */

#endif
