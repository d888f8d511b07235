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

enum hp_hard_limits { HP_HARD_LIMITS_OPTIONAL = 0, HP_HARD_LIMITS_REQUIRED };

struct hp_class_params {
    const char *path_pattern; /* borrowed from the class (or the default pattern) */
    mode_t mode;
    uid_t uid;
    gid_t gid;
    int set_owner; /* uid or gid given */
    enum hp_on_delete on_delete;
    int reuse_retained; /* reuseRetained: "true" */
    const char *node_path; /* nodePath: the one path of the node's list to use, or NULL */
    /* local-path-provisioner's (v0.0.33 to v0.0.37), read as it reads them: */
    const char *node_affinity_key; /* nodeAffinityKey ("" or absent: kubernetes.io/hostname) */
    /* userPattern, groupPattern, permPattern: the parameter when the class has it (even ""),
     * else the class's annotation of that name, else NULL. Borrowed from the class. Rendered
     * per claim by hp_policy_dir_attrs. */
    const char *user_pattern;
    const char *group_pattern;
    const char *perm_pattern;
    /* allowUnsafePathPattern (parameter, else annotation): render pathPattern with
     * HP_PATTERN_UNSAFE (pathpattern.h). */
    int allow_unsafe_path;
    /* hardLimits (ours): "required" places the class's volumes only on paths that enforce each
     * volume's size (hardLimits in --config); "optional" (the default) anywhere. A path that
     * enforces does so for every volume placed there, whatever the class says. */
    enum hp_hard_limits hard_limits;
};

/* Parses a class's packed parameters (no annotation fallbacks: hp_policy_class_params_of). 0, or
 * -EINVAL with a one-line reason (naming the parameter and the accepted values) in err.
 *
 * Accepted: pathPattern, mode, uid, gid, onDelete, reuseRetained, nodePath, hardLimits
 * (required | optional) (ours), and
 * nodeAffinityKey (a node label key: [DNS subdomain/]name), userPattern, groupPattern,
 * permPattern (templates, checked when rendered), allowUnsafePathPattern (Go's
 * strconv.ParseBool: 1 t T TRUE true True 0 f F FALSE false False; local-path-provisioner
 * takes anything else for false with a warning, we refuse it). uid with userPattern, gid with
 * groupPattern, mode with permPattern (from a parameter or an annotation) are refused: two
 * answers to one question. Any other parameter is refused by name. */
int hp_policy_class_params(const char *packed, struct hp_class_params *p, char *err,
                           size_t errlen);
/* The same for a decoded class, with local-path-provisioner's annotation fallbacks: userPattern,
 * groupPattern, permPattern, allowUnsafePathPattern from cls->annotations when the parameter is
 * absent (its provisioner.go lines 413-430, 457-489). pathPattern and nodeAffinityKey are
 * parameters only, as there. p borrows from cls. */
int hp_policy_class_params_of(const struct hp_class *cls, struct hp_class_params *p, char *err,
                              size_t errlen);

/* The annotation and label keys the claims of a class must keep (objects.h hp_claim_filter):
 * those its pathPattern and its userPattern, groupPattern, permPattern read, appended to the
 * buffers as packed lists ("a\0b\0" and a final "\0"), as hp_pathpattern_keys appends. */
struct hp_buf;
void hp_policy_class_keys(const struct hp_class_params *p, struct hp_buf *ann_keys,
                          struct hp_buf *label_keys);

/* ---- one claim's volume ---- */

/* The directory's mode and owner for claim cl (PV pv_name): mode, uid, gid of the class, or
 * what its permPattern, userPattern, groupPattern render to for this claim (pathpattern.h:
 * hp_pathpattern_mode, hp_pathpattern_id). uid / gid (uid_t)-1: left as made; set_owner: uid or
 * gid is set (fchown then). 0, or -EINVAL / -ENAMETOOLONG with a one-line reason for a
 * ProvisioningFailed event (a missing key, a non-number, a mode beyond 07777). */
struct hp_dir_attrs {
    mode_t mode;
    uid_t uid;
    gid_t gid;
    int set_owner;
};
int hp_policy_dir_attrs(const struct hp_class_params *p, const struct hp_claim *cl,
                        const char *pv_name, struct hp_dir_attrs *out, char *err, size_t errlen);

enum hp_volume_type {
    HP_VOLUME_HOSTPATH = 0, /* spec.hostPath, type DirectoryOrCreate */
    HP_VOLUME_LOCAL,        /* spec.local, with required node affinity */
};
/* "hostPath" | "local". */
const char *hp_volume_type_name(enum hp_volume_type t);

/* The kind of PV for claim cl of class cls (NULL: none known), as local-path-provisioner decides
 * it (provisioner.go 505-518, createPersistentVolumeSource 952-977): the claim's annotation
 * volumeType when present (even ""), else the class's annotation defaultVolumeType when present,
 * else hostPath; "local" or "hostPath" in any case. 0 and *out, or -EINVAL with a reason naming
 * the value and where it was read. */
int hp_policy_volume_type(const struct hp_claim *cl, const struct hp_class *cls,
                          enum hp_volume_type *out, char *err, size_t errlen);

/* The node affinity of the PV (hp_pv_spec affinity_key / affinity_value, objects.h), as
 * local-path-provisioner writes it (provisioner.go 520-553), where that is safe:
 * - shared (the claim's class is on a sharedFileSystemPath, nodemap.h): no affinity (*key and
 *   *value NULL); a local volume there is refused (a local PV must have node affinity);
 * - node NULL or "" (no selected node, no --node-name): no affinity for a hostPath volume, as
 *   before; refused for a local volume or a class with its own nodeAffinityKey;
 * - else key p->node_affinity_key, value label_value: that label of the node, read by the
 *   caller from the Node object (NULL when the node has no such label, or the Node was not
 *   read). With kubernetes.io/hostname, NULL means the node's name (local-path-provisioner's
 *   fallback too). With another key, NULL is refused (-ENOENT): local-path-provisioner writes
 *   the node's name under that key, a PV no pod can then be scheduled with. An empty label
 *   value is refused as well.
 * 0, or -EINVAL / -ENOENT with a one-line reason. *key and *value borrow from p, node and
 * label_value. */
int hp_policy_node_affinity(const struct hp_class_params *p, enum hp_volume_type type, int shared,
                            const char *node, const char *label_value, const char **key,
                            const char **value, char *err, size_t errlen);

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
    int shared;              /* the claim's class goes to a shared path (sharedFileSystemPath):
                                the leader's alone, whatever node was selected */
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
