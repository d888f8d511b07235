/* Unit tests for workqueue.c, on a real libuv loop. Every run is bounded by an unreferenced
 * guard timer (the loop ends by itself when the queue is idle) and every test closes its loop.
 * Delays and backoff are driven by a fake clock (hp_workqueue_opts.clock) and
 * hp__workqueue_expire, never by sleeping; the metrics test samples workqueue_depth from the
 * registry's exposition. */
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "hostpath/buf.h"
#include "hostpath/common.h"
#include "hostpath/log.h"
#include "hostpath/metrics.h"
#include "hostpath/workqueue.h"

#define MAX_RECORDS 2048
#define GUARD_MS 10000

struct h;
typedef void (*hook_fn)(struct h *h, const char *key);

struct h {
    uv_loop_t loop;
    uv_timer_t guard;
    int guard_fired;
    struct hp_workqueue *q;
    int async_ms; /* < 0: done() inside the process callback; else after this many ms */
    hook_fn hook; /* test-specific work inside the process callback, before done */
    size_t n;     /* process callbacks so far */
    char keys[MAX_RECORDS][32];
    uint64_t times[MAX_RECORDS];
    char inflight[64][32];
    size_t ninflight, max_inflight;
    int closed;
    int in_add;   /* set around add calls made by tests: the callback must not run then */
    size_t limit; /* used by some hooks */
    uint64_t clock; /* the fake clock, when the options use it */
    int fake;
};

struct job {
    uv_timer_t timer;
    struct h *h;
    const char *key; /* the queue's pointer: valid until done or the queue's close */
};

static void on_guard(uv_timer_t *t)
{
    struct h *h = hp_container_of(t, struct h, guard);
    h->guard_fired = 1;
    uv_stop(&h->loop);
}

static void h_init(struct h *h, const struct hp_workqueue_opts *opts);

static int inflight_remove(struct h *h, const char *key)
{
    size_t i;

    for (i = 0; i < h->ninflight; i++) {
        if (strcmp(h->inflight[i], key) == 0) {
            memmove(h->inflight[i], h->inflight[i + 1],
                    (h->ninflight - i - 1) * sizeof(h->inflight[0]));
            h->ninflight--;
            return 1;
        }
    }
    return 0;
}

/* Once the queue's close callback ran, the queue is gone: the owner must not call done() any
 * more (a job's key pointer is dead too), so late jobs only drop their bookkeeping. */
static void finish(struct h *h, const char *key)
{
    if (h->closed)
        return;
    assert_true(inflight_remove(h, key));
    hp_workqueue_done(h->q, key);
    assert_int_equal(hp_workqueue_validate(h->q), 0);
}

static void on_job_closed(uv_handle_t *handle)
{
    free(hp_container_of((uv_timer_t *)handle, struct job, timer));
}

static void on_job(uv_timer_t *t)
{
    struct job *j = hp_container_of(t, struct job, timer);
    finish(j->h, j->key);
    uv_close((uv_handle_t *)t, on_job_closed);
}

static void on_process(struct hp_workqueue *q, const char *key, void *data)
{
    struct h *h = data;
    size_t i;

    assert_ptr_equal(q, h->q);
    assert_false(h->in_add);
    assert_true(h->n < MAX_RECORDS);
    for (i = 0; i < h->ninflight; i++)
        assert_string_not_equal(h->inflight[i], key); /* never twice at once */
    assert_true(h->ninflight < 64);
    snprintf(h->inflight[h->ninflight++], sizeof(h->inflight[0]), "%s", key);
    if (h->ninflight > h->max_inflight)
        h->max_inflight = h->ninflight;
    snprintf(h->keys[h->n], sizeof(h->keys[0]), "%s", key);
    h->times[h->n] = h->fake ? h->clock : uv_now(&h->loop);
    h->n++;
    assert_int_equal(hp_workqueue_active(q), h->ninflight);
    assert_int_equal(hp_workqueue_validate(q), 0);
    if (h->hook)
        h->hook(h, key);
    if (h->async_ms < 0) {
        finish(h, key);
    } else {
        struct job *j = hp_xmalloc(sizeof(*j));
        j->h = h;
        j->key = key;
        assert_int_equal(uv_timer_init(&h->loop, &j->timer), 0);
        assert_int_equal(uv_timer_start(&j->timer, on_job, (uint64_t)h->async_ms, 0), 0);
    }
}

static void h_init(struct h *h, const struct hp_workqueue_opts *opts)
{
    memset(h, 0, sizeof(*h));
    if (opts->clock.data == h) {
        h->fake = 1;
        h->clock = 1000000;
    }
    assert_int_equal(uv_loop_init(&h->loop), 0);
    assert_int_equal(uv_timer_init(&h->loop, &h->guard), 0);
    assert_int_equal(uv_timer_start(&h->guard, on_guard, GUARD_MS, 0), 0);
    uv_unref((uv_handle_t *)&h->guard); /* bounds the run without keeping the loop alive */
    h->q = hp_workqueue_new(&h->loop, opts, on_process, h);
    assert_non_null(h->q);
    assert_int_equal(hp_workqueue_validate(h->q), 0);
}

static uint64_t fake_now(void *data)
{
    return ((struct h *)data)->clock;
}

/* Options on the fake clock of h (h_init starts it at a large value: nothing may assume 0). */
static struct hp_workqueue_opts fake_opts(struct h *h, uint64_t base, uint64_t max)
{
    struct hp_workqueue_opts o = {.base_delay_ms = base, .max_delay_ms = max, .max_active = 4};
    o.clock.now_ms = fake_now;
    o.clock.data = h;
    return o;
}

/* Lets dispatch run (idle callbacks) without waiting on any timer: the delay timer is armed in
 * real milliseconds of the fake clock's delays and must not be waited for. */
static void h_settle(struct h *h)
{
    for (int i = 0; i < 8; i++)
        (void)uv_run(&h->loop, UV_RUN_NOWAIT);
    assert_int_equal(hp_workqueue_validate(h->q), 0);
}

/* Moves the fake clock to t and lets what is due run. */
static void h_advance_to(struct h *h, uint64_t t)
{
    assert_true(t >= h->clock);
    h->clock = t;
    hp__workqueue_expire(h->q);
    h_settle(h);
}

static void h_run(struct h *h)
{
    assert_int_equal(uv_run(&h->loop, UV_RUN_DEFAULT), 0);
    assert_false(h->guard_fired);
    assert_int_equal(hp_workqueue_validate(h->q), 0);
}

static void on_closed(void *data)
{
    struct h *h = data;
    h->closed++;
}

/* After hp_workqueue_close(h->q, on_closed, h): the close completes, the loop is closed. */
static void h_close_finish(struct h *h)
{
    assert_int_equal(h->closed, 0); /* never inside close */
    assert_int_equal(uv_run(&h->loop, UV_RUN_DEFAULT), 0);
    assert_int_equal(h->closed, 1);
    uv_close((uv_handle_t *)&h->guard, NULL);
    assert_int_equal(uv_run(&h->loop, UV_RUN_DEFAULT), 0);
    assert_int_equal(uv_loop_close(&h->loop), 0);
}

static void h_close(struct h *h)
{
    hp_workqueue_close(h->q, on_closed, h);
    h_close_finish(h);
}

static void add(struct h *h, const char *key)
{
    h->in_add = 1;
    hp_workqueue_add(h->q, key);
    h->in_add = 0;
    assert_int_equal(hp_workqueue_validate(h->q), 0);
}

static void add_after(struct h *h, const char *key, uint64_t ms)
{
    h->in_add = 1;
    hp_workqueue_add_after(h->q, key, ms);
    h->in_add = 0;
    assert_int_equal(hp_workqueue_validate(h->q), 0);
}

static size_t count_key(const struct h *h, const char *key)
{
    size_t i, n = 0;

    for (i = 0; i < h->n; i++)
        n += strcmp(h->keys[i], key) == 0;
    return n;
}

static const struct hp_workqueue_opts default_opts = {
    .base_delay_ms = 5, .max_delay_ms = 300000, .max_active = 4};

static void test_dedup(void **state)
{
    struct h *h = hp_xmalloc(sizeof(*h));
    (void)state;

    h_init(h, &default_opts);
    h->async_ms = 1;
    add(h, "ns/a");
    add(h, "ns/a");
    add(h, "ns/b");
    add(h, "ns/a");
    assert_int_equal(hp_workqueue_len(h->q), 2);
    assert_int_equal(h->n, 0); /* nothing runs inside add */
    h_run(h);
    assert_int_equal(h->n, 2);
    assert_string_equal(h->keys[0], "ns/a"); /* FIFO order */
    assert_string_equal(h->keys[1], "ns/b");
    assert_int_equal(hp_workqueue_len(h->q), 0);
    assert_int_equal(hp_workqueue_active(h->q), 0);
    h_close(h);
    free(h);
}

/* Adding a key while it is processed marks it dirty: it runs once more, after done, and never
 * concurrently with itself (on_process asserts that). */
static void readd_hook(struct h *h, const char *key)
{
    if (count_key(h, key) == 1) {
        add(h, key);
        add(h, key);
        assert_int_equal(hp_workqueue_len(h->q), 0); /* dirty, not queued */
    }
}

static void test_add_during_processing(void **state)
{
    struct h *h = hp_xmalloc(sizeof(*h));
    (void)state;

    h_init(h, &default_opts);
    h->async_ms = 3;
    h->hook = readd_hook;
    add(h, "k");
    h_run(h);
    assert_int_equal(count_key(h, "k"), 2);
    assert_true(h->times[1] >= h->times[0] + 3); /* second run only after the first's done */
    h_close(h);
    free(h);
}

static void test_max_active(void **state)
{
    const struct hp_workqueue_opts opts = {
        .base_delay_ms = 5, .max_delay_ms = 1000, .max_active = 2};
    struct h *h = hp_xmalloc(sizeof(*h));
    char key[16];
    size_t i;
    (void)state;

    h_init(h, &opts);
    h->async_ms = 2;
    for (i = 0; i < 10; i++) {
        snprintf(key, sizeof(key), "k%zu", i);
        add(h, key);
    }
    h_run(h);
    assert_int_equal(h->n, 10);
    assert_int_equal(h->max_inflight, 2);
    for (i = 0; i < 10; i++) {
        snprintf(key, sizeof(key), "k%zu", i);
        assert_string_equal(h->keys[i], key);
    }
    h_close(h);
    free(h);

    /* max_active 0 means the default of 16 */
    {
        const struct hp_workqueue_opts def = {
            .base_delay_ms = 5, .max_delay_ms = 1000, .max_active = 0};
        h = hp_xmalloc(sizeof(*h));
        h_init(h, &def);
        h->async_ms = 2;
        for (i = 0; i < 40; i++) {
            snprintf(key, sizeof(key), "k%zu", i);
            add(h, key);
        }
        h_run(h);
        assert_int_equal(h->n, 40);
        assert_int_equal(h->max_inflight, 16);
        h_close(h);
        free(h);
    }
}

static void test_add_after_order(void **state)
{
    struct h *h = hp_xmalloc(sizeof(*h));
    const struct hp_workqueue_opts opts = fake_opts(h, 5, 300000);
    uint64_t t0;
    (void)state;

    h_init(h, &opts);
    h->async_ms = -1;
    t0 = h->clock;
    add_after(h, "c", 30000);
    add_after(h, "a", 10000);
    add_after(h, "b", 20000);
    add_after(h, "now", 0); /* zero delay: straight to the ready FIFO */
    assert_int_equal(hp_workqueue_delayed(h->q), 3);
    assert_int_equal(hp_workqueue_len(h->q), 1);
    h_settle(h);
    assert_int_equal(h->n, 1);
    assert_string_equal(h->keys[0], "now");
    h_advance_to(h, t0 + 9999); /* one millisecond early: nothing */
    assert_int_equal(h->n, 1);
    h_advance_to(h, t0 + 10000);
    assert_int_equal(h->n, 2);
    h_advance_to(h, t0 + 30000); /* two due at once: in due order */
    assert_int_equal(h->n, 4);
    assert_string_equal(h->keys[1], "a");
    assert_string_equal(h->keys[2], "b");
    assert_string_equal(h->keys[3], "c");
    assert_int_equal(h->times[1], t0 + 10000);
    assert_int_equal(hp_workqueue_delayed(h->q), 0);
    h_close(h);
    free(h);
}

/* A second add_after keeps the earlier due time, whichever order they come in: the later one is
 * dropped, so the key runs once. */
static void test_add_after_earlier_wins(void **state)
{
    struct h *h = hp_xmalloc(sizeof(*h));
    const struct hp_workqueue_opts opts = fake_opts(h, 5, 300000);
    uint64_t t0;
    (void)state;

    h_init(h, &opts);
    h->async_ms = -1;
    t0 = h->clock;
    add_after(h, "x", 3600000);
    add_after(h, "x", 10000);
    add_after(h, "y", 15000);
    add_after(h, "y", 3600000);
    assert_int_equal(hp_workqueue_delayed(h->q), 2);
    h_advance_to(h, t0 + 10000);
    assert_int_equal(h->n, 1);
    assert_string_equal(h->keys[0], "x");
    h_advance_to(h, t0 + 15000);
    assert_int_equal(h->n, 2);
    assert_string_equal(h->keys[1], "y");
    assert_int_equal(hp_workqueue_delayed(h->q), 0);
    h_advance_to(h, t0 + 7200000);
    assert_int_equal(count_key(h, "x"), 1);
    assert_int_equal(count_key(h, "y"), 1);
    h_close(h);
    free(h);
}

/* Each run fails and re-adds with add_rate_limited: gaps grow as base * 2^n. */
static void rate_hook(struct h *h, const char *key)
{
    unsigned before = hp_workqueue_num_requeues(h->q, key);

    assert_int_equal(before, h->n - 1);
    if (h->n < h->limit) {
        h->in_add = 1;
        hp_workqueue_add_rate_limited(h->q, key);
        h->in_add = 0;
        assert_int_equal(hp_workqueue_num_requeues(h->q, key), before + 1);
        assert_int_equal(hp_workqueue_delayed(h->q), 1);
    }
}

static void test_rate_limited(void **state)
{
    struct h *h = hp_xmalloc(sizeof(*h));
    const struct hp_workqueue_opts opts = fake_opts(h, 2000, 60000);
    size_t i;
    (void)state;

    h_init(h, &opts);
    h->async_ms = -1;
    h->hook = rate_hook;
    h->limit = 5;
    add(h, "r");
    h_settle(h);
    assert_int_equal(h->n, 1);
    /* Failure i waits base * 2^i: 2, 4, 8, 16 s; a millisecond short of it, nothing runs. */
    for (i = 0; i + 1 < h->limit; i++) {
        uint64_t wait = 2000u << i;
        h_advance_to(h, h->times[i] + wait - 1);
        assert_int_equal(h->n, i + 1);
        h_advance_to(h, h->times[i] + wait);
        assert_int_equal(h->n, i + 2);
        assert_int_equal(h->times[i + 1] - h->times[i], wait);
    }
    assert_int_equal(hp_workqueue_num_requeues(h->q, "r"), 4);

    hp_workqueue_forget(h->q, "r");
    assert_int_equal(hp_workqueue_num_requeues(h->q, "r"), 0);
    assert_int_equal(hp_workqueue_validate(h->q), 0);
    h_close(h);
    free(h);
}

/* The queue's own metrics: adds and retries counted as they happen, workqueue_depth read when
 * the registry renders, so a delayed key that became ready counts before it is dispatched. */
static int metric(const char *name, const char *queue, double *v)
{
    struct hp_buf b;
    char line[128];
    const char *p;
    int found = 0;

    hp_buf_init(&b, 0);
    hp_metrics_render(&b);
    snprintf(line, sizeof(line), "\n%s{name=\"%s\"} ", name, queue);
    if ((p = strstr(b.data, line)) != NULL) {
        *v = strtod(p + strlen(line), NULL);
        found = 1;
        assert_null(strstr(p + 1, line)); /* one sample per queue */
    }
    hp_buf_free(&b);
    return found;
}

static double metric_or_fail(const char *name, const char *queue)
{
    double v = -1;
    if (!metric(name, queue, &v))
        fail_msg("no %s{name=\"%s\"}", name, queue);
    return v;
}

static void test_metrics(void **state)
{
    struct h *h = hp_xmalloc(sizeof(*h));
    struct hp_workqueue_opts opts = fake_opts(h, 1000, 60000);
    double v;
    (void)state;

    hp_metrics_init();
    opts.name = "q1";
    h_init(h, &opts);
    h->async_ms = -1;
    assert_true(metric("workqueue_depth", "q1", &v)); /* sampled from the start */
    assert_true(v == 0);
    assert_false(metric("workqueue_adds_total", "q1", &v));

    add(h, "a");
    add(h, "b");
    add(h, "a"); /* counted, deduplicated */
    assert_true(metric_or_fail("workqueue_adds_total", "q1") == 3);
    assert_true(metric_or_fail("workqueue_depth", "q1") == 2);
    add_after(h, "later", 5000);
    hp_workqueue_add_rate_limited(h->q, "failing");
    assert_true(metric_or_fail("workqueue_adds_total", "q1") == 3); /* delayed: not adds */
    assert_true(metric_or_fail("workqueue_retries_total", "q1") == 1);
    assert_true(metric_or_fail("workqueue_depth", "q1") == 2);

    /* Due by the clock: ready at once, before any dispatch ran. */
    h->clock += 5000;
    hp__workqueue_expire(h->q);
    assert_int_equal(h->n, 0);
    assert_true(metric_or_fail("workqueue_depth", "q1") == 4);
    h_settle(h); /* dispatch: all four ran */
    assert_int_equal(h->n, 4);
    assert_true(metric_or_fail("workqueue_depth", "q1") == 0);

    /* Two queues, one family; a closed queue leaves it. */
    struct h *h2 = hp_xmalloc(sizeof(*h2));
    struct hp_workqueue_opts o2 = fake_opts(h2, 1000, 60000);
    o2.name = "q\"2";
    h_init(h2, &o2);
    add(h2, "x");
    assert_true(metric_or_fail("workqueue_depth", "q\\\"2") == 1); /* escaped label value */
    assert_true(metric_or_fail("workqueue_depth", "q1") == 0);
    hp_workqueue_close(h->q, on_closed, h);
    assert_false(metric("workqueue_depth", "q1", &v));
    assert_true(metric_or_fail("workqueue_depth", "q\\\"2") == 1);
    h_close_finish(h);
    h_close(h2);
    free(h2);
    free(h);
    hp_metrics_free();
}

static void test_forget(void **state)
{
    struct h *h = hp_xmalloc(sizeof(*h));
    (void)state;

    h_init(h, &default_opts);
    h->async_ms = -1;
    assert_int_equal(hp_workqueue_num_requeues(h->q, "f"), 0);
    hp_workqueue_add_rate_limited(h->q, "f");
    hp_workqueue_add_rate_limited(h->q, "f");
    hp_workqueue_add_rate_limited(h->q, "f");
    assert_int_equal(hp_workqueue_validate(h->q), 0);
    assert_int_equal(hp_workqueue_num_requeues(h->q, "f"), 3);
    assert_int_equal(hp_workqueue_delayed(h->q), 1); /* one heap entry, earliest (5 ms) kept */
    hp_workqueue_forget(h->q, "f");
    hp_workqueue_forget(h->q, "unknown");
    assert_int_equal(hp_workqueue_num_requeues(h->q, "f"), 0);
    assert_int_equal(hp_workqueue_validate(h->q), 0);
    h_run(h);
    assert_int_equal(count_key(h, "f"), 1);
    /* after forget, the next failure starts from base again */
    hp_workqueue_add_rate_limited(h->q, "f");
    assert_int_equal(hp_workqueue_num_requeues(h->q, "f"), 1);
    hp_workqueue_forget(h->q, "f");
    h_run(h);
    assert_int_equal(count_key(h, "f"), 2);
    h_close(h);
    free(h);
}

static void test_backoff_table(void **state)
{
    static const struct {
        uint64_t base, max;
        unsigned failures;
        uint64_t want;
    } cases[] = {
        {5, 300000, 0, 5},
        {5, 300000, 1, 10},
        {5, 300000, 10, 5120},
        {5, 300000, 16, 300000},
        {5, 300000, 64, 300000},
        {5, 300000, 1000, 300000},
        {5, 300000, UINT_MAX, 300000},
        {1, UINT64_MAX, 63, UINT64_C(1) << 63},
        {1, UINT64_MAX, 64, UINT64_MAX},
        {2, UINT64_MAX, 63, UINT64_MAX},
        {3, UINT64_MAX, 62, UINT64_C(3) << 62}, /* 1.4e19 still fits */
        {5, UINT64_MAX, 62, UINT64_MAX},        /* 2.3e19 does not */
        {UINT64_MAX, 10, 0, 10},
        {UINT64_MAX, UINT64_MAX, 1, UINT64_MAX},
        {7, 1000, 7, 896},
        {7, 1000, 8, 1000},
        {0, 1000, 5, 0},
        {0, 1000, 1000, 0},
        {10, 5, 0, 5}, /* max below base: max wins, like client-go */
    };
    size_t i;
    (void)state;

    for (i = 0; i < HP_ARRAY_SIZE(cases); i++) {
        uint64_t got = hp_workqueue_backoff_ms(cases[i].base, cases[i].max, cases[i].failures);
        if (got != cases[i].want)
            fail_msg("case %zu: backoff(%llu, %llu, %u) = %llu, want %llu", i,
                     (unsigned long long)cases[i].base, (unsigned long long)cases[i].max,
                     cases[i].failures, (unsigned long long)got, (unsigned long long)cases[i].want);
    }
}

static void test_shutdown_pending(void **state)
{
    struct h *h = hp_xmalloc(sizeof(*h));
    (void)state;

    h_init(h, &default_opts);
    h->async_ms = -1;
    add_after(h, "later", 5000);
    add_after(h, "soon", 1);
    add(h, "ready");
    hp_workqueue_add_rate_limited(h->q, "failing");
    assert_int_equal(hp_workqueue_validate(h->q), 0);
    h_close(h); /* nothing runs: shutdown stops dispatch; the timers are closed */
    assert_int_equal(h->n, 0);
    free(h);
}

/* Shutdown from inside the process callback while other keys are queued and in flight; done()
 * is still allowed until the close callback. */
static void shutdown_hook(struct h *h, const char *key)
{
    if (strcmp(key, "b") == 0) {
        hp_workqueue_close(h->q, on_closed, h);
        assert_int_equal(hp_workqueue_validate(h->q), 0);
        finish(h, "a"); /* done() by an equal string, between shutdown and close */
        assert_int_equal(hp_workqueue_active(h->q), 1);
        h->in_add = 1;
        hp_workqueue_add(h->q, "late"); /* ignored after shutdown */
        hp_workqueue_add_after(h->q, "late", 5);
        hp_workqueue_add_rate_limited(h->q, "late");
        h->in_add = 0;
        assert_int_equal(hp_workqueue_num_requeues(h->q, "late"), 0);
    }
}

static void test_shutdown_while_processing(void **state)
{
    const struct hp_workqueue_opts opts = {
        .base_delay_ms = 5, .max_delay_ms = 1000, .max_active = 2};
    struct h *h = hp_xmalloc(sizeof(*h));
    (void)state;

    h_init(h, &opts);
    h->async_ms = 1;
    h->hook = shutdown_hook;
    add(h, "a");
    add(h, "b");
    add(h, "c");
    add(h, "d");
    assert_int_equal(uv_run(&h->loop, UV_RUN_DEFAULT), 0);
    assert_false(h->guard_fired);
    assert_int_equal(h->closed, 1);
    assert_int_equal(h->n, 2);         /* a and b started; c and d never dispatched */
    assert_int_equal(h->ninflight, 1); /* b: its job ended after the close, without done() */
    uv_close((uv_handle_t *)&h->guard, NULL);
    assert_int_equal(uv_run(&h->loop, UV_RUN_DEFAULT), 0);
    assert_int_equal(uv_loop_close(&h->loop), 0);
    free(h);
}

/* hp_workqueue_shut_down, before the close: a key being processed finishes with done(), but
 * nothing is dispatched any more (not the key that was waiting for its slot, nor a delayed or a
 * rate-limited key whose time comes, nor the finished key added again), adds are ignored, and
 * the shut-down queue does not keep the loop running. The close comes later. */
static void test_shut_down_then_close(void **state)
{
    const struct hp_workqueue_opts opts = {
        .base_delay_ms = 1, .max_delay_ms = 1000, .max_active = 1};
    struct h *h = hp_xmalloc(sizeof(*h));
    (void)state;

    h_init(h, &opts);
    h->async_ms = 30;
    add(h, "a");
    for (int i = 0; i < 100 && h->n == 0; i++)
        (void)uv_run(&h->loop, UV_RUN_NOWAIT);
    assert_int_equal(h->n, 1);
    add(h, "b"); /* waits for a's slot */
    add(h, "a"); /* dirty: would run again after done */
    add_after(h, "c", 2);
    hp_workqueue_add_rate_limited(h->q, "d");
    hp_workqueue_shut_down(h->q);
    hp_workqueue_shut_down(h->q); /* twice is once */
    add(h, "e");
    add_after(h, "e", 1);
    assert_int_equal(hp_workqueue_validate(h->q), 0);
    h_run(h); /* a's job ends (done), then the loop has nothing left to wait for */
    assert_int_equal(h->n, 1);
    assert_int_equal(h->ninflight, 0);
    assert_int_equal(hp_workqueue_active(h->q), 0);
    assert_int_equal(h->closed, 0);
    h_close(h);
    assert_int_equal(h->n, 1);
    free(h);
}

/* A callback that re-adds its key and finishes synchronously must not starve the loop: one pass
 * per loop iteration, so a check handle runs between consecutive runs. */
static size_t checks;

static void on_check(uv_check_t *c)
{
    (void)c;
    checks++;
}

static void spin_hook(struct h *h, const char *key)
{
    if (h->n < h->limit)
        add(h, key);
}

static void test_no_starvation(void **state)
{
    struct h *h = hp_xmalloc(sizeof(*h));
    uv_check_t check;
    (void)state;

    h_init(h, &default_opts);
    h->async_ms = -1;
    h->hook = spin_hook;
    h->limit = 500;
    checks = 0;
    assert_int_equal(uv_check_init(&h->loop, &check), 0);
    assert_int_equal(uv_check_start(&check, on_check), 0);
    uv_unref((uv_handle_t *)&check);
    add(h, "spin");
    h_run(h);
    assert_int_equal(h->n, 500);
    assert_true(checks >= 499);
    uv_close((uv_handle_t *)&check, NULL);
    h_close(h);
    free(h);
}

/* done() for a key that is not being processed is refused (logged), not a crash. */
static void test_done_unknown(void **state)
{
    struct h *h = hp_xmalloc(sizeof(*h));
    int devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
    (void)state;

    assert_true(devnull >= 0);
    hp_log_set_fd(devnull);
    h_init(h, &default_opts);
    h->async_ms = -1;
    hp_workqueue_done(h->q, "nobody");
    add(h, "queued");
    hp_workqueue_done(h->q, "queued"); /* queued, not processing */
    assert_int_equal(hp_workqueue_len(h->q), 1);
    assert_int_equal(hp_workqueue_validate(h->q), 0);
    h_run(h);
    assert_int_equal(h->n, 1);
    h_close(h);
    hp_log_set_fd(-1);
    close(devnull);
    free(h);
}

/* Many keys with random delays: validate after every operation, all run exactly once. */
static uint64_t rng = 0x2545f4914f6cdd1dull;

static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static void test_many_delays(void **state)
{
    const struct hp_workqueue_opts opts = {.base_delay_ms = 1, .max_delay_ms = 50, .max_active = 8};
    struct h *h = hp_xmalloc(sizeof(*h));
    char key[16];
    size_t i;
    (void)state;

    h_init(h, &opts);
    h->async_ms = 0;
    for (i = 0; i < 1000; i++) {
        snprintf(key, sizeof(key), "k%zu", i % 300);
        switch (rnd() % 3) {
        case 0:
            add(h, key);
            break;
        case 1:
            add_after(h, key, rnd() % 20);
            break;
        default:
            hp_workqueue_add_rate_limited(h->q, key);
            assert_int_equal(hp_workqueue_validate(h->q), 0);
            break;
        }
    }
    h_run(h);
    assert_true(h->n >= 300);
    assert_true(h->max_inflight <= 8);
    assert_int_equal(hp_workqueue_len(h->q), 0);
    assert_int_equal(hp_workqueue_delayed(h->q), 0);
    assert_int_equal(hp_workqueue_active(h->q), 0);
    for (i = 0; i < 300; i++) {
        snprintf(key, sizeof(key), "k%zu", i);
        hp_workqueue_forget(h->q, key);
    }
    assert_int_equal(hp_workqueue_validate(h->q), 0);
    h_close(h);
    free(h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dedup),
        cmocka_unit_test(test_add_during_processing),
        cmocka_unit_test(test_max_active),
        cmocka_unit_test(test_add_after_order),
        cmocka_unit_test(test_add_after_earlier_wins),
        cmocka_unit_test(test_rate_limited),
        cmocka_unit_test(test_forget),
        cmocka_unit_test(test_backoff_table),
        cmocka_unit_test(test_shutdown_pending),
        cmocka_unit_test(test_shutdown_while_processing),
        cmocka_unit_test(test_shut_down_then_close),
        cmocka_unit_test(test_no_starvation),
        cmocka_unit_test(test_done_unknown),
        cmocka_unit_test(test_many_delays),
        cmocka_unit_test(test_metrics),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
