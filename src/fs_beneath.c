/* fs_beneath: reaching a path below a volume root, and what a descriptor is on. A room of the
 * fsops module (fsops_internal.h).
 *
 * Any thread; blocking. The root (--pv-dir) is opened by path (it may be an admin's symlink,
 * and its parents are the admin's business). Everything below it is reached one component at a
 * time from a directory fd with openat(O_NOFOLLOW) -- openat2(RESOLVE_BENEATH|
 * RESOLVE_NO_SYMLINKS|RESOLVE_NO_MAGICLINKS) when the kernel has it -- so a symlink planted
 * anywhere on the way is refused, never followed.
 */
#include "fsops_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
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

#include "hostpath/journal.h"

#define ROOT_MAX 4096 /* bytes of an absolute volume root that make_root makes */

/* 1 while openat2 is usable; cleared for good the first time the kernel (or a seccomp filter)
 * says it does not know the call. */
static atomic_int openat2_usable = 1;

int hp__open_beneath(int dirfd, const char *name, int flags, int no_xdev)
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

DIR *hp__dir_of_fd(int fd)
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

int hp__is_dot_or_dotdot(const char *name)
{
    return name[0] == '.' && (name[1] == '\0' || (name[1] == '.' && name[2] == '\0'));
}

int hp__fs_id_of(int fd, struct hp__fs_id *id)
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

int hp__same_fs(const struct hp__fs_id *a, const struct hp__fs_id *b)
{
    if (a->dev != b->dev)
        return 0;
    return !(a->has_mnt_id && b->has_mnt_id) || a->mnt_id == b->mnt_id;
}

void hp__comp_name(char name[NAME_MAX + 1], const char *s, size_t n)
{
    if (n > NAME_MAX)
        n = NAME_MAX;
    memcpy(name, s, n);
    name[n] = '\0';
}

int hp__rename_noreplace(int fromfd, const char *from, int tofd, const char *to)
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

int hp__dir_inode(int parentfd, const char *leaf, uint64_t *ino)
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

int hp__open_journal_file(int dirfd, const char *name)
{
    struct stat st;
    int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);

    if (fd >= 0 && (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))) {
        (void)close(fd);
        return -1;
    }
    return fd;
}

int hp__explain_open_failure(const char *root, int dirfd, const char *name, int err,
                             const char *rel, size_t upto, const char *verb, char *msg,
                             size_t len)
{
    struct stat st;

    if ((err == -ELOOP || err == -ENOTDIR || err == -EXDEV) &&
        fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
        if (S_ISLNK(st.st_mode))
            return hp__err(msg, len, -ELOOP, "path component %s/%.*s is a symlink; %s", root,
                           (int)upto, rel, verb);
        if (!S_ISDIR(st.st_mode))
            return hp__err(msg, len, -ENOTDIR, "path component %s/%.*s is not a directory; %s",
                           root, (int)upto, rel, verb);
    }
    return hp__fail_errno(msg, len, root, -err, "open", rel, upto);
}

/* mkdir -p of the absolute root with mode 0755 (umask does not apply: the directories we make
 * are chmod'ed). Symlinks in the root and its parents are the admin's and are followed. */
static int make_root(const char *root, char *msg, size_t len)
{
    char path[ROOT_MAX + 1], eb[128];
    size_t n = strlen(root), i;

    if (n >= sizeof(path))
        return hp__err(msg, len, -ENAMETOOLONG, "mkdir %s: %s", root,
                       hp__errtext(ENAMETOOLONG, eb, sizeof(eb)));
    memcpy(path, root, n + 1);
    for (i = 1; i <= n; i++) {
        if (path[i] != '/' && path[i] != '\0')
            continue;
        if (path[i - 1] == '/')
            continue;
        path[i] = '\0';
        if (mkdir(path, 0755) == 0) {
            if (chmod(path, 0755) != 0) {
                int e = errno;
                return hp__err(msg, len, -e, "chmod %s: %s", path, hp__errtext(e, eb, sizeof(eb)));
            }
        } else if (errno != EEXIST) {
            int e = errno;
            return hp__err(msg, len, -e, "mkdir %s: %s", path, hp__errtext(e, eb, sizeof(eb)));
        }
        if (i < n)
            path[i] = '/';
    }
    return 0;
}

int hp__open_root(const char *root, int create, char *msg, size_t len)
{
    int fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC), rc;

    if (fd < 0 && errno == ENOENT && create) {
        if ((rc = make_root(root, msg, len)) != 0)
            return rc;
        fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    }
    if (fd < 0) {
        int e = errno;
        if (e == ENOENT)
            return hp__err(msg, len, -e,
                           "the volume root %s does not exist (is its disk mounted?)", root);
        return hp__fail_errno(msg, len, root, e, "open", "", 0);
    }
    return fd;
}

/* The root's device and filesystem id, for the records. */
static int ident_of(int fd, struct hp_fs_ident *id, int *ordered_meta)
{
    struct stat st;
    struct statfs sf;

    if (fstat(fd, &st) != 0)
        return -errno;
    id->dev = (uint64_t)st.st_dev;
    id->fsid = 0;
    *ordered_meta = 0;
    if (fstatfs(fd, &sf) == 0) {
        /* EXT4_SUPER_MAGIC and XFS_SUPER_MAGIC. ext2 shares ext4's number and has no journal:
         * there a crash may keep a volume directory's rename and lose its record's, and the
         * directory is then unrecorded (left alone, never removed). */
        *ordered_meta = sf.f_type == 0xEF53 || sf.f_type == 0x58465342;
        uint32_t a, b;
        memcpy(&a, &sf.f_fsid, sizeof(a));
        memcpy(&b, (const char *)&sf.f_fsid + sizeof(a), sizeof(b));
        id->fsid = ((uint64_t)a << 32) | b;
    }
    return 0;
}

int hp__root_ident(int rootfd, struct hp_fs_ident *fs, struct hp_fs_stats *stats)
{
    struct statvfs sv;
    struct stat st_root, st_slash;
    int rc = ident_of(rootfd, fs, &stats->ordered_meta);
    if (rc < 0)
        return rc;
    if (fstatvfs(rootfd, &sv) == 0) {
        stats->ok = 1;
        stats->size = (uint64_t)sv.f_blocks * sv.f_frsize;
        stats->free = (uint64_t)sv.f_bavail * sv.f_frsize;
        stats->files = (uint64_t)sv.f_files;
        stats->files_free = (uint64_t)sv.f_favail;
    }
    stats->on_rootfs = fstat(rootfd, &st_root) == 0 && stat("/", &st_slash) == 0 &&
                       st_root.st_dev == st_slash.st_dev;
    return 0;
}

int hp__open_root_ident(const char *root, int create, struct hp_fs_ident *fs,
                        struct hp_fs_stats *stats, char *msg, size_t len)
{
    int fd = hp__open_root(root, create, msg, len), rc;

    if (fd < 0)
        return fd;
    if ((rc = hp__root_ident(fd, fs, stats)) < 0) {
        (void)close(fd);
        return hp__fail_errno(msg, len, root, -rc, "stat", "", 0);
    }
    return fd;
}

int hp__open_journal(const char *root, int rootfd, int create, char *msg, size_t len)
{
    char eb[128];
    int jfd = hp_journal_open(rootfd, create);

    if (jfd == -ENOENT && !create)
        return hp__err(msg, len, -ENOENT,
                       "no ownership journal %s/%s (is the disk that holds the volumes mounted?)",
                       root, HP_JOURNAL_DIR);
    if (jfd < 0)
        return hp__err(msg, len, jfd, "open the ownership journal %s/%s: %s", root,
                       HP_JOURNAL_DIR, hp__errtext(-jfd, eb, sizeof(eb)));
    return jfd;
}

int hp__open_parent(const char *root, int rootfd, const char *rel, int make,
                    char leaf[NAME_MAX + 1], char *msg, size_t len)
{
    const char *comp = rel;
    char name[NAME_MAX + 1];
    int dirfd = dup(rootfd), rc;

    if (dirfd < 0)
        return hp__fail_errno(msg, len, root, errno, "dup", "", 0);
    for (;;) {
        const char *slash = strchr(comp, '/');
        size_t n = slash ? (size_t)(slash - comp) : strlen(comp);
        size_t upto = (size_t)(comp - rel) + n;
        int fd, created = 0;

        if (!slash) {
            hp__comp_name(leaf, comp, n);
            return dirfd;
        }
        hp__comp_name(name, comp, n);
        if (make) {
            if (mkdirat(dirfd, name, 0755) == 0) {
                created = 1;
            } else if (errno != EEXIST) {
                rc = hp__fail_errno(msg, len, root, errno, "mkdir", rel, upto);
                (void)close(dirfd);
                return rc;
            }
        }
        fd = hp__open_beneath(dirfd, name, O_RDONLY | O_DIRECTORY, 0);
        if (fd < 0) {
            if (fd == -ENOENT && !make)
                rc = hp__err(msg, len, -ENOENT, "%s/%.*s does not exist", root, (int)upto, rel);
            else
                rc = hp__explain_open_failure(root, dirfd, name, fd, rel, upto, "refusing", msg,
                                              len);
            (void)close(dirfd);
            return rc;
        }
        (void)close(dirfd);
        dirfd = fd;
        if (created && fchmod(fd, 0755) != 0) {
            rc = hp__fail_errno(msg, len, root, errno, "chmod", rel, upto);
            (void)close(dirfd);
            return rc;
        }
        comp = slash + 1;
    }
}
