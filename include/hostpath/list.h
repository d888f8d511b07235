/* list: intrusive circular doubly linked list with a sentinel head (header only).
 *
 * Any thread; a list is used by one thread at a time. A struct hp_list is both the head of a list
 * and the link embedded in each element; the element is reached with hp_list_entry (container_of,
 * never a cast of the first member). An unlinked node (after hp_list_init or hp_list_remove)
 * points at itself, so hp_list_linked tells whether it is in a list and removing it twice is
 * harmless. Every operation is O(1) except hp_list_len.
 *
 *     struct job { struct hp_list link; ... };
 *     struct hp_list waiting;                      hp_list_init(&waiting);
 *     hp_list_insert_tail(&waiting, &j->link);     FIFO: take from the head
 *     struct job *first = hp_list_first_entry(&waiting, struct job, link);   NULL when empty
 *     hp_list_foreach_safe(l, tmp, &waiting) { struct job *j = hp_list_entry(l, ...); ... }
 *
 * Lifetime: no memory of its own; a node must be unlinked before its element is freed.
 */
#ifndef HOSTPATH_LIST_H
#define HOSTPATH_LIST_H

#include <stddef.h>

#include "hostpath/common.h"

struct hp_list {
    struct hp_list *prev, *next;
};

#define hp_list_entry(node, type, member) hp_container_of(node, type, member)

/* The element of the first node, or NULL when the list is empty. */
#define hp_list_first_entry(head, type, member)                                                    \
    (hp_list_empty(head) ? NULL : hp_list_entry((head)->next, type, member))

/* Iteration in order; the _safe form allows removing (or freeing) the current node. */
#define hp_list_foreach(pos, head) for ((pos) = (head)->next; (pos) != (head); (pos) = (pos)->next)
#define hp_list_foreach_safe(pos, tmp, head)                                                       \
    for ((pos) = (head)->next, (tmp) = (pos)->next; (pos) != (head);                               \
         (pos) = (tmp), (tmp) = (pos)->next)

/* An empty head, or an unlinked node. */
static inline void hp_list_init(struct hp_list *l)
{
    l->prev = l->next = l;
}

static inline int hp_list_empty(const struct hp_list *head)
{
    return head->next == head;
}

/* A node is in some list. */
static inline int hp_list_linked(const struct hp_list *node)
{
    return node->next != node;
}

/* Links node (unlinked) between prev and next. */
static inline void hp__list_link(struct hp_list *node, struct hp_list *prev, struct hp_list *next)
{
    node->prev = prev;
    node->next = next;
    prev->next = node;
    next->prev = node;
}

static inline void hp_list_insert_head(struct hp_list *head, struct hp_list *node)
{
    hp__list_link(node, head, head->next);
}

static inline void hp_list_insert_tail(struct hp_list *head, struct hp_list *node)
{
    hp__list_link(node, head->prev, head);
}

/* Unlinks node from its list (nothing when it is not linked); it is then unlinked itself. */
static inline void hp_list_remove(struct hp_list *node)
{
    node->prev->next = node->next;
    node->next->prev = node->prev;
    hp_list_init(node);
}

/* Moves node (linked anywhere, or not) to the tail of head's list. */
static inline void hp_list_move_tail(struct hp_list *head, struct hp_list *node)
{
    hp_list_remove(node);
    hp_list_insert_tail(head, node);
}

/* Nodes in the list: O(n), for validation and tests. */
static inline size_t hp_list_len(const struct hp_list *head)
{
    size_t n = 0;
    for (const struct hp_list *p = head->next; p != head; p = p->next)
        n++;
    return n;
}

#endif
