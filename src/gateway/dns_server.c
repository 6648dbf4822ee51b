/* dns_server.c: the only resolver a sandbox can reach (UDP gw:53 inside its namespace).
 * Answers A for names its policy allows, with addresses the gateway resolved itself
 * minus forbidden ones; AAAA gets an empty answer; every other type is REFUSED;
 * names the policy does not allow get NXDOMAIN without any upstream query. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gw.h"

#define DNS_READS_PER_EVENT 32 /* fairness: one sandbox's flood cannot starve the loop */

struct dns_pending {
    struct gw_sandbox *sb;
    struct dns_query q;
    struct sockaddr_in from;
};

static void reply(struct gw_sandbox *sb, const struct sockaddr_in *to, const uint8_t *msg,
                  size_t len)
{
    if (len)
        (void)sendto(sb->dns_fd, msg, len, MSG_DONTWAIT, (const struct sockaddr *)to, sizeof *to);
}

static void answer(struct gw_sandbox *sb, const struct sockaddr_in *to, const struct dns_query *q,
                   int rcode, const struct gw_cache_entry *e, uint16_t qtype)
{
    uint8_t out[DNS_MSG_MAX];
    uint32_t addrs[DNS_ANSWERS_MAX];
    size_t n = 0;
    uint32_t ttl = 0;
    if (e && qtype == DNS_TYPE_A) {
        for (size_t i = 0; i < e->naddrs; i++)
            if (policy_addr_allowed(&sb->policy, q->name, e->addrs[i], 0))
                addrs[n++] = e->addrs[i];
        uint64_t now = gw_now_ms();
        ttl = e->expires_ms > now ? (uint32_t)((e->expires_ms - now) / 1000) : 0;
        gw_decide(sb, "dns", n > 0, q->name, n ? "resolved" :
                  (e->naddrs ? "policy_addresses" :
                   e->nforbidden ? "forbidden_addresses" : "no_addresses"), 0, 53);
    }
    reply(sb, to, out, dns_answer_build(out, sizeof out, q, rcode, addrs, n, ttl));
}

static void resolved(void *arg, int rcode, const struct gw_cache_entry *e)
{
    struct dns_pending *p = arg;
    if (rcode < 0) { /* sandbox detached */
        free(p);
        return;
    }
    p->sb->dns_pending--;
    if (rcode != DNS_RCODE_OK)
        gw_decide(p->sb, "dns", false, p->q.name, rcode == DNS_RCODE_NXDOMAIN ? "upstream_nxdomain"
                                                                        : "upstream_failure", 0, 53);
    answer(p->sb, &p->from, &p->q, rcode, e, p->q.qtype);
    free(p);
}

static void handle(struct gw_sandbox *sb, const uint8_t *buf, size_t n, const struct sockaddr_in *from)
{
    struct dns_query q;
    uint8_t out[DNS_MSG_MAX];
    switch (dns_query_parse(buf, n, &q)) {
    case DNS_PARSE_DROP:
        return;
    case DNS_PARSE_FORMERR:
        gw_decide(sb, "dns", false, "", "malformed_query", 0, 53);
        reply(sb, from, out, dns_answer_formerr(out, sizeof out, q.id));
        return;
    case DNS_PARSE_BADNAME:
        gw_decide(sb, "dns", false, "", "bad_name", 0, 53);
        reply(sb, from, out, dns_answer_build(out, sizeof out, &q, DNS_RCODE_REFUSED, NULL, 0, 0));
        return;
    case DNS_PARSE_OK:
        break;
    }
    if (q.qclass != DNS_CLASS_IN || (q.qtype != DNS_TYPE_A && q.qtype != DNS_TYPE_AAAA)) {
        char reason[32];
        snprintf(reason, sizeof reason, "qtype_%u_refused", q.qtype);
        gw_decide(sb, "dns", false, q.name, reason, 0, 53);
        reply(sb, from, out, dns_answer_build(out, sizeof out, &q, DNS_RCODE_REFUSED, NULL, 0, 0));
        return;
    }
    if (!policy_name_may_resolve(&sb->policy, q.name)) {
        gw_decide(sb, "dns", false, q.name, "policy", 0, 53);
        reply(sb, from, out, dns_answer_build(out, sizeof out, &q, DNS_RCODE_NXDOMAIN, NULL, 0, 0));
        return;
    }
    if (q.qtype == DNS_TYPE_AAAA) {
        /* IPv6 never leaves a sandbox: an empty answer makes clients use A at once. */
        reply(sb, from, out, dns_answer_build(out, sizeof out, &q, DNS_RCODE_OK, NULL, 0, 0));
        return;
    }
    const struct gw_cache_entry *e = gw_cache_get(sb, q.name);
    if (e) {
        answer(sb, from, &q, DNS_RCODE_OK, e, q.qtype);
        return;
    }
    struct dns_pending *p = sb->dns_pending < GW_DNS_PENDING_MAX ? malloc(sizeof *p) : NULL;
    if (!p) {
        gw_decide(sb, "dns", false, q.name, "too_many_pending", 0, 53);
        reply(sb, from, out, dns_answer_build(out, sizeof out, &q, DNS_RCODE_SERVFAIL, NULL, 0, 0));
        return;
    }
    p->sb = sb;
    p->q = q;
    p->from = *from;
    if (!gw_resolve(sb, q.name, resolved, p)) {
        free(p);
        reply(sb, from, out, dns_answer_build(out, sizeof out, &q, DNS_RCODE_SERVFAIL, NULL, 0, 0));
        return;
    }
    sb->dns_pending++;
}

static void on_readable(evutil_socket_t fd, short what, void *arg)
{
    struct gw_sandbox *sb = arg;
    for (int i = 0; i < DNS_READS_PER_EVENT; i++) {
        uint8_t buf[DNS_MSG_MAX + 1];
        struct sockaddr_in from;
        socklen_t fl = sizeof from;
        ssize_t n = recvfrom(fd, buf, sizeof buf, MSG_DONTWAIT, (struct sockaddr *)&from, &fl);
        if (n < 0)
            return;
        /* nftables already admits only the guest's address; this is the second lock. */
        if (fl != sizeof from || from.sin_family != AF_INET ||
            ntohl(from.sin_addr.s_addr) != sb->wiring.guest_ip)
            continue;
        if (!gw_rate_take(&sb->dns_rate, gw_now_ms())) {
            gw_rate_log(sb, &sb->dns_rate, "dns");
            continue;
        }
        handle(sb, buf, (size_t)n, &from);
    }
}

int dns_server_start(struct gw_sandbox *sb, char *err, size_t errlen)
{
    sb->dns_fd = netns_socket(sb->nsfd, SOCK_DGRAM, sb->wiring.gw_ip, 53, err, errlen);
    if (sb->dns_fd < 0)
        return -1;
    sb->dns_ev = event_new(sb->gw->base, sb->dns_fd, EV_READ | EV_PERSIST, on_readable, sb);
    if (!sb->dns_ev || event_add(sb->dns_ev, NULL) != 0) {
        snprintf(err, errlen, "cannot watch the DNS socket");
        return -1;
    }
    return 0;
}
