/* e2b_rpc: Connect-RPC (JSON codec) calls: request decoding, unary replies, streamed
 * envelopes with keepalives and Connect-Timeout-Ms, and the error shapes of each. */
#include <event2/event.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "daemon/http/http.h"
#include "e2b_envelope.h"
#include "e2b_internal.h"

#define RPC_BODY_MAX (E2B_ENV_MAX_PAYLOAD + E2B_ENV_HDR)
#define KEEPALIVE_MAX_S 3600

void e2b_call_free(struct e2b_call *c)
{
    if (!c)
        return;
    if (c->keepalive)
        event_free(c->keepalive);
    if (c->deadline)
        event_free(c->deadline);
    json_decref(c->msg);
    free(c);
}

/* The client went away before the reply finished: let the method let go, then free. */
static void on_http_close(struct http_req *req, void *arg)
{
    (void)req;
    struct e2b_call *c = arg;
    c->req = NULL;
    if (c->cancel)
        c->cancel(c, false);
    e2b_call_free(c);
}

/* true if the Content-Type's media type is `want` (parameters ignored). */
static bool media_is(const char *ct, const char *want)
{
    size_t n = strlen(want);
    if (!ct || strncasecmp(ct, want, n) != 0)
        return false;
    return ct[n] == '\0' || ct[n] == ';' || ct[n] == ' ';
}

void e2b_call_reply(struct e2b_call *c, json_t *msg)
{
    if (!msg) {
        struct e2b_err err;
        e2b_err_set(&err, E2B_INTERNAL, "cannot encode the response");
        e2b_call_fail(c, &err);
        return;
    }
    http_reply_json(c->req, 200, msg);
    json_decref(msg);
    e2b_call_free(c);
}

/* Sends the head of a streaming response once. */
static int stream_head(struct e2b_call *c)
{
    if (c->head_sent)
        return 0;
    if (http_stream_start(c->req, 200, "application/connect+json", -1) < 0)
        return -1;
    c->head_sent = true;
    return 0;
}

int e2b_stream_send(struct e2b_call *c, json_t *msg)
{
    size_t n;
    uint8_t *buf = msg ? e2b_env_encode(msg, 0, &n) : NULL;
    json_decref(msg);
    if (!buf || stream_head(c) < 0) {
        free(buf);
        return -1;
    }
    int r = http_stream_write(c->req, buf, n);
    free(buf);
    return r;
}

void e2b_stream_finish(struct e2b_call *c, const struct e2b_err *err)
{
    size_t n;
    uint8_t *buf = e2b_env_encode_end(err, &n);
    if (stream_head(c) == 0 && buf)
        http_stream_write(c->req, buf, n);
    free(buf);
    http_stream_end(c->req);
    e2b_call_free(c);
}

void e2b_call_fail(struct e2b_call *c, const struct e2b_err *err)
{
    if (c->m && c->m->streaming) {
        e2b_stream_finish(c, err);
        return;
    }
    json_t *body = e2b_connect_error_json(err);
    http_reply_json(c->req, e2b_code_http(err->code), body);
    json_decref(body);
    e2b_call_free(c);
}

static void on_keepalive(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct e2b_call *c = arg;
    /* Only when the client keeps up: a keepalive never adds to a backlog. */
    if (c->keepalive_msg && http_stream_pending(c->req) == 0)
        e2b_stream_send(c, c->keepalive_msg());
}

static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct e2b_call *c = arg;
    if (c->cancel)
        c->cancel(c, true);
    struct e2b_err err;
    e2b_err_set(&err, E2B_DEADLINE_EXCEEDED, "the request deadline (Connect-Timeout-Ms) expired");
    e2b_stream_finish(c, &err);
}

/* Reads a positive integer header value; 0 if absent or invalid. */
static long header_num(struct http_req *req, const char *name, long max)
{
    const char *v = http_req_header(req, name);
    if (!v || !*v)
        return 0;
    char *end;
    long x = strtol(v, &end, 10);
    if (*end || x <= 0)
        return 0;
    return x > max ? max : x;
}

static void arm_timers(struct e2b_call *c)
{
    struct event_base *base = c->e->sp->base;
    long ka = header_num(c->req, "Keepalive-Ping-Interval", KEEPALIVE_MAX_S);
    if (ka > 0) {
        c->keepalive = event_new(base, -1, EV_PERSIST, on_keepalive, c);
        struct timeval tv = {ka, 0};
        if (c->keepalive)
            event_add(c->keepalive, &tv);
    }
    long ms = header_num(c->req, "Connect-Timeout-Ms", 30L * 24 * 3600 * 1000);
    if (ms > 0) {
        c->deadline = event_new(base, -1, 0, on_deadline, c);
        struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
        if (c->deadline)
            event_add(c->deadline, &tv);
    }
}

static void on_body(struct http_req *req, const char *data, size_t len, void *arg)
{
    (void)req;
    struct e2b_call *c = arg;
    struct e2b_err err = {0};
    if (c->m->streaming) {
        c->msg = e2b_env_parse_single((const uint8_t *)data, len, &err);
    } else {
        json_error_t jerr;
        c->msg = json_loadb(data, len, JSON_REJECT_DUPLICATES, &jerr);
        if (!c->msg)
            e2b_err_set(&err, E2B_INVALID_ARGUMENT, "request is not JSON: %s", jerr.text);
        else if (!json_is_object(c->msg))
            e2b_err_set(&err, E2B_INVALID_ARGUMENT, "request is not a JSON object");
    }
    if (err.code != E2B_OK) {
        e2b_call_fail(c, &err);
        return;
    }
    if (c->m->streaming)
        arm_timers(c);
    c->m->fn(c);
}

void e2b_rpc_begin(struct e2b_call *c)
{
    http_req_on_close(c->req, on_http_close, c);
    const char *ct = http_req_header(c->req, "Content-Type");
    const char *want = c->m->streaming ? "application/connect+json" : "application/json";
    if (strcmp(http_req_method(c->req), "POST") != 0 || !media_is(ct, want)) {
        /* Connect answers an unsupported codec with 415 and a unary-shaped error. */
        struct e2b_err err;
        e2b_err_set(&err, E2B_INVALID_ARGUMENT, "%s needs POST with Content-Type %s",
                    c->m->path, want);
        json_t *body = e2b_connect_error_json(&err);
        http_reply_json(c->req, strcmp(http_req_method(c->req), "POST") ? 405 : 415, body);
        json_decref(body);
        e2b_call_free(c);
        return;
    }
    if (http_req_read_body(c->req, RPC_BODY_MAX, on_body, c) < 0) {
        struct e2b_err err;
        e2b_err_set(&err, E2B_INTERNAL, "request body already consumed");
        e2b_call_fail(c, &err);
    }
}
