/* e2b_portlisten: the sandbox-port listener, getHost(port) as a pipe, and the pipe
 * itself, which e2b_portproxy.c also uses for connections upgraded on spaced's own port
 * (e2b_pipe_adopt).
 *
 * spaced's own port terminates HTTP (each request parsed and re-sent); this listener
 * keeps the client's HTTP/1.1 connection end to end with the guest server, for clients
 * that want that server's HTTP unchanged. It (SPACE_E2B_PORT_LISTEN, with
 * SPACE_E2B_DOMAIN pointing at it so getHost() names it) picks the sandbox and port from
 * the first request head's Host ("<port>-<id>.<domain>") or E2b-Sandbox-Id/
 * E2b-Sandbox-Port, opens an agent `tcp` channel to 127.0.0.1:<port> in the guest and
 * relays the connection: keep-alive (every later request of the connection goes to the
 * same sandbox port), chunked or streamed bodies both ways, and Upgrade (WebSocket)
 * until either side closes. Half-closes are passed on (client FIN -> EOF IN; server
 * FIN -> our FIN once its bytes are flushed).
 *
 * Credentials: no platform secret may reach the guest, in the first request or any
 * later one on the connection, so the client's side is framed, not piped blindly: every
 * request head is parsed (http_head_parse, strict) and re-sent without the credential
 * fields spaced consumes (hh_credential) and without fields the Connection header names
 * for this hop; bodies (Content-Length or chunked, found with http_chunked) pass
 * unchanged. The guest's side is relayed as it comes. A request asking for an Upgrade
 * (or CONNECT) ends the framing: if it was the connection's first request and the
 * guest's answer starts with a 101, the rest of the connection is piped unparsed (it no
 * longer speaks HTTP); otherwise nothing the client sends after it goes up (the guest
 * gets an EOF), since its later heads could not be told from upgraded bytes.
 *
 * Backpressure, both ways bounded: client bytes are read only while the channel's
 * queue is under E2B_HIGH_WATER (bufferevent reading is disabled above it and
 * re-enabled on the channel's drain), and guest bytes are granted back to the agent
 * only while our client output is under E2B_HIGH_WATER (else when it drains).
 *
 * Failures before any byte reached the client are answered as HTTP (400 bad head, 431
 * head too large, 502 unknown sandbox / refused port / agent error, 408 head too slow)
 * with E2B's REST error body, then the connection closes; a bad later head just closes
 * it. Like E2B's public sandbox URLs, no token is needed, unless the sandbox's ports
 * are private (sbx_traffic.c): then the first head must carry its traffic token.
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

#include "clock.h"
#include "daemon/agentc/agentc.h"
#include "http_parse.h"
#include "daemon/http/ratelimit.h"
#include "daemon/sandbox/sbx.h"
#include "daemon/spaced.h"
#include "e2b_internal.h"
#include "http_hdr.h"
#include "log.h"

#define PL_HEAD_MAX   (16u * 1024)   /* first request head, like our HTTP server's */
#define PL_HEAD_SECS  10             /* the head must arrive within this */
#define PL_MAX_CONNS  1024
#define PL_MAX_FIELDS 100            /* header fields per request head */
#define PL_STATUS_LEN 12             /* "HTTP/1.1 101": enough to spot a switch */

/* What the next client bytes are. */
enum pl_up {
    UP_HEAD,       /* a request head (parsed, credentials dropped) */
    UP_LENGTH,     /* up_left body bytes */
    UP_CHUNKED,    /* a chunked body, up_dec finds its end */
    UP_AWAIT,      /* after an upgrade request: held until the guest's status is known */
    UP_OPAQUE,     /* upgraded: bytes piped unparsed */
    UP_STOP,       /* nothing more goes up; client bytes are discarded */
};

struct pl_conn {
    struct e2b *e;             /* the context whose pipe set (e->pipes) holds us */
    struct bufferevent *bev;   /* the client (owned, owns the socket) */
    struct agentc_chan *ch;    /* the guest connection, NULL before routing / after */
    void *owned;               /* e2b_pipe_adopt's forwarding context, freed with us */
    struct event *timer;       /* head deadline, then idle deadline once piping (owned) */
    struct sbx_waiter *wake;   /* waiting for the sandbox's auto-resume (sbx.h), or NULL */
    struct pl_conn *next, *prev; /* e->pipes.all: every connection */
    char addr[48];             /* the client's address; "" for adopted pipes */
    bool piping;               /* routed: bytes flow */
    bool client_eof;           /* client sent FIN (EOF IN sent or queued) */
    bool guest_done;           /* the channel ended (EOF OUT or close) */
    bool answered;             /* some byte went to the client */
    bool closing;              /* flush output, then free */
    bool read_paused;          /* client reading disabled for backpressure */
    uint32_t owed;             /* guest bytes delivered, credit not yet returned */
    char err[200];             /* the agent's error, for a 502 */
    enum pl_up up;             /* client side framing state */
    uint64_t up_left;          /* UP_LENGTH: body bytes still to send */
    struct http_chunked up_dec;/* UP_CHUNKED: decoder, used to find the body's end */
    bool up_upgrade;           /* the request being sent asks to switch protocols */
    bool eof_sent;             /* EOF IN went to the guest */
    unsigned requests;         /* request heads sent up */
    char status[PL_STATUS_LEN];/* the guest's first bytes, to spot a 101 */
    size_t status_len;
};

static void pl_free(struct pl_conn *c)
{
    struct e2b_pipes *set = &c->e->pipes;
    if (c->prev)
        c->prev->next = c->next;
    else if (set->all == c)
        set->all = c->next;
    if (c->next)
        c->next->prev = c->prev;
    if (c->ch)
        agentc_close(c->ch);
    sbx_wake_cancel(c->e->sp, c->wake);
    if (c->timer)
        event_free(c->timer);
    bufferevent_free(c->bev);
    set->n--;
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

static int pl_next_head(struct pl_conn *c);

/* Sends EOF IN to the guest once. */
static void pl_eof_up(struct pl_conn *c)
{
    if (c->ch && !c->eof_sent) {
        c->eof_sent = true;
        agentc_eof(c->ch);
    }
}

/* After the body of an upgrade request: piped unparsed once the guest switched
 * protocols, else closed for further requests (see the header comment). */
static void pl_decide(struct pl_conn *c)
{
    if (c->up != UP_AWAIT || c->status_len < PL_STATUS_LEN)
        return;
    bool switched = memcmp(c->status, "HTTP/1.1 101", PL_STATUS_LEN) == 0 ||
                    memcmp(c->status, "HTTP/1.0 101", PL_STATUS_LEN) == 0;
    c->up = switched && c->requests == 1 ? UP_OPAQUE : UP_STOP;
}

/* The current request's body went up: next comes a head, or the upgrade decision. */
static void pl_body_done(struct pl_conn *c)
{
    c->up = c->up_upgrade ? UP_AWAIT : UP_HEAD;
    pl_decide(c);
}

/* How many of buf[len] belong to the current chunked body; *done once it ended. -1 on a
 * malformed body. */
static ssize_t pl_chunked_span(struct pl_conn *c, const char *buf, size_t len, bool *done)
{
    size_t used = 0;
    *done = false;
    while (used < len) {
        size_t n, off, dlen;
        struct http_parse_error perr;
        enum http_parse_result r = http_chunked_decode(&c->up_dec, buf + used, len - used, &n,
                                                       &off, &dlen, &perr);
        if (r == HTTP_PARSE_ERROR)
            return -1;
        used += n;
        if (r == HTTP_PARSE_OK) {
            *done = true;
            break;
        }
        if (n == 0)
            break;
    }
    return (ssize_t)used;
}

/* A byte moved on a piped connection: its idle deadline starts again. */
static void pl_touch(struct pl_conn *c)
{
    if (c->timer && c->piping && c->e->pipes.idle_s) {
        struct timeval tv = {.tv_sec = c->e->pipes.idle_s};
        evtimer_add(c->timer, &tv);
    }
}

/* Client bytes go to the channel, request by request, while its queue has room. */
static void pl_pump_up(struct pl_conn *c)
{
    struct evbuffer *in = bufferevent_get_input(c->bev);
    while (c->ch && evbuffer_get_length(in) > 0 && agentc_queued(c->ch) < E2B_HIGH_WATER) {
        if (c->up == UP_AWAIT)
            break;
        if (c->up == UP_STOP) {
            evbuffer_drain(in, evbuffer_get_length(in));
            pl_eof_up(c);
            break;
        }
        if (c->up == UP_HEAD) {
            int r = pl_next_head(c);
            if (r < 0)
                return; /* failed: c may be gone */
            if (r == 0)
                break;
            continue;
        }
        struct evbuffer_iovec v;
        if (evbuffer_peek(in, -1, NULL, &v, 1) < 1)
            break;
        size_t n = v.iov_len;
        bool done = false;
        if (c->up == UP_LENGTH) {
            n = n < c->up_left ? n : (size_t)c->up_left;
            done = (c->up_left -= n) == 0;
        } else if (c->up == UP_CHUNKED) {
            ssize_t k = pl_chunked_span(c, v.iov_base, n, &done);
            if (k < 0)
                return pl_fail(c, 400, "malformed chunked request body");
            n = (size_t)k;
        }
        if (n && agentc_write(c->ch, v.iov_base, n) < 0)
            break;
        evbuffer_drain(in, n);
        if (done)
            pl_body_done(c);
    }
    bool pause = c->ch && agentc_queued(c->ch) >= E2B_HIGH_WATER;
    if (pause != c->read_paused) {
        c->read_paused = pause;
        if (pause)
            bufferevent_disable(c->bev, EV_READ);
        else if (!c->client_eof)
            bufferevent_enable(c->bev, EV_READ);
    }
    if (c->client_eof && evbuffer_get_length(in) == 0)
        pl_eof_up(c);
}

/* ---- the guest side ---- */

static void pl_on_data(void *arg, enum frame_stream stream, const uint8_t *buf, size_t len)
{
    struct pl_conn *c = arg;
    struct evbuffer *out = bufferevent_get_output(c->bev);
    if (c->status_len < PL_STATUS_LEN) {
        size_t k = PL_STATUS_LEN - c->status_len < len ? PL_STATUS_LEN - c->status_len : len;
        memcpy(c->status + c->status_len, buf, k);
        c->status_len += k;
    }
    evbuffer_add(out, buf, len);
    c->answered = true;
    pl_touch(c);
    if (evbuffer_get_length(out) > E2B_HIGH_WATER)
        c->owed += (uint32_t)len; /* returned by pl_write_cb as the client drains */
    else
        agentc_grant(c->ch, FRAME_STREAM_OUT, (uint32_t)len);
    if (c->up == UP_AWAIT) {
        pl_decide(c);
        pl_pump_up(c);
    }
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

/* A field's value in a parsed head, or NULL. */
static const char *head_field(const struct http_head *h, const char *name)
{
    for (unsigned i = 0; i < h->nfields; i++)
        if (strcasecmp(h->fields[i].name, name) == 0)
            return h->fields[i].value;
    return NULL;
}

static void pl_read_cb(struct bufferevent *bev, void *arg);

/* The end of an auto-resume wait: the first head, still buffered, is routed again. */
static void pl_woken(struct spaced *sp, bool ok, const struct spaced_err *err, void *arg)
{
    (void)sp;
    struct pl_conn *c = arg;
    c->wake = NULL;
    if (!ok)
        return pl_fail(c, 502, "%s", err->message);
    struct timeval tv = {.tv_sec = PL_HEAD_SECS};
    event_add(c->timer, &tv);
    bufferevent_enable(c->bev, EV_READ);
    pl_read_cb(c->bev, c);
}

/* The connection's first head: pick the sandbox port and open the channel. Returns 1
 * when routed, -1 after answering an error, 0 when the head waits for the sandbox's
 * auto-resume (reading stops; pl_woken routes it again). */
static int pl_route(struct pl_conn *c, const struct http_head *h)
{
    unsigned port = 0;
    char id[STORE_ID_MAX];
    if (!e2b_port_target(head_field(h, "Host"), head_field(h, "E2b-Sandbox-Id"),
                         head_field(h, "E2b-Sandbox-Port"), &port, id, sizeof id)) {
        pl_fail(c, 400, "Host must be <port>-<sandbox id>.<domain>");
        return false;
    }
    /* Private ports: the first head carries the traffic token, which binds the whole
     * connection; without it the answer is the one for an unknown sandbox. */
    struct sbx *s = sbx_find(c->e->sp, NULL, id);
    bool allowed = s && sbx_traffic_allowed(s, head_field(h, HH_TRAFFIC_TOKEN_HEADER));
    struct agentc *a = allowed ? sbx_agent(s) : NULL;
    struct spaced_err werr;
    if (!a && allowed && (c->wake = sbx_wake_wait(c->e->sp, s, pl_woken, c, &werr))) {
        event_del(c->timer); /* the wait has its own bound */
        bufferevent_disable(c->bev, EV_READ);
        return 0;
    }
    if (!a) {
        pl_fail(c, 502, "sandbox %.64s is not running", id);
        return -1;
    }
    char why[128];
    c->ch = agentc_open_tcp(a, NULL, port, &e2b_pipe_chan_ops, c, AGENTC_MANUAL_CREDIT, why, sizeof why);
    if (!c->ch) {
        pl_fail(c, 502, "cannot reach the sandbox: %s", why);
        return -1;
    }
    c->piping = true;
    event_del(c->timer);
    pl_touch(c);
    return 1;
}

/* The head re-serialised for the guest without credentials or the fields Connection
 * names for this hop (Connection, Upgrade and the framing fields stay: they are the
 * guest server's business on this end-to-end connection). Caller frees. */
static char *pl_clean_head(const struct http_head *h, size_t *outlen)
{
    /* Sized from the parsed parts: "name:value" comes out as "name: value". */
    size_t cap = strlen(h->method) + strlen(h->target) + 16;
    for (unsigned i = 0; i < h->nfields; i++)
        cap += strlen(h->fields[i].name) + strlen(h->fields[i].value) + 4;
    char *out = malloc(cap + 3);
    if (!out)
        return NULL;
    const char *connection = head_field(h, "Connection");
    size_t n = (size_t)snprintf(out, cap, "%s %s HTTP/1.%d\r\n", h->method, h->target,
                                h->version_minor);
    for (unsigned i = 0; i < h->nfields; i++) {
        const char *name = h->fields[i].name;
        if (hh_credential(name) || (hh_hop_by_hop(name, connection) && !hh_hop_by_hop(name, NULL)))
            continue;
        n += (size_t)snprintf(out + n, cap + 3 - n, "%s: %s\r\n", name, h->fields[i].value);
    }
    n += (size_t)snprintf(out + n, cap + 3 - n, "\r\n");
    *outlen = n;
    return out;
}

/* The next request head, when complete in the input: routes the connection (first
 * head), sends the cleaned head up and sets the body's framing. Returns 1 when sent, 0
 * when more bytes are needed, -1 after failing the connection. */
static int pl_next_head(struct pl_conn *c)
{
    static const struct http_parse_limits lim = {
        .max_header_bytes = PL_HEAD_MAX, .max_target_bytes = PL_HEAD_MAX, .max_headers = PL_MAX_FIELDS};
    struct evbuffer *in = bufferevent_get_input(c->bev);
    struct evbuffer_ptr end = evbuffer_search(in, "\r\n\r\n", 4, NULL);
    if (end.pos < 0 || (size_t)end.pos + 4 > PL_HEAD_MAX) {
        if (end.pos < 0 && evbuffer_get_length(in) < PL_HEAD_MAX)
            return 0;
        pl_fail(c, 431, "request head larger than %u bytes", PL_HEAD_MAX);
        return -1;
    }
    size_t head_len = (size_t)end.pos + 4;
    char *raw = malloc(head_len);
    struct http_head h = {0};
    struct http_parse_error perr = {.status = 500, .message = "out of memory"};
    if (!raw || (evbuffer_copyout(in, raw, head_len),
                 http_head_parse(raw, head_len, &lim, &h, &perr) != HTTP_PARSE_OK)) {
        free(raw);
        pl_fail(c, perr.status, "not an HTTP/1.x request: %s", perr.message);
        return -1;
    }
    free(raw);
    size_t n = 0;
    char *clean = NULL;
    int routed = c->piping ? 1 : pl_route(c, &h);
    if (routed <= 0) {
        http_head_free(&h);
        return routed;
    }
    if (!(clean = pl_clean_head(&h, &n))) {
        http_head_free(&h);
        pl_fail(c, 500, "out of memory");
        return -1;
    }
    agentc_write(c->ch, clean, n);
    free(clean);
    evbuffer_drain(in, head_len);
    c->requests++;
    c->up_upgrade = strcmp(h.method, "CONNECT") == 0 ||
                    e2b_is_upgrade(head_field(&h, "Connection"), head_field(&h, "Upgrade"));
    if (h.chunked) {
        c->up = UP_CHUNKED;
        http_chunked_init(&c->up_dec);
    } else if (h.content_length > 0) {
        c->up = UP_LENGTH;
        c->up_left = (uint64_t)h.content_length;
    } else {
        pl_body_done(c);
    }
    http_head_free(&h);
    return 1;
}

static void pl_read_cb(struct bufferevent *bev, void *arg)
{
    struct pl_conn *c = arg;
    if (c->closing)
        return;
    if (!c->piping && pl_next_head(c) <= 0)
        return;
    pl_touch(c);
    pl_pump_up(c);
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
    for (struct pl_conn *o = e->pipes.all; o && cap; o = o->next)
        n += strcmp(o->addr, addr) == 0;
    if (cap && n >= cap) {
        pl_refuse(fd, 1, addr, "too many open connections");
        return false;
    }
    char key[RL_KEY_MAX];
    snprintf(key, sizeof key, "ip:%s", addr);
    struct rl_table *rl = e->pipes.rl;
    int64_t wait_ms = rl ? rl_take(rl, key, clock_mono_ms()) : 0;
    if (wait_ms > 0) {
        pl_refuse(fd, (wait_ms + 999) / 1000, addr, "too many new connections");
        return false;
    }
    return true;
}

/* A new pipe of e's set (NULL when the set is full or out of memory). */
static struct pl_conn *pl_new(struct e2b *e)
{
    struct e2b_pipes *set = &e->pipes;
    struct pl_conn *c = set->n < PL_MAX_CONNS ? calloc(1, sizeof *c) : NULL;
    if (!c)
        return NULL;
    c->e = e;
    set->n++;
    c->next = set->all;
    if (set->all)
        set->all->prev = c;
    set->all = c;
    return c;
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
    struct bufferevent *bev = bufferevent_socket_new(base, fd, BEV_OPT_CLOSE_ON_FREE);
    struct pl_conn *c = bev ? pl_new(e) : NULL;
    if (!c) {
        if (bev)
            bufferevent_free(bev);
        else
            evutil_closesocket(fd);
        return;
    }
    snprintf(c->addr, sizeof c->addr, "%s", addr);
    c->bev = bev;
    c->timer = evtimer_new(base, pl_timeout, c);
    if (!c->timer)
        return pl_free(c);
    struct timeval tv = {.tv_sec = PL_HEAD_SECS};
    evtimer_add(c->timer, &tv);
    pl_watch(c);
}

struct pl_conn *e2b_pipe_adopt(struct e2b *e, struct bufferevent *bev, struct agentc_chan *ch,
                               void *owned, uint32_t owed)
{
    struct pl_conn *c = e ? pl_new(e) : NULL;
    if (!c)
        return NULL;
    c->bev = bev;
    c->ch = ch;
    c->timer = evtimer_new(bufferevent_get_base(bev), pl_timeout, c);
    c->owned = owned;
    c->owed = owed;
    c->piping = true;
    c->answered = true;
    c->up = UP_OPAQUE; /* already switched protocols */
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
    if (e->sp->opt.rate > 0 && !e->pipes.rl && !(e->pipes.rl = rl_new(&rc))) {
        evconnlistener_free(l);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    e->listener = l;
    snprintf(e->port_listen, sizeof e->port_listen, "%s", addr);
    return 0;
}

void e2b_pipes_free(struct e2b *e)
{
    if (e->listener)
        evconnlistener_free(e->listener);
    e->listener = NULL;
    while (e->pipes.all) {
        e->pipes.all->ch = NULL;   /* freed with its agent connection, without a callback */
        e->pipes.all->wake = NULL; /* ended (and freed) with the sandbox table */
        pl_free(e->pipes.all);
    }
    rl_free(e->pipes.rl);
    e->pipes.rl = NULL;
}
