/* metrics: process-wide counters, gauges and histograms in Prometheus text format.
 *
 * Loop thread only (the threadpool reports through after-work callbacks). Names follow the
 * sig-storage provisioner library and client-go where one exists. Label values are copied.
 *
 * Lifetime: one registry per process: hp_metrics_init, hp_metrics_free.
 */
#ifndef HOSTPATH_METRICS_H
#define HOSTPATH_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "hostpath/buf.h"

void hp_metrics_init(void);
void hp_metrics_free(void);

/* controller_persistentvolumeclaim_provision_{total,failed_total,duration_seconds}{class,source} */
void hp_metrics_provision(const char *class_, const char *source, int ok, double seconds);
/* controller_persistentvolume_delete_{total,failed_total,duration_seconds}{class} */
void hp_metrics_delete(const char *class_, int ok, double seconds);
/* workqueue_adds_total, workqueue_retries_total {name}: name is the queue's (the controller's is
 * "hostpath"); the work queue counts its own (workqueue.h). workqueue_depth{name} is sampled at
 * scrape time by each queue's collector. */
void hp_metrics_workqueue_add(const char *queue);
void hp_metrics_workqueue_retry(const char *queue);
/* hostpath_watch_restarts_total, hostpath_watch_relists_total,
 * hostpath_watch_malformed_events_total {resource} */
void hp_metrics_watch_restart(const char *resource);
void hp_metrics_watch_relist(const char *resource);
void hp_metrics_watch_malformed(const char *resource);
/* hostpath_watch_undecodable_objects_total{resource}: objects skipped one by one */
void hp_metrics_watch_undecodable(const char *resource);
/* hostpath_watch_dropped_objects_total{resource}: objects an informer's keep filter did not keep
 * (informer.h) */
void hp_metrics_watch_dropped(const char *resource);
/* rest_client_requests_total{method,code}; code 0 is reported as "<error>". */
void hp_metrics_api_request(const char *method, long code);
/* leader_election_master_status{name} */
void hp_metrics_leader(const char *name, int leading);
/* hostpath_filesystem_errors_total{operation,errno} ("ENOSPC") */
void hp_metrics_fs_error(const char *operation, int err);
/* hostpath_events_total{type,reason} and hostpath_event_write_failures_total */
void hp_metrics_event(const char *type, const char *reason, int ok);

/* hostpath_path_{capacity,reserved,available}_bytes{path,node},
 * hostpath_path_on_root_filesystem{path} */
void hp_metrics_path(const char *path, const char *node, uint64_t capacity, uint64_t reserved,
                     uint64_t available, int on_rootfs);
/* hostpath_volumes_of_other_identity_total */
void hp_metrics_other_identity(void);
/* hostpath_orphan_directories{kind="recorded"|"unrecorded"} after an orphan sweep */
void hp_metrics_orphans(size_t recorded, size_t unrecorded);

/* A collector appends samples at scrape time, for values that live elsewhere: nothing is copied
 * into the registry. family NULL: fn appends whole families of its own (# HELP, # TYPE,
 * samples), after the registry's (the controller's kubelet_volume_stats_*). family named: fn
 * appends sample lines of that registry family ("workqueue_depth"), right after the family's
 * # HELP, # TYPE and stored samples, so several collectors share one family. Collectors run in
 * the order they were added. 0, or -ENOENT when family is not one of the registry's.
 * hp_metrics_remove_collector removes every collector with fn and data; hp_metrics_free
 * removes all. */
typedef void (*hp_metrics_collect_cb)(struct hp_buf *out, void *data);
int hp_metrics_add_collector(const char *family, hp_metrics_collect_cb fn, void *data);
void hp_metrics_remove_collector(hp_metrics_collect_cb fn, void *data);
/* A label value escaped as the text format wants (backslash, quote, newline). */
void hp_metrics_append_label_value(struct hp_buf *out, const char *v);

/* Appends the exposition (text format 0.0.4) including hostpath_build_info{version,commit} (1;
 * the commit is meson's `git rev-parse --short HEAD`, "unknown" outside a git checkout),
 * process_resident_memory_bytes, process_cpu_seconds_total, process_start_time_seconds. */
void hp_metrics_render(struct hp_buf *out);

#endif
