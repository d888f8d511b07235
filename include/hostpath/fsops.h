/* fsops: the filesystem steps of provisioning and deletion, run synchronously on a request.
 *
 * Any thread (the hostpath module runs them on the libuv threadpool; unit tests call
 * hp_fsop_run directly). A request owns copies of its inputs and receives its results; running
 * it touches nothing but the request and the filesystem below its root.
 *
 * Every operation acts below one volume root (--pv-dir), reached one component at a time from a
 * directory descriptor without following symlinks (openat2 RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS,
 * else openat O_NOFOLLOW), and keeps the ownership journal (journal.h) of that root:
 *
 *  - PROVISION makes the directory in the journal's private staging area (where its mode and
 *    owner are set), records intent ("creating", with the new directory's inode), makes missing
 *    parents (recorded first), then renames it into place with RENAME_NOREPLACE: an existing
 *    directory is never taken over, chmod'ed or chown'ed. It records "created". A retry finds
 *    its own record and completes or accepts the work (same PV, same inode); a record that
 *    names another path than rec.path is refused (-EEXIST, msg naming both): the caller looks
 *    the record up before it renders a path, fsops only verifies. With adopt set it instead
 *    takes over a retained record's directory (reuseRetained), untouched.
 *  - CLEANUP undoes what a provisioning of this PV made when its PV was never created: only a
 *    directory whose record names this PV and whose inode matches, and only while it is empty
 *    (one that holds anything is retained: kept_in_use); an adopted one goes back to retained.
 *    A record that is not creating or created any more is left as it is (already_done).
 *  - RELEASE applies the on-delete action to a released volume's directory: only when the
 *    record names this PV and path and the root is still on the filesystem the record was made
 *    on. delete: "deleting", then remove (never following a symlink, never crossing a mount);
 *    retain: "retained"; archive: rename, "archived".
 *  - FORGET drops a record once its PV object is gone (after a delete).
 *  - MIGRATE records a volume made before the journal existed.
 *  - SCAN loads every record and counts directories under the root that no record accounts for.
 *  - USAGE measures a volume directory (rec.path): bytes used (st_blocks, each inode once) and
 *    inodes, never following a symlink nor crossing a mount; read-only. With rec.project_id
 *    (the ID its record names) and a directory that carries it, the quota's counters instead.
 *  - ROOTS reads the root's roots file and journals file (journal.h) into known_roots and
 *    known_journals and counts its record files (record_files); read-only unless
 *    write_roots / write_journals is given. SCAN reads both files too, and both write each
 *    write_ list there when it is given and differs (never making a journal for it).
 *  - LIMIT sets the hard limit of a volume's project to limit_bytes, online (expansion): only
 *    when the record names the PV and path, on the filesystem it was made on; a record without
 *    a project ID has no limit to change (already_done).
 *
 * Hard limits (project quotas, quota.h; docs/design.md "Project IDs"): a PROVISION with
 * hard_limits gets a project ID, written into its record ("creating") before anything carries
 * it; the directory is tagged with it (FS_XFLAG_PROJINHERIT: what is made inside inherits it)
 * once it is in place, and its hard block limit set to limit_bytes, before "created". A record
 * that names an ID is finished with it by any later attempt, whatever hard_limits says (unless
 * something else took the ID meanwhile: then a new one is recorded first). CLEANUP and RELEASE
 * clear the limit of a record's project before the record goes or is retained / archived (a
 * kept directory keeps its ID: its files carry it, and a reuseRetained claim takes it over). A
 * new ID is never one a directory carries or a limit is set for, nor one this process handed
 * out before, nor below quota_hint (the caller's highest recorded ID + 1).
 *
 * Lifetime: hp_fsop_new, hp_fsop_free (a request is plain memory: it frees at once).
 */
#ifndef HOSTPATH_FSOPS_H
#define HOSTPATH_FSOPS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "hostpath/journal.h"
#include "hostpath/policy.h"
#include "hostpath/quota.h"

#define HP_FSOP_MSG_LEN 1024
/* SCAN reports at most this many unrecorded paths by name (all are counted). */
#define HP_FSOP_MAX_UNRECORDED_NAMES 64

/* A volume root's filesystem, as statvfs saw it. */
struct hp_fs_stats {
    int ok;           /* statvfs answered */
    uint64_t size;    /* bytes */
    uint64_t free;    /* bytes available to unprivileged users */
    uint64_t files;   /* inodes */
    uint64_t files_free;
    int on_rootfs;    /* the root is on the filesystem of "/" */
    /* ext4 or XFS: one journal commits metadata changes in the order they were made, so an
     * fsync commits every rename and unlink made before it on the filesystem. */
    int ordered_meta;
};

/* A live PersistentVolume on this node that is not this provisioner's own (see others). */
struct hp_fsop_other {
    char *pv;
    char *path; /* its hostPath or local path, absolute, as written */
};

enum hp_fsop_kind {
    HP_FSOP_PROVISION,
    HP_FSOP_CLEANUP,
    HP_FSOP_RELEASE,
    HP_FSOP_FORGET,
    HP_FSOP_MIGRATE,
    HP_FSOP_SCAN,
    HP_FSOP_USAGE,
    HP_FSOP_ROOTS,
    HP_FSOP_LIMIT,
};

struct hp_fsop {
    enum hp_fsop_kind kind;
    char *root; /* absolute volume root */

    /* PROVISION, MIGRATE: the record to write (path, pv, claim, class, identity, on_delete).
     * CLEANUP, RELEASE, FORGET: rec.pv names the volume; RELEASE also needs rec.path (from the
     * PV), CLEANUP rec.claim_uid. */
    struct hp_record rec;
    /* PROVISION */
    mode_t mode;
    uid_t uid;
    gid_t gid;
    int set_owner;
    char *adopt; /* take over the retained record of this PV instead of making a directory */
    /* MIGRATE of a volume another provisioner made (--take-over): its directory must exist and
     * be a directory, and no other live PV may hold it (others); else nothing is recorded. */
    int takeover;
    /* PROVISION: create the root (and missing parents, 0755) when it does not exist; when
     * prev_mount_id (below) is set, only if its nearest existing ancestor is still on that
     * mount (a root removed by hand, made again: not on the mount point of an unmounted
     * disk; else -ENODEV and root_gone). */
    int create_root;
    /* RELEASE */
    enum hp_on_delete action;
    /* RELEASE: the filesystem the volume was made on; PROVISION: the one the root's journal
     * was read from (an unmounted disk shows its mount point's filesystem: -ENODEV). */
    int have_expect_fs;
    struct hp_fs_ident expect_fs;
    /* RELEASE by the orphan sweep: a "created" volume (its PV went without being released
     * here) is removed or archived only while its directory is empty; one that holds anything
     * is retained instead (kept_in_use): only a PV's own release proves its data may go. */
    int only_unused;
    /* SCAN: also remove leftovers only a crash leaves (temporary record files, staging
     * directories without a record): only when no operation can be running. */
    int clean_leftovers;
    /* PROVISION, CLEANUP, RELEASE (delete, archive): the live PersistentVolumes on this node
     * that are not this provisioner's own -- hand-made, other provisioners', other identities --
     * whose paths may reach a directory of ours by another spelling (a symlink, a bind mount, a
     * symlinked root). Just before anything is made, taken over, renamed or removed, each is
     * resolved on disk (pathid.h) and compared with the volume's directory: one that is it,
     * lies inside it or holds it stops the step with -EBUSY, msg naming it. A path that cannot
     * be resolved to its end counts as in use for everything under and above the deepest
     * directory it reached. A path that resolves to the root itself or a directory above it (an
     * administrator's view of every volume) holds none of them. hp_fsop_add_other fills it. */
    struct hp_fsop_other *others;
    size_t nothers;
    /* Optional: called on the worker thread right before each comparison with others, to
     * replace them (hp_fsop_clear_others, hp_fsop_add_other) with the node's other PVs as they
     * are then: a request may wait for a worker while a PV aliasing its directory is made. */
    void (*refresh_others)(struct hp_fsop *f, void *data);
    void *refresh_data;
    /* SCAN, ROOTS: the list of roots to write into the roots file (packed "a\0b\0\0"), and
     * the list of roots whose journal was seen to write into the journals file (journal.h), or
     * NULL to leave each as it is. Written only where the root has a journal. */
    char *write_roots;
    char *write_journals;
    /* SCAN: paths (relative) of live PersistentVolumes: their directories are not orphans. */
    char **live;
    size_t nlive;
    /* Hard limits (above). PROVISION: hard_limits asks for the volume's size, limit_bytes, to
     * be enforced; LIMIT: the new limit. SCAN: hard_limits asks for the root's filesystem to be
     * probed (quota_status). quota_hint: the lowest project ID a PROVISION may take (the
     * caller's highest recorded ID + 1, so that an ID recorded but not yet carried by its
     * directory is never handed out again). */
    int hard_limits;
    uint64_t limit_bytes;
    uint32_t quota_hint;
    /* In: the root's filesystem as probed before, a copy the request owns (NULL: probed when a
     * step needs it). Out: as the request probed it (kept by the request, freed with it). */
    struct hp_quota_fs *quota_fs;

    /* Results. status: 0 or a negative errno; msg: one line explaining a failure. */
    int status;
    unsigned nerrors;
    char msg[HP_FSOP_MSG_LEN];
    char *abs; /* the absolute path acted on (PROVISION: the volume's directory) */
    struct hp_record out; /* the record as it stands after the operation (if any) */
    int have_out;
    int adopted;      /* PROVISION took over a retained directory */
    int already_done; /* the operation had been completed by an earlier attempt */
    char *archived_abs; /* RELEASE archive: where the directory went */
    int kept_in_use;    /* RELEASE only_unused, CLEANUP: the directory held data and was
                           retained */
    /* SCAN, ROOTS: the roots file as read (packed), NULL when absent or empty; whether the
     * root has an ownership journal at all (an unmounted disk's mount point has none) */
    char *known_roots;
    char *known_journals; /* the journals file as read (packed), NULL when absent or empty */
    int journal_found;
    size_t record_files; /* ROOTS: record files in the journal (read or not) */
    /* SCAN (ROOTS counts nrecords only) */
    struct hp_record *records;
    size_t nrecords;
    size_t invalid_records; /* unreadable record files, named in msg (first one) */
    size_t unrecorded;      /* directories no record accounts for */
    char *unrecorded_names[HP_FSOP_MAX_UNRECORDED_NAMES];
    size_t n_unrecorded_names;
    struct hp_fs_ident fs; /* the root's filesystem (SCAN, RELEASE, PROVISION) */
    /* SCAN: the mount ID of the mount that holds the root (or, when it is missing, its
     * nearest existing ancestor), 0 when the kernel does not say; given prev_mount_id (the
     * one the root's filesystem was seen on, 0: none), whether that mount is gone from the
     * mount table: its disk was unmounted. PROVISION with create_root: prev_mount_id, see
     * there. */
    uint64_t mount_id, prev_mount_id;
    int prev_mount_gone;
    /* PROVISION: the root itself does not exist (and was not to be made) */
    int root_gone;
    struct hp_fs_stats stats; /* the root's size and room then (same operations, and USAGE) */
    /* SCAN with hard_limits: 0 when the root can enforce them, else the probe's -errno and
     * its reason (which says what to make or mount the filesystem with); caller frees. */
    int quota_status;
    char *quota_msg;
    /* USAGE: a volume whose record names a project ID its directory carries is read from the
     * quota (no walk: by_quota), its hard limit into limit_hard (0: none). */
    int by_quota;
    uint64_t limit_hard;
    /* USAGE */
    uint64_t used_bytes;
    uint64_t used_inodes;
    uint64_t visited; /* directory entries looked at: the work done */
    int abandoned;    /* hp_fsop_abandon: read by the walk, from another thread */
};

/* A zeroed request of kind for root (copied). */
struct hp_fsop *hp_fsop_new(enum hp_fsop_kind kind, const char *root);
/* Frees the request, its inputs and its results. */
void hp_fsop_free(struct hp_fsop *op);
/* Adds a PersistentVolume to op->others (copied). */
void hp_fsop_add_other(struct hp_fsop *op, const char *pv, const char *path);
/* Empties op's others (refresh_others). */
void hp_fsop_clear_others(struct hp_fsop *op);
/* Runs it; the results are in op. Blocks. */
void hp_fsop_run(struct hp_fsop *op);
/* Asks a USAGE walk that may be running on another thread to stop early: it ends with
 * -ECANCELED at its next directory entry (or at once, if it has not started). Other kinds
 * run to their end: a removal is never left half done. Safe from any thread while op lives. */
void hp_fsop_abandon(struct hp_fsop *op);

const char *hp_fsop_kind_name(enum hp_fsop_kind kind);

/* ---- for tests ---- */

/* Forgets the project IDs this process handed out, as a restart does. Not while a request
 * runs. */
void hp__quota_alloc_reset(void);

#endif
