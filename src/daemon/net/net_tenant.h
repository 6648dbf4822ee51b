/* net_tenant: credential rules of a whole tenant (issue 5, DESIGN 7.2).
 *
 * A tenant's rules ({"host","header","secret"}, validated like a sandbox's) apply to
 * every sandbox of that tenant: the gateway looks at the sandbox's own rules first and
 * then its tenant's, so a sandbox rule for the same host wins. They are kept in
 * <data_dir>/net/tenants/<tenant>.json (0600: the secrets are in it), written (synced)
 * before the gateway is told, and sent again each time a gateway (re)starts
 * (net_tenants_resend, which spaced hooks to net_on_gateway_up). Secrets live there and in the gateway's
 * memory only: never in a VM, never in an API reply (reads give hosts and headers).
 *
 * All calls run on the event loop thread. */
#ifndef SPACE_NET_TENANT_H
#define SPACE_NET_TENANT_H

#include <jansson.h>

#include "daemon/spaced.h"

struct net_tenants;

/* Loads the stored rules and sends them to the gateway at ctl if it answers. Strings
 * are copied. Returns NULL with err on failure (directory, memory). */
struct net_tenants *net_tenants_new(const char *data_dir, const char *ctl, char *err,
                                    size_t errlen);
/* NULL is accepted. The stored rules and the gateway's copy stay. */
void net_tenants_free(struct net_tenants *t);

/* Replaces tenant's rules (validated: 400 on bad input; 500 if they cannot be stored).
 * The gateway is told; one that is down gets them when it is back. */
int net_tenant_creds_set(struct net_tenants *t, const char *tenant, const json_t *rules,
                         struct spaced_err *err);
/* The rules without secrets, [{"host","header"}...] ([] if none; new reference). */
json_t *net_tenant_creds_get(struct net_tenants *t, const char *tenant);
/* Removes every rule of tenant (none is fine). 500 if the file cannot be removed. */
int net_tenant_creds_delete(struct net_tenants *t, const char *tenant, struct spaced_err *err);

/* The gateway answered for the first time since it (re)started: every tenant's rules
 * are sent to it again. arg: the struct net_tenants (a net_on_gateway_up function). */
void net_tenants_resend(void *arg);

/* spaced's tenant rules (created with the network module, net_get; same data dir and
 * gateway socket). NULL when sandbox networking is unavailable. */
struct net_tenants *net_tenants_get(struct spaced *sp);

#endif
