/* hostpath: filesystem requests on the libuv threadpool, bounded and cancellable.
 *
 * Threads: the public API and every callback run on the loop thread. A request (struct hp_fsop)
 * runs in a uv_queue_work job; the work callback calls hp_fsop_run and nothing else (no logging,
 * no metrics). At most max_inflight jobs are submitted at once; the rest wait in a FIFO, so a
 * burst of claims cannot take every thread of the shared pool.
 *
 * Callbacks (a request's, and the close callback) always come from an after-work callback on the loop, never
 * from inside the call that started them: even a cancellation goes through the threadpool (as a
 * job that does nothing) to get there.
 */
#include "hostpath/hostpath.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hostpath/buf.h"
#include "hostpath/common.h"
#include "hostpath/list.h"
#include "hostpath/log.h"

struct job {
    uv_work_t req;
    struct hp_hostpath *hp;
    struct hp_list link; /* in the waiting FIFO or the submitted list */
    int canceled; /* set on the loop before submission, or the request was uv_cancel'ed */
    struct hp_fsop *op; /* NULL for the no-op job that makes close_cb asynchronous */
    hp_hostpath_done_cb cb;
    void *data;
};

struct hp_hostpath {
    uv_loop_t *loop;
    unsigned max_inflight;
    struct hp_list waiting_jobs; /* FIFO: not yet handed to uv_queue_work */
    size_t waiting;
    struct hp_list submitted_jobs; /* submitted to uv_queue_work, after-work not yet run */
    size_t submitted;
    int closing;
    unsigned in_cb;
    hp_close_cb close_cb;
    void *close_data;
};

static void on_work(uv_work_t *req)
{
    struct job *j = hp_container_of(req, struct job, req);

    if (!j->canceled && j->op)
        hp_fsop_run(j->op);
}

static void on_after_work(uv_work_t *req, int status);

static void submit(struct hp_hostpath *hp, struct job *j)
{
    int r;

    hp_list_insert_tail(&hp->submitted_jobs, &j->link);
    hp->submitted++;
    r = uv_queue_work(hp->loop, &j->req, on_work, on_after_work);
    if (r != 0) { /* only fails for a NULL work callback: a bug here */
        hp_log_error("hostpath: uv_queue_work failed err=%s", uv_strerror(r));
        abort();
    }
    if (j->canceled)
        (void)uv_cancel((uv_req_t *)&j->req); /* UV_EBUSY: a worker took it; on_work returns */
}

static void pump(struct hp_hostpath *hp)
{
    while (!hp->closing && hp->waiting && hp->submitted < hp->max_inflight) {
        struct job *j = hp_list_first_entry(&hp->waiting_jobs, struct job, link);
        hp_list_remove(&j->link);
        hp->waiting--;
        submit(hp, j);
    }
}

static void maybe_finish(struct hp_hostpath *hp)
{
    hp_close_cb close_cb = hp->close_cb;
    void *data = hp->close_data;

    if (!hp->closing || hp->submitted || hp->waiting || hp->in_cb)
        return;
    free(hp);
    if (close_cb)
        close_cb(data);
}

static void on_after_work(uv_work_t *req, int status)
{
    struct job *j = hp_container_of(req, struct job, req);
    struct hp_hostpath *hp = j->hp;

    hp_list_remove(&j->link);
    hp->submitted--;
    if (j->op && (status == UV_ECANCELED || j->canceled)) {
        j->op->status = -ECANCELED;
        (void)snprintf(j->op->msg, sizeof(j->op->msg),
                       "cancelled: the provisioner is shutting down");
    }
    /* The next job is submitted after the callback, so that a callback that closes finds the
     * queue intact and cancels all of it. */
    if (j->cb) {
        hp->in_cb++;
        j->cb(j->op, j->op ? j->op->status : -ECANCELED, j->data);
        hp->in_cb--;
    }
    free(j);
    pump(hp);
    maybe_finish(hp);
}

struct hp_hostpath *hp_hostpath_new(uv_loop_t *loop, unsigned max_inflight)
{
    struct hp_hostpath *hp = hp_xcalloc(1, sizeof(*hp));

    hp->loop = loop;
    hp->max_inflight = max_inflight ? max_inflight : 1;
    hp_list_init(&hp->waiting_jobs);
    hp_list_init(&hp->submitted_jobs);
    return hp;
}

void hp_hostpath_submit(struct hp_hostpath *hp, struct hp_fsop *op, hp_hostpath_done_cb cb,
                        void *data)
{
    struct job *j = hp_xcalloc(1, sizeof(*j));

    j->hp = hp;
    j->op = op;
    j->cb = cb;
    j->data = data;
    if (hp->closing) {
        j->canceled = 1;
        submit(hp, j);
        return;
    }
    hp_list_insert_tail(&hp->waiting_jobs, &j->link);
    hp->waiting++;
    pump(hp);
}

size_t hp_hostpath_pending(const struct hp_hostpath *hp)
{
    return hp->submitted + hp->waiting;
}

void hp_hostpath_close(struct hp_hostpath *hp, hp_close_cb close_cb, void *data)
{
    struct hp_list *l;
    struct job *j;

    if (hp->closing)
        return;
    hp->closing = 1;
    hp->close_cb = close_cb;
    hp->close_data = data;
    /* Jobs handed to libuv but not started by a worker are not started at all. */
    hp_list_foreach(l, &hp->submitted_jobs) {
        j = hp_list_entry(l, struct job, link);
        (void)uv_cancel((uv_req_t *)&j->req); /* UV_EBUSY when running or done: it finishes */
    }
    /* Waiting jobs complete with -ECANCELED through the normal after-work path. */
    while ((j = hp_list_first_entry(&hp->waiting_jobs, struct job, link)) != NULL) {
        hp_list_remove(&j->link);
        hp->waiting--;
        j->canceled = 1;
        submit(hp, j);
    }
    /* Nothing in flight: a no-op job makes close_cb fire from the loop, never inside close. */
    if (hp->submitted == 0) {
        j = hp_xcalloc(1, sizeof(*j));
        j->hp = hp;
        j->canceled = 1;
        submit(hp, j);
    }
}
