/* rtnl.c: building rtnetlink requests and reading their ACKs (see rtnl.h). */
#include "rtnl.h"

#include <arpa/inet.h>
#include <errno.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

int rtnl_open(struct rtnl *r, char *err, size_t errlen)
{
    r->seq = 0;
    r->fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
    if (r->fd < 0) {
        snprintf(err, errlen, "netlink socket: %s", strerror(errno));
        return -1;
    }
    /* The kernel answers at once; the timeout only guards against a lost ACK. */
    struct timeval tv = {.tv_sec = 5};
    setsockopt(r->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    struct sockaddr_nl sa = {.nl_family = AF_NETLINK};
    if (bind(r->fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
        snprintf(err, errlen, "netlink bind: %s", strerror(errno));
        close(r->fd);
        r->fd = -1;
        return -1;
    }
    return 0;
}

void rtnl_close(struct rtnl *r)
{
    if (r->fd >= 0)
        close(r->fd);
    r->fd = -1;
}

/* Starts a request of `type` whose family header has hdrlen bytes; the caller fills
 * the header at NLMSG_DATA and appends attributes. Returns NULL if cap is too small. */
static struct nlmsghdr *msg_start(void *buf, size_t cap, uint16_t type, uint16_t flags,
                                  uint32_t seq, size_t hdrlen)
{
    if (cap < NLMSG_SPACE(hdrlen))
        return NULL;
    memset(buf, 0, NLMSG_SPACE(hdrlen));
    struct nlmsghdr *h = buf;
    h->nlmsg_len = NLMSG_LENGTH(hdrlen);
    h->nlmsg_type = type;
    h->nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK | flags;
    h->nlmsg_seq = seq;
    return h;
}

/* Appends one attribute; returns -1 (message unchanged) if it does not fit. */
static int msg_attr(struct nlmsghdr *h, size_t cap, uint16_t type, const void *data, size_t len)
{
    size_t off = NLMSG_ALIGN(h->nlmsg_len);
    if (off + RTA_SPACE(len) > cap)
        return -1;
    struct rtattr *a = (struct rtattr *)((char *)h + off);
    a->rta_type = type;
    a->rta_len = (unsigned short)RTA_LENGTH(len);
    memcpy(RTA_DATA(a), data, len);
    memset((char *)RTA_DATA(a) + len, 0, RTA_SPACE(len) - RTA_LENGTH(len));
    h->nlmsg_len = (uint32_t)(off + RTA_SPACE(len));
    return 0;
}

size_t rtnl_build_link_up(void *buf, size_t cap, uint32_t seq, int ifindex)
{
    struct nlmsghdr *h = msg_start(buf, cap, RTM_NEWLINK, 0, seq, sizeof(struct ifinfomsg));
    if (!h)
        return 0;
    struct ifinfomsg *ifi = NLMSG_DATA(h);
    ifi->ifi_family = AF_UNSPEC;
    ifi->ifi_index = ifindex;
    ifi->ifi_flags = IFF_UP;
    ifi->ifi_change = IFF_UP;
    return h->nlmsg_len;
}

size_t rtnl_build_addr(void *buf, size_t cap, uint32_t seq, int ifindex, uint32_t ip,
                       unsigned prefix)
{
    if (prefix > 32)
        return 0;
    struct nlmsghdr *h = msg_start(buf, cap, RTM_NEWADDR, NLM_F_CREATE | NLM_F_REPLACE, seq,
                                   sizeof(struct ifaddrmsg));
    if (!h)
        return 0;
    struct ifaddrmsg *ifa = NLMSG_DATA(h);
    ifa->ifa_family = AF_INET;
    ifa->ifa_prefixlen = (unsigned char)prefix;
    ifa->ifa_scope = RT_SCOPE_UNIVERSE;
    ifa->ifa_index = (unsigned)ifindex;
    uint32_t a = htonl(ip);
    uint32_t mask = prefix ? 0xffffffffu << (32 - prefix) : 0;
    uint32_t bcast = htonl(ip | ~mask);
    if (msg_attr(h, cap, IFA_LOCAL, &a, 4) || msg_attr(h, cap, IFA_ADDRESS, &a, 4) ||
        msg_attr(h, cap, IFA_BROADCAST, &bcast, 4))
        return 0;
    return h->nlmsg_len;
}

size_t rtnl_build_route_default(void *buf, size_t cap, uint32_t seq, int ifindex, uint32_t gw)
{
    struct nlmsghdr *h = msg_start(buf, cap, RTM_NEWROUTE, NLM_F_CREATE | NLM_F_REPLACE, seq,
                                   sizeof(struct rtmsg));
    if (!h)
        return 0;
    struct rtmsg *rt = NLMSG_DATA(h);
    rt->rtm_family = AF_INET;
    rt->rtm_dst_len = 0;
    rt->rtm_table = RT_TABLE_MAIN;
    rt->rtm_protocol = RTPROT_BOOT;
    rt->rtm_scope = RT_SCOPE_UNIVERSE;
    rt->rtm_type = RTN_UNICAST;
    uint32_t g = htonl(gw), oif = (uint32_t)ifindex;
    if (msg_attr(h, cap, RTA_GATEWAY, &g, 4) || msg_attr(h, cap, RTA_OIF, &oif, 4))
        return 0;
    return h->nlmsg_len;
}

/* Sends the request in buf and waits for the ACK with its sequence number. */
static int transact(struct rtnl *r, void *buf, size_t len, const char *what, char *err,
                    size_t errlen)
{
    if (len == 0) {
        snprintf(err, errlen, "%s: request does not fit", what);
        errno = EINVAL;
        return -1;
    }
    struct nlmsghdr *req = buf;
    req->nlmsg_seq = ++r->seq;
    struct sockaddr_nl kernel = {.nl_family = AF_NETLINK};
    if (sendto(r->fd, buf, len, 0, (struct sockaddr *)&kernel, sizeof kernel) < 0) {
        snprintf(err, errlen, "%s: netlink send: %s", what, strerror(errno));
        return -1;
    }
    for (;;) {
        char reply[4096] __attribute__((aligned(NLMSG_ALIGNTO)));
        ssize_t n = recv(r->fd, reply, sizeof reply, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            snprintf(err, errlen, "%s: netlink receive: %s", what, strerror(errno));
            return -1;
        }
        /* unsigned: NLMSG_OK compares it with nlmsg_len (u32); n >= 0 here. */
        unsigned int left = (unsigned int)n;
        for (struct nlmsghdr *h = (struct nlmsghdr *)reply; NLMSG_OK(h, left);
             h = NLMSG_NEXT(h, left)) {
            if (h->nlmsg_seq != r->seq || h->nlmsg_type != NLMSG_ERROR)
                continue;
            if (h->nlmsg_len < NLMSG_LENGTH(sizeof(struct nlmsgerr))) {
                snprintf(err, errlen, "%s: truncated netlink ACK", what);
                errno = EPROTO;
                return -1;
            }
            const struct nlmsgerr *e = NLMSG_DATA(h);
            if (e->error == 0)
                return 0;
            errno = -e->error;
            snprintf(err, errlen, "%s: %s", what, strerror(errno));
            return -1;
        }
    }
}

int rtnl_link_up(struct rtnl *r, int ifindex, char *err, size_t errlen)
{
    char buf[RTNL_MSG_MAX] __attribute__((aligned(NLMSG_ALIGNTO)));
    return transact(r, buf, rtnl_build_link_up(buf, sizeof buf, 0, ifindex), "link up", err,
                    errlen);
}

int rtnl_addr_add(struct rtnl *r, int ifindex, uint32_t ip, unsigned prefix, char *err,
                  size_t errlen)
{
    char buf[RTNL_MSG_MAX] __attribute__((aligned(NLMSG_ALIGNTO)));
    return transact(r, buf, rtnl_build_addr(buf, sizeof buf, 0, ifindex, ip, prefix),
                    "address add", err, errlen);
}

int rtnl_route_default(struct rtnl *r, int ifindex, uint32_t gw, char *err, size_t errlen)
{
    char buf[RTNL_MSG_MAX] __attribute__((aligned(NLMSG_ALIGNTO)));
    return transact(r, buf, rtnl_build_route_default(buf, sizeof buf, 0, ifindex, gw),
                    "default route", err, errlen);
}
