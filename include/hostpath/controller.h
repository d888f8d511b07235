/* controller: reconcile claims into volumes and released volumes into removed directories.
 *
 * Loop thread only. Owns the three reflectors (claims, volumes, classes), their stores and the
 * work queue. Reconcile reads the store, never the event; every step is idempotent (the PV name
 * is pvc-<claim uid>). Decisions follow docs/design.md ("Decisions", "Data safety").
 *
 * Lifetime: hp_controller_new, hp_controller_start, hp_controller_close.
 */
#ifndef HOSTPATH_CONTROLLER_H
#define HOSTPATH_CONTROLLER_H

#include <uv.h>

#include "hostpath/common.h"

struct hp_config;
struct hp_kube_client;
struct hp_events;
struct hp_hostpath;
struct hp_controller;

/* Everything is borrowed and must outlive the controller. */
struct hp_controller *hp_controller_new(uv_loop_t *loop, const struct hp_config *cfg,
                                        struct hp_kube_client *client, struct hp_events *events,
                                        struct hp_hostpath *hostpath);
/* The volume roots of this node (an entry of --config): replaces --pv-dir, which is the only
 * root until then. Before start, paths not listed are dropped; after, they are retired (no new
 * volumes; existing ones are still deleted and swept) and new ones are read before use. e is
 * copied. Ignored once hp_controller_close was called. */
struct hp_node_entry;
void hp_controller_set_paths(struct hp_controller *c, const struct hp_node_entry *e);
/* The whole --config (borrowed: it must outlive the controller; main replaces its content only
 * together with a hp_controller_set_paths call): which roots each StorageClass may use
 * (storageClassConfigs) and which are shared (sharedFileSystemPath). NULL: every class uses
 * every root, none shared (--pv-dir). */
struct hp_nodemap;
void hp_controller_set_map(struct hp_controller *c, const struct hp_nodemap *m);
/* Before start: path is a root this node no longer uses whose journal still holds volumes (its
 * roots file said so, main.c): retired from the start, so that its volumes are released as
 * recorded. Copied. */
void hp_controller_add_retired(struct hp_controller *c, const char *path);
/* Before start: path's ownership journal was seen (a journals file of one of the roots lists
 * it, main.c): if it shows none, its disk is not mounted and it takes no new volume. Copied. */
void hp_controller_expect_journal(struct hp_controller *c, const char *path);
/* Whether path's journal was seen, as far as this process knows now (the journals files read at
 * start and since, and the journals it found itself): a --config reload must not make such a
 * path on its mount point when it is missing. */
int hp_controller_journal_seen(const struct hp_controller *c, const char *path);
/* The roots that would stay retired if e became the node's paths: those not listed in e that
 * hold records (or whose journal was never read). A NULL-terminated array of borrowed paths,
 * valid until the roots next change; caller frees the array (free). */
const char **hp_controller_kept_roots(const struct hp_controller *c, const struct hp_node_entry *e);

/* The namespace of the provisioner's namespaced objects (main.c: the leader election Lease's):
 * its CSIStorageCapacity objects (docs/design.md, "Capacity-aware scheduling"). Copied; before
 * hp_controller_start (else "default"). */
void hp_controller_set_namespace(struct hp_controller *c, const char *ns);
/* Starts the reflectors; reconciling begins once the first lists are in. A second call does
 * nothing (there is no stop: hp_controller_close ends it). */
void hp_controller_start(struct hp_controller *c);
/* Leader (or single instance) serves claims without a selected node. */
void hp_controller_set_leader(struct hp_controller *c, int leading);
/* Per-node replicas take turns (main: a Lease per node, with --node-name and --leader-elect):
 * once called, this process touches its node's disks and claims only while held is 1. */
void hp_controller_set_node_lease(struct hp_controller *c, int held);
/* The absolute volume root (--pv-dir). */
const char *hp_controller_root(const struct hp_controller *c);
/* 1 once every reflector finished its first list and the ownership journal is read. */
int hp_controller_synced(const struct hp_controller *c);
/* Ends the controller's lifetime: stops reflectors and the queue, cancels the API requests of
 * reconciles, waits for its filesystem requests to come back (hp_hostpath_close on the shared
 * runner cancels those not started); close_cb fires once everything is closed and freed, on a
 * later loop turn. */
void hp_controller_close(struct hp_controller *c, hp_close_cb close_cb, void *data);

#endif
