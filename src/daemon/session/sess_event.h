/* sess_event: how session events look on the wire (SSE `event:` names and `data:`).
 *
 *   event: start   data: {"pid":123}
 *   event: stdout  data: {"data":"<base64 of the bytes>"}
 *   event: stderr  data: {"data":"<base64 of the bytes>"}
 *   event: exit    data: {"code":0,"signal":null}      (code null when killed by signal)
 *   event: error   data: {"code":"not_found","message":"..."}  (could not start / lost)
 *
 * Output is base64 so any bytes (binary, invalid UTF-8, NUL) travel unchanged inside
 * one SSE data line; every event carries `id: N` from the session's ring. */
#ifndef SPACE_SESS_EVENT_H
#define SPACE_SESS_EVENT_H

#include "daemon/session/sess_ring.h"

/* "start", "stdout", "stderr", "exit", "error". */
const char *sess_event_name(enum sess_ev_kind kind);

/* Formats the data of record r into a malloc'd NUL-terminated string (*out, caller
 * frees). Returns its length, or -1 on allocation failure. */
long sess_event_data(const struct sess_rec *r, char **out);

/* Where a reader that has seen every event up to `last` (-1: none, start at the oldest
 * kept) continues: 0 with *from, or -1 with err: 410 events_gone when they are no longer
 * buffered, 400 when `last` is beyond the newest event of `what` ("session ss…"). */
struct spaced_err;
int sess_event_resume(const struct sess_ring *r, int64_t last, const char *what, uint64_t *from,
                      struct spaced_err *err);

/* Why sess_event_pump stopped. */
enum sess_pump {
    SESS_PUMP_CAUGHT_UP = 0, /* every event up to the ring's newest was sent */
    SESS_PUMP_FULL = 1,      /* more than `high` bytes are queued for the client */
    SESS_PUMP_GONE = 2,      /* *next was evicted */
    SESS_PUMP_NOMEM = 3,     /* an event could not be formatted */
    SESS_PUMP_DEAD = 4,      /* the stream is not active (its on_close follows) */
};

/* Sends the ring's events from id *next on to req as SSE (advancing *next past each
 * one sent), until caught up or the client's queue holds more than `high` bytes. The
 * SSE readers of sessions (sess_reader.c) and of template build logs (tpl_log.c). */
struct http_req;
enum sess_pump sess_event_pump(const struct sess_ring *r, struct http_req *req, uint64_t *next,
                               size_t high);

#endif
