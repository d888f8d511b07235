/* store: key -> latest decoded object, with replace-on-relist.
 *
 * Loop thread only. Robin Hood open addressing over three parallel arrays: the object pointers,
 * each object's 32-bit key hash (so probes and growth never call ops->key or strcmp on a
 * mismatch), and the replace-pass generation in which each slot was last put. Capacity is a
 * power of two and the load stays at or below 0.7; deletion shifts the following run back one
 * slot, so there are no tombstones. The home slot is taken from the top bits of hash * 2^32/phi
 * (Fibonacci hashing): FNV-1a's low bits depend only on the low bits of each byte.
 */
#include "hostpath/store.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "hostpath/buf.h"
#include "hostpath/log.h"

#define MIN_BITS 4 /* 16 slots */

struct hp_store {
    struct hp_store_ops ops;
    void **objs;      /* NULL = empty slot */
    uint32_t *hashes; /* hash of the key of objs[i] */
    uint32_t *seen;   /* generation of the last put of objs[i] */
    size_t cap;       /* 1 << bits */
    unsigned bits;
    size_t len;
    uint32_t gen; /* current replace pass; >= 1 */
};

/* FNV-1a, 32-bit. */
static uint32_t hash_key(const char *k)
{
    uint32_t h = 2166136261u;

    for (; *k; k++) {
        h ^= (unsigned char)*k;
        h *= 16777619u;
    }
    return h;
}

static size_t home(const struct hp_store *s, uint32_t h)
{
    return (size_t)((uint32_t)(h * 2654435769u) >> (32 - s->bits));
}

/* How far slot i is from its home slot (only for occupied slots). */
static size_t dist(const struct hp_store *s, size_t i)
{
    return (i - home(s, s->hashes[i])) & (s->cap - 1);
}

static void alloc_slots(struct hp_store *s, unsigned bits)
{
    s->bits = bits;
    s->cap = (size_t)1 << bits;
    s->objs = hp_xcalloc(s->cap, sizeof(*s->objs));
    s->hashes = hp_xmalloc(s->cap * sizeof(*s->hashes));
    s->seen = hp_xmalloc(s->cap * sizeof(*s->seen));
}

struct hp_store *hp_store_new(const struct hp_store_ops *ops)
{
    struct hp_store *s = hp_xcalloc(1, sizeof(*s));

    s->ops = *ops;
    s->gen = 1;
    alloc_slots(s, MIN_BITS);
    return s;
}

void hp_store_free(struct hp_store *s)
{
    size_t i;

    if (!s)
        return;
    for (i = 0; i < s->cap; i++) {
        if (s->objs[i])
            s->ops.free(s->objs[i]);
    }
    free(s->objs);
    free(s->hashes);
    free(s->seen);
    free(s);
}

/* Slot holding key, or SIZE_MAX. A Robin Hood probe stops at the first slot whose occupant is
 * closer to its home than we are to ours: key would have displaced it. */
static size_t find(const struct hp_store *s, const char *key, uint32_t h)
{
    size_t mask = s->cap - 1, i = home(s, h), d;

    for (d = 0; d <= mask; d++, i = (i + 1) & mask) {
        if (!s->objs[i] || dist(s, i) < d)
            return SIZE_MAX;
        if (s->hashes[i] == h && strcmp(s->ops.key(s->objs[i]), key) == 0)
            return i;
    }
    return SIZE_MAX;
}

/* Places an object known to be absent; the table has room. */
static void insert_new(struct hp_store *s, void *obj, uint32_t h, uint32_t seen)
{
    size_t mask = s->cap - 1, i = home(s, h), d = 0, di;
    void *tobj;
    uint32_t th, ts;

    for (;; i = (i + 1) & mask, d++) {
        if (!s->objs[i]) {
            s->objs[i] = obj;
            s->hashes[i] = h;
            s->seen[i] = seen;
            return;
        }
        di = dist(s, i);
        if (di < d) { /* take from the rich: swap and carry the displaced entry on */
            tobj = s->objs[i], th = s->hashes[i], ts = s->seen[i];
            s->objs[i] = obj, s->hashes[i] = h, s->seen[i] = seen;
            obj = tobj, h = th, seen = ts;
            d = di;
        }
    }
}

static void resize(struct hp_store *s, unsigned bits)
{
    void **objs = s->objs;
    uint32_t *hashes = s->hashes, *seen = s->seen;
    size_t i, cap = s->cap;

    alloc_slots(s, bits);
    for (i = 0; i < cap; i++) {
        if (objs[i])
            insert_new(s, objs[i], hashes[i], seen[i]);
    }
    free(objs);
    free(hashes);
    free(seen);
}

/* Smallest table (>= 16 slots) that holds n entries at a load of at most 1/2. */
static unsigned bits_for(size_t n)
{
    unsigned bits = MIN_BITS;

    while (((size_t)1 << bits) < n * 2)
        bits++;
    return bits;
}

static void maybe_shrink(struct hp_store *s)
{
    unsigned bits;

    if (s->bits <= MIN_BITS || s->len * 40 >= s->cap * 7) /* load >= 0.175: keep */
        return;
    bits = bits_for(s->len);
    if (bits < s->bits)
        resize(s, bits);
}

/* Empties slot i and shifts the run after it back by one. */
static void remove_at(struct hp_store *s, size_t i)
{
    size_t mask = s->cap - 1, j = (i + 1) & mask;

    while (s->objs[j] && dist(s, j) > 0) {
        s->objs[i] = s->objs[j];
        s->hashes[i] = s->hashes[j];
        s->seen[i] = s->seen[j];
        i = j;
        j = (j + 1) & mask;
    }
    s->objs[i] = NULL;
    s->len--;
}

void *hp_store_get(const struct hp_store *s, const char *key)
{
    size_t i = find(s, key, hash_key(key));
    return i == SIZE_MAX ? NULL : s->objs[i];
}

void *hp_store_put(struct hp_store *s, void *obj)
{
    const char *key = s->ops.key(obj);
    uint32_t h = hash_key(key);
    size_t i = find(s, key, h);
    void *old;

    if (i != SIZE_MAX) {
        old = s->objs[i];
        s->objs[i] = obj;
        s->seen[i] = s->gen;
        return old;
    }
    if ((s->len + 1) * 10 > s->cap * 7)
        resize(s, s->bits + 1);
    insert_new(s, obj, h, s->gen);
    s->len++;
    return NULL;
}

int hp_store_touch(struct hp_store *s, const char *key)
{
    size_t i = find(s, key, hash_key(key));
    if (i == SIZE_MAX)
        return 0;
    s->seen[i] = s->gen;
    return 1;
}

void *hp_store_remove(struct hp_store *s, const char *key)
{
    size_t i = find(s, key, hash_key(key));
    void *obj;

    if (i == SIZE_MAX)
        return NULL;
    obj = s->objs[i];
    remove_at(s, i);
    maybe_shrink(s);
    return obj;
}

void hp_store_replace_begin(struct hp_store *s)
{
    size_t i;

    if (++s->gen == 0) { /* wrapped after 2^32 passes: renumber */
        for (i = 0; i < s->cap; i++)
            s->seen[i] = 1;
        s->gen = 2;
    }
}

/* on_removed gets each unseen object after it has left the table; it must not modify the store
 * (the walk continues over the same arrays). Removal shifts later entries back into slot i, so
 * slot i is looked at again; entries shifted around the end of the array were already kept. */
void hp_store_replace_end(struct hp_store *s, void (*on_removed)(void *obj, void *data), void *data)
{
    size_t i = 0;
    void *obj;

    while (i < s->cap) {
        if (s->objs[i] && s->seen[i] != s->gen) {
            obj = s->objs[i];
            remove_at(s, i);
            if (on_removed)
                on_removed(obj, data);
            else
                s->ops.free(obj);
            continue;
        }
        i++;
    }
    maybe_shrink(s);
}

size_t hp_store_len(const struct hp_store *s)
{
    return s->len;
}

void hp_store_foreach(const struct hp_store *s, void (*fn)(void *obj, void *data), void *data)
{
    size_t i;

    for (i = 0; i < s->cap; i++) {
        if (s->objs[i])
            fn(s->objs[i], data);
    }
}

static int check_slot(const struct hp_store *s, size_t i)
{
    size_t prev = (i - 1) & (s->cap - 1), d = dist(s, i);
    const char *key = s->ops.key(s->objs[i]);

    if (s->hashes[i] != hash_key(key)) {
        hp_log_error("store: stale hash slot=%zu key=%s", i, key);
        return -EINVAL;
    }
    if (find(s, key, s->hashes[i]) != i) {
        hp_log_error("store: key not found at its slot slot=%zu key=%s", i, key);
        return -EINVAL;
    }
    /* Robin Hood: a displaced entry follows an occupied slot at most one step closer to home. */
    if (d > 0 && (!s->objs[prev] || dist(s, prev) + 1 < d)) {
        hp_log_error("store: probe distance broken slot=%zu dist=%zu", i, d);
        return -EINVAL;
    }
    if (s->seen[i] == 0 || s->seen[i] > s->gen) {
        hp_log_error("store: bad generation slot=%zu seen=%u gen=%u", i, s->seen[i], s->gen);
        return -EINVAL;
    }
    return 0;
}

int hp_store_validate(const struct hp_store *s)
{
    size_t i, n = 0;
    int rc;

    if (s->cap != (size_t)1 << s->bits || s->bits < MIN_BITS || s->gen == 0 ||
        s->len * 10 > s->cap * 7) {
        hp_log_error("store: bad shape cap=%zu len=%zu", s->cap, s->len);
        return -EINVAL;
    }
    for (i = 0; i < s->cap; i++) {
        if (!s->objs[i])
            continue;
        n++;
        rc = check_slot(s, i);
        if (rc)
            return rc;
    }
    if (n != s->len) {
        hp_log_error("store: count mismatch counted=%zu len=%zu", n, s->len);
        return -EINVAL;
    }
    return 0;
}

static const char *string_key(const void *obj)
{
    return obj;
}

const struct hp_store_ops hp_store_strings = {string_key, free};
