/* routes_ops.c: /v1/operations — get (with ?wait= long-poll), follow over SSE, list, and
 * a template build's output as it runs (logs, tpl_log.h). */
#include <event2/event.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/auth/auth.h"
#include "daemon/ops/op.h"
#include "daemon/http/sse.h"
#include "daemon/template/tpl_log.h"
#include "routes.h"

#define SSE_KEEPALIVE_S 15

/* Loads op `id` of the tenant: 0, or replies 404 and returns -1. */
static int load_op(struct spaced *sp, struct http_req *req, const char *tenant, const char *id,
                   struct store_op *op)
{
    if (!id || strlen(id) > 64 || store_op_get(sp->store, id, op) != 0) {
        routes_reply_error(sp, req, 404, "not_found", "operation %.64s not found", id ? id : "");
        return -1;
    }
    if (strcmp(op->tenant, tenant) != 0) {
        store_op_clear(op);
        routes_reply_error(sp, req, 404, "not_found", "operation %.64s not found", id);
        return -1;
    }
    return 0;
}

static bool op_is_terminal(const struct store_op *op)
{
    int st = op_state_parse(op->state);
    return st < 0 || op_state_terminal((enum op_state)st);
}

static void reply_op_row(struct http_req *req, const struct store_op *op)
{
    json_t *body = json_pack("{s:o}", "operation", op_to_json(op));
    http_reply_json(req, 200, body);
    json_decref(body);
}

/* A waiting request (long-poll or SSE): freed by follow_end, exactly once. */
struct follow {
    struct spaced *sp;
    struct http_req *req;
    struct op_watch *watch;
    struct event *timer;
    char op_id[STORE_ID_MAX];
    int64_t seq; /* SSE event id */
    bool sse;
};

static void follow_end(struct follow *f)
{
    op_unwatch(f->sp, f->watch);
    if (f->timer)
        event_free(f->timer);
    free(f);
}

static void follow_closed(struct http_req *req, void *arg)
{
    (void)req;
    follow_end(arg); /* client went away: no reply */
}

static void poll_changed(const struct store_op *op, void *arg)
{
    struct follow *f = arg;
    if (!op_is_terminal(op))
        return;
    reply_op_row(f->req, op);
    follow_end(f);
}

static void poll_timeout(evutil_socket_t fd, short what, void *arg)
{
    struct follow *f = arg;
    (void)fd;
    (void)what;
    struct store_op op;
    if (store_op_get(f->sp->store, f->op_id, &op) == 0) {
        reply_op_row(f->req, &op);
        store_op_clear(&op);
    } else {
        routes_reply_error(f->sp, f->req, 500, "internal", "operation vanished from the store");
    }
    follow_end(f);
}

static struct follow *follow_new(struct spaced *sp, struct http_req *req, const char *op_id,
                                 bool sse, op_watch_fn fn, event_callback_fn tick,
                                 const struct timeval *tv, short flags)
{
    struct follow *f = calloc(1, sizeof *f);
    if (!f)
        return NULL;
    f->sp = sp;
    f->req = req;
    f->sse = sse;
    snprintf(f->op_id, sizeof f->op_id, "%s", op_id);
    f->timer = event_new(sp->base, -1, flags, tick, f);
    f->watch = op_watch(sp, op_id, fn, f);
    if (!f->timer || !f->watch || event_add(f->timer, tv) != 0) {
        follow_end(f);
        return NULL;
    }
    http_req_on_close(req, follow_closed, f);
    return f;
}

static void h_get(struct http_req *req, void *arg)
{
    struct spaced *sp = arg;
    struct auth_principal who;
    if (!auth_require(sp, req, &who))
        return;
    struct store_op op;
    if (load_op(sp, req, who.tenant, router_param(req, "id"), &op) < 0)
        return;
    const char *w = http_req_query(req, "wait");
    long wait_s = 0;
    if (w) {
        char *end = NULL;
        wait_s = strtol(w, &end, 10);
        if (!*w || *end || wait_s < 0 || wait_s > OP_WAIT_MAX_S) {
            store_op_clear(&op);
            routes_reply_error(sp, req, 400, "invalid_request", "wait must be an integer in 0..%d",
                               OP_WAIT_MAX_S);
            return;
        }
    }
    if (wait_s == 0 || op_is_terminal(&op)) {
        reply_op_row(req, &op);
        store_op_clear(&op);
        return;
    }
    struct timeval tv = {wait_s, 0};
    if (!follow_new(sp, req, op.id, false, poll_changed, poll_timeout, &tv, 0))
        routes_reply_error(sp, req, 500, "internal", "cannot wait for the operation");
    store_op_clear(&op);
}

/* ---- SSE ----------------------------------------------------------------------------- */

static void sse_op(struct follow *f, const struct store_op *op)
{
    json_t *j = op_to_json(op);
    char *text = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    if (text)
        sse_send(f->req, ++f->seq, "operation", text, strlen(text));
    free(text);
}

static void sse_changed(const struct store_op *op, void *arg)
{
    struct follow *f = arg;
    sse_op(f, op);
    if (op_is_terminal(op)) {
        http_stream_end(f->req);
        follow_end(f);
    }
}

static void sse_tick(evutil_socket_t fd, short what, void *arg)
{
    struct follow *f = arg;
    (void)fd;
    (void)what;
    sse_keepalive(f->req);
}

static void h_events(struct http_req *req, void *arg)
{
    struct spaced *sp = arg;
    struct auth_principal who;
    if (!auth_require(sp, req, &who))
        return;
    struct store_op op;
    if (load_op(sp, req, who.tenant, router_param(req, "id"), &op) < 0)
        return;
    struct timeval tv = {SSE_KEEPALIVE_S, 0};
    bool terminal = op_is_terminal(&op);
    struct follow *f = terminal ? NULL
                                : follow_new(sp, req, op.id, true, sse_changed, sse_tick, &tv, EV_PERSIST);
    if (!terminal && !f) {
        store_op_clear(&op);
        routes_reply_error(sp, req, 500, "internal", "cannot follow the operation");
        return;
    }
    sse_start(req);
    if (terminal) {
        struct follow once = {.sp = sp, .req = req};
        sse_op(&once, &op);
        http_stream_end(req);
    } else {
        sse_op(f, &op);
    }
    store_op_clear(&op);
}

/* GET /v1/operations/{id}/logs: the build's stages and output over SSE (tpl_log.h). */
static void h_logs(struct http_req *req, void *arg)
{
    struct spaced *sp = arg;
    struct auth_principal who;
    if (!auth_require(sp, req, &who))
        return;
    struct store_op op;
    int64_t last;
    if (routes_last_event_id(sp, req, &last) < 0 ||
        load_op(sp, req, who.tenant, router_param(req, "id"), &op) < 0)
        return;
    struct spaced_err e;
    if (tpl_log_attach(sp, op.id, req, last, &e) < 0)
        routes_reply_err(sp, req, &e);
    store_op_clear(&op);
}

/* ---- list ---------------------------------------------------------------------------- */

static int list_one(const struct store_op *op, void *arg)
{
    json_array_append_new(arg, op_to_json(op));
    return 0;
}

static void h_list(struct http_req *req, void *arg)
{
    struct spaced *sp = arg;
    struct auth_principal who;
    if (!auth_require(sp, req, &who))
        return;
    const char *target = http_req_query(req, "sandbox_id");
    const char *lim = http_req_query(req, "limit");
    long limit = 100;
    if (lim) {
        char *end = NULL;
        limit = strtol(lim, &end, 10);
        if (!*lim || *end || limit < 1 || limit > 1000) {
            routes_reply_error(sp, req, 400, "invalid_request", "limit must be an integer in 1..1000");
            return;
        }
    }
    json_t *arr = json_array();
    if (store_op_list(sp->store, who.tenant, target, (unsigned)limit, list_one, arr) != 0) {
        json_decref(arr);
        routes_reply_error(sp, req, 500, "internal", "listing operations failed");
        return;
    }
    json_t *body = json_pack("{s:o}", "operations", arr);
    http_reply_json(req, 200, body);
    json_decref(body);
}

void routes_ops_register(struct router *r, struct spaced *sp)
{
    router_add(r, "GET", "/v1/operations", h_list, sp);
    router_add(r, "GET", "/v1/operations/{id}", h_get, sp);
    router_add(r, "GET", "/v1/operations/{id}/events", h_events, sp);
    router_add(r, "GET", "/v1/operations/{id}/logs", h_logs, sp);
}
