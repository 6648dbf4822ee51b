/* policy: what a sandbox may reach, and which addresses nobody may ever reach.
 *
 * A policy is one of
 *   none       nothing at all (spaced gives such a sandbox no NIC; the gateway still
 *              answers nothing and dials nothing if one is attached anyway),
 *   allowlist  rules: exact names ("api.example.com"), wildcards ("*.example.com",
 *              which matches any name *below* example.com but not example.com itself),
 *              IPv4 CIDRs ("203.0.113.0/24"), each optionally restricted to one port
 *              ("api.example.com:443", "203.0.113.0/24:80"),
 *   open       any public name and address, but those a deny rule matches (same rule
 *              forms as allow) unless an allow rule matches them too: in `open` mode the
 *              allow rules are the exceptions to the deny rules. A name a port-less deny
 *              name rule matches is not resolved (nor dialled by SNI or Host) unless an
 *              allow *name* rule matches it; a CIDR deny refuses its addresses whatever
 *              the name the gateway resolved to them, so a second name for a denied
 *              address does not reach it either (name deny rules cover only the names:
 *              use a CIDR to deny an address). A deny rule with a port refuses that port
 *              only. `deny` in another mode is a parse error.
 * Only name rules (and `open`) make a name resolvable: a CIDR rule never does (it
 * would turn the DNS server into a resolver for every name, a tunnel). A CIDR rule
 * allows an address the gateway itself resolved for a name some name rule allows, on
 * the CIDR rule's port; the guest never picks an address. A CIDR-only allowlist thus
 * reaches nothing.
 *
 * Internal names (policy_name_internal: single labels, .internal, .local, .localhost,
 * .home.arpa, ...) are never resolved, whatever the policy.
 *
 * Whatever the policy, policy_addr_forbidden() addresses are never returned in DNS
 * answers and never dialled: 0/8, 10/8, 100.64/10, 127/8, 169.254/16, 172.16/12,
 * 192.0.0/24, 192.168/16, 198.18/15, 224/4, 240/4, the clouds' host-service addresses
 * that are not in those (168.63.129.16) and the gateway host's own addresses, followed
 * live (policy_host.c). The gateway only handles IPv4 (AAAA answers are always empty,
 * IPv6 is dropped at the tap), so IPv4-mapped and NAT64 forms cannot reach a dial.
 *
 * Names are compared after policy_name_normalise(): lower case, no trailing dot,
 * LDH labels (plus '_'), never an IP literal. Pure code, no I/O (but policy_host.c). */
#ifndef SPACE_GW_POLICY_H
#define SPACE_GW_POLICY_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define POLICY_NAME_MAX 253   /* longest normalised name (RFC 1035 text form) */
#define POLICY_RULES_MAX 512  /* more rules than this is an API error, not a policy */

enum policy_mode { POLICY_NONE = 0, POLICY_ALLOWLIST, POLICY_OPEN };

enum policy_rule_kind { RULE_EXACT, RULE_WILDCARD, RULE_CIDR };

struct policy_rule {
    enum policy_rule_kind kind;
    char name[POLICY_NAME_MAX + 1]; /* EXACT: the name; WILDCARD: the suffix after "*." */
    uint32_t net;                   /* CIDR network, host byte order */
    uint32_t mask;                  /* CIDR mask, host byte order */
    uint16_t port;                  /* 0: any port */
};

struct policy {
    enum policy_mode mode;
    size_t nrules;
    struct policy_rule *rules; /* the allow rules; owned; freed by policy_free */
    size_t ndeny;
    struct policy_rule *deny;  /* `open` only; owned; freed by policy_free */
};

/* Parses {"mode":"none|allowlist|open","allow":["name","*.suffix","a.b.c.d/n",
 * "rule:port",...],"deny":[same, "open" only]} into *out (which the caller later frees with policy_free).
 * Returns 0, or -1 with a message in err. */
int policy_parse(const json_t *j, struct policy *out, char *err, size_t errlen);
void policy_free(struct policy *p);
/* The policy back as JSON (new reference), for the control socket. */
json_t *policy_to_json(const struct policy *p);

/* Normalises a host name of `len` bytes into out: lower-cases, drops one trailing dot,
 * checks label and total lengths and characters, refuses IP literals (any form inet_aton
 * accepts, all-numeric last labels, anything with ':'). Returns 0 or -1. */
int policy_name_normalise(const char *in, size_t len, char out[POLICY_NAME_MAX + 1]);

/* True if `name` (normalised) may be resolved at all: not internal, and open mode (but
 * for a name a port-less deny rule matches and no allow name rule does) or a name rule
 * matching (the answer is then filtered with policy_addr_allowed). */
bool policy_name_may_resolve(const struct policy *p, const char *name);
/* True for names that must never be resolved upstream: single labels and names in
 * special-use or site-local zones (.internal, .local, .localhost, .home.arpa, ...). */
bool policy_name_internal(const char *name);

/* The final check before answering or dialling: may the sandbox reach `addr` (host
 * order), which the gateway resolved for `name`, on `port` (0: any port, for DNS
 * answers)? Forbidden addresses are always refused, and so is every address for a name
 * that may not resolve (policy_name_may_resolve). */
bool policy_addr_allowed(const struct policy *p, const char *name, uint32_t addr, uint16_t port);

/* Always-forbidden destinations (see above). */
bool policy_addr_forbidden(uint32_t addr);

/* policy_host.c: the gateway host's own addresses (a process-wide set).
 * Adds an address that is always the host's (--deny-addr); kept across rescans. */
void policy_host_addrs_add(uint32_t addr);
/* Replaces the scanned part of the set with every IPv4 address of the current network
 * namespace's interfaces. */
void policy_host_addrs_scan(void);
/* Scans, and subscribes to the namespace's address changes (rtnetlink): from then on
 * every policy_host_addr_is_own() first drains the notifications and rescans if any
 * arrived, so an address added to the host is forbidden from the next decision on.
 * Returns 0, or -1 (the set is then scanned once only). */
int policy_host_addrs_watch(void);
bool policy_host_addr_is_own(uint32_t addr);

#endif
