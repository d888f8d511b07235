/* main: wires the modules together, handles signals and an orderly shutdown.
 *
 * One libuv loop on the main thread runs everything; filesystem work goes to the threadpool.
 * SIGINT/SIGTERM: stop taking work, let running filesystem jobs finish, release the lease,
 * close every handle and exit 0. A second signal exits at once with status 1. SIGHUP: re-read
 * --config now (it is also re-read when it changes).
 */
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
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
#include "hostpath/fsops.h"
#include "hostpath/hostpath.h"
#include "hostpath/http_server.h"
#include "hostpath/kube_client.h"
#include "hostpath/kubeconfig.h"
#include "hostpath/leader.h"
#include "hostpath/log.h"
#include "hostpath/metrics.h"
#include "hostpath/nodemap.h"
#include "hostpath/pathid.h"
#include "hostpath/policy.h"
#include "hostpath/quota.h"

struct app {
    uv_loop_t *loop;
    struct hp_config cfg;
    struct hp_kube_creds creds;
    struct hp_kube_client *client;
    struct hp_events *events;
    struct hp_hostpath *hostpath;
    struct hp_controller *controller;
    struct hp_leader *leader;
    struct hp_leader *node_leader; /* per-node replicas take turns (--node-name) */
    struct hp_http_server *http;
    uv_signal_t sigint, sigterm, sighup;
    uv_timer_t shutdown_timer;
    uv_timer_t trim_timer;
    char *lease_name;
    char *node_lease_name; /* NULL without --node-name and --leader-elect */
    char *holder;
    int stopping;
    int pending; /* modules still closing */
    struct hp_nodemap nodemap; /* --config, as last loaded (the controller borrows it) */
    struct hp_node_entry roots; /* this node's roots in it, every class's (hp_nodemap_roots_for) */
    char **retired; /* at start: roots no longer configured that hold volumes (find_retired) */
    /* at start: roots whose journal was seen, as the journals files of the roots say
     * (find_retired; NULL-terminated) */
    char **journals;
    uv_fs_poll_t config_poll;  /* re-reads --config when it changes (a ConfigMap update) */
    int config_polling;
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
    uv_close((uv_handle_t *)&a->sighup, NULL);
    uv_close((uv_handle_t *)&a->shutdown_timer, NULL);
    if (a->config_polling) {
        a->config_polling = 0;
        uv_close((uv_handle_t *)&a->config_poll, NULL);
    }
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
    /* Filesystem work is finished; now the leases may be released. */
    if (a->leader) {
        a->pending++;
        hp_leader_close(a->leader, on_module_closed, a);
        a->leader = NULL;
    }
    if (a->node_leader) {
        a->pending++;
        hp_leader_close(a->node_leader, on_module_closed, a);
        a->node_leader = NULL;
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
        hp_log_warn("main: %s received while stopping; exiting now", why);
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
    hp_controller_close(a->controller, on_controller_closed, a);
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

static int on_ready(struct hp_http_server *s, struct hp_buf *why, void *data)
{
    struct app *a = data;
    (void)s;
    if (a->stopping) {
        hp_buf_appends(why, "shutting down");
        return 0;
    }
    if (!a->controller || !hp_controller_synced(a->controller)) {
        hp_buf_appends(why, "initial lists of claims, volumes and classes not synced yet");
        return 0;
    }
    /* A replica waiting for the node lease is a standby like any other: Ready, so that a
     * rolling update that starts the new pod first can go on. */
    if (a->node_leader && !hp_leader_state_known(a->node_leader)) {
        hp_buf_appends(why, "node lease state not known yet");
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

static int check_pv_dir(const char *dir, const char *what, int journal_seen);

static void free_retired(struct app *a)
{
    for (char **p = a->retired; p && *p; p++)
        free(*p);
    free(a->retired);
    a->retired = NULL;
    for (char **p = a->journals; p && *p; p++)
        free(*p);
    free(a->journals);
    a->journals = NULL;
}

/* Adds path to the NULL-terminated list *v of *n paths unless it is there. */
static void add_path_once(char ***v, size_t *n, const char *path)
{
    for (size_t k = 0; k < *n; k++)
        if (strcmp((*v)[k], path) == 0)
            return;
    *v = hp_xrealloc(*v, (*n + 2) * sizeof(**v));
    (*v)[(*n)++] = hp_xstrdup(path);
    (*v)[*n] = NULL;
}

/* The volume paths of this node: --pv-dir, or its entry of --config. Each is checked like
 * --pv-dir. 0, or -1 after one error line. */
/* The volume roots of this node in a --config map, whatever the class (its entry, else the
 * default one, of every class of storageClassConfigs, and every shared path): 0, or -1 after
 * one error line naming the file. */
static int config_roots(const struct app *a, const struct hp_nodemap *m, struct hp_node_entry *out)
{
    if (hp_nodemap_roots_for(m, a->cfg.node_name, out) == 0)
        return 0;
    hp_log_error("main: --config %s has no entry for node \"%s\" and no \"%s\" entry (nor a "
                 "sharedFileSystemPath)",
                 a->cfg.config_file, a->cfg.node_name ? a->cfg.node_name : "",
                 HP_NODEMAP_DEFAULT_NODE);
    return -1;
}

/* local-path-provisioner ignores the top level of its config beside storageClassConfigs (its
 * Helm chart writes both); so does this provisioner, saying so. */
static void warn_ignored(const struct app *a, const struct hp_nodemap *m)
{
    if (m->ignored)
        hp_log_warn("main: %s at the top of --config %s is ignored: storageClassConfigs is set, "
                    "and only its classes' paths are used (as local-path-provisioner does); set "
                    "it to [] (or \"\") to silence this",
                    m->ignored, a->cfg.config_file);
}

/* Reads --config (no side effect): 0, or -1 after one error line. */
static int load_config(struct app *a)
{
    char err[1024];
    if (!a->cfg.config_file)
        return 0;
    if (hp_nodemap_load(a->cfg.config_file, &a->nodemap, err, sizeof(err)) < 0) {
        hp_log_error("main: --config %s", err);
        return -1;
    }
    warn_ignored(a, &a->nodemap);
    if (config_roots(a, &a->nodemap, &a->roots) < 0)
        return -1;
    return 0;
}

/* The paths of e with hard limits (hardLimits in --config) must be on a filesystem that
 * enforces project quotas, and this process must be allowed to set them (CAP_SYS_ADMIN): each
 * is probed. 0, or -1 after one error line with the probe's reason, which says what to make or
 * mount the filesystem with. */
static int check_hard_limits(const struct hp_node_entry *e)
{
    static struct hp_quota_fs fs; /* 12 KiB: not on the loop's stack */
    struct hp_quota_usage u;
    char err[1024];
    for (size_t i = 0; e && i < e->npaths; i++) {
        const char *path = e->paths[i].path;
        if (!e->paths[i].hard_limits)
            continue;
        err[0] = '\0';
        int rc = hp_quota_probe_path(path, &fs, err, sizeof(err)), fd = -1;
        if (rc == 0 && (fd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0)
            rc = -errno;
        if (rc == 0 && (rc = hp_quota_get(&fs, fd, 0, &u, err, sizeof(err))) == -EPERM)
            snprintf(err, sizeof(err),
                     "%s: reading its project quotas is not permitted: setting hard limits "
                     "needs CAP_SYS_ADMIN (the container's securityContext: capabilities add "
                     "SYS_ADMIN, or privileged)",
                     path);
        if (fd >= 0)
            (void)close(fd);
        if (rc < 0) {
            hp_log_error("main: --config path %s has hardLimits, but they cannot be enforced "
                         "there: %s",
                         path, err[0] ? err : strerror(-rc));
            return -1;
        }
        hp_log_info("main: hard limits on %s: %s at %s (%s), project quotas enforced", path,
                    fs.fstype, fs.mountpoint[0] ? fs.mountpoint : path,
                    fs.via_fd ? "quotactl_fd" : fs.qdevice);
    }
    return 0;
}

/* Whether path's journal was seen: once the controller runs, as it knows now (a path dropped
 * from --config and put back by a reload); before, as the journals files read at start say. */
static int journal_seen(const struct app *a, const char *path)
{
    if (a->controller)
        return hp_controller_journal_seen(a->controller, path);
    for (char **p = a->journals; p && *p; p++)
        if (strcmp(*p, path) == 0)
            return 1;
    return 0;
}

/* Checks (and, when missing with a parent, makes) every volume path of this node, at start and
 * before a reloaded --config is taken, and that no two of them -- nor one of them and a path no
 * longer configured that still holds volumes (retired, NULL-terminated, may be NULL) -- are one
 * directory or one inside the other on disk, however they are spelled (symlinks, bind mounts):
 * each is a volume root with its own journal and budget, and a volume of one must never be
 * looked up under the other. Paths with hard limits must be able to enforce them
 * (check_hard_limits). 0, or -1 after one error line. */
static int check_paths(const struct app *a, const struct hp_node_entry *e, const char **retired)
{
    size_t n = 0, nr = 0;
    if (e) {
        for (size_t i = 0; i < e->npaths; i++)
            if (check_pv_dir(e->paths[i].path, "--config path",
                             journal_seen(a, e->paths[i].path)) < 0)
                return -1;
    } else if (check_pv_dir(a->cfg.pv_dir, "--pv-dir", journal_seen(a, a->cfg.pv_dir)) < 0) {
        return -1;
    }
    while (retired && retired[nr])
        nr++;
    size_t ncur = e ? e->npaths : 1;
    const char **all = hp_xcalloc(ncur + nr + 1, sizeof(*all));
    for (size_t i = 0; i < ncur; i++)
        all[n++] = e ? e->paths[i].path : a->cfg.pv_dir;
    for (size_t i = 0; i < nr; i++)
        all[n++] = retired[i];
    char err[512];
    size_t x, y;
    int rel, rc = hp_pathid_overlap(all, n, &x, &y, &rel, err, sizeof(err));
    if (rc < 0) {
        hp_log_error("main: cannot tell the volume paths apart on disk: %s", err);
    } else if (rc > 0 && y >= ncur) {
        hp_log_error("main: volume path %s %s %s, a path no longer configured whose ownership "
                     "journal still holds volumes: a volume root must not be (or lie in) "
                     "another one. Put %s back in the configuration until its volumes are "
                     "released, or choose a path outside it",
                     all[x], hp_policy_relation_words((enum hp_path_relation)rel), all[y],
                     all[y]);
    } else if (rc > 0) {
        hp_log_error("main: --config paths %s and %s are %s on disk (through a symlink or a "
                     "bind mount, if not as written): each path must be a volume root of its "
                     "own",
                     all[x], all[y],
                     rel == HP_PATH_EQUAL ? "one directory" : "one inside the other");
    }
    free(all);
    if (rc == 0 && check_hard_limits(e) < 0)
        return -1;
    return rc == 0 ? 0 : -1;
}

/* The roots this node no longer uses that still hold volumes, from the roots files in the
 * journals of its current roots (journal.h): one whose journal was read and holds no record
 * is forgotten; one that cannot be read (its disk not mounted?) is kept. Blocking: at start,
 * before the loop runs. Fills a->retired (NULL-terminated; NULL when none), and a->journals
 * with the roots their journals files name (a disk that holds one of them must be mounted). */
static void find_retired(struct app *a, const struct hp_node_entry *e)
{
    size_t ncur = e ? e->npaths : 1, n = 0, nj = 0;
    char **out = NULL;
    for (size_t i = 0; i < ncur; i++) {
        const char *root = e ? e->paths[i].path : a->cfg.pv_dir;
        struct hp_fsop *f = hp_fsop_new(HP_FSOP_ROOTS, root);
        hp_fsop_run(f);
        if (f->status < 0 && f->status != -ENOENT)
            hp_log_warn("main: %s", f->msg);
        /* A shared path's lists are its leader's node's, not this node's; only the paths
         * configured now count. */
        for (const char *p = f->known_journals; p && *p && !(e && e->paths[i].shared);
             p += strlen(p) + 1) {
            int configured = 0;
            for (size_t k = 0; k < ncur; k++)
                configured |= strcmp(e ? e->paths[k].path : a->cfg.pv_dir, p) == 0 &&
                              !(e && e->paths[k].shared);
            if (configured)
                add_path_once(&a->journals, &nj, p);
        }
        /* A directory above a configured root that holds a journal with volumes is a root of
         * an earlier configuration, which no roots file may tell of (the configuration was
         * changed while the provisioner was down): it is listed like a retired one, and the
         * overlap is refused (check_paths). */
        char up[4096];
        (void)snprintf(up, sizeof(up), "%s", root);
        for (char *slash = strrchr(up, '/'); slash; slash = strrchr(up, '/')) {
            if (slash == up) {
                if (!up[1])
                    break;
                up[1] = '\0';
            } else {
                *slash = '\0';
            }
            struct hp_fsop *g = hp_fsop_new(HP_FSOP_ROOTS, up);
            hp_fsop_run(g);
            if (g->journal_found && g->record_files > 0)
                add_path_once(&out, &n, g->root);
            hp_fsop_free(g);
        }
        for (const char *p = f->known_roots; p && *p; p += strlen(p) + 1) {
            int known = 0;
            for (size_t k = 0; k < ncur; k++)
                known |= strcmp(e ? e->paths[k].path : a->cfg.pv_dir, p) == 0;
            for (size_t k = 0; k < n; k++)
                known |= strcmp(out[k], p) == 0;
            if (known)
                continue;
            struct hp_fsop *g = hp_fsop_new(HP_FSOP_ROOTS, p);
            hp_fsop_run(g);
            if (g->status == 0 && g->record_files == 0 && g->journal_found) {
                hp_log_info("main: volume path %s (no longer configured) holds no volume any "
                            "more: forgotten",
                            p);
            } else {
                add_path_once(&out, &n, g->root);
            }
            hp_fsop_free(g);
        }
        hp_fsop_free(f);
    }
    a->retired = out;
}

/* --config changed (a ConfigMap update swaps a symlink): a valid new map takes effect now, an
 * invalid one is logged and the old one stays. */
static void reload_config(struct app *a);

static void on_config_changed(uv_fs_poll_t *h, int status, const uv_stat_t *prev,
                              const uv_stat_t *curr)
{
    struct app *a = h->data;
    (void)prev;
    (void)curr;
    if (status < 0 || a->stopping) {
        if (status < 0)
            hp_log_warn("main: --config %s cannot be read now (%s); the previous map stays",
                        a->cfg.config_file, uv_strerror(status));
        return;
    }
    reload_config(a);
}

/* SIGHUP, as daemons take it: re-read --config now (its default action would end the process
 * in the middle of whatever it does). */
static void on_sighup(uv_signal_t *s, int signum)
{
    struct app *a = s->data;
    (void)signum;
    if (a->stopping)
        return;
    if (!a->cfg.config_file) {
        hp_log_info("main: SIGHUP: there is no --config to re-read; nothing changes");
        return;
    }
    hp_log_info("main: SIGHUP: re-reading --config %s", a->cfg.config_file);
    reload_config(a);
}

/* Reads --config again: a valid map that differs for this node is taken. */
static void reload_config(struct app *a)
{
    struct hp_nodemap m;
    char err[1024];
    if (hp_nodemap_load(a->cfg.config_file, &m, err, sizeof(err)) < 0) {
        hp_log_error("main: --config changed but is not valid, the previous map stays: %s", err);
        return;
    }
    struct hp_node_entry e = {0};
    if (hp_nodemap_roots_for(&m, a->cfg.node_name, &e) < 0) {
        hp_log_error("main: --config %s changed but has no entry for this node any more; the "
                     "previous map stays",
                     a->cfg.config_file);
        hp_nodemap_free(&m);
        return;
    }
    if (hp_nodemap_same_for(&a->nodemap, &m, a->cfg.node_name)) {
        hp_node_entry_free(&e);
        hp_nodemap_free(&m);
        return;
    }
    const char **kept = a->controller ? hp_controller_kept_roots(a->controller, &e) : NULL;
    int bad = check_paths(a, &e, kept) < 0;
    free(kept);
    if (bad) { /* the error line names the path */
        hp_log_error("main: --config %s changed, but a path of this node cannot be used; the "
                     "previous map stays",
                     a->cfg.config_file);
        hp_node_entry_free(&e);
        hp_nodemap_free(&m);
        return;
    }
    struct hp_buf b;
    hp_buf_init(&b, 0);
    for (size_t i = 0; i < e.npaths; i++)
        (void)hp_buf_printf(&b, "%s%s", i ? "," : "", e.paths[i].path);
    hp_log_info("main: --config %s reloaded: paths=%s", a->cfg.config_file, b.data ? b.data : "");
    hp_buf_free(&b);
    warn_ignored(a, &m);
    /* The controller borrows the map: its content and the roots change together. */
    hp_nodemap_free(&a->nodemap);
    a->nodemap = m;
    hp_node_entry_free(&a->roots);
    a->roots = e;
    if (a->controller)
        hp_controller_set_paths(a->controller, &a->roots);
}

/* --leader-elect-namespace, else the credentials' namespace, else "default". */
static const char *leader_namespace(const struct app *a)
{
    if (a->cfg.leader_elect_namespace)
        return a->cfg.leader_elect_namespace;
    return a->creds.namespace_ && *a->creds.namespace_ ? a->creds.namespace_ : "default";
}

/* A duration in the flags' own syntax: "15m", "1h30m", "2s", "250ms", "0". */
static void format_duration(char *out, size_t len, uint64_t ms)
{
    uint64_t s = ms / 1000, h = s / 3600, m = s / 60 % 60;
    size_t n = 0;

    if (ms == 0) {
        snprintf(out, len, "0");
        return;
    }
    if (ms % 1000) {
        snprintf(out, len, "%llums", (unsigned long long)ms);
        return;
    }
    out[0] = '\0';
    if (h)
        n += (size_t)snprintf(out + n, len - n, "%lluh", (unsigned long long)h);
    if (m && n < len)
        n += (size_t)snprintf(out + n, len - n, "%llum", (unsigned long long)m);
    if (s % 60 && n < len)
        snprintf(out + n, len - n, "%llus", (unsigned long long)(s % 60));
}

/* " key=value"; a value that is empty or holds a space or a quote is quoted. */
static void banner_kv(struct hp_buf *b, const char *key, const char *value)
{
    int quote = !*value || strpbrk(value, " \"") != NULL;
    (void)hp_buf_printf(b, " %s=%s%s%s", key, quote ? "\"" : "", value, quote ? "\"" : "");
}

static void banner_ms(struct hp_buf *b, const char *key, uint64_t ms)
{
    char d[64];
    format_duration(d, sizeof(d), ms);
    banner_kv(b, key, d);
}

static void banner_int(struct hp_buf *b, const char *key, long long v)
{
    char d[32];
    snprintf(d, sizeof(d), "%lld", v);
    banner_kv(b, key, d);
}

/* The effective configuration in one line, flags by their names: what an operator checks
 * first. No secrets: the token and keys are only named by kind. */
static void log_banner(const struct app *a)
{
    const struct hp_config *c = &a->cfg;
    struct hp_buf b;
    char addr[320];

    hp_buf_init(&b, 0);
    banner_kv(&b, "version", HP_VERSION);
    banner_kv(&b, "provisioner", c->provisioner_name);
    if (c->config_file)
        banner_kv(&b, "config", c->config_file);
    else
        banner_kv(&b, "pv-dir", c->pv_dir);
    banner_kv(&b, "identity", c->identity);
    banner_kv(&b, "node", c->node_name ? c->node_name : "(none)");
    banner_kv(&b, "api", a->creds.server);
    banner_kv(&b, "credentials", a->creds.source ? a->creds.source : "(none)");
    banner_kv(&b, "auth", hp_kube_auth_kind(&a->creds));
    banner_kv(&b, "default-reclaim-policy", hp_reclaim_name(c->default_reclaim_policy));
    banner_int(&b, "workers", c->workers);
    banner_ms(&b, "resync-period", c->resync_period_ms);
    banner_ms(&b, "retry-base-delay", c->retry_base_delay_ms);
    banner_ms(&b, "retry-max-delay", c->retry_max_delay_ms);
    banner_int(&b, "failed-retry-threshold", c->failed_retry_threshold);
    banner_kv(&b, "leader-elect", c->leader_elect ? "on" : "off");
    if (c->leader_elect) {
        snprintf(addr, sizeof(addr), "%s/%s", leader_namespace(a), a->lease_name);
        banner_kv(&b, "leader-elect-lease", addr);
        if (a->node_lease_name) {
            snprintf(addr, sizeof(addr), "%s/%s", leader_namespace(a), a->node_lease_name);
            banner_kv(&b, "node-lease", addr);
        }
        banner_ms(&b, "leader-elect-lease-duration", c->lease_duration_ms);
        banner_ms(&b, "leader-elect-renew-deadline", c->renew_deadline_ms);
        banner_ms(&b, "leader-elect-retry-period", c->retry_period_ms);
    }
    snprintf(addr, sizeof(addr), "%g", c->kube_api_qps);
    banner_kv(&b, "kube-api-qps", addr);
    banner_int(&b, "kube-api-burst", c->kube_api_burst);
    /* Whether the limit above holds, or gives way to the server's own protection. */
    banner_kv(&b, "kube-api-limit",
              c->kube_api_qps <= 0         ? "off"
              : c->kube_api_limits_set     ? "always"
                                           : "until-server-shows-apf");
    if (c->metrics_port < 0) {
        snprintf(addr, sizeof(addr), "off");
    } else {
        int v6 = strchr(c->metrics_host, ':') != NULL;
        snprintf(addr, sizeof(addr), "%s%s%s:%d", v6 ? "[" : "", c->metrics_host, v6 ? "]" : "",
                 c->metrics_port);
    }
    banner_kv(&b, "metrics-address", addr);
    banner_kv(&b, "add-finalizer", c->add_finalizer ? "on" : "off");
    banner_ms(&b, "usage-scan-period", c->usage_scan_period_ms);
    banner_int(&b, "log-verbosity", c->verbosity);
    banner_kv(&b, "log-format", c->log_format == HP_LOG_JSON ? "json" : "text");
    hp_log_info("main: starting hostpath-provisioner%s", b.data ? b.data : "");
    hp_buf_free(&b);
}

/* Steps that can fail come first, before any module that does work exists: a failure then
 * leaves only the listener and the client to close (abandon_start), and nothing is stopped
 * that was never started. Each failure is logged here, once, naming what to fix. */
static struct hp_leader *start_election(struct app *a, const char *name, hp_leader_change_cb cb);
static void on_node_lease(struct hp_leader *l, int held, void *data);

static int start(struct app *a)
{
    int rc;
    if (a->cfg.metrics_port >= 0) {
        /* First: a port already in use (a second instance, anything on :8080) is the likeliest
         * start-up failure, and the one an operator must see at once. */
        rc = hp_http_server_new(&a->http, a->loop, a->cfg.metrics_host, a->cfg.metrics_port,
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
        .limit_until_apf = !a->cfg.kube_api_limits_set,
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
    /* Its CSIStorageCapacity objects live where the Lease does (leader_namespace). */
    hp_controller_set_namespace(a->controller, leader_namespace(a));
    if (a->cfg.config_file)
        hp_controller_set_paths(a->controller, &a->roots);
    if (a->cfg.config_file)
        hp_controller_set_map(a->controller, &a->nodemap);
    for (char **p = a->retired; p && *p; p++)
        hp_controller_add_retired(a->controller, *p);
    for (char **p = a->journals; p && *p; p++)
        hp_controller_expect_journal(a->controller, *p);
    if (a->cfg.config_file) {
        if (uv_fs_poll_init(a->loop, &a->config_poll) == 0) {
            a->config_poll.data = a;
            a->config_polling = 1;
            int prc = uv_fs_poll_start(&a->config_poll, on_config_changed, a->cfg.config_file,
                                       2000);
            if (prc < 0)
                hp_log_warn("main: --config %s will not be re-read: %s", a->cfg.config_file,
                            uv_strerror(prc));
        }
    }

    uv_signal_init(a->loop, &a->sigint);
    uv_signal_init(a->loop, &a->sigterm);
    uv_signal_init(a->loop, &a->sighup);
    a->sigint.data = a->sigterm.data = a->sighup.data = a;
    uv_signal_start(&a->sigint, on_signal, SIGINT);
    uv_signal_start(&a->sigterm, on_signal, SIGTERM);
    uv_signal_start(&a->sighup, on_sighup, SIGHUP);
    uv_timer_init(a->loop, &a->shutdown_timer);
    uv_timer_init(a->loop, &a->trim_timer);
    (void)uv_timer_start(&a->trim_timer, on_trim_timer, TRIM_INTERVAL_MS, TRIM_INTERVAL_MS);
    uv_unref((uv_handle_t *)&a->trim_timer); /* never what keeps the loop running */

    a->holder = make_holder_identity(a->cfg.identity);
    if (a->node_lease_name) {
        /* Replicas for one node (a Deployment's, a DaemonSet pod and its replacement) share
         * its disks: the one holding the node's Lease works on them, and only it campaigns
         * for the provisioner-wide lease. */
        hp_controller_set_node_lease(a->controller, 0);
        a->node_leader = start_election(a, a->node_lease_name, on_node_lease);
    }
    hp_controller_start(a->controller);
    if (a->cfg.leader_elect && !a->node_lease_name)
        a->leader = start_election(a, a->lease_name, on_leadership);
    else if (!a->cfg.leader_elect)
        hp_controller_set_leader(a->controller, 1);
    return 0;
}

static struct hp_leader *start_election(struct app *a, const char *name, hp_leader_change_cb cb)
{
    const char *ns = leader_namespace(a);
    struct hp_leader_opts lo = {
        .namespace_ = ns,
        .name = name,
        .identity = a->holder,
        .lease_duration_ms = a->cfg.lease_duration_ms,
        .renew_deadline_ms = a->cfg.renew_deadline_ms,
        .retry_period_ms = a->cfg.retry_period_ms,
    };
    hp_metrics_leader(name, 0);
    hp_log_info("main: leader election on lease=%s/%s identity=%s", ns, name, a->holder);
    return hp_leader_new(a->loop, a->client, &lo, cb, a);
}

static void on_node_lease(struct hp_leader *l, int held, void *data)
{
    struct app *a = data;
    (void)l;
    if (held)
        hp_log_info("main: holds the node lease: works on node %s's disks lease=%s",
                    a->cfg.node_name, a->node_lease_name);
    else
        hp_log_info("main: lost the node lease: leaves node %s's disks alone lease=%s",
                    a->cfg.node_name, a->node_lease_name);
    hp_metrics_leader(a->node_lease_name, held);
    if (a->controller)
        hp_controller_set_node_lease(a->controller, held);
    if (held && !a->leader && !a->stopping)
        a->leader = start_election(a, a->lease_name, on_leadership);
}

/* --pv-dir must be a directory this process can write, checked once at start so that a typo or
 * a missing disk is one clear line instead of a failure per claim. A missing --pv-dir whose
 * parent exists is made (a fresh node); a missing parent means something is wrong. 0, or -1
 * after logging the error. */
/* journal_seen: the journals file of another path says dir had an ownership journal; if it is
 * missing, its disk is not mounted: it is not made on the mount point (the controller takes no
 * volume there until it is back). */
static int check_pv_dir(const char *dir, const char *what, int journal_seen)
{
    struct stat st;
    char *parent, *slash;
    int rc = 0;

    if (stat(dir, &st) == 0) {
        if (!S_ISDIR(st.st_mode)) {
            hp_log_error("main: %s %s is not a directory", what, dir);
            return -1;
        }
        if (access(dir, W_OK | X_OK) != 0) {
            hp_log_error("main: %s %s is not writable by this process (uid %u): %s", what, dir,
                         (unsigned)geteuid(), strerror(errno));
            return -1;
        }
        return 0;
    }
    if (errno != ENOENT) {
        hp_log_error("main: %s %s cannot be used: %s", what, dir, strerror(errno));
        return -1;
    }
    if (journal_seen) {
        hp_log_warn("main: %s %s does not exist, yet an ownership journal was seen there "
                    "before (the file %s/journals under this node's volume paths lists it): is "
                    "its disk mounted? It is not made here",
                    what, dir, HP_JOURNAL_DIR);
        return 0;
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
        hp_log_error("main: %s %s does not exist and neither does its parent %s (a typo, or "
                     "a disk that is not mounted?)",
                     what, dir, parent);
        rc = -1;
    } else if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        hp_log_error("main: %s %s does not exist and cannot be made: %s", what, dir,
                     strerror(errno));
        rc = -1;
    } else {
        (void)chmod(dir, 0755); /* the umask does not decide who can reach the volumes */
        hp_log_info("main: created %s %s (it did not exist)", what, dir);
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
    /* One malloc arena: the threadpool's filesystem requests are built on the loop thread and
     * freed there, so per-thread arenas would only hold freed memory apart (about 0.5 MiB more
     * resident holding 1,000 volumes, bench/README.md). */
    (void)mallopt(M_ARENA_MAX, 1);
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

    /* What can be refused is, before anything is made on disk (check_paths may make a
     * missing --pv-dir). */
    code = 2;
    if (load_config(&a) < 0)
        goto refused;
    if (hp_kube_creds_load(&a.cfg, &a.creds, err, sizeof(err)) < 0) {
        hp_log_error("main: %s", err);
        goto refused;
    }
    const struct hp_node_entry *entry = a.cfg.config_file ? &a.roots : NULL;
    find_retired(&a, entry);
    if (check_paths(&a, entry, (const char **)a.retired) < 0)
        goto refused;
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        hp_log_error("main: curl_global_init failed");
        code = 1;
        goto refused;
    }
    code = 0;
    hp_metrics_init();
    a.lease_name = hp_leader_lease_name(a.cfg.provisioner_name);
    if (a.cfg.leader_elect && a.cfg.node_name)
        a.node_lease_name = hp_leader_node_lease_name(a.lease_name, a.cfg.node_name);
    log_banner(&a);

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
    free(a.node_lease_name);
    free(a.holder);
    hp_metrics_free();
    curl_global_cleanup();
    hp_kube_creds_free(&a.creds);
    hp_nodemap_free(&a.nodemap);
    hp_node_entry_free(&a.roots);
    free_retired(&a);
    hp_config_free(&a.cfg);
    return code;

refused:
    hp_kube_creds_free(&a.creds);
    hp_nodemap_free(&a.nodemap);
    hp_node_entry_free(&a.roots);
    free_retired(&a);
    hp_config_free(&a.cfg);
    return code;
}
