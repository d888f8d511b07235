/* store: key -> latest decoded object, with replace-on-relist.
 *
 * Loop thread only. An open-addressing hash table of pointers to compact objects (objects.h);
 * the store owns the objects it holds and frees them with ops->free. Sized for 100,000 entries.
 *
 * Lifetime: hp_store_new, hp_store_free (no handle: frees at once).
 */
#ifndef HOSTPATH_STORE_H
#define HOSTPATH_STORE_H

#include <stddef.h>

struct hp_store_ops {
    const char *(*key)(const void *obj); /* stable while the object is stored */
    void (*free)(void *obj);
};

struct hp_store;

struct hp_store *hp_store_new(const struct hp_store_ops *ops);
/* Frees every object and the store. */
void hp_store_free(struct hp_store *s);

/* Borrowed pointer, valid until the key is next replaced or deleted; NULL when absent. */
void *hp_store_get(const struct hp_store *s, const char *key);

/* Takes ownership of obj and stores it under ops->key(obj). The object it replaces (or NULL) is
 * returned to the caller, who frees it with ops->free. Marks the key as seen in the current
 * replace pass. */
void *hp_store_put(struct hp_store *s, void *obj);

/* Marks key as seen in the current replace pass without replacing its object (an update that
 * could not be decoded keeps the version held). 1 when the key is stored, else 0. */
int hp_store_touch(struct hp_store *s, const char *key);

/* Removes key; returns the object (caller frees) or NULL. */
void *hp_store_remove(struct hp_store *s, const char *key);

/* Replace pass for a relist: begin, put every listed object, then end removes every object not
 * put since begin, handing each to on_removed (which takes ownership) before the next. */
void hp_store_replace_begin(struct hp_store *s);
void hp_store_replace_end(struct hp_store *s, void (*on_removed)(void *obj, void *data),
                          void *data);

size_t hp_store_len(const struct hp_store *s);
/* Calls fn for every object; fn must not modify the store. */
void hp_store_foreach(const struct hp_store *s, void (*fn)(void *obj, void *data), void *data);

/* Consistency check for tests: 0 when every invariant holds. */
int hp_store_validate(const struct hp_store *s);

/* The ops of a store of heap strings (a set): the key is the string itself (up to its first
 * NUL, so "key\0more" carries a value after it); free() frees it. */
extern const struct hp_store_ops hp_store_strings;

#endif
