/* routes_quota.c: per-tenant quotas (quota/quota.h).
 *   GET /v1/quota                      the caller's tenant: limits and usage
 *   GET /v1/tenants/{tenant}/quota     admin: any tenant's
 *   PUT /v1/tenants/{tenant}/quota     admin: sets limits (partial; null = default)
 * {tenant} is a tenant id ("tn...", as key listings show) or the name keys were created
 * with. A tenant that has no key yet is 404: quotas belong to existing tenants. */
#include <string.h>

#include "daemon/auth/auth.h"
#include "daemon/quota/quota.h"
#include "daemon/volume/vol_quota.h"
#include "routes.h"

static void reply_quota(struct spaced *sp, struct http_req *req, const char *tenant)
{
    struct spaced_err err;
    json_t *body = quota_json(sp, tenant, vol_quota_usage(sp, tenant), &err);
    if (!body) {
        routes_reply_err(sp, req, &err);
        return;
    }
    http_reply_json(req, 200, body);
    json_decref(body);
}

static void h_own(struct http_req *req, void *arg)
{
    struct spaced *sp = arg;
    struct auth_principal who;
    if (auth_require(sp, req, &who))
        reply_quota(sp, req, who.tenant);
}

/* The path's tenant, by id or name: its id into id[STORE_ID_MAX], or false after 404. */
static bool tenant_param(struct spaced *sp, struct http_req *req, char *id)
{
    const char *p = router_param(req, "tenant");
    struct store_tenant t;
    if (p && strlen(p) < sizeof t.name &&
        (store_tenant_get(sp->store, p, &t) == 0 || store_tenant_by_name(sp->store, p, &t) == 0)) {
        snprintf(id, STORE_ID_MAX, "%s", t.id);
        return true;
    }
    routes_reply_error(sp, req, 404, "not_found", "tenant %.64s not found", p ? p : "");
    return false;
}

static void h_get(struct http_req *req, void *arg)
{
    struct spaced *sp = arg;
    struct auth_principal who;
    char id[STORE_ID_MAX];
    if (auth_require_admin(sp, req, &who) && tenant_param(sp, req, id))
        reply_quota(sp, req, id);
}

static void put_body(struct http_req *req, const char *data, size_t len, void *arg)
{
    struct spaced *sp = arg;
    struct auth_principal who;
    char id[STORE_ID_MAX];
    if (!auth_require_admin(sp, req, &who) || !tenant_param(sp, req, id))
        return;
    json_t *body = routes_parse_object(sp, req, data, len,
                                       (const char *const[]){"sandboxes", "vcpus", "memory_mib",
                                                             "disk_mib", "templates", "snapshots",
                                                             "volume_mib", NULL});
    if (!body)
        return;
    struct store_quota q;
    struct spaced_err err;
    int rc = store_quota_get(sp->store, id, &q);
    if (rc == STORE_NOTFOUND) {
        memset(&q, 0, sizeof q);
        snprintf(q.tenant, sizeof q.tenant, "%s", id);
        q.limit = (struct store_quota_vals){STORE_QUOTA_DEFAULT, STORE_QUOTA_DEFAULT, STORE_QUOTA_DEFAULT,
                                            STORE_QUOTA_DEFAULT, STORE_QUOTA_DEFAULT, STORE_QUOTA_DEFAULT,
                                            STORE_QUOTA_DEFAULT};
        rc = 0;
    }
    if (rc != 0)
        spaced_err_store(&err, sp->store, "reading the quota");
    else if ((rc = quota_apply_json(body, &q, &err)) == 0) {
        q.updated_ms = spaced_now_ms();
        if ((rc = store_quota_put(sp->store, &q)) != 0)
            spaced_err_store(&err, sp->store, "writing the quota");
    }
    json_decref(body);
    if (rc != 0) {
        routes_reply_err(sp, req, &err);
        return;
    }
    reply_quota(sp, req, id);
}

static void h_put(struct http_req *req, void *arg)
{
    http_req_read_body(req, ROUTES_BODY_MAX, put_body, arg);
}

void routes_quota_register(struct router *r, struct spaced *sp)
{
    router_add(r, "GET", "/v1/quota", h_own, sp);
    router_add(r, "GET", "/v1/tenants/{tenant}/quota", h_get, sp);
    router_add(r, "PUT", "/v1/tenants/{tenant}/quota", h_put, sp);
}
