/* net_spaced.c: the one network module of a spaced process (net_get, net_set_known,
 * net.h) and its tenant credential rules (net_tenants_get, net_tenant.h).
 *
 * Static storage, like the session and file route contexts: struct spaced has no slot
 * for it and main.c no shutdown hook for route modules, so the module stays reachable
 * until exit (its namespaces and gateway are meant to outlive the process anyway). */
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

static struct {
    struct spaced *sp;
    struct net *net;
    struct net_tenants *tenants; /* NULL when net is */
    bool tried; /* set up once; a failure is logged once and not retried */
    char *args_copy;                               /* SPACE_GATEWAY_ARGS, split in place */
    const char *args[NET_GATEWAY_ARGS_MAX + 1];
    bool (*known)(const char *sandbox, void *arg); /* net_set_known; NULL: no sweep */
    void *known_arg;
} net_proc;

void net_set_known(bool (*known)(const char *sandbox, void *arg), void *arg)
{
    net_proc.known = known;
    net_proc.known_arg = arg;
}

static void at_exit(void)
{
    net_exit(net_proc.net);
}

/* Extra gateway arguments from $SPACE_GATEWAY_ARGS (sp->opt.gateway_args), split on
 * spaces (e.g. "--upstream-dns 192.0.2.53 --trust /etc/space/upstream.pem"): deployments
 * and tests name the gateway's resolvers and trust store without a spaced option per
 * gateway flag. The words live in net_proc (the gateway is restarted with them). */
static const char *const *gateway_args(const struct spaced *sp)
{
    const char *env = sp->opt.gateway_args;
    if (!env || !(net_proc.args_copy = strdup(env)))
        return NULL;
    size_t n = 0;
    char *save = NULL;
    for (char *t = strtok_r(net_proc.args_copy, " ", &save); t && n < NET_GATEWAY_ARGS_MAX;
         t = strtok_r(NULL, " ", &save))
        net_proc.args[n++] = t;
    net_proc.args[n] = NULL;
    return net_proc.args;
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
    if (net_proc.tried)
        return net_proc.sp == sp ? net_proc.net : NULL;
    net_proc.tried = true;
    net_proc.sp = sp;
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
        .gateway_args = gateway_args(sp),
    };
    if (!o.gateway_bin)
        log_warn("net.no_gateway", "msg=\"space-gateway not found beside spaced; sandboxes with a "
                                   "network policy get no answers until one runs\"");
    net_proc.net = net_new(sp->base, &o, err, sizeof err);
    if (net_proc.net && !(net_proc.tenants = net_tenants_new(sp->opt.data_dir, ctl, err, sizeof err))) {
        net_free(net_proc.net);
        net_proc.net = NULL;
    }
    if (!net_proc.net)
        log_error("net.unavailable", "error=\"%s\"", err);
    else {
        if (net_proc.known)
            net_sweep(net_proc.net, net_proc.known, net_proc.known_arg);
        atexit(at_exit);
    }
    return net_proc.net;
}

struct net_tenants *net_tenants_get(struct spaced *sp)
{
    return net_get(sp) ? net_proc.tenants : NULL;
}
