/* routes_sandboxes.c: /v1/sandboxes — create, list, get, delete, lifecycle verbs and
 * timeout. Every mutation goes through the ops engine (op.h) and answers 202. */
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/auth/auth.h"
#include "daemon/cluster/cluster.h"
#include "daemon/ops/op.h"
#include "daemon/sandbox/sbx.h"
#include "http_parse.h"
#include "log.h"
#include "routes.h"

#define LIST_LIMIT_DEFAULT 100
#define LIST_LIMIT_MAX 1000

/* ---- create ------------------------------------------------------------------------- */

static void hex_sha256(const char *data, size_t len, char out[65])
{
    unsigned char md[SHA256_DIGEST_LENGTH];
    SHA256((const unsigned char *)data, len, md);
    for (int i = 0; i < SHA256_DIGEST_LENGTH; i++)
        snprintf(out + 2 * i, 3, "%02x", md[i]);
}

static void create_body(struct http_req *req, const char *data, size_t len, void *arg)
{
    struct spaced *sp = arg;
    struct auth_principal who;
    if (!auth_require(sp, req, &who))
        return;
    struct spaced_err err;
    struct sbx_spec spec;
    if (sbx_spec_parse(data, len, &spec, &err) < 0) {
        routes_reply_err(sp, req, &err);
        return;
    }
    const char *idem = http_req_header(req, "Idempotency-Key");
    char hash[65];
    hex_sha256(data, len, hash);
    struct store_op op;
    int rc = sbx_submit_create(sp, who.tenant, &spec, idem, hash, &op, &err);
    sbx_spec_clear(&spec);
    if (rc < 0) {
        routes_reply_err(sp, req, &err);
        return;
    }
    json_t *sb = NULL;
    struct sbx *s = sbx_find(sp, who.tenant, op.target);
    if (s) {
        sb = sbx_to_json(s);
    } else {
        struct store_sbx rec;
        if (store_sbx_get(sp->store, op.target, &rec) == 0) {
            sb = sbx_record_to_json(&rec);
            store_sbx_clear(&rec);
        }
    }
    routes_reply_op(req, 202, &op, sb);
    json_decref(sb);
    store_op_clear(&op);
}

static void h_create(struct http_req *req, void *arg)
{
    http_req_read_body(req, ROUTES_BODY_MAX, create_body, arg);
}

/* ---- list --------------------------------------------------------------------------- */

/* Collects metadata.<key>=<value> query parameters into a JSON object (NULL if none);
 * -1 on a malformed parameter. */
static int metadata_filter(struct http_req *req, json_t **out)
{
    *out = NULL;
    const char *q = strchr(http_req_target(req), '?');
    if (!q)
        return 0;
    q++;
    while (*q) {
        size_t n = strcspn(q, "&");
        const char *eq = memchr(q, '=', n);
        /* A key that does not decode is not a metadata filter; a metadata value that
         * does not decode, holds %00 or is too long is an error. */
        char *key = eq ? http_pct_decode(q, (size_t)(eq - q), true) : NULL;
        if (key && strlen(key) < 128 && strncmp(key, "metadata.", 9) == 0) {
            char *val = http_pct_decode(eq + 1, n - (size_t)(eq - q) - 1, true);
            if (key[9] == '\0' || !val || strlen(val) > SBX_META_VALUE_MAX) {
                free(val);
                free(key);
                json_decref(*out);
                *out = NULL;
                return -1;
            }
            if (!*out)
                *out = json_object();
            json_object_set_new(*out, key + 9, json_string(val));
            free(val);
        }
        free(key);
        q += n;
        if (*q == '&')
            q++;
    }
    return 0;
}

struct list_ctx {
    json_t *out;
    json_t *next;                        /* id of the last row: the next cursor */
    struct cluster_node_states nodes;    /* multi-node: whose nodes are live */
};

static int list_one(const struct store_sbx *r, void *arg)
{
    struct list_ctx *l = arg;
    json_t *j = sbx_record_to_json(r);
    const char *ns = cluster_node_state(&l->nodes, r->node);
    if (j && ns) /* listings come from the store: say when the node is not there */
        json_object_set_new(j, "node_state", json_string(ns));
    json_array_append_new(l->out, j);
    json_decref(l->next);
    l->next = json_string(r->id);
    return 0;
}

static void h_list(struct http_req *req, void *arg)
{
    struct spaced *sp = arg;
    struct auth_principal who;
    if (!auth_require(sp, req, &who))
        return;
    struct store_sbx_filter f = {.tenant = who.tenant, .limit = LIST_LIMIT_DEFAULT};
    f.state = http_req_query(req, "state");
    if (f.state && (sbx_state_parse(f.state) < 0)) {
        routes_reply_error(sp, req, 400, "invalid_request", "state \"%.32s\" is not a sandbox state", f.state);
        return;
    }
    f.template_name = http_req_query(req, "template");
    const char *lim = http_req_query(req, "limit");
    if (lim) {
        char *end = NULL;
        long v = strtol(lim, &end, 10);
        if (!*lim || *end || v < 1 || v > LIST_LIMIT_MAX) {
            routes_reply_error(sp, req, 400, "invalid_request", "limit must be an integer in 1..%d", LIST_LIMIT_MAX);
            return;
        }
        f.limit = (unsigned)v;
    }
    f.after_id = http_req_query(req, "cursor");
    if (f.after_id && !sbx_id_valid(f.after_id)) {
        routes_reply_error(sp, req, 400, "invalid_request", "cursor is not a value returned as next_cursor");
        return;
    }
    json_t *meta = NULL;
    if (metadata_filter(req, &meta) < 0) {
        routes_reply_error(sp, req, 400, "invalid_request", "malformed metadata.<key>=<value> filter");
        return;
    }
    char *meta_text = meta ? json_dumps(meta, JSON_COMPACT) : NULL;
    json_decref(meta);
    f.metadata_json = meta_text;
    struct list_ctx l = {.out = json_array(), .next = json_null()};
    bool more = false;
    int rc = cluster_node_states_load(sp, &l.nodes);
    if (rc == 0)
        rc = store_sbx_list(sp->store, &f, list_one, &l, &more);
    free(meta_text);
    cluster_node_states_free(&l.nodes);
    if (rc != 0) {
        json_decref(l.out);
        json_decref(l.next);
        routes_reply_error(sp, req, 503, "store_unavailable", "listing sandboxes: the store failed: %s",
                           store_errmsg(sp->store));
        return;
    }
    json_t *body = json_pack("{s:o, s:o}", "sandboxes", l.out, "next_cursor", more ? l.next : json_null());
    if (!more)
        json_decref(l.next);
    http_reply_json(req, 200, body);
    json_decref(body);
}

/* ---- get / delete / verbs ----------------------------------------------------------- */

static void h_get(struct http_req *req, void *arg)
{
    struct spaced *sp = arg;
    struct auth_principal who;
    if (!auth_require(sp, req, &who))
        return;
    const char *id = routes_sandbox_param(sp, req);
    if (!id)
        return;
    struct sbx *s = sbx_find(sp, who.tenant, id);
    if (!s) {
        routes_reply_error(sp, req, 404, "not_found", "sandbox %s not found", id);
        return;
    }
    json_t *body = json_pack("{s:o}", "sandbox", sbx_to_json(s));
    http_reply_json(req, 200, body);
    json_decref(body);
}

struct verb_ctx {
    struct spaced *sp;
    enum op_kind kind;
};

static void submit_verb(struct spaced *sp, struct http_req *req, const struct auth_principal *who,
                        const char *id, enum op_kind kind)
{
    struct store_op op;
    struct spaced_err err;
    if (sbx_submit(sp, who->tenant, kind, id, &op, &err) < 0) {
        routes_reply_err(sp, req, &err);
        return;
    }
    struct sbx *s = sbx_find(sp, who->tenant, id);
    json_t *sb = s ? sbx_to_json(s) : NULL;
    routes_reply_op(req, 202, &op, sb);
    json_decref(sb);
    store_op_clear(&op);
}

static void verb_body(struct http_req *req, const char *data, size_t len, void *arg)
{
    struct verb_ctx *v = arg;
    struct auth_principal who;
    if (!auth_require(v->sp, req, &who))
        return;
    const char *id = routes_sandbox_param(v->sp, req);
    if (!id)
        return;
    static const char *const none[] = {NULL};
    json_t *o = routes_parse_object(v->sp, req, data, len, none);
    if (!o)
        return;
    json_decref(o);
    submit_verb(v->sp, req, &who, id, v->kind);
}

static void h_verb(struct http_req *req, void *arg)
{
    http_req_read_body(req, ROUTES_BODY_MAX, verb_body, arg);
}

static void h_delete(struct http_req *req, void *arg)
{
    struct spaced *sp = arg;
    struct auth_principal who;
    if (!auth_require(sp, req, &who))
        return;
    const char *id = routes_sandbox_param(sp, req);
    if (id)
        submit_verb(sp, req, &who, id, OP_DELETE);
}

/* ---- timeout ------------------------------------------------------------------------ */

static void timeout_body(struct http_req *req, const char *data, size_t len, void *arg)
{
    struct spaced *sp = arg;
    struct auth_principal who;
    if (!auth_require(sp, req, &who))
        return;
    const char *id = routes_sandbox_param(sp, req);
    if (!id)
        return;
    static const char *const known[] = {"timeout", "on_timeout", NULL};
    json_t *o = routes_parse_object(sp, req, data, len, known);
    if (!o)
        return;
    json_t *t = json_object_get(o, "timeout"), *ot = json_object_get(o, "on_timeout");
    struct spaced_err err;
    struct sbx *s = sbx_find(sp, who.tenant, id);
    int rc;
    if (!json_is_integer(t) || (ot && !json_is_string(ot)))
        rc = spaced_err_set(&err, 400, "invalid_request",
                            "timeout (integer seconds) is required; on_timeout must be a string");
    else if (!s)
        rc = spaced_err_set(&err, 404, "not_found", "sandbox %s not found", id);
    else
        rc = sbx_set_timeout(sp, s, json_integer_value(t), json_string_value(ot), &err);
    json_decref(o);
    if (rc < 0) {
        routes_reply_err(sp, req, &err);
        return;
    }
    json_t *body = json_pack("{s:o}", "sandbox", sbx_to_json(s));
    http_reply_json(req, 200, body);
    json_decref(body);
}

static void h_timeout(struct http_req *req, void *arg)
{
    http_req_read_body(req, ROUTES_BODY_MAX, timeout_body, arg);
}

void routes_sandboxes_register(struct router *r, struct spaced *sp)
{
    static const enum op_kind kinds[] = {OP_START,   OP_STOP,    OP_PAUSE, OP_RESUME,
                                         OP_SUSPEND, OP_RESTORE, OP_WAKE};
    enum { NVERBS = sizeof kinds / sizeof *kinds };
    router_add(r, "POST", "/v1/sandboxes", h_create, sp);
    router_add(r, "GET", "/v1/sandboxes", h_list, sp);
    router_add(r, "GET", "/v1/sandboxes/{id}", h_get, sp);
    router_add(r, "DELETE", "/v1/sandboxes/{id}", h_delete, sp);
    router_add(r, "POST", "/v1/sandboxes/{id}/timeout", h_timeout, sp);
    routes_fork_register(r, sp);
    routes_snapshots_register(r, sp);
    struct verb_ctx *verbs = calloc(NVERBS, sizeof *verbs);
    if (!verbs || router_on_shutdown(r, free, verbs) < 0) {
        free(verbs);
        log_error("routes.register", "msg=\"out of memory: no lifecycle verbs\"");
        return;
    }
    for (size_t i = 0; i < NVERBS; i++) {
        char path[64];
        verbs[i] = (struct verb_ctx){sp, kinds[i]};
        snprintf(path, sizeof path, "/v1/sandboxes/{id}/%s", op_kind_name(kinds[i]));
        router_add(r, "POST", path, h_verb, &verbs[i]);
    }
}
