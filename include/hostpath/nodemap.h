/* nodemap: the --config file -- which directories each node keeps volumes in, and how much.
 *
 * Any thread (pure parsing; hp_nodemap_load reads a file). The format is local-path-provisioner's
 * config.json, so an existing ConfigMap can be mounted unchanged:
 *
 *   {"nodePathMap": [
 *      {"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES", "paths": ["/var/lib/hostpath-provisioner"]},
 *      {"node": "node-a", "paths": ["/mnt/ssd1", "/mnt/ssd2"],
 *       "capacity": {"/mnt/ssd1": "900Gi"},          (ours: a budget per path)
 *       "allowRootFilesystem": false}]}               (ours: refuse paths on "/"'s filesystem;
 *                                                       also {"/mnt/ssd1": false} per path)
 *
 * An entry whose "paths" is [], null or missing keeps volumes off that node, as in
 * local-path-provisioner (its claims are refused and, per node, handed back to the scheduler).
 * A key given twice (JSON does not say which wins) is refused.
 *
 * Keys of local-path-provisioner's format that this provisioner does not implement
 * (sharedFileSystemPath, setupCommand, teardownCommand, helperPod, storageClassConfigs ...) and
 * any other unknown key are refused with an error naming the key: silently ignoring them would
 * change what a user's config means.
 *
 * Lifetime: struct hp_nodemap is the caller's: hp_nodemap_parse / _load / _single fill it,
 * hp_nodemap_free empties it.
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
};

struct hp_node_entry {
    char *node;
    struct hp_node_path *paths;
    size_t npaths; /* may be 0: no volumes on this node */
};

struct hp_nodemap {
    struct hp_node_entry *entries;
    size_t n;
};

/* Parses a config. 0, or -EINVAL with a one-line reason (naming the key or path) in err. out is
 * left empty on failure. */
int hp_nodemap_parse(const char *text, size_t len, struct hp_nodemap *out, char *err,
                     size_t errlen);
/* Reads and parses file (at most 1 MiB). 0, or -errno / -EINVAL with the reason in err. */
int hp_nodemap_load(const char *file, struct hp_nodemap *out, char *err, size_t errlen);
void hp_nodemap_free(struct hp_nodemap *m);

/* The entry for node (its own, else the default one), or NULL when neither exists. node may be
 * NULL (no --node-name): the default entry. */
const struct hp_node_entry *hp_nodemap_for(const struct hp_nodemap *m, const char *node);

/* A map with one default entry holding pv_dir (no --config). */
void hp_nodemap_single(struct hp_nodemap *m, const char *pv_dir);

/* 1 when a and b describe the same paths, budgets and options for node. */
int hp_nodemap_same_for(const struct hp_nodemap *a, const struct hp_nodemap *b, const char *node);

#endif
