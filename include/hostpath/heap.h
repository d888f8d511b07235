/* heap: intrusive binary min-heap, as libuv's heap-inl.h.
 *
 * Any thread; a heap is used by one thread at a time. The nodes are embedded in their owners
 * (reached with hp_container_of) and linked by pointers, so the heap allocates nothing and an
 * element can be removed from the middle in O(log n) given its node. Order comes from a less
 * function over two nodes; elements that compare equal come out in no particular order.
 *
 *     struct timer { struct hp_heap_node node; uint64_t due; ... };
 *     static int timer_less(const struct hp_heap_node *a, const struct hp_heap_node *b)
 *     {   return hp_container_of(a, struct timer, node)->due <
 *                hp_container_of(b, struct timer, node)->due; }
 *     hp_heap_init(&h, timer_less);  hp_heap_insert(&h, &t->node);  hp_heap_min(&h) ...
 *
 * A node's key must not change while it is in the heap: remove it, change the key, insert it.
 *
 * Lifetime: hp_heap_init; no memory of its own, nothing to end (empty it before freeing the
 * elements it links).
 */
#ifndef HOSTPATH_HEAP_H
#define HOSTPATH_HEAP_H

#include <stddef.h>

struct hp_heap_node {
    struct hp_heap_node *left, *right, *parent;
};

/* 1 when a must come out before b. */
typedef int (*hp_heap_less_fn)(const struct hp_heap_node *a, const struct hp_heap_node *b);

struct hp_heap {
    struct hp_heap_node *min; /* the root, NULL when empty */
    size_t n;
    hp_heap_less_fn less;
};

void hp_heap_init(struct hp_heap *h, hp_heap_less_fn less);

/* The smallest node, or NULL when the heap is empty. */
static inline struct hp_heap_node *hp_heap_min(const struct hp_heap *h)
{
    return h->min;
}

static inline size_t hp_heap_len(const struct hp_heap *h)
{
    return h->n;
}

/* Adds node, which must not be in a heap. */
void hp_heap_insert(struct hp_heap *h, struct hp_heap_node *node);
/* Removes node, which must be in h. */
void hp_heap_remove(struct hp_heap *h, struct hp_heap_node *node);
/* Removes and returns the smallest node, or NULL when the heap is empty. */
struct hp_heap_node *hp_heap_dequeue(struct hp_heap *h);

/* Consistency check for tests: 0 when the links, the count, the shape (a complete binary tree)
 * and the order all hold; else -EINVAL. */
int hp_heap_validate(const struct hp_heap *h);

#endif
