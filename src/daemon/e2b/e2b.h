/* e2b: E2B-compatible API, so the unmodified `e2b` SDKs (JS and Python) work against
 * spaced by pointing E2B_API_URL and E2B_SANDBOX_URL at it (docs/e2b.md).
 *
 * Two protocols share spaced's port (their paths do not collide):
 *   - the control plane (e2b_api.c): /sandboxes..., /v2/sandboxes... with X-API-KEY =
 *     a key spaced issued, mapped onto our sandboxes and asynchronous operations (E2B's
 *     calls are synchronous: the route submits the op and answers when it finishes);
 *   - envd (e2b_envd.c): Connect-RPC with the JSON codec (process.Process,
 *     filesystem.Filesystem), /files and /health, terminated here and translated to the
 *     agent protocol. A router hook takes these requests first, choosing the sandbox by
 *     the E2b-Sandbox-Id header, a Host of "49983-<id>.<domain>", or the access token.
 *
 * Environment (read by main.c into sp->opt): SPACE_E2B_DOMAIN (optional) is returned as
 * the sandboxes' `domain`, which the SDK uses to build getHost(port) =
 * "<port>-<id>.<domain>". SPACE_E2B_PORT_LISTEN (optional, "127.0.0.1:7071") starts the
 * sandbox-port listener, which carries getHost connections as byte pipes (WebSocket
 * included); point SPACE_E2B_DOMAIN at it.
 *
 * State: one `struct e2b` per spaced, sp->e2b (NULL when not registered: a role that
 * runs no sandboxes), allocated by e2b_register and freed by the router's shutdown.
 *
 * Through a control daemon (--role=control) the control forwards E2B calls to nodes
 * (cluster_e2b.c): it serves the listings itself, places creates, and forwards
 * per-sandbox calls, envd and sandbox-port traffic (naming the sandbox and port in
 * E2b-Sandbox-Id/-Port, since the Host it forwards is the node's), and the template
 * builder's calls to the node the build was placed on (naming its own address for the
 * upload link in HH_PUBLIC_URL_HEADER: e2b_tplfiles.c). */
#ifndef SPACE_E2B_H
#define SPACE_E2B_H

#include <stdbool.h>
#include <stddef.h>

struct router;
struct spaced;

#define E2B_ENVD_PORT 49983 /* envd's port in a sandbox: Host "49983-<id>.<domain>" */

/* Registers the control-plane routes and the envd hook on `r` and sets sp->e2b. Called
 * once by main.c after the core modules are up; the state is freed with the router at
 * shutdown (after the HTTP server and the sandbox table: by then no request or agent
 * channel refers to it). */
void e2b_register(struct router *r, struct spaced *sp);

/* ---- for the control role (src/daemon/cluster), which runs no sandboxes and forwards
 * E2B traffic to the node of each sandbox */
struct http_req;
struct auth_principal;

/* Registers only the E2B listings (GET /sandboxes, GET /v2/sandboxes), which read the
 * shared store; sp->e2b stays NULL. */
void e2b_register_listings(struct router *r, struct spaced *sp);
/* Whether req is envd or sandbox-port traffic, told from the request alone (a Host of
 * "<port>-<id>.<domain>", the E2b-Sandbox-Id/-Port headers, or envd's paths with an
 * access token, which names its sandbox): fills id ("" when only local state could
 * tell, e.g. a signed /files URL) and port (E2B_ENVD_PORT for envd). */
bool e2b_sandbox_traffic(struct http_req *req, char *id, size_t cap, unsigned *port);
/* Authenticates an E2B control-plane call (X-API-KEY; "e2b_" keys accepted), replying
 * E2B's error shape itself (401, or 503 when the store is down) when it fails. */
bool e2b_api_authenticate(struct spaced *sp, struct http_req *req, struct auth_principal *who);
/* E2B's REST error reply: {"code": status, "message": ...}. */
void e2b_reply_rest_error(struct http_req *req, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Forwards `req` to 127.0.0.1:<port> inside the sandbox whose agent is `a`, over one
 * agent `tcp` channel, with `target` ("/path?query") as the request target: bodies
 * stream both ways under backpressure, a response cut short aborts the client
 * connection, Upgrade (WebSocket) is carried after a 101 (e2b_portproxy.c). Replies
 * itself in every case. No credential spaced consumes and no hop-by-hop field is
 * forwarded (http_hdr.h). api: errors are our API's {"error":{...}} (502
 * port_unreachable); else E2B's REST error shape. Used by getHost and by /v1/sandboxes/{id}/ports/{port}/... */
struct http_req;
struct agentc;
struct e2b;
/* e: sp->e2b, whose pipe set takes an upgraded connection (NULL: upgrades fail with the
 * connection closed). */
void e2b_port_forward(struct e2b *e, struct http_req *req, struct agentc *a, unsigned port,
                      const char *target, bool api);

#endif
