/* net_internal: what the files of the net module share (not for other modules). */
#ifndef SPACE_NET_INTERNAL_H
#define SPACE_NET_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#include "daemon/net/net.h"

/* ---- net_ns.c: namespaces and taps (all on the calling thread) ---------------------- */

/* Makes dir exist as a shared mount point (as `ip netns` does), so namespaces mounted
 * there are visible to processes that entered another mount namespace earlier (the
 * gateway under `ip netns exec`, test tools). Returns 0 or -1 with err. */
int net_ns_prepare_dir(const char *dir, char *err, size_t errlen);

/* Creates a namespace wired for a sandbox (lo up, IPv6 off, persistent NET_TAP with
 * NET_GATEWAY_IP/NET_PREFIX_LEN, up) and returns an fd on it; the thread is back in
 * home_fd's namespace afterwards, success or not. -1 with err on failure. */
int net_ns_create(int home_fd, char *err, size_t errlen);

/* Bind-mounts the namespace nsfd at path (a new file). Returns 0 or -1 with err. */
int net_ns_mount(int nsfd, const char *path, char *err, size_t errlen);

/* Opens the namespace mounted at path: the fd, or -1 (errno ENOENT: nothing there;
 * EINVAL: a file that is not a namespace mount, e.g. left by a crash mid-mount). */
int net_ns_open(const char *path);

/* Unmounts and removes path; a missing path is fine. */
void net_ns_unmount(const char *path);

/* Opens a new fd on the namespace's tap (the flags QEMU's `-netdev tap,fd=` expects).
 * Returns the fd (close-on-exec; QEMU gets it through the VM runtime's fd passing) or
 * -1 with err. */
int net_ns_tap_open(int home_fd, int nsfd, char *err, size_t errlen);

/* ---- net_policy.c ------------------------------------------------------------------ */

/* Validates credential rules [{"host","header","secret"}...] and returns them
 * canonical (host lower case; new reference), or NULL with a 400 in err. */
json_t *net_creds_check(const json_t *rules, struct spaced_err *err);
/* Checked rules without their secrets, [{"host","header"}] (what the API may show), or
 * for_gateway as the gateway's `creds` request takes them, [{"host","header","value"}]
 * (the secret travels as "value"). New reference. */
json_t *net_creds_view(const json_t *creds, bool for_gateway);

/* ---- net_file.c: what names the module's files, and their durable writes ---------- */

/* An id that may name a file or mount: [A-Za-z0-9_-]{1,max}. */
bool net_id_ok(const char *id, size_t max);

/* Writes o to path atomically (temp file, fsync, rename), mode 0600: records hold
 * secrets, and after a power cut a tightened policy must not come back as the older one.
 * Returns 0, or -1 (logged) leaving any previous file in place. */
int net_json_save(const char *path, const json_t *o);

/* ---- net_ctl.c: one request on the gateway's control socket -------------------------- */

/* Sends req (borrowed) and returns the reply object (new reference), or NULL with err
 * when the gateway cannot be reached or answers garbage. A reply with "ok": false is
 * returned as is. */
json_t *net_ctl_call(const char *path, const json_t *req, char *err, size_t errlen);

/* ---- net_gw.c: supervision of space-gateway ----------------------------------------- */

struct net_gw;

/* Starts (or adopts a running) gateway; on every (re)start that answers, calls
 * net_gateway_resync(n). Returns NULL with err on allocation/argument failure only
 * (a gateway that fails to start is retried with backoff). */
struct net_gw *net_gw_new(struct net *n, struct event_base *base, const char *bin,
                          const char *dir, const char *ctl, const char *const *extra,
                          char *err, size_t errlen);
/* Stops supervising; the gateway keeps running for the next spaced. */
void net_gw_free(struct net_gw *g);
bool net_gw_up(const struct net_gw *g);
/* Stops the gateway (SIGTERM, SIGKILL after 5 s) and waits for it. Touches no event:
 * safe after the event base is gone (exit handlers). */
void net_gw_stop(struct net_gw *g);

/* ---- net.c --------------------------------------------------------------------------- */

/* After net_on_gateway_up's function, attaches every record that has a namespace, with
 * policy and credentials. */
void net_gateway_resync(struct net *n);

#endif
