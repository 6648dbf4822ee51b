/* sbx: sandboxes — the state machine, the live table, and the actions that move a
 * sandbox's VM between states (driven only by the ops engine, op.h).
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
#define SBX_ALLOW_MAX 256        /* network allowlist entries */
#define SBX_ID_LEN 18            /* "sb" + 16 hex */

/* A validated create request. Strings are canonical compact JSON, heap, owned by the
 * spec (sbx_spec_clear frees them). */
struct sbx_spec {
    char template_name[STORE_ID_MAX];
    unsigned vcpus;
    unsigned memory_mib;
    char *env_json;      /* {"K":"v"} */
    char *metadata_json; /* {"k":"v"} */
    char *network_json;  /* {"mode":"none"} | {"mode":"open"} | {"mode":"allowlist","allow":[...]} */
    int64_t timeout_s;   /* 0 = never */
    char on_timeout[16]; /* "suspend" | "delete" */
    bool private_ports;  /* "ports": {"public": false} */
};

/* Parses and validates a create body (len bytes, not NUL-terminated). Unknown fields,
 * wrong types and out-of-range values fail with 400 and a message naming the field.
 * Does not check that the template exists (op_submit_create does). */
int sbx_spec_parse(const char *body, size_t len, struct sbx_spec *out, struct spaced_err *err);
void sbx_spec_clear(struct sbx_spec *s);

/* Validates a sandbox id's shape ("sb" + 16 lowercase hex). */
bool sbx_id_valid(const char *id);

/* Legal-transition check, see the table above. desired/current are the sandbox's states;
 * on success *target is the state the op leads to. 409 naming `current` otherwise. */
int sbx_transition(enum sbx_state desired, enum sbx_state current, enum op_kind kind,
                   enum sbx_state *target, struct spaced_err *err);

/* ---- the live table ------------------------------------------------------------------ */

struct sbx_table *sbx_table_new(struct spaced *sp);
/* Loads every non-deleted sandbox from the store (startup). */
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

/* ---- used by the ops engine only ------------------------------------------------------ */

/* Adds a sandbox created by op_submit_create (record copied) to the table. */
struct sbx *sbx_table_add(struct spaced *sp, const struct store_sbx *rec);
/* Sets desired state in memory (the engine persists it in its transaction). */
void sbx_set_desired(struct sbx *s, enum sbx_state desired);

/* Carries out one op on the sandbox asynchronously, then calls op_finish(). The sandbox
 * moves through the transitional state and persists each state change. */
void sbx_act(struct spaced *sp, struct sbx *s, enum op_kind kind, const char *op_id);

/* Startup: adopts the sandbox's VM if it is still alive, else records what happened.
 * Called by op_engine_recover for each live sandbox before ops are resumed. */
void sbx_recover(struct spaced *sp, struct sbx *s);

/* Reconciler backstop for an idle sandbox with no open op: makes the recorded state
 * agree with the VM (vanished VM -> failed, stuck transitional state -> what the VM is,
 * lost agent connection -> reconnect) and the desired state agree with the state. */
void sbx_reconcile(struct spaced *sp, struct sbx *s);

/* True while an action is in progress on the sandbox (the engine queues behind it). */
bool sbx_busy(const struct sbx *s);

#endif
