/* informer: reflector + decoder + store for one kind of object (see informer.h).
 *
 * Loop thread only. The reflector (watch.c) hands over objects one at a time as tokens of its
 * reader; the type's decoder copies what decisions need into one compact allocation, which the
 * store keeps. Undecodable objects are skipped one by one: in a LIST their cached version (if
 * any) is kept as it was, so a relist does not mistake them for deleted; a DELETED event is
 * applied by the key read from metadata alone.
 */
#include "hostpath/informer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hostpath/buf.h"
#include "hostpath/common.h"
#include "hostpath/log.h"
#include "hostpath/metrics.h"
#include "hostpath/store.h"

/* Keys remembered as already logged as undecodable (a bound on memory, not on logging). */
#define MAX_LOGGED 10000
#define KEY_MAX 600

struct hp_informer {
    const struct hp_informer_type *type;
    struct hp_informer_opts opts;
    struct hp_store *store;
    struct hp_store *logged; /* keys logged as undecodable */
    struct hp_watch *watch;
    int synced;
    size_t undecodable, dropped;
    hp_close_cb close_cb;
    void *close_data;
};

static const char *string_key(const void *obj)
{
    return obj;
}

static const struct hp_store_ops string_ops = {string_key, free};

/* "namespace/name" (or "name") from metadata alone, into out; 0 or -1 when there is none that a
 * C string can hold. */
static int object_key(const struct hp_informer *inf, const struct hp_json *j, int obj, char *out,
                      size_t len)
{
    int meta = hp_json_get(j, obj, "metadata");
    int name = hp_json_get(j, meta, "name"), ns = hp_json_get(j, meta, "namespace");
    char n[300], s[300];

    if (hp_json_str_len(j, name) <= 0 || hp_json_str_has_nul(j, name) ||
        hp_json_str_copy(j, name, n, sizeof(n)) >= (int)sizeof(n))
        return -1;
    if (!inf->type->namespaced)
        return snprintf(out, len, "%s", n) < (int)len ? 0 : -1;
    if (hp_json_str_len(j, ns) <= 0 || hp_json_str_has_nul(j, ns) ||
        hp_json_str_copy(j, ns, s, sizeof(s)) >= (int)sizeof(s))
        return -1;
    return snprintf(out, len, "%s/%s", s, n) < (int)len ? 0 : -1;
}

static void skipped(struct hp_informer *inf, const char *key)
{
    inf->undecodable++;
    hp_metrics_watch_undecodable(inf->type->resource);
    if (hp_store_get(inf->logged, key))
        return;
    hp_log_warn("informer: skipping an object that cannot be represented (a field the "
                "provisioner reads holds a NUL or is missing) resource=%s object=%s",
                inf->type->resource, key);
    if (hp_store_len(inf->logged) < MAX_LOGGED)
        free(hp_store_put(inf->logged, hp_xstrdup(key)));
}

static void changed(struct hp_informer *inf, const char *key, const void *obj)
{
    if (inf->opts.on_change)
        inf->opts.on_change(inf, key, obj, inf->opts.data);
}

/* Removes key (if stored), tells the owner, frees the object. */
static void remove_key(struct hp_informer *inf, const char *key)
{
    char k[KEY_MAX];
    snprintf(k, sizeof(k), "%s", key); /* key may point into the object */
    void *old = hp_store_remove(inf->store, k);
    if (!old)
        return;
    changed(inf, k, NULL);
    inf->type->free(old);
}

static void on_object(struct hp_watch *w, enum hp_watch_type type, const struct hp_json *j, int obj,
                      void *data)
{
    struct hp_informer *inf = data;
    char key[KEY_MAX];

    if (hp_log_verbosity() >= 5) /* what the API server sends this process, object by object */
        hp_log_v(5, "informer: received resource=%s type=%s object=%s", inf->type->resource,
                 type == HP_WATCH_ADDED ? "ADDED" : type == HP_WATCH_MODIFIED ? "MODIFIED"
                                                                               : "DELETED",
                 object_key(inf, j, obj, key, sizeof(key)) == 0 ? key : "(no name)");
    if (type != HP_WATCH_DELETED && inf->opts.keep &&
        !inf->opts.keep(j, obj, inf->opts.keep_ctx)) {
        /* Not ours to act on: not decoded, not stored; a copy kept from before goes (in a
         * relist, by not being put again). */
        inf->dropped++;
        hp_metrics_watch_dropped(inf->type->resource);
        if (hp_store_len(inf->store) && object_key(inf, j, obj, key, sizeof(key)) == 0)
            remove_key(inf, key);
        return;
    }
    void *o = inf->type->decode(j, obj, inf->opts.decode_ctx);

    if (!o) {
        if (object_key(inf, j, obj, key, sizeof(key)) < 0) {
            skipped(inf, "(no name)");
            return;
        }
        skipped(inf, key);
        if (type == HP_WATCH_DELETED)
            remove_key(inf, key);
        else
            (void)hp_store_touch(inf->store, key); /* the cached version stays, seen */
        return;
    }
    if (type == HP_WATCH_DELETED) {
        remove_key(inf, inf->type->key(o));
        inf->type->free(o);
        return;
    }
    void *old = hp_store_put(inf->store, o);
    changed(inf, inf->type->key(o), o);
    if (old)
        inf->type->free(old);
}

static void on_list_begin(struct hp_watch *w, void *data)
{
    struct hp_informer *inf = data;
    hp_store_replace_begin(inf->store);
}

static void on_removed(void *obj, void *data)
{
    struct hp_informer *inf = data;
    char k[KEY_MAX];
    snprintf(k, sizeof(k), "%s", inf->type->key(obj));
    changed(inf, k, NULL);
    inf->type->free(obj);
}

static void on_list_end(struct hp_watch *w, void *data)
{
    struct hp_informer *inf = data;
    hp_store_replace_end(inf->store, on_removed, inf);
    inf->synced = 1;
    if (inf->opts.on_synced)
        inf->opts.on_synced(inf, inf->opts.data);
}

static const struct hp_watch_handler handler = {on_list_begin, on_object, on_list_end};

struct hp_informer *hp__informer_new_offline(const struct hp_informer_type *type,
                                            const struct hp_informer_opts *opts)
{
    struct hp_informer *inf = hp_xcalloc(1, sizeof(*inf));
    struct hp_store_ops ops = {type->key, type->free};

    inf->type = type;
    inf->opts = *opts;
    inf->store = hp_store_new(&ops);
    inf->logged = hp_store_new(&string_ops);
    return inf;
}

const struct hp_watch_handler *hp__informer_handler(void)
{
    return &handler;
}

struct hp_informer *hp_informer_new(uv_loop_t *loop, struct hp_kube_client *client,
                                    const struct hp_informer_type *type,
                                    const struct hp_informer_opts *opts)
{
    struct hp_informer *inf = hp__informer_new_offline(type, opts);
    inf->watch = hp_watch_new(loop, client, type->resource, type->path, &handler, inf,
                                opts->watch);
    return inf;
}

int hp_informer_synced(const struct hp_informer *inf)
{
    return inf->synced;
}

const void *hp_informer_get(const struct hp_informer *inf, const char *key)
{
    return hp_store_get(inf->store, key);
}

size_t hp_informer_len(const struct hp_informer *inf)
{
    return hp_store_len(inf->store);
}

struct foreach_ctx {
    void (*fn)(const void *obj, void *data);
    void *data;
};

static void foreach_one(void *obj, void *data)
{
    struct foreach_ctx *c = data;
    c->fn(obj, c->data);
}

void hp_informer_foreach(const struct hp_informer *inf, void (*fn)(const void *obj, void *data),
                         void *data)
{
    struct foreach_ctx c = {fn, data};
    hp_store_foreach(inf->store, foreach_one, &c);
}

void hp_informer_relist(struct hp_informer *inf)
{
    if (inf->watch)
        hp_watch_relist(inf->watch);
}

size_t hp_informer_undecodable(const struct hp_informer *inf)
{
    return inf->undecodable;
}

size_t hp_informer_dropped(const struct hp_informer *inf)
{
    return inf->dropped;
}

static void informer_free(struct hp_informer *inf)
{
    hp_store_free(inf->store);
    hp_store_free(inf->logged);
    free(inf);
}

static void on_watch_closed(void *data)
{
    struct hp_informer *inf = data;
    hp_close_cb cb = inf->close_cb;
    void *cb_data = inf->close_data;

    informer_free(inf);
    if (cb)
        cb(cb_data);
}

void hp_informer_close(struct hp_informer *inf, hp_close_cb close_cb, void *data)
{
    inf->close_cb = close_cb;
    inf->close_data = data;
    hp_watch_close(inf->watch, on_watch_closed, inf);
}

void hp__informer_free_offline(struct hp_informer *inf)
{
    informer_free(inf);
}
