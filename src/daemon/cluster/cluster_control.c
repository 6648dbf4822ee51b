/* cluster_control.c: the control role: which requests it places (cluster_place.c) or
 * forwards to the owning node (per-sandbox and per-operation ones); see cluster.h. */
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster_internal.h"
#include "daemon/http/router.h"
#include "daemon/auth/auth.h"
#include "daemon/sandbox/sbx.h"
#include "daemon/template/tpl.h"
#include "daemon/spaced.h"
#include "daemon/store/store.h"
#include "log.h"

void cluster_reply_fail(struct http_req *req, const struct cluster_fwd *fwd, int status,
                        const char *code, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (fwd && fwd->error)
        fwd->error(req, status, code, msg);
    else
        http_reply_error(req, status, code, "%s", msg);
}

bool cluster_template_known(struct spaced *sp, const char *name, struct tpl_info *t, char *holders, size_t cap)
{
    if (tpl_builtin_peek(sp, name, t))
        return true;
    memset(t, 0, sizeof *t);
    struct store_tpl row;
    if (!name || !tpl_name_valid(name) || store_tpl_get(sp->store, name, &row) != 0)
        return false;
    json_t *meta = strcmp(row.state, "ready") == 0 && row.meta ? json_loads(row.meta, 0, NULL) : NULL;
    if (meta) {
        json_t *v = json_object_get(meta, "vcpus"), *m = json_object_get(meta, "memory_mib");
        t->vcpus = json_is_integer(v) && json_integer_value(v) > 0 && json_integer_value(v) <= 1024
                       ? (unsigned)json_integer_value(v) : 0;
        t->memory_mib = json_is_integer(m) && json_integer_value(m) > 0 && json_integer_value(m) <= (1 << 20)
                            ? (unsigned)json_integer_value(m) : 0;
        snprintf(holders, cap, "%s", row.nodes);
    }
    json_decref(meta);
    store_tpl_clear(&row);
    return true;
}

/* Chooses the node of a create from its body (template and size; the node validates the
 * rest and replies to a bad body itself) and reserves the sandbox's size there. */
static int choose_create(struct spaced *sp, struct http_req *req, const char *body, size_t len,
                         struct store_node *to, struct cluster_resv **resv)
{
    struct sbx_spec spec;
    struct spaced_err err;
    struct cluster_want w = {.vcpus = SBX_VCPUS_DEFAULT, .memory_mib = SBX_MEM_DEFAULT_MIB};
    if (sbx_spec_parse(body, len, &spec, &err) == 0) {
        struct tpl_info t;
        bool known = cluster_template_known(sp, spec.template_name, &t, w.holders, sizeof w.holders);
        struct store_snap snap;
        /* A snapshot named by id: its shape, and its holder preferred (others fetch it). */
        if (!known && store_snap_get(sp->store, spec.template_name, &snap) == 0 && snap.vcpus && snap.memory_mib) {
            memset(&t, 0, sizeof t);
            t.vcpus = snap.vcpus;
            t.memory_mib = snap.memory_mib;
            snprintf(w.holders, sizeof w.holders, "%s", snap.node);
            /* Its memory loads only where the runtime that saved it runs (vm/vm_sig.h). A
             * snapshot named by name is not resolved here: the node refuses it (409). */
            sbx_parts_runtime(snap.parts, w.runtime, sizeof w.runtime);
            known = true;
        }
        sbx_spec_shape(&spec, known ? &t : NULL, &w.vcpus, &w.memory_mib);
        snprintf(w.template_name, sizeof w.template_name, "%s", spec.template_name);
        sbx_spec_clear(&spec);
    }
    return cluster_place(sp, req, &w, NULL, to, resv);
}

/* Chooses the node of a template build like a create's: the build VM's size, the base
 * template's locality. */
static int choose_build(struct spaced *sp, struct http_req *req, const char *body, size_t len,
                        struct store_node *to, struct cluster_resv **resv)
{
    struct cluster_want w = {.vcpus = 1, .memory_mib = TPL_BUILD_MEM_MIB};
    json_t *o = json_loadb(body, len, 0, NULL);
    const char *base = json_string_value(json_object_get(o, "base"));
    if (!base)
        base = json_string_value(json_object_get(o, "from"));
    snprintf(w.template_name, sizeof w.template_name, "%s", base ? base : "");
    json_decref(o);
    return cluster_place(sp, req, &w, NULL, to, resv);
}

void cluster_forward_to_holder(struct spaced *sp, struct http_req *req, const char *name, const char *nodes,
                               const struct cluster_fwd *fwd)
{
    int64_t now = spaced_now_ms();
    char id[STORE_ID_MAX];
    struct store_node n;
    for (const char *p = nodes; tpl_nodes_next(&p, id, sizeof id);)
        if (store_node_get(sp->store, id, &n) == 0 && now - n.heartbeat_ms < CLUSTER_DEAD_MS) {
            cluster_proxy_fwd(sp, req, &n, NULL, fwd);
            return;
        }
    cluster_reply_fail(req, fwd, 503, "node_down", "template %s is on node(s) %s, none of which is live", name,
                       nodes);
}

static void forward_to_holder(struct spaced *sp, struct http_req *req, const char *name, const char *nodes)
{
    cluster_forward_to_holder(sp, req, name, nodes, NULL);
}

/* /v1/templates through the control: a build goes to a node chosen like a create; a
 * deletion to the template's first live holder (it removes its image), which refuses it
 * while a sandbox or build on any node uses the template, counted in the store in the
 * transaction that marks it deleted (tpl_delete); listings are answered here from the
 * store (false). A template of another tenant is answered as missing, by the local
 * routes. */
static bool template_route(struct spaced *sp, struct http_req *req, const char *method, const char *path,
                           const char *tenant)
{
    if (strcmp(path, "/v1/templates") == 0) {
        if (strcmp(method, "POST") != 0)
            return false;
        cluster_proxy(sp, req, NULL, choose_build);
        return true;
    }
    char name[STORE_ID_MAX];
    if (strcmp(method, "DELETE") != 0 || !cluster_path_id(path, "/v1/templates/", name, sizeof name))
        return false;
    struct store_tpl row;
    if (store_tpl_get(sp->store, name, &row) != 0)
        return false;
    char nodes[STORE_NODES_MAX];
    snprintf(nodes, sizeof nodes, "%s", row.nodes);
    bool mine = strcmp(row.tenant, tenant) == 0 && strcmp(row.state, "deleted") != 0 && nodes[0];
    store_tpl_clear(&row);
    if (!mine)
        return false;
    forward_to_holder(sp, req, name, nodes);
    return true;
}

/* ---- forwarding ----------------------------------------------------------------------- */

bool cluster_path_id(const char *path, const char *prefix, char *id, size_t cap)
{
    size_t lp = strlen(prefix);
    if (strncmp(path, prefix, lp) != 0)
        return false;
    size_t n = strcspn(path + lp, "/");
    if (n == 0 || n >= cap)
        return false;
    memcpy(id, path + lp, n);
    id[n] = '\0';
    return true;
}

/* A verb that brings a sandbox's VM back (ours and E2B's). */
static bool comes_back(struct http_req *req)
{
    const char *verb = strrchr(http_req_path(req), '/');
    return strcmp(http_req_method(req), "POST") == 0 && verb &&
           (strcmp(verb, "/restore") == 0 || strcmp(verb, "/resume") == 0 || strcmp(verb, "/wake") == 0 ||
            strcmp(verb, "/start") == 0 || strcmp(verb, "/connect") == 0);
}

/* A verb bringing back a sandbox on a draining node (docs/multinode.md "Suspended
 * sandboxes that move"): when it is suspended or stopped with its files recorded, a
 * node is chosen like a create's (where a reservation fits), the row moves there in one
 * conditional update (store_sbx_move), and the verb goes to it, which reserves the VM's
 * room itself and fetches the files first. Only nodes running the VM runtime that saved a
 * suspended sandbox's memory are chosen (its parts' "runtime", vm/vm_sig.h).
 * Otherwise (not movable, no other node, none with room or that runtime, the row changed
 * meanwhile) the verb goes to the draining node, which brings it back itself. */
static int choose_move(struct spaced *sp, struct http_req *req, const char *body, size_t len,
                       struct store_node *to, struct cluster_resv **resv)
{
    (void)body;
    (void)len;
    char id[STORE_ID_MAX];
    const char *path = http_req_path(req);
    struct store_sbx s = {0};
    if ((!cluster_path_id(path, "/v1/sandboxes/", id, sizeof id) && !cluster_path_id(path, "/sandboxes/", id, sizeof id)) ||
        store_sbx_get(sp->store, id, &s) != 0 || store_node_get(sp->store, s.node, to) != 0) {
        store_sbx_clear(&s);
        cluster_reply_fail(req, NULL, 503, "store_unavailable", "cannot read the sandbox's row: %s",
                           store_errmsg(sp->store));
        return -1;
    }
    bool movable = s.parts && strstr(s.parts, "\"node\"") && strcmp(s.state, s.desired) == 0 &&
                   (strcmp(s.state, "suspended") == 0 || strcmp(s.state, "stopped") == 0);
    struct cluster_want w = {.vcpus = s.vcpus, .memory_mib = s.memory_mib};
    snprintf(w.template_name, sizeof w.template_name, "%s", s.template_name);
    /* A suspended sandbox's memory loads only into the VM runtime that saved it (vm/
     * vm_sig.h; its parts say which): no node running it, no move (A serves the verb). A
     * stopped one's record names none: its disk boots anywhere. */
    sbx_parts_runtime(s.parts, w.runtime, sizeof w.runtime);
    struct cluster_pick p;
    int picked = movable ? cluster_pick(sp, &w, &p) : -1;
    if (picked == 1 && !p.runtime_found) {
        char q[STORE_RUNTIME_MAX + 32];
        log_info("cluster.move", "sandbox=%s from=%s result=not_moved reason=no_node_with_runtime runtime=%s", id,
                 s.node, log_quote(w.runtime, q, sizeof q));
    }
    if (picked == 0) {
        int rc = store_sbx_move(sp->store, id, s.node, p.node.id, s.parts, s.parts, spaced_now_ms());
        log_info("cluster.move", "sandbox=%s from=%s to=%s result=%s", id, s.node, p.node.id,
                 rc == 0 ? "moved" : rc == STORE_NOTFOUND ? "changed" : "store_failed");
        /* The reservation only chose B: B reserves the VM coming back itself (sbx_resv.c),
         * and both at once would need twice the room there. */
        store_resv_release(sp->store, p.resv_id);
        if (rc == 0)
            *to = p.node;
    }
    store_sbx_clear(&s);
    return 0; /* to: B when moved, else the draining node */
}

bool cluster_forward_to_owner(struct spaced *sp, struct http_req *req, const char *id,
                              const char *tenant, const struct cluster_fwd *fwd)
{
    /* Nothing about the node or the sandbox's existence reaches a caller who does not
     * own it: those get false, and the local routes answer as for a missing id. */
    struct store_sbx s;
    if (store_sbx_get(sp->store, id, &s) != 0)
        return false;
    char node[STORE_ID_MAX];
    snprintf(node, sizeof node, "%s", s.node);
    bool mine = !tenant || strcmp(s.tenant, tenant) == 0;
    store_sbx_clear(&s);
    if (!mine || !node[0])
        return false;
    struct store_node n;
    if (store_node_get(sp->store, node, &n) != 0) {
        cluster_reply_fail(req, fwd, 502, "node_unknown", "sandbox %s is on node %s, which is not registered", id, node);
        return true;
    }
    int64_t silent_ms = spaced_now_ms() - n.heartbeat_ms;
    if (silent_ms >= CLUSTER_DEAD_MS) {
        /* A suspended sandbox's memory image and disk are in that node's data directory
         * (docs/multinode.md "Suspended sandboxes that move"): with the node gone no
         * other node can fetch them. */
        cluster_reply_fail(req, fwd, 503, "node_down", "sandbox %s is on node %s, which has not reported for %lld s%s",
                           id, node, (long long)(silent_ms / 1000),
                           comes_back(req) ? "; its saved memory and disk are on that node's local storage, so it "
                                             "can come back only there, once the node reports again" : "");
        return true;
    }
    if (n.draining && comes_back(req)) { /* perhaps moved off the drained node first */
        cluster_proxy_fwd(sp, req, NULL, choose_move, fwd);
        return true;
    }
    cluster_proxy_fwd(sp, req, &n, NULL, fwd);
    return true;
}

static bool forward_to_owner(struct spaced *sp, struct http_req *req, const char *id, const char *tenant)
{
    return cluster_forward_to_owner(sp, req, id, tenant, NULL);
}

/* The requests the control answers by placing or forwarding (everything else falls
 * through to the local routes, which read the shared store). */
static bool control_takes(const char *method, const char *path, char *id, size_t cap)
{
    return (strcmp(path, "/v1/sandboxes") == 0 && strcmp(method, "POST") == 0) ||
           cluster_path_id(path, "/v1/sandboxes/", id, cap) ||
           cluster_path_id(path, "/v1/operations/", id, cap) ||
           (strncmp(path, "/v1/templates", 13) == 0 && strcmp(method, "GET") != 0 &&
            strcmp(method, "HEAD") != 0);
}

/* A request on a session's routes (/v1/sandboxes/{id}/sessions/{sid}...) that presents
 * something other than an API key: an attach token, as `?token=` or a bearer credential
 * without the API-key prefix (see session/sess_token.h). */
static bool attach_token_route(struct http_req *req, const char *path, const char *id)
{
    static const char sessions[] = "/sessions/";
    size_t pre = strlen("/v1/sandboxes/") + strlen(id);
    if (strncmp(path, "/v1/sandboxes/", 14) != 0 || strlen(path) <= pre + strlen(sessions) ||
        strncmp(path + pre, sessions, strlen(sessions)) != 0)
        return false;
    const char *q = http_req_query(req, "token");
    const char *key = auth_request_key(req);
    return (q && *q) || (key && *key && strncmp(key, AUTH_SECRET_PREFIX, strlen(AUTH_SECRET_PREFIX)) != 0);
}

static bool control_hook(struct http_req *req, void *arg)
{
    struct spaced *sp = arg;
    const char *path = http_req_path(req), *method = http_req_method(req);
    char id[STORE_ID_MAX];
    if (!control_takes(method, path, id, sizeof id))
        return false;
    /* A session's attach token (a capability the node minted with its own secret) can be
     * checked only by that node: such requests are forwarded on the token alone, and the
     * node refuses a bad token as it refuses it for an unknown session. */
    if (attach_token_route(req, path, id))
        return forward_to_owner(sp, req, id, NULL);
    /* Authenticate before anything else: placement reveals node names and capacity, and
     * forwarding reveals which ids exist and where. auth_require answers 401 itself. */
    struct auth_principal who;
    if (!auth_require(sp, req, &who))
        return true;
    if (strcmp(path, "/v1/sandboxes") == 0 && strcmp(method, "POST") == 0) {
        cluster_proxy(sp, req, NULL, choose_create);
        return true;
    }
    if (cluster_path_id(path, "/v1/sandboxes/", id, sizeof id))
        return forward_to_owner(sp, req, id, who.tenant);
    if (strncmp(path, "/v1/templates", 13) == 0)
        return template_route(sp, req, method, path, who.tenant);
    struct store_op op;
    if (store_op_get(sp->store, id, &op) != 0)
        return false;
    bool mine = strcmp(op.tenant, who.tenant) == 0;
    bool build = strcmp(op.kind, "template_build") == 0;
    snprintf(id, sizeof id, "%s", op.target);
    store_op_clear(&op);
    if (mine && build) { /* its log lives on the node building it */
        struct store_tpl row;
        char nodes[STORE_NODES_MAX] = "";
        if (store_tpl_get(sp->store, id, &row) == 0) {
            snprintf(nodes, sizeof nodes, "%s", row.nodes);
            store_tpl_clear(&row);
        }
        if (!nodes[0]) /* built before builds ran on nodes: the store has the op */
            return false;
        forward_to_holder(sp, req, id, nodes);
        return true;
    }
    return mine && forward_to_owner(sp, req, id, who.tenant);
}

/* ---- node liveness for listings -------------------------------------------------------- */

static int collect_state(const struct store_node *n, void *arg)
{
    struct cluster_node_states *st = arg;
    if (st->n == st->cap) {
        size_t cap = st->cap ? st->cap * 2 : 8;
        struct store_node *nodes = realloc(st->nodes, cap * sizeof *nodes);
        if (!nodes)
            return 1;
        st->nodes = nodes;
        st->cap = cap;
    }
    st->nodes[st->n++] = *n;
    return 0;
}

int cluster_node_states_load(struct spaced *sp, struct cluster_node_states *st)
{
    memset(st, 0, sizeof *st);
    st->now_ms = spaced_now_ms();
    if (store_node_each(sp->store, collect_state, st) != 0) {
        cluster_node_states_free(st);
        return -1;
    }
    return 0;
}

const char *cluster_node_state(const struct cluster_node_states *st, const char *id)
{
    if (!id || !id[0])
        return NULL;
    for (size_t i = 0; i < st->n; i++)
        if (strcmp(st->nodes[i].id, id) == 0)
            return st->now_ms - st->nodes[i].heartbeat_ms < CLUSTER_DEAD_MS ? "live" : "down";
    return "unknown";
}

void cluster_node_states_free(struct cluster_node_states *st)
{
    free(st->nodes);
    memset(st, 0, sizeof *st);
}

int cluster_control_start(struct spaced *sp)
{
    if (router_add_hook(sp->router, control_hook, sp) != 0)
        return -1;
    return cluster_e2b_start(sp);
}
