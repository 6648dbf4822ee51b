/* e2b_portproxy: getHost(port). An HTTP request whose Host is "<port>-<id>.<domain>"
 * (or that carries E2b-Sandbox-Id plus E2b-Sandbox-Port != 49983) is forwarded to
 * 127.0.0.1:<port> inside the sandbox.
 *
 * The agent protocol has no TCP-forwarding op, so each request runs a relay in the guest
 * (`nc 127.0.0.1 <port>`, or Python where nc is missing) and talks through its
 * stdin/stdout: the request goes out as
 * HTTP/1.0 with Connection: close, so the response is never chunked and ends at EOF,
 * and its head is parsed here to answer our client with the same status and headers.
 * Bounded: request bodies up to PROXY_BODY_MAX, response heads up to PROXY_HEAD_MAX;
 * the response body streams with credit given back only while the client keeps up.
 * Not supported: WebSocket/Upgrade, HTTP/1.1 keep-alive to the guest. Like E2B's public
 * sandbox URLs, these requests need no token. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "daemon/agentc/agentc.h"
#include "daemon/sandbox/sbx.h"
#include "e2b_internal.h"

#define PROXY_BODY_MAX (16u * 1024 * 1024)
#define PROXY_HEAD_MAX (64u * 1024)

/* The relay run in the guest for one request: nc where the template has it (busybox),
 * else a few lines of Python (Debian templates without netcat). $1 is the port. */
#define RELAY_SCRIPT                                                                       \
    "if command -v nc >/dev/null 2>&1; then exec nc 127.0.0.1 \"$1\"; fi\n"                  \
    "exec python3 -c 'import os, socket, sys, threading\n"                                   \
    "s = socket.create_connection((\"127.0.0.1\", int(sys.argv[1])))\n"                      \
    "def up():\n"                                                                           \
    "    while True:\n"                                                                     \
    "        d = os.read(0, 65536)\n"                                                       \
    "        if not d: return\n"                                                            \
    "        s.sendall(d)\n"                                                                \
    "threading.Thread(target=up, daemon=True).start()\n"                                    \
    "while True:\n"                                                                         \
    "    d = s.recv(65536)\n"                                                               \
    "    if not d: break\n"                                                                 \
    "    os.write(1, d)\n"                                                                  \
    "' \"$1\""

struct pxy {
    struct http_req *req;     /* NULL once finished or closed */
    struct agentc_chan *ch;   /* NULL once closed */
    unsigned port;
    char *head;               /* response head being collected (owned) */
    size_t headlen;
    bool started;             /* response head sent to our client */
    uint32_t owed;
    bool waiting;
    char err[160];            /* what nc said on stderr */
};

static void pxy_release(struct pxy *p)
{
    if (p->req || p->ch)
        return;
    free(p->head);
    free(p);
}

static void pxy_fail(struct pxy *p, const char *why)
{
    struct http_req *req = p->req;
    p->req = NULL;
    if (p->started)
        http_stream_end(req);
    else
        e2b_reply_rest_error(req, 502, "port %u in the sandbox: %s", p->port, why);
    if (p->ch) {
        json_t *kill = json_pack("{s:s, s:i}", "op", "signal", "signal", 9);
        agentc_ctrl(p->ch, kill);
        json_decref(kill);
        agentc_close(p->ch);
        p->ch = NULL;
    }
}

static bool hop_by_hop(const char *name)
{
    static const char *const skip[] = {"Connection", "Keep-Alive", "Proxy-Connection",
                                       "Transfer-Encoding", "TE", "Upgrade", "Trailer",
                                       "Content-Length", "Content-Type", "Date",
                                       "Proxy-Authorization", "Proxy-Authenticate"};
    for (size_t i = 0; i < sizeof skip / sizeof skip[0]; i++)
        if (strcasecmp(name, skip[i]) == 0)
            return true;
    return false;
}

/* Parses the collected response head; starts our reply. Returns bytes of body that
 * followed the head in p->head (offset), or -1 on a malformed head. */
static long start_reply(struct pxy *p, size_t head_end)
{
    p->head[head_end] = '\0';
    char *line = p->head, *next = strstr(line, "\r\n");
    int status = 0;
    if (!next || sscanf(line, "HTTP/1.%*1[01] %3d", &status) != 1 || status < 100 ||
        status > 599)
        return -1;
    const char *ctype = NULL;
    long long clen = -1;
    for (line = next + 2; *line; line = next + 2) {
        next = strstr(line, "\r\n");
        if (!next)
            break;
        *next = '\0';
        char *colon = strchr(line, ':');
        if (!colon)
            return -1;
        *colon = '\0';
        char *v = colon + 1;
        while (*v == ' ' || *v == '\t')
            v++;
        if (strcasecmp(line, "Content-Type") == 0)
            ctype = v;
        else if (strcasecmp(line, "Content-Length") == 0)
            clen = strtoll(v, NULL, 10);
        else if (!hop_by_hop(line))
            http_reply_add_header(p->req, line, v);
    }
    if (http_stream_start(p->req, status, ctype, clen >= 0 ? clen : -1) < 0)
        return -1;
    p->started = true;
    return (long)(head_end + 4);
}

static void pxy_drain(struct http_req *req, void *arg)
{
    (void)req;
    struct pxy *p = arg;
    p->waiting = false;
    if (p->ch && p->owed) {
        agentc_grant(p->ch, FRAME_STREAM_OUT, p->owed);
        p->owed = 0;
    }
}

static void relay(struct pxy *p, const uint8_t *buf, size_t len)
{
    if (len && http_stream_write(p->req, buf, len) < 0) {
        pxy_fail(p, "response longer than its Content-Length");
        return;
    }
    if (http_stream_pending(p->req) > E2B_HIGH_WATER && !p->waiting) {
        p->waiting = true;
        http_stream_on_drain(p->req, pxy_drain, p);
    }
}

static void on_data(void *arg, enum frame_stream stream, const uint8_t *buf, size_t len)
{
    struct pxy *p = arg;
    if (stream == FRAME_STREAM_ERR) {
        size_t have = strlen(p->err);
        size_t n = len < sizeof p->err - 1 - have ? len : sizeof p->err - 1 - have;
        memcpy(p->err + have, buf, n);
        p->err[have + n] = '\0';
        for (size_t k = have + n; k > 0 && (p->err[k - 1] == '\n' || p->err[k - 1] == '\r');)
            p->err[--k] = '\0';
        agentc_grant(p->ch, stream, (uint32_t)len);
        return;
    }
    if (!p->req) {
        agentc_grant(p->ch, stream, (uint32_t)len);
        return;
    }
    if (p->started) {
        relay(p, buf, len);
    } else {
        if (p->headlen + len > PROXY_HEAD_MAX) {
            pxy_fail(p, "response head too large");
            return;
        }
        memcpy(p->head + p->headlen, buf, len);
        p->headlen += len;
        char *end = memmem(p->head, p->headlen, "\r\n\r\n", 4);
        if (end) {
            size_t total = p->headlen;
            long off = start_reply(p, (size_t)(end - p->head));
            if (off < 0) {
                pxy_fail(p, "the server's response is not HTTP/1.x");
                return;
            }
            relay(p, (const uint8_t *)p->head + off, total - (size_t)off);
        }
    }
    if (!p->ch)
        return;
    if (p->waiting)
        p->owed += (uint32_t)len;
    else
        agentc_grant(p->ch, stream, (uint32_t)len);
}

static void on_close(void *arg)
{
    struct pxy *p = arg;
    p->ch = NULL;
    if (p->req) {
        if (p->started) {
            struct http_req *req = p->req;
            p->req = NULL;
            http_stream_end(req);
        } else {
            pxy_fail(p, p->err[0] ? p->err : "no HTTP server answered");
        }
    }
    pxy_release(p);
}

static const struct agentc_chan_ops pxy_ops = {
    .on_data = on_data,
    .on_close = on_close,
};

static void on_http_close(struct http_req *req, void *arg)
{
    (void)req;
    struct pxy *p = arg;
    p->req = NULL;
    if (p->ch) {
        json_t *kill = json_pack("{s:s, s:i}", "op", "signal", "signal", 9);
        agentc_ctrl(p->ch, kill);
        json_decref(kill);
        agentc_close(p->ch);
        p->ch = NULL;
    }
    pxy_release(p);
}

/* The request re-serialised for the guest server (HTTP/1.0, Connection: close). */
static char *request_head(struct http_req *req, size_t body_len, size_t *outlen)
{
    size_t cap = 1024 + strlen(http_req_target(req));
    const char *name, *value;
    for (unsigned i = 0; http_req_header_at(req, i, &name, &value); i++)
        cap += strlen(name) + strlen(value) + 4;
    char *h = malloc(cap);
    if (!h)
        return NULL;
    size_t n = (size_t)snprintf(h, cap, "%s %s HTTP/1.0\r\n", http_req_method(req),
                                http_req_target(req));
    for (unsigned i = 0; http_req_header_at(req, i, &name, &value); i++) {
        if ((hop_by_hop(name) && strcasecmp(name, "Content-Type") != 0) ||
            strncasecmp(name, "E2b-", 4) == 0 || strcasecmp(name, "X-Access-Token") == 0)
            continue;
        n += (size_t)snprintf(h + n, cap - n, "%s: %s\r\n", name, value);
    }
    n += (size_t)snprintf(h + n, cap - n, "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                          body_len);
    *outlen = n;
    return h;
}

struct pending_proxy {
    unsigned port;
    char id[STORE_ID_MAX];
    struct e2b *e;
};

static void on_body(struct http_req *req, const char *data, size_t len, void *arg)
{
    struct pending_proxy pp = *(struct pending_proxy *)arg;
    free(arg);
    http_req_on_close(req, NULL, NULL);
    struct sbx *s = sbx_find(pp.e->sp, NULL, pp.id);
    struct agentc *a = s ? sbx_agent(s) : NULL;
    if (!a) {
        e2b_reply_rest_error(req, 502, "sandbox %s is not running", pp.id);
        return;
    }
    char port[8];
    snprintf(port, sizeof port, "%u", pp.port);
    json_t *r = json_pack("{s:s, s:[s,s,s,s,s], s:b, s:s}", "op", "exec", "argv", "/bin/sh", "-c",
                          RELAY_SCRIPT, "relay", port, "stdin", 1, "user", "root");
    struct pxy *p = calloc(1, sizeof *p);
    size_t hl = 0;
    char *head = request_head(req, len, &hl);
    char why[128] = "out of memory";
    if (!r || !p || !head || !(p->head = malloc(PROXY_HEAD_MAX + 1)) ||
        !(p->ch = agentc_open(a, r, &pxy_ops, p, AGENTC_MANUAL_CREDIT, why, sizeof why))) {
        json_decref(r);
        free(head);
        if (p)
            free(p->head);
        free(p);
        e2b_reply_rest_error(req, 502, "cannot reach the sandbox: %s", why);
        return;
    }
    json_decref(r);
    p->req = req;
    p->port = pp.port;
    agentc_write(p->ch, head, hl);
    if (len)
        agentc_write(p->ch, data, len);
    free(head);
    http_req_on_close(req, on_http_close, p);
}

static void on_early_close(struct http_req *req, void *arg)
{
    (void)req;
    free(arg);
}

void e2b_port_proxy(struct e2b *e, struct http_req *req, const char *id, unsigned port)
{
    struct pending_proxy *pp = calloc(1, sizeof *pp);
    if (!pp) {
        e2b_reply_rest_error(req, 500, "out of memory");
        return;
    }
    pp->e = e;
    pp->port = port;
    snprintf(pp->id, sizeof pp->id, "%s", id);
    http_req_on_close(req, on_early_close, pp);
    if (http_req_read_body(req, PROXY_BODY_MAX, on_body, pp) < 0) {
        http_req_on_close(req, NULL, NULL);
        free(pp);
        e2b_reply_rest_error(req, 500, "request body already consumed");
    }
}
