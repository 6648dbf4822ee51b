/* rtnl: the few rtnetlink requests space needs to wire a network interface, with no
 * external tools (the guest templates have no iproute2, and spaced must not fork `ip`
 * on the sandbox create path).
 *
 * Used on both sides of the tap: spaced puts the gateway address on the sandbox
 * namespace's tap (daemon/net), the guest agent configures eth0 (agent/net.c). Every
 * call acts on the network namespace of the calling thread at the time rtnl_open() was
 * called (a netlink socket stays bound to the namespace it was created in).
 *
 * Requests are synchronous: one message, then its ACK (NLM_F_ACK) is read; the kernel's
 * error number comes back as -1 with errno set and a message in err. Address and route
 * requests use NLM_F_REPLACE, so repeating them is harmless (idempotent set-up). */
#ifndef SPACE_RTNL_H
#define SPACE_RTNL_H

#include <stddef.h>
#include <stdint.h>

#define RTNL_MSG_MAX 256 /* every request built here fits */

struct rtnl {
    int fd;       /* NETLINK_ROUTE socket, close-on-exec */
    uint32_t seq; /* sequence number of the last request */
};

/* Opens the socket in the caller's current network namespace. Returns 0 or -1. */
int rtnl_open(struct rtnl *r, char *err, size_t errlen);
void rtnl_close(struct rtnl *r);

/* Sets the link with index ifindex administratively up. */
int rtnl_link_up(struct rtnl *r, int ifindex, char *err, size_t errlen);
/* Adds (or replaces) the IPv4 address ip/prefix (host byte order) on ifindex. */
int rtnl_addr_add(struct rtnl *r, int ifindex, uint32_t ip, unsigned prefix, char *err,
                  size_t errlen);
/* Adds (or replaces) the IPv4 default route via gw (host byte order) out of ifindex. */
int rtnl_route_default(struct rtnl *r, int ifindex, uint32_t gw, char *err, size_t errlen);

/* Message builders (exposed for unit tests): write one complete request into buf[cap]
 * and return its length, or 0 if cap is too small. */
size_t rtnl_build_link_up(void *buf, size_t cap, uint32_t seq, int ifindex);
size_t rtnl_build_addr(void *buf, size_t cap, uint32_t seq, int ifindex, uint32_t ip,
                       unsigned prefix);
size_t rtnl_build_route_default(void *buf, size_t cap, uint32_t seq, int ifindex, uint32_t gw);

#endif
