/* config: the command line (README.md "Command line") into struct hp_config.
 *
 * Loop thread, start-up only. Flags follow Kubernetes components (pflag): "--flag=value" and
 * "--flag value", booleans as "--flag" or "--flag=true|false", "-v"/"--v" for verbosity (a
 * shorthand also as "-v=3", "-v 3" and "-v3"). Values
 * come, in order of precedence, from the flag, then the environment variable listed for it, then
 * the built-in default. No static mutable state: parsing may run any number of times.
 *
 * One table (opts[]) says everything about an option: its names, where its value goes, the kind
 * of value (a parse_* function: string, bool, int in a range, duration, rate, reclaim policy,
 * log format, address, directory), its own rule when it has one (a check_* function, run on the
 * text first), its environment variable and its --help line. Rules between options come last
 * (validate). tests/unit/test_config.c checks the table against README.md's flag table.
 */
#include "hostpath/config.h"

#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hostpath/buf.h"
#include "hostpath/common.h"

#ifndef HP_VERSION
#define HP_VERSION "unknown"
#endif

#define DEFAULT_PROVISIONER "hostpath-provisioner.io"
#define DEFAULT_PV_DIR "/var/lib/hostpath-provisioner"
#define DEFAULT_SA_DIR "/var/run/secrets/kubernetes.io/serviceaccount"
#define DEFAULT_METRICS ":8080"
#define DURATION_HINT "(use e.g. 30s, 5m, 1h)"
/* client-go's leaderelection.JitterFactor: a retry may land this much later than its period. */
#define LEADER_JITTER_FACTOR 1.2

enum opt_group { G_API, G_PROVISION, G_RETRY, G_LEADER, G_OBSERVE, G_GENERIC, G_COUNT };

struct opt;

/* A kind of value: parses val and stores it in cfg (the field at o->off, unless the kind says
 * otherwise). label is how the user wrote the option ("--workers" or "PV_DIR"), for messages.
 * 0, or -EINVAL with one line in err. */
typedef int (*opt_parse_fn)(struct hp_config *cfg, const struct opt *o, const char *label,
                            const char *val, char *err, size_t errlen);
/* What one option accepts beyond its kind, checked on the text before it is parsed. 0, or
 * -EINVAL with one line in err. */
typedef int (*opt_check_fn)(const char *label, const char *val, char *err, size_t errlen);

struct opt {
    const char *name;   /* long name, without dashes */
    char shorthand;     /* single-dash alias, or 0 */
    opt_parse_fn parse; /* the kind of value; NULL: takes none, print instead */
    opt_check_fn check; /* this option's own rule, or NULL */
    size_t off;         /* field in struct hp_config (unused for help/version/address) */
    int min, max;       /* integers: the range */
    const char *env;    /* environment fallback, or NULL */
    const char *type;   /* value type shown by --help, or NULL for booleans */
    const char *def;    /* default shown by --help, or NULL */
    enum opt_group group;
    const char *help;
    void (*print)(FILE *out); /* --help, --version: what they print before exiting */
};

/* Kinds of values (parse_*), and the rules of single options (check_*); defined below. */
static int parse_string(struct hp_config *cfg, const struct opt *o, const char *label,
                        const char *val, char *err, size_t errlen);
static int parse_bool(struct hp_config *cfg, const struct opt *o, const char *label,
                      const char *val, char *err, size_t errlen);
static int parse_int(struct hp_config *cfg, const struct opt *o, const char *label, const char *val,
                     char *err, size_t errlen);
static int parse_duration(struct hp_config *cfg, const struct opt *o, const char *label,
                          const char *val, char *err, size_t errlen);
static int parse_rate(struct hp_config *cfg, const struct opt *o, const char *label,
                      const char *val, char *err, size_t errlen);
static int parse_reclaim(struct hp_config *cfg, const struct opt *o, const char *label,
                         const char *val, char *err, size_t errlen);
static int parse_log_format(struct hp_config *cfg, const struct opt *o, const char *label,
                            const char *val, char *err, size_t errlen);
static int parse_address(struct hp_config *cfg, const struct opt *o, const char *label,
                         const char *val, char *err, size_t errlen);
static int parse_directory(struct hp_config *cfg, const struct opt *o, const char *label,
                           const char *val, char *err, size_t errlen);
static int check_not_empty(const char *label, const char *val, char *err, size_t errlen);
static int check_namespace(const char *label, const char *val, char *err, size_t errlen);
static int check_url(const char *label, const char *val, char *err, size_t errlen);
static int check_provisioner(const char *label, const char *val, char *err, size_t errlen);
static int check_not_recycle(const char *label, const char *val, char *err, size_t errlen);
static void print_version(FILE *out);

#define OFF(f) offsetof(struct hp_config, f)

static const struct opt opts[] = {
    {"kubeconfig", 0, parse_string, NULL, OFF(kubeconfig), 0, 0, "KUBECONFIG", "string", NULL,
     G_API,
     "Path to a kubeconfig file (a ':'-separated list in KUBECONFIG: the first existing file). "
     "When unset: in-cluster service account credentials, else ~/.kube/config",
     NULL},
    {"master", 0, parse_string, check_url, OFF(master), 0, 0, NULL, "string", NULL, G_API,
     "URL of the Kubernetes API server; overrides the server in the kubeconfig", NULL},
    {"context", 0, parse_string, NULL, OFF(context), 0, 0, NULL, "string", NULL, G_API,
     "Kubeconfig context to use instead of current-context", NULL},
    {"kube-api-qps", 0, parse_rate, NULL, OFF(kube_api_qps), 0, 0, NULL, "float", "50", G_API,
     "Client-side limit of API write requests per second (0 = unlimited). Unless this or "
     "--kube-api-burst is given, the limit is lifted as soon as the API server shows it "
     "runs API Priority and Fairness (its own protection)",
     NULL},
    {"kube-api-burst", 0, parse_int, NULL, OFF(kube_api_burst), 0, INT_MAX, NULL, "int", "100",
     G_API, "Burst allowed above --kube-api-qps (at least 1 when the limit is on)", NULL},

    {"provisioner-name", 0, parse_string, check_provisioner, OFF(provisioner_name), 0, 0, NULL,
     "string", "\"" DEFAULT_PROVISIONER "\"", G_PROVISION,
     "StorageClass provisioner served by this instance (a qualified name, e.g. example.com/x)",
     NULL},
    {"pv-dir", 0, parse_directory, NULL, OFF(pv_dir), 0, 0, "PV_DIR", "string",
     "\"" DEFAULT_PV_DIR "\"", G_PROVISION,
     "Absolute path of the parent directory of all volume directories", NULL},
    {"node-name", 0, parse_string, NULL, OFF(node_name), 0, 0, "NODE_NAME", "string", NULL,
     G_PROVISION, "Name of this node; enables node affinity on volumes and per-node provisioning",
     NULL},
    {"identity", 0, parse_string, check_not_empty, OFF(identity), 0, 0, NULL, "string",
     "node name, else host name", G_PROVISION,
     "Identity stored on each volume; only the owner deletes a volume", NULL},
    {"default-reclaim-policy", 0, parse_reclaim, check_not_recycle, OFF(default_reclaim_policy), 0,
     0, "PV_RECLAIM_POLICY", "string", "Delete", G_PROVISION,
     "Reclaim policy when the StorageClass sets none: Delete or Retain (Recycle is refused)", NULL},
    {"config", 0, parse_string, NULL, OFF(config_file), 0, 0, "CONFIG_FILE", "string", NULL,
     G_PROVISION,
     "Node path map in local-path-provisioner's config.json shape (nodePathMap, with capacity "
     "budgets); replaces --pv-dir; re-read when it changes",
     NULL},
    {"usage-scan-period", 0, parse_duration, NULL, OFF(usage_scan_period_ms), 0, 0, NULL,
     "duration", "1m", G_PROVISION,
     "How often each bound volume's used bytes and inodes are measured (0 = never)", NULL},
    {"enable-capacity", 0, parse_bool, NULL, OFF(enable_capacity), 0, 0, NULL, NULL, "true",
     G_PROVISION,
     "Capacity-aware scheduling: the leader manages the CSIDriver object named after "
     "--provisioner-name, and each node's instance (--node-name) publishes a "
     "CSIStorageCapacity object per StorageClass (needs a name that is a DNS subdomain of at "
     "most 63 characters)",
     NULL},
    {"capacity-poll-interval", 0, parse_duration, NULL, OFF(capacity_poll_interval_ms), 0, 0,
     NULL, "duration", "1m", G_PROVISION,
     "How often each volume path's free bytes are read for the CSIStorageCapacity objects "
     "(0 = only as volumes are made and removed)",
     NULL},
    {"capacity-update-interval", 0, parse_duration, NULL, OFF(capacity_update_interval_ms), 0, 0,
     NULL, "duration", "5s", G_PROVISION,
     "Shortest time between two writes of one CSIStorageCapacity object, but for less room "
     "after volumes were placed, which is written at once (0 = no limit)",
     NULL},
    {"add-finalizer", 0, parse_bool, NULL, OFF(add_finalizer), 0, 0, NULL, NULL, "false",
     G_PROVISION, "Protect bound Delete volumes with a finalizer until their directory is removed",
     NULL},
    {"take-over", 0, parse_bool, NULL, OFF(take_over), 0, 0, NULL, NULL, "false", G_PROVISION,
     "Take over local-path-provisioner's volumes (PVs of --provisioner-name without this "
     "provisioner's annotations, under a configured path): record them, then release them as "
     "their reclaim policy says",
     NULL},
    {"workers", 0, parse_int, NULL, OFF(workers), 1, 1024, NULL, "int", "4", G_PROVISION,
     "Number of concurrent filesystem operations (1..1024)", NULL},

    {"resync-period", 0, parse_duration, NULL, OFF(resync_period_ms), 0, 0, NULL, "duration", "15m",
     G_RETRY, "Period of the full re-reconcile of every claim and volume (0 = off)", NULL},
    {"retry-base-delay", 0, parse_duration, NULL, OFF(retry_base_delay_ms), 0, 0, NULL, "duration",
     "5ms", G_RETRY, "First delay of the per-claim exponential backoff (> 0)", NULL},
    {"retry-max-delay", 0, parse_duration, NULL, OFF(retry_max_delay_ms), 0, 0, NULL, "duration",
     "5m", G_RETRY, "Cap of the per-claim exponential backoff (>= --retry-base-delay)", NULL},
    {"failed-retry-threshold", 0, parse_int, NULL, OFF(failed_retry_threshold), 0, INT_MAX, NULL,
     "int", "15", G_RETRY, "Give up on a claim after this many failed attempts (0 = never give up)",
     NULL},

    {"leader-elect", 0, parse_bool, NULL, OFF(leader_elect), 0, 0, NULL, NULL, "false", G_LEADER,
     "Elect a leader with a coordination.k8s.io Lease named after --provisioner-name; "
     "claims without a selected node are served by the leader only",
     NULL},
    {"leader-elect-namespace", 0, parse_string, check_namespace, OFF(leader_elect_namespace), 0, 0,
     "POD_NAMESPACE", "string", "the service account's namespace, else \"default\"", G_LEADER,
     "Namespace of the leader election Lease", NULL},
    {"leader-elect-lease-duration", 0, parse_duration, NULL, OFF(lease_duration_ms), 0, 0, NULL,
     "duration", "15s", G_LEADER,
     "How long non-leaders wait before taking over an unrenewed lease (> renew deadline)", NULL},
    {"leader-elect-renew-deadline", 0, parse_duration, NULL, OFF(renew_deadline_ms), 0, 0, NULL,
     "duration", "10s", G_LEADER,
     "How long the leader keeps retrying to renew before it steps down (> 1.2 x retry period)",
     NULL},
    {"leader-elect-retry-period", 0, parse_duration, NULL, OFF(retry_period_ms), 0, 0, NULL,
     "duration", "2s", G_LEADER, "Interval between attempts to acquire or renew the lease", NULL},

    {"metrics-address", 0, parse_address, NULL, 0, 0, 0, NULL, "string", "\"" DEFAULT_METRICS "\"",
     G_OBSERVE,
     "host:port of the /healthz, /readyz and /metrics server (\"\" = off, port 0 = any free)",
     NULL},
    {"v", 'v', parse_int, NULL, OFF(verbosity), 0, 10, NULL, "int", "0", G_OBSERVE,
     "Log verbosity (0..10)", NULL},
    {"log-format", 0, parse_log_format, NULL, OFF(log_format), 0, 0, NULL, "string", "\"text\"",
     G_OBSERVE, "Log line format: text or json", NULL},

    {"help", 'h', NULL, NULL, 0, 0, 0, NULL, NULL, NULL, G_GENERIC, "Print this help and exit",
     hp_config_usage},
    {"version", 0, NULL, NULL, 0, 0, 0, NULL, NULL, NULL, G_GENERIC, "Print the version and exit",
     print_version},
};

#define NOPTS HP_ARRAY_SIZE(opts)

static const char *const group_titles[G_COUNT] = {
    "Kubernetes API flags",  "Provisioning flags",  "Retry flags",
    "Leader election flags", "Observability flags", "Generic flags",
};

/* ---- shared parsers ---------------------------------------------------------------------- */

/* Go's time.ParseDuration limit: the largest int64 number of nanoseconds, as Go prints it. */
#define MAX_DURATION_NS ((uint64_t)INT64_MAX)
#define MAX_DURATION_TEXT "2562047h47m16.854775807s"

static uint64_t duration_unit(const char *u, size_t n)
{
    static const struct {
        const char *name;
        uint64_t ns;
    } units[] = {
        {"ns", 1ULL},
        {"us", 1000ULL},
        {"\xc2\xb5s", 1000ULL}, /* U+00B5 micro sign */
        {"\xce\xbcs", 1000ULL}, /* U+03BC Greek small letter mu */
        {"ms", 1000000ULL},
        {"s", 1000000000ULL},
        {"m", 60ULL * 1000000000ULL},
        {"h", 3600ULL * 1000000000ULL},
    };
    for (size_t i = 0; i < HP_ARRAY_SIZE(units); i++)
        if (strlen(units[i].name) == n && memcmp(units[i].name, u, n) == 0)
            return units[i].ns;
    return 0;
}

/* One "<number>[.<fraction>]<unit>" element of a Go duration, in nanoseconds. 0, -EINVAL when
 * it is not one, -ERANGE when it is one but above MAX_DURATION_NS (*sp then still moves past it,
 * so that the rest is checked too: a malformed duration is called malformed, not too large). */
static int duration_element(const char **sp, uint64_t *ns)
{
    const char *s = *sp;
    uint64_t v = 0, f = 0, unit;
    double scale = 1;
    bool digits = false, frac_overflow = false, over = false;
    const char *u;

    for (; *s >= '0' && *s <= '9'; s++) {
        if (v > (MAX_DURATION_NS - 9) / 10)
            over = true;
        else
            v = v * 10 + (uint64_t)(*s - '0');
        digits = true;
    }
    if (*s == '.') {
        for (s++; *s >= '0' && *s <= '9'; s++) {
            digits = true;
            if (frac_overflow || f > (MAX_DURATION_NS - 9) / 10) {
                frac_overflow = true; /* further digits are below any precision we keep */
                continue;
            }
            f = f * 10 + (uint64_t)(*s - '0');
            scale *= 10;
        }
    }
    if (!digits)
        return -EINVAL;
    for (u = s; *s && *s != '.' && !(*s >= '0' && *s <= '9'); s++)
        ;
    unit = duration_unit(u, (size_t)(s - u));
    if (unit == 0)
        return -EINVAL;
    *sp = s;
    if (over || v > MAX_DURATION_NS / unit)
        return -ERANGE;
    v *= unit;
    if (f > 0) {
        v += (uint64_t)((double)f * ((double)unit / scale));
        if (v > MAX_DURATION_NS)
            return -ERANGE;
    }
    *ns = v;
    return 0;
}

int hp_parse_duration_ms(const char *s, uint64_t *ms)
{
    uint64_t total = 0, ns = 0;
    bool negative = false, over = false;

    if (!s || !*s)
        return -EINVAL;
    if (*s == '+') {
        s++;
    } else if (*s == '-') {
        negative = true; /* a negative period or delay makes no sense here: out of range */
        s++;
    }
    if (strcmp(s, "0") == 0) {
        if (negative)
            return -ERANGE;
        *ms = 0;
        return 0;
    }
    if (!*s)
        return -EINVAL;
    while (*s) {
        int rc = duration_element(&s, &ns);
        if (rc == -EINVAL)
            return -EINVAL;
        if (rc == -ERANGE)
            over = true;
        else
            total += ns; /* both <= INT64_MAX: cannot wrap a uint64_t */
        if (total > MAX_DURATION_NS)
            over = true;
    }
    if (over || negative)
        return -ERANGE;
    /* Sub-millisecond remainders round up: "10us" is 1 ms, not an accidental 0 = "off". */
    *ms = total / 1000000 + (total % 1000000 != 0);
    return 0;
}

static int parse_port(const char *s, int *port)
{
    long v = 0;

    if (!*s || strlen(s) > 5)
        return -EINVAL;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return -EINVAL;
        v = v * 10 + (*s - '0');
    }
    if (v > 65535)
        return -EINVAL;
    *port = (int)v;
    return 0;
}

/* Go's net.SplitHostPort, with a numeric port 0..65535. */
int hp_parse_host_port(const char *s, char **host, int *port)
{
    const char *h, *colon;
    size_t hlen;
    int p;

    if (!s || !*s)
        return -EINVAL;
    if (s[0] == '[') {
        const char *end = strchr(s, ']');
        if (!end || end[1] != ':')
            return -EINVAL;
        h = s + 1;
        hlen = (size_t)(end - h);
        if (hlen == 0 || memchr(h, '[', hlen))
            return -EINVAL;
        colon = end + 1;
    } else {
        colon = strrchr(s, ':');
        if (!colon)
            return -EINVAL; /* missing port */
        h = s;
        hlen = (size_t)(colon - s);
        if (memchr(h, ':', hlen) || memchr(h, '[', hlen) || memchr(h, ']', hlen))
            return -EINVAL; /* "too many colons": IPv6 literals need brackets */
    }
    if (strchr(colon + 1, '[') || strchr(colon + 1, ']'))
        return -EINVAL;
    if (parse_port(colon + 1, &p) < 0)
        return -EINVAL;
    *host = hp_xstrndup(h, hlen);
    *port = p;
    return 0;
}

/* ---- value checks ------------------------------------------------------------------------ */

/* Integer in decimal: optional '-', digits only ("1e3", "0x10", " 5" are refused). */
static int parse_long(const char *s, long long *out)
{
    bool neg = false;
    long long v = 0;

    if (*s == '-') {
        neg = true;
        s++;
    }
    if (!*s)
        return -EINVAL;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return -EINVAL;
        if (v > (LLONG_MAX - 9) / 10)
            return -ERANGE;
        v = v * 10 + (*s - '0');
    }
    *out = neg ? -v : v;
    return 0;
}

static int bool_value(const char *s, int *out)
{
    /* strconv.ParseBool, which pflag uses. */
    static const char *const yes[] = {"1", "t", "T", "true", "TRUE", "True"};
    static const char *const no[] = {"0", "f", "F", "false", "FALSE", "False"};

    for (size_t i = 0; i < HP_ARRAY_SIZE(yes); i++) {
        if (strcmp(s, yes[i]) == 0) {
            *out = 1;
            return 0;
        }
        if (strcmp(s, no[i]) == 0) {
            *out = 0;
            return 0;
        }
    }
    return -EINVAL;
}

static bool dns_label_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
}

/* RFC 1123 label: [a-z0-9]([-a-z0-9]*[a-z0-9])?, at most 63 characters. */
static bool is_dns_label(const char *s, size_t n)
{
    if (n == 0 || n > 63 || s[0] == '-' || s[n - 1] == '-')
        return false;
    for (size_t i = 0; i < n; i++)
        if (!dns_label_char(s[i]))
            return false;
    return true;
}

/* RFC 1123 subdomain: dot-separated labels, at most 253 characters; lower case only. */
static bool is_dns_subdomain(const char *s, size_t n)
{
    size_t start = 0;

    if (n == 0 || n > 253)
        return false;
    for (size_t i = 0; i <= n; i++) {
        if (i == n || s[i] == '.') {
            if (!is_dns_label(s + start, i - start))
                return false;
            start = i + 1;
        }
    }
    return true;
}

/* Kubernetes' validateProvisioner: IsQualifiedName(strings.ToLower(name)). */
static bool is_provisioner_name(const char *s)
{
    size_t n = strlen(s);
    char *lower = hp_xstrndup(s, n);
    const char *name = lower, *slash;
    size_t nlen;
    bool ok = true;

    for (size_t i = 0; i < n; i++)
        lower[i] = (char)tolower((unsigned char)lower[i]);
    slash = strchr(lower, '/');
    if (slash) {
        if (strchr(slash + 1, '/') || !is_dns_subdomain(lower, (size_t)(slash - lower)))
            ok = false;
        name = slash + 1;
    }
    nlen = strlen(name);
    if (ok && (nlen == 0 || nlen > 63 || !isalnum((unsigned char)name[0]) ||
               !isalnum((unsigned char)name[nlen - 1])))
        ok = false;
    for (size_t i = 0; ok && i < nlen; i++) {
        unsigned char c = (unsigned char)name[i];
        if (!isalnum(c) && c != '-' && c != '_' && c != '.')
            ok = false;
    }
    free(lower);
    return ok;
}

/* Absolute, without "." / ".." components; repeated and trailing slashes removed; not "/". */
static int normalise_pv_dir(const char *s, char **out)
{
    size_t n = strlen(s), o = 0;
    char *p;

    if (n == 0 || s[0] != '/' || n >= PATH_MAX)
        return -EINVAL;
    p = hp_xmalloc(n + 1);
    for (size_t i = 0; i < n;) {
        size_t j;
        while (i < n && s[i] == '/')
            i++;
        if (i == n)
            break;
        for (j = i; j < n && s[j] != '/'; j++)
            ;
        if ((j - i == 1 && s[i] == '.') || (j - i == 2 && s[i] == '.' && s[i + 1] == '.')) {
            free(p);
            return -EINVAL;
        }
        p[o++] = '/';
        memcpy(p + o, s + i, j - i);
        o += j - i;
        i = j;
    }
    if (o == 0) {
        free(p);
        return -EINVAL;
    }
    p[o] = '\0';
    *out = p;
    return 0;
}

static bool is_http_url(const char *s)
{
    const char *host;

    if (strncasecmp(s, "https://", 8) == 0)
        host = s + 8;
    else if (strncasecmp(s, "http://", 7) == 0)
        host = s + 7;
    else
        return false;
    return *host && *host != '/';
}

/* ---- setting values ---------------------------------------------------------------------- */

static void set_string(char **field, const char *val)
{
    free(*field);
    *field = *val ? hp_xstrdup(val) : NULL;
}

/* The field of cfg that option o fills. */
#define FIELD(cfg, o, type) ((type *)((char *)(cfg) + (o)->off))

static int parse_string(struct hp_config *cfg, const struct opt *o, const char *label,
                        const char *val, char *err, size_t errlen)
{
    set_string(FIELD(cfg, o, char *), val);
    return 0;
}

static int parse_bool(struct hp_config *cfg, const struct opt *o, const char *label,
                      const char *val, char *err, size_t errlen)
{
    int b;
    if (bool_value(val, &b) < 0) {
        hp_seterr(err, errlen, "%s: invalid boolean \"%s\" (use true or false)", label, val);
        return -EINVAL;
    }
    *FIELD(cfg, o, int) = b;
    return 0;
}

/* An int within o->min..o->max. */
static int parse_int(struct hp_config *cfg, const struct opt *o, const char *label, const char *val,
                     char *err, size_t errlen)
{
    long long ll;
    int rc = parse_long(val, &ll);

    if (rc == -EINVAL) {
        hp_seterr(err, errlen, "%s: invalid integer \"%s\"", label, val);
        return -EINVAL;
    }
    if (rc < 0 || ll < o->min || ll > o->max) {
        hp_seterr(err, errlen, "%s: %s is out of range (%d..%d)", label, val, o->min, o->max);
        return -EINVAL;
    }
    *FIELD(cfg, o, int) = (int)ll;
    return 0;
}

/* A Go duration, stored in milliseconds (uint64_t). */
static int parse_duration(struct hp_config *cfg, const struct opt *o, const char *label,
                          const char *val, char *err, size_t errlen)
{
    uint64_t ms;
    int rc = hp_parse_duration_ms(val, &ms);

    if (rc == -ERANGE) {
        hp_seterr(err, errlen, "%s: %s is out of range (0.." MAX_DURATION_TEXT ")", label, val);
        return -EINVAL;
    }
    if (rc < 0) {
        hp_seterr(err, errlen, "%s: invalid duration \"%s\" " DURATION_HINT, label, val);
        return -EINVAL;
    }
    *FIELD(cfg, o, uint64_t) = ms;
    return 0;
}

/* A finite number >= 0 (double), in decimal. */
static int parse_rate(struct hp_config *cfg, const struct opt *o, const char *label,
                      const char *val, char *err, size_t errlen)
{
    char *end;
    double d;

    if (!(isdigit((unsigned char)val[0]) || val[0] == '.' || val[0] == '-')) {
        hp_seterr(err, errlen, "%s: invalid number \"%s\"", label, val);
        return -EINVAL;
    }
    errno = 0;
    d = strtod(val, &end);
    if (*end || !(isfinite(d) || errno == ERANGE) || (errno == ERANGE && fabs(d) != HUGE_VAL)) {
        hp_seterr(err, errlen, "%s: invalid number \"%s\"", label, val);
        return -EINVAL;
    }
    if (d < 0 || errno == ERANGE) {
        /* Negative, or beyond a double (1e999): the range is that of a float64, from 0. */
        hp_seterr(err, errlen, "%s: %s is out of range (0..%g)", label, val, DBL_MAX);
        return -EINVAL;
    }
    *FIELD(cfg, o, double) = d;
    return 0;
}

static int parse_reclaim(struct hp_config *cfg, const struct opt *o, const char *label,
                         const char *val, char *err, size_t errlen)
{
    enum hp_reclaim r = HP_RECLAIM_UNSET;
    if (hp_parse_reclaim(val, &r) < 0) {
        hp_seterr(err, errlen, "%s: invalid reclaim policy \"%s\" (use Delete or Retain)", label,
                  val);
        return -EINVAL;
    }
    *FIELD(cfg, o, enum hp_reclaim) = r;
    return 0;
}

/* text | json, into cfg->log_format. */
static int parse_log_format(struct hp_config *cfg, const struct opt *o, const char *label,
                            const char *val, char *err, size_t errlen)
{
    if (strcmp(val, "text") == 0)
        cfg->log_format = HP_LOG_TEXT;
    else if (strcmp(val, "json") == 0)
        cfg->log_format = HP_LOG_JSON;
    else {
        hp_seterr(err, errlen, "%s: invalid log format \"%s\" (use text or json)", label, val);
        return -EINVAL;
    }
    return 0;
}

/* host:port into cfg->metrics_host and metrics_port; "" turns the server off (port -1). */
static int parse_address(struct hp_config *cfg, const struct opt *o, const char *label,
                         const char *val, char *err, size_t errlen)
{
    char *host;
    int port;

    if (!*val) {
        free(cfg->metrics_host);
        cfg->metrics_host = hp_xstrdup("");
        cfg->metrics_port = -1;
        return 0;
    }
    if (hp_parse_host_port(val, &host, &port) < 0) {
        hp_seterr(err, errlen,
                  "%s: invalid address \"%s\" (use host:port, :port or [ipv6]:port with a port "
                  "0..65535, or \"\" to turn the server off)",
                  label, val);
        return -EINVAL;
    }
    free(cfg->metrics_host);
    cfg->metrics_host = host;
    cfg->metrics_port = port;
    return 0;
}

/* An absolute directory other than /, stored normalised (normalise_pv_dir). */
static int parse_directory(struct hp_config *cfg, const struct opt *o, const char *label,
                           const char *val, char *err, size_t errlen)
{
    char *p;
    if (normalise_pv_dir(val, &p) < 0) {
        hp_seterr(err, errlen,
                  "%s: invalid directory \"%s\" (must be an absolute path other than /, "
                  "without . or .. components)",
                  label, val);
        return -EINVAL;
    }
    free(*FIELD(cfg, o, char *));
    *FIELD(cfg, o, char *) = p;
    return 0;
}

static int check_not_empty(const char *label, const char *val, char *err, size_t errlen)
{
    if (*val)
        return 0;
    hp_seterr(err, errlen, "%s: must not be empty", label);
    return -EINVAL;
}

/* A namespace, or "" (none). */
static int check_namespace(const char *label, const char *val, char *err, size_t errlen)
{
    if (!*val || is_dns_label(val, strlen(val)))
        return 0;
    hp_seterr(err, errlen, "%s: invalid namespace \"%s\" (lower case letters, digits and '-')",
              label, val);
    return -EINVAL;
}

/* An http(s) URL, or "" (none). */
static int check_url(const char *label, const char *val, char *err, size_t errlen)
{
    if (!*val || is_http_url(val))
        return 0;
    hp_seterr(err, errlen, "%s: invalid URL \"%s\" (must start with https:// or http://)", label,
              val);
    return -EINVAL;
}

static int check_provisioner(const char *label, const char *val, char *err, size_t errlen)
{
    if (is_provisioner_name(val))
        return 0;
    hp_seterr(err, errlen,
              "%s: invalid provisioner name \"%s\" (a qualified name such as "
              "hostpath-provisioner.io or rancher.io/local-path: an optional DNS subdomain "
              "prefix and '/', then at most "
              "63 letters, digits, '-', '_' or '.', starting and ending with a letter or "
              "digit)",
              label, val);
    return -EINVAL;
}

/* Recycle would hand the data to kube-controller-manager's scrubber pod (docs/design.md, "Decisions"). */
static int check_not_recycle(const char *label, const char *val, char *err, size_t errlen)
{
    if (strcmp(val, "Recycle") != 0)
        return 0;
    hp_seterr(err, errlen,
              "%s: invalid reclaim policy \"%s\" (use Delete or Retain; Recycle is refused)", label,
              val);
    return -EINVAL;
}

static void print_version(FILE *out)
{
    fprintf(out, "hostpath-provisioner %s\n", HP_VERSION);
}

/* Stores val for option o: its own rule first, then its kind's parser. label is how the user
 * wrote it ("--workers" or "PV_DIR"). */
static int set_value(struct hp_config *cfg, const struct opt *o, const char *label, const char *val,
                     char *err, size_t errlen)
{
    if (o->check && o->check(label, val, err, errlen) < 0)
        return -EINVAL;
    return o->parse(cfg, o, label, val, err, errlen);
}

/* ---- usage ------------------------------------------------------------------------------- */

static int flag_column(const struct opt *o, char *buf, size_t len)
{
    if (o->shorthand)
        return snprintf(buf, len, "  -%c, --%s%s%s", o->shorthand, o->name, o->type ? " " : "",
                        o->type ? o->type : "");
    return snprintf(buf, len, "      --%s%s%s", o->name, o->type ? " " : "",
                    o->type ? o->type : "");
}

/* Prints text from column indent, wrapped before column USAGE_COLUMNS, continuation lines
 * indented to the same column. NBSP joins words that must stay on one line. */
#define USAGE_COLUMNS 100
#define NBSP '\x01'
static void print_wrapped(FILE *out, int indent, const char *text)
{
    int avail = USAGE_COLUMNS - indent, col = 0;

    if (avail < 30)
        avail = 30;
    while (*text) {
        int word = (int)strcspn(text, " ");
        if (col > 0 && col + 1 + word > avail) {
            fprintf(out, "\n%*s", indent, "");
            col = 0;
        } else if (col > 0) {
            fputc(' ', out);
            col++;
        }
        for (int i = 0; i < word; i++)
            fputc(text[i] == NBSP ? ' ' : text[i], out);
        col += word;
        text += word;
        while (*text == ' ')
            text++;
    }
    fputc('\n', out);
}

void hp_config_usage(FILE *out)
{
    char col[96];
    int width = 0;

    for (size_t i = 0; i < NOPTS; i++) {
        int n = flag_column(&opts[i], col, sizeof(col));
        if (n > width)
            width = n;
    }
    width += 3;

    fprintf(out, "hostpath-provisioner provisions Kubernetes PersistentVolumes as directories on "
                 "a node's disk.\n\nUsage:\n  hostpath-provisioner [flags]\n");
    for (int g = 0; g < G_COUNT; g++) {
        fprintf(out, "\n%s:\n\n", group_titles[g]);
        for (size_t i = 0; i < NOPTS; i++) {
            const struct opt *o = &opts[i];
            struct hp_buf text;
            if ((int)o->group != g)
                continue;
            hp_buf_init(&text, 0);
            (void)hp_buf_appends(&text, o->help); /* unlimited buffer: cannot fail */
            if (o->def)
                (void)hp_buf_printf(&text, " (default\x01%s)", o->def);
            if (o->env)
                (void)hp_buf_printf(&text, " [env\x01%s]", o->env);
            flag_column(o, col, sizeof(col));
            fprintf(out, "%-*s", width, col);
            print_wrapped(out, width, text.data);
            hp_buf_free(&text);
        }
    }
    fprintf(out, "\nEnvironment:\n\n");
    fprintf(out, "  %-*s", width - 2, "HOSTPATH_SERVICEACCOUNT_DIR");
    print_wrapped(out, width,
                  "Directory of the in-cluster token, ca.crt and namespace (default " DEFAULT_SA_DIR
                  ")");
    fprintf(out, "  %-*s", width - 2, "KUBERNETES_SERVICE_HOST");
    print_wrapped(out, width,
                  "In-cluster API server host; KUBERNETES_SERVICE_PORT its port "
                  "(default 443)");
    fprintf(out, "\n");
    print_wrapped(out, 0,
                  "A flag takes precedence over its environment variable. Durations use Go "
                  "syntax: 250ms, 30s, 5m, 1h30m.");
}

/* ---- parsing ----------------------------------------------------------------------------- */

static const struct opt *find_long(const char *name, size_t n)
{
    for (size_t i = 0; i < NOPTS; i++)
        if (strlen(opts[i].name) == n && memcmp(opts[i].name, name, n) == 0)
            return &opts[i];
    return NULL;
}

static const struct opt *find_short(char c)
{
    for (size_t i = 0; i < NOPTS; i++)
        if (opts[i].shorthand && opts[i].shorthand == c)
            return &opts[i];
    return NULL;
}

static void set_defaults(struct hp_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->provisioner_name = hp_xstrdup(DEFAULT_PROVISIONER);
    cfg->pv_dir = hp_xstrdup(DEFAULT_PV_DIR);
    cfg->default_reclaim_policy = HP_RECLAIM_DELETE;
    cfg->workers = 4;
    cfg->resync_period_ms = 15 * 60 * 1000;
    cfg->usage_scan_period_ms = 60 * 1000;
    cfg->enable_capacity = 1;
    cfg->capacity_poll_interval_ms = 60 * 1000;
    cfg->capacity_update_interval_ms = 5 * 1000;
    cfg->retry_base_delay_ms = 5;
    cfg->retry_max_delay_ms = 5 * 60 * 1000;
    cfg->failed_retry_threshold = 15;
    cfg->lease_duration_ms = 15000;
    cfg->renew_deadline_ms = 10000;
    cfg->retry_period_ms = 2000;
    cfg->metrics_host = hp_xstrdup("");
    cfg->metrics_port = 8080;
    cfg->kube_api_qps = 50;
    cfg->kube_api_burst = 100;
    cfg->log_format = HP_LOG_TEXT;
    cfg->serviceaccount_dir = hp_xstrdup(DEFAULT_SA_DIR);
}

/* Parses argv into cfg; marks flags given in seen[]. Returns an hp_config_result. */
static enum hp_config_result parse_args(struct hp_config *cfg, int argc, char **argv, bool *seen,
                                        FILE *out, char *err, size_t errlen)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *name, *eq, *val = NULL, *attached = NULL;
        const struct opt *o;
        char label[64];
        size_t nlen;

        if (strcmp(a, "--") == 0) {
            if (i + 1 < argc) {
                hp_seterr(err, errlen, "unexpected argument \"%s\" (this command takes only flags)",
                          argv[i + 1]);
                return HP_CONFIG_ERROR;
            }
            break;
        }
        if (a[0] != '-' || a[1] == '\0') {
            hp_seterr(err, errlen, "unexpected argument \"%s\" (this command takes only flags)", a);
            return HP_CONFIG_ERROR;
        }
        name = a[1] == '-' ? a + 2 : a + 1;
        eq = strchr(name, '=');
        nlen = eq ? (size_t)(eq - name) : strlen(name);
        if (a[1] == '-') {
            o = find_long(name, nlen);
        } else if (nlen == 1) {
            o = find_short(name[0]);
        } else {
            /* "-v3": a shorthand that takes a value may have it attached, as pflag reads it
             * (then "-v3=4" is v with "3=4"); "-kubeconfig" stays an unknown flag. */
            o = find_short(name[0]);
            if (o && o->parse && o->parse != parse_bool) {
                attached = name + 1;
                eq = NULL;
                nlen = 1;
            } else {
                o = NULL;
            }
        }
        if (!o || nlen == 0) {
            hp_seterr(err, errlen, "unknown flag: %.*s (see --help)", (int)(name - a + nlen), a);
            return HP_CONFIG_ERROR;
        }
        snprintf(label, sizeof(label), "%.*s", (int)(name - a + nlen), a);

        if (!o->parse) { /* --help, --version */
            if (eq) {
                hp_seterr(err, errlen, "%s: takes no value", label);
                return HP_CONFIG_ERROR;
            }
            o->print(out);
            return HP_CONFIG_EXIT;
        }
        if (attached)
            val = attached;
        else if (eq)
            val = eq + 1;
        else if (o->parse == parse_bool)
            val = "true"; /* "--flag false" is a positional "false", as with pflag */
        else if (i + 1 < argc)
            val = argv[++i];
        else {
            hp_seterr(err, errlen, "%s: flag needs an argument", label);
            return HP_CONFIG_ERROR;
        }
        if (set_value(cfg, o, label, val, err, errlen) < 0)
            return HP_CONFIG_ERROR;
        seen[o - opts] = true;
    }
    return HP_CONFIG_OK;
}

static int apply_env(struct hp_config *cfg, const bool *seen, char *err, size_t errlen)
{
    const char *v;

    for (size_t i = 0; i < NOPTS; i++) {
        if (seen[i] || !opts[i].env)
            continue;
        v = getenv(opts[i].env);
        if (v && *v && set_value(cfg, &opts[i], opts[i].env, v, err, errlen) < 0)
            return -EINVAL;
    }
    v = getenv("HOSTPATH_SERVICEACCOUNT_DIR");
    if (v && *v)
        set_string(&cfg->serviceaccount_dir, v);
    return 0;
}

static int fill_identity(struct hp_config *cfg, char *err, size_t errlen)
{
    char host[256] = "";

    if (cfg->identity)
        return 0;
    if (cfg->node_name) {
        cfg->identity = hp_xstrdup(cfg->node_name);
        return 0;
    }
    if (gethostname(host, sizeof(host)) < 0 || !host[0]) {
        hp_seterr(err, errlen, "--identity: cannot use the host name (%s); set --identity",
                  host[0] ? strerror(errno) : "empty");
        return -EINVAL;
    }
    host[sizeof(host) - 1] = '\0';
    cfg->identity = hp_xstrdup(host);
    return 0;
}

/* Relationships between flags, checked once every value is known. */
static int validate(const struct hp_config *cfg, char *err, size_t errlen)
{
    if (cfg->retry_base_delay_ms == 0) {
        hp_seterr(err, errlen, "--retry-base-delay: must be greater than 0");
        return -EINVAL;
    }
    if (cfg->retry_base_delay_ms > cfg->retry_max_delay_ms) {
        hp_seterr(err, errlen,
                  "--retry-base-delay (%llums) must not exceed --retry-max-delay (%llums)",
                  (unsigned long long)cfg->retry_base_delay_ms,
                  (unsigned long long)cfg->retry_max_delay_ms);
        return -EINVAL;
    }
    if (cfg->kube_api_qps > 0 && cfg->kube_api_burst < 1) {
        hp_seterr(err, errlen,
                  "--kube-api-burst: must be at least 1 when --kube-api-qps is above 0");
        return -EINVAL;
    }
    /* client-go's NewLeaderElector checks; like component-base, only when election is on. */
    if (!cfg->leader_elect)
        return 0;
    if (cfg->lease_duration_ms == 0 || cfg->renew_deadline_ms == 0 || cfg->retry_period_ms == 0) {
        hp_seterr(err, errlen,
                  "--leader-elect-lease-duration, --leader-elect-renew-deadline and "
                  "--leader-elect-retry-period must be greater than 0");
        return -EINVAL;
    }
    if (cfg->lease_duration_ms <= cfg->renew_deadline_ms) {
        hp_seterr(err, errlen,
                  "--leader-elect-lease-duration (%llums) must be greater than "
                  "--leader-elect-renew-deadline (%llums)",
                  (unsigned long long)cfg->lease_duration_ms,
                  (unsigned long long)cfg->renew_deadline_ms);
        return -EINVAL;
    }
    if ((double)cfg->renew_deadline_ms <= LEADER_JITTER_FACTOR * (double)cfg->retry_period_ms) {
        hp_seterr(err, errlen,
                  "--leader-elect-renew-deadline (%llums) must be greater than "
                  "--leader-elect-retry-period (%llums) x 1.2 (its jitter)",
                  (unsigned long long)cfg->renew_deadline_ms,
                  (unsigned long long)cfg->retry_period_ms);
        return -EINVAL;
    }
    return 0;
}

enum hp_config_result hp_config_parse(struct hp_config *cfg, int argc, char **argv, FILE *out,
                                      char *err, size_t errlen)
{
    bool seen[NOPTS] = {false};
    enum hp_config_result res;

    if (err && errlen)
        err[0] = '\0';
    set_defaults(cfg);
    res = parse_args(cfg, argc, argv, seen, out, err, errlen);
    if (res == HP_CONFIG_OK) {
        /* Whether the client-side write limit was asked for: without, API Priority and
         * Fairness on the server takes over when it answers (kube_client.h). */
        for (size_t i = 0; i < NOPTS; i++)
            if (seen[i] && (strcmp(opts[i].name, "kube-api-qps") == 0 ||
                            strcmp(opts[i].name, "kube-api-burst") == 0))
                cfg->kube_api_limits_set = 1;
        if (apply_env(cfg, seen, err, errlen) < 0 || fill_identity(cfg, err, errlen) < 0 ||
            validate(cfg, err, errlen) < 0)
            res = HP_CONFIG_ERROR;
    }
    if (res != HP_CONFIG_OK)
        hp_config_free(cfg);
    return res;
}

void hp_config_free(struct hp_config *cfg)
{
    if (!cfg)
        return;
    free(cfg->kubeconfig);
    free(cfg->master);
    free(cfg->context);
    free(cfg->provisioner_name);
    free(cfg->pv_dir);
    free(cfg->node_name);
    free(cfg->identity);
    free(cfg->leader_elect_namespace);
    free(cfg->metrics_host);
    free(cfg->serviceaccount_dir);
    free(cfg->config_file);
    memset(cfg, 0, sizeof(*cfg));
}
