/* events: core/v1 Events about claims and volumes, aggregated.
 *
 * Loop thread only. An event with the same object, type, reason and message as one sent before
 * (an LRU of recent events) is not created again: the existing Event's count and lastTimestamp
 * are PATCHed. Events of cluster-scoped objects (PVs) go to namespace "default".
 * Event writes are best effort: a failure is logged and counted, never retried hot.
 *
 * Lifetime: hp_events_new, hp_events_free (no handle of its own: it frees at once).
 */
#ifndef HOSTPATH_EVENTS_H
#define HOSTPATH_EVENTS_H

struct hp_kube_client;

struct hp_object_ref {
    const char *kind;        /* "PersistentVolumeClaim" | "PersistentVolume" */
    const char *api_version; /* "v1" */
    const char *namespace_;  /* NULL or "" for cluster-scoped */
    const char *name;
    const char *uid;
    const char *resource_version;
};

struct hp_events;

/* component: source.component (the provisioner name); host: source.host (node) or NULL. */
struct hp_events *hp_events_new(struct hp_kube_client *client, const char *component,
                                const char *host);
void hp_events_emit(struct hp_events *e, const struct hp_object_ref *ref, int warning,
                    const char *reason, const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* Ends its lifetime: cancels in-flight writes (their callbacks never fire) and frees, before
 * returning. The client must still be open. */
void hp_events_free(struct hp_events *e);

#endif
