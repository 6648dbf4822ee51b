/* http_req.c: request construction (target decoding), accessors, and the body claim
 * calls (read/stream/pause). Body bytes themselves are moved by http_conn.c. */
#include "http_internal.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>

#include "clock.h"

static const char *const known_methods[] = {"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH",
                                            "OPTIONS"};

static struct http_req *bad(struct http_req *r, struct http_parse_error *err, int status,
                            const char *code, const char *message)
{
    err->status = status;
    err->code = code;
    err->message = message;
    http_req_free(r);
    return NULL;
}

/* Splits the query string into decoded pairs. Returns 0, -1 on bad encoding, -2 OOM. */
static int parse_query(struct http_req *r, const char *q)
{
    size_t max = 1;
    for (const char *p = q; *p; p++)
        max += *p == '&';
    r->query = calloc(max, sizeof *r->query);
    if (!r->query)
        return -2;
    while (*q) {
        const char *amp = strchr(q, '&');
        size_t len = amp ? (size_t)(amp - q) : strlen(q);
        if (len) {
            const char *eq = memchr(q, '=', len);
            size_t nl = eq ? (size_t)(eq - q) : len;
            struct http_kv *kv = &r->query[r->nquery];
            kv->name = http_pct_decode(q, nl, true);
            kv->value = eq ? http_pct_decode(eq + 1, len - nl - 1, true) : strdup("");
            r->nquery++; /* counted even if half-built, so free() releases it */
            if (!kv->name || !kv->value)
                return -1;
        }
        q += len + (amp ? 1 : 0);
    }
    return 0;
}

struct http_req *http_req_new(struct http_conn *c, struct http_head *head,
                              struct http_parse_error *err)
{
    struct http_req *r = calloc(1, sizeof *r);
    if (!r) {
        http_head_free(head);
        err->status = 503;
        err->code = "unavailable";
        err->message = "out of memory";
        return NULL;
    }
    r->conn = c;
    r->head = *head;
    memset(head, 0, sizeof *head);
    r->stream_len = -1;
    r->start_us = clock_mono_us();
    r->extra_headers = evbuffer_new();
    if (!r->extra_headers)
        return bad(r, err, 503, "unavailable", "out of memory");
    bool known = false;
    for (size_t i = 0; i < sizeof known_methods / sizeof known_methods[0]; i++)
        known |= strcmp(r->head.method, known_methods[i]) == 0;
    if (!known)
        return bad(r, err, 501, "not_implemented", "method not implemented");
    const char *t = r->head.target;
    if (t[0] != '/')
        return bad(r, err, 400, "bad_request", "request target must be an absolute path");
    const char *q = strchr(t, '?');
    size_t plen = q ? (size_t)(q - t) : strlen(t);
    r->path = http_pct_decode(t, plen, false);
    if (!r->path)
        return bad(r, err, 400, "bad_request", "invalid percent-encoding in path");
    int rc = q ? parse_query(r, q + 1) : 0;
    if (rc == -2)
        return bad(r, err, 503, "unavailable", "out of memory");
    if (rc < 0)
        return bad(r, err, 400, "bad_request", "invalid percent-encoding in query");
    r->body_left = r->head.content_length > 0 ? (uint64_t)r->head.content_length : 0;
    r->body_done = !r->head.chunked && r->body_left == 0;
    return r;
}

static void free_kvs(struct http_kv *kv, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        free(kv[i].name);
        free(kv[i].value);
    }
    free(kv);
}

void http_req_free(struct http_req *r)
{
    if (!r)
        return;
    http_head_free(&r->head);
    free(r->path);
    free_kvs(r->query, r->nquery);
    free_kvs(r->params, r->nparams);
    if (r->body_buf)
        evbuffer_free(r->body_buf);
    if (r->extra_headers)
        evbuffer_free(r->extra_headers);
    free(r);
}

const char *http_req_method(const struct http_req *r)
{
    return r->head.method;
}

bool http_req_is_head(const struct http_req *r)
{
    return strcmp(r->head.method, "HEAD") == 0;
}

const char *http_req_path(const struct http_req *r)
{
    return r->path;
}

const char *http_req_target(const struct http_req *r)
{
    return r->head.target;
}

const char *http_req_query_n(const struct http_req *r, const char *name, unsigned idx)
{
    for (unsigned i = 0; i < r->nquery; i++)
        if (strcmp(r->query[i].name, name) == 0 && idx-- == 0)
            return r->query[i].value;
    return NULL;
}

const char *http_req_query(const struct http_req *r, const char *name)
{
    return http_req_query_n(r, name, 0);
}

const char *http_req_header_n(const struct http_req *r, const char *name, unsigned idx)
{
    for (unsigned i = 0; i < r->head.nfields; i++)
        if (strcasecmp(r->head.fields[i].name, name) == 0 && idx-- == 0)
            return r->head.fields[i].value;
    return NULL;
}

const char *http_req_header(const struct http_req *r, const char *name)
{
    return http_req_header_n(r, name, 0);
}

bool http_req_header_at(const struct http_req *r, unsigned i, const char **name,
                        const char **value)
{
    if (i >= r->head.nfields)
        return false;
    *name = r->head.fields[i].name;
    *value = r->head.fields[i].value;
    return true;
}

int64_t http_req_content_length(const struct http_req *r)
{
    return r->head.content_length;
}

bool http_req_chunked(const struct http_req *r)
{
    return r->head.chunked;
}

const char *http_req_peer(const struct http_req *r)
{
    return r->conn->peer;
}

int http_req_set_param(struct http_req *r, const char *name, const char *value)
{
    char *v = strdup(value);
    if (!v)
        return -1;
    for (unsigned i = 0; i < r->nparams; i++) {
        if (strcmp(r->params[i].name, name) == 0) {
            free(r->params[i].value);
            r->params[i].value = v;
            return 0;
        }
    }
    struct http_kv *kv = realloc(r->params, (r->nparams + 1) * sizeof *kv);
    char *n = strdup(name);
    if (kv)
        r->params = kv;
    if (!kv || !n) {
        free(v);
        free(n);
        return -1;
    }
    r->params[r->nparams].name = n;
    r->params[r->nparams].value = v;
    r->nparams++;
    return 0;
}

const char *http_req_param(const struct http_req *r, const char *name)
{
    for (unsigned i = 0; i < r->nparams; i++)
        if (strcmp(r->params[i].name, name) == 0)
            return r->params[i].value;
    return NULL;
}

void http_req_set_user(struct http_req *r, void *user)
{
    r->user = user;
}

void *http_req_user(const struct http_req *r)
{
    return r->user;
}

void http_req_set_route(struct http_req *r, http_handler_fn fn, void *arg)
{
    r->route_fn = fn;
    r->route_arg = arg;
}

http_handler_fn http_req_route(const struct http_req *r, void **arg)
{
    *arg = r->route_arg;
    return r->route_fn;
}

void http_req_on_close(struct http_req *r, http_close_fn cb, void *arg)
{
    if (r->app_done)
        return;
    r->on_close = cb;
    r->close_arg = arg;
}

/* Tells a client that sent Expect: 100-continue to go ahead with the body. */
static void send_continue(struct http_req *r)
{
    if (!r->head.expect_continue || r->continue_sent || r->body_done || r->resp != RESP_NONE ||
        r->head.version_minor == 0)
        return;
    r->continue_sent = true;
    evbuffer_add(http_conn_output(r->conn), "HTTP/1.1 100 Continue\r\n\r\n", 25);
}

int http_req_read_body(struct http_req *r, size_t max, http_body_fn done, void *arg)
{
    if (r->app_done || r->body_mode != BODY_UNCLAIMED || !done)
        return -1;
    r->body_max = max ? max : r->conn->srv->lim.max_body_default;
    r->body_buf = evbuffer_new();
    r->body_mode = BODY_BUFFERED;
    r->done_cb = done;
    r->body_arg = arg;
    if (!r->body_buf)
        r->body_error = 503;
    else if (!r->head.chunked && r->body_left > r->body_max)
        r->body_error = 413; /* refuse before reading a byte (and before 100 Continue) */
    else
        send_continue(r);
    http_conn_update_timeouts(r->conn);
    http_conn_schedule(r->conn);
    return 0;
}

int http_req_stream_body(struct http_req *r, http_chunk_fn chunk, http_end_fn end, void *arg)
{
    if (r->app_done || r->body_mode != BODY_UNCLAIMED || !chunk || !end)
        return -1;
    r->body_mode = BODY_STREAMED;
    r->chunk_cb = chunk;
    r->end_cb = end;
    r->body_arg = arg;
    send_continue(r);
    http_conn_update_timeouts(r->conn);
    http_conn_schedule(r->conn);
    return 0;
}

void http_req_pause_body(struct http_req *r, bool paused)
{
    if (r->app_done || r->paused == paused)
        return;
    r->paused = paused;
    http_conn_update_timeouts(r->conn);
    if (!paused)
        http_conn_schedule(r->conn);
}
