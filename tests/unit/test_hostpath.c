/* Unit tests for hostpath: the bounded threadpool queue of filesystem requests, with a real
 * loop and threadpool. What the requests do is test_fsops.c's business; here they are
 * provisionings under a mkdtemp root, slowed down where a test needs them to run long.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cmocka.h>
#include <uv.h>

#include "hostpath/hostpath.h"

/* mkdirat interposer: a provisioning calls mkdirat on the worker threads. When slow_ms is set,
 * each call sleeps, counting how many run at once, so that the tests can observe the
 * max_inflight cap and keep a request "running" while the loop closes. */

static atomic_int slow_ms, in_mkdirat, max_in_mkdirat, mkdirat_started;

int mkdirat(int fd, const char *path, mode_t mode)
{
    int ms = atomic_load(&slow_ms);

    if (ms > 0) {
        int now = atomic_fetch_add(&in_mkdirat, 1) + 1;
        int seen = atomic_load(&max_in_mkdirat);
        while (now > seen && !atomic_compare_exchange_weak(&max_in_mkdirat, &seen, now))
            ;
        atomic_store(&mkdirat_started, 1);
        usleep((useconds_t)ms * 1000);
        atomic_fetch_sub(&in_mkdirat, 1);
    }
    return (int)syscall(SYS_mkdirat, fd, path, mode);
}

static char base_dir[PATH_MAX];
static int test_seq;

struct result {
    int called;
    int status;
    int order; /* completion order */
    char msg[1024];
    struct hp_fsop *op;
};

struct fx {
    uv_loop_t loop;
    struct hp_hostpath *hp;
    char pv[PATH_MAX];
    int idle;
    int completed;
};

static struct fx *cur_fx;

static void on_done(struct hp_fsop *op, int status, void *data)
{
    struct result *r = data;

    r->called++;
    assert_int_equal(status, op->status); /* the request first, then its status */
    r->status = status;
    r->order = cur_fx ? cur_fx->completed++ : 0;
    (void)snprintf(r->msg, sizeof(r->msg), "%s", op->msg);
    assert_ptr_equal(op, r->op);
    if (op->status == 0)
        assert_string_equal(op->msg, "");
    else
        assert_true(op->msg[0] != '\0');
    hp_fsop_free(op);
    r->op = NULL;
}

static void on_idle(void *data)
{
    struct fx *f = data;
    f->idle++;
}

/* Runs the loop until *counter >= want, bounded by 20 s. */
static void run_until(uv_loop_t *loop, int *counter, int want)
{
    uint64_t deadline = uv_hrtime() + 20ull * 1000 * 1000 * 1000;

    while (*counter < want && uv_hrtime() < deadline) {
        (void)uv_run(loop, UV_RUN_NOWAIT);
        if (*counter < want)
            usleep(200);
    }
    if (*counter < want)
        fail_msg("timed out: %d of %d callbacks", *counter, want);
}

static int lexists(const char *dir, const char *name)
{
    char p[PATH_MAX];
    struct stat st;
    assert_true(snprintf(p, sizeof(p), "%s/%s", dir, name) < (int)sizeof(p));
    return lstat(p, &st) == 0;
}

static void fx_open(struct fx *f, unsigned max_inflight)
{
    memset(f, 0, sizeof(*f));
    assert_true(snprintf(f->pv, sizeof(f->pv), "%s/t%d", base_dir, ++test_seq) <
                (int)sizeof(f->pv));
    assert_int_equal(uv_loop_init(&f->loop), 0);
    f->hp = hp_hostpath_new(&f->loop, max_inflight);
    assert_non_null(f->hp);
    cur_fx = f;
}

static void fx_close(struct fx *f)
{
    hp_hostpath_close(f->hp, on_idle, f);
    assert_int_equal(f->idle, 0); /* never from inside close */
    run_until(&f->loop, &f->idle, 1);
    assert_int_equal(f->idle, 1);
    assert_int_equal(uv_run(&f->loop, UV_RUN_NOWAIT), 0);
    assert_int_equal(uv_loop_close(&f->loop), 0);
    cur_fx = NULL;
}

/* Queues the provisioning of rel (PV "pvc-<rel with / as ->") under the fixture's root. */
static void submit(struct fx *f, const char *rel, hp_hostpath_done_cb cb, struct result *r)
{
    char pv[64];
    struct hp_fsop *op = hp_fsop_new(HP_FSOP_PROVISION, f->pv);
    size_t i;

    (void)snprintf(pv, sizeof(pv), "pvc-%s", rel);
    for (i = 0; pv[i]; i++)
        if (pv[i] == '/')
            pv[i] = '-';
    op->rec.pv = strdup(pv);
    op->rec.path = strdup(rel);
    op->rec.claim_uid = strdup("uid");
    op->create_root = 1;
    op->mode = 0755;
    memset(r, 0, sizeof(*r));
    r->op = op;
    hp_hostpath_submit(f->hp, op, cb, r);
}

static int submit_sync(struct fx *f, const char *rel, struct result *r)
{
    submit(f, rel, on_done, r);
    assert_int_equal(r->called, 0); /* callbacks never fire before return */
    run_until(&f->loop, &r->called, 1);
    assert_int_equal(r->called, 1);
    return r->status;
}

/* ------------------------------------------------------------------------------------------ */

static void test_runs_and_reports(void **state)
{
    struct fx f;
    struct result r;

    (void)state;
    fx_open(&f, 4);
    assert_int_equal(hp_hostpath_pending(f.hp), 0);
    assert_int_equal(submit_sync(&f, "vol", &r), 0);
    assert_true(lexists(f.pv, "vol"));
    /* A failing request reports its status and message. */
    assert_int_equal(submit_sync(&f, "../escape", &r), -EINVAL);
    assert_non_null(strstr(r.msg, "refusing"));
    assert_int_equal(hp_hostpath_pending(f.hp), 0);
    fx_close(&f);
}

static void test_max_inflight(void **state)
{
    struct fx f;
    struct result r[20];
    char rel[32];
    int i, done = 0;

    (void)state;
    fx_open(&f, 2);
    atomic_store(&max_in_mkdirat, 0);
    atomic_store(&slow_ms, 20);
    /* Create pv_dir first so that each job below makes exactly one directory. */
    assert_int_equal(submit_sync(&f, "warm", &r[0]), 0);
    atomic_store(&max_in_mkdirat, 0);
        for (i = 0; i < 20; i++) {
        (void)snprintf(rel, sizeof(rel), "mi-%02d", i);
        submit(&f, rel, on_done, &r[i]);
    }
    assert_int_equal(hp_hostpath_pending(f.hp), 20);
    while (done < 20) {
        int before = done;
        run_until(&f.loop, &f.completed, f.completed + 1);
        done = 0;
        for (i = 0; i < 20; i++)
            done += r[i].called;
        assert_true(done > before);
        assert_int_equal(hp_hostpath_pending(f.hp), (size_t)(20 - done));
    }
    atomic_store(&slow_ms, 0);
    for (i = 0; i < 20; i++)
        assert_int_equal(r[i].status, 0);
    /* The pool has 4 threads; at most 2 of our jobs ever ran at once, and 2 did. */
    assert_int_equal(atomic_load(&max_in_mkdirat), 2);
    fx_close(&f);
}

static void test_fifo_order(void **state)
{
    struct fx f;
    struct result r[8];
    char rel[32];
    int i;

    (void)state;
    fx_open(&f, 1);
        for (i = 0; i < 8; i++) {
        (void)snprintf(rel, sizeof(rel), "o/%d", i);
        submit(&f, rel, on_done, &r[i]);
    }
    assert_int_equal(hp_hostpath_pending(f.hp), 8);
    run_until(&f.loop, &f.completed, 8);
    for (i = 0; i < 8; i++) {
        assert_int_equal(r[i].called, 1);
        assert_int_equal(r[i].status, 0);
        assert_int_equal(r[i].order, i);
    }
    assert_int_equal(hp_hostpath_pending(f.hp), 0);
    fx_close(&f);
}

static void test_close_cancels_queued(void **state)
{
    struct fx f;
    struct result r[5], late;
    char rel[32];
    uint64_t deadline;
    int i;

    (void)state;
    fx_open(&f, 1);
    assert_int_equal(submit_sync(&f, "warm", &r[0]), 0);
    f.completed = 0;
            atomic_store(&mkdirat_started, 0);
    atomic_store(&slow_ms, 150);
    for (i = 0; i < 5; i++) {
        (void)snprintf(rel, sizeof(rel), "c%d", i);
        submit(&f, rel, on_done, &r[i]);
    }
    /* Wait (bounded) until the first job is inside mkdirat on a worker. */
    deadline = uv_hrtime() + 10ull * 1000 * 1000 * 1000;
    while (!atomic_load(&mkdirat_started) && uv_hrtime() < deadline)
        usleep(200);
    assert_true(atomic_load(&mkdirat_started));
    hp_hostpath_close(f.hp, on_idle, &f);
    for (i = 0; i < 5; i++)
        assert_int_equal(r[i].called, 0); /* nothing completes inside close */
    /* Work submitted while closing is cancelled too. */
    submit(&f, "late", on_done, &late);
    run_until(&f.loop, &f.idle, 1);
    atomic_store(&slow_ms, 0);
    assert_int_equal(r[0].called, 1);
    assert_int_equal(r[0].status, 0); /* running: finished normally */
    assert_true(lexists(f.pv, "c0"));
    for (i = 1; i < 5; i++) {
        char name[8];
        assert_int_equal(r[i].called, 1);
        assert_int_equal(r[i].status, -ECANCELED);
        assert_non_null(strstr(r[i].msg, "cancel"));
        (void)snprintf(name, sizeof(name), "c%d", i);
        assert_false(lexists(f.pv, name));
    }
    assert_int_equal(late.called, 1);
    assert_int_equal(late.status, -ECANCELED);
    assert_false(lexists(f.pv, "late"));
    assert_int_equal(f.idle, 1);
    assert_int_equal(f.completed, 6); /* every callback ran before on_idle */
    assert_int_equal(uv_run(&f.loop, UV_RUN_NOWAIT), 0);
    assert_int_equal(uv_loop_close(&f.loop), 0);
    cur_fx = NULL;
}

/* Closing from inside a completion callback. */
static struct fx *close_fx;

static void on_done_then_close(struct hp_fsop *op, int status, void *data)
{
    on_done(op, status, data);
    hp_hostpath_close(close_fx->hp, on_idle, close_fx);
    assert_int_equal(close_fx->idle, 0);
}

static void test_close_from_callback(void **state)
{
    struct fx f;
    struct result r[3];

    (void)state;
    fx_open(&f, 1);
    close_fx = &f;
        submit(&f, "a", on_done_then_close, &r[0]);
    submit(&f, "b", on_done, &r[1]);
    submit(&f, "c", on_done, &r[2]);
    run_until(&f.loop, &f.idle, 1);
    assert_int_equal(r[0].status, 0);
    assert_int_equal(r[1].status, -ECANCELED);
    assert_int_equal(r[2].status, -ECANCELED);
    assert_int_equal(f.completed, 3);
    assert_int_equal(uv_loop_close(&f.loop), 0);
    cur_fx = NULL;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    (void)remove(path);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_runs_and_reports),
        cmocka_unit_test(test_max_inflight),
        cmocka_unit_test(test_fifo_order),
        cmocka_unit_test(test_close_cancels_queued),
        cmocka_unit_test(test_close_from_callback),
    };
    int rc;

    umask(022);
    (void)snprintf(base_dir, sizeof(base_dir), "/tmp/hp-unit-hostpath-XXXXXX");
    if (!mkdtemp(base_dir)) {
        perror("mkdtemp");
        return 1;
    }
    rc = cmocka_run_group_tests_name("hostpath", tests, NULL, NULL);
    (void)nftw(base_dir, rm_entry, 64, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
    return rc;
}
