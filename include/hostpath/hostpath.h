/* hostpath: runs filesystem requests (fsops.h) on the libuv threadpool, a bounded number at once.
 *
 * The API and every callback are loop-thread only; the requests run in uv_queue_work jobs and
 * touch nothing but themselves and the filesystem. At most max_inflight run at once
 * (--workers); more wait in a FIFO. Callbacks always come from an after-work callback on the
 * loop, never from inside the call that queued the request.
 *
 * Lifetime: hp_hostpath_new, hp_hostpath_close.
 */
#ifndef HOSTPATH_HOSTPATH_H
#define HOSTPATH_HOSTPATH_H

#include <stddef.h>
#include <uv.h>

#include "hostpath/common.h"
#include "hostpath/fsops.h"

struct hp_hostpath;

/* The request op ran (status == op->status: 0 or a negative errno; op->msg and the results are
 * set) or was cancelled by hp_hostpath_close (status -ECANCELED). The caller owns op again. */
typedef void (*hp_hostpath_done_cb)(struct hp_fsop *op, int status, void *data);

struct hp_hostpath *hp_hostpath_new(uv_loop_t *loop, unsigned max_inflight);

/* Queues op, which is borrowed until cb fires. */
void hp_hostpath_submit(struct hp_hostpath *hp, struct hp_fsop *op, hp_hostpath_done_cb cb,
                        void *data);

/* Requests running plus waiting. */
size_t hp_hostpath_pending(const struct hp_hostpath *hp);

/* Ends the runner's lifetime: stops accepting work (a submit from then until close_cb completes
 * with -ECANCELED); queued (not started) requests complete with -ECANCELED; running ones finish
 * normally. Once nothing is running the object is freed and close_cb fires, on a later loop
 * turn (never inside this call). */
void hp_hostpath_close(struct hp_hostpath *hp, hp_close_cb close_cb, void *data);

#endif
