/* routes_ratelimit.c: per-client API rate limiting, as the router's first hook.
 *
 * Who is a client: a request presenting a valid API key is charged to that key
 * ("key:<key id>", wherever it comes from); every other request (no key, a bad, revoked
 * or expired key, an attach token, E2B envd traffic) is charged to its source address
 * ("ip:<address>"). So a flood of bad keys from one address is limited like any other
 * flood, while one tenant's busy key does not starve others behind the same NAT.
 * Telling a valid key from a bad one costs the same store lookup auth_require makes.
 *
 * Over the limit: 429 {"error":{"code":"rate_limited",...}} with Retry-After (whole
 * seconds, at least 1), counted in space_http_errors_total{status="429"}.
 *
 * Behind a control daemon (multi-node, cluster.h) a node sees every request coming from
 * the control daemon's address. A request carrying the shared node secret is trusted to
 * name its real client in X-Forwarded-For (cluster_proxy sets it), so a node charges
 * keyless requests (attach tokens above all) to the real client, not to one shared
 * bucket for everyone; without the secret, X-Forwarded-For is ignored.
 *
 * Exempt: GET/HEAD /healthz and /metrics. They need no key, reveal no tenant data and
 * cost little; load balancers and scrapers often share an address with API clients,
 * and a client's flood must not make its host look dead to them. The connection limit
 * (http.h max_connections) still bounds them.
 *
 * The bucket table (ratelimit.h) is bounded, so clients cycling through addresses or
 * keys cannot grow it without bound. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "clock.h"
#include "daemon/http/ratelimit.h"
#include "daemon/auth/auth.h"
#include "daemon/cluster/cluster.h"
#include "routes.h"

struct routes_rl {
    struct spaced *sp;
    struct rl_table *t; /* owned */
};

static bool exempt(struct http_req *req)
{
    const char *m = http_req_method(req), *p = http_req_path(req);
    return (strcmp(m, "GET") == 0 || strcmp(m, "HEAD") == 0) &&
           (strcmp(p, "/healthz") == 0 || strcmp(p, "/metrics") == 0);
}

/* The client's "ip:port": the peer, or what a trusted control daemon put in
 * X-Forwarded-For. The proxy appends its header after the client's own copies, so only
 * the last header's last element is its word; anything before it is the client's. */
static const char *client_addr(struct routes_rl *R, struct http_req *req)
{
    const char *secret = R->sp->opt.node_token;
    const char *tok = http_req_header(req, CLUSTER_TOKEN_HEADER);
    if (!secret || !*secret || !tok || strlen(tok) != strlen(secret) ||
        CRYPTO_memcmp(tok, secret, strlen(secret)) != 0)
        return http_req_peer(req);
    const char *fwd = NULL, *v;
    for (unsigned i = 0; (v = http_req_header_n(req, "X-Forwarded-For", i)) != NULL; i++)
        fwd = v;
    const char *comma = fwd ? strrchr(fwd, ',') : NULL;
    if (comma)
        fwd = comma + 1;
    while (fwd && *fwd == ' ')
        fwd++;
    return fwd && *fwd ? fwd : http_req_peer(req);
}

/* "ip:<address>" from "a.b.c.d:port" or "[v6]:port" (the port is dropped: every
 * connection of a host shares one bucket). */
static void peer_key(struct routes_rl *R, struct http_req *req, char *out, size_t cap)
{
    const char *peer = client_addr(R, req);
    const char *start = peer, *end = strrchr(peer, ':');
    if (peer[0] == '[') {
        start = peer + 1;
        end = strchr(start, ']');
    }
    int len = end ? (int)(end - start) : (int)strlen(start);
    snprintf(out, cap, "ip:%.*s", len, start);
}

/* The client a request is charged to; true when it is an API key (else an address). */
static bool client_key(struct routes_rl *R, struct http_req *req, char *out, size_t cap)
{
    const char *key = auth_request_key(req);
    struct auth_principal who;
    char why[160];
    if (key && *key && auth_check_key(R->sp->auth, key, &who, why, sizeof why) == 0) {
        snprintf(out, cap, "key:%s", who.key_id);
        return true;
    }
    peer_key(R, req, out, cap);
    return false;
}

static bool ratelimit_hook(struct http_req *req, void *arg)
{
    struct routes_rl *R = arg;
    if (exempt(req))
        return false;
    char client[RL_KEY_MAX];
    bool by_key = client_key(R, req, client, sizeof client);
    int64_t wait_ms = rl_take(R->t, client, clock_mono_ms());
    if (wait_ms == 0)
        return false;
    char after[24];
    snprintf(after, sizeof after, "%lld", (long long)((wait_ms + 999) / 1000));
    http_reply_add_header(req, "Retry-After", after);
    routes_reply_error(R->sp, req, 429, "rate_limited",
                       "too many requests from this %s (limit %g per second, burst %g); "
                       "retry in %lld ms",
                       by_key ? "API key" : "address", R->sp->opt.rate, R->sp->opt.burst,
                       (long long)wait_ms);
    return true;
}

static void ratelimit_free(void *arg)
{
    struct routes_rl *R = arg;
    rl_free(R->t);
    free(R);
}

int routes_ratelimit_register(struct router *r, struct spaced *sp, char *err, size_t errlen)
{
    if (sp->opt.rate <= 0)
        return 0;
    struct rl_config cfg = {.rate = sp->opt.rate, .burst = sp->opt.burst};
    struct routes_rl *R = calloc(1, sizeof *R);
    if (R)
        R->t = rl_new(&cfg);
    if (!R || !R->t) {
        free(R);
        snprintf(err, errlen, "cannot set up rate limiting (rate %g, burst %g)", cfg.rate,
                 cfg.burst);
        return -1;
    }
    R->sp = sp;
    if (router_on_shutdown(r, ratelimit_free, R) < 0) {
        ratelimit_free(R);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (router_add_hook(r, ratelimit_hook, R) < 0) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    return 0;
}
