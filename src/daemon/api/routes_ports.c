/* routes_ports.c: /v1/sandboxes/{id}/ports/{port}[/{path...}], any method: an HTTP
 * request forwarded to 127.0.0.1:<port> inside the sandbox (a server the sandbox's code
 * runs), with the rest of the path and the query as the target.
 *
 * Authenticated and tenant-checked like every sandbox route (a sandbox of another
 * tenant is a 404); a private sandbox (sbx_traffic.c) also needs its traffic token,
 * and without it is the same 404. No credential is forwarded (http_hdr.h). The
 * forwarding itself is e2b_port_forward (e2b_portproxy.c, shared with E2B's getHost):
 * one agent `tcp` channel per request, bodies streamed both ways under backpressure,
 * a response cut short aborts the client connection, and Upgrade (WebSocket) works
 * after a 101. Route shapes are documented in docs/api.md ("Sandbox ports"). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/http/router.h"
#include "daemon/api/routes.h"
#include "daemon/auth/auth.h"
#include "daemon/e2b/e2b.h"
#include "daemon/sandbox/sbx.h"
#include "http_hdr.h"


/* "1".."65535" without sign, leading zero or junk; 0 when not. */
static unsigned parse_port(const char *s)
{
    if (!s || !*s || *s == '0' || strlen(s) > 5 || strspn(s, "0123456789") != strlen(s))
        return 0;
    unsigned long v = strtoul(s, NULL, 10);
    return v <= 65535 ? (unsigned)v : 0;
}

static void h_port(struct http_req *req, void *arg)
{
    struct spaced *sp = arg;
    const char *id = router_param(req, "id"), *sport = router_param(req, "port");
    if (!sbx_id_valid(id)) {
        http_reply_error(req, 400, "invalid_id", "not a sandbox id (sb + 16 hex digits)");
        return;
    }
    unsigned port = parse_port(sport);
    if (!port) {
        http_reply_error(req, 400, "invalid_port", "the port must be 1..65535");
        return;
    }
    struct auth_principal who;
    if (!auth_require(sp, req, &who))
        return;
    /* A private sandbox without its traffic token is answered like no sandbox at all. */
    struct sbx *x = sbx_find(sp, who.tenant, id);
    if (!x || !sbx_traffic_allowed(x, http_req_header(req, HH_TRAFFIC_TOKEN_HEADER))) {
        http_reply_error(req, 404, "not_found", "no sandbox %s", id);
        return;
    }
    /* The target is taken from the raw request target, so the guest server sees the
     * path exactly as the client encoded it. id and port were checked to be plain
     * characters, so the raw prefix is their literal text unless the client
     * percent-encoded them (refused rather than guessed). */
    char prefix[128];
    int n = snprintf(prefix, sizeof prefix, "/v1/sandboxes/%s/ports/%s", id, sport);
    const char *raw = http_req_target(req);
    if (n < 0 || (size_t)n >= sizeof prefix || strncmp(raw, prefix, (size_t)n) != 0) {
        http_reply_error(req, 400, "invalid_path", "sandbox id and port must not be "
                         "percent-encoded");
        return;
    }
    const char *rest = raw + n;
    char *target = NULL;
    if (*rest == '/') {
        target = strdup(rest);
    } else if (asprintf(&target, "/%s", rest) < 0) {
        target = NULL;
    }
    if (!target) {
        http_reply_error(req, 503, "unavailable", "out of memory");
        return;
    }
    struct agentc *a = routes_require_agent(sp, req, x);
    if (a)
        e2b_port_forward(sp->e2b, req, a, port, target, true);
    free(target);
}

void routes_ports_register(struct router *r, struct spaced *sp)
{
    /* HEAD falls back to the GET route; the proxy sends HEAD upstream as it came. */
    static const char *const methods[] = {"GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"};
    for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++) {
        router_add(r, methods[i], "/v1/sandboxes/{id}/ports/{port}", h_port, sp);
        router_add(r, methods[i], "/v1/sandboxes/{id}/ports/{port}/{path...}", h_port, sp);
    }
}
