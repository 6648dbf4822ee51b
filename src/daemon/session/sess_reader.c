/* sess_reader.c: SSE readers of a session (attach, replay, backpressure) and stdin
 * uploads into its process; see sess.h. */
#include "daemon/session/sess_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/agentc/agentc.h"
#include "daemon/http/sse.h"
#include "daemon/evlog/evlog_sse.h"

/* Stop feeding a reader while this much of its output is still queued: a slow client
 * then holds its position in the ring, which in turn withholds agent credit. */
#define SESS_READER_HIGH (256u * 1024)
#define SESS_READERS_MAX 16
/* Pause a stdin upload while the agent has this much of it queued. */
#define SESS_STDIN_HIGH (1024u * 1024)

static void reader_free(struct sess_reader *rd)
{
    struct sess *s = rd->s;
    for (struct sess_reader **pp = &s->readers; *pp; pp = &(*pp)->nx)
        if (*pp == rd) {
            *pp = rd->nx;
            s->nreaders--;
            break;
        }
    free(rd);
}

static void reader_on_close(struct http_req *req, void *arg)
{
    struct sess_reader *rd = arg;
    struct sess *s = rd->s;
    reader_free(rd);
    sess_credit(s); /* its position no longer pins the ring */
}

static int reader_pump(struct sess_reader *rd);

static void reader_drain(struct http_req *req, void *arg)
{
    struct sess_reader *rd = arg;
    struct sess *s = rd->s;
    rd->waiting = false;
    reader_pump(rd);
    sess_credit(s);
}

/* Ends the stream with an error event (id-less: it is not part of the replayable log). */
static void reader_end_error(struct sess_reader *rd, const char *json)
{
    sse_send(rd->req, -1, "error", json, strlen(json));
    http_stream_end(rd->req);
    reader_free(rd);
}

/* Sends retained events until caught up or the client's queue is full. Returns 1 if the
 * reader ended (and was freed), else 0. */
static int reader_pump(struct sess_reader *rd)
{
    struct sess *s = rd->s;
    enum evlog_pump p = evlog_sse_pump(&s->ring, rd->req, &rd->next, SESS_READER_HIGH);
    if (rd->next > 1)
        evlog_ring_seal(&s->ring, rd->next - 1); /* what was sent never changes */
    switch (p) {
    case EVLOG_PUMP_FULL:
        if (!rd->waiting) {
            rd->waiting = true;
            http_stream_on_drain(rd->req, reader_drain, rd);
        }
        return 0;
    case EVLOG_PUMP_GONE:
    case EVLOG_PUMP_NOMEM:
        reader_end_error(rd, p == EVLOG_PUMP_NOMEM
                                 ? "{\"code\":\"internal\",\"message\":\"out of memory\"}"
                                 : "{\"code\":\"gone\",\"message\":\"events were dropped; "
                                   "reattach to see what is left\"}");
        return 1;
    case EVLOG_PUMP_DEAD:
        return 0; /* the stream is dying; on_close frees the reader */
    case EVLOG_PUMP_CAUGHT_UP:
        break;
    }
    if (sess_finished(s)) {
        http_stream_end(rd->req);
        reader_free(rd);
        return 1;
    }
    return 0;
}

void sess_readers_pump(struct sess *s)
{
    struct sess_reader *nx;
    for (struct sess_reader *rd = s->readers; rd; rd = nx) {
        nx = rd->nx;
        reader_pump(rd);
    }
}

void sess_readers_end(struct sess *s)
{
    while (s->readers) {
        struct http_req *req = s->readers->req;
        reader_free(s->readers);
        http_stream_end(req);
    }
}

void sess_readers_keepalive(struct sess *s)
{
    for (struct sess_reader *rd = s->readers; rd; rd = rd->nx)
        if (!rd->waiting)
            sse_keepalive(rd->req);
}

int sess_attach(struct sess *s, struct agentc *agent, struct http_req *req, int64_t last,
                struct spaced_err *err)
{
    uint64_t from;
    char what[96];
    snprintf(what, sizeof what, "session %s", s->id);
    if (evlog_sse_resume(&s->ring, last, what, &from, err) < 0)
        return -1;
    if (s->nreaders >= SESS_READERS_MAX)
        return spaced_err_set(err, 429, "too_many_requests",
                              "session %s already has %d attached clients", s->id,
                              SESS_READERS_MAX);
    /* The first attach starts the process; a detached one re-attaches when it can (a
     * paused sandbox can still replay what is buffered). */
    if (s->state == SESS_CREATED) {
        if (sess_start(s, agent, err) < 0)
            return -1;
    } else if (agent) {
        sess_start(s, agent, NULL);
    }
    struct sess_reader *rd = calloc(1, sizeof *rd);
    if (!rd)
        return spaced_err_set(err, 500, "internal", "out of memory");
    if (sse_start(req) < 0) {
        free(rd);
        return spaced_err_set(err, 500, "internal", "cannot start the event stream");
    }
    rd->s = s;
    rd->req = req;
    rd->next = from;
    rd->nx = s->readers;
    s->readers = rd;
    s->nreaders++;
    http_req_on_close(req, reader_on_close, rd);
    reader_pump(rd);
    sess_credit(s);
    return 0;
}

/* ---- stdin ------------------------------------------------------------------------------ */

static void stdin_finish(struct sess *s)
{
    s->stdin_req = NULL;
}

static void stdin_on_close(struct http_req *req, void *arg)
{
    stdin_finish(arg);
}

static void stdin_chunk(struct http_req *req, const char *data, size_t len, void *arg)
{
    struct sess *s = arg;
    if (!s->chan || agentc_write(s->chan, data, len) < 0) {
        sess_stdin_abort(s, "the process's stdin is closed");
        return;
    }
    s->stdin_bytes += len;
    if (agentc_queued(s->chan) > SESS_STDIN_HIGH)
        http_req_pause_body(req, true);
}

static void stdin_end(struct http_req *req, void *arg)
{
    struct sess *s = arg;
    json_t *o = json_pack("{s:I}", "bytes", (json_int_t)s->stdin_bytes);
    stdin_finish(s);
    http_reply_json(req, 200, o);
    json_decref(o);
}

void sess_stdin_abort(struct sess *s, const char *why)
{
    struct http_req *req = s->stdin_req;
    if (!req)
        return;
    stdin_finish(s);
    http_reply_error(req, 409, "stdin_closed", "stdin of session %s: %s", s->id, why);
}

void sess_stdin_drained(struct sess *s)
{
    if (s->stdin_req)
        http_req_pause_body(s->stdin_req, false);
}

int sess_stdin(struct sess *s, struct agentc *agent, struct http_req *req,
               struct spaced_err *err)
{
    if (!s->spec.stdin_open)
        return spaced_err_set(err, 409, "no_stdin",
                              "session %s was created without stdin (set \"stdin\": true)", s->id);
    if (s->stdin_closed)
        return spaced_err_set(err, 409, "stdin_closed", "stdin of session %s is already closed",
                              s->id);
    if (s->stdin_req)
        return spaced_err_set(err, 409, "stdin_busy",
                              "another stdin upload to session %s is in progress", s->id);
    if (sess_running(s, agent, err) < 0)
        return -1;
    s->stdin_req = req;
    s->stdin_bytes = 0;
    http_req_on_close(req, stdin_on_close, s);
    if (http_req_stream_body(req, stdin_chunk, stdin_end, s) < 0) {
        stdin_finish(s);
        return spaced_err_set(err, 500, "internal", "request body already claimed");
    }
    return 0;
}
