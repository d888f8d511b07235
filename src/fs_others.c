/* fs_others: whether another PersistentVolume of this node holds a directory of ours, compared
 * by what the paths are on disk, not by how they are spelled (fsops.h, others). A room of the
 * fsops module (fsops_internal.h).
 *
 * Any thread; blocking (reads the mount table, resolves paths).
 */
#include "fsops_internal.h"

#include <errno.h>

#include "hostpath/pathid.h"
#include "hostpath/volpath.h"

int hp__held_by_other(const char *root, const struct hp_fsop_other *others, size_t n,
                      const char *rel, const char *doing, char *msg, size_t len)
{
    char rootkey[HP_PATHID_MAX], dirkey[HP_PATHID_MAX + HP_VOLPATH_MAX], key[HP_PATHID_MAX];
    char why[512], eb[128];
    struct hp_mounts *m = NULL;
    int rc, found = 0;

    if (!n)
        return 0;
    if ((rc = hp_mounts_load(&m)) < 0)
        return hp__err(msg, len, rc,
                       "not %s %s/%s: cannot read this process's mount table to compare it with "
                       "the %zu other PersistentVolumes of this node: %s",
                       doing, root, rel, n, hp__errtext(-rc, eb, sizeof(eb)));
    rc = hp_pathid_resolve(m, root, rootkey, sizeof(rootkey), why, sizeof(why));
    if (rc != 0) {
        hp_mounts_free(m);
        return hp__err(msg, len, rc < 0 ? rc : -EIO,
                       "not %s %s/%s: cannot tell what the volume root is on disk: %s", doing,
                       root, rel, why);
    }
    size_t rl = strlen(rootkey);
    (void)snprintf(dirkey, sizeof(dirkey), "%s%s%s", rootkey,
                   rl && rootkey[rl - 1] == '/' ? "" : "/", rel);
    for (size_t i = 0; i < n && !found; i++) {
        const struct hp_fsop_other *o = &others[i];
        why[0] = '\0';
        rc = hp_pathid_resolve(m, o->path, key, sizeof(key), why, sizeof(why));
        if (rc < 0)
            continue; /* not an absolute path: the API server never lets such a PV be */
        int holds_root = hp_pathid_relation(key, rootkey);
        if (rc == 0 && (holds_root == HP_PATH_EQUAL || holds_root == HP_PATH_CONTAINS))
            continue; /* the root or above: a view of every volume, not one of them */
        int r = hp_pathid_relation(dirkey, key);
        if (r == HP_PATH_DISJOINT)
            continue;
        found = 1;
        if (rc == 0)
            (void)hp__err(msg, len, -EBUSY,
                          "not %s %s/%s: it %s the directory of PersistentVolume %s (path %s), "
                          "which is in use",
                          doing, root, rel, hp_policy_relation_words((enum hp_path_relation)r),
                          o->pv, o->path);
        else
            (void)hp__err(msg, len, -EBUSY,
                          "not %s %s/%s: PersistentVolume %s has the path %s, which cannot be "
                          "resolved on this node (%s), so it counts as in use for everything "
                          "under and above where it stops",
                          doing, root, rel, o->pv, o->path, why);
    }
    hp_mounts_free(m);
    return found ? -EBUSY : 0;
}
