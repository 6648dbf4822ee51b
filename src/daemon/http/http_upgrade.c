/* http_upgrade.c: the two ways a reply leaves the normal request/response cycle:
 * aborting it (the client must see the truncation) and upgrading the connection to
 * another protocol (the connection is handed over to the application).
 *
 * Ownership: http_req_upgrade only writes the 101 head and marks the request; the
 * hand-over itself (http_conn_handover) runs from conn_advance on a clean stack, as
 * the reentrancy rule in http_internal.h requires, because it frees the request and
 * the connection structure around the bufferevent that moves to the application. */
#include "http_internal.h"

#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "log.h"

void http_reply_abort(struct http_req *r, const char *why)
{
    if (r->app_done)
        return;
    char qm[48], qp[512], qw[256];
    log_warn("http.abort", "method=%s path=%s peer=%s bytes=%llu why=%s",
             log_quote(r->head.method, qm, sizeof qm), log_quote(r->path, qp, sizeof qp),
             r->conn->peer, (unsigned long long)r->bytes_out,
             log_quote(why ? why : "-", qw, sizeof qw));
    if (r->resp == RESP_NONE)
        r->status = 499; /* logged as a response the client never got */
    r->conn->close_after = true;
    http_req_finish(r);
}

/* Upgrade protocol list: visible ASCII and spaces only, so the head cannot break. */
static bool protocol_ok(const char *p)
{
    if (!p || !*p)
        return false;
    for (; *p; p++)
        if ((unsigned char)*p < 0x20 || (unsigned char)*p >= 0x7f)
            return false;
    return true;
}

int http_req_upgrade(struct http_req *r, const char *protocol, http_upgrade_fn cb, void *arg)
{
    struct http_conn *c = r->conn;
    if (r->app_done || r->resp != RESP_NONE || r->head.version_minor < 1 || !r->body_done ||
        c->closing || !cb || !protocol_ok(protocol))
        return -1;
    struct evbuffer *out = http_conn_output(c);
    /* Date is optional on 1xx responses (RFC 9110 6.6.1). */
    evbuffer_add(out, "HTTP/1.1 101 Switching Protocols\r\n", 34);
    evbuffer_add_buffer(out, r->extra_headers);
    evbuffer_add_printf(out, "Connection: Upgrade\r\nUpgrade: %s\r\n\r\n", protocol);
    r->status = 101;
    r->upgrade_cb = cb;
    r->upgrade_arg = arg;
    http_req_finish(r);
    return 0;
}

void http_conn_handover(struct http_conn *c)
{
    struct http_req *r = c->req;
    http_upgrade_fn cb = r->upgrade_cb;
    void *arg = r->upgrade_arg;
    http_conn_unlink(c);
    c->req = NULL;
    http_req_free(r);
    log_info("http.upgrade", "peer=%s pending_in=%zu pending_out=%zu", c->peer,
             evbuffer_get_length(c->in), evbuffer_get_length(http_conn_output(c)));
    event_free(c->rd_ev);
    event_free(c->head_timer);
    event_free(c->defer);
    struct bufferevent *bev = c->bev;
    bufferevent_setcb(bev, NULL, NULL, NULL, NULL);
    bufferevent_set_timeouts(bev, NULL, NULL);
    bufferevent_setwatermark(bev, EV_READ | EV_WRITE, 0, 0);
    /* Bytes already read past the head belong to the new protocol. A socket
     * bufferevent keeps the end of its input frozen (only its own reads add there):
     * thaw it for this one move. */
    struct evbuffer *bin = bufferevent_get_input(bev);
    evbuffer_unfreeze(bin, 0);
    evbuffer_add_buffer(bin, c->in);
    evbuffer_freeze(bin, 0);
    evbuffer_free(c->in);
    free(c);
    bufferevent_enable(bev, EV_READ | EV_WRITE);
    cb(bev, arg);
}
