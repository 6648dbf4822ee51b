/* sbx_exec.c: what the sandbox module registers with the operation engine (op.h): the
 * executor of every sandbox verb (create ... wake), the startup hook that adopts the
 * VMs that survived a restart, and the tick hook that writes the records the store
 * refused, fires sandbox timeouts and runs the reconciler backstop every
 * SBX_RECONCILE_PERIOD_MS. */
#include <stdio.h>
#include <string.h>

#include "log.h"
#include "sbx_internal.h"

static void exec_run(struct spaced *sp, const struct store_op *op, void *arg)
{
    (void)arg;
    struct sbx *s = sbx_find(sp, NULL, op->target);
    int kind = op_kind_parse(op->kind);
    if (!s) {
        if (kind == OP_DELETE)
            op_finish(sp, op->id, true, NULL, NULL);
        else
            op_finish(sp, op->id, false, "not_found", "the sandbox no longer exists");
        return;
    }
    sbx_act(sp, s, (enum op_kind)kind, op->id);
}

static bool exec_busy(struct spaced *sp, const char *target, void *arg)
{
    (void)arg;
    struct sbx *s = sbx_find(sp, NULL, target);
    return s && sbx_busy(s);
}

/* Every verb's steps are idempotent: resumable is left NULL (always). */
static const struct op_executor sbx_executor = {.run = exec_run, .busy = exec_busy};

static void recover_one(struct sbx *s, void *arg) { sbx_recover(arg, s); }

static void on_recover(struct spaced *sp, void *arg)
{
    (void)arg;
    sbx_each(sp, recover_one, sp);
}

/* Submits the sandbox's on_timeout action (suspend or delete) on the owner's behalf. */
static int fire_timeout(struct spaced *sp, struct sbx *s, struct spaced_err *err)
{
    const struct store_sbx *r = sbx_record(s);
    enum op_kind kind = strcmp(r->on_timeout, "delete") == 0 ? OP_DELETE : OP_SUSPEND;
    struct store_op op;
    char id[STORE_ID_MAX], tenant[STORE_ID_MAX];
    snprintf(id, sizeof id, "%s", r->id);
    snprintf(tenant, sizeof tenant, "%s", r->tenant);
    log_info("sandbox.timeout", "sandbox=%s action=%s", id, op_kind_name(kind));
    int rc = sbx_submit(sp, tenant, kind, id, &op, err);
    if (rc < 0)
        log_warn("sandbox.timeout", "sandbox=%s action=%s error=%s", id, op_kind_name(kind), err->code);
    store_op_clear(&op);
    return rc;
}

/* Fires an expired timeout. */
static void check_timeout(struct sbx *s, void *arg)
{
    struct spaced *sp = arg;
    const struct store_sbx *r = sbx_record(s);
    if (!r->deadline_ms || r->deadline_ms > spaced_now_ms() || sbx_busy(s) ||
        op_target_open(sp, r->id))
        return;
    enum sbx_state st = sbx_state(s);
    if (st != SBX_RUNNING && st != SBX_PAUSED)
        return;
    struct spaced_err err;
    fire_timeout(sp, s, &err);
}

int sbx_expire_now(struct spaced *sp, struct sbx *s, struct spaced_err *err)
{
    return fire_timeout(sp, s, err);
}

static void reconcile_one(struct sbx *s, void *arg)
{
    struct spaced *sp = arg;
    if (!sbx_busy(s) && !op_target_open(sp, sbx_id(s)))
        sbx_reconcile(sp, s);
}

static void on_tick(struct spaced *sp, void *arg)
{
    (void)arg;
    sbx_table_retry(sp); /* records the store refused, before the op engine's outcomes */
    sbx_each(sp, check_timeout, sp);
    int64_t now = spaced_now_ms();
    if (now - sp->sbx->last_reconcile_ms >= SBX_RECONCILE_PERIOD_MS) {
        sp->sbx->last_reconcile_ms = now;
        sbx_each(sp, reconcile_one, sp);
        sbx_fork_gc(sp);
        sbx_move_tick(sp);
    }
}

int sbx_ops_register(struct spaced *sp)
{
    for (int k = OP_CREATE; k <= OP_WAKE; k++)
        op_register(sp->ops, (enum op_kind)k, &sbx_executor, NULL);
    sbx_fork_register(sp);
    if (op_on_recover(sp->ops, on_recover, NULL) < 0 || op_on_tick(sp->ops, on_tick, NULL) < 0)
        return -1;
    return 0;
}
