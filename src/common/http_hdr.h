/* http_hdr: which request header fields a forwarding hop must drop, and which Host
 * values may become part of a URL spaced hands out.
 *
 * One list for every proxy in spaced (the sandbox-port proxy on the API port, the
 * sandbox-port listener's pipe, the control -> node forwarder), so they cannot drift:
 *   - hop-by-hop fields (RFC 9110 7.6.1): they describe one connection, not the request;
 *     a forwarder that re-frames sets its own. Every field the Connection header names
 *     is hop-by-hop too.
 *   - credentials spaced itself consumes: every form of API key (Authorization, which
 *     also carries attach tokens and E2B's Basic user, X-API-Key), the cluster node
 *     token, E2B's envd access token and the per-sandbox traffic token, and
 *     Proxy-Authorization. No cookie authenticates anything in spaced, so none is
 *     listed. A hop towards a sandbox drops them all: code in the guest must never see
 *     a platform secret. The control -> node hop keeps the API key (the node
 *     authenticates it) and replaces the node token with its own.
 * Names compare case-insensitively. Pure functions, no allocation. */
#ifndef SPACE_HTTP_HDR_H
#define SPACE_HTTP_HDR_H

#include <stdbool.h>

#define HH_NODE_TOKEN_HEADER    "X-Space-Node-Token"       /* control -> node secret */
#define HH_TRAFFIC_TOKEN_HEADER "e2b-traffic-access-token" /* private sandbox ports */
/* control -> node: the scheme://host[:port] the client reached the control at, for links
 * the node hands out (a node honours it only beside a valid node token; the control
 * drops a client's copy) */
#define HH_PUBLIC_URL_HEADER    "X-Space-Public-Url"

/* True if `name` is hop-by-hop: Connection, Keep-Alive, Proxy-Connection, TE, Trailer,
 * Transfer-Encoding, Upgrade, or a field listed in `connection` (the request's
 * Connection value, comma-separated; NULL when absent). A forwarder that supports
 * Upgrade re-adds Connection/Upgrade itself. */
bool hh_hop_by_hop(const char *name, const char *connection);

/* True if `name` carries a credential spaced consumes (see above). */
bool hh_credential(const char *name);

/* True if `h` is a plain host[:port] (1..255 bytes of letters, digits, '.', '-', ':',
 * '[', ']'), safe to paste into a URL: no scheme, path, query, userinfo, space or
 * control byte. Used for a client's Host header and for SPACE_PUBLIC_URL's host, so
 * both refuse the same characters. NULL is not a host. */
bool hh_host_ok(const char *h);

/* True if `u` is "http://" or "https://" followed by a host[:port] hh_host_ok accepts
 * and nothing else (SPACE_PUBLIC_URL's form: links are built by appending a path). */
bool hh_public_url_ok(const char *u);

#endif
