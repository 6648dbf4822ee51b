/* gw_conn.c: the transparent TCP proxy for ports 80 and 443; see gw_conn.h. */
#include "gw_conn.h"

#include <arpa/inet.h>
#include <event2/buffer.h>
#include <linux/netfilter_ipv4.h>
#include <netinet/in.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"

#define HELLO_TIMEOUT_S 10         /* HELLO..CONNECT must finish within this */
#define IDLE_TIMEOUT_S 600         /* an OPEN connection silent this long is closed */
#define PIPE_HIGH (256 * 1024)     /* per direction buffering before back-pressure */
#define PIPE_CHUNK (128 * 1024)    /* bytes per read/write syscall when splicing */
#define GW_REFRAME_MAX (1024 * 1024) /* largest chunked request body re-framed (413 above) */
#define GW_STATUS_LINE_MAX 1024    /* an upgrade answer's status line longer than this: not 101 */

static void conn_dial(struct gw_conn *c, const struct gw_cache_entry *e);
static void up_to_down(struct gw_conn *c, bool flush);

void gw_conn_free(struct gw_conn *c, bool reset)
{
    struct gw_sandbox *sb = c->sb;
    if (c->prev)
        c->prev->next = c->next;
    else
        sb->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    sb->nconns--;
    gw_lookup_cancel(c->lookup);
    if (c->timer)
        event_free(c->timer);
    if (reset) {
        struct linger l = {.l_onoff = 1, .l_linger = 0};
        setsockopt(c->down_fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    }
    if (c->up)
        bufferevent_free(c->up);
    bufferevent_free(c->down);
    if (c->cred_value) {
        OPENSSL_cleanse(c->cred_value, strlen(c->cred_value));
        free(c->cred_value);
    }
    if (c->held_head)
        evbuffer_free(c->held_head);
    if (c->held_body)
        evbuffer_free(c->held_body);
    gw_scrub_free(c->scrub);
    free(c);
}

void gw_conn_deny(struct gw_conn *c, const char *reason, int status)
{
    gw_decide(c->sb, c->mitm ? "mitm" : c->tls ? "tls" : "http", false, c->name, reason,
              c->orig_dst, c->port);
    bool http_ok = status > 0 && (!c->tls || c->mitm);
    if (!http_ok) {
        gw_conn_free(c, true);
        return;
    }
    /* Whatever the upstream was sending is dropped: the guest gets our answer only. */
    if (c->up) {
        bufferevent_free(c->up);
        c->up = NULL;
    }
    const char *text = status == 403 ? "Forbidden" : status == 421 ? "Misdirected Request"
                     : status == 413 ? "Content Too Large"
                     : status == 431 ? "Request Header Fields Too Large"
                     : status == 502 ? "Bad Gateway" : "Bad Request";
    char body[GW_REASON_MAX + 32];
    int blen = snprintf(body, sizeof body, "space-gateway: %.*s\n", GW_REASON_MAX, reason);
    evbuffer_add_printf(bufferevent_get_output(c->down),
                        "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n"
                        "Connection: close\r\n\r\n%s", status, text, blen, body);
    c->state = CS_CLOSING;
    bufferevent_disable(c->down, EV_READ);
    bufferevent_setwatermark(c->down, EV_WRITE, 0, 0);
    bufferevent_setcb(c->down, NULL, gw_conn_write_done, gw_conn_down_event, c);
}

/* Moves what src received to dst, pausing src while dst has too much queued. */
static void pipe_bytes(struct bufferevent *src, struct bufferevent *dst)
{
    struct evbuffer *out = bufferevent_get_output(dst);
    evbuffer_add_buffer(out, bufferevent_get_input(src));
    if (evbuffer_get_length(out) >= PIPE_HIGH) {
        bufferevent_disable(src, EV_READ);
        bufferevent_setwatermark(dst, EV_WRITE, PIPE_HIGH / 2, 0);
    }
}

static bool host_matches(const struct gw_conn *c, const struct gwhttp_req *r)
{
    return strcmp(r->host, c->name) == 0 && (r->port == 0 || r->port == c->port);
}

/* The connection's name is known: check it, then dial from the sandbox's cache or
 * resolve first. (On 443 a refusal is a reset: gw_conn_deny ignores the status.) */
static void conn_start(struct gw_conn *c)
{
    const struct gw_cache_entry *e;
    if (!policy_name_may_resolve(&c->sb->policy, c->name)) {
        gw_conn_deny(c, "policy", 403);
    } else if ((e = gw_cache_get(c->sb, c->name))) {
        conn_dial(c, e);
    } else {
        c->state = CS_RESOLVE;
        c->lookup = gw_resolve(c->sb, c->name, gw_conn_resolved, c);
        if (!c->lookup)
            gw_conn_deny(c, "resolver_unavailable", 502);
    }
}

/* Writes the request head the gateway parsed to out, as it will be forwarded: the
 * request line and the guest's header lines minus those the gateway replaces
 * (Transfer-Encoding when the body is re-framed; on the credential path every copy of
 * the credential header and Accept-Encoding, so an echo comes back uncompressed where
 * the scrubber can see it), plus the replacements, up to but without the blank line. */
static void http_emit_head(const struct gw_conn *c, const char *head, const struct gwhttp_req *r,
                           struct evbuffer *out)
{
    size_t first = r->nheaders ? r->headers[0].off : r->head_len - 2;
    evbuffer_add(out, head, first);
    for (size_t i = 0; i < r->nheaders; i++) {
        const struct gwhttp_header *h = &r->headers[i];
        if ((r->chunked && gwhttp_header_is(head, h, "Transfer-Encoding")) ||
            (c->mitm && (gwhttp_header_is(head, h, c->cred_header) ||
                         gwhttp_header_is(head, h, "Accept-Encoding"))))
            continue;
        evbuffer_add(out, head + h->off, h->len);
    }
    if (c->mitm)
        evbuffer_add_printf(out, "%s: %s\r\nAccept-Encoding: identity\r\n", c->cred_header,
                            c->cred_value);
}

/* A request body being forwarded: with Content-Length as it comes; a chunked body is
 * decoded into c->held_body and sent, with its head, framed by Content-Length once
 * complete (an upstream that ignores Transfer-Encoding must not find a request the
 * gateway did not parse in chunk data). Returns false if c was freed. */
static bool http_body(struct gw_conn *c, struct evbuffer *in)
{
    struct evbuffer_iovec v;
    if (evbuffer_peek(in, -1, NULL, &v, 1) < 1)
        return true;
    size_t used = 0, data = 0;
    enum gwhttp_body_result br = gwhttp_body_next(&c->body, v.iov_base, v.iov_len, &used, &data);
    if (c->held_head) {
        evbuffer_drain(in, used - data);
        evbuffer_remove_buffer(in, c->held_body, data);
    } else {
        evbuffer_remove_buffer(in, bufferevent_get_output(c->up), used);
    }
    if (br == GWHTTP_BODY_BAD) {
        gw_conn_deny(c, "bad_body_framing", 400);
        return false;
    }
    if (c->held_head && evbuffer_get_length(c->held_body) > GW_REFRAME_MAX) {
        gw_conn_deny(c, "chunked_body_too_large", 413);
        return false;
    }
    c->in_body = br == GWHTTP_BODY_MORE;
    if (!c->in_body && c->held_head) {
        struct evbuffer *out = bufferevent_get_output(c->up);
        evbuffer_add_buffer(out, c->held_head);
        evbuffer_add_printf(out, "Content-Length: %zu\r\n\r\n", evbuffer_get_length(c->held_body));
        evbuffer_add_buffer(out, c->held_body);
        evbuffer_free(c->held_head);
        evbuffer_free(c->held_body);
        c->held_head = c->held_body = NULL;
    }
    return true;
}

/* HTTP: checks and forwards every request head, frames bodies. After a request that
 * asks for an upgrade nothing more is read until the upstream answered it: only a 101
 * turns the connection into an opaque stream (gw_conn_up_read). */
static void http_pump(struct gw_conn *c)
{
    struct evbuffer *in = bufferevent_get_input(c->down);
    while (evbuffer_get_length(in) > 0) {
        if (c->await_upgrade && !c->in_body)
            return;
        if (c->state == CS_OPEN &&
            evbuffer_get_length(bufferevent_get_output(c->up)) >= PIPE_HIGH) {
            bufferevent_disable(c->down, EV_READ);
            bufferevent_setwatermark(c->up, EV_WRITE, PIPE_HIGH / 2, 0);
            return;
        }
        if (c->opaque) {
            pipe_bytes(c->down, c->up);
            continue;
        }
        if (c->in_body) {
            if (!http_body(c, in))
                return;
            continue;
        }
        size_t len = evbuffer_get_length(in);
        if (len > GWHTTP_HEAD_MAX)
            len = GWHTTP_HEAD_MAX;
        const char *p = (const char *)evbuffer_pullup(in, (ssize_t)len);
        struct gwhttp_req r;
        enum gwhttp_result hr = gwhttp_parse_head(p, len, &r);
        if (hr == GWHTTP_NEED_MORE)
            return;
        if (hr != GWHTTP_OK) {
            gw_conn_deny(c, r.why, hr == GWHTTP_FORBIDDEN ? 403 : hr == GWHTTP_TOO_LARGE ? 431 : 400);
            return;
        }
        if (c->state == CS_HELLO) {
            /* First request: its Host names the destination. The head stays buffered
             * and is checked again (and forwarded) once the upstream is open. */
            if (r.port && r.port != c->port) {
                gw_conn_deny(c, "other_port", 403);
                return;
            }
            snprintf(c->name, sizeof c->name, "%s", r.host);
            conn_start(c);
            return;
        }
        if (c->state != CS_OPEN)
            return;
        if (!host_matches(c, &r)) {
            gw_conn_deny(c, "host_mismatch", c->mitm ? 421 : 403);
            return;
        }
        /* Only the first request may ask for an upgrade: then the upstream's first
         * answer is the one to it, and its status decides. */
        if (r.websocket && c->nreqs > 0) {
            gw_conn_deny(c, "upgrade_not_first", 403);
            return;
        }
        c->nreqs++;
        if (r.chunked) {
            c->held_head = evbuffer_new();
            c->held_body = evbuffer_new();
            if (!c->held_head || !c->held_body) {
                gw_conn_deny(c, "out_of_memory", 502);
                return;
            }
            http_emit_head(c, p, &r, c->held_head);
        } else {
            http_emit_head(c, p, &r, bufferevent_get_output(c->up));
            evbuffer_add(bufferevent_get_output(c->up), "\r\n", 2);
        }
        evbuffer_drain(in, r.head_len);
        gwhttp_body_init(&c->body, &r);
        size_t none;
        c->in_body = gwhttp_body_feed(&c->body, NULL, 0, &none) == GWHTTP_BODY_MORE;
        c->await_upgrade = r.websocket;
    }
}

/* The upstream's answer to an upgrade request: true once decided (c->opaque set on a
 * 101), false while its status line is incomplete. Anything but a 101 status line
 * (another status, garbage, a line too long) leaves the connection parsed. */
static bool upgrade_answered(struct gw_conn *c)
{
    struct evbuffer *in = bufferevent_get_input(c->up);
    size_t len = evbuffer_get_length(in), eol_len = 0;
    struct evbuffer_ptr eol = evbuffer_search_eol(in, NULL, &eol_len, EVBUFFER_EOL_CRLF_STRICT);
    if (eol.pos < 0 && len < GW_STATUS_LINE_MAX)
        return false;
    const char *line = (const char *)evbuffer_pullup(in, len < 13 ? (ssize_t)len : 13);
    c->opaque = eol.pos >= 12 && line && memcmp(line, "HTTP/1.", 7) == 0 &&
                (line[7] == '0' || line[7] == '1') && memcmp(line + 8, " 101", 4) == 0 &&
                (eol.pos == 12 || line[12] == ' ');
    c->await_upgrade = false;
    return true;
}

static void tls_hello(struct gw_conn *c)
{
    struct evbuffer *in = bufferevent_get_input(c->down);
    size_t len = evbuffer_get_length(in);
    if (len > CHELLO_STREAM_MAX)
        len = CHELLO_STREAM_MAX;
    struct chello ch;
    enum chello_result r = chello_parse(evbuffer_pullup(in, (ssize_t)len), len, &ch);
    if (r == CHELLO_NEED_MORE)
        return;
    if (r != CHELLO_OK) {
        gw_conn_deny(c, chello_result_str(r), 0);
        return;
    }
    snprintf(c->name, sizeof c->name, "%s", ch.sni);
    conn_start(c);
}

void gw_conn_resolved(void *arg, int rcode, const struct gw_cache_entry *e)
{
    struct gw_conn *c = arg;
    c->lookup = NULL;
    if (rcode < 0)
        return; /* sandbox going away; its connections are freed by detach */
    if (rcode != DNS_RCODE_OK || !e) {
        gw_conn_deny(c, rcode == DNS_RCODE_NXDOMAIN ? "nxdomain" : "resolve_failed", 502);
        return;
    }
    conn_dial(c, e);
}

static void conn_dial(struct gw_conn *c, const struct gw_cache_entry *e)
{
    uint32_t addr = gw_pick_addr(c->sb, e, c->orig_dst, c->port);
    if (!addr) {
        gw_conn_deny(c, e->naddrs ? "no_allowed_address" :
                     e->nforbidden ? "forbidden_addresses" : "no_address", 403);
        return;
    }
    c->up_addr = addr;
    const struct gw_cred *cred = c->tls ? gw_cred_find(c->sb, c->name) : NULL;
    c->state = CS_CONNECT;
    if (cred) {
        if (gw_mitm_start(c, addr, cred) != 0)
            gw_conn_deny(c, "mitm_setup_failed", 0);
        return;
    }
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(c->port),
                             .sin_addr.s_addr = htonl(addr)};
    c->up = bufferevent_socket_new(c->sb->gw->base, -1, BEV_OPT_CLOSE_ON_FREE);
    if (!c->up) {
        gw_conn_deny(c, "out_of_memory", 502);
        return;
    }
    bufferevent_setcb(c->up, gw_conn_up_read, gw_conn_write_done, gw_conn_up_event, c);
    if (bufferevent_socket_connect(c->up, (struct sockaddr *)&sa, sizeof sa) != 0)
        gw_conn_deny(c, "connect_failed", 502);
}

void gw_conn_up_event(struct bufferevent *bev, short what, void *arg)
{
    struct gw_conn *c = arg;
    if (what & BEV_EVENT_CONNECTED) {
        c->state = CS_OPEN;
        event_del(c->timer);
        gw_decide(c->sb, c->mitm ? "mitm" : c->tls ? "tls" : "http", true, c->name, "dialled",
                  c->orig_dst, c->port);
        bufferevent_enable(c->up, EV_READ | EV_WRITE);
        /* libevent moves 16 KiB per syscall by default; bulk downloads want more. */
        bufferevent_set_max_single_read(c->up, PIPE_CHUNK);
        bufferevent_set_max_single_write(c->down, PIPE_CHUNK);
        bufferevent_set_max_single_read(c->down, PIPE_CHUNK);
        bufferevent_set_max_single_write(c->up, PIPE_CHUNK);
        struct timeval idle = {IDLE_TIMEOUT_S, 0};
        bufferevent_set_timeouts(c->up, &idle, NULL);
        if (c->tls && !c->mitm)
            pipe_bytes(c->down, c->up);
        else
            http_pump(c);
        return;
    }
    if (c->state != CS_OPEN) {
        char why[GW_REASON_MAX];
        if (c->mitm && (what & BEV_EVENT_ERROR))
            gw_mitm_tls_reason(c->up, true, why, sizeof why);
        else
            snprintf(why, sizeof why, "upstream_unreachable");
        gw_conn_deny(c, why, 502);
        return;
    }
    /* Upstream finished: deliver what is queued for the guest, then close. */
    up_to_down(c, true);
    bufferevent_free(c->up);
    c->up = NULL;
    if (evbuffer_get_length(bufferevent_get_output(c->down)) == 0) {
        gw_conn_free(c, false);
        return;
    }
    c->state = CS_CLOSING;
    bufferevent_disable(c->down, EV_READ);
    bufferevent_setwatermark(c->down, EV_WRITE, 0, 0);
}

/* Upstream bytes to the guest; on the credential path through the secret scrubber. */
static void up_to_down(struct gw_conn *c, bool flush)
{
    if (c->scrub)
        gw_scrub_pipe(c->scrub, bufferevent_get_input(c->up), bufferevent_get_output(c->down), flush);
    else
        evbuffer_add_buffer(bufferevent_get_output(c->down), bufferevent_get_input(c->up));
    if (evbuffer_get_length(bufferevent_get_output(c->down)) >= PIPE_HIGH) {
        bufferevent_disable(c->up, EV_READ);
        bufferevent_setwatermark(c->down, EV_WRITE, PIPE_HIGH / 2, 0);
    }
}

void gw_conn_up_read(struct bufferevent *bev, void *arg)
{
    struct gw_conn *c = arg;
    if (c->state != CS_OPEN)
        return;
    /* The upgrade request is the connection's first: the upstream's first bytes are
     * its answer, even while the request's body is still being sent. */
    bool decided = c->await_upgrade;
    if (decided && !upgrade_answered(c))
        return;
    up_to_down(c, false);
    if (decided)
        http_pump(c); /* the guest's bytes held behind the upgrade request (may free c) */
}

void gw_conn_down_read(struct bufferevent *bev, void *arg)
{
    struct gw_conn *c = arg;
    if (c->state == CS_HELLO && c->tls && !c->mitm)
        tls_hello(c);
    else if (c->state == CS_OPEN && c->tls && !c->mitm)
        pipe_bytes(c->down, c->up);
    else if (c->state == CS_HELLO || c->state == CS_OPEN)
        http_pump(c);
}

void gw_conn_down_event(struct bufferevent *bev, short what, void *arg)
{
    struct gw_conn *c = arg;
    if (what & BEV_EVENT_CONNECTED) {
        c->down_tls_done = true; /* credential path: the guest-side handshake finished */
        return;
    }
    if (c->mitm && !c->down_tls_done) {
        char why[GW_REASON_MAX];
        gw_mitm_tls_reason(c->down, false, why, sizeof why);
        gw_decide(c->sb, "mitm", false, c->name, why, c->orig_dst, c->port);
    }
    if ((what & BEV_EVENT_EOF) && c->state == CS_OPEN && c->up &&
        !(what & BEV_EVENT_ERROR)) {
        /* Half close: the guest is done sending; let the answer come back. */
        c->down_eof = true;
        if (!c->mitm && evbuffer_get_length(bufferevent_get_output(c->up)) == 0)
            shutdown(bufferevent_getfd(c->up), SHUT_WR);
        return;
    }
    gw_conn_free(c, false);
}

/* A closing connection ends once everything queued for the guest reached the kernel.
 * On the credential path the TLS filter's own buffer empties before the socket
 * bufferevent under it is flushed, so that one is polled briefly (bounded). */
static void closing_check(struct gw_conn *c)
{
    struct bufferevent *sock = bufferevent_get_underlying(c->down);
    if (evbuffer_get_length(bufferevent_get_output(c->down)) != 0)
        return;
    if (sock && evbuffer_get_length(bufferevent_get_output(sock)) != 0 && c->close_polls++ < 250) {
        struct timeval tick = {0, 20000};
        evtimer_add(c->timer, &tick);
        return;
    }
    gw_conn_free(c, false);
}

/* A write side drained below its low watermark: resume the paused reader, or finish a
 * closing connection. */
void gw_conn_write_done(struct bufferevent *bev, void *arg)
{
    struct gw_conn *c = arg;
    if (c->state == CS_CLOSING) {
        if (bev == c->down)
            closing_check(c);
        return;
    }
    if (c->state != CS_OPEN)
        return;
    bufferevent_setwatermark(bev, EV_WRITE, 0, 0);
    if (bev == c->up) {
        if (c->down_eof && !c->mitm && evbuffer_get_length(bufferevent_get_output(c->up)) == 0)
            shutdown(bufferevent_getfd(c->up), SHUT_WR);
        if (!c->down_eof)
            bufferevent_enable(c->down, EV_READ);
        if (!(c->tls && !c->mitm))
            http_pump(c);
    } else {
        bufferevent_enable(c->up, EV_READ);
    }
}

static void on_timeout(evutil_socket_t fd, short what, void *arg)
{
    struct gw_conn *c = arg;
    if (c->state == CS_CLOSING)
        closing_check(c);
    else
        gw_conn_deny(c, "timeout", 408);
}

void gw_conn_accept(struct gw_sandbox *sb, int fd, bool tls)
{
    struct sockaddr_in dst;
    socklen_t dl = sizeof dst;
    struct gw_conn *c = NULL;
    if (!gw_rate_take(&sb->conn_rate, clock_mono_ms()) || sb->nconns >= GW_CONNS_MAX) {
        gw_rate_log(sb, &sb->conn_rate, tls ? "tls" : "http");
        goto refuse;
    }
    c = calloc(1, sizeof *c);
    if (!c)
        goto refuse;
    c->sb = sb;
    c->tls = tls;
    c->port = tls ? 443 : 80;
    c->down_fd = fd;
    if (getsockopt(fd, SOL_IP, SO_ORIGINAL_DST, &dst, &dl) == 0)
        c->orig_dst = ntohl(dst.sin_addr.s_addr);
    evutil_make_socket_nonblocking(fd);
    c->down = bufferevent_socket_new(sb->gw->base, fd, BEV_OPT_CLOSE_ON_FREE);
    c->timer = evtimer_new(sb->gw->base, on_timeout, c);
    if (!c->down || !c->timer) {
        if (c->down)
            bufferevent_free(c->down);
        else
            close(fd);
        if (c->timer)
            event_free(c->timer);
        free(c);
        return;
    }
    c->next = sb->conns;
    if (c->next)
        c->next->prev = c;
    sb->conns = c;
    sb->nconns++;
    struct timeval hello = {HELLO_TIMEOUT_S, 0}, idle = {IDLE_TIMEOUT_S, 0};
    evtimer_add(c->timer, &hello);
    bufferevent_set_timeouts(c->down, &idle, NULL);
    /* Bounds what a guest can make the gateway buffer before it decides. */
    bufferevent_setwatermark(c->down, EV_READ, 0, tls ? CHELLO_STREAM_MAX : GWHTTP_HEAD_MAX + 65536);
    bufferevent_setcb(c->down, gw_conn_down_read, gw_conn_write_done, gw_conn_down_event, c);
    bufferevent_enable(c->down, EV_READ | EV_WRITE);
    return;
refuse:
    {
        struct linger l = {.l_onoff = 1, .l_linger = 0};
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
        close(fd);
    }
}

void gw_conns_recheck(struct gw_sandbox *sb, bool all)
{
    struct gw_conn *c = sb->conns;
    while (c) {
        struct gw_conn *next = c->next;
        bool ok = !all && (c->state == CS_HELLO || !c->name[0] ||
                           (policy_name_may_resolve(&sb->policy, c->name) &&
                            (!c->up_addr || policy_addr_allowed(&sb->policy, c->name, c->up_addr, c->port))));
        if (!ok) {
            gw_decide(sb, c->tls ? "tls" : "http", false, c->name, all ? "detached" : "policy_changed",
                      c->orig_dst, c->port);
            gw_conn_free(c, true);
        }
        c = next;
    }
}

const struct gw_cred *gw_cred_find(const struct gw_sandbox *sb, const char *host)
{
    for (size_t i = 0; i < sb->creds.n; i++)
        if (strcmp(sb->creds.rules[i].host, host) == 0)
            return &sb->creds.rules[i];
    if (!sb->tenant[0])
        return NULL;
    for (const struct gw_tenant *t = sb->gw->tenants; t; t = t->next)
        if (strcmp(t->id, sb->tenant) == 0)
            for (size_t i = 0; i < t->creds.n; i++)
                if (strcmp(t->creds.rules[i].host, host) == 0)
                    return &t->creds.rules[i];
    return NULL;
}
