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

#endif
