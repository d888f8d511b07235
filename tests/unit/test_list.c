/* Unit tests for list.h: the basic operations, then random inserts, removes and moves checked
 * against a reference model (an array holding the expected order), bounded in size and steps. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "hostpath/list.h"

struct item {
    int id;
    struct hp_list link;
};

#define NITEMS 64
#define STEPS 20000

static void test_basics(void **state)
{
    struct hp_list head, *pos, *tmp;
    struct item a = {1, {NULL, NULL}}, b = {2, {NULL, NULL}}, c = {3, {NULL, NULL}};
    int order[3], n = 0;
    (void)state;

    hp_list_init(&head);
    hp_list_init(&a.link);
    hp_list_init(&b.link);
    hp_list_init(&c.link);
    assert_true(hp_list_empty(&head));
    assert_null(hp_list_first_entry(&head, struct item, link));
    assert_false(hp_list_linked(&a.link));

    hp_list_insert_tail(&head, &b.link);
    hp_list_insert_head(&head, &a.link);
    hp_list_insert_tail(&head, &c.link);
    assert_true(hp_list_linked(&b.link));
    assert_int_equal(hp_list_len(&head), 3);
    assert_ptr_equal(hp_list_first_entry(&head, struct item, link), &a);
    hp_list_foreach(pos, &head)
        order[n++] = hp_list_entry(pos, struct item, link)->id;
    assert_int_equal(order[0], 1);
    assert_int_equal(order[1], 2);
    assert_int_equal(order[2], 3);

    hp_list_move_tail(&head, &a.link); /* b c a */
    assert_ptr_equal(hp_list_first_entry(&head, struct item, link), &b);
    assert_ptr_equal(head.prev, &a.link);

    hp_list_remove(&c.link); /* b a */
    assert_false(hp_list_linked(&c.link));
    hp_list_remove(&c.link); /* removing an unlinked node is harmless */
    assert_int_equal(hp_list_len(&head), 2);

    hp_list_move_tail(&head, &c.link); /* an unlinked node moves in too: b a c */
    assert_ptr_equal(head.prev, &c.link);

    /* The safe form survives removing the current node. */
    n = 0;
    hp_list_foreach_safe(pos, tmp, &head) {
        hp_list_remove(pos);
        n++;
    }
    assert_int_equal(n, 3);
    assert_true(hp_list_empty(&head));
}

/* The list must hold exactly model[0..n) in order, forwards and backwards. */
static void check_model(const struct hp_list *head, struct item *items, const int *model, int n)
{
    const struct hp_list *p = head->next;
    for (int i = 0; i < n; i++, p = p->next) {
        assert_ptr_not_equal(p, head);
        assert_int_equal(hp_list_entry(p, struct item, link)->id, model[i]);
        assert_ptr_equal(p->next->prev, p);
    }
    assert_ptr_equal(p, head);
    p = head->prev;
    for (int i = n - 1; i >= 0; i--, p = p->prev)
        assert_int_equal(hp_list_entry(p, struct item, link)->id, model[i]);
    assert_ptr_equal(p, head);
    for (int id = 0; id < NITEMS; id++) {
        int in = 0;
        for (int i = 0; i < n; i++)
            in |= model[i] == id;
        assert_int_equal(hp_list_linked(&items[id].link), in);
    }
}

static int model_find(const int *model, int n, int id)
{
    for (int i = 0; i < n; i++)
        if (model[i] == id)
            return i;
    return -1;
}

static void model_delete(int *model, int *n, int at)
{
    memmove(model + at, model + at + 1, (size_t)(*n - at - 1) * sizeof(*model));
    (*n)--;
}

static void test_random_against_model(void **state)
{
    struct hp_list head;
    struct item items[NITEMS];
    int model[NITEMS], n = 0;
    unsigned seed = 12345;
    (void)state;

    hp_list_init(&head);
    for (int i = 0; i < NITEMS; i++) {
        items[i].id = i;
        hp_list_init(&items[i].link);
    }
    for (int step = 0; step < STEPS; step++) {
        int id = rand_r(&seed) % NITEMS, at = model_find(model, n, id);
        switch (rand_r(&seed) % 4) {
        case 0: /* insert at the head (when not in) */
            if (at >= 0)
                break;
            hp_list_insert_head(&head, &items[id].link);
            memmove(model + 1, model, (size_t)n * sizeof(*model));
            model[0] = id;
            n++;
            break;
        case 1: /* insert at the tail */
            if (at >= 0)
                break;
            hp_list_insert_tail(&head, &items[id].link);
            model[n++] = id;
            break;
        case 2: /* remove (also when not in: a no-op) */
            hp_list_remove(&items[id].link);
            if (at >= 0)
                model_delete(model, &n, at);
            break;
        default: /* move to the tail, from wherever it is */
            hp_list_move_tail(&head, &items[id].link);
            if (at >= 0)
                model_delete(model, &n, at);
            model[n++] = id;
            break;
        }
        assert_int_equal(hp_list_empty(&head), n == 0);
        if (step % 16 == 0 || step == STEPS - 1) {
            assert_int_equal(hp_list_len(&head), n);
            check_model(&head, items, model, n);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_basics),
        cmocka_unit_test(test_random_against_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
