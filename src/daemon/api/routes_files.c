/* routes_files.c: the files routes, /v1/sandboxes/{id}/files...
 *
 * Each request becomes one agent channel (docs/agent-protocol.md: read, write, stat,
 * list, mkdir, remove, rename). Transfers stream in both directions without holding a
 * file in spaced: an upload's HTTP body is paused while the agent has not accepted what
 * is queued, and a download grants the agent credit only while the HTTP client keeps
 * up. Agent errors become JSON errors (400/403/404/409/...); the guest's code is only
 * passed on if it is one the protocol defines, its message is bounded.
 *
 * A request and its channel can end in either order (client gone, agent done), so each
 * transfer is a `struct fop` freed when both sides have let go. Route shapes are
 * documented in docs/api.md ("Files"). */
#include <stdlib.h>
#include <string.h>

#include "daemon/agentc/agentc.h"
#include "daemon/http/router.h"
#include "daemon/api/routes.h"
#include "daemon/auth/auth.h"
#include "daemon/sandbox/sbx.h"
#include "daemon/session/sess_req.h"
#include "log.h"

#define FILES_BODY_MAX (64u * 1024)
#define FILES_UPLOAD_HIGH (1024u * 1024)   /* pause the HTTP body above this many queued */
#define FILES_DOWNLOAD_HIGH (1024u * 1024) /* stop crediting the agent above this pending */
/* A download's OUT window: larger than the protocol's initial 256 KiB so the agent fills
 * its output queue (AGENT_OUT_HIGH, 1 MiB) without waiting for each grant; spaced holds
 * at most FILES_DOWNLOAD_HIGH + this per download. */
#define FILES_DOWNLOAD_WINDOW (2048u * 1024)
#define FILES_LIST_MAX 100000              /* entries returned by one list */
#define FILES_LIST_BYTES_MAX (32u << 20)   /* and their weight (agentc_json_weight) */

enum fop_kind { FOP_RESULT, FOP_LIST, FOP_READ, FOP_WRITE };

struct fop;

/* Route context: one per process, made at startup, freed by router_free (files_free,
 * registered with router_on_shutdown). */
struct files_ctx {
    struct spaced *sp;
    struct fop *head; /* transfers in flight (each owned as described at struct fop) */
};

/* One file request in flight. Owned jointly by its HTTP request and its agent channel:
 * freed by whichever lets go last (fop_release). */
struct fop {
    struct files_ctx *fc;    /* owner of the in-flight list */
    struct fop *nx;          /* next in fc->head */
    char sbx[STORE_ID_MAX];  /* sandbox the channel is on */
    enum fop_kind kind;
    struct http_req *req;    /* NULL once replied or closed */
    struct agentc_chan *ch;  /* NULL once closed */
    bool orphan;             /* ch was forgotten unclosed: wait for its on_close */
    int status;              /* success status for FOP_RESULT / FOP_WRITE */
    json_t *entries;         /* FOP_LIST: collected entries (owned) */
    bool truncated;          /* FOP_LIST: more than FILES_LIST_MAX or _BYTES_MAX */
    size_t list_bytes;       /* FOP_LIST: weight of entries */
    bool streaming;          /* FOP_READ: response head sent */
    int64_t remaining;       /* FOP_READ: bytes still owed to the client */
    uint32_t credit;         /* FOP_READ: OUT credit the agent holds */
    bool waiting;            /* FOP_READ: drain callback registered */
};

static void fop_release(struct fop *f)
{
    if (f->req || f->ch || f->orphan)
        return;
    for (struct fop **pp = &f->fc->head; *pp; pp = &(*pp)->nx)
        if (*pp == f) {
            *pp = f->nx;
            break;
        }
    json_decref(f->entries);
    free(f);
}

/* Maps an agent error code to an HTTP status and a code we vouch for. */
static int agent_status(const char *code, const char **out)
{
    static const struct {
        const char *code;
        int status;
    } map[] = {
        {"invalid_argument", 400}, {"is_dir", 400},        {"not_found", 404},
        {"permission_denied", 403}, {"already_exists", 409}, {"exists_not_dir", 409},
        {"not_empty", 409},        {"no_space", 507},      {"too_many", 429},
        {"unsupported", 501},      {"disconnected", 503},
    };
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (!strcmp(code, map[i].code)) {
            *out = map[i].code;
            return map[i].status;
        }
    *out = "agent_error";
    return 502;
}

/* Replies (if the request still waits) and forgets the request. */
static void fop_reply_json(struct fop *f, int status, json_t *o)
{
    if (f->req)
        http_reply_json(f->req, status, o);
    json_decref(o);
    f->req = NULL;
}

static void fop_finish_stream(struct fop *f)
{
    if (f->req)
        http_stream_end(f->req); /* short of Content-Length: the connection is closed */
    f->req = NULL;
}

static void fop_fail(struct fop *f, int status, const char *code, const char *msg)
{
    if (f->streaming) {
        if (f->req)
            log_warn("files.download_cut", "sandbox=%s code=%s", f->sbx, code);
        fop_finish_stream(f);
    } else if (f->req) {
        http_reply_error(f->req, status, code, "%s", msg);
        f->req = NULL;
    }
}

/* ---- download flow control ---------------------------------------------------------------- */

static void fop_refill(struct fop *f);

static void fop_drained(struct http_req *req, void *arg)
{
    struct fop *f = arg;
    f->waiting = false;
    fop_refill(f);
}

static void fop_refill(struct fop *f)
{
    if (!f->req || !f->ch)
        return;
    if (http_stream_pending(f->req) > FILES_DOWNLOAD_HIGH) {
        if (!f->waiting) {
            f->waiting = true;
            http_stream_on_drain(f->req, fop_drained, f);
        }
        return;
    }
    if (f->credit <= FILES_DOWNLOAD_WINDOW / 2 &&
        agentc_grant(f->ch, FRAME_STREAM_OUT, FILES_DOWNLOAD_WINDOW - f->credit) == 0)
        f->credit = FILES_DOWNLOAD_WINDOW;
}

/* ---- agent channel callbacks --------------------------------------------------------------- */

static void fop_on_event(void *arg, json_t *ev)
{
    struct fop *f = arg;
    const char *type = json_string_value(json_object_get(ev, "type"));
    if (f->kind == FOP_READ && !strcmp(type, "stat") && f->req && !f->streaming) {
        json_t *st = json_object_get(ev, "stat");
        json_t *size = json_object_get(json_is_object(st) ? st : ev, "size");
        f->remaining = json_is_integer(size) && json_integer_value(size) >= 0
                           ? json_integer_value(size)
                           : -1;
        if (http_stream_start(f->req, 200, "application/octet-stream", f->remaining) < 0) {
            fop_fail(f, 500, "internal", "cannot start the download");
            return;
        }
        f->streaming = true;
    } else if (f->kind == FOP_LIST && !strcmp(type, "entries")) {
        json_t *arr = json_object_get(ev, "entries");
        size_t i;
        json_t *e;
        json_array_foreach(arr, i, e) {
            size_t w = agentc_json_weight(e);
            if (json_array_size(f->entries) >= FILES_LIST_MAX ||
                f->list_bytes + w > FILES_LIST_BYTES_MAX) {
                f->truncated = true;
                break;
            }
            if (json_is_object(e)) {
                json_array_append(f->entries, e);
                f->list_bytes += w;
            }
        }
    } else if (!strcmp(type, "result") && f->kind != FOP_READ) {
        json_t *o;
        if (f->kind == FOP_LIST)
            o = json_pack("{s:O,s:I,s:b}", "entries", f->entries, "count",
                          (json_int_t)json_array_size(f->entries), "truncated", f->truncated);
        else if (f->status == 204)
            o = NULL;
        else if (json_is_object(json_object_get(ev, "stat")))
            o = json_pack("{s:O}", "file", json_object_get(ev, "stat"));
        else if ((o = json_copy(ev)) != NULL) {
            json_object_del(o, "type");
            o = json_pack("{s:o}", "file", o);
        }
        if (o) {
            fop_reply_json(f, f->status, o);
        } else if (f->req) {
            http_reply(f->req, f->status, NULL, NULL, 0);
            f->req = NULL;
        }
    }
}

static void fop_on_data(void *arg, enum frame_stream st, const uint8_t *buf, size_t len)
{
    struct fop *f = arg;
    if (f->kind != FOP_READ || st != FRAME_STREAM_OUT)
        return;
    f->credit = f->credit > len ? f->credit - (uint32_t)len : 0;
    if (!f->req || !f->streaming)
        return;
    /* A file that grew after its stat is cut at the announced length. */
    size_t n = f->remaining >= 0 && (int64_t)len > f->remaining ? (size_t)f->remaining : len;
    if (n && http_stream_write(f->req, buf, n) < 0) {
        fop_finish_stream(f);
        return;
    }
    if (f->remaining >= 0)
        f->remaining -= (int64_t)n;
    fop_refill(f);
}

static void fop_on_eof(void *arg, enum frame_stream st)
{
    struct fop *f = arg;
    if (f->kind == FOP_READ && st == FRAME_STREAM_OUT && f->streaming)
        fop_finish_stream(f);
}

static void fop_on_error(void *arg, const char *code, const char *message)
{
    struct fop *f = arg;
    const char *ours;
    int status = agent_status(code, &ours);
    fop_fail(f, status, ours, message[0] ? message : ours);
}

static void fop_on_close(void *arg)
{
    struct fop *f = arg;
    f->ch = NULL;
    f->orphan = false;
    fop_fail(f, 502, "agent_error", "the agent ended the request without a result");
    fop_release(f);
}

static void fop_on_drain(void *arg)
{
    struct fop *f = arg;
    if (f->kind == FOP_WRITE && f->req)
        http_req_pause_body(f->req, false);
}

static const struct agentc_chan_ops fop_ops = {
    .on_event = fop_on_event,
    .on_data = fop_on_data,
    .on_eof = fop_on_eof,
    .on_error = fop_on_error,
    .on_close = fop_on_close,
    .on_drain = fop_on_drain,
};

/* ---- HTTP side ----------------------------------------------------------------------------- */

static void fop_req_closed(struct http_req *req, void *arg)
{
    struct fop *f = arg;
    f->req = NULL;
    if (f->ch)
        agentc_close(f->ch); /* cancel: an unfinished upload leaves no file behind */
    f->ch = NULL;
    fop_release(f);
}

static void reply_err(struct http_req *req, const struct spaced_err *e)
{
    http_reply_error(req, e->status, e->code, "%s", e->message);
}

/* Authenticates, finds the running sandbox and returns its agent, or replies. wait: the
 * body is not claimed yet, so an auto-resume may park the request (routes.h). */
static struct agentc *files_agent(struct spaced *sp, struct http_req *req, bool wait)
{
    const char *id = router_param(req, "id");
    struct auth_principal who;
    if (!sbx_id_valid(id)) {
        http_reply_error(req, 400, "invalid_id", "not a sandbox id (sb + 16 hex digits)");
        return NULL;
    }
    if (!auth_require(sp, req, &who))
        return NULL;
    struct sbx *x = sbx_find(sp, who.tenant, id);
    if (!x) {
        http_reply_error(req, 404, "not_found", "no sandbox %s", id);
        return NULL;
    }
    return wait ? routes_require_agent(sp, req, x) : routes_agent_now(req, x);
}

/* Opens the agent channel for `request` (taken) on behalf of req. NULL after replying. */
static struct fop *fop_start(struct files_ctx *fc, struct http_req *req, struct agentc *a,
                             enum fop_kind kind, int status, json_t *request)
{
    struct fop *f = calloc(1, sizeof *f);
    char why[160] = "";
    if (f && kind == FOP_LIST)
        f->entries = json_array();
    if (!f || !request || (kind == FOP_LIST && !f->entries)) {
        if (f)
            json_decref(f->entries);
        free(f);
        json_decref(request);
        http_reply_error(req, 500, "internal", "out of memory");
        return NULL;
    }
    f->fc = fc;
    snprintf(f->sbx, sizeof f->sbx, "%s", router_param(req, "id"));
    f->kind = kind;
    f->status = status;
    f->req = req;
    f->credit = FRAME_WINDOW_INITIAL;
    f->ch = agentc_open(a, request, &fop_ops, f, kind == FOP_READ ? AGENTC_MANUAL_CREDIT : 0,
                        why, sizeof why);
    json_decref(request);
    if (!f->ch) {
        json_decref(f->entries);
        free(f);
        http_reply_error(req, 503, "unavailable", "cannot reach the sandbox's agent: %s", why);
        return NULL;
    }
    /* The whole download window at once: the first bytes need no grant round trip. */
    if (kind == FOP_READ &&
        agentc_grant(f->ch, FRAME_STREAM_OUT, FILES_DOWNLOAD_WINDOW - f->credit) == 0)
        f->credit = FILES_DOWNLOAD_WINDOW;
    http_req_on_close(req, fop_req_closed, f);
    f->nx = fc->head;
    fc->head = f;
    return f;
}

/* Builds {"op": op, "path": ?path, "user": ?user} from the query, or replies 400. */
static json_t *path_request(struct http_req *req, const char *op)
{
    struct spaced_err e;
    const char *path = http_req_query(req, "path"), *user = http_req_query(req, "user");
    if (sess_req_path(path, "path", &e) < 0 || (user && sess_req_user(user, &e) < 0)) {
        reply_err(req, &e);
        return NULL;
    }
    json_t *r = json_pack("{s:s,s:s}", "op", op, "path", path);
    if (r && user)
        json_object_set_new(r, "user", json_string(user));
    if (!r)
        http_reply_error(req, 500, "internal", "out of memory");
    return r;
}

static void upload_chunk(struct http_req *req, const char *data, size_t len, void *arg)
{
    struct fop *f = arg;
    if (!f->ch || agentc_write(f->ch, data, len) < 0) {
        fop_fail(f, 503, "unavailable", "the agent stopped accepting the upload");
        return;
    }
    if (agentc_queued(f->ch) > FILES_UPLOAD_HIGH)
        http_req_pause_body(req, true);
}

static void upload_end(struct http_req *req, void *arg)
{
    struct fop *f = arg;
    if (f->ch)
        agentc_eof(f->ch); /* the agent renames the temporary file into place, then replies */
}

static void h_put(struct http_req *req, void *arg)
{
    struct files_ctx *fc = arg;
    struct spaced_err e;
    int mode = -1;
    struct agentc *a = files_agent(fc->sp, req, true);
    if (!a)
        return;
    if (sess_req_mode(http_req_query(req, "mode"), &mode, &e) < 0) {
        reply_err(req, &e);
        return;
    }
    json_t *r = path_request(req, "write");
    if (!r)
        return;
    if (mode >= 0)
        json_object_set_new(r, "mode", json_integer(mode));
    struct fop *f = fop_start(fc, req, a, FOP_WRITE, 200, r);
    if (f && http_req_stream_body(req, upload_chunk, upload_end, f) < 0)
        fop_fail(f, 500, "internal", "request body already claimed");
}

/* Routes whose whole request is the path query: download and stat. */
static void path_op(struct http_req *req, struct files_ctx *fc, const char *op,
                    enum fop_kind kind)
{
    struct agentc *a = files_agent(fc->sp, req, true);
    json_t *r = a ? path_request(req, op) : NULL;
    if (r)
        fop_start(fc, req, a, kind, 200, r);
}

static void h_get(struct http_req *req, void *arg)
{
    path_op(req, arg, "read", FOP_READ);
}

static void h_stat(struct http_req *req, void *arg)
{
    path_op(req, arg, "stat", FOP_RESULT);
}

static void h_list(struct http_req *req, void *arg)
{
    struct files_ctx *fc = arg;
    struct spaced_err e;
    int64_t depth = 1;
    struct agentc *a = files_agent(fc->sp, req, true);
    if (!a)
        return;
    if (sess_req_uint(http_req_query(req, "depth"), "depth", 1, SESS_LIST_DEPTH_MAX, &depth,
                      &e) < 0) {
        reply_err(req, &e);
        return;
    }
    json_t *r = path_request(req, "list");
    if (r) {
        json_object_set_new(r, "depth", json_integer(depth));
        fop_start(fc, req, a, FOP_LIST, 200, r);
    }
}

static void h_delete(struct http_req *req, void *arg)
{
    struct files_ctx *fc = arg;
    struct spaced_err e;
    bool recursive = false;
    struct agentc *a = files_agent(fc->sp, req, true);
    if (!a)
        return;
    if (sess_req_bool(http_req_query(req, "recursive"), "recursive", &recursive, &e) < 0) {
        reply_err(req, &e);
        return;
    }
    json_t *r = path_request(req, "remove");
    if (r) {
        json_object_set_new(r, "recursive", json_boolean(recursive));
        fop_start(fc, req, a, FOP_RESULT, 204, r);
    }
}

/* mkdir and rename: JSON body -> agent request. */
static void body_op(struct http_req *req, const char *data, size_t len, void *arg, int status,
                    json_t *(*parse)(const char *, size_t, struct spaced_err *))
{
    struct files_ctx *fc = arg;
    struct spaced_err e;
    struct agentc *a = files_agent(fc->sp, req, false);
    if (!a)
        return;
    json_t *r = parse(data, len, &e);
    if (!r)
        reply_err(req, &e);
    else
        fop_start(fc, req, a, FOP_RESULT, status, r);
}

static void mkdir_body(struct http_req *req, const char *data, size_t len, void *arg)
{
    body_op(req, data, len, arg, 201, sess_req_mkdir);
}

static void rename_body(struct http_req *req, const char *data, size_t len, void *arg)
{
    body_op(req, data, len, arg, 200, sess_req_rename);
}

/* Checks auth and sandbox before reading the body (body_op checks again after it). */
static void with_body(struct http_req *req, struct files_ctx *fc, http_body_fn done)
{
    if (files_agent(fc->sp, req, true))
        http_req_read_body(req, FILES_BODY_MAX, done, fc);
}

static void h_mkdir(struct http_req *req, void *arg)
{
    with_body(req, arg, mkdir_body);
}

static void h_rename(struct http_req *req, void *arg)
{
    with_body(req, arg, rename_body);
}

/* Transfers end when their sandbox leaves "running" for anything but a pause. Entering
 * suspending/stopping/deleting the agent connection is alive and channels are closed;
 * once the VM has exited sbx has freed the connection without channel callbacks, so the
 * channel is forgotten unclosed (the fop stays allocated in case a late on_close comes). */
static void files_on_sbx(struct spaced *sp, struct sbx *x, enum sbx_state old,
                         enum sbx_state now, void *arg)
{
    struct files_ctx *fc = arg;
    bool alive = now == SBX_SUSPENDING || now == SBX_STOPPING || now == SBX_DELETING;
    bool gone = now == SBX_SUSPENDED || now == SBX_STOPPED || now == SBX_FAILED ||
                now == SBX_DELETED;
    struct fop *nx;
    if (!alive && !gone)
        return;
    for (struct fop *f = fc->head; f; f = nx) {
        nx = f->nx;
        if (strcmp(f->sbx, sbx_id(x)) || !f->ch)
            continue;
        if (alive)
            agentc_close(f->ch);
        else
            f->orphan = true;
        f->ch = NULL;
        char msg[96];
        snprintf(msg, sizeof msg, "the sandbox became %s during the request", sbx_state_name(now));
        fop_fail(f, 409, "not_running", msg);
        fop_release(f);
    }
}

/* Shutdown (router_free, after the sandboxes and their agent connections are gone):
 * whatever is still listed waits for a channel close that can no longer come. */
static void files_free(void *arg)
{
    struct files_ctx *fc = arg;
    while (fc->head) {
        struct fop *f = fc->head;
        fc->head = f->nx;
        json_decref(f->entries);
        free(f);
    }
    free(fc);
}

void routes_files_register(struct router *r, struct spaced *sp)
{
    static const struct {
        const char *method, *path;
        router_handler_fn fn;
    } routes[] = {
        {"PUT", "/v1/sandboxes/{id}/files", h_put},
        {"GET", "/v1/sandboxes/{id}/files", h_get},
        {"DELETE", "/v1/sandboxes/{id}/files", h_delete},
        {"GET", "/v1/sandboxes/{id}/files/stat", h_stat},
        {"GET", "/v1/sandboxes/{id}/files/list", h_list},
        {"POST", "/v1/sandboxes/{id}/files/mkdir", h_mkdir},
        {"POST", "/v1/sandboxes/{id}/files/rename", h_rename},
    };
    struct files_ctx *fc = calloc(1, sizeof *fc);
    if (!fc || router_on_shutdown(r, files_free, fc) < 0) {
        free(fc);
        log_error("files.init", "msg=%s", "out of memory: files routes not registered");
        return;
    }
    fc->sp = sp;
    if (sbx_listen(sp, files_on_sbx, fc) < 0) {
        log_error("files.init", "msg=%s", "cannot register the files routes");
        return;
    }
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
        router_add(r, routes[i].method, routes[i].path, routes[i].fn, fc);
}
