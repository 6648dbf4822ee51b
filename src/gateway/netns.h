/* netns: the sandbox side of the gateway's wiring.
 *
 * spaced creates, per sandbox, a network namespace holding the tap QEMU opens, with the
 * gateway address on it (e.g. 10.0.2.2/24, the guest being 10.0.2.15) and the link up.
 * At attach the gateway (a) installs the nftables ruleset below inside that namespace,
 * (b) turns IPv6 off and forwarding off there, and (c) opens its listening sockets in it
 * (UDP and TCP gw:53, TCP gw:NETNS_PORT_HTTP and gw:NETNS_PORT_TLS, the targets of the
 * redirect).
 * The namespace has no other interface and no route, and upstream sockets are opened
 * from the gateway's own namespace, so nothing the guest sends can be forwarded.
 *
 * The ruleset (netns_rules_render) in words:
 *   netdev ingress on the tap: drop unless the source MAC is the guest's and the frame
 *     is IPv4 from the guest's address, or ARP (Ethernet/IPv4) whose sender MAC and IP
 *     are the guest's; everything else (IPv6, VLAN, other ethertypes, spoofed sources,
 *     gratuitous ARP for another address) is dropped before the stack sees it.
 *   ip nat prerouting: TCP to any address, port 80 -> gw:NETNS_PORT_HTTP, 443 ->
 *     gw:NETNS_PORT_TLS (the gateway reads the original destination with
 *     SO_ORIGINAL_DST, for the log only: it never dials it).
 *   ip filter input: accept only guest -> gw UDP 53, TCP 53, and TCP to the two proxy
 *     ports for connections redirected there (conntrack's original port 80 / 443: the
 *     proxy ports themselves are not reachable directly); drop the rest (ICMP, other
 *     UDP/TCP ports, DoT, QUIC...). DNS to any other address never reaches anything (no
 *     route, no redirect).
 *   ip filter forward: drop. output: only to the guest (or loopback).
 *   ip6 / arp families: the netdev rule already drops IPv6; ARP output is unaffected. */
#ifndef SPACE_GW_NETNS_H
#define SPACE_GW_NETNS_H

#include <stddef.h>
#include <stdint.h>

#define NETNS_PORT_HTTP 15080
#define NETNS_PORT_TLS 15443

struct netns_wiring {
    char dev[16];          /* the tap (or veth in tests) inside the namespace */
    uint8_t guest_mac[6];
    uint32_t guest_ip;     /* host order */
    uint32_t gw_ip;        /* host order; configured on dev by spaced */
};

/* Writes the nft script for w into out[cap]. Returns its length, or 0 if too small. */
size_t netns_rules_render(const struct netns_wiring *w, char *out, size_t cap);

/* Applies the ruleset and sysctls inside the namespace whose fd is nsfd: forks a child
 * that enters it and runs `nft -f -`. Returns 0, or -1 with err filled. */
int netns_apply(int nsfd, const struct netns_wiring *w, char *err, size_t errlen);

/* Opens a socket (type SOCK_STREAM listening, or SOCK_DGRAM bound) on gw_ip:port
 * inside the namespace nsfd, then returns to the gateway's own namespace. Returns the
 * non-blocking, close-on-exec fd, or -1 with err filled. */
int netns_socket(int nsfd, int type, uint32_t ip, uint16_t port, char *err, size_t errlen);

/* Must be called once at start: remembers the gateway's own namespace. */
int netns_init(void);

/* Parses "aa:bb:cc:dd:ee:ff". Returns 0 or -1. */
int netns_parse_mac(const char *s, uint8_t mac[6]);

#endif
