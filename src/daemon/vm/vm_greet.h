/* vm_greet: starting a VM (boot or restore) and waiting for its agent to answer the
 * host's HELLO, with the lost-HELLO retry. Prefix vmg_.
 *
 * Every user of a VM's agent does the same dance: start the VM, and on each fresh agent
 * connection (vm_callbacks.on_agent) send a HELLO and wait for the answer, within a
 * deadline. A HELLO sent to a just-restored guest can be lost: the guest driver drops
 * what arrives while the agent is still closing the port of the snapshot's last
 * connection. A restored agent answers in well under a second, so no answer within
 * retry_ms means a fresh connection (vm_agent_reconnect) and a new HELLO. A cold boot is
 * not retried (retry_ms 0): its agent is simply not up yet.
 *
 * Layering: vm/ is a leaf (it includes only common/), and the HELLO itself is spoken by
 * whoever holds the connection: agentc for sandboxes and template VMs (agentc_new sends
 * it), raw frames for the pool's warm-up (pool.c, inside vm/). So this module keeps the
 * sequence and its timers and leaves the greeting to the caller: the caller's on_agent
 * hands the fd to its client, which sends the HELLO, and calls vmg_sent; its "the agent
 * answered" calls vmg_answered. This keeps vm/ below agentc with no new include edge,
 * and the pool (in vm/) can use it too.
 *
 * Reporting: a greeting that fails (attempts used up, the overall deadline, or a
 * reconnect refused) is reported once through ops->on_fail; success is the caller's own
 * answer (its vmg_answered call), so nothing is reported for it. After on_fail, or
 * vmg_answered / vmg_stop, the greeter is idle until the next vmg_begin / vmg_start.
 *
 * Threading and lifetime: the caller's loop; a greeter belongs to its caller (vmg_new,
 * vmg_free) and may be reused for VM after VM. on_fail and on_retry are only ever called
 * from the loop (a timer); the caller may free its own state and the greeter from inside
 * on_fail, not from inside on_retry (the reconnect follows it). */
#ifndef SPACE_VM_GREET_H
#define SPACE_VM_GREET_H

#include <stdbool.h>
#include <stddef.h>

#include "vm.h"

struct vmg; /* one caller's greeter (opaque) */

/* The wait for the HELLO of a just-restored agent before a fresh connection (ms). */
#define VMG_RETRY_MS 5000

struct vmg_params {
    unsigned retry_ms;    /* no answer on a connection within this: a fresh one; 0 = never */
    unsigned attempts;    /* connections tried before on_fail; 0 = no limit */
    unsigned deadline_ms; /* overall, from vmg_begin; 0 = none (the caller has its own) */
};

struct vmg_ops {
    /* The connection greeted last got no answer in retry_ms: drop it (and anything
     * waiting on it) before the fresh connection is asked for. May be NULL. */
    void (*on_retry)(void *arg, struct vm *vm);
    /* The greeting failed: VM_E_TIMEOUT (deadline, or attempts used up; msg says which)
     * or the error of vm_agent_reconnect. The VM is left as it is: the caller decides
     * (kill it, fail its operation). Called at most once per vmg_begin. May be NULL
     * when the caller has a deadline of its own (a refused reconnect is then left to
     * it). */
    void (*on_fail)(void *arg, struct vm *vm, int err, const char *msg);
};

/* ops and arg are borrowed and must outlive the greeter. NULL when out of memory. */
struct vmg *vmg_new(struct event_base *base, const struct vmg_ops *ops, void *arg);

/* Stops the timers and frees. NULL is a no-op. Safe from inside on_fail / on_retry. */
void vmg_free(struct vmg *g);

/* vm_boot (snapshot_dir NULL) or vm_restore(snapshot_dir, paused) with the caller's
 * callbacks, then vmg_begin on the new VM. The arguments and the synchronous failure
 * (NULL, *err, msg) are vm_boot's / vm_restore's; on failure the greeter stays idle. */
struct vm *vmg_start(struct vmg *g, const struct vm_config *cfg, const char *snapshot_dir,
                     int paused, const struct vmg_params *p, const struct vm_callbacks *cbs,
                     void *arg, int *err, char *msg, size_t msglen);

/* Starts waiting for vm's agent (a VM the caller got elsewhere: pool_claim, vm_adopt):
 * arms the deadline, the attempt count starts at 0. p is copied. vm may be NULL (tests):
 * then on_retry alone must bring the fresh connection. */
void vmg_begin(struct vmg *g, struct vm *vm, const struct vmg_params *p);

/* The caller sent a HELLO on a fresh connection (from its on_agent): one attempt, with
 * retry_ms to be answered. A no-op when idle. */
void vmg_sent(struct vmg *g);

/* The agent answered: timers stop, nothing is reported. */
void vmg_answered(struct vmg *g);

/* The caller gives up waiting (its operation ended, the VM is gone): same, silently. */
void vmg_stop(struct vmg *g);

/* true between vmg_begin and vmg_answered / vmg_stop / on_fail. */
bool vmg_active(const struct vmg *g);

#endif
