/* journal: the ownership journal -- one record per volume directory, stored under the volume
 * root so that it moves with the disk.
 *
 * Layout, below a volume root (--pv-dir):
 *     .hostpath-provisioner/records/<pv-name>   one record, "key=value" lines (cat-able)
 *     .hostpath-provisioner/staging/<pv-name>/  a volume directory being made (private)
 *     .hostpath-provisioner/parents/<hash>      a parent directory a pathPattern made (its path
 *                                               inside), removed with it once it is empty
 * A record binds one directory (its path relative to the root) to one PersistentVolume: PV name,
 * claim uid and namespace/name, class, the on-delete policy decided at provisioning, its state,
 * and the filesystem (device, fsid) and inode it was made with. Records are written
 * crash-consistently: temporary file, fsync, rename over the old one, fsync of the directory;
 * a change of state alone is made in place, inside one disk sector (src/journal.c says why
 * that is as safe).
 *
 * Any thread. The format functions are pure; the file functions block (threadpool only) and
 * act relative to directory descriptors, never following a symlink below the root.
 *
 * Lifetime: a struct hp_record is embedded by its owner; hp_record_free releases its strings.
 */
#ifndef HOSTPATH_JOURNAL_H
#define HOSTPATH_JOURNAL_H

#include <stddef.h>
#include <stdint.h>

#include "hostpath/buf.h"

#define HP_JOURNAL_DIR ".hostpath-provisioner"
#define HP_JOURNAL_VERSION 1
/* A temporary record file (a write's, before its rename) younger than this is in flight
 * (another thread of this process, or a replica sharing the disk, in a handover), not a crash's
 * leftover: hp_journal_list's clean_tmp leaves it for a later scan. */
#define HP_JOURNAL_TMP_STALE_S 600

/* What happens to a volume's directory when its PersistentVolume is released with reclaim
 * policy Delete (the StorageClass parameter onDelete). */
enum hp_on_delete { HP_ON_DELETE_DELETE, HP_ON_DELETE_RETAIN, HP_ON_DELETE_ARCHIVE };

enum hp_record_state {
    HP_REC_CREATING, /* intent: the directory is being made (staging or renamed into place) */
    HP_REC_CREATED,  /* the directory exists and belongs to the PV */
    HP_REC_DELETING, /* removal decided and started; the record goes once the PV object is gone */
    HP_REC_RETAINED, /* the PV is gone, the directory is kept (onDelete retain) */
    HP_REC_ARCHIVED, /* the PV is gone, the directory was renamed to archived_as */
};

/* One record. Strings are owned (hp_record_free frees them); absent optional strings are
 * NULL. */
struct hp_record {
    char *path;            /* relative to the root, validated (hp_volpath_validate) */
    char *pv;              /* PersistentVolume name, also the record's file name */
    char *claim_uid;
    char *claim_namespace;
    char *claim_name;
    char *class_name;
    char *identity;        /* --identity of the provisioner that made it */
    enum hp_on_delete on_delete;
    enum hp_record_state state;
    uint64_t dev;          /* st_dev of the root when the directory was made */
    uint64_t fsid;         /* statfs f_fsid of the root (0 when the filesystem has none) */
    uint64_t inode;        /* of the volume directory; 0 = unknown (a migrated volume) */
    char *parents;         /* packed list "a\0a/b\0\0" of ancestors this record made; or NULL */
    char *archived_as;     /* archived: the directory's path now */
    char *adopted_from;    /* the retained record this one took over (reuseRetained) */
    int migrated;          /* recorded at start from a PV made before the journal existed */
    /* The project quota ID the directory is tagged with (quota.h), 0 = none: recorded before
     * the directory is tagged, kept while anything may carry it (a retained or archived
     * directory's files do), gone with the record. "projectID" in the file. */
    uint32_t project_id;
    int64_t updated;       /* unix seconds of the last write */
    char *root;            /* in memory only: the volume root the record lives under (NULL in a
                              record read from a file; set by whoever read it) */
};

void hp_record_free(struct hp_record *r);
/* Deep copy into dst (which is overwritten, not freed). */
void hp_record_copy(struct hp_record *dst, const struct hp_record *src);

const char *hp_on_delete_name(enum hp_on_delete d);
/* "delete" | "retain" | "archive" -> 0, else -EINVAL. */
int hp_on_delete_parse(const char *s, enum hp_on_delete *out);
const char *hp_record_state_name(enum hp_record_state s);

/* The record as text (appended to out). 0, or -EINVAL when a required field is missing. */
int hp_record_format(const struct hp_record *r, struct hp_buf *out);
/* Parses a record; 0, or -EBADMSG with a reason in err. Unknown keys are ignored (a newer
 * version may add some); a missing required key, a bad value or a repeated key is an error. */
int hp_record_parse(const char *text, size_t len, struct hp_record *out, char *err,
                    size_t errlen);

/* A PV name usable as a record file name: 1..253 bytes of [a-z0-9.-], not starting with '.'. */
int hp_journal_valid_name(const char *pv);

/* ---- files (blocking) ---- */

/* Opens the journal directory below rootfd (creating it and its subdirectories, mode 0700,
 * when create is set). Returns an fd, or -errno (-ENOENT when it is missing and create is 0;
 * -ELOOP/-ENOTDIR when something else stands in its place). */
int hp_journal_open(int rootfd, int create);
/* Reads the record of pv: 0, -ENOENT, or -EBADMSG / -errno with a reason in err. */
int hp_journal_read(int jfd, const char *pv, struct hp_record *out, char *err, size_t errlen);
/* Flags of the writes below. */
enum {
    /* The records directory is not fsync'ed after the rename (or the unlink): the caller's next
     * fsync of a directory on the same filesystem commits it, as ext4 and XFS commit their
     * metadata in order (docs/design.md, "Journal cost"), or losing it is harmless. */
    HP_JOURNAL_NO_DIR_SYNC = 1,
    /* hp_journal_set_state: the new state is on disk when it returns (fdatasync). */
    HP_JOURNAL_SYNC = 2,
};

/* Writes (creates or replaces) r's record crash-consistently; sets r->updated. 0 or -errno with
 * a reason in err. */
int hp_journal_write(int jfd, struct hp_record *r, char *err, size_t errlen);
int hp_journal_write_flags(int jfd, struct hp_record *r, unsigned flags, char *err,
                           size_t errlen);
/* Changes the state of r's record to state (r->state and r->updated follow). In place when the
 * file is what r formats to (r as read or last written): one pwrite inside the file's first
 * sectors, fdatasync'ed with HP_JOURNAL_SYNC; a crash leaves the old or the new state. Else
 * written whole. 0 or -errno with a reason in err. */
int hp_journal_set_state(int jfd, struct hp_record *r, enum hp_record_state state,
                         unsigned flags, char *err, size_t errlen);
/* Removes pv's record (and fsyncs the directory unless HP_JOURNAL_NO_DIR_SYNC). 0 (also when
 * absent) or -errno. */
int hp_journal_remove(int jfd, const char *pv, unsigned flags);
/* Calls fn for every record file, in no particular order: status 0 with the parsed record
 * (borrowed for the call), or a negative errno with r NULL and a reason when the file could not
 * be read or parsed. Leftover temporary files are skipped (removed when clean_tmp is set and
 * they are older than HP_JOURNAL_TMP_STALE_S: a younger one may be a write in flight).
 * Returns 0 or -errno when the directory cannot be read. */
int hp_journal_list(int jfd, int clean_tmp,
                    void (*fn)(const char *name, int status, const struct hp_record *r,
                               const char *reason, void *data),
                    void *data);

/* The roots file, .hostpath-provisioner/roots: the volume roots this node uses, and those it
 * no longer uses that still hold records (retired), one absolute path per line ('#' starts a
 * comment). Written into the journal of every root, so that after a restart the volumes of a
 * root taken out of the configuration are still released as their records say. */
/* Reads it: 0 with a packed list in *packed ("a\0b\0\0", caller frees; NULL when the file is
 * absent or lists nothing), or -errno / -EBADMSG with the reason in err. */
int hp_journal_roots_read(int jfd, char **packed, char *err, size_t errlen);
/* Replaces it (crash-consistently) with the packed list. 0 or -errno with a reason. */
int hp_journal_roots_write(int jfd, const char *packed, char *err, size_t errlen);
/* Whether two packed lists (NULL: empty) name the same paths in the same order. */
int hp_journal_lists_equal(const char *a, const char *b);

/* The journals file, .hostpath-provisioner/journals: the volume roots of this node whose
 * ownership journal was seen, in the same format, written into the journal of every root. A
 * root listed there that shows no journal is a disk that is not mounted (the journal lives on
 * the disk, so only another root can tell): it takes no new volume until the journal is back.
 * Read and written like the roots file, except that a line that is not an absolute path is
 * left out of the read instead of failing it. */
int hp_journal_seen_read(int jfd, char **packed, char *err, size_t errlen);
int hp_journal_seen_write(int jfd, const char *packed, char *err, size_t errlen);

#endif
