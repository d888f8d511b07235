/* fs_parents: the parent directories a pathPattern made ("ns" of "ns/vol"). A room of the fsops
 * module (fsops_internal.h).
 *
 * Any thread; blocking. Such a directory is ours: a marker file in the journal's parents/
 * (named by a hash of the path, holding the path and a newline) says so. It is written before
 * the mkdir, and removed after the rmdir that takes the directory away once no volume is left
 * in it. Volumes share parents, so a marker belongs to no single record.
 */
#include "fsops_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "hostpath/volpath.h"

#define PARENTS_DIR "parents"

/* Parent directories are made (marked, then mkdir, then the volume renamed in) and removed
 * (rmdir when empty, then unmarked) by the threadpool's workers at once: these steps take this
 * lock, so that one worker never removes a parent another is about to use. */
static pthread_mutex_t parents_lock = PTHREAD_MUTEX_INITIALIZER;

void hp__parents_lock(void)
{
    (void)pthread_mutex_lock(&parents_lock);
}

void hp__parents_unlock(void)
{
    (void)pthread_mutex_unlock(&parents_lock);
}

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
    return hp__open_beneath(jfd, PARENTS_DIR, O_RDONLY | O_DIRECTORY, 1);
}

/* The path a marker file holds, whole (with its newline) and validated, into buf: 0, or -1
 * when it is unreadable, cut short or not a volume path. */
static int read_marker(int pfd, const char *name, char buf[HP_VOLPATH_MAX + 2])
{
    int fd = hp__open_journal_file(pfd, name);
    ssize_t n = fd >= 0 ? read(fd, buf, HP_VOLPATH_MAX + 1) : -1;

    if (fd >= 0)
        (void)close(fd);
    if (n <= 1 || buf[n - 1] != '\n')
        return -1;
    buf[n - 1] = '\0';
    return hp_volpath_validate(buf, NULL, 0) < 0 ? -1 : 0;
}

/* 1 when rel is marked as made by us. */
static int marked(int pfd, const char *rel)
{
    char name[32], buf[HP_VOLPATH_MAX + 2];
    int fd;
    ssize_t n;

    marker_name(rel, name);
    fd = hp__open_journal_file(pfd, name);
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

/* rmdir of the marked directory rel (never a removal of what is in it), then its marker named
 * name: 1 when the directory is gone (and so is the marker), 0 when it is kept (it holds
 * something, or cannot be reached). */
static int remove_marked(int rootfd, int pfd, const char *rel, const char *name)
{
    char leaf[NAME_MAX + 1];
    int dfd = hp__open_parent("", rootfd, rel, 0, leaf, NULL, 0), gone = dfd == -ENOENT;

    if (dfd >= 0) {
        gone = unlinkat(dfd, leaf, AT_REMOVEDIR) == 0 || errno == ENOENT;
        (void)close(dfd);
    }
    if (gone)
        (void)unlinkat(pfd, name, 0);
    return gone;
}

int hp__missing_parents(const char *root, int rootfd, const char *rel, char **out, char *msg,
                        size_t len)
{
    struct hp_buf b;
    const char *comp = rel;
    char name[NAME_MAX + 1];
    int dirfd = dup(rootfd), missing = 0, rc = 0;

    *out = NULL;
    if (dirfd < 0)
        return hp__fail_errno(msg, len, root, errno, "dup", "", 0);
    hp_buf_init(&b, 0);
    for (;;) {
        const char *slash = strchr(comp, '/');
        size_t n = slash ? (size_t)(slash - comp) : strlen(comp);
        size_t upto = (size_t)(comp - rel) + n;

        if (!slash)
            break;
        if (!missing) {
            hp__comp_name(name, comp, n);
            int fd = hp__open_beneath(dirfd, name, O_RDONLY | O_DIRECTORY, 0);
            if (fd == -ENOENT) {
                missing = 1;
            } else if (fd < 0) {
                rc = hp__explain_open_failure(root, dirfd, name, fd, rel, upto, "refusing", msg,
                                              len);
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
    if (rc == 0 && b.len) {
        (void)hp_buf_append(&b, "", 1);
        *out = hp_buf_steal(&b);
    }
    hp_buf_free(&b);
    return rc;
}

/* Writes the marker of every path of the packed list; fsyncs once. 0 or -errno. */
static int write_markers(int jfd, const char *list)
{
    int pfd = open_parents(jfd), rc = 0;

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

int hp__mark_parents(const char *root, const char *abs, int jfd, const char *list, char *msg,
                     size_t len)
{
    char eb[128];
    int rc;

    if (!list || !*list)
        return 0;
    rc = write_markers(jfd, list);
    if (rc < 0)
        return hp__err(msg, len, rc, "mark the parent directories of %s in %s/%s: %s", abs, root,
                       HP_JOURNAL_DIR, hp__errtext(-rc, eb, sizeof(eb)));
    return 0;
}

int hp__mark_missing_parents(const char *root, const char *abs, int rootfd, int jfd,
                             const char *rel, char *msg, size_t len)
{
    char *missing = NULL;
    int rc = hp__missing_parents(root, rootfd, rel, &missing, msg, len);

    if (rc == 0)
        rc = hp__mark_parents(root, abs, jfd, missing, msg, len);
    free(missing);
    return rc;
}

static void remove_empty_parents_locked(int rootfd, int jfd, const char *rel)
{
    char path[HP_VOLPATH_MAX + 1];
    int pfd = open_parents(jfd);

    if (pfd < 0)
        return;
    (void)snprintf(path, sizeof(path), "%s", rel);
    for (char *slash = strrchr(path, '/'); slash; slash = strrchr(path, '/')) {
        char name[32];
        *slash = '\0';
        if (!marked(pfd, path))
            break;
        marker_name(path, name);
        if (!remove_marked(rootfd, pfd, path, name))
            break; /* in use: kept, and so is everything above it */
    }
    (void)close(pfd);
}

void hp__remove_empty_parents(int rootfd, int jfd, const char *rel)
{
    hp__parents_lock();
    remove_empty_parents_locked(rootfd, jfd, rel);
    hp__parents_unlock();
}

void hp__parents_scan(int rootfd, int jfd, int clean,
                      int (*needed)(const char *rel, void *data),
                      void (*found)(const char *rel, void *data), void *data)
{
    DIR *d = hp__dir_of_fd(open_parents(jfd));
    struct dirent *de;

    if (!d)
        return;
    while ((de = readdir(d)) != NULL) {
        char buf[HP_VOLPATH_MAX + 2];
        if (de->d_name[0] == '.' || read_marker(dirfd(d), de->d_name, buf) < 0)
            continue;
        if (clean && !needed(buf, data) && remove_marked(rootfd, dirfd(d), buf, de->d_name))
            continue;
        found(buf, data);
    }
    (void)closedir(d);
}
