/* expect: the writes this process made that its watch has not shown yet (see expect.h).
 *
 * A hash of names (store.h) to entries that are also on a list in the order they were made:
 * they lapse in that order (a later write of a name moves it to the end), so expiry and the
 * cap look at the oldest only.
 */
#include "hostpath/expect.h"

#include <stdlib.h>
#include <string.h>

#include "hostpath/buf.h"
#include "hostpath/list.h"
#include "hostpath/store.h"

struct ent {
    char *name;
    enum hp_expect_state state;
    uint64_t deadline;
    struct hp_list link; /* in x->order, oldest first */
};

struct hp_expect {
    struct hp_store *by_name;
    struct hp_list order;
    uint64_t ttl_ms;
    size_t max;
};

static const char *ent_key(const void *o)
{
    return ((const struct ent *)o)->name;
}

static void ent_free(void *o)
{
    struct ent *e = o;
    if (!e)
        return;
    hp_list_remove(&e->link);
    free(e->name);
    free(e);
}

static const struct hp_store_ops ent_ops = {ent_key, ent_free};

struct hp_expect *hp_expect_new(uint64_t ttl_ms, size_t max)
{
    struct hp_expect *x = hp_xcalloc(1, sizeof(*x));
    x->by_name = hp_store_new(&ent_ops);
    hp_list_init(&x->order);
    x->ttl_ms = ttl_ms;
    x->max = max ? max : 1;
    return x;
}

void hp_expect_free(struct hp_expect *x)
{
    if (!x)
        return;
    hp_store_free(x->by_name); /* unlinks every entry */
    free(x);
}

static void drop(struct hp_expect *x, struct ent *e)
{
    char *name = hp_xstrdup(e->name); /* the key of the entry being removed */
    ent_free(hp_store_remove(x->by_name, name));
    free(name);
}

static void expect(struct hp_expect *x, const char *name, enum hp_expect_state state,
                   uint64_t now_ms)
{
    struct ent *e = hp_store_get(x->by_name, name);
    if (!e) {
        while (hp_store_len(x->by_name) >= x->max) /* the oldest lapse first */
            drop(x, hp_list_first_entry(&x->order, struct ent, link));
        e = hp_xcalloc(1, sizeof(*e));
        e->name = hp_xstrdup(name);
        hp_list_init(&e->link);
        free(hp_store_put(x->by_name, e)); /* NULL: it was absent */
    }
    e->state = state;
    e->deadline = now_ms + x->ttl_ms;
    hp_list_remove(&e->link);
    hp_list_insert_tail(&x->order, &e->link);
}

void hp_expect_created(struct hp_expect *x, const char *name, uint64_t now_ms)
{
    expect(x, name, HP_EXPECT_PRESENT, now_ms);
}

void hp_expect_deleted(struct hp_expect *x, const char *name, uint64_t now_ms)
{
    expect(x, name, HP_EXPECT_GONE, now_ms);
}

void hp_expect_observed(struct hp_expect *x, const char *name, int present)
{
    struct ent *e = hp_store_get(x->by_name, name);
    if (e && (e->state == HP_EXPECT_PRESENT) == !!present)
        drop(x, e);
}

enum hp_expect_state hp_expect_get(const struct hp_expect *x, const char *name,
                                   uint64_t now_ms)
{
    const struct ent *e = hp_store_get(x->by_name, name);
    return e && now_ms < e->deadline ? e->state : HP_EXPECT_NONE;
}

void hp_expect_expire(struct hp_expect *x, uint64_t now_ms,
                      void (*fn)(const char *name, enum hp_expect_state state, void *data),
                      void *data)
{
    struct ent *e;
    while ((e = hp_list_first_entry(&x->order, struct ent, link)) != NULL &&
           e->deadline <= now_ms) {
        if (fn)
            fn(e->name, e->state, data);
        drop(x, e);
    }
}

size_t hp_expect_len(const struct hp_expect *x)
{
    return hp_store_len(x->by_name);
}

int hp_expect_validate(const struct hp_expect *x)
{
    size_t n = 0;
    uint64_t last = 0;
    const struct hp_list *l;
    hp_list_foreach(l, &x->order) {
        const struct ent *e = hp_list_entry(l, struct ent, link);
        if (hp_store_get(x->by_name, e->name) != e || e->deadline < last ||
            (e->state != HP_EXPECT_PRESENT && e->state != HP_EXPECT_GONE))
            return -1;
        last = e->deadline;
        n++;
    }
    if (n != hp_store_len(x->by_name) || n > x->max)
        return -1;
    return hp_store_validate(x->by_name);
}
