/* routes_common.c: error replies, operation replies and strict JSON body parsing shared
 * by the control-plane route files. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/auth/auth.h"
#include "daemon/http/sse.h"
#include "daemon/metrics/metrics.h"
#include "daemon/ops/op.h"
#include "daemon/sandbox/sbx.h"
#include "routes.h"

void routes_reply_err(struct spaced *sp, struct http_req *req, const struct spaced_err *err)
{
    metrics_http_error(sp->metrics, err->status);
    if (err->status == 503) /* a store or agent that is back soon: tell clients when to retry */
        http_reply_add_header(req, "Retry-After", "1");
    http_reply_error(req, err->status, err->code, "%s", err->message);
}

void routes_reply_error(struct spaced *sp, struct http_req *req, int status, const char *code,
                        const char *fmt, ...)
{
    struct spaced_err e;
    e.status = status;
    snprintf(e.code, sizeof e.code, "%s", code);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e.message, sizeof e.message, fmt, ap);
    va_end(ap);
    routes_reply_err(sp, req, &e);
}

struct agentc *routes_agent_now(struct http_req *req, struct sbx *x)
{
    struct agentc *a = sbx_agent(x);
    if (a)
        return a;
    if (sbx_state(x) == SBX_RUNNING) {
        http_reply_add_header(req, "Retry-After", "1");
        http_reply_error(req, 503, "agent_unavailable",
                         "sandbox %s is running but its agent is not connected yet "
                         "(spaced restarted or the sandbox is resuming); retry shortly",
                         sbx_id(x));
    } else {
        http_reply_error(req, 409, "not_running", "sandbox %s is %s, not running", sbx_id(x),
                         sbx_state_name(sbx_state(x)));
    }
    return NULL;
}

static void replay(struct http_req *req, void *arg)
{
    (void)arg;
    router_replay(req);
}

static void wake_failed(struct http_req *req, const struct spaced_err *err, void *sp)
{
    routes_reply_err(sp, req, err);
}

struct agentc *routes_require_agent(struct spaced *sp, struct http_req *req, struct sbx *x)
{
    struct agentc *a = sbx_agent(x);
    if (a || sbx_park_request(sp, req, x, replay, wake_failed, sp))
        return a;
    return routes_agent_now(req, x);
}

void routes_reply_op(struct http_req *req, int status, const struct store_op *op,
                     const json_t *sandbox)
{
    char loc[128];
    snprintf(loc, sizeof loc, "/v1/operations/%s", op->id);
    http_reply_add_header(req, "Location", loc);
    json_t *body = json_pack("{s:o}", "operation", op_to_json(op));
    if (sandbox)
        json_object_set(body, "sandbox", (json_t *)sandbox);
    http_reply_json(req, status, body);
    json_decref(body);
}

json_t *routes_parse_object(struct spaced *sp, struct http_req *req, const char *data,
                            size_t len, const char *const *known)
{
    if (len == 0)
        return json_object();
    json_error_t jerr;
    json_t *o = json_loadb(data, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!o) {
        routes_reply_error(sp, req, 400, "invalid_json", "body is not valid JSON: %s (at byte %d)",
                           jerr.text, jerr.position);
        return NULL;
    }
    if (!json_is_object(o)) {
        json_decref(o);
        routes_reply_error(sp, req, 400, "invalid_json", "body must be a JSON object");
        return NULL;
    }
    const char *k;
    json_t *v;
    json_object_foreach(o, k, v) {
        int i = 0;
        while (known && known[i] && strcmp(known[i], k) != 0)
            i++;
        if (!known || !known[i]) {
            routes_reply_error(sp, req, 400, "unknown_field", "\"%.64s\" is not a known field", k);
            json_decref(o);
            return NULL;
        }
    }
    return o;
}

const char *routes_sandbox_param(struct spaced *sp, struct http_req *req)
{
    const char *id = router_param(req, "id");
    if (!sbx_id_valid(id)) {
        routes_reply_error(sp, req, 404, "not_found", "sandbox %.64s not found", id ? id : "");
        return NULL;
    }
    return id;
}

json_t *routes_sandbox_body(struct spaced *sp, struct http_req *req, const char *data,
                            size_t len, const char *const *known, struct auth_principal *who,
                            const char **id)
{
    if (!auth_require(sp, req, who) || !(*id = routes_sandbox_param(sp, req)))
        return NULL;
    return routes_parse_object(sp, req, data, len, known);
}

int routes_last_event_id(struct spaced *sp, struct http_req *req, int64_t *last)
{
    *last = sse_last_event_id(req);
    const char *q = http_req_query(req, "last_event_id");
    if (*last >= 0 || (!q && !http_req_header(req, "Last-Event-ID")))
        return 0;
    char *end = NULL;
    errno = 0;
    long long v = q && *q >= '0' && *q <= '9' ? strtoll(q, &end, 10) : -1;
    if (v < 0 || errno || *end) {
        routes_reply_error(sp, req, 400, "invalid_request", "Last-Event-ID must be a decimal event id");
        return -1;
    }
    *last = v;
    return 0;
}
