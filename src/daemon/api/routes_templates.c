/* routes_templates.c: /v1/templates — list, get, build and delete, scoped to the
 * caller's tenant (built-in templates are everyone's; built ones their tenant's). */
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
    json_t *body = tpl_list_json(sp, who.tenant);
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
    json_t *body = tpl_get_json(sp, who.tenant, name);
    if (!body) {
        routes_reply_error(sp, req, 404, "not_found", "template %.64s not found", name);
        return;
    }
    http_reply_json(req, 200, body);
    json_decref(body);
}

static void h_delete(struct http_req *req, void *arg)
{
    struct spaced *sp = arg;
    struct auth_principal who;
    if (!auth_require(sp, req, &who))
        return;
    json_t *body = NULL;
    struct spaced_err err;
    if (tpl_delete(sp, who.tenant, router_param(req, "name"), &body, &err) < 0) {
        routes_reply_err(sp, req, &err);
        return;
    }
    http_reply_json(req, 200, body);
    json_decref(body);
}

static void build_body(struct http_req *req, const char *data, size_t len, void *arg)
{
    struct spaced *sp = arg;
    struct auth_principal who;
    if (!auth_require(sp, req, &who))
        return;
    json_t *o = routes_parse_object(sp, req, data, len, tpl_spec_fields);
    if (!o)
        return;
    struct spaced_err err;
    int rc = tpl_spec_check(sp, who.tenant, o, &err);
    struct store_op op;
    char *spec = rc == 0 ? json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    if (rc == 0)
        rc = tpl_submit_build(sp, who.tenant, json_string_value(json_object_get(o, "name")), spec,
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
    /* Larger than other control-plane bodies: copy steps carry file contents. */
    http_req_read_body(req, TPL_SPEC_BODY_MAX, build_body, arg);
}

/* Node API: another node fetching a built template's image (template/tpl_fetch.c). */
static void h_image(struct http_req *req, void *arg)
{
    tpl_image_serve(arg, req, router_param(req, "name"));
}

void routes_templates_register(struct router *r, struct spaced *sp)
{
    router_add(r, "GET", "/internal/templates/{name}/image", h_image, sp);
    router_add(r, "GET", "/v1/templates", h_list, sp);
    router_add(r, "POST", "/v1/templates", h_build, sp);
    router_add(r, "GET", "/v1/templates/{name}", h_get, sp);
    router_add(r, "DELETE", "/v1/templates/{name}", h_delete, sp);
}
