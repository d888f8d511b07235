/* leader: leader election on a coordination.k8s.io/v1 Lease, with client-go's semantics.
 *
 * Loop thread only. Acquire when the lease is free or expired (renewTime + leaseDurationSeconds
 * in the past by our clock since we last saw it change), renew every retry period, step down if
 * not renewed within the renew deadline, optimistic concurrency through the Lease's
 * resourceVersion (409 -> re-read), release (holderIdentity cleared) on hp_leader_close.
 *
 * Lifetime: hp_leader_new, hp_leader_close.
 */
#ifndef HOSTPATH_LEADER_H
#define HOSTPATH_LEADER_H

#include <stdint.h>
#include <uv.h>

#include "hostpath/common.h"

struct hp_kube_client;
struct hp_leader;

/* Leadership of l changed: leading is 1 when this process now holds the lease, 0 when not. */
typedef void (*hp_leader_change_cb)(struct hp_leader *l, int leading, void *data);

struct hp_leader_opts {
    const char *namespace_;
    const char *name;     /* Lease name */
    const char *identity; /* holderIdentity */
    uint64_t lease_duration_ms;
    uint64_t renew_deadline_ms;
    uint64_t retry_period_ms;
    /* The clock expiry and the renew deadline are judged by (the retry period is a loop timer);
     * default the loop's (uv_now). */
    struct hp_clock clock;
};

/* The Lease name for a provisioner name (README.md --leader-elect: '/' -> '-'): lower-cased, '/' and '_' made
 * '-', a '.' next to a '-' or another '.' made '-', so that every valid provisioner name gives a
 * valid DNS subdomain; past 253 characters, a prefix and a hash of the whole name. Caller
 * frees. */
char *hp_leader_lease_name(const char *provisioner);
/* The Lease the replicas for one node take turns on: "<lease>-node-<node>", or, past 253
 * characters, a prefix of the lease name, "-node-" and a hash of the node name. Caller frees. */
char *hp_leader_node_lease_name(const char *lease, const char *node);

/* Starts trying to acquire from the loop (no callback before return); cb fires on every change
 * of leadership. client is borrowed and must outlive the leader; opts is copied. */
struct hp_leader *hp_leader_new(uv_loop_t *loop, struct hp_kube_client *client,
                                const struct hp_leader_opts *opts, hp_leader_change_cb cb,
                                void *data);
int hp_leader_is_leader(const struct hp_leader *l);
/* 1 once the first attempt finished (we know whether we lead or stand by). */
int hp_leader_state_known(const struct hp_leader *l);
/* Ends the leader's lifetime: releases the lease when held (best effort, bounded by a short
 * timeout), then frees; close_cb fires then, on a later loop turn. No leadership callback fires
 * after this call. */
void hp_leader_close(struct hp_leader *l, hp_close_cb close_cb, void *data);

#endif
