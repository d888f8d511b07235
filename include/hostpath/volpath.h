/* volpath: a volume's path -- relative to its volume root everywhere but in two places: the
 * PersistentVolume's spec.hostPath.path, and messages.
 *
 * This module is the one place a relative volume path is checked and converted to and from the
 * absolute form: the journal (paths it reads), fsops (paths it acts on), the volume index (paths
 * of several roots in one index), pathpattern (a rendered path) and the controller (hostPath of
 * a PV made or read) use it, and nobody joins or splits a volume path by hand. A root is
 * absolute and normalised (no trailing '/', no "." or ".." components: config.c and nodemap.c
 * make them so).
 *
 * Any thread (pure).
 *
 * Lifetime: pure functions, no objects.
 */
#ifndef HOSTPATH_VOLPATH_H
#define HOSTPATH_VOLPATH_H

#include <stddef.h>

/* The longest relative volume path, and one component of it, in bytes. */
#define HP_VOLPATH_MAX 4096
#define HP_VOLPATH_NAME_MAX 255

/* Checks that rel is a safe relative path: not empty, not absolute, no empty, "." or ".."
 * component, no control character, at most HP_VOLPATH_MAX bytes and HP_VOLPATH_NAME_MAX per
 * component. 0, or -EINVAL / -ENAMETOOLONG (a length over a limit) with a one-line reason in err
 * (which quotes at most the first HP_QUOTE_MAX bytes of the path, control characters replaced). */
int hp_volpath_validate(const char *rel, char *err, size_t errlen);

/* root/rel (root "/" gives "/rel"). Caller frees (free). */
char *hp_volpath_join(const char *root, const char *rel);

/* The path of abs relative to root: 0 and rel filled when abs lies strictly inside root
 * (component by component, lexically; repeated and trailing slashes and "." components allowed,
 * ".." refused) and the rest is a valid volume path (hp_volpath_validate); else -EINVAL, or
 * -ENAMETOOLONG when it does not fit len. */
int hp_volpath_relative(const char *root, const char *abs, char *rel, size_t len);

#endif
