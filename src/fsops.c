/* fsops: the filesystem steps of provisioning and deletion, synchronous (see fsops.h). This
 * file holds the request (hp_fsop_new/free/run) and the kinds that make and take away a volume:
 * PROVISION, CLEANUP, RELEASE, FORGET and MIGRATE. The other kinds and the layers below are the
 * module's other rooms (fsops_internal.h).
 *
 * Any thread; blocking. A request touches only itself and the filesystem.
 *
 * Ownership: nothing is removed, renamed, chmod'ed or chown'ed unless the journal proves this
 * provisioner made it for that PV (record names the PV and the path, same filesystem, same
 * inode). A new volume directory is made in the journal's staging area and renamed into place
 * with RENAME_NOREPLACE, so a directory that already exists is never taken over.
 *
 * Hard limits: a project ID is recorded before anything carries it, the directory is tagged
 * only once it is in place (a rename into a parent with FS_XFLAG_PROJINHERIT of another project
 * would fail), and its limit is set before "created"; a limit is cleared before its record goes
 * or is retained / archived. Every step is idempotent, so a retry, the sweep or a restart
 * finishes or undoes what a crash cut short from the record alone.
 *
 * Errors: each kind's do_* function is the only one that records a failure into the request;
 * what it calls returns -errno with the reason in do_*'s message buffer.
 */
#include "fsops_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "hostpath/common.h"
#include "hostpath/crashpoint.h"
#include "hostpath/volpath.h"

/* ---- results ---- */

static void set_out(struct hp_fsop *j, const struct hp_record *r)
{
    if (j->have_out)
        hp_record_free(&j->out);
    hp_record_copy(&j->out, r);
    free(j->out.root);
    j->out.root = hp_xstrdup(j->root);
    j->have_out = 1;
}

/* Writes r and makes it the request's result. 0 or -errno with the reason. */
static int write_out(struct hp_fsop *j, int jfd, struct hp_record *r, char *msg, size_t len)
{
    int rc = hp_journal_write(jfd, r, msg, len);
    if (rc == 0)
        set_out(j, r);
    return rc;
}

/* The root is not on the filesystem the request expects (expect_fs): 1 after recording "<the
 * root> <root> is not on the filesystem <expected> (device ... now, ... then): <question>". */
static int wrong_fs(struct hp_fsop *j, int status, const char *the_root, const char *expected,
                    const char *question)
{
    if (!j->have_expect_fs || hp_policy_same_fs(&(struct hp_record){.dev = j->expect_fs.dev,
                                                                     .fsid = j->expect_fs.fsid},
                                                &j->fs))
        return 0;
    hp__fsop_fail(j, status, "%s %s is not on the filesystem %s (device %u:%u now, %u:%u then): %s",
                  the_root, j->root, expected, major((dev_t)j->fs.dev), minor((dev_t)j->fs.dev),
                  major((dev_t)j->expect_fs.dev), minor((dev_t)j->expect_fs.dev), question);
    return 1;
}

/* ---- staging ---- */

/* The staging directory of the PV: made (mode 0700) if missing, owner and mode set (it is ours:
 * nothing outside the journal can see it), opened without following a symlink. Its inode goes
 * to *ino. 0 or -errno with the reason. */
static int make_staging(const struct hp_fsop *j, int jfd, const char *pv, uint64_t *ino,
                        char *msg, size_t len)
{
    char name[NAME_MAX + 1], eb[128];
    struct stat st;
    int sfd = hp__open_beneath(jfd, HP_STAGING_DIR, O_RDONLY | O_DIRECTORY, 1), fd;

    if (sfd < 0)
        return hp__err(msg, len, sfd, "open %s/%s/%s: %s", j->root, HP_JOURNAL_DIR,
                       HP_STAGING_DIR, hp__errtext(-sfd, eb, sizeof(eb)));
    hp__comp_name(name, pv, strlen(pv));
    if (mkdirat(sfd, name, 0700) != 0 && errno != EEXIST) {
        int e = errno;
        (void)close(sfd);
        return hp__err(msg, len, -e, "mkdir %s/%s/%s/%s: %s", j->root, HP_JOURNAL_DIR,
                       HP_STAGING_DIR, name, hp__errtext(e, eb, sizeof(eb)));
    }
    fd = hp__open_beneath(sfd, name, O_RDONLY | O_DIRECTORY, 1);
    (void)close(sfd);
    if (fd < 0)
        return hp__err(msg, len, fd, "open %s/%s/%s/%s: %s", j->root, HP_JOURNAL_DIR,
                       HP_STAGING_DIR, name, hp__errtext(-fd, eb, sizeof(eb)));
    /* Owner first, then mode: chown may clear set-id bits. */
    const char *failed = j->set_owner && fchown(fd, j->uid, j->gid) != 0 ? "chown"
                         : fchmod(fd, j->mode & 07777) != 0               ? "chmod"
                         : fstat(fd, &st) != 0                            ? "stat"
                                                                          : NULL;
    int e = errno;
    (void)close(fd);
    if (failed)
        return hp__err(msg, len, -e, "%s the new volume directory of %s: %s", failed, pv,
                       hp__errtext(e, eb, sizeof(eb)));
    *ino = (uint64_t)st.st_ino;
    return 0;
}

/* rmdir of the PV's staging directory (private; empty unless a crash cut a provisioning short
 * before its rename, and then it is never removed recursively here). */
static void remove_staging(int jfd, const char *pv)
{
    int sfd = hp__open_beneath(jfd, HP_STAGING_DIR, O_RDONLY | O_DIRECTORY, 1);
    if (sfd >= 0) {
        (void)unlinkat(sfd, pv, AT_REMOVEDIR);
        (void)close(sfd);
    }
}

/* Removes what a refused provisioning made: the (empty, private) staging directory, the
 * parents it recorded if empty, and its record. */
static void undo_staging(int rootfd, int jfd, const struct hp_record *r)
{
    remove_staging(jfd, r->pv);
    hp__remove_empty_parents(rootfd, jfd, r->path);
    (void)hp_journal_remove(jfd, r->pv, 0);
}

/* ---- hard limits ---------------------------------------------------------------------------- */

/* The directory of r, in place: an fd (O_RDONLY|O_DIRECTORY), or -errno with the reason (-EEXIST
 * when another directory than the one recorded stands there). */
static int open_recorded(const struct hp_fsop *j, int rootfd, const struct hp_record *r,
                         char *msg, size_t len)
{
    char leaf[NAME_MAX + 1];
    struct stat st;
    int pfd = hp__open_parent(j->root, rootfd, r->path, 0, leaf, msg, len), fd;

    if (pfd < 0)
        return pfd;
    fd = hp__open_beneath(pfd, leaf, O_RDONLY | O_DIRECTORY, 1);
    (void)close(pfd);
    if (fd < 0)
        return hp__fail_errno(msg, len, j->root, -fd, "open", r->path, strlen(r->path));
    if (fstat(fd, &st) != 0) {
        int e = errno;
        (void)close(fd);
        return hp__fail_errno(msg, len, j->root, e, "stat", r->path, strlen(r->path));
    }
    if (r->inode && (uint64_t)st.st_ino != r->inode) {
        (void)close(fd);
        return hp__err(msg, len, -EEXIST, "%s is not the directory recorded for volume %s",
                       j->abs, r->pv);
    }
    return fd;
}

/* The hard limit of r's directory, which is in place: a project ID recorded first when r names
 * none (or something else took the one it names since), then the directory tagged, then its
 * limit set to limit_bytes. Nothing to do when r names no ID and hard_limits is off. 0 or -errno
 * with the reason. */
static int provision_quota(struct hp_fsop *j, int rootfd, int jfd, struct hp_record *r, char *msg,
                           size_t len)
{
    const struct hp_quota_fs *fs;
    uint32_t id = 0;
    int dfd, rc;

    if (!r->project_id && !j->hard_limits)
        return 0;
    if ((rc = hp__quota_fs(j, rootfd, &fs, msg, len)) < 0)
        return rc;
    if ((dfd = open_recorded(j, rootfd, r, msg, len)) < 0)
        return dfd;
    rc = r->project_id ? hp__quota_id_free_for(fs, dfd, r->project_id, msg, len) : 0;
    if (rc == 0 && (rc = hp__quota_alloc(fs, rootfd, j->quota_hint, &id, msg, len)) == 0) {
        r->project_id = id; /* recorded before the directory carries it */
        if ((rc = hp_journal_write(jfd, r, msg, len)) == 0)
            hp_crashpoint("provision-quota-recorded");
    }
    if (rc >= 0 && (rc = hp__quota_tag(dfd, r->project_id, msg, len)) == 0) {
        hp_crashpoint("provision-quota-tagged");
        /* A claim of no size still gets a limit (no limit would be none at all). */
        rc = hp__quota_limit(fs, rootfd, r->project_id, j->limit_bytes ? j->limit_bytes : 1,
                             msg, len);
        if (rc == 0)
            hp_crashpoint("provision-quota-limited");
    }
    (void)close(dfd);
    return rc < 0 ? rc : 0;
}

/* Clears the hard limit of r's project, if r names one, before its record goes or says the
 * directory is kept (crash point `point` after). A filesystem without project quotas (or a
 * kernel without quota support) has no limit to clear. 0 or -errno with the reason. */
static int clear_quota(struct hp_fsop *j, int rootfd, const struct hp_record *r,
                       const char *point, char *msg, size_t len)
{
    const struct hp_quota_fs *fs;
    int rc;

    if (!r->project_id)
        return 0;
    rc = hp__quota_fs(j, rootfd, &fs, msg, len);
    if (rc == -EOPNOTSUPP || rc == -ENOSYS)
        return 0;
    if (rc == 0)
        rc = hp__quota_limit(fs, rootfd, r->project_id, 0, msg, len);
    if (rc == 0)
        hp_crashpoint(point);
    return rc;
}

/* ---- PROVISION ------------------------------------------------------------------------------ */

/* The directory is in place (inode checked): its hard limit, then record "created". The state
 * is not fsync'ed: a record still "creating" whose directory is at its path with the recorded
 * inode is taken as created (provision_resume), which sets the limit again too, so the state
 * needs no fsync of its own; it changes in place, without a new file. 0 or -errno with the
 * reason. */
static int finish_created(struct hp_fsop *j, int rootfd, int jfd, struct hp_record *r, char *msg,
                          size_t len)
{
    int rc;

    if ((rc = provision_quota(j, rootfd, jfd, r, msg, len)) < 0)
        return rc;
    if (r->state != HP_REC_CREATED) {
        if ((rc = hp_journal_set_state(jfd, r, HP_REC_CREATED, 0, msg, len)) < 0)
            return rc;
        hp_crashpoint("provision-created");
    }
    set_out(j, r);
    return 0;
}

/* fsync of the directory a volume directory was renamed into: the rename (and, on ext4 and
 * XFS, the record's rename before it) is on disk before the PV names the directory. */
static int sync_placed(const struct hp_fsop *j, int pfd, const char *rel, char *msg, size_t len)
{
    if (fsync(pfd) == 0)
        return 0;
    return hp__fail_errno(msg, len, j->root, errno, "fsync the parent of", rel, strlen(rel));
}

/* The parents rel misses now, and those an earlier attempt recorded as made (they stay ours):
 * a packed list into r->parents. 0 or -errno with the reason. */
static int plan_parents(const struct hp_fsop *j, int rootfd, struct hp_record *r, char *msg,
                        size_t len)
{
    char *planned = NULL;
    int rc = hp__missing_parents(j->root, rootfd, r->path, &planned, msg, len);

    if (rc < 0)
        return rc;
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
    return 0;
}

/* Makes the parents (marked first) and renames the staged directory of r into place, under the
 * parents lock: a removal of empty parents (another volume's, on another worker) cannot take a
 * parent away in between, and a parent it took away since it was planned is marked again
 * before it is made again (never an unmarked parent of ours, which nothing would remove).
 * 0, or -errno with the reason; the staged directory's inode is ino. */
static int place_staged(const struct hp_fsop *j, int rootfd, int jfd, const struct hp_record *r,
                        uint64_t ino, char *msg, size_t len)
{
    char leaf[NAME_MAX + 1];
    uint64_t have = 0;
    int pfd, rc;

    hp__parents_lock();
    rc = hp__mark_missing_parents(j->root, j->abs, rootfd, jfd, r->path, msg, len);
    pfd = rc < 0 ? rc : hp__open_parent(j->root, rootfd, r->path, 1, leaf, msg, len);
    if (pfd >= 0) {
        int sfd = hp__open_beneath(jfd, HP_STAGING_DIR, O_RDONLY | O_DIRECTORY, 1);
        rc = sfd < 0 ? sfd : hp__rename_noreplace(sfd, r->pv, pfd, leaf);
        if (sfd >= 0)
            (void)close(sfd);
    }
    hp__parents_unlock();
    if (pfd < 0)
        return pfd;
    if (rc == -EEXIST || rc == -ENOTEMPTY) {
        if (hp__dir_inode(pfd, leaf, &have) == 0 && have == ino)
            rc = 0; /* it is ours: renamed by an earlier attempt that was cut short */
        else
            rc = hp__err(msg, len, -EEXIST,
                         "%s already exists and was not made for this volume; refusing to use or "
                         "change it (remove or rename it, or choose another pathPattern)",
                         j->abs);
    } else if (rc == -EXDEV) {
        rc = hp__err(msg, len, -EXDEV,
                     "%s would be on another filesystem than the volume root %s (a mount point "
                     "on the way); refusing",
                     j->abs, j->root);
    } else if (rc < 0) {
        rc = hp__fail_errno(msg, len, j->root, -rc, "rename into place", r->path,
                            strlen(r->path));
    }
    if (rc == 0)
        rc = sync_placed(j, pfd, r->path, msg, len);
    (void)close(pfd);
    return rc;
}

/* Makes (or resumes making) r's directory: staging, record, parents, rename into place. 0 or
 * -errno with the reason. */
static int provision_new(struct hp_fsop *j, int rootfd, int jfd, struct hp_record *r, char *msg,
                         size_t len)
{
    uint64_t ino = 0;
    int rc;

    if ((rc = make_staging(j, jfd, r->pv, &ino, msg, len)) < 0)
        return rc;
    hp_crashpoint("provision-staged");
    /* From here on, a failure removes what this attempt made (the private staging directory,
     * the parents it marked, its record): a claim that goes to another node or away must not
     * leave them behind until a restart (a full disk refuses the record, a read-only one the
     * rename). */
    if ((rc = plan_parents(j, rootfd, r, msg, len)) == 0) {
        r->inode = ino;
        r->state = HP_REC_CREATING;
        rc = hp__mark_parents(j->root, j->abs, jfd, r->parents, msg, len);
    }
    if (rc == 0 && j->hard_limits && !r->project_id) {
        /* The ID goes into the record that says "creating": no write of its own. */
        const struct hp_quota_fs *fs;
        if ((rc = hp__quota_fs(j, rootfd, &fs, msg, len)) == 0)
            rc = hp__quota_alloc(fs, rootfd, j->quota_hint, &r->project_id, msg, len);
    }
    /* The record's fsync puts its content on disk before the rename can be; the directory
     * fsync after the rename (place_staged) commits both renames on ext4 and XFS. */
    if (rc == 0 && (rc = hp_journal_write_flags(jfd, r,
                                                j->stats.ordered_meta ? HP_JOURNAL_NO_DIR_SYNC : 0,
                                                msg, len)) == 0) {
        hp_crashpoint("provision-recorded");
        rc = place_staged(j, rootfd, jfd, r, ino, msg, len);
    }
    if (rc < 0) {
        undo_staging(rootfd, jfd, r);
        return rc;
    }
    hp_crashpoint("provision-renamed");
    return finish_created(j, rootfd, jfd, r, msg, len);
}

/* A record for this PV exists: complete or accept the earlier attempt's work, when it was
 * begun for the same claim and path. 0 or -errno with the reason. */
static int provision_resume(struct hp_fsop *j, int rootfd, int jfd, struct hp_record *have,
                            char *msg, size_t len)
{
    char leaf[NAME_MAX + 1];
    uint64_t ino = 0;
    int pfd, rc;

    if (strcmp(have->claim_uid, j->rec.claim_uid) != 0)
        return hp__err(msg, len, -EEXIST, "the ownership record of %s names another claim (uid %s)",
                       have->pv, have->claim_uid);
    if (have->state != HP_REC_CREATING && have->state != HP_REC_CREATED)
        return hp__err(msg, len, -EEXIST, "volume %s is already %s", have->pv,
                       hp_record_state_name(have->state));
    if (strcmp(have->path, j->rec.path) != 0) {
        /* The path is rendered once, by the caller, which reads an earlier attempt's record
         * first: a record that names another path is a disagreement, never settled here. */
        char *was = hp_volpath_join(j->root, have->path);
        rc = hp__err(msg, len, -EEXIST,
                     "volume %s was begun at %s by an earlier attempt; not making %s", have->pv,
                     was, j->abs);
        free(was);
        return rc;
    }
    /* A record without an inode (migrated from a PV made before the journal) accepts the
     * directory at its path as it is. */
    pfd = hp__open_parent(j->root, rootfd, have->path, 0, leaf, msg, len);
    if (pfd < 0 && pfd != -ENOENT)
        return pfd;
    if (pfd >= 0) {
        rc = hp__dir_inode(pfd, leaf, &ino);
        if (rc == 0 && (have->inode == 0 || ino == have->inode)) {
            /* In place, maybe by a process that died before its fsync: synced now. */
            rc = have->state == HP_REC_CREATED ? 0 : sync_placed(j, pfd, have->path, msg, len);
            (void)close(pfd);
            if (rc < 0)
                return rc;
            j->already_done = have->state == HP_REC_CREATED;
            return finish_created(j, rootfd, jfd, have, msg, len);
        }
        (void)close(pfd);
        if (rc == 0 || rc == -ELOOP || rc == -ENOTDIR) {
            /* Something else stands there now: never ours. */
            if (have->state == HP_REC_CREATING)
                undo_staging(rootfd, jfd, have);
            return hp__err(msg, len, -EEXIST,
                           "%s already exists and is not the directory recorded for this volume; "
                           "refusing to use or change it",
                           j->abs);
        }
    }
    return provision_new(j, rootfd, jfd, have, msg, len); /* missing: made (again) */
}

/* Takes over the retained directory of the record j->adopt (reuseRetained). 0 or -errno with
 * the reason. */
static int provision_adopt(struct hp_fsop *j, int rootfd, int jfd, char *msg, size_t len)
{
    char err[HP_FSOP_MSG_LEN], leaf[NAME_MAX + 1];
    struct hp_record old, r;
    uint64_t ino = 0;
    int rc = hp_journal_read(jfd, j->adopt, &old, err, sizeof(err)), pfd;

    if (rc < 0)
        return hp__err(msg, len, rc, "cannot take over the retained volume %s: %s", j->adopt,
                       rc == -ENOENT ? "its record is gone" : err);
    if (!hp_policy_reuse_match(&old, j->rec.claim_namespace, j->rec.claim_name,
                               j->rec.class_name)) {
        rc = hp__err(msg, len, -EPERM,
                     "the record of %s is not a retained volume of claim %s/%s, class %s", old.pv,
                     j->rec.claim_namespace, j->rec.claim_name, j->rec.class_name);
        hp_record_free(&old);
        return rc;
    }
    free(j->abs);
    j->abs = hp_volpath_join(j->root, old.path);
    rc = pfd = hp__open_parent(j->root, rootfd, old.path, 0, leaf, msg, len);
    if (pfd >= 0) {
        rc = hp__dir_inode(pfd, leaf, &ino);
        (void)close(pfd);
        if (rc < 0)
            rc = hp__err(msg, len, rc, "the retained directory %s %s", j->abs,
                         rc == -ENOENT ? "is gone" : "is not a directory");
        else if (old.inode && ino != old.inode)
            rc = hp__err(msg, len, -EEXIST,
                         "%s is not the directory retained from %s (another inode)", j->abs,
                         old.pv);
    }
    if (rc < 0) {
        hp_record_free(&old);
        return rc;
    }
    hp_record_copy(&r, &j->rec);
    free(r.path);
    r.path = hp_xstrdup(old.path);
    free(r.parents);
    r.parents = old.parents; /* moved */
    old.parents = NULL;
    free(r.adopted_from);
    r.adopted_from = hp_xstrdup(old.pv);
    r.inode = ino;
    r.dev = old.dev;
    r.fsid = old.fsid;
    r.project_id = old.project_id; /* the retained files carry it: the new limit counts them */
    r.state = HP_REC_CREATED;
    if ((rc = hp_journal_write(jfd, &r, msg, len)) == 0) {
        hp_crashpoint("provision-adopted");
        (void)hp_journal_remove(jfd, old.pv, 0);
        j->adopted = 1;
        rc = provision_quota(j, rootfd, jfd, &r, msg, len);
        set_out(j, &r);
    }
    hp_record_free(&r);
    hp_record_free(&old);
    return rc;
}

/* Refuses what no volume directory may be: 1 after recording why. */
static int refuse_provision(struct hp_fsop *j)
{
    char err[HP_FSOP_MSG_LEN];
    size_t n = strlen(HP_JOURNAL_DIR);

    if (!hp_journal_valid_name(j->rec.pv) || !j->rec.claim_uid)
        hp__fsop_fail(j, -EINVAL, "refusing to provision: \"%s\" is not a volume name",
                      j->rec.pv ? j->rec.pv : "");
    else if (hp_volpath_validate(j->rec.path, err, sizeof(err)) < 0)
        hp__fsop_fail(j, -EINVAL, "refusing to create a volume directory: %s", err);
    else if (strncmp(j->rec.path, HP_JOURNAL_DIR, n) == 0 &&
             (j->rec.path[n] == '\0' || j->rec.path[n] == '/'))
        hp__fsop_fail(j, -EINVAL, "refusing to create a volume directory inside the journal %s",
                      HP_JOURNAL_DIR);
    return j->status != 0;
}

/* Whether another PV of this node holds rel (hp__held_by_other), the node's other PVs taken as
 * they are now when the request has a way to refresh them (fsops.h, refresh_others). */
static int held_by_other(struct hp_fsop *j, const char *rel, const char *doing, char *msg,
                         size_t len)
{
    if (j->refresh_others)
        j->refresh_others(j, j->refresh_data);
    return hp__held_by_other(j->root, j->others, j->nothers, rel, doing, msg, len);
}

static void do_provision(struct hp_fsop *j)
{
    char msg[HP_FSOP_MSG_LEN];
    struct hp_record have;
    int rootfd, jfd, rc;

    if (refuse_provision(j))
        return;
    if (j->create_root && j->prev_mount_id) {
        uint64_t now = hp__mount_id_of(j->root);
        if (now && now != j->prev_mount_id) {
            j->root_gone = 1;
            hp__fsop_fail(j, -ENODEV,
                          "the volume path %s was removed, and what lies below it is no longer "
                          "on the mount it was on: is its disk mounted? It is not made "
                          "elsewhere",
                          j->root);
            return;
        }
    }
    rootfd = hp__open_root_ident(j->root, j->create_root, &j->fs, &j->stats, msg, sizeof(msg));
    if (rootfd < 0) {
        j->root_gone = rootfd == -ENOENT && !j->create_root;
        hp__fsop_fail(j, rootfd, "%s", msg);
        return;
    }
    if (wrong_fs(j, -ENODEV, "the volume path", "its ownership journal was read from",
                 "is its disk mounted? No volume is made there meanwhile")) {
        (void)close(rootfd);
        return;
    }
    if ((jfd = hp__open_journal(j->root, rootfd, 1, msg, sizeof(msg))) < 0) {
        hp__fsop_fail(j, jfd, "%s", msg);
        (void)close(rootfd);
        return;
    }
    j->rec.dev = j->fs.dev;
    j->rec.fsid = j->fs.fsid;
    rc = hp_journal_read(jfd, j->rec.pv, &have, msg, sizeof(msg));
    if (rc == 0 || rc == -ENOENT) {
        int found = rc == 0;
        rc = held_by_other(j, found ? have.path : j->rec.path,
                           j->adopt && !found ? "taking over" : "making", msg, sizeof(msg));
        if (rc == 0)
            rc = found     ? provision_resume(j, rootfd, jfd, &have, msg, sizeof(msg))
                 : j->adopt ? provision_adopt(j, rootfd, jfd, msg, sizeof(msg))
                            : provision_new(j, rootfd, jfd, &j->rec, msg, sizeof(msg));
        if (found)
            hp_record_free(&have);
    }
    if (rc < 0)
        hp__fsop_fail(j, rc, "%s", msg);
    (void)close(jfd);
    (void)close(rootfd);
}

/* ---- CLEANUP, RELEASE, FORGET --------------------------------------------------------------- */

/* Opens root and journal for an operation on an existing record and reads it into r.
 * Returns 0 with both fds, or -errno with the reason. */
static int open_record(struct hp_fsop *j, int *rootfd, int *jfd, struct hp_record *r, char *msg,
                       size_t len)
{
    int rc;

    *rootfd = hp__open_root_ident(j->root, 0, &j->fs, &j->stats, msg, len);
    if (*rootfd < 0)
        return *rootfd;
    *jfd = hp__open_journal(j->root, *rootfd, 0, msg, len);
    if (*jfd < 0) {
        (void)close(*rootfd);
        return *jfd;
    }
    rc = hp_journal_read(*jfd, j->rec.pv, r, msg, len);
    if (rc == -ENOENT)
        rc = hp__err(msg, len, -ENOENT, "no ownership record for %s in %s/%s", j->rec.pv,
                     j->root, HP_JOURNAL_DIR);
    if (rc < 0) {
        (void)close(*jfd);
        (void)close(*rootfd);
    }
    return rc;
}

/* Renames the directory leaf (below pfd) to its archive name in the same parent; when that is
 * taken, appends a UTC timestamp (and a counter when even that is taken). The name is written
 * to the record (archivedAs) before the rename: a crash between the two leaves a record that
 * says where the directory went (archived_where_recorded), never data that no record owns.
 * 0 or -errno with the reason. */
static int archive_dir(struct hp_fsop *j, int jfd, int pfd, const char *leaf,
                       struct hp_record *r, char *msg, size_t len)
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
        /* The archived path must stay a valid record path too (HP_VOLPATH_MAX in all). */
        size_t dirlen = slash ? (size_t)(slash - r->path) + 1 : 0;
        size_t room = dirlen < HP_VOLPATH_MAX ? HP_VOLPATH_MAX - dirlen : 0;
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
        if ((rc = hp_journal_write(jfd, r, msg, len)) < 0)
            return rc;
        hp_crashpoint("release-archive-named");
        rc = hp__rename_noreplace(pfd, leaf, pfd, target);
    }
    if (rc < 0)
        return hp__err(msg, len, rc, "rename %s to %s: %s", j->abs, target,
                       hp__errtext(-rc, eb, sizeof(eb)));
    free(j->archived_abs);
    j->archived_abs = hp_volpath_join(j->root, r->archived_as);
    return 0;
}

/* r's directory is gone from its path: 1 when the record names the archive name it was being
 * renamed to and the directory is there (the rename happened, its record update did not). */
static int archived_where_recorded(struct hp_fsop *j, int rootfd, struct hp_record *r)
{
    char leaf[NAME_MAX + 1];
    uint64_t ino = 0;
    int pfd, rc;

    if (!r->archived_as || strcmp(r->archived_as, r->path) == 0)
        return 0;
    pfd = hp__open_parent(j->root, rootfd, r->archived_as, 0, leaf, NULL, 0);
    if (pfd < 0)
        return 0;
    rc = hp__dir_inode(pfd, leaf, &ino);
    (void)close(pfd);
    if (rc < 0 || (r->inode && ino != r->inode))
        return 0;
    free(j->archived_abs);
    j->archived_abs = hp_volpath_join(j->root, r->archived_as);
    return 1;
}

/* The directory of r: 0 with pfd/leaf when it is the one recorded (or the record predates
 * inodes), 1 when it is gone, -errno with the reason when something else stands there. */
static int recorded_dir(const struct hp_fsop *j, int rootfd, const struct hp_record *r, int *pfd,
                        char leaf[NAME_MAX + 1], char *msg, size_t len)
{
    uint64_t ino = 0;
    int rc;

    *pfd = hp__open_parent(j->root, rootfd, r->path, 0, leaf, msg, len);
    if (*pfd < 0)
        return *pfd == -ENOENT ? 1 : *pfd; /* a parent is gone, so the directory is too */
    rc = hp__dir_inode(*pfd, leaf, &ino);
    if (rc == -ENOENT)
        rc = 1;
    else if (rc == -ELOOP)
        rc = hp__err(msg, len, -ELOOP, "%s is a symlink, not a volume directory; it was left alone",
                     j->abs);
    else if (rc == -ENOTDIR)
        rc = hp__err(msg, len, -ENOTDIR, "%s is not a directory; it was left alone", j->abs);
    else if (rc < 0)
        rc = hp__fail_errno(msg, len, j->root, -rc, "stat", r->path, strlen(r->path));
    else if (r->inode && ino != r->inode)
        rc = hp__err(msg, len, -EPERM,
                     "%s is not the directory this volume was created with (inode %llu, recorded "
                     "%llu); it was left alone",
                     j->abs, (unsigned long long)ino, (unsigned long long)r->inode);
    if (rc != 0)
        (void)close(*pfd);
    return rc;
}

/* For the orphan sweep: 1 when the recorded directory of r holds any entry, 0 when it is
 * empty or gone, -errno with the reason when it cannot be told. */
static int recorded_dir_used(const struct hp_fsop *j, int rootfd, const struct hp_record *r,
                             char *msg, size_t len)
{
    char leaf[NAME_MAX + 1];
    struct dirent *de;
    int pfd, where = recorded_dir(j, rootfd, r, &pfd, leaf, msg, len), used = 0;

    if (where != 0)
        return where == 1 ? 0 : where;
    int fd = hp__open_beneath(pfd, leaf, O_RDONLY | O_DIRECTORY, 1);
    (void)close(pfd);
    DIR *d = fd < 0 ? NULL : hp__dir_of_fd(fd);
    if (!d)
        return hp__fail_errno(msg, len, j->root, fd < 0 ? -fd : errno, "open", r->path,
                              strlen(r->path));
    while (!used && (de = readdir(d)) != NULL)
        used = !hp__is_dot_or_dotdot(de->d_name);
    (void)closedir(d);
    return used;
}

static void do_cleanup(struct hp_fsop *j)
{
    char msg[HP_FSOP_MSG_LEN], leaf[NAME_MAX + 1];
    struct hp_record r;
    uint64_t ino = 0;
    unsigned n = 0;
    int rootfd, jfd, pfd, rc = open_record(j, &rootfd, &jfd, &r, msg, sizeof(msg));

    if (rc == -ENOENT) { /* nothing recorded, so nothing of ours to undo */
        j->already_done = 1;
        return;
    }
    if (rc < 0) {
        hp__fsop_fail(j, rc, "%s", msg);
        return;
    }
    free(j->abs);
    j->abs = hp_volpath_join(j->root, r.path);
    if (j->rec.claim_uid && strcmp(r.claim_uid, j->rec.claim_uid) != 0) {
        rc = hp__err(msg, sizeof(msg), -EPERM,
                     "the record of %s names another claim; nothing removed", r.pv);
    } else if (r.adopted_from) {
        /* A retained directory we took over: it goes back to being retained, untouched (but
         * for the limit its new claim gave it). */
        r.state = HP_REC_RETAINED;
        if ((rc = clear_quota(j, rootfd, &r, "cleanup-quota-cleared", msg, sizeof(msg))) == 0)
            rc = write_out(j, jfd, &r, msg, sizeof(msg));
    } else if (r.state != HP_REC_CREATING && r.state != HP_REC_CREATED) {
        /* Not half-made (any more): released, retained or archived meanwhile -- by another
         * replica, say, while the asker's copy of the journal lagged. Nothing to undo; the
         * record as it is goes back to the asker. */
        j->already_done = 1;
        set_out(j, &r);
    } else if ((rc = held_by_other(j, r.path, "removing", msg, sizeof(msg))) == 0 &&
               (rc = recorded_dir_used(j, rootfd, &r, msg, sizeof(msg))) != 0) {
        /* A volume that never had its PV never had a pod either: it is empty. One that holds
         * anything is not removed on this provisioning's word: kept, retained. */
        if (rc > 0) {
            r.state = HP_REC_RETAINED;
            rc = clear_quota(j, rootfd, &r, "cleanup-quota-cleared", msg, sizeof(msg));
            if (rc == 0 && (rc = write_out(j, jfd, &r, msg, sizeof(msg))) == 0)
                j->kept_in_use = 1;
        }
    } else if (rc == 0) {
        pfd = hp__open_parent(j->root, rootfd, r.path, 0, leaf, msg, sizeof(msg));
        if (pfd >= 0) {
            if (hp__dir_inode(pfd, leaf, &ino) == 0 && ino == r.inode)
                rc = hp__remove_tree(j->root, pfd, leaf, r.path, j->abs, &n, msg, sizeof(msg));
            (void)close(pfd);
        } else if (pfd != -ENOENT) { /* a parent gone means the directory is too */
            rc = pfd;
        }
        /* The limit goes before the record that names its ID. */
        if (rc == 0)
            rc = clear_quota(j, rootfd, &r, "cleanup-quota-cleared", msg, sizeof(msg));
        if (rc == 0)
            undo_staging(rootfd, jfd, &r);
    }
    if (rc < 0)
        hp__fsop_failed(j, rc, n, msg);
    hp_record_free(&r);
    (void)close(jfd);
    (void)close(rootfd);
}

/* RELEASE with archive: the directory renamed, the record "archived". */
static int release_archive(struct hp_fsop *j, int rootfd, int jfd, struct hp_record *r,
                           char *msg, size_t len)
{
    char leaf[NAME_MAX + 1];
    int pfd, rc = clear_quota(j, rootfd, r, "release-quota-cleared", msg, len);

    if (rc < 0)
        return rc;
    rc = recorded_dir(j, rootfd, r, &pfd, leaf, msg, len);

    if (rc == 0) {
        rc = archive_dir(j, jfd, pfd, leaf, r, msg, len);
        (void)close(pfd);
    } else if (rc == 1) {
        rc = 0;
        if (!archived_where_recorded(j, rootfd, r)) {
            free(r->archived_as);
            r->archived_as = hp_xstrdup(r->path); /* nothing left to archive */
        }
    }
    if (rc < 0)
        return rc;
    hp_crashpoint("release-archived");
    r->state = HP_REC_ARCHIVED;
    return write_out(j, jfd, r, msg, len);
}

/* RELEASE with delete: "deleting", then the directory removed. 0, or the first failure's
 * -errno with its reason (and *nfailed of them). */
static int release_delete(struct hp_fsop *j, int rootfd, int jfd, struct hp_record *r,
                          unsigned *nfailed, char *msg, size_t len)
{
    char leaf[NAME_MAX + 1];
    int pfd, rc;

    *nfailed = 0;
    if (r->state != HP_REC_DELETING) {
        /* "deleting" tells a reader what is under way; correctness does not need it (a retry or
         * the sweep finishes a removal from "created" just the same). On a full disk, where
         * deleting volumes is how space comes back, it is skipped. */
        rc = hp_journal_set_state(jfd, r, HP_REC_DELETING, HP_JOURNAL_SYNC, msg, len);
        if (rc < 0 && rc != -ENOSPC && rc != -EDQUOT)
            return rc;
        r->state = HP_REC_DELETING;
        hp_crashpoint("release-marked");
    }
    rc = recorded_dir(j, rootfd, r, &pfd, leaf, msg, len);
    if (rc == 0) {
        rc = hp__remove_tree(j->root, pfd, leaf, r->path, j->abs, nfailed, msg, len);
        (void)close(pfd);
    }
    if (rc < 0)
        return rc;
    hp_crashpoint("release-removed");
    /* Nothing carries the ID now (unless a removal failed, above): its limit goes too. */
    if ((rc = clear_quota(j, rootfd, r, "release-quota-cleared", msg, len)) < 0)
        return rc;
    hp__remove_empty_parents(rootfd, jfd, r->path);
    remove_staging(jfd, r->pv);
    set_out(j, r);
    return 0;
}

/* Why the record r may not be released as asked: -errno with the reason, 1 when it is
 * released already (the request is done), 0 when it may. */
static int release_refusal(struct hp_fsop *j, const struct hp_record *r, char *msg, size_t len)
{
    char err[HP_FSOP_MSG_LEN];

    if (hp_policy_check_record(r, j->rec.pv, j->rec.path ? j->rec.path : "", &j->fs, err,
                               sizeof(err)) < 0)
        return hp__err(msg, len, -EPERM, "%s; nothing was removed", err);
    if ((j->action == HP_ON_DELETE_RETAIN && r->state == HP_REC_RETAINED) ||
        (j->action == HP_ON_DELETE_ARCHIVE && r->state == HP_REC_ARCHIVED))
        return 1;
    if (r->state == HP_REC_RETAINED || r->state == HP_REC_ARCHIVED)
        return hp__err(msg, len, -EPERM, "volume %s is already %s; nothing removed", r->pv,
                       hp_record_state_name(r->state));
    if (j->action != HP_ON_DELETE_RETAIN)
        return held_by_other(j, r->path,
                             j->action == HP_ON_DELETE_ARCHIVE ? "archiving" : "removing", msg,
                             len);
    return 0;
}

static void do_release(struct hp_fsop *j)
{
    char msg[HP_FSOP_MSG_LEN];
    struct hp_record r;
    unsigned n = 0;
    int rootfd, jfd, rc;

    free(j->abs);
    j->abs = hp_volpath_join(j->root, j->rec.path ? j->rec.path : "");
    if ((rc = open_record(j, &rootfd, &jfd, &r, msg, sizeof(msg))) < 0) {
        hp__fsop_fail(j, rc, "%s", msg);
        return;
    }
    if (wrong_fs(j, -EPERM, "the volume root", "the volume was made on",
                 "is the right disk mounted?")) {
        /* recorded */
    } else if ((rc = release_refusal(j, &r, msg, sizeof(msg))) != 0) {
        if (rc == 1) {
            j->already_done = 1;
            set_out(j, &r);
            rc = 0;
        }
    } else if (j->only_unused && r.state == HP_REC_CREATED && j->action != HP_ON_DELETE_RETAIN &&
               (rc = recorded_dir_used(j, rootfd, &r, msg, sizeof(msg))) != 0) {
        if (rc > 0) { /* data nobody released: kept where it is, for an administrator */
            r.state = HP_REC_RETAINED;
            rc = clear_quota(j, rootfd, &r, "release-quota-cleared", msg, sizeof(msg));
            if (rc == 0 && (rc = write_out(j, jfd, &r, msg, sizeof(msg))) == 0)
                j->kept_in_use = 1;
        }
    } else if (j->action == HP_ON_DELETE_RETAIN) {
        /* Kept: no limit any more; its files keep the ID, and so does the record. */
        r.state = HP_REC_RETAINED;
        if ((rc = clear_quota(j, rootfd, &r, "release-quota-cleared", msg, sizeof(msg))) == 0)
            rc = write_out(j, jfd, &r, msg, sizeof(msg));
    } else if (j->action == HP_ON_DELETE_ARCHIVE) {
        rc = release_archive(j, rootfd, jfd, &r, msg, sizeof(msg));
    } else {
        rc = release_delete(j, rootfd, jfd, &r, &n, msg, sizeof(msg));
    }
    if (rc < 0)
        hp__fsop_failed(j, rc, n, msg);
    hp_record_free(&r);
    (void)close(jfd);
    (void)close(rootfd);
}

static void do_forget(struct hp_fsop *j)
{
    char msg[HP_FSOP_MSG_LEN], eb[128];
    int rootfd = hp__open_root(j->root, 0, msg, sizeof(msg)), jfd, rc;

    if (rootfd < 0) {
        hp__fsop_fail(j, rootfd, "%s", msg);
        return;
    }
    jfd = hp__open_journal(j->root, rootfd, 0, msg, sizeof(msg));
    if (jfd < 0) {
        hp__fsop_fail(j, jfd, "%s", msg);
        (void)close(rootfd);
        return;
    }
    remove_staging(jfd, j->rec.pv);
    /* Not fsync'ed: the PV object is gone, and a record that comes back after a crash names
     * a directory that is gone too: the orphan sweep forgets it again. */
    rc = hp_journal_remove(jfd, j->rec.pv, HP_JOURNAL_NO_DIR_SYNC);
    if (rc < 0)
        hp__fsop_fail(j, rc, "remove the ownership record of %s: %s", j->rec.pv,
                      hp__errtext(-rc, eb, sizeof(eb)));
    (void)close(jfd);
    (void)close(rootfd);
}

/* ---- LIMIT --------------------------------------------------------------------------------- */

static void do_limit(struct hp_fsop *j)
{
    char msg[HP_FSOP_MSG_LEN], err[HP_FSOP_MSG_LEN];
    const struct hp_quota_fs *fs;
    struct hp_record r;
    int rootfd, jfd, rc;

    free(j->abs);
    j->abs = hp_volpath_join(j->root, j->rec.path ? j->rec.path : "");
    if ((rc = open_record(j, &rootfd, &jfd, &r, msg, sizeof(msg))) < 0) {
        hp__fsop_fail(j, rc, "%s", msg);
        return;
    }
    if (wrong_fs(j, -EPERM, "the volume root", "the volume was made on",
                 "is the right disk mounted?")) {
        /* recorded */
    } else if (hp_policy_check_record(&r, j->rec.pv, j->rec.path ? j->rec.path : "", &j->fs,
                                      err, sizeof(err)) < 0) {
        rc = hp__err(msg, sizeof(msg), -EPERM, "%s; no limit changed", err);
    } else if (r.state != HP_REC_CREATED) {
        rc = hp__err(msg, sizeof(msg), -EPERM, "volume %s is %s; no limit changed", r.pv,
                     hp_record_state_name(r.state));
    } else if (!r.project_id) {
        j->already_done = 1; /* made without a hard limit: none to change */
        set_out(j, &r);
    } else if ((rc = hp__quota_fs(j, rootfd, &fs, msg, sizeof(msg))) == 0 &&
               (rc = hp__quota_limit(fs, rootfd, r.project_id, j->limit_bytes, msg,
                                     sizeof(msg))) == 0) {
        set_out(j, &r);
    }
    if (rc < 0)
        hp__fsop_fail(j, rc, "%s", msg);
    hp_record_free(&r);
    (void)close(jfd);
    (void)close(rootfd);
}

/* ---- MIGRATE ------------------------------------------------------------------------------- */

/* Records j->rec for a volume whose directory (if any) is at its path, found with inode ino. */
static int migrate_record(struct hp_fsop *j, int rootfd, int jfd, char *msg, size_t len)
{
    char leaf[NAME_MAX + 1];
    uint64_t ino = 0;
    int pfd = hp__open_parent(j->root, rootfd, j->rec.path, 0, leaf, msg, len), rc;

    if (pfd < 0 && pfd != -ENOENT)
        return pfd;
    if (pfd == -ENOENT && j->takeover) /* a parent is missing: so is the directory */
        return hp__err(msg, len, -ENOENT, "%s does not exist; not taking it over", j->abs);
    if (pfd >= 0) {
        rc = hp__dir_inode(pfd, leaf, &ino);
        (void)close(pfd);
        if (rc == -ELOOP || rc == -ENOTDIR)
            return hp__err(msg, len, rc, "%s is %s, not a volume directory; not recording it",
                           j->abs, rc == -ELOOP ? "a symlink" : "not a directory");
        if (rc == -ENOENT && j->takeover)
            return hp__err(msg, len, rc, "%s does not exist; not taking it over", j->abs);
    }
    /* Another provisioner's volume (--take-over): not when another live PV holds it. */
    if (j->takeover && (rc = held_by_other(j, j->rec.path, "taking over", msg, len)) != 0)
        return rc;
    j->rec.dev = j->fs.dev;
    j->rec.fsid = j->fs.fsid;
    j->rec.inode = ino;
    j->rec.migrated = 1;
    return write_out(j, jfd, &j->rec, msg, len);
}

static void do_migrate(struct hp_fsop *j)
{
    char msg[HP_FSOP_MSG_LEN];
    struct hp_record have;
    int rootfd, jfd, rc;

    if (!hp_journal_valid_name(j->rec.pv) || hp_volpath_validate(j->rec.path, NULL, 0) < 0) {
        hp__fsop_fail(j, -EINVAL, "cannot record %s: not a volume name or path below the root",
                      j->rec.pv ? j->rec.pv : "");
        return;
    }
    free(j->abs);
    j->abs = hp_volpath_join(j->root, j->rec.path);
    rootfd = hp__open_root_ident(j->root, 0, &j->fs, &j->stats, msg, sizeof(msg));
    if (rootfd < 0) {
        hp__fsop_fail(j, rootfd, "%s", msg);
        return;
    }
    if ((jfd = hp__open_journal(j->root, rootfd, 1, msg, sizeof(msg))) < 0) {
        hp__fsop_fail(j, jfd, "%s", msg);
        (void)close(rootfd);
        return;
    }
    rc = hp_journal_read(jfd, j->rec.pv, &have, msg, sizeof(msg));
    if (rc == 0) {
        j->already_done = 1;
        set_out(j, &have);
        hp_record_free(&have);
    } else if (rc == -ENOENT) {
        rc = migrate_record(j, rootfd, jfd, msg, sizeof(msg));
    }
    if (rc < 0)
        hp__fsop_fail(j, rc, "%s", msg);
    (void)close(jfd);
    (void)close(rootfd);
}

/* ---- requests ------------------------------------------------------------------------------ */

static const char *const kind_names[] = {"provision", "cleanup", "release", "forget", "migrate",
                                         "scan",      "usage",   "roots",   "limit"};

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
    free(op->write_journals);
    free(op->known_journals);
    free(op->quota_fs);
    free(op->quota_msg);
    hp_fsop_clear_others(op);
    free(op->others);
    free(op);
}

void hp_fsop_clear_others(struct hp_fsop *op)
{
    for (size_t i = 0; i < op->nothers; i++) {
        free(op->others[i].pv);
        free(op->others[i].path);
    }
    op->nothers = 0;
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
        hp__fsop_scan(op);
        break;
    case HP_FSOP_USAGE:
        hp__fsop_usage(op);
        break;
    case HP_FSOP_ROOTS:
        hp__fsop_roots(op);
        break;
    case HP_FSOP_LIMIT:
        do_limit(op);
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
