/* sbx_resv.c: on a cluster node, a sandbox whose VM comes back (restore, start or wake
 * of a suspended, stopped or failed sandbox: no VM, so its row holds no capacity) takes
 * a reservation of its size on the node first, as a control daemon does before it
 * forwards a create (store_resv_take, cluster_place.c). The check and the reservation
 * are one transaction under the node's row lock, so creates placed by any control and
 * resumes on the node never overcommit it together; a resume that does not fit is
 * refused with 503 no_capacity before its operation exists. The reservation stands in
 * for the sandbox until its row counts itself (a state that holds a VM, stored) or its
 * operation ends without that (failed, canceled by a delete). A node that dies holding
 * one leaves it to its heartbeat's expiry (CLUSTER_RESV_TTL_MS), as a control does.
 * Single host (no node id): nothing is reserved. */
#include <stdio.h>
#include <string.h>

#include "log.h"
#include "sbx_internal.h"

/* Whether a sandbox in state st holds a VM on its node (store_node_use counts it). */
static bool holds_vm(enum sbx_state st)
{
    return st != SBX_SUSPENDED && st != SBX_STOPPED && st != SBX_DELETED && st != SBX_FAILED;
}

int sbx_resv_take(struct sbx *s, enum sbx_state target, struct spaced_err *err)
{
    struct spaced *sp = s->sp;
    const char *node = sp->sbx->node_id;
    /* Where the queue leads now: a VM (or one that is coming) is already counted or
     * reserved; a failed sandbox's desired state still says where it was heading. */
    bool vm_now = holds_vm(s->desired) && s->state != SBX_FAILED;
    if (!node[0] || s->resv_id[0] || vm_now || !holds_vm(target))
        return 0;
    struct store_resv r = {.vcpus = s->rec.vcpus, .memory_mib = s->rec.memory_mib,
                           .created_ms = spaced_now_ms(), .resume = true};
    snprintf(r.node, sizeof r.node, "%s", node);
    if (spaced_random_id(r.id, "rv", 16) != 0)
        return spaced_err_set(err, 500, "internal", "random source failed");
    int rc = store_resv_take(sp->store, &r, 0);
    if (rc == STORE_FULL)
        return spaced_err_set(err, 503, "no_capacity",
                              "node %s has no room for sandbox %s (%u vCPUs and %u MiB) to run again; "
                              "delete or suspend another sandbox there first",
                              node, s->rec.id, r.vcpus, r.memory_mib);
    if (rc != 0)
        return spaced_err_set(err, 503, "store_unavailable", "reserving capacity on node %s: %s", node,
                              store_errmsg(sp->store));
    snprintf(s->resv_id, sizeof s->resv_id, "%s", r.id);
    log_info("sandbox.reserve", "sandbox=%s node=%s vcpus=%u memory_mib=%u reservation=%s", s->rec.id, node,
             r.vcpus, r.memory_mib, r.id);
    return 0;
}

void sbx_resv_release(struct sbx *s)
{
    if (!s->resv_id[0])
        return;
    /* A failure leaves the row to the node's heartbeat (CLUSTER_RESV_TTL_MS). */
    if (store_resv_release(s->sp->store, s->resv_id) != 0)
        log_warn("sandbox.reserve", "sandbox=%s reservation=%s release=failed msg=\"%s\"", s->rec.id,
                 s->resv_id, store_errmsg(s->sp->store));
    s->resv_id[0] = s->resv_op[0] = '\0';
}

void sbx_resv_for(struct sbx *s, const char *op_id)
{
    if (s->resv_id[0] && !s->resv_op[0])
        snprintf(s->resv_op, sizeof s->resv_op, "%s", op_id);
}

void sbx_resv_op_ended(struct sbx *s, const char *op_id)
{
    /* Not an earlier op's end (a suspend still running when the restore was queued):
     * the reservation waits for its own. */
    if (s->resv_id[0] && op_id[0] && strcmp(s->resv_op, op_id) == 0)
        sbx_resv_release(s);
}

void sbx_resv_stored(struct sbx *s)
{
    if (holds_vm(s->state) && !s->unsaved)
        sbx_resv_release(s);
}
