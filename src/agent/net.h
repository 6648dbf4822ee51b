/* agent_net: the guest's side of sandbox networking.
 *
 * Every sandbox sees the same addressing (each lives in its own network namespace on
 * the host, so nothing collides, and a template snapshot taken with networking
 * configured is valid for every clone): eth0 = AGENT_NET_GUEST_IP/AGENT_NET_PREFIX,
 * default route and the only DNS server = AGENT_NET_GATEWAY_IP (space-gateway's sockets
 * inside the sandbox's namespace). A sandbox whose policy is `none` has no NIC at all,
 * and then nothing is configured. Done with rtnetlink (common/rtnl.h): templates have
 * no iproute2. */
#ifndef SPACE_AGENT_NET_H
#define SPACE_AGENT_NET_H

#include <stddef.h>

#define AGENT_NET_IFNAME "eth0"
#define AGENT_NET_GUEST_IP "10.0.2.15"
#define AGENT_NET_GATEWAY_IP "10.0.2.2"
#define AGENT_NET_PREFIX 24
#define AGENT_NET_RESOLV "/etc/resolv.conf"

/* If eth0 exists: IPv6 off, lo and eth0 up, the guest address on eth0, the default route via the
 * gateway, and /etc/resolv.conf naming the gateway (skipped with a log line when the
 * root filesystem refuses the write). Returns 1 if configured, 0 if there is no eth0
 * (nothing done), -1 with err filled on failure. Call once at boot, after the virtio
 * modules are loaded and the root is mounted. */
int agent_net_up(char *err, size_t errlen);

/* The same for any interface name, writing the resolver file at resolv_path (NULL:
 * none). agent_net_up is agent_net_configure(AGENT_NET_IFNAME, AGENT_NET_RESOLV); the
 * host-side tests call it inside a namespace of their own. */
int agent_net_configure(const char *ifname, const char *resolv_path, char *err, size_t errlen);

#endif
