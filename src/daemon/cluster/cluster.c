/* cluster.c: roles, their options, what each role owns, the node's request guard and
 * its heartbeat; see cluster.h. */
#include "cluster_internal.h"

#include <event2/event.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include "daemon/http/router.h"
#include "daemon/metrics/hostload.h"
#include "daemon/sandbox/sbx.h"
#include "daemon/sandbox/sbx_pool.h"
#include "daemon/template/tpl.h"
#include "daemon/spaced.h"
#include "daemon/store/store.h"
#include "log.h"

static const char *const role_names[] = {[CLUSTER_ALL] = "all", [CLUSTER_CONTROL] = "control",
                                         [CLUSTER_NODE] = "node"};

int cluster_role_parse(const char *name)
{
    for (int i = 0; i < (int)(sizeof role_names / sizeof *role_names); i++)
        if (strcmp(name, role_names[i]) == 0)
            return i;
    return -1;
}

const char *cluster_role_name(int role)
{
    return role >= 0 && role < (int)(sizeof role_names / sizeof *role_names) ? role_names[role] : "?";
}

/* Node ids become store keys and log values: keep them to a safe alphabet. */
static bool id_ok(const char *id)
{
    size_t n = strlen(id);
    if (n == 0 || n >= STORE_ID_MAX)
        return false;
    return strspn(id, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") == n;
}

int cluster_check_opts(struct spaced *sp, char *err, size_t errlen)
{
    struct spaced_opts *o = &sp->opt;
    if (o->role == CLUSTER_ALL)
        return 0;
    if (!o->store_url || !store_url_is_pg(o->store_url)) {
        snprintf(err, errlen, "--role=%s needs a PostgreSQL store shared by every daemon (--store postgresql://...)",
                 cluster_role_name(o->role));
        return -1;
    }
    if (!o->node_token || strlen(o->node_token) < CLUSTER_TOKEN_MIN) {
        snprintf(err, errlen, "--role=%s needs SPACE_NODE_TOKEN, a secret of at least %d characters shared by "
                 "the control and node daemons", cluster_role_name(o->role), CLUSTER_TOKEN_MIN);
        return -1;
    }
    if (o->role != CLUSTER_NODE)
        return 0;
    if (!o->node_id || !id_ok(o->node_id)) {
        snprintf(err, errlen, "--role=node needs --node-id ID (letters, digits, '-', '_', '.'; at most %d)",
                 STORE_ID_MAX - 1);
        return -1;
    }
    if (!o->advertise || (strncmp(o->advertise, "http://", 7) != 0) || strlen(o->advertise) >= 256) {
        snprintf(err, errlen, "--role=node needs --advertise http://HOST:PORT, the address the control daemon "
                 "reaches this node's API at");
        return -1;
    }
    if (!o->node_vcpus) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        o->node_vcpus = n > 0 ? (unsigned)n : 1;
    }
    if (!o->node_memory_mib) {
        struct sysinfo si;
        o->node_memory_mib = sysinfo(&si) == 0 ? (unsigned)((uint64_t)si.totalram * si.mem_unit >> 20) : 1024;
    }
    return 0;
}

bool cluster_runs_sandboxes(const struct spaced *sp) { return sp->opt.role != CLUSTER_CONTROL; }

const char *cluster_node_id(const struct spaced *sp)
{
    return sp->opt.role == CLUSTER_NODE ? sp->opt.node_id : "";
}

bool cluster_owns_sbx(const struct spaced *sp, const struct store_sbx *rec)
{
    switch (sp->opt.role) {
    case CLUSTER_ALL: return true;
    case CLUSTER_NODE: return strcmp(rec->node, sp->opt.node_id) == 0;
    default: return false;
    }
}

bool cluster_owns_op(struct spaced *sp, const struct store_op *op)
{
    switch (sp->opt.role) {
    case CLUSTER_ALL: return true;
    case CLUSTER_NODE:
        return strcmp(op->kind, "template_build") != 0 && sbx_find(sp, NULL, op->target) != NULL;
    default: return false;
    }
}

/* ---- node: request guard and heartbeat ------------------------------------------------ */

void cluster_dispatch(struct http_req *req, void *arg)
{
    struct spaced *sp = arg;
    if (sp->opt.role == CLUSTER_NODE) {
        const char *path = http_req_path(req), *tok = http_req_header(req, CLUSTER_TOKEN_HEADER);
        size_t want = strlen(sp->opt.node_token);
        bool open = strcmp(path, "/healthz") == 0 || strcmp(path, "/metrics") == 0;
        if (!open && (!tok || strlen(tok) != want || CRYPTO_memcmp(tok, sp->opt.node_token, want) != 0)) {
            http_reply_error(req, 403, "forbidden",
                             "this is a space node daemon: send API requests to the control daemon");
            return;
        }
        /* A sandbox a control moved here (docs/multinode.md "Suspended sandboxes that
         * move"): its row is loaded on the first request naming it. */
        char id[STORE_ID_MAX];
        if (cluster_path_id(path, "/v1/sandboxes/", id, sizeof id) ||
            cluster_path_id(path, "/sandboxes/", id, sizeof id))
            sbx_move_adopt(sp, id);
    }
    router_dispatch(req, sp->router);
}

struct shapes_scan {
    struct spaced *sp;
    struct store_node *n;
};

static void add_shape(const char *name, unsigned vcpus, unsigned mem_mib, const char *snap_dir, void *arg)
{
    struct shapes_scan *s = arg;
    cluster_shapes_add(s->n->shapes, sizeof s->n->shapes, name, vcpus, mem_mib,
                       sbx_pool_ready_at(s->sp, snap_dir));
}

/* The node's row (capacity, liveness, the snapshots and warm clones it has ready, for
 * placement) and the end of reservations on it whose control daemon must have died. */
static void heartbeat(struct spaced *sp)
{
    struct store_node n = {.vcpus = sp->opt.node_vcpus, .memory_mib = sp->opt.node_memory_mib,
                           .heartbeat_ms = spaced_now_ms(), .started_ms = sp->cluster->started_ms};
    snprintf(n.id, sizeof n.id, "%s", sp->opt.node_id);
    snprintf(n.url, sizeof n.url, "%s", sp->opt.advertise);
    snprintf(n.runtime, sizeof n.runtime, "%s", sp->runtime); /* where its saved VMs load */
    struct shapes_scan scan = {sp, &n};
    tpl_snapshots_each_ready(sp, add_shape, &scan);
    const json_t *load = hostload_get(sp->hostload, n.heartbeat_ms, 0);
    char *text = load ? json_dumps(load, JSON_COMPACT) : NULL;
    if (text && strlen(text) < sizeof n.host_load)
        memcpy(n.host_load, text, strlen(text) + 1);
    free(text);
    bool ok = store_node_put(sp->store, &n) == 0;
    int64_t gone = 0;
    if (!ok)
        log_warn("cluster.heartbeat", "node=%s msg=\"%s\"", n.id, store_errmsg(sp->store));
    else if (!sp->cluster->reported) {
        char q[STORE_RUNTIME_MAX + 32];
        log_info("cluster.heartbeat", "node=%s url=%s vcpus=%u memory_mib=%u runtime=%s", n.id, n.url, n.vcpus,
                 n.memory_mib, log_quote(n.runtime[0] ? n.runtime : "unknown", q, sizeof q));
    }
    if (ok && store_resv_expire(sp->store, n.id, n.heartbeat_ms - CLUSTER_RESV_TTL_MS, &gone) == 0 && gone)
        log_warn("cluster.heartbeat", "node=%s reservations_expired=%lld", n.id, (long long)gone);
    sp->cluster->reported = ok;
}

static void on_heartbeat(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    heartbeat(arg);
}

int cluster_start(struct spaced *sp, char *err, size_t errlen)
{
    if (cluster_nodes_register(sp) != 0) {
        snprintf(err, errlen, "out of memory registering GET /v1/nodes");
        return -1;
    }
    if (sp->opt.role == CLUSTER_ALL)
        return 0;
    if (!(sp->cluster = calloc(1, sizeof *sp->cluster))) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    sp->cluster->started_ms = spaced_now_ms();
    log_info("cluster.role", "role=%s node=%s", cluster_role_name(sp->opt.role), cluster_node_id(sp));
    if (sp->opt.role == CLUSTER_CONTROL) {
        if (cluster_control_start(sp) != 0) {
            snprintf(err, errlen, "out of memory registering the control routes");
            return -1;
        }
        return 0;
    }
    return 0;
}

int cluster_announce(struct spaced *sp, char *err, size_t errlen)
{
    if (!sp->cluster || sp->opt.role != CLUSTER_NODE)
        return 0;
    sp->cluster->heartbeat = event_new(sp->base, -1, EV_PERSIST, on_heartbeat, sp);
    struct timeval tv = {CLUSTER_HEARTBEAT_MS / 1000, (CLUSTER_HEARTBEAT_MS % 1000) * 1000};
    if (!sp->cluster->heartbeat || event_add(sp->cluster->heartbeat, &tv) != 0) {
        snprintf(err, errlen, "cannot start the heartbeat timer");
        return -1;
    }
    heartbeat(sp);
    if (!sp->cluster->reported) {
        snprintf(err, errlen, "cannot register node %s in the store: %s", sp->opt.node_id, store_errmsg(sp->store));
        return -1;
    }
    return 0;
}

/* A node stopping on purpose says so at once (heartbeat 0), so control daemons stop
 * placing on it and answer node_down for its sandboxes instead of trying to connect. */
static void node_stopping(struct spaced *sp)
{
    struct store_node n;
    if (store_node_get(sp->store, sp->opt.node_id, &n) != 0)
        return;
    n.heartbeat_ms = 0;
    if (store_node_put(sp->store, &n) == 0)
        log_info("cluster.heartbeat", "node=%s state=stopped", n.id);
}

void cluster_free(struct spaced *sp)
{
    if (!sp->cluster)
        return;
    if (sp->opt.role == CLUSTER_NODE)
        node_stopping(sp);
    if (sp->cluster->heartbeat)
        event_free(sp->cluster->heartbeat);
    while (sp->cluster->resv)
        cluster_resv_release(sp, sp->cluster->resv);
    free(sp->cluster);
    sp->cluster = NULL;
}
