/* tpl_log: the live output of template builds, as a replayable event stream.
 *
 * A build (tpl_build.c) appends its stages ("booting the build VM", "step 2/5: run: make",
 * "flattening the disk image") and every byte its run steps write to stdout and stderr,
 * while they run, to the log of its operation. Clients follow it over SSE
 * (GET /v1/operations/{id}/logs, docs/api.md) with the command sessions' event format
 * (evlog_sse.h): `stage`, `stdout`, `stderr` ({"data": base64}) and a last `end`
 * ({"state", "error"}), each with a consecutive id; `Last-Event-ID: N` resumes after N.
 *
 * Bounded: each log keeps at most TPL_LOG_CAP bytes of events. Unlike a session, a build
 * is never slowed down for its readers: the oldest events are dropped to make room, and a
 * reader that falls behind what is kept gets an `error` event ("gone") and its stream
 * ends (a reconnect without Last-Event-ID starts at the oldest event kept). The logs of
 * the last TPL_LOGS_KEEP finished builds stay readable; none survive a restart of spaced.
 *
 * Not thread-safe; everything runs on the event loop. Prefix tpl_log_. */
#ifndef SPACE_TPL_LOG_H
#define SPACE_TPL_LOG_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "daemon/evlog/evlog_ring.h"
#include "daemon/spaced.h"

#define TPL_LOG_CAP (256u * 1024)
#define TPL_LOGS_KEEP 16

struct tpl_log;
struct tpl_registry;
struct http_req;

/* A new, empty log for operation op_id (the build of template `name`), or NULL when out
 * of memory (the build then runs without one). Drops the oldest finished logs beyond
 * TPL_LOGS_KEEP. */
struct tpl_log *tpl_log_new(struct spaced *sp, const char *op_id, const char *name);

/* Output of a run step (kind EVLOG_STDOUT or EVLOG_STDERR). NULL log: no-op. */
void tpl_log_output(struct tpl_log *l, enum evlog_kind kind, const void *data, size_t len);

/* A stage begins: `stage` with the operation's progress and the time since started_ms. */
void tpl_log_stage(struct tpl_log *l, const char *stage, int progress, int64_t started_ms);

/* The build ended (code NULL: succeeded): appends `end`; attached readers get the rest
 * and their streams end. The log stays readable until dropped by newer builds. */
void tpl_log_end(struct tpl_log *l, const char *code, const char *message);

/* Streams operation op_id's log to req as SSE, from after `last` (-1: from the oldest
 * event kept). Returns 0 (the request is the log's now), or -1 with err: 404 no log
 * for it, 410 events after `last` are gone, 400 `last` is beyond the newest, 429 too
 * many readers. */
int tpl_log_attach(struct spaced *sp, const char *op_id, struct http_req *req, int64_t last,
                   struct spaced_err *err);

/* The events of the newest build of template `name` from the offset-th one kept on, as
 * [{"kind": "stage"|"stdout"|"stderr", "text"}] (output bytes as text, invalid UTF-8
 * replaced; `end` left out), for polling clients (E2B's build status). NULL when no
 * build of that name is kept. */
json_t *tpl_log_entries(struct spaced *sp, const char *name, size_t offset);

/* Ends every reader and frees every log (spaced is stopping). */
void tpl_logs_free(struct tpl_registry *r);

#endif
