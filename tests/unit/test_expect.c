/* Unit tests for expect: created/deleted expectations until the watch shows them or they lapse,
 * a contradicting watch event, re-expecting a name, the cap, expiry in order. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "hostpath/common.h"
#include "hostpath/expect.h"

static void test_until_observed(void **state)
{
    struct hp_expect *x = hp_expect_new(1000, 100);
    (void)state;
    assert_int_equal(hp_expect_get(x, "pv-a", 0), HP_EXPECT_NONE);
    hp_expect_created(x, "pv-a", 10);
    hp_expect_deleted(x, "pv-b", 10);
    assert_int_equal(hp_expect_get(x, "pv-a", 20), HP_EXPECT_PRESENT);
    assert_int_equal(hp_expect_get(x, "pv-b", 20), HP_EXPECT_GONE);
    /* The watch is behind: the old copy of pv-b, the absence of pv-a. */
    hp_expect_observed(x, "pv-b", 1);
    hp_expect_observed(x, "pv-a", 0);
    assert_int_equal(hp_expect_get(x, "pv-a", 20), HP_EXPECT_PRESENT);
    assert_int_equal(hp_expect_get(x, "pv-b", 20), HP_EXPECT_GONE);
    /* It caught up. */
    hp_expect_observed(x, "pv-a", 1);
    hp_expect_observed(x, "pv-b", 0);
    assert_int_equal(hp_expect_get(x, "pv-a", 20), HP_EXPECT_NONE);
    assert_int_equal(hp_expect_get(x, "pv-b", 20), HP_EXPECT_NONE);
    assert_int_equal(hp_expect_len(x), 0);
    assert_int_equal(hp_expect_validate(x), 0);
    hp_expect_free(x);
}

struct seen {
    char names[256];
    int present, gone;
};

static void on_lapsed(const char *name, enum hp_expect_state st, void *data)
{
    struct seen *s = data;
    strcat(s->names, name);
    strcat(s->names, ",");
    s->present += st == HP_EXPECT_PRESENT;
    s->gone += st == HP_EXPECT_GONE;
}

static void test_lapse_in_order(void **state)
{
    struct hp_expect *x = hp_expect_new(100, 100);
    struct seen s = {"", 0, 0};
    (void)state;
    hp_expect_created(x, "a", 0);
    hp_expect_deleted(x, "b", 10);
    hp_expect_created(x, "c", 20);
    hp_expect_deleted(x, "a", 30); /* re-expected: moves to the end, now gone */
    assert_int_equal(hp_expect_validate(x), 0);
    assert_int_equal(hp_expect_get(x, "b", 109), HP_EXPECT_GONE);
    assert_int_equal(hp_expect_get(x, "b", 110), HP_EXPECT_NONE); /* lapsed for readers */
    hp_expect_expire(x, 125, on_lapsed, &s);
    assert_string_equal(s.names, "b,c,");
    assert_int_equal(s.gone, 1);
    assert_int_equal(s.present, 1);
    assert_int_equal(hp_expect_get(x, "a", 125), HP_EXPECT_GONE);
    hp_expect_expire(x, 1000, NULL, NULL);
    assert_int_equal(hp_expect_len(x), 0);
    hp_expect_free(x);
}

static void test_cap(void **state)
{
    struct hp_expect *x = hp_expect_new(1000, 3);
    char name[16];
    (void)state;
    for (int i = 0; i < 10; i++) {
        snprintf(name, sizeof(name), "pv-%d", i);
        hp_expect_deleted(x, name, (uint64_t)i);
        assert_int_equal(hp_expect_validate(x), 0);
    }
    assert_int_equal(hp_expect_len(x), 3);
    assert_int_equal(hp_expect_get(x, "pv-6", 10), HP_EXPECT_NONE); /* the oldest went */
    assert_int_equal(hp_expect_get(x, "pv-7", 10), HP_EXPECT_GONE);
    assert_int_equal(hp_expect_get(x, "pv-9", 10), HP_EXPECT_GONE);
    hp_expect_free(x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_until_observed),
        cmocka_unit_test(test_lapse_in_order),
        cmocka_unit_test(test_cap),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
