/* log: one line per message to stderr, klog-style text or JSON.
 *
 * Any thread: each line is formatted into a local buffer and written with a single write(2).
 * Messages are "module: what happened" followed by key=value pairs; never pass secrets. A value
 * with spaces is written key="value". In JSON the pairs that end a message, and claim=, pv=,
 * node= and err= anywhere in it, become string fields of the object (msg keeps the rest).
 *
 * Lifetime: process-wide; hp_log_init sets it up, nothing needs ending.
 */
#ifndef HOSTPATH_LOG_H
#define HOSTPATH_LOG_H

enum hp_log_level { HP_LOG_ERROR, HP_LOG_WARN, HP_LOG_INFO };
enum hp_log_format { HP_LOG_TEXT, HP_LOG_JSON };

/* verbosity: klog's --v; info messages with v > verbosity are dropped. */
void hp_log_init(int verbosity, enum hp_log_format format);
int hp_log_verbosity(void);
/* Redirect output (tests); fd < 0 restores stderr. */
void hp_log_set_fd(int fd);

void hp__log(enum hp_log_level level, int v, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

#define hp_log_error(...) hp__log(HP_LOG_ERROR, 0, __FILE__, __LINE__, __VA_ARGS__)
#define hp_log_warn(...) hp__log(HP_LOG_WARN, 0, __FILE__, __LINE__, __VA_ARGS__)
#define hp_log_info(...) hp__log(HP_LOG_INFO, 0, __FILE__, __LINE__, __VA_ARGS__)
/* Verbose info: printed when --v >= v. */
#define hp_log_v(v, ...)                                                                           \
    do {                                                                                           \
        if (hp_log_verbosity() >= (v))                                                             \
            hp__log(HP_LOG_INFO, (v), __FILE__, __LINE__, __VA_ARGS__);                            \
    } while (0)
#define hp_log_debug(...) hp_log_v(4, __VA_ARGS__)

#endif
