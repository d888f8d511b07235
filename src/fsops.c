/* fsops: the filesystem steps of provisioning and deletion, synchronous (see fsops.h).
 *
 * Any thread; blocking. A request touches only itself and the filesystem.
 *
 * Safety: the root (--pv-dir) is opened by path (it may be an admin's symlink, and its parents
 * are the admin's business). Everything below it is reached one component at a time from a
 * directory fd with openat(O_NOFOLLOW) -- openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|
 * RESOLVE_NO_MAGICLINKS) when the kernel has it -- so a symlink planted anywhere on the way is
 * refused, never followed. Removal deletes with unlinkat relative to directory fds it holds,
 * never follows a symlink (a symlink inside a volume is the volume's content: it is unlinked, its
 * target untouched), and never descends into another mount (st_dev and mount id compared, plus
 * RESOLVE_NO_XDEV where available), reporting -EXDEV for what it had to leave.
 *
 * Ownership: nothing is removed, renamed, chmod'ed or chown'ed unless the journal proves this
 * provisioner made it for that PV (record names the PV and the path, same filesystem, same
 * inode). A new volume directory is made in the journal's staging area and renamed into place
 * with RENAME_NOREPLACE, so a directory that already exists is never taken over.
 */
#include "hostpath/fsops.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#if defined(__has_include)
#if __has_include(<linux/openat2.h>)
#include <linux/openat2.h>
#define HP_HAVE_OPENAT2_H 1
#endif
#endif
#ifndef HP_HAVE_OPENAT2_H
struct open_how {
    uint64_t flags;
    uint64_t mode;
    uint64_t resolve;
};
#define RESOLVE_NO_XDEV 0x01
#define RESOLVE_NO_MAGICLINKS 0x02
#define RESOLVE_NO_SYMLINKS 0x04
#define RESOLVE_BENEATH 0x08
#endif
#if !defined(SYS_openat2) && defined(__x86_64__)
#define SYS_openat2 437
#endif

#include "hostpath/buf.h"
#include "hostpath/common.h"
#include "hostpath/crashpoint.h"
#include "hostpath/pathid.h"
#include "hostpath/volpath.h"

#define HP_REL_MAX 4096
#define HP_MAX_DEPTH 256 /* directory levels below a volume root that the scans descend */
/* Removal keeps a directory stream open for each of the first HP_OPEN_DEPTH levels; deeper ones
 * are walked with two descriptors and 16 bytes per level (deep_empty): no depth limit. */
#define HP_OPEN_DEPTH 128
#define HP_DEEP_MAX_FAILURES 64 /* entries left in place before a deep walk gives up */
#define HP_MAX_PASSES 8  /* re-reads of one directory while entries keep disappearing */
#define STAGING_DIR "staging"
#define PARENTS_DIR "parents"

/* ---- results ------------------------------------------------------------------------------ */

static const char *errtext(int err, char *buf, size_t len)
{
    return strerror_r(err, buf, len); /* GNU variant: thread-safe, returns the text */
}

/* Sets the result unless one is already recorded: the first failure is the one reported. */
static void op_fail(struct hp_fsop *j, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void op_fail(struct hp_fsop *j, int status, const char *fmt, ...)
{
    va_list ap;

    j->nerrors++;
    if (j->status)
        return;
    j->status = status;
    va_start(ap, fmt);
    (void)vsnprintf(j->msg, sizeof(j->msg), fmt, ap);
    va_end(ap);
}

/* Fails with "<what> <root>/<first n bytes of rel>: <strerror>". */
static void fail_errno(struct hp_fsop *j, int err, const char *what, const char *rel, size_t n)
{
    char eb[128];

    if (n)
        op_fail(j, -err, "%s %s/%.*s: %s", what, j->root, (int)n, rel,
                errtext(err, eb, sizeof(eb)));
    else
        op_fail(j, -err, "%s %s: %s", what, j->root, errtext(err, eb, sizeof(eb)));
}

/* ---- resolving ---------------------------------------------------------------------------- */

/* 1 while openat2 is usable; cleared for good the first time the kernel (or a seccomp filter)
 * says it does not know the call. */
static atomic_int openat2_usable = 1;

/* Opens name (one component, no '/') below dirfd without following a symlink. no_xdev also
 * refuses to step onto another mount (EXDEV) when openat2 is available; callers compare
 * fs_ids for the fallback. Returns an fd or -errno. */
static int open_beneath(int dirfd, const char *name, int flags, int no_xdev)
{
    int fd;

#ifdef SYS_openat2
    if (atomic_load_explicit(&openat2_usable, memory_order_relaxed)) {
        struct open_how how;
        long r;

        memset(&how, 0, sizeof(how));
        how.flags = (uint64_t)(flags | O_NOFOLLOW | O_CLOEXEC);
        how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
        if (no_xdev)
            how.resolve |= RESOLVE_NO_XDEV;
        r = syscall(SYS_openat2, dirfd, name, &how, sizeof(how));
        if (r >= 0)
            return (int)r;
        if (errno != ENOSYS && errno != EPERM && errno != E2BIG)
            return -errno;
        atomic_store_explicit(&openat2_usable, 0, memory_order_relaxed);
    }
#else
    (void)no_xdev;
#endif
    fd = openat(dirfd, name, flags | O_NOFOLLOW | O_CLOEXEC);
    return fd >= 0 ? fd : -errno;
}

/* fdopendir that owns fd: the stream, or NULL with fd closed (also for fd < 0); errno is kept. */
static DIR *dir_of_fd(int fd)
{
    DIR *d;
    int e;

    if (fd < 0) {
        errno = EBADF;
        return NULL;
    }
    if ((d = fdopendir(fd)) != NULL)
        return d;
    e = errno;
    (void)close(fd);
    errno = e;
    return NULL;
}

static int is_dot_or_dotdot(const char *name)
{
    return name[0] == '.' && (name[1] == '\0' || (name[1] == '.' && name[2] == '\0'));
}

/* Which filesystem and which mount an fd is on. A bind mount of a directory of the same
 * filesystem has the same st_dev, so the mount id (statx, Linux 5.8+) is compared too. */
struct fs_id {
    dev_t dev;
    uint64_t mnt_id;
    int has_mnt_id;
};

static int fs_id_of(int fd, struct fs_id *id)
{
    struct statx stx;
    struct stat st;

    memset(id, 0, sizeof(*id));
    if (statx(fd, "", AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW, STATX_TYPE | STATX_MNT_ID, &stx) == 0) {
        id->dev = makedev(stx.stx_dev_major, stx.stx_dev_minor);
        if (stx.stx_mask & STATX_MNT_ID) {
            id->mnt_id = stx.stx_mnt_id;
            id->has_mnt_id = 1;
        }
        return 0;
    }
    if (fstat(fd, &st) != 0)
        return -errno;
    id->dev = st.st_dev;
    return 0;
}

static int same_fs(const struct fs_id *a, const struct fs_id *b)
{
    if (a->dev != b->dev)
        return 0;
    return !(a->has_mnt_id && b->has_mnt_id) || a->mnt_id == b->mnt_id;
}

/* The root's device and filesystem id, for the records. */
static int ident_of(int fd, struct hp_fs_ident *id)
{
    struct stat st;
    struct statfs sf;

    if (fstat(fd, &st) != 0)
        return -errno;
    id->dev = (uint64_t)st.st_dev;
    id->fsid = 0;
    if (fstatfs(fd, &sf) == 0) {
        uint32_t a, b;
        memcpy(&a, &sf.f_fsid, sizeof(a));
        memcpy(&b, (const char *)&sf.f_fsid + sizeof(a), sizeof(b));
        id->fsid = ((uint64_t)a << 32) | b;
    }
    return 0;
}

/* The root's identity and size, for the records and for placement: j->fs, and j->stats from
 * fstatvfs (and whether the root is on the filesystem of "/"). */
static int root_ident(struct hp_fsop *j, int rootfd)
{
    struct statvfs sv;
    struct stat st_root, st_slash;
    int rc = ident_of(rootfd, &j->fs);
    if (rc < 0)
        return rc;
    if (fstatvfs(rootfd, &sv) == 0) {
        j->stats.ok = 1;
        j->stats.size = (uint64_t)sv.f_blocks * sv.f_frsize;
        j->stats.free = (uint64_t)sv.f_bavail * sv.f_frsize;
        j->stats.files = (uint64_t)sv.f_files;
        j->stats.files_free = (uint64_t)sv.f_favail;
    }
    j->stats.on_rootfs = fstat(rootfd, &st_root) == 0 && stat("/", &st_slash) == 0 &&
                         st_root.st_dev == st_slash.st_dev;
    return 0;
}

/* Copies the n-byte component at s into name (n <= NAME_MAX: validated before). */
static void comp_name(char name[NAME_MAX + 1], const char *s, size_t n)
{
    if (n > NAME_MAX)
        n = NAME_MAX;
    memcpy(name, s, n);
    name[n] = '\0';
}

/* Explains why name below dirfd could not be opened as a directory: the refusals (symlink,
 * non-directory) get their own status and words; anything else is the errno. upto is the length
 * of rel up to and including name, for the message. */
static void explain_open_failure(struct hp_fsop *j, int dirfd, const char *name, int err,
                                 const char *rel, size_t upto, const char *verb)
{
    struct stat st;

    if ((err == -ELOOP || err == -ENOTDIR || err == -EXDEV) &&
        fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
        if (S_ISLNK(st.st_mode)) {
            op_fail(j, -ELOOP, "path component %s/%.*s is a symlink; %s", j->root, (int)upto, rel,
                    verb);
            return;
        }
        if (!S_ISDIR(st.st_mode)) {
            op_fail(j, -ENOTDIR, "path component %s/%.*s is not a directory; %s", j->root,
                    (int)upto, rel, verb);
            return;
        }
    }
    fail_errno(j, -err, "open", rel, upto);
}

/* mkdir -p of the absolute root with mode 0755 (umask does not apply: the directories we make
 * are chmod'ed). Symlinks in the root and its parents are the admin's and are followed. */
static int make_root(struct hp_fsop *j)
{
    char path[HP_REL_MAX + 1];
    size_t len = strlen(j->root), i;
    char eb[128];

    if (len >= sizeof(path)) {
        op_fail(j, -ENAMETOOLONG, "mkdir %s: %s", j->root, errtext(ENAMETOOLONG, eb, sizeof(eb)));
        return -ENAMETOOLONG;
    }
    memcpy(path, j->root, len + 1);
    for (i = 1; i <= len; i++) {
        if (path[i] != '/' && path[i] != '\0')
            continue;
        if (path[i - 1] == '/')
            continue;
        path[i] = '\0';
        if (mkdir(path, 0755) == 0) {
            if (chmod(path, 0755) != 0) {
                int e = errno;
                op_fail(j, -e, "chmod %s: %s", path, errtext(e, eb, sizeof(eb)));
                return -e;
            }
        } else if (errno != EEXIST) {
            int e = errno;
            op_fail(j, -e, "mkdir %s: %s", path, errtext(e, eb, sizeof(eb)));
            return -e;
        }
        if (i < len)
            path[i] = '/';
    }
    return 0;
}

/* An O_DIRECTORY fd of the root, creating it when create is set; -errno (and the message)
 * else. A missing root without create is reported too: whoever asked needs the root. */
static int open_root(struct hp_fsop *j, int create)
{
    int fd = open(j->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

    if (fd < 0 && errno == ENOENT && create) {
        if (make_root(j) != 0)
            return j->status;
        fd = open(j->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    }
    if (fd < 0) {
        int e = errno;
        if (e == ENOENT)
            op_fail(j, -e, "the volume root %s does not exist (is its disk mounted?)", j->root);
        else
            fail_errno(j, e, "open", "", 0);
        return -e;
    }
    return fd;
}

static int open_journal(struct hp_fsop *j, int rootfd, int create)
{
    char eb[128];
    int jfd = hp_journal_open(rootfd, create);
    if (jfd == -ENOENT && !create)
        op_fail(j, -ENOENT,
                "no ownership journal %s/%s (is the disk that holds the volumes mounted?)",
                j->root, HP_JOURNAL_DIR);
    else if (jfd < 0)
        op_fail(j, jfd, "open the ownership journal %s/%s: %s", j->root, HP_JOURNAL_DIR,
                errtext(-jfd, eb, sizeof(eb)));
    return jfd;
}

/* Walks rel's parent components from rootfd and returns an fd of the parent directory of the
 * leaf (the leaf's name in leaf), or -errno after op_fail. With make set, missing parents are
 * created (0755); each one created is expected to be listed in planned (they were recorded
 * before). */
static int open_parent(struct hp_fsop *j, int rootfd, const char *rel, int make,
                       char leaf[NAME_MAX + 1])
{
    const char *comp = rel;
    char name[NAME_MAX + 1];
    int dirfd = dup(rootfd);

    if (dirfd < 0) {
        fail_errno(j, errno, "dup", "", 0);
        return -errno;
    }
    for (;;) {
        const char *slash = strchr(comp, '/');
        size_t n = slash ? (size_t)(slash - comp) : strlen(comp);
        size_t upto = (size_t)(comp - rel) + n;
        int fd, created = 0;

        if (!slash) {
            comp_name(leaf, comp, n);
            return dirfd;
        }
        comp_name(name, comp, n);
        if (make) {
            if (mkdirat(dirfd, name, 0755) == 0)
                created = 1;
            else if (errno != EEXIST) {
                fail_errno(j, errno, "mkdir", rel, upto);
                (void)close(dirfd);
                return j->status;
            }
        }
        fd = open_beneath(dirfd, name, O_RDONLY | O_DIRECTORY, 0);
        if (fd < 0) {
            if (fd == -ENOENT && !make)
                op_fail(j, -ENOENT, "%s/%.*s does not exist", j->root, (int)upto, rel);
            else
                explain_open_failure(j, dirfd, name, fd, rel, upto, "refusing");
            (void)close(dirfd);
            return j->status ? j->status : fd;
        }
        (void)close(dirfd);
        dirfd = fd;
        if (created && fchmod(fd, 0755) != 0) {
            fail_errno(j, errno, "chmod", rel, upto);
            (void)close(dirfd);
            return j->status;
        }
        comp = slash + 1;
    }
}

/* The ancestors of rel that do not exist yet, as a packed list ("a\0a/b\0\0"), or NULL when all
 * exist. A component that exists but is not a directory (or is a symlink) fails the request. */
static int missing_parents(struct hp_fsop *j, int rootfd, const char *rel, char **out)
{
    struct hp_buf b;
    const char *comp = rel;
    char name[NAME_MAX + 1];
    int dirfd = dup(rootfd), missing = 0;

    *out = NULL;
    if (dirfd < 0) {
        fail_errno(j, errno, "dup", "", 0);
        return -errno;
    }
    hp_buf_init(&b, 0);
    for (;;) {
        const char *slash = strchr(comp, '/');
        size_t n = slash ? (size_t)(slash - comp) : strlen(comp);
        size_t upto = (size_t)(comp - rel) + n;

        if (!slash)
            break;
        if (!missing) {
            comp_name(name, comp, n);
            int fd = open_beneath(dirfd, name, O_RDONLY | O_DIRECTORY, 0);
            if (fd == -ENOENT) {
                missing = 1;
            } else if (fd < 0) {
                explain_open_failure(j, dirfd, name, fd, rel, upto, "refusing");
                break;
            } else {
                (void)close(dirfd);
                dirfd = fd;
            }
        }
        if (missing) {
            (void)hp_buf_append(&b, rel, upto);
            (void)hp_buf_append(&b, "", 1);
        }
        comp = slash + 1;
    }
    (void)close(dirfd);
    if (j->status) {
        hp_buf_free(&b);
        return j->status;
    }
    if (b.len) {
        (void)hp_buf_append(&b, "", 1);
        *out = hp_buf_steal(&b);
    }
    hp_buf_free(&b);
    return 0;
}

/* ---- parent markers ----
 * A parent directory a pathPattern made ("ns" of "ns/vol") is ours: a marker file in
 * parents/ (named by a hash of the path, holding the path) says so. It is written before the
 * mkdir, and removed after the rmdir that takes the directory away once no volume is left in
 * it. Volumes share parents, so the marker belongs to no single record. */

/* Parent directories are made (marked, then mkdir, then the volume renamed in) and removed
 * (rmdir when empty, then unmarked) by the threadpool's workers at once: these steps take this
 * lock, so that one worker never removes a parent another is about to use. */
static pthread_mutex_t parents_lock = PTHREAD_MUTEX_INITIALIZER;

static void remove_empty_parents_locked(int rootfd, int jfd, const char *rel);

static void marker_name(const char *rel, char out[32])
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (const char *s = rel; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 0x100000001b3ULL;
    }
    (void)snprintf(out, 32, "%016llx", (unsigned long long)h);
}

static int open_parents(int jfd)
{
    return open_beneath(jfd, PARENTS_DIR, O_RDONLY | O_DIRECTORY, 1);
}

/* A small file of the journal opened for reading: never blocks (a FIFO planted there), and
 * anything but a regular file is refused. The descriptor, or -1. */
static int open_journal_file(int dirfd, const char *name)
{
    struct stat st;
    int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);

    if (fd >= 0 && (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))) {
        (void)close(fd);
        return -1;
    }
    return fd;
}

/* 1 when rel is marked as made by us. */
static int marked(int pfd, const char *rel)
{
    char name[32], buf[HP_REL_MAX + 2];
    int fd;
    ssize_t n;

    marker_name(rel, name);
    fd = open_journal_file(pfd, name);
    if (fd < 0)
        return 0;
    n = read(fd, buf, sizeof(buf) - 1);
    (void)close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    if (buf[n - 1] == '\n')
        buf[n - 1] = '\0';
    return strcmp(buf, rel) == 0;
}

/* Marks every path of the packed list; fsyncs once. 0 or -errno. */
static int mark_parents(int jfd, const char *list)
{
    int pfd, rc = 0;

    if (!list || !*list)
        return 0;
    pfd = open_parents(jfd);
    if (pfd < 0)
        return pfd;
    for (const char *p = list; *p && rc == 0; p += strlen(p) + 1) {
        char name[32];
        marker_name(p, name);
        int fd = openat(pfd, name, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0) {
            rc = -errno;
            break;
        }
        size_t n = strlen(p);
        if (write(fd, p, n) != (ssize_t)n || write(fd, "\n", 1) != 1)
            rc = errno ? -errno : -EIO;
        if (close(fd) != 0 && rc == 0)
            rc = -errno;
    }
    if (rc == 0 && fsync(pfd) != 0)
        rc = -errno;
    (void)close(pfd);
    return rc;
}

/* Marks the parents of rel missing now (made again below; parents_lock held). 0, or -errno
 * after op_fail. */
static int mark_missing_parents(struct hp_fsop *j, int rootfd, int jfd, const char *rel)
{
    char *missing = NULL;
    int rc = missing_parents(j, rootfd, rel, &missing);

    if (rc == 0 && missing) {
        rc = mark_parents(jfd, missing);
        if (rc < 0)
            op_fail(j, rc, "mark the parent directories of %s in %s/%s: %s", j->abs, j->root,
                    HP_JOURNAL_DIR, strerror(-rc));
    }
    free(missing);
    return rc < 0 ? rc : 0;
}

/* Removes the parents of rel that we made and that are empty now, deepest first, stopping at
 * the first that is not ours or still holds something (another volume's or a person's files:
 * rmdir never removes a directory that is not empty). Never the root. */
static void remove_empty_parents(int rootfd, int jfd, const char *rel)
{
    (void)pthread_mutex_lock(&parents_lock);
    remove_empty_parents_locked(rootfd, jfd, rel);
    (void)pthread_mutex_unlock(&parents_lock);
}

static void remove_empty_parents_locked(int rootfd, int jfd, const char *rel)
{
    char path[HP_REL_MAX + 1], leaf[NAME_MAX + 1];
    int pfd = open_parents(jfd);

    if (pfd < 0)
        return;
    (void)snprintf(path, sizeof(path), "%s", rel);
    for (char *slash = strrchr(path, '/'); slash; slash = strrchr(path, '/')) {
        *slash = '\0';
        if (!marked(pfd, path))
            break;
        struct hp_fsop scratch;
        memset(&scratch, 0, sizeof(scratch));
        scratch.root = (char *)"";
        int dfd = open_parent(&scratch, rootfd, path, 0, leaf);
        if (dfd < 0 && scratch.status != -ENOENT)
            break;
        if (dfd >= 0) {
            int rc = unlinkat(dfd, leaf, AT_REMOVEDIR) == 0 ? 0 : -errno;
            (void)close(dfd);
            if (rc < 0 && rc != -ENOENT)
                break; /* in use: kept, and so is everything above it */
        }
        char name[32];
        marker_name(path, name);
        (void)unlinkat(pfd, name, 0);
    }
    (void)close(pfd);
}

/* ---- other volumes: identity on disk ------------------------------------------------------- */

/* Whether a PersistentVolume of j->others holds the directory rel of the root (is it, lies
 * inside it, or holds it), compared by what the paths are on disk, not by how they are spelled
 * (fsops.h, others). 1 after op_fail(-EBUSY) naming it, 0 when none does, -errno after op_fail
 * when the root itself cannot be told. `doing` says what was about to happen, for the
 * message. */
static int held_by_other(struct hp_fsop *j, const char *rel, const char *doing)
{
    char rootkey[HP_PATHID_MAX], dirkey[HP_PATHID_MAX + HP_REL_MAX], key[HP_PATHID_MAX];
    char why[512];
    struct hp_mounts *m = NULL;
    int rc, found = 0;

    if (!j->nothers)
        return 0;
    if ((rc = hp_mounts_load(&m)) < 0) {
        op_fail(j, rc, "not %s %s/%s: cannot read this process's mount table to compare it with "
                       "the %zu other PersistentVolumes of this node: %s",
                doing, j->root, rel, j->nothers, strerror(-rc));
        return rc;
    }
    rc = hp_pathid_resolve(m, j->root, rootkey, sizeof(rootkey), why, sizeof(why));
    if (rc != 0) {
        op_fail(j, rc < 0 ? rc : -EIO, "not %s %s/%s: cannot tell what the volume root is on "
                                       "disk: %s",
                doing, j->root, rel, why);
        hp_mounts_free(m);
        return j->status;
    }
    size_t rl = strlen(rootkey);
    (void)snprintf(dirkey, sizeof(dirkey), "%s%s%s", rootkey,
                   rl && rootkey[rl - 1] == '/' ? "" : "/", rel);
    for (size_t i = 0; i < j->nothers && !found; i++) {
        const struct hp_fsop_other *o = &j->others[i];
        why[0] = '\0';
        rc = hp_pathid_resolve(m, o->path, key, sizeof(key), why, sizeof(why));
        if (rc < 0)
            continue; /* not an absolute path: the API server never lets such a PV be */
        int holds_root = hp_pathid_relation(key, rootkey);
        if (rc == 0 && (holds_root == HP_PATH_EQUAL || holds_root == HP_PATH_CONTAINS))
            continue; /* the root or above: a view of every volume, not one of them */
        int r = hp_pathid_relation(dirkey, key);
        if (r == HP_PATH_DISJOINT)
            continue;
        found = 1;
        if (rc == 0)
            op_fail(j, -EBUSY,
                    "not %s %s/%s: it %s the directory of PersistentVolume %s (path %s), which "
                    "is in use",
                    doing, j->root, rel, hp_policy_relation_words((enum hp_path_relation)r),
                    o->pv, o->path);
        else
            op_fail(j, -EBUSY,
                    "not %s %s/%s: PersistentVolume %s has the path %s, which cannot be "
                    "resolved on this node (%s), so it counts as in use for everything under "
                    "and above where it stops",
                    doing, j->root, rel, o->pv, o->path, why);
    }
    hp_mounts_free(m);
    return found;
}

/* ---- removal ------------------------------------------------------------------------------ */

/* One directory being emptied: its stream and its name in the parent frame. */
struct frame {
    DIR *dir;
    int progress; /* something was removed since the last rewind */
    int passes;
    char name[NAME_MAX + 1];
};

/* "<abs>/<frame names 1..depth-1>/<name>" into buf (cut at len), for messages. */
static const char *frame_path(struct hp_fsop *j, struct frame *fr, int depth, const char *name,
                              char *buf, size_t len)
{
    size_t o = 0;
    int i, k;

    for (i = 0; i <= depth && o + 1 < len; i++) {
        const char *part = i == 0 ? j->abs : i < depth ? fr[i].name : name;
        if (i > 0 && i == depth && !name)
            break;
        k = snprintf(buf + o, len - o, "%s%s", i == 0 ? "" : "/", part);
        if (k < 0)
            break;
        o += (size_t)k;
    }
    if (o >= len)
        o = len - 1;
    buf[o] = '\0';
    return buf;
}

static void tree_fail(struct hp_fsop *j, struct frame *fr, int depth, const char *name, int err,
                      const char *what)
{
    char path[HP_FSOP_MSG_LEN], eb[128];

    op_fail(j, -err, "%s %s: %s", what, frame_path(j, fr, depth, name, path, sizeof(path)),
            errtext(err, eb, sizeof(eb)));
}

/* An entry of a directory being emptied: a non-directory is unlinked (a symlink's target is
 * never looked at; 0), a subdirectory on the same mount is opened and returned (its fd), and
 * anything else is left in place with the failure recorded or vanished meanwhile (-1). */
static int deep_entry(struct hp_fsop *j, int dfd, const struct dirent *de,
                      const struct fs_id *root, const char *where)
{
    struct stat st;
    struct fs_id id;
    char eb[128];
    int isdir = de->d_type == DT_DIR, fd;

    if (de->d_type == DT_UNKNOWN) {
        if (fstatat(dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0)
            return -1;
        isdir = S_ISDIR(st.st_mode);
    }
    if (!isdir) {
        if (unlinkat(dfd, de->d_name, 0) == 0 || errno == ENOENT)
            return 0;
        if (errno != EISDIR) {
            int e = errno;
            op_fail(j, -e, "remove %s somewhere below %s: %s", de->d_name, where,
                    errtext(e, eb, sizeof(eb)));
            return -1;
        }
    }
    fd = open_beneath(dfd, de->d_name, O_RDONLY | O_DIRECTORY, 1);
    if (fd == -ELOOP || fd == -ENOTDIR) {
        if (unlinkat(dfd, de->d_name, 0) == 0 || errno == ENOENT)
            return 0;
        return -1;
    }
    if (fd < 0 && fd != -EXDEV)
        return -1;
    if (fd == -EXDEV || fs_id_of(fd, &id) != 0 || !same_fs(root, &id)) {
        if (fd >= 0)
            (void)close(fd);
        op_fail(j, -EXDEV, "a mount point below %s (another filesystem) was left in place", where);
        return -1;
    }
    return fd;
}

struct deep_level {
    dev_t dev;
    ino_t ino;
};

/* Inode numbers of directories a deep walk had to leave (not empty): not descended again. */
struct deep_skip {
    ino_t v[HP_DEEP_MAX_FAILURES];
    size_t n;
};

static int deep_skipped(const struct deep_skip *s, ino_t ino)
{
    for (size_t i = 0; i < s->n; i++)
        if (s->v[i] == ino)
            return 1;
    return 0;
}

/* Empties the directory top (takes the fd), however deep its tree, holding two descriptors and
 * 16 bytes per level: it descends into the first subdirectory it finds; a directory found empty
 * is left through "..", which must be the directory it was entered from (device and inode
 * kept per level: a tree moved away meanwhile is left alone), and removed there by its inode.
 * Never follows a symlink, never crosses a mount. `where` names top in messages. */
static void deep_empty(struct hp_fsop *j, int top, const struct fs_id *root, const char *where)
{
    struct deep_level *lv = NULL;
    struct deep_skip skip = {.n = 0};
    size_t depth = 0, cap = 0;
    int cur = top;
    struct stat st;
    char eb[128];

    for (;;) {
        if (depth == cap) {
            cap = cap ? 2 * cap : 256;
            lv = hp_xrealloc(lv, cap * sizeof(*lv));
        }
        if (fstat(cur, &st) != 0) {
            int e = errno;
            op_fail(j, -e, "stat a directory below %s: %s", where, errtext(e, eb, sizeof(eb)));
            break;
        }
        lv[depth].dev = st.st_dev;
        lv[depth].ino = st.st_ino;
        /* Passes over cur: files go, the first subdirectory not left before is entered; a pass
         * that removed something is followed by another (entries removed while reading may
         * hide others), until one finds nothing to do. */
        int sub = -1, removed = 1, dup_fd;
        DIR *d = NULL;
        struct dirent *de;
        while (sub < 0 && removed) {
            removed = 0;
            if (!d && ((dup_fd = fcntl(cur, F_DUPFD_CLOEXEC, 0)) < 0 || !(d = dir_of_fd(dup_fd))))
                break;
            rewinddir(d); /* a dup shares the position an earlier stream left at the end */
            while (sub < 0 && (de = readdir(d)) != NULL) {
                if (is_dot_or_dotdot(de->d_name) || deep_skipped(&skip, de->d_ino))
                    continue;
                sub = deep_entry(j, cur, de, root, where);
                if (sub == 0) {
                    sub = -1; /* a file removed: go on */
                    removed = 1;
                } else if (sub < 0 && skip.n < HP_DEEP_MAX_FAILURES) {
                    skip.v[skip.n++] = de->d_ino;
                }
            }
        }
        if (!d) {
            int e = errno;
            op_fail(j, -e, "read a directory below %s: %s", where, errtext(e, eb, sizeof(eb)));
            break;
        }
        (void)closedir(d);
        if (skip.n >= HP_DEEP_MAX_FAILURES) {
            if (sub >= 0)
                (void)close(sub);
            break; /* too much left in place: the failures are recorded */
        }
        if (sub >= 0) {
            (void)close(cur);
            cur = sub;
            depth++;
            hp_crashpoint("release-removing");
            continue;
        }
        if (depth == 0)
            break; /* top is empty (or holds only what was left in place) */
        /* cur is done: up through "..", which must be where we came from. */
        /* ".." is never a symlink, and cur is on the walk's own mount (not a mount's root). */
        int up = openat(cur, "..", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        ino_t child = lv[depth].ino;
        if (up < 0 || fstat(up, &st) != 0 || st.st_dev != lv[depth - 1].dev ||
            st.st_ino != lv[depth - 1].ino) {
            if (up >= 0)
                (void)close(up);
            op_fail(j, -ESTALE, "a directory %zu levels below %s was moved while being "
                                "removed; what is left of it was left in place",
                    depth, where);
            break;
        }
        (void)close(cur);
        cur = up;
        depth--;
        /* Remove the emptied child by its inode: its name was not kept. */
        dup_fd = fcntl(cur, F_DUPFD_CLOEXEC, 0);
        if ((d = dir_of_fd(dup_fd)) != NULL)
            rewinddir(d);
        while (d && (de = readdir(d)) != NULL) {
            if (de->d_ino != child || is_dot_or_dotdot(de->d_name))
                continue;
            if (unlinkat(cur, de->d_name, AT_REMOVEDIR) != 0 && errno != ENOENT &&
                skip.n < HP_DEEP_MAX_FAILURES) {
                int e = errno;
                skip.v[skip.n++] = child;
                op_fail(j, -e, "remove a directory %zu levels below %s: %s", depth + 1, where,
                        errtext(e, eb, sizeof(eb)));
            }
            break;
        }
        if (d)
            (void)closedir(d);
    }
    (void)close(cur);
    free(lv);
}

/* Handles one entry of the directory on top of the stack: unlinks a non-directory, or opens a
 * subdirectory on the same mount and returns it (pushed by the caller); -1 when nothing to push.
 */
static int tree_entry(struct hp_fsop *j, struct frame *fr, int depth, const struct fs_id *root,
                      const struct dirent *de)
{
    struct frame *f = &fr[depth - 1];
    int dfd = dirfd(f->dir), fd;
    int isdir = de->d_type == DT_DIR;
    char path[HP_FSOP_MSG_LEN];
    struct fs_id id;
    struct stat st;

    if (de->d_type == DT_UNKNOWN) {
        if (fstatat(dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
            if (errno != ENOENT)
                tree_fail(j, fr, depth, de->d_name, errno, "stat");
            return -1;
        }
        isdir = S_ISDIR(st.st_mode);
    }
    if (!isdir) {
        /* Files, fifos, sockets, devices and symlinks alike: the entry goes, a symlink's target
         * is never looked at. */
        if (unlinkat(dfd, de->d_name, 0) == 0) {
            f->progress = 1;
            hp_crashpoint("release-removing");
        } else if (errno == EISDIR)
            isdir = 1;
        else if (errno != ENOENT)
            tree_fail(j, fr, depth, de->d_name, errno, "remove");
        if (!isdir)
            return -1;
    }
    fd = open_beneath(dfd, de->d_name, O_RDONLY | O_DIRECTORY, 1);
    if (fd == -ELOOP || fd == -ENOTDIR) {
        /* Replaced by a symlink or a file since readdir: still the volume's own entry. */
        if (unlinkat(dfd, de->d_name, 0) == 0)
            f->progress = 1;
        else if (errno != ENOENT)
            tree_fail(j, fr, depth, de->d_name, errno, "remove");
        return -1;
    }
    if (fd < 0 && fd != -EXDEV) {
        if (fd != -ENOENT)
            tree_fail(j, fr, depth, de->d_name, -fd, "open");
        return -1;
    }
    if (fd == -EXDEV || fs_id_of(fd, &id) != 0 || !same_fs(root, &id)) {
        if (fd >= 0)
            (void)close(fd);
        op_fail(j, -EXDEV, "%s is a mount point (another filesystem); left in place",
                frame_path(j, fr, depth, de->d_name, path, sizeof(path)));
        return -1;
    }
    if (depth >= HP_OPEN_DEPTH) {
        /* Deeper than the streams kept open: emptied with a constant number of descriptors. */
        deep_empty(j, fd, root, frame_path(j, fr, depth, de->d_name, path, sizeof(path)));
        if (unlinkat(dfd, de->d_name, AT_REMOVEDIR) == 0)
            f->progress = 1;
        else if (errno != ENOENT)
            tree_fail(j, fr, depth, de->d_name, errno, "remove");
        return -1;
    }
    return fd;
}

/* Empties the directory rootfd (whose identity is root) with an explicit stack; takes rootfd. */
static void tree_empty(struct hp_fsop *j, int rootfd, const struct fs_id *root)
{
    struct frame *fr = hp_xcalloc(HP_MAX_DEPTH, sizeof(*fr));
    int depth = 1;

    fr[0].dir = dir_of_fd(rootfd);
    if (!fr[0].dir) {
        tree_fail(j, fr, 0, NULL, errno, "open");
        free(fr);
        return;
    }
    while (depth > 0) {
        struct frame *f = &fr[depth - 1];
        struct dirent *de;
        int fd;

        errno = 0;
        de = readdir(f->dir);
        if (!de) {
            if (errno) {
                tree_fail(j, fr, depth, NULL, errno, "read directory");
            } else if (f->progress && f->passes < HP_MAX_PASSES) {
                /* Entries removed while reading may hide others on some filesystems. */
                f->progress = 0;
                f->passes++;
                rewinddir(f->dir);
                continue;
            }
            (void)closedir(f->dir);
            depth--;
            if (depth > 0) {
                if (unlinkat(dirfd(fr[depth - 1].dir), f->name, AT_REMOVEDIR) == 0)
                    fr[depth - 1].progress = 1;
                else if (errno != ENOENT)
                    tree_fail(j, fr, depth, f->name, errno, "remove");
            }
            continue;
        }
        if (is_dot_or_dotdot(de->d_name))
            continue;
        fd = tree_entry(j, fr, depth, root, de);
        if (fd < 0)
            continue;
        fr[depth].dir = dir_of_fd(fd);
        if (!fr[depth].dir) {
            tree_fail(j, fr, depth, de->d_name, errno, "open");
            continue;
        }
        fr[depth].progress = 0;
        fr[depth].passes = 0;
        comp_name(fr[depth].name, de->d_name, strlen(de->d_name));
        depth++;
    }
    free(fr);
}

/* Recursive delete of the directory leaf below parentfd (which the caller checked is the one the
 * record names). */
static void delete_tree(struct hp_fsop *j, int parentfd, const char *leaf)
{
    struct fs_id pid, rid;
    int fd = open_beneath(parentfd, leaf, O_RDONLY | O_DIRECTORY, 1);

    if (fd == -ENOENT)
        return;
    if (fd < 0 && fd != -EXDEV) {
        explain_open_failure(j, parentfd, leaf, fd, j->rec.path, strlen(j->rec.path),
                             "it was left alone");
        return;
    }
    if (fd == -EXDEV || fs_id_of(parentfd, &pid) != 0 || fs_id_of(fd, &rid) != 0 ||
        !same_fs(&pid, &rid)) {
        if (fd >= 0)
            (void)close(fd);
        op_fail(j, -EXDEV, "%s is a mount point (another filesystem); it was left alone", j->abs);
        return;
    }
    tree_empty(j, fd, &rid);
    if (unlinkat(parentfd, leaf, AT_REMOVEDIR) != 0 && errno != ENOENT) {
        char eb[128];
        int e = errno;
        op_fail(j, -e, "remove %s: %s", j->abs, errtext(e, eb, sizeof(eb)));
    }
}

/* rename(2) that never replaces an existing target; -errno. */
static int rename_noreplace(int fromfd, const char *from, int tofd, const char *to)
{
    struct stat st;

    if (renameat2(fromfd, from, tofd, to, RENAME_NOREPLACE) == 0)
        return 0;
    if (errno != EINVAL && errno != ENOSYS)
        return -errno;
    /* Filesystem without RENAME_NOREPLACE: check, then rename (racy only against ourselves). */
    if (fstatat(tofd, to, &st, AT_SYMLINK_NOFOLLOW) == 0)
        return -EEXIST;
    return renameat(fromfd, from, tofd, to) == 0 ? 0 : -errno;
}

/* What stands at leaf below parentfd: 0 and its inode when it is a directory (never following a
 * symlink), -ENOENT when nothing, -ELOOP for a symlink, -ENOTDIR for anything else. */
static int dir_inode(int parentfd, const char *leaf, uint64_t *ino)
{
    struct stat st;
    if (fstatat(parentfd, leaf, &st, AT_SYMLINK_NOFOLLOW) != 0)
        return -errno;
    if (S_ISLNK(st.st_mode))
        return -ELOOP;
    if (!S_ISDIR(st.st_mode))
        return -ENOTDIR;
    *ino = (uint64_t)st.st_ino;
    return 0;
}

/* ---- PROVISION ------------------------------------------------------------------------------ */

static int write_record(struct hp_fsop *j, int jfd, struct hp_record *r)
{
    char err[HP_FSOP_MSG_LEN];
    int rc = hp_journal_write(jfd, r, err, sizeof(err));
    if (rc < 0)
        op_fail(j, rc, "%s", err);
    return rc;
}

static void set_out(struct hp_fsop *j, const struct hp_record *r)
{
    if (j->have_out)
        hp_record_free(&j->out);
    hp_record_copy(&j->out, r);
    free(j->out.root);
    j->out.root = hp_xstrdup(j->root);
    j->have_out = 1;
}

/* The staging directory of the PV: made (mode 0700) if missing, owner and mode set (it is ours:
 * nothing outside the journal can see it), opened without following a symlink. Its inode goes
 * to *ino. */
static int make_staging(struct hp_fsop *j, int jfd, const char *pv, uint64_t *ino)
{
    char name[NAME_MAX + 1];
    struct stat st;
    int sfd = open_beneath(jfd, STAGING_DIR, O_RDONLY | O_DIRECTORY, 1), fd;

    if (sfd < 0) {
        op_fail(j, sfd, "open %s/%s/%s: %s", j->root, HP_JOURNAL_DIR, STAGING_DIR, strerror(-sfd));
        return sfd;
    }
    comp_name(name, pv, strlen(pv));
    if (mkdirat(sfd, name, 0700) != 0 && errno != EEXIST) {
        int e = errno;
        op_fail(j, -e, "mkdir %s/%s/%s/%s: %s", j->root, HP_JOURNAL_DIR, STAGING_DIR, name,
                strerror(e));
        (void)close(sfd);
        return -e;
    }
    fd = open_beneath(sfd, name, O_RDONLY | O_DIRECTORY, 1);
    (void)close(sfd);
    if (fd < 0) {
        op_fail(j, fd, "open %s/%s/%s/%s: %s", j->root, HP_JOURNAL_DIR, STAGING_DIR, name,
                strerror(-fd));
        return fd;
    }
    /* Owner first, then mode: chown may clear set-id bits. */
    if (j->set_owner && fchown(fd, j->uid, j->gid) != 0) {
        int e = errno;
        op_fail(j, -e, "chown the new volume directory of %s: %s", pv, strerror(e));
    } else if (fchmod(fd, j->mode & 07777) != 0) {
        int e = errno;
        op_fail(j, -e, "chmod the new volume directory of %s: %s", pv, strerror(e));
    } else if (fstat(fd, &st) != 0) {
        int e = errno;
        op_fail(j, -e, "stat the new volume directory of %s: %s", pv, strerror(e));
    } else {
        *ino = (uint64_t)st.st_ino;
    }
    (void)close(fd);
    return j->status;
}

/* rmdir of the PV's staging directory (private; empty unless a crash cut a provisioning short
 * before its rename, and then it is never removed recursively here). */
static void remove_staging(int jfd, const char *pv)
{
    int sfd = open_beneath(jfd, STAGING_DIR, O_RDONLY | O_DIRECTORY, 1);
    if (sfd >= 0) {
        (void)unlinkat(sfd, pv, AT_REMOVEDIR);
        (void)close(sfd);
    }
}

/* Removes what a refused provisioning made: the (empty, private) staging directory, the
 * parents it recorded if empty, and its record. */
static void undo_staging(struct hp_fsop *j, int rootfd, int jfd, const struct hp_record *r)
{
    remove_staging(jfd, r->pv);
    remove_empty_parents(rootfd, jfd, r->path);
    (void)hp_journal_remove(jfd, r->pv);
    (void)j;
}

/* The directory is in place (inode checked): record "created". */
static void finish_created(struct hp_fsop *j, int jfd, struct hp_record *r)
{
    if (r->state != HP_REC_CREATED) {
        r->state = HP_REC_CREATED;
        if (write_record(j, jfd, r) < 0)
            return;
        hp_crashpoint("provision-created");
    }
    set_out(j, r);
}

/* Makes (or resumes making) r's directory: staging, record, parents, rename into place. */
static void provision_new(struct hp_fsop *j, int rootfd, int jfd, struct hp_record *r)
{
    char leaf[NAME_MAX + 1];
    uint64_t ino = 0, have = 0;
    char *planned = NULL;
    int pfd, rc;

    if (make_staging(j, jfd, r->pv, &ino) < 0)
        return;
    hp_crashpoint("provision-staged");
    /* From here on, a failure removes what this attempt made (the private staging directory,
     * the parents it marked, its record): a claim that goes to another node or away must not
     * leave them behind until a restart (a full disk refuses the record, a read-only one the
     * rename). */
    if (missing_parents(j, rootfd, r->path, &planned) < 0) {
        undo_staging(j, rootfd, jfd, r);
        return;
    }
    /* Parents recorded by an earlier attempt that made them stay ours. */
    for (const char *p = r->parents; p && *p; p += strlen(p) + 1) {
        int known = 0;
        for (const char *q = planned; q && *q; q += strlen(q) + 1)
            known |= strcmp(p, q) == 0;
        if (!known) {
            struct hp_buf b;
            hp_buf_init(&b, 0);
            for (const char *q = planned; q && *q; q += strlen(q) + 1)
                (void)hp_buf_append(&b, q, strlen(q) + 1);
            (void)hp_buf_append(&b, p, strlen(p) + 1);
            (void)hp_buf_append(&b, "", 1);
            free(planned);
            planned = hp_buf_steal(&b);
            hp_buf_free(&b);
        }
    }
    free(r->parents);
    r->parents = planned;
    r->inode = ino;
    r->state = HP_REC_CREATING;
    rc = mark_parents(jfd, planned);
    if (rc < 0) {
        op_fail(j, rc, "mark the parent directories of %s in %s/%s: %s", j->abs, j->root,
                HP_JOURNAL_DIR, strerror(-rc));
        undo_staging(j, rootfd, jfd, r);
        return;
    }
    if (write_record(j, jfd, r) < 0) {
        undo_staging(j, rootfd, jfd, r);
        return;
    }
    hp_crashpoint("provision-recorded");
    /* The parents are made and the directory renamed into them under parents_lock: a removal
     * of empty parents (another volume's, on another worker) cannot take a parent away in
     * between, and a parent it took away since it was planned is marked again before it is
     * made again (never an unmarked parent of ours, which nothing would remove). */
    (void)pthread_mutex_lock(&parents_lock);
    pfd = mark_missing_parents(j, rootfd, jfd, r->path) < 0
              ? -1
              : open_parent(j, rootfd, r->path, 1, leaf);
    if (pfd >= 0) {
        int sfd = open_beneath(jfd, STAGING_DIR, O_RDONLY | O_DIRECTORY, 1);
        rc = sfd < 0 ? sfd : rename_noreplace(sfd, r->pv, pfd, leaf);
        if (sfd >= 0)
            (void)close(sfd);
    }
    (void)pthread_mutex_unlock(&parents_lock);
    if (pfd < 0) {
        undo_staging(j, rootfd, jfd, r);
        return;
    }
    if (rc == -EEXIST || rc == -ENOTEMPTY) {
        if (dir_inode(pfd, leaf, &have) == 0 && have == ino) {
            rc = 0; /* it is ours: renamed by an earlier attempt that was cut short */
        } else {
            op_fail(j, -EEXIST,
                    "%s already exists and was not made for this volume; refusing to use or "
                    "change it (remove or rename it, or choose another pathPattern)",
                    j->abs);
            undo_staging(j, rootfd, jfd, r);
        }
    } else if (rc == -EXDEV) {
        op_fail(j, -EXDEV,
                "%s would be on another filesystem than the volume root %s (a mount point on "
                "the way); refusing",
                j->abs, j->root);
        undo_staging(j, rootfd, jfd, r);
    } else if (rc < 0) {
        fail_errno(j, -rc, "rename into place", r->path, strlen(r->path));
        undo_staging(j, rootfd, jfd, r);
    }
    (void)close(pfd);
    if (rc < 0 || j->status)
        return;
    hp_crashpoint("provision-renamed");
    finish_created(j, jfd, r);
}

/* A record for this PV exists: complete or accept the earlier attempt's work. */
static void provision_resume(struct hp_fsop *j, int rootfd, int jfd, struct hp_record *have)
{
    char leaf[NAME_MAX + 1];
    uint64_t ino = 0;
    int pfd, rc;

    if (strcmp(have->claim_uid, j->rec.claim_uid) != 0) {
        op_fail(j, -EEXIST, "the ownership record of %s names another claim (uid %s)", have->pv,
                have->claim_uid);
        return;
    }
    if (have->state != HP_REC_CREATING && have->state != HP_REC_CREATED) {
        op_fail(j, -EEXIST, "volume %s is already %s", have->pv,
                hp_record_state_name(have->state));
        return;
    }
    /* The record's path wins over a re-rendered one (the class may have been re-created). */
    free(j->abs);
    j->abs = hp_volpath_join(j->root, have->path);
    /* A record without an inode (migrated from a PV made before the journal) accepts the
     * directory at its path as it is. */
    pfd = open_parent(j, rootfd, have->path, 0, leaf);
    if (pfd >= 0) {
        rc = dir_inode(pfd, leaf, &ino);
        (void)close(pfd);
        if (rc == 0 && (have->inode == 0 || ino == have->inode)) {
            j->already_done = have->state == HP_REC_CREATED;
            finish_created(j, jfd, have);
            return;
        }
        if (rc == 0 || rc == -ELOOP || rc == -ENOTDIR) {
            /* Something else stands there now: never ours. */
            op_fail(j, -EEXIST,
                    "%s already exists and is not the directory recorded for this volume; "
                    "refusing to use or change it",
                    j->abs);
            if (have->state == HP_REC_CREATING)
                undo_staging(j, rootfd, jfd, have);
            return;
        }
    } else if (j->status != -ENOENT) {
        return;
    }
    j->status = 0; /* missing: made (again) below */
    j->msg[0] = '\0';
    j->nerrors = 0;
    provision_new(j, rootfd, jfd, have);
}

/* Takes over the retained directory of the record j->adopt (reuseRetained). */
static void provision_adopt(struct hp_fsop *j, int rootfd, int jfd)
{
    char err[HP_FSOP_MSG_LEN], leaf[NAME_MAX + 1];
    struct hp_record old, r;
    uint64_t ino = 0;
    int rc = hp_journal_read(jfd, j->adopt, &old, err, sizeof(err));

    if (rc < 0) {
        op_fail(j, rc == -ENOENT ? -ENOENT : rc, "cannot take over the retained volume %s: %s",
                j->adopt, rc == -ENOENT ? "its record is gone" : err);
        return;
    }
    if (!hp_policy_reuse_match(&old, j->rec.claim_namespace, j->rec.claim_name,
                               j->rec.class_name)) {
        op_fail(j, -EPERM, "the record of %s is not a retained volume of claim %s/%s, class %s",
                old.pv, j->rec.claim_namespace, j->rec.claim_name, j->rec.class_name);
        hp_record_free(&old);
        return;
    }
    free(j->abs);
    j->abs = hp_volpath_join(j->root, old.path);
    int pfd = open_parent(j, rootfd, old.path, 0, leaf);
    if (pfd >= 0) {
        rc = dir_inode(pfd, leaf, &ino);
        (void)close(pfd);
        if (rc < 0)
            op_fail(j, rc, "the retained directory %s %s", j->abs,
                    rc == -ENOENT ? "is gone" : "is not a directory");
        else if (old.inode && ino != old.inode)
            op_fail(j, -EEXIST, "%s is not the directory retained from %s (another inode)",
                    j->abs, old.pv);
    }
    if (j->status) {
        hp_record_free(&old);
        return;
    }
    hp_record_copy(&r, &j->rec);
    free(r.path);
    r.path = hp_xstrdup(old.path);
    free(r.parents);
    r.parents = NULL;
    if (old.parents) {
        struct hp_record tmp;
        hp_record_copy(&tmp, &old);
        r.parents = tmp.parents;
        tmp.parents = NULL;
        hp_record_free(&tmp);
    }
    free(r.adopted_from);
    r.adopted_from = hp_xstrdup(old.pv);
    r.inode = ino;
    r.dev = old.dev;
    r.fsid = old.fsid;
    r.state = HP_REC_CREATED;
    if (write_record(j, jfd, &r) == 0) {
        hp_crashpoint("provision-adopted");
        (void)hp_journal_remove(jfd, old.pv);
        j->adopted = 1;
        set_out(j, &r);
    }
    hp_record_free(&r);
    hp_record_free(&old);
}

static void do_provision(struct hp_fsop *j)
{
    char err[HP_FSOP_MSG_LEN];
    struct hp_record have;
    int rootfd, jfd, rc;

    if (!hp_journal_valid_name(j->rec.pv) || !j->rec.claim_uid) {
        op_fail(j, -EINVAL, "refusing to provision: \"%s\" is not a volume name",
                j->rec.pv ? j->rec.pv : "");
        return;
    }
    if (hp_volpath_validate(j->rec.path, err, sizeof(err)) < 0) {
        op_fail(j, -EINVAL, "refusing to create a volume directory: %s", err);
        return;
    }
    if (strncmp(j->rec.path, HP_JOURNAL_DIR, strlen(HP_JOURNAL_DIR)) == 0 &&
        (j->rec.path[strlen(HP_JOURNAL_DIR)] == '\0' ||
         j->rec.path[strlen(HP_JOURNAL_DIR)] == '/')) {
        op_fail(j, -EINVAL, "refusing to create a volume directory inside the journal %s",
                HP_JOURNAL_DIR);
        return;
    }
    rootfd = open_root(j, j->create_root);
    if (rootfd < 0)
        return;
    if (root_ident(j, rootfd) < 0) {
        fail_errno(j, errno, "stat", "", 0);
        (void)close(rootfd);
        return;
    }
    if (j->have_expect_fs && !hp_policy_same_fs(&(struct hp_record){.dev = j->expect_fs.dev,
                                                                     .fsid = j->expect_fs.fsid},
                                                &j->fs)) {
        op_fail(j, -ENODEV,
                "the volume path %s is not on the filesystem its ownership journal was read "
                "from (device %u:%u now, %u:%u then): is its disk mounted? No volume is made "
                "there meanwhile",
                j->root, major((dev_t)j->fs.dev), minor((dev_t)j->fs.dev),
                major((dev_t)j->expect_fs.dev), minor((dev_t)j->expect_fs.dev));
        (void)close(rootfd);
        return;
    }
    jfd = open_journal(j, rootfd, 1);
    if (jfd < 0) {
        (void)close(rootfd);
        return;
    }
    j->rec.dev = j->fs.dev;
    j->rec.fsid = j->fs.fsid;
    rc = hp_journal_read(jfd, j->rec.pv, &have, err, sizeof(err));
    if ((rc == 0 || rc == -ENOENT) &&
        held_by_other(j, rc == 0 ? have.path : j->rec.path,
                      j->adopt && rc == -ENOENT ? "taking over" : "making") != 0) {
        /* j->status says which volume holds it */
    } else if (rc == 0) {
        provision_resume(j, rootfd, jfd, &have);
    } else if (rc == -ENOENT) {
        if (j->adopt)
            provision_adopt(j, rootfd, jfd);
        else
            provision_new(j, rootfd, jfd, &j->rec);
    } else {
        op_fail(j, rc, "%s", err);
    }
    if (rc == 0)
        hp_record_free(&have);
    (void)close(jfd);
    (void)close(rootfd);
}

/* ---- CLEANUP, RELEASE, FORGET --------------------------------------------------------------- */

/* Opens root and journal for an operation on an existing record and reads it into r.
 * Returns 0 with both fds, or -errno after op_fail. */
static int open_record(struct hp_fsop *j, int *rootfd, int *jfd, struct hp_record *r)
{
    char err[HP_FSOP_MSG_LEN];
    int rc;

    *rootfd = open_root(j, 0);
    if (*rootfd < 0)
        return *rootfd;
    if (root_ident(j, *rootfd) < 0) {
        fail_errno(j, errno, "stat", "", 0);
        (void)close(*rootfd);
        return j->status;
    }
    *jfd = open_journal(j, *rootfd, 0);
    if (*jfd < 0) {
        (void)close(*rootfd);
        return *jfd;
    }
    rc = hp_journal_read(*jfd, j->rec.pv, r, err, sizeof(err));
    if (rc == -ENOENT)
        op_fail(j, -ENOENT, "no ownership record for %s in %s/%s", j->rec.pv, j->root,
                HP_JOURNAL_DIR);
    else if (rc < 0)
        op_fail(j, rc, "%s", err);
    if (rc < 0) {
        (void)close(*jfd);
        (void)close(*rootfd);
        return rc;
    }
    return 0;
}

static void do_cleanup(struct hp_fsop *j)
{
    char leaf[NAME_MAX + 1];
    struct hp_record r;
    uint64_t ino = 0;
    int rootfd, jfd, pfd;

    if (open_record(j, &rootfd, &jfd, &r) < 0) {
        if (j->status == -ENOENT) { /* nothing recorded, so nothing of ours to undo */
            j->status = 0;
            j->msg[0] = '\0';
            j->already_done = 1;
        }
        return;
    }
    free(j->abs);
    j->abs = hp_volpath_join(j->root, r.path);
    if (j->rec.claim_uid && strcmp(r.claim_uid, j->rec.claim_uid) != 0) {
        op_fail(j, -EPERM, "the record of %s names another claim; nothing removed", r.pv);
    } else if (r.adopted_from) {
        /* A retained directory we took over: it goes back to being retained, untouched. */
        r.state = HP_REC_RETAINED;
        if (write_record(j, jfd, &r) == 0)
            set_out(j, &r);
    } else if (r.state != HP_REC_CREATING && r.state != HP_REC_CREATED) {
        op_fail(j, -EPERM, "volume %s is %s, not being provisioned; nothing removed", r.pv,
                hp_record_state_name(r.state));
    } else if (held_by_other(j, r.path, "removing") == 0) {
        pfd = open_parent(j, rootfd, r.path, 0, leaf);
        if (pfd >= 0) {
            if (dir_inode(pfd, leaf, &ino) == 0 && ino == r.inode)
                delete_tree(j, pfd, leaf);
            (void)close(pfd);
        } else if (j->status == -ENOENT) {
            j->status = 0; /* a parent is gone, so the directory is too */
            j->msg[0] = '\0';
        }
        if (!j->status) {
            undo_staging(j, rootfd, jfd, &r);
        }
    }
    hp_record_free(&r);
    (void)close(jfd);
    (void)close(rootfd);
}

/* Renames the directory leaf (below pfd) to its archive name in the same parent; when that is
 * taken, appends a UTC timestamp (and a counter when even that is taken). The name is written
 * to the record (archivedAs) before the rename: a crash between the two leaves a record that
 * says where the directory went (archived_where_recorded), never data that no record owns. */
static void archive_dir(struct hp_fsop *j, int jfd, int pfd, const char *leaf, struct hp_record *r)
{
    char target[NAME_MAX + 1], stamp[48], suffix[64], eb[128];
    const char *slash = strrchr(r->path, '/');
    struct stat st;
    struct tm tm;
    time_t now = time(NULL);
    int rc = -EEXIST, i;

    if (!gmtime_r(&now, &tm) || strftime(stamp, sizeof(stamp), "%Y%m%dT%H%M%SZ", &tm) == 0)
        (void)snprintf(stamp, sizeof(stamp), "%lld", (long long)now);
    for (i = -1; i < 100 && (rc == -EEXIST || rc == -ENOTEMPTY); i++) {
        if (i < 0)
            suffix[0] = '\0';
        else if (i == 0)
            (void)snprintf(suffix, sizeof(suffix), "-%s", stamp);
        else
            (void)snprintf(suffix, sizeof(suffix), "-%s-%d", stamp, i);
        /* The archived path must stay a valid record path too (HP_REL_MAX in all). */
        size_t dirlen = slash ? (size_t)(slash - r->path) + 1 : 0;
        size_t room = dirlen < HP_REL_MAX ? HP_REL_MAX - dirlen : 0;
        rc = hp_policy_archive_name(leaf, suffix, target,
                                    room + 1 < sizeof(target) ? room + 1 : sizeof(target));
        if (rc < 0)
            break;
        if (fstatat(pfd, target, &st, AT_SYMLINK_NOFOLLOW) == 0) {
            rc = -EEXIST;
            continue;
        }
        free(r->archived_as);
        r->archived_as = slash ? hp_xasprintf("%.*s/%s", (int)(slash - r->path), r->path, target)
                               : hp_xstrdup(target);
        if (write_record(j, jfd, r) < 0)
            return;
        hp_crashpoint("release-archive-named");
        rc = rename_noreplace(pfd, leaf, pfd, target);
    }
    if (rc < 0) {
        op_fail(j, rc, "rename %s to %s: %s", j->abs, target, errtext(-rc, eb, sizeof(eb)));
        return;
    }
    free(j->archived_abs);
    j->archived_abs = hp_volpath_join(j->root, r->archived_as);
}

/* r's directory is gone from its path: 1 when the record names the archive name it was being
 * renamed to and the directory is there (the rename happened, its record update did not). */
static int archived_where_recorded(struct hp_fsop *j, int rootfd, struct hp_record *r)
{
    char leaf[NAME_MAX + 1];
    uint64_t ino = 0;
    struct hp_fsop probe;
    int pfd, rc;

    if (!r->archived_as || strcmp(r->archived_as, r->path) == 0)
        return 0;
    memset(&probe, 0, sizeof(probe));
    probe.root = j->root;
    pfd = open_parent(&probe, rootfd, r->archived_as, 0, leaf);
    if (pfd < 0)
        return 0;
    rc = dir_inode(pfd, leaf, &ino);
    (void)close(pfd);
    if (rc < 0 || (r->inode && ino != r->inode))
        return 0;
    free(j->archived_abs);
    j->archived_abs = hp_volpath_join(j->root, r->archived_as);
    return 1;
}

/* The directory of r: 0 with pfd/leaf when it is the one recorded (or the record predates
 * inodes), 1 when it is gone, -errno (after op_fail) when something else stands there. */
static int recorded_dir(struct hp_fsop *j, int rootfd, const struct hp_record *r, int *pfd,
                        char leaf[NAME_MAX + 1])
{
    uint64_t ino = 0;
    int rc;

    *pfd = open_parent(j, rootfd, r->path, 0, leaf);
    if (*pfd < 0) {
        if (j->status != -ENOENT)
            return j->status;
        j->status = 0; /* a parent is gone, so the directory is too */
        j->msg[0] = '\0';
        j->nerrors = 0;
        return 1;
    }
    rc = dir_inode(*pfd, leaf, &ino);
    if (rc == -ENOENT)
        return 1;
    if (rc == -ELOOP)
        op_fail(j, -ELOOP, "%s is a symlink, not a volume directory; it was left alone", j->abs);
    else if (rc == -ENOTDIR)
        op_fail(j, -ENOTDIR, "%s is not a directory; it was left alone", j->abs);
    else if (rc < 0)
        fail_errno(j, -rc, "stat", r->path, strlen(r->path));
    else if (r->inode && ino != r->inode)
        op_fail(j, -EPERM,
                "%s is not the directory this volume was created with (inode %llu, recorded "
                "%llu); it was left alone",
                j->abs, (unsigned long long)ino, (unsigned long long)r->inode);
    if (j->status) {
        (void)close(*pfd);
        return j->status;
    }
    return 0;
}

/* For the orphan sweep: 1 when the recorded directory of r holds any entry, 0 when it is
 * empty or gone, -errno (after op_fail) when it cannot be told. */
static int recorded_dir_used(struct hp_fsop *j, int rootfd, const struct hp_record *r)
{
    char leaf[NAME_MAX + 1];
    struct dirent *de;
    int pfd, where = recorded_dir(j, rootfd, r, &pfd, leaf), used = 0;

    if (where != 0)
        return where == 1 ? 0 : where;
    int fd = open_beneath(pfd, leaf, O_RDONLY | O_DIRECTORY, 1);
    (void)close(pfd);
    DIR *d = fd < 0 ? NULL : dir_of_fd(fd);
    if (!d) {
        fail_errno(j, fd < 0 ? -fd : errno, "open", r->path, strlen(r->path));
        return j->status;
    }
    while (!used && (de = readdir(d)) != NULL)
        used = !is_dot_or_dotdot(de->d_name);
    (void)closedir(d);
    return used;
}

static void do_release(struct hp_fsop *j)
{
    char err[HP_FSOP_MSG_LEN], leaf[NAME_MAX + 1];
    struct hp_record r;
    int rootfd, jfd, pfd, where, rc;

    free(j->abs);
    j->abs = hp_volpath_join(j->root, j->rec.path ? j->rec.path : "");
    if (open_record(j, &rootfd, &jfd, &r) < 0)
        return;
    if (j->have_expect_fs && !hp_policy_same_fs(&(struct hp_record){.dev = j->expect_fs.dev,
                                                                     .fsid = j->expect_fs.fsid},
                                                &j->fs)) {
        op_fail(j, -EPERM,
                "the volume root %s is not on the filesystem the volume was made on (device "
                "%u:%u now, %u:%u then): is the right disk mounted?",
                j->root, major((dev_t)j->fs.dev), minor((dev_t)j->fs.dev),
                major((dev_t)j->expect_fs.dev), minor((dev_t)j->expect_fs.dev));
    } else if (hp_policy_check_record(&r, j->rec.pv, j->rec.path ? j->rec.path : "", &j->fs, err,
                                      sizeof(err)) < 0) {
        op_fail(j, -EPERM, "%s; nothing was removed", err);
    } else if ((j->action == HP_ON_DELETE_RETAIN && r.state == HP_REC_RETAINED) ||
               (j->action == HP_ON_DELETE_ARCHIVE && r.state == HP_REC_ARCHIVED)) {
        j->already_done = 1;
        set_out(j, &r);
    } else if (r.state == HP_REC_RETAINED || r.state == HP_REC_ARCHIVED) {
        op_fail(j, -EPERM, "volume %s is already %s; nothing removed", r.pv,
                hp_record_state_name(r.state));
    } else if (j->action != HP_ON_DELETE_RETAIN &&
               held_by_other(j, r.path, j->action == HP_ON_DELETE_ARCHIVE ? "archiving"
                                                                          : "removing") != 0) {
        /* another live volume's directory by another spelling: j->status says which */
    } else if (j->only_unused && r.state == HP_REC_CREATED && j->action != HP_ON_DELETE_RETAIN &&
               (rc = recorded_dir_used(j, rootfd, &r)) != 0) {
        if (rc > 0) { /* data nobody released: kept where it is, for an administrator */
            r.state = HP_REC_RETAINED;
            if (write_record(j, jfd, &r) == 0) {
                set_out(j, &r);
                j->kept_in_use = 1;
            }
        }
    } else if (j->action == HP_ON_DELETE_RETAIN) {
        r.state = HP_REC_RETAINED;
        if (write_record(j, jfd, &r) == 0)
            set_out(j, &r);
    } else if (j->action == HP_ON_DELETE_ARCHIVE) {
        where = recorded_dir(j, rootfd, &r, &pfd, leaf);
        if (where == 0) {
            archive_dir(j, jfd, pfd, leaf, &r);
            (void)close(pfd);
        } else if (where == 1 && !archived_where_recorded(j, rootfd, &r)) {
            free(r.archived_as);
            r.archived_as = hp_xstrdup(r.path); /* nothing left to archive */
        }
        if (!j->status) {
            hp_crashpoint("release-archived");
            r.state = HP_REC_ARCHIVED;
            if (write_record(j, jfd, &r) == 0)
                set_out(j, &r);
        }
    } else {
        if (r.state != HP_REC_DELETING) {
            /* "deleting" tells a reader what is under way; correctness does not need it (a
             * retry or the sweep finishes a removal from "created" just the same). On a full
             * disk, where deleting volumes is how space comes back, it is skipped. */
            r.state = HP_REC_DELETING;
            rc = hp_journal_write(jfd, &r, err, sizeof(err));
            if (rc < 0 && rc != -ENOSPC && rc != -EDQUOT) {
                op_fail(j, rc, "%s", err);
                goto out;
            }
            hp_crashpoint("release-marked");
        }
        where = recorded_dir(j, rootfd, &r, &pfd, leaf);
        if (where == 0) {
            delete_tree(j, pfd, leaf);
            (void)close(pfd);
        }
        if (!j->status) {
            hp_crashpoint("release-removed");
            remove_empty_parents(rootfd, jfd, r.path);
            remove_staging(jfd, r.pv);
            set_out(j, &r);
        }
    }
out:
    hp_record_free(&r);
    (void)close(jfd);
    (void)close(rootfd);
}

static void do_forget(struct hp_fsop *j)
{
    int rootfd = open_root(j, 0), jfd, rc;

    if (rootfd < 0)
        return;
    jfd = open_journal(j, rootfd, 0);
    if (jfd < 0) {
        (void)close(rootfd);
        return;
    }
    remove_staging(jfd, j->rec.pv);
    rc = hp_journal_remove(jfd, j->rec.pv);
    if (rc < 0)
        op_fail(j, rc, "remove the ownership record of %s: %s", j->rec.pv, strerror(-rc));
    (void)close(jfd);
    (void)close(rootfd);
}

/* ---- MIGRATE ------------------------------------------------------------------------------- */

static void do_migrate(struct hp_fsop *j)
{
    char err[HP_FSOP_MSG_LEN], leaf[NAME_MAX + 1];
    struct hp_record have;
    uint64_t ino = 0;
    int rootfd, jfd, pfd, rc;

    if (!hp_journal_valid_name(j->rec.pv) ||
        hp_volpath_validate(j->rec.path, err, sizeof(err)) < 0) {
        op_fail(j, -EINVAL, "cannot record %s: not a volume name or path below the root",
                j->rec.pv ? j->rec.pv : "");
        return;
    }
    free(j->abs);
    j->abs = hp_volpath_join(j->root, j->rec.path);
    rootfd = open_root(j, 0);
    if (rootfd < 0)
        return;
    if (root_ident(j, rootfd) < 0 || (jfd = open_journal(j, rootfd, 1)) < 0) {
        if (!j->status)
            fail_errno(j, errno, "stat", "", 0);
        (void)close(rootfd);
        return;
    }
    rc = hp_journal_read(jfd, j->rec.pv, &have, err, sizeof(err));
    if (rc == 0) {
        j->already_done = 1;
        set_out(j, &have);
        hp_record_free(&have);
    } else if (rc != -ENOENT) {
        op_fail(j, rc, "%s", err);
    } else {
        pfd = open_parent(j, rootfd, j->rec.path, 0, leaf);
        if (pfd >= 0) {
            rc = dir_inode(pfd, leaf, &ino);
            (void)close(pfd);
            if (rc == -ELOOP || rc == -ENOTDIR)
                op_fail(j, rc, "%s is %s, not a volume directory; not recording it", j->abs,
                        rc == -ELOOP ? "a symlink" : "not a directory");
        } else if (j->status == -ENOENT) {
            j->status = 0;
            j->msg[0] = '\0';
            j->nerrors = 0;
        }
        if (!j->status) {
            j->rec.dev = j->fs.dev;
            j->rec.fsid = j->fs.fsid;
            j->rec.inode = ino;
            j->rec.migrated = 1;
            if (write_record(j, jfd, &j->rec) == 0)
                set_out(j, &j->rec);
        }
    }
    (void)close(jfd);
    (void)close(rootfd);
}

/* ---- SCAN ---------------------------------------------------------------------------------- */

struct scan_ctx {
    struct hp_fsop *j;
    size_t cap;
};

static void on_listed(const char *name, int status, const struct hp_record *r,
                      const char *reason, void *data)
{
    struct scan_ctx *c = data;
    struct hp_fsop *j = c->j;

    if (status < 0) {
        if (!j->invalid_records++)
            (void)snprintf(j->msg, sizeof(j->msg), "%s", reason);
        (void)name;
        return;
    }
    if (j->nrecords == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 64;
        j->records = hp_xrealloc(j->records, c->cap * sizeof(*j->records));
    }
    struct hp_record *dst = &j->records[j->nrecords++];
    hp_record_copy(dst, r);
    free(dst->root);
    dst->root = hp_xstrdup(j->root);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int in_sorted(char **v, size_t n, const char *s)
{
    return n && bsearch(&s, v, n, sizeof(*v), cmp_str) != NULL;
}

/* A takeover cut short leaves the old record next to the new one: finish it. */
static void settle_takeovers(struct hp_fsop *j, int jfd)
{
    for (size_t i = 0; i < j->nrecords; i++) {
        const struct hp_record *r = &j->records[i];
        if (!r->adopted_from)
            continue;
        for (size_t k = 0; k < j->nrecords; k++) {
            struct hp_record *o = &j->records[k];
            if (k != i && strcmp(o->pv, r->adopted_from) == 0 && strcmp(o->path, r->path) == 0 &&
                o->state == HP_REC_RETAINED) {
                if (hp_journal_remove(jfd, o->pv) == 0) {
                    hp_record_free(o);
                    *o = j->records[--j->nrecords];
                    if (i == j->nrecords)
                        i = k; /* the entry at i moved to k */
                    memset(&j->records[j->nrecords], 0, sizeof(*o));
                }
                break;
            }
        }
    }
}

/* Staging directories of records that are not "creating" any more, or of no record at all, are
 * leftovers of a crash: they are private and empty unless a crash came between the staging mkdir
 * and the rename, so rmdir (never a recursive removal) is enough. */
static void clean_staging(struct hp_fsop *j, int jfd, char **pvs, size_t n)
{
    DIR *d = dir_of_fd(open_beneath(jfd, STAGING_DIR, O_RDONLY | O_DIRECTORY, 1));
    struct dirent *de;

    if (!d)
        return;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.' || in_sorted(pvs, n, de->d_name))
            continue;
        (void)unlinkat(dirfd(d), de->d_name, AT_REMOVEDIR);
    }
    (void)closedir(d);
    (void)j;
}

/* Counts directories below dirfd (at rel prefix) that no record accounts for. */
static void count_unrecorded(struct hp_fsop *j, int dirfd, const char *prefix, char **paths,
                             size_t np, char **anc, size_t na, int depth)
{
    DIR *d = dir_of_fd(dup(dirfd));
    struct dirent *de;

    if (!d)
        return;
    while ((de = readdir(d)) != NULL) {
        struct stat st;
        if (is_dot_or_dotdot(de->d_name))
            continue;
        if (!*prefix && strcmp(de->d_name, HP_JOURNAL_DIR) == 0)
            continue;
        if (de->d_type != DT_DIR &&
            (de->d_type != DT_UNKNOWN || fstatat(dirfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
             !S_ISDIR(st.st_mode)))
            continue;
        char *rel = *prefix ? hp_xasprintf("%s/%s", prefix, de->d_name) : hp_xstrdup(de->d_name);
        if (in_sorted(paths, np, rel)) {
            /* a recorded directory */
        } else if (in_sorted(anc, na, rel) && depth < HP_MAX_DEPTH) {
            int sub = open_beneath(dirfd, de->d_name, O_RDONLY | O_DIRECTORY, 1);
            if (sub >= 0) {
                count_unrecorded(j, sub, rel, paths, np, anc, na, depth + 1);
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

static void scan_markers(struct hp_fsop *j, int rootfd, int jfd, char **paths, size_t np,
                         char ***anc, size_t *na, size_t *cap)
{
    size_t n_rec_anc = *na; /* ancestors of records and live volumes, sorted */
    DIR *d = dir_of_fd(open_parents(jfd));
    struct dirent *de;

    if (!d)
        return;
    while ((de = readdir(d)) != NULL) {
        char buf[HP_REL_MAX + 2], why[128], leaf[NAME_MAX + 1];
        if (de->d_name[0] == '.')
            continue;
        int fd = open_journal_file(dirfd(d), de->d_name);
        ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
        if (fd >= 0)
            (void)close(fd);
        if (n <= 1 || buf[n - 1] != '\n')
            continue;
        buf[n - 1] = '\0';
        if (hp_volpath_validate(buf, why, sizeof(why)) < 0)
            continue;
        if (j->clean_leftovers && !in_sorted(*anc, n_rec_anc, buf) && !in_sorted(paths, np, buf)) {
            struct hp_fsop scratch;
            memset(&scratch, 0, sizeof(scratch));
            scratch.root = (char *)"";
            int dfd = open_parent(&scratch, rootfd, buf, 0, leaf);
            int gone = dfd < 0 && scratch.status == -ENOENT;
            if (dfd >= 0) {
                gone = unlinkat(dfd, leaf, AT_REMOVEDIR) == 0 || errno == ENOENT;
                (void)close(dfd);
            }
            if (gone) {
                (void)unlinkat(dirfd(d), de->d_name, 0);
                continue;
            }
        }
        if (*na == *cap) {
            *cap = *cap ? 2 * *cap : 64;
            *anc = hp_xrealloc(*anc, *cap * sizeof(**anc));
        }
        (*anc)[(*na)++] = hp_xstrdup(buf);
    }
    (void)closedir(d);
}

static int packed_equal(const char *a, const char *b)
{
    for (; a && *a && b && *b; a += strlen(a) + 1, b += strlen(b) + 1)
        if (strcmp(a, b) != 0)
            return 0;
    return !(a && *a) && !(b && *b);
}

/* The roots file of the journal jfd: read into known_roots; replaced by write_roots when that is
 * given and differs. */
static void roots_file(struct hp_fsop *j, int jfd)
{
    char err[HP_FSOP_MSG_LEN];
    int rc = hp_journal_roots_read(jfd, &j->known_roots, err, sizeof(err));
    if (rc < 0) {
        op_fail(j, rc, "%s: %s", j->root, err);
        return;
    }
    if (j->write_roots && !packed_equal(j->write_roots, j->known_roots) &&
        (rc = hp_journal_roots_write(jfd, j->write_roots, err, sizeof(err))) < 0)
        op_fail(j, rc, "%s: %s", j->root, err);
}

static void count_record(const char *name, int status, const struct hp_record *r,
                         const char *reason, void *data)
{
    (void)name;
    (void)status;
    (void)r;
    (void)reason;
    ((struct hp_fsop *)data)->record_files++; /* an unreadable one holds its directory too */
}

static void do_roots(struct hp_fsop *j)
{
    int rootfd = open_root(j, 0), jfd, rc;

    if (rootfd < 0)
        return;
    jfd = hp_journal_open(rootfd, 0);
    if (jfd >= 0) {
        j->journal_found = 1;
        roots_file(j, jfd);
        if ((rc = hp_journal_list(jfd, 0, count_record, j)) < 0)
            op_fail(j, rc, "read the ownership journal %s/%s: %s", j->root, HP_JOURNAL_DIR,
                    strerror(-rc));
        (void)close(jfd);
    } else if (jfd != -ENOENT) {
        op_fail(j, jfd, "open the ownership journal %s/%s: %s", j->root, HP_JOURNAL_DIR,
                strerror(-jfd));
    }
    (void)close(rootfd);
}

static void do_scan(struct hp_fsop *j)
{
    struct scan_ctx ctx = {j, 0};
    char **paths = NULL, **anc = NULL, **pvs = NULL;
    size_t np = 0, na = 0, cap_anc = 0;
    int rootfd = open_root(j, 0), jfd, rc;

    if (rootfd < 0)
        return;
    if (root_ident(j, rootfd) < 0) {
        fail_errno(j, errno, "stat", "", 0);
        (void)close(rootfd);
        return;
    }
    jfd = hp_journal_open(rootfd, 0);
    if (jfd >= 0) {
        j->journal_found = 1;
        rc = hp_journal_list(jfd, j->clean_leftovers, on_listed, &ctx);
        if (rc < 0)
            op_fail(j, rc, "read the ownership journal %s/%s: %s", j->root, HP_JOURNAL_DIR,
                    strerror(-rc));
        else
            settle_takeovers(j, jfd);
        roots_file(j, jfd);
    } else if (jfd != -ENOENT) {
        op_fail(j, jfd, "open the ownership journal %s/%s: %s", j->root, HP_JOURNAL_DIR,
                strerror(-jfd));
    }
    /* Sorted recorded paths (the archived name for archived records) and their ancestors. */
    paths = hp_xcalloc(j->nrecords + j->nlive + 1, sizeof(*paths));
    pvs = hp_xcalloc(j->nrecords + 1, sizeof(*pvs));
    for (size_t i = 0; i < j->nrecords; i++) {
        const struct hp_record *r = &j->records[i];
        const char *p = r->state == HP_REC_ARCHIVED ? r->archived_as : r->path;
        if (r->state == HP_REC_CREATING)
            pvs[i] = r->pv;
        else
            pvs[i] = (char *)"";
        paths[np++] = (char *)p;
        for (const char *s = strchr(p, '/'); s; s = strchr(s + 1, '/')) {
            if (na == cap_anc) {
                cap_anc = cap_anc ? 2 * cap_anc : 64;
                anc = hp_xrealloc(anc, cap_anc * sizeof(*anc));
            }
            anc[na++] = hp_xstrndup(p, (size_t)(s - p));
        }
    }
    for (size_t i = 0; i < j->nlive; i++) {
        const char *p = j->live[i];
        paths[np++] = j->live[i];
        for (const char *s = strchr(p, '/'); s; s = strchr(s + 1, '/')) {
            if (na == cap_anc) {
                cap_anc = cap_anc ? 2 * cap_anc : 64;
                anc = hp_xrealloc(anc, cap_anc * sizeof(*anc));
            }
            anc[na++] = hp_xstrndup(p, (size_t)(s - p));
        }
    }
    qsort(paths, np, sizeof(*paths), cmp_str);
    qsort(pvs, j->nrecords, sizeof(*pvs), cmp_str);
    if (na)
        qsort(anc, na, sizeof(*anc), cmp_str);
    if (jfd >= 0 && j->clean_leftovers)
        clean_staging(j, jfd, pvs, j->nrecords);
    if (jfd >= 0) {
        /* Parents we made are ours too: walked into, not counted; an empty one that no volume
         * needs any more (a crash between its volume's removal and its own) goes at start. */
        size_t before = na;
        scan_markers(j, rootfd, jfd, paths, np, &anc, &na, &cap_anc);
        if (na != before)
            qsort(anc, na, sizeof(*anc), cmp_str);
    }
    if (!j->status)
        count_unrecorded(j, rootfd, "", paths, np, anc, na, 0);
    for (size_t i = 0; i < na; i++)
        free(anc[i]);
    free(anc);
    free(paths);
    free(pvs);
    if (jfd >= 0)
        (void)close(jfd);
    (void)close(rootfd);
}

/* ---- USAGE -------------------------------------------------------------------------------- */

/* Inodes with more than one link seen so far, so that a hard-linked file counts once: an
 * open-addressing hash set (a pnpm store or a backup made of hard links has one per file, and a
 * linear search over them made the walk quadratic). 0 marks a free slot (inode 0 is never
 * used), kept apart in has_zero in case a filesystem hands one out. */
struct inode_set {
    uint64_t *v;
    size_t n, cap; /* cap: a power of two, or 0 */
    int has_zero;
};

static size_t inode_slot(uint64_t ino, size_t cap)
{
    uint64_t h = ino * 0x9e3779b97f4a7c15ULL; /* Fibonacci hashing: sequential inodes spread */
    return (size_t)(h >> 32) & (cap - 1);
}

static int inode_seen(struct inode_set *s, uint64_t ino)
{
    if (ino == 0) {
        int seen = s->has_zero;
        s->has_zero = 1;
        return seen;
    }
    if (2 * (s->n + 1) > s->cap) { /* at most half full */
        size_t cap = s->cap ? 2 * s->cap : 64;
        uint64_t *v = hp_xcalloc(cap, sizeof(*v));
        for (size_t i = 0; i < s->cap; i++) {
            if (!s->v[i])
                continue;
            size_t k = inode_slot(s->v[i], cap);
            while (v[k])
                k = (k + 1) & (cap - 1);
            v[k] = s->v[i];
        }
        free(s->v);
        s->v = v;
        s->cap = cap;
    }
    size_t k = inode_slot(ino, s->cap);
    while (s->v[k]) {
        if (s->v[k] == ino)
            return 1;
        k = (k + 1) & (s->cap - 1);
    }
    s->v[k] = ino;
    s->n++;
    return 0;
}

static void count_inode(struct hp_fsop *j, struct inode_set *links, const struct stat *st)
{
    if (st->st_nlink > 1 && !S_ISDIR(st->st_mode) && inode_seen(links, (uint64_t)st->st_ino))
        return;
    j->used_bytes += (uint64_t)st->st_blocks * 512;
    j->used_inodes++;
}

static void do_usage(struct hp_fsop *j)
{
    char leaf[NAME_MAX + 1];
    struct frame *fr;
    struct inode_set links = {0};
    struct fs_id root_id, id;
    struct stat st;
    int rootfd = open_root(j, 0), pfd, fd, depth;

    if (rootfd < 0)
        return;
    (void)root_ident(j, rootfd);
    pfd = open_parent(j, rootfd, j->rec.path ? j->rec.path : "", 0, leaf);
    (void)close(rootfd);
    if (pfd < 0)
        return;
    fd = open_beneath(pfd, leaf, O_RDONLY | O_DIRECTORY, 1);
    (void)close(pfd);
    if (fd < 0) {
        fail_errno(j, -fd, "open", j->rec.path, strlen(j->rec.path));
        return;
    }
    if (fs_id_of(fd, &root_id) != 0 || fstat(fd, &st) != 0) {
        fail_errno(j, errno, "stat", j->rec.path, strlen(j->rec.path));
        (void)close(fd);
        return;
    }
    count_inode(j, &links, &st);
    fr = hp_xcalloc(HP_MAX_DEPTH, sizeof(*fr));
    fr[0].dir = dir_of_fd(fd);
    if (!fr[0].dir) {
        free(fr);
        return;
    }
    depth = 1;
    while (depth > 0) {
        if (__atomic_load_n(&j->abandoned, __ATOMIC_RELAXED)) {
            while (depth > 0)
                (void)closedir(fr[--depth].dir);
            op_fail(j, -ECANCELED, "measuring %s was abandoned: the provisioner is stopping",
                    j->rec.path);
            break;
        }
        struct dirent *de = readdir(fr[depth - 1].dir);
        if (!de) {
            (void)closedir(fr[--depth].dir);
            continue;
        }
        if (is_dot_or_dotdot(de->d_name))
            continue;
        j->visited++;
        int dfd = dirfd(fr[depth - 1].dir);
        if (fstatat(dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0)
            continue; /* gone meanwhile */
        if (!S_ISDIR(st.st_mode)) {
            count_inode(j, &links, &st);
            continue;
        }
        if (depth >= HP_MAX_DEPTH)
            continue;
        fd = open_beneath(dfd, de->d_name, O_RDONLY | O_DIRECTORY, 1);
        if (fd < 0)
            continue; /* a mount (EXDEV), a race: not this volume's */
        if (fs_id_of(fd, &id) != 0 || !same_fs(&root_id, &id)) {
            (void)close(fd);
            continue;
        }
        count_inode(j, &links, &st);
        fr[depth].dir = dir_of_fd(fd);
        if (!fr[depth].dir)
            continue;
        depth++;
    }
    free(fr);
    free(links.v);
}

/* ---- requests ------------------------------------------------------------------------------ */

static const char *const kind_names[] = {"provision", "cleanup", "release", "forget",
                                         "migrate",   "scan",    "usage",   "roots"};

const char *hp_fsop_kind_name(enum hp_fsop_kind kind)
{
    return (unsigned)kind < HP_ARRAY_SIZE(kind_names) ? kind_names[kind] : "unknown";
}

struct hp_fsop *hp_fsop_new(enum hp_fsop_kind kind, const char *root)
{
    struct hp_fsop *op = hp_xcalloc(1, sizeof(*op));
    size_t len;

    op->kind = kind;
    op->root = hp_xstrdup(root);
    len = strlen(op->root);
    while (len > 1 && op->root[len - 1] == '/')
        op->root[--len] = '\0';
    op->mode = 0777;
    op->uid = (uid_t)-1;
    op->gid = (gid_t)-1;
    return op;
}

void hp_fsop_free(struct hp_fsop *op)
{
    if (!op)
        return;
    free(op->root);
    hp_record_free(&op->rec);
    free(op->adopt);
    free(op->abs);
    free(op->archived_abs);
    if (op->have_out)
        hp_record_free(&op->out);
    for (size_t i = 0; i < op->nrecords; i++)
        hp_record_free(&op->records[i]);
    free(op->records);
    for (size_t i = 0; i < op->n_unrecorded_names; i++)
        free(op->unrecorded_names[i]);
    for (size_t i = 0; i < op->nlive; i++)
        free(op->live[i]);
    free(op->live);
    free(op->write_roots);
    free(op->known_roots);
    for (size_t i = 0; i < op->nothers; i++) {
        free(op->others[i].pv);
        free(op->others[i].path);
    }
    free(op->others);
    free(op);
}

void hp_fsop_add_other(struct hp_fsop *op, const char *pv, const char *path)
{
    op->others = hp_xrealloc(op->others, (op->nothers + 1) * sizeof(*op->others));
    op->others[op->nothers].pv = hp_xstrdup(pv);
    op->others[op->nothers].path = hp_xstrdup(path);
    op->nothers++;
}

void hp_fsop_run(struct hp_fsop *op)
{
    op->status = 0;
    op->nerrors = 0;
    op->msg[0] = '\0';
    if (!op->abs && op->rec.path)
        op->abs = hp_volpath_join(op->root, op->rec.path);
    else if (!op->abs)
        op->abs = hp_xstrdup(op->root);
    switch (op->kind) {
    case HP_FSOP_PROVISION:
        do_provision(op);
        break;
    case HP_FSOP_CLEANUP:
        do_cleanup(op);
        break;
    case HP_FSOP_RELEASE:
        do_release(op);
        break;
    case HP_FSOP_FORGET:
        do_forget(op);
        break;
    case HP_FSOP_MIGRATE:
        do_migrate(op);
        break;
    case HP_FSOP_SCAN:
        do_scan(op);
        break;
    case HP_FSOP_USAGE:
        do_usage(op);
        break;
    case HP_FSOP_ROOTS:
        do_roots(op);
        break;
    }
    if (op->status && op->nerrors > 1) {
        size_t len = strlen(op->msg);
        (void)snprintf(op->msg + len, sizeof(op->msg) - len, " (and %u more errors)",
                       op->nerrors - 1);
    }
}

void hp_fsop_abandon(struct hp_fsop *op)
{
    __atomic_store_n(&op->abandoned, 1, __ATOMIC_RELAXED);
}
