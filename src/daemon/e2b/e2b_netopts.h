/* e2b_netopts: E2B create's network options mapped onto spaced's sandbox spec.
 *
 * The SDKs send `allow_internet_access` (bool) and `network: {allowOut, denyOut,
 * allowPublicTraffic, maskRequestHost, httpsPorts, rules, egressProxy}`, plus `secure` and
 * `mcp`; updateNetwork sends the egress fields alone. E2B's egress semantics: allowOut wins over denyOut; "0.0.0.0/0" in denyOut denies
 * everything but allowOut; allow_internet_access false is the same as denyOut
 * ["0.0.0.0/0"]. Entries are IPv4 addresses, CIDRs, names or "*." wildcards. Mapping:
 *   deny everything (denyOut has 0.0.0.0/0, or allow_internet_access false)
 *                      -> {"mode":"allowlist","allow":allowOut}, or {"mode":"none"}
 *                         when allowOut is empty (no NIC at all);
 *   other denyOut      -> {"mode":"open","deny":denyOut,"allow":allowOut};
 *   allowOut alone, or allow_internet_access true -> {"mode":"open"};
 *   nothing            -> no "network": the daemon's default policy.
 * An address a.b.c.d becomes a.b.c.d/32. Options spaced cannot honour are refused when
 * ignoring them would leave the sandbox less confined than asked (egressProxy, rules,
 * mcp); the harmless ones are accepted (secure: spaced always requires envd access
 * tokens; maskRequestHost, httpsPorts: checked for shape, not applied). Pure: no I/O. */
#ifndef SPACE_E2B_NETOPTS_H
#define SPACE_E2B_NETOPTS_H

#include <jansson.h>
#include <stddef.h>

/* The spec fields body asks for (new object, possibly empty: "network" and "ports"),
 * or NULL with a message for a 400 in msg (naming the field or entry). */
json_t *e2b_netopts_spec(const json_t *body, char *msg, size_t msglen);
/* The policy for the body of PUT /sandboxes/{id}/network (the SDK's updateNetwork:
 * allowOut, denyOut, egressProxy, rules, allow_internet_access at the top level), which
 * replaces the sandbox's egress configuration: {} is `open`, as on E2B. New reference,
 * or NULL with msg. */
json_t *e2b_netopts_update(const json_t *body, char *msg, size_t msglen);

#endif
