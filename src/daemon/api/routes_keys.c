/* routes_keys.c: /v1/keys — admin-only creation, listing and revocation of API keys. */
#include <ctype.h>
#include <string.h>

#include "daemon/auth/auth.h"
#include "routes.h"

static json_t *time_or_null(int64_t ms)
{
    char buf[32];
    return ms ? json_string(spaced_fmt_time(ms, buf)) : json_null();
}

static json_t *key_json(const struct store_key *k)
{
    return json_pack("{s:s, s:s, s:s, s:b, s:o, s:o, s:o}", "id", k->id, "tenant", k->tenant,
                     "prefix", k->prefix, "admin", k->admin, "created_at", time_or_null(k->created_ms),
                     "expires_at", time_or_null(k->expires_ms), "revoked_at",
                     time_or_null(k->revoked_ms));
}

static bool tenant_name_ok(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n > 64)
        return false;
    for (; *s; s++)
        if (!(isalnum((unsigned char)*s) || *s == '-' || *s == '_' || *s == '.'))
            return false;
    return true;
}

static void create_body(struct http_req *req, const char *data, size_t len, void *arg)
{
    struct spaced *sp = arg;
    struct auth_principal who;
    if (!auth_require_admin(sp, req, &who))
        return;
    static const char *const known[] = {"tenant", "admin", "ttl_seconds", NULL};
    json_t *o = routes_parse_object(sp, req, data, len, known);
    if (!o)
        return;
    const char *tenant = json_string_value(json_object_get(o, "tenant"));
    json_t *adm = json_object_get(o, "admin"), *ttl = json_object_get(o, "ttl_seconds");
    struct spaced_err err;
    int rc = 0;
    if (!tenant_name_ok(tenant))
        rc = spaced_err_set(&err, 400, "invalid_request",
                            "tenant must be a name of 1..64 characters [A-Za-z0-9._-]");
    else if (adm && !json_is_boolean(adm))
        rc = spaced_err_set(&err, 400, "invalid_request", "admin must be a boolean");
    else if (json_is_true(adm) && strcmp(tenant, AUTH_ADMIN_TENANT) != 0)
        rc = spaced_err_set(&err, 400, "invalid_request", "admin keys belong to the tenant \"admin\"");
    else if (ttl && (!json_is_integer(ttl) || json_integer_value(ttl) < 0 ||
                     json_integer_value(ttl) > 10LL * 365 * 86400))
        rc = spaced_err_set(&err, 400, "invalid_request", "ttl_seconds must be an integer >= 0 (0 = never expires)");
    struct store_key k;
    char secret[AUTH_SECRET_LEN + 1], why[256];
    if (rc == 0 && auth_key_create(sp->auth, tenant, json_is_true(adm), ttl ? json_integer_value(ttl) : 0,
                                   &k, secret, why, sizeof why) < 0)
        rc = spaced_err_set(&err, 500, "internal", "%s", why);
    json_decref(o);
    if (rc < 0) {
        routes_reply_err(sp, req, &err);
        return;
    }
    json_t *body = json_pack("{s:o, s:s}", "key", key_json(&k), "secret", secret);
    http_reply_json(req, 201, body);
    json_decref(body);
}

static void h_create(struct http_req *req, void *arg)
{
    http_req_read_body(req, ROUTES_BODY_MAX, create_body, arg);
}

static int list_one(const struct store_key *k, void *arg)
{
    json_array_append_new(arg, key_json(k));
    return 0;
}

static void h_list(struct http_req *req, void *arg)
{
    struct spaced *sp = arg;
    struct auth_principal who;
    if (!auth_require_admin(sp, req, &who))
        return;
    json_t *arr = json_array();
    store_key_each(sp->store, list_one, arr);
    json_t *body = json_pack("{s:o}", "keys", arr);
    http_reply_json(req, 200, body);
    json_decref(body);
}

static void h_revoke(struct http_req *req, void *arg)
{
    struct spaced *sp = arg;
    struct auth_principal who;
    if (!auth_require_admin(sp, req, &who))
        return;
    const char *id = router_param(req, "id");
    struct store_key k;
    if (!id || strlen(id) > 64 || store_key_get(sp->store, id, &k) != 0) {
        routes_reply_error(sp, req, 404, "not_found", "key %.64s not found", id ? id : "");
        return;
    }
    if (!k.revoked_ms)
        store_key_revoke(sp->store, id, spaced_now_ms());
    store_key_get(sp->store, id, &k);
    json_t *body = json_pack("{s:o}", "key", key_json(&k));
    http_reply_json(req, 200, body);
    json_decref(body);
}

void routes_keys_register(struct router *r, struct spaced *sp)
{
    router_add(r, "POST", "/v1/keys", h_create, sp);
    router_add(r, "GET", "/v1/keys", h_list, sp);
    router_add(r, "DELETE", "/v1/keys/{id}", h_revoke, sp);
}
