/* op: the operation engine, a leaf module (it includes only the store, metrics, spaced.h).
 *
 * Every mutation of a sandbox (and every template build) is an operation: a row in the
 * store moving pending -> running -> succeeded | failed | canceled, every change persisted,
 * terminal states never changing again. The engine knows nothing of sandboxes or
 * templates; the modules that carry ops out register an executor per kind (the Redis
 * ae.h model: this header is the contract, the modules plug into it).
 *
 * Submitting (op_enqueue): "intent first". The caller's entity rows (a sandbox's new
 * desired state, a template row) and the op row are written in ONE store transaction by
 * the caller's write_intent callback, before anything is acted on; the API then answers
 * 202 {"operation": {...}}. Idempotency-Key: op_idem_replay finds the original op of the
 * same tenant + key (422 "idempotency_mismatch" when the body differs); op_enqueue records
 * key and body hash on the new op.
 *
 * Running: ops of one target (a sandbox id, a template name) run strictly in submission
 * order, one at a time; any number of targets run in parallel. An op starts only when it
 * is the oldest open op of its target and its executor's busy(target) says no. The engine
 * marks it running and calls the executor's run(); whoever carries it out ends it with
 * op_finish (now or later, from the loop) and may report op_progress in between.
 *
 * Recovery (op_engine_recover, once at startup): the on_recover hooks run first (the
 * sandbox module adopts the VMs that survived); then every non-terminal op row this
 * daemon owns (the owner predicate, default: all) is queued again. An op that was
 * running is resumed by its executor (its steps are idempotent) unless the executor's
 * resumable() says no, or no executor is registered: then it fails with code
 * "interrupted" and a message saying why.
 *
 * Store outages: the engine keeps every open op's row in memory. A running, progress or
 * terminal write the store refuses is kept there and written again from the tick (with
 * backoff, spaced_retry) until it lands; watchers hear of a change only once it is
 * stored, and a finished op stays its target's oldest open op (the next one waits) until
 * its terminal state is stored. Killed meanwhile: the row still says pending or running,
 * and recovery carries the op out again.
 *
 * Tick: every OP_TICK_MS the on_tick hooks run (the sandbox module fires timeouts and its
 * reconciler from one), then the unsaved rows are written again, then the queue is
 * pumped. op_reconcile_soon asks for a pump soon. */
#ifndef SPACE_OP_H
#define SPACE_OP_H

#include <stdbool.h>
#include <stdint.h>

#include "daemon/spaced.h"
#include "daemon/store/store.h"

struct op_watch;
typedef struct json_t json_t;

#define OP_TICK_MS 1000
#define OP_WAIT_MAX_S 60 /* longest ?wait= accepted by GET /v1/operations/{id} */

enum op_kind {
    OP_CREATE = 0,
    OP_DELETE,
    OP_START,   /* stopped -> running (cold boot on the kept disk) */
    OP_STOP,    /* running|paused|suspended -> stopped (VM shut down, disk kept) */
    OP_PAUSE,   /* running -> paused (vCPUs stopped, memory resident) */
    OP_RESUME,  /* paused -> running */
    OP_SUSPEND, /* running|paused -> suspended (memory + devices written to disk) */
    OP_RESTORE, /* suspended -> running */
    OP_WAKE,    /* any of paused|suspended|stopped|running -> running, by the right path */
    OP_TEMPLATE_BUILD,
    OP_FORK,    /* a running sandbox captured once, then N new sandboxes restored from it */
    OP_SNAPSHOT, /* a running sandbox captured into a persistent snapshot (sbx_snap.c) */
    OP_KIND_COUNT
};

enum op_state { OP_PENDING = 0, OP_RUNNING, OP_SUCCEEDED, OP_FAILED, OP_CANCELED, OP_STATE_COUNT };

const char *op_kind_name(enum op_kind k);        /* "create", "template_build", ... */
int op_kind_parse(const char *s);                /* -1 if unknown */
const char *op_state_name(enum op_state s);      /* "pending", ... */
int op_state_parse(const char *s);               /* -1 if unknown */
bool op_state_terminal(enum op_state s);

/* ---- engine lifetime and registration (main.c, then each module's *_ops_register) ---- */

struct op_engine *op_engine_new(struct spaced *sp);
void op_engine_free(struct op_engine *e);

/* What carries out the ops of one kind. Every callback gets the registration's arg. */
struct op_executor {
    /* Carries out op (already persisted as running); must end it with op_finish, now
     * or later. Required. */
    void (*run)(struct spaced *sp, const struct store_op *op, void *arg);
    /* True while target cannot start a new op (an action of its own is still in
     * progress): the engine leaves the op pending and asks again on the next pump.
     * NULL = never busy. */
    bool (*busy)(struct spaced *sp, const char *target, void *arg);
    /* Recovery: whether an op found open after a restart can be carried out again. If
     * false the engine fails it with "interrupted"; the executor cleans up its own rows
     * here. NULL = always resumable. */
    bool (*resumable)(struct spaced *sp, const struct store_op *op, void *arg);
};

/* Registers ex (kept by pointer) for kind; a later registration replaces it. An op of a
 * kind with no executor fails: "internal" when run, "interrupted" on recovery. */
void op_register(struct op_engine *e, enum op_kind kind, const struct op_executor *ex, void *arg);

typedef void (*op_hook_fn)(struct spaced *sp, void *arg);
#define OP_HOOKS_MAX 4
/* on_recover: run once by op_engine_recover before any op is resumed. on_tick: run
 * every OP_TICK_MS before the pump. Return 0, or -1 when OP_HOOKS_MAX are taken. */
int op_on_recover(struct op_engine *e, op_hook_fn fn, void *arg);
int op_on_tick(struct op_engine *e, op_hook_fn fn, void *arg);

/* on_change: run from the loop with the row after every stored change of any op (its
 * enqueue as pending, running, progress, its end, a cancel by a superseding op), after
 * the op's own watchers: for followers of all ops (the /v1/events stream, registered
 * from main.c's route registration). fn must not finish or enqueue ops. Returns 0, or
 * -1 when OP_HOOKS_MAX are taken. */
typedef void (*op_change_fn)(struct spaced *sp, const struct store_op *op, void *arg);
int op_on_change(struct op_engine *e, op_change_fn fn, void *arg);

/* Which open ops this daemon resumes after a restart (a cluster node owns only its own
 * sandboxes'). NULL (the default) = all. */
typedef bool (*op_owner_fn)(struct spaced *sp, const struct store_op *op);
void op_set_owner(struct op_engine *e, op_owner_fn owns);

/* Startup recovery, see above. Call once after the modules registered and loaded. */
void op_engine_recover(struct spaced *sp);

/* ---- submitting --------------------------------------------------------------------- */

/* Idempotency-Key (may be NULL or empty: returns 0). Returns 1 with *out = the original
 * op of tenant + idem_key when its body hash equals body_hash (a replay: nothing new is
 * written); 0 when the key is new; -1 + err: 400 "invalid_request" for a key longer than
 * the store holds, 422 "idempotency_mismatch" when the key was used with another body,
 * 503 when the store fails. */
int op_idem_replay(struct spaced *sp, const char *tenant, const char *idem_key,
                   const char *body_hash, struct store_op *out, struct spaced_err *err);

/* Writes the caller's entity rows inside the op's transaction (op is the new row, not
 * yet written). Returns 0, or -1 with err filled (err->status 0: a store failure). */
typedef int (*op_intent_fn)(struct spaced *sp, const struct store_op *op, void *arg,
                            struct spaced_err *err);

struct op_intent {
    op_intent_fn write;   /* may be NULL: only the op row is written */
    void *arg;
    const char *idem_key;  /* recorded on the op (check with op_idem_replay first) */
    const char *body_hash;
    bool supersede;        /* cancel target's pending ops in the same transaction
                              ("superseded by <kind> operation <id>"), e.g. a delete */
};

/* Records a new op of `kind` on `target` for `tenant`: begins a store transaction,
 * calls in->write, writes the op row, commits (anything failing rolls all back), then
 * queues the op. Returns 0 with *out filled (pending), or -1 + err (503
 * "store_unavailable" for store failures). */
int op_enqueue(struct spaced *sp, const char *tenant, enum op_kind kind, const char *target,
               const struct op_intent *in, struct store_op *out, struct spaced_err *err);

/* True while target has an op that is not terminal yet (pending or running). */
bool op_target_open(struct spaced *sp, const char *target);

/* ---- carrying out and following ----------------------------------------------------- */

/* Progress of a running op (template builds, long creates): persisted and broadcast. */
void op_progress(struct spaced *sp, const char *op_id, int percent, const char *detail);

/* Finishes a running op (called by its executor). code/msg are NULL on success; code
 * "canceled" makes the op canceled rather than failed. No effect on a terminal op (also
 * one whose terminal state is not stored yet). */
void op_finish(struct spaced *sp, const char *op_id, bool ok, const char *code,
               const char *msg);

/* op_finish with the caller's rows in the op's transaction (in->write, which gets the
 * terminal op row; in's other fields are not used): one durable commit instead of two,
 * and the watchers hear of the outcome only once both are stored. Returns 0 when both
 * were committed; -1 when in's rows were not written (the store failed or is in its
 * backoff, or the op is unknown or already terminal): the op is then finished as by
 * op_finish and the caller writes its rows itself. */
int op_finish_with(struct spaced *sp, const char *op_id, bool ok, const char *code,
                   const char *msg, const struct op_intent *in);

/* Follows an op: fn runs on every persisted change (state, progress) with the new row,
 * from the loop. The watch ends by op_unwatch, which is safe inside fn. If the op is
 * already terminal, fn runs once from the loop (never inside op_watch). NULL if the op
 * does not exist. */
typedef void (*op_watch_fn)(const struct store_op *op, void *arg);
struct op_watch *op_watch(struct spaced *sp, const char *op_id, op_watch_fn fn, void *arg);
void op_unwatch(struct spaced *sp, struct op_watch *w);

/* API representation: {"id","kind","state","sandbox_id"|"template","progress","detail",
 * "error":{"code","message"}|null,"created_at","started_at","finished_at"}.
 * New reference. */
json_t *op_to_json(const struct store_op *op);

/* Asks for a pass over the queue soon (from the loop): an executor's target became idle.
 * (The name predates the split: the reconciler itself is the sandbox module's tick.) */
void op_reconcile_soon(struct spaced *sp);

#endif
