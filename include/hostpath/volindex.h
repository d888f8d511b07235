/* volindex: the loop's view of which directories under the volume root are taken, and by whom.
 *
 * Loop thread only. Three sources claim a path (absolute: a root joined with the path relative
 * to it by hp_volpath_join, so that the volumes of several roots share one index; the index only
 * compares paths component by component, so a consistent relative form works as well):
 *   - records of the ownership journal (a record's path; an archived record's archivedAs),
 *   - live PersistentVolumes on this node whose hostPath lies under the root, of any identity,
 *   - reservations of provisionings in flight (taken before the filesystem work starts, so two
 *     claims rendering colliding paths cannot both pass the check).
 * A new volume's path must not equal, contain or lie inside any path another volume holds; the
 * index answers that in O(depth of the path) with a hash of paths and a hash of their
 * ancestors. It also keeps a copy of every record (the delete policy and filesystem of a volume,
 * the retained directories a re-created claim may take over).
 *
 * Lifetime: hp_volindex_new, hp_volindex_free (no handle: frees at once).
 */
#ifndef HOSTPATH_VOLINDEX_H
#define HOSTPATH_VOLINDEX_H

#include <stddef.h>
#include <stdint.h>

#include "hostpath/journal.h"
#include "hostpath/policy.h"

enum hp_volindex_source {
    HP_SRC_RECORD = 1 << 0,
    HP_SRC_VOLUME = 1 << 1,
    HP_SRC_RESERVED = 1 << 2,
};

struct hp_volindex;

struct hp_volindex *hp_volindex_new(void);
void hp_volindex_free(struct hp_volindex *x);

/* ---- records ---- */

/* Adds or replaces the record of r->pv (copied). */
void hp_volindex_put_record(struct hp_volindex *x, const struct hp_record *r);
void hp_volindex_remove_record(struct hp_volindex *x, const char *pv);
/* Borrowed until the record is next replaced or removed; NULL when none. */
const struct hp_record *hp_volindex_record(const struct hp_volindex *x, const char *pv);
/* Merges a fresh read of the journal of volume root `root` (the records' root; NULL for records
 * without one), recs[0..n), begun at unix time `since`: a record read is taken unless the index
 * holds a newer one (written by an operation that finished meanwhile); a record of that root the
 * read did not see is dropped unless it was written at or after `since`. */
void hp_volindex_merge_records(struct hp_volindex *x, const char *root,
                               const struct hp_record *recs, size_t n, int64_t since);
size_t hp_volindex_nrecords(const struct hp_volindex *x);
void hp_volindex_foreach_record(const struct hp_volindex *x,
                                void (*fn)(const struct hp_record *r, void *data), void *data);
/* Calls fn for every record naming the claim ns/name (records of a re-created claim of that
 * name too), in no particular order. fn may change the index. */
void hp_volindex_foreach_claim_record(const struct hp_volindex *x, const char *ns,
                                      const char *name,
                                      void (*fn)(const struct hp_record *r, void *data),
                                      void *data);
/* The newest retained record the claim ns/name of class cls may take over, or NULL. */
const struct hp_record *hp_volindex_find_retained(const struct hp_volindex *x, const char *ns,
                                                  const char *name, const char *cls);

/* ---- live volumes and reservations ---- */

/* owner holds rel through src (HP_SRC_VOLUME or HP_SRC_RESERVED); rel NULL drops it. A
 * volume's path changing (it never does in Kubernetes) is handled by drop + add. */
void hp_volindex_hold(struct hp_volindex *x, unsigned src, const char *owner, const char *rel);
void hp_volindex_release(struct hp_volindex *x, unsigned src, const char *owner);

/* ---- queries ---- */

struct hp_volindex_conflict {
    enum hp_path_relation relation; /* of the new path to the other one */
    char other_path[512];
    char other_owner[256];
    unsigned sources; /* HP_SRC_* of the other owner on that path */
};

/* 1 when rel equals, contains or lies inside a path held by an owner other than `owner` and
 * `also` (may be NULL: a retained volume being taken over), with details in *c; else 0. */
int hp_volindex_conflict(const struct hp_volindex *x, const char *rel, const char *owner,
                         const char *also, struct hp_volindex_conflict *c);
/* As hp_volindex_conflict, counting only live PersistentVolumes (HP_SRC_VOLUME) other than
 * `owner`: is a directory (or one above or below it) another PV's volume right now? */
int hp_volindex_volume_conflict(const struct hp_volindex *x, const char *rel, const char *owner,
                                struct hp_volindex_conflict *c);

/* Consistency check for tests: 0 when every invariant holds. */
int hp_volindex_validate(const struct hp_volindex *x);

#endif
