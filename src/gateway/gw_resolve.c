/* gw_resolve.c: the gateway's own upstream resolution and the per-sandbox cache of
 * what it resolved; see gw.h. Only names a policy let through ever reach evdns. */
#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "gw.h"

#define TTL_MIN 5
#define TTL_MAX 300

struct gw_lookup {
    struct gw_sandbox *sb;        /* NULL once orphaned (sandbox detached) */
    gw_lookup_cb cb;              /* NULL once cancelled */
    void *arg;
    char name[POLICY_NAME_MAX + 1];
    struct gw_lookup *prev, *next; /* in sb->lookups */
};

const struct gw_cache_entry *gw_cache_get(struct gw_sandbox *sb, const char *name)
{
    int64_t now = clock_mono_ms();
    for (size_t i = 0; i < GW_CACHE_MAX; i++)
        if (sb->cache[i].expires_ms > now && strcmp(sb->cache[i].name, name) == 0)
            return &sb->cache[i];
    return NULL;
}

static struct gw_cache_entry *cache_store(struct gw_sandbox *sb, const char *name,
                                          const uint32_t *addrs, size_t n, uint32_t ttl)
{
    /* Reuse the name's slot, else an expired one, else the one expiring first. */
    struct gw_cache_entry *slot = &sb->cache[0];
    int64_t now = clock_mono_ms();
    for (size_t i = 0; i < GW_CACHE_MAX; i++) {
        struct gw_cache_entry *e = &sb->cache[i];
        if (strcmp(e->name, name) == 0) {
            slot = e;
            break;
        }
        if (e->expires_ms < slot->expires_ms || e->expires_ms <= now)
            slot = e;
    }
    if (ttl < TTL_MIN)
        ttl = TTL_MIN;
    if (ttl > TTL_MAX)
        ttl = TTL_MAX;
    snprintf(slot->name, sizeof slot->name, "%s", name);
    slot->naddrs = slot->nforbidden = 0;
    for (size_t i = 0; i < n && slot->naddrs < DNS_ANSWERS_MAX; i++) {
        if (policy_addr_forbidden(addrs[i]))
            slot->nforbidden++;
        else
            slot->addrs[slot->naddrs++] = addrs[i];
    }
    slot->expires_ms = now + (int64_t)ttl * 1000;
    return slot;
}

static void unlink_lookup(struct gw_lookup *l)
{
    if (!l->sb)
        return;
    if (l->prev)
        l->prev->next = l->next;
    else
        l->sb->lookups = l->next;
    if (l->next)
        l->next->prev = l->prev;
    l->prev = l->next = NULL;
}

static void evdns_done(int result, char type, int count, int ttl, void *addresses, void *arg)
{
    struct gw_lookup *l = arg;
    struct gw_sandbox *sb = l->sb;
    unlink_lookup(l);
    if (sb && l->cb) {
        int rcode = DNS_RCODE_SERVFAIL;
        const struct gw_cache_entry *e = NULL;
        if (result == DNS_ERR_NONE && type == DNS_IPv4_A && count >= 0) {
            uint32_t addrs[DNS_ANSWERS_MAX];
            size_t n = 0;
            for (int i = 0; i < count && n < DNS_ANSWERS_MAX; i++)
                addrs[n++] = ntohl(((const uint32_t *)addresses)[i]);
            e = cache_store(sb, l->name, addrs, n, ttl < 0 ? 0 : (uint32_t)ttl);
            rcode = DNS_RCODE_OK;
        } else if (result == DNS_ERR_NOTEXIST) {
            rcode = DNS_RCODE_NXDOMAIN;
        } else if (result == DNS_ERR_NODATA) {
            e = cache_store(sb, l->name, NULL, 0, TTL_MIN);
            rcode = DNS_RCODE_OK;
        }
        l->cb(l->arg, rcode, e);
    }
    free(l);
}

struct gw_lookup *gw_resolve(struct gw_sandbox *sb, const char *name, gw_lookup_cb cb, void *arg)
{
    struct gw_lookup *l = calloc(1, sizeof *l);
    if (!l)
        return NULL;
    l->sb = sb;
    l->cb = cb;
    l->arg = arg;
    snprintf(l->name, sizeof l->name, "%s", name);
    l->next = sb->lookups;
    if (l->next)
        l->next->prev = l;
    sb->lookups = l;
    /* evdns runs its callbacks deferred (from the loop), and returns NULL without
     * calling back when it cannot even create the request. The lookup is freed only in
     * evdns_done, which evdns always calls, also on shutdown; cancelling just unhooks. */
    if (!evdns_base_resolve_ipv4(sb->gw->dns, name, DNS_QUERY_NO_SEARCH, evdns_done, l)) {
        unlink_lookup(l);
        free(l);
        return NULL;
    }
    return l;
}

void gw_lookup_cancel(struct gw_lookup *l)
{
    if (!l)
        return;
    unlink_lookup(l);
    l->sb = NULL;
    l->cb = NULL;
}

void gw_lookups_orphan(struct gw_sandbox *sb)
{
    while (sb->lookups) {
        struct gw_lookup *l = sb->lookups;
        gw_lookup_cb cb = l->cb;
        void *arg = l->arg;
        gw_lookup_cancel(l);
        if (cb)
            cb(arg, -1, NULL);
    }
}

uint32_t gw_pick_addr(const struct gw_sandbox *sb, const struct gw_cache_entry *e,
                      uint32_t prefer, uint16_t port)
{
    uint32_t first = 0;
    for (size_t i = 0; i < e->naddrs; i++) {
        if (!policy_addr_allowed(&sb->policy, e->name, e->addrs[i], port))
            continue;
        if (e->addrs[i] == prefer)
            return prefer;
        if (!first)
            first = e->addrs[i];
    }
    return first;
}
