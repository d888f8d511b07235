/* heap: intrusive binary min-heap linked by pointers (see heap.h), after libuv's heap-inl.h.
 *
 * Any thread (no state beyond the heap). The tree is complete: the node at level-order position
 * i (1-based) has its children at 2i and 2i + 1, so the path from the root to position i is
 * spelled by the bits of i below its top bit (0 = left, 1 = right). Insert links the new node at
 * position n + 1 and moves it up; remove puts the node at position n in the removed node's place
 * and moves it down, or up. Moving swaps nodes, never keys: owners keep pointers to their nodes.
 */
#include "hostpath/heap.h"

#include <errno.h>

void hp_heap_init(struct hp_heap *h, hp_heap_less_fn less)
{
    h->min = NULL;
    h->n = 0;
    h->less = less;
}

/* The link that holds (or is to hold) the node at level-order position pos >= 1. */
static struct hp_heap_node **slot_of(struct hp_heap *h, size_t pos, struct hp_heap_node **parent)
{
    struct hp_heap_node **slot = &h->min;
    size_t path = 0, k = 0;

    *parent = NULL;
    for (; pos >= 2; pos /= 2, k++)
        path = (path << 1) | (pos & 1);
    for (; k > 0; k--, path >>= 1) {
        *parent = *slot;
        slot = path & 1 ? &(*slot)->right : &(*slot)->left;
    }
    return slot;
}

/* The link of p (NULL: the root) that points at old points at new_ now. */
static void relink(struct hp_heap *h, struct hp_heap_node *p, const struct hp_heap_node *old,
                   struct hp_heap_node *new_)
{
    if (!p)
        h->min = new_;
    else if (p->left == old)
        p->left = new_;
    else
        p->right = new_;
}

/* n's children point back at n. */
static void own_children(struct hp_heap_node *n)
{
    if (n->left)
        n->left->parent = n;
    if (n->right)
        n->right->parent = n;
}

/* child's parent is parent: they trade places in the tree. */
static void swap_with_parent(struct hp_heap *h, struct hp_heap_node *parent,
                             struct hp_heap_node *child)
{
    struct hp_heap_node t = *parent, *sibling;

    *parent = *child;
    *child = t;
    parent->parent = child;
    if (child->left == child) {
        child->left = parent;
        sibling = child->right;
    } else {
        child->right = parent;
        sibling = child->left;
    }
    if (sibling)
        sibling->parent = child;
    own_children(parent);
    relink(h, child->parent, parent, child);
}

static void move_up(struct hp_heap *h, struct hp_heap_node *node)
{
    while (node->parent && h->less(node, node->parent))
        swap_with_parent(h, node->parent, node);
}

static void move_down(struct hp_heap *h, struct hp_heap_node *node)
{
    for (;;) {
        struct hp_heap_node *smallest = node;
        if (node->left && h->less(node->left, smallest))
            smallest = node->left;
        if (node->right && h->less(node->right, smallest))
            smallest = node->right;
        if (smallest == node)
            return;
        swap_with_parent(h, node, smallest);
    }
}

void hp_heap_insert(struct hp_heap *h, struct hp_heap_node *node)
{
    struct hp_heap_node *parent;
    struct hp_heap_node **slot = slot_of(h, h->n + 1, &parent);

    node->left = node->right = NULL;
    node->parent = parent;
    *slot = node;
    h->n++;
    move_up(h, node);
}

void hp_heap_remove(struct hp_heap *h, struct hp_heap_node *node)
{
    struct hp_heap_node *parent;
    struct hp_heap_node **slot, *last;

    if (h->n == 0)
        return;
    slot = slot_of(h, h->n, &parent);
    last = *slot;
    *slot = NULL;
    h->n--;
    if (last != node) {
        /* The last node takes node's place, then finds its own. */
        last->left = node->left;
        last->right = node->right;
        last->parent = node->parent;
        own_children(last);
        relink(h, node->parent, node, last);
        move_down(h, last);
        move_up(h, last);
    } else if (h->n == 0) {
        h->min = NULL;
    }
    node->left = node->right = node->parent = NULL;
}

struct hp_heap_node *hp_heap_dequeue(struct hp_heap *h)
{
    struct hp_heap_node *min = h->min;

    if (min)
        hp_heap_remove(h, min);
    return min;
}

/* Checks the subtree at level-order position pos; counts its nodes into *seen. */
static int check(const struct hp_heap *h, const struct hp_heap_node *node,
                 const struct hp_heap_node *parent, size_t pos, size_t *seen)
{
    if (!node)
        return pos > h->n ? 0 : -EINVAL; /* a hole inside the complete tree */
    if (pos > h->n || node->parent != parent || (parent && h->less(node, parent)))
        return -EINVAL;
    (*seen)++;
    if (check(h, node->left, node, 2 * pos, seen) < 0)
        return -EINVAL;
    return check(h, node->right, node, 2 * pos + 1, seen);
}

int hp_heap_validate(const struct hp_heap *h)
{
    size_t seen = 0;

    if ((h->min == NULL) != (h->n == 0))
        return -EINVAL;
    if (check(h, h->min, NULL, 1, &seen) < 0 || seen != h->n)
        return -EINVAL;
    return 0;
}
