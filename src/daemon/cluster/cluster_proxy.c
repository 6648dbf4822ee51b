/* cluster_proxy.c: forwards one API request from the control daemon to a node daemon
 * and streams the reply back (libevent's evhttp client on the outgoing side, http.h on
 * the client side).
 *
 * The request body is read whole first (bounded by CLUSTER_PROXY_MAX_BODY), then sent
 * with the client's headers minus hop-by-hop ones, plus the shared secret. The reply's
 * head is relayed as soon as it arrives and its body piece by piece, so event streams
 * (session attach, operation events) flow through live. When more than
 * CLUSTER_PROXY_HIGH_WATER bytes wait for a slow client, reading from the node pauses
 * until the client has taken them (so a large download does not pile up here). */
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cluster_internal.h"
#include "daemon/ops/op.h"
#include "daemon/spaced.h"
#include "daemon/store/store.h"
#include "http_hdr.h"
#include "log.h"

#define CLUSTER_PROXY_MAX_BODY (64u << 20)
#define CLUSTER_PROXY_HIGH_WATER (1u << 20)
/* After the head: attach and event streams may sit idle for long; the node ends them. */
#define CLUSTER_PROXY_TIMEOUT_S (24 * 3600)

struct proxy {
    struct spaced *sp;
    struct http_req *req;              /* client request; NULL once finished or gone */
    struct evhttp_connection *conn;    /* to the node (owned) */
    struct evhttp_request *out;        /* outgoing request; owned by conn once made */
    cluster_choose_fn choose;          /* picks the node once the body is read, or NULL */
    struct cluster_resv *resv;         /* placement's reservation, released at the end */
    char node[STORE_ID_MAX];
    char url[256];
    struct cluster_fwd fwd;            /* headers to set, error shape */
    bool started;                      /* reply head sent to the client */
    bool paused;                       /* not reading from the node until the client drains */
};

/* Whether name is one the control sets itself on this request. */
static bool fwd_sets(const struct cluster_fwd *f, const char *name)
{
    for (unsigned i = 0; i < f->nset; i++)
        if (strcasecmp(f->set[i].name, name) == 0)
            return true;
    return false;
}

/* Fields not copied on either leg: hop-by-hop ones (http_hdr.h; `connection` is the
 * message's Connection value), those evhttp or our server set themselves, the node
 * token (a client's never reaches a node: the control adds its own; a node's reply
 * never carries it back) and the public URL a node builds links on (only the control
 * names it, cluster_e2btpl.c). The client's API key does go to the node, which
 * authenticates it; the node's own proxies strip it before anything reaches a guest. */
static bool skip_header(const char *name, const char *connection)
{
    static const char *const names[] = {"content-length", "host", "expect", "date",
                                        CLUSTER_TOKEN_HEADER, HH_PUBLIC_URL_HEADER};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (strcasecmp(name, names[i]) == 0)
            return true;
    return hh_hop_by_hop(name, connection);
}

/* Frees the proxy from the loop: evhttp must not be freed inside its own callbacks. */
static void proxy_free_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct proxy *p = arg;
    if (p->conn)
        evhttp_connection_free(p->conn);
    free(p);
}

/* The forwarded request is over (answered, failed or abandoned). */
static void proxy_release(struct proxy *p)
{
    cluster_resv_release(p->sp, p->resv);
    p->resv = NULL;
    if (event_base_once(p->sp->base, -1, EV_TIMEOUT, proxy_free_cb, p, NULL) != 0)
        log_error("cluster.proxy", "node=%s msg=\"cannot schedule release\"", p->node);
}

static void client_gone(struct http_req *req, void *arg)
{
    (void)req;
    struct proxy *p = arg;
    p->req = NULL;
    if (p->out)
        evhttp_cancel_request(p->out);
    p->out = NULL;
    proxy_release(p);
}

static int on_head(struct evhttp_request *out, void *arg)
{
    struct proxy *p = arg;
    if (!p->req)
        return -1;
    struct evkeyvalq *h = evhttp_request_get_input_headers(out);
    const char *ct = NULL, *connection = evhttp_find_header(h, "Connection");
    int64_t length = -1;
    for (struct evkeyval *kv = h->tqh_first; kv; kv = kv->next.tqe_next) {
        if (strcasecmp(kv->key, "Content-Type") == 0)
            ct = kv->value;
        else if (strcasecmp(kv->key, "Content-Length") == 0)
            length = strtoll(kv->value, NULL, 10);
        else if (!skip_header(kv->key, connection))
            http_reply_add_header(p->req, kv->key, kv->value);
    }
    http_reply_add_header(p->req, CLUSTER_NODE_HEADER, p->node);
    /* A create's row is stored before the node answers (intent first), and counts on
     * the node from then on: the reservation has done its work (a refused create has
     * none). */
    cluster_resv_release(p->sp, p->resv);
    p->resv = NULL;
    evhttp_connection_set_timeout(p->conn, CLUSTER_PROXY_TIMEOUT_S);
    if (http_stream_start(p->req, evhttp_request_get_response_code(out), ct, length) != 0)
        return -1;
    p->started = true;
    return 0;
}

static void client_drained(struct http_req *req, void *arg)
{
    (void)req;
    struct proxy *p = arg;
    p->paused = false;
    struct bufferevent *bev = evhttp_connection_get_bufferevent(p->conn);
    if (bev)
        bufferevent_enable(bev, EV_READ);
}

static void relay(struct proxy *p, struct evhttp_request *out)
{
    struct evbuffer *in = evhttp_request_get_input_buffer(out);
    size_t n = evbuffer_get_length(in);
    if (p->req && p->started && n)
        http_stream_write(p->req, evbuffer_pullup(in, -1), n);
    evbuffer_drain(in, n);
    if (p->req && p->started && !p->paused && http_stream_pending(p->req) > CLUSTER_PROXY_HIGH_WATER) {
        struct bufferevent *bev = evhttp_connection_get_bufferevent(p->conn);
        if (bev) {
            bufferevent_disable(bev, EV_READ);
            p->paused = true;
            log_debug("cluster.proxy", "node=%s msg=\"client slow: pausing the node's reply\"", p->node);
            http_stream_on_drain(p->req, client_drained, p);
        }
    }
}

static void on_chunk(struct evhttp_request *out, void *arg) { relay(arg, out); }

static void on_done(struct evhttp_request *out, void *arg)
{
    struct proxy *p = arg;
    p->out = NULL;
    if (p->req) {
        if (out && p->started) {
            relay(p, out);
            http_stream_end(p->req);
        } else if (p->started) {
            http_stream_end(p->req); /* cut short: a declared length makes it visible */
        } else {
            log_warn("cluster.proxy", "node=%s url=%s msg=\"node unreachable\"", p->node, p->url);
            cluster_reply_fail(p->req, &p->fwd, 502, "node_unreachable",
                             "node %s (%s) did not answer; it may be down", p->node, p->url);
        }
        p->req = NULL;
    }
    proxy_release(p);
}

static enum evhttp_cmd_type method_of(const char *m, bool *ok)
{
    static const struct {
        const char *name;
        enum evhttp_cmd_type cmd;
    } map[] = {{"GET", EVHTTP_REQ_GET},       {"POST", EVHTTP_REQ_POST},   {"PUT", EVHTTP_REQ_PUT},
               {"DELETE", EVHTTP_REQ_DELETE}, {"PATCH", EVHTTP_REQ_PATCH}, {"HEAD", EVHTTP_REQ_HEAD},
               {"OPTIONS", EVHTTP_REQ_OPTIONS}};
    for (size_t i = 0; i < sizeof map / sizeof *map; i++)
        if (strcmp(m, map[i].name) == 0) {
            *ok = true;
            return map[i].cmd;
        }
    *ok = false;
    return EVHTTP_REQ_GET;
}

static void on_body(struct http_req *req, const char *data, size_t len, void *arg)
{
    struct proxy *p = arg;
    if (p->choose) {
        struct store_node to;
        if (p->choose(p->sp, req, data, len, &to, &p->resv) != 0) {
            p->req = NULL; /* choose replied */
            proxy_release(p);
            return;
        }
        snprintf(p->node, sizeof p->node, "%s", to.id);
        snprintf(p->url, sizeof p->url, "%s", to.url);
    }
    bool ok;
    enum evhttp_cmd_type cmd = method_of(http_req_method(req), &ok);
    struct evhttp_uri *u = evhttp_uri_parse(p->url);
    const char *host = u ? evhttp_uri_get_host(u) : NULL;
    int port = u ? evhttp_uri_get_port(u) : -1;
    if (!ok || !host || port <= 0) {
        evhttp_uri_free(u);
        cluster_reply_fail(req, &p->fwd, ok ? 502 : 405, ok ? "node_unreachable" : "method_not_allowed",
                         ok ? "node %s has an unusable address %s" : "method not forwarded%s%s",
                         ok ? p->node : "", ok ? p->url : "");
        p->req = NULL;
        proxy_release(p);
        return;
    }
    p->conn = evhttp_connection_base_new(p->sp->base, NULL, host, (unsigned short)port);
    p->out = p->conn ? evhttp_request_new(on_done, p) : NULL;
    if (!p->out) {
        evhttp_uri_free(u);
        cluster_reply_fail(req, &p->fwd, 500, "internal", "out of memory");
        p->req = NULL;
        proxy_release(p);
        return;
    }
    evhttp_connection_set_timeout(p->conn, CLUSTER_PROXY_HEAD_TIMEOUT_S);
    evhttp_request_set_header_cb(p->out, on_head);
    evhttp_request_set_chunked_cb(p->out, on_chunk);
    struct evkeyvalq *h = evhttp_request_get_output_headers(p->out);
    const char *name, *value, *connection = http_req_header(req, "Connection");
    for (unsigned i = 0; http_req_header_at(req, i, &name, &value); i++)
        if (!skip_header(name, connection) && !fwd_sets(&p->fwd, name))
            evhttp_add_header(h, name, value);
    for (unsigned i = 0; i < p->fwd.nset; i++)
        evhttp_add_header(h, p->fwd.set[i].name, p->fwd.set[i].value);
    char hostport[300];
    snprintf(hostport, sizeof hostport, "%s:%d", host, port);
    evhttp_add_header(h, "Host", hostport);
    evhttp_add_header(h, "Connection", "close");
    evhttp_add_header(h, CLUSTER_TOKEN_HEADER, p->sp->opt.node_token);
    evhttp_add_header(h, "X-Forwarded-For", http_req_peer(req));
    evhttp_uri_free(u);
    if (len)
        evbuffer_add(evhttp_request_get_output_buffer(p->out), data, len);
    /* On success the connection owns out (and later reports through on_done); on
     * failure it stays ours. */
    if (evhttp_make_request(p->conn, p->out, cmd, http_req_target(req)) != 0) {
        evhttp_request_free(p->out);
        p->out = NULL;
        cluster_reply_fail(req, &p->fwd, 502, "node_unreachable", "cannot connect to node %s (%s)", p->node, p->url);
        p->req = NULL;
        proxy_release(p);
    }
}

void cluster_proxy(struct spaced *sp, struct http_req *req, const struct store_node *to,
                   cluster_choose_fn choose)
{
    cluster_proxy_fwd(sp, req, to, choose, NULL);
}

void cluster_proxy_fwd(struct spaced *sp, struct http_req *req, const struct store_node *to,
                       cluster_choose_fn choose, const struct cluster_fwd *fwd)
{
    struct proxy *p = calloc(1, sizeof *p);
    if (!p) {
        http_reply_error(req, 500, "internal", "out of memory");
        return;
    }
    if (fwd)
        p->fwd = *fwd;
    p->sp = sp;
    p->req = req;
    p->choose = choose;
    if (to) {
        snprintf(p->node, sizeof p->node, "%s", to->id);
        snprintf(p->url, sizeof p->url, "%s", to->url);
    }
    http_req_on_close(req, client_gone, p);
    if (http_req_read_body(req, CLUSTER_PROXY_MAX_BODY, on_body, p) != 0) {
        cluster_reply_fail(req, &p->fwd, 500, "internal", "request body already claimed");
        p->req = NULL;
        proxy_release(p);
    }
}
