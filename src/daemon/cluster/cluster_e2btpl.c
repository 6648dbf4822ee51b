/* cluster_e2btpl.c: E2B's template builder through a control daemon (see cluster.h and
 * e2b/e2b_template.c for the calls).
 *
 * A build is several calls whose state lives on one node: POST /v3/templates (the
 * request), GET /templates/{id}/files/{hash} (an upload link) and the PUT to that link
 * (the archive is kept in the node's data directory), POST /v2/templates/{id}/builds/
 * {buildID} (the build starts there, on those archives), then .../status polls (the
 * build log is that node's). So the control:
 *   - authenticates the request (E2B's 401 before anything is placed), places it like a
 *     native build (1 vCPU, TPL_BUILD_MEM_MIB; the request names no base) and records
 *     the node in the store (store_tpl_route: tenant + template id -> node) before
 *     forwarding it, so every control replica, and a restarted one, routes the rest the
 *     same way. The build id always comes with the template id in E2B's paths, so the
 *     template id is the key; a new request for the name replaces the route;
 *   - forwards every later /templates/{id}/... and /v2/templates/{id}/... call of that
 *     tenant to the node of its route (authenticated here first), or, once the route has
 *     expired (CLUSTER_TPL_ROUTE_TTL_MS), to the template row's builder; 404 in E2B's
 *     shape when the tenant has neither;
 *   - forwards the upload PUT, which carries no API key, by the tenant its link names
 *     and the route: the node checks the link's token, minted with its own secret; a PUT
 *     with no route is refused here (401, as for a bad token) before its body is read;
 *   - names the address the client reached the control at (SPACE_PUBLIC_URL, else
 *     http:// and the Host) in HH_PUBLIC_URL_HEADER, so the upload link the node hands
 *     out points at the control, not at the node (which refuses clients);
 *   - DELETE /templates/{id} is E2B's deleteSnapshot (as on a single host): forwarded to
 *     the node holding the tenant's snapshot.
 * GET /templates/aliases/{alias} is answered from the store (e2b_register_listings).
 * Errors the control answers itself use E2B's {"code","message"}. A built template is
 * used like any other: a create from it is placed on any node, which fetches the image
 * by digest (template/tpl_fetch.c). */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "cluster_internal.h"
#include "daemon/auth/auth.h"
#include "daemon/e2b/e2b.h"
#include "daemon/spaced.h"
#include "daemon/store/store.h"
#include "daemon/template/tpl.h"
#include "http_hdr.h"
#include "log.h"

/* A route outlives any SDK build (request, uploads and start take seconds; an upload
 * link lasts an hour); once the build started, the template row names its builder. */
#define CLUSTER_TPL_ROUTE_TTL_MS (24LL * 3600 * 1000)

static const struct cluster_fwd e2b_fwd = {.error = cluster_e2b_error};

static bool has_prefix(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* POST /v3/templates: placed like a native build, its route stored before it is
 * forwarded. The node validates the body; a request naming no valid template is placed
 * but routes nothing (the node refuses it). */
static int choose_request(struct spaced *sp, struct http_req *req, const char *body, size_t len,
                          struct store_node *to, struct cluster_resv **resv)
{
    struct auth_principal who; /* checked again: the hook's answer is not kept */
    if (!e2b_api_authenticate(sp, req, &who))
        return -1;
    struct store_tpl_route r = {.created_ms = spaced_now_ms()};
    json_t *o = json_loadb(body, len, 0, NULL);
    const char *name = json_string_value(json_object_get(o, "name"));
    if (name && tpl_name_valid(name))
        snprintf(r.name, sizeof r.name, "%s", name);
    json_decref(o);
    struct cluster_want w = {.vcpus = 1, .memory_mib = TPL_BUILD_MEM_MIB};
    if (cluster_place(sp, req, &w, &e2b_fwd, to, resv) != 0)
        return -1;
    if (!r.name[0])
        return 0;
    snprintf(r.tenant, sizeof r.tenant, "%s", who.tenant);
    snprintf(r.node, sizeof r.node, "%s", to->id);
    if (store_tpl_route_expire(sp->store, r.created_ms - CLUSTER_TPL_ROUTE_TTL_MS) != 0 ||
        store_tpl_route_put(sp->store, &r) != 0) {
        cluster_resv_release(sp, *resv);
        *resv = NULL;
        e2b_reply_rest_error(req, 503, "recording the template build's node: %s", store_errmsg(sp->store));
        return -1;
    }
    log_info("cluster.e2b_template", "tenant=%s template=%s node=%s msg=\"build requested\"", r.tenant, r.name,
             r.node);
    return 0;
}

/* Forwards a call on tenant's template `name` to the node of its route, else to the
 * template row's builder; 404 when the tenant has neither. */
static void forward_build(struct spaced *sp, struct http_req *req, const char *tenant, const char *name,
                          const struct cluster_fwd *f)
{
    struct store_tpl_route r;
    int rc = store_tpl_route_get(sp->store, tenant, name, &r);
    if (rc == 0) {
        cluster_forward_to_holder(sp, req, name, r.node, f);
        return;
    }
    struct store_tpl row;
    char nodes[STORE_NODES_MAX] = "";
    if (rc == STORE_NOTFOUND && (rc = store_tpl_get(sp->store, name, &row)) == 0) {
        if (strcmp(row.tenant, tenant) == 0 && strcmp(row.state, "deleted") != 0)
            snprintf(nodes, sizeof nodes, "%s", row.nodes);
        store_tpl_clear(&row);
    }
    if (rc != 0 && rc != STORE_NOTFOUND)
        e2b_reply_rest_error(req, 503, "looking up template %s: %s", name, store_errmsg(sp->store));
    else if (!nodes[0])
        e2b_reply_rest_error(req, 404, "template %s not found", name);
    else
        cluster_forward_to_holder(sp, req, name, nodes, f);
}

/* PUT /templates/{id}/files/{hash}?tenant=T&token=K (an upload link: no API key). */
static void forward_upload(struct spaced *sp, struct http_req *req, const char *name)
{
    const char *tenant = http_req_query(req, "tenant");
    struct store_tpl_route r;
    int rc = tenant && *tenant && strlen(tenant) < STORE_ID_MAX && !strchr(tenant, '/')
                 ? store_tpl_route_get(sp->store, tenant, name, &r) : STORE_NOTFOUND;
    if (rc == STORE_NOTFOUND)
        e2b_reply_rest_error(req, 401, "invalid or expired upload link");
    else if (rc != 0)
        e2b_reply_rest_error(req, 503, "looking up the upload's node: %s", store_errmsg(sp->store));
    else if (http_req_content_length(req) > (int64_t)TPL_COPY_MAX)
        e2b_reply_rest_error(req, 413, "an archive is at most %u bytes", TPL_COPY_MAX);
    else
        cluster_forward_to_holder(sp, req, name, r.node, &e2b_fwd);
}

/* DELETE /templates/{id}: E2B's deleteSnapshot, to the node holding the snapshot. */
static void forward_snapshot_delete(struct spaced *sp, struct http_req *req, const char *tenant, const char *id)
{
    struct store_snap s;
    int rc = store_snap_find(sp->store, tenant, id, &s);
    if (rc == 0 && s.node[0])
        cluster_forward_to_holder(sp, req, id, s.node, &e2b_fwd);
    else if (rc != 0 && rc != STORE_NOTFOUND)
        e2b_reply_rest_error(req, 503, "looking up snapshot %s: %s", id, store_errmsg(sp->store));
    else
        e2b_reply_rest_error(req, 404, "snapshot %s not found", id);
}

/* The forwarding of a builder call: E2B's errors, and the address the client reached the
 * control at for the links the node hands out; false when there is none (no usable
 * SPACE_PUBLIC_URL or Host). */
static bool public_fwd(struct spaced *sp, struct http_req *req, struct cluster_fwd *f)
{
    const char *host = http_req_header(req, "Host");
    *f = e2b_fwd;
    if (!sp->opt.public_url && !hh_host_ok(host))
        return false;
    f->set[0].name = HH_PUBLIC_URL_HEADER;
    if (sp->opt.public_url)
        snprintf(f->set[0].value, sizeof f->set[0].value, "%s", sp->opt.public_url);
    else
        snprintf(f->set[0].value, sizeof f->set[0].value, "http://%s", host);
    f->nset = 1;
    return true;
}

bool cluster_e2btpl_route(struct spaced *sp, struct http_req *req)
{
    const char *path = http_req_path(req), *method = http_req_method(req);
    bool request = strcmp(path, "/v3/templates") == 0 && strcmp(method, "POST") == 0;
    const char *prefix = has_prefix(path, "/templates/") ? "/templates/"
                         : has_prefix(path, "/v2/templates/") ? "/v2/templates/" : NULL;
    if (!request && (!prefix || has_prefix(path, "/templates/aliases/")))
        return false;
    char name[STORE_ID_MAX];
    bool named = prefix && cluster_path_id(path, prefix, name, sizeof name);
    const char *rest = named ? path + strlen(prefix) + strlen(name) : "";
    bool upload = named && strcmp(prefix, "/templates/") == 0 && strcmp(method, "PUT") == 0 &&
                  has_prefix(rest, "/files/") && rest[7] && !strchr(rest + 7, '/');
    if (upload) {
        forward_upload(sp, req, name);
        return true;
    }
    /* Authenticate before anything else: placement and routes reveal nodes and names. */
    struct auth_principal who;
    if (!e2b_api_authenticate(sp, req, &who))
        return true;
    struct cluster_fwd f;
    bool linkable = public_fwd(sp, req, &f);
    if (request)
        cluster_proxy_fwd(sp, req, NULL, choose_request, &f);
    else if (!named)
        e2b_reply_rest_error(req, 404, "template not found");
    else if (strcmp(method, "DELETE") == 0 && !rest[0])
        forward_snapshot_delete(sp, req, who.tenant, name);
    else if (!linkable && has_prefix(rest, "/files/"))
        e2b_reply_rest_error(req, 400, "a Host header (host[:port]) is needed to build the upload link");
    else
        forward_build(sp, req, who.tenant, name, &f);
    return true;
}
