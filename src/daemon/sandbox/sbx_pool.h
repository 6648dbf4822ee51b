/* sbx_pool: the warm pools of spaced (`--pool N`), one vm/pool.h pool per clone shape.
 *
 * A shape is (template, vcpus, memory, NIC or not): exactly one template snapshot
 * directory, which is the key. A shape's pool is made the first time a create asks for it
 * with a ready snapshot; from then on it keeps N restored-and-paused clones, or with
 * `--pool-budget-mib M` as many as the last minute's creates of that shape, served or
 * not (pool.h: at least N), all shapes' clones together within M MiB of guest memory.
 *
 * Clones of a shape with a NIC each get a namespace + tap at fill time, mounted under the
 * pooled VM's id (net_claim_template) and not attached to the gateway: nothing answers
 * there until a claim. After the claim, the create's net stage (sbx_act.c) re-mounts it
 * under the sandbox's id and attaches the gateway with the create's policy
 * (net_claim_from), or releases it if that fails. The guest needs nothing new: every
 * sandbox namespace has the same addresses, configured in the template snapshot.
 *
 * Layout of a pooled, unclaimed VM (data dir):
 *   run/pool-<hex>/        its run directory (vm.h), id "pool-<hex>"
 *   pool/pool-<hex>.qcow2  its overlay on the template's frozen overlay
 *   run/pool-<hex>/net.claimed  present when a namespace space-pool-<hex> is mounted
 * A claim moves the overlay to sandboxes/<id>/disk.qcow2 (QEMU keeps its open file) and
 * makes run/pool-<hex> the sandbox's run_dir in its record, so adoption after a restart
 * finds it like any other sandbox VM. At start-up, sbx_pools_sweep kills the pooled VMs a
 * previous spaced left unclaimed and removes their files and namespaces.
 *
 * Ownership: struct sbx_pools is owned by spaced (sp->pools), freed by sbx_pools_free,
 * which kills every unclaimed VM. */
#ifndef SPACE_SBX_POOL_H
#define SPACE_SBX_POOL_H

#include <jansson.h>
#include <stdbool.h>

struct spaced;
struct sbx_pools;
struct vm;
struct vm_callbacks;
struct store_sbx;

struct sbx_pools *sbx_pools_new(struct spaced *sp);
void sbx_pools_free(struct sbx_pools *ps);

/* Kills leftovers of an earlier spaced: pooled VMs whose run dir no sandbox record names,
 * and overlays never claimed. Call after sbx_table_load. */
void sbx_pools_sweep(struct spaced *sp);

/* For a create of `rec` with template snapshot `snap_dir` (taken with a NIC when `nic`),
 * frozen `overlay` over the template's raw `rootfs` (the chain the caller saved in
 * backing.json): starts the shape's pool if there is none, then claims a ready VM. On
 * success returns the VM (callbacks cbs/arg, as pool_claim), has moved its overlay to
 * `disk` and set rec->run_dir to its run directory (the caller persists the record and,
 * for a shape with a NIC, hands the namespace of vm_id(VM) to rec->id). A step failing
 * after the claim kills the VM: the caller's on_exit reports it. NULL when the pool is
 * off or empty: the caller restores as usual. */
struct vm *sbx_pool_claim(struct spaced *sp, struct store_sbx *rec, const char *snap_dir,
                          bool nic, const char *overlay, const char *rootfs, const char *disk,
                          const struct vm_callbacks *cbs, void *arg);

/* A create that asked a pool has ended (its answer is stored): the pools refill soon,
 * not while the claim or the restore was in flight (pool_kick). */
void sbx_pools_refill(struct spaced *sp);

/* Pooled VMs ready to claim, over all shapes (metrics). */
unsigned sbx_pools_ready(const struct spaced *sp);
/* Pooled VMs ready to claim in the shape of snapshot snap_dir (0: no such pool; NULL: every
 * shape). What a
 * node reports for placement (cluster.c). */
unsigned sbx_pool_ready_at(const struct spaced *sp, const char *snap_dir);

/* The pools' state for operators (GET /v1/nodes `pool`, docs/api.md): --pool, the
 * budget, guest memory held, and per shape its template, vCPUs, memory, NIC, ready and
 * held (ready or being made) clones, the target it fills to now, the ceiling the budget
 * allows it, and its demand (creates asked of it in the last window). New reference. */
json_t *sbx_pools_json(const struct spaced *sp);

#endif
