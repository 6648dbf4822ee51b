/* test_http_harness.h: a real http_server on 127.0.0.1:0 running its event loop in a
 * thread, and blocking raw-socket clients with a tiny response reader, shared by the
 * HTTP server and router tests. Handlers run on the loop thread; state they share with
 * the test thread is atomic. Every blocking read has a generous receive timeout so a
 * broken server fails a test instead of hanging it. */
#ifndef TEST_HTTP_HARNESS_H
#define TEST_HTTP_HARNESS_H

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <event2/event.h>
#include <event2/thread.h>

#include "daemon/http/http.h"
#include "daemon/http/router.h"

#define TH_RECV_TIMEOUT_S 60

struct th_server {
    struct event_base *base;
    struct http_server *srv;
    struct router *router;
    pthread_t thread;
    int port;
};

static inline void *th_loop(void *arg)
{
    struct th_server *t = arg;
    event_base_loop(t->base, EVLOOP_NO_EXIT_ON_EMPTY);
    return NULL;
}

/* Starts a server with `lim` (NULL: defaults) routing through a router that `setup`
 * fills. */
static inline void th_start(struct th_server *t, const struct http_limits *lim,
                            void (*setup)(struct router *, struct th_server *))
{
    signal(SIGPIPE, SIG_IGN);
    evthread_use_pthreads();
    memset(t, 0, sizeof *t);
    t->base = event_base_new();
    t->router = router_new();
    if (!t->base || !t->router)
        abort();
    setup(t->router, t);
    t->srv = http_server_new(t->base, lim, router_dispatch, t->router);
    char err[256];
    if (!t->srv || http_server_listen(t->srv, "127.0.0.1:0", err, sizeof err) < 0) {
        fprintf(stderr, "listen: %s\n", err);
        abort();
    }
    t->port = http_server_port(t->srv);
    pthread_create(&t->thread, NULL, th_loop, t);
}

static inline void th_stop(struct th_server *t)
{
    /* loopexit, not loopbreak: it is an event, so it is not lost if the loop thread has
     * not started looping yet. */
    event_base_loopexit(t->base, NULL);
    pthread_join(t->thread, NULL);
    http_server_free(t->srv);
    router_free(t->router);
    event_base_free(t->base);
}

/* cmocka setup: th_start, and the server stored in *state for th_teardown. */
static inline int th_setup(void **state, struct th_server *t, const struct http_limits *lim,
                           void (*setup)(struct router *, struct th_server *))
{
    th_start(t, lim, setup);
    *state = t;
    return 0;
}

/* A handler for a route that answers 200 "hello" (text/plain): the server still serves
 * ordinary requests. */
static inline void th_hello(struct http_req *req, void *arg)
{
    (void)arg;
    http_reply(req, 200, "text/plain", "hello", 5);
}

/* cmocka teardown for tests whose setup stored its th_server in *state. */
static inline int th_teardown(void **state)
{
    th_stop(*state);
    return 0;
}

/* A client connection with a read buffer (responses may arrive pipelined). */
struct th_conn {
    int fd;
    char buf[1 << 16];
    size_t len;
};

static inline void th_set_timeout(int fd, int seconds)
{
    struct timeval tv = {.tv_sec = seconds};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

static inline int th_connect_fd(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    th_set_timeout(fd, TH_RECV_TIMEOUT_S);
    return fd;
}

static inline struct th_conn *th_connect(int port)
{
    struct th_conn *c = calloc(1, sizeof *c);
    c->fd = th_connect_fd(port);
    if (c->fd < 0)
        abort();
    return c;
}

static inline void th_close(struct th_conn *c)
{
    close(c->fd);
    free(c);
}

/* Sends everything; returns 0 or -1 (peer gone). */
static inline int th_send(struct th_conn *c, const void *data, size_t len)
{
    const char *p = data;
    while (len) {
        ssize_t n = send(c->fd, p, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static inline int th_sends(struct th_conn *c, const char *s)
{
    return th_send(c, s, strlen(s));
}

/* Reads more bytes into the buffer; returns bytes read, 0 on EOF, -1 on error/timeout. */
static inline ssize_t th_fill(struct th_conn *c)
{
    if (c->len == sizeof c->buf)
        return -1;
    ssize_t n;
    do
        n = recv(c->fd, c->buf + c->len, sizeof c->buf - c->len, 0);
    while (n < 0 && errno == EINTR);
    if (n > 0)
        c->len += (size_t)n;
    return n;
}

static inline void th_consume(struct th_conn *c, size_t n)
{
    memmove(c->buf, c->buf + n, c->len - n);
    c->len -= n;
}

/* One parsed response. body is malloc'd (NUL-terminated); headers raw text. */
struct th_resp {
    int status;
    char headers[8192];
    char *body;
    size_t body_len;
};

static inline void th_resp_free(struct th_resp *r)
{
    free(r->body);
    r->body = NULL;
}

/* Header value of a response, or NULL; copies into out. */
static inline const char *th_hdr(const struct th_resp *r, const char *name, char *out, size_t cap)
{
    size_t nl = strlen(name);
    const char *p = strstr(r->headers, "\r\n");
    while (p && p[2] != '\r' && p[2]) {
        p += 2;
        const char *e = strstr(p, "\r\n");
        if (!e)
            break;
        if ((size_t)(e - p) > nl && p[nl] == ':' && strncasecmp(p, name, nl) == 0) {
            const char *v = p + nl + 1;
            while (*v == ' ')
                v++;
            size_t vl = (size_t)(e - v) < cap - 1 ? (size_t)(e - v) : cap - 1;
            memcpy(out, v, vl);
            out[vl] = '\0';
            return out;
        }
        p = e;
    }
    return NULL;
}

/* Reads until `n` bytes are buffered; false on EOF/error. */
static inline bool th_need(struct th_conn *c, size_t n)
{
    while (c->len < n)
        if (th_fill(c) <= 0)
            return false;
    return true;
}

/* Reads until the buffer holds `pat`; returns its offset or -1. */
static inline long th_find(struct th_conn *c, const char *pat)
{
    for (;;) {
        char *hit = memmem(c->buf, c->len, pat, strlen(pat));
        if (hit)
            return hit - c->buf;
        if (th_fill(c) <= 0)
            return -1;
    }
}

/* Reads one response (1xx interim responses are returned too). no_body: response to
 * HEAD. Returns 0, or -1 if the connection ended before a complete response. */
static inline int th_read_resp(struct th_conn *c, struct th_resp *r, bool no_body)
{
    memset(r, 0, sizeof *r);
    long end = th_find(c, "\r\n\r\n");
    if (end < 0 || (size_t)end + 4 >= sizeof r->headers)
        return -1;
    memcpy(r->headers, c->buf, (size_t)end + 4);
    r->headers[end + 4] = '\0';
    if (sscanf(r->headers, "HTTP/1.1 %d", &r->status) != 1)
        return -1;
    th_consume(c, (size_t)end + 4);
    char v[64];
    size_t cap = 1024, used = 0;
    r->body = malloc(cap);
    if (no_body || r->status < 200 || r->status == 204 || r->status == 304) {
        r->body[0] = '\0';
        return 0;
    }
    if (th_hdr(r, "Transfer-Encoding", v, sizeof v)) {
        for (;;) {
            long eol = th_find(c, "\r\n");
            if (eol < 0)
                return -1;
            size_t n = strtoul(c->buf, NULL, 16);
            th_consume(c, (size_t)eol + 2);
            if (!th_need(c, n + 2))
                return -1;
            if (used + n + 1 > cap) {
                cap = (used + n + 1) * 2;
                r->body = realloc(r->body, cap);
            }
            memcpy(r->body + used, c->buf, n);
            used += n;
            th_consume(c, n + 2);
            if (n == 0)
                break;
        }
    } else if (th_hdr(r, "Content-Length", v, sizeof v)) {
        size_t n = strtoul(v, NULL, 10);
        if (n + 1 > cap) {
            cap = n + 1;
            r->body = realloc(r->body, cap);
        }
        while (used < n) {
            if (c->len == 0 && th_fill(c) <= 0)
                return -1;
            size_t take = c->len < n - used ? c->len : n - used;
            memcpy(r->body + used, c->buf, take);
            used += take;
            th_consume(c, take);
        }
    } else {
        /* Close-delimited. */
        for (;;) {
            if (c->len) {
                if (used + c->len + 1 > cap) {
                    cap = (used + c->len + 1) * 2;
                    r->body = realloc(r->body, cap);
                }
                memcpy(r->body + used, c->buf, c->len);
                used += c->len;
                c->len = 0;
            }
            ssize_t n = th_fill(c);
            if (n == 0)
                break;
            if (n < 0)
                return -1;
        }
    }
    r->body[used] = '\0';
    r->body_len = used;
    return 0;
}

/* Sends `req` on a fresh connection and reads one response; returns its status, or -1. */
static inline int th_roundtrip(int port, const char *req, struct th_resp *r)
{
    struct th_conn *c = th_connect(port);
    int status = -1;
    if (th_sends(c, req) == 0 && th_read_resp(c, r, false) == 0)
        status = r->status;
    th_close(c);
    return status;
}

/* True if the server closes the connection (EOF or reset) within the receive timeout,
 * discarding anything it sends first. */
static inline bool th_wait_closed(struct th_conn *c)
{
    for (;;) {
        c->len = 0;
        ssize_t n = th_fill(c);
        if (n == 0)
            return true;
        if (n < 0)
            return errno == ECONNRESET;
    }
}

#endif
