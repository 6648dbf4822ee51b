/* routes_volumes.c: /v1/volumes, named volumes per tenant, and their files without a
 * sandbox (volume/vol.h: directories on the host, every path resolved beneath the
 * volume). Sandboxes mount them by name (the create field "volumes", volume/vol_mount.h);
 * E2B's volume API (e2b/e2b_volume.c) is the same volumes under E2B's routes.
 *
 *   POST   /v1/volumes {"name": "v"}          201 {"volume": {"name","created_at"}}
 *   GET    /v1/volumes                        200 {"volumes": [...]}
 *   GET    /v1/volumes/{name}                 200 {"volume": {...}}
 *   DELETE /v1/volumes/{name}                 204
 *   PUT    /v1/volumes/{name}/files?path=/a   streamed body -> 200 {"file": {"path","size"}}
 *                                             (missing parent directories are made)
 *   GET    /v1/volumes/{name}/files?path=/a   the file's bytes, streamed
 *   DELETE /v1/volumes/{name}/files?path=/a   204 (a file, or an empty directory)
 *   GET    /v1/volumes/{name}/files/list?path=/   200 {"entries": [{"name","type","size"}]}
 *
 * File transfers are volume/vol_xfer.c's (shared with E2B's volume content API). */
#include "daemon/auth/auth.h"
#include "daemon/session/sess_req.h"
#include "daemon/volume/vol.h"
#include "daemon/volume/vol_xfer.h"
#include "routes.h"

/* Authenticates and returns the path's volume name (checked later by vol.c), or NULL
 * after replying. */
static const char *vol_auth(struct spaced *sp, struct http_req *req, struct auth_principal *who)
{
    return auth_require(sp, req, who) ? router_param(req, "name") : NULL;
}

static void reply_volume(struct http_req *req, int status, json_t *v)
{
    json_t *o = json_pack("{s:o}", "volume", v);
    http_reply_json(req, status, o);
    json_decref(o);
}

static void create_body(struct http_req *req, const char *data, size_t len, void *sp)
{
    struct auth_principal who;
    struct spaced_err err;
    static const char *const known[] = {"name", NULL};
    if (!auth_require(sp, req, &who))
        return;
    json_t *b = routes_parse_object(sp, req, data, len, known);
    if (!b)
        return;
    const char *name = json_string_value(json_object_get(b, "name"));
    json_t *v = NULL;
    if (!name)
        spaced_err_set(&err, 400, "invalid_request", "name (a string) is required");
    else if (vol_create(sp, who.tenant, name, &err) == 0)
        v = vol_get(sp, who.tenant, name, &err);
    json_decref(b);
    if (v) {
        reply_volume(req, 201, v);
        return;
    }
    routes_reply_err(sp, req, &err);
}

static void h_create(struct http_req *req, void *sp)
{
    struct auth_principal who;
    if (auth_require(sp, req, &who))
        http_req_read_body(req, ROUTES_BODY_MAX, create_body, sp);
}

static void h_list(struct http_req *req, void *sp)
{
    struct auth_principal who;
    if (!auth_require(sp, req, &who))
        return;
    json_t *o = json_pack("{s:o}", "volumes", vol_list(sp, who.tenant));
    http_reply_json(req, 200, o);
    json_decref(o);
}

static void h_get(struct http_req *req, void *sp)
{
    struct auth_principal who;
    struct spaced_err err;
    const char *name = vol_auth(sp, req, &who);
    json_t *v = name ? vol_get(sp, who.tenant, name, &err) : NULL;
    if (v)
        reply_volume(req, 200, v);
    else if (name)
        routes_reply_err(sp, req, &err);
}

static void h_delete(struct http_req *req, void *sp)
{
    struct auth_principal who;
    struct spaced_err err;
    const char *name = vol_auth(sp, req, &who);
    if (!name)
        return;
    if (vol_delete(sp, who.tenant, name, &err) == 0)
        http_reply(req, 204, NULL, NULL, 0);
    else
        routes_reply_err(sp, req, &err);
}

/* ---- files (volume/vol_xfer.h moves the bytes) ----------------------------------------- */

static void xfer_fail(struct http_req *req, const struct spaced_err *err, void *sp)
{
    routes_reply_err(sp, req, err);
}

static void xfer_uploaded(struct http_req *req, const char *path, int fd, int64_t size, void *sp)
{
    (void)fd;
    (void)sp;
    json_t *o = json_pack("{s:{s:s, s:I}}", "file", "path", path, "size", (json_int_t)size);
    http_reply_json(req, 200, o);
    json_decref(o);
}

static const struct vol_xfer_ops xfer_ops = {xfer_fail, xfer_uploaded};

static void h_put(struct http_req *req, void *sp)
{
    struct auth_principal who;
    const char *name = vol_auth(sp, req, &who);
    if (name)
        vol_xfer_upload(sp, req, who.tenant, name, http_req_query(req, "path"), &xfer_ops, sp);
}

static void h_download(struct http_req *req, void *sp)
{
    struct auth_principal who;
    const char *name = vol_auth(sp, req, &who);
    if (name)
        vol_xfer_download(sp, req, who.tenant, name, http_req_query(req, "path"), &xfer_ops, sp);
}

static void h_remove(struct http_req *req, void *sp)
{
    struct auth_principal who;
    struct spaced_err err;
    const char *name = vol_auth(sp, req, &who);
    if (!name)
        return;
    bool recursive = false;
    if (sess_req_bool(http_req_query(req, "recursive"), "recursive", &recursive, &err) == 0 &&
        vol_remove(sp, who.tenant, name, http_req_query(req, "path"), recursive, &err) == 0)
        http_reply(req, 204, NULL, NULL, 0);
    else
        routes_reply_err(sp, req, &err);
}

static void h_list_dir(struct http_req *req, void *sp)
{
    struct auth_principal who;
    struct spaced_err err;
    const char *name = vol_auth(sp, req, &who);
    if (!name)
        return;
    const char *path = http_req_query(req, "path");
    json_t *e = vol_list_dir(sp, who.tenant, name, path ? path : "/", &err);
    if (!e) {
        routes_reply_err(sp, req, &err);
        return;
    }
    json_t *o = json_pack("{s:o}", "entries", e);
    http_reply_json(req, 200, o);
    json_decref(o);
}

void routes_volumes_register(struct router *r, struct spaced *sp)
{
    router_add(r, "POST", "/v1/volumes", h_create, sp);
    router_add(r, "GET", "/v1/volumes", h_list, sp);
    router_add(r, "GET", "/v1/volumes/{name}", h_get, sp);
    router_add(r, "DELETE", "/v1/volumes/{name}", h_delete, sp);
    router_add(r, "PUT", "/v1/volumes/{name}/files", h_put, sp);
    router_add(r, "GET", "/v1/volumes/{name}/files", h_download, sp);
    router_add(r, "DELETE", "/v1/volumes/{name}/files", h_remove, sp);
    router_add(r, "GET", "/v1/volumes/{name}/files/list", h_list_dir, sp);
}
