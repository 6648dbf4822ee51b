/* gw_ctl: the control socket through which spaced drives the gateway.
 *
 * A unix stream socket (default <data-dir>/gateway.sock, mode 0600, root only). Each
 * request is one JSON object on one line; each gets exactly one JSON line back, in
 * order: {"ok":true, ...} or {"ok":false,"error":{"code":"...","message":"..."}}.
 * Lines longer than GW_CTL_LINE_MAX close the connection.
 *
 *   {"op":"ping"}                                  -> {"ok":true,"ca":"<path of CA cert>"}
 *   {"op":"attach","sandbox":ID,"tenant":ID?,"netns":"/run/netns/NAME","dev":"tap0",
 *    "guest_mac":"02:..","guest_ip":"10.0.2.15","gateway_ip":"10.0.2.2","policy":POLICY,
 *    "limits":{"dns_per_s":200,"dns_burst":400,"conn_per_s":100,"conn_burst":200}?}
 *        spaced has created the namespace and the tap, put gateway_ip on it and set it
 *        up; the gateway installs the nftables rules (netns.h) and opens its sockets
 *        there. Errors: code "bad_request", "exists", "netns".
 *   {"op":"policy","sandbox":ID,"policy":POLICY}   live change; connections the new
 *        policy forbids are reset at once.
 *   {"op":"creds","sandbox":ID,"rules":[{"host":H,"header":N,"value":SECRET},...]}
 *   {"op":"creds","tenant":ID,"rules":[...]}       replaces that scope's rules; a
 *        sandbox sees its own rules first, then its tenant's. Secrets are never echoed.
 *   {"op":"log","sandbox":ID,"since":SEQ?}         -> {"ok":true,"policy":POLICY,
 *        "entries":[{"seq","ts_ms","kind","allowed","name","reason","dst","port"}...]}
 *   {"op":"detach","sandbox":ID}
 * POLICY is {"mode":"none|allowlist|open","allow":[rule,...]} (policy.h). */
#ifndef SPACE_GW_CTL_H
#define SPACE_GW_CTL_H

#include "gw.h"

#define GW_CTL_LINE_MAX (1024 * 1024)

/* Listens on path (replacing a stale socket file). Returns the listener (owned by the
 * caller, free with evconnlistener_free) or NULL with err filled. */
struct evconnlistener *gw_ctl_listen(struct gw *gw, const char *path, char *err, size_t errlen);

/* Handles one request object; returns the reply (new reference). */
json_t *gw_ctl_handle(struct gw *gw, const json_t *req);

#endif
