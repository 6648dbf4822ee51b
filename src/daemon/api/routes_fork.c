/* routes_fork.c: POST /v1/sandboxes/{id}/fork {"count": N} — N new sandboxes holding the
 * running sandbox's memory, processes and disk at one instant (sbx_fork.c). Answers 202
 * {"operation", "sandboxes": [ids]}: the operation succeeds once every fork runs. */
#include <stdio.h>

#include "daemon/auth/auth.h"
#include "daemon/ops/op.h"
#include "daemon/sandbox/sbx.h"
#include "routes.h"

static void fork_body(struct http_req *req, const char *data, size_t len, void *arg)
{
    struct spaced *sp = arg;
    struct auth_principal who;
    const char *id;
    static const char *const known[] = {"count", NULL};
    json_t *o = routes_sandbox_body(sp, req, data, len, known, &who, &id);
    if (!o)
        return;
    json_t *c = json_object_get(o, "count");
    json_int_t n = c ? json_integer_value(c) : 1;
    bool bad = c && (!json_is_integer(c) || n < 1 || n > SBX_FORK_MAX);
    json_decref(o);
    if (bad) {
        routes_reply_error(sp, req, 400, "invalid_request",
                           "count must be an integer in 1..%d", SBX_FORK_MAX);
        return;
    }
    struct store_op op;
    struct spaced_err err;
    char ids[SBX_FORK_MAX][STORE_ID_MAX];
    if (sbx_submit_fork(sp, who.tenant, id, (unsigned)n, &op, ids, &err) < 0) {
        routes_reply_err(sp, req, &err);
        return;
    }
    json_t *list = json_array();
    for (json_int_t i = 0; i < n; i++)
        json_array_append_new(list, json_string(ids[i]));
    char loc[128];
    snprintf(loc, sizeof loc, "/v1/operations/%s", op.id);
    http_reply_add_header(req, "Location", loc);
    json_t *body = json_pack("{s:o, s:o}", "operation", op_to_json(&op), "sandboxes", list);
    http_reply_json(req, 202, body);
    json_decref(body);
    store_op_clear(&op);
}

static void h_fork(struct http_req *req, void *arg)
{
    http_req_read_body(req, ROUTES_BODY_MAX, fork_body, arg);
}

void routes_fork_register(struct router *r, struct spaced *sp)
{
    router_add(r, "POST", "/v1/sandboxes/{id}/fork", h_fork, sp);
}
