/* http_reply.c: response heads, buffered and streamed replies, JSON errors, the
 * per-response log line. */
#include "http_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include <event2/buffer.h>

#include "clock.h"
#include "log.h"

const char *http_status_reason(int status)
{
    switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 201: return "Created";
    case 202: return "Accepted";
    case 204: return "No Content";
    case 206: return "Partial Content";
    case 301: return "Moved Permanently";
    case 302: return "Found";
    case 304: return "Not Modified";
    case 307: return "Temporary Redirect";
    case 308: return "Permanent Redirect";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 406: return "Not Acceptable";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 410: return "Gone";
    case 411: return "Length Required";
    case 412: return "Precondition Failed";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 415: return "Unsupported Media Type";
    case 416: return "Range Not Satisfiable";
    case 417: return "Expectation Failed";
    case 422: return "Unprocessable Content";
    case 425: return "Too Early";
    case 428: return "Precondition Required";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 499: return "Client Closed Request";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 505: return "HTTP Version Not Supported";
    case 507: return "Insufficient Storage";
    default: return "Unknown";
    }
}

/* IMF-fixdate for the Date header, formatted at most once per second. */
static const char *server_date(struct http_server *s)
{
    time_t now = time(NULL);
    if (now != s->date_sec) {
        struct tm tm;
        gmtime_r(&now, &tm);
        strftime(s->date, sizeof s->date, "%a, %d %b %Y %H:%M:%S GMT", &tm);
        s->date_sec = now;
    }
    return s->date;
}

void http_log_response(struct http_conn *c, const struct http_req *r, int status, uint64_t bytes)
{
    char qm[48], qp[512];
    long long ms = r ? (long long)(clock_mono_us() - r->start_us) / 1000 : 0;
    log_info("request", "method=%s path=%s status=%d bytes=%llu ms=%lld peer=%s",
             log_quote(r ? r->head.method : "-", qm, sizeof qm),
             log_quote(r ? r->path : "-", qp, sizeof qp), status, (unsigned long long)bytes, ms,
             c->peer);
}

/* An unread body can be skipped cheaply (and the connection kept) only when its size
 * is known and small, and the client is not waiting for 100 Continue before sending. */
static bool body_drainable(const struct http_req *r)
{
    if (r->body_done)
        return true;
    if (r->head.chunked || r->body_left > HTTP_DISCARD_MAX)
        return false;
    return !(r->head.expect_continue && !r->continue_sent);
}

bool http_req_keep_alive(struct http_req *r)
{
    struct http_conn *c = r->conn;
    if (!r->head.keep_alive || (r->body_mode == BODY_UNCLAIMED && !body_drainable(r)))
        c->close_after = true;
    return !c->close_after && !c->closing;
}

void http_req_finish(struct http_req *r)
{
    struct http_conn *c = r->conn;
    r->app_done = true;
    r->drain_cb = NULL;
    r->resp = RESP_DONE;
    http_log_response(c, r, r->status, r->bytes_out);
    if (!r->body_done) {
        if (body_drainable(r))
            r->body_mode = BODY_DISCARD;
        else
            c->close_after = true;
    }
    http_conn_update_timeouts(c);
    http_conn_schedule(c);
}

/* Statuses whose responses never carry a body. */
static bool status_bodyless(int status)
{
    return status == 204 || status == 304;
}

/* Writes the status line and headers. length >= 0: Content-Length; -1: chunked;
 * -2: no framing header (bodyless status, or close-delimited). */
static void write_head(struct http_req *r, int status, const char *content_type, int64_t length)
{
    struct http_conn *c = r->conn;
    struct evbuffer *out = http_conn_output(c);
    bool keep = http_req_keep_alive(r);
    evbuffer_add_printf(out, "HTTP/1.1 %d %s\r\nDate: %s\r\n", status, http_status_reason(status),
                        server_date(c->srv));
    /* A content type can come from outside (a proxied file's type): never let it
     * break the head. */
    if (content_type && !strpbrk(content_type, "\r\n"))
        evbuffer_add_printf(out, "Content-Type: %s\r\n", content_type);
    evbuffer_add_buffer(out, r->extra_headers);
    if (length >= 0)
        evbuffer_add_printf(out, "Content-Length: %lld\r\n", (long long)length);
    else if (length == -1)
        evbuffer_add(out, "Transfer-Encoding: chunked\r\n", 28);
    if (!keep)
        evbuffer_add(out, "Connection: close\r\n\r\n", 21);
    else if (r->head.version_minor == 0)
        evbuffer_add(out, "Connection: keep-alive\r\n\r\n", 26);
    else
        evbuffer_add(out, "\r\n", 2);
    r->status = status;
}

static bool token_ok(const char *s)
{
    if (!*s)
        return false;
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        bool alnum = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
        if (!alnum && !strchr("!#$%&'*+-.^_`|~", ch))
            return false;
    }
    return true;
}

int http_reply_add_header(struct http_req *r, const char *name, const char *value)
{
    static const char *const reserved[] = {"Content-Length", "Transfer-Encoding", "Connection",
                                           "Date"};
    if (r->app_done || r->resp != RESP_NONE || !token_ok(name))
        return -1;
    for (size_t i = 0; i < sizeof reserved / sizeof reserved[0]; i++)
        if (strcasecmp(name, reserved[i]) == 0)
            return -1;
    for (const char *p = value; *p; p++)
        if (*p == '\r' || *p == '\n')
            return -1;
    return evbuffer_add_printf(r->extra_headers, "%s: %s\r\n", name, value) < 0 ? -1 : 0;
}

void http_reply(struct http_req *r, int status, const char *content_type, const void *data,
                size_t len)
{
    if (r->app_done || r->resp != RESP_NONE)
        return;
    if (status < 200 || status > 599)
        status = 500;
    if (status_bodyless(status)) {
        write_head(r, status, content_type, -2);
        len = 0;
    } else {
        write_head(r, status, content_type, (int64_t)len);
    }
    if (http_req_is_head(r))
        len = 0;
    if (len)
        evbuffer_add(http_conn_output(r->conn), data, len);
    r->bytes_out = len;
    http_req_finish(r);
}

/* {"error":{"code":..,"message":..}} as a malloc'd string. Messages may carry bytes
 * from outside that are not UTF-8; those are replaced so the JSON stays valid. */
static char *error_json(const char *code, const char *message)
{
    json_t *msg = json_string(message);
    if (!msg) {
        char *clean = strdup(message);
        if (!clean)
            return NULL;
        for (char *p = clean; *p; p++)
            if ((unsigned char)*p >= 0x80)
                *p = '?';
        msg = json_string(clean);
        free(clean);
    }
    json_t *j = json_pack("{s:{s:s,s:o}}", "error", "code", code ? code : "error", "message",
                          msg ? msg : json_string(""));
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    return s;
}

void http_reply_verror(struct http_req *r, int status, const char *code, const char *fmt,
                       va_list ap)
{
    char message[1024];
    vsnprintf(message, sizeof message, fmt, ap);
    char *body = error_json(code, message);
    if (body)
        http_reply(r, status, "application/json", body, strlen(body));
    else
        http_reply(r, 500, "application/json", "{}", 2);
    free(body);
}

void http_reply_error(struct http_req *r, int status, const char *code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    http_reply_verror(r, status, code, fmt, ap);
    va_end(ap);
}

void http_reply_json(struct http_req *r, int status, const json_t *json)
{
    char *body = json ? json_dumps(json, JSON_COMPACT) : NULL;
    if (!body) {
        http_reply_error(r, 500, "internal", "cannot serialise response");
        return;
    }
    http_reply(r, status, "application/json", body, strlen(body));
    free(body);
}

void http_conn_send_error(struct http_conn *c, struct http_req *r, int status, const char *code,
                          const char *message)
{
    struct evbuffer *out = http_conn_output(c);
    char *body = error_json(code, message);
    size_t len = body ? strlen(body) : 0;
    evbuffer_add_printf(out,
                        "HTTP/1.1 %d %s\r\nDate: %s\r\nContent-Type: application/json\r\n"
                        "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                        status, http_status_reason(status), server_date(c->srv), len);
    if (r && http_req_is_head(r))
        len = 0;
    if (len)
        evbuffer_add(out, body, len);
    free(body);
    if (r) {
        r->resp = RESP_DONE;
        r->status = status;
        r->bytes_out = len;
    }
    http_log_response(c, r, status, len);
    c->closing = true;
    http_conn_schedule(c);
}

int http_stream_start(struct http_req *r, int status, const char *content_type, int64_t length)
{
    if (r->app_done || r->resp != RESP_NONE)
        return -1;
    if (status < 200 || status > 599)
        status = 500;
    r->stream_len = length >= 0 ? length : -1;
    if (status_bodyless(status)) {
        write_head(r, status, content_type, -2);
        r->stream_len = 0;
    } else if (length >= 0) {
        write_head(r, status, content_type, length);
    } else if (r->head.version_minor >= 1) {
        r->stream_chunked = !http_req_is_head(r);
        write_head(r, status, content_type, -1);
    } else {
        /* HTTP/1.0 has no chunks: the end of the body is the end of the connection. */
        r->conn->close_after = true;
        write_head(r, status, content_type, -2);
    }
    r->resp = RESP_STREAM;
    return 0;
}

int http_stream_write(struct http_req *r, const void *data, size_t len)
{
    if (r->app_done || r->resp != RESP_STREAM)
        return -1;
    if (len == 0)
        return 0;
    if (r->stream_len >= 0 && r->bytes_out + len > (uint64_t)r->stream_len)
        return -1;
    r->bytes_out += len;
    if (http_req_is_head(r))
        return 0;
    struct evbuffer *out = http_conn_output(r->conn);
    if (r->stream_chunked)
        evbuffer_add_printf(out, "%zx\r\n", len);
    evbuffer_add(out, data, len);
    if (r->stream_chunked)
        evbuffer_add(out, "\r\n", 2);
    return 0;
}

size_t http_stream_pending(const struct http_req *r)
{
    if (r->app_done)
        return 0;
    return evbuffer_get_length(http_conn_output(r->conn));
}

void http_stream_cap_sndbuf(struct http_req *r, int bytes)
{
    int fd = http_conn_fd(r->conn);
    if (fd >= 0) /* best effort: without it the cut-off comes later, not never */
        (void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes);
}

void http_stream_on_drain(struct http_req *r, http_drain_fn cb, void *arg)
{
    if (r->app_done)
        return;
    r->drain_cb = cb;
    r->drain_arg = arg;
    http_conn_schedule(r->conn);
}

void http_stream_end(struct http_req *r)
{
    if (r->app_done || r->resp != RESP_STREAM)
        return;
    if (r->stream_chunked)
        evbuffer_add(http_conn_output(r->conn), "0\r\n\r\n", 5);
    /* A HEAD stream declares the length of a body it never sends. */
    if (r->stream_len >= 0 && r->bytes_out != (uint64_t)r->stream_len && !http_req_is_head(r))
        r->conn->close_after = true;
    http_req_finish(r);
}
