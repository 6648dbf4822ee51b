/* netns.c: nftables rules, sysctls and sockets inside sandbox namespaces; see netns.h. */
#include "netns.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static int own_ns = -1;

int netns_init(void)
{
    own_ns = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    return own_ns < 0 ? -1 : 0;
}

int netns_parse_mac(const char *s, uint8_t mac[6])
{
    unsigned v[6];
    char tail;
    if (sscanf(s, "%2x:%2x:%2x:%2x:%2x:%2x%c", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &tail) != 6)
        return -1;
    for (int i = 0; i < 6; i++)
        mac[i] = (uint8_t)v[i];
    if (mac[0] & 1)
        return -1; /* multicast/broadcast is never a guest's source */
    return 0;
}

size_t netns_rules_render(const struct netns_wiring *w, char *out, size_t cap)
{
    char mac[18], gip[16], gw[16];
    struct in_addr a = {.s_addr = htonl(w->guest_ip)}, b = {.s_addr = htonl(w->gw_ip)};
    snprintf(mac, sizeof mac, "%02x:%02x:%02x:%02x:%02x:%02x", w->guest_mac[0],
             w->guest_mac[1], w->guest_mac[2], w->guest_mac[3], w->guest_mac[4], w->guest_mac[5]);
    inet_ntop(AF_INET, &a, gip, sizeof gip);
    inet_ntop(AF_INET, &b, gw, sizeof gw);
    int n = snprintf(out, cap,
        "table netdev space_l2\n"
        "delete table netdev space_l2\n"
        "table ip space_l3\n"
        "delete table ip space_l3\n"
        "table netdev space_l2 {\n"
        "  chain ingress {\n"
        "    type filter hook ingress device \"%s\" priority -500; policy drop;\n"
        "    ether saddr != %s drop\n"
        "    ether type ip ip saddr %s accept\n"
        "    ether type arp arp htype 1 arp ptype ip arp hlen 6 arp plen 4 "
        "arp saddr ether %s arp saddr ip %s accept\n"
        "  }\n"
        "}\n"
        "table ip space_l3 {\n"
        "  chain prerouting {\n"
        "    type nat hook prerouting priority -100; policy accept;\n"
        "    iifname \"%s\" tcp dport 80 redirect to :%d\n"
        "    iifname \"%s\" tcp dport 443 redirect to :%d\n"
        "  }\n"
        "  chain input {\n"
        "    type filter hook input priority 0; policy drop;\n"
        "    iifname \"lo\" accept\n"
        "    iifname \"%s\" ip saddr %s ip daddr %s udp dport 53 accept\n"
        "    iifname \"%s\" ip saddr %s ip daddr %s tcp dport 53 accept\n"
        "    iifname \"%s\" ip saddr %s ip daddr %s tcp dport %d ct original proto-dst 80 accept\n"
        "    iifname \"%s\" ip saddr %s ip daddr %s tcp dport %d ct original proto-dst 443 accept\n"
        "  }\n"
        "  chain forward {\n"
        "    type filter hook forward priority 0; policy drop;\n"
        "  }\n"
        "  chain output {\n"
        "    type filter hook output priority 0; policy drop;\n"
        "    oifname \"lo\" accept\n"
        "    oifname \"%s\" ip daddr %s meta l4proto { tcp, udp } accept\n"
        "  }\n"
        "}\n",
        w->dev, mac, gip, mac, gip, w->dev, NETNS_PORT_HTTP, w->dev, NETNS_PORT_TLS, w->dev,
        gip, gw, w->dev, gip, gw, w->dev, gip, gw, NETNS_PORT_HTTP, w->dev, gip, gw,
        NETNS_PORT_TLS, w->dev, gip);
    return n < 0 || (size_t)n >= cap ? 0 : (size_t)n;
}

static void write_sysctl(const char *path, const char *v)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd >= 0) {
        if (write(fd, v, strlen(v)) < 0)
            (void)0; /* best effort: IPv6 may be compiled out, which is what we want */
        close(fd);
    }
}

int netns_apply(int nsfd, const struct netns_wiring *w, char *err, size_t errlen)
{
    char script[4096];
    size_t len = netns_rules_render(w, script, sizeof script);
    if (len == 0) {
        snprintf(err, errlen, "ruleset too long");
        return -1;
    }
    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC) != 0) {
        snprintf(err, errlen, "pipe: %s", strerror(errno));
        return -1;
    }
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(err, errlen, "fork: %s", strerror(errno));
        close(pfd[0]);
        close(pfd[1]);
        return -1;
    }
    if (pid == 0) {
        if (setns(nsfd, CLONE_NEWNET) != 0)
            _exit(126);
        /* /proc/sys/net follows the namespace of the task that opens it. */
        write_sysctl("/proc/sys/net/ipv6/conf/all/disable_ipv6", "1");
        write_sysctl("/proc/sys/net/ipv6/conf/default/disable_ipv6", "1");
        write_sysctl("/proc/sys/net/ipv4/ip_forward", "0");
        write_sysctl("/proc/sys/net/ipv4/conf/all/send_redirects", "0");
        dup2(pfd[0], 0);
        execlp("nft", "nft", "-f", "-", (char *)NULL);
        _exit(127);
    }
    close(pfd[0]);
    ssize_t wr = write(pfd[1], script, len);
    close(pfd[1]);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    if (wr != (ssize_t)len || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        snprintf(err, errlen, "nft failed in sandbox namespace (status %d)",
                 WIFEXITED(st) ? WEXITSTATUS(st) : -1);
        return -1;
    }
    return 0;
}

int netns_socket(int nsfd, int type, uint32_t ip, uint16_t port, char *err, size_t errlen)
{
    if (own_ns < 0 || setns(nsfd, CLONE_NEWNET) != 0) {
        snprintf(err, errlen, "setns: %s", strerror(errno));
        return -1;
    }
    int fd = socket(AF_INET, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1, saved = 0;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port),
                             .sin_addr.s_addr = htonl(ip)};
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
        (type == SOCK_STREAM && listen(fd, 128) != 0)) {
        saved = errno;
        if (fd >= 0)
            close(fd);
        fd = -1;
    }
    /* Going back must never fail silently: every later upstream socket would be
     * opened inside the sandbox's namespace. */
    if (setns(own_ns, CLONE_NEWNET) != 0)
        __builtin_trap();
    if (fd < 0)
        snprintf(err, errlen, "socket in sandbox namespace: %s", strerror(saved));
    return fd;
}
