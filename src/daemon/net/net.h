/* net: sandbox networking inside spaced — namespaces, taps, policies, credentials, and
 * the supervision of space-gateway (DESIGN.md section 7).
 *
 * Every sandbox with a NIC gets its own network namespace, bind-mounted at
 * <netns_dir>/<prefix><sandbox id> (e.g. /run/netns/space-sb0123...), holding `lo` and
 * a persistent tap NET_TAP with the gateway address NET_GATEWAY_IP/NET_PREFIX_LEN on it.
 * IPv6 is off there. There is no other interface and no route: the only things that
 * answer are the gateway's sockets, which space-gateway opens inside the namespace when
 * spaced sends it `attach` (gw_ctl.h); the gateway also installs the nftables rules
 * (source MAC/IP validation, redirects, drops). All sandboxes share one guest identity
 * (NET_GUEST_IP, NET_GUEST_MAC): namespaces keep them apart, and a template snapshot
 * taken with networking configured is valid for every clone.
 *
 * Namespaces are created ahead of time (a pool of `pool` ready namespaces, refilled from
 * the event loop), so a claim is a bind mount, a tap open and one control request. The
 * namespaces are made with syscalls only (unshare/setns on the loop thread, rtnetlink),
 * never by forking `ip`. Pool namespaces are held as open fds and vanish with spaced;
 * claimed ones are mounted under the sandbox's name and outlive spaced restarts.
 *
 * State: spaced is the source of truth, the gateway's state is derived. Each sandbox's
 * policy and credential rules are kept in <data_dir>/net/<id>.json (0600; secrets live
 * only there, in the gateway's memory and, for a sandbox that may move to another node,
 * in its move record's `creds` file (net_creds_save); never in the VM and never in an
 * API reply),
 * written before the gateway is told. After spaced or the gateway restarts, every
 * record with a namespace is attached again with its policy and credentials, in the
 * background on the event loop, one request in flight at a time (net_resync.c): with
 * many sandboxes the resync takes many gateway round trips (each attach runs `nft`), and
 * the loop must keep serving meanwhile.
 *
 * Policy `none` means no NIC: claim returns tap_fd -1 and creates no namespace. A live
 * change from `none` to a mode with traffic would need a NIC and is refused (409); the
 * other way the NIC stays and the gateway refuses everything.
 *
 * All calls run on the event loop thread (they switch that thread's namespace briefly
 * and talk to the gateway synchronously over a local socket: an attach is one `nft` run
 * in the gateway, 20-200 ms). A call made while the resync has a request in flight first
 * waits for that one (so the gateway sees the call's request after it, and a resync never
 * undoes a newer change).
 *
 * Layering: below sandbox/ and template/, which claim and release namespaces by id; net/
 * knows neither (which ids are alive is passed in: net_spaced_new). Prefix net_. */
#ifndef SPACE_NET_H
#define SPACE_NET_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon/spaced.h"

struct event_base;
struct net;

#define NET_TAP "tap0"
#define NET_GUEST_IP "10.0.2.15"
#define NET_GATEWAY_IP "10.0.2.2"
#define NET_PREFIX_LEN 24
#define NET_GUEST_MAC "02:5b:00:00:00:01"
#define NET_GATEWAY_MAC "02:5b:00:00:00:02" /* the tap's own, same in every namespace */
#define NET_NETNS_DIR "/run/netns"
#define NET_NS_PREFIX "space-"
#define NET_POOL_DEFAULT 2
#define NET_ALLOW_MAX 512     /* allow rules per policy (the gateway's limit) */
#define NET_CREDS_MAX 64      /* credential rules per sandbox */
#define NET_SECRET_MAX 8192   /* bytes of one secret */

struct net_opts {
    const char *data_dir;    /* records in <data_dir>/net/; required */
    const char *netns_dir;   /* NULL = NET_NETNS_DIR */
    const char *ns_prefix;   /* NULL = NET_NS_PREFIX; tests use their own */
    unsigned pool;           /* namespaces kept ready (0 = make one per claim) */
    const char *gateway_bin; /* space-gateway to start and supervise; NULL = do not start
                                one (an external gateway at gateway_ctl, or none) */
    const char *gateway_ctl; /* control socket; NULL = <data_dir>/gateway/gateway.sock */
    const char *const *gateway_args; /* extra arguments for the gateway, NULL-terminated
                                        (--upstream-dns, --trust...); may be NULL */
};

/* What a claim gives the VM runtime (vm.h struct vm_net). */
struct net_lease {
    int tap_fd;      /* open tap (IFF_TAP|IFF_NO_PI|IFF_VNET_HDR), caller owns it and
                        passes it to QEMU; -1 for policy none */
    char mac[18];    /* NET_GUEST_MAC, "" for policy none */
    char netns[320]; /* path of the namespace, "" for policy none */
};

/* Creates the module: loads the records, prepares the pool, starts (or adopts) the
 * gateway when gateway_bin is set. Strings in o are copied. Returns NULL with err. */
struct net *net_new(struct event_base *base, const struct net_opts *o, char *err, size_t errlen);
/* Frees the module. Namespaces, records and the gateway stay: a later spaced adopts
 * them. Pool namespaces (not yet claimed) are dropped. NULL is accepted. */
void net_free(struct net *n);

/* fn(arg) runs each time a (re)started gateway answers, before the sandboxes' records
 * are sent to it again (spaced: the tenants' credential rules, net_tenants_resend). */
void net_on_gateway_up(struct net *n, void (*fn)(void *arg), void *arg);

/* At process exit: stops the supervised gateway if no sandbox has a NIC (nothing
 * needs it until the next spaced, which starts a new one); otherwise leaves it for the
 * next spaced to adopt. Touches no event (safe after the event base is freed). */
void net_exit(struct net *n);

/* Validates a policy ({"mode":"none|allowlist|open","allow":[rule,...]}; rules are
 * names, "*."-wildcards or IPv4 CIDRs, each with an optional ":port") and returns its
 * canonical form (new reference), or NULL with a 400 in err. */
json_t *net_policy_check(const json_t *policy, struct spaced_err *err);
/* One rule's shape: "name", "*.name" or "a.b.c.d/n", each with an optional ":port"
 * (1..65535); a NUL-terminated string. */
bool net_policy_rule_ok(const char *s);

/* Gives sandbox its network for a VM start (create, start, restore, wake): the
 * namespace (taken from the pool at the first claim, the same one afterwards), a fresh
 * fd on its tap, and the gateway attached with the policy. policy_json is the policy to
 * use the first time (the create request's); once a record exists it wins, since live
 * changes are recorded there. A gateway that does not take the attach fails the claim
 * with 503 gateway_unavailable, whether it is down (restarting), stuck (its control
 * socket times out) or refusing: a VM started without the attach would have nothing
 * answering in its namespace. A caller that can wait for a restart asks net_gateway_up
 * first (the sandbox module waits up to 10 s, sbx_gwwait.c). An attachment the gateway
 * still holds under the id is replaced (the namespace may be new). Returns 0, or -1 with
 * err (nothing claimed; the record and namespace made for a first claim stay for the
 * next attempt, net_release removes them). */
int net_claim(struct net *n, const char *sandbox, const char *tenant, const char *policy_json,
              struct net_lease *out, struct spaced_err *err);

/* A NIC for a VM that has no sandbox (yet): a template VM whose memory snapshot clones
 * will restore (clones with a NIC must find the same device model, and the guest's eth0
 * configured by its agent at boot, in the snapshot), or a warm-pool VM (vm/pool.h)
 * waiting for a claim. A namespace and tap under `owner`'s name (the VM's id), with no
 * gateway and so no traffic; no record. net_release(owner) removes it once the snapshot
 * is taken or the pooled VM is discarded. Returns 0, or -1 with err. */
int net_claim_template(struct net *n, const char *owner, struct net_lease *out,
                       struct spaced_err *err);

/* Hands the NIC of the pooled VM `owner` (net_claim_template) to the sandbox that claimed
 * the VM, as net_claim does for a VM start: the namespace is mounted under the sandbox's
 * name instead of owner's (the VM keeps its tap fd: the tap belongs to the namespace, not
 * to the name), the record is made from policy_json the first time, and the gateway is
 * attached. The guest needs no change: every namespace has the same addresses (see
 * above). Returns 0, or -1 with err (owner's namespace is then still mounted, for
 * net_release(owner)); 409 if the sandbox's recorded policy is `none`. */
int net_claim_from(struct net *n, const char *sandbox, const char *tenant,
                   const char *policy_json, const char *owner, struct spaced_err *err);

/* Sets the policy (validated; recorded, then sent to the gateway, which resets the
 * connections the new policy forbids). A sandbox never claimed gets a record with it
 * (tenant is used then; its NIC follows from the policy), so its first claim uses it.
 * Going from `none` to a mode with traffic on a sandbox without a NIC is 409: a NIC
 * cannot be added to a VM (nor to its snapshots); from a mode with traffic to `none`
 * keeps the NIC and makes the gateway refuse everything. */
int net_set_policy(struct net *n, const char *sandbox, const char *tenant, const json_t *policy,
                   struct spaced_err *err);
/* The recorded policy (new reference) plus "nic": bool, or NULL (404) without a record. */
json_t *net_policy_get(struct net *n, const char *sandbox, struct spaced_err *err);

/* Replaces the credential rules [{"host","header","secret"}...] (validated, 400 on bad
 * input). Secrets are stored and sent to the gateway only. */
int net_set_creds(struct net *n, const char *sandbox, const json_t *rules,
                  struct spaced_err *err);
/* The rules without secrets: [{"host","header"}...] (new reference), or NULL (404). */
json_t *net_creds_get(struct net *n, const char *sandbox, struct spaced_err *err);

/* Writes the sandbox's credential rules with their secrets ([{"host","header","secret"}
 * ...], the form net_set_creds takes) to path (0600, synced, renamed into place), for a
 * suspended or stopped sandbox that may move to another node (sandbox/sbx_move.c: the
 * new node installs them with net_set_creds; never for an API reply). 1 when written, 0
 * when it has none (no record, or no rules: nothing written), -1 on a write failure. */
int net_creds_save(struct net *n, const char *sandbox, const char *path);

/* The gateway's decision log for the sandbox from sequence `since` on
 * ({"entries":[...]}, new reference); 503 when the gateway cannot be reached. */
json_t *net_log(struct net *n, const char *sandbox, int64_t since, struct spaced_err *err);

/* Forgets the sandbox: gateway detach, namespace unmounted (its tap and everything in
 * it disappear with the last user), record removed. Unknown ids are fine (idempotent). */
void net_release(struct net *n, const char *sandbox);

/* Releases every record whose sandbox known() does not recognise (deleted while spaced
 * was down, or between its delete and the release). */
void net_sweep(struct net *n, bool (*known)(const char *sandbox, void *arg), void *arg);

/* True while a gateway answers on the control socket (health, tests, and a VM start
 * deciding to wait): a supervised gateway that died is down from the moment it exits,
 * before its exit event is handled. The resync of the records may still be under way
 * then; a claim does not need it (it attaches its own sandbox). */
bool net_gateway_up(struct net *n);

/* spaced's network module (sp->net, made by main.c with net_spaced_new; freed with
 * net_spaced_free after every module that claims namespaces is gone). The struct net
 * inside is created on first use, net_get, from sp->opt (data_dir; the gateway binary
 * next to spaced's own or sp->opt.gateway from $SPACE_GATEWAY, started if present, with
 * the extra arguments in sp->opt.gateway_args from $SPACE_GATEWAY_ARGS, space-separated);
 * records of sandboxes `known` does not know are swept then, so the first net_get comes
 * after the sandbox table is loaded (routes_network_register makes it). known: which
 * sandbox ids are alive (main.c passes the sandbox table's answer: net/ knows no sandbox
 * table, sandbox/ sits above it); NULL sweeps nothing. net_spaced_new returns NULL when
 * out of memory. */
struct net_spaced;
struct net_spaced *net_spaced_new(bool (*known)(const char *sandbox, void *arg), void *arg);
/* Stops the gateway if no sandbox has a NIC (net_exit), frees the module. NULL is fine. */
void net_spaced_free(struct net_spaced *ns);
/* The module, or NULL (logged once) if it cannot be set up, e.g. without root. */
struct net *net_get(struct spaced *sp);

#endif
