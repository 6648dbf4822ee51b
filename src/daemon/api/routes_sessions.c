/* routes_sessions.c: the command-session routes, /v1/sandboxes/{id}/sessions...
 *
 * Who may call what: creating, listing and minting a new token need the tenant's API
 * key, and so does deleting a session. Everything else about one session (status,
 * attach, stdin, close-stdin, signal, resize) accepts either the API key or that
 * session's attach token, given as `Authorization: Bearer sat_...` or `?token=sat_...`
 * (browsers' EventSource cannot set headers). An attach token is checked against the
 * session named in the path only, so it opens nothing else. The route shapes are
 * documented in docs/api.md ("Sessions"). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "daemon/http/router.h"
#include "daemon/api/routes.h"
#include "daemon/auth/auth.h"
#include "daemon/sandbox/sbx.h"
#include "daemon/session/sess.h"
#include "log.h"

#define SESS_BODY_MAX (256u * 1024)

/* Route context: one per process, made at startup, freed by router_free
 * (routes_sess_free, registered with router_on_shutdown). */
struct routes_sess {
    struct spaced *sp;
    struct sess_table *t; /* owned */
};

/* What a request resolved to; pointers valid until the handler returns to the loop. */
struct sess_target {
    struct sbx *x;  /* the sandbox */
    struct sess *s; /* the session (NULL for collection routes) */
    char tenant[STORE_ID_MAX];
};

static void reply_err(struct http_req *req, const struct spaced_err *e)
{
    http_reply_error(req, e->status, e->code, "%s", e->message);
}

/* "ss" + SESS_ID_HEX lowercase hex digits. */
static bool sess_id_valid(const char *id)
{
    if (strlen(id) != 2 + SESS_ID_HEX || strncmp(id, SESS_ID_PREFIX, 2) != 0)
        return false;
    for (const char *p = id + 2; *p; p++)
        if (!strchr("0123456789abcdef", *p))
            return false;
    return true;
}

/* The attach token presented (bearer header with the sat_ prefix, else ?token=). */
static const char *attach_token(struct http_req *req)
{
    const char *h = http_req_header(req, "Authorization");
    if (h && strncasecmp(h, "Bearer ", 7) == 0 && sess_token_is_attach(h + 7))
        return h + 7;
    const char *q = http_req_query(req, "token");
    return q && *q ? q : NULL;
}

/* Authenticates and finds the sandbox (and session, when the route has {sid}). Replies
 * the error itself and returns false on failure. */
static bool resolve(struct routes_sess *R, struct http_req *req, bool token_ok,
                    struct sess_target *out)
{
    const char *id = router_param(req, "id"), *sid = router_param(req, "sid");
    memset(out, 0, sizeof *out);
    if (!sbx_id_valid(id)) {
        http_reply_error(req, 400, "invalid_id", "not a sandbox id (sb + 16 hex digits)");
        return false;
    }
    if (sid && !sess_id_valid(sid)) {
        http_reply_error(req, 400, "invalid_id", "not a session id (ss + %d hex digits)",
                         SESS_ID_HEX);
        return false;
    }
    const char *tok = attach_token(req);
    if (tok) {
        struct sess *s = sid ? sess_find(R->t, NULL, id, sid) : NULL;
        enum sess_token_check c = s ? sess_check_token(s, tok) : SESS_TOKEN_MISMATCH;
        if (!token_ok || !sid) {
            http_reply_error(req, 403, "forbidden",
                             "an attach token only works on its own session's routes; this "
                             "route needs an API key");
            return false;
        }
        if (c == SESS_TOKEN_EXPIRED) {
            http_reply_error(req, 401, "token_expired",
                             "the attach token of session %s has expired; mint a new one with "
                             "POST .../sessions/%s/token and your API key",
                             sid, sid);
            return false;
        }
        if (c != SESS_TOKEN_VALID) {
            http_reply_error(req, 403, "forbidden",
                             "this attach token is not valid for session %s of sandbox %s", sid,
                             id);
            return false;
        }
        snprintf(out->tenant, sizeof out->tenant, "%s", sess_tenant(s));
        out->s = s;
    } else {
        struct auth_principal who;
        if (!auth_require(R->sp, req, &who))
            return false;
        snprintf(out->tenant, sizeof out->tenant, "%s", who.tenant);
    }
    out->x = sbx_find(R->sp, out->tenant, id);
    if (!out->x) {
        http_reply_error(req, 404, "not_found", "no sandbox %s", id);
        return false;
    }
    if (sid && !out->s)
        out->s = sess_find(R->t, out->tenant, id, sid);
    if (sid && !out->s) {
        http_reply_error(req, 404, "not_found", "no session %s in sandbox %s", sid, id);
        return false;
    }
    return true;
}

static void create_body(struct http_req *req, const char *data, size_t len, void *arg)
{
    struct routes_sess *R = arg;
    struct sess_target tg;
    struct spaced_err e;
    struct sess_spec spec;
    char token[SESS_TOKEN_LEN + 1];
    if (!resolve(R, req, false, &tg))
        return;
    if (!routes_agent_now(req, tg.x))
        return;
    if (sess_req_create(data, len, &spec, &e) < 0) {
        reply_err(req, &e);
        return;
    }
    struct sess *s = sess_create(R->t, tg.tenant, sbx_id(tg.x), &spec, token, &e);
    sess_spec_clear(&spec);
    if (!s) {
        reply_err(req, &e);
        return;
    }
    json_t *o = sess_to_json(s);
    json_t *reply = o ? json_pack("{s:O,s:O,s:O,s:s,s:O,s:O}", "id", json_object_get(o, "id"),
                                  "state", json_object_get(o, "state"), "attach_url",
                                  json_object_get(o, "attach_url"), "attach_token", token,
                                  "token_expires_at", json_object_get(o, "token_expires_at"),
                                  "session", o)
                      : NULL;
    char loc[160];
    snprintf(loc, sizeof loc, "/v1/sandboxes/%s/sessions/%s", sbx_id(tg.x), sess_id(s));
    http_reply_add_header(req, "Location", loc);
    http_reply_json(req, 201, reply);
    json_decref(reply);
    json_decref(o);
}

/* Authorises before reading a JSON body; `done` resolves again (the session or the
 * sandbox may have changed while the body arrived). */
static void with_body(struct http_req *req, void *arg, bool token_ok, http_body_fn done)
{
    struct sess_target tg;
    if (resolve(arg, req, token_ok, &tg))
        http_req_read_body(req, SESS_BODY_MAX, done, arg);
}

/* A paused or suspended sandbox with auto-resume is woken before the body is read (the
 * route then runs again: routes_require_agent); any other answer about the sandbox's
 * state comes after the body, from create_body, as for every sandbox before. */
static void h_create(struct http_req *req, void *arg)
{
    struct routes_sess *R = arg;
    struct sess_target tg;
    if (!resolve(R, req, false, &tg))
        return;
    if (!sbx_agent(tg.x) && sbx_record(tg.x)->auto_resume &&
        !routes_require_agent(R->sp, req, tg.x))
        return;
    http_req_read_body(req, SESS_BODY_MAX, create_body, arg);
}

static void h_list(struct http_req *req, void *arg)
{
    struct routes_sess *R = arg;
    struct sess_target tg;
    if (!resolve(R, req, false, &tg))
        return;
    json_t *o = sess_list_json(R->t, tg.tenant, sbx_id(tg.x));
    http_reply_json(req, 200, o);
    json_decref(o);
}

static void reply_session(struct http_req *req, struct sess *s)
{
    json_t *o = json_pack("{s:o}", "session", sess_to_json(s));
    http_reply_json(req, 200, o);
    json_decref(o);
}

static void h_get(struct http_req *req, void *arg)
{
    struct sess_target tg;
    if (resolve(arg, req, true, &tg))
        reply_session(req, tg.s);
}

static void h_attach(struct http_req *req, void *arg)
{
    struct sess_target tg;
    struct spaced_err e;
    if (!resolve(arg, req, true, &tg))
        return;
    int64_t last;
    if (routes_last_event_id(((struct routes_sess *)arg)->sp, req, &last) < 0)
        return;
    /* A process not yet attached needs the agent; a finished one replays without it. */
    if (!sbx_agent(tg.x) && sbx_state(tg.x) == SBX_RUNNING && sess_state(tg.s) < SESS_EXITED) {
        routes_agent_now(req, tg.x);
        return;
    }
    if (sess_attach(tg.s, sbx_agent(tg.x), req, last, &e) < 0)
        reply_err(req, &e);
}

static void h_stdin(struct http_req *req, void *arg)
{
    struct sess_target tg;
    struct spaced_err e;
    if (resolve(arg, req, true, &tg) && sess_stdin(tg.s, sbx_agent(tg.x), req, &e) < 0)
        reply_err(req, &e);
}

static void h_close_stdin(struct http_req *req, void *arg)
{
    struct sess_target tg;
    struct spaced_err e;
    if (!resolve(arg, req, true, &tg))
        return;
    if (sess_close_stdin(tg.s, sbx_agent(tg.x), &e) < 0)
        reply_err(req, &e);
    else
        reply_session(req, tg.s);
}

static void signal_body(struct http_req *req, const char *data, size_t len, void *arg)
{
    struct sess_target tg;
    struct spaced_err e;
    int sig;
    if (!resolve(arg, req, true, &tg))
        return;
    if (sess_req_signal(data, len, &sig, &e) < 0 || sess_signal(tg.s, sbx_agent(tg.x), sig, &e) < 0)
        reply_err(req, &e);
    else
        reply_session(req, tg.s);
}

static void resize_body(struct http_req *req, const char *data, size_t len, void *arg)
{
    struct sess_target tg;
    struct spaced_err e;
    unsigned rows, cols;
    if (!resolve(arg, req, true, &tg))
        return;
    if (sess_req_resize(data, len, &rows, &cols, &e) < 0 ||
        sess_resize(tg.s, sbx_agent(tg.x), rows, cols, &e) < 0)
        reply_err(req, &e);
    else
        reply_session(req, tg.s);
}

static void h_signal(struct http_req *req, void *arg)
{
    with_body(req, arg, true, signal_body);
}

static void h_resize(struct http_req *req, void *arg)
{
    with_body(req, arg, true, resize_body);
}

static void h_token(struct http_req *req, void *arg)
{
    struct sess_target tg;
    struct spaced_err e;
    char token[SESS_TOKEN_LEN + 1];
    int64_t ttl = SESS_TOKEN_TTL_DEFAULT_S, exp;
    if (!resolve(arg, req, false, &tg))
        return;
    if (sess_req_uint(http_req_query(req, "ttl"), "ttl", 1, SESS_TOKEN_TTL_MAX_S, &ttl, &e) < 0 ||
        sess_new_token(tg.s, ttl, token, &exp, &e) < 0) {
        reply_err(req, &e);
        return;
    }
    char when[32];
    json_t *o = json_pack("{s:s,s:s}", "attach_token", token, "token_expires_at",
                          spaced_fmt_time(exp, when));
    http_reply_json(req, 200, o);
    json_decref(o);
}

static void routes_sess_free(void *arg)
{
    struct routes_sess *R = arg;
    sess_table_free(R->t);
    free(R);
}

/* DELETE needs the API key: an attach token may drive its session, not remove it. */
static void h_delete(struct http_req *req, void *arg)
{
    struct sess_target tg;
    struct spaced_err e;
    if (!resolve(arg, req, false, &tg))
        return;
    if (sess_delete(tg.s, sbx_agent(tg.x), &e) < 0)
        reply_err(req, &e);
    else
        http_reply(req, 204, NULL, NULL, 0);
}

void routes_sessions_register(struct router *r, struct spaced *sp)
{
    static const struct {
        const char *method, *path;
        router_handler_fn fn;
    } routes[] = {
        {"POST", "/v1/sandboxes/{id}/sessions", h_create},
        {"GET", "/v1/sandboxes/{id}/sessions", h_list},
        {"GET", "/v1/sandboxes/{id}/sessions/{sid}", h_get},
        {"DELETE", "/v1/sandboxes/{id}/sessions/{sid}", h_delete},
        {"GET", "/v1/sandboxes/{id}/sessions/{sid}/attach", h_attach},
        {"POST", "/v1/sandboxes/{id}/sessions/{sid}/stdin", h_stdin},
        {"POST", "/v1/sandboxes/{id}/sessions/{sid}/close-stdin", h_close_stdin},
        {"POST", "/v1/sandboxes/{id}/sessions/{sid}/signal", h_signal},
        {"POST", "/v1/sandboxes/{id}/sessions/{sid}/resize", h_resize},
        {"POST", "/v1/sandboxes/{id}/sessions/{sid}/token", h_token},
    };
    /* Owned by the router first: a table, once made, listens to the sandboxes and may
     * only go away at shutdown. */
    struct routes_sess *R = calloc(1, sizeof *R);
    if (R && router_on_shutdown(r, routes_sess_free, R) < 0) {
        free(R);
        R = NULL;
    }
    if (R)
        R->t = sess_table_new(sp);
    if (!R || !R->t) {
        log_error("sessions.init", "msg=%s", "out of memory: session routes not registered");
        return;
    }
    R->sp = sp;
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
        router_add(r, routes[i].method, routes[i].path, routes[i].fn, R);
}
