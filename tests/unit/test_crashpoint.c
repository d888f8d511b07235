/* Unit tests for crashpoint: counting, the n-th hit dying by SIGKILL (in a forked child, so the
 * test runner survives), and malformed settings that disarm.
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "hostpath/crashpoint.h"

#define N_CASES(a) (sizeof(a) / sizeof((a)[0]))

static void arm(const char *value)
{
    if (value)
        assert_int_equal(setenv(HP_CRASH_ENV, value, 1), 0);
    else
        assert_int_equal(unsetenv(HP_CRASH_ENV), 0);
    hp_crashpoint_reset();
}

static int teardown(void **state)
{
    (void)state;
    /* Leave nothing armed for the next test. */
    (void)unsetenv(HP_CRASH_ENV);
    hp_crashpoint_reset();
    return 0;
}

/* What a child that passed `name` `times` times did. */
struct outcome {
    int status;       /* from waitpid */
    char out[512];    /* what it wrote to stderr, and "passed <i>\n" after each survived call */
};

/* Runs the crash point in a forked child with the configuration already armed in this process
 * (the child inherits it). The child never returns into cmocka: it _exits. */
static void run_child(const char *name, unsigned times, struct outcome *o)
{
    int p[2];
    assert_int_equal(pipe(p), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        (void)close(p[0]);
        if (dup2(p[1], STDERR_FILENO) < 0)
            _exit(101);
        for (unsigned i = 1; i <= times; i++) {
            char line[32];
            hp_crashpoint(name);
            int n = snprintf(line, sizeof(line), "passed %u\n", i);
            if (write(p[1], line, (size_t)n) != n)
                _exit(102);
        }
        /* Survived: report the count through the exit code. */
        _exit((int)(hp_crashpoint_hits() & 0x3f));
    }
    (void)close(p[1]);
    size_t len = 0;
    for (;;) {
        ssize_t n = read(p[0], o->out + len, sizeof(o->out) - 1 - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    o->out[len] = '\0';
    (void)close(p[0]);
    while (waitpid(pid, &o->status, 0) < 0)
        assert_int_equal(errno, EINTR);
}

static void test_unarmed(void **state)
{
    (void)state;

    arm(NULL);
    for (int i = 0; i < 5; i++)
        hp_crashpoint("x");
    assert_int_equal(hp_crashpoint_hits(), 0); /* not armed: not even counted */
}

static void test_counts_without_dying(void **state)
{
    (void)state;

    arm("x:3");
    for (int i = 0; i < 10; i++)
        hp_crashpoint("other");
    hp_crashpoint("");
    hp_crashpoint("x:3");
    hp_crashpoint("xx");
    assert_int_equal(hp_crashpoint_hits(), 0); /* other points do not count */
    hp_crashpoint("x");
    hp_crashpoint("x");
    assert_int_equal(hp_crashpoint_hits(), 2);

    /* A reset starts over, so two more are still safe. */
    hp_crashpoint_reset();
    assert_int_equal(hp_crashpoint_hits(), 0);
    hp_crashpoint("x");
    hp_crashpoint("x");
    assert_int_equal(hp_crashpoint_hits(), 2);
    arm(NULL);
}

static void test_third_hit_kills(void **state)
{
    struct outcome o;
    (void)state;

    arm("x:3");
    run_child("x", 5, &o);
    if (!WIFSIGNALED(o.status) || WTERMSIG(o.status) != SIGKILL)
        fail_msg("child status 0x%x, want killed by SIGKILL; output \"%s\"", o.status, o.out);
    /* Two calls passed, the third never returned, and it said why on stderr. */
    assert_non_null(strstr(o.out, "passed 2\n"));
    assert_null(strstr(o.out, "passed 3"));
    assert_non_null(strstr(o.out, "crashpoint: x reached 3 time(s); SIGKILL\n"));
    assert_true(strstr(o.out, "passed 2\n") < strstr(o.out, "crashpoint:"));
    /* The parent's own count is its own. */
    assert_int_equal(hp_crashpoint_hits(), 0);
}

static void test_first_hit_kills(void **state)
{
    struct outcome o;
    (void)state;

    /* The name may itself hold colons: the count is after the last one. */
    arm("journal:write:1");
    run_child("journal:write", 3, &o);
    assert_true(WIFSIGNALED(o.status) && WTERMSIG(o.status) == SIGKILL);
    assert_null(strstr(o.out, "passed"));
    assert_non_null(strstr(o.out, "crashpoint: journal:write reached 1"));
}

static void test_fewer_hits_survive(void **state)
{
    struct outcome o;
    (void)state;

    arm("x:3");
    run_child("x", 2, &o);
    assert_true(WIFEXITED(o.status));
    assert_int_equal(WEXITSTATUS(o.status), 2);
    assert_string_equal(o.out, "passed 1\npassed 2\n");

    /* A child that passes other points only, however often, survives. */
    run_child("y", 20, &o);
    assert_true(WIFEXITED(o.status));
    assert_int_equal(WEXITSTATUS(o.status), 0);
}

/* Arms `value`, passes point `name` 5 times in a child and requires that nothing counted and
 * nothing died. */
static void expect_disarmed(const char *value, const char *name, size_t i)
{
    struct outcome o;

    arm(value);
    /* In a child: a wrongly armed point must fail this test, not kill the runner. */
    run_child(name, 5, &o);
    if (!WIFEXITED(o.status) || WEXITSTATUS(o.status) != 0)
        fail_msg("case %zu \"%.20s\": child status 0x%x (exit %d = hits), want a clean exit "
                 "with no hit counted",
                 i, value, o.status, WIFEXITED(o.status) ? WEXITSTATUS(o.status) : -1);
    assert_int_equal(hp_crashpoint_hits(), 0);
}

static void test_malformed_disarms(void **state)
{
    static const char *const cases[] = {
        "x", "x:0", ":3", "x:abc", "x:", "x:3abc", "x:3 ", "", ":",
    };
    char long_point[151], long_value[160];
    (void)state;

    for (size_t i = 0; i < N_CASES(cases); i++)
        expect_disarmed(cases[i], "x", i);

    /* A name longer than the crash point can hold is refused, not cut short. */
    memset(long_point, 'n', 150);
    long_point[150] = '\0';
    snprintf(long_value, sizeof(long_value), "%s:1", long_point);
    expect_disarmed(long_value, long_point, N_CASES(cases));
}

static void test_negative_count_disarms(void **state)
{
    (void)state;
    /* strtoul reads "-1" as ULONG_MAX: a malformed count must disarm like "x:abc", not arm a
     * point that counts forever and never fires. */
    expect_disarmed("x:-1", "x", 0);
}

static void test_rearm(void **state)
{
    struct outcome o;
    (void)state;

    /* A malformed value disarms what was armed before it ... */
    arm("x:1");
    arm("x:zero");
    run_child("x", 3, &o);
    assert_true(WIFEXITED(o.status));
    /* ... and a good one arms again. */
    arm("x:2");
    run_child("x", 3, &o);
    assert_true(WIFSIGNALED(o.status) && WTERMSIG(o.status) == SIGKILL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_unarmed, teardown),
        cmocka_unit_test_teardown(test_counts_without_dying, teardown),
        cmocka_unit_test_teardown(test_third_hit_kills, teardown),
        cmocka_unit_test_teardown(test_first_hit_kills, teardown),
        cmocka_unit_test_teardown(test_fewer_hits_survive, teardown),
        cmocka_unit_test_teardown(test_malformed_disarms, teardown),
        cmocka_unit_test_teardown(test_negative_count_disarms, teardown),
        cmocka_unit_test_teardown(test_rearm, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
