/* common: the few definitions every module shares. Not a module: no state, no functions.
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

#endif
