/* routes_network.c: a sandbox's network policy, decision log and credential rules.
 *
 *   GET /v1/sandboxes/{id}/network           {"mode","allow"?,"nic"}
 *   PUT /v1/sandboxes/{id}/network           body: policy {"mode","allow"?}; live change
 *   GET /v1/sandboxes/{id}/network/log       ?since=SEQ -> {"entries":[...]} (gateway log)
 *   GET /v1/sandboxes/{id}/credentials       {"credentials":[{"host","header"}]} (no secrets)
 *   PUT /v1/sandboxes/{id}/credentials       body: [{"host","header","secret"}] (replaces)
 *   GET /v1/credentials                      the caller's tenant's rules, same shape
 *   PUT /v1/credentials                      body: [{"host","header","secret"}] (replaces);
 *                                            they apply to every sandbox of the tenant,
 *                                            after its own rules (a sandbox rule wins)
 *   DELETE /v1/credentials                   204; the tenant has no rules any more
 * Secrets go to spaced's records and the gateway only; never into a VM, never back out
 * through the API. The tenant's API key is required, and a sandbox of another tenant is
 * a 404 like a missing one. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/api/routes.h"
#include "daemon/auth/auth.h"
#include "daemon/net/net.h"
#include "daemon/net/net_tenant.h"
#include "daemon/sandbox/sbx.h"


#define NET_BODY_MAX (1024 * 1024)

static void reply_unavailable(struct spaced *sp, struct http_req *req)
{
    routes_reply_error(sp, req, 503, "network_unavailable",
                       "sandbox networking is not available on this host (see spaced's log)");
}

/* What every handler starts with; replies the error itself and returns NULL. */
static struct sbx *resolve(struct spaced *sp, struct http_req *req, struct net **net)
{
    struct auth_principal who;
    if (!auth_require(sp, req, &who))
        return NULL;
    const char *id = router_param(req, "id");
    struct sbx *s = sbx_id_valid(id) ? sbx_find(sp, who.tenant, id) : NULL;
    if (!s) {
        routes_reply_error(sp, req, 404, "not_found", "sandbox %.64s not found", id ? id : "");
        return NULL;
    }
    if (!(*net = net_get(sp))) {
        reply_unavailable(sp, req);
        return NULL;
    }
    return s;
}

/* The body as JSON (any value; duplicate keys refused), or NULL after a 400. */
static json_t *parse_body(struct spaced *sp, struct http_req *req, const char *data, size_t len)
{
    json_error_t jerr;
    json_t *v = json_loadb(data, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!v)
        routes_reply_error(sp, req, 400, "invalid_json", "body is not valid JSON: %s (at byte %d)",
                           jerr.text, jerr.position);
    return v;
}

/* What every PUT on a sandbox starts with: the sandbox (as resolve) and its body
 * parsed (new reference); NULL after replying the error. */
static json_t *sandbox_body(struct spaced *sp, struct http_req *req, const char *data, size_t len,
                            struct net **net, struct sbx **s)
{
    *s = resolve(sp, req, net);
    return *s ? parse_body(sp, req, data, len) : NULL;
}

static void h_get_network(struct http_req *req, void *arg)
{
    struct spaced *sp = arg;
    struct net *net;
    struct sbx *s = resolve(sp, req, &net);
    if (!s)
        return;
    struct spaced_err err;
    json_t *p = net_policy_get(net, sbx_id(s), &err);
    if (!p) {
        /* Not started yet: what it will get. */
        struct spaced_err ignored;
        json_t *given = sbx_network_created(s);
        p = net_policy_check(given, &ignored);
        json_decref(given);
        if (!p)
            p = json_pack("{s:s}", "mode", "none");
        const char *mode = json_string_value(json_object_get(p, "mode"));
        json_object_set_new(p, "nic", json_boolean(strcmp(mode, "none") != 0));
    }
    http_reply_json(req, 200, p);
    json_decref(p);
}

static void put_network_body(struct http_req *req, const char *data, size_t len, void *arg)
{
    struct spaced *sp = arg;
    struct net *net;
    struct sbx *s;
    json_t *o = sandbox_body(sp, req, data, len, &net, &s);
    if (!o)
        return;
    struct spaced_err err;
    int rc = sbx_network_set(sp, s, o, &err);
    json_decref(o);
    if (rc != 0) {
        routes_reply_err(sp, req, &err);
        return;
    }
    h_get_network(req, arg);
}

static void h_put_network(struct http_req *req, void *arg)
{
    http_req_read_body(req, NET_BODY_MAX, put_network_body, arg);
}

static void h_log(struct http_req *req, void *arg)
{
    struct spaced *sp = arg;
    struct net *net;
    struct sbx *s = resolve(sp, req, &net);
    if (!s)
        return;
    const char *q = http_req_query(req, "since");
    char *end = NULL;
    errno = 0;
    long long since = q ? strtoll(q, &end, 10) : 0;
    if (q && (!*q || *end || errno || since < 0)) {
        routes_reply_error(sp, req, 400, "invalid_request", "since must be a non-negative integer");
        return;
    }
    struct spaced_err err;
    json_t *log = net_log(net, sbx_id(s), since, &err);
    if (!log && err.status == 404) {
        /* No network set up yet: nothing was decided. */
        log = json_pack("{s:[]}", "entries");
    }
    if (!log) {
        routes_reply_err(sp, req, &err);
        return;
    }
    http_reply_json(req, 200, log);
    json_decref(log);
}

/* 200 {"credentials": creds} (creds: rules without secrets; reference stolen). */
static void reply_creds(struct http_req *req, json_t *creds)
{
    json_t *body = json_pack("{s:o}", "credentials", creds);
    http_reply_json(req, 200, body);
    json_decref(body);
}

static void h_get_creds(struct http_req *req, void *arg)
{
    struct spaced *sp = arg;
    struct net *net;
    struct sbx *s = resolve(sp, req, &net);
    if (!s)
        return;
    struct spaced_err err;
    json_t *c = net_creds_get(net, sbx_id(s), &err);
    reply_creds(req, c ? c : json_array());
}

static void put_creds_body(struct http_req *req, const char *data, size_t len, void *arg)
{
    struct spaced *sp = arg;
    struct net *net;
    struct sbx *s;
    json_t *rules = sandbox_body(sp, req, data, len, &net, &s);
    if (!rules)
        return;
    struct spaced_err err;
    int rc = sbx_network_creds_put(net, s, rules, &err);
    json_decref(rules);
    if (rc != 0) {
        routes_reply_err(sp, req, &err);
        return;
    }
    h_get_creds(req, arg);
}

static void h_put_creds(struct http_req *req, void *arg)
{
    http_req_read_body(req, NET_BODY_MAX, put_creds_body, arg);
}

/* The caller's tenant and the tenant rules, or NULL after replying the error. */
static struct net_tenants *tenant_scope(struct spaced *sp, struct http_req *req,
                                        struct auth_principal *who)
{
    if (!auth_require(sp, req, who))
        return NULL;
    struct net_tenants *t = net_tenants_get(sp);
    if (!t)
        reply_unavailable(sp, req);
    return t;
}

static void h_get_tenant_creds(struct http_req *req, void *arg)
{
    struct auth_principal who;
    struct net_tenants *t = tenant_scope(arg, req, &who);
    if (t)
        reply_creds(req, net_tenant_creds_get(t, who.tenant));
}

static void put_tenant_creds_body(struct http_req *req, const char *data, size_t len, void *arg)
{
    struct spaced *sp = arg;
    struct auth_principal who;
    struct net_tenants *t = tenant_scope(sp, req, &who);
    json_t *rules = t ? parse_body(sp, req, data, len) : NULL;
    if (!rules)
        return;
    struct spaced_err err;
    int rc = net_tenant_creds_set(t, who.tenant, rules, &err);
    json_decref(rules);
    if (rc != 0)
        routes_reply_err(sp, req, &err);
    else
        reply_creds(req, net_tenant_creds_get(t, who.tenant));
}

static void h_put_tenant_creds(struct http_req *req, void *arg)
{
    http_req_read_body(req, NET_BODY_MAX, put_tenant_creds_body, arg);
}

static void h_delete_tenant_creds(struct http_req *req, void *arg)
{
    struct spaced *sp = arg;
    struct auth_principal who;
    struct net_tenants *t = tenant_scope(sp, req, &who);
    struct spaced_err err;
    if (!t)
        return;
    if (net_tenant_creds_delete(t, who.tenant, &err) != 0)
        routes_reply_err(sp, req, &err);
    else
        http_reply(req, 204, NULL, NULL, 0);
}

void routes_network_register(struct router *r, struct spaced *sp)
{
    /* Sets the module up now (pool, gateway, re-attaching adopted sandboxes) rather than
     * at the first request. */
    net_get(sp);
    router_add(r, "GET", "/v1/sandboxes/{id}/network", h_get_network, sp);
    router_add(r, "PUT", "/v1/sandboxes/{id}/network", h_put_network, sp);
    router_add(r, "GET", "/v1/sandboxes/{id}/network/log", h_log, sp);
    router_add(r, "GET", "/v1/sandboxes/{id}/credentials", h_get_creds, sp);
    router_add(r, "PUT", "/v1/sandboxes/{id}/credentials", h_put_creds, sp);
    router_add(r, "GET", "/v1/credentials", h_get_tenant_creds, sp);
    router_add(r, "PUT", "/v1/credentials", h_put_tenant_creds, sp);
    router_add(r, "DELETE", "/v1/credentials", h_delete_tenant_creds, sp);
}
