/* sbx_internal.h: the sandbox object, shared by the files of the sandbox module only
 * (sbx_table.c keeps the table and the record, sbx_act.c drives the VM, sbx_submit.c
 * and sbx_exec.c are the sandbox side of the op engine). */
#ifndef SPACE_SBX_INTERNAL_H
#define SPACE_SBX_INTERNAL_H

#include "daemon/vm/vm.h"
#include "daemon/vm/vm_sig.h"
#include "daemon/volume/vol_mount.h"
#include "sbx.h"

#define SBX_PATH_MAX 600 /* a path under the sandbox's directory */

struct vm;
struct agentc;
struct agentc_chan;
struct event;
struct vmg;
struct sbx_create;
struct sbx_fork;
struct sbx_gw_wait;
struct vm_disk_protos;

struct sbx {
    struct spaced *sp;
    struct sbx_travel *travel;   /* its snapshot's parts being fetched (sbx_travel.c, owned) */
    struct sbx_move *move;       /* its own files being hashed for a move, or fetched from the
                                    node it moved from (sbx_move.c, owned) */
    struct store_sbx rec;        /* persisted record (owned); rec.state mirrors `state` */
    enum sbx_state state;        /* actual state */
    enum sbx_state desired;      /* where queued ops lead */
    struct vm *vm;               /* QEMU, NULL when none (owned by vm.c until on_exit) */
    struct agentc *agent;        /* agent connection (owned), NULL when not connected */
    bool agent_ready;            /* HELLO received on `agent` */
    unsigned agent_drops;        /* agent connections lost in the current window */
    int64_t agent_drops_since;   /* start of that window (ms) */
    struct agentc_chan *pending; /* refresh/shutdown request in flight, or NULL */
    char op_id[STORE_ID_MAX];    /* op being carried out, "" when idle */
    enum op_kind op_kind;        /* its kind (valid when op_id[0]) */
    bool recovering;             /* startup adoption in progress (busy) */
    bool expect_exit;            /* the current action ends QEMU: on_exit is not a failure */
    bool restored;               /* started from a snapshot (template or suspend) */
    bool cold_fallback;          /* create: snapshot restore failed, now cold booting */
    struct event *timer;         /* agent-hello deadline of the current action (owned) */
    struct vmg *greet;           /* restored VM: greet again on a fresh connection (owned,
                                    made on first use) */
    struct sbx_create *create;   /* the create in progress: its stages' outputs and times
                                    (sbx_act.c, owned), NULL otherwise */
    struct sbx_gw_wait *gw;      /* waiting for the egress gateway (sbx_gwwait.c, owned,
                                    made on first use) */
    bool refresh_ok;             /* refresh request got its result */
    char refresh_err[256];       /* or why it failed */
    struct agentc_chan *refresh_after; /* a refresh sent after its create was answered
                                    (sbx_act.c "refresh after the answer"), or NULL */
    bool refresh_after_ok;       /* that refresh got its result */
    bool refresh_after_failed;   /* the agent answered it with an error */
    bool unsaved;                /* rec differs from the store: sbx_table_retry writes it */
    bool awaiting_capture;       /* a fork whose parent is being captured: no op of its
                                    own yet (busy, so nothing else acts on it) */
    struct volm *mounts[VOLM_MOUNTS_MAX]; /* its volumes, by index in rec.volumes_json,
                                    live on the current agent connection (sbx_vol.c) */
    char resv_id[STORE_ID_MAX];  /* node capacity reserved for its VM coming back
                                    (sbx_resv.c), "" when none */
    char resv_op[STORE_ID_MAX];  /* the op that reservation is for */
    struct sbx *next;            /* table list */
};

/* The record of a sandbox removed from the table (deleted) before it could be stored. */
struct sbx_unsaved {
    struct store_sbx rec;        /* owned */
    struct sbx_unsaved *next;
};

struct sbx_table {
    struct sbx *head;
    struct {
        sbx_state_fn fn;
        void *arg;
    } listeners[SBX_LISTENERS_MAX];
    unsigned nlisteners;
    sbx_owner_fn owns;           /* sbx_set_owner: NULL = every row */
    const char *node_id;         /* stamped on new rows, never NULL ("" = single host) */
    int64_t last_reconcile_ms;   /* the tick's last reconciler pass (sbx_exec.c) */
    struct sbx_unsaved *unsaved; /* records of removed sandboxes still to store */
    struct vm_disk_protos *disks; /* overlays remembered per chain (vm.h; made on first use) */
    struct sbx_waiter *waiters;  /* calls waiting for an auto-resume (sbx_wake.c) */
    bool wake_listening;         /* sbx_wake.c's state listener is registered */
    struct sbx_fork *forks;      /* forks in progress (sbx_fork.c, owned) */
    struct sbx_travel_rec *travel_recs; /* snapshots being hashed (sbx_travel.c, owned) */
    struct travel_fetch *travel_fetches; /* snapshots being fetched, one each, shared by the
                                    creates waiting for it (sbx_travel.c; owned by their
                                    waiters: the last one's cancel frees it) */
};

/* ---- behind the op executor (sbx_submit.c, sbx_exec.c) ---- */

/* Adds a sandbox created by sbx_submit_create (record copied) to the table. */
struct sbx *sbx_table_add(struct spaced *sp, const struct store_sbx *rec);
/* Sets desired state in memory (sbx_submit persists it in the op's transaction). */
void sbx_set_desired(struct sbx *s, enum sbx_state desired);

/* Carries out one op on the sandbox asynchronously, then calls op_finish(). The sandbox
 * moves through the transitional state and persists each state change. */
void sbx_act(struct spaced *sp, struct sbx *s, enum op_kind kind, const char *op_id);

/* Startup: adopts the sandbox's VM if it is still alive, else records what happened.
 * Called (on_recover hook) for each live sandbox before ops are resumed. */
void sbx_recover(struct spaced *sp, struct sbx *s);

/* Reconciler backstop for an idle sandbox with no open op: makes the recorded state
 * agree with the VM (vanished VM -> failed, stuck transitional state -> what the VM is,
 * lost agent connection -> reconnect) and the desired state agree with the state. */
void sbx_reconcile(struct spaced *sp, struct sbx *s);

/* True while an action is in progress on the sandbox (the engine queues behind it). */
bool sbx_busy(const struct sbx *s);

/* Moves the sandbox to `state` (failure text for SBX_FAILED, else NULL), persists the
 * record, logs one line, tells listeners. */
void sbx_set_state(struct sbx *s, enum sbx_state state, const char *failure);
/* An action's success: moves to `state` and finishes op_id (may be "": none) as
 * succeeded, the record and the op's outcome in one transaction (op_finish_with: one
 * durable commit, and the op's watchers answered only once both are stored); then logs
 * and tells listeners as sbx_set_state. */
void sbx_set_state_succeed(struct sbx *s, enum sbx_state state, const char *op_id);
/* Persists the record as it is in memory. When the store fails, or the record already
 * waits for it and the backoff has not run out, the record is kept unsaved and
 * sbx_table_retry writes it later; returns -1 then. */
int sbx_persist(struct sbx *s);
/* The same without an fsync (store_sbx_put_lazy): only for what describes the VM alone
 * (a claimed pooled VM's run dir), which a host crash ends with it. */
int sbx_persist_lazy(struct sbx *s);
/* From the tick: writes the unsaved records (live sandboxes', then removed ones'),
 * stopping at the first failure until the backoff runs out. */
void sbx_table_retry(struct spaced *sp);
/* Unlinks and frees a deleted sandbox (its VM must be gone); an unsaved record is kept
 * for sbx_table_retry. */
void sbx_table_remove(struct spaced *sp, struct sbx *s);

/* ---- capacity for a VM coming back, on a cluster node (sbx_resv.c) ---- */

/* Before a verb leading to target is queued on s: when it brings back a VM the node does
 * not count now (suspended, stopped, failed, or heading there), reserves its size on
 * the node (store_resv_take). Returns 0 (reserved, or nothing to reserve: single host,
 * already reserved, VM already counted), or -1 with err: 503 no_capacity when the node
 * has no room, 503 store_unavailable. */
int sbx_resv_take(struct sbx *s, enum sbx_state target, struct spaced_err *err);
/* Ties the reservation just taken to the op queued for it. */
void sbx_resv_for(struct sbx *s, const char *op_id);
/* Drops s's reservation (none: no-op): it was deleted, or its row counts. */
void sbx_resv_release(struct sbx *s);
/* Op op_id of s ended: drops the reservation taken for it, if any. */
void sbx_resv_op_ended(struct sbx *s, const char *op_id);
/* After s's record was written: once the stored state holds a VM, the row counts for
 * the sandbox and the reservation goes. */
void sbx_resv_stored(struct sbx *s);

/* Ends every auto-resume wait with 503 (shutdown; sbx_table_free). */
void sbx_wake_free_all(struct sbx_table *t);

/* Paths under the data dir for this sandbox (out[cap]). */
void sbx_path(const struct sbx *s, const char *leaf, char *out, size_t cap);

/* The read-only layers under a sandbox's overlay, nearest first, kept beside the disk in
 * backing.json (sbx_chain.c): vm.h takes the chain explicitly and never trusts the
 * overlay's header. The file is the sandbox module's own; the template module learns
 * which layers are in use through sbx_template_users (sbx.h). save: 0 or -1; load: 0,
 * or -1 when the file is missing or names no layer. */
struct sbx_chain {
    unsigned n;
    char path[VM_DISK_BACKING_MAX][SBX_PATH_MAX];
    char format[VM_DISK_BACKING_MAX][8];
};
int sbx_chain_save(const struct sbx *s, const struct sbx_chain *c);
int sbx_chain_load(const struct sbx *s, struct sbx_chain *c);
/* The same format at any path (a fork's capture/chain.json). */
int sbx_chain_write(const char *path, const struct sbx_chain *c);
int sbx_chain_read(const char *path, struct sbx_chain *c);

/* ---- forks (sbx_fork.c) and snapshots (sbx_snap.c) ---- */

/* A fork in progress, or a snapshot being taken (the same capture, kept). */
struct sbx_fork {
    struct spaced *sp;
    char op_id[STORE_ID_MAX];
    char tenant[STORE_ID_MAX];
    char parent[STORE_ID_MAX];
    char capture[STORE_ID_MAX];
    unsigned n, done, failed;
    char child[SBX_FORK_MAX][STORE_ID_MAX];
    struct op_watch *watch[SBX_FORK_MAX];
    struct op_watch *self; /* the fork op: a delete of the parent may cancel it pending */
    char why[512];       /* the first fork's failure */
    char snapshot[STORE_ID_MAX]; /* a snapshot job (sbx_snap.c): its id = the capture's;
                                    n == 0 */
    int64_t started_us;  /* the op's start (clock_mono_us) */
    /* The parent's chain when the capture's (its overlay copy over it) would exceed
     * VM_DISK_BACKING_MAX: the copy is flattened over it into one raw image (n == 0:
     * no flattening). */
    struct sbx_chain flat_base;
    struct vm_disk_job *flatten; /* the qemu-img convert running, or NULL */
    struct sbx_fork *next;
};

/* <data_dir>/captures[/id] (out[cap]). */
void sbx_capture_dir(const struct spaced *sp, const char *id, char *out, size_t cap);
/* Whether s can be captured now: running, with a disk chain. 0, or -1 with err (409
 * invalid_state). A chain already at VM_DISK_BACKING_MAX is no reason to refuse: the
 * capture is flattened (sbx_fork.c). */
int sbx_capture_check(struct sbx *s, struct spaced_err *err);
/* Queues job f (its op already enqueued: f->op_id) and follows its op. */
void sbx_job_add(struct spaced *sp, struct sbx_fork *f);
/* The snapshot job's capture ended (sbx_snap.c): records it, finishes the op, frees f. */
void sbx_snap_captured(struct sbx_fork *f, int err, const char *msg);
/* The snapshot job's op ended before its capture (canceled) or a restart interrupted it:
 * its row goes. */
void sbx_snap_abandon(struct spaced *sp, const char *snap_id);
/* Whether a network policy (canonical JSON, may be NULL) gives the VM a NIC: any mode
 * but "none". */
bool sbx_policy_nic(const char *network_json);
/* Recovery of an OP_SNAPSHOT op (not resumable): removes the rows it left creating. */
void sbx_snap_interrupted(struct spaced *sp, const struct store_op *op);
/* Whether capture `id` is a snapshot's (its row exists, or the store cannot say). */
bool sbx_snap_kept(struct spaced *sp, const char *id);
/* Frees f (unlinked from the job list, its watches ended). */
void sbx_job_free(struct sbx_fork *f);

/* Create of a fork (rec.source set): its capture directory (out[cap]) and disk chain
 * (the capture's overlay copy over its parent's chain). 0, or -1 with err. */
int sbx_fork_source(struct sbx *s, char *snap, size_t cap, struct sbx_chain *chain,
                    struct spaced_err *err);
/* Registers the fork executor (OP_FORK), from sbx_ops_register. */
void sbx_fork_register(struct spaced *sp);
/* From the tick, every SBX_RECONCILE_PERIOD_MS: removes the captures nothing uses. */
void sbx_fork_gc(struct spaced *sp);
/* For sbx_template_users: use() once per capture (snapshot, or a fork's) with the
 * template and layers its chain stands on (captures/<id>/template, chain.json), so the
 * template module keeps them while a snapshot may still be restored. */
void sbx_capture_users(struct spaced *sp, tpl_use_fn use, void *arg);
/* Shutdown: frees the forks in progress (their ops resume as "interrupted"). */
void sbx_fork_forget(struct sbx_table *t);

/* ---- files that travel between nodes (sbx_parts.c) ---- */

#define SBX_PARTS_MAX 16
#define SBX_PART_NAME_MAX 16
struct sbx_part {
    char name[SBX_PART_NAME_MAX];
    char path[SBX_PATH_MAX];     /* the holder: where it is (not in the record) */
    int64_t size;
    char sha256[65];
};
/* A parts record (sbx_parts.c's header says the JSON). */
struct sbx_parts {
    char node[STORE_ID_MAX];     /* the node holding them, "" when the record has none */
    char runtime[VM_SIG_MAX];    /* the VM runtime that saved the state among them
                                    (vm_sig.h), "" when there is none (a stopped sandbox's
                                    disk; a state saved before runtimes were recorded) */
    struct sbx_part f[SBX_PARTS_MAX];
    unsigned n;
    unsigned chain[VM_DISK_BACKING_MAX]; /* index into f, nearest layer first */
    char format[VM_DISK_BACKING_MAX][8];
    unsigned nchain;
};
/* The fixed part names (NULL-terminated); layer<i> names the chain's i-th layer. */
const char *const *sbx_parts_own_names(void);
bool sbx_parts_name_ok(const char *name);
/* The index of part `name`, or -1. */
int sbx_parts_find(const struct sbx_parts *p, const char *name);
/* Parses and checks a record (NULL: -1): at most SBX_PARTS_MAX files named from the set,
 * each once, sizes 0..4 TiB, 64-hex SHA-256s; a chain of 1..VM_DISK_BACKING_MAX listed
 * parts, each qcow2 or raw. 0, or -1. */
int sbx_parts_parse(const char *s, struct sbx_parts *out);
/* The record (heap, compact JSON), NULL when out of memory. */
char *sbx_parts_json(const struct sbx_parts *p);
/* Appends file `name` at `path` (size and digest to be hashed): 0, or -1. */
int sbx_parts_add(struct sbx_parts *p, const char *name, const char *path);
/* Hashes every part of p at its path (size and SHA-256 filled in), one after another on
 * a worker thread; done(arg, NULL), or done(arg, why) on the first failure. p must live
 * until then; cancel: no callback follows. NULL when nothing started. */
struct sbx_parts_hash;
typedef void (*sbx_parts_hashed)(void *arg, const char *why);
struct sbx_parts_hash *sbx_parts_hash(struct spaced *sp, struct sbx_parts *p, sbx_parts_hashed done, void *arg);
void sbx_parts_hash_cancel(struct sbx_parts_hash *h);
/* Fetches every part of p from node `node` (route + name, node token) into dir/<name>
 * (read-only), each verified (size bound, SHA-256) before it is published; errors are
 * "<code>_digest_mismatch", "<code>_fetch_failed", "<code>_source_unavailable" (the node
 * is not live or does not answer), host_io. done(arg, NULL or err, bytes) once; NULL
 * with err when nothing started. Cancel: no callback follows. */
struct sbx_parts_from {
    const char *node;
    const char *route;           /* "/internal/snapshots/<id>/parts/" */
    const char *dir;
    const char *what;            /* "snapshot <id>", for messages */
    const char *code;            /* "snapshot" */
};
struct sbx_parts_fetch;
typedef void (*sbx_parts_fetched)(void *arg, const struct spaced_err *err, int64_t bytes);
struct sbx_parts_fetch *sbx_parts_fetch(struct spaced *sp, const struct sbx_parts *p,
                                        const struct sbx_parts_from *from, sbx_parts_fetched done, void *arg,
                                        struct spaced_err *err);
void sbx_parts_fetch_cancel(struct sbx_parts_fetch *f);
/* The path of chain layer `part` (layer<i>) by the chain file at chain_file: 0, or -1. */
int sbx_parts_layer_path(const char *chain_file, const char *part, char *out, size_t cap);

/* ---- saved states and this node's runtime (sbx_runtime.c) ---- */

/* Whether a state saved by runtime `saved` (vm_sig.h; NULL or "": recorded before
 * runtimes were, accepted) restores on this node: 0, or -1 with 409
 * snapshot_incompatible "<what> was saved by <saved>; this node runs <ours>: ...". */
int sbx_runtime_check(const struct spaced *sp, const char *saved, const char *what, struct spaced_err *err);
/* The same for the state in directory dir (its snapshot.json's "runtime"; none readable:
 * 0, vm_restore decides). */
int sbx_runtime_check_dir(const struct spaced *sp, const char *dir, const char *what, struct spaced_err *err);

/* ---- snapshots that travel between nodes (sbx_travel.c) ---- */

/* A node's snapshot capture is complete (row: its ready values but state): hashes every
 * part on a worker thread, then writes the row ready with its holder and parts and
 * finishes op_id (or fails it and removes the snapshot). 0, or -1 when nothing started
 * (the caller fails the snapshot). */
int sbx_travel_record(struct spaced *sp, const char *op_id, const struct store_snap *row);
/* Shutdown: drops the hashings in progress (their ops resume as "interrupted"). */
void sbx_travel_forget(struct sbx_table *t);
/* A create from snapshot s->rec.source: 0 when its capture is here (or is no snapshot's:
 * sbx_fork_source decides); 1 when its parts are being fetched from the holder (done(s,
 * NULL) once the capture is in place, done(s, err) after removing everything fetched),
 * one fetch per snapshot on this node, which concurrent creates share; -1 with err
 * (nothing left behind). */
typedef void (*sbx_travel_done)(struct sbx *s, const struct spaced_err *err);
int sbx_travel_need(struct sbx *s, sbx_travel_done done, struct spaced_err *err);
/* The sandbox goes: it stops waiting for its snapshot's fetch; the fetch stops and what
 * it fetched is removed when no other create waits for it. */
void sbx_travel_cancel(struct sbx *s);
/* Whether a snapshots row's `parts` is one a fetch accepts (pure; unit-tested): at most
 * 16 files named from the fixed set (snapshot.json, state, mem, disk.qcow2, disk.raw,
 * template, layer0..layer<VM_DISK_BACKING_MAX-1>), each once, with a size in 0..4 TiB
 * and a 64-hex SHA-256; a chain of 1..VM_DISK_BACKING_MAX listed parts, each qcow2 or
 * raw; snapshot.json and state present; no creds (a moving sandbox's part). */
bool sbx_travel_parts_ok(const char *parts);

/* ---- waiting for the egress gateway (sbx_gwwait.c) ---- */
#define SBX_GW_WAIT_MS 10000 /* from an action's first wait to its 503 gateway_unavailable */
enum sbx_gw {
    SBX_GW_GO,   /* the gateway is up (or there is no network module: the claim says why) */
    SBX_GW_WAIT, /* not up: resume(s, snap) runs from the loop once it is, or in time */
    SBX_GW_DOWN, /* still not up SBX_GW_WAIT_MS after the action first waited: fail it */
};
typedef void (*sbx_gw_resume_fn)(struct sbx *s, const char *snap);
/* Before the current action starts a VM with a NIC: may it go on? On SBX_GW_WAIT the
 * caller returns; resume gets a copy of snap (NULL stays NULL) and calls this again. */
enum sbx_gw sbx_gw_check(struct sbx *s, const char *snap, sbx_gw_resume_fn resume);
/* A new action, or its end: no wait in progress and a fresh bound. */
void sbx_gw_reset(struct sbx *s);
/* The sandbox goes (sbx_free). */
void sbx_gw_free(struct sbx *s);

/* ---- suspended and stopped sandboxes that move between nodes (sbx_move.c) ---- */

/* s just became suspended or stopped on a cluster node (a verb succeeded, failed back to
 * it, or a restart found it so): hashes its files and records them in its row (parts,
 * with this node as holder) unless something is done to it meanwhile. No-op on a single
 * host, while hashing, and when a record exists (its own, or the node's it moved from). */
void sbx_move_record(struct sbx *s);
/* A verb starts on s: a hashing in progress stops and a record of files held here is
 * dropped (the files change; stored with the next state). A record naming another node
 * (a sandbox moved here whose files are not fetched yet) stays. */
void sbx_move_op_begins(struct sbx *s);
/* Before s's credential rules change (PUT .../credentials): a hashing in progress stops
 * and a record of files held here is dropped and stored now, so the row never offers
 * the old rules to another node (the caller records again once they are set). 0, or -1
 * with err: 409 sandbox_moving while its files are still on the node it moved from
 * (they carry that node's rules), 503 when the store did not take the write (or the row
 * moved meanwhile); nothing changed then. */
int sbx_move_unrecord(struct sbx *s, struct spaced_err *err);
/* Before a verb brings back s's VM: 0 when its files are here; 1 when they are being
 * fetched from the node it moved from (done(s, NULL) once they are in place and the
 * row's parts cleared, done(s, err) after removing what was fetched); -1 with err. */
typedef void (*sbx_move_done)(struct sbx *s, const struct spaced_err *err);
int sbx_move_need(struct sbx *s, sbx_move_done done, struct spaced_err *err);
/* After a fetch refused the old node's bytes (digest mismatch): gives the sandbox back
 * to that node (its row names it again, without parts, so it is not moved again) and
 * removes it from the table (s is freed). False when it stays (nothing changed). */
bool sbx_move_hand_back(struct sbx *s);
/* The sandbox goes: its hashing or fetch stops, what it fetched is removed. */
void sbx_move_cancel(struct sbx *s);
/* From the tick, every SBX_RECONCILE_PERIOD_MS, on a cluster node: sandboxes whose row
 * names another node leave the table; the files of those the other node has fetched
 * (or deleted) are removed. */
void sbx_move_tick(struct spaced *sp);
/* For sbx_template_users: the layers of sandbox directories in no table entry (moved
 * away, files not yet fetched by the new node). */
void sbx_move_users(struct spaced *sp, tpl_use_fn use, void *arg);
/* For sbx_known, on a cluster node: sandbox `id` (in no table entry) moved away with
 * credential rules and its files, `creds` among them, are still here; its network
 * record (the rules' secrets) stays until they go (sbx_move_tick), across a restart too:
 * the new node may still refuse the files and hand the sandbox back. */
bool sbx_move_holds_net(struct spaced *sp, const char *id);
/* A row loaded on a cluster node gets this node's run directory. */
void sbx_move_fix_run_dir(struct spaced *sp, struct store_sbx *rec);

/* ---- sbx_vol.c ---- */
/* Mounts the record's volumes that are not live on the current agent connection (called
 * when the agent is ready and before each refresh; earlier OPENs are served first, so
 * the mounts exist when the refresh answers). A failure is logged, not fatal. */
void sbx_vol_attach(struct sbx *s);
/* Ends every mount (before the agent connection is freed: the channels live on it). */
void sbx_vol_release(struct sbx *s);
/* sbx_vol_release, then agentc_free of the sandbox's agent (NULL afterwards). */
void sbx_agent_free(struct sbx *s);

#endif
