/* workqueue: keyed, deduplicating work queue with per-key exponential backoff, on the loop.
 *
 * Loop thread only. Semantics of client-go's workqueue: add on a queued key is a no-op; add on a
 * key being processed marks it dirty and it runs once more after done; no key is processed twice
 * at once. Up to max_active keys are processed concurrently (processing is asynchronous: the
 * process callback starts work and the owner calls hp_workqueue_done later). The process
 * callback never runs inside hp_workqueue_add*: dispatch happens from the loop.
 * Delays (add_after, rate-limited retries) sit in a min-heap driven by one uv_timer.
 *
 * Lifetime: hp_workqueue_new, hp_workqueue_close.
 */
#ifndef HOSTPATH_WORKQUEUE_H
#define HOSTPATH_WORKQUEUE_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "hostpath/common.h"

struct hp_workqueue;

/* key is borrowed until hp_workqueue_done(q, key) is called for it. */
typedef void (*hp_workqueue_process_cb)(struct hp_workqueue *q, const char *key, void *data);

struct hp_workqueue_opts {
    uint64_t base_delay_ms; /* --retry-base-delay */
    uint64_t max_delay_ms;  /* --retry-max-delay */
    unsigned max_active;    /* keys processed concurrently; default 16 */
    /* The queue's metrics label (copied), or NULL for none: workqueue_adds_total{name} counts
     * hp_workqueue_add calls, workqueue_retries_total{name} the rate-limited adds, and
     * workqueue_depth{name} (keys ready to run) is sampled when /metrics is scraped. */
    const char *name;
    struct hp_clock clock; /* the time delays are measured in; default the loop's (uv_now) */
};

struct hp_workqueue *hp_workqueue_new(uv_loop_t *loop, const struct hp_workqueue_opts *opts,
                                      hp_workqueue_process_cb cb, void *data);

void hp_workqueue_add(struct hp_workqueue *q, const char *key);
void hp_workqueue_add_after(struct hp_workqueue *q, const char *key, uint64_t delay_ms);
/* add_after(key, backoff(failures(key))) and failures(key)++. */
void hp_workqueue_add_rate_limited(struct hp_workqueue *q, const char *key);
/* As add_rate_limited, but waits at least min_delay_ms (a server's Retry-After): add_after(key,
 * max(min_delay_ms, backoff(failures(key)))) and failures(key)++. */
void hp_workqueue_add_rate_limited_min(struct hp_workqueue *q, const char *key,
                                       uint64_t min_delay_ms);
/* Failures recorded for key since the last forget. */
unsigned hp_workqueue_num_requeues(const struct hp_workqueue *q, const char *key);
void hp_workqueue_forget(struct hp_workqueue *q, const char *key);
/* Processing of key finished (key must be the pointer passed to the process callback or an
 * equal string). */
void hp_workqueue_done(struct hp_workqueue *q, const char *key);

/* Keys waiting to be processed now (the workqueue_depth metric). A delayed key counts once its
 * time has come by the clock and the delay timer (or hp__workqueue_expire) has run. */
size_t hp_workqueue_len(const struct hp_workqueue *q);
/* Keys waiting on a delay. */
size_t hp_workqueue_delayed(const struct hp_workqueue *q);
/* Keys being processed. */
size_t hp_workqueue_active(const struct hp_workqueue *q);

/* base * 2^failures capped at max (no overflow for any failures). */
uint64_t hp_workqueue_backoff_ms(uint64_t base_ms, uint64_t max_ms, unsigned failures);

/* Stops the queue at once, as client-go's ShutDown: no process callback runs after this call
 * (not for a key that is ready, nor for a delayed key whose time comes), and adds are ignored.
 * Keys being processed may still be passed to done. An owner that stops while some of its work
 * still runs (a filesystem job that must finish) calls this first and hp_workqueue_close when
 * the work is over: its process callback is never asked to start anything meanwhile. */
void hp_workqueue_shut_down(struct hp_workqueue *q);
/* Ends the queue's lifetime, shutting it down first if the owner has not: keys being processed
 * may still be passed to done until close_cb runs. Frees the queue (and every key string) once
 * its handles are closed, on a later loop turn; close_cb (may be NULL) fires then. */
void hp_workqueue_close(struct hp_workqueue *q, hp_close_cb close_cb, void *data);

/* Consistency check for tests: 0 when every invariant holds. */
int hp_workqueue_validate(const struct hp_workqueue *q);

/* Internal, for tests with an injected clock: does now what the delay timer does when it fires
 * (keys due by the clock become ready; the timer is armed for the next), so a test advances its
 * clock and calls this instead of sleeping. No process callback runs inside it. */
void hp__workqueue_expire(struct hp_workqueue *q);

#endif
