/* routes_events.c: the tenant's live event stream, for clients that show lists (the web
 * console) and would otherwise poll them.
 *
 *   GET /v1/events   text/event-stream
 *     event: sandbox    data: {"kind":"sandbox","id":"sb…","state":"running"}
 *     event: operation  data: {"kind":"operation","id":"op…","op":"create","state":
 *                             "succeeded","target":"sb…"}
 *     event: error      data: {"code":"too_slow","message":"…"}   (then the stream ends)
 *
 * An event says only that something changed and what it is now (the client reads the
 * rest from the API): a sandbox's state change (sbx_listen), every stored change of an
 * operation, from its enqueue as pending to its end, progress included (op_on_change).
 * Template builds are operations (op "template_build", target the template's name), so
 * they are how a template's state changes show. Only the caller's tenant's objects are
 * sent; ids, states and names, never anything secret.
 *
 * Not replayable: events carry no id, and what happens while a client is disconnected is
 * not kept; a client re-reads its lists after it reconnects. Bounded: at most
 * EVENTS_STREAMS_MAX streams per tenant (429 beyond), and a client that lets more than
 * EVENTS_QUEUE_MAX bytes queue up in spaced (beyond a kernel send buffer capped at
 * EVENTS_SNDBUF) gets the error event and its stream ends; a comment
 * every EVENTS_KEEPALIVE_S keeps idle proxies from closing the stream.
 *
 * A cluster control (cluster.h) runs no sandboxes and hears of no change its nodes make:
 * it answers 501, and clients poll. */
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/api/routes.h"
#include "daemon/auth/auth.h"
#include "daemon/cluster/cluster.h"
#include "daemon/http/sse.h"
#include "log.h"
#include "daemon/ops/op.h"
#include "daemon/sandbox/sbx.h"

#define EVENTS_STREAMS_MAX 8
#define EVENTS_QUEUE_MAX (64u * 1024)
#define EVENTS_SNDBUF (16 * 1024) /* the kernel's share of a stream's buffering */
#define EVENTS_KEEPALIVE_S 15

struct events_stream {
    struct events *ev;
    struct http_req *req;
    char tenant[STORE_ID_MAX];
    struct events_stream *next;
};

struct events {
    struct spaced *sp;
    struct events_stream *streams;
    struct event *keepalive; /* pending while any stream is open */
};

static void stream_free(struct events_stream *st)
{
    struct events *ev = st->ev;
    for (struct events_stream **pp = &ev->streams; *pp; pp = &(*pp)->next)
        if (*pp == st) {
            *pp = st->next;
            break;
        }
    if (!ev->streams && ev->keepalive)
        event_del(ev->keepalive);
    free(st);
}

static void stream_on_close(struct http_req *req, void *arg)
{
    (void)req;
    stream_free(arg);
}

/* Sends one event to st, or ends st with the error event when its client has let
 * EVENTS_QUEUE_MAX bytes queue up (it would otherwise hold memory without bound). */
static void stream_send(struct events_stream *st, const char *name, const char *data)
{
    struct http_req *req = st->req;
    if (http_stream_pending(req) > EVENTS_QUEUE_MAX) {
        static const char slow[] = "{\"code\":\"too_slow\",\"message\":\"this client reads its "
                                   "events too slowly: reconnect and read the lists again\"}";
        log_warn("events.slow", "tenant=%s pending=%zu", st->tenant, http_stream_pending(req));
        sse_send(req, -1, "error", slow, sizeof slow - 1);
        stream_free(st);
        http_stream_end(req);
        return;
    }
    sse_send(req, -1, name, data, strlen(data));
}

/* Sends data (a JSON object, consumed) as event `name` to every stream of tenant. */
static void fan_out(struct events *ev, const char *tenant, const char *name, json_t *data)
{
    char *text = data ? json_dumps(data, JSON_COMPACT) : NULL;
    json_decref(data);
    if (!text)
        return; /* out of memory: the clients' fallback polls catch up */
    struct events_stream *next;
    for (struct events_stream *st = ev->streams; st; st = next) {
        next = st->next;
        if (strcmp(st->tenant, tenant) == 0)
            stream_send(st, name, text);
    }
    free(text);
}

static void on_sbx(struct spaced *sp, struct sbx *s, enum sbx_state old, enum sbx_state now,
                   void *arg)
{
    struct events *ev = arg;
    (void)sp;
    (void)old;
    if (ev->streams)
        fan_out(ev, sbx_tenant(s), "sandbox",
                json_pack("{s:s, s:s, s:s}", "kind", "sandbox", "id", sbx_id(s), "state",
                          sbx_state_name(now)));
}

static void on_op(struct spaced *sp, const struct store_op *op, void *arg)
{
    struct events *ev = arg;
    (void)sp;
    if (ev->streams)
        fan_out(ev, op->tenant, "operation",
                json_pack("{s:s, s:s, s:s, s:s, s:s}", "kind", "operation", "id", op->id, "op",
                          op->kind, "state", op->state, "target", op->target));
}

static void on_keepalive(evutil_socket_t fd, short what, void *arg)
{
    struct events *ev = arg;
    (void)fd;
    (void)what;
    for (struct events_stream *st = ev->streams; st; st = st->next)
        sse_keepalive(st->req);
}

static void h_events(struct http_req *req, void *arg)
{
    struct events *ev = arg;
    struct spaced *sp = ev->sp;
    struct auth_principal who;
    if (!auth_require(sp, req, &who))
        return;
    if (!cluster_runs_sandboxes(sp)) {
        routes_reply_error(sp, req, 501, "not_implemented",
                           "a cluster control has no event stream (its nodes make the "
                           "changes): poll the lists");
        return;
    }
    unsigned n = 0;
    for (struct events_stream *st = ev->streams; st; st = st->next)
        n += strcmp(st->tenant, who.tenant) == 0;
    if (n >= EVENTS_STREAMS_MAX) {
        routes_reply_error(sp, req, 429, "too_many_requests",
                           "this tenant already has %d event streams open", EVENTS_STREAMS_MAX);
        return;
    }
    struct events_stream *st = calloc(1, sizeof *st);
    if (!st || !ev->keepalive) {
        free(st);
        routes_reply_error(sp, req, 500, "internal", "out of memory");
        return;
    }
    if (sse_start(req) < 0) {
        free(st);
        routes_reply_error(sp, req, 500, "internal", "cannot start the event stream");
        return;
    }
    /* Events are small: a kernel buffer of megabytes would let a client that stopped
     * reading hold that much before EVENTS_QUEUE_MAX could notice it. */
    http_stream_cap_sndbuf(req, EVENTS_SNDBUF);
    st->ev = ev;
    st->req = req;
    snprintf(st->tenant, sizeof st->tenant, "%s", who.tenant);
    st->next = ev->streams;
    if (!ev->streams) {
        struct timeval tv = {EVENTS_KEEPALIVE_S, 0};
        event_add(ev->keepalive, &tv);
    }
    ev->streams = st;
    http_req_on_close(req, stream_on_close, st);
    /* A first comment: the client knows at once that the stream is up. */
    sse_keepalive(req);
}

static void events_free(void *arg)
{
    struct events *ev = arg;
    while (ev->streams) {
        struct http_req *req = ev->streams->req;
        stream_free(ev->streams);
        http_stream_end(req);
    }
    if (ev->keepalive)
        event_free(ev->keepalive);
    free(ev);
}

void routes_events_register(struct router *r, struct spaced *sp)
{
    struct events *ev = calloc(1, sizeof *ev);
    if (!ev || router_on_shutdown(r, events_free, ev) < 0) {
        free(ev);
        log_error("events.init", "msg=%s", "out of memory: /v1/events not registered");
        return;
    }
    ev->sp = sp;
    ev->keepalive = event_new(sp->base, -1, EV_PERSIST, on_keepalive, ev);
    if (sbx_listen(sp, on_sbx, ev) < 0 || op_on_change(sp->ops, on_op, ev) < 0) {
        log_error("events.init", "msg=%s", "cannot follow sandboxes and operations: "
                                          "/v1/events not registered");
        return;
    }
    router_add(r, "GET", "/v1/events", h_events, ev);
}
