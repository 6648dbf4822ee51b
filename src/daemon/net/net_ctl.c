/* net_ctl.c: one JSON-line request/reply on space-gateway's control socket (gw_ctl.h).
 *
 * net_ctl_call is synchronous on purpose: the gateway answers from memory on a local
 * socket (its `attach` runs `nft` and takes 40-200 ms), and the callers must know the
 * outcome before they reply to the API or hand the tap to QEMU. net_ctl_async is the
 * same exchange on a non-blocking socket driven by the event loop, for the resync, which
 * has many requests to send and nobody waiting on each (net_resync.c). The timeouts bound
 * a hung gateway. */
#include <errno.h>
#include <event2/event.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "clock.h"
#include "daemon/net/net_internal.h"

#define CTL_TIMEOUT_S 5
#define CTL_REPLY_MAX (4u * 1024 * 1024) /* a full decision log fits */

/* A connected socket (SOCK_NONBLOCK in flags for the asynchronous kind: a local
 * connect completes or fails at once, unless the listen backlog is full, EAGAIN). */
static int ctl_connect(const char *path, int flags, char *err, size_t errlen)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof sa.sun_path) {
        snprintf(err, errlen, "control socket path too long");
        return -1;
    }
    memcpy(sa.sun_path, path, strlen(path) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | flags, 0);
    if (fd < 0) {
        snprintf(err, errlen, "socket: %s", strerror(errno));
        return -1;
    }
    struct timeval tv = {.tv_sec = CTL_TIMEOUT_S};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        snprintf(err, errlen, "gateway not reachable at %s: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

/* One exchange: the request line going out, the reply line coming in. */
struct exchange {
    char *out;              /* the request line, newline included (owned) */
    size_t out_len, out_off;
    char *in;               /* the reply so far (owned) */
    size_t in_len, in_cap;
};

/* Moves the exchange on as far as the socket allows: 1 once the whole reply line is in
 * (NUL-terminated in place of its newline), 0 when the socket would block (on a blocking
 * socket: its timeout ran out), -1 with err when the gateway closed, failed or sent too
 * much. */
static int exchange_step(int fd, struct exchange *x, char *err, size_t errlen)
{
    while (x->out_off < x->out_len) {
        ssize_t n = send(fd, x->out + x->out_off, x->out_len - x->out_off, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
        if (n <= 0) {
            snprintf(err, errlen, "sending to the gateway: %s", strerror(errno));
            return -1;
        }
        x->out_off += (size_t)n;
    }
    for (;;) {
        if (x->in_len + 1 >= x->in_cap) {
            size_t cap = x->in_cap ? x->in_cap * 2 : 4096;
            char *nb = x->in_cap >= CTL_REPLY_MAX ? NULL : realloc(x->in, cap);
            if (!nb) {
                snprintf(err, errlen, "gateway reply too long");
                return -1;
            }
            x->in = nb;
            x->in_cap = cap;
        }
        ssize_t n = recv(fd, x->in + x->in_len, x->in_cap - x->in_len - 1, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
        if (n <= 0) {
            snprintf(err, errlen, "gateway closed: %s", n ? strerror(errno) : "EOF");
            return -1;
        }
        char *nl = memchr(x->in + x->in_len, '\n', (size_t)n);
        x->in_len += (size_t)n;
        if (nl) {
            *nl = 0;
            return 1;
        }
    }
}

/* The reply line (NUL-terminated, without its newline) as an object, or NULL with err. */
static json_t *parse_reply(const char *text, char *err, size_t errlen)
{
    json_t *reply = json_loads(text, 0, NULL);
    if (!json_is_object(reply)) {
        json_decref(reply);
        reply = NULL;
        snprintf(err, errlen, "gateway answered something that is not a JSON object");
    }
    return reply;
}

/* The request as one line, newline included (json_dumps output; caller frees). */
static char *request_line(const json_t *req, size_t *len)
{
    char *line = json_dumps(req, JSON_COMPACT);
    if (!line)
        return NULL;
    *len = strlen(line);
    line[(*len)++] = '\n'; /* json_dumps output has its NUL here; sent as the terminator */
    return line;
}

json_t *net_ctl_call(const char *path, const json_t *req, char *err, size_t errlen)
{
    struct exchange x = {0};
    if (!(x.out = request_line(req, &x.out_len))) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    json_t *reply = NULL;
    int fd = ctl_connect(path, 0, err, errlen);
    if (fd >= 0) {
        int r = exchange_step(fd, &x, err, errlen);
        if (r == 0)
            snprintf(err, errlen, "gateway timed out (%d s)", CTL_TIMEOUT_S);
        else if (r == 1)
            reply = parse_reply(x.in, err, errlen);
        close(fd);
    }
    free(x.out);
    free(x.in);
    return reply;
}

/* ---- the asynchronous kind ---------------------------------------------------------- */

struct net_ctl_async {
    struct event_base *base;
    int fd;                 /* -1 when the connect failed */
    struct event *ev;       /* fd ready (the direction the exchange needs) or timeout */
    struct exchange x;
    int64_t deadline_ms;    /* clock_mono_ms() past which the gateway has timed out */
    bool failed;            /* err is set: the next event ends it */
    char err[256];
    net_ctl_done_fn done;
    void *arg;
};

static void async_free(struct net_ctl_async *c)
{
    if (c->ev)
        event_free(c->ev);
    if (c->fd >= 0)
        close(c->fd);
    free(c->x.out);
    free(c->x.in);
    free(c);
}

/* Ends the request: r 1 (a reply line is in) or -1 (err). The request is freed before
 * done runs, so done may start the next one. */
static void async_finish(struct net_ctl_async *c, int r)
{
    json_t *reply = r == 1 ? parse_reply(c->x.in, c->err, sizeof c->err) : NULL;
    char err[sizeof c->err];
    memcpy(err, c->err, sizeof err);
    net_ctl_done_fn done = c->done;
    void *arg = c->arg;
    async_free(c);
    done(reply, reply ? NULL : err, arg);
}

static short async_wants(const struct net_ctl_async *c)
{
    return c->x.out_off < c->x.out_len ? EV_WRITE : EV_READ;
}

static void async_cb(evutil_socket_t fd, short what, void *arg);

/* Waits for the socket in the direction the exchange needs, until the deadline. */
static void async_arm(struct net_ctl_async *c)
{
    int64_t left = c->deadline_ms - clock_mono_ms();
    struct timeval tv = {.tv_sec = left > 0 ? left / 1000 : 0,
                         .tv_usec = left > 0 ? (left % 1000) * 1000 : 0};
    event_del(c->ev);
    event_assign(c->ev, c->base, c->fd, async_wants(c), async_cb, c);
    event_add(c->ev, &tv);
}

static void async_cb(evutil_socket_t fd, short what, void *arg)
{
    struct net_ctl_async *c = arg;
    (void)fd;
    (void)what;
    int r = c->failed ? -1 : exchange_step(c->fd, &c->x, c->err, sizeof c->err);
    if (r == 0 && clock_mono_ms() >= c->deadline_ms) {
        snprintf(c->err, sizeof c->err, "gateway timed out (%d s)", CTL_TIMEOUT_S);
        r = -1;
    }
    if (r == 0)
        async_arm(c);
    else
        async_finish(c, r);
}

struct net_ctl_async *net_ctl_async(struct event_base *base, const char *path, const json_t *req,
                                    net_ctl_done_fn done, void *arg)
{
    struct net_ctl_async *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->base = base;
    c->fd = -1;
    c->done = done;
    c->arg = arg;
    c->deadline_ms = clock_mono_ms() + CTL_TIMEOUT_S * 1000;
    c->ev = event_new(base, -1, 0, async_cb, c);
    c->x.out = request_line(req, &c->x.out_len);
    if (!c->ev || !c->x.out) {
        async_free(c);
        return NULL;
    }
    c->fd = ctl_connect(path, SOCK_NONBLOCK, c->err, sizeof c->err);
    if (c->fd < 0) {
        c->failed = true; /* reported from the loop, as any other outcome */
        event_active(c->ev, EV_TIMEOUT, 0);
    } else {
        async_arm(c);
    }
    return c;
}

void net_ctl_async_wait(struct net_ctl_async *c)
{
    event_del(c->ev); /* also takes back a pending activation */
    int r = c->failed ? -1 : 0;
    while (r == 0 && (r = exchange_step(c->fd, &c->x, c->err, sizeof c->err)) == 0) {
        int64_t left = c->deadline_ms - clock_mono_ms();
        struct pollfd p = {.fd = c->fd, .events = async_wants(c) == EV_WRITE ? POLLOUT : POLLIN};
        if (left <= 0 || (poll(&p, 1, (int)left) < 0 && errno != EINTR)) {
            snprintf(c->err, sizeof c->err, "gateway timed out (%d s)", CTL_TIMEOUT_S);
            r = -1;
        }
    }
    async_finish(c, r);
}

void net_ctl_async_cancel(struct net_ctl_async *c)
{
    if (c)
        async_free(c);
}
