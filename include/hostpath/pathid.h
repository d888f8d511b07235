/* pathid: what a path names on disk, so that two spellings of one directory compare equal.
 *
 * A path's identity is its filesystem (the major:minor of the mount it is on, as
 * /proc/self/mountinfo gives it) and its path inside that filesystem, from the filesystem's own
 * root: symlinks are resolved as the kernel resolves them when a pod mounts the path, and a bind
 * mount is mapped back to the directory it shows. So /srv/link/x (link -> /var/lib/x), /mnt/b/x
 * (a bind mount of /var/lib) and /var/lib/x give one key, "8:1:/var/lib/x". A directory has
 * exactly one path inside its filesystem (no hard links to directories), so equal keys are one
 * directory, and a key that extends another at a '/' lies inside it; the key compares the
 * device and every ancestor at once, which a (device, inode) pair of the directory alone cannot.
 *
 * Components that do not exist (a hostPath of type DirectoryOrCreate that the kubelet has not
 * made yet, a dangling symlink's target) are kept as written after the last one that exists:
 * that is where they will be made. A component that cannot be looked at (permission, a symlink
 * loop, a file in the middle of the path) stops the resolution: the key is then the deepest
 * directory reached, and a caller treats the path as in use for everything under and above it.
 *
 * Any thread; the resolving functions block (lstat, readlink, the mount table): threadpool
 * only. Paths are resolved in this process's mount namespace: in a pod, a path that only the
 * node sees cannot be resolved beyond what the pod mounts.
 *
 * Lifetime: hp_mounts_load / hp_mounts_parse return a table, hp_mounts_free frees it.
 */
#ifndef HOSTPATH_PATHID_H
#define HOSTPATH_PATHID_H

#include <stddef.h>

/* Longest key: "4294967295:4294967295:" and a path of PATH_MAX. */
#define HP_PATHID_MAX 4200

/* A snapshot of a mount table (/proc/self/mountinfo). */
struct hp_mounts;

/* Reads /proc/self/mountinfo. 0 and the table in *out, or -errno (*out NULL). */
int hp_mounts_load(struct hp_mounts **out);
/* Parses mountinfo text (for tests). Lines that cannot be parsed are skipped. 0, or -EINVAL
 * when no line could be. */
int hp_mounts_parse(const char *text, size_t len, struct hp_mounts **out);
void hp_mounts_free(struct hp_mounts *m);
size_t hp_mounts_count(const struct hp_mounts *m);

/* The key of an absolute, symlink-free path that exists or would be made there (its existing
 * part already resolved): the visible mount whose mount point is the longest prefix -- the last
 * one mounted, so an over-mount hides what lies below it -- and the path's rest inside it.
 * A path no mount covers (a chroot whose root is not a mount point) has the key "0:0:<path>".
 * 0, or -ENAMETOOLONG. */
int hp_mounts_key(const struct hp_mounts *m, const char *canon, char *out, size_t len);

/* Resolves abs (an absolute path) to its key in out (HP_PATHID_MAX bytes fit any).
 *   0   resolved: out is the identity of abs;
 *   1   not resolved to the end: out is the key of the deepest directory reached, and err says
 *       which component stopped it and why (EACCES, ELOOP, a file where a directory must be);
 *  <0   -EINVAL (not absolute, a NUL-free string is assumed), -ENAMETOOLONG, or an error of the
 *       mount table (-ENOENT), with err filled.
 * m may be NULL: the table is read for this call. */
int hp_pathid_resolve(const struct hp_mounts *m, const char *abs, char *out, size_t len,
                      char *err, size_t errlen);

/* How key a stands to key b: HP_PATH_EQUAL, HP_PATH_INSIDE (a lies inside b), HP_PATH_CONTAINS
 * (b lies inside a), or 0 when they are unrelated (another filesystem, or side by side). The
 * values are policy.h's enum hp_path_relation. */
int hp_pathid_relation(const char *a, const char *b);

/* The first two of paths[0..n) that are one directory, or one inside the other, on disk (each
 * resolved as hp_pathid_resolve does; one that resolves only part way is compared by what
 * resolved): 1 with *a < *b their indexes and *rel the relation of paths[*a] to paths[*b]; 0
 * when none do; -errno with err filled when the mount table cannot be read or a path is not
 * absolute. */
int hp_pathid_overlap(const char *const *paths, size_t n, size_t *a, size_t *b, int *rel,
                      char *err, size_t errlen);

#endif
