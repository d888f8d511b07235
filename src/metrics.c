/* metrics: process-wide counters, gauges and histograms rendered in the Prometheus text
 * exposition format 0.0.4.
 *
 * Loop thread only. Every family is a static descriptor; its label sets ("series") live in a
 * small array per family, found by a hash of the label values followed by a string compare. A
 * label set is copied to the heap the first time it is seen; after that an update is a lookup
 * and an add, with no allocation. Render sorts the series by label values so the output is
 * stable. Names, help texts and buckets follow the sig-storage provisioner library
 * (controller/metrics/metrics.go), client-go and the Prometheus Go client's process collector.
 */
#include "hostpath/metrics.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <unistd.h>

#include "hostpath/log.h"

#define MAX_LABELS 2
/* A family never holds more label sets than this: label values come from cluster objects
 * (class names, event reasons), and a runaway cardinality must not grow memory without bound. */
#define MAX_SERIES 2048

enum mtype { M_COUNTER, M_GAUGE, M_HISTOGRAM };

/* prometheus.DefBuckets, used by the sig-storage library for both duration histograms. */
static const double def_buckets[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
#define NBUCKETS HP_ARRAY_SIZE(def_buckets)

struct series {
    uint32_t hash;
    char *lv[MAX_LABELS];
    double value;      /* counter or gauge value; histogram: unused */
    double sum;        /* histogram */
    uint64_t count;    /* histogram */
    uint64_t *buckets; /* histogram: per-bucket (non-cumulative) counts, NBUCKETS entries */
};

struct family {
    const char *name;
    const char *help;
    enum mtype type;
    int nlabels;
    const char *labels[MAX_LABELS];
    struct series *series;
    size_t len, cap;
    int overflow_logged;
};

enum {
    F_PROV_TOTAL,
    F_PROV_FAILED,
    F_PROV_DURATION,
    F_DEL_TOTAL,
    F_DEL_FAILED,
    F_DEL_DURATION,
    F_WQ_DEPTH,
    F_WQ_ADDS,
    F_WQ_RETRIES,
    F_WATCH_RESTARTS,
    F_WATCH_RELISTS,
    F_WATCH_MALFORMED,
    F_REST_REQUESTS,
    F_LEADER,
    F_FS_ERRORS,
    F_EVENTS,
    F_EVENT_FAILURES,
    F_ORPHANS,
    F_COUNT
};

#define FAM(n_, h_, t_, k_, ...)                                                                   \
    {                                                                                              \
        .name = (n_), .help = (h_), .type = (t_), .nlabels = (k_), .labels = { __VA_ARGS__ }       \
    }

static struct family families[F_COUNT] = {
    [F_PROV_TOTAL] =
        FAM("controller_persistentvolumeclaim_provision_total",
            "Total number of persistent volumes provisioned succesfully. Broken down by "
            "storage class name and source of the claim.",
            M_COUNTER, 2, "class", "source"),
    [F_PROV_FAILED] =
        FAM("controller_persistentvolumeclaim_provision_failed_total",
            "Total number of persistent volume provision failed attempts. Broken down "
            "by storage class name and source of the claim.",
            M_COUNTER, 2, "class", "source"),
    [F_PROV_DURATION] = FAM("controller_persistentvolumeclaim_provision_duration_seconds",
                            "Latency in seconds to provision persistent volumes. Failed "
                            "provisioning attempts are ignored. Broken down by storage class name "
                            "and source of the claim.",
                            M_HISTOGRAM, 2, "class", "source"),
    [F_DEL_TOTAL] = FAM("controller_persistentvolume_delete_total",
                        "Total number of persistent volumes deleted succesfully. Broken down by "
                        "storage class name.",
                        M_COUNTER, 1, "class"),
    [F_DEL_FAILED] = FAM("controller_persistentvolume_delete_failed_total",
                         "Total number of persistent volume delete failed attempts. Broken down by "
                         "storage class name.",
                         M_COUNTER, 1, "class"),
    [F_DEL_DURATION] = FAM("controller_persistentvolume_delete_duration_seconds",
                           "Latency in seconds to delete persistent volumes. Failed deletion "
                           "attempts are ignored. Broken down by storage class name.",
                           M_HISTOGRAM, 1, "class"),
    [F_WQ_DEPTH] = FAM("workqueue_depth", "Current depth of workqueue", M_GAUGE, 1, "name"),
    [F_WQ_ADDS] = FAM("workqueue_adds_total", "Total number of adds handled by workqueue",
                      M_COUNTER, 1, "name"),
    [F_WQ_RETRIES] = FAM("workqueue_retries_total", "Total number of retries handled by workqueue",
                         M_COUNTER, 1, "name"),
    [F_WATCH_RESTARTS] = FAM("hostpath_watch_restarts_total",
                             "Total number of watch streams restarted from the last seen "
                             "resourceVersion. Broken down by resource.",
                             M_COUNTER, 1, "resource"),
    [F_WATCH_RELISTS] = FAM("hostpath_watch_relists_total",
                            "Total number of full relists after the initial list (410 Gone, "
                            "expired resourceVersion). Broken down by resource.",
                            M_COUNTER, 1, "resource"),
    [F_WATCH_MALFORMED] = FAM("hostpath_watch_malformed_events_total",
                              "Total number of watch events that could not be decoded. Broken down "
                              "by resource.",
                              M_COUNTER, 1, "resource"),
    [F_REST_REQUESTS] = FAM("rest_client_requests_total",
                            "Number of HTTP requests, partitioned by status code and method.",
                            M_COUNTER, 2, "code", "method"),
    [F_LEADER] =
        FAM("leader_election_master_status",
            "Gauge of if the reporting system is master of the relevant lease, 0 indicates "
            "backup, 1 indicates master. 'name' is the string used to identify the lease. "
            "Please make sure to group by name.",
            M_GAUGE, 1, "name"),
    [F_FS_ERRORS] = FAM("hostpath_filesystem_errors_total",
                        "Total number of failed filesystem operations on volume directories. "
                        "Broken down by operation and errno name.",
                        M_COUNTER, 2, "operation", "errno"),
    [F_EVENTS] = FAM("hostpath_events_total",
                     "Total number of Kubernetes events written. Broken down by type and reason.",
                     M_COUNTER, 2, "type", "reason"),
    [F_EVENT_FAILURES] =
        FAM("hostpath_event_write_failures_total",
            "Total number of Kubernetes events that could not be written.", M_COUNTER, 0, NULL),
    [F_ORPHANS] = FAM("hostpath_orphan_directories",
                      "Directories under the volume root without a live PersistentVolume, as of "
                      "the last orphan sweep: kind=\"recorded\" are in the ownership journal "
                      "(retained, archived, or being settled), kind=\"unrecorded\" are not (never "
                      "touched).",
                      M_GAUGE, 1, "kind"),
};

static double start_time; /* process_start_time_seconds; 0 = not computed yet */

/* FNV-1a over the label values, each terminated by its NUL so ("ab","c") != ("a","bc"). */
static uint32_t hash_values(int n, const char *const *lv)
{
    uint32_t h = 2166136261u;
    for (int i = 0; i < n; i++) {
        const unsigned char *p = (const unsigned char *)lv[i];
        do {
            h ^= *p;
            h *= 16777619u;
        } while (*p++);
    }
    return h;
}

/* The series of f for these label values, created on first sight; NULL only when the family is
 * at its cardinality cap (the update is then dropped, and logged once). */
static struct series *lookup(struct family *f, const char *const *lv)
{
    uint32_t h = hash_values(f->nlabels, lv);

    for (size_t i = 0; i < f->len; i++) {
        struct series *s = &f->series[i];
        if (s->hash != h)
            continue;
        int same = 1;
        for (int j = 0; j < f->nlabels && same; j++)
            same = strcmp(s->lv[j], lv[j]) == 0;
        if (same)
            return s;
    }
    if (f->len >= MAX_SERIES) {
        if (!f->overflow_logged) {
            hp_log_warn("metrics: too many label sets, dropping new ones family=%s max=%d", f->name,
                        MAX_SERIES);
            f->overflow_logged = 1;
        }
        return NULL;
    }
    if (f->len == f->cap) {
        f->cap = f->cap ? f->cap * 2 : 4;
        f->series = hp_xrealloc(f->series, f->cap * sizeof(*f->series));
    }
    struct series *s = &f->series[f->len++];
    memset(s, 0, sizeof(*s));
    s->hash = h;
    for (int j = 0; j < f->nlabels; j++)
        s->lv[j] = hp_xstrdup(lv[j]);
    if (f->type == M_HISTOGRAM)
        s->buckets = hp_xcalloc(NBUCKETS, sizeof(*s->buckets));
    return s;
}

static const char *nz(const char *s)
{
    return s ? s : "";
}

static void counter_add(int fam, const char *a, const char *b, double v)
{
    const char *lv[MAX_LABELS] = {nz(a), nz(b)};
    struct series *s = lookup(&families[fam], lv);
    if (s)
        s->value += v;
}

static void gauge_set(int fam, const char *a, double v)
{
    const char *lv[MAX_LABELS] = {nz(a), ""};
    struct series *s = lookup(&families[fam], lv);
    if (s)
        s->value = v;
}

static void observe(int fam, const char *a, const char *b, double v)
{
    const char *lv[MAX_LABELS] = {nz(a), nz(b)};
    struct series *s = lookup(&families[fam], lv);
    if (!s)
        return;
    /* Store the count of the first bucket v fits; render accumulates. NaN lands in none. */
    for (size_t i = 0; i < NBUCKETS; i++) {
        if (v <= def_buckets[i]) {
            s->buckets[i]++;
            break;
        }
    }
    s->sum += v;
    s->count++;
}

/* ---- process collector ---- */

static double now_wall(void)
{
    struct timeval tv;
    (void)gettimeofday(&tv, NULL); /* cannot fail with a valid pointer */
    return (double)tv.tv_sec + (double)tv.tv_usec / 1e6;
}

/* Reads a small /proc file into buf (NUL-terminated); 0 or -errno. */
static int read_small(const char *path, char *buf, size_t size)
{
    FILE *fp = fopen(path, "re");
    if (!fp)
        return -errno;
    size_t n = fread(buf, 1, size - 1, fp);
    int err = ferror(fp) ? -EIO : 0;
    fclose(fp);
    buf[n] = '\0';
    return err;
}

/* Start time as the Go process collector computes it: /proc/self/stat starttime (clock ticks
 * after boot) plus btime from /proc/stat. Falls back to the time of the first call. */
static double compute_start_time(void)
{
    char buf[4096];
    long ticks = sysconf(_SC_CLK_TCK);

    if (ticks > 0 && read_small("/proc/self/stat", buf, sizeof(buf)) == 0) {
        /* comm (field 2) may hold spaces and parentheses: fields resume after the last ')'. */
        char *p = strrchr(buf, ')');
        /* After ')' come fields 3.. ; starttime is field 22, the 20th after comm. */
        for (int field = 3; p && field <= 22; field++) {
            p = strchr(p + 1, ' ');
            if (p && field == 22) {
                char *end;
                errno = 0;
                unsigned long long st = strtoull(p + 1, &end, 10);
                if (errno || end == p + 1)
                    break;
                char sbuf[8192];
                if (read_small("/proc/stat", sbuf, sizeof(sbuf)) != 0)
                    break;
                char *b = strstr(sbuf, "\nbtime ");
                if (!b)
                    break;
                errno = 0;
                unsigned long long bt = strtoull(b + 7, &end, 10);
                if (errno || end == b + 7)
                    break;
                return (double)bt + (double)st / (double)ticks;
            }
        }
    }
    return now_wall();
}

static int statm_pages(unsigned long long *size, unsigned long long *resident)
{
    char buf[256];
    int rc = read_small("/proc/self/statm", buf, sizeof(buf));
    if (rc)
        return rc;
    char *end;
    errno = 0;
    *size = strtoull(buf, &end, 10);
    if (errno || end == buf)
        return -EINVAL;
    char *p = end;
    *resident = strtoull(p, &end, 10);
    if (errno || end == p)
        return -EINVAL;
    return 0;
}

static long count_open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return -1;
    long n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] != '.')
            n++;
    }
    closedir(d);
    return n - 1; /* the directory stream's own descriptor */
}

/* ---- public update functions ---- */

void hp_metrics_init(void)
{
    hp_metrics_free();
    start_time = compute_start_time();
}

void hp_metrics_free(void)
{
    for (size_t i = 0; i < F_COUNT; i++) {
        struct family *f = &families[i];
        for (size_t j = 0; j < f->len; j++) {
            for (int k = 0; k < f->nlabels; k++)
                free(f->series[j].lv[k]);
            free(f->series[j].buckets);
        }
        free(f->series);
        f->series = NULL;
        f->len = f->cap = 0;
        f->overflow_logged = 0;
    }
}

void hp_metrics_provision(const char *class_, const char *source, int ok, double seconds)
{
    if (ok) {
        counter_add(F_PROV_TOTAL, class_, source, 1);
        observe(F_PROV_DURATION, class_, source, seconds);
    } else {
        counter_add(F_PROV_FAILED, class_, source, 1);
    }
}

void hp_metrics_delete(const char *class_, int ok, double seconds)
{
    if (ok) {
        counter_add(F_DEL_TOTAL, class_, NULL, 1);
        observe(F_DEL_DURATION, class_, NULL, seconds);
    } else {
        counter_add(F_DEL_FAILED, class_, NULL, 1);
    }
}

void hp_metrics_workqueue_depth(const char *queue, size_t depth)
{
    gauge_set(F_WQ_DEPTH, queue, (double)depth);
}

void hp_metrics_workqueue_add(const char *queue)
{
    counter_add(F_WQ_ADDS, queue, NULL, 1);
}

void hp_metrics_workqueue_retry(const char *queue)
{
    counter_add(F_WQ_RETRIES, queue, NULL, 1);
}

void hp_metrics_watch_restart(const char *resource)
{
    counter_add(F_WATCH_RESTARTS, resource, NULL, 1);
}

void hp_metrics_watch_relist(const char *resource)
{
    counter_add(F_WATCH_RELISTS, resource, NULL, 1);
}

void hp_metrics_watch_malformed(const char *resource)
{
    counter_add(F_WATCH_MALFORMED, resource, NULL, 1);
}

void hp_metrics_api_request(const char *method, long code)
{
    char cbuf[24];
    const char *c = "<error>";
    if (code > 0) {
        snprintf(cbuf, sizeof(cbuf), "%ld", code);
        c = cbuf;
    }
    counter_add(F_REST_REQUESTS, c, method, 1);
}

void hp_metrics_leader(const char *name, int leading)
{
    gauge_set(F_LEADER, name, leading ? 1 : 0);
}

void hp_metrics_fs_error(const char *operation, int err)
{
    char ebuf[24];
    const char *name = NULL;
    if (err < 0)
        err = -err;
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 32))
    name = strerrorname_np(err);
#endif
    if (!name) {
        snprintf(ebuf, sizeof(ebuf), "%d", err);
        name = ebuf;
    }
    counter_add(F_FS_ERRORS, operation, name, 1);
}

void hp_metrics_orphans(size_t recorded, size_t unrecorded)
{
    gauge_set(F_ORPHANS, "recorded", (double)recorded);
    gauge_set(F_ORPHANS, "unrecorded", (double)unrecorded);
}

void hp_metrics_event(const char *type, const char *reason, int ok)
{
    if (ok)
        counter_add(F_EVENTS, type, reason, 1);
    else
        counter_add(F_EVENT_FAILURES, NULL, NULL, 1);
}

/* ---- rendering ---- */

/* Shortest text that reads back as the same double, like Go's FormatFloat(v, 'g', -1, 64). */
static void format_double(char *out, size_t size, double v)
{
    if (isnan(v)) {
        snprintf(out, size, "NaN");
        return;
    }
    if (isinf(v)) {
        snprintf(out, size, v > 0 ? "+Inf" : "-Inf");
        return;
    }
    /* Whole numbers (counters, bucket bounds, byte sizes) print without an exponent. */
    if (v == floor(v) && fabs(v) < 1e15) {
        snprintf(out, size, "%.0f", v);
        return;
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(out, size, "%.*g", prec, v);
        if (strtod(out, NULL) == v)
            return;
    }
}

static void append_escaped(struct hp_buf *out, const char *s)
{
    const char *run = s;
    for (const char *p = s;; p++) {
        const char *esc = NULL;
        switch (*p) {
        case '\\':
            esc = "\\\\";
            break;
        case '"':
            esc = "\\\"";
            break;
        case '\n':
            esc = "\\n";
            break;
        case '\0':
            break;
        default:
            continue;
        }
        (void)hp_buf_append(out, run, (size_t)(p - run));
        if (!esc)
            return;
        (void)hp_buf_appends(out, esc);
        run = p + 1;
    }
}

/* Writes {a="x",b="y"[,le="..."]} or nothing when there are no labels at all. */
static void append_labels(struct hp_buf *out, const struct family *f, const struct series *s,
                          const char *le)
{
    if (f->nlabels == 0 && !le)
        return;
    (void)hp_buf_append(out, "{", 1);
    for (int i = 0; i < f->nlabels; i++) {
        (void)hp_buf_printf(out, "%s%s=\"", i ? "," : "", f->labels[i]);
        append_escaped(out, s->lv[i]);
        (void)hp_buf_append(out, "\"", 1);
    }
    if (le)
        (void)hp_buf_printf(out, "%sle=\"%s\"", f->nlabels ? "," : "", le);
    (void)hp_buf_append(out, "}", 1);
}

static void append_sample(struct hp_buf *out, const struct family *f, const struct series *s,
                          const char *suffix, const char *le, double v)
{
    char num[40];
    format_double(num, sizeof(num), v);
    (void)hp_buf_appends(out, f->name);
    (void)hp_buf_appends(out, suffix);
    append_labels(out, f, s, le);
    (void)hp_buf_printf(out, " %s\n", num);
}

static const struct family *sort_family; /* qsort has no context argument */

static int cmp_series(const void *a, const void *b)
{
    const struct series *x = *(const struct series *const *)a;
    const struct series *y = *(const struct series *const *)b;
    for (int i = 0; i < sort_family->nlabels; i++) {
        int c = strcmp(x->lv[i], y->lv[i]);
        if (c)
            return c;
    }
    return 0;
}

static void render_series(struct hp_buf *out, const struct family *f, const struct series *s)
{
    if (f->type != M_HISTOGRAM) {
        append_sample(out, f, s, "", NULL, s->value);
        return;
    }
    uint64_t cum = 0;
    char le[40];
    for (size_t i = 0; i < NBUCKETS; i++) {
        cum += s->buckets[i];
        format_double(le, sizeof(le), def_buckets[i]);
        append_sample(out, f, s, "_bucket", le, (double)cum);
    }
    append_sample(out, f, s, "_bucket", "+Inf", (double)s->count);
    append_sample(out, f, s, "_sum", NULL, s->sum);
    append_sample(out, f, s, "_count", NULL, (double)s->count);
}

static void render_family(struct hp_buf *out, const struct family *f)
{
    static const char *const tnames[] = {"counter", "gauge", "histogram"};

    (void)hp_buf_printf(out, "# HELP %s %s\n# TYPE %s %s\n", f->name, f->help, f->name,
                        tnames[f->type]);
    if (f->nlabels == 0) {
        struct series zero = {0};
        const struct series *s = f->len ? &f->series[0] : &zero;
        if (f->type != M_HISTOGRAM)
            render_series(out, f, s);
        return;
    }
    if (f->len == 0)
        return;
    const struct series **order = hp_xmalloc(f->len * sizeof(*order));
    for (size_t i = 0; i < f->len; i++)
        order[i] = &f->series[i];
    sort_family = f;
    qsort(order, f->len, sizeof(*order), cmp_series);
    for (size_t i = 0; i < f->len; i++)
        render_series(out, f, order[i]);
    free(order);
}

static void render_one(struct hp_buf *out, const char *name, const char *help, const char *type,
                       double v)
{
    char num[40];
    format_double(num, sizeof(num), v);
    (void)hp_buf_printf(out, "# HELP %s %s\n# TYPE %s %s\n%s %s\n", name, help, name, type, name,
                        num);
}

static void render_process(struct hp_buf *out)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0) {
        double cpu = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
                     (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
        render_one(out, "process_cpu_seconds_total",
                   "Total user and system CPU time spent in seconds.", "counter", cpu);
    }
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
        render_one(out, "process_max_fds", "Maximum number of open file descriptors.", "gauge",
                   rl.rlim_cur == RLIM_INFINITY ? INFINITY : (double)rl.rlim_cur);
    long fds = count_open_fds();
    if (fds >= 0)
        render_one(out, "process_open_fds", "Number of open file descriptors.", "gauge",
                   (double)fds);
    unsigned long long size, resident;
    long page = sysconf(_SC_PAGESIZE);
    if (page > 0 && statm_pages(&size, &resident) == 0) {
        render_one(out, "process_resident_memory_bytes", "Resident memory size in bytes.", "gauge",
                   (double)resident * (double)page);
        render_one(out, "process_virtual_memory_bytes", "Virtual memory size in bytes.", "gauge",
                   (double)size * (double)page);
    }
    if (start_time == 0)
        start_time = compute_start_time();
    render_one(out, "process_start_time_seconds",
               "Start time of the process since unix epoch in seconds.", "gauge", start_time);
}

void hp_metrics_render(struct hp_buf *out)
{
    for (size_t i = 0; i < F_COUNT; i++)
        render_family(out, &families[i]);
    render_process(out);
}
