/* e2b_fork: E2B's fork and snapshot routes (SDK 2.51: Sandbox.fork, createSnapshot,
 * listSnapshots, deleteSnapshot) over ours (sbx_fork.c, sbx_snap.c).
 *
 *   POST   /sandboxes/{id}/fork {"count", "timeout"}  -> one fork op; answers when it
 *          ended: 201 [{"sandbox": <Sandbox>} | {"error": {"code", "message"}}] per fork
 *   POST   /sandboxes/{id}/snapshots {"name"}         -> snapshot op; 201 {"snapshotID",
 *          "names"} once ready
 *   GET    /snapshots?sandboxID=&name=                -> 200 [{"snapshotID", "names"}]
 *          (ready ones, one page: no x-next-token)
 *   DELETE /templates/{id}                            -> the SDK's deleteSnapshot: 204,
 *          404 for anything that is not one of the caller's snapshots
 * Sandbox.create(snapshotID) needs nothing here: a create whose template is a snapshot
 * restores from it (sbx_submit_create). Errors are E2B's {"code", "message"}; over quota
 * is 429 as for creates. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/auth/auth.h"
#include "daemon/http/router.h"
#include "daemon/ops/op.h"
#include "daemon/sandbox/sbx.h"
#include "e2b.h"
#include "e2b_internal.h"

#define BODY_MAX (64u * 1024)

struct fwait {
    struct e2b *e;
    struct http_req *req;
    struct op_watch *w;
    char tenant[STORE_ID_MAX];
    unsigned n;                          /* forks; 0 = a snapshot */
    char ids[SBX_FORK_MAX][STORE_ID_MAX];
    char name[STORE_ID_MAX];             /* the snapshot's (its id is ids[0]) */
    int64_t timeout_s;                   /* forks: E2B's timeout, 0 = keep the parent's */
};

static void fwait_close(struct http_req *req, void *arg)
{
    (void)req;
    struct fwait *w = arg;
    op_unwatch(w->e->sp, w->w);
    free(w);
}

static void reply_err(struct http_req *req, const struct spaced_err *err)
{
    int status = err->status ? err->status : 500;
    e2b_reply_rest_error(req, strcmp(err->code, "quota_exceeded") == 0 ? 429 : status, "%s",
                         err->message);
}

static json_t *names_json(const char *name)
{
    return name && name[0] ? json_pack("[s]", name) : json_array();
}

/* Per fork: {"sandbox": ...} when it runs, else {"error": {...}} (E2B: each fork
 * succeeds or fails on its own). */
static void reply_forks(struct fwait *w)
{
    json_t *out = json_array();
    for (unsigned i = 0; i < w->n; i++) {
        struct sbx *s = sbx_find(w->e->sp, w->tenant, w->ids[i]);
        json_t *sb = NULL;
        if (s && sbx_state(s) == SBX_RUNNING) {
            struct spaced_err err;
            if (w->timeout_s > 0)
                sbx_set_timeout(w->e->sp, s, w->timeout_s, NULL, &err);
            sb = e2b_sandbox_reply(w->e, w->ids[i], sbx_record(s)->template_name);
        }
        if (sb) {
            json_array_append_new(out, json_pack("{s:o}", "sandbox", sb));
        } else {
            const char *why = s && sbx_record(s)->failure ? sbx_record(s)->failure
                                                          : "the fork did not start";
            json_array_append_new(out, json_pack("{s:{s:i, s:s}}", "error", "code", 500,
                                                 "message", why));
        }
    }
    http_reply_json(w->req, 201, out); /* E2B: anything else means no fork was tried */
    json_decref(out);
}

static void fwait_fn(const struct store_op *op, void *arg)
{
    struct fwait *w = arg;
    if (!op_state_terminal(op_state_parse(op->state)))
        return;
    op_unwatch(w->e->sp, w->w);
    if (w->n) {
        reply_forks(w); /* a failed fork op still answers per fork */
    } else if (strcmp(op->state, "succeeded") != 0) {
        e2b_reply_rest_error(w->req, 500, "snapshot %s: %s", op->state,
                             op->error_message ? op->error_message : op->error_code);
    } else {
        json_t *b = json_pack("{s:s, s:o}", "snapshotID", w->ids[0], "names",
                              names_json(w->name));
        http_reply_json(w->req, 201, b);
        json_decref(b);
    }
    free(w); /* the request is answered: fwait_close will not run */
}

static void follow(struct fwait *w, const char *op_id)
{
    w->w = op_watch(w->e->sp, op_id, fwait_fn, w);
    if (!w->w) {
        e2b_reply_rest_error(w->req, 500, "operation %s vanished", op_id);
        free(w);
        return;
    }
    http_req_on_close(w->req, fwait_close, w);
}

json_t *e2b_body_object(struct http_req *req, const char *data, size_t len)
{
    json_t *j = len ? json_loadb(data, len, 0, NULL) : json_object();
    if (!json_is_object(j)) {
        json_decref(j);
        e2b_reply_rest_error(req, 400, "body must be a JSON object");
        return NULL;
    }
    return j;
}

static struct fwait *begin(struct e2b *e, struct http_req *req, const char *data, size_t len,
                           json_t **body)
{
    struct auth_principal who;
    if (!e2b_api_authenticate(e->sp, req, &who) || !(*body = e2b_body_object(req, data, len)))
        return NULL;
    struct fwait *w = calloc(1, sizeof *w);
    if (!w) {
        json_decref(*body);
        e2b_reply_rest_error(req, 500, "out of memory");
        return NULL;
    }
    w->e = e;
    w->req = req;
    snprintf(w->tenant, sizeof w->tenant, "%s", who.tenant);
    return w;
}

static void fork_body(struct http_req *req, const char *data, size_t len, void *arg)
{
    json_t *body;
    struct fwait *w = begin(arg, req, data, len, &body);
    if (!w)
        return;
    json_t *c = json_object_get(body, "count"), *t = json_object_get(body, "timeout");
    json_int_t n = c && !json_is_null(c) ? json_integer_value(c) : 1;
    bool bad = (c && !json_is_null(c) && (!json_is_integer(c) || n < 1 || n > SBX_FORK_MAX)) ||
               (t && !json_is_null(t) && (!json_is_integer(t) || json_integer_value(t) < 0 ||
                                          json_integer_value(t) > SBX_TIMEOUT_MAX_S));
    w->timeout_s = json_is_integer(t) ? json_integer_value(t) : 0;
    json_decref(body);
    const char *id = router_param(req, "id");
    struct store_op op;
    struct spaced_err err;
    if (bad) {
        e2b_reply_rest_error(req, 400, "count must be an integer in 1..%d, timeout seconds in "
                             "0..%lld", SBX_FORK_MAX, (long long)SBX_TIMEOUT_MAX_S);
    } else if (!sbx_id_valid(id)) {
        e2b_reply_rest_error(req, 404, "sandbox %.64s not found", id ? id : "");
    } else if (sbx_submit_fork(w->e->sp, w->tenant, id, (unsigned)n, &op, w->ids, &err) < 0) {
        reply_err(req, &err);
    } else {
        w->n = (unsigned)n;
        follow(w, op.id);
        store_op_clear(&op);
        return;
    }
    free(w);
}

static void snapshot_body(struct http_req *req, const char *data, size_t len, void *arg)
{
    json_t *body;
    struct fwait *w = begin(arg, req, data, len, &body);
    if (!w)
        return;
    json_t *jn = json_object_get(body, "name");
    bool bad = jn && !json_is_null(jn) &&
               (!json_is_string(jn) || strlen(json_string_value(jn)) >= sizeof w->name);
    if (!bad && json_is_string(jn))
        snprintf(w->name, sizeof w->name, "%s", json_string_value(jn));
    json_decref(body);
    const char *id = router_param(req, "id");
    struct store_op op;
    struct store_snap snap;
    struct spaced_err err;
    if (bad) {
        e2b_reply_rest_error(req, 400, "name must be a string of at most %d characters",
                             (int)sizeof w->name - 1);
    } else if (!sbx_id_valid(id)) {
        e2b_reply_rest_error(req, 404, "sandbox %.64s not found", id ? id : "");
    } else if (sbx_submit_snapshot(w->e->sp, w->tenant, id, w->name, &op, &snap, &err) < 0) {
        reply_err(req, &err);
    } else {
        snprintf(w->ids[0], sizeof w->ids[0], "%s", snap.id);
        follow(w, op.id);
        store_op_clear(&op);
        return;
    }
    free(w);
}

static void h_fork(struct http_req *req, void *arg)
{
    http_req_read_body(req, BODY_MAX, fork_body, arg);
}

static void h_snapshot(struct http_req *req, void *arg)
{
    http_req_read_body(req, BODY_MAX, snapshot_body, arg);
}

struct list_ctx {
    json_t *out;
    const char *sandbox, *name;
};

static int list_one(const struct store_snap *r, void *arg)
{
    struct list_ctx *l = arg;
    if (strcmp(r->state, "ready") == 0 && (!l->sandbox || strcmp(l->sandbox, r->source) == 0) &&
        (!l->name || strcmp(l->name, r->name) == 0))
        json_array_append_new(l->out, json_pack("{s:s, s:o}", "snapshotID", r->id, "names",
                                                names_json(r->name)));
    return 0;
}

static void h_list(struct http_req *req, void *arg)
{
    struct e2b *e = arg;
    struct auth_principal who;
    if (!e2b_api_authenticate(e->sp, req, &who))
        return;
    struct list_ctx l = {json_array(), http_req_query(req, "sandboxID"),
                         http_req_query(req, "name")};
    if (store_snap_each(e->sp->store, who.tenant, list_one, &l) != 0) {
        json_decref(l.out);
        e2b_reply_rest_error(req, 503, "listing snapshots: the store failed");
        return;
    }
    http_reply_json(req, 200, l.out);
    json_decref(l.out);
}

static void h_delete(struct http_req *req, void *arg)
{
    struct e2b *e = arg;
    struct auth_principal who;
    if (!e2b_api_authenticate(e->sp, req, &who))
        return;
    const char *id = router_param(req, "id");
    struct spaced_err err;
    if (sbx_snap_delete(e->sp, who.tenant, id ? id : "", &err) < 0) {
        reply_err(req, &err);
        return;
    }
    http_reply(req, 204, NULL, NULL, 0);
}

void e2b_fork_register(struct router *r, struct e2b *e)
{
    router_add(r, "POST", "/sandboxes/{id}/fork", h_fork, e);
    router_add(r, "POST", "/sandboxes/{id}/snapshots", h_snapshot, e);
    router_add(r, "GET", "/snapshots", h_list, e);
    router_add(r, "DELETE", "/templates/{id}", h_delete, e);
}
