/* quota.c: per-tenant limits, their check at create time and their JSON; see quota.h. */
#include "quota.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "log.h"

/* The resources, in the order the API shows them. */
static const struct {
    const char *name;  /* JSON key */
    size_t off;        /* offsetof in struct store_quota_vals */
    const char *what;  /* in error messages */
} res[] = {
    {"sandboxes", offsetof(struct store_quota_vals, sandboxes), "sandboxes"},
    {"vcpus", offsetof(struct store_quota_vals, vcpus), "vCPUs"},
    {"memory_mib", offsetof(struct store_quota_vals, memory_mib), "MiB of memory"},
    {"disk_mib", offsetof(struct store_quota_vals, disk_mib), "MiB of disk"},
    {"templates", offsetof(struct store_quota_vals, templates), "templates"},
    {"snapshots", offsetof(struct store_quota_vals, snapshots), "snapshots"},
    {"volume_mib", offsetof(struct store_quota_vals, volume_mib), "MiB of volumes"},
};
#define NRES (sizeof res / sizeof res[0])

static int64_t *val(struct store_quota_vals *v, size_t i) { return (int64_t *)((char *)v + res[i].off); }
static int64_t cval(const struct store_quota_vals *v, size_t i)
{
    return *(const int64_t *)((const char *)v + res[i].off);
}

static int store_err(struct spaced *sp, struct spaced_err *err)
{
    log_error("store.error", "msg=quota: %s", store_errmsg(sp->store));
    return spaced_err_store(err, sp->store, "reading quotas");
}


int quota_limits(struct spaced *sp, const char *tenant, struct store_quota_vals *out,
                 struct spaced_err *err)
{
    struct store_quota q;
    int rc = store_quota_get(sp->store, tenant, &q);
    if (rc != 0 && rc != STORE_NOTFOUND)
        return store_err(sp, err);
    for (size_t i = 0; i < NRES; i++) {
        int64_t mine = rc == 0 ? cval(&q.limit, i) : STORE_QUOTA_DEFAULT;
        *val(out, i) = mine == STORE_QUOTA_DEFAULT ? cval(&sp->opt.quota, i) : mine;
    }
    return 0;
}

int quota_check(struct spaced *sp, const char *tenant, const struct store_quota_vals *want,
                struct spaced_err *err)
{
    struct store_quota_vals lim, use;
    if (store_quota_lock(sp->store, tenant) != 0)
        return store_err(sp, err);
    if (quota_limits(sp, tenant, &lim, err) != 0)
        return -1;
    /* want.volume_mib is never asked here (vol_quota.h enforces it): the store's counts
     * are enough, without walking the tenant's volumes. */
    if (store_quota_usage(sp->store, tenant, &use) != 0)
        return store_err(sp, err);
    for (size_t i = 0; i < NRES; i++) {
        int64_t l = cval(&lim, i), u = cval(&use, i), w = cval(want, i);
        if (w > 0 && l > 0 && u + w > l)
            return spaced_err_set(err, 403, "quota_exceeded",
                                  "quota exceeded: %s limit %lld, in use %lld, this request needs "
                                  "%lld more (delete something, or ask an admin to raise the quota)",
                                  res[i].name, (long long)l, (long long)u, (long long)w);
    }
    return 0;
}

static json_t *vals_json(const struct store_quota_vals *v)
{
    json_t *o = json_object();
    for (size_t i = 0; o && i < NRES; i++)
        json_object_set_new(o, res[i].name, json_integer(cval(v, i)));
    return o;
}

json_t *quota_json(struct spaced *sp, const char *tenant, int64_t volume_bytes,
                   struct spaced_err *err)
{
    struct store_quota_vals lim, use;
    if (quota_limits(sp, tenant, &lim, err) != 0)
        return NULL;
    if (store_quota_usage(sp->store, tenant, &use) != 0) {
        store_err(sp, err);
        return NULL;
    }
    use.volume_mib = (volume_bytes + (1 << 20) - 1) >> 20;
    return json_pack("{s:s, s:o, s:o}", "tenant", tenant, "limits", vals_json(&lim), "usage",
                     vals_json(&use));
}

int quota_apply_json(const json_t *body, struct store_quota *q, struct spaced_err *err)
{
    if (!json_is_object(body))
        return spaced_err_set(err, 400, "invalid_request", "the body must be a JSON object");
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)body, k, v) {
        size_t i = 0;
        while (i < NRES && strcmp(res[i].name, k) != 0)
            i++;
        if (i == NRES)
            return spaced_err_set(err, 400, "invalid_request",
                                  "unknown field \"%.64s\" (sandboxes, vcpus, memory_mib, disk_mib, "
                                  "templates, snapshots, volume_mib)", k);
        if (json_is_null(v))
            *val(&q->limit, i) = STORE_QUOTA_DEFAULT;
        else if (json_is_integer(v) && json_integer_value(v) >= 0 &&
                 json_integer_value(v) <= (1LL << 40))
            *val(&q->limit, i) = json_integer_value(v);
        else
            return spaced_err_set(err, 400, "invalid_request",
                                  "%s must be an integer 0..%lld (0 = unlimited) or null (the "
                                  "daemon's default)", k, 1LL << 40);
    }
    return 0;
}
