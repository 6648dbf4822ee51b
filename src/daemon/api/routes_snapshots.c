/* routes_snapshots.c: persistent snapshots (sbx_snap.c).
 *   POST   /v1/sandboxes/{id}/snapshots {"name": optional}  202 {"operation","snapshot"}
 *   GET    /v1/snapshots                                    {"snapshots": [...]}
 *   GET    /v1/snapshots/{id}  (id or name)                 {"snapshot": {...}}
 *   DELETE /v1/snapshots/{id}  (id or name)                 204
 *   GET    /internal/snapshots/{id}/parts/{part}             node API: another node fetching
 *                                                            a part (sbx_travel.c)
 *   GET    /internal/sandboxes/{id}/parts/{part}             node API: the node a suspended
 *                                                            sandbox moved to fetching a part
 *                                                            of its files (sbx_move.c)
 * A snapshot is used by naming it as the template of a create (POST /v1/sandboxes). */
#include <stdio.h>
#include <string.h>

#include "daemon/auth/auth.h"
#include "daemon/ops/op.h"
#include "daemon/sandbox/sbx.h"
#include "routes.h"

#define SNAP_NAME_MAX 63

/* 1..SNAP_NAME_MAX of [A-Za-z0-9._-], not starting with a dot or dash, and not shaped
 * like a snapshot id ("sn" + 16 hex): a name never reads as another snapshot's id. */
static bool name_valid(const char *n)
{
    size_t len = strlen(n);
    if (len < 1 || len > SNAP_NAME_MAX || n[0] == '.' || n[0] == '-')
        return false;
    if (len == 18 && strncmp(n, "sn", 2) == 0 && strspn(n + 2, "0123456789abcdef") == 16)
        return false;
    return strspn(n, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") == len;
}

static void create_body(struct http_req *req, const char *data, size_t len, void *arg)
{
    struct spaced *sp = arg;
    struct auth_principal who;
    const char *id;
    static const char *const known[] = {"name", NULL};
    json_t *o = routes_sandbox_body(sp, req, data, len, known, &who, &id);
    if (!o)
        return;
    json_t *jn = json_object_get(o, "name");
    char name[SNAP_NAME_MAX + 1] = "";
    bool bad = jn && !json_is_null(jn) &&
               (!json_is_string(jn) || !name_valid(json_string_value(jn)));
    if (!bad && json_is_string(jn))
        snprintf(name, sizeof name, "%s", json_string_value(jn));
    json_decref(o);
    if (bad) {
        routes_reply_error(sp, req, 400, "invalid_request", "name must be 1..%d characters of "
                           "A-Z a-z 0-9 . _ - not starting with . or -, and not shaped like a "
                           "snapshot id", SNAP_NAME_MAX);
        return;
    }
    struct store_op op;
    struct store_snap snap;
    struct spaced_err err;
    if (sbx_submit_snapshot(sp, who.tenant, id, name, &op, &snap, &err) < 0) {
        routes_reply_err(sp, req, &err);
        return;
    }
    char loc[128];
    snprintf(loc, sizeof loc, "/v1/operations/%s", op.id);
    http_reply_add_header(req, "Location", loc);
    json_t *body = json_pack("{s:o, s:o}", "operation", op_to_json(&op), "snapshot",
                             sbx_snap_to_json(&snap));
    http_reply_json(req, 202, body);
    json_decref(body);
    store_op_clear(&op);
}

static void h_create(struct http_req *req, void *arg)
{
    http_req_read_body(req, ROUTES_BODY_MAX, create_body, arg);
}

static int add_one(const struct store_snap *r, void *arg)
{
    json_array_append_new(arg, sbx_snap_to_json(r));
    return 0;
}

static void h_list(struct http_req *req, void *arg)
{
    struct spaced *sp = arg;
    struct auth_principal who;
    if (!auth_require(sp, req, &who))
        return;
    json_t *list = json_array();
    if (store_snap_each(sp->store, who.tenant, add_one, list) != 0) {
        json_decref(list);
        routes_reply_error(sp, req, 503, "store_unavailable", "listing snapshots: the store failed");
        return;
    }
    json_t *body = json_pack("{s:o}", "snapshots", list);
    http_reply_json(req, 200, body);
    json_decref(body);
}

static void h_get(struct http_req *req, void *arg)
{
    struct spaced *sp = arg;
    struct auth_principal who;
    if (!auth_require(sp, req, &who))
        return;
    const char *id = router_param(req, "id");
    struct store_snap r;
    int rc = store_snap_find(sp->store, who.tenant, id ? id : "", &r);
    if (rc == STORE_NOTFOUND) {
        routes_reply_error(sp, req, 404, "not_found", "snapshot %.64s not found", id ? id : "");
        return;
    }
    if (rc != 0) {
        routes_reply_error(sp, req, 503, "store_unavailable", "reading a snapshot: the store failed");
        return;
    }
    json_t *body = json_pack("{s:o}", "snapshot", sbx_snap_to_json(&r));
    http_reply_json(req, 200, body);
    json_decref(body);
}

static void h_delete(struct http_req *req, void *arg)
{
    struct spaced *sp = arg;
    struct auth_principal who;
    if (!auth_require(sp, req, &who))
        return;
    const char *id = router_param(req, "id");
    struct spaced_err err;
    if (sbx_snap_delete(sp, who.tenant, id ? id : "", &err) < 0) {
        routes_reply_err(sp, req, &err);
        return;
    }
    http_reply(req, 204, NULL, NULL, 0);
}

static void h_sandbox_part(struct http_req *req, void *arg)
{
    sbx_move_serve(arg, req, router_param(req, "id"), router_param(req, "part"));
}

static void h_part(struct http_req *req, void *arg)
{
    sbx_travel_serve(arg, req, router_param(req, "id"), router_param(req, "part"));
}

void routes_snapshots_register(struct router *r, struct spaced *sp)
{
    router_add(r, "GET", "/internal/snapshots/{id}/parts/{part}", h_part, sp);
    router_add(r, "GET", "/internal/sandboxes/{id}/parts/{part}", h_sandbox_part, sp);
    router_add(r, "POST", "/v1/sandboxes/{id}/snapshots", h_create, sp);
    router_add(r, "GET", "/v1/snapshots", h_list, sp);
    router_add(r, "GET", "/v1/snapshots/{id}", h_get, sp);
    router_add(r, "DELETE", "/v1/snapshots/{id}", h_delete, sp);
}
