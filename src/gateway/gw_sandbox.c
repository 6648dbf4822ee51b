/* gw_sandbox.c: attach, detach, live policy changes and credential rules; these are
 * the operations behind the control socket (gw_ctl.h documents the messages). */
#include <arpa/inet.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gw.h"

struct gw_sandbox *gw_sandbox_find(struct gw *gw, const char *id)
{
    for (struct gw_sandbox *sb = gw->sandboxes; sb; sb = sb->next)
        if (id && strcmp(sb->id, id) == 0)
            return sb;
    return NULL;
}

static bool valid_id(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n > GW_ID_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!(s[i] == '-' || s[i] == '_' || s[i] == '.' || (s[i] >= '0' && s[i] <= '9') ||
              (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z')))
            return false;
    return true;
}

static int parse_ip(const char *s, uint32_t *out)
{
    struct in_addr a;
    if (!s || inet_pton(AF_INET, s, &a) != 1)
        return -1;
    *out = ntohl(a.s_addr);
    return 0;
}

/* An optional positive number from attach's "limits" object, else the default. */
static double limit(const json_t *limits, const char *key, double def)
{
    double v = json_number_value(json_object_get(limits, key));
    return v >= 1 && v <= 1e6 ? v : def;
}

static void on_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa,
                      int salen, void *arg)
{
    struct gw_sandbox *sb = arg;
    gw_conn_accept(sb, fd, l == sb->tls_l);
}

static void sandbox_free(struct gw_sandbox *sb)
{
    gw_conns_recheck(sb, true);
    dns_server_stop(sb);
    gw_lookups_orphan(sb);
    if (sb->http_l)
        evconnlistener_free(sb->http_l);
    if (sb->tls_l)
        evconnlistener_free(sb->tls_l);
    if (sb->nsfd >= 0)
        close(sb->nsfd);
    policy_free(&sb->policy);
    gw_credset_free(&sb->creds);
    free(sb->cache);
    free(sb->log);
    free(sb);
}

static struct evconnlistener *listen_in(struct gw_sandbox *sb, uint16_t port, char *err,
                                        size_t errlen)
{
    int fd = netns_socket(sb->nsfd, SOCK_STREAM, sb->wiring.gw_ip, port, err, errlen);
    if (fd < 0)
        return NULL;
    struct evconnlistener *l = evconnlistener_new(sb->gw->base, on_accept, sb,
                                                  LEV_OPT_CLOSE_ON_FREE, 0, fd);
    if (!l) {
        close(fd);
        snprintf(err, errlen, "cannot listen in the sandbox namespace");
    }
    return l;
}

int gw_sandbox_attach(struct gw *gw, const json_t *req, char *err, size_t errlen)
{
    const char *id = json_string_value(json_object_get(req, "sandbox"));
    const char *tenant = json_string_value(json_object_get(req, "tenant"));
    const char *nspath = json_string_value(json_object_get(req, "netns"));
    const char *dev = json_string_value(json_object_get(req, "dev"));
    const char *mac = json_string_value(json_object_get(req, "guest_mac"));
    if (tenant && !tenant[0])
        tenant = NULL; /* "" means no tenant */
    if (!valid_id(id) || (tenant && !valid_id(tenant))) {
        snprintf(err, errlen, "bad sandbox or tenant id");
        return -1;
    }
    if (gw_sandbox_find(gw, id)) {
        snprintf(err, errlen, "sandbox already attached");
        return -1;
    }
    struct gw_sandbox *sb = calloc(1, sizeof *sb);
    if (!sb) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    sb->gw = gw;
    sb->nsfd = sb->dns_fd = -1;
    snprintf(sb->id, sizeof sb->id, "%s", id);
    snprintf(sb->tenant, sizeof sb->tenant, "%s", tenant ? tenant : "");
    sb->cache = calloc(GW_CACHE_MAX, sizeof *sb->cache);
    sb->log = calloc(GW_LOG_RING, sizeof *sb->log);
    const json_t *lim = json_object_get(req, "limits");
    gw_rate_init(&sb->dns_rate, limit(lim, "dns_per_s", GW_DNS_RATE), limit(lim, "dns_burst", GW_DNS_BURST));
    gw_rate_init(&sb->conn_rate, limit(lim, "conn_per_s", GW_CONN_RATE),
                 limit(lim, "conn_burst", GW_CONN_BURST));
    if (!sb->cache || !sb->log) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    if (policy_parse(json_object_get(req, "policy"), &sb->policy, err, errlen) != 0)
        goto fail;
    if (!dev || !valid_id(dev) || strlen(dev) >= sizeof sb->wiring.dev || !mac ||
        netns_parse_mac(mac, sb->wiring.guest_mac) != 0 ||
        parse_ip(json_string_value(json_object_get(req, "guest_ip")), &sb->wiring.guest_ip) ||
        parse_ip(json_string_value(json_object_get(req, "gateway_ip")), &sb->wiring.gw_ip)) {
        snprintf(err, errlen, "need dev, guest_mac, guest_ip and gateway_ip");
        goto fail;
    }
    snprintf(sb->wiring.dev, sizeof sb->wiring.dev, "%s", dev);
    sb->nsfd = nspath ? open(nspath, O_RDONLY | O_CLOEXEC) : -1;
    if (sb->nsfd < 0) {
        snprintf(err, errlen, "cannot open netns %s", nspath ? nspath : "(missing)");
        goto fail;
    }
    if (netns_apply(sb->nsfd, &sb->wiring, err, errlen) != 0 ||
        dns_server_start(sb, err, errlen) != 0 ||
        !(sb->http_l = listen_in(sb, NETNS_PORT_HTTP, err, errlen)) ||
        !(sb->tls_l = listen_in(sb, NETNS_PORT_TLS, err, errlen)))
        goto fail;
    sb->next = gw->sandboxes;
    gw->sandboxes = sb;
    gw_decide(sb, "policy", true, "", "attached", 0, 0);
    return 0;
fail:
    sandbox_free(sb);
    return -1;
}

int gw_sandbox_detach(struct gw *gw, const char *id, char *err, size_t errlen)
{
    for (struct gw_sandbox **p = &gw->sandboxes; *p; p = &(*p)->next) {
        if (strcmp((*p)->id, id) == 0) {
            struct gw_sandbox *sb = *p;
            *p = sb->next;
            sandbox_free(sb);
            return 0;
        }
    }
    snprintf(err, errlen, "no such sandbox");
    return -1;
}

int gw_sandbox_policy(struct gw *gw, const char *id, const json_t *policy, char *err, size_t errlen)
{
    struct gw_sandbox *sb = gw_sandbox_find(gw, id);
    struct policy np;
    if (!sb) {
        snprintf(err, errlen, "no such sandbox");
        return -1;
    }
    if (policy_parse(policy, &np, err, errlen) != 0)
        return -1;
    policy_free(&sb->policy);
    sb->policy = np;
    gw_decide(sb, "policy", true, "", "policy_changed", 0, 0);
    gw_conns_recheck(sb, false);
    return 0;
}

void gw_credset_free(struct gw_credset *c)
{
    for (size_t i = 0; i < c->n; i++) {
        OPENSSL_cleanse(c->rules[i].value, strlen(c->rules[i].value));
        free(c->rules[i].value);
    }
    free(c->rules);
    c->rules = NULL;
    c->n = 0;
}

static int parse_creds(const json_t *rules, struct gw_credset *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (!json_is_array(rules) || json_array_size(rules) > GW_CREDS_MAX) {
        snprintf(err, errlen, "rules must be an array of at most %d", GW_CREDS_MAX);
        return -1;
    }
    out->rules = calloc(json_array_size(rules) + 1, sizeof *out->rules);
    if (!out->rules) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    size_t i;
    const json_t *r;
    json_array_foreach(rules, i, r) {
        const char *host = json_string_value(json_object_get(r, "host"));
        const char *header = json_string_value(json_object_get(r, "header"));
        const char *value = json_string_value(json_object_get(r, "value"));
        struct gw_cred *c = &out->rules[out->n];
        bool ok = host && header && value && strlen(header) <= GW_HEADER_MAX &&
                  strlen(value) <= GW_SECRET_MAX && !strpbrk(value, "\r\n") && header[0] &&
                  policy_name_normalise(host, strlen(host), c->host) == 0;
        for (const char *h = header; ok && *h; h++)
            ok = (*h >= 'A' && *h <= 'Z') || (*h >= 'a' && *h <= 'z') || (*h >= '0' && *h <= '9') || *h == '-';
        if (!ok || !(c->value = strdup(value))) {
            snprintf(err, errlen, "bad credential rule #%zu (host, header, value)", i);
            gw_credset_free(out);
            return -1;
        }
        snprintf(c->header, sizeof c->header, "%s", header);
        out->n++;
    }
    return 0;
}

int gw_creds_set(struct gw *gw, const json_t *req, char *err, size_t errlen)
{
    const char *id = json_string_value(json_object_get(req, "sandbox"));
    const char *tenant = json_string_value(json_object_get(req, "tenant"));
    struct gw_credset set;
    struct gw_credset *dst = NULL;
    if (id) {
        struct gw_sandbox *sb = gw_sandbox_find(gw, id);
        dst = sb ? &sb->creds : NULL;
    } else if (valid_id(tenant)) {
        struct gw_tenant *t = gw->tenants;
        while (t && strcmp(t->id, tenant) != 0)
            t = t->next;
        if (!t && (t = calloc(1, sizeof *t))) {
            snprintf(t->id, sizeof t->id, "%s", tenant);
            t->next = gw->tenants;
            gw->tenants = t;
        }
        dst = t ? &t->creds : NULL;
    }
    if (!dst) {
        snprintf(err, errlen, "need an attached sandbox or a tenant id");
        return -1;
    }
    if (parse_creds(json_object_get(req, "rules"), &set, err, errlen) != 0)
        return -1;
    /* Connections already terminated keep the copy they took; new ones use the new set. */
    gw_credset_free(dst);
    *dst = set;
    return 0;
}

void gw_shutdown(struct gw *gw)
{
    while (gw->sandboxes) {
        struct gw_sandbox *sb = gw->sandboxes;
        gw->sandboxes = sb->next;
        sandbox_free(sb);
    }
    while (gw->tenants) {
        struct gw_tenant *t = gw->tenants;
        gw->tenants = t->next;
        gw_credset_free(&t->creds);
        free(t);
    }
}
