/* op: lifecycle operations and the reconciler.
 *
 * Every mutation of a sandbox (and every template build) is an operation. Submitting one
 * writes, in ONE store transaction, the sandbox's new desired state and the operation row
 * (state "pending") before anything is acted on ("intent first"); the API then answers
 * 202 {"operation": {...}} with a Location header. The engine runs the operations of one
 * sandbox strictly in submission order (one at a time per sandbox, any number of
 * sandboxes in parallel), moving each op pending -> running -> succeeded | failed |
 * canceled and persisting every change.
 *
 * Recovery: on startup op_engine_recover() walks the store: VMs still alive are adopted,
 * dead ones marked failed (or restarted when their desired state says so), and every
 * non-terminal op is resumed from its recorded intent (create/delete/... are idempotent
 * steps) or failed with code "interrupted" and a message saying why. A reconciler pass
 * (on triggers and every RECONCILE_PERIOD_MS) closes any remaining gap between desired
 * and actual state and fires sandbox timeouts.
 *
 * States: pending -> running -> succeeded | failed; pending -> canceled (superseded by a
 * delete of the same sandbox). Terminal states never change again. */
#ifndef SPACE_OP_H
#define SPACE_OP_H

#include <stdbool.h>
#include <stdint.h>

#include "daemon/spaced.h"
#include "daemon/store/store.h"

struct sbx_spec;
struct op_watch;
typedef struct json_t json_t;

#define OP_RECONCILE_PERIOD_MS 5000
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
    OP_KIND_COUNT
};

enum op_state { OP_PENDING = 0, OP_RUNNING, OP_SUCCEEDED, OP_FAILED, OP_CANCELED, OP_STATE_COUNT };

const char *op_kind_name(enum op_kind k);        /* "create", "template_build", ... */
int op_kind_parse(const char *s);                /* -1 if unknown */
const char *op_state_name(enum op_state s);      /* "pending", ... */
int op_state_parse(const char *s);               /* -1 if unknown */
bool op_state_terminal(enum op_state s);

/* Engine lifetime (main.c). */
struct op_engine *op_engine_new(struct spaced *sp);
/* Startup recovery, see above. Call once after the sandbox table is loaded. */
void op_engine_recover(struct spaced *sp);
void op_engine_free(struct op_engine *e);

/* Creates a sandbox: validates spec against templates/limits, writes the sandbox row
 * (desired running, state creating) + a create op, schedules it. idem_key (may be NULL)
 * and body_hash (hex SHA-256 of the request body) implement Idempotency-Key: the same
 * tenant + key returns the original op (return 1, nothing new written) when the body hash
 * matches, and fails with 422 "idempotency_mismatch" when it does not.
 * Returns 0 (new) or 1 (replay) with *out filled (out->target = sandbox id), -1 + err. */
int op_submit_create(struct spaced *sp, const char *tenant, const struct sbx_spec *spec,
                     const char *idem_key, const char *body_hash, struct store_op *out,
                     struct spaced_err *err);

/* Any other verb on an existing sandbox of `tenant`. Checks the transition against the
 * sandbox's desired state (409 "invalid_state" naming the current state if illegal,
 * 404 "not_found" for unknown or other tenants' sandboxes), records intent, schedules.
 * A delete cancels the sandbox's still-pending ops. Returns 0 with *out filled. */
int op_submit(struct spaced *sp, const char *tenant, enum op_kind kind,
              const char *sandbox_id, struct store_op *out, struct spaced_err *err);

/* Template build op (target = template name), run by the template module: writes the
 * templates row (state "building", spec_json) and the op in one transaction. 409 if a
 * build of that name is already running. */
int op_submit_template(struct spaced *sp, const char *tenant, const char *name,
                       const char *spec_json, struct store_op *out, struct spaced_err *err);

/* Progress of a running op (template builds, long creates): persisted and broadcast. */
void op_progress(struct spaced *sp, const char *op_id, int percent, const char *detail);

/* Finishes a running op (called by whoever carried it out: sandbox or template module).
 * code/msg are NULL on success. */
void op_finish(struct spaced *sp, const char *op_id, bool ok, const char *code,
               const char *msg);

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

/* Asks for a reconciler pass soon (from the loop). */
void op_reconcile_soon(struct spaced *sp);

#endif
