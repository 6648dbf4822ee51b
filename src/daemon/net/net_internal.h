/* net_internal: what the files of the net module share (not for other modules). */
#ifndef SPACE_NET_INTERNAL_H
#define SPACE_NET_INTERNAL_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon/net/net.h"

#define NET_ID_MAX 48 /* sandbox ids: [A-Za-z0-9_-]{1,48} (they name files and mounts) */
#define NET_NS_PATH_MAX 320 /* netns_dir + prefix + id */

/* What spaced knows about one sandbox's network; mirrored in <data_dir>/net/<id>.json. */
struct net_rec {
    char id[NET_ID_MAX + 1];
    char tenant[64];
    json_t *policy;       /* canonical policy (owned) */
    json_t *creds;        /* [{"host","header","secret"}] (owned) */
    bool nic;             /* has a namespace and tap (false only for policy none) */
    uint64_t gen;         /* net_rec_touch: moves with every change the gateway must learn */
    uint64_t claimed_gen; /* gen of the last claim that attached it (0: none) */
    struct net_rec *next;
};

struct net {
    struct event_base *base;
    char rec_dir[PATH_MAX];
    char netns_dir[200];
    char prefix[32];
    char ctl[PATH_MAX + 32];
    int home_fd;            /* spaced's own network namespace */
    int *pool;              /* ready namespace fds (owned) */
    unsigned pool_n, pool_want;
    struct event *refill;   /* fills the pool one namespace per loop turn */
    struct net_rec *recs;   /* owned list, newest first */
    uint64_t gen;           /* the last generation given to a record */
    struct net_gw *gw;      /* NULL when not supervising a gateway */
    struct net_resync *resync; /* owned */
    void (*gateway_up)(void *arg); /* net_on_gateway_up: runs before each resync */
    void *gateway_up_arg;
};

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
 * returned as is. Blocks until the reply (a timeout bounds it). */
json_t *net_ctl_call(const char *path, const json_t *req, char *err, size_t errlen);

/* The same exchange without blocking: connected, sent and read from the event loop.
 * done gets the reply (new reference, the callee's) or NULL and the error; it runs once,
 * from the loop or from net_ctl_async_wait, never from inside net_ctl_async, and the
 * request is freed when it runs. */
struct net_ctl_async;
typedef void (*net_ctl_done_fn)(json_t *reply, const char *err, void *arg);
/* Starts req (borrowed). NULL only when out of memory (done will not run). */
struct net_ctl_async *net_ctl_async(struct event_base *base, const char *path, const json_t *req,
                                    net_ctl_done_fn done, void *arg);
/* Finishes it now, blocking until the reply or the request's timeout; done runs before
 * this returns. */
void net_ctl_async_wait(struct net_ctl_async *c);
/* Drops it unanswered: done never runs. NULL is accepted. */
void net_ctl_async_cancel(struct net_ctl_async *c);

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

/* Starts sending every record that has a namespace to the gateway again (net_resync.c),
 * after net_on_gateway_up's function; called on each (re)start that answers. */
void net_gateway_resync(struct net *n);

struct net_rec *net_rec_find(struct net *n, const char *id);
/* Marks a change of r the gateway must learn (policy, credentials, a claim's attach):
 * a resync sending r meanwhile does it again (net_resync.c). Returns the new gen. */
uint64_t net_rec_touch(struct net *n, struct net_rec *r);
/* Where the sandbox's namespace is mounted (cap >= NET_NS_PATH_MAX). */
void net_rec_ns_path(const struct net *n, const char *id, char *out, size_t cap);

/* The control requests for r (new references): attach on the namespace at nspath with
 * the policy; the policy alone; the credential rules (secrets as "value", the gateway's
 * name for them). */
json_t *net_req_attach(const struct net_rec *r, const char *nspath);
json_t *net_req_policy(const struct net_rec *r);
json_t *net_req_creds(const struct net_rec *r);
/* Sorts out a reply to req (both borrowed; rep NULL: unreachable, with err): true when
 * it says ok; otherwise false with the refusal's code in code ("" when there is none),
 * logged unless the code is "exists" (expected: a claim or resync then replaces or
 * updates the attachment). */
bool net_reply_ok(const json_t *req, const json_t *rep, const char *err, char *code,
                  size_t codelen);

/* ---- net_resync.c: the resync, on the loop ---------------------------------------------- */

struct net_resync;
struct net_resync *net_resync_new(struct net *n);
/* Drops a resync under way (the request in flight unanswered). NULL is accepted. */
void net_resync_free(struct net_resync *rs);
/* Starts one; while one runs, it starts over once its request in flight is answered. */
void net_resync_start(struct net_resync *rs);
/* Before any synchronous request about a sandbox (claim, policy, creds, release): waits
 * for the resync's request in flight, if any, so that the gateway sees it first, and
 * sends nothing more until the loop runs again. Blocks for one request at most. */
void net_resync_settle(struct net_resync *rs);
/* True while a resync is under way (tests). */
bool net_resync_running(const struct net_resync *rs);

#endif
