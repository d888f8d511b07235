/* hostpath: create and remove volume directories under --pv-dir on the libuv threadpool.
 *
 * The API is loop-thread only; the filesystem work runs in uv_queue_work jobs that own copies of
 * their inputs and touch nothing else. At most max_inflight jobs run at once (--workers); more
 * wait in a FIFO. Paths are resolved from an O_DIRECTORY fd of --pv-dir one component at a time
 * with openat(O_NOFOLLOW) (openat2 RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS where available), so a
 * symlink anywhere on the way is refused (ELOOP). Removal walks with openat/unlinkat, never
 * follows a symlink and never crosses into another filesystem (st_dev compared).
 */
#ifndef HOSTPATH_HOSTPATH_H
#define HOSTPATH_HOSTPATH_H

#include <stddef.h>
#include <sys/types.h>
#include <uv.h>

enum hp_on_delete { HP_ON_DELETE_DELETE, HP_ON_DELETE_RETAIN, HP_ON_DELETE_ARCHIVE };

/* status: 0 or negative errno; message: one line explaining a failure (or NULL on success),
 * borrowed for the callback. path: the absolute path acted on. */
typedef void (*hp_hostpath_cb)(void *data, int status, const char *message, const char *path);

struct hp_hostpath;

/* Opens nothing yet: pv_dir is created (mode 0755) by the first job if missing. */
struct hp_hostpath *hp_hostpath_new(uv_loop_t *loop, const char *pv_dir, unsigned max_inflight);

/* Creates pv_dir/rel (all missing parents 0755 ... the leaf gets mode, chmod'ed explicitly so the
 * umask does not apply), chown to uid/gid when >= 0. An existing directory is reused (mode and
 * owner set again). rel must pass hp_path_validate_relative. */
void hp_hostpath_create(struct hp_hostpath *hp, const char *rel, mode_t mode, uid_t uid,
                        gid_t gid, int set_owner, hp_hostpath_cb cb, void *data);

/* Removes (HP_ON_DELETE_DELETE) or renames to "archived-<leaf>" in the same parent
 * (HP_ON_DELETE_ARCHIVE) the directory at abs_path, which must lie strictly inside pv_dir.
 * A missing directory is success. A symlink, a non-directory, or a path outside pv_dir is refused
 * (-ELOOP, -ENOTDIR, -EINVAL) and nothing is removed; a mount point below is not crossed
 * (-EXDEV for the part that could not be removed). */
void hp_hostpath_remove(struct hp_hostpath *hp, const char *abs_path,
                        enum hp_on_delete action, hp_hostpath_cb cb, void *data);

/* The absolute pv_dir. */
const char *hp_hostpath_dir(const struct hp_hostpath *hp);
/* Jobs running plus waiting. */
size_t hp_hostpath_pending(const struct hp_hostpath *hp);

/* Stop accepting work; queued (not started) jobs complete with -ECANCELED; running ones finish
 * normally. on_idle fires when nothing is running, then the object is freed. */
void hp_hostpath_close(struct hp_hostpath *hp, void (*on_idle)(void *data), void *data);

#endif
