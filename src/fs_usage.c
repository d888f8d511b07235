/* fs_usage: USAGE, a volume directory measured -- bytes used (st_blocks, each inode once) and
 * inodes, never following a symlink nor crossing a mount; read-only. A volume with a hard limit
 * (its record names a project ID, and its directory carries it) is read from the quota's
 * counters instead, which the kernel keeps exact: no walk at all. A room of the fsops module
 * (fsops_internal.h).
 *
 * Any thread; blocking. hp_fsop_abandon may stop it from another thread.
 */
#include "fsops_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

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

/* What a walk has counted. */
struct usage {
    uint64_t bytes, inodes, visited;
    struct inode_set links;
};

static void count_inode(struct usage *u, const struct stat *st)
{
    if (st->st_nlink > 1 && !S_ISDIR(st->st_mode) && inode_seen(&u->links, (uint64_t)st->st_ino))
        return;
    u->bytes += (uint64_t)st->st_blocks * 512;
    u->inodes++;
}

/* Counts everything below the directory fd (takes it; its own inode is counted by the caller)
 * on the filesystem top: 0, or -ECANCELED when abandoned. */
static int walk(struct usage *u, int fd, const struct hp__fs_id *top, const int *abandoned)
{
    DIR **dirs = hp_xcalloc(HP_MAX_DEPTH, sizeof(*dirs));
    struct hp__fs_id id;
    struct stat st;
    int depth = 0, rc = 0;

    if ((dirs[0] = hp__dir_of_fd(fd)) != NULL)
        depth = 1;
    while (depth > 0) {
        if (__atomic_load_n(abandoned, __ATOMIC_RELAXED)) {
            while (depth > 0)
                (void)closedir(dirs[--depth]);
            rc = -ECANCELED;
            break;
        }
        struct dirent *de = readdir(dirs[depth - 1]);
        if (!de) {
            (void)closedir(dirs[--depth]);
            continue;
        }
        if (hp__is_dot_or_dotdot(de->d_name))
            continue;
        u->visited++;
        int dfd = dirfd(dirs[depth - 1]);
        if (fstatat(dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0)
            continue; /* gone meanwhile */
        if (!S_ISDIR(st.st_mode)) {
            count_inode(u, &st);
            continue;
        }
        if (depth >= HP_MAX_DEPTH)
            continue;
        fd = hp__open_beneath(dfd, de->d_name, O_RDONLY | O_DIRECTORY, 1);
        if (fd < 0)
            continue; /* a mount (EXDEV), a race: not this volume's */
        if (hp__fs_id_of(fd, &id) != 0 || !hp__same_fs(top, &id)) {
            (void)close(fd);
            continue;
        }
        count_inode(u, &st);
        if ((dirs[depth] = hp__dir_of_fd(fd)) != NULL)
            depth++;
    }
    free(dirs);
    return rc;
}

/* The usage of the directory fd from its project's counters, when it carries project id: 1
 * with the results in j, 0 when it does not carry it (it is walked), -errno with the reason. */
static int usage_by_quota(struct hp_fsop *j, int fd, uint32_t id, char *msg, size_t len)
{
    const struct hp_quota_fs *fs;
    struct hp_quota_usage u;
    uint32_t have = 0;
    int rc;

    if (hp_quota_get_project(fd, &have, NULL, NULL, 0) < 0 || have != id)
        return 0;
    if ((rc = hp__quota_fs(j, fd, &fs, msg, len)) < 0 ||
        (rc = hp_quota_get(fs, fd, id, &u, msg, len)) < 0)
        return rc;
    j->by_quota = 1;
    j->used_bytes = u.bytes;
    j->used_inodes = u.inodes;
    j->limit_hard = u.bytes_hard;
    return 1;
}

void hp__fsop_usage(struct hp_fsop *j)
{
    char leaf[NAME_MAX + 1], msg[HP_FSOP_MSG_LEN];
    const char *rel = j->rec.path ? j->rec.path : "";
    struct usage u = {0};
    struct hp__fs_id top;
    struct stat st;
    int rootfd = hp__open_root(j->root, 0, msg, sizeof(msg)), pfd, fd;

    if (rootfd < 0) {
        hp__fsop_fail(j, rootfd, "%s", msg);
        return;
    }
    (void)hp__root_ident(rootfd, &j->fs, &j->stats);
    pfd = hp__open_parent(j->root, rootfd, rel, 0, leaf, msg, sizeof(msg));
    (void)close(rootfd);
    if (pfd < 0) {
        hp__fsop_fail(j, pfd, "%s", msg);
        return;
    }
    fd = hp__open_beneath(pfd, leaf, O_RDONLY | O_DIRECTORY, 1);
    (void)close(pfd);
    if (fd < 0) {
        hp__fsop_fail(j, hp__fail_errno(msg, sizeof(msg), j->root, -fd, "open", rel, strlen(rel)),
                      "%s", msg);
        return;
    }
    if (hp__fs_id_of(fd, &top) != 0 || fstat(fd, &st) != 0) {
        hp__fsop_fail(j, hp__fail_errno(msg, sizeof(msg), j->root, errno, "stat", rel, strlen(rel)),
                      "%s", msg);
        (void)close(fd);
        return;
    }
    if (j->rec.project_id) {
        int rc = usage_by_quota(j, fd, j->rec.project_id, msg, sizeof(msg));
        if (rc != 0) {
            if (rc < 0)
                hp__fsop_fail(j, rc, "%s", msg);
            (void)close(fd);
            return;
        }
    }
    count_inode(&u, &st);
    if (walk(&u, fd, &top, &j->abandoned) == -ECANCELED)
        hp__fsop_fail(j, -ECANCELED, "measuring %s was abandoned: the provisioner is stopping",
                      rel);
    j->used_bytes += u.bytes;
    j->used_inodes += u.inodes;
    j->visited += u.visited;
    free(u.links.v);
}
