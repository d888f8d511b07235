/* informer: one kind of Kubernetes object kept in a local cache -- a reflector (watch.h) that
 * lists and watches, a decoder that keeps only what decisions read, and a store (store.h) --
 * behind a small type table. Its owner hears only "this key changed" and "synced".
 *
 * Loop thread only. Objects are handled one by one: an object that cannot be decoded (no name,
 * or a value no C string can hold, such as a NUL in a field a decision reads) is skipped, counted
 * in hostpath_watch_undecodable_objects_total{resource} and logged once per namespace/name;
 * the rest of its LIST page or watch stream is unaffected. A skipped update leaves the cached
 * object as it was. A DELETED event is applied by key even when the rest of its object cannot be
 * decoded.
 *
 * Lifetime: hp_informer_new, hp_informer_close.
 */
#ifndef HOSTPATH_INFORMER_H
#define HOSTPATH_INFORMER_H

#include <stddef.h>
#include <uv.h>

#include "hostpath/common.h"
#include "hostpath/json.h"
#include "hostpath/watch.h"

struct hp_kube_client;
struct hp_informer;

struct hp_informer_type {
    const char *resource; /* "persistentvolumeclaims": logs and metrics */
    const char *path;     /* the collection, e.g. "/api/v1/persistentvolumeclaims" */
    int namespaced;       /* keys are "namespace/name", else "name" */
    /* The object at token obj (caller of the informer owns nothing of j), or NULL when it cannot
     * be represented. ctx is the informer's decode context. */
    void *(*decode)(const struct hp_json *j, int obj, void *ctx);
    const char *(*key)(const void *obj); /* stable while the object is stored */
    void (*free)(void *obj);
};

/* key changed: obj is the new object (borrowed; valid until the key changes again), or NULL
 * when the object is gone. */
typedef void (*hp_informer_change_cb)(struct hp_informer *inf, const char *key, const void *obj,
                                      void *data);
/* The first LIST (and every full LIST after it) is in. */
typedef void (*hp_informer_synced_cb)(struct hp_informer *inf, void *data);

/* Whether to keep the object at token obj of j (borrowed for the call), looked at before it is
 * decoded; ctx is the informer's keep_ctx. Must not change the informer. */
typedef int (*hp_informer_keep_fn)(const struct hp_json *j, int obj, void *ctx);

struct hp_informer_opts {
    void *decode_ctx;
    /* The memory rule: only what this process can act on is stored. NULL keeps every object.
     * An ADDED or MODIFIED object (or a listed one) that keep refuses is neither decoded nor
     * stored, and a copy stored from before is removed (the change callback says NULL, as for
     * a deletion); it is counted in hostpath_watch_dropped_objects_total{resource}. When what
     * keep decides on changes (not the objects: the process's own state), call
     * hp_informer_relist. */
    hp_informer_keep_fn keep;
    void *keep_ctx;
    hp_informer_change_cb on_change;
    hp_informer_synced_cb on_synced;
    void *data;
    const struct hp_watch_opts *watch; /* NULL = defaults */
};

/* type is borrowed (a static table); starts listing from the loop (no callback before return). */
struct hp_informer *hp_informer_new(uv_loop_t *loop, struct hp_kube_client *client,
                                    const struct hp_informer_type *type,
                                    const struct hp_informer_opts *opts);

int hp_informer_synced(const struct hp_informer *inf);
const void *hp_informer_get(const struct hp_informer *inf, const char *key);
size_t hp_informer_len(const struct hp_informer *inf);
/* fn must not change the informer. */
void hp_informer_foreach(const struct hp_informer *inf, void (*fn)(const void *obj, void *data),
                         void *data);

/* Lists again from scratch (the decode context changed, so cached objects may lack what is
 * now needed). Change callbacks fire for what differs, as after any relist. */
void hp_informer_relist(struct hp_informer *inf);

/* Objects skipped because they could not be decoded, since start (tests). */
size_t hp_informer_undecodable(const struct hp_informer *inf);
/* Objects the keep filter did not keep, since start (tests, benchmarks). */
size_t hp_informer_dropped(const struct hp_informer *inf);

/* Ends the informer's lifetime: stops the reflector and frees everything; close_cb (may be
 * NULL) fires from the loop once done, on a later loop turn. No callback of the informer fires
 * after this call. */
void hp_informer_close(struct hp_informer *inf, hp_close_cb close_cb, void *data);

/* Internal, for fuzz/fuzz_informer.c and tests: an informer without a reflector (no handle:
 * hp__informer_free_offline frees it at once), and the handler a reflector drives it with
 * (data = the informer). */
struct hp_informer *hp__informer_new_offline(const struct hp_informer_type *type,
                                            const struct hp_informer_opts *opts);
void hp__informer_free_offline(struct hp_informer *inf);
const struct hp_watch_handler *hp__informer_handler(void);

#endif
