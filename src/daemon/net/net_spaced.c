/* net_spaced.c: spaced's network module (net_spaced_new, net_get, net.h) and its tenant
 * credential rules (net_tenants_get, net_tenant.h), held in sp->net.
 *
 * The module itself is set up on first use (it needs root, and a role or a test that
 * never touches networking never pays for it); main.c makes the holder at start and frees
 * it at shutdown, after every module that claims or releases namespaces is gone. The
 * namespaces and the gateway outlive the process on purpose: the next spaced adopts them. */
#include <limits.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/net/net.h"
#include "daemon/net/net_tenant.h"
#include "log.h"

#define NET_GATEWAY_ARGS_MAX 32 /* words of SPACE_GATEWAY_ARGS passed on; more are dropped */

struct net_spaced {
    struct net *net;
    struct net_tenants *tenants; /* NULL when net is */
    bool tried; /* set up once; a failure is logged once and not retried */
    char *args_copy;                               /* SPACE_GATEWAY_ARGS, split in place */
    const char *args[NET_GATEWAY_ARGS_MAX + 1];
    bool (*known)(const char *sandbox, void *arg); /* NULL: no sweep */
    void *known_arg;
};

struct net_spaced *net_spaced_new(bool (*known)(const char *sandbox, void *arg), void *arg)
{
    struct net_spaced *ns = calloc(1, sizeof *ns);
    if (ns) {
        ns->known = known;
        ns->known_arg = arg;
    }
    return ns;
}

void net_spaced_free(struct net_spaced *ns)
{
    if (!ns)
        return;
    net_exit(ns->net); /* stops the gateway when no sandbox has a NIC */
    net_tenants_free(ns->tenants);
    net_free(ns->net);
    free(ns->args_copy);
    free(ns);
}

/* Extra gateway arguments from $SPACE_GATEWAY_ARGS (sp->opt.gateway_args), split on
 * spaces (e.g. "--upstream-dns 192.0.2.53 --trust /etc/space/upstream.pem"): deployments
 * and tests name the gateway's resolvers and trust store without a spaced option per
 * gateway flag. The words live in ns (the gateway is restarted with them). */
static const char *const *gateway_args(const struct spaced *sp, struct net_spaced *ns)
{
    const char *env = sp->opt.gateway_args;
    if (!env || !(ns->args_copy = strdup(env)))
        return NULL;
    size_t n = 0;
    char *save = NULL;
    for (char *t = strtok_r(ns->args_copy, " ", &save); t && n < NET_GATEWAY_ARGS_MAX;
         t = strtok_r(NULL, " ", &save))
        ns->args[n++] = t;
    ns->args[n] = NULL;
    return ns->args;
}

/* space-gateway beside spaced's own binary ($SPACE_GATEWAY, sp->opt.gateway, overrides). */
static const char *gateway_path(const struct spaced *sp, char *buf, size_t cap)
{
    if (sp->opt.gateway)
        return sp->opt.gateway;
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        return NULL;
    self[n] = 0;
    snprintf(buf, cap, "%s/space-gateway", dirname(self));
    return access(buf, X_OK) == 0 ? buf : NULL;
}

struct net *net_get(struct spaced *sp)
{
    struct net_spaced *ns = sp->net;
    if (!ns || ns->tried)
        return ns ? ns->net : NULL;
    ns->tried = true;
    if (geteuid() != 0) {
        log_warn("net.unavailable", "msg=\"sandbox networking needs root (namespaces, taps)\"");
        return NULL;
    }
    char gw[PATH_MAX + 16], err[512], ctl[PATH_MAX + 32];
    /* Named here (net.c's default) so the tenant rules talk to the same gateway. */
    snprintf(ctl, sizeof ctl, "%s/gateway/gateway.sock", sp->opt.data_dir);
    struct net_opts o = {
        .data_dir = sp->opt.data_dir,
        .pool = NET_POOL_DEFAULT,
        .gateway_bin = gateway_path(sp, gw, sizeof gw),
        .gateway_ctl = ctl,
        .gateway_args = gateway_args(sp, ns),
    };
    if (!o.gateway_bin)
        log_warn("net.no_gateway", "msg=\"space-gateway not found beside spaced; sandboxes with a "
                                   "network policy get no answers until one runs\"");
    ns->net = net_new(sp->base, &o, err, sizeof err);
    if (ns->net && !(ns->tenants = net_tenants_new(sp->opt.data_dir, ctl, err, sizeof err))) {
        net_free(ns->net);
        ns->net = NULL;
    }
    if (!ns->net) {
        log_error("net.unavailable", "error=\"%s\"", err);
        return NULL;
    }
    net_on_gateway_up(ns->net, net_tenants_resend, ns->tenants);
    if (ns->known)
        net_sweep(ns->net, ns->known, ns->known_arg);
    return ns->net;
}

struct net_tenants *net_tenants_get(struct spaced *sp)
{
    return net_get(sp) ? sp->net->tenants : NULL;
}
