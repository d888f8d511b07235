/* nodemap: the --config file -- which directories each node keeps volumes in, and how much.
 *
 * Any thread (pure parsing; hp_nodemap_load reads a file). The format is local-path-provisioner's
 * config.json (v0.0.37), so an existing ConfigMap can be mounted unchanged:
 *
 *   {"nodePathMap": [
 *      {"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES", "paths": ["/var/lib/hostpath-provisioner"]},
 *      {"node": "node-a", "paths": ["/mnt/ssd1", "/mnt/ssd2"],
 *       "capacity": {"/mnt/ssd1": "900Gi"},          (ours: a budget per path)
 *       "allowRootFilesystem": false,                 (ours: refuse paths on "/"'s filesystem;
 *                                                       also {"/mnt/ssd1": false} per path)
 *       "hardLimits": {"/mnt/ssd1": true}}]}         (ours: each volume's size enforced with
 *                                                       project quotas; also true for all)
 *   {"sharedFileSystemPath": "/mnt/nfs"}             one path mounted on every node: its
 *                                                     volumes have no node affinity
 *   {"storageClassConfigs": {                        per StorageClass, one of the two above
 *      "local-path": {"nodePathMap": [...]},          (with our keys in its entries too)
 *      "local-path-shared": {"sharedFileSystemPath": "/mnt/nfs"}}}
 *
 * Exactly one of nodePathMap, sharedFileSystemPath and storageClassConfigs is set at the top,
 * and one of nodePathMap and sharedFileSystemPath in each class ([], "", {} and null count as
 * not set, as len() == 0 does there). local-path-provisioner fails each provisioning of a class
 * with both or neither, and ignores the top level beside storageClassConfigs; here such a config
 * is refused when read. Keys are matched as its Go decoder matches them, ignoring ASCII case
 * ("sharedFilesystemPath", as its own fixture spells it). Paths are absolute, normalised, not
 * "/"; paths of one node (across classes too, shared paths included) are never one inside
 * another, and one directory named by two classes is one root (same capacity and options).
 *
 * An entry whose "paths" is [], null or missing keeps volumes off that node, as in
 * local-path-provisioner (its claims are refused and, per node, handed back to the scheduler).
 * A key given twice (JSON does not say which wins) is refused.
 *
 * Keys of local-path-provisioner's format that this provisioner does not implement
 * (setupCommand, teardownCommand, helperPod, cmdTimeoutSeconds ...) and any other unknown key
 * are refused with an error naming the key: silently ignoring them would change what a user's
 * config means.
 *
 * Lifetime: struct hp_nodemap is the caller's: hp_nodemap_parse / _load / _single fill it,
 * hp_nodemap_free empties it. A struct hp_node_entry from hp_nodemap_roots_for is the caller's:
 * hp_node_entry_free empties it.
 */
#ifndef HOSTPATH_NODEMAP_H
#define HOSTPATH_NODEMAP_H

#include <stddef.h>
#include <stdint.h>

#define HP_NODEMAP_DEFAULT_NODE "DEFAULT_PATH_FOR_NON_LISTED_NODES"

struct hp_node_path {
    char *path;      /* absolute, normalised (no trailing '/', no "." or ".." components) */
    uint64_t budget; /* bytes; 0 = the filesystem's size */
    int allow_rootfs; /* 0: refuse it when it is on the filesystem of "/" */
    int shared;       /* a sharedFileSystemPath: the same filesystem on every node */
    double overcommit; /* ours: how many times its budget claims may reserve (1: no more) */
    int hard_limits;   /* ours: every volume made there gets a hard limit of its size (project
                          quotas, quota.h); the path's filesystem must be able to enforce them */
};

struct hp_node_entry {
    char *node;
    struct hp_node_path *paths;
    size_t npaths; /* may be 0: no volumes on this node */
};

/* One StorageClass of storageClassConfigs. */
struct hp_class_config {
    char *name;
    struct hp_node_entry *entries; /* its nodePathMap, sorted by node; n == 0 when shared */
    size_t n;
    struct hp_node_path *shared; /* its sharedFileSystemPath, or NULL */
};

struct hp_nodemap {
    /* The top level: nodePathMap (sorted by node), or sharedFileSystemPath; both empty when
     * storageClassConfigs is used. */
    struct hp_node_entry *entries;
    size_t n;
    struct hp_node_path *shared;
    struct hp_class_config *classes; /* storageClassConfigs, sorted by name, or NULL */
    size_t nclasses;
    /* With storageClassConfigs: the keys of the top level that were set and are ignored, as
     * local-path-provisioner ignores them ("nodePathMap", "sharedFileSystemPath", or both in one
     * string; static), else NULL. */
    const char *ignored;
};

/* Parses a config. 0, or -EINVAL with a one-line reason (naming the key or path) in err. out is
 * left empty on failure. */
int hp_nodemap_parse(const char *text, size_t len, struct hp_nodemap *out, char *err,
                     size_t errlen);
/* Reads and parses file (at most 1 MiB). 0, or -errno / -EINVAL with the reason in err. */
int hp_nodemap_load(const char *file, struct hp_nodemap *out, char *err, size_t errlen);
void hp_nodemap_free(struct hp_nodemap *m);

/* The entry for node in the top-level nodePathMap (its own, else the default one), or NULL when
 * neither exists (also with sharedFileSystemPath or storageClassConfigs: hp_nodemap_roots_for
 * then). node may be NULL (no --node-name): the default entry. */
const struct hp_node_entry *hp_nodemap_for(const struct hp_nodemap *m, const char *node);

/* Every volume root node uses, whatever the class: the node's paths (its entry, else the
 * default one) of every class (in name order), or of the top level, and every shared path, each
 * once (the first time it is named; a shared one has .shared set). Copies: out is the caller's,
 * emptied with hp_node_entry_free. 0 (out->npaths may be 0: kept off the node everywhere), or
 * -ENOENT when no class (nor the top level) has an entry for the node, a default one or a shared
 * path (out is then empty). */
int hp_nodemap_roots_for(const struct hp_nodemap *m, const char *node, struct hp_node_entry *out);
void hp_node_entry_free(struct hp_node_entry *e);

/* The paths claims of StorageClass class_name may take on node (NULL: no --node-name): with
 * storageClassConfigs, that class's entry; else the top level. A shared path is the one path
 * whatever the node. *paths borrows from m. 0 (*npaths may be 0: the node is kept off), or
 * -ENOENT with the reason in err: the class is not in storageClassConfigs
 * (local-path-provisioner: "BUG: Got request for unexpected storage class"), or its map has no
 * entry for the node and no default one. */
int hp_nodemap_class_paths(const struct hp_nodemap *m, const char *class_name, const char *node,
                           const struct hp_node_path **paths, size_t *npaths, char *err,
                           size_t errlen);

/* 1 when the claims of class_name go to a shared path (no node affinity, any access mode, and
 * one instance -- the leader -- makes and removes their directories), 0 when to node paths,
 * -ENOENT when storageClassConfigs is used and does not list the class. */
int hp_nodemap_class_shared(const struct hp_nodemap *m, const char *class_name);

/* A map with one default entry holding pv_dir (no --config). */
void hp_nodemap_single(struct hp_nodemap *m, const char *pv_dir);

/* 1 when a and b describe the same paths, budgets and options for node, class by class (a
 * class listed in another order counts as a change). */
int hp_nodemap_same_for(const struct hp_nodemap *a, const struct hp_nodemap *b, const char *node);

#endif
