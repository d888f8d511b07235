/* config: the command line (README.md "Command line"), with environment fallbacks, into one struct.
 *
 * Loop thread, start-up only. Strings in struct hp_config are owned by it (hp_config_free).
 *
 * Lifetime: struct hp_config is the caller's: hp_config_parse fills it, hp_config_free empties it.
 */
#ifndef HOSTPATH_CONFIG_H
#define HOSTPATH_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "hostpath/log.h"
#include "hostpath/objects.h" /* enum hp_reclaim */

struct hp_config {
    char *kubeconfig;       /* --kubeconfig [KUBECONFIG]; NULL = ~/.kube/config, else in-cluster */
    char *master;           /* --master; NULL = from kubeconfig */
    char *context;          /* --context; NULL = current-context */
    char *provisioner_name; /* --provisioner-name, default hostpath-provisioner.io */
    char *pv_dir;           /* --pv-dir [PV_DIR], default /var/lib/hostpath-provisioner */
    char *node_name;        /* --node-name [NODE_NAME]; NULL = none */
    char *identity;         /* --identity; default node name, else host name */
    enum hp_reclaim default_reclaim_policy; /* --default-reclaim-policy [PV_RECLAIM_POLICY] */
    int workers;                            /* --workers, default 4 */
    uint64_t resync_period_ms;              /* --resync-period, default 15m; 0 = off */
    uint64_t retry_base_delay_ms;           /* --retry-base-delay, default 5ms */
    uint64_t retry_max_delay_ms;            /* --retry-max-delay, default 5m */
    int failed_retry_threshold;             /* --failed-retry-threshold, default 15; 0 = never */
    int leader_elect;                       /* --leader-elect */
    char *leader_elect_namespace; /* [POD_NAMESPACE], else service account's, else default */
    uint64_t lease_duration_ms;   /* --leader-elect-lease-duration, default 15s */
    uint64_t renew_deadline_ms;   /* --leader-elect-renew-deadline, default 10s */
    uint64_t retry_period_ms;     /* --leader-elect-retry-period, default 2s */
    char *metrics_host;           /* from --metrics-address; "" = all interfaces */
    int metrics_port;             /* -1 = server off (--metrics-address "") */
    double kube_api_qps;          /* --kube-api-qps, default 50; 0 = unlimited */
    int kube_api_burst;           /* --kube-api-burst, default 100 */
    int kube_api_limits_set;      /* --kube-api-qps or --kube-api-burst was given */
    int add_finalizer;            /* --add-finalizer */
    int take_over;                /* --take-over: record local-path-provisioner's volumes */
    char *config_file;            /* --config [CONFIG_FILE]; NULL = --pv-dir only */
    uint64_t usage_scan_period_ms; /* --usage-scan-period, default 1m; 0 = off */
    int enable_capacity;           /* --enable-capacity, default true */
    uint64_t capacity_poll_interval_ms;   /* --capacity-poll-interval, default 1m; 0 = off */
    uint64_t capacity_update_interval_ms; /* --capacity-update-interval, default 5s */
    int verbosity;                /* --v */
    enum hp_log_format log_format; /* --log-format text|json */
    char *serviceaccount_dir; /* [HOSTPATH_SERVICEACCOUNT_DIR], default
                                 /var/run/secrets/kubernetes.io/serviceaccount (tests override) */
};

enum hp_config_result {
    HP_CONFIG_OK = 0,   /* run */
    HP_CONFIG_EXIT = 1, /* --help or --version printed; exit 0 */
    HP_CONFIG_ERROR = 2 /* bad command line; err holds one line; exit 2 */
};

/* Fills cfg from argv and the environment (envp-style lookups through getenv).
 * On HP_CONFIG_ERROR, err receives a one-line message naming the flag and the value. */
enum hp_config_result hp_config_parse(struct hp_config *cfg, int argc, char **argv, FILE *out,
                                      char *err, size_t errlen);
void hp_config_free(struct hp_config *cfg);
void hp_config_usage(FILE *out);

/* Parsers shared with other modules; 0 or -EINVAL. */
/* "15s", "5m", "1h30m", "250ms", "0"; -ERANGE for a well-formed duration that is negative or
 * above Go's limit (2562047h47m16.854775807s). */
int hp_parse_duration_ms(const char *s, uint64_t *ms);
/* ":8080", "127.0.0.1:9", "[::1]:9" */
int hp_parse_host_port(const char *s, char **host, int *port);

#endif
