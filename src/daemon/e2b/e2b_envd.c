/* e2b_envd: the envd side of the E2B protocol on the host: which requests are envd's,
 * which sandbox they address, access-token checks, and dispatch to the methods. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "daemon/http/http.h"
#include "daemon/sandbox/sbx.h"
#include "e2b_internal.h"
#include "e2b_pbjson.h"
#include "e2b_util.h"
#include "http_hdr.h"

static const struct e2b_method methods[] = {
    {"/process.Process/Start", true, e2b_proc_start},
    {"/process.Process/Connect", true, e2b_proc_connect},
    {"/process.Process/List", false, e2b_proc_list},
    {"/process.Process/SendInput", false, e2b_proc_send_input},
    {"/process.Process/SendSignal", false, e2b_proc_send_signal},
    {"/process.Process/CloseStdin", false, e2b_proc_close_stdin},
    {"/process.Process/Update", false, e2b_proc_update},
    {"/filesystem.Filesystem/Stat", false, e2b_fs_stat},
    {"/filesystem.Filesystem/MakeDir", false, e2b_fs_make_dir},
    {"/filesystem.Filesystem/Move", false, e2b_fs_move},
    {"/filesystem.Filesystem/ListDir", false, e2b_fs_list_dir},
    {"/filesystem.Filesystem/Remove", false, e2b_fs_remove},
    {"/filesystem.Filesystem/WatchDir", true, e2b_fs_watch_dir},
    {"/filesystem.Filesystem/CreateWatcher", false, e2b_fs_create_watcher},
    {"/filesystem.Filesystem/GetWatcherEvents", false, e2b_fs_get_watcher_events},
    {"/filesystem.Filesystem/RemoveWatcher", false, e2b_fs_remove_watcher},
};

void e2b_reply_rest_error(struct http_req *req, int status, const char *fmt, ...)
{
    char msg[E2B_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    struct e2b_err err;
    e2b_err_set(&err, E2B_UNKNOWN, "%s", msg); /* sanitises the text */
    json_t *body = e2b_rest_error_json(status, err.msg);
    http_reply_json(req, status, body);
    json_decref(body);
}

/* A Connect-shaped error for RPC paths, a REST one for the others. */
static void reply_error(struct http_req *req, bool rpc, enum e2b_code code, int rest_status,
                        const char *msg)
{
    if (!rpc) {
        e2b_reply_rest_error(req, rest_status, "%s", msg);
        return;
    }
    struct e2b_err err;
    e2b_err_set(&err, code, "%s", msg);
    json_t *body = e2b_connect_error_json(&err);
    http_reply_json(req, rest_status, body);
    json_decref(body);
}

void e2b_user_home(const char *user, char *out, size_t cap)
{
    if (strcmp(user, "root") == 0)
        snprintf(out, cap, "/root");
    else
        snprintf(out, cap, "/home/%s", user);
}

struct e2b_box *e2b_box_get(struct e2b *e, const char *id)
{
    for (struct e2b_box *b = e->boxes; b; b = b->next)
        if (strcmp(b->id, id) == 0)
            return b;
    struct e2b_box *b = calloc(1, sizeof *b);
    if (!b)
        return NULL;
    b->e = e;
    snprintf(b->id, sizeof b->id, "%s", id);
    b->next = e->boxes;
    e->boxes = b;
    return b;
}

struct agentc *e2b_call_agent(struct e2b_call *c)
{
    struct sbx *s = sbx_find(c->e->sp, NULL, c->box->id);
    return s ? sbx_agent(s) : NULL;
}

/* The user an RPC asks for: `Authorization: Basic base64("<user>:")`, else the default.
 * Returns false if the header is present but malformed. */
static bool rpc_user(struct http_req *req, char *out, size_t cap)
{
    const char *auth = http_req_header(req, "Authorization");
    snprintf(out, cap, "%s", E2B_DEFAULT_USER);
    if (!auth)
        return true;
    if (strncasecmp(auth, "Basic ", 6) != 0)
        return false;
    size_t n;
    uint8_t *dec = e2b_b64_decode(auth + 6, strlen(auth + 6), &n);
    if (!dec)
        return false;
    char *colon = memchr(dec, ':', n);
    size_t ul = colon ? (size_t)(colon - (char *)dec) : n;
    bool ok = ul > 0 && ul < cap && !memchr(dec, '\0', ul);
    for (size_t i = 0; ok && i < ul; i++)
        ok = dec[i] > 0x20 && dec[i] < 0x7f && dec[i] != '/';
    if (ok) {
        memcpy(out, dec, ul);
        out[ul] = '\0';
    }
    free(dec);
    return ok;
}

/* "<port>-<id>.<anything>" Host header: port and id. */
static bool host_target(const char *host, unsigned *port, char *id, size_t cap)
{
    if (!host)
        return false;
    char *end;
    unsigned long p = strtoul(host, &end, 10);
    if (end == host || *end != '-' || p == 0 || p > 65535)
        return false;
    const char *s = end + 1, *dot = strchr(s, '.');
    if (!dot || dot == s || (size_t)(dot - s) >= cap)
        return false;
    memcpy(id, s, (size_t)(dot - s));
    id[dot - s] = '\0';
    *port = (unsigned)p;
    return true;
}

static bool is_envd_path(const char *path)
{
    return strcmp(path, "/health") == 0 || strcmp(path, "/files") == 0 ||
           strncmp(path, "/process.Process/", 17) == 0 ||
           strncmp(path, "/filesystem.Filesystem/", 23) == 0;
}

bool e2b_port_target(const char *host, const char *sid, const char *sport, unsigned *port,
                     char *id, size_t cap)
{
    if (host_target(host, port, id, cap))
        return *port != E2B_ENVD_PORT;
    if (!sid || !sport || !sid[0] || strlen(sid) >= cap)
        return false;
    char *end;
    unsigned long p = strtoul(sport, &end, 10);
    if (end == sport || *end || p == 0 || p > 65535 || p == E2B_ENVD_PORT)
        return false;
    *port = (unsigned)p;
    snprintf(id, cap, "%s", sid);
    return true;
}

/* What a request is to the envd side, from the request alone: sandbox-port traffic (id
 * and port filled), envd traffic (id filled, or "" when only local state can tell: a
 * signed /files URL), or neither. */
enum traffic { TRAFFIC_NONE, TRAFFIC_PORT, TRAFFIC_ENVD };

static enum traffic classify(struct http_req *req, unsigned *port, char *id, size_t cap)
{
    const char *sid = http_req_header(req, "E2b-Sandbox-Id");
    if (e2b_port_target(http_req_header(req, "Host"), sid, http_req_header(req, "E2b-Sandbox-Port"),
                        port, id, cap))
        return TRAFFIC_PORT;
    bool by_host = host_target(http_req_header(req, "Host"), port, id, cap);
    /* Only envd's own paths: the Python SDK also sends E2b-Sandbox-Id on control-plane
     * calls, which must reach the routes. */
    if (!by_host && !is_envd_path(http_req_path(req)))
        return TRAFFIC_NONE;
    if (sid)
        snprintf(id, cap, "%s", sid);
    else if (!by_host && e2b_token_sandbox(http_req_header(req, "X-Access-Token"), id, cap) < 0)
        id[0] = '\0';
    return TRAFFIC_ENVD;
}

bool e2b_sandbox_traffic(struct http_req *req, char *id, size_t cap, unsigned *port)
{
    *port = E2B_ENVD_PORT;
    return classify(req, port, id, cap) != TRAFFIC_NONE;
}

/* ---- auto-resume: traffic wakes a sandbox created with lifecycle.autoResume ---- */

static bool rpc_path(const char *path)
{
    return path[0] == '/' && strchr(path + 1, '/') && strchr(path, '.');
}

/* The sandbox is running again: the request goes through this hook from the top. */
static void hook_again(struct http_req *req, void *e)
{
    e2b_envd_hook(req, e);
}

static void wake_failed(struct http_req *req, const struct spaced_err *err, void *e)
{
    (void)e;
    reply_error(req, rpc_path(http_req_path(req)), E2B_UNAVAILABLE, 502, err->message);
}

/* Parks req on s's auto-resume (sbx.h) when s has it and no agent; true if taken.
 * Only traffic that may reach the sandbox wakes it: the caller checked the traffic token
 * of private ports or the envd access token first. */
static bool wake_for(struct e2b *e, struct http_req *req, struct sbx *s)
{
    return s && !sbx_agent(s) &&
           sbx_park_request(e->sp, req, s, hook_again, wake_failed, e);
}

bool e2b_envd_hook(struct http_req *req, void *arg)
{
    struct e2b *e = arg;
    const char *path = http_req_path(req);
    char id[STORE_ID_MAX] = "";
    unsigned port = 0;
    enum traffic t = classify(req, &port, id, sizeof id);
    if (t == TRAFFIC_NONE)
        return false;
    if (t == TRAFFIC_PORT) {
        struct sbx *ps = sbx_find(e->sp, NULL, id);
        if (!ps || !sbx_traffic_allowed(ps, http_req_header(req, HH_TRAFFIC_TOKEN_HEADER)) ||
            !wake_for(e, req, ps))
            e2b_port_proxy(e, req, id, port);
        return true;
    }
    bool rpc = rpc_path(path);
    const char *token = http_req_header(req, "X-Access-Token");
    if (!id[0] && !(strcmp(path, "/files") == 0 && e2b_files_signer(e, req, id, sizeof id))) {
        reply_error(req, rpc, E2B_UNAVAILABLE, 502, "no sandbox addressed (E2b-Sandbox-Id)");
        return true;
    }
    struct sbx *s = sbx_find(e->sp, NULL, id);
    if (s && token && e2b_token_valid(e, id, token) && wake_for(e, req, s))
        return true;
    if (!s || !sbx_agent(s)) {
        char msg[160];
        snprintf(msg, sizeof msg, "sandbox %.64s %s", id,
                 s ? "is not running" : "not found");
        reply_error(req, rpc, E2B_UNAVAILABLE, 502, msg);
        return true;
    }
    bool token_ok = token && e2b_token_valid(e, id, token);
    if (token && !token_ok) {
        reply_error(req, rpc, E2B_UNAUTHENTICATED, 401, "invalid access token");
        return true;
    }
    if (strcmp(path, "/health") == 0) {
        http_reply(req, 204, NULL, NULL, 0);
        return true;
    }
    struct e2b_box *box = e2b_box_get(e, id);
    if (!box) {
        reply_error(req, rpc, E2B_INTERNAL, 500, "out of memory");
        return true;
    }
    if (strcmp(path, "/files") == 0) {
        const char *user = http_req_query(req, "username");
        if (!user || !*user)
            user = E2B_DEFAULT_USER;
        if (strcmp(http_req_method(req), "GET") == 0 || http_req_is_head(req))
            e2b_files_get(e, req, box, user, token_ok);
        else if (strcmp(http_req_method(req), "POST") == 0)
            e2b_files_post(e, req, box, user, token_ok);
        else
            e2b_reply_rest_error(req, 405, "/files supports GET and POST");
        return true;
    }
    if (!token_ok) {
        reply_error(req, rpc, E2B_UNAUTHENTICATED, 401, "missing access token (X-Access-Token)");
        return true;
    }
    const struct e2b_method *m = NULL;
    for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++)
        if (strcmp(methods[i].path, path) == 0)
            m = &methods[i];
    if (!m) {
        reply_error(req, true, E2B_UNIMPLEMENTED, 404, "unknown method");
        return true;
    }
    struct e2b_call *c = calloc(1, sizeof *c);
    if (!c) {
        reply_error(req, true, E2B_INTERNAL, 500, "out of memory");
        return true;
    }
    c->e = e;
    c->req = req;
    c->box = box;
    c->m = m;
    if (!rpc_user(req, c->user, sizeof c->user)) {
        free(c);
        reply_error(req, true, E2B_UNAUTHENTICATED, 401, "malformed Authorization header");
        return true;
    }
    e2b_user_home(c->user, c->home, sizeof c->home);
    e2b_rpc_begin(c);
    return true;
}
