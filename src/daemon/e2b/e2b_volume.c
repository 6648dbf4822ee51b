/* e2b_volume: E2B's volume routes (SDK 2.51: Volume.create, connect, getInfo, list,
 * destroy) over space's native volumes (volume/vol.h), and the volume tokens the
 * content API (e2b_volcontent.c) takes.
 *
 *   POST   /volumes {"name"}        -> 201 VolumeAndToken {"volumeID","name","token","domain"}
 *   GET    /volumes                 -> 200 [{"volumeID","name"}]
 *   GET    /volumes/{volumeID}      -> 200 VolumeAndToken
 *   DELETE /volumes/{volumeID}      -> 204
 *
 * A volume's E2B id is its native name (unique per tenant, valid in a URL path), so the
 * same volume is reachable through /v1/volumes/{name} and mounts by that name. Every
 * lookup is in the caller's tenant: another tenant's volume answers 404 like a missing
 * one. Errors are E2B's REST {"code": <status>, "message"}; the per-tenant volume limit
 * is 429, as E2B answers a team over its limits (and as our sandbox creates do).
 *
 * Volume token: "<tenant>.<expiry ms>.<hmac>", an auth token (auth.h) for the scope
 * "e2b-volume:<tenant>:<name>:<ident>", valid E2B_VOLTOKEN_TTL_MS. The tenant part is
 * only a hint to find the volume: the HMAC covers it, so a token cannot be turned to
 * another tenant or volume; the directory's identity in the scope (vol_ident: inode and
 * birth time) makes a volume deleted and made again under the same name refuse the old
 * volume's tokens. A content request fails with a token once its volume is gone. */
#include <stdio.h>
#include <string.h>

#include "daemon/auth/auth.h"
#include "daemon/http/router.h"
#include "daemon/volume/vol.h"
#include "e2b.h"
#include "e2b_internal.h"

#define BODY_MAX (16u * 1024)
#define E2B_VOLTOKEN_TTL_MS (24LL * 3600 * 1000) /* Volume.connect() gets a fresh one */

/* The token scope of the tenant's volume into out, from its identity (vol_ident); -1
 * when the volume does not exist (or the tenant string is none of ours). */
static int token_scope(struct e2b *e, const char *tenant, const char *name, char *out,
                       size_t cap)
{
    struct spaced_err err;
    char ident[64];
    if (vol_ident(e->sp, tenant, name, ident, sizeof ident, &err) < 0)
        return -1;
    int n = snprintf(out, cap, "e2b-volume:%s:%s:%s", tenant, name, ident);
    return n < 0 || (size_t)n >= cap ? -1 : 0;
}

int e2b_volume_token(struct e2b *e, const char *tenant, const char *name, char *out, size_t cap)
{
    char scope[STORE_ID_MAX + VOL_NAME_MAX + 64], tok[AUTH_TOKEN_MAX];
    if (token_scope(e, tenant, name, scope, sizeof scope) < 0 ||
        auth_token_mint(e->sp->auth, scope, spaced_now_ms() + E2B_VOLTOKEN_TTL_MS, tok,
                        sizeof tok) < 0)
        return -1;
    int n = snprintf(out, cap, "%s.%s", tenant, tok);
    return n < 0 || (size_t)n >= cap ? -1 : 0;
}

bool e2b_volume_token_tenant(struct e2b *e, const char *token, const char *name,
                             char tenant[STORE_ID_MAX])
{
    const char *dot = token ? strchr(token, '.') : NULL;
    char scope[STORE_ID_MAX + VOL_NAME_MAX + 64];
    if (!dot || dot == token || dot - token >= STORE_ID_MAX)
        return false;
    snprintf(tenant, STORE_ID_MAX, "%.*s", (int)(dot - token), token);
    return token_scope(e, tenant, name, scope, sizeof scope) == 0 &&
           auth_token_verify(e->sp->auth, scope, dot + 1, spaced_now_ms());
}

/* VolumeAndToken of the tenant's volume, or NULL (out of memory, or gone meanwhile). */
static json_t *volume_and_token(struct e2b *e, const char *tenant, const char *name)
{
    char tok[STORE_ID_MAX + AUTH_TOKEN_MAX + 2];
    if (e2b_volume_token(e, tenant, name, tok, sizeof tok) < 0)
        return NULL;
    return json_pack("{s:s, s:s, s:s, s:o}", "volumeID", name, "name", name, "token", tok,
                     "domain", e->domain[0] ? json_string(e->domain) : json_null());
}

static void reply_volume(struct e2b *e, struct http_req *req, int status, const char *tenant,
                         const char *name)
{
    json_t *o = volume_and_token(e, tenant, name);
    if (!o) {
        e2b_reply_rest_error(req, 500, "cannot make a token for volume %s", name);
        return;
    }
    http_reply_json(req, status, o);
    json_decref(o);
}

/* A native error in E2B's shape: a missing or foreign volume and a malformed id are all
 * 404 (the id names no volume of the caller's), the volume limit 429. */
static void reply_err(struct http_req *req, const struct spaced_err *err)
{
    int status = err->status ? err->status : 500;
    if (strcmp(err->code, "invalid_name") == 0 && strcmp(http_req_method(req), "POST") != 0)
        status = 404;
    else if (strcmp(err->code, "quota_exceeded") == 0)
        status = 429;
    e2b_reply_rest_error(req, status, "%s", err->message);
}

static void create_body(struct http_req *req, const char *data, size_t len, void *arg)
{
    struct e2b *e = arg;
    struct auth_principal who;
    struct spaced_err err;
    if (!e2b_api_authenticate(e->sp, req, &who))
        return;
    json_t *b = json_loadb(data, len, 0, NULL);
    const char *name = json_string_value(json_object_get(b, "name"));
    if (!json_is_object(b) || !name)
        e2b_reply_rest_error(req, 400, "body must be {\"name\": string}");
    else if (vol_create(e->sp, who.tenant, name, &err) < 0)
        reply_err(req, &err);
    else
        reply_volume(e, req, 201, who.tenant, name);
    json_decref(b);
}

static void h_create(struct http_req *req, void *arg)
{
    struct e2b *e = arg;
    struct auth_principal who;
    if (e2b_api_authenticate(e->sp, req, &who) &&
        http_req_read_body(req, BODY_MAX, create_body, e) < 0)
        e2b_reply_rest_error(req, 500, "request body already claimed");
}

static void h_list(struct http_req *req, void *arg)
{
    struct e2b *e = arg;
    struct auth_principal who;
    if (!e2b_api_authenticate(e->sp, req, &who))
        return;
    json_t *ours = vol_list(e->sp, who.tenant), *out = json_array(), *v;
    size_t i;
    json_array_foreach(ours, i, v) {
        json_t *name = json_object_get(v, "name");
        json_array_append_new(out, json_pack("{s:O, s:O}", "volumeID", name, "name", name));
    }
    json_decref(ours);
    http_reply_json(req, 200, out);
    json_decref(out);
}

static void h_get(struct http_req *req, void *arg)
{
    struct e2b *e = arg;
    struct auth_principal who;
    struct spaced_err err;
    if (!e2b_api_authenticate(e->sp, req, &who))
        return;
    const char *name = router_param(req, "volumeID");
    json_t *v = vol_get(e->sp, who.tenant, name, &err);
    if (!v) {
        reply_err(req, &err);
        return;
    }
    json_decref(v);
    reply_volume(e, req, 200, who.tenant, name);
}

static void h_delete(struct http_req *req, void *arg)
{
    struct e2b *e = arg;
    struct auth_principal who;
    struct spaced_err err;
    if (!e2b_api_authenticate(e->sp, req, &who))
        return;
    if (vol_delete(e->sp, who.tenant, router_param(req, "volumeID"), &err) < 0)
        reply_err(req, &err);
    else
        http_reply(req, 204, NULL, NULL, 0);
}

void e2b_volume_register(struct router *r, struct e2b *e)
{
    router_add(r, "POST", "/volumes", h_create, e);
    router_add(r, "GET", "/volumes", h_list, e);
    router_add(r, "GET", "/volumes/{volumeID}", h_get, e);
    router_add(r, "DELETE", "/volumes/{volumeID}", h_delete, e);
    e2b_volcontent_register(r, e);
}
