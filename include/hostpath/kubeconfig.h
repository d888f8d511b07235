/* kubeconfig: where the API server is and how to authenticate to it.
 *
 * Loop thread, start-up (and hp_kube_creds_token on token rotation). Reads a kubeconfig YAML file
 * with libyaml or the in-cluster service-account directory. Every string is owned by the struct.
 * Errors name the file and the field, never a secret value.
 *
 * Lifetime: struct hp_kube_creds is the caller's: hp_kube_creds_load fills it,
 * hp_kube_creds_free empties it.
 */
#ifndef HOSTPATH_KUBECONFIG_H
#define HOSTPATH_KUBECONFIG_H

#include <stddef.h>

struct hp_config;

struct hp_kube_creds {
    char *server;          /* https://host:port, no trailing slash */
    char *ca_file;         /* certificate-authority path, or NULL */
    char *ca_data;         /* PEM (decoded certificate-authority-data), or NULL */
    int insecure;          /* insecure-skip-tls-verify */
    char *token;           /* bearer token, or NULL (from token or read from token_file) */
    char *token_file;      /* tokenFile (re-read on rotation), or NULL */
    char *client_cert_file;
    char *client_cert_data; /* PEM */
    char *client_key_file;
    char *client_key_data; /* PEM */
    char *namespace_;      /* context namespace or service account namespace, or NULL */
    char *source;          /* what was loaded, for logs: a file path or "in-cluster" */
};

/* Resolves credentials the way README.md ("Install", "Out of cluster") says: --kubeconfig, else $KUBECONFIG (first file of a
 * colon list), else in-cluster when KUBERNETES_SERVICE_HOST is set, else ~/.kube/config; then
 * --context / current-context, and --master overrides the server.
 * Returns 0, or negative errno with a one-line message in err. */
int hp_kube_creds_load(const struct hp_config *cfg, struct hp_kube_creds *creds, char *err,
                       size_t errlen);

/* Parses kubeconfig YAML text (tests); path is only used in messages. */
int hp_kubeconfig_parse(const char *yaml, size_t len, const char *path, const char *context,
                        struct hp_kube_creds *creds, char *err, size_t errlen);

/* In-cluster: token, ca.crt and namespace from dir, server from KUBERNETES_SERVICE_HOST/PORT
 * (IPv6 literals bracketed). */
int hp_kube_creds_in_cluster(const char *dir, struct hp_kube_creds *creds, char *err,
                             size_t errlen);

/* Re-reads token_file when set; returns 1 if the token changed, 0 if not, negative errno
 * (hp_kube_creds_strerror says it for a person). A token_file that is no longer a regular file
 * (a FIFO) is refused at once, never waited on. */
int hp_kube_creds_reload_token(struct hp_kube_creds *creds);

/* The text of a hp_kube_creds_reload_token error: "file is empty", "not a regular file (a
 * FIFO)", else strerror's. Returns buf, or strerror's static string. */
const char *hp_kube_creds_strerror(int rc, char *buf, size_t len);

void hp_kube_creds_free(struct hp_kube_creds *creds);

#endif
