/* cluster: the multi-node roles of spaced (`--role=control|node`), sharing one
 * PostgreSQL store. See docs/multinode.md for the shape and what is not done yet.
 *
 *   all      (default) the single-host daemon: API, operations and VMs in one process.
 *   node     runs the sandboxes placed on it: the full single-host stack, except that
 *            it loads and reconciles only the sandboxes and operations whose row names
 *            it (sandboxes.node = --node-id), stamps its id on the sandboxes it creates,
 *            reports its capacity and a heartbeat every CLUSTER_HEARTBEAT_MS in the
 *            `nodes` table, and answers API requests only when they carry the internal
 *            shared secret (header X-Space-Node-Token = SPACE_NODE_TOKEN), i.e. when
 *            they come through a control daemon. /healthz and /metrics stay open.
 *   control  runs no VMs. Serves keys, health, metrics and listings (sandboxes,
 *            operations, templates) from the shared store; places a create
 *            (cluster_place.c: the best-scoring live node where it fits, its size
 *            reserved in the store first; 503 no_capacity if none) and forwards it there; forwards
 *            every per-sandbox request (/v1/sandboxes/{id}/..., sessions, files, attach
 *            streams) and per-operation request (/v1/operations/{id}/...) to the node
 *            that owns the sandbox, over HTTP with the shared secret. The node
 *            authenticates the client's own credentials (keys live in the shared store).
 *            GET /v1/nodes (admin key; every role) lists nodes with capacity and use. Template
 *            builds are placed like creates and forwarded (their logs and deletes go to
 *            the builder). The E2B API, envd and sandbox-port traffic are forwarded the
 *            same way (cluster_e2b.c); E2B's multi-call template builds to the node the
 *            build was placed on, recorded in the store (cluster_e2btpl.c).
 *
 * Capacity use of a node = vCPUs and memory of its sandboxes in any state that holds a
 * VM (every state except suspended, stopped, deleted, failed), plus the reservations of
 * the creates any control daemon is forwarding to it right now (their rows do not exist
 * yet; store_resv_take). A node's heartbeat also reports the template snapshots and warm
 * clones it has ready (store_node.shapes), and removes reservations on it that outlived
 * CLUSTER_RESV_TTL_MS (their control daemon died). A node is
 * live when its heartbeat is younger than CLUSTER_DEAD_MS; a node daemon stopping on
 * purpose zeroes its heartbeat. Requests for a sandbox on a node that is not live get
 * 503 node_down from the control daemon (its sandboxes are not moved).
 *
 * Layering: cluster/ sits above sandbox/ (it asks the sandbox table whether an op's
 * target is loaded here). The modules below know no role: main.c hands them this
 * module's answers (jail_resolve, sbx_set_owner). Prefix cluster_.
 *
 * Ownership: spaced owns `struct cluster` (sp->cluster), created by cluster_start and
 * freed by cluster_free. Everything runs on the event loop thread. */
#ifndef SPACE_CLUSTER_H
#define SPACE_CLUSTER_H

#include <stdbool.h>
#include <stddef.h>

#include "daemon/http/http.h"
#include "daemon/store/store.h"
#include "http_hdr.h"

struct spaced;

enum cluster_role { CLUSTER_ALL, CLUSTER_CONTROL, CLUSTER_NODE };

#define CLUSTER_HEARTBEAT_MS 2000
#define CLUSTER_DEAD_MS 10000
#define CLUSTER_TOKEN_HEADER HH_NODE_TOKEN_HEADER /* http_hdr.h: guest-facing hops strip it */
#define CLUSTER_NODE_HEADER "X-Space-Node" /* added to forwarded replies: who answered */
#define CLUSTER_TOKEN_MIN 16                /* shortest accepted SPACE_NODE_TOKEN */

/* "all" | "control" | "node" -> role; -1 for anything else. */
int cluster_role_parse(const char *name);
const char *cluster_role_name(int role);

/* Checks the options of sp->opt for its role (node id, advertised URL, token) and fills
 * defaults (capacity from the host). Returns 0, or -1 with a message in err. Call
 * before the store is opened. */
int cluster_check_opts(struct spaced *sp, char *err, size_t errlen);

/* Starts the role: control: the forwarding hook on sp->router (call before any other
 * route or hook is registered); every role: GET /v1/nodes. A node is not announced yet
 * (cluster_announce). Returns 0, or -1 with a message in err. */
int cluster_start(struct spaced *sp, char *err, size_t errlen);
/* A node's first heartbeat, then one per CLUSTER_HEARTBEAT_MS: call once spaced listens,
 * since a control places creates on a node as soon as its row says it is live (a node
 * that announced itself before listening had its first forwarded create refused). No-op
 * for the other roles. Returns 0, or -1 with a message in err when the store refuses the
 * node's row. */
int cluster_announce(struct spaced *sp, char *err, size_t errlen);
void cluster_free(struct spaced *sp);

/* Whether this process runs sandboxes (roles all and node): only then does main.c
 * jail QEMUs, load sandboxes, recover operations and fill warm pools. */
bool cluster_runs_sandboxes(const struct spaced *sp);
/* The node id to stamp on sandboxes this process creates ("" for role all; main.c gives
 * it to sbx_set_owner). */
const char *cluster_node_id(const struct spaced *sp);
/* Whether this process loads and reconciles the sandbox row rec (role all: every row;
 * node: rows naming it; control: none). An sbx_owner_fn (main.c: sbx_set_owner). */
bool cluster_owns_sbx(const struct spaced *sp, const struct store_sbx *rec);
/* Whether this process recovers the open operation op at start: role all: every one;
 * node: operations on sandboxes it loaded (never template builds: another node may be
 * running one); control: none. */
bool cluster_owns_op(struct spaced *sp, const struct store_op *op);

/* Which nodes are live, loaded once for a listing: every sandbox row with a node gets
 * "node_state" from it ("live", "down": no report for CLUSTER_DEAD_MS, "unknown": no
 * such node row). */
struct cluster_node_states {
    struct store_node *nodes; /* owned array */
    size_t n, cap;
    int64_t now_ms;
};
/* Fills st from the store (0), or -1 on a store error (st then empty). */
int cluster_node_states_load(struct spaced *sp, struct cluster_node_states *st);
/* The state of node id ("live" | "down" | "unknown"); NULL for "" (role all). */
const char *cluster_node_state(const struct cluster_node_states *st, const char *id);
void cluster_node_states_free(struct cluster_node_states *st);

/* The HTTP entry point for every role (http_server_new's dispatch, arg = sp): on a node,
 * refuses requests without the shared secret (403 forbidden) except /healthz and
 * /metrics; then router_dispatch. */
void cluster_dispatch(struct http_req *req, void *sp);

/* ---- internal to src/daemon/cluster ------------------------------------------------- */

struct cluster_resv;

/* Chooses the node of a request once its body has been read: returns 0 with *to filled
 * and optionally a reservation in *resv (released when the forwarded request ends), or
 * replies to req itself and returns -1. */
typedef int (*cluster_choose_fn)(struct spaced *sp, struct http_req *req, const char *body, size_t len,
                                 struct store_node *to, struct cluster_resv **resv);

/* Forwards req (method, target, headers, body) to a node's API (to->url, "http://
 * host:port"; or the node choose picks, when to is NULL) with the shared secret and
 * streams the node's reply back, adding X-Space-Node: <node id>. Replies 502
 * node_unreachable if the node cannot be reached. Finishes req in every case. */
void cluster_proxy(struct spaced *sp, struct http_req *req, const struct store_node *to,
                   cluster_choose_fn choose);
/* How a forwarded request differs from a plain API one (cluster_e2b.c): fields the
 * control sets in place of any the client sent, and the shape of the control's own
 * error replies (NULL: our API's, http_reply_error). */
#define CLUSTER_FWD_SET_MAX 2
#define CLUSTER_FWD_VALUE_MAX 272 /* an id, or a public URL: "https://" + a 255-byte host */
struct cluster_fwd {
    struct {
        const char *name;         /* static */
        char value[CLUSTER_FWD_VALUE_MAX];
    } set[CLUSTER_FWD_SET_MAX];
    unsigned nset;
    void (*error)(struct http_req *req, int status, const char *code, const char *message);
};
/* The control's own error reply, in the shape fwd asks for (NULL: our API's). */
void cluster_reply_fail(struct http_req *req, const struct cluster_fwd *fwd, int status,
                        const char *code, const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* cluster_proxy with fwd (NULL: as cluster_proxy). */
void cluster_proxy_fwd(struct spaced *sp, struct http_req *req, const struct store_node *to,
                       cluster_choose_fn choose, const struct cluster_fwd *fwd);
/* Forwards req to the node owning sandbox id of tenant (NULL: the node checks the
 * request's capability itself). Returns false, replying nothing, when the sandbox has
 * no row, belongs to another tenant or has no node (the caller answers as for a missing
 * id); true when it forwarded or replied (unknown or silent node: 502/503). */
bool cluster_forward_to_owner(struct spaced *sp, struct http_req *req, const char *id,
                              const char *tenant, const struct cluster_fwd *fwd);
/* Forwards req to the first live node of `nodes` (a template row's holders, the builder
 * first; ',' between ids) with fwd (NULL: as cluster_proxy); 503 node_down (in fwd's
 * shape) naming template `name` when none is live. */
void cluster_forward_to_holder(struct spaced *sp, struct http_req *req, const char *name, const char *nodes,
                               const struct cluster_fwd *fwd);
/* A create's template as the control sees it: a built-in's (guest dir) or a built one's
 * (its templates row: the shape its recorded template.json gives, and the nodes holding
 * its image into holders, cap bytes). False when neither exists (*t zeroed). */
struct tpl_info;
bool cluster_template_known(struct spaced *sp, const char *name, struct tpl_info *t, char *holders, size_t cap);
/* What a create asks placement for. */
struct cluster_want {
    char template_name[STORE_ID_MAX]; /* "" when the body names none (or is bad) */
    unsigned vcpus, memory_mib;
    char holders[STORE_NODES_MAX];    /* a built template's: the nodes holding its image */
    char runtime[STORE_RUNTIME_MAX];  /* a saved state's (a snapshot's, a suspended
                                         sandbox's): only nodes running this VM runtime
                                         (vm/vm_sig.h) take it; "" = any node */
};
/* Places a create: reserves its size on the best node (cluster_pick) and returns 0 with
 * the node and the reservation (released when the node's reply head arrives or the
 * forwarded request ends), or replies itself (503 no_node, 409 snapshot_incompatible
 * when w->runtime is set and no live undrained node runs it, 503 no_capacity naming the
 * largest free shape, 503 store_unavailable) and returns -1. */
int cluster_place(struct spaced *sp, struct http_req *req, const struct cluster_want *w,
                  const struct cluster_fwd *fwd, struct store_node *to, struct cluster_resv **resv);
/* Copies the path segment after `prefix` (up to '/' or the end) into id; false if the
 * path does not start with prefix or the segment is empty or too long. */
bool cluster_path_id(const char *path, const char *prefix, char *id, size_t cap);
/* The E2B side of the control role (cluster_e2b.c): registers its hook and the listings. */
int cluster_e2b_start(struct spaced *sp);
/* E2B's error reply (cluster_e2b.c): a cluster_fwd.error for E2B's routes. */
void cluster_e2b_error(struct http_req *req, int status, const char *code, const char *message);
/* E2B's template builder through the control (cluster_e2btpl.c): takes req when it is one
 * of the builder's calls (POST /v3/templates, /templates/{id}/..., /v2/templates/{id}/...,
 * except /templates/aliases/..., which the control answers from the store), answering
 * or forwarding it; false for any other request. */
bool cluster_e2btpl_route(struct spaced *sp, struct http_req *req);
/* Ends a reservation made by placement: removes its row (NULL accepted). */
void cluster_resv_release(struct spaced *sp, struct cluster_resv *r);

/* ---- placement (cluster_place.c) ----------------------------------------------------- */

/* Score weights: free capacity counts 0..1 (the smaller of the free vCPU and free memory
 * fractions left after the sandbox), a ready snapshot of the template at the asked shape
 * adds CLUSTER_SCORE_SNAPSHOT (a restore instead of a cold boot and a snapshot build), a
 * ready warm clone adds CLUSTER_SCORE_WARM (a claim: no restore at all). So a node with a
 * warm clone wins over an emptier one unless it is less than half as free. */
#define CLUSTER_SCORE_SNAPSHOT 0.25
#define CLUSTER_SCORE_WARM 0.5
/* A built template's image on the node adds CLUSTER_SCORE_IMAGE (the others fetch it from
 * a holder first: template/tpl_fetch.c). Built-ins are on every node. */
#define CLUSTER_SCORE_IMAGE 0.2

/* One node as placement sees it. */
struct cluster_cand {
    unsigned cap_vcpus, cap_memory_mib;    /* what it offers */
    long long free_vcpus, free_memory_mib; /* capacity - used - reserved (may be < 0) */
    bool live, draining;
    bool snapshot;                         /* has the template's snapshot at this shape */
    unsigned warm;                         /* warm clones ready at this shape */
    bool image;                            /* holds a built template's image */
    bool other_runtime;                    /* runs another VM runtime than the saved state
                                              placed needs (or reports none) */
};
/* The node's score for a sandbox of vcpus x memory_mib: -1 when it takes none (not live,
 * draining, another runtime than the state needs, no room, no capacity), else the free
 * fraction left plus the bonuses above. Pure. */
double cluster_score(const struct cluster_cand *c, unsigned vcpus, unsigned memory_mib);
/* What a node's shapes report ("tpl/VxM:W,...", store_node.shapes) says of template tpl
 * at vcpus x memory_mib: whether a snapshot is ready and how many warm clones (summed
 * over the entries of that shape: a snapshot with and one without a NIC). Pure. */
void cluster_shapes_find(const char *shapes, const char *tpl, unsigned vcpus, unsigned memory_mib,
                         bool *snapshot, unsigned *warm);
/* Appends the entry "tpl/VxM:W" to shapes (cap bytes, ',' between entries); an entry
 * that does not fit whole is left out. Pure. */
void cluster_shapes_add(char *shapes, size_t cap, const char *tpl, unsigned vcpus, unsigned memory_mib,
                        unsigned warm);

/* A placement decision. */
struct cluster_pick {
    struct store_node node;     /* the chosen node, or the largest free one on refusal */
    long long free_vcpus;       /* its free capacity before this sandbox */
    long long free_memory_mib;
    double score;
    bool found;                 /* some live, undrained node was considered */
    bool runtime_found;         /* one of them runs the wanted runtime (or none is wanted) */
    char resv_id[STORE_ID_MAX]; /* the reservation taken (0 returned) */
};
/* Placement: scores every node (cluster_score), then reserves the sandbox's size
 * (store_resv_take) on the best one, or the next best when another control daemon took
 * the room first. Returns 0 with *out the node reserved on, 1 when no node has room
 * (*out then describes the live undrained node with the most free memory, among those
 * running w->runtime when any does; found false when there is none, runtime_found false
 * when none of them runs w->runtime), -1 on a store error. */
int cluster_pick(struct spaced *sp, const struct cluster_want *w, struct cluster_pick *out);
/* Keeps the reservation placement took (p->resv_id) as the control's own, released
 * with cluster_resv_release; NULL (the reservation released) when out of memory. */
struct cluster_resv *cluster_resv_keep(struct spaced *sp, const struct cluster_pick *p);
/* Registers the control role's forwarding hook on sp->router. */
int cluster_control_start(struct spaced *sp);
/* Registers GET /v1/nodes (every role: empty on a single host). */
int cluster_nodes_register(struct spaced *sp);
/* Every node row with its use (store_node_usage) and whether it is live: fn(node, use,
 * live, arg). Returns the store's code. */
int cluster_nodes_usage(struct spaced *sp,
                        void (*fn)(const struct store_node *n, const struct store_node_use *u, bool live,
                                   void *arg),
                        void *arg);

#endif
