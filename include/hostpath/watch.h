/* watch: a reflector — paged LIST, then WATCH from the list's resourceVersion.
 *
 * Loop thread only. LIST uses limit/continue (500 a page), from the API server's watch cache
 * (resourceVersion=0) or as a streaming list when the options say (hp_watch_initial); a label
 * and a field selector, when given, go on every LIST and WATCH. WATCH uses allowWatchBookmarks=true
 * and a timeoutSeconds between 5 and 10 minutes so streams rotate. A broken stream resumes from
 * the last resourceVersion seen (BOOKMARKs keep it fresh). An ERROR event with code 410
 * (Expired/Gone), or a LIST continue token that expired, triggers a relist. Consecutive
 * failures back off exponentially with jitter (1s .. 30s by default). A malformed line is
 * logged, counted and skipped. Lines longer than HP_WATCH_MAX_LINE fail the stream (relist).
 *
 * Lifetime: hp_watch_new, hp_watch_close.
 */
#ifndef HOSTPATH_WATCH_H
#define HOSTPATH_WATCH_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "hostpath/buf.h"
#include "hostpath/common.h"
#include "hostpath/json.h"

struct hp_kube_client;

#define HP_WATCH_MAX_LINE (16u * 1024 * 1024)
/* Default cap of one LIST page's body: a bigger page is asked for again with fewer objects. */
#define HP_WATCH_MAX_PAGE ((size_t)4 * 1024 * 1024)

enum hp_watch_type { HP_WATCH_ADDED, HP_WATCH_MODIFIED, HP_WATCH_DELETED };

struct hp_watch;

/* What a reflector tells its owner. Each callback gets the watch first (NULL when an offline
 * informer is driven without one, see informer.h) and data last; a callback may close the
 * watch. */
struct hp_watch_handler {
    /* A full LIST starts (first sync or relist): objects delivered until on_list_end are the
     * complete set; anything the receiver holds that is not re-delivered is gone. */
    void (*on_list_begin)(struct hp_watch *w, void *data);
    /* One object: token obj of reader j, both borrowed for the duration of the call (decode
     * what you keep, e.g. hp_claim_decode(j, obj)). LIST items arrive as HP_WATCH_ADDED. */
    void (*on_object)(struct hp_watch *w, enum hp_watch_type type, const struct hp_json *j, int obj,
                      void *data);
    /* The LIST finished; the receiver is in sync as of that resourceVersion. */
    void (*on_list_end)(struct hp_watch *w, void *data);
};

/* Line splitter shared by the watch stream and tests: feed arbitrary chunks, get whole lines. */
struct hp_line_splitter {
    struct hp_buf partial;
};
void hp_line_splitter_init(struct hp_line_splitter *s, size_t max_line);
void hp_line_splitter_free(struct hp_line_splitter *s);
/* Calls on_line for each complete line (without '\n'; line is NUL-terminated and writable for
 * the duration of the call). Empty lines are skipped. Returns 0, -E2BIG when a line exceeds
 * max_line, or the first nonzero value returned by on_line. */
int hp_line_splitter_feed(struct hp_line_splitter *s, const char *chunk, size_t len,
                          int (*on_line)(char *line, size_t len, void *data), void *data);

/* How the reflector reads the whole collection, at start and at every relist. */
enum hp_watch_initial {
    /* A paged LIST from etcd (consistent): what a server of any version serves. */
    HP_WATCH_INITIAL_LIST = 0,
    /* A paged LIST whose first page asks for resourceVersion=0: served from the API server's
     * watch cache, not etcd (client-go's reflector does the same). A server that ignores the
     * limit for such a LIST (the watch cache before Kubernetes 1.33) answers with the whole
     * collection: when that is more than max_page_bytes, this LIST and every later one are
     * read from etcd, paged. */
    HP_WATCH_INITIAL_CACHE,
    /* A streaming list (sendInitialEvents=true, KEP-3157): one WATCH whose first events are the
     * collection's objects, ended by a BOOKMARK annotated k8s.io/initial-events-end, after which
     * the same stream goes on as a watch. Served from the watch cache object by object: no page
     * is ever held whole. A server that refuses it (400/422: the WatchList feature is off) or
     * ignores it (older than 1.27: a plain BOOKMARK comes before the end of the initial
     * events) is asked with HP_WATCH_INITIAL_CACHE from then on. */
    HP_WATCH_INITIAL_STREAM,
};

struct hp_watch_opts {
    uint64_t backoff_base_ms; /* default 1000 */
    uint64_t backoff_max_ms;  /* default 30000 */
    unsigned page_limit;      /* default 500 */
    size_t max_page_bytes;    /* default HP_WATCH_MAX_PAGE */
    unsigned timeout_min_s;   /* default 300; timeoutSeconds is random in [min, 2*min) */
    struct hp_clock clock;    /* how long a stream lasted; default the loop's clock */
    /* labelSelector and fieldSelector of every LIST and WATCH ("k=v,!k2"; copied; NULL or ""
     * for none). An object that stops matching arrives as DELETED, one that starts as ADDED
     * (the API server's transitions). */
    const char *label_selector;
    const char *field_selector;
    enum hp_watch_initial initial; /* default HP_WATCH_INITIAL_LIST */
};

/* path: the collection, e.g. "/api/v1/persistentvolumeclaims" (all namespaces) or
 * "/apis/storage.k8s.io/v1/storageclasses". name: short resource name for logs and metrics.
 * handler is copied; data is passed to it. Starts listing from the loop (no callback before
 * return). client is borrowed and must outlive the watch. */
struct hp_watch *hp_watch_new(uv_loop_t *loop, struct hp_kube_client *client,
                                const char *name, const char *path,
                                const struct hp_watch_handler *handler, void *data,
                                const struct hp_watch_opts *opts);

/* Lists again from scratch now (whatever the reflector was doing): a full replace pass. */
void hp_watch_relist(struct hp_watch *w);

/* True once the first LIST completed. */
int hp_watch_synced(const struct hp_watch *w);
/* How the next LIST is read (a fallback may have replaced what the options asked for). */
enum hp_watch_initial hp_watch_initial_mode(const struct hp_watch *w);
/* resourceVersion last seen (list, event or bookmark); borrowed until the next event. */
const char *hp_watch_resource_version(const struct hp_watch *w);

/* Ends the watch's lifetime: the in-flight request is cancelled, the timer closed; no handler
 * call after return. The struct is freed from the timer's close callback, on a later loop
 * turn; close_cb (may be NULL) fires then. */
void hp_watch_close(struct hp_watch *w, hp_close_cb close_cb, void *data);

#endif
