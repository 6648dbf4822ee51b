/* cluster_e2b.c: the E2B protocol through a control daemon (see cluster.h, e2b.h).
 *
 * The control runs no sandboxes, so it serves only what the shared store answers (the
 * listings, registered from e2b) and forwards the rest to the node of each sandbox:
 *   - creates (POST /sandboxes, /v2/sandboxes): authenticated here, placed like native
 *     creates (the E2B body names no size: the defaults), forwarded to the chosen node;
 *   - per-sandbox calls (/sandboxes/{id}/..., /v2/sandboxes/{id}/...): authenticated
 *     here, forwarded to the owner; another tenant's id is answered as a missing one;
 *   - envd and sandbox-port traffic (by Host "<port>-<id>.<domain>", E2b-Sandbox-Id, or
 *     an access token): forwarded on the request alone, as the node checks the access
 *     token it minted. The Host the node receives is its own, so the control names the
 *     sandbox and port in E2b-Sandbox-Id / E2b-Sandbox-Port instead of the client's.
 * Errors the control itself answers use E2B's shape ({"code","message"}), which the SDKs
 * read. Not carried: a signed /files URL with none of those (only the node holding the
 * signing secret could tell its sandbox) and protocol upgrades (WebSocket) on sandbox
 * ports, which cluster_proxy does not relay. */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "cluster_internal.h"
#include "daemon/auth/auth.h"
#include "daemon/e2b/e2b.h"
#include "daemon/http/router.h"
#include "daemon/sandbox/sbx.h"
#include "daemon/spaced.h"

void cluster_e2b_error(struct http_req *req, int status, const char *code, const char *message)
{
    (void)code;
    e2b_reply_rest_error(req, status, "%s", message);
}

static const struct cluster_fwd plain_e2b = {.error = cluster_e2b_error};

static int choose_e2b_create(struct spaced *sp, struct http_req *req, const char *body, size_t len,
                             struct store_node *to, struct cluster_resv **resv)
{
    /* E2B names no size: the template's (a built-in's or a built one's row), else the
     * default; its templateID (E2B's default "base") for locality too. */
    struct cluster_want w = {.vcpus = SBX_VCPUS_DEFAULT, .memory_mib = SBX_MEM_DEFAULT_MIB};
    json_t *doc = json_loadb(body, len, 0, NULL);
    const char *tpl = json_string_value(json_object_get(doc, "templateID"));
    struct sbx_spec none = {0};
    struct tpl_info t;
    if (tpl)
        snprintf(w.template_name, sizeof w.template_name, "%s", tpl);
    if (cluster_template_known(sp, tpl ? tpl : "base", &t, w.holders, sizeof w.holders))
        sbx_spec_shape(&none, &t, &w.vcpus, &w.memory_mib);
    json_decref(doc);
    return cluster_place(sp, req, &w, &plain_e2b, to, resv);
}

/* Envd or sandbox-port traffic: forwarded to the sandbox's node with the sandbox (and
 * port) named in headers. */
static void forward_traffic(struct spaced *sp, struct http_req *req, const char *id, unsigned port)
{
    if (!id[0] && http_req_query(req, "signature")) {
        e2b_reply_rest_error(req, 502, "a signed /files URL names no sandbox: through a control "
                             "daemon, reach envd by the sandbox's host (SPACE_E2B_DOMAIN) or send "
                             "E2b-Sandbox-Id");
        return;
    }
    if (!id[0]) {
        e2b_reply_rest_error(req, 502, "no sandbox addressed (E2b-Sandbox-Id)");
        return;
    }
    struct cluster_fwd f = plain_e2b;
    f.set[0].name = "E2b-Sandbox-Id";
    snprintf(f.set[0].value, sizeof f.set[0].value, "%s", id);
    f.set[1].name = "E2b-Sandbox-Port";
    f.nset = 2;
    if (port == E2B_ENVD_PORT)
        f.nset = 1; /* envd: the node takes envd's paths by the id alone */
    else
        snprintf(f.set[1].value, sizeof f.set[1].value, "%u", port);
    if (!cluster_forward_to_owner(sp, req, id, NULL, &f))
        e2b_reply_rest_error(req, 502, "sandbox %.64s not found", id);
}

static bool e2b_control_hook(struct http_req *req, void *arg)
{
    struct spaced *sp = arg;
    const char *path = http_req_path(req), *method = http_req_method(req);
    char id[STORE_ID_MAX];
    unsigned port;
    if (e2b_sandbox_traffic(req, id, sizeof id, &port)) {
        forward_traffic(sp, req, id, port);
        return true;
    }
    if (cluster_e2btpl_route(sp, req))
        return true;
    bool create = strcmp(method, "POST") == 0 &&
                  (strcmp(path, "/sandboxes") == 0 || strcmp(path, "/v2/sandboxes") == 0);
    bool one = cluster_path_id(path, "/sandboxes/", id, sizeof id) ||
               cluster_path_id(path, "/v2/sandboxes/", id, sizeof id);
    if (!create && !one)
        return false; /* the listings (e2b_register_listings) and everything else */
    /* Authenticate before anything else, as for the native routes (cluster_control.c). */
    struct auth_principal who;
    if (!e2b_api_authenticate(sp, req, &who))
        return true;
    if (create)
        cluster_proxy_fwd(sp, req, NULL, choose_e2b_create, &plain_e2b);
    else if (!cluster_forward_to_owner(sp, req, id, who.tenant, &plain_e2b))
        e2b_reply_rest_error(req, 404, "sandbox %.64s not found", id);
    return true;
}

int cluster_e2b_start(struct spaced *sp)
{
    e2b_register_listings(sp->router, sp);
    return router_add_hook(sp->router, e2b_control_hook, sp);
}
