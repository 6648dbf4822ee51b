/* net_tenant.c: tenant-wide credential rules; see net_tenant.h. */
#include "daemon/net/net_tenant.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/net/net_internal.h"
#include "log.h"

#define TENANT_ID_MAX 64 /* the gateway's limit (gw.h GW_ID_MAX) */

struct tenant_rules {
    char id[TENANT_ID_MAX + 1];
    json_t *creds;                /* owned: [{"host","header","secret"}] */
    struct tenant_rules *next;
};

struct net_tenants {
    char dir[PATH_MAX + 16];      /* <data_dir>/net/tenants */
    char ctl[PATH_MAX + 32];      /* the gateway's control socket */
    struct tenant_rules *list;    /* owned */
};

/* Tenant ids name files ("admin", "tn" + hex in practice). */
static bool id_ok(const char *id)
{
    return net_id_ok(id, TENANT_ID_MAX);
}

static struct tenant_rules *find(struct net_tenants *t, const char *id)
{
    for (struct tenant_rules *r = t->list; r; r = r->next)
        if (strcmp(r->id, id) == 0)
            return r;
    return NULL;
}

/* Tells the gateway (an unreachable one is logged: it gets the rules at its restart). */
static void push(const struct net_tenants *t, const char *id, const json_t *creds)
{
    char msg[256];
    json_t *req = json_pack("{s:s, s:s, s:o}", "op", "creds", "tenant", id, "rules",
                            net_creds_view(creds, true));
    json_t *rep = req ? net_ctl_call(t->ctl, req, msg, sizeof msg) : NULL;
    if (!json_is_true(json_object_get(rep, "ok")))
        log_warn("net.tenant_creds", "tenant=%s error=\"%s\"", id,
                 rep ? json_string_value(json_object_get(json_object_get(rep, "error"), "message"))
                     : msg);
    json_decref(req);
    json_decref(rep);
}

static void load_one(struct net_tenants *t, const char *file)
{
    char path[PATH_MAX + 300];
    snprintf(path, sizeof path, "%s/%s", t->dir, file);
    json_t *o = json_load_file(path, 0, NULL);
    const char *id = json_string_value(json_object_get(o, "tenant"));
    struct spaced_err err;
    json_t *creds = id_ok(id) && !find(t, id) ? net_creds_check(json_object_get(o, "creds"), &err) : NULL;
    struct tenant_rules *r = creds ? calloc(1, sizeof *r) : NULL;
    if (!r) {
        log_warn("net.tenant_record_bad", "file=%s", file);
        json_decref(creds);
        json_decref(o);
        return;
    }
    snprintf(r->id, sizeof r->id, "%s", id);
    r->creds = creds;
    r->next = t->list;
    t->list = r;
    json_decref(o);
}

struct net_tenants *net_tenants_new(const char *data_dir, const char *ctl, char *err,
                                    size_t errlen)
{
    struct net_tenants *t = calloc(1, sizeof *t);
    if (!t) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    char netdir[PATH_MAX];
    snprintf(netdir, sizeof netdir, "%s/net", data_dir);
    snprintf(t->dir, sizeof t->dir, "%s/tenants", netdir);
    snprintf(t->ctl, sizeof t->ctl, "%s", ctl);
    if ((mkdir(netdir, 0700) != 0 && errno != EEXIST) || (mkdir(t->dir, 0700) != 0 && errno != EEXIST)) {
        snprintf(err, errlen, "mkdir %s: %s", t->dir, strerror(errno));
        free(t);
        return NULL;
    }
    DIR *d = opendir(t->dir);
    if (!d) {
        snprintf(err, errlen, "%s: %s", t->dir, strerror(errno));
        free(t);
        return NULL;
    }
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len > 5 && strcmp(e->d_name + len - 5, ".json") == 0)
            load_one(t, e->d_name);
    }
    closedir(d);
    net_tenants_resend(t);
    return t;
}

void net_tenants_free(struct net_tenants *t)
{
    if (!t)
        return;
    while (t->list) {
        struct tenant_rules *r = t->list;
        t->list = r->next;
        json_decref(r->creds);
        free(r);
    }
    free(t);
}

int net_tenant_creds_set(struct net_tenants *t, const char *tenant, const json_t *rules,
                         struct spaced_err *err)
{
    if (!id_ok(tenant))
        return spaced_err_set(err, 400, "invalid_request", "tenant id cannot carry credentials");
    json_t *c = net_creds_check(rules, err);
    if (!c)
        return -1;
    struct tenant_rules *r = find(t, tenant);
    bool fresh = !r;
    if (fresh && !(r = calloc(1, sizeof *r))) {
        json_decref(c);
        return spaced_err_set(err, 500, "internal", "out of memory");
    }
    char path[PATH_MAX + 80];
    snprintf(path, sizeof path, "%s/%s.json", t->dir, tenant);
    json_t *doc = json_pack("{s:s, s:O}", "tenant", tenant, "creds", c);
    int rc = doc ? net_json_save(path, doc) : -1;
    json_decref(doc);
    if (rc != 0) {
        json_decref(c);
        if (fresh)
            free(r);
        return spaced_err_set(err, 500, "internal", "cannot write the tenant's credential record");
    }
    if (fresh) {
        snprintf(r->id, sizeof r->id, "%s", tenant);
        r->next = t->list;
        t->list = r;
    }
    json_decref(r->creds);
    r->creds = c;
    push(t, tenant, c);
    return 0;
}

json_t *net_tenant_creds_get(struct net_tenants *t, const char *tenant)
{
    struct tenant_rules *r = id_ok(tenant) ? find(t, tenant) : NULL;
    return r ? net_creds_view(r->creds, false) : json_array();
}

int net_tenant_creds_delete(struct net_tenants *t, const char *tenant, struct spaced_err *err)
{
    if (!id_ok(tenant))
        return 0;
    char path[PATH_MAX + 80];
    snprintf(path, sizeof path, "%s/%s.json", t->dir, tenant);
    if (unlink(path) != 0 && errno != ENOENT)
        return spaced_err_set(err, 500, "internal", "cannot remove the tenant's credential record");
    for (struct tenant_rules **p = &t->list; *p; p = &(*p)->next) {
        if (strcmp((*p)->id, tenant) == 0) {
            struct tenant_rules *r = *p;
            *p = r->next;
            json_decref(r->creds);
            free(r);
            json_t *none = json_array();
            push(t, tenant, none);
            json_decref(none);
            break;
        }
    }
    return 0;
}

void net_tenants_resend(void *arg)
{
    struct net_tenants *t = arg;
    for (struct tenant_rules *r = t->list; r; r = r->next)
        push(t, r->id, r->creds);
}
