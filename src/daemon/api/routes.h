/* routes: the control-plane routes (lifecycle, operations, templates, keys, health,
 * metrics) and the helpers every route file shares. Registration functions are called
 * once from main.c (see spaced.h for the full list and order). */
#ifndef SPACE_ROUTES_H
#define SPACE_ROUTES_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "daemon/http/http.h"
#include "daemon/http/router.h"
#include "daemon/spaced.h"
#include "daemon/store/store.h"

#define ROUTES_BODY_MAX (1024 * 1024) /* control-plane JSON bodies; larger -> 413 */

void routes_health_register(struct router *r, struct spaced *sp);
void routes_keys_register(struct router *r, struct spaced *sp);
void routes_sandboxes_register(struct router *r, struct spaced *sp);
void routes_fork_register(struct router *r, struct spaced *sp);     /* fork (from the above) */
void routes_snapshots_register(struct router *r, struct spaced *sp); /* snapshots (idem) */
void routes_ops_register(struct router *r, struct spaced *sp);
void routes_templates_register(struct router *r, struct spaced *sp);
void routes_sessions_register(struct router *r, struct spaced *sp); /* command sessions */
void routes_files_register(struct router *r, struct spaced *sp);    /* files API */
void routes_network_register(struct router *r, struct spaced *sp);  /* network, credentials */
void routes_ports_register(struct router *r, struct spaced *sp);    /* sandbox ports proxy */
void routes_quota_register(struct router *r, struct spaced *sp);    /* per-tenant quotas */
void routes_logs_register(struct router *r, struct spaced *sp);     /* console log */
void routes_volumes_register(struct router *r, struct spaced *sp);  /* /v1/volumes */
void routes_events_register(struct router *r, struct spaced *sp);   /* /v1/events (SSE) */
/* Per-client rate limiting (routes_ratelimit.c) from sp->opt.rate/burst, as a router
 * hook: register it before any other hook. Nothing when rate is 0. Returns 0, or -1 with
 * a message in err. Its context is freed by router_free. */
int routes_ratelimit_register(struct router *r, struct spaced *sp, char *err, size_t errlen);

/* Sends err as the JSON error reply and counts it in the metrics. */
void routes_reply_err(struct spaced *sp, struct http_req *req, const struct spaced_err *err);
/* Same from parts. */
void routes_reply_error(struct spaced *sp, struct http_req *req, int status, const char *code,
                        const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* The running sandbox's agent, or NULL after replying: 409 not_running naming the
 * state when the sandbox is not running, 503 agent_unavailable (Retry-After: 1) when
 * it is running but its agent is not connected yet (spaced just restarted and is
 * re-adopting it, or a restore is completing): nothing was done, so a retry is safe.
 * Never waits: for a check after the request's body was claimed. */
struct sbx;
struct agentc;
struct agentc *routes_agent_now(struct http_req *req, struct sbx *x);

/* The same, except that a sandbox with auto-resume that is paused or suspended is woken
 * first (sbx_park_request, sbx.h): then NULL is returned with the request parked, and once
 * the sandbox runs the route's handler runs again from the top (router_replay), finding
 * the agent. Callers treat NULL as "answered" either way. Only before the handler claimed
 * the request's body or started replying. */
struct agentc *routes_require_agent(struct spaced *sp, struct http_req *req, struct sbx *x);

/* 202 {"operation": op, "sandbox": <sandbox or omitted>} with Location. Takes no
 * ownership of sandbox. */
void routes_reply_op(struct http_req *req, int status, const struct store_op *op,
                     const json_t *sandbox);

/* Parses a body that must be empty or a JSON object whose keys are all in `known`
 * (NULL-terminated). Returns the object (new reference; {} for an empty body) or NULL
 * after replying 400 itself. */
json_t *routes_parse_object(struct spaced *sp, struct http_req *req, const char *data,
                            size_t len, const char *const *known);

/* The path's {id} as a sandbox id, or NULL after replying 404: a malformed id answers
 * as an unknown sandbox (it cannot name one). */
const char *routes_sandbox_param(struct spaced *sp, struct http_req *req);

/* The start of a POST with a JSON body on /v1/sandboxes/{id}/...: authenticates (into
 * *who), checks {id} (routes_sandbox_param) and parses the body (routes_parse_object).
 * Returns the object, or NULL after replying. */
struct auth_principal;
json_t *routes_sandbox_body(struct spaced *sp, struct http_req *req, const char *data,
                            size_t len, const char *const *known, struct auth_principal *who,
                            const char **id);

/* Where an event stream resumes: the Last-Event-ID header, else ?last_event_id= (a
 * browser's EventSource cannot set headers on a new stream), as a decimal id, or -1 when
 * neither is given. Returns 0, or -1 after replying 400 to a malformed one. */
int routes_last_event_id(struct spaced *sp, struct http_req *req, int64_t *last);

#endif
