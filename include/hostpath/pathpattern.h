/* pathpattern: render a StorageClass pathPattern into a relative path under --pv-dir, and
 * local-path-provisioner's value patterns (userPattern, groupPattern, permPattern) into an owner
 * and a mode.
 *
 * Any thread (pure). Templates use Go-template field syntax: {{.PVName}}, {{.PVC.Namespace}},
 * {{.PVC.Name}}, {{.PVC.UID}}, {{.PVC.Annotations.<key>}}, {{.PVC.Labels.<key>}} (spaces inside
 * the braces allowed). Anything else inside {{ }} is an error, and so is a key the claim lacks
 * (Go's missingkey=error; local-path-provisioner itself renders "<no value>" into a pathPattern). A
 * rendered path must be a valid volume path (hp_volpath_validate: strictly relative, no "." or
 * ".." component, no empty component, no control characters); an annotation or label value
 * containing '/' is rejected. A trailing '/' is dropped ("{{ .PVC.Namespace }}/{{ .PVC.Name }}/"
 * gives "ns/name", as local-path-provisioner's filepath.Join does).
 *
 * Lifetime: pure functions, no objects.
 */
#ifndef HOSTPATH_PATHPATTERN_H
#define HOSTPATH_PATHPATTERN_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>


struct hp_claim;

#define HP_DEFAULT_PATH_PATTERN "{{.PVC.Namespace}}-{{.PVC.Name}}-{{.PVName}}"

/* Flags of hp_pathpattern_render_path. */
enum {
    /* allowUnsafePathPattern: the rendered text is cleaned lexically as local-path-provisioner's
     * filepath.Join(root, text) cleans it (a leading '/', "//" and "." vanish, ".." takes back
     * the component before it); the result must still be a directory strictly inside the root:
     * a ".." that would leave it, or a text that cleans to the root itself, is refused, and the
     * cleaned path passes every check above. */
    HP_PATTERN_UNSAFE = 1u << 0,
};

/* Renders into out. 0, or -EINVAL / -ENAMETOOLONG with a one-line reason in err. Same as
 * hp_pathpattern_render_path with flags 0. */
int hp_pathpattern_render(const char *pattern, const struct hp_claim *claim, const char *pv_name,
                          char *out, size_t outlen, char *err, size_t errlen);
int hp_pathpattern_render_path(const char *pattern, const struct hp_claim *claim,
                               const char *pv_name, unsigned flags, char *out, size_t outlen,
                               char *err, size_t errlen);

/* The annotation and label keys pattern reads, appended to the buffers as packed lists
 * ("a\0b\0" plus a final "\0"; a key used twice is listed twice). 0, or the render error when
 * the pattern is not valid as a pathPattern (the keys it reads are listed all the same). */
struct hp_buf;
int hp_pathpattern_keys(const char *pattern, struct hp_buf *ann_keys, struct hp_buf *label_keys);

/* ---- value patterns (local-path-provisioner's dataFromPattern) ---- */

/* Renders a value pattern (what names it in messages: "userPattern" ...) into out, with the
 * white space around the result removed (strings.TrimSpace; ASCII white space). Values may hold
 * any character here: the caller parses the result. 0, or -EINVAL / -ENAMETOOLONG with a
 * one-line reason in err (a missing key, an unknown field, a result longer than outlen - 1). */
int hp_pathpattern_render_value(const char *pattern, const char *what,
                                const struct hp_claim *claim, const char *pv_name, char *out,
                                size_t outlen, char *err, size_t errlen);

/* userPattern / groupPattern: the rendered value must be a decimal id from 0 to 2147483647 (the
 * class parameters uid and gid's range); a user or group name is refused, since the names of
 * the provisioner's container are not the node's. 0 and *out, or -EINVAL (also for an empty
 * result) / -ENAMETOOLONG with a reason naming the pattern and what it rendered to. */
int hp_pathpattern_id(const char *pattern, const char *what, const struct hp_claim *claim,
                      const char *pv_name, uint32_t *out, char *err, size_t errlen);

/* permPattern: the rendered value must be an octal mode from 0 to 07777, with or without a
 * leading 0, as chmod reads a number ("0700" and "700" are 0700); a symbolic mode (u+rwx) is
 * refused. 0 and *out, or -EINVAL / -ENAMETOOLONG with the reason. */
int hp_pathpattern_mode(const char *pattern, const struct hp_claim *claim, const char *pv_name,
                        mode_t *out, char *err, size_t errlen);

#endif
