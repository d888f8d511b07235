/* policy: the provisioner's decisions, as pure functions.
 *
 * Any thread, no state, no I/O. Serve this claim? With which class parameters? Which on-delete
 * policy does a released volume get, and on whose word? Do two volume paths collide? May this
 * record's directory be acted on? What does the orphan sweep do with a record? The controller
 * only sequences the steps these answers call for; tests/unit/test_policy.c holds the tables.
 *
 * Lifetime: pure functions, no objects.
 */
#ifndef HOSTPATH_POLICY_H
#define HOSTPATH_POLICY_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "hostpath/journal.h"

struct hp_claim;
struct hp_class;

/* ---- StorageClass parameters ---- */

struct hp_class_params {
    const char *path_pattern; /* borrowed from the class (or the default pattern) */
    mode_t mode;
    uid_t uid;
    gid_t gid;
    int set_owner; /* uid or gid given */
    enum hp_on_delete on_delete;
    int reuse_retained; /* reuseRetained: "true" */
    const char *node_path; /* nodePath: the one path of the node's list to use, or NULL */
};

/* Parses a class's packed parameters. 0, or -EINVAL with a one-line reason (naming the
 * parameter and the accepted values) in err. */
int hp_policy_class_params(const char *packed, struct hp_class_params *p, char *err,
                           size_t errlen);

/* ---- placement ---- */

/* One volume root a claim may be placed on, as the loop knows it. */
struct hp_place_path {
    const char *path;
    uint64_t budget;   /* the config's capacity budget; 0 = the filesystem's size */
    uint64_t reserved; /* capacities of live volumes on it, and of provisionings in flight */
    int stats_known;   /* fs_size and fs_free are known */
    uint64_t fs_size, fs_free;
    const char *excluded; /* why it may not take volumes now (NULL: it may) */
};

/* The room of a path: min(budget - reserved, free bytes), budget defaulting to the filesystem's
 * size (unknown sizes do not limit). */
uint64_t hp_policy_room(const struct hp_place_path *p);

/* Chooses, among paths[0..n), the one with the most room that fits need bytes (ties: the first).
 * Returns its index, or -ENOSPC with a one-line reason naming the numbers of every path
 * ("needs 4Gi; /mnt/ssd1 has 1.2Gi left of its 900Gi budget; /mnt/ssd2 has 512Mi free") in
 * why, or -ENOENT when n is 0. */
int hp_policy_place(const struct hp_place_path *paths, size_t n, uint64_t need, char *why,
                    size_t whylen);

/* ---- serving claims ---- */

struct hp_serve_env {
    const char *provisioner; /* --provisioner-name */
    const char *node_name;   /* --node-name or NULL */
    int leading;             /* leader, or the only instance */
};

/* Why the claim is not ours to provision now, or NULL when it is. cls is the claim's class
 * from the store (NULL when not found). */
const char *hp_policy_skip_claim(const struct hp_claim *cl, const struct hp_class *cls,
                                 const struct hp_serve_env *env);

/* ---- the on-delete decision of a released volume ---- */

enum hp_policy_source {
    HP_POLICY_FROM_ANNOTATION, /* the PV's HP_ANN_ON_DELETE */
    HP_POLICY_FROM_JOURNAL,    /* the volume's record */
    HP_POLICY_FROM_CLASS,      /* the StorageClass, still present (a PV of an earlier version) */
    HP_POLICY_FROM_DEFAULT,    /* nothing says: retain */
    HP_POLICY_FROM_INVALID,    /* the annotation says something we do not know: retain */
};

/* annotation: the PV's HP_ANN_ON_DELETE value or NULL; rec: its record or NULL; cls: the
 * parameters of its class when the class exists and parses, else NULL. The annotation wins;
 * an unreadable annotation is not trusted (retain). */
enum hp_on_delete hp_policy_on_delete(const char *annotation, const struct hp_record *rec,
                                      const struct hp_class_params *cls,
                                      enum hp_policy_source *source);
const char *hp_policy_source_name(enum hp_policy_source s);

/* ---- paths ---- */

enum hp_path_relation {
    HP_PATH_DISJOINT = 0,
    HP_PATH_EQUAL,    /* a and b are the same directory */
    HP_PATH_CONTAINS, /* b lies inside a */
    HP_PATH_INSIDE,   /* a lies inside b */
};

/* Relation of two relative paths (both validated), component-wise: "a" contains "a/b" but
 * not "ab". */
enum hp_path_relation hp_policy_path_relation(const char *a, const char *b);
/* "is", "contains", "lies inside" for messages. */
const char *hp_policy_relation_words(enum hp_path_relation r);

/* ---- acting on a record's directory ---- */

/* The filesystem the root is on now. */
struct hp_fs_ident {
    uint64_t dev;
    uint64_t fsid;
};

/* 1 when a record made on `made` may be acted on while the root is on `now`: same device, or
 * (after a device renumbering, e.g. a reboot) the same non-zero filesystem id. */
int hp_policy_same_fs(const struct hp_record *made, const struct hp_fs_ident *now);

/* May the release or removal of the directory of PV pv at rel proceed on this record?
 * 0, or -EPERM with the reason (record names another path, another filesystem ...) in err. */
int hp_policy_check_record(const struct hp_record *rec, const char *pv, const char *rel,
                           const struct hp_fs_ident *now, char *err, size_t errlen);

/* ---- reuse of a retained directory (StorageClass reuseRetained) ---- */

/* 1 when rec is a retained directory the claim ns/name of class cls may take over. */
int hp_policy_reuse_match(const struct hp_record *rec, const char *ns, const char *name,
                          const char *cls);

/* 1 when paths a and b name the same directory lexically ("/mnt/ssd1/" and "/mnt//ssd1" do;
 * "." components are skipped, ".." is compared as a name): a class's nodePath against the
 * node's normalised paths. */
int hp_policy_same_path(const char *a, const char *b);

/* ---- the orphan sweep ---- */

enum hp_sweep_action {
    HP_SWEEP_KEEP,    /* nothing to do */
    HP_SWEEP_DELETE,  /* remove the directory and the record */
    HP_SWEEP_RETAIN,  /* keep the directory, mark the record retained */
    HP_SWEEP_ARCHIVE, /* archive the directory, mark the record archived */
};

struct hp_sweep_facts {
    const char *identity; /* ours */
    int pv_exists;        /* a PV of that name is in the store */
    int claim_exists;     /* the record's claim (same uid) is in the store */
    int in_flight;        /* an operation of ours is working on that PV now */
    int path_in_use;      /* another live PV's directory is, holds or lies inside this one */
    int64_t now;          /* unix seconds */
    int64_t grace_s;      /* how old a record must be before it is settled */
};

enum hp_sweep_action hp_policy_sweep(const struct hp_record *rec, const struct hp_sweep_facts *f);

/* ---- archiving ---- */

/* The name a directory named leaf is archived as: "archived-<leaf><suffix>", or, when that
 * would exceed NAME_MAX, "archived-<head of leaf>-<16 hex digits of a hash of leaf><suffix>"
 * (deterministic, so a retry picks the same name). suffix ("" or "-<stamp>[-n]") is kept
 * whole. 0, or -ENAMETOOLONG when even the short form does not fit outlen / NAME_MAX. */
int hp_policy_archive_name(const char *leaf, const char *suffix, char *out, size_t outlen);

#endif
