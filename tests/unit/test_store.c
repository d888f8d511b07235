/* Unit tests for store.c: put/get/remove, replace passes, 100k churn, colliding keys. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "hostpath/buf.h"
#include "hostpath/common.h"
#include "hostpath/store.h"

struct obj {
    int version;
    char key[];
};

static size_t freed;

static const char *obj_key(const void *o)
{
    return ((const struct obj *)o)->key;
}

static void obj_free(void *o)
{
    freed++;
    free(o);
}

static const struct hp_store_ops ops = {obj_key, obj_free};

static struct obj *mk(const char *key, int version)
{
    size_t n = strlen(key);
    struct obj *o = hp_xmalloc(sizeof(*o) + n + 1);

    o->version = version;
    memcpy(o->key, key, n + 1);
    return o;
}

static int setup(void **state)
{
    (void)state;
    freed = 0;
    return 0;
}

static void test_put_get_remove(void **state)
{
    struct hp_store *s = hp_store_new(&ops);
    struct obj *o, *old;
    (void)state;

    assert_int_equal(hp_store_len(s), 0);
    assert_null(hp_store_get(s, "ns/a"));
    assert_null(hp_store_put(s, mk("ns/a", 1)));
    assert_null(hp_store_put(s, mk("ns/b", 1)));
    assert_int_equal(hp_store_len(s), 2);
    assert_int_equal(hp_store_validate(s), 0);

    o = hp_store_get(s, "ns/a");
    assert_non_null(o);
    assert_int_equal(o->version, 1);

    old = hp_store_put(s, mk("ns/a", 2)); /* replace hands back the old object */
    assert_ptr_equal(old, o);
    obj_free(old);
    assert_int_equal(hp_store_len(s), 2);
    assert_int_equal(((struct obj *)hp_store_get(s, "ns/a"))->version, 2);

    o = hp_store_remove(s, "ns/a");
    assert_non_null(o);
    assert_int_equal(o->version, 2);
    obj_free(o);
    assert_null(hp_store_get(s, "ns/a"));
    assert_null(hp_store_remove(s, "ns/a"));
    assert_null(hp_store_remove(s, "never"));
    assert_int_equal(hp_store_len(s), 1);
    assert_int_equal(hp_store_validate(s), 0);

    hp_store_free(s); /* frees ns/b */
    assert_int_equal(freed, 3);
}

struct removed {
    char names[16][16];
    size_t n;
};

static void on_removed(void *o, void *data)
{
    struct removed *r = data;

    assert_true(r->n < 16);
    snprintf(r->names[r->n++], sizeof(r->names[0]), "%s", ((struct obj *)o)->key);
    obj_free(o);
}

static int has_name(const struct removed *r, const char *name)
{
    size_t i;

    for (i = 0; i < r->n; i++) {
        if (strcmp(r->names[i], name) == 0)
            return 1;
    }
    return 0;
}

static void test_replace_pass(void **state)
{
    struct hp_store *s = hp_store_new(&ops);
    struct removed r = {.n = 0};
    void *old;
    (void)state;

    assert_null(hp_store_put(s, mk("a", 1)));
    assert_null(hp_store_put(s, mk("b", 1)));
    assert_null(hp_store_put(s, mk("c", 1)));

    hp_store_replace_begin(s);
    old = hp_store_put(s, mk("b", 2));
    assert_non_null(old);
    obj_free(old);
    assert_null(hp_store_put(s, mk("d", 2)));
    assert_int_equal(hp_store_validate(s), 0);
    hp_store_replace_end(s, on_removed, &r);

    assert_int_equal(r.n, 2);
    assert_true(has_name(&r, "a"));
    assert_true(has_name(&r, "c"));
    assert_int_equal(hp_store_len(s), 2);
    assert_int_equal(((struct obj *)hp_store_get(s, "b"))->version, 2);
    assert_non_null(hp_store_get(s, "d"));
    assert_null(hp_store_get(s, "a"));
    assert_int_equal(hp_store_validate(s), 0);

    /* Puts after the end of a pass count for the next one only if repeated after begin. */
    assert_null(hp_store_put(s, mk("e", 3)));
    hp_store_replace_begin(s);
    old = hp_store_put(s, mk("e", 4));
    obj_free(old);
    r.n = 0;
    hp_store_replace_end(s, on_removed, &r);
    assert_int_equal(r.n, 2);
    assert_true(has_name(&r, "b"));
    assert_true(has_name(&r, "d"));
    assert_int_equal(hp_store_len(s), 1);

    /* An empty relist removes everything; a NULL callback means the store frees. */
    hp_store_replace_begin(s);
    hp_store_replace_end(s, NULL, NULL);
    assert_int_equal(hp_store_len(s), 0);
    assert_int_equal(hp_store_validate(s), 0);
    hp_store_free(s);
    assert_int_equal(freed, 7);
}

/* A replace pass over many entries where removals shift runs across the array's end. */
static void test_replace_pass_large(void **state)
{
    struct hp_store *s = hp_store_new(&ops);
    char key[32];
    size_t i, kept = 0;
    (void)state;

    for (i = 0; i < 5000; i++) {
        snprintf(key, sizeof(key), "ns-%zu/claim-%zu", i % 7, i);
        assert_null(hp_store_put(s, mk(key, 0)));
    }
    hp_store_replace_begin(s);
    for (i = 0; i < 5000; i += 3) {
        snprintf(key, sizeof(key), "ns-%zu/claim-%zu", i % 7, i);
        obj_free(hp_store_put(s, mk(key, 1)));
        kept++;
    }
    hp_store_replace_end(s, NULL, NULL);
    assert_int_equal(hp_store_len(s), kept);
    assert_int_equal(hp_store_validate(s), 0);
    for (i = 0; i < 5000; i++) {
        struct obj *o;
        snprintf(key, sizeof(key), "ns-%zu/claim-%zu", i % 7, i);
        o = hp_store_get(s, key);
        if (i % 3 == 0) {
            assert_non_null(o);
            assert_int_equal(o->version, 1);
        } else {
            assert_null(o);
        }
    }
    hp_store_free(s);
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void)
{
    /* xorshift64: deterministic, so a failure reproduces */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

#define N 100000

static void test_100k(void **state)
{
    struct hp_store *s = hp_store_new(&ops);
    static uint8_t present[N];
    char key[48];
    size_t i, live = N;
    (void)state;

    memset(present, 0, sizeof(present));
    for (i = 0; i < N; i++) {
        snprintf(key, sizeof(key), "namespace-%zu/pvc-%zu", i % 97, i);
        assert_null(hp_store_put(s, mk(key, (int)i)));
        present[i] = 1;
        if (i % 25000 == 0)
            assert_int_equal(hp_store_validate(s), 0);
    }
    assert_int_equal(hp_store_len(s), N);
    assert_int_equal(hp_store_validate(s), 0);

    /* random deletes, including repeats of already deleted keys */
    for (i = 0; i < 2 * N; i++) {
        size_t k = (size_t)(rnd() % N);
        struct obj *o;
        snprintf(key, sizeof(key), "namespace-%zu/pvc-%zu", k % 97, k);
        o = hp_store_remove(s, key);
        if (present[k]) {
            assert_non_null(o);
            assert_int_equal(o->version, (int)k);
            obj_free(o);
            present[k] = 0;
            live--;
        } else {
            assert_null(o);
        }
        if (i % 40000 == 0)
            assert_int_equal(hp_store_validate(s), 0);
    }
    assert_int_equal(hp_store_len(s), live);
    assert_int_equal(hp_store_validate(s), 0);
    for (i = 0; i < N; i++) {
        snprintf(key, sizeof(key), "namespace-%zu/pvc-%zu", i % 97, i);
        if (present[i])
            assert_non_null(hp_store_get(s, key));
        else
            assert_null(hp_store_get(s, key));
    }
    /* delete the rest; the table shrinks and stays valid */
    for (i = 0; i < N; i++) {
        if (!present[i])
            continue;
        snprintf(key, sizeof(key), "namespace-%zu/pvc-%zu", i % 97, i);
        obj_free(hp_store_remove(s, key));
    }
    assert_int_equal(hp_store_len(s), 0);
    assert_int_equal(hp_store_validate(s), 0);
    assert_null(hp_store_put(s, mk("again", 1)));
    assert_int_equal(hp_store_validate(s), 0);
    hp_store_free(s);
    assert_int_equal(freed, N + 1);
}

/* The store hashes with 32-bit FNV-1a; these words are known full-hash collisions under it.
 * If the hash ever changes they stop colliding, and the test still checks lookups. */
static uint32_t fnv1a(const char *k)
{
    uint32_t h = 2166136261u;
    for (; *k; k++)
        h = (h ^ (unsigned char)*k) * 16777619u;
    return h;
}

static void test_collisions(void **state)
{
    static const char *const pairs[][2] = {
        {"costarring", "liquid"},
        {"declinate", "macallums"},
        {"altarage", "zinke"},
        {"altarages", "zinkes"},
    };
    struct hp_store *s = hp_store_new(&ops);
    size_t i, j;
    char key[16];
    (void)state;

    for (i = 0; i < HP_ARRAY_SIZE(pairs); i++)
        assert_int_equal(fnv1a(pairs[i][0]), fnv1a(pairs[i][1]));

    /* Fill a small table so home slots collide too (11 keys in 16 slots). */
    for (i = 0; i < HP_ARRAY_SIZE(pairs); i++) {
        for (j = 0; j < 2; j++) {
            assert_null(hp_store_put(s, mk(pairs[i][j], (int)(i * 2 + j))));
            assert_int_equal(hp_store_validate(s), 0);
        }
    }
    for (i = 0; i < 3; i++) {
        snprintf(key, sizeof(key), "k%zu", i);
        assert_null(hp_store_put(s, mk(key, 100)));
    }
    assert_int_equal(hp_store_len(s), 11);
    for (i = 0; i < HP_ARRAY_SIZE(pairs); i++) {
        for (j = 0; j < 2; j++) {
            struct obj *o = hp_store_get(s, pairs[i][j]);
            assert_non_null(o);
            assert_string_equal(o->key, pairs[i][j]);
            assert_int_equal(o->version, (int)(i * 2 + j));
        }
    }
    /* Removing one of a colliding pair leaves the other reachable. */
    for (i = 0; i < HP_ARRAY_SIZE(pairs); i++) {
        obj_free(hp_store_remove(s, pairs[i][0]));
        assert_int_equal(hp_store_validate(s), 0);
        assert_null(hp_store_get(s, pairs[i][0]));
        assert_non_null(hp_store_get(s, pairs[i][1]));
    }
    /* Replacing the survivor of a pair does not resurrect its twin. */
    obj_free(hp_store_put(s, mk("liquid", 50)));
    assert_null(hp_store_get(s, "costarring"));
    assert_int_equal(((struct obj *)hp_store_get(s, "liquid"))->version, 50);
    assert_int_equal(hp_store_len(s), 7);
    assert_int_equal(hp_store_validate(s), 0);
    hp_store_free(s);
}

static void count_cb(void *o, void *data)
{
    size_t *n = data;
    (void)o;
    (*n)++;
}

static void test_foreach(void **state)
{
    struct hp_store *s = hp_store_new(&ops);
    char key[16];
    size_t i, n = 0;
    (void)state;

    for (i = 0; i < 100; i++) {
        snprintf(key, sizeof(key), "k%zu", i);
        assert_null(hp_store_put(s, mk(key, 0)));
    }
    hp_store_foreach(s, count_cb, &n);
    assert_int_equal(n, 100);
    hp_store_free(s);
    assert_int_equal(freed, 100);
}

/* touch keeps an object through a replace pass without replacing it. */
static void test_touch(void **state)
{
    struct hp_store *s = hp_store_new(&ops);
    (void)state;
    assert_null(hp_store_put(s, mk("a", 1)));
    assert_null(hp_store_put(s, mk("b", 1)));
    hp_store_replace_begin(s);
    assert_int_equal(hp_store_touch(s, "a"), 1);
    assert_int_equal(hp_store_touch(s, "zz"), 0);
    hp_store_replace_end(s, NULL, NULL); /* b was neither put nor touched: freed */
    assert_int_equal(hp_store_len(s), 1);
    assert_int_equal(((struct obj *)hp_store_get(s, "a"))->version, 1);
    assert_null(hp_store_get(s, "b"));
    assert_int_equal(hp_store_validate(s), 0);
    hp_store_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_put_get_remove, setup),
        cmocka_unit_test_setup(test_replace_pass, setup),
        cmocka_unit_test_setup(test_replace_pass_large, setup),
        cmocka_unit_test_setup(test_100k, setup),
        cmocka_unit_test_setup(test_collisions, setup),
        cmocka_unit_test_setup(test_foreach, setup),
        cmocka_unit_test_setup(test_touch, setup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
