/* log: one structured line per event, on stderr.
 *
 * Every line is logfmt: `ts=<RFC3339 ms> level=<lvl> prog=<name> event=<event> <k=v ...>`.
 * The key/value tail is formatted by the caller (printf style); values that may hold
 * spaces or come from outside must go through log_quote() so one line stays one record
 * and a hostile string cannot forge fields or lines.
 *
 * Thread-safe (each line is written with a single write(2)). No allocation. */
#ifndef SPACE_LOG_H
#define SPACE_LOG_H

#include <stddef.h>

enum log_level { LOG_DEBUG = 0, LOG_INFO = 1, LOG_WARN = 2, LOG_ERROR = 3 };

/* Sets the program name printed as prog= and the minimum level written.
 * SPACE_LOG_LEVEL (debug|info|warn|error) in the environment overrides `min`. */
void log_init(const char *prog, enum log_level min);

/* Writes one line: event is a short identifier (`request`, `sandbox.state`), fmt the
 * key=value tail (may be NULL). Lines longer than 4 KiB are truncated, never split. */
void log_event(enum log_level lvl, const char *event, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Quotes `s` for a logfmt value into out[cap]: wraps in "", escapes \ " and control
 * bytes as \xNN, truncates long input with "...". Returns out. NULL prints as "". */
const char *log_quote(const char *s, char *out, size_t cap);

#define log_debug(ev, ...) log_event(LOG_DEBUG, ev, __VA_ARGS__)
#define log_info(ev, ...)  log_event(LOG_INFO, ev, __VA_ARGS__)
#define log_warn(ev, ...)  log_event(LOG_WARN, ev, __VA_ARGS__)
#define log_error(ev, ...) log_event(LOG_ERROR, ev, __VA_ARGS__)

#endif
