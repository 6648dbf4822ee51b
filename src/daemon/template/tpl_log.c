/* tpl_log.c: template build logs and their SSE readers; see tpl_log.h. */
#include "tpl_log.h"

#include <event2/event.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/http/sse.h"
#include "daemon/evlog/evlog_sse.h"
#include "daemon/store/store.h"
#include "tpl_internal.h"

/* Stop feeding a reader while this much is queued for it (it then falls behind and,
 * when the build outpaces it by TPL_LOG_CAP, gets "gone"). */
#define LOG_READER_HIGH (256u * 1024)
#define LOG_READERS_MAX 16
#define LOG_KEEPALIVE_S 15

struct log_reader {
    struct tpl_log *l;
    struct http_req *req;
    uint64_t next;   /* next event id to send */
    bool waiting;    /* a drain callback is registered */
    struct log_reader *nx;
};

struct tpl_log {
    struct tpl_registry *r;
    char op_id[STORE_ID_MAX];
    char name[64];           /* the template built */
    struct evlog_ring ring;
    bool done;
    struct log_reader *readers;
    unsigned nreaders;
    struct event *keepalive; /* while readers are attached: comments keep idle streams up */
    struct tpl_log *next;    /* registry list, newest first */
};

static void reader_free(struct log_reader *rd)
{
    struct tpl_log *l = rd->l;
    for (struct log_reader **pp = &l->readers; *pp; pp = &(*pp)->nx)
        if (*pp == rd) {
            *pp = rd->nx;
            l->nreaders--;
            break;
        }
    if (!l->readers && l->keepalive)
        event_del(l->keepalive);
    free(rd);
}

static void reader_end(struct log_reader *rd, const char *error_json)
{
    struct http_req *req = rd->req;
    if (error_json) /* id-less: not part of the replayable log */
        sse_send(req, -1, "error", error_json, strlen(error_json));
    reader_free(rd);
    http_stream_end(req);
}

static void reader_on_close(struct http_req *req, void *arg)
{
    (void)req;
    reader_free(arg);
}

static void reader_pump(struct log_reader *rd);

static void reader_drain(struct http_req *req, void *arg)
{
    struct log_reader *rd = arg;
    (void)req;
    rd->waiting = false;
    reader_pump(rd);
}

/* Sends what is kept until caught up or the client's queue is full; ends the stream
 * when the log is complete or the reader fell behind what is kept. */
static void reader_pump(struct log_reader *rd)
{
    switch (evlog_sse_pump(&rd->l->ring, rd->req, &rd->next, LOG_READER_HIGH)) {
    case EVLOG_PUMP_FULL:
        if (!rd->waiting) {
            rd->waiting = true;
            http_stream_on_drain(rd->req, reader_drain, rd);
        }
        return;
    case EVLOG_PUMP_GONE:
        reader_end(rd, "{\"code\":\"gone\",\"message\":\"the build wrote more than is kept while "
                       "this stream lagged; reconnect without Last-Event-ID for what is left\"}");
        return;
    case EVLOG_PUMP_NOMEM:
        reader_end(rd, "{\"code\":\"internal\",\"message\":\"out of memory\"}");
        return;
    case EVLOG_PUMP_DEAD:
        return; /* the stream is dying; on_close frees the reader */
    case EVLOG_PUMP_CAUGHT_UP:
        break;
    }
    if (rd->l->done)
        reader_end(rd, NULL);
}

static void pump_all(struct tpl_log *l)
{
    struct log_reader *nx;
    for (struct log_reader *rd = l->readers; rd; rd = nx) {
        nx = rd->nx;
        reader_pump(rd);
    }
}

static void on_keepalive(evutil_socket_t fd, short what, void *arg)
{
    struct tpl_log *l = arg;
    (void)fd;
    (void)what;
    for (struct log_reader *rd = l->readers; rd; rd = rd->nx)
        if (!rd->waiting)
            sse_keepalive(rd->req);
}

static void log_free(struct tpl_log *l)
{
    while (l->readers)
        reader_end(l->readers, NULL);
    if (l->keepalive)
        event_free(l->keepalive);
    evlog_ring_free(&l->ring);
    free(l);
}

struct tpl_log *tpl_log_new(struct spaced *sp, const char *op_id, const char *name)
{
    struct tpl_registry *r = sp->tpl;
    struct tpl_log *l = calloc(1, sizeof *l);
    if (!l || evlog_ring_init(&l->ring, TPL_LOG_CAP) != 0) {
        free(l);
        return NULL;
    }
    l->keepalive = event_new(sp->base, -1, EV_PERSIST, on_keepalive, l);
    l->r = r;
    snprintf(l->op_id, sizeof l->op_id, "%s", op_id);
    snprintf(l->name, sizeof l->name, "%s", name);
    l->next = r->logs;
    r->logs = l;
    /* Keep the newest TPL_LOGS_KEEP finished logs (and every build in flight). */
    unsigned finished = 0;
    for (struct tpl_log **pp = &r->logs; *pp;) {
        struct tpl_log *x = *pp;
        if (x->done && ++finished > TPL_LOGS_KEEP) {
            *pp = x->next;
            log_free(x);
            continue;
        }
        pp = &x->next;
    }
    return l;
}

/* Appends one event; nothing is held back for readers (see tpl_log.h). */
static void log_append(struct tpl_log *l, enum evlog_kind kind, const void *data, size_t len)
{
    uint64_t next = evlog_ring_next_id(&l->ring);
    evlog_ring_seal(&l->ring, next - 1);
    evlog_ring_append(&l->ring, kind, data, len, next);
    pump_all(l);
}

static void log_append_json(struct tpl_log *l, enum evlog_kind kind, json_t *j)
{
    char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
    if (text)
        log_append(l, kind, text, strlen(text));
    free(text);
    json_decref(j);
}

void tpl_log_output(struct tpl_log *l, enum evlog_kind kind, const void *data, size_t len)
{
    if (l && !l->done && len)
        log_append(l, kind, data, len);
}

void tpl_log_stage(struct tpl_log *l, const char *stage, int progress, int64_t started_ms)
{
    if (l && !l->done)
        log_append_json(l, EVLOG_STAGE,
                        json_pack("{s:s, s:i, s:I}", "stage", stage, "progress", progress,
                                  "elapsed_ms", (json_int_t)(spaced_now_ms() - started_ms)));
}

void tpl_log_end(struct tpl_log *l, const char *code, const char *message)
{
    if (!l || l->done)
        return;
    json_t *err = code ? json_pack("{s:s, s:s}", "code", code, "message", message ? message : "")
                       : json_null();
    log_append_json(l, EVLOG_END,
                    json_pack("{s:s, s:o}", "state", code ? "failed" : "succeeded", "error", err));
    l->done = true;
    pump_all(l); /* readers that are caught up end now; the others when they drain */
}

int tpl_log_attach(struct spaced *sp, const char *op_id, struct http_req *req, int64_t last,
                   struct spaced_err *err)
{
    struct tpl_log *l = sp->tpl->logs;
    while (l && strcmp(l->op_id, op_id) != 0)
        l = l->next;
    if (!l)
        return spaced_err_set(err, 404, "not_found",
                              "operation %s has no build output here (not a template build, or "
                              "its output is no longer kept: only the last %d builds' are, until "
                              "spaced restarts)", op_id, TPL_LOGS_KEEP);
    uint64_t from;
    if (evlog_sse_resume(&l->ring, last, "the build", &from, err) < 0)
        return -1;
    if (l->nreaders >= LOG_READERS_MAX)
        return spaced_err_set(err, 429, "too_many_requests",
                              "the build of operation %s already has %d readers", op_id,
                              LOG_READERS_MAX);
    struct log_reader *rd = calloc(1, sizeof *rd);
    if (!rd)
        return spaced_err_set(err, 500, "internal", "out of memory");
    if (sse_start(req) < 0) {
        free(rd);
        return spaced_err_set(err, 500, "internal", "cannot start the event stream");
    }
    rd->l = l;
    rd->req = req;
    rd->next = from;
    rd->nx = l->readers;
    l->readers = rd;
    l->nreaders++;
    if (l->keepalive && l->nreaders == 1) {
        struct timeval tv = {LOG_KEEPALIVE_S, 0};
        event_add(l->keepalive, &tv);
    }
    http_req_on_close(req, reader_on_close, rd);
    reader_pump(rd);
    return 0;
}

/* Bytes as a JSON string: invalid UTF-8 becomes U+FFFD, byte by byte. */
static json_t *text_of(const uint8_t *p, size_t n)
{
    json_t *j = json_stringn((const char *)p, n);
    if (j)
        return j;
    char *out = malloc(n * 3 + 1);
    size_t o = 0;
    for (size_t i = 0; out && i < n; i++) {
        if (p[i] < 0x80) {
            out[o++] = (char)p[i];
        } else {
            memcpy(out + o, "\xef\xbf\xbd", 3);
            o += 3;
        }
    }
    j = out ? json_stringn(out, o) : NULL;
    free(out);
    return j;
}

json_t *tpl_log_entries(struct spaced *sp, const char *name, size_t offset)
{
    struct tpl_log *l = sp->tpl->logs;
    while (l && strcmp(l->name, name) != 0)
        l = l->next; /* newest first */
    if (!l)
        return NULL;
    json_t *out = json_array();
    for (uint64_t id = evlog_ring_first_id(&l->ring) + offset; out && id < evlog_ring_next_id(&l->ring); id++) {
        const struct evlog_rec *rec = evlog_ring_get(&l->ring, id);
        json_t *text = NULL;
        if (!rec || rec->kind == EVLOG_END)
            continue;
        if (rec->kind == EVLOG_STAGE) {
            json_t *j = json_loadb((const char *)rec->data, rec->len, 0, NULL);
            text = json_incref(json_object_get(j, "stage"));
            json_decref(j);
        } else {
            size_t n = rec->len;
            while (n && rec->data[n - 1] == '\n')
                n--; /* one entry is one line's worth: no trailing newline */
            text = text_of(rec->data, n);
        }
        json_array_append_new(out, json_pack("{s:s, s:o?}", "kind", evlog_sse_name(rec->kind), "text", text));
    }
    return out;
}

void tpl_logs_free(struct tpl_registry *r)
{
    while (r->logs) {
        struct tpl_log *l = r->logs;
        r->logs = l->next;
        log_free(l);
    }
}
