/* main: wires the modules together, handles signals and an orderly shutdown.
 *
 * One libuv loop on the main thread runs everything; filesystem work goes to the threadpool.
 * SIGINT/SIGTERM: stop taking work, let running filesystem jobs finish, release the lease,
 * close every handle and exit 0. A second signal exits at once with status 1.
 */
#include <curl/curl.h>
#include <errno.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>

#include "hostpath/buf.h"
#include "hostpath/config.h"
#include "hostpath/controller.h"
#include "hostpath/events.h"
#include "hostpath/hostpath.h"
#include "hostpath/http_server.h"
#include "hostpath/kube_client.h"
#include "hostpath/kubeconfig.h"
#include "hostpath/leader.h"
#include "hostpath/log.h"
#include "hostpath/metrics.h"

struct app {
    uv_loop_t *loop;
    struct hp_config cfg;
    struct hp_kube_creds creds;
    struct hp_kube_client *client;
    struct hp_events *events;
    struct hp_hostpath *hostpath;
    struct hp_controller *controller;
    struct hp_leader *leader;
    struct hp_http_server *http;
    uv_signal_t sigint, sigterm;
    uv_timer_t shutdown_timer;
    uv_timer_t trim_timer;
    char *lease_name;
    char *holder;
    int stopping;
    int pending; /* modules still closing */
};

static void close_client_and_handles(struct app *a);

static void on_module_closed(void *data)
{
    struct app *a = data;
    if (--a->pending == 0)
        close_client_and_handles(a);
}

static void on_client_closed(void *data)
{
    (void)data;
}

static void close_client_and_handles(struct app *a)
{
    /* Last: the leader has released its lease and no module uses the client any more. */
    hp_events_free(a->events);
    a->events = NULL;
    hp_kube_client_close(a->client, on_client_closed, a);
    uv_close((uv_handle_t *)&a->sigint, NULL);
    uv_close((uv_handle_t *)&a->sigterm, NULL);
    uv_close((uv_handle_t *)&a->shutdown_timer, NULL);
    uv_close((uv_handle_t *)&a->trim_timer, NULL);
}

/* glibc keeps what a burst freed: a thousand claims at once leave megabytes of free chunks
 * between the objects the caches keep, resident for good (bench/README.md, "Footprint"). Every
 * TRIM_INTERVAL_MS, when that much is free inside the heaps, malloc_trim hands the whole free
 * pages back to the kernel. mallinfo2 and malloc_trim cost microseconds at these sizes. */
#define TRIM_INTERVAL_MS 2000
#define TRIM_MIN_FREE (1024u * 1024)

static void on_trim_timer(uv_timer_t *t)
{
    (void)t;
    struct mallinfo2 mi = mallinfo2();
    if (mi.fordblks >= TRIM_MIN_FREE)
        (void)malloc_trim(0);
}

static void on_controller_closed(void *data)
{
    struct app *a = data;
    a->controller = NULL;
    /* Filesystem work is finished; now the lease may be released. */
    if (a->leader) {
        a->pending++;
        hp_leader_stop(a->leader, on_module_closed, a);
        a->leader = NULL;
    }
    on_module_closed(a);
}

static void on_shutdown_deadline(uv_timer_t *t)
{
    (void)t;
    hp_log_error("main: shutdown did not finish in time; exiting");
    exit(1);
}

static void shutdown_app(struct app *a, const char *why)
{
    if (a->stopping) {
        hp_log_warn("main: second %s; exiting now", why);
        exit(1);
    }
    a->stopping = 1;
    hp_log_info("main: %s received; stopping (running filesystem jobs finish first)", why);
    (void)uv_timer_start(&a->shutdown_timer, on_shutdown_deadline, 30000, 0);
    uv_unref((uv_handle_t *)&a->shutdown_timer);
    a->pending = 1; /* the controller */
    if (a->http) {
        a->pending++;
        hp_http_server_close(a->http, on_module_closed, a);
        a->http = NULL;
    }
    a->pending++;
    hp_hostpath_close(a->hostpath, on_module_closed, a);
    a->hostpath = NULL;
    hp_controller_stop(a->controller, on_controller_closed, a);
}

static void on_signal(uv_signal_t *s, int signum)
{
    struct app *a = s->data;
    shutdown_app(a, signum == SIGTERM ? "SIGTERM" : "SIGINT");
}

static void on_leadership(struct hp_leader *l, int leading, void *data)
{
    struct app *a = data;
    (void)l;
    hp_log_info("main: %s lease=%s identity=%s", leading ? "became leader" : "lost leadership",
                a->lease_name, a->holder);
    hp_metrics_leader(a->lease_name, leading);
    if (a->controller)
        hp_controller_set_leader(a->controller, leading);
}

static int on_ready(void *data, struct hp_buf *why)
{
    struct app *a = data;
    if (a->stopping) {
        hp_buf_appends(why, "shutting down");
        return 0;
    }
    if (!a->controller || !hp_controller_synced(a->controller)) {
        hp_buf_appends(why, "initial lists of claims, volumes and classes not synced yet");
        return 0;
    }
    if (a->cfg.leader_elect && a->leader && !hp_leader_state_known(a->leader)) {
        hp_buf_appends(why, "leader election state not known yet");
        return 0;
    }
    return 1;
}

static char *make_holder_identity(const char *identity)
{
    unsigned char rnd[8];
    char hex[17];
    if (uv_random(NULL, NULL, rnd, sizeof(rnd), 0, NULL) != 0)
        memset(rnd, 0, sizeof(rnd));
    for (size_t i = 0; i < sizeof(rnd); i++)
        snprintf(hex + 2 * i, 3, "%02x", rnd[i]);
    return hp_xasprintf("%s_%s", identity, hex);
}

/* Steps that can fail come first, before any module that does work exists: a failure then
 * leaves only the listener and the client to close (abandon_start), and nothing is stopped
 * that was never started. Each failure is logged here, once, naming what to fix. */
static int start(struct app *a)
{
    int rc;
    if (a->cfg.metrics_port >= 0) {
        /* First: a port already in use (a second instance, anything on :8080) is the likeliest
         * start-up failure, and the one an operator must see at once. */
        rc = hp_http_server_start(&a->http, a->loop, a->cfg.metrics_host, a->cfg.metrics_port,
                                  on_ready, a);
        if (rc < 0) {
            int v6 = strchr(a->cfg.metrics_host, ':') != NULL;
            hp_log_error("main: cannot serve --metrics-address %s%s%s:%d: %s", v6 ? "[" : "",
                         a->cfg.metrics_host, v6 ? "]" : "", a->cfg.metrics_port,
                         uv_strerror(rc));
            return rc;
        }
    }
    struct hp_kube_client_opts copts = {
        .qps = a->cfg.kube_api_qps,
        .burst = a->cfg.kube_api_burst,
        /* A Retry-After longer than our own longest backoff is not honoured beyond it. */
        .max_retry_after_ms = a->cfg.retry_max_delay_ms ? a->cfg.retry_max_delay_ms : 1,
    };
    rc = hp_kube_client_new(&a->client, a->loop, &a->creds, &copts);
    if (rc < 0) {
        hp_log_error("main: cannot start the Kubernetes client: %s", strerror(-rc));
        return rc;
    }
    a->events = hp_events_new(a->client, a->cfg.provisioner_name, a->cfg.node_name);
    a->hostpath = hp_hostpath_new(a->loop, (unsigned)a->cfg.workers);
    a->controller = hp_controller_new(a->loop, &a->cfg, a->client, a->events, a->hostpath);

    uv_signal_init(a->loop, &a->sigint);
    uv_signal_init(a->loop, &a->sigterm);
    a->sigint.data = a->sigterm.data = a;
    uv_signal_start(&a->sigint, on_signal, SIGINT);
    uv_signal_start(&a->sigterm, on_signal, SIGTERM);
    uv_timer_init(a->loop, &a->shutdown_timer);
    uv_timer_init(a->loop, &a->trim_timer);
    (void)uv_timer_start(&a->trim_timer, on_trim_timer, TRIM_INTERVAL_MS, TRIM_INTERVAL_MS);
    uv_unref((uv_handle_t *)&a->trim_timer); /* never what keeps the loop running */

    a->lease_name = hp_xstrdup(a->cfg.provisioner_name);
    /* DESIGN.md: the provisioner name with '/' -> '-'; also lower-cased and '_' -> '-' so any
     * valid provisioner name gives a valid Lease name (a DNS subdomain). */
    for (char *p = a->lease_name; *p; p++) {
        if (*p == '/' || *p == '_')
            *p = '-';
        else if (*p >= 'A' && *p <= 'Z')
            *p = (char)(*p - 'A' + 'a');
    }
    a->holder = make_holder_identity(a->cfg.identity);
    hp_controller_start(a->controller);
    if (a->cfg.leader_elect) {
        const char *ns = a->cfg.leader_elect_namespace;
        if (!ns)
            ns = a->creds.namespace_ && *a->creds.namespace_ ? a->creds.namespace_ : "default";
        struct hp_leader_opts lo = {
            .namespace_ = ns,
            .name = a->lease_name,
            .identity = a->holder,
            .lease_duration_ms = a->cfg.lease_duration_ms,
            .renew_deadline_ms = a->cfg.renew_deadline_ms,
            .retry_period_ms = a->cfg.retry_period_ms,
        };
        hp_metrics_leader(a->lease_name, 0);
        a->leader = hp_leader_start(a->loop, a->client, &lo, on_leadership, a);
        hp_log_info("main: leader election on lease=%s/%s identity=%s", ns, a->lease_name,
                    a->holder);
    } else {
        hp_controller_set_leader(a->controller, 1);
    }
    return 0;
}

/* --pv-dir must be a directory this process can write, checked once at start so that a typo or
 * a missing disk is one clear line instead of a failure per claim. A missing --pv-dir whose
 * parent exists is made (a fresh node); a missing parent means something is wrong. 0, or -1
 * after logging the error. */
static int check_pv_dir(const char *dir)
{
    struct stat st;
    char *parent, *slash;
    int rc = 0;

    if (stat(dir, &st) == 0) {
        if (!S_ISDIR(st.st_mode)) {
            hp_log_error("main: --pv-dir %s is not a directory", dir);
            return -1;
        }
        if (access(dir, W_OK | X_OK) != 0) {
            hp_log_error("main: --pv-dir %s is not writable by this process (uid %u): %s", dir,
                         (unsigned)geteuid(), strerror(errno));
            return -1;
        }
        return 0;
    }
    if (errno != ENOENT) {
        hp_log_error("main: --pv-dir %s cannot be used: %s", dir, strerror(errno));
        return -1;
    }
    parent = hp_xstrdup(dir);
    slash = strrchr(parent, '/');
    while (slash && slash > parent && slash[1] == '\0') { /* trailing slashes */
        *slash = '\0';
        slash = strrchr(parent, '/');
    }
    if (!slash)
        snprintf(parent, strlen(parent) + 1, ".");
    else if (slash == parent)
        parent[1] = '\0';
    else
        *slash = '\0';
    if (stat(parent, &st) != 0 || !S_ISDIR(st.st_mode)) {
        hp_log_error("main: --pv-dir %s does not exist and neither does its parent %s (a typo, or "
                     "a disk that is not mounted?)",
                     dir, parent);
        rc = -1;
    } else if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        hp_log_error("main: --pv-dir %s does not exist and cannot be made: %s", dir,
                     strerror(errno));
        rc = -1;
    } else {
        (void)chmod(dir, 0755); /* the umask does not decide who can reach the volumes */
        hp_log_info("main: created --pv-dir %s (it did not exist)", dir);
    }
    free(parent);
    return rc;
}

/* start() failed: close what it opened (at most the listener and the client) and run the loop
 * until those handles are closed, so uv_loop_close succeeds and the exit is clean. */
static void abandon_start(struct app *a)
{
    if (a->http) {
        hp_http_server_close(a->http, NULL, NULL);
        a->http = NULL;
    }
    if (a->client) {
        hp_kube_client_close(a->client, on_client_closed, a);
        a->client = NULL;
    }
    (void)uv_run(a->loop, UV_RUN_DEFAULT);
}

/* Removal holds one descriptor per directory level (up to 256) in each of --workers jobs, next
 * to the API connections: use the hard limit, as Go programs do by default. */
static void raise_fd_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
            hp_log_warn("main: could not raise the open-file limit: %s", strerror(errno));
    }
}

int main(int argc, char **argv)
{
    struct app a;
    char err[1024];
    int code = 0;

    memset(&a, 0, sizeof(a));
    switch (hp_config_parse(&a.cfg, argc, argv, stdout, err, sizeof(err))) {
    case HP_CONFIG_OK:
        break;
    case HP_CONFIG_EXIT:
        hp_config_free(&a.cfg);
        return 0;
    case HP_CONFIG_ERROR:
    default:
        fprintf(stderr, "hostpath-provisioner: %s\n",
                err);
        hp_config_free(&a.cfg);
        return 2;
    }
    hp_log_init(a.cfg.verbosity, a.cfg.log_format);
    signal(SIGPIPE, SIG_IGN);
    raise_fd_limit();

    if (check_pv_dir(a.cfg.pv_dir) < 0) {
        hp_config_free(&a.cfg);
        return 2;
    }
    if (hp_kube_creds_load(&a.cfg, &a.creds, err, sizeof(err)) < 0) {
        hp_log_error("main: %s", err);
        hp_kube_creds_free(&a.creds);
        hp_config_free(&a.cfg);
        return 2;
    }
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        hp_log_error("main: curl_global_init failed");
        return 1;
    }
    hp_metrics_init();
    hp_log_info("main: starting hostpath-provisioner version=%s provisioner=%s pv-dir=%s "
                "identity=%s node=%s api=%s credentials=%s",
                HP_VERSION, a.cfg.provisioner_name, a.cfg.pv_dir, a.cfg.identity,
                a.cfg.node_name ? a.cfg.node_name : "(none)", a.creds.server, a.creds.source);

    a.loop = uv_default_loop();
    int started = start(&a) == 0;
    if (started) {
        uv_run(a.loop, UV_RUN_DEFAULT);
    } else {
        abandon_start(&a);
        code = 1;
    }
    int rc = uv_loop_close(a.loop);
    if (rc != 0) {
        hp_log_error("main: loop closed with handles still open: %s", uv_strerror(rc));
        code = 1;
    }
    if (started)
        hp_log_info("main: stopped");

    free(a.lease_name);
    free(a.holder);
    hp_metrics_free();
    curl_global_cleanup();
    hp_kube_creds_free(&a.creds);
    hp_config_free(&a.cfg);
    return code;
}
