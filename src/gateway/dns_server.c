/* dns_server.c: the only resolver a sandbox can reach (gw:53 inside its namespace, UDP
 * here, TCP in dns_tcp.c). Answers A for names its policy allows, with addresses the
 * gateway resolved itself minus forbidden ones; AAAA gets an empty answer; every other
 * type is REFUSED; names the policy does not allow get NXDOMAIN without any upstream
 * query. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"
#include "dns_server.h"

#define DNS_READS_PER_EVENT 32 /* fairness: one sandbox's flood cannot starve the loop */

static void reply(struct gw_sandbox *sb, const struct dns_asker *to, const uint8_t *msg, size_t len)
{
    if (!len)
        return;
    if (to->tcp)
        dns_tcp_send(to->tcp, msg, len);
    else
        (void)sendto(sb->dns_fd, msg, len, MSG_DONTWAIT, (const struct sockaddr *)&to->from,
                     sizeof to->from);
}

/* Answers q with rcode and e's allowed addresses (if any); UDP answers are truncated
 * to DNS_MSG_MAX (TC set) when the records do not fit. */
static void answer(struct gw_sandbox *sb, const struct dns_asker *to, const struct dns_query *q,
                   int rcode, const struct gw_cache_entry *e)
{
    uint8_t out[DNS_ANSWER_BYTES_MAX];
    uint32_t addrs[DNS_ANSWERS_MAX];
    size_t n = 0;
    uint32_t ttl = 0;
    if (e && q->qtype == DNS_TYPE_A) {
        for (size_t i = 0; i < e->naddrs; i++)
            if (policy_addr_allowed(&sb->policy, q->name, e->addrs[i], 0))
                addrs[n++] = e->addrs[i];
        int64_t now = clock_mono_ms();
        ttl = e->expires_ms > now ? (uint32_t)((e->expires_ms - now) / 1000) : 0;
        gw_decide(sb, "dns", n > 0, q->name, n ? "resolved" :
                  (e->naddrs ? "policy_addresses" :
                   e->nforbidden ? "forbidden_addresses" : "no_addresses"), 0, 53);
    }
    size_t cap = to->tcp ? sizeof out : DNS_MSG_MAX;
    reply(sb, to, out, dns_answer_build(out, cap, q, rcode, addrs, n, ttl));
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
    answer(p->sb, &p->to, &p->q, rcode, e);
    if (p->to.tcp)
        dns_tcp_pending_done(p->to.tcp, p); /* after the answer is queued: see dns_tcp.c */
    free(p);
}

void dns_pending_drop(struct dns_pending *p)
{
    gw_lookup_cancel(p->lookup);
    p->sb->dns_pending--;
    free(p);
}

void dns_handle(struct gw_sandbox *sb, const uint8_t *buf, size_t n, const struct dns_asker *to)
{
    struct dns_query q;
    uint8_t out[DNS_MSG_MAX];
    switch (dns_query_parse(buf, n, &q)) {
    case DNS_PARSE_DROP:
        return;
    case DNS_PARSE_FORMERR:
        gw_decide(sb, "dns", false, "", "malformed_query", 0, 53);
        reply(sb, to, out, dns_answer_formerr(out, sizeof out, q.id));
        return;
    case DNS_PARSE_BADNAME:
        gw_decide(sb, "dns", false, "", "bad_name", 0, 53);
        answer(sb, to, &q, DNS_RCODE_REFUSED, NULL);
        return;
    case DNS_PARSE_OK:
        break;
    }
    if (q.qclass != DNS_CLASS_IN || (q.qtype != DNS_TYPE_A && q.qtype != DNS_TYPE_AAAA)) {
        char reason[32];
        snprintf(reason, sizeof reason, "qtype_%u_refused", q.qtype);
        gw_decide(sb, "dns", false, q.name, reason, 0, 53);
        answer(sb, to, &q, DNS_RCODE_REFUSED, NULL);
        return;
    }
    if (!policy_name_may_resolve(&sb->policy, q.name)) {
        gw_decide(sb, "dns", false, q.name, "policy", 0, 53);
        answer(sb, to, &q, DNS_RCODE_NXDOMAIN, NULL);
        return;
    }
    if (q.qtype == DNS_TYPE_AAAA) {
        /* IPv6 never leaves a sandbox: an empty answer makes clients use A at once. */
        answer(sb, to, &q, DNS_RCODE_OK, NULL);
        return;
    }
    const struct gw_cache_entry *e = gw_cache_get(sb, q.name);
    if (e) {
        answer(sb, to, &q, DNS_RCODE_OK, e);
        return;
    }
    struct dns_pending *p = sb->dns_pending < GW_DNS_PENDING_MAX ? calloc(1, sizeof *p) : NULL;
    if (!p) {
        gw_decide(sb, "dns", false, q.name, "too_many_pending", 0, 53);
        answer(sb, to, &q, DNS_RCODE_SERVFAIL, NULL);
        return;
    }
    p->sb = sb;
    p->q = q;
    p->to = *to;
    if (!(p->lookup = gw_resolve(sb, q.name, resolved, p))) {
        free(p);
        answer(sb, to, &q, DNS_RCODE_SERVFAIL, NULL);
        return;
    }
    sb->dns_pending++;
    if (to->tcp)
        dns_tcp_pending_add(to->tcp, p);
}

/* Datagrams the kernel dropped because the socket's queue was full (SO_RXQ_OVFL: a
 * running total, attached to the datagrams queued after a drop) count as refused by
 * the rate limit: a flood faster than the loop reads must show in the log and the
 * counter. */
static void count_kernel_drops(struct gw_sandbox *sb, const struct msghdr *mh)
{
    for (struct cmsghdr *c = CMSG_FIRSTHDR(mh); c; c = CMSG_NXTHDR((struct msghdr *)mh, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SO_RXQ_OVFL ||
            c->cmsg_len < CMSG_LEN(sizeof(uint32_t)))
            continue;
        uint32_t total;
        memcpy(&total, CMSG_DATA(c), sizeof total);
        uint32_t fresh = total - sb->dns_kernel_drops; /* wraps like the counter */
        sb->dns_kernel_drops = total;
        if (fresh) {
            sb->dns_rate.refused += fresh;
            sb->dns_rate.refused_total += fresh;
            gw_rate_log(sb, &sb->dns_rate, "dns");
        }
    }
}

static void on_readable(evutil_socket_t fd, short what, void *arg)
{
    struct gw_sandbox *sb = arg;
    for (int i = 0; i < DNS_READS_PER_EVENT; i++) {
        uint8_t buf[DNS_MSG_MAX + 1];
        union {
            char bytes[CMSG_SPACE(sizeof(uint32_t))];
            struct cmsghdr align;
        } ctl;
        struct dns_asker to = {.tcp = NULL};
        struct iovec iov = {.iov_base = buf, .iov_len = sizeof buf};
        struct msghdr mh = {.msg_name = &to.from, .msg_namelen = sizeof to.from, .msg_iov = &iov,
                            .msg_iovlen = 1, .msg_control = ctl.bytes, .msg_controllen = sizeof ctl.bytes};
        ssize_t n = recvmsg(fd, &mh, MSG_DONTWAIT);
        if (n < 0)
            return;
        count_kernel_drops(sb, &mh);
        /* nftables already admits only the guest's address; this is the second lock. */
        if (mh.msg_namelen != sizeof to.from || to.from.sin_family != AF_INET ||
            ntohl(to.from.sin_addr.s_addr) != sb->wiring.guest_ip)
            continue;
        if (!gw_rate_take(&sb->dns_rate, clock_mono_ms())) {
            gw_rate_log(sb, &sb->dns_rate, "dns");
            continue;
        }
        dns_handle(sb, buf, (size_t)n, &to);
    }
}

int dns_server_start(struct gw_sandbox *sb, char *err, size_t errlen)
{
    sb->dns_fd = netns_socket(sb->nsfd, SOCK_DGRAM, sb->wiring.gw_ip, 53, err, errlen);
    if (sb->dns_fd < 0)
        return -1;
    int one = 1;
    if (setsockopt(sb->dns_fd, SOL_SOCKET, SO_RXQ_OVFL, &one, sizeof one) != 0) {
        snprintf(err, errlen, "SO_RXQ_OVFL: %s", strerror(errno));
        return -1;
    }
    sb->dns_ev = event_new(sb->gw->base, sb->dns_fd, EV_READ | EV_PERSIST, on_readable, sb);
    if (!sb->dns_ev || event_add(sb->dns_ev, NULL) != 0) {
        snprintf(err, errlen, "cannot watch the DNS socket");
        return -1;
    }
    return dns_tcp_start(sb, err, errlen);
}

void dns_server_stop(struct gw_sandbox *sb)
{
    dns_tcp_stop(sb);
    if (sb->dns_ev)
        event_free(sb->dns_ev);
    sb->dns_ev = NULL;
    if (sb->dns_fd >= 0)
        close(sb->dns_fd);
    sb->dns_fd = -1;
}
