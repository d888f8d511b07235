/* workqueue: keyed, deduplicating work queue with per-key exponential backoff, on the loop.
 *
 * Loop thread only. Follows client-go's util/workqueue (queue.go, delaying_queue.go,
 * default_rate_limiters.go):
 *  - every key has one state entry, found through an hp_store hash table, holding the key string
 *    (copied once; the pointer given to the process callback), the dirty and processing flags,
 *    the failure count and its place in the delay heap;
 *  - dirty && !processing <=> the entry is in the ready FIFO (list.h);
 *  - add_after puts the entry in a min-heap on due time (heap.h); a second add_after keeps the
 *    earlier time; one uv_timer is armed for the heap's top;
 *  - dispatch runs from a uv_idle handle, never inside add/done, and hands out at most
 *    max_active keys at a time. The idle handle is active only while a key is ready and a slot
 *    is free (it keeps the loop from blocking in poll, so it must not stay on). An idle callback
 *    runs once per loop iteration, so a process callback that finishes synchronously and re-adds
 *    its key cannot starve the rest of the loop (a zero-delay timer restarted from its own
 *    callback would run again in the same pass of uv__run_timers);
 *  - an entry that is neither dirty, processing, delayed nor carrying failures is freed.
 * Metrics (when the options name the queue): workqueue_adds_total and workqueue_retries_total
 * count hp_workqueue_add and the rate-limited adds; workqueue_depth is not stored but sampled
 * when /metrics is scraped, through a collector registered with the metrics module, so it is
 * never stale (a delayed key that became ready counts at once). Time comes from the injected
 * clock of the options (default uv_now), so tests drive delays without sleeping.
 */
#include "hostpath/workqueue.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "hostpath/buf.h"
#include "hostpath/common.h"
#include "hostpath/heap.h"
#include "hostpath/list.h"
#include "hostpath/log.h"
#include "hostpath/metrics.h"
#include "hostpath/store.h"

struct wq_entry {
    struct hp_list link;      /* in the ready FIFO while queued */
    struct hp_heap_node node; /* in the delay heap while delayed */
    uint64_t due;             /* loop time (ms) when a delayed add fires */
    unsigned failures;
    uint8_t dirty;      /* needs (another) run */
    uint8_t processing; /* handed to the process callback, done() not yet called */
    uint8_t queued;     /* in the FIFO */
    uint8_t delayed;    /* in the heap */
    char key[];
};

struct hp_workqueue {
    uv_loop_t *loop;
    uv_timer_t delay_timer; /* armed for the heap's earliest due time */
    uv_idle_t dispatch;     /* runs process callbacks outside add/done */
    struct hp_store *entries;
    struct hp_list fifo; /* ready entries */
    size_t ready;
    struct hp_heap delays; /* delayed entries, earliest due first */
    size_t active;
    unsigned max_active;
    uint64_t base_ms, max_ms;
    char *name; /* metrics label, or NULL */
    struct hp_clock clock;
    hp_workqueue_process_cb cb;
    void *data;
    int shutting_down; /* hp_workqueue_shut_down or close: no dispatch, no adds */
    int closing;
    int open_handles;
    hp_close_cb close_cb;
    void *close_data;
};

static const char *entry_key(const void *obj)
{
    return ((const struct wq_entry *)obj)->key;
}

static void entry_free(void *obj)
{
    free(obj);
}

static const struct hp_store_ops entry_ops = {entry_key, entry_free};

static uint64_t now_ms(const struct hp_workqueue *q)
{
    return hp_clock_now(&q->clock, uv_now(q->loop));
}

uint64_t hp_workqueue_backoff_ms(uint64_t base_ms, uint64_t max_ms, unsigned failures)
{
    uint64_t d;

    if (base_ms == 0)
        return 0;
    /* base << failures overflows exactly when base > UINT64_MAX >> failures. */
    if (failures >= 64 || base_ms > (UINT64_MAX >> failures))
        return max_ms;
    d = base_ms << failures;
    return d > max_ms ? max_ms : d;
}

/* ---- delay heap (min on due) ---- */

static struct wq_entry *entry_of_node(const struct hp_heap_node *n)
{
    return hp_container_of(n, struct wq_entry, node);
}

static int due_less(const struct hp_heap_node *a, const struct hp_heap_node *b)
{
    return entry_of_node(a)->due < entry_of_node(b)->due;
}

static struct wq_entry *earliest(const struct hp_workqueue *q)
{
    struct hp_heap_node *n = hp_heap_min(&q->delays);
    return n ? entry_of_node(n) : NULL;
}

/* ---- entries ---- */

static struct wq_entry *lookup(const struct hp_workqueue *q, const char *key)
{
    return hp_store_get(q->entries, key);
}

static struct wq_entry *lookup_or_create(struct hp_workqueue *q, const char *key)
{
    struct wq_entry *e = lookup(q, key);
    size_t n;

    if (e)
        return e;
    n = strlen(key);
    e = hp_xcalloc(1, sizeof(*e) + n + 1);
    memcpy(e->key, key, n + 1);
    hp_list_init(&e->link);
    (void)hp_store_put(q->entries, e); /* key was absent: nothing is replaced */
    return e;
}

/* Frees the entry once nothing refers to it any more. */
static void maybe_release(struct hp_workqueue *q, struct wq_entry *e)
{
    if (e->dirty || e->processing || e->queued || e->delayed || e->failures)
        return;
    free(hp_store_remove(q->entries, e->key));
}

static void fifo_push(struct hp_workqueue *q, struct wq_entry *e)
{
    e->queued = 1;
    hp_list_insert_tail(&q->fifo, &e->link);
    q->ready++;
}

static struct wq_entry *fifo_pop(struct hp_workqueue *q)
{
    struct wq_entry *e = hp_list_first_entry(&q->fifo, struct wq_entry, link);

    hp_list_remove(&e->link);
    e->queued = 0;
    q->ready--;
    return e;
}

/* ---- dispatch ---- */

static int can_dispatch(const struct hp_workqueue *q)
{
    return !q->shutting_down && q->ready && q->active < q->max_active;
}

static void on_dispatch(uv_idle_t *h);

/* Starts the idle handle when there is something to hand out. */
static void kick(struct hp_workqueue *q)
{
    int rc;

    if (!can_dispatch(q) || uv_is_active((uv_handle_t *)&q->dispatch))
        return;
    rc = uv_idle_start(&q->dispatch, on_dispatch);
    (void)rc; /* fails only for a NULL callback or a closing handle, both excluded */
}

static void on_dispatch(uv_idle_t *h)
{
    struct hp_workqueue *q = hp_container_of(h, struct hp_workqueue, dispatch);
    /* Hand out at most what was ready on entry, so a callback that finishes synchronously and
     * re-adds its key cannot keep the loop here forever; the rest goes on the next tick. */
    size_t budget = q->ready;
    struct wq_entry *e;

    int rc;

    while (budget-- > 0 && can_dispatch(q)) {
        e = fifo_pop(q);
        e->dirty = 0;
        e->processing = 1;
        q->active++;
        q->cb(q, e->key, q->data);
    }
    if (!can_dispatch(q) && !q->shutting_down) {
        rc = uv_idle_stop(&q->dispatch);
        (void)rc; /* cannot fail */
    }
}

/* ---- delays ---- */

static void on_delay(uv_timer_t *t);

static void arm_delay(struct hp_workqueue *q)
{
    uint64_t now, due;
    int rc;

    if (q->shutting_down)
        return;
    if (!earliest(q)) {
        rc = uv_timer_stop(&q->delay_timer);
        (void)rc; /* uv_timer_stop cannot fail */
        return;
    }
    now = now_ms(q);
    due = earliest(q)->due;
    rc = uv_timer_start(&q->delay_timer, on_delay, due > now ? due - now : 0, 0);
    (void)rc; /* only fails for a closing handle, excluded by shutting_down */
}

static void add_entry(struct hp_workqueue *q, struct wq_entry *e)
{
    if (e->dirty)
        return; /* already waiting to run */
    e->dirty = 1;
    if (e->processing)
        return; /* runs again after done() */
    fifo_push(q, e);
    kick(q);
}

/* Keys due by the clock become ready; the timer is armed for the next one. */
static void expire(struct hp_workqueue *q)
{
    uint64_t now = now_ms(q);
    struct wq_entry *e;

    while ((e = earliest(q)) && e->due <= now && !q->shutting_down) {
        hp_heap_remove(&q->delays, &e->node);
        e->delayed = 0;
        add_entry(q, e);
        maybe_release(q, e);
    }
    arm_delay(q);
}

static void on_delay(uv_timer_t *t)
{
    expire(hp_container_of(t, struct hp_workqueue, delay_timer));
}

void hp__workqueue_expire(struct hp_workqueue *q)
{
    if (!q->shutting_down)
        expire(q);
}

/* ---- metrics ---- */

/* workqueue_depth{name} at scrape time: the keys ready to run now. */
static void collect_depth(struct hp_buf *out, void *data)
{
    const struct hp_workqueue *q = data;

    (void)hp_buf_appends(out, "workqueue_depth{name=\"");
    hp_metrics_append_label_value(out, q->name);
    (void)hp_buf_printf(out, "\"} %zu\n", q->ready);
}

/* ---- public ---- */

struct hp_workqueue *hp_workqueue_new(uv_loop_t *loop, const struct hp_workqueue_opts *opts,
                                      hp_workqueue_process_cb cb, void *data)
{
    struct hp_workqueue *q = hp_xcalloc(1, sizeof(*q));
    int rc;

    q->loop = loop;
    q->base_ms = opts ? opts->base_delay_ms : 0;
    q->max_ms = opts ? opts->max_delay_ms : 0;
    q->max_active = opts && opts->max_active ? opts->max_active : 16;
    if (opts)
        q->clock = opts->clock;
    q->cb = cb;
    q->data = data;
    q->entries = hp_store_new(&entry_ops);
    hp_list_init(&q->fifo);
    hp_heap_init(&q->delays, due_less);
    rc = uv_timer_init(loop, &q->delay_timer);
    if (rc == 0)
        rc = uv_idle_init(loop, &q->dispatch);
    if (rc != 0) { /* these only fail for an invalid loop: a programming error */
        hp_log_error("workqueue: handle init failed: %s", uv_strerror(rc));
        abort();
    }
    q->delay_timer.data = q;
    q->dispatch.data = q;
    q->open_handles = 2;
    if (opts && opts->name) {
        q->name = hp_xstrdup(opts->name);
        (void)hp_metrics_add_collector("workqueue_depth", collect_depth, q); /* a known family */
    }
    return q;
}

void hp_workqueue_add(struct hp_workqueue *q, const char *key)
{
    if (q->shutting_down)
        return;
    if (q->name)
        hp_metrics_workqueue_add(q->name);
    add_entry(q, lookup_or_create(q, key));
}

void hp_workqueue_add_after(struct hp_workqueue *q, const char *key, uint64_t delay_ms)
{
    struct wq_entry *e;
    uint64_t now, due;

    if (q->shutting_down)
        return;
    if (delay_ms == 0) {
        add_entry(q, lookup_or_create(q, key)); /* a delayed add: not counted as an add */
        return;
    }
    e = lookup_or_create(q, key);
    now = now_ms(q);
    due = delay_ms > UINT64_MAX - now ? UINT64_MAX : now + delay_ms;
    if (e->delayed) {
        if (due >= e->due)
            return; /* the earlier wake-up already pending wins */
        hp_heap_remove(&q->delays, &e->node); /* the key changes: out, then in again */
    }
    e->due = due;
    e->delayed = 1;
    hp_heap_insert(&q->delays, &e->node);
    if (earliest(q) == e)
        arm_delay(q);
}

void hp_workqueue_add_rate_limited_min(struct hp_workqueue *q, const char *key,
                                       uint64_t min_delay_ms)
{
    struct wq_entry *e;
    uint64_t delay;

    if (q->shutting_down)
        return;
    if (q->name)
        hp_metrics_workqueue_retry(q->name);
    e = lookup_or_create(q, key);
    delay = hp_workqueue_backoff_ms(q->base_ms, q->max_ms, e->failures);
    if (e->failures < UINT_MAX)
        e->failures++;
    hp_workqueue_add_after(q, key, delay > min_delay_ms ? delay : min_delay_ms);
}

void hp_workqueue_add_rate_limited(struct hp_workqueue *q, const char *key)
{
    hp_workqueue_add_rate_limited_min(q, key, 0);
}

unsigned hp_workqueue_num_requeues(const struct hp_workqueue *q, const char *key)
{
    const struct wq_entry *e = lookup(q, key);
    return e ? e->failures : 0;
}

void hp_workqueue_forget(struct hp_workqueue *q, const char *key)
{
    struct wq_entry *e = lookup(q, key);

    if (!e)
        return;
    e->failures = 0;
    maybe_release(q, e);
}

void hp_workqueue_done(struct hp_workqueue *q, const char *key)
{
    struct wq_entry *e = lookup(q, key);

    if (!e || !e->processing) {
        hp_log_error("workqueue: done for a key that is not processing key=%s", key);
        return;
    }
    e->processing = 0;
    q->active--;
    if (e->dirty)
        fifo_push(q, e); /* added while it ran: run once more */
    kick(q);
    maybe_release(q, e);
}

size_t hp_workqueue_len(const struct hp_workqueue *q)
{
    return q->ready;
}

size_t hp_workqueue_delayed(const struct hp_workqueue *q)
{
    return hp_heap_len(&q->delays);
}

size_t hp_workqueue_active(const struct hp_workqueue *q)
{
    return q->active;
}

static void on_close(uv_handle_t *h)
{
    struct hp_workqueue *q = h->data;

    hp_close_cb cb = q->close_cb;
    void *cb_data = q->close_data;

    if (--q->open_handles > 0)
        return;
    hp_store_free(q->entries);
    free(q->name);
    free(q);
    if (cb)
        cb(cb_data);
}

void hp_workqueue_shut_down(struct hp_workqueue *q)
{
    int rc;

    if (q->shutting_down)
        return;
    q->shutting_down = 1;
    rc = uv_idle_stop(&q->dispatch);
    (void)rc; /* cannot fail */
    rc = uv_timer_stop(&q->delay_timer);
    (void)rc; /* cannot fail */
}

/* Shuts the queue down (if the owner has not) and closes its handles. Keys being processed may
 * still be passed to done() until close_cb runs; after that the queue and every key string are
 * freed, so the owner must have cancelled (or stopped caring about) its work by then and must not
 * call done(). */
void hp_workqueue_close(struct hp_workqueue *q, hp_close_cb close_cb, void *data)
{
    if (q->closing)
        return;
    q->closing = 1;
    hp_workqueue_shut_down(q);
    if (q->name)
        hp_metrics_remove_collector(collect_depth, q);
    q->close_cb = close_cb;
    q->close_data = data;
    uv_close((uv_handle_t *)&q->delay_timer, on_close);
    uv_close((uv_handle_t *)&q->dispatch, on_close);
}

/* ---- validation (tests) ---- */

struct check {
    const struct hp_workqueue *q;
    size_t entries, queued, processing, delayed;
    int bad;
};

static void check_entry(void *obj, void *data)
{
    struct check *c = data;
    const struct wq_entry *e = obj;
    const struct hp_workqueue *q = c->q;

    c->entries++;
    c->queued += e->queued;
    c->processing += e->processing;
    c->delayed += e->delayed;
    /* A delayed entry's node hangs in the heap: under a parent, or as its root. */
    if (e->delayed && !e->node.parent && hp_heap_min(&q->delays) != &e->node)
        c->bad = 1;
    /* In the FIFO exactly when it needs a run and is not running; never idle (else freed). */
    if (e->queued != (e->dirty && !e->processing) || e->queued != hp_list_linked(&e->link))
        c->bad = 1;
    if (!e->dirty && !e->processing && !e->delayed && !e->failures)
        c->bad = 1;
}

int hp_workqueue_validate(const struct hp_workqueue *q)
{
    struct check c = {q, 0, 0, 0, 0, 0};
    const struct hp_list *l;
    size_t n = 0;

    if (hp_store_validate(q->entries) != 0)
        return -EINVAL;
    if (hp_heap_validate(&q->delays) != 0) {
        hp_log_error("workqueue: delay heap broken");
        return -EINVAL;
    }
    hp_list_foreach(l, &q->fifo) {
        const struct wq_entry *e = hp_list_entry(l, struct wq_entry, link);
        if (!e->queued || lookup(q, e->key) != e) {
            hp_log_error("workqueue: FIFO entry inconsistent key=%s", e->key);
            return -EINVAL;
        }
        if (++n > q->ready)
            break;
    }
    if (n != q->ready) {
        hp_log_error("workqueue: FIFO length %zu, counted %zu", q->ready, n);
        return -EINVAL;
    }
    hp_store_foreach(q->entries, check_entry, &c);
    if (c.bad || c.queued != q->ready || c.processing != q->active ||
        c.delayed != hp_heap_len(&q->delays) || (!q->shutting_down && q->active > q->max_active)) {
        hp_log_error("workqueue: state mismatch queued=%zu/%zu processing=%zu/%zu "
                     "delayed=%zu/%zu",
                     c.queued, q->ready, c.processing, q->active, c.delayed,
                     hp_heap_len(&q->delays));
        return -EINVAL;
    }
    return 0;
}
