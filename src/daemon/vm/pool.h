/* pool: warm pool of restored-and-paused VMs for one template snapshot.
 *
 * Keeps up to `size` VMs restored from the template's snapshot with vCPUs stopped, each on
 * its own fresh overlay and run directory. A claim takes one, resumes it and gives it to
 * the caller, who then owns it exactly like a VM from vm_restore (its callbacks are
 * switched to the caller's) and asks the agent to `refresh` (clock, entropy, identity).
 * The pool refills in the background, one restore at a time so it never starves the
 * loop or the CPU during a burst of creates; failed fills are retried with backoff.
 *
 * Size that follows demand: `size` is the floor; with `cap` set, the pool aims at the
 * number of claims asked of it in the last POOL_DEMAND_WINDOW_S seconds (the recent
 * create rate times that window; a claim that found the pool empty counts too: it is
 * demand the pool did not meet), between `size` and what cap() allows now (the
 * operator's memory budget), so after a burst it refills ahead of the next one; when
 * demand falls it lets surplus ready VMs go, one per POOL_SHRINK_CHECK_MS, oldest first.
 *
 * The pool needs fresh ids / directories for its VMs; they come from the caller's
 * `prepare` callback, so the control plane keeps naming and placing sandboxes. */
#ifndef SPACE_POOL_H
#define SPACE_POOL_H

#include <stddef.h>
#include <stdint.h>
#include "vm.h"

struct pool;

/* Fills cfg (pre-filled from pool_config.base) for a new pooled VM: id, run_dir
 * (created), disk path (not yet existing: the pool makes the overlay on the chain in
 * pool_config.base.backing, `template_overlay` first), net, jail. The pool copies cfg right after the call, so the
 * strings only need to live that long; a tap fd in cfg->net becomes the pool's (closed
 * once QEMU has its copy, or when the VM is discarded). Return nonzero when no VM can be
 * made now (e.g. no capacity), with nothing left to discard: like any failed fill, the
 * pool tries again after a backoff (1 s doubling to 60 s, reset by a fill that works). */
typedef int (*pool_prepare_cb)(struct vm_config *cfg, void *arg);

/* A pooled VM that was never claimed is gone (pool_free, or it died while waiting);
 * its overlay is already removed and its tap fd closed; the caller removes what prepare
 * created (run dir, the network namespace behind the tap). */
typedef void (*pool_discard_cb)(const char *id, const char *run_dir, void *arg);

/* How many VMs (ready or being made) this pool may hold now, its share of a budget. */
typedef unsigned (*pool_cap_cb)(void *arg);

#define POOL_DEMAND_WINDOW_S 60 /* claims counted for the demand-sized target */
#define POOL_DEMAND_MAX 64      /* claims remembered (a ring): the most a target follows */

struct pool_config {
    const char *snapshot_dir;     /* template snapshot (vm_template_snapshot output) */
    const char *template_overlay; /* template's frozen overlay: backing of each clone */
    struct vm_config base;        /* vcpus, mem_mib, accel, kernel, ... shared by all */
    unsigned size;                /* VMs to keep ready (the floor); 0 disables the pool */
    pool_prepare_cb prepare;
    pool_discard_cb discard;      /* may be NULL */
    pool_cap_cb cap;              /* NULL: a fixed size; else the demand-sized ceiling */
    void *prepare_arg;            /* passed to prepare, discard and cap */
};

/* cfg is copied (strings duplicated). Starts filling from the loop. */
struct pool *pool_new(struct event_base *base, const struct pool_config *cfg);

/* Takes a ready VM, resumes it and reports through cbs->on_ready (err == VM_OK) then
 * cbs->on_agent; from then on the VM is the caller's exactly as if vm_restore had made it
 * (vm_id / vm_run_dir tell which sandbox directory it uses). Returns NULL when none is
 * ready (the caller then falls back to vm_restore). Either way the claim counts as
 * demand (pool_target). */
struct vm *pool_claim(struct pool *p, const struct vm_callbacks *cbs, void *arg);

/* The claimer's create has ended: refill 250 ms from now, after the client's first
 * command (a claim alone refills after 2 s). */
void pool_kick(struct pool *p);

unsigned pool_ready(const struct pool *p); /* VMs ready to claim now */
unsigned pool_count(const struct pool *p); /* VMs held: ready or being made */
unsigned pool_target(struct pool *p);      /* the size it fills to now (demand, cap) */
unsigned pool_recent(const struct pool *p); /* claims asked in the last window (demand) */
unsigned pool_ceiling(struct pool *p);     /* what cap() allows now (size when fixed) */

/* The demand-sized target: the claims (clock_mono_ms(), the last min(nclaims,
 * POOL_DEMAND_MAX) of the ring) within POOL_DEMAND_WINDOW_S before now_ms, at least size,
 * at most cap unless cap is below size (the operator's floor wins). */
unsigned pool_demand(const int64_t *claims_ms, unsigned nclaims, int64_t now_ms, unsigned size,
                     unsigned cap);

/* Kills every pooled VM (removing their overlays) and frees the pool. */
void pool_free(struct pool *p);

#endif
