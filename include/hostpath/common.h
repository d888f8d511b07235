/* common: the few definitions every module shares. Not a module: no state, nothing to link.
 *
 * Any thread. CONTRIBUTING.md says how they are used: an object whose lifetime ends
 * asynchronously ends with hp_<module>_close(obj, cb, data), and cb(data) fires once, from the
 * loop, on a later loop turn than the _close call, after the object has been freed.
 */
#ifndef HOSTPATH_COMMON_H
#define HOSTPATH_COMMON_H

#include <stddef.h>
#include <stdint.h>

/* The struct of type `type` whose member `member` is at ptr. */
#define hp_container_of(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))
#define HP_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* The one close callback of every hp_<module>_close: data is what was passed to _close; the
 * object is already freed when it runs. */
typedef void (*hp_close_cb)(void *data);

/* An injected clock (in the options of watch, workqueue and leader): milliseconds on a monotonic
 * scale. now_ms NULL means the loop's own clock (uv_now); tests pass a fake one they advance by
 * hand, so that nothing sleeps. */
struct hp_clock {
    uint64_t (*now_ms)(void *data);
    void *data;
};

/* The clock's time; loop_now is uv_now(loop), used when no clock is injected. */
static inline uint64_t hp_clock_now(const struct hp_clock *c, uint64_t loop_now)
{
    return c->now_ms ? c->now_ms(c->data) : loop_now;
}

#endif
