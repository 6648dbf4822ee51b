/* policy_host.c: the gateway host's own addresses, which no sandbox may reach; see
 * policy.h. Two parts: fixed addresses (--deny-addr) and the scanned addresses of the
 * gateway's network namespace. The scan is followed live: an rtnetlink socket
 * subscribed to IPv4 address changes is drained (non-blocking) before every check, and
 * any notification, or a lost one (ENOBUFS), triggers a rescan. The kernel queues the
 * notification before `ip addr add` returns, so no decision after an address appears
 * can miss it. */
#include "policy.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define HOST_ADDRS_MAX 256

struct addr_set {
    uint32_t a[HOST_ADDRS_MAX];
    size_t n;
};

static struct addr_set fixed, scanned;
static int watch_fd = -1;

static void set_add(struct addr_set *s, uint32_t addr)
{
    for (size_t i = 0; i < s->n; i++)
        if (s->a[i] == addr)
            return;
    if (s->n < HOST_ADDRS_MAX)
        s->a[s->n++] = addr;
}

static bool set_has(const struct addr_set *s, uint32_t addr)
{
    for (size_t i = 0; i < s->n; i++)
        if (s->a[i] == addr)
            return true;
    return false;
}

void policy_host_addrs_add(uint32_t addr)
{
    set_add(&fixed, addr);
}

void policy_host_addrs_scan(void)
{
    struct ifaddrs *ifs = NULL;
    if (getifaddrs(&ifs) != 0)
        return; /* keep the previous scan rather than forget addresses */
    scanned.n = 0;
    for (struct ifaddrs *i = ifs; i; i = i->ifa_next)
        if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET)
            set_add(&scanned, ntohl(((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr));
    freeifaddrs(ifs);
}

int policy_host_addrs_watch(void)
{
    int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, NETLINK_ROUTE);
    struct sockaddr_nl sa = {.nl_family = AF_NETLINK, .nl_groups = RTMGRP_IPV4_IFADDR};
    if (fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        close(fd);
        fd = -1;
    }
    /* Subscribe first, then scan: a change in between is seen twice, never missed. */
    watch_fd = fd;
    policy_host_addrs_scan();
    return fd >= 0 ? 0 : -1;
}

/* Drains pending notifications; rescans if there were any. */
static void sync_addrs(void)
{
    if (watch_fd < 0)
        return;
    char buf[8192];
    bool changed = false;
    for (;;) {
        ssize_t n = recv(watch_fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n > 0 || (n < 0 && errno == ENOBUFS)) {
            changed = true; /* any message, or lost ones: the set may be stale */
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        break;
    }
    if (changed)
        policy_host_addrs_scan();
}

bool policy_host_addr_is_own(uint32_t addr)
{
    sync_addrs();
    return set_has(&fixed, addr) || set_has(&scanned, addr);
}
