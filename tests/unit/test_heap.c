/* Unit tests for heap.c: small fixed cases, then random inserts, removes from anywhere and
 * dequeues checked against a reference model (the set of keys held), with hp_heap_validate
 * after every step; bounded in size and steps. Keys repeat, so ties are exercised. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "hostpath/common.h"
#include "hostpath/heap.h"

struct item {
    struct hp_heap_node node;
    int key;
    int in; /* in the heap, by the model */
};

#define NITEMS 300
#define STEPS 30000

static int item_less(const struct hp_heap_node *a, const struct hp_heap_node *b)
{
    return hp_container_of(a, struct item, node)->key < hp_container_of(b, struct item, node)->key;
}

static int key_of(const struct hp_heap_node *n)
{
    return hp_container_of(n, struct item, node)->key;
}

static void test_fixed(void **state)
{
    struct hp_heap h;
    struct item it[7];
    const int keys[] = {5, 3, 9, 1, 7, 3, 0};
    const int sorted[] = {0, 1, 3, 3, 5, 7, 9};
    (void)state;

    hp_heap_init(&h, item_less);
    assert_null(hp_heap_min(&h));
    assert_null(hp_heap_dequeue(&h));
    assert_int_equal(hp_heap_validate(&h), 0);
    for (int i = 0; i < 7; i++) {
        it[i].key = keys[i];
        hp_heap_insert(&h, &it[i].node);
        assert_int_equal(hp_heap_validate(&h), 0);
    }
    assert_int_equal(hp_heap_len(&h), 7);
    assert_ptr_equal(hp_heap_min(&h), &it[6].node);

    /* Remove the root, a leaf and an inner node, then put them back. */
    hp_heap_remove(&h, &it[6].node);
    assert_int_equal(hp_heap_validate(&h), 0);
    hp_heap_remove(&h, &it[4].node);
    assert_int_equal(hp_heap_validate(&h), 0);
    hp_heap_remove(&h, &it[1].node);
    assert_int_equal(hp_heap_validate(&h), 0);
    assert_int_equal(hp_heap_len(&h), 4);
    assert_int_equal(key_of(hp_heap_min(&h)), 1);
    hp_heap_insert(&h, &it[6].node);
    hp_heap_insert(&h, &it[4].node);
    hp_heap_insert(&h, &it[1].node);

    for (int i = 0; i < 7; i++) {
        struct hp_heap_node *n = hp_heap_dequeue(&h);
        assert_non_null(n);
        assert_int_equal(key_of(n), sorted[i]);
        assert_int_equal(hp_heap_validate(&h), 0);
    }
    assert_int_equal(hp_heap_len(&h), 0);
    assert_null(hp_heap_min(&h));
}

/* The validator must catch a broken heap, or the random test below proves nothing. */
static void test_validate_catches(void **state)
{
    struct hp_heap h;
    struct item it[3] = {{.key = 1}, {.key = 2}, {.key = 3}};
    (void)state;

    hp_heap_init(&h, item_less);
    for (int i = 0; i < 3; i++)
        hp_heap_insert(&h, &it[i].node);
    assert_int_equal(hp_heap_validate(&h), 0);
    it[2].key = 0; /* order broken behind the heap's back */
    assert_int_not_equal(hp_heap_validate(&h), 0);
    it[2].key = 3;
    h.n = 4; /* count wrong */
    assert_int_not_equal(hp_heap_validate(&h), 0);
    h.n = 3;
    it[1].node.parent = NULL; /* a broken link */
    assert_int_not_equal(hp_heap_validate(&h), 0);
}

static int model_min(const struct item *items)
{
    int min = -1;
    for (int i = 0; i < NITEMS; i++)
        if (items[i].in && (min < 0 || items[i].key < min))
            min = items[i].key;
    return min;
}

static void test_random_against_model(void **state)
{
    struct hp_heap h;
    struct item items[NITEMS];
    size_t n = 0;
    unsigned seed = 4242;
    (void)state;

    hp_heap_init(&h, item_less);
    memset(items, 0, sizeof(items));
    for (int step = 0; step < STEPS; step++) {
        int i = rand_r(&seed) % NITEMS, op = rand_r(&seed) % 8;
        if (op < 4) { /* insert (more often, so the heap grows) */
            if (items[i].in)
                continue;
            items[i].key = rand_r(&seed) % 50; /* many ties */
            items[i].in = 1;
            hp_heap_insert(&h, &items[i].node);
            n++;
        } else if (op < 6) { /* remove from anywhere */
            if (!items[i].in)
                continue;
            hp_heap_remove(&h, &items[i].node);
            items[i].in = 0;
            n--;
        } else if (op < 7) { /* dequeue the smallest */
            int want = model_min(items);
            struct hp_heap_node *m = hp_heap_dequeue(&h);
            if (want < 0) {
                assert_null(m);
                continue;
            }
            assert_non_null(m);
            assert_int_equal(key_of(m), want);
            hp_container_of(m, struct item, node)->in = 0;
            n--;
        } else { /* change a key: remove, change, insert */
            if (!items[i].in)
                continue;
            hp_heap_remove(&h, &items[i].node);
            items[i].key = rand_r(&seed) % 50;
            hp_heap_insert(&h, &items[i].node);
        }
        assert_int_equal(hp_heap_len(&h), n);
        assert_int_equal(hp_heap_validate(&h), 0);
        if (n)
            assert_int_equal(key_of(hp_heap_min(&h)), model_min(items));
    }
    /* Drain: sorted order. */
    int last = -1;
    while (hp_heap_len(&h)) {
        int k = key_of(hp_heap_dequeue(&h));
        assert_true(k >= last);
        last = k;
    }
    assert_int_equal(hp_heap_validate(&h), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixed),
        cmocka_unit_test(test_validate_catches),
        cmocka_unit_test(test_random_against_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
