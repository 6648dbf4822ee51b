/* e2b_portproxy: getHost(port) on spaced's own HTTP port. A request whose Host is
 * "<port>-<id>.<domain>" (or that carries E2b-Sandbox-Id plus E2b-Sandbox-Port !=
 * 49983) is forwarded to 127.0.0.1:<port> inside the sandbox over an agent `tcp`
 * channel, one channel per request.
 *
 * Our HTTP server terminates the client's HTTP (so keep-alive and pipelining with the
 * client are its business); upstream each request is HTTP/1.1 with Connection: close.
 * Bodies stream both ways under backpressure, nothing is held whole: the request body
 * is read from the client only while the channel's queue is below E2B_HIGH_WATER
 * (re-chunked if the client sent it chunked), and the response body is granted to the
 * guest only as our client accepts it. Response framing is Content-Length, chunked
 * (decoded here, re-framed by our server) or end-of-connection. Response heads are
 * bounded (PROXY_HEAD_MAX) and parsed by the shared strict parser (http_resp_parse:
 * ambiguous framing from the guest's server is a 502, as it is a 400 from a client). A
 * response cut short (the guest's server closes or resets
 * before the declared length or the last chunk, or sends a malformed chunk) aborts our
 * client's connection (http_reply_abort), so the client sees an error rather than a
 * complete-looking response.
 *
 * Upgrade (WebSocket, or any protocol): the request goes up with its Connection: Upgrade
 * and Upgrade fields; if the guest answers 101, our server answers 101 with the guest's
 * end-to-end headers (Sec-WebSocket-Accept, ...) and hands the connection over
 * (http_req_upgrade); from then on e2b_portlisten.c's byte pipe carries it both ways
 * under backpressure, with this struct left as the channel's callback forwarder. Guest
 * bytes arriving between the 101 and the hand-over are kept (their credit is held, so
 * they are bounded by the agent's initial window). Any other answer is relayed as a
 * normal response. Like E2B's public sandbox URLs, these requests need no token, unless
 * the sandbox's ports are private (sbx_traffic.c): then its traffic token, and without
 * it the answer is the one for an unknown sandbox.
 *
 * No platform secret reaches the guest: request_head drops every credential spaced
 * consumes and every hop-by-hop field (http_hdr.h), on both routes. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>

#include "daemon/agentc/agentc.h"
#include "http_parse.h"
#include "daemon/sandbox/sbx.h"
#include "e2b.h"
#include "e2b_internal.h"
#include "http_hdr.h"

#define PROXY_HEAD_MAX (64u * 1024)

/* How the response body ends. */
enum pxy_body {
    BODY_LENGTH,   /* Content-Length bytes */
    BODY_CHUNKED,  /* chunked: decoded with http_chunked */
    BODY_EOF,      /* until the server closes */
};

struct pxy {
    struct e2b *e;            /* its pipe set takes the connection after an upgrade */
    struct http_req *req;     /* NULL once our reply finished or the client went away */
    struct agentc_chan *ch;   /* NULL once closed */
    unsigned port;
    bool api;                 /* errors in our API's shape (e2b_port_forward), not E2B's */
    bool upgrade;             /* the client asked for a protocol upgrade */
    bool upgrading;           /* 101 sent, waiting for the connection hand-over */
    bool guest_eof;           /* upgrading: the guest's server half-closed */
    bool chan_gone;           /* upgrading: the channel ended */
    struct evbuffer *early;   /* upgrading: guest bytes after the 101 head (owned) */
    struct pl_conn *pipe;     /* after the hand-over: the pipe that owns us */
    bool chunk_up;            /* re-chunk the request body upstream */
    bool body_paused;         /* request body paused until the channel drains */
    char *head;               /* response head being collected (owned) */
    size_t headlen;
    bool started;             /* response head sent to our client */
    enum pxy_body mode;
    uint64_t left;            /* BODY_LENGTH: bytes still to relay */
    struct http_chunked dec;  /* BODY_CHUNKED decoder */
    uint32_t owed;            /* response bytes delivered, credit not yet given back */
    bool waiting;             /* a drain callback is registered */
    char err[200];            /* the agent's error, for the 502 */
};

static void pxy_release(struct pxy *p)
{
    if (p->req || p->ch || p->upgrading || p->pipe)
        return;
    free(p->head);
    if (p->early)
        evbuffer_free(p->early);
    free(p);
}

static void pxy_close_chan(struct pxy *p)
{
    if (p->ch) {
        agentc_close(p->ch);
        p->ch = NULL;
    }
}

/* A 502 before any byte of the reply, in the caller's error shape. */
static void reply_502(struct http_req *req, bool api, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void reply_502(struct http_req *req, bool api, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (api)
        http_reply_error(req, 502, "port_unreachable", "%s", msg);
    else
        e2b_reply_rest_error(req, 502, "%s", msg);
}

/* The response is complete, or (complete == false) cannot continue: finish our
 * reply, or abort it if it started, and drop the channel. */
static void pxy_finish(struct pxy *p, const char *why, bool complete)
{
    struct http_req *req = p->req;
    p->req = NULL;
    if (req && p->started && complete)
        http_stream_end(req);
    else if (req && p->started)
        http_reply_abort(req, why);
    else if (req)
        reply_502(req, p->api, "port %u in the sandbox: %s", p->port, why);
    pxy_close_chan(p);
}

/* Response fields not relayed: hop-by-hop ones, and those our server sets itself. */
static bool response_skip(const char *name)
{
    static const char *const ours[] = {"Content-Length", "Content-Type", "Date",
                                       "Proxy-Authenticate"};
    for (size_t i = 0; i < sizeof ours / sizeof ours[0]; i++)
        if (strcasecmp(name, ours[i]) == 0)
            return true;
    return hh_hop_by_hop(name, NULL);
}

static void pxy_upgraded(struct bufferevent *bev, void *arg);

/* Starts our reply from the guest server's parsed response head. Returns as
 * start_reply does. */
static int start_reply_head(struct pxy *p, const struct http_head *h)
{
    int status = h->status;
    if (status == 101 && !p->upgrade)
        return -1;
    if (status < 200 && status != 101)
        return 1;
    const char *ctype = http_head_field(h, "Content-Type");
    const char *upgrade = http_head_field(h, "Upgrade");
    long long clen = h->chunked || h->until_close ? -1 : h->content_length;
    bool chunked = h->chunked;
    for (unsigned i = 0; i < h->nfields; i++)
        if (!response_skip(h->fields[i].name))
            http_reply_add_header(p->req, h->fields[i].name, h->fields[i].value);
    if (status == 101) {
        if (ctype)
            http_reply_add_header(p->req, "Content-Type", ctype);
        if (!upgrade || !(p->early = evbuffer_new()) ||
            http_req_upgrade(p->req, upgrade, pxy_upgraded, p) < 0)
            return -1;
        p->req = NULL; /* finished by the upgrade */
        p->upgrading = true;
        return 2;
    }
    bool bodiless = http_req_is_head(p->req) || status == 204 || status == 304;
    p->mode = bodiless ? BODY_LENGTH : chunked ? BODY_CHUNKED : clen >= 0 ? BODY_LENGTH : BODY_EOF;
    p->left = bodiless ? 0 : clen >= 0 ? (uint64_t)clen : 0;
    /* A HEAD answer keeps the server's framing headers (our server sends no body). */
    if (http_stream_start(p->req, status, ctype, chunked ? -1 : clen) < 0)
        return -1;
    p->started = true;
    return 0;
}

/* Parses the response head in p->head[0..head_end) (head_end: where "\r\n\r\n"
 * starts) with the shared strict parser (so a guest server's ambiguous framing, such as
 * CL+TE, two Content-Lengths, a coding other than chunked, obs-fold or bare LF, is
 * refused as our own server refuses it) and starts our reply. Returns 1 if it was an
 * interim 1xx head to skip, 0 when the reply started, 2 when the connection is being
 * upgraded, -1 if malformed. */
static int start_reply(struct pxy *p, size_t head_end)
{
    static const struct http_parse_limits lim = {.max_header_bytes = PROXY_HEAD_MAX,
                                                 .max_target_bytes = PROXY_HEAD_MAX,
                                                 .max_headers = PROXY_HEAD_MAX};
    struct http_head h;
    struct http_parse_error err;
    if (http_resp_parse(p->head, head_end + 4, &lim, &h, &err) != HTTP_PARSE_OK)
        return -1;
    int r = start_reply_head(p, &h);
    http_head_free(&h);
    return r;
}

static void pxy_drain(struct http_req *req, void *arg)
{
    struct pxy *p = arg;
    p->waiting = false;
    if (p->ch && p->owed) {
        agentc_grant(p->ch, FRAME_STREAM_OUT, p->owed);
        p->owed = 0;
    }
}

static int relay(struct pxy *p, const uint8_t *buf, size_t len)
{
    if (len && http_stream_write(p->req, buf, len) < 0)
        return -1;
    if (http_stream_pending(p->req) > E2B_HIGH_WATER && !p->waiting) {
        p->waiting = true;
        http_stream_on_drain(p->req, pxy_drain, p);
    }
    return 0;
}

/* Body bytes of the response, framed per p->mode. May finish the reply. */
static void body_bytes(struct pxy *p, const uint8_t *buf, size_t len)
{
    if (p->mode == BODY_EOF) {
        if (relay(p, buf, len) < 0)
            pxy_finish(p, "cannot relay", false);
        return;
    }
    if (p->mode == BODY_LENGTH) {
        size_t n = len < p->left ? len : (size_t)p->left;
        p->left -= n;
        if (relay(p, buf, n) < 0)
            pxy_finish(p, "cannot relay", false);
        else if (p->left == 0)
            pxy_finish(p, "done", true);
        return;
    }
    while (len && p->req) {
        size_t used, off, dlen;
        struct http_parse_error perr;
        enum http_parse_result r = http_chunked_decode(&p->dec, (const char *)buf, len, &used,
                                                       &off, &dlen, &perr);
        if (r == HTTP_PARSE_ERROR || (dlen && relay(p, buf + off, dlen) < 0))
            return pxy_finish(p, "malformed chunked response", false);
        if (r == HTTP_PARSE_OK)
            return pxy_finish(p, "done", true);
        if (used == 0)
            return;
        buf += used;
        len -= used;
    }
}

static void response_bytes(struct pxy *p, const uint8_t *buf, size_t len)
{
    uint32_t n = (uint32_t)len;
    if (p->started) {
        body_bytes(p, buf, len);
    } else {
        if (p->headlen + len > PROXY_HEAD_MAX)
            return pxy_finish(p, "response head too large", false);
        memcpy(p->head + p->headlen, buf, len);
        p->headlen += len;
        char *end;
        while (!p->started && (end = memmem(p->head, p->headlen, "\r\n\r\n", 4))) {
            size_t head_end = (size_t)(end - p->head), rest = p->headlen - head_end - 4;
            int r = start_reply(p, head_end);
            if (r < 0)
                return pxy_finish(p, "the server's response is not HTTP/1.x", false);
            memmove(p->head, p->head + head_end + 4, rest);
            p->headlen = rest;
            if (r == 2) {
                evbuffer_add(p->early, p->head, rest);
                p->headlen = 0;
                break;
            }
            if (r == 0) {
                if (p->mode == BODY_LENGTH && p->left == 0)
                    return pxy_finish(p, "done", true);
                body_bytes(p, (const uint8_t *)p->head, rest);
            }
        }
    }
    if (!p->ch)
        return;
    if (p->waiting || p->upgrading)
        p->owed += n;
    else
        agentc_grant(p->ch, FRAME_STREAM_OUT, n);
}

/* Callbacks that may finish the exchange release p at their end (pxy_finish closes
 * the channel without a callback, so nobody else would). */
static void on_data(void *arg, enum frame_stream stream, const uint8_t *buf, size_t len)
{
    struct pxy *p = arg;
    if (p->pipe)
        return e2b_pipe_chan_ops.on_data(p->pipe, stream, buf, len);
    if (p->upgrading) {
        evbuffer_add(p->early, buf, len);
        p->owed += (uint32_t)len;
        return;
    }
    if (p->req)
        response_bytes(p, buf, len);
    pxy_release(p);
}

static void on_error(void *arg, const char *code, const char *message)
{
    struct pxy *p = arg;
    if (p->pipe)
        return e2b_pipe_chan_ops.on_error(p->pipe, code, message);
    if (!p->err[0])
        snprintf(p->err, sizeof p->err, "%s (%s)", message, code);
}

/* The server closed (EOF) or the channel ended: end-of-connection bodies end here;
 * anything else was cut short. */
static void on_eof(void *arg, enum frame_stream stream)
{
    struct pxy *p = arg;
    if (p->pipe)
        return e2b_pipe_chan_ops.on_eof(p->pipe, stream);
    p->guest_eof = true;
    if (p->req)
        pxy_finish(p, p->err[0] ? p->err : p->started ? "the server closed mid-response"
                                                       : "the server closed without a response",
                   p->started && p->mode == BODY_EOF && !p->err[0]);
    pxy_release(p);
}

static void on_close(void *arg)
{
    struct pxy *p = arg;
    if (p->pipe)
        return e2b_pipe_chan_ops.on_close(p->pipe); /* may free p */
    p->ch = NULL;
    p->chan_gone = true;
    if (p->req)
        pxy_finish(p, p->err[0] ? p->err : "the connection ended",
                   p->started && p->mode == BODY_EOF && p->guest_eof && !p->err[0]);
    pxy_release(p);
}

/* The channel took queued request bytes: read more of the client's body. */
static void on_drain(void *arg)
{
    struct pxy *p = arg;
    if (p->pipe)
        return e2b_pipe_chan_ops.on_drain(p->pipe);
    if (p->body_paused && p->req) {
        p->body_paused = false;
        http_req_pause_body(p->req, false);
    }
}

static const struct agentc_chan_ops pxy_ops = {
    .on_data = on_data,
    .on_eof = on_eof,
    .on_error = on_error,
    .on_close = on_close,
    .on_drain = on_drain,
};

/* Our server handed the upgraded client connection over (bev NULL: the client went
 * away first). The pipe takes the connection, the channel and p. */
static void pxy_upgraded(struct bufferevent *bev, void *arg)
{
    struct pxy *p = arg;
    p->upgrading = false;
    struct pl_conn *pipe = NULL;
    if (bev) {
        evbuffer_add_buffer(bufferevent_get_output(bev), p->early);
        pipe = e2b_pipe_adopt(p->e, bev, p->ch, p, p->owed);
        if (!pipe)
            bufferevent_free(bev);
    }
    if (!pipe) {
        pxy_close_chan(p);
        return pxy_release(p);
    }
    p->pipe = pipe;
    p->owed = 0;
    free(p->head);
    p->head = NULL;
    evbuffer_free(p->early);
    p->early = NULL;
    /* What the guest did meanwhile, replayed in order; either may free p. */
    if (p->chan_gone)
        e2b_pipe_chan_ops.on_close(pipe);
    else if (p->guest_eof)
        e2b_pipe_chan_ops.on_eof(pipe, FRAME_STREAM_OUT);
}

static void on_http_close(struct http_req *req, void *arg)
{
    struct pxy *p = arg;
    p->req = NULL;
    pxy_close_chan(p);
    pxy_release(p);
}

static void on_body_chunk(struct http_req *req, const char *data, size_t len, void *arg)
{
    struct pxy *p = arg;
    if (!p->ch)
        return;
    if (p->chunk_up) {
        char size[24];
        int k = snprintf(size, sizeof size, "%zx\r\n", len);
        agentc_write(p->ch, size, (size_t)k);
        agentc_write(p->ch, data, len);
        agentc_write(p->ch, "\r\n", 2);
    } else {
        agentc_write(p->ch, data, len);
    }
    if (agentc_queued(p->ch) > E2B_HIGH_WATER && !p->body_paused) {
        p->body_paused = true;
        http_req_pause_body(req, true);
    }
}

static void on_body_end(struct http_req *req, void *arg)
{
    struct pxy *p = arg;
    if (p->ch && p->chunk_up)
        agentc_write(p->ch, "0\r\n\r\n", 5);
}

/* The request re-serialised for the guest server with `target`: HTTP/1.1,
 * Connection: close, or Connection: Upgrade with the client's Upgrade field when
 * `upgrade`. No platform secret goes up (hh_credential: API keys in every form, the
 * node token a control adds, E2B's access and traffic tokens), nor hop-by-hop fields,
 * E2B's routing headers (E2b-*) or Expect (our server answered it); framing is ours. */
static char *request_head(struct http_req *req, const char *target, bool chunked, bool upgrade,
                          size_t *outlen)
{
    size_t cap = 1024 + strlen(target);
    const char *name, *value, *connection = http_req_header(req, "Connection");
    for (unsigned i = 0; http_req_header_at(req, i, &name, &value); i++)
        cap += strlen(name) + strlen(value) + 4;
    char *h = malloc(cap);
    if (!h)
        return NULL;
    size_t n = (size_t)snprintf(h, cap, "%s %s HTTP/1.1\r\n", http_req_method(req), target);
    for (unsigned i = 0; http_req_header_at(req, i, &name, &value); i++) {
        if (hh_hop_by_hop(name, connection) || hh_credential(name) ||
            strncasecmp(name, "E2b-", 4) == 0 || strcasecmp(name, "Expect") == 0 ||
            strcasecmp(name, "Content-Length") == 0)
            continue;
        n += (size_t)snprintf(h + n, cap - n, "%s: %s\r\n", name, value);
    }
    if (chunked)
        n += (size_t)snprintf(h + n, cap - n, "Transfer-Encoding: chunked\r\n");
    else if (http_req_content_length(req) > 0)
        n += (size_t)snprintf(h + n, cap - n, "Content-Length: %lld\r\n",
                              (long long)http_req_content_length(req));
    if (upgrade)
        n += (size_t)snprintf(h + n, cap - n, "Connection: Upgrade\r\nUpgrade: %s\r\n\r\n",
                              http_req_header(req, "Upgrade"));
    else
        n += (size_t)snprintf(h + n, cap - n, "Connection: close\r\n\r\n");
    *outlen = n;
    return h;
}

bool e2b_is_upgrade(const char *connection, const char *upgrade)
{
    if (!connection || !upgrade)
        return false;
    for (const char *c = connection; (c = strcasestr(c, "upgrade")); c += 7) {
        bool start = c == connection || c[-1] == ',' || c[-1] == ' ' || c[-1] == '\t';
        bool end = !c[7] || c[7] == ',' || c[7] == ' ' || c[7] == '\t';
        if (start && end)
            return true;
    }
    return false;
}

void e2b_port_proxy(struct e2b *e, struct http_req *req, const char *id, unsigned port)
{
    /* A private sandbox without its traffic token gets the unknown sandbox's answer. */
    struct sbx *s = sbx_find(e->sp, NULL, id);
    struct agentc *a = s && sbx_traffic_allowed(s, http_req_header(req, HH_TRAFFIC_TOKEN_HEADER))
                           ? sbx_agent(s) : NULL;
    if (!a) {
        e2b_reply_rest_error(req, 502, "sandbox %s is not running", id);
        return;
    }
    e2b_port_forward(e, req, a, port, http_req_target(req), false);
}

void e2b_port_forward(struct e2b *e, struct http_req *req, struct agentc *a, unsigned port,
                      const char *target, bool api)
{
    struct pxy *p = calloc(1, sizeof *p);
    if (p)
        p->e = e;
    char why[128] = "out of memory";
    if (!p || !(p->head = malloc(PROXY_HEAD_MAX + 1)) ||
        !(p->ch = agentc_open_tcp(a, NULL, port, &pxy_ops, p, AGENTC_MANUAL_CREDIT, why,
                                  sizeof why))) {
        if (p)
            free(p->head);
        free(p);
        reply_502(req, api, "cannot reach the sandbox: %s", why);
        return;
    }
    p->api = api;
    p->req = req;
    p->port = port;
    p->chunk_up = http_req_chunked(req);
    p->upgrade = e2b_is_upgrade(http_req_header(req, "Connection"), http_req_header(req, "Upgrade"));
    size_t hl = 0;
    char *head = request_head(req, target, p->chunk_up, p->upgrade, &hl);
    if (!head) {
        pxy_finish(p, "out of memory", false);
        return pxy_release(p);
    }
    agentc_write(p->ch, head, hl);
    free(head);
    http_req_on_close(req, on_http_close, p);
    if ((p->chunk_up || http_req_content_length(req) > 0) &&
        http_req_stream_body(req, on_body_chunk, on_body_end, p) < 0) {
        http_req_on_close(req, NULL, NULL);
        pxy_finish(p, "request body already consumed", false);
        pxy_release(p);
    }
}
