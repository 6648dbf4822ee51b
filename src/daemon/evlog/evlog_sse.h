/* evlog_sse: how evlog_ring events look on the wire (SSE `event:` names and `data:`).
 *
 *   event: start   data: {"pid":123}
 *   event: stdout  data: {"data":"<base64 of the bytes>"}
 *   event: stderr  data: {"data":"<base64 of the bytes>"}
 *   event: exit    data: {"code":0,"signal":null}      (code null when killed by signal)
 *   event: error   data: {"code":"not_found","message":"..."}  (could not start / lost)
 *
 * Output is base64 so any bytes (binary, invalid UTF-8, NUL) travel unchanged inside
 * one SSE data line; every event carries `id: N` from the session's ring. */
#ifndef SPACE_EVLOG_SSE_H
#define SPACE_EVLOG_SSE_H

#include "daemon/evlog/evlog_ring.h"

/* "start", "stdout", "stderr", "exit", "error". */
const char *evlog_sse_name(enum evlog_kind kind);

/* Formats the data of record r into a malloc'd NUL-terminated string (*out, caller
 * frees). Returns its length, or -1 on allocation failure. */
long evlog_sse_data(const struct evlog_rec *r, char **out);

/* Where a reader that has seen every event up to `last` (-1: none, start at the oldest
 * kept) continues: 0 with *from, or -1 with err: 410 events_gone when they are no longer
 * buffered, 400 when `last` is beyond the newest event of `what` ("session ss…"). */
struct spaced_err;
int evlog_sse_resume(const struct evlog_ring *r, int64_t last, const char *what, uint64_t *from,
                      struct spaced_err *err);

/* Why evlog_sse_pump stopped. */
enum evlog_pump {
    EVLOG_PUMP_CAUGHT_UP = 0, /* every event up to the ring's newest was sent */
    EVLOG_PUMP_FULL = 1,      /* more than `high` bytes are queued for the client */
    EVLOG_PUMP_GONE = 2,      /* *next was evicted */
    EVLOG_PUMP_NOMEM = 3,     /* an event could not be formatted */
    EVLOG_PUMP_DEAD = 4,      /* the stream is not active (its on_close follows) */
};

/* Sends the ring's events from id *next on to req as SSE (advancing *next past each
 * one sent), until caught up or the client's queue holds more than `high` bytes. The
 * SSE readers of sessions (sess_reader.c) and of template build logs (tpl_log.c). */
struct http_req;
enum evlog_pump evlog_sse_pump(const struct evlog_ring *r, struct http_req *req, uint64_t *next,
                               size_t high);

#endif
