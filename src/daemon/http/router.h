/* router: maps method + path pattern to a handler, on top of http.h.
 *
 * Patterns are absolute paths whose segments are literals or `{name}` parameters:
 * "/v1/sandboxes/{id}/sessions/{sid}". A parameter matches exactly one non-empty
 * segment; a pattern ending in "/{name...}" matches the rest of the path (one or more
 * segments, e.g. "/files/{path...}"). Matching works on the raw path segment by
 * segment and percent-decodes each captured segment, so "%2F" inside an id never
 * creates a new segment. Literal segments win over parameters when both match.
 *
 * Dispatch order for each request:
 *   1. hooks, in registration order: each gets first look and returns true if it took
 *      the request (it then owns replying). This is how the E2B layer routes envd
 *      traffic by the `E2b-Sandbox-Id` header or a Host of `<port>-<id>.<domain>`;
 *      a hook may forward to a second router with router_dispatch().
 *   2. routes: the first pattern matching the path with the request's method runs.
 *      HEAD falls back to a GET route (the server drops the body).
 *   3. a path known with other methods: 405 JSON error with an Allow header;
 *      otherwise 404 JSON error {"error":{"code":"not_found",...}}.
 *
 * Routes are fixed at startup: add them before the server starts serving.
 *
 * Shutdown: a module that allocates a context for its routes or hooks registers a free
 * function with router_on_shutdown; router_free runs them, newest first, so every
 * registered context has an owner until exit.
 */
#ifndef SPACE_ROUTER_H
#define SPACE_ROUTER_H

#include <stdbool.h>

#include "http.h"

struct router;

/* A route handler: same contract as http_handler_fn (see http.h, REQUEST LIFETIME). */
typedef void (*router_handler_fn)(struct http_req *req, void *arg);

/* A hook: returns true if it took the request (and will reply), false to pass. */
typedef bool (*router_hook_fn)(struct http_req *req, void *arg);

/* Creates an empty router. Returns NULL on allocation failure. Caller owns it. */
struct router *router_new(void);
/* Runs the shutdown functions (router_on_shutdown), then frees the router; route args
 * without a shutdown function are not freed. spaced frees the router after the sandbox
 * table and the ops engine (nothing can call into a route context any more) and before
 * the store and the event loop (which a context may still use while freeing). NULL is
 * accepted. */
void router_free(struct router *r);

/* Adds a route. method is an upper-case token ("GET"); pattern as above. Returns 0, or
 * -1 if the pattern is malformed (not absolute, empty or unclosed `{}`, a `{x...}`
 * segment that is not last, a duplicate parameter name) or on allocation failure. */
int router_add(struct router *r, const char *method, const char *pattern,
               router_handler_fn fn, void *arg);

/* Adds a hook (see dispatch order). Returns 0 or -1 on allocation failure. */
int router_add_hook(struct router *r, router_hook_fn fn, void *arg);

/* A module's shutdown function: frees what it registered (arg is its context). */
typedef void (*router_free_fn)(void *arg);

/* Registers fn(arg) to run at shutdown, from router_free (newest first). Returns 0, or
 * -1 on allocation failure (then fn never runs and the caller still owns arg). */
int router_on_shutdown(struct router *r, router_free_fn fn, void *arg);

/* Dispatches one request; signature fits http_handler_fn with the router as arg:
 *   http_server_new(base, &lim, router_dispatch, router); */
void router_dispatch(struct http_req *req, void *router);

/* Runs the route handler this request was dispatched to again, from the top, without
 * the hooks (a request that waited, e.g. for an auto-resume, continues as if it had just
 * arrived; the rate limiter does not count it twice). Only for a request whose handler
 * has not claimed the body or replied; 500 when no route was dispatched to. */
void router_replay(struct http_req *req);

/* A path parameter captured by the matching route (decoded), or NULL. Valid while the
 * request is. Same as http_req_param(). */
const char *router_param(const struct http_req *req, const char *name);

#endif
