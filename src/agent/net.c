/* net.c: configures the guest's NIC at boot (see net.h). */
#include "net.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "rtnl.h"

static uint32_t ip4(const char *s)
{
    struct in_addr a;
    inet_pton(AF_INET, s, &a);
    return ntohl(a.s_addr);
}

/* Writes the resolver file. Failure is not fatal: a read-only or odd rootfs still has
 * working addresses (programs may take the resolver from elsewhere). */
static void write_resolv(const char *path)
{
    static const char text[] = "# written by space-agent: the sandbox's only resolver\n"
                               "nameserver " AGENT_NET_GATEWAY_IP "\n"
                               "options timeout:2 attempts:2\n";
    char tmp[256];
    if (snprintf(tmp, sizeof tmp, "%s.space-tmp", path) >= (int)sizeof tmp)
        return;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) {
        log_warn("net.resolv", "path=%s errno=%d", path, errno);
        return;
    }
    ssize_t n = write(fd, text, sizeof text - 1);
    close(fd);
    /* rename() replaces a symlink (systemd-resolved style) instead of writing through
     * it into a directory we do not control. */
    if (n != (ssize_t)(sizeof text - 1) || rename(tmp, path) != 0) {
        log_warn("net.resolv", "path=%s errno=%d", path, errno);
        unlink(tmp);
    }
}

/* IPv6 off before the link comes up: the gateway drops every IPv6 frame at the tap, so
 * the guest's router solicitations and duplicate-address probes would only be noise in
 * its log. Best effort (a kernel without IPv6 has no such files). */
static void ipv6_off(const char *ifname)
{
    char path[96];
    const char *names[] = {"all", "default", ifname};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        snprintf(path, sizeof path, "/proc/sys/net/ipv6/conf/%s/disable_ipv6", names[i]);
        int fd = open(path, O_WRONLY | O_CLOEXEC);
        if (fd >= 0) {
            if (write(fd, "1", 1) != 1)
                log_warn("net.ipv6", "path=%s errno=%d", path, errno);
            close(fd);
        }
    }
}

int agent_net_configure(const char *ifname, const char *resolv_path, char *err, size_t errlen)
{
    int idx = (int)if_nametoindex(ifname);
    if (idx == 0)
        return 0;
    ipv6_off(ifname);
    int lo = (int)if_nametoindex("lo");
    struct rtnl r;
    if (rtnl_open(&r, err, errlen) != 0)
        return -1;
    int rc = -1;
    if (lo > 0 && rtnl_link_up(&r, lo, err, errlen) != 0)
        goto out;
    if (rtnl_link_up(&r, idx, err, errlen) != 0 ||
        rtnl_addr_add(&r, idx, ip4(AGENT_NET_GUEST_IP), AGENT_NET_PREFIX, err, errlen) != 0 ||
        rtnl_route_default(&r, idx, ip4(AGENT_NET_GATEWAY_IP), err, errlen) != 0)
        goto out;
    if (resolv_path)
        write_resolv(resolv_path);
    rc = 1;
out:
    rtnl_close(&r);
    return rc;
}

int agent_net_up(char *err, size_t errlen)
{
    return agent_net_configure(AGENT_NET_IFNAME, AGENT_NET_RESOLV, err, errlen);
}
