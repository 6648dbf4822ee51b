/* dns_tcp.c: DNS over TCP on gw:53 in a sandbox's namespace (RFC 7766): each message
 * has a 2-byte length prefix; a connection carries any number of queries, answered
 * as they resolve (in any order, matched by ID as RFC 7766 6.2.1.1 allows).
 *
 * Bounds, so one sandbox cannot make the gateway hold much: DNS_TCP_CONNS_MAX
 * connections; a frame that announces more than DNS_MSG_MAX bytes (or fewer than a
 * header) ends the connection; at most DNS_TCP_INFLIGHT_MAX queries of a connection
 * wait for upstream at a time, and reading stops while that many do (or while
 * DNS_TCP_OUT_MAX bytes of answers wait for a client that does not read); a connection
 * idle for DNS_TCP_IDLE_S closes. Each query takes a token from the same bucket as
 * UDP queries; one over the rate is answered REFUSED (a TCP client would otherwise
 * wait for its idle timeout).
 *
 * A FIN from the client is a half close: what it asked is still answered, then the
 * connection closes. A reset or error drops its waiting queries at once. While reading
 * is paused the gateway does not see the client go; that lasts until its queries
 * resolve or time out upstream (a few seconds, main.c's evdns options). */
#include <arpa/inet.h>
#include <event2/buffer.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"
#include "dns_server.h"

struct dns_tcp {
    struct gw_sandbox *sb;
    struct bufferevent *bev;         /* owned; owns the socket */
    struct dns_pending *pending;     /* this connection's queries waiting upstream */
    size_t npending;
    bool eof;                        /* the client finished sending: close once answered */
    struct dns_tcp *prev, *next;     /* in sb->dns_tcps */
};

static void conn_free(struct dns_tcp *t, bool reset)
{
    struct gw_sandbox *sb = t->sb;
    while (t->pending) {
        struct dns_pending *p = t->pending;
        t->pending = p->next;
        dns_pending_drop(p);
    }
    if (t->prev)
        t->prev->next = t->next;
    else
        sb->dns_tcps = t->next;
    if (t->next)
        t->next->prev = t->prev;
    sb->ndns_tcps--;
    if (reset) {
        struct linger l = {.l_onoff = 1, .l_linger = 0};
        setsockopt(bufferevent_getfd(t->bev), SOL_SOCKET, SO_LINGER, &l, sizeof l);
    }
    bufferevent_free(t->bev);
    free(t);
}

/* Reads whole frames while the bounds allow; pauses reading otherwise. Returns false
 * if t was freed. */
static bool pump(struct dns_tcp *t)
{
    struct evbuffer *in = bufferevent_get_input(t->bev);
    for (;;) {
        if (t->npending >= DNS_TCP_INFLIGHT_MAX ||
            evbuffer_get_length(bufferevent_get_output(t->bev)) >= DNS_TCP_OUT_MAX) {
            bufferevent_disable(t->bev, EV_READ);
            return true;
        }
        size_t avail = evbuffer_get_length(in), len = 0;
        size_t want = avail < 2 + DNS_MSG_MAX ? avail : 2 + DNS_MSG_MAX;
        const uint8_t *p = evbuffer_pullup(in, (ssize_t)want);
        enum dns_frame_result r = dns_tcp_frame(p, want, &len);
        if (r == DNS_FRAME_NEED_MORE)
            break;
        if (r == DNS_FRAME_BAD) {
            gw_decide(t->sb, "dns", false, "", "tcp_bad_frame", 0, 53);
            conn_free(t, true);
            return false;
        }
        uint8_t msg[DNS_MSG_MAX];
        memcpy(msg, p + 2, len);
        evbuffer_drain(in, 2 + len);
        struct dns_asker to = {.tcp = t};
        if (gw_rate_take(&t->sb->dns_rate, clock_mono_ms())) {
            dns_handle(t->sb, msg, len, &to);
        } else {
            gw_rate_log(t->sb, &t->sb->dns_rate, "dns");
            struct dns_query q;
            uint8_t out[DNS_ANSWER_BYTES_MAX];
            if (dns_query_parse(msg, len, &q) == DNS_PARSE_OK)
                dns_tcp_send(t, out, dns_answer_build(out, sizeof out, &q, DNS_RCODE_REFUSED, NULL, 0, 0));
        }
    }
    if (t->eof && t->npending == 0 && evbuffer_get_length(bufferevent_get_output(t->bev)) == 0) {
        conn_free(t, false);
        return false;
    }
    if (!t->eof)
        bufferevent_enable(t->bev, EV_READ);
    return true;
}

static void on_read(struct bufferevent *bev, void *arg)
{
    pump(arg);
}

/* Output drained: resume reading if it was paused for it, or finish a closing one. */
static void on_write(struct bufferevent *bev, void *arg)
{
    pump(arg);
}

static void on_event(struct bufferevent *bev, short what, void *arg)
{
    struct dns_tcp *t = arg;
    if ((what & BEV_EVENT_EOF) && !(what & BEV_EVENT_ERROR) && !(what & BEV_EVENT_TIMEOUT)) {
        t->eof = true; /* answer what was asked, then close */
        pump(t);
        return;
    }
    conn_free(t, false); /* error, or idle timeout */
}

void dns_tcp_send(struct dns_tcp *t, const uint8_t *msg, size_t len)
{
    if (!len || len > UINT16_MAX)
        return;
    uint8_t prefix[2] = {(uint8_t)(len >> 8), (uint8_t)len};
    struct evbuffer *out = bufferevent_get_output(t->bev);
    evbuffer_add(out, prefix, 2);
    evbuffer_add(out, msg, len);
}

void dns_tcp_pending_add(struct dns_tcp *t, struct dns_pending *p)
{
    p->prev = NULL;
    p->next = t->pending;
    if (p->next)
        p->next->prev = p;
    t->pending = p;
    t->npending++;
}

void dns_tcp_pending_done(struct dns_tcp *t, struct dns_pending *p)
{
    if (p->prev)
        p->prev->next = p->next;
    else
        t->pending = p->next;
    if (p->next)
        p->next->prev = p->prev;
    t->npending--;
    /* Called from the lookup callback with the answer already queued: more frames may
     * be read now. Deferred, so the caller's p and t stay valid until it returns. */
    bufferevent_trigger(t->bev, EV_READ, BEV_TRIG_IGNORE_WATERMARKS | BEV_TRIG_DEFER_CALLBACKS);
}

static void on_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa,
                      int salen, void *arg)
{
    struct gw_sandbox *sb = arg;
    const struct sockaddr_in *from = (const struct sockaddr_in *)sa;
    struct dns_tcp *t = NULL;
    /* nftables admits only the guest; this is the second lock, as for UDP. */
    if (salen != (int)sizeof *from || from->sin_family != AF_INET ||
        ntohl(from->sin_addr.s_addr) != sb->wiring.guest_ip || sb->ndns_tcps >= DNS_TCP_CONNS_MAX ||
        !(t = calloc(1, sizeof *t)) ||
        !(t->bev = bufferevent_socket_new(sb->gw->base, fd, BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS))) {
        if (sb->ndns_tcps >= DNS_TCP_CONNS_MAX)
            gw_decide(sb, "dns", false, "", "tcp_too_many_connections", 0, 53);
        free(t);
        struct linger lg = {.l_onoff = 1, .l_linger = 0};
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
        close(fd);
        return;
    }
    t->sb = sb;
    t->next = sb->dns_tcps;
    if (t->next)
        t->next->prev = t;
    sb->dns_tcps = t;
    sb->ndns_tcps++;
    struct timeval idle = {DNS_TCP_IDLE_S, 0};
    bufferevent_set_timeouts(t->bev, &idle, &idle);
    /* Bounds what sits unread in the gateway: a few frames at most. */
    bufferevent_setwatermark(t->bev, EV_READ, 0, 4 * (2 + DNS_MSG_MAX));
    bufferevent_setcb(t->bev, on_read, on_write, on_event, t);
    bufferevent_enable(t->bev, EV_READ | EV_WRITE);
}

int dns_tcp_start(struct gw_sandbox *sb, char *err, size_t errlen)
{
    int fd = netns_socket(sb->nsfd, SOCK_STREAM, sb->wiring.gw_ip, 53, err, errlen);
    if (fd < 0)
        return -1;
    sb->dns_tcp_l = evconnlistener_new(sb->gw->base, on_accept, sb, LEV_OPT_CLOSE_ON_FREE, 0, fd);
    if (!sb->dns_tcp_l) {
        close(fd);
        snprintf(err, errlen, "cannot listen for DNS over TCP in the sandbox namespace");
        return -1;
    }
    return 0;
}

void dns_tcp_stop(struct gw_sandbox *sb)
{
    while (sb->dns_tcps)
        conn_free(sb->dns_tcps, false);
    if (sb->dns_tcp_l)
        evconnlistener_free(sb->dns_tcp_l);
    sb->dns_tcp_l = NULL;
}
