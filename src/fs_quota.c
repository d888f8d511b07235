/* fs_quota: project quotas of volume directories (quota.h) -- the root's filesystem probed, a
 * project ID handed out, a directory tagged with it, a project's hard limit set or cleared. A
 * room of the fsops module (fsops_internal.h); fsops.c sequences these steps with the journal
 * (docs/design.md "Project IDs").
 *
 * Any thread; blocking. The one piece of state: per filesystem, the next ID this process may
 * hand out, under a mutex, so that two workers never get one ID and an ID handed out once is
 * never handed out again by this process (whether its record reached the loop or not).
 */
#include "fsops_internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/stat.h>

/* Candidates looked at before giving up: IDs above the highest recorded one are free unless an
 * administrator's projects sit there. */
#define ALLOC_TRIES 65536u

struct next_id {
    dev_t dev;
    uint32_t next;
};

static pthread_mutex_t alloc_lock = PTHREAD_MUTEX_INITIALIZER;
static struct next_id *next_ids; /* one per filesystem seen, never shrinks */
static size_t n_next_ids;

int hp__quota_fs(struct hp_fsop *j, int rootfd, const struct hp_quota_fs **fs, char *msg,
                 size_t len)
{
    struct stat st;
    int rc;

    if (fstat(rootfd, &st) != 0)
        return hp__fail_errno(msg, len, j->root, errno, "stat", "", 0);
    if (j->quota_fs && j->quota_fs->dev == st.st_dev &&
        (j->quota_fs->kind == HP_QUOTA_XFS || j->quota_fs->kind == HP_QUOTA_EXT4)) {
        *fs = j->quota_fs;
        return 0;
    }
    if (!j->quota_fs)
        j->quota_fs = hp_xmalloc(sizeof(*j->quota_fs));
    rc = hp_quota_probe(rootfd, j->root, j->quota_fs, msg, len);
    if (rc < 0)
        return rc;
    *fs = j->quota_fs;
    return 0;
}

/* The slot of filesystem dev (made when missing); alloc_lock held. */
static struct next_id *next_of(dev_t dev)
{
    for (size_t i = 0; i < n_next_ids; i++)
        if (next_ids[i].dev == dev)
            return &next_ids[i];
    next_ids = hp_xrealloc(next_ids, (n_next_ids + 1) * sizeof(*next_ids));
    next_ids[n_next_ids] = (struct next_id){dev, HP_QUOTA_ID_FIRST};
    return &next_ids[n_next_ids++];
}

int hp__quota_alloc(const struct hp_quota_fs *fs, int fd, uint32_t hint, uint32_t *id,
                    char *msg, size_t len)
{
    char err[HP_FSOP_MSG_LEN];
    uint32_t c, first;
    int rc = 0, busy = 1;

    (void)pthread_mutex_lock(&alloc_lock);
    struct next_id *n = next_of(fs->dev);
    first = c = hint > n->next ? hint : n->next;
    for (unsigned tries = 0; tries < ALLOC_TRIES && c <= HP_QUOTA_ID_MAX && c >= first;
         tries++, c++) {
        if ((rc = hp_quota_id_in_use(fs, fd, c, &busy, err, sizeof(err))) < 0 || !busy)
            break;
    }
    if (rc == 0 && !busy) {
        n->next = c + 1; /* never handed out again by this process */
        *id = c;
    }
    (void)pthread_mutex_unlock(&alloc_lock);
    if (rc < 0)
        return hp__err(msg, len, rc, "no project ID for a hard limit: %s", err);
    if (busy)
        return hp__err(msg, len, -ENOSPC,
                       "no free project ID for a hard limit on %s at %s: %u to %u are all in use "
                       "(other projects of this filesystem?)",
                       fs->fstype, fs->mountpoint[0] ? fs->mountpoint : "?", first, c - 1);
    return 0;
}

void hp__quota_alloc_reset(void)
{
    (void)pthread_mutex_lock(&alloc_lock);
    free(next_ids);
    next_ids = NULL;
    n_next_ids = 0;
    (void)pthread_mutex_unlock(&alloc_lock);
}

int hp__quota_id_free_for(const struct hp_quota_fs *fs, int dirfd, uint32_t id, char *msg,
                          size_t len)
{
    char err[HP_FSOP_MSG_LEN];
    uint32_t have = 0;
    int busy = 1, rc = hp_quota_get_project(dirfd, &have, NULL, err, sizeof(err));

    if (rc == 0 && have == id)
        return 1;
    if (rc == 0)
        rc = hp_quota_id_in_use(fs, dirfd, id, &busy, err, sizeof(err));
    if (rc < 0)
        return hp__err(msg, len, rc, "%s", err);
    return !busy;
}

int hp__quota_tag(int dirfd, uint32_t id, char *msg, size_t len)
{
    char err[HP_FSOP_MSG_LEN];
    uint32_t have = 0;
    int inherit = 0, rc = hp_quota_get_project(dirfd, &have, &inherit, err, sizeof(err));

    if (rc == 0 && have == id && inherit)
        return 0;
    if (rc == 0)
        rc = hp_quota_set_project(dirfd, id, err, sizeof(err));
    return rc < 0 ? hp__err(msg, len, rc, "%s", err) : 0;
}

int hp__quota_limit(const struct hp_quota_fs *fs, int fd, uint32_t id, uint64_t bytes,
                    char *msg, size_t len)
{
    char err[HP_FSOP_MSG_LEN];
    int rc = hp_quota_set_limit(fs, fd, id, bytes, 0, err, sizeof(err));

    return rc < 0 ? hp__err(msg, len, rc, "%s", err) : 0;
}
