/* http_conn.c: listeners, connections, and the per-connection state machine that reads
 * heads, pumps request bodies to the application and closes connections cleanly.
 *
 * A connection is in one of three phases:
 *   waiting for a head   (req == NULL; head_timer = keep-alive idle, then head deadline)
 *   serving a request    (req != NULL; body pumped on demand; reply written by the app)
 *   closing              (flush output, shutdown(SHUT_WR), drop input until the peer
 *                         closes or the linger deadline passes, so the peer reads our
 *                         last response instead of losing it to a TCP reset)
 * conn_process() moves between them; it runs only from libevent callbacks, never from
 * inside an application call (see http_internal.h).
 *
 * Reading is done here rather than by the bufferevent (which only writes): libevent 2.1
 * reads at most 4 KiB per call, so a 1 GiB upload would cost 262144 readv + ioctl +
 * epoll_wait round trips. conn_read_cb reads up to the free room below read_high
 * into the connection's input buffer and stops reading while that buffer is full,
 * which is also what bounds memory when the application pauses a body. */
#include "http_internal.h"

#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>

#include "log.h"

#define HTTP_LINGER_MS 2000
#define HTTP_ACCEPT_RETRY_MS 100

static bool conn_advance(struct http_conn *c);
static void conn_process(struct http_conn *c);

void http_limits_default(struct http_limits *lim)
{
    lim->max_header_bytes = 16 * 1024;
    lim->max_target_bytes = 8 * 1024;
    lim->max_headers = 100;
    lim->header_timeout_ms = 10000;
    lim->body_idle_timeout_ms = 30000;
    lim->write_timeout_ms = 60000;
    lim->keepalive_idle_ms = 60000;
    lim->max_connections = 1024;
    lim->max_conns_per_client = 128;
    lim->max_body_default = 1024 * 1024;
    lim->stream_low_water = 64 * 1024;
}

static void fill_limits(struct http_limits *dst, const struct http_limits *src)
{
    http_limits_default(dst);
    if (!src)
        return;
#define TAKE(f) if (src->f) dst->f = src->f
    TAKE(max_header_bytes);
    TAKE(max_target_bytes);
    TAKE(max_headers);
    TAKE(header_timeout_ms);
    TAKE(body_idle_timeout_ms);
    TAKE(write_timeout_ms);
    TAKE(keepalive_idle_ms);
    TAKE(max_connections);
    TAKE(max_conns_per_client);
    TAKE(max_body_default);
    TAKE(stream_low_water);
#undef TAKE
}

static struct timeval ms_tv(unsigned ms)
{
    struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
    return tv;
}

void http_conn_schedule(struct http_conn *c)
{
    event_active(c->defer, EV_TIMEOUT, 0);
}

struct evbuffer *http_conn_output(struct http_conn *c)
{
    return bufferevent_get_output(c->bev);
}

int http_conn_fd(struct http_conn *c)
{
    return bufferevent_getfd(c->bev);
}

/* True while the body is being consumed from the wire on the application's behalf. */
static bool body_reading(const struct http_req *r)
{
    if (!r || r->body_done)
        return false;
    switch (r->body_mode) {
    case BODY_BUFFERED:
    case BODY_DISCARD:
        return true;
    case BODY_STREAMED:
        return !r->paused;
    default:
        return false;
    }
}

/* Arms or disarms the read event: reading continues while the input has room and the
 * peer has not finished, with the idle timeout that fits the state. */
static void conn_update_read(struct http_conn *c)
{
    size_t len = evbuffer_get_length(c->in);
    if (c->eof || len >= c->srv->read_high) {
        event_del(c->rd_ev);
        return;
    }
    struct timeval tv = ms_tv(c->lingering ? HTTP_LINGER_MS : c->srv->lim.body_idle_timeout_ms);
    bool timed = c->lingering || body_reading(c->req);
    /* event_add(ev, NULL) keeps a timeout that is already armed: drop it first, or the
     * body-idle timer of a finished body fires later and aborts a slow reply with 408. */
    if (!timed)
        event_del(c->rd_ev);
    event_add(c->rd_ev, timed ? &tv : NULL);
}

void http_conn_update_timeouts(struct http_conn *c)
{
    struct timeval wr = ms_tv(c->srv->lim.write_timeout_ms);
    bufferevent_set_timeouts(c->bev, NULL, &wr);
    conn_update_read(c);
}

void http_conn_unlink(struct http_conn *c)
{
    struct http_server *s = c->srv;
    if (c->prev)
        c->prev->next = c->next;
    else
        s->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    s->nconns--;
}

static void conn_free(struct http_conn *c)
{
    http_conn_unlink(c);
    struct http_req *r = c->req;
    c->req = NULL;
    if (r && r->upgrade_cb)
        r->upgrade_cb(NULL, r->upgrade_arg); /* died before the hand-over */
    if (r) {
        if (!r->app_done) {
            r->app_done = true;
            http_log_response(c, r, 499, r->bytes_out);
            if (r->on_close)
                r->on_close(r, r->close_arg);
        }
        http_req_free(r);
    }
    event_free(c->rd_ev); /* before the socket closes with the bufferevent */
    bufferevent_free(c->bev);
    evbuffer_free(c->in);
    event_free(c->head_timer);
    event_free(c->defer);
    free(c);
}

/* A request died on the server side (bad body, timeout): answer if nothing was sent
 * yet, close, and tell the application. */
static void req_fail(struct http_conn *c, struct http_req *r, int status, const char *code,
                     const char *message)
{
    if (r->app_done) {
        c->closing = true;
        return;
    }
    if (r->resp == RESP_NONE) {
        http_conn_send_error(c, r, status, code, message);
    } else {
        http_log_response(c, r, r->status, r->bytes_out);
        c->closing = true;
    }
    r->app_done = true;
    r->resp = RESP_DONE;
    if (r->on_close)
        r->on_close(r, r->close_arg);
}

/* Reads the next head from the input; returns true if the state changed. */
static bool conn_read_head(struct http_conn *c)
{
    struct http_server *s = c->srv;
    struct evbuffer *in = c->in;
    size_t len = evbuffer_get_length(in);
    /* RFC 9112 2.2: empty lines before a request line are ignored. */
    while (c->scan == 0 && len >= 2) {
        const unsigned char *p = evbuffer_pullup(in, 2);
        if (p[0] != '\r' || p[1] != '\n')
            break;
        evbuffer_drain(in, 2);
        len -= 2;
    }
    if (len == 0)
        return false;
    if (!c->head_started) {
        c->head_started = true;
        struct timeval tv = ms_tv(s->lim.header_timeout_ms);
        evtimer_add(c->head_timer, &tv);
    }
    size_t n = len < s->lim.max_header_bytes ? len : s->lim.max_header_bytes;
    const char *data = (const char *)evbuffer_pullup(in, (ssize_t)n);
    size_t head_len = 0;
    struct http_parse_error err;
    enum http_parse_result pr = http_head_find_end(data, n, &s->plim, &c->scan, &head_len, &err);
    if (pr == HTTP_PARSE_INCOMPLETE)
        return false;
    if (pr == HTTP_PARSE_OK) {
        struct http_head h;
        pr = http_head_parse(data, head_len, &s->plim, &h, &err);
        evbuffer_drain(in, head_len);
        if (pr == HTTP_PARSE_OK) {
            evtimer_del(c->head_timer);
            c->req = http_req_new(c, &h, &err);
        }
    }
    if (!c->req) {
        http_conn_send_error(c, NULL, err.status, err.code, err.message);
        return true;
    }
    http_conn_update_timeouts(c);
    s->dispatch(c->req, s->dispatch_arg);
    return true;
}

/* Moves body bytes from the input to the consumer. Returns true on progress. */
static bool pump_body(struct http_conn *c, struct http_req *r)
{
    struct evbuffer *in = c->in;
    struct evbuffer_iovec v;
    if (evbuffer_get_length(in) == 0 || evbuffer_peek(in, -1, NULL, &v, 1) < 1)
        return false;
    const char *p = v.iov_base;
    size_t n = v.iov_len, consumed, off = 0, dlen;
    if (!r->head.chunked) {
        dlen = consumed = n < r->body_left ? n : (size_t)r->body_left;
        r->body_left -= dlen;
        r->body_done = r->body_left == 0;
    } else {
        struct http_parse_error err;
        enum http_parse_result pr =
            http_chunked_decode(&r->chunked, p, n, &consumed, &off, &dlen, &err);
        if (pr == HTTP_PARSE_ERROR) {
            req_fail(c, r, err.status, err.code, err.message);
            return true;
        }
        r->body_done = pr == HTTP_PARSE_OK;
    }
    if (dlen && r->body_mode == BODY_BUFFERED) {
        if (r->body_seen + dlen > r->body_max) {
            req_fail(c, r, 413, "payload_too_large", "request body too large");
            return true;
        }
        if (evbuffer_add(r->body_buf, p + off, dlen) < 0) {
            req_fail(c, r, 503, "unavailable", "out of memory");
            return true;
        }
    }
    r->body_seen += dlen;
    /* The span stays valid during the callback: the input is drained only after it. */
    if (dlen && r->body_mode == BODY_STREAMED && !r->app_done)
        r->chunk_cb(r, p + off, dlen, r->body_arg);
    evbuffer_drain(in, consumed);
    if (r->body_done)
        http_conn_update_timeouts(c);
    return true;
}

/* Delivers the end of a claimed body once every byte is in. Returns true if it did. */
static bool deliver_body_end(struct http_req *r)
{
    if (r->app_done || !r->body_done || r->paused)
        return false;
    if (r->body_mode == BODY_BUFFERED) {
        r->body_mode = BODY_DISCARD; /* delivered; nothing more to do for the body */
        size_t len = evbuffer_get_length(r->body_buf);
        char *data = NULL;
        if (evbuffer_add(r->body_buf, "", 1) == 0)
            data = (char *)evbuffer_pullup(r->body_buf, -1);
        if (!data) {
            req_fail(r->conn, r, 503, "unavailable", "out of memory");
            return true;
        }
        r->done_cb(r, data, len, r->body_arg);
        return true;
    }
    if (r->body_mode == BODY_STREAMED) {
        r->body_mode = BODY_DISCARD;
        r->end_cb(r, r->body_arg);
        return true;
    }
    return false;
}

/* Closing phase: flush, then half-close and drop input until EOF or the deadline.
 * Returns false if the connection was freed (the peer had already finished). */
static bool conn_close_step(struct http_conn *c)
{
    struct evbuffer *in = c->in;
    evbuffer_drain(in, evbuffer_get_length(in));
    if (evbuffer_get_length(bufferevent_get_output(c->bev)) > 0) {
        bufferevent_setwatermark(c->bev, EV_WRITE, 0, 0);
        return true;
    }
    if (c->lingering)
        return true;
    if (c->eof) {
        conn_free(c);
        return false;
    }
    c->lingering = true;
    shutdown(bufferevent_getfd(c->bev), SHUT_WR);
    struct timeval deadline = ms_tv(HTTP_LINGER_MS);
    evtimer_add(c->head_timer, &deadline);
    return true;
}

/* Makes all the progress possible now. Returns false if the connection was freed. */
static bool conn_advance(struct http_conn *c)
{
    struct http_server *s = c->srv;
    bool drain_fired = false;
    for (;;) {
        if (c->req && c->req->upgrade_cb) {
            http_conn_handover(c);
            return false;
        }
        if (c->closing)
            return conn_close_step(c);
        struct http_req *r = c->req;
        if (!r) {
            if (!conn_read_head(c))
                return true;
            continue;
        }
        if (r->body_error && !r->app_done) {
            if (r->body_error == 413)
                req_fail(c, r, 413, "payload_too_large", "request body too large");
            else
                req_fail(c, r, r->body_error, "unavailable", "out of memory");
            continue;
        }
        if (body_reading(r) && pump_body(c, r))
            continue;
        if (deliver_body_end(r))
            continue;
        if (r->app_done && (r->body_done || c->close_after)) {
            c->req = NULL;
            http_req_free(r);
            if (c->close_after) {
                c->closing = true;
                continue;
            }
            c->scan = 0;
            c->head_started = false;
            struct timeval tv = ms_tv(s->lim.keepalive_idle_ms);
            evtimer_add(c->head_timer, &tv);
            http_conn_update_timeouts(c);
            continue;
        }
        if (r->drain_cb && !r->app_done &&
            evbuffer_get_length(bufferevent_get_output(c->bev)) <= s->lim.stream_low_water) {
            if (drain_fired) {
                http_conn_schedule(c);
                return true;
            }
            drain_fired = true;
            http_drain_fn cb = r->drain_cb;
            r->drain_cb = NULL;
            cb(r, r->drain_arg);
            continue;
        }
        return true;
    }
}

static void conn_process(struct http_conn *c)
{
    if (conn_advance(c))
        conn_update_read(c);
}

/* The peer finished sending (EOF). */
static void conn_on_eof(struct http_conn *c)
{
    struct http_req *r = c->req;
    c->eof = true;
    event_del(c->rd_ev);
    if (r && r->upgrade_cb) {
        /* The new owner sees the EOF again on its first read. */
        conn_process(c);
        return;
    }
    if (!c->lingering && (!r || r->app_done) &&
        evbuffer_get_length(bufferevent_get_output(c->bev)) > 0) {
        /* Peer half-closed after its request: still deliver what it asked for. */
        c->closing = true;
        conn_process(c);
        return;
    }
    conn_free(c);
}

static void conn_read_cb(evutil_socket_t fd, short what, void *arg)
{
    struct http_conn *c = arg;
    if (what & EV_TIMEOUT) {
        if (!c->lingering && c->req && !c->closing) {
            req_fail(c, c->req, 408, "request_timeout", "request body not received in time");
            conn_process(c);
        } else {
            conn_free(c);
        }
        return;
    }
    struct evbuffer *in = c->in;
    size_t len = evbuffer_get_length(in);
    if (len >= c->srv->read_high) {
        event_del(c->rd_ev);
        return;
    }
    size_t room = c->srv->read_high - len;
    struct evbuffer_iovec v[2];
    int nv = evbuffer_reserve_space(in, (ev_ssize_t)room, v, 2);
    if (nv <= 0) {
        conn_free(c);
        return;
    }
    /* The reservation may exceed room; read no more than room in total. */
    size_t want = room;
    for (int i = 0; i < nv; i++) {
        if (v[i].iov_len > want)
            v[i].iov_len = want;
        want -= v[i].iov_len;
    }
    ssize_t n = readv(fd, (struct iovec *)v, nv);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        evbuffer_commit_space(in, v, 0);
        return;
    }
    if (n <= 0) {
        evbuffer_commit_space(in, v, 0);
        if (n == 0)
            conn_on_eof(c);
        else
            conn_free(c);
        return;
    }
    size_t left = (size_t)n;
    for (int i = 0; i < nv; i++) {
        v[i].iov_len = v[i].iov_len < left ? v[i].iov_len : left;
        left -= v[i].iov_len;
    }
    evbuffer_commit_space(in, v, nv);
    conn_process(c);
}

static void conn_writecb(struct bufferevent *bev, void *arg)
{
    conn_process(arg);
}

/* The bufferevent only writes: any event from it is a write error or timeout. */
static void conn_eventcb(struct bufferevent *bev, short what, void *arg)
{
    conn_free(arg);
}

static void head_timer_cb(evutil_socket_t fd, short what, void *arg)
{
    struct http_conn *c = arg;
    if (c->lingering) {
        conn_free(c);
        return;
    }
    if (c->req || c->closing)
        return;
    if (c->head_started)
        http_conn_send_error(c, NULL, 408, "request_timeout", "request head not received in time");
    else
        c->closing = true;
    conn_process(c);
}

static void defer_cb(evutil_socket_t fd, short what, void *arg)
{
    conn_process(arg);
}

static void format_peer(const struct sockaddr *sa, char *out, size_t cap)
{
    char ip[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &in->sin_addr, ip, sizeof ip);
        port = ntohs(in->sin_port);
        snprintf(out, cap, "%s:%d", ip, port);
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
        inet_ntop(AF_INET6, &in6->sin6_addr, ip, sizeof ip);
        port = ntohs(in6->sin6_port);
        snprintf(out, cap, "[%s]:%d", ip, port);
    } else {
        snprintf(out, cap, "unknown");
    }
}

/* Over a connection limit: a best-effort 503 (the server's limit) or 429 (this
 * client's) written straight to the socket, then close. No state is kept, so a flood
 * costs nothing beyond the accept. */
static void reject_overload(struct http_server *s, evutil_socket_t fd, const char *peer, bool client)
{
    const char *body = client ? "{\"error\":{\"code\":\"rate_limited\",\"message\":\"too many open "
                                "connections from this address\"}}"
                              : "{\"error\":{\"code\":\"unavailable\",\"message\":\"too many "
                                "connections\"}}";
    char buf[512];
    int n = snprintf(buf, sizeof buf,
                     "HTTP/1.1 %s\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\nRetry-After: 1\r\nConnection: close\r\n\r\n%s",
                     client ? "429 Too Many Requests" : "503 Service Unavailable", strlen(body), body);
    ssize_t w = send(fd, buf, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)w; /* best effort: the client may already be gone */
    shutdown(fd, SHUT_WR);
    evutil_closesocket(fd);
    log_warn("http.overload", "peer=%s connections=%u per_client=%d", peer, s->nconns, client);
}

/* Open connections from peer's address ("a.b.c.d:port" / "[v6]:port": the part before
 * the last ':'). */
static unsigned conns_from(const struct http_server *s, const char *peer)
{
    const char *colon = strrchr(peer, ':');
    size_t n = colon ? (size_t)(colon - peer) : strlen(peer);
    unsigned count = 0;
    for (const struct http_conn *c = s->conns; c; c = c->next)
        count += strncmp(c->peer, peer, n) == 0 && (c->peer[n] == ':' || c->peer[n] == '\0');
    return count;
}

static void accept_cb(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa,
                      int salen, void *arg)
{
    struct http_server *s = arg;
    char peer[64];
    format_peer(sa, peer, sizeof peer);
    if (s->nconns >= s->lim.max_connections) {
        reject_overload(s, fd, peer, false);
        return;
    }
    if (s->lim.max_conns_per_client != UINT_MAX && strcmp(peer, "unknown") != 0 &&
        conns_from(s, peer) >= s->lim.max_conns_per_client) {
        reject_overload(s, fd, peer, true);
        return;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct http_conn *c = calloc(1, sizeof *c);
    if (c) {
        c->srv = s;
        memcpy(c->peer, peer, sizeof c->peer);
        c->bev = bufferevent_socket_new(s->base, fd,
                                        BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS);
        c->head_timer = evtimer_new(s->base, head_timer_cb, c);
        c->rd_ev = event_new(s->base, fd, EV_READ | EV_PERSIST, conn_read_cb, c);
        c->in = evbuffer_new();
        c->defer = event_new(s->base, -1, 0, defer_cb, c);
    }
    if (!c || !c->bev || !c->head_timer || !c->defer || !c->rd_ev || !c->in) {
        if (c && c->bev)
            bufferevent_free(c->bev);
        else
            evutil_closesocket(fd);
        if (c && c->rd_ev)
            event_free(c->rd_ev);
        if (c && c->in)
            evbuffer_free(c->in);
        if (c && c->head_timer)
            event_free(c->head_timer);
        if (c && c->defer)
            event_free(c->defer);
        free(c);
        log_error("http.accept", "peer=%s error=\"out of memory\"", peer);
        return;
    }
    c->next = s->conns;
    if (s->conns)
        s->conns->prev = c;
    s->conns = c;
    s->nconns++;
    bufferevent_setcb(c->bev, NULL, conn_writecb, conn_eventcb, c);
    bufferevent_setwatermark(c->bev, EV_WRITE, s->lim.stream_low_water, 0);
    /* libevent writes at most 16 KiB per call by default: a 1 GiB download then costs
     * 65536 writev calls instead of 4096. (Reads stay at libevent 2.1's fixed 4 KiB.) */
    bufferevent_set_max_single_write(c->bev, HTTP_READ_HIGH);
    bufferevent_disable(c->bev, EV_READ);
    bufferevent_enable(c->bev, EV_WRITE);
    http_conn_update_timeouts(c);
    struct timeval tv = ms_tv(s->lim.header_timeout_ms);
    evtimer_add(c->head_timer, &tv);
}

static void accept_retry_cb(evutil_socket_t fd, short what, void *arg)
{
    struct http_server *s = arg;
    for (unsigned i = 0; i < s->nlisteners; i++)
        evconnlistener_enable(s->listeners[i]);
}

static void accept_error_cb(struct evconnlistener *l, void *arg)
{
    struct http_server *s = arg;
    int e = EVUTIL_SOCKET_ERROR();
    log_warn("http.accept", "error=%s connections=%u", evutil_socket_error_to_string(e),
             s->nconns);
    /* Out of descriptors: stop accepting briefly rather than spin on the error. */
    for (unsigned i = 0; i < s->nlisteners; i++)
        evconnlistener_disable(s->listeners[i]);
    struct timeval tv = ms_tv(HTTP_ACCEPT_RETRY_MS);
    evtimer_add(s->accept_retry, &tv);
}

struct http_server *http_server_new(struct event_base *base, const struct http_limits *lim,
                                    http_handler_fn dispatch, void *arg)
{
    struct http_server *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->base = base;
    fill_limits(&s->lim, lim);
    s->plim.max_header_bytes = s->lim.max_header_bytes;
    s->plim.max_target_bytes = s->lim.max_target_bytes;
    s->plim.max_headers = s->lim.max_headers;
    s->read_high = s->lim.max_header_bytes + 1 > HTTP_READ_HIGH ? s->lim.max_header_bytes + 1
                                                                : HTTP_READ_HIGH;
    s->dispatch = dispatch;
    s->dispatch_arg = arg;
    s->accept_retry = evtimer_new(base, accept_retry_cb, s);
    if (!s->accept_retry) {
        free(s);
        return NULL;
    }
    return s;
}

/* Splits "host:port" / "[v6]:port" into host[] and port[]. */
static int split_addr(const char *addr, char *host, size_t hostcap, char *port, size_t portcap)
{
    const char *colon, *hs = addr, *he;
    if (addr[0] == '[') {
        hs = addr + 1;
        he = strchr(hs, ']');
        if (!he || he[1] != ':')
            return -1;
        colon = he + 1;
    } else {
        colon = strrchr(addr, ':');
        if (!colon)
            return -1;
        he = colon;
    }
    size_t hl = (size_t)(he - hs), pl = strlen(colon + 1);
    if (hl == 0 || hl >= hostcap || pl == 0 || pl >= portcap ||
        strspn(colon + 1, "0123456789") != pl)
        return -1;
    memcpy(host, hs, hl);
    host[hl] = '\0';
    memcpy(port, colon + 1, pl + 1);
    return 0;
}

int http_server_listen(struct http_server *s, const char *addr, char *err, size_t errlen)
{
    char host[256], port[16];
    if (s->nlisteners >= HTTP_MAX_LISTENERS) {
        snprintf(err, errlen, "too many listeners");
        return -1;
    }
    if (!addr || split_addr(addr, host, sizeof host, port, sizeof port) < 0) {
        snprintf(err, errlen, "invalid listen address (want host:port or [v6]:port)");
        return -1;
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *ai = NULL;
    int rc = getaddrinfo(host, port, &hints, &ai);
    if (rc != 0) {
        snprintf(err, errlen, "cannot resolve %s: %s", host, gai_strerror(rc));
        return -1;
    }
    struct evconnlistener *l = evconnlistener_new_bind(
        s->base, accept_cb, s, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_EXEC,
        1024, ai->ai_addr, (int)ai->ai_addrlen);
    int e = errno;
    freeaddrinfo(ai);
    if (!l) {
        snprintf(err, errlen, "cannot listen on %s: %s", addr, strerror(e));
        return -1;
    }
    evconnlistener_set_error_cb(l, accept_error_cb);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    s->port = 0;
    if (getsockname(evconnlistener_get_fd(l), (struct sockaddr *)&ss, &sl) == 0)
        s->port = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
                                           : ntohs(((struct sockaddr_in *)&ss)->sin_port);
    s->listeners[s->nlisteners++] = l;
    return 0;
}

int http_server_port(const struct http_server *s)
{
    return s->port;
}

unsigned http_server_connections(const struct http_server *s)
{
    return s->nconns;
}

void http_server_free(struct http_server *s)
{
    if (!s)
        return;
    for (unsigned i = 0; i < s->nlisteners; i++)
        evconnlistener_free(s->listeners[i]);
    while (s->conns)
        conn_free(s->conns);
    event_free(s->accept_retry);
    free(s);
}
