/* cluster_nodes.c: the node daemons as operators see and manage them (admin key, every
 * role; the rows live in the shared store, so any control daemon answers):
 *   GET    /v1/nodes               each node: url, live, draining, capacity, use (sandboxes'
 *                                   and reservations'), the shapes it has ready, its host's
 *                                   measured load at its heartbeat, its VM runtime
 *                                   signature (vm/vm_sig.h; null: unknown); `host`: the load of
 *                                   the host this daemon runs on (metrics/hostload.h); and
 *                                   `pool`: this daemon's warm pools (sbx_pools_json)
 *   POST   /v1/nodes/{id}/drain    no new sandbox is placed there (running ones stay): 204
 *   POST   /v1/nodes/{id}/undrain  placement uses it again: 204
 *   DELETE /v1/nodes/{id}           forgets a node that is down and holds no sandbox: 204
 *                                   (409 node_live, 409 node_not_empty otherwise)
 * Retiring a node: drain it, delete (or let expire) its sandboxes, stop its daemon, then
 * remove it. A removed node whose daemon starts again registers again (its heartbeat). A
 * node that died for good with sandboxes on it cannot be removed: their disks are there. */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "cluster_internal.h"
#include "daemon/auth/auth.h"
#include "daemon/http/router.h"
#include "daemon/metrics/hostload.h"
#include "daemon/sandbox/sbx_pool.h"
#include "daemon/spaced.h"
#include "daemon/store/store.h"
#include "log.h"

static json_t *node_json(const struct store_node *n, const struct store_node_use *u, bool live)
{
    char hb[32];
    /* Measured by the node itself at its heartbeat (metrics/hostload.h); null before. */
    json_t *load = n->host_load[0] ? json_loads(n->host_load, 0, NULL) : NULL;
    return json_pack("{s:s, s:s, s:b, s:b, s:{s:I, s:I}, s:{s:I, s:I}, s:{s:I, s:I}, s:s, s:s, s:o, s:s?}",
                     "id", n->id, "url", n->url, "live", live, "draining", n->draining, "capacity",
                     "vcpus", (json_int_t)n->vcpus, "memory_mib", (json_int_t)n->memory_mib, "used",
                     "vcpus", (json_int_t)u->used_vcpus, "memory_mib", (json_int_t)u->used_memory_mib,
                     "reserved", "vcpus", (json_int_t)u->reserved_vcpus, "memory_mib",
                     (json_int_t)u->reserved_memory_mib, "shapes", n->shapes, "heartbeat_at",
                     spaced_fmt_time(n->heartbeat_ms, hb), "load",
                     json_is_object(load) ? load : (json_decref(load), json_null()), "runtime",
                     n->runtime[0] ? n->runtime : NULL);
}

static void add_node(const struct store_node *n, const struct store_node_use *u, bool live, void *arg)
{
    json_array_append_new(arg, node_json(n, u, live));
}

static void h_nodes(struct http_req *req, void *arg)
{
    struct spaced *sp = arg;
    struct auth_principal who;
    if (!auth_require_admin(sp, req, &who))
        return;
    json_t *list = json_array();
    if (!list || cluster_nodes_usage(sp, add_node, list) != 0) {
        json_decref(list);
        http_reply_error(req, 503, "store_unavailable", "reading nodes: %s", store_errmsg(sp->store));
        return;
    }
    /* The host this daemon runs on (a single-host spaced has no node rows), sampled at
     * most once a second so cpu_pct averages over at least that. */
    const json_t *host = hostload_get(sp->hostload, spaced_now_ms(), 1000);
    json_t *body = json_pack("{s:o, s:O, s:o}", "nodes", list, "host", host ? host : json_null(),
                             "pool", sbx_pools_json(sp));
    http_reply_json(req, 200, body);
    json_decref(body);
}

/* The admin caller and the node the route names, read from the store; replies (401/403,
 * 404, 503) and returns false when there is none. */
static bool node_of(struct spaced *sp, struct http_req *req, struct store_node *n)
{
    struct auth_principal who;
    if (!auth_require_admin(sp, req, &who))
        return false;
    const char *id = router_param(req, "id");
    int rc = id && strlen(id) < sizeof n->id ? store_node_get(sp->store, id, n) : STORE_NOTFOUND;
    if (rc == STORE_NOTFOUND)
        http_reply_error(req, 404, "not_found", "node %.64s not found", id ? id : "");
    else if (rc != 0)
        http_reply_error(req, 503, "store_unavailable", "reading nodes: %s", store_errmsg(sp->store));
    return rc == 0;
}

static bool node_live(const struct store_node *n)
{
    return spaced_now_ms() - n->heartbeat_ms < CLUSTER_DEAD_MS;
}

static void set_draining(struct spaced *sp, struct http_req *req, bool draining)
{
    struct store_node n;
    if (!node_of(sp, req, &n))
        return;
    if (store_node_set_draining(sp->store, n.id, draining) != 0) {
        http_reply_error(req, 503, "store_unavailable", "updating node %s: %s", n.id, store_errmsg(sp->store));
        return;
    }
    log_info("cluster.node", "node=%s draining=%d", n.id, draining);
    http_reply(req, 204, NULL, NULL, 0);
}

static void h_drain(struct http_req *req, void *arg) { set_draining(arg, req, true); }
static void h_undrain(struct http_req *req, void *arg) { set_draining(arg, req, false); }

/* Counts the sandboxes a node still holds (every row not deleted). */
struct held {
    const char *node;
    long long n;
};

static int count_held(const struct store_sbx *s, void *arg)
{
    struct held *h = arg;
    if (strcmp(s->node, h->node) == 0)
        h->n++;
    return 0;
}

static void h_remove(struct http_req *req, void *arg)
{
    struct spaced *sp = arg;
    struct store_node n;
    if (!node_of(sp, req, &n))
        return;
    if (node_live(&n)) {
        http_reply_error(req, 409, "node_live", "node %s is running (it reported within %d s): drain "
                         "it, delete its sandboxes and stop its daemon first", n.id, CLUSTER_DEAD_MS / 1000);
        return;
    }
    struct held h = {.node = n.id};
    if (store_sbx_each_live(sp->store, count_held, &h) != 0) {
        http_reply_error(req, 503, "store_unavailable", "reading sandboxes: %s", store_errmsg(sp->store));
        return;
    }
    if (h.n) {
        http_reply_error(req, 409, "node_not_empty", "node %s still holds %lld sandbox%s (their disks are "
                         "there): start it again and delete them first", n.id, h.n, h.n == 1 ? "" : "es");
        return;
    }
    int rc = store_node_delete(sp->store, n.id);
    if (rc != 0 && rc != STORE_NOTFOUND) {
        http_reply_error(req, 503, "store_unavailable", "removing node %s: %s", n.id, store_errmsg(sp->store));
        return;
    }
    log_info("cluster.node", "node=%s removed=1", n.id);
    http_reply(req, 204, NULL, NULL, 0);
}

int cluster_nodes_register(struct spaced *sp)
{
    return router_add(sp->router, "GET", "/v1/nodes", h_nodes, sp) ||
           router_add(sp->router, "POST", "/v1/nodes/{id}/drain", h_drain, sp) ||
           router_add(sp->router, "POST", "/v1/nodes/{id}/undrain", h_undrain, sp) ||
           router_add(sp->router, "DELETE", "/v1/nodes/{id}", h_remove, sp);
}
