/* e2b_portlisten: the sandbox-port listener, getHost(port) as a byte pipe, and the
 * pipe itself, which e2b_portproxy.c also uses for connections upgraded on spaced's
 * own port (e2b_pipe_adopt).
 *
 * spaced's own port terminates HTTP (each request parsed and re-sent); this listener
 * does not, for clients that want the guest server's HTTP unchanged from the first
 * byte on. It (SPACE_E2B_PORT_LISTEN, with
 * SPACE_E2B_DOMAIN pointing at it so getHost() names it) reads only the first request
 * head of a connection, picks the sandbox and port from its Host
 * ("<port>-<id>.<domain>") or E2b-Sandbox-Id/E2b-Sandbox-Port, opens an agent `tcp`
 * channel to 127.0.0.1:<port> in the guest and from then on pipes bytes both ways
 * unchanged, head included. So everything HTTP/1.1 can do works end to end, unparsed:
 * keep-alive (every later request of the connection goes to the same sandbox port),
 * chunked or streamed bodies both ways, and Upgrade (WebSocket) until either side
 * closes. Half-closes are passed on (client FIN -> EOF IN; server FIN -> our FIN once
 * its bytes are flushed).
 *
 * Backpressure, both ways bounded: client bytes are read only while the channel's
 * queue is under E2B_HIGH_WATER (bufferevent reading is disabled above it and
 * re-enabled on the channel's drain), and guest bytes are granted back to the agent
 * only while our client output is under E2B_HIGH_WATER (else when it drains).
 *
 * Failures before any byte reached the client are answered as HTTP (400 bad head, 431
 * head too large, 502 unknown sandbox / refused port / agent error, 408 head too slow)
 * with E2B's REST error body, then the connection closes. Like E2B's public sandbox
 * URLs, no token is needed.
 *
 * Fairness (docs/security.md "Quotas and tenancy"): a new connection costs its source
 * address one token of the API's rate (--rate/--burst, a bucket table of its own), and
 * one address holds at most --max-conns-per-client connections here; beyond either it is
 * answered 429 with Retry-After and closed at once, before any state is kept. A piped
 * connection (here or adopted from spaced's port) on which no byte moved either way for
 * --proxy-idle-timeout seconds is closed. */
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include "daemon/agentc/agentc.h"
#include "daemon/api/ratelimit.h"
#include "daemon/sandbox/sbx.h"
#include "daemon/spaced.h"
#include "e2b_internal.h"
#include "log.h"

#define PL_HEAD_MAX   (16u * 1024)   /* first request head, like our HTTP server's */
#define PL_HEAD_SECS  10             /* the head must arrive within this */
#define PL_MAX_CONNS  1024

struct pl_conn {
    struct e2b *e;             /* NULL for adopted pipes (only routing uses it) */
    struct bufferevent *bev;   /* the client (owned, owns the socket) */
    struct agentc_chan *ch;    /* the guest connection, NULL before routing / after */
    void *owned;               /* e2b_pipe_adopt's forwarding context, freed with us */
    struct event *timer;       /* head deadline, then idle deadline once piping (owned) */
    struct pl_conn *next, *prev; /* pl_all: every connection */
    char addr[48];             /* the client's address; "" for adopted pipes */
    bool piping;               /* routed: bytes flow */
    bool client_eof;           /* client sent FIN (EOF IN sent or queued) */
    bool guest_done;           /* the channel ended (EOF OUT or close) */
    bool answered;             /* some byte went to the client */
    bool closing;              /* flush output, then free */
    bool read_paused;          /* client reading disabled for backpressure */
    uint32_t owed;             /* guest bytes delivered, credit not yet returned */
    char err[200];             /* the agent's error, for a 502 */
};

static unsigned pl_conns;
static struct pl_conn *pl_all;
static struct rl_table *pl_rl; /* new connections per address; NULL: --rate 0 */
static unsigned pl_idle_s = 600; /* --proxy-idle-timeout; 0 = none */

void e2b_pipe_set_idle(unsigned seconds) { pl_idle_s = seconds; }

static void pl_free(struct pl_conn *c)
{
    if (c->prev)
        c->prev->next = c->next;
    else if (pl_all == c)
        pl_all = c->next;
    if (c->next)
        c->next->prev = c->prev;
    if (c->ch)
        agentc_close(c->ch);
    if (c->timer)
        event_free(c->timer);
    bufferevent_free(c->bev);
    pl_conns--;
    free(c->owned);
    free(c);
}

/* Ends the connection once the output is flushed (at once if it is empty). */
static void pl_close_after_flush(struct pl_conn *c)
{
    if (c->ch) {
        agentc_close(c->ch);
        c->ch = NULL;
    }
    c->closing = true;
    bufferevent_disable(c->bev, EV_READ);
    if (evbuffer_get_length(bufferevent_get_output(c->bev)) == 0)
        pl_free(c);
}

/* An HTTP error answer (only before any byte of the guest's reached the client). */
static void pl_fail(struct pl_conn *c, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void pl_fail(struct pl_conn *c, int status, const char *fmt, ...)
{
    if (!c->answered) {
        char msg[256];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        json_t *body = json_pack("{s:i, s:s}", "code", status, "message", msg);
        char *s = body ? json_dumps(body, JSON_COMPACT) : NULL;
        json_decref(body);
        evbuffer_add_printf(bufferevent_get_output(c->bev),
                            "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\n"
                            "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
                            status, http_status_reason(status), s ? strlen(s) : 0, s ? s : "");
        free(s);
        c->answered = true;
    }
    pl_close_after_flush(c);
}

/* A byte moved on a piped connection: its idle deadline starts again. */
static void pl_touch(struct pl_conn *c)
{
    if (c->timer && c->piping && pl_idle_s) {
        struct timeval tv = {.tv_sec = pl_idle_s};
        evtimer_add(c->timer, &tv);
    }
}

/* Client bytes go to the channel while its queue has room. */
static void pl_pump_up(struct pl_conn *c)
{
    struct evbuffer *in = bufferevent_get_input(c->bev);
    size_t n;
    while ((n = evbuffer_get_length(in)) > 0 && c->ch && agentc_queued(c->ch) < E2B_HIGH_WATER) {
        struct evbuffer_iovec v;
        if (evbuffer_peek(in, -1, NULL, &v, 1) < 1)
            break;
        if (agentc_write(c->ch, v.iov_base, v.iov_len) < 0)
            break;
        evbuffer_drain(in, v.iov_len);
    }
    bool pause = c->ch && agentc_queued(c->ch) >= E2B_HIGH_WATER;
    if (pause != c->read_paused) {
        c->read_paused = pause;
        if (pause)
            bufferevent_disable(c->bev, EV_READ);
        else if (!c->client_eof)
            bufferevent_enable(c->bev, EV_READ);
    }
    if (c->client_eof && c->ch && evbuffer_get_length(in) == 0)
        agentc_eof(c->ch);
}

/* ---- the guest side ---- */

static void pl_on_data(void *arg, enum frame_stream stream, const uint8_t *buf, size_t len)
{
    struct pl_conn *c = arg;
    struct evbuffer *out = bufferevent_get_output(c->bev);
    evbuffer_add(out, buf, len);
    c->answered = true;
    pl_touch(c);
    if (evbuffer_get_length(out) > E2B_HIGH_WATER)
        c->owed += (uint32_t)len; /* returned by pl_write_cb as the client drains */
    else
        agentc_grant(c->ch, FRAME_STREAM_OUT, (uint32_t)len);
}

static void pl_on_error(void *arg, const char *code, const char *message)
{
    struct pl_conn *c = arg;
    if (!c->err[0])
        snprintf(c->err, sizeof c->err, "%s (%s)", message, code);
}

/* The guest finished sending: pass the FIN on once our output is flushed. */
static void pl_guest_done(struct pl_conn *c)
{
    c->guest_done = true;
    if (!c->answered)
        return pl_fail(c, 502, "sandbox port: %s", c->err[0] ? c->err : "closed without answering");
    if (evbuffer_get_length(bufferevent_get_output(c->bev)) == 0) {
        shutdown(bufferevent_getfd(c->bev), SHUT_WR);
        if (c->client_eof || !c->ch)
            pl_close_after_flush(c);
    }
}

static void pl_on_eof(void *arg, enum frame_stream stream)
{
    pl_guest_done(arg);
}

static void pl_on_close(void *arg)
{
    struct pl_conn *c = arg;
    c->ch = NULL;
    if (!c->guest_done)
        pl_guest_done(c);
    else if (c->client_eof)
        pl_close_after_flush(c);
    else if (evbuffer_get_length(bufferevent_get_output(c->bev)) == 0)
        pl_close_after_flush(c);
}

static void pl_on_drain(void *arg)
{
    pl_pump_up(arg);
}

const struct agentc_chan_ops e2b_pipe_chan_ops = {
    .on_data = pl_on_data,
    .on_eof = pl_on_eof,
    .on_error = pl_on_error,
    .on_close = pl_on_close,
    .on_drain = pl_on_drain,
};

/* ---- the client side ---- */

/* A header's value in the head (NUL-terminated lines), copied into out[cap]. */
static bool head_field(const char *head, const char *name, char *out, size_t cap)
{
    size_t nl = strlen(name);
    for (const char *l = strstr(head, "\r\n"); l && l[2]; l = strstr(l + 2, "\r\n")) {
        const char *f = l + 2;
        if (strncasecmp(f, name, nl) != 0 || f[nl] != ':')
            continue;
        const char *v = f + nl + 1, *end = strstr(v, "\r\n");
        while (*v == ' ' || *v == '\t')
            v++;
        size_t n = end ? (size_t)(end - v) : strlen(v);
        while (n && (v[n - 1] == ' ' || v[n - 1] == '\t'))
            n--;
        if (n >= cap)
            return false;
        memcpy(out, v, n);
        out[n] = '\0';
        return true;
    }
    return false;
}

/* The first head is complete in the input: route it and start piping. */
static void pl_route(struct pl_conn *c, size_t head_len)
{
    char *head = malloc(head_len + 1);
    if (!head)
        return pl_fail(c, 500, "out of memory");
    evbuffer_copyout(bufferevent_get_input(c->bev), head, head_len);
    head[head_len] = '\0';
    char host[300] = "", sid[STORE_ID_MAX] = "", sport[16] = "", id[STORE_ID_MAX];
    bool ok = memchr(head, '\0', head_len) == NULL && strstr(head, " HTTP/1.") != NULL;
    bool have_host = ok && head_field(head, "Host", host, sizeof host);
    if (ok) {
        head_field(head, "E2b-Sandbox-Id", sid, sizeof sid);
        head_field(head, "E2b-Sandbox-Port", sport, sizeof sport);
    }
    free(head);
    unsigned port = 0;
    if (!ok)
        return pl_fail(c, 400, "not an HTTP/1.x request");
    if (!e2b_port_target(have_host ? host : NULL, sid, sport, &port, id, sizeof id))
        return pl_fail(c, 400, "Host must be <port>-<sandbox id>.<domain>");
    struct sbx *s = sbx_find(c->e->sp, NULL, id);
    struct agentc *a = s ? sbx_agent(s) : NULL;
    if (!a)
        return pl_fail(c, 502, "sandbox %.64s is not running", id);
    char why[128];
    c->ch = agentc_open_tcp(a, NULL, port, &e2b_pipe_chan_ops, c, AGENTC_MANUAL_CREDIT, why, sizeof why);
    if (!c->ch)
        return pl_fail(c, 502, "cannot reach the sandbox: %s", why);
    c->piping = true;
    event_del(c->timer);
    pl_touch(c);
    pl_pump_up(c);
}

static void pl_read_cb(struct bufferevent *bev, void *arg)
{
    struct pl_conn *c = arg;
    if (c->closing)
        return;
    if (c->piping) {
        pl_touch(c);
        return pl_pump_up(c);
    }
    struct evbuffer *in = bufferevent_get_input(bev);
    struct evbuffer_ptr end = evbuffer_search(in, "\r\n\r\n", 4, NULL);
    if (end.pos >= 0 && (size_t)end.pos + 4 <= PL_HEAD_MAX)
        return pl_route(c, (size_t)end.pos + 4);
    if (evbuffer_get_length(in) >= PL_HEAD_MAX)
        return pl_fail(c, 431, "request head larger than %u bytes", PL_HEAD_MAX);
}

static void pl_write_cb(struct bufferevent *bev, void *arg)
{
    struct pl_conn *c = arg;
    if (c->closing)
        return pl_free(c); /* the write callback runs when the output is empty */
    pl_touch(c);
    if (c->owed && c->ch) {
        agentc_grant(c->ch, FRAME_STREAM_OUT, c->owed);
        c->owed = 0;
    }
    if (c->guest_done && evbuffer_get_length(bufferevent_get_output(bev)) == 0) {
        shutdown(bufferevent_getfd(bev), SHUT_WR);
        if (c->client_eof || !c->ch)
            pl_close_after_flush(c);
    }
}

static void pl_event_cb(struct bufferevent *bev, short what, void *arg)
{
    struct pl_conn *c = arg;
    if (c->closing || (what & BEV_EVENT_ERROR))
        return pl_free(c);
    if (!(what & BEV_EVENT_EOF))
        return;
    c->client_eof = true;
    if (!c->piping)
        return pl_free(c); /* gone before a whole head */
    pl_pump_up(c);
    if (c->guest_done && evbuffer_get_length(bufferevent_get_output(bev)) == 0)
        pl_close_after_flush(c);
}

static void pl_timeout(evutil_socket_t fd, short what, void *arg)
{
    struct pl_conn *c = arg;
    if (!c->piping)
        return pl_fail(c, 408, "request head not received within %d s", PL_HEAD_SECS);
    /* Idle both ways: closed hard, as nothing is moving (a client that stopped reading
     * would never let a flush finish). */
    log_info("port.idle", "client=%s", c->addr[0] ? c->addr : "upgraded");
    pl_free(c);
}

/* Reading stops with E2B_HIGH_WATER unread input; the write callback fires when the
 * output is fully flushed (watermark 0). */
static void pl_watch(struct pl_conn *c)
{
    bufferevent_setwatermark(c->bev, EV_READ, 0, E2B_HIGH_WATER);
    bufferevent_setwatermark(c->bev, EV_WRITE, 0, 0);
    bufferevent_setcb(c->bev, pl_read_cb, pl_write_cb, pl_event_cb, c);
    bufferevent_enable(c->bev, EV_READ | EV_WRITE);
}

/* A connection refused before any state: a best-effort 429 in E2B's REST error shape
 * with Retry-After, written straight to the socket, then close. */
static void pl_refuse(evutil_socket_t fd, int64_t retry_s, const char *addr, const char *why)
{
    char body[256], buf[512];
    snprintf(body, sizeof body, "{\"code\":429,\"message\":\"%s from %s; retry in %lld s\"}", why,
             addr, (long long)retry_s);
    int n = snprintf(buf, sizeof buf,
                     "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\nRetry-After: %lld\r\nConnection: close\r\n\r\n%s",
                     strlen(body), (long long)retry_s, body);
    ssize_t w = send(fd, buf, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)w; /* best effort: the client may already be gone */
    shutdown(fd, SHUT_WR);
    evutil_closesocket(fd);
}

static void sockaddr_ip(const struct sockaddr *sa, char *out, size_t cap)
{
    const void *a = sa->sa_family == AF_INET6 ? (const void *)&((const struct sockaddr_in6 *)sa)->sin6_addr
                                              : (const void *)&((const struct sockaddr_in *)sa)->sin_addr;
    if (!inet_ntop(sa->sa_family == AF_INET6 ? AF_INET6 : AF_INET, a, out, (socklen_t)cap))
        snprintf(out, cap, "unknown");
}

/* Whether addr may open one more connection now; else refuses fd (429). */
static bool pl_admit(struct e2b *e, evutil_socket_t fd, const char *addr)
{
    unsigned cap = e->sp->opt.conns_per_client, n = 0;
    for (struct pl_conn *o = pl_all; o && cap; o = o->next)
        n += strcmp(o->addr, addr) == 0;
    if (cap && n >= cap) {
        pl_refuse(fd, 1, addr, "too many open connections");
        return false;
    }
    char key[RL_KEY_MAX];
    snprintf(key, sizeof key, "ip:%s", addr);
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    int64_t wait_ms = pl_rl ? rl_take(pl_rl, key, (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000) : 0;
    if (wait_ms > 0) {
        pl_refuse(fd, (wait_ms + 999) / 1000, addr, "too many new connections");
        return false;
    }
    return true;
}

static void pl_link(struct pl_conn *c)
{
    pl_conns++;
    c->next = pl_all;
    if (pl_all)
        pl_all->prev = c;
    pl_all = c;
}

static void pl_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa,
                      int salen, void *arg)
{
    struct e2b *e = arg;
    struct event_base *base = evconnlistener_get_base(l);
    char addr[48];
    sockaddr_ip(sa, addr, sizeof addr);
    if (!pl_admit(e, fd, addr))
        return;
    struct pl_conn *c = pl_conns < PL_MAX_CONNS ? calloc(1, sizeof *c) : NULL;
    struct bufferevent *bev = c ? bufferevent_socket_new(base, fd, BEV_OPT_CLOSE_ON_FREE) : NULL;
    if (!bev) {
        evutil_closesocket(fd);
        free(c);
        return;
    }
    pl_link(c);
    snprintf(c->addr, sizeof c->addr, "%s", addr);
    c->e = e;
    c->bev = bev;
    c->timer = evtimer_new(base, pl_timeout, c);
    if (!c->timer)
        return pl_free(c);
    struct timeval tv = {.tv_sec = PL_HEAD_SECS};
    evtimer_add(c->timer, &tv);
    pl_watch(c);
}

struct pl_conn *e2b_pipe_adopt(struct bufferevent *bev, struct agentc_chan *ch, void *owned,
                               uint32_t owed)
{
    struct pl_conn *c = pl_conns < PL_MAX_CONNS ? calloc(1, sizeof *c) : NULL;
    if (!c)
        return NULL;
    pl_link(c);
    c->bev = bev;
    c->ch = ch;
    c->timer = evtimer_new(bufferevent_get_base(bev), pl_timeout, c);
    c->owned = owned;
    c->owed = owed;
    c->piping = true;
    c->answered = true;
    pl_watch(c);
    pl_touch(c);
    pl_pump_up(c); /* client bytes that came with the upgrade request */
    if (!evbuffer_get_length(bufferevent_get_output(bev)))
        pl_write_cb(bev, c); /* nothing to flush: return the credit now */
    return c;
}

int e2b_port_listen(struct e2b *e, const char *addr, char *err, size_t errlen)
{
    struct sockaddr_storage ss;
    int sslen = sizeof ss;
    if (evutil_parse_sockaddr_port(addr, (struct sockaddr *)&ss, &sslen) < 0) {
        snprintf(err, errlen, "bad address \"%s\" (want host:port)", addr);
        return -1;
    }
    struct evconnlistener *l = evconnlistener_new_bind(
        e->sp->base, pl_accept, e, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_EXEC,
        128, (struct sockaddr *)&ss, sslen);
    if (!l) {
        snprintf(err, errlen, "cannot listen on %s: %s", addr,
                 evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
        return -1;
    }
    struct rl_config rc = {.rate = e->sp->opt.rate, .burst = e->sp->opt.burst};
    if (e->sp->opt.rate > 0 && !pl_rl && !(pl_rl = rl_new(&rc))) {
        evconnlistener_free(l);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    e->listener = l;
    snprintf(e->port_listen, sizeof e->port_listen, "%s", addr);
    return 0;
}
