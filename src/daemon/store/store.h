/* store: durable state of the control plane behind a backend-neutral interface.
 *
 * Backends, chosen per handle by store_open():
 *   - SQLite in WAL mode (store_sqlite.c), the embedded default: a file path.
 *   - PostgreSQL (store_pg.c, libpq), for control replicas and nodes sharing one
 *     database: a libpq connection string, URI or key=value form ("postgres://user@host/db",
 *     "postgresql:///space?host=/run/pg", "host=db dbname=space").
 * Both run the same statements (store.c, through the driver table of store_backend.h):
 * plain rows, ids chosen by the caller (no autoincrement), times as int64 Unix
 * milliseconds, JSON documents stored as text (the store never looks inside them except
 * where stated), explicit transactions and keyset pagination (ORDER BY id, `id > cursor`,
 * bytewise order in both). No backend-specific SQL leaks out.
 *
 * Schema: created or upgraded at open. Migrations are numbered and recorded in the table
 * space_migrations, applied in one transaction under a lock (SQLite: BEGIN IMMEDIATE;
 * PostgreSQL: a transaction-scoped advisory lock), so replicas starting together apply
 * each one exactly once. A database already upgraded by a newer spaced is refused.
 *
 * Durability: a call that returns 0 has committed (or, inside store_begin/store_commit,
 * the commit has). SQLite runs with synchronous=FULL; PostgreSQL commits with the
 * server's synchronous_commit (default on: flushed to its WAL). Either way a SIGKILL of
 * spaced (or, for SQLite, power loss) after a successful commit loses nothing.
 * Exception: SQLite writes session rows (store_session_*), op progress and the running
 * state (store_op_put_lazy) and a claimed VM's run dir (store_sbx_put_lazy) without an
 * fsync (WAL with synchronous=NORMAL): a SIGKILL of spaced still loses none of them, an
 * OS crash or power loss may lose the last ones, but such a crash also ends every VM and
 * so every process a session row or run dir describes; an op's progress is cosmetic and
 * `running` promises nothing (after a restart a pending or running op is carried out
 * alike); outcomes stay durable, and their commit syncs the WAL before them.
 *
 * PostgreSQL differences a caller can observe:
 *   - After a failed statement inside store_begin/store_commit, PostgreSQL has aborted
 *     the transaction: every later statement fails until store_rollback (the op engine
 *     already rolls back on any failure).
 *   - store_begin starts a READ COMMITTED transaction. Reads lock no rows, so two
 *     replicas that read-modify-write the same row race (last writer wins), as two
 *     threads would with SQLite; see docs/multinode.md for what is replica-safe.
 *   - Every call blocks on a round trip to the server (the caller's event loop waits),
 *     and a query's rows are fetched whole before the first callback.
 *   - A broken connection is re-established at the start of the next call outside a
 *     transaction; a statement is never re-sent after a failure (its effect is unknown),
 *     and a loss inside a transaction is reported, never papered over.
 *
 * Ownership and threading: record structs are caller-owned; char * fields inside a record
 * filled by the store are heap strings owned by the record and released with the
 * matching store_*_clear(). Fixed-size arrays hold ids and short enums. One handle is one
 * connection, used by one thread. A row callback (the fn of the each and list calls) may call the
 * store on the same handle.
 *
 * Errors: functions return 0 on success, STORE_NOTFOUND when a looked-up row is absent,
 * STORE_CONFLICT on a uniqueness violation, -1 on any other failure; store_errmsg() then
 * describes the last failure (valid until the next call). */
#ifndef SPACE_STORE_H
#define SPACE_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define STORE_NOTFOUND 1
#define STORE_CONFLICT 2
#define STORE_FULL 3 /* store_resv_take: the node has no room (or takes no new sandbox) */
#define STORE_MOVED 4 /* store_sbx_put: the row names another node now; nothing written */
#define STORE_IN_USE 5 /* store_tpl_delete_unused: sandboxes or builds use the template */
#define STORE_NOT_READY 6 /* store_tpl_delete_unused: the template is being built */

#define STORE_ID_MAX 64     /* ids: sandbox, op, key, tenant, session, template names */
#define STORE_STATE_MAX 24  /* enum names stored as text ("running", "succeeded") */

struct store;

/* True when `url` names a PostgreSQL database ("postgres://", "postgresql://" or a
 * key=value string with "dbname=" or "host="), false for a file path. */
bool store_url_is_pg(const char *url);

/* Opens the store: PostgreSQL when store_url_is_pg(url_or_path), else the SQLite file
 * at that path (created if needed). Creates or upgrades the schema. Returns NULL with a
 * message in err on failure (PostgreSQL: "cannot connect to PostgreSQL: ..." with
 * libpq's reason, which names host and user, never the password). */
struct store *store_open(const char *url_or_path, char *err, size_t errlen);
void store_close(struct store *st);
const char *store_errmsg(struct store *st);
/* "sqlite" or "postgresql". */
const char *store_backend_name(const struct store *st);
/* One trivial query: 0 when the store answers now, -1 (store_errmsg says why) when not. */
int store_ping(struct store *st);
/* Upkeep, called often (the op engine's tick); cheap when there is nothing to do. SQLite:
 * takes the disk reserve again once the data dir has room (store_sqlite.c). */
void store_tick(struct store *st);
/* NULL while the store's disk is fine; else what is wrong with it ("full: the store's
 * reserve ... is in use"), in buf. PostgreSQL's disk is the database server's: NULL. */
const char *store_disk(struct store *st, char *buf, size_t cap);

/* Transactions: group several writes into one atomic commit ("intent first": the
 * sandbox's desired state and the operation row land together). Not nestable. */
int store_begin(struct store *st);
int store_commit(struct store *st);
void store_rollback(struct store *st);

/* ---- tenants and API keys ------------------------------------------------------------- */

struct store_tenant {
    char id[STORE_ID_MAX];   /* "admin" or "tn" + hex */
    char name[128];          /* display name given by the admin */
    int64_t created_ms;
};

int store_tenant_put(struct store *st, const struct store_tenant *t); /* insert; CONFLICT if id/name taken */
int store_tenant_get(struct store *st, const char *id, struct store_tenant *out);
int store_tenant_by_name(struct store *st, const char *name, struct store_tenant *out);

struct store_key {
    char id[STORE_ID_MAX];     /* public key id ("ak" + hex), shown in listings */
    char tenant[STORE_ID_MAX]; /* owning tenant */
    char hash[65];             /* hex SHA-256 of the secret; the secret is never stored */
    char prefix[16];           /* first characters of the secret, to recognise it */
    bool admin;                /* may manage keys */
    int64_t created_ms;
    int64_t expires_ms;        /* 0 = never */
    int64_t revoked_ms;        /* 0 = active */
};

int store_key_put(struct store *st, const struct store_key *k);
int store_key_by_hash(struct store *st, const char *hash, struct store_key *out);
int store_key_get(struct store *st, const char *id, struct store_key *out);
int store_key_revoke(struct store *st, const char *id, int64_t now_ms);
/* Calls fn for every key (revoked included), ordered by id; fn returns nonzero to stop. */
int store_key_each(struct store *st, int (*fn)(const struct store_key *, void *), void *arg);

/* ---- sandboxes ------------------------------------------------------------------------ */

struct store_sbx {
    char id[STORE_ID_MAX];
    char tenant[STORE_ID_MAX];
    char template_name[STORE_ID_MAX];
    unsigned vcpus;
    unsigned memory_mib;
    char *env_json;        /* {"NAME":"value",...} */
    char *metadata_json;   /* {"key":"value",...}, filterable by store_sbx_list */
    char *network_json;    /* network policy as given ({"mode":"none"|"allowlist"|"open",...}) */
    int64_t timeout_s;     /* idle lifetime from creation / last wake; 0 = none */
    int64_t deadline_ms;   /* when the timeout fires; 0 = none */
    char on_timeout[16];   /* "suspend" | "delete" */
    char desired[STORE_STATE_MAX]; /* where the reconciler must bring it (sbx.h names) */
    char state[STORE_STATE_MAX];   /* what it is now (sbx.h names) */
    char *failure;         /* why it failed (state "failed"), NULL otherwise */
    char run_dir[256];     /* per-sandbox directory under data_dir */
    int64_t created_ms;
    int64_t updated_ms;
    char node[STORE_ID_MAX]; /* id of the node daemon that runs it; "" = single host */
    bool private_ports;    /* port requests need the sandbox's traffic token */
    unsigned disk_mib;     /* its disk's virtual size, counted against the disk quota
                              (0 for sandboxes created before migration 4) */
    bool auto_resume;      /* an API call needing its VM wakes it when paused/suspended
                              (sandbox/sbx_wake.c; migration 8) */
    char source[STORE_ID_MAX]; /* the capture a fork restores from (sbx_fork.c), "" for a
                              sandbox made from its template (migration 9) */
    char *volumes_json;    /* [{"name","path"}] volumes it mounts, NULL = none (sandbox/
                              sbx_vol.c; migration 10) */
    char *parts;           /* a suspended or stopped sandbox's files, hashed for a move to
                              another node (sandbox/sbx_move.c: JSON with the node holding
                              them), NULL = none (migration 16) */
};

void store_sbx_clear(struct store_sbx *s); /* frees the heap fields, zeroes the record */

/* Insert or replace; a row that exists is replaced only when it names the same node as
 * s (s->node): otherwise nothing is written and STORE_MOVED is returned (a node whose
 * sandbox was moved away never writes it back, sandbox/sbx_move.c). */
int store_sbx_put(struct store *st, const struct store_sbx *s);
/* The same without an fsync (see Durability above): for what only describes a running
 * VM (a pooled VM's run dir at claim), which a host crash ends along with the VM and
 * which the sandbox's next state write makes durable anyway. */
int store_sbx_put_lazy(struct store *st, const struct store_sbx *s);
int store_sbx_get(struct store *st, const char *id, struct store_sbx *out);
/* Moves sandbox id from node `from` to node `to` in one conditional update, and sets its
 * parts to new_parts (NULL: none): only while its row names `from`, its parts are
 * exactly `parts`, and it is suspended or stopped with no verb queued (desired = state).
 * 0 when moved, STORE_NOTFOUND when any condition failed (nothing written), -1. */
int store_sbx_move(struct store *st, const char *id, const char *from, const char *to, const char *parts,
                   const char *new_parts, int64_t now_ms);

struct store_sbx_filter {
    const char *tenant;        /* required: tenancy is enforced in the store query */
    const char *state;         /* NULL = any except "deleted" */
    const char *template_name; /* NULL = any */
    const char *metadata_json; /* {"k":"v",...}: every pair must match; NULL = any */
    const char *after_id;      /* keyset cursor: ids strictly greater; NULL = from start */
    unsigned limit;            /* 1..1000 */
};

/* Calls fn for each matching sandbox in id order, at most f->limit times. *more is set
 * when further rows match beyond the limit (the next cursor is the last id seen). */
int store_sbx_list(struct store *st, const struct store_sbx_filter *f,
                   int (*fn)(const struct store_sbx *, void *), void *arg, bool *more);
/* Every sandbox not in state "deleted", any tenant (startup recovery, reconciler). */
int store_sbx_each_live(struct store *st, int (*fn)(const struct store_sbx *, void *), void *arg);
/* Counts sandboxes per state (for /metrics): fn(state, count). */
int store_sbx_count_by_state(struct store *st, void (*fn)(const char *state, int64_t n, void *), void *arg);

/* ---- operations ----------------------------------------------------------------------- */

struct store_op {
    char id[STORE_ID_MAX];
    char tenant[STORE_ID_MAX];
    char kind[24];              /* op.h names: "create", "delete", "template_build", ... */
    char target[STORE_ID_MAX];  /* sandbox id, or template name for template_build */
    char state[STORE_STATE_MAX];/* "pending" | "running" | "succeeded" | "failed" | "canceled" */
    char error_code[48];        /* when failed/canceled */
    char *error_message;        /* when failed/canceled; heap, may be NULL */
    int progress;               /* 0..100 */
    char *detail;               /* current step, human text; heap, may be NULL */
    char idem_key[128];         /* Idempotency-Key of the creating request, "" if none */
    char body_hash[65];         /* hex SHA-256 of that request's body (422 on reuse) */
    int64_t created_ms;
    int64_t started_ms;         /* 0 until running */
    int64_t finished_ms;        /* 0 until terminal */
    int64_t seq;                /* submission order among ops of one created_ms (op_engine) */
};

void store_op_clear(struct store_op *o);

int store_op_put(struct store *st, const struct store_op *o);      /* insert or replace */
/* The same without an fsync (see Durability above): for a change of progress/detail or
 * to `running` only, which the op's next state write makes durable anyway. */
int store_op_put_lazy(struct store *st, const struct store_op *o);
int store_op_get(struct store *st, const char *id, struct store_op *out);
/* Same tenant + idempotency key -> that op (STORE_NOTFOUND if none). */
int store_op_by_idem(struct store *st, const char *tenant, const char *key, struct store_op *out);
/* Every op not terminal (pending/running), in submission order (created_ms, seq, id). */
int store_op_each_open(struct store *st, int (*fn)(const struct store_op *, void *), void *arg);
/* Ops of one tenant, newest first (at most limit). */
int store_op_list(struct store *st, const char *tenant, const char *target, unsigned limit,
                  int (*fn)(const struct store_op *, void *), void *arg);

/* ---- sessions (rows owned by the sessions module) ------------------------------------- */

struct store_session {
    char id[STORE_ID_MAX];
    char tenant[STORE_ID_MAX];
    char sandbox[STORE_ID_MAX];
    char *spec_json;        /* how it was created (cmd, args, env, cwd, pty...) */
    char state[STORE_STATE_MAX]; /* sessions module's names */
    int exit_code;          /* valid when state says exited; -1 otherwise */
    int exit_signal;        /* 0 if none */
    int64_t created_ms;
    int64_t updated_ms;
};

void store_session_clear(struct store_session *s);
int store_session_put(struct store *st, const struct store_session *s); /* insert or replace */
int store_session_get(struct store *st, const char *id, struct store_session *out);
int store_session_delete(struct store *st, const char *id);
/* Sessions of one sandbox in id order. */
int store_session_each(struct store *st, const char *sandbox,
                       int (*fn)(const struct store_session *, void *), void *arg);

/* ---- templates ------------------------------------------------------------------------ */

#define STORE_NODES_MAX 512

struct store_tpl {
    char name[STORE_ID_MAX];   /* unique; "base", "python" are built in */
    char tenant[STORE_ID_MAX]; /* "" for built-ins visible to everyone */
    char state[STORE_STATE_MAX]; /* "building" | "ready" | "failed" */
    char *spec_json;           /* build spec (may be NULL for built-ins) */
    char *failure;             /* why the build failed, NULL otherwise */
    char dir[256];             /* directory holding rootfs.ext4 / template.json / snapshot */
    int64_t created_ms;
    int64_t updated_ms;
    char nodes[STORE_NODES_MAX]; /* cluster: ids of the nodes holding the built image, ','
                                  * between them, the builder first; "" on a single host */
    char digest[65];           /* SHA-256 (hex) of the built rootfs.ext4; "" until ready */
    int64_t size_bytes;        /* its size in bytes */
    char *meta;                /* its template.json (owned), NULL until ready */
};

void store_tpl_clear(struct store_tpl *t);
int store_tpl_put(struct store *st, const struct store_tpl *t);   /* insert or replace */
int store_tpl_get(struct store *st, const char *name, struct store_tpl *out);
int store_tpl_each(struct store *st, int (*fn)(const struct store_tpl *, void *), void *arg);

/* Deleting a template races with creating sandboxes or building templates from it on
 * any node (docs/multinode.md, "Templates that travel between nodes"): both sides take
 * the template row's lock, the delete exclusively and a create or build shared, so one
 * of them always sees the other's commit. */

/* What keeps a template from being deleted. */
struct store_tpl_users {
    int64_t sandboxes;           /* made from it, in any state but deleted, on any node */
    int64_t builds;              /* templates being built with it as their base */
    char nodes[STORE_NODES_MAX]; /* the nodes of those sandboxes, ',' between ("" = none
                                  * named: a single host) */
};
/* In one transaction (not inside another): locks template `name`'s row (PostgreSQL:
 * SELECT ... FOR UPDATE; SQLite: BEGIN IMMEDIATE), counts the sandboxes and builds
 * using it (a build's base is read from its spec, the only place it is kept) and, only
 * when there are none, sets its state to "deleted" (failure cleared, updated_ms =
 * now_ms). A ready or failed template can be deleted. Returns 0 (deleted), STORE_IN_USE
 * (*users filled when not NULL, nothing written), STORE_NOTFOUND (no row, another
 * tenant's, or deleted already), STORE_NOT_READY (being built) or -1. */
int store_tpl_delete_unused(struct store *st, const char *name, const char *tenant, int64_t now_ms,
                            struct store_tpl_users *users);
/* Inside the transaction that writes a sandbox or a build made from template `name`,
 * before committing it: 0 while the template's row is ready, its lock then shared until
 * commit or rollback (PostgreSQL: FOR SHARE; SQLite: BEGIN IMMEDIATE's write lock), so a
 * concurrent store_tpl_delete_unused waits and then counts what this transaction wrote;
 * STORE_NOTFOUND when the row is absent, deleted or not ready (a delete committed
 * first); -1. */
int store_tpl_hold(struct store *st, const char *name);

/* Which node holds a template build that has no templates row yet: an E2B build is
 * requested (POST /v3/templates), its files uploaded and then started in separate calls,
 * all of which must reach the node the first one was placed on (cluster/cluster_e2btpl.c).
 * One row per tenant and name: a new request for the name replaces it. */
struct store_tpl_route {
    char id[2 * STORE_ID_MAX];  /* "<tenant>/<name>", set by store_tpl_route_put */
    char tenant[STORE_ID_MAX];
    char name[STORE_ID_MAX];
    char node[STORE_ID_MAX];
    int64_t created_ms;
};
int store_tpl_route_put(struct store *st, const struct store_tpl_route *r); /* insert or replace */
/* STORE_NOTFOUND when the tenant has no route for name. */
int store_tpl_route_get(struct store *st, const char *tenant, const char *name, struct store_tpl_route *out);
/* Removes the routes made before before_ms. */
int store_tpl_route_expire(struct store *st, int64_t before_ms);

/* ---- quotas (per tenant) ------------------------------------------------------------- */

/* One value per quota resource: limits, or a tenant's usage. */
struct store_quota_vals {
    int64_t sandboxes;  /* sandboxes not deleted (any state: failed and stopped keep a disk) */
    int64_t vcpus;      /* their vCPUs, summed */
    int64_t memory_mib; /* their memory, summed */
    int64_t disk_mib;   /* their disks' virtual sizes, summed */
    int64_t templates;  /* templates built by the tenant, not deleted (failed ones included) */
    int64_t snapshots;  /* the tenant's snapshots (any state) */
    int64_t volume_mib; /* its volumes' file bytes, in MiB rounded up: measured on disk by
                           volume/vol_quota.c, not here (store_quota_usage leaves it 0) */
};

#define STORE_QUOTA_DEFAULT (-1) /* a limit that follows the daemon's --quota-* default */

/* A tenant's limits: each STORE_QUOTA_DEFAULT, 0 (unlimited) or a positive limit. */
struct store_quota {
    char tenant[STORE_ID_MAX];
    struct store_quota_vals limit;
    int64_t updated_ms;
};

int store_quota_put(struct store *st, const struct store_quota *q); /* insert or replace */
/* STORE_NOTFOUND when the tenant has no row (every limit is then the default). */
int store_quota_get(struct store *st, const char *tenant, struct store_quota *out);
/* Inside a transaction, before reading usage: serialises the quota checks of one tenant
 * across everyone sharing the database until commit/rollback (PostgreSQL: a row lock on
 * the tenant's quota row, created with default limits if missing; SQLite: the write
 * lock of BEGIN IMMEDIATE already does). Limits are left unchanged. */
int store_quota_lock(struct store *st, const char *tenant);
/* The tenant's usage now (see the fields of store_quota_vals). */
int store_quota_usage(struct store *st, const char *tenant, struct store_quota_vals *out);

/* ---- snapshots (a running sandbox captured for later creates: sbx_snap.c) -------------- */

#define STORE_SNAP_PARTS_MAX 4096

struct store_snap {
    char id[STORE_ID_MAX];       /* "sn" + 16 hex; also its capture directory's name */
    char tenant[STORE_ID_MAX];
    char name[STORE_ID_MAX];     /* optional, unique per tenant; "" = none */
    char source[STORE_ID_MAX];   /* the sandbox it was taken of (may be deleted since) */
    char template_name[STORE_ID_MAX]; /* that sandbox's template (env, user, start) */
    unsigned vcpus;              /* the shape a create from it gets */
    unsigned memory_mib;
    bool nic;                    /* taken with a network device (policy not "none") */
    char state[STORE_STATE_MAX]; /* "creating" | "ready" */
    int64_t size_bytes;          /* its files on disk (memory image + disk layer) */
    int64_t created_ms;
    char node[STORE_ID_MAX];     /* the node holding its files ("" = a single host) */
    char parts[STORE_SNAP_PARTS_MAX]; /* what another node fetches (sbx_travel.c): JSON, "" = not hashed */
};

int store_snap_put(struct store *st, const struct store_snap *s); /* insert or replace */
int store_snap_get(struct store *st, const char *id, struct store_snap *out);
/* The tenant's snapshot whose id or name is id_or_name; STORE_NOTFOUND if none. */
int store_snap_find(struct store *st, const char *tenant, const char *id_or_name,
                    struct store_snap *out);
/* STORE_NOTFOUND for an unknown id. */
int store_snap_delete(struct store *st, const char *id);
/* The tenant's snapshots in id order. */
int store_snap_each(struct store *st, const char *tenant,
                    int (*fn)(const struct store_snap *, void *), void *arg);

/* ---- nodes (multi-node roles: src/daemon/cluster) ------------------------------------- */

/* Bytes of a node's VM runtime signature with its NUL (vm/vm_sig.h's VM_SIG_MAX; main.c
 * checks that they agree). */
#define STORE_RUNTIME_MAX 160
struct store_node {
    char id[STORE_ID_MAX]; /* --node-id of the node daemon */
    char url[256];         /* where the control plane reaches its API ("http://host:port") */
    unsigned vcpus;        /* capacity offered to sandboxes */
    unsigned memory_mib;
    int64_t heartbeat_ms;  /* last report; a node silent for long is not placed on */
    int64_t started_ms;    /* when this node daemon started */
    bool draining;         /* set by an operator: placement skips it (its heartbeat
                              never changes this) */
    char shapes[1024];     /* what it has ready, from its heartbeat: "tpl/VxM:W,..." one
                              entry per template snapshot (vCPUs x MiB) with W warm clones
                              ready; complete entries only (cluster.h) */
    char host_load[512];   /* the host's measured load at its heartbeat: JSON text of
                              metrics/hostload.h, "" before the first (or unreadable) */
    char runtime[STORE_RUNTIME_MAX]; /* its VM runtime signature (vm/vm_sig.h: QEMU
                              release, accelerator, CPU), from its heartbeat: a saved VM
                              state moves only to a node with the same; "" = unknown (a
                              node of an earlier version, or its probe failed) */
};

int store_node_put(struct store *st, const struct store_node *n); /* insert or replace */
int store_node_get(struct store *st, const char *id, struct store_node *out);
/* Marks a node draining or not; STORE_NOTFOUND for an unknown id. */
int store_node_set_draining(struct store *st, const char *id, bool draining);
/* Removes a node's row; STORE_NOTFOUND for an unknown id. */
int store_node_delete(struct store *st, const char *id);
/* Every node, in id order. */
int store_node_each(struct store *st, int (*fn)(const struct store_node *, void *), void *arg);

/* Capacity a node has given out: `used` sums its sandboxes in a state that holds a VM
 * (every state but suspended, stopped, deleted and failed), `reserved` the reservations
 * on it (creates a control daemon is forwarding there). */
struct store_node_use {
    int64_t used_vcpus, used_memory_mib;
    int64_t reserved_vcpus, reserved_memory_mib;
};
/* Every node with its use, in id order (one query: sums computed by the database). */
int store_node_usage(struct store *st,
                     int (*fn)(const struct store_node *, const struct store_node_use *, void *), void *arg);

/* A reservation of capacity on a node, made by a control daemon before it forwards a
 * create there and removed when the node has stored the sandbox's row (it counts
 * itself from then on) or the create failed. */
struct store_resv {
    char id[STORE_ID_MAX];   /* chosen by the caller ("rv" + hex) */
    char node[STORE_ID_MAX];
    unsigned vcpus;
    unsigned memory_mib;
    int64_t created_ms;
    bool resume;             /* for a sandbox already on the node whose VM comes back
                                (a node's own, sbx_resv.c): taken on a draining node
                                too, since the sandbox can run nowhere else */
};
/* Atomically reserves r's size on r->node if, counting every sandbox and reservation
 * there (store_node_use), it still fits the node's capacity, and the node is not
 * draining (unless r->resume) and reported at or after live_since_ms. Concurrent callers on any handle of
 * the database serialise on the node's row (PostgreSQL: a row lock held to commit;
 * SQLite: BEGIN IMMEDIATE), so two never both take the last room. Returns 0 (reserved),
 * STORE_FULL (no room, draining or silent: nothing written), STORE_NOTFOUND (no such
 * node) or -1. Not inside another transaction. */
int store_resv_take(struct store *st, const struct store_resv *r, int64_t live_since_ms);
/* Removes reservation id (absent: 0, it is gone either way). */
int store_resv_release(struct store *st, const char *id);
/* Removes node's reservations made before before_ms (a control daemon that died while
 * forwarding leaves them: the node's heartbeat clears them). *n (may be NULL) gets how
 * many. */
int store_resv_expire(struct store *st, const char *node, int64_t before_ms, int64_t *n);

#endif
