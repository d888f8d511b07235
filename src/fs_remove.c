/* fs_remove: removing a volume's directory with everything in it. A room of the fsops module
 * (fsops_internal.h).
 *
 * Any thread; blocking. Removal deletes with unlinkat relative to directory fds it holds, never
 * follows a symlink (a symlink inside a volume is the volume's content: it is unlinked, its
 * target untouched), and never descends into another mount (st_dev and mount id compared, plus
 * RESOLVE_NO_XDEV where available), reporting -EXDEV for what it had to leave. What it cannot
 * remove is left in place and the removal goes on: the first failure is reported, all are
 * counted.
 */
#include "fsops_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hostpath/crashpoint.h"

/* Removal keeps a directory stream open for each of the first OPEN_DEPTH levels; deeper ones
 * are walked with two descriptors and 16 bytes per level (deep_empty): no depth limit. */
#define OPEN_DEPTH 128
#define DEEP_MAX_FAILURES 64 /* entries left in place before a deep walk gives up */
#define MAX_PASSES 8         /* re-reads of one directory while entries keep disappearing */

/* One removal: the volume it removes and what failed. */
struct removal {
    const char *abs; /* the volume's directory, for messages */
    int status;      /* the first failure */
    unsigned nfailed;
    char *msg;
    size_t len;
};

static void rm_fail(struct removal *rm, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void rm_fail(struct removal *rm, int status, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    hp__failv(&rm->status, &rm->nfailed, rm->msg, rm->len, status, fmt, ap);
    va_end(ap);
}

/* One directory being emptied: its stream and its name in the parent frame. */
struct frame {
    DIR *dir;
    int progress; /* something was removed since the last rewind */
    int passes;
    char name[NAME_MAX + 1];
};

/* "<abs>/<frame names 1..depth-1>/<name>" into buf (cut at len), for messages. */
static const char *frame_path(const struct removal *rm, struct frame *fr, int depth,
                              const char *name, char *buf, size_t len)
{
    size_t o = 0;
    int i, k;

    for (i = 0; i <= depth && o + 1 < len; i++) {
        const char *part = i == 0 ? rm->abs : i < depth ? fr[i].name : name;
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

static void tree_fail(struct removal *rm, struct frame *fr, int depth, const char *name, int err,
                      const char *what)
{
    char path[HP_FSOP_MSG_LEN], eb[128];

    rm_fail(rm, -err, "%s %s: %s", what, frame_path(rm, fr, depth, name, path, sizeof(path)),
            hp__errtext(err, eb, sizeof(eb)));
}

/* An entry of a directory being emptied: a non-directory is unlinked (a symlink's target is
 * never looked at; 0), a subdirectory on the same mount is opened and returned (its fd), and
 * anything else is left in place with the failure recorded or vanished meanwhile (-1). */
static int deep_entry(struct removal *rm, int dfd, const struct dirent *de,
                      const struct hp__fs_id *root, const char *where)
{
    struct stat st;
    struct hp__fs_id id;
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
            rm_fail(rm, -e, "remove %s somewhere below %s: %s", de->d_name, where,
                    hp__errtext(e, eb, sizeof(eb)));
            return -1;
        }
    }
    fd = hp__open_beneath(dfd, de->d_name, O_RDONLY | O_DIRECTORY, 1);
    if (fd == -ELOOP || fd == -ENOTDIR) {
        if (unlinkat(dfd, de->d_name, 0) == 0 || errno == ENOENT)
            return 0;
        return -1;
    }
    if (fd < 0 && fd != -EXDEV)
        return -1;
    if (fd == -EXDEV || hp__fs_id_of(fd, &id) != 0 || !hp__same_fs(root, &id)) {
        if (fd >= 0)
            (void)close(fd);
        rm_fail(rm, -EXDEV, "a mount point below %s (another filesystem) was left in place",
                where);
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
    ino_t v[DEEP_MAX_FAILURES];
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
static void deep_empty(struct removal *rm, int top, const struct hp__fs_id *root,
                       const char *where)
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
            rm_fail(rm, -e, "stat a directory below %s: %s", where,
                    hp__errtext(e, eb, sizeof(eb)));
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
            if (!d &&
                ((dup_fd = fcntl(cur, F_DUPFD_CLOEXEC, 0)) < 0 || !(d = hp__dir_of_fd(dup_fd))))
                break;
            rewinddir(d); /* a dup shares the position an earlier stream left at the end */
            while (sub < 0 && (de = readdir(d)) != NULL) {
                if (hp__is_dot_or_dotdot(de->d_name) || deep_skipped(&skip, de->d_ino))
                    continue;
                sub = deep_entry(rm, cur, de, root, where);
                if (sub == 0) {
                    sub = -1; /* a file removed: go on */
                    removed = 1;
                } else if (sub < 0 && skip.n < DEEP_MAX_FAILURES) {
                    skip.v[skip.n++] = de->d_ino;
                }
            }
        }
        if (!d) {
            int e = errno;
            rm_fail(rm, -e, "read a directory below %s: %s", where,
                    hp__errtext(e, eb, sizeof(eb)));
            break;
        }
        (void)closedir(d);
        if (skip.n >= DEEP_MAX_FAILURES) {
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
            rm_fail(rm, -ESTALE,
                    "a directory %zu levels below %s was moved while being removed; what is "
                    "left of it was left in place",
                    depth, where);
            break;
        }
        (void)close(cur);
        cur = up;
        depth--;
        /* Remove the emptied child by its inode: its name was not kept. */
        dup_fd = fcntl(cur, F_DUPFD_CLOEXEC, 0);
        if ((d = hp__dir_of_fd(dup_fd)) != NULL)
            rewinddir(d);
        while (d && (de = readdir(d)) != NULL) {
            if (de->d_ino != child || hp__is_dot_or_dotdot(de->d_name))
                continue;
            if (unlinkat(cur, de->d_name, AT_REMOVEDIR) != 0 && errno != ENOENT &&
                skip.n < DEEP_MAX_FAILURES) {
                int e = errno;
                skip.v[skip.n++] = child;
                rm_fail(rm, -e, "remove a directory %zu levels below %s: %s", depth + 1, where,
                        hp__errtext(e, eb, sizeof(eb)));
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
static int tree_entry(struct removal *rm, struct frame *fr, int depth,
                      const struct hp__fs_id *root, const struct dirent *de)
{
    struct frame *f = &fr[depth - 1];
    int dfd = dirfd(f->dir), fd;
    int isdir = de->d_type == DT_DIR;
    char path[HP_FSOP_MSG_LEN];
    struct hp__fs_id id;
    struct stat st;

    if (de->d_type == DT_UNKNOWN) {
        if (fstatat(dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
            if (errno != ENOENT)
                tree_fail(rm, fr, depth, de->d_name, errno, "stat");
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
            tree_fail(rm, fr, depth, de->d_name, errno, "remove");
        if (!isdir)
            return -1;
    }
    fd = hp__open_beneath(dfd, de->d_name, O_RDONLY | O_DIRECTORY, 1);
    if (fd == -ELOOP || fd == -ENOTDIR) {
        /* Replaced by a symlink or a file since readdir: still the volume's own entry. */
        if (unlinkat(dfd, de->d_name, 0) == 0)
            f->progress = 1;
        else if (errno != ENOENT)
            tree_fail(rm, fr, depth, de->d_name, errno, "remove");
        return -1;
    }
    if (fd < 0 && fd != -EXDEV) {
        if (fd != -ENOENT)
            tree_fail(rm, fr, depth, de->d_name, -fd, "open");
        return -1;
    }
    if (fd == -EXDEV || hp__fs_id_of(fd, &id) != 0 || !hp__same_fs(root, &id)) {
        if (fd >= 0)
            (void)close(fd);
        rm_fail(rm, -EXDEV, "%s is a mount point (another filesystem); left in place",
                frame_path(rm, fr, depth, de->d_name, path, sizeof(path)));
        return -1;
    }
    if (depth >= OPEN_DEPTH) {
        /* Deeper than the streams kept open: emptied with a constant number of descriptors. */
        deep_empty(rm, fd, root, frame_path(rm, fr, depth, de->d_name, path, sizeof(path)));
        if (unlinkat(dfd, de->d_name, AT_REMOVEDIR) == 0)
            f->progress = 1;
        else if (errno != ENOENT)
            tree_fail(rm, fr, depth, de->d_name, errno, "remove");
        return -1;
    }
    return fd;
}

/* Empties the directory rootfd (whose identity is root) with an explicit stack; takes rootfd. */
static void tree_empty(struct removal *rm, int rootfd, const struct hp__fs_id *root)
{
    struct frame *fr = hp_xcalloc(HP_MAX_DEPTH, sizeof(*fr));
    int depth = 1;

    fr[0].dir = hp__dir_of_fd(rootfd);
    if (!fr[0].dir) {
        tree_fail(rm, fr, 0, NULL, errno, "open");
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
                tree_fail(rm, fr, depth, NULL, errno, "read directory");
            } else if (f->progress && f->passes < MAX_PASSES) {
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
                    tree_fail(rm, fr, depth, f->name, errno, "remove");
            }
            continue;
        }
        if (hp__is_dot_or_dotdot(de->d_name))
            continue;
        fd = tree_entry(rm, fr, depth, root, de);
        if (fd < 0)
            continue;
        fr[depth].dir = hp__dir_of_fd(fd);
        if (!fr[depth].dir) {
            tree_fail(rm, fr, depth, de->d_name, errno, "open");
            continue;
        }
        fr[depth].progress = 0;
        fr[depth].passes = 0;
        hp__comp_name(fr[depth].name, de->d_name, strlen(de->d_name));
        depth++;
    }
    free(fr);
}

int hp__remove_tree(const char *root, int parentfd, const char *leaf, const char *rel,
                    const char *abs, unsigned *nfailed, char *msg, size_t len)
{
    struct removal rm = {.abs = abs, .msg = msg, .len = len};
    struct hp__fs_id pid, rid;
    char eb[128];
    int fd = hp__open_beneath(parentfd, leaf, O_RDONLY | O_DIRECTORY, 1);

    *nfailed = 0;
    if (fd == -ENOENT)
        return 0;
    if (fd < 0 && fd != -EXDEV) {
        *nfailed = 1;
        return hp__explain_open_failure(root, parentfd, leaf, fd, rel, strlen(rel),
                                        "it was left alone", msg, len);
    }
    if (fd == -EXDEV || hp__fs_id_of(parentfd, &pid) != 0 || hp__fs_id_of(fd, &rid) != 0 ||
        !hp__same_fs(&pid, &rid)) {
        if (fd >= 0)
            (void)close(fd);
        *nfailed = 1;
        return hp__err(msg, len, -EXDEV, "%s is a mount point (another filesystem); it was left "
                                         "alone",
                       abs);
    }
    tree_empty(&rm, fd, &rid);
    if (unlinkat(parentfd, leaf, AT_REMOVEDIR) != 0 && errno != ENOENT) {
        int e = errno;
        rm_fail(&rm, -e, "remove %s: %s", abs, hp__errtext(e, eb, sizeof(eb)));
    }
    *nfailed = rm.nfailed;
    return rm.status;
}
