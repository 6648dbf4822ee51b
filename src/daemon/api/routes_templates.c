/* routes_templates.c: /v1/templates — list, get, and build requests. */
#include <stdlib.h>
#include <string.h>

#include "daemon/auth/auth.h"
#include "daemon/ops/op.h"
#include "daemon/template/tpl.h"
#include "routes.h"

static void h_list(struct http_req *req, void *arg)
{
    struct spaced *sp = arg;
    struct auth_principal who;
    if (!auth_require(sp, req, &who))
        return;
    json_t *body = tpl_list_json(sp);
    http_reply_json(req, 200, body);
    json_decref(body);
}

static void h_get(struct http_req *req, void *arg)
{
    struct spaced *sp = arg;
    struct auth_principal who;
    if (!auth_require(sp, req, &who))
        return;
    const char *name = router_param(req, "name");
    json_t *body = tpl_get_json(sp, name);
    if (!body) {
        routes_reply_error(sp, req, 404, "not_found", "template %.64s not found", name);
        return;
    }
    http_reply_json(req, 200, body);
    json_decref(body);
}

/* Validates a build spec: {"name", "from", "steps":[{"run": str}]}. */
static int build_spec_check(json_t *o, struct spaced *sp, struct spaced_err *err)
{
    const char *name = json_string_value(json_object_get(o, "name"));
    const char *from = json_string_value(json_object_get(o, "from"));
    json_t *steps = json_object_get(o, "steps");
    struct tpl_info t;
    if (!name || !from)
        return spaced_err_set(err, 400, "invalid_request", "name and from are required strings");
    if (!tpl_name_valid(name))
        return spaced_err_set(err, 400, "invalid_request",
                              "name must be 1..48 characters [a-z0-9_-], not starting with '-'");
    if (tpl_lookup(sp, NULL, from, &t, err) < 0)
        return -1;
    if (tpl_lookup(sp, NULL, name, &t, NULL) == 0)
        return spaced_err_set(err, 409, "conflict", "template %s already exists", name);
    if (steps && (!json_is_array(steps) || json_array_size(steps) > 64))
        return spaced_err_set(err, 400, "invalid_request", "steps must be an array of at most 64 steps");
    size_t i;
    json_t *s;
    json_array_foreach(steps, i, s) {
        if (!json_is_object(s) || json_object_size(s) != 1 || !json_is_string(json_object_get(s, "run")))
            return spaced_err_set(err, 400, "invalid_request", "steps[%zu] must be {\"run\": \"<command>\"}", i);
    }
    return 0;
}

static void build_body(struct http_req *req, const char *data, size_t len, void *arg)
{
    struct spaced *sp = arg;
    struct auth_principal who;
    if (!auth_require(sp, req, &who))
        return;
    static const char *const known[] = {"name", "from", "steps", NULL};
    json_t *o = routes_parse_object(sp, req, data, len, known);
    if (!o)
        return;
    struct spaced_err err;
    int rc = build_spec_check(o, sp, &err);
    struct store_op op;
    char *spec = rc == 0 ? json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    if (rc == 0)
        rc = op_submit_template(sp, who.tenant, json_string_value(json_object_get(o, "name")), spec,
                                &op, &err);
    free(spec);
    json_decref(o);
    if (rc < 0) {
        routes_reply_err(sp, req, &err);
        return;
    }
    routes_reply_op(req, 202, &op, NULL);
    store_op_clear(&op);
}

static void h_build(struct http_req *req, void *arg)
{
    http_req_read_body(req, ROUTES_BODY_MAX, build_body, arg);
}

void routes_templates_register(struct router *r, struct spaced *sp)
{
    router_add(r, "GET", "/v1/templates", h_list, sp);
    router_add(r, "POST", "/v1/templates", h_build, sp);
    router_add(r, "GET", "/v1/templates/{name}", h_get, sp);
}
