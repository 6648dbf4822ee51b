/* spaced: the daemon context shared by every module of the control plane.
 *
 * One `struct spaced` exists per process. main.c builds it (options, store, auth, ops
 * engine, sandbox table, templates, HTTP server, router), calls every module's route
 * registration, runs the libevent loop and tears everything down in reverse order.
 * Every module receives it as its first argument, and every piece of daemon state hangs
 * off it (route contexts through router_on_shutdown): no module keeps state in a static.
 * What statics remain are constants, facts of the host probed once (the accelerator, the
 * TSC frequency: vm_start.c) and log-once flags; `scripts/check-statics.sh` lists them.
 *
 * Threading: the whole control plane runs on `base`, one thread. Store calls are
 * synchronous (SQLite in WAL mode; each call is a few hundred microseconds) and are made
 * from the loop.
 *
 * Route registration (all called from main.c, in this order, after the core modules are
 * up; each module registers its own paths on the router and keeps `sp`):
 *     void routes_health_register(struct router *, struct spaced *);     healthz, metrics
 *     void routes_keys_register(struct router *, struct spaced *);       /v1/keys
 *     void routes_sandboxes_register(struct router *, struct spaced *);  /v1/sandboxes...
 *     void routes_ops_register(struct router *, struct spaced *);        /v1/operations...
 *     void routes_templates_register(struct router *, struct spaced *);  /v1/templates...
 *     void routes_sessions_register(struct router *, struct spaced *);   sessions
 *     void routes_files_register(struct router *, struct spaced *);      files
 *     void routes_network_register(struct router *, struct spaced *);    network, credentials
 *     void routes_ports_register(struct router *, struct spaced *);      sandbox ports
 *     void routes_quota_register(struct router *, struct spaced *);      /v1/quota, tenants' quotas
 *     void routes_volumes_register(struct router *, struct spaced *);    /v1/volumes
 *     void routes_events_register(struct router *, struct spaced *);     /v1/events (SSE)
 *     void e2b_register(struct router *, struct spaced *);               E2B compatibility
 * (routes.h and e2b.h declare them), preceded by routes_ratelimit_register, the first hook.
 *
 * A route handler that acts on a sandbox does, in this order:
 *     struct auth_principal who;
 *     if (!auth_require(sp, req, &who)) return;          401 already sent (auth.h)
 *     struct sbx *s = sbx_find(sp, who.tenant, id);      NULL -> reply 404 (sbx.h)
 *     struct agentc *a = routes_require_agent(req, s);   NULL -> 409/503 already sent
 * and reports lifecycle changes through sbx_submit() (sbx.h, an op of the engine op.h),
 * never by touching the VM. */
#ifndef SPACE_SPACED_H
#define SPACE_SPACED_H

#include <stdarg.h>
#include <stdint.h>

#include "daemon/store/store.h"

struct event_base;
struct router;
struct store;
struct auth;
struct op_engine;
struct sbx_table;
struct tpl_registry;
struct metrics;
struct hostload;
struct sbx_pools;
struct cluster;
struct e2b;
struct vm_jailer;
struct net_spaced;

/* Command-line options and the environment variables spaced reads (main.c fills them
 * once at start; strings point into argv, environ or literals). No module calls getenv:
 * what a module needs from the environment is here, documented in main.c's usage. */
struct spaced_opts {
    const char *listen;    /* "ADDR:PORT", default 127.0.0.1:7070 */
    const char *data_dir;  /* store, admin.key, per-sandbox dirs; default /var/lib/space */
    const char *store_url; /* --store / SPACE_STORE_URL: PostgreSQL URL or SQLite path;
                              NULL = SQLite at <data_dir>/space.db */
    int role;              /* enum cluster_role (cluster/cluster.h), default all */
    const char *node_id;   /* --node-id: this node daemon's id (role node) */
    const char *advertise; /* --advertise: URL the control role reaches this node at */
    const char *node_token;/* SPACE_NODE_TOKEN: shared secret of control and nodes */
    unsigned node_vcpus;   /* --capacity-vcpus / --capacity-mem: what a node offers */
    unsigned node_memory_mib; /* (default: the host's CPUs and memory) */
    const char *guest_dir; /* vmlinux, initramfs.cpio, templates/<name>/ */
    const char *console_dir; /* the web console's files (console/console.h) */
    int accel;             /* enum vm_accel (vm.h) */
    unsigned pool;         /* warm pool size per template (0 disables) */
    unsigned pool_budget_mib; /* guest memory all warm pools may hold (0: fixed --pool) */
    const char *qemu;      /* QEMU binary override (SPACE_QEMU), NULL = from PATH */
    int jail;              /* 1: run QEMU jailed (default; required), 0: --no-jail
                              (development only), see jail/jail.h */
    const char *jail_uids; /* --jail-uids BASE:COUNT, NULL = the default range */
    double rate;           /* API requests per second per client (api/routes_ratelimit.c);
                              0 disables rate limiting */
    double burst;          /* requests a client may make at once above the rate */
    unsigned conns_per_client; /* --max-conns-per-client: open connections one address
                              may hold on the API port and on the sandbox-port listener
                              (default 128, role node 0; 0 = no cap) */
    unsigned proxy_idle_s; /* --proxy-idle-timeout: piped (upgraded / port-listener)
                              connections idle both ways this long are closed (600; 0 = never) */
    struct store_quota_vals quota; /* --quota-*: per-tenant limits where a tenant's own
                              quota says "default" (quota/quota.h); 0 = unlimited */
    /* From the environment only (an empty value counts as unset): */
    const char *gateway;   /* SPACE_GATEWAY: space-gateway binary; NULL = beside spaced */
    const char *gateway_args; /* SPACE_GATEWAY_ARGS: extra gateway arguments, split on
                              spaces (net/net_spaced.c); NULL = none */
    const char *qemu_shim; /* SPACE_QEMU_SHIM: space-qemu-shim.so; NULL = beside spaced */
    const char *e2b_domain; /* SPACE_E2B_DOMAIN: the domain E2B getHost() names; NULL = none */
    const char *e2b_port_listen; /* SPACE_E2B_PORT_LISTEN: ADDR:PORT of the E2B sandbox-port
                              listener (e2b/e2b_portlisten.c); NULL = no listener */
    const char *public_url; /* SPACE_PUBLIC_URL: scheme://host[:port] clients reach spaced at,
                              for links spaced hands out; NULL = http:// and the request's Host */
    const char *test_vm_sig; /* SPACE_TEST_VM_SIG: tests only, this node's VM runtime
                              signature instead of the computed one (vm/vm_sig.h: stands
                              in for another QEMU release on one machine); NULL = computed */
};

/* Backoff for writes retried while the store is down (the op engine's outcomes, the
 * sandbox records): each failed attempt doubles the wait before the next one, from
 * SPACED_RETRY_MIN_MS up to SPACED_RETRY_MAX_MS; a success ends it. Zeroed = no wait.
 *
 * Order: records an operation's outcome describes (a sandbox's state) are stored before
 * that outcome, so nobody reads "succeeded" next to a stale record. The modules owning
 * such records count theirs that wait for the store in `first` (spaced_retry_mark), and
 * the op engine writes no operation row while it is non-zero: the backoff alone cannot
 * order them, as it may run out between the tick's sandbox pass and its op pass, or a
 * success elsewhere may end it before the tick has written the records. */
#define SPACED_RETRY_MIN_MS 500
#define SPACED_RETRY_MAX_MS 4000
struct spaced_retry {
    int64_t next_ms;  /* no attempt before this wall-clock time */
    int64_t wait_ms;  /* the last wait, 0 after a success */
    unsigned first;   /* refused records to store before any operation row */
};

struct spaced {
    struct event_base *base;   /* the one event loop */
    struct spaced_opts opt;    /* as given on the command line */
    struct store *store;       /* durable state (store.h) */
    struct auth *auth;         /* API keys and signed tokens (auth.h) */
    struct op_engine *ops;     /* operations engine (op.h) */
    /* One backoff for every write the store refused (operation rows, sandbox records):
     * retried together from the tick, sandbox records first, so a sandbox's state is
     * stored before its operation's outcome. */
    struct spaced_retry store_retry;
    struct sbx_table *sbx;     /* live sandboxes by id (sbx.h) */
    struct tpl_registry *tpl;  /* templates found under guest_dir and in the store */
    struct metrics *metrics;   /* Prometheus counters (metrics.h) */
    struct hostload *hostload; /* this host's measured load (metrics/hostload.h) */
    struct sbx_pools *pools;   /* warm pools per clone shape (sandbox/sbx_pool.h) */
    struct router *router;     /* HTTP routes (http/router.h) */
    struct cluster *cluster;   /* multi-node role state (cluster/cluster.h), NULL for all */
    struct net_spaced *net;    /* sandbox networking and the gateway (net/net.h), set up
                                  on first use */
    struct vm_jailer *jailer;  /* the jail every QEMU starts under (jail/jail.h, vm.h);
                                  NULL when the role starts no VMs */
    struct e2b *e2b;           /* E2B API and sandbox-port pipes (e2b/e2b.h), NULL when the
                                  role runs no sandboxes */
    int64_t started_ms;        /* wall clock at start, for /healthz uptime */
    /* This node's VM runtime signature (vm/vm_sig.h), computed once at start by the roles
     * that run VMs: recorded with every saved VM state, compared before one is loaded,
     * reported in the node's heartbeat. "" = unknown (the control role; a failed probe). */
    char runtime[STORE_RUNTIME_MAX];
    /* The byte charges of the volume uploads running now, one per tenant
     * (volume/vol_quota.c); each upload releases its own. */
    struct vol_charge *vol_charges;
    struct vol_share *vol_shares; /* volume/vol_share.h: a budget per tenant with live mounts */
    /* The id of a live sandbox of `tenant` that mounts volume `name` (written to
     * id[idlen]), false if none: vol_delete asks before deleting (volume/vol.h
     * vol_set_users; main.c registers the sandbox table's answer). NULL: none. */
    bool (*vol_user)(struct spaced *sp, const char *tenant, const char *name, char *id,
                     size_t idlen);
};

/* Errors, one convention in src/daemon:
 *   - what reaches an API client: `struct spaced_err *err` (below), filled by the module
 *     that knows what went wrong;
 *   - a failure told as text only: the last two parameters `char *err, size_t errlen`;
 *   - a failure told as a code and a text (vm/: enum vm_error): `int *err, char *msg,
 *     size_t msglen`.
 * The text is one sentence for a human that names the offending value. */

/* An error travelling to the API edge: HTTP status, stable code, human message.
 * Filled by the module that knows what went wrong; route handlers send it as
 * {"error":{"code":..., "message":...}}. */
struct spaced_err {
    int status;        /* HTTP status (400, 404, 409, 422, 500, 503, ...) */
    char code[48];     /* stable snake_case identifier, e.g. "invalid_state" */
    char message[320]; /* one sentence for a human, names the offending value/state */
};

/* Fills err (if not NULL) and returns -1, so callers can `return spaced_err_set(...)`. */
int spaced_err_set(struct spaced_err *err, int status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* The store could not be read or written while doing `what`: 503 "store_unavailable"
 * with the store's message (a client retries; nothing it sent was wrong). Returns -1. */
int spaced_err_store(struct spaced_err *err, struct store *st, const char *what);

/* Milliseconds since the Unix epoch (wall clock, what the store records). */
int64_t spaced_now_ms(void);

bool spaced_retry_due(const struct spaced_retry *r);
void spaced_retry_failed(struct spaced_retry *r);
void spaced_retry_ok(struct spaced_retry *r);
/* Sets *unsaved (the flag of one record counted in r->first) and keeps the count. */
void spaced_retry_mark(struct spaced_retry *r, bool *unsaved, bool now_unsaved);
/* Whether an operation row may be written now: the backoff has run out and no record
 * that comes first waits. */
bool spaced_retry_ops_due(const struct spaced_retry *r);

/* rm -rf of path: no symlink followed, no mount point crossed; failures are logged
 * (event=cleanup), never fatal. A missing path is not an error. */
void spaced_rm_rf(const char *path);
/* mkdir -p with mode 0700 for every directory it creates. Returns 0 or -1 (errno). */
int spaced_mkdir_p(const char *path);

/* Fills out with `prefix` followed by `nhex` random lowercase hex digits from the
 * CSPRNG (out must hold strlen(prefix) + nhex + 1). Returns 0, or -1 if RAND failed. */
int spaced_random_id(char *out, const char *prefix, unsigned nhex);

/* Formats ms since the epoch as RFC 3339 UTC with milliseconds
 * ("2026-11-30T04:55:00.123Z") into out[32]. Returns out. */
const char *spaced_fmt_time(int64_t ms, char out[32]);

#endif
