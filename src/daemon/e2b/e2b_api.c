/* e2b_api: the E2B control plane (/sandboxes..., /v2/sandboxes...) over our sandboxes.
 *
 * E2B's lifecycle calls are synchronous, ours are operations: each route submits the op
 * (op.h) and answers when op_watch reports it terminal. Mapping: create -> create,
 * kill -> delete, pause -> suspend (memory and running processes kept on disk),
 * resume/connect -> wake (by whatever path brings the sandbox back). Every error body is
 * {"code": <status>, "message": ...}: the SDK tests body.code (404 -> not found,
 * 409 -> already paused). Sandbox ids are ours ("sb" + 16 hex, valid in host names). */
#include <openssl/sha.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/http/router.h"
#include "daemon/auth/auth.h"
#include "daemon/ops/op.h"
#include "daemon/sandbox/sbx.h"
#include "e2b.h"
#include "e2b_internal.h"
#include "e2b_netopts.h"
#include "e2b_util.h"
#include "log.h"

#define BODY_MAX (256u * 1024)
#define TIMEOUT_DEFAULT_S 300
#define LIST_LIMIT_DEFAULT 100
#define LIST_LIMIT_MAX 1000

/* ---- tokens ------------------------------------------------------------------------- */

int e2b_token_for(struct e2b *e, const char *id, char *out, size_t cap)
{
    char scope[STORE_ID_MAX + 16], tok[AUTH_TOKEN_MAX];
    snprintf(scope, sizeof scope, "e2b-envd:%s", id);
    if (auth_token_mint(e->sp->auth, scope, E2B_TOKEN_EXPIRES_MS, tok, sizeof tok) < 0)
        return -1;
    int n = snprintf(out, cap, "%s.%s", id, tok);
    return n < 0 || (size_t)n >= cap ? -1 : 0;
}

bool e2b_token_valid(struct e2b *e, const char *id, const char *token)
{
    size_t il = strlen(id);
    if (!token || strncmp(token, id, il) != 0 || token[il] != '.')
        return false;
    char scope[STORE_ID_MAX + 16];
    snprintf(scope, sizeof scope, "e2b-envd:%s", id);
    return auth_token_verify(e->sp->auth, scope, token + il + 1, spaced_now_ms());
}

/* ---- replies -------------------------------------------------------------------------- */

static void rest_error(struct http_req *req, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void rest_error(struct http_req *req, int status, const char *fmt, ...)
{
    char msg[E2B_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    e2b_reply_rest_error(req, status, "%s", msg);
}

static void reply_spaced_err(struct http_req *req, const struct spaced_err *err)
{
    rest_error(req, err->status ? err->status : 500, "%s", err->message);
}

static void reply_empty(struct http_req *req, int status)
{
    http_reply(req, status, NULL, NULL, 0);
}

/* Authenticates X-API-KEY (our "space_<hex>" keys; "e2b_<hex>" is accepted as the same
 * key so SDK versions that check the E2B key format client-side work too). */
bool e2b_api_authenticate(struct spaced *sp, struct http_req *req, struct auth_principal *who)
{
    const char *key = http_req_header(req, "X-API-KEY");
    char buf[AUTH_SECRET_LEN + 8], why[128];
    if (!key) {
        rest_error(req, 401, "missing X-API-KEY header");
        return false;
    }
    if (strncmp(key, "e2b_", 4) == 0 && strlen(key) < sizeof buf - 6) {
        snprintf(buf, sizeof buf, "%s%s", AUTH_SECRET_PREFIX, key + 4);
        key = buf;
    }
    int rc = auth_check_key(sp->auth, key, who, why, sizeof why);
    if (rc < 0) {
        rest_error(req, rc == AUTH_E_STORE ? 503 : 401, "%s", why);
        return false;
    }
    return true;
}

static bool api_auth(struct e2b *e, struct http_req *req, struct auth_principal *who)
{
    return e2b_api_authenticate(e->sp, req, who);
}

/* E2B knows two states: everything on its way to running counts as running. */
static const char *e2b_state(const char *ours)
{
    int s = sbx_state_parse(ours);
    switch (s) {
    case SBX_CREATING:
    case SBX_STARTING:
    case SBX_RUNNING:
    case SBX_RESUMING:
    case SBX_RESTORING:
        return "running";
    case SBX_DELETING:
    case SBX_DELETED:
        return NULL;
    default:
        return "paused";
    }
}

static bool is_running(struct sbx *s)
{
    return sbx_state(s) == SBX_RUNNING && sbx_desired(s) == SBX_RUNNING;
}

/* Sandbox (create/connect/resume). */
static json_t *sandbox_json(struct e2b *e, const char *id, const char *tpl)
{
    char tok[AUTH_TOKEN_MAX + STORE_ID_MAX + 2], traffic[AUTH_TOKEN_MAX];
    struct sbx *s = sbx_find(e->sp, NULL, id);
    int priv = s ? sbx_traffic_token(s, traffic, sizeof traffic) : 0;
    if (e2b_token_for(e, id, tok, sizeof tok) < 0 || priv < 0)
        return NULL;
    return json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:o, s:o}", "sandboxID", id, "templateID",
                     tpl, "alias", tpl, "clientID", "space", "envdVersion", E2B_ENVD_VERSION,
                     "envdAccessToken", tok, "domain",
                     e->domain[0] ? json_string(e->domain) : json_null(), "trafficAccessToken",
                     priv == 1 ? json_string(traffic) : json_null());
}

json_t *e2b_sandbox_reply(struct e2b *e, const char *id, const char *tpl)
{
    return sandbox_json(e, id, tpl);
}

/* ListedSandbox / SandboxDetail from a record; NULL for states E2B does not show. */
static json_t *listed_json(const struct store_sbx *r)
{
    const char *state = e2b_state(r->state);
    if (!state)
        return NULL;
    char started[32], end[32];
    int64_t end_ms = r->deadline_ms ? r->deadline_ms : r->created_ms + 30LL * 24 * 3600 * 1000;
    spaced_fmt_time(r->created_ms, started);
    spaced_fmt_time(end_ms, end);
    json_t *meta = r->metadata_json ? json_loads(r->metadata_json, 0, NULL) : NULL;
    /* The native record's volumes are E2B's volumeMounts as they are ({name, path}). */
    json_t *mounts = r->volumes_json ? json_loads(r->volumes_json, 0, NULL) : NULL;
    if (meta && !json_is_object(meta)) {
        json_decref(meta);
        meta = NULL;
    }
    if (mounts && !json_is_array(mounts)) {
        json_decref(mounts);
        mounts = NULL;
    }
    return json_pack("{s:s, s:s, s:s, s:s, s:I, s:I, s:I, s:s, s:s, s:s, s:s, s:o, s:o}",
                     "sandboxID", r->id, "templateID", r->template_name, "alias",
                     r->template_name, "clientID", "space", "cpuCount", (json_int_t)r->vcpus,
                     "memoryMB", (json_int_t)r->memory_mib, "diskSizeMB", (json_int_t)0,
                     "startedAt", started, "endAt", end, "state", state, "envdVersion",
                     E2B_ENVD_VERSION, "metadata", meta ? meta : json_object(),
                     "volumeMounts", mounts ? mounts : json_array());
}

/* The sandbox {id} of the tenant, or NULL after replying 404. */
static struct sbx *find_or_404(struct e2b *e, struct http_req *req, const char *tenant)
{
    const char *id = router_param(req, "id");
    struct sbx *s = id && sbx_id_valid(id) ? sbx_find(e->sp, tenant, id) : NULL;
    if (!s || sbx_desired(s) == SBX_DELETED)
        rest_error(req, 404, "sandbox %.64s not found", id ? id : "");
    return s;
}

/* Sets the deadline to timeout_s from now; extend_only keeps a later existing one. */
static void apply_timeout(struct e2b *e, struct sbx *s, int64_t timeout_s, bool extend_only)
{
    if (timeout_s <= 0)
        return;
    const struct store_sbx *r = sbx_record(s);
    int64_t want = spaced_now_ms() + timeout_s * 1000;
    if (extend_only && r && r->deadline_ms >= want)
        return;
    struct spaced_err err;
    sbx_set_timeout(e->sp, s, timeout_s, NULL, &err);
}

/* ---- waiting for an operation ------------------------------------------------------------ */

enum after { AFTER_CREATE, AFTER_EMPTY, AFTER_WAKE };

struct wait {
    struct e2b *e;
    struct http_req *req;
    struct op_watch *w;
    enum after after;
    char sandbox[STORE_ID_MAX];
    char tenant[STORE_ID_MAX];
    char tpl[STORE_ID_MAX];
    int64_t timeout_s;
};

static void wait_close(struct http_req *req, void *arg)
{
    (void)req;
    struct wait *w = arg;
    op_unwatch(w->e->sp, w->w);
    free(w);
}

static void wait_done(struct wait *w, const struct store_op *op)
{
    struct http_req *req = w->req;
    if (strcmp(op->state, "succeeded") != 0 && w->after == AFTER_CREATE) {
        /* E2B has no failed sandboxes: a create that failed leaves nothing behind. */
        struct store_op del;
        struct spaced_err derr;
        if (sbx_submit(w->e->sp, w->tenant, OP_DELETE, w->sandbox, &del, &derr) == 0)
            store_op_clear(&del);
    }
    if (strcmp(op->state, "succeeded") != 0) {
        /* A gateway that stayed down is a temporary condition: the client retries. */
        int status = strcmp(op->error_code, "not_found") == 0 ? 404
                     : strcmp(op->error_code, "gateway_unavailable") == 0 ? 503 : 500;
        rest_error(req, status,
                   "%s %s: %s", op->kind, op->state,
                   op->error_message ? op->error_message : op->error_code);
        return;
    }
    if (w->after == AFTER_EMPTY) {
        reply_empty(req, 204);
        return;
    }
    struct sbx *s = sbx_find(w->e->sp, w->tenant, w->sandbox);
    if (!s) {
        rest_error(req, 404, "sandbox %s not found", w->sandbox);
        return;
    }
    if (w->after == AFTER_WAKE)
        apply_timeout(w->e, s, w->timeout_s, false);
    const struct store_sbx *r = sbx_record(s);
    json_t *body = sandbox_json(w->e, w->sandbox, r ? r->template_name : w->tpl);
    http_reply_json(req, 201, body);
    json_decref(body);
}

static void wait_fn(const struct store_op *op, void *arg)
{
    struct wait *w = arg;
    if (!op_state_terminal(op_state_parse(op->state)))
        return;
    op_unwatch(w->e->sp, w->w);
    wait_done(w, op); /* finishes the request: wait_close will not run */
    free(w);
}

/* Follows op until it is terminal, then answers per `after`. */
static void wait_op(struct e2b *e, struct http_req *req, const struct store_op *op,
                    enum after after, const char *tenant, int64_t timeout_s)
{
    struct wait *w = calloc(1, sizeof *w);
    if (!w) {
        rest_error(req, 500, "out of memory");
        return;
    }
    w->e = e;
    w->req = req;
    w->after = after;
    w->timeout_s = timeout_s;
    snprintf(w->sandbox, sizeof w->sandbox, "%s", op->target);
    snprintf(w->tenant, sizeof w->tenant, "%s", tenant);
    w->w = op_watch(e->sp, op->id, wait_fn, w);
    if (!w->w) {
        free(w);
        rest_error(req, 500, "operation %s vanished", op->id);
        return;
    }
    http_req_on_close(req, wait_close, w);
}

/* Submits `kind` on the path's sandbox and waits. */
static void submit_and_wait(struct e2b *e, struct http_req *req, const char *tenant,
                            const char *id, enum op_kind kind, enum after after,
                            int64_t timeout_s)
{
    struct store_op op;
    struct spaced_err err;
    if (sbx_submit(e->sp, tenant, kind, id, &op, &err) < 0) {
        reply_spaced_err(req, &err);
        return;
    }
    wait_op(e, req, &op, after, tenant, timeout_s);
    store_op_clear(&op);
}

/* ---- bodies ------------------------------------------------------------------------------- */

/* Parses an optional JSON object body; replies 400 and returns NULL when invalid.
 * An empty body is {}. */
static json_t *parse_body(struct http_req *req, const char *data, size_t len)
{
    if (len == 0)
        return json_object();
    json_error_t jerr;
    json_t *j = json_loadb(data, len, 0, &jerr);
    if (!json_is_object(j)) {
        json_decref(j);
        rest_error(req, 400, "body must be a JSON object");
        return NULL;
    }
    return j;
}

/* "timeout" in seconds: absent -> dflt; invalid -> -1 (after replying 400). */
static int64_t body_timeout(struct http_req *req, json_t *body, const char *field, int64_t dflt)
{
    json_t *t = json_object_get(body, field);
    if (!t || json_is_null(t))
        return dflt;
    if (!json_is_integer(t) || json_integer_value(t) < 0 ||
        json_integer_value(t) > SBX_TIMEOUT_MAX_S) {
        rest_error(req, 400, "%s must be an integer number of seconds in 0..%lld", field,
                   (long long)SBX_TIMEOUT_MAX_S);
        return -1;
    }
    return json_integer_value(t);
}

/* ---- routes ------------------------------------------------------------------------------- */


static void with_body(struct http_req *req, const char *data, size_t len, void *arg)
{
    const struct e2b_body_route *bc = arg;
    struct auth_principal who;
    if (!api_auth(bc->e, req, &who))
        return;
    json_t *body = parse_body(req, data, len);
    if (!body)
        return;
    bc->fn(bc->e, req, &who, body, data, len);
    json_decref(body);
}

static void create(struct e2b *e, struct http_req *req, struct auth_principal *who, json_t *body,
                   const char *raw, size_t len)
{
    json_t *tpl = json_object_get(body, "templateID");
    json_t *meta = json_object_get(body, "metadata"), *env = json_object_get(body, "envVars");
    int64_t timeout = body_timeout(req, body, "timeout", TIMEOUT_DEFAULT_S);
    if (timeout < 0)
        return;
    if ((tpl && !json_is_string(tpl)) || (meta && !json_is_null(meta) && !json_is_object(meta)) ||
        (env && !json_is_null(env) && !json_is_object(env))) {
        rest_error(req, 400, "templateID must be a string, metadata and envVars objects");
        return;
    }
    char msg[256];
    json_t *netopts = e2b_netopts_spec(body, msg, sizeof msg);
    if (!netopts) {
        rest_error(req, 400, "%s", msg);
        return;
    }
    /* lifecycle: {onTimeout: "pause", autoResume: true} arrives as autoPause and
     * autoResume {"enabled": bool}; E2B resumes only sandboxes that pause on timeout. */
    bool pause = json_is_true(json_object_get(body, "autoPause"));
    json_t *ar = json_object_get(body, "autoResume");
    json_t *ar_on = json_is_object(ar) ? json_object_get(ar, "enabled") : NULL;
    if ((ar && !json_is_null(ar) && !json_is_object(ar)) ||
        (ar_on && !json_is_null(ar_on) && !json_is_boolean(ar_on))) {
        rest_error(req, 400, "autoResume must be an object {\"enabled\": boolean}");
        return;
    }
    if (json_is_true(ar_on) && !pause) {
        rest_error(req, 400, "autoResume can only be enabled when the sandbox pauses on "
                             "timeout (autoPause)");
        return;
    }
    json_t *spec_json = json_pack("{s:s, s:I, s:s, s:b}", "template",
                                  tpl ? json_string_value(tpl) : "base", "timeout",
                                  (json_int_t)timeout, "on_timeout", pause ? "suspend" : "delete",
                                  "auto_resume", json_is_true(ar_on));
    if (json_is_object(meta))
        json_object_set(spec_json, "metadata", meta);
    if (json_is_object(env))
        json_object_set(spec_json, "env", env);
    /* volumeMounts [{name, path}] is the native "volumes" field as it is (the name is the
     * E2B volume id, e2b_volume.c); sbx_spec_parse checks it. */
    json_t *mounts = json_object_get(body, "volumeMounts");
    if (mounts && !json_is_null(mounts))
        json_object_set(spec_json, "volumes", mounts);
    /* network, allow_internet_access, secure, mcp: egress policy and private ports */
    if (spec_json)
        json_object_update(spec_json, netopts);
    json_decref(netopts);
    char *text = spec_json ? json_dumps(spec_json, JSON_COMPACT) : NULL;
    json_decref(spec_json);
    struct sbx_spec spec;
    struct spaced_err err;
    if (!text) {
        rest_error(req, 500, "out of memory");
        return;
    }
    int rc = sbx_spec_parse(text, strlen(text), &spec, &err);
    free(text);
    if (rc < 0) {
        reply_spaced_err(req, &err);
        return;
    }
    unsigned char md[SHA256_DIGEST_LENGTH];
    char hash[65];
    SHA256((const unsigned char *)raw, len, md);
    for (int i = 0; i < SHA256_DIGEST_LENGTH; i++)
        snprintf(hash + 2 * i, 3, "%02x", md[i]);
    struct store_op op;
    rc = sbx_submit_create(e->sp, who->tenant, &spec, NULL, hash, &op, &err);
    sbx_spec_clear(&spec);
    if (rc < 0 && strcmp(err.code, "quota_exceeded") == 0) {
        /* E2B's answer to "too many concurrent sandboxes": the SDKs raise RateLimitError.
         * No Retry-After: the SDK would retry, and waiting frees nothing. */
        rest_error(req, 429, "%s", err.message);
        return;
    }
    if (rc < 0) {
        reply_spaced_err(req, &err);
        return;
    }
    wait_op(e, req, &op, AFTER_CREATE, who->tenant, 0);
    store_op_clear(&op);
}

static void timeout_route(struct e2b *e, struct http_req *req, struct auth_principal *who,
                          json_t *body, const char *raw, size_t len)
{
    struct sbx *s = find_or_404(e, req, who->tenant);
    if (s && sbx_desired(s) != SBX_RUNNING) {
        /* As in E2B: a paused sandbox has no timeout to change (older SDKs rely on this
         * 404 to fall back to /resume). */
        rest_error(req, 404, "sandbox %s is not running", sbx_id(s));
        return;
    }
    int64_t t = s ? body_timeout(req, body, "timeout", -1) : -1;
    if (!s || t < 0) {
        if (s && !json_object_get(body, "timeout"))
            rest_error(req, 400, "timeout is required");
        return;
    }
    struct spaced_err err;
    /* E2B's timeout counts from now: 0 is "now", the sandbox's end (kill, or pause with
     * autoPause), not our "never". */
    if ((t == 0 ? sbx_expire_now(e->sp, s, &err) : sbx_set_timeout(e->sp, s, t, NULL, &err)) < 0)
        reply_spaced_err(req, &err);
    else
        reply_empty(req, 204);
}

static void refresh_route(struct e2b *e, struct http_req *req, struct auth_principal *who,
                          json_t *body, const char *raw, size_t len)
{
    struct sbx *s = find_or_404(e, req, who->tenant);
    int64_t t = s ? body_timeout(req, body, "duration", TIMEOUT_DEFAULT_S) : -1;
    if (!s || t < 0)
        return;
    apply_timeout(e, s, t, true);
    reply_empty(req, 204);
}

static void pause_route(struct e2b *e, struct http_req *req, struct auth_principal *who,
                        json_t *body, const char *raw, size_t len)
{
    struct sbx *s = find_or_404(e, req, who->tenant);
    if (!s)
        return;
    enum sbx_state d = sbx_desired(s);
    if (d == SBX_SUSPENDED || d == SBX_PAUSED || d == SBX_STOPPED) {
        rest_error(req, 409, "sandbox %s is already paused", sbx_id(s));
        return;
    }
    char id[STORE_ID_MAX];
    snprintf(id, sizeof id, "%s", sbx_id(s));
    submit_and_wait(e, req, who->tenant, id, OP_SUSPEND, AFTER_EMPTY, 0);
}

/* connect (v1, v2) and the legacy resume: wake if needed, then answer with a Sandbox. */
static void wake(struct e2b *e, struct http_req *req, struct auth_principal *who, json_t *body,
                 bool legacy_resume)
{
    struct sbx *s = find_or_404(e, req, who->tenant);
    int64_t t = s ? body_timeout(req, body, "timeout", legacy_resume ? TIMEOUT_DEFAULT_S : 0)
                  : -1;
    if (!s || t < 0)
        return;
    if (is_running(s)) {
        if (legacy_resume) {
            rest_error(req, 409, "sandbox %s is already running", sbx_id(s));
            return;
        }
        apply_timeout(e, s, t, true);
        const struct store_sbx *r = sbx_record(s);
        json_t *sb = sandbox_json(e, sbx_id(s), r ? r->template_name : "base");
        http_reply_json(req, 200, sb);
        json_decref(sb);
        return;
    }
    char id[STORE_ID_MAX];
    snprintf(id, sizeof id, "%s", sbx_id(s));
    submit_and_wait(e, req, who->tenant, id, OP_WAKE, AFTER_WAKE, t);
}

static void connect_route(struct e2b *e, struct http_req *req, struct auth_principal *who,
                          json_t *body, const char *raw, size_t len)
{
    wake(e, req, who, body, false);
}

static void resume_route(struct e2b *e, struct http_req *req, struct auth_principal *who,
                         json_t *body, const char *raw, size_t len)
{
    wake(e, req, who, body, true);
}

/* The SDK's updateNetwork: the egress fields replace the sandbox's policy, live. */
static void network_route(struct e2b *e, struct http_req *req, struct auth_principal *who,
                          json_t *body, const char *raw, size_t len)
{
    struct sbx *s = find_or_404(e, req, who->tenant);
    if (!s || sbx_desired(s) == SBX_DELETED)
        return;
    char msg[256];
    json_t *policy = e2b_netopts_update(body, msg, sizeof msg);
    if (!policy) {
        rest_error(req, 400, "%s", msg);
        return;
    }
    struct spaced_err err;
    int rc = sbx_network_set(e->sp, s, policy, &err);
    json_decref(policy);
    if (rc != 0)
        reply_spaced_err(req, &err);
    else
        reply_empty(req, 204);
}

static void h_body(struct http_req *req, void *arg)
{
    http_req_read_body(req, BODY_MAX, with_body, arg);
}

static void h_get(struct http_req *req, void *arg)
{
    struct e2b *e = arg;
    struct auth_principal who;
    if (!api_auth(e, req, &who))
        return;
    struct sbx *s = find_or_404(e, req, who.tenant);
    const struct store_sbx *r = s ? sbx_record(s) : NULL;
    if (!s)
        return;
    json_t *d = r ? listed_json(r) : NULL;
    char tok[AUTH_TOKEN_MAX + STORE_ID_MAX + 2];
    if (!d || e2b_token_for(e, sbx_id(s), tok, sizeof tok) < 0) {
        json_decref(d);
        rest_error(req, 404, "sandbox %s not found", sbx_id(s));
        return;
    }
    json_object_set_new(d, "envdAccessToken", json_string(tok));
    json_object_set_new(d, "domain", e->domain[0] ? json_string(e->domain) : json_null());
    json_object_set_new(d, "lifecycle",
                        json_pack("{s:s, s:b}", "onTimeout",
                                  strcmp(r->on_timeout, "suspend") == 0 ? "pause" : "kill",
                                  "autoResume", r->auto_resume));
    http_reply_json(req, 200, d);
    json_decref(d);
}

static void h_kill(struct http_req *req, void *arg)
{
    struct e2b *e = arg;
    struct auth_principal who;
    if (!api_auth(e, req, &who))
        return;
    struct sbx *s = find_or_404(e, req, who.tenant);
    if (!s)
        return;
    char id[STORE_ID_MAX];
    snprintf(id, sizeof id, "%s", sbx_id(s));
    submit_and_wait(e, req, who.tenant, id, OP_DELETE, AFTER_EMPTY, 0);
}

static void h_metrics(struct http_req *req, void *arg)
{
    struct e2b *e = arg;
    struct auth_principal who;
    struct sbx *s;
    if (!api_auth(e, req, &who) || !(s = find_or_404(e, req, who.tenant)))
        return;
    e2b_metrics(req, s);
}

/* ---- list ---------------------------------------------------------------------------------- */

/* A match kept for sorting (list with `order`). */
struct list_sorted {
    int64_t created_ms;
    char id[STORE_ID_MAX];
    json_t *j;            /* ListedSandbox (owned until moved to the output) */
};

struct list_ctx {
    json_t *out;
    bool running, paused;
    int64_t started_after_ms; /* startedAfter filter, 0 = none */
    unsigned limit;
    char last[STORE_ID_MAX];
    int order;            /* 1 asc / -1 desc by startedAt (then id) */
    struct list_sorted *rows; /* every match (owned array) */
    size_t nrows, caprows;
    bool oom;
};

static int list_keep(struct list_ctx *l, const struct store_sbx *r)
{
    if (l->nrows == l->caprows) {
        size_t cap = l->caprows ? l->caprows * 2 : 64;
        struct list_sorted *p = realloc(l->rows, cap * sizeof *p);
        if (!p)
            return -1;
        l->rows = p;
        l->caprows = cap;
    }
    struct list_sorted *e = &l->rows[l->nrows];
    e->j = listed_json(r);
    if (!e->j)
        return 0;
    e->created_ms = r->created_ms;
    snprintf(e->id, sizeof e->id, "%s", r->id);
    l->nrows++;
    return 0;
}

static int list_row(const struct store_sbx *r, void *arg)
{
    struct list_ctx *l = arg;
    snprintf(l->last, sizeof l->last, "%s", r->id);
    const char *st = e2b_state(r->state);
    if (!st || (strcmp(st, "running") == 0 ? !l->running : !l->paused) ||
        r->created_ms < l->started_after_ms)
        return 0;
    if (list_keep(l, r) < 0) {
        l->oom = true;
        return 1;
    }
    return 0;
}

static int list_cmp_asc(const void *a, const void *b)
{
    const struct list_sorted *x = a, *y = b;
    if (x->created_ms != y->created_ms)
        return x->created_ms < y->created_ms ? -1 : 1;
    return strcmp(x->id, y->id);
}

static int list_cmp_desc(const void *a, const void *b)
{
    return list_cmp_asc(b, a);
}

/* Sorts the kept matches, skips up to the cursor ("<created ms>.<id>" of the last row
 * of the previous page: stable even if that sandbox is gone), fills one page of out
 * and sets *next to the cursor of its last row when more follow. 0, or -1 on a bad
 * cursor. */
static int list_page_sorted(struct list_ctx *l, const char *cursor, char *next, size_t cap)
{
    if (l->nrows) /* rows is NULL when nothing matched */
        qsort(l->rows, l->nrows, sizeof *l->rows, l->order > 0 ? list_cmp_asc : list_cmp_desc);
    size_t i = 0;
    if (cursor && *cursor) {
        struct list_sorted c = {0};
        char *dot;
        c.created_ms = strtoll(cursor, &dot, 10);
        if (dot == cursor || *dot != '.' || strlen(dot + 1) >= sizeof c.id)
            return -1;
        snprintf(c.id, sizeof c.id, "%s", dot + 1);
        int (*cmp)(const void *, const void *) = l->order > 0 ? list_cmp_asc : list_cmp_desc;
        while (i < l->nrows && cmp(&l->rows[i], &c) <= 0)
            i++;
    }
    next[0] = '\0';
    for (; i < l->nrows; i++) {
        if (json_array_size(l->out) == l->limit) {
            const struct list_sorted *last = &l->rows[i - 1];
            snprintf(next, cap, "%lld.%s", (long long)last->created_ms, last->id);
            break;
        }
        json_array_append(l->out, l->rows[i].j);
    }
    return 0;
}

static void list_ctx_free(struct list_ctx *l)
{
    for (size_t i = 0; i < l->nrows; i++)
        json_decref(l->rows[i].j);
    free(l->rows);
    json_decref(l->out);
}

/* "2026-01-02T03:04:05[.fff]Z" (what the SDK sends: toISOString) -> ms, or -1. */
static int64_t parse_time_ms(const char *s)
{
    struct tm tm = {0};
    int ms = 0, n = 0;
    if (sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
               &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &n) != 6)
        return -1;
    const char *p = s + n;
    if (*p == '.') {
        int digits = 0;
        for (p++; *p >= '0' && *p <= '9'; p++, digits++)
            if (digits < 3)
                ms = ms * 10 + (*p - '0');
        for (; digits > 0 && digits < 3; digits++)
            ms *= 10;
    }
    if (strcmp(p, "Z") != 0 || tm.tm_mon < 1 || tm.tm_mon > 12)
        return -1;
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    time_t t = timegm(&tm);
    return t < 0 ? -1 : (int64_t)t * 1000 + ms;
}

static void list(struct e2b *e, struct http_req *req, bool paged)
{
    struct auth_principal who;
    if (!api_auth(e, req, &who))
        return;
    struct e2b_err err = {0};
    const char *mq = http_req_query(req, "metadata");
    json_t *meta = mq ? e2b_metadata_filter(mq, &err) : NULL;
    if (mq && !meta) {
        rest_error(req, 400, "%s", err.msg);
        return;
    }
    char *meta_text = meta && json_object_size(meta) ? json_dumps(meta, JSON_COMPACT) : NULL;
    json_decref(meta);
    const char *state = http_req_query(req, "state");
    struct list_ctx l = {.out = json_array(), .limit = UINT32_MAX};
    l.running = !state || e2b_csv_has(state, "running");
    l.paused = paged && (!state || e2b_csv_has(state, "paused"));
    const char *lim = http_req_query(req, "limit");
    if (paged) {
        char *end;
        long n = lim ? strtol(lim, &end, 10) : LIST_LIMIT_DEFAULT;
        if (lim && (*end || n < 1 || n > LIST_LIMIT_MAX)) {
            free(meta_text);
            json_decref(l.out);
            rest_error(req, 400, "limit must be an integer in 1..%d", LIST_LIMIT_MAX);
            return;
        }
        l.limit = (unsigned)n;
    }
    const char *after = http_req_query(req, "startedAfter");
    if (after && (l.started_after_ms = parse_time_ms(after)) < 0) {
        free(meta_text);
        json_decref(l.out);
        rest_error(req, 400, "startedAfter must be an RFC 3339 time");
        return;
    }
    const char *order = paged ? http_req_query(req, "order") : NULL;
    if (order && strcmp(order, "asc") != 0 && strcmp(order, "desc") != 0) {
        free(meta_text);
        json_decref(l.out);
        rest_error(req, 400, "order must be asc or desc");
        return;
    }
    /* As E2B: newest first unless asked otherwise. */
    l.order = order && strcmp(order, "asc") == 0 ? 1 : -1;
    const char *next = paged ? http_req_query(req, "nextToken") : NULL;
    struct store_sbx_filter f = {.tenant = who.tenant,
                                 .template_name = http_req_query(req, "template"),
                                 .metadata_json = meta_text,
                                 .limit = LIST_LIMIT_MAX};
    bool store_more = true;
    int rc = 0;
    while (store_more && rc == 0) {
        f.after_id = l.last[0] ? l.last : NULL;
        rc = store_sbx_list(e->sp->store, &f, list_row, &l, &store_more);
    }
    free(meta_text);
    if (rc < 0 || l.oom) {
        list_ctx_free(&l);
        rest_error(req, 500, "cannot list sandboxes: %s",
                   l.oom ? "out of memory" : store_errmsg(e->sp->store));
        return;
    }
    char cursor[STORE_ID_MAX + 32];
    if (list_page_sorted(&l, next, cursor, sizeof cursor) < 0) {
        list_ctx_free(&l);
        rest_error(req, 400, "nextToken is not one this server gave");
        return;
    }
    if (cursor[0])
        http_reply_add_header(req, "X-Next-Token", cursor);
    http_reply_json(req, 200, l.out);
    list_ctx_free(&l);
}

static void h_list_v2(struct http_req *req, void *arg)
{
    list(arg, req, true);
}

static void h_list_v1(struct http_req *req, void *arg)
{
    list(arg, req, false);
}

/* ---- registration ---------------------------------------------------------------------------- */

static void box_free(struct e2b_box *b, bool agent_gone)
{
    e2b_box_procs_free(b, agent_gone);
    e2b_box_watchers_free(b, agent_gone);
    free(b);
}

/* Frees a sandbox's envd state when the sandbox goes away. */
static void on_state(struct spaced *sp, struct sbx *s, enum sbx_state old, enum sbx_state now,
                     void *arg)
{
    (void)sp;
    (void)old;
    struct e2b *e = arg;
    if (now != SBX_DELETED && now != SBX_DELETING)
        return;
    for (struct e2b_box **pp = &e->boxes; *pp; pp = &(*pp)->next) {
        struct e2b_box *b = *pp;
        if (strcmp(b->id, sbx_id(s)) == 0) {
            *pp = b->next;
            box_free(b, false);
            return;
        }
    }
}

/* router_on_shutdown: after the HTTP server (its requests' on_close ran, so no call or
 * subscriber is left) and the sandbox table (the agents' channels are closed). */
static void e2b_free(void *arg)
{
    struct e2b *e = arg;
    e2b_pipes_free(e);
    while (e->boxes) {
        struct e2b_box *b = e->boxes;
        e->boxes = b->next;
        box_free(b, true); /* the sandbox table freed the agents first */
    }
    if (e->sp->e2b == e)
        e->sp->e2b = NULL;
    free(e);
}

/* A new E2B state, freed with the router (NULL, logged, when out of memory). */
static struct e2b *e2b_new(struct router *r, struct spaced *sp)
{
    struct e2b *e = calloc(1, sizeof *e);
    if (!e || router_on_shutdown(r, e2b_free, e) < 0) {
        free(e);
        log_error("e2b.register", "msg=\"out of memory: no E2B routes\"");
        return NULL;
    }
    e->sp = sp;
    snprintf(e->domain, sizeof e->domain, "%s", sp->opt.e2b_domain ? sp->opt.e2b_domain : "");
    return e;
}

static void add_listings(struct router *r, struct e2b *e)
{
    router_add(r, "GET", "/v2/sandboxes", h_list_v2, e);
    router_add(r, "GET", "/sandboxes", h_list_v1, e);
    e2b_template_alias_register(r, e);
}

void e2b_register_listings(struct router *r, struct spaced *sp)
{
    struct e2b *e = e2b_new(r, sp); /* the listings' only: sp->e2b stays NULL */
    if (e)
        add_listings(r, e);
}

void e2b_register(struct router *r, struct spaced *sp)
{
    struct e2b *e = sp->e2b = e2b_new(r, sp);
    if (!e)
        return;
    e->create = (struct e2b_body_route){e, create};
    e->timeout = (struct e2b_body_route){e, timeout_route};
    e->refresh = (struct e2b_body_route){e, refresh_route};
    e->pause = (struct e2b_body_route){e, pause_route};
    e->connect = (struct e2b_body_route){e, connect_route};
    e->resume = (struct e2b_body_route){e, resume_route};
    e->network = (struct e2b_body_route){e, network_route};
    e->pipes.idle_s = sp->opt.proxy_idle_s;
    const char *listen = sp->opt.e2b_port_listen;
    char err[200], q[256];
    /* Without it getHost still works on our own port, minus protocol upgrades. */
    if (listen && e2b_port_listen(e, listen, err, sizeof err) < 0)
        log_error("e2b.port_listen", "error=%s", log_quote(err, q, sizeof q));
    router_add_hook(r, e2b_envd_hook, e);
    router_add(r, "POST", "/sandboxes", h_body, &e->create);
    router_add(r, "POST", "/v2/sandboxes", h_body, &e->create);
    add_listings(r, e);
    router_add(r, "GET", "/sandboxes/{id}", h_get, e);
    router_add(r, "DELETE", "/sandboxes/{id}", h_kill, e);
    router_add(r, "GET", "/sandboxes/{id}/metrics", h_metrics, e);
    router_add(r, "POST", "/sandboxes/{id}/timeout", h_body, &e->timeout);
    router_add(r, "POST", "/sandboxes/{id}/refreshes", h_body, &e->refresh);
    router_add(r, "POST", "/sandboxes/{id}/pause", h_body, &e->pause);
    router_add(r, "POST", "/sandboxes/{id}/resume", h_body, &e->resume);
    router_add(r, "PUT", "/sandboxes/{id}/network", h_body, &e->network);
    router_add(r, "POST", "/sandboxes/{id}/connect", h_body, &e->connect);
    router_add(r, "POST", "/v2/sandboxes/{id}/connect", h_body, &e->connect);
    e2b_fork_register(r, e);
    e2b_volume_register(r, e);
    e2b_template_register(r, e);
    sbx_listen(sp, on_state, e);
}
