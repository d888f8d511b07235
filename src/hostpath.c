/* hostpath: create and remove volume directories under --pv-dir on the libuv threadpool.
 *
 * Threads: the public API and every callback run on the loop thread. Filesystem work runs in
 * uv_queue_work jobs; a job owns copies of everything it reads and writes its result (status and
 * message) into itself, so the work callback touches nothing else (no logging, no metrics).
 *
 * Safety: --pv-dir itself is opened by path (it may be an admin-provided symlink, and its parents
 * are the admin's business). Everything below it is reached one component at a time from a
 * directory fd with openat(O_NOFOLLOW) -- openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|
 * RESOLVE_NO_MAGICLINKS) when the kernel has it -- so a symlink planted anywhere on the way is
 * refused, never followed. Removal deletes with unlinkat relative to directory fds it holds,
 * never follows a symlink (a symlink inside a volume is the volume's content: it is unlinked, its
 * target untouched), and never descends into another mount (st_dev and mount id compared, plus
 * RESOLVE_NO_XDEV where available), reporting -EXDEV for what it had to leave.
 *
 * Callbacks (a job's, and on_idle) always come from an after-work callback on the loop, never
 * from inside the call that started them: even a refused path or a cancellation goes through
 * the threadpool (as a job that does nothing) to get there.
 */
#include "hostpath/hostpath.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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
#include "hostpath/log.h"
#include "hostpath/pathpattern.h"

#define HP_MSG_LEN 1024
#define HP_REL_MAX 4096
#define HP_MAX_DEPTH 256 /* directory levels below a volume root that removal descends */
#define HP_MAX_PASSES 8  /* re-reads of one directory while entries keep disappearing */

enum job_kind { JOB_CREATE, JOB_REMOVE, JOB_NOOP };

struct job {
    uv_work_t req;
    struct hp_hostpath *hp;
    struct job *prev, *next; /* waiting FIFO or submitted list */
    enum job_kind kind;
    enum hp_on_delete action;
    int canceled; /* set on the loop before submission, or the request was uv_cancel'ed */
    int done;     /* result decided on the loop (validation failure, retain): no work */
    char *base;   /* absolute pv_dir */
    char *rel;    /* validated path below base */
    char *abs;    /* what the callback reports */
    mode_t mode;
    uid_t uid;
    gid_t gid;
    int set_owner;
    hp_hostpath_cb cb;
    void *data;
    /* Results, written by the work callback. */
    int status;
    unsigned nerrors;
    char archived[NAME_MAX + 1];
    char msg[HP_MSG_LEN];
};

struct hp_hostpath {
    uv_loop_t *loop;
    char *dir;
    unsigned max_inflight;
    struct job *wait_head, *wait_tail;
    size_t waiting;
    struct job *run_head; /* submitted to uv_queue_work, after-work not yet run */
    size_t submitted;
    int closing;
    unsigned in_cb;
    void (*on_idle)(void *data);
    void *idle_data;
};

/* ------------------------------------------------------------------------------------------ */
/* Work-thread helpers: they touch only the job and the filesystem.                            */

static const char *errtext(int err, char *buf, size_t len)
{
    return strerror_r(err, buf, len); /* GNU variant: thread-safe, returns the text */
}

static void job_msg(struct job *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void job_msg(struct job *j, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    (void)vsnprintf(j->msg, sizeof(j->msg), fmt, ap); /* a truncated message is still useful */
    va_end(ap);
}

/* Sets the job's result unless one is already recorded: the first failure is the one reported. */
static void job_fail(struct job *j, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void job_fail(struct job *j, int status, const char *fmt, ...)
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

/* Fails with "<op> <base>/<first n bytes of rel>: <strerror>". */
static void job_fail_errno(struct job *j, int err, const char *op, size_t n)
{
    char eb[128];

    if (n)
        job_fail(j, -err, "%s %s/%.*s: %s", op, j->base, (int)n, j->rel,
                 errtext(err, eb, sizeof(eb)));
    else
        job_fail(j, -err, "%s %s: %s", op, j->base, errtext(err, eb, sizeof(eb)));
}

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

/* Copies the n-byte component at s into name (n <= NAME_MAX: validated on the loop). */
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
static void explain_open_failure(struct job *j, int dirfd, const char *name, int err, size_t upto,
                                 const char *verb)
{
    struct stat st;

    if ((err == -ELOOP || err == -ENOTDIR || err == -EXDEV) &&
        fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
        if (S_ISLNK(st.st_mode)) {
            job_fail(j, -ELOOP, "path component %s/%.*s is a symlink; %s", j->base, (int)upto,
                     j->rel, verb);
            return;
        }
        if (!S_ISDIR(st.st_mode)) {
            job_fail(j, -ENOTDIR, "path component %s/%.*s is not a directory; %s", j->base,
                     (int)upto, j->rel, verb);
            return;
        }
    }
    job_fail_errno(j, -err, "open", upto);
}

/* mkdir -p of the absolute pv_dir with mode 0755 (umask does not apply: the directories we make
 * are chmod'ed). Symlinks in pv_dir and its parents are the admin's and are followed. */
static int make_base(struct job *j)
{
    char path[HP_REL_MAX + 1];
    size_t len = strlen(j->base), i;
    char eb[128];

    if (len >= sizeof(path)) {
        job_fail(j, -ENAMETOOLONG, "mkdir %s: %s", j->base, errtext(ENAMETOOLONG, eb, sizeof(eb)));
        return -ENAMETOOLONG;
    }
    memcpy(path, j->base, len + 1);
    for (i = 1; i <= len; i++) {
        if (path[i] != '/' && path[i] != '\0')
            continue;
        if (path[i - 1] == '/')
            continue;
        path[i] = '\0';
        if (mkdir(path, 0755) == 0) {
            if (chmod(path, 0755) != 0) {
                int e = errno;
                job_fail(j, -e, "chmod %s: %s", path, errtext(e, eb, sizeof(eb)));
                return -e;
            }
        } else if (errno != EEXIST) {
            int e = errno;
            job_fail(j, -e, "mkdir %s: %s", path, errtext(e, eb, sizeof(eb)));
            return -e;
        }
        if (i < len)
            path[i] = '/';
    }
    return 0;
}

/* An O_DIRECTORY fd of pv_dir, creating it when create is set; -errno (and the message) else. */
static int open_base(struct job *j, int create)
{
    int fd = open(j->base, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

    if (fd < 0 && errno == ENOENT && create) {
        if (make_base(j) != 0)
            return j->status;
        fd = open(j->base, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    }
    if (fd < 0) {
        int e = errno;
        if (e != ENOENT || create)
            job_fail_errno(j, e, "open", 0);
        return -e;
    }
    return fd;
}

/* The leaf exists and fd is open on it: set owner, then mode (chown may clear set-id bits),
 * each only when it differs so that an unchanged volume on a read-only mount is still reusable.
 */
static void set_leaf_attrs(struct job *j, int fd)
{
    size_t n = strlen(j->rel);
    struct stat st;
    mode_t want = j->mode & 07777;

    if (fstat(fd, &st) != 0) {
        job_fail_errno(j, errno, "stat", n);
        return;
    }
    if (j->set_owner && ((j->uid != (uid_t)-1 && st.st_uid != j->uid) ||
                         (j->gid != (gid_t)-1 && st.st_gid != j->gid))) {
        if (fchown(fd, j->uid, j->gid) != 0) {
            job_fail_errno(j, errno, "chown", n);
            return;
        }
        if (fstat(fd, &st) != 0) {
            job_fail_errno(j, errno, "stat", n);
            return;
        }
    }
    if ((st.st_mode & 07777) != want && fchmod(fd, want) != 0)
        job_fail_errno(j, errno, "chmod", n);
}

static void do_create(struct job *j)
{
    const char *comp = j->rel;
    char name[NAME_MAX + 1];
    int dirfd = open_base(j, 1);

    if (dirfd < 0)
        return;
    for (;;) {
        const char *slash = strchr(comp, '/');
        size_t n = slash ? (size_t)(slash - comp) : strlen(comp);
        size_t upto = (size_t)(comp - j->rel) + n;
        int leaf = slash == NULL, created = 0, fd;

        comp_name(name, comp, n);
        /* The leaf starts private and gets its mode once its owner is right. */
        if (mkdirat(dirfd, name, leaf ? 0700 : 0755) == 0)
            created = 1;
        else if (errno != EEXIST) {
            job_fail_errno(j, errno, "mkdir", upto);
            break;
        }
        fd = open_beneath(dirfd, name, O_RDONLY | O_DIRECTORY, 0);
        if (fd < 0) {
            explain_open_failure(j, dirfd, name, fd, upto, "refusing");
            break;
        }
        (void)close(dirfd);
        dirfd = fd;
        if (created && !leaf && fchmod(fd, 0755) != 0) {
            job_fail_errno(j, errno, "chmod", upto);
            break;
        }
        if (leaf) {
            set_leaf_attrs(j, fd);
            break;
        }
        comp = slash + 1;
    }
    (void)close(dirfd);
}

/* One directory being emptied: its stream and its name in the parent frame. */
struct frame {
    DIR *dir;
    int progress; /* something was removed since the last rewind */
    int passes;
    char name[NAME_MAX + 1];
};

/* "<abs>/<frame names 1..depth-1>/<name>" into buf (cut at len), for messages. */
static const char *frame_path(struct job *j, struct frame *fr, int depth, const char *name,
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

static void tree_fail(struct job *j, struct frame *fr, int depth, const char *name, int err,
                      const char *op)
{
    char path[HP_MSG_LEN], eb[128];

    job_fail(j, -err, "%s %s: %s", op, frame_path(j, fr, depth, name, path, sizeof(path)),
             errtext(err, eb, sizeof(eb)));
}

/* Handles one entry of the directory on top of the stack: unlinks a non-directory, or opens a
 * subdirectory on the same mount and returns it (pushed by the caller); -1 when nothing to push.
 */
static int tree_entry(struct job *j, struct frame *fr, int depth, const struct fs_id *root,
                      const struct dirent *de)
{
    struct frame *f = &fr[depth - 1];
    int dfd = dirfd(f->dir), fd;
    int isdir = de->d_type == DT_DIR;
    char path[HP_MSG_LEN];
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
        if (unlinkat(dfd, de->d_name, 0) == 0)
            f->progress = 1;
        else if (errno == EISDIR)
            isdir = 1;
        else if (errno != ENOENT)
            tree_fail(j, fr, depth, de->d_name, errno, "remove");
        if (!isdir)
            return -1;
    }
    if (depth >= HP_MAX_DEPTH) {
        job_fail(j, -ELOOP, "%s is nested more than %d directories deep; left in place",
                 frame_path(j, fr, depth, de->d_name, path, sizeof(path)), HP_MAX_DEPTH);
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
        job_fail(j, -EXDEV, "%s is a mount point (another filesystem); left in place",
                 frame_path(j, fr, depth, de->d_name, path, sizeof(path)));
        return -1;
    }
    return fd;
}

/* Empties the directory rootfd (whose identity is root) with an explicit stack; takes rootfd. */
static void tree_empty(struct job *j, int rootfd, const struct fs_id *root)
{
    struct frame *fr = hp_xcalloc(HP_MAX_DEPTH, sizeof(*fr));
    int depth = 1;

    fr[0].dir = fdopendir(rootfd);
    if (!fr[0].dir) {
        tree_fail(j, fr, 0, NULL, errno, "open");
        (void)close(rootfd);
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
        if (de->d_name[0] == '.' &&
            (de->d_name[1] == '\0' || (de->d_name[1] == '.' && de->d_name[2] == '\0')))
            continue;
        fd = tree_entry(j, fr, depth, root, de);
        if (fd < 0)
            continue;
        fr[depth].dir = fdopendir(fd);
        if (!fr[depth].dir) {
            tree_fail(j, fr, depth, de->d_name, errno, "open");
            (void)close(fd);
            continue;
        }
        fr[depth].progress = 0;
        fr[depth].passes = 0;
        comp_name(fr[depth].name, de->d_name, strlen(de->d_name));
        depth++;
    }
    free(fr);
}

/* Recursive delete of leaf (a directory, checked by the caller) below parentfd. */
static void delete_tree(struct job *j, int parentfd, const char *leaf)
{
    struct fs_id pid, rid;
    int fd = open_beneath(parentfd, leaf, O_RDONLY | O_DIRECTORY, 1);

    if (fd == -ENOENT)
        return;
    if (fd < 0 && fd != -EXDEV) {
        explain_open_failure(j, parentfd, leaf, fd, strlen(j->rel), "it was left alone");
        return;
    }
    if (fd == -EXDEV || fs_id_of(parentfd, &pid) != 0 || fs_id_of(fd, &rid) != 0 ||
        !same_fs(&pid, &rid)) {
        if (fd >= 0)
            (void)close(fd);
        job_fail(j, -EXDEV, "%s is a mount point (another filesystem); it was left alone", j->abs);
        return;
    }
    tree_empty(j, fd, &rid);
    if (unlinkat(parentfd, leaf, AT_REMOVEDIR) != 0 && errno != ENOENT) {
        char eb[128];
        int e = errno;
        job_fail(j, -e, "remove %s: %s", j->abs, errtext(e, eb, sizeof(eb)));
    }
}

/* rename(2) that never replaces an existing target; -errno. */
static int rename_noreplace(int dirfd, const char *from, const char *to)
{
    struct stat st;

    if (renameat2(dirfd, from, dirfd, to, RENAME_NOREPLACE) == 0)
        return 0;
    if (errno != EINVAL && errno != ENOSYS)
        return -errno;
    /* Filesystem without RENAME_NOREPLACE: check, then rename (racy only against ourselves). */
    if (fstatat(dirfd, to, &st, AT_SYMLINK_NOFOLLOW) == 0)
        return -EEXIST;
    return renameat(dirfd, from, dirfd, to) == 0 ? 0 : -errno;
}

/* Renames leaf to "archived-<leaf>" in the same parent; when that exists, appends a UTC
 * timestamp (and a counter when even that is taken). */
static void archive(struct job *j, int parentfd, const char *leaf)
{
    char target[NAME_MAX + 2], stamp[32], eb[128];
    struct tm tm;
    time_t now = time(NULL);
    int rc, n, i;

    n = snprintf(target, sizeof(target), "archived-%s", leaf);
    rc = n > NAME_MAX ? -ENAMETOOLONG : rename_noreplace(parentfd, leaf, target);
    if (rc == -EEXIST || rc == -ENOTEMPTY) {
        if (!gmtime_r(&now, &tm) || strftime(stamp, sizeof(stamp), "%Y%m%dT%H%M%SZ", &tm) == 0)
            (void)snprintf(stamp, sizeof(stamp), "%lld", (long long)now);
        for (i = 0; i < 100; i++) {
            if (i == 0)
                n = snprintf(target, sizeof(target), "archived-%s-%s", leaf, stamp);
            else
                n = snprintf(target, sizeof(target), "archived-%s-%s-%d", leaf, stamp, i);
            rc = n > NAME_MAX ? -ENAMETOOLONG : rename_noreplace(parentfd, leaf, target);
            if (rc != -EEXIST && rc != -ENOTEMPTY)
                break;
        }
    }
    if (rc == 0) {
        memcpy(j->archived, target, (size_t)n + 1);
        return;
    }
    if (rc == -ENOENT)
        return; /* gone meanwhile: nothing left to archive */
    job_fail(j, rc, "rename %s to %s: %s", j->abs, target, errtext(-rc, eb, sizeof(eb)));
}

static void do_remove(struct job *j)
{
    const char *comp = j->rel;
    char name[NAME_MAX + 1];
    struct stat st;
    int dirfd = open_base(j, 0);

    if (dirfd == -ENOENT)
        return; /* no pv_dir, so no volume: already gone */
    if (dirfd < 0)
        return;
    for (;;) {
        const char *slash = strchr(comp, '/');
        size_t n = slash ? (size_t)(slash - comp) : strlen(comp);
        size_t upto = (size_t)(comp - j->rel) + n;
        int fd;

        comp_name(name, comp, n);
        if (!slash)
            break;
        fd = open_beneath(dirfd, name, O_RDONLY | O_DIRECTORY, 0);
        if (fd < 0) {
            if (fd != -ENOENT)
                explain_open_failure(j, dirfd, name, fd, upto, "it was left alone");
            (void)close(dirfd);
            return;
        }
        (void)close(dirfd);
        dirfd = fd;
        comp = slash + 1;
    }
    if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno != ENOENT)
            job_fail_errno(j, errno, "stat", strlen(j->rel));
    } else if (S_ISLNK(st.st_mode)) {
        job_fail(j, -ELOOP, "%s is a symlink, not a volume directory; it was left alone", j->abs);
    } else if (!S_ISDIR(st.st_mode)) {
        job_fail(j, -ENOTDIR, "%s is not a directory; it was left alone", j->abs);
    } else if (j->action == HP_ON_DELETE_ARCHIVE) {
        archive(j, dirfd, name);
    } else {
        delete_tree(j, dirfd, name);
    }
    (void)close(dirfd);
}

static void on_work(uv_work_t *req)
{
    struct job *j = hp_container_of(req, struct job, req);

    if (j->canceled || j->done)
        return;
    if (j->kind == JOB_CREATE)
        do_create(j);
    else if (j->kind == JOB_REMOVE)
        do_remove(j);
    if (j->status && j->nerrors > 1) {
        size_t len = strlen(j->msg);
        (void)snprintf(j->msg + len, sizeof(j->msg) - len, " (and %u more errors)", j->nerrors - 1);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Loop thread.                                                                                 */

static void run_link(struct hp_hostpath *hp, struct job *j)
{
    j->prev = NULL;
    j->next = hp->run_head;
    if (hp->run_head)
        hp->run_head->prev = j;
    hp->run_head = j;
    hp->submitted++;
}

static void run_unlink(struct hp_hostpath *hp, struct job *j)
{
    if (j->prev)
        j->prev->next = j->next;
    else
        hp->run_head = j->next;
    if (j->next)
        j->next->prev = j->prev;
    j->prev = j->next = NULL;
    hp->submitted--;
}

static void on_after_work(uv_work_t *req, int status);

static void submit(struct hp_hostpath *hp, struct job *j)
{
    int r;

    run_link(hp, j);
    r = uv_queue_work(hp->loop, &j->req, on_work, on_after_work);
    if (r != 0) { /* only fails for a NULL work callback: a bug here */
        hp_log_error("hostpath: uv_queue_work failed err=%s", uv_strerror(r));
        abort();
    }
    if (j->canceled)
        (void)uv_cancel((uv_req_t *)&j->req); /* UV_EBUSY: a worker took it; on_work returns */
}

static void pump(struct hp_hostpath *hp)
{
    while (!hp->closing && hp->wait_head && hp->submitted < hp->max_inflight) {
        struct job *j = hp->wait_head;
        hp->wait_head = j->next;
        if (!hp->wait_head)
            hp->wait_tail = NULL;
        hp->waiting--;
        j->next = NULL;
        submit(hp, j);
    }
}

static void enqueue(struct hp_hostpath *hp, struct job *j)
{
    if (hp->closing) {
        j->canceled = 1;
        submit(hp, j);
        return;
    }
    j->next = NULL;
    j->prev = NULL;
    if (hp->wait_tail)
        hp->wait_tail->next = j;
    else
        hp->wait_head = j;
    hp->wait_tail = j;
    hp->waiting++;
    pump(hp);
}

static void job_free(struct job *j)
{
    free(j->base);
    free(j->rel);
    free(j->abs);
    free(j);
}

static void maybe_finish(struct hp_hostpath *hp)
{
    void (*on_idle)(void *) = hp->on_idle;
    void *data = hp->idle_data;

    if (!hp->closing || hp->submitted || hp->waiting || hp->in_cb)
        return;
    if (on_idle)
        on_idle(data);
    free(hp->dir);
    free(hp);
}

static void on_after_work(uv_work_t *req, int status)
{
    struct job *j = hp_container_of(req, struct job, req);
    struct hp_hostpath *hp = j->hp;
    int st = j->status;
    const char *msg = j->msg;

    run_unlink(hp, j);
    if (status == UV_ECANCELED || j->canceled) {
        st = -ECANCELED;
        msg = "cancelled: the provisioner is shutting down";
    } else if (st == 0) {
        msg = NULL;
        if (j->archived[0])
            hp_log_info("hostpath: archived volume directory path=%s as=%s", j->abs, j->archived);
    }
    /* The next job is submitted after the callback, so that a callback that closes finds the
     * queue intact and cancels all of it. */
    if (j->cb) {
        hp->in_cb++;
        j->cb(j->data, st, msg, j->abs);
        hp->in_cb--;
    }
    job_free(j);
    pump(hp);
    maybe_finish(hp);
}

static struct job *job_new(struct hp_hostpath *hp, enum job_kind kind, hp_hostpath_cb cb,
                           void *data)
{
    struct job *j = hp_xcalloc(1, sizeof(*j));

    j->hp = hp;
    j->kind = kind;
    j->cb = cb;
    j->data = data;
    j->base = hp_xstrdup(hp->dir);
    return j;
}

struct hp_hostpath *hp_hostpath_new(uv_loop_t *loop, const char *pv_dir, unsigned max_inflight)
{
    struct hp_hostpath *hp = hp_xcalloc(1, sizeof(*hp));
    size_t len;

    hp->loop = loop;
    hp->max_inflight = max_inflight ? max_inflight : 1;
    if (pv_dir[0] == '/') {
        hp->dir = hp_xstrdup(pv_dir);
    } else {
        char cwd[4096];
        size_t n = sizeof(cwd);
        if (uv_cwd(cwd, &n) != 0)
            cwd[0] = '\0';
        hp->dir = hp_xasprintf("%s/%s", cwd, pv_dir);
    }
    len = strlen(hp->dir);
    while (len > 1 && hp->dir[len - 1] == '/')
        hp->dir[--len] = '\0';
    return hp;
}

void hp_hostpath_create(struct hp_hostpath *hp, const char *rel, mode_t mode, uid_t uid, gid_t gid,
                        int set_owner, hp_hostpath_cb cb, void *data)
{
    struct job *j = job_new(hp, JOB_CREATE, cb, data);
    int root = strcmp(hp->dir, "/") == 0;

    j->rel = hp_xstrdup(rel ? rel : "");
    j->abs = hp_xasprintf("%s/%s", root ? "" : hp->dir, j->rel);
    j->mode = mode;
    j->uid = uid;
    j->gid = gid;
    j->set_owner = set_owner;
    if (hp_path_validate_relative(j->rel, j->msg, sizeof(j->msg)) != 0) {
        char reason[HP_MSG_LEN];
        memcpy(reason, j->msg, sizeof(reason));
        job_msg(j, "refusing to create a volume directory: %s", reason);
        j->status = -EINVAL;
        j->done = 1;
    }
    enqueue(hp, j);
}

void hp_hostpath_remove(struct hp_hostpath *hp, const char *abs_path, enum hp_on_delete action,
                        hp_hostpath_cb cb, void *data)
{
    struct job *j = job_new(hp, JOB_REMOVE, cb, data);
    char rel[HP_REL_MAX + 2], reason[HP_MSG_LEN];
    int rc;

    j->abs = hp_xstrdup(abs_path ? abs_path : "");
    j->action = action;
    rc = hp_path_relative_to(hp->dir, j->abs, rel, sizeof(rel));
    if (rc != 0) {
        job_msg(j, "%s is not strictly inside %s; refusing to touch it", j->abs, hp->dir);
        j->status = -EINVAL;
        j->done = 1;
    } else if (hp_path_validate_relative(rel, reason, sizeof(reason)) != 0) {
        job_msg(j, "refusing to remove %s: %s", j->abs, reason);
        j->status = -EINVAL;
        j->done = 1;
    } else if (action == HP_ON_DELETE_RETAIN) {
        j->done = 1; /* the directory stays: nothing to do, success */
    }
    j->rel = hp_xstrdup(rc == 0 ? rel : "");
    enqueue(hp, j);
}

const char *hp_hostpath_dir(const struct hp_hostpath *hp)
{
    return hp->dir;
}

size_t hp_hostpath_pending(const struct hp_hostpath *hp)
{
    return hp->submitted + hp->waiting;
}

void hp_hostpath_close(struct hp_hostpath *hp, void (*on_idle)(void *data), void *data)
{
    struct job *j;

    if (hp->closing)
        return;
    hp->closing = 1;
    hp->on_idle = on_idle;
    hp->idle_data = data;
    /* Jobs handed to libuv but not started by a worker are not started at all. */
    for (j = hp->run_head; j; j = j->next)
        (void)uv_cancel((uv_req_t *)&j->req); /* UV_EBUSY when running or done: it finishes */
    /* Waiting jobs complete with -ECANCELED through the normal after-work path. */
    while ((j = hp->wait_head) != NULL) {
        hp->wait_head = j->next;
        hp->waiting--;
        j->canceled = 1;
        submit(hp, j);
    }
    hp->wait_tail = NULL;
    /* Nothing in flight: a no-op job makes on_idle fire from the loop, never inside close. */
    if (hp->submitted == 0) {
        j = job_new(hp, JOB_NOOP, NULL, NULL);
        j->canceled = 1;
        submit(hp, j);
    }
}
