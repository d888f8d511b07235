/* pathpattern: render a StorageClass pathPattern into a relative path under --pv-dir.
 *
 * Any thread (pure). Templates use Go-template field syntax: {{.PVName}}, {{.PVC.Namespace}},
 * {{.PVC.Name}}, {{.PVC.Annotations.<key>}}, {{.PVC.Labels.<key>}} (spaces inside the braces
 * allowed). Anything else inside {{ }} is an error. The result must be a valid volume path
 * (hp_volpath_validate: strictly relative, no "." or ".." component, no empty component, no
 * control characters); an annotation or label value containing '/' is rejected.
 *
 * Lifetime: pure functions, no objects.
 */
#ifndef HOSTPATH_PATHPATTERN_H
#define HOSTPATH_PATHPATTERN_H

#include <errno.h> /* EINVAL, for the wrapper below */
#include <stddef.h>

#include "hostpath/volpath.h" /* only for the hp_path_validate_relative wrapper below */

struct hp_claim;

#define HP_DEFAULT_PATH_PATTERN "{{.PVC.Namespace}}-{{.PVC.Name}}-{{.PVName}}"

/* Renders into out. 0, or -EINVAL / -ENAMETOOLONG with a one-line reason in err. */
int hp_pathpattern_render(const char *pattern, const struct hp_claim *claim, const char *pv_name,
                          char *out, size_t outlen, char *err, size_t errlen);

/* The annotation and label keys pattern reads, appended to the buffers as packed lists
 * ("a\0b\0" plus a final "\0"; a key used twice is listed twice). 0, or the render error when
 * the pattern is not valid. */
struct hp_buf;
int hp_pathpattern_keys(const char *pattern, struct hp_buf *ann_keys, struct hp_buf *label_keys);

/* Kept for controller.c until the lead renames its calls: hp_volpath_validate (volpath.h),
 * every failure reported as -EINVAL. */
static inline int hp_path_validate_relative(const char *rel, char *err, size_t errlen)
{
    return hp_volpath_validate(rel, err, errlen) < 0 ? -EINVAL : 0;
}

#endif
