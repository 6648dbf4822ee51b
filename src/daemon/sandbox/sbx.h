/* sbx: sandboxes — the state machine, the live table, and the actions that move a
 * sandbox's VM between states (driven only by the ops engine, op.h).
 *
 * With the engine (sbx_submit.c, sbx_exec.c): sandbox verbs are submitted here
 * (sbx_submit_create, sbx_submit), which write the sandbox row in the op's transaction.
 * sbx_ops_register (main.c, once) registers with the engine: the executor of every
 * sandbox kind (create ... wake: run = sbx_act, busy = sbx_busy), an on_recover hook
 * (sbx_recover for every sandbox: adopt the VMs that survived, before ops resume) and an
 * on_tick hook (sandbox timeouts; sbx_reconcile every SBX_RECONCILE_PERIOD_MS).
 *
 * States (names are what the API and the store show):
 *   creating   create op accepted, disk/VM being prepared
 *   starting   start/wake from stopped: cold boot on the kept disk
 *   running    VM running, agent connected (sbx_agent() != NULL)
 *   pausing / paused / resuming      vCPUs stopped, memory resident
 *   suspending / suspended / restoring   memory + device state on disk, no QEMU
 *   stopping / stopped                VM shut down, disk kept
 *   deleting / deleted                everything removed (deleted rows are hidden)
 *   failed     the VM died or an action failed; `failure` says why. Legal: delete,
 *              start (cold boot on the kept disk), wake.
 *
 * Legal requests, checked against the sandbox's DESIRED state (where it is heading once
 * queued ops finish), anything else is 409 "invalid_state" naming the current state:
 *   running:   stop, pause, suspend, delete, wake (no-op)
 *   paused:    resume, wake, stop, suspend, delete
 *   suspended: restore, wake, stop (discards memory), delete
 *   stopped:   start, wake, delete
 *   failed:    start, wake, delete
 *   deleted:   nothing (404)
 *
 * Files: sbx_table.c (table, record, state changes), sbx_act.c (the VM actions),
 * sbx_submit.c / sbx_exec.c (the op engine's side), sbx_chain.c (the disk chain file,
 * backing.json, and what it tells the template module), sbx_pool.c (warm pools),
 * sbx_spec.c, sbx_state.c, sbx_traffic.c, sbx_resv.c (on a cluster node: capacity
 * reserved before a VM comes back), sbx_parts.c / sbx_travel.c / sbx_move.c (on a
 * cluster node: snapshots and suspended sandboxes whose files travel between nodes),
 * sbx_runtime.c (a saved state restores only under the VM runtime that saved it).
 * Prefix sbx_.
 *
 * Layering: below cluster/ and above template/, net/, jail/, vm/. It knows no role
 * (main.c calls sbx_set_owner with cluster/'s answers) and tells the modules below what
 * they must know of sandboxes through callbacks main.c registers (sbx_known for net/,
 * sbx_template_users for template/) or calls (tpl_user_gone when a sandbox is deleted).
 *
 * Ownership: struct sbx objects belong to the table (sp->sbx); a pointer from sbx_find
 * is valid until the next return to the event loop. Keep the id, not the pointer,
 * across callbacks. */
#ifndef SPACE_SBX_H
#define SPACE_SBX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon/ops/op.h"
#include "daemon/spaced.h"
#include "daemon/store/store.h"
#include "daemon/template/tpl.h"

struct sbx;
struct agentc;
typedef struct json_t json_t;

enum sbx_state {
    SBX_CREATING = 0,
    SBX_STARTING,
    SBX_RUNNING,
    SBX_PAUSING,
    SBX_PAUSED,
    SBX_RESUMING,
    SBX_SUSPENDING,
    SBX_SUSPENDED,
    SBX_RESTORING,
    SBX_STOPPING,
    SBX_STOPPED,
    SBX_DELETING,
    SBX_DELETED,
    SBX_FAILED,
    SBX_STATE_COUNT
};

const char *sbx_state_name(enum sbx_state s);
int sbx_state_parse(const char *s); /* -1 if unknown */

/* Limits and defaults of a create request. */
#define SBX_VCPUS_DEFAULT 1
#define SBX_VCPUS_MAX 16
#define SBX_MEM_DEFAULT_MIB 256
#define SBX_MEM_MIN_MIB 128
#define SBX_MEM_MAX_MIB 65536
#define SBX_TIMEOUT_DEFAULT_S 3600
#define SBX_TIMEOUT_MAX_S (30LL * 24 * 3600)
#define SBX_ENV_MAX 256          /* variables */
#define SBX_ENV_VALUE_MAX 32768  /* bytes per value */
#define SBX_META_MAX 64          /* metadata pairs */
#define SBX_META_KEY_MAX 64
#define SBX_META_VALUE_MAX 1024
#define SBX_ID_LEN 18            /* "sb" + 16 hex */

/* A validated create request. Strings are canonical compact JSON, heap, owned by the
 * spec (sbx_spec_clear frees them). */
struct sbx_spec {
    char template_name[STORE_ID_MAX];
    unsigned vcpus;      /* 0: not given, the template's (sbx_spec_shape) */
    unsigned memory_mib; /* 0: not given, the template's */
    char *env_json;      /* {"K":"v"} */
    char *metadata_json; /* {"k":"v"} */
    char *network_json;  /* {"mode":"none"} | {"mode":"open"} | {"mode":"allowlist","allow":[...]} */
    int64_t timeout_s;   /* 0 = never */
    char on_timeout[16]; /* "suspend" | "delete" */
    bool private_ports;  /* "ports": {"public": false} */
    bool auto_resume;    /* "auto_resume": true (sbx_wake.c) */
    char *volumes_json;  /* [{"name","path"}] checked in shape (sbx_vol.c), NULL = none;
                            that the volumes exist is sbx_submit_create's check */
};

/* Parses and validates a create body (len bytes, not NUL-terminated). Unknown fields,
 * wrong types and out-of-range values fail with 400 and a message naming the field.
 * Does not check that the template exists (sbx_submit_create does). */
int sbx_spec_parse(const char *body, size_t len, struct sbx_spec *out, struct spaced_err *err);
void sbx_spec_clear(struct sbx_spec *s);

/* ---- sbx_network.c: a sandbox's egress policy, live ----------------------------------- */
struct net;
/* Changes s's egress policy live (PUT /v1/sandboxes/{id}/network, E2B's network update):
 * checked, recorded, given to the gateway, which closes connections it now forbids.
 * Returns 0, or -1 with err (400 bad policy, 409 a sandbox without a NIC, 503 no
 * networking). */
int sbx_network_set(struct spaced *sp, struct sbx *s, const json_t *policy,
                    struct spaced_err *err);
/* Makes sure net holds a record for s (from the create request's policy). 0 or -1. */
int sbx_network_record(struct net *net, const struct sbx *s, struct spaced_err *err);
/* Sets s's credential rules ([{"host","header","secret"}...], checked) in net, making
 * its record first: the body of PUT .../credentials, and how a node a sandbox moved to
 * installs the rules that came with it (sbx_move.c). 0 or -1 with err. */
int sbx_network_creds(struct net *net, const struct sbx *s, const json_t *rules, struct spaced_err *err);
/* PUT /v1/sandboxes/{id}/credentials: on a cluster node a move record of s is dropped
 * first and made again after (it carries the rules, sbx_move.c), then sbx_network_creds.
 * 0 or -1 with err (409 sandbox_moving, 503, and sbx_network_creds's). */
int sbx_network_creds_put(struct net *net, struct sbx *s, const json_t *rules, struct spaced_err *err);
/* s's policy as given at create (new reference; {"mode":"none"} if none is usable). */
json_t *sbx_network_created(const struct sbx *s);
/* The size of a sandbox made from spec: what the client asked, else what template t's
 * template.json says (a template built for pandas wants more than 256 MiB), else
 * SBX_VCPUS_DEFAULT / SBX_MEM_DEFAULT_MIB; a template's value is kept within the
 * bounds a client may ask. t may be NULL (no template known: defaults). */
void sbx_spec_shape(const struct sbx_spec *spec, const struct tpl_info *t, unsigned *vcpus,
                    unsigned *memory_mib);

/* ---- sbx_vol.c: volumes mounted into sandboxes ---------------------------------------- */
/* The create field "volumes" ([{"name","path"}], at most VOLM_MOUNTS_MAX, names of the
 * volume rule, paths acceptable to volm_path_problem and distinct; absent or [] = none):
 * *out = compact JSON or NULL for none. 0, or -1 with a 400 naming what is wrong. */
int sbx_vol_spec(json_t *v, char **out, struct spaced_err *err);
/* Every volume of volumes_json exists and is the tenant's: 0, or -1 with 404. */
int sbx_vol_check(struct spaced *sp, const char *tenant, const char *volumes_json,
                  struct spaced_err *err);
/* The spaced vol_user hook (main.c registers it): a sandbox of tenant, not deleted,
 * whose record mounts volume `name`. */
bool sbx_vol_user(struct spaced *sp, const char *tenant, const char *name, char *id,
                  size_t idlen);

/* Validates a sandbox id's shape ("sb" + 16 lowercase hex). */
bool sbx_id_valid(const char *id);

/* Legal-transition check, see the table above. desired/current are the sandbox's states;
 * on success *target is the state the op leads to. 409 naming `current` otherwise. */
int sbx_transition(enum sbx_state desired, enum sbx_state current, enum op_kind kind,
                   enum sbx_state *target, struct spaced_err *err);

/* ---- the live table ------------------------------------------------------------------ */

struct sbx_table *sbx_table_new(struct spaced *sp);
/* Which sandboxes are this process's, set by main.c from cluster/ (the sandbox module
 * knows no role: cluster/ sits above it and includes it). owns: whether to load and
 * reconcile a stored row (NULL: every row); node_id: the node stamped on the sandboxes
 * this process creates (NULL: "", a single host). Call before sbx_table_load; the
 * string must live as long as the table. */
typedef bool (*sbx_owner_fn)(const struct spaced *sp, const struct store_sbx *rec);
void sbx_set_owner(struct spaced *sp, sbx_owner_fn owns, const char *node_id);
/* Loads every non-deleted sandbox this process owns from the store (startup). */
int sbx_table_load(struct spaced *sp);
/* Detaches (never kills) every VM, so a restarted spaced adopts them; frees the table. */
void sbx_table_free(struct sbx_table *t);

/* Sandbox `id` of `tenant`, or NULL when absent, deleted, or owned by another tenant
 * (the caller then answers 404 either way, so existence never leaks across tenants).
 * tenant NULL = any tenant (internal use only). */
struct sbx *sbx_find(struct spaced *sp, const char *tenant, const char *id);

const char *sbx_id(const struct sbx *s);
const char *sbx_tenant(const struct sbx *s);
enum sbx_state sbx_state(const struct sbx *s);
enum sbx_state sbx_desired(const struct sbx *s);
/* The persisted record (read-only view; valid like the sbx pointer). */
const struct store_sbx *sbx_record(const struct sbx *s);

/* Live agent connection, or NULL unless the sandbox is running with its agent connected.
 * Owned by the sandbox; do not keep it across loop iterations (it is replaced after
 * pause/suspend/restore and freed when the VM goes away). */
struct agentc *sbx_agent(struct sbx *s);

/* Whether the network record of sandbox `id` is this node's to keep: it is in the table
 * and not deleted (any tenant), or it moved away with credential rules whose files are
 * still here (sbx_move.c: the record goes with them); arg = sp. The `known` of
 * net_spaced_new (main.c passes it: net/ knows no sandbox table). */
bool sbx_known(const char *id, void *sp);

/* The sandboxes' use of templates (sbx_chain.c), the tpl_users_fn main.c registers with
 * tpl_set_users: use() once per sandbox that is not deleted, with its template and the
 * layers of its disk chain, and once per fork or snapshot capture (sbx_fork.c), whose
 * chain stands on its sandbox's template layers. The template module never reads
 * sandbox files. */
void sbx_template_users(struct spaced *sp, tpl_use_fn use, void *arg);

/* Calls fn for every sandbox in the table (any tenant). fn must not delete sandboxes. */
void sbx_each(struct spaced *sp, void (*fn)(struct sbx *s, void *arg), void *arg);

/* State-change listeners (sessions end when their sandbox stops, E2B, metrics). Called
 * from the loop after the change is persisted. At most SBX_LISTENERS_MAX. */
#define SBX_LISTENERS_MAX 8
typedef void (*sbx_state_fn)(struct spaced *sp, struct sbx *s, enum sbx_state old,
                             enum sbx_state now, void *arg);
int sbx_listen(struct spaced *sp, sbx_state_fn fn, void *arg);

/* Sets a new timeout (seconds from now; 0 = never) and on_timeout policy (NULL = keep).
 * Persisted immediately; synchronous (no op). */
int sbx_set_timeout(struct spaced *sp, struct sbx *s, int64_t timeout_s,
                    const char *on_timeout, struct spaced_err *err);

/* Ends the sandbox's time now: submits its on_timeout action (suspend or delete) as an
 * expired timeout would (E2B's setTimeout(0)). 0, or -1 with err (409 when another
 * operation makes it illegal). */
int sbx_expire_now(struct spaced *sp, struct sbx *s, struct spaced_err *err);

/* Records a new network policy (canonical JSON, see net_policy_check; NULL = none given)
 * in the sandbox's store record, so the sandbox's representation and its next start use it. Persisted
 * immediately (the old value is kept if that fails: 500). The caller then tells net. */
int sbx_set_network(struct sbx *s, const json_t *policy, struct spaced_err *err);

/* API representation: {"id","template","state","desired_state","vcpus","memory_mib",
 * "env","metadata","network","ports","timeout","on_timeout","expires_at","failure",
 * "created_at","updated_at"}; "ports" is {"public": bool}, and sbx_to_json (answers to
 * the sandbox's own tenant) adds "traffic_access_token" when not public. New reference. */
json_t *sbx_to_json(const struct sbx *s);
json_t *sbx_record_to_json(const struct store_sbx *r);

/* Private ports (sbx_traffic.c). sbx_traffic_token writes the sandbox's traffic token to
 * out[cap] (AUTH_TOKEN_MAX) and returns 1, or returns 0 for public ports, -1 on error.
 * sbx_traffic_allowed: whether a port request presenting `presented` (the
 * e2b-traffic-access-token header, may be NULL) may reach the sandbox; always true for
 * public ports, constant-time comparison otherwise. */
int sbx_traffic_token(const struct sbx *s, char *out, size_t cap);
bool sbx_traffic_allowed(const struct sbx *s, const char *presented);

/* ---- suspended sandboxes that move between nodes (sbx_move.c) ------------------------ */

/* GET /internal/sandboxes/{id}/parts/{part} (node token only; 404 to anyone else and for
 * any sandbox or part that is not a suspended or stopped sandbox's recorded part held by
 * this node): streams the file. */
struct http_req;
void sbx_move_serve(struct spaced *sp, struct http_req *req, const char *id, const char *part);
/* On a cluster node, a request names sandbox id, which is not in the table: loads its
 * row when it names this node (moved here by a control). The sandbox, or NULL. */
struct sbx *sbx_move_adopt(struct spaced *sp, const char *id);

/* ---- auto-resume (sbx_wake.c) ---------------------------------------------------------- */

/* How long a call waits for an auto-resume: longer than a restore's agent deadline. */
#define SBX_WAKE_WAIT_S 150

/* The end of a wait, run once from the loop (never inside sbx_wake_wait): ok when the
 * sandbox is running with its agent connected (look it up again by id: the pointer the
 * wait began with may be gone), else err says why (409 not_running when the wake failed
 * or the sandbox was stopped/deleted/paused again meanwhile, 503 resume_timeout after
 * SBX_WAKE_WAIT_S or at shutdown). */
typedef void (*sbx_wake_fn)(struct spaced *sp, bool ok, const struct spaced_err *err, void *arg);
struct sbx_waiter;

/* The shared "wait until running" path of every call that needs the sandbox's agent and
 * found none (the API's routes_require_agent, E2B's envd and port routes). When s has
 * auto-resume and is paused, suspended, or on its way to running, returns a waiter: a
 * wake op is submitted unless one is queued already (concurrent calls share it) and
 * fn(arg) runs once later. NULL with err->status 0: s does not auto-resume, or is in no
 * state a wake helps (the caller answers as without auto-resume); NULL with err set:
 * the wake could not be submitted. */
struct sbx_waiter *sbx_wake_wait(struct spaced *sp, struct sbx *s, sbx_wake_fn fn, void *arg,
                                 struct spaced_err *err);
/* Drops a waiter whose caller went away (fn will not run). NULL is accepted. */
void sbx_wake_cancel(struct spaced *sp, struct sbx_waiter *w);

/* The same for an HTTP request (sbx_park.c). Returns false with nothing done when s does
 * not auto-resume or no wake helps (the caller answers as before); true when the request
 * is taken: ready(req, arg) runs once the sandbox is running with its agent (look it up
 * again), fail(req, err, arg) must answer when it will not be (already called when the
 * wake could not even be submitted); neither runs if the client goes away first. */
struct http_req;
typedef void (*sbx_ready_fn)(struct http_req *req, void *arg);
typedef void (*sbx_fail_fn)(struct http_req *req, const struct spaced_err *err, void *arg);
bool sbx_park_request(struct spaced *sp, struct http_req *req, struct sbx *s, sbx_ready_fn ready,
                      sbx_fail_fn fail, void *arg);

/* ---- operations (sbx_submit.c, sbx_exec.c) -------------------------------------------- */

#define SBX_RECONCILE_PERIOD_MS 5000

/* Creates a sandbox: validates spec against templates/limits (404 unknown template, 403
 * quota_exceeded), writes the sandbox row (desired running, state creating) + a create op
 * in one transaction, schedules it. idem_key (may be NULL) and body_hash (hex SHA-256 of
 * the request body) implement Idempotency-Key (op_idem_replay: 1 = replay, nothing new
 * written; 422 "idempotency_mismatch").
 * Returns 0 (new) or 1 (replay) with *out filled (out->target = sandbox id), -1 + err. */
int sbx_submit_create(struct spaced *sp, const char *tenant, const struct sbx_spec *spec,
                      const char *idem_key, const char *body_hash, struct store_op *out,
                      struct spaced_err *err);

/* Forks running sandbox parent_id of `tenant` into `count` new sandboxes (sbx_fork.c):
 * writes their rows (state creating, quota checked for all of them) and an OP_FORK op on
 * the parent in one transaction; ids[0..count-1] receive the forks' ids. 400 for a
 * count outside 1..SBX_FORK_MAX, 404 unknown parent, 409 "invalid_state" unless it is
 * running, 403 quota_exceeded. A parent already on VM_DISK_BACKING_MAX disk layers is
 * forked too: the capture's disk is flattened (sbx_fork.c). Returns 0 with *out filled. */
#define SBX_FORK_MAX 16
int sbx_submit_fork(struct spaced *sp, const char *tenant, const char *parent_id,
                    unsigned count, struct store_op *out, char ids[][STORE_ID_MAX],
                    struct spaced_err *err);

/* Snapshots (sbx_snap.c). sbx_submit_snapshot: a snapshot of running sandbox_id of
 * `tenant` named `name` (NULL or "": none; the caller validated it): the row (state
 * creating, quota: one snapshot) and an OP_SNAPSHOT op on the sandbox in one
 * transaction; *snap is the row. 404 unknown sandbox, 409 as sbx_submit_fork, 409
 * "conflict" for a name the tenant uses already. */
int sbx_submit_snapshot(struct spaced *sp, const char *tenant, const char *sandbox_id,
                        const char *name, struct store_op *out, struct store_snap *snap,
                        struct spaced_err *err);
/* API representation: {"id","name","tenant","source_sandbox","template","vcpus",
 * "memory_mib","state","size_bytes","created_at"}. New reference. */
/* Node API: GET /internal/snapshots/{id}/parts/{part}, another node fetching a part of a
 * snapshot this node holds (sbx_travel.c): 404 to anyone without the node token, and for
 * any id, part or row that is not this node's ready snapshot's. */
struct http_req;
void sbx_travel_serve(struct spaced *sp, struct http_req *req, const char *id, const char *part);
json_t *sbx_snap_to_json(const struct store_snap *r);
/* Deletes the tenant's snapshot (id or name): 404 unknown, 409 while being taken. Its
 * files go once no sandbox stands on them. */
int sbx_snap_delete(struct spaced *sp, const char *tenant, const char *id_or_name,
                    struct spaced_err *err);
/* A create whose template is no template: the tenant's snapshot with that id or name,
 * ready and taken with (nic) or without a network device like the create asks. 1 with
 * *out, 0 when there is none, -1 with err (409 not ready, 400 network mismatch, 409
 * snapshot_incompatible: saved by another VM runtime than this node's, 503). */
int sbx_snap_for_create(struct spaced *sp, const char *tenant, const char *id_or_name,
                        bool nic, struct store_snap *out, struct spaced_err *err);

/* The VM runtime recorded in a parts record (a snapshots or sandboxes row's `parts`,
 * sbx_parts.c; vm/vm_sig.h) into out[cap]: "" when it names none or is unreadable. For
 * placement (cluster/), which moves a saved state only to a node of that runtime. */
void sbx_parts_runtime(const char *parts, char *out, size_t cap);

/* Any other verb on an existing sandbox of `tenant`. Checks the transition against the
 * sandbox's desired state (409 "invalid_state" naming the current state if illegal,
 * 404 "not_found" for unknown or other tenants' sandboxes), records intent, schedules.
 * A restore or wake of a suspended sandbox whose saved state another VM runtime wrote
 * (vm/vm_sig.h) is refused with 409 "snapshot_incompatible" before its op exists: the
 * sandbox stays suspended, restorable where (or once) that runtime runs.
 * A delete cancels the sandbox's still-pending ops. Returns 0 with *out filled. */
int sbx_submit(struct spaced *sp, const char *tenant, enum op_kind kind,
               const char *sandbox_id, struct store_op *out, struct spaced_err *err);

/* Registers the sandbox executor and hooks with sp->ops (see the top). 0 or -1. */
int sbx_ops_register(struct spaced *sp);

#endif
