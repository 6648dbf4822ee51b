/* e2b_files: envd's GET/POST /files on the agent's read/write ops, streamed both ways.
 *
 * Downloads grant the agent credit only while the HTTP client keeps up; uploads pause
 * the HTTP body while the agent has not accepted what is queued. Uploads come as
 * multipart/form-data (one part per file, the part's filename is the full target path,
 * the `path` query parameter overrides it) or as a raw application/octet-stream body
 * with `path`; either may be gzip-compressed (Content-Encoding: gzip). The agent writes
 * each file in place (O_TRUNC, as envd does: hard links keep sharing it, watchers see a
 * write of that very file); a broken upload leaves what had arrived, as with envd.
 *
 * Auth: the X-Access-Token header, or a v1_ signature over the path (uploadUrl /
 * downloadUrl) checked against the sandbox's token. Transfers and their agent channels
 * end in either order, so each transfer object is freed by whichever lets go last. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "daemon/agentc/agentc.h"
#include "daemon/auth/auth.h"
#include "daemon/sandbox/sbx.h"
#include "e2b_gzip.h"
#include "e2b_internal.h"
#include "e2b_multipart.h"
#include "e2b_util.h"

#define UPLOAD_PARTS_MAX 1000
#define UPLOAD_META_MAX 64            /* X-Metadata-* headers (the agent's xattr limit) */
#define UPLOAD_META_VALUE_MAX 4096    /* bytes of one value (the agent's xattr limit) */

/* Status of a REST error for an agent error (no_space is 507 for the SDK). */
static int rest_status(const struct e2b_err *err)
{
    if (err->code == E2B_RESOURCE_EXHAUSTED && strstr(err->msg, "space"))
        return 507;
    return e2b_code_rest(err->code);
}

/* Checks auth for /files: header token already verified, else a valid signature. */
static bool files_auth(struct e2b *e, struct http_req *req, struct e2b_box *box, bool token_ok,
                       const char *op)
{
    if (token_ok)
        return true;
    const char *sig = http_req_query(req, "signature");
    if (!sig) {
        e2b_reply_rest_error(req, 401, "missing access token or signature");
        return false;
    }
    char tok[AUTH_TOKEN_MAX + STORE_ID_MAX + 2];
    const char *path = http_req_query(req, "path");
    const char *user = http_req_query(req, "username");
    struct e2b_err err = {0};
    if (e2b_token_for(e, box->id, tok, sizeof tok) < 0 ||
        e2b_sign_check(path ? path : "", op, user ? user : "", tok, sig,
                       http_req_query(req, "signature_expiration"), time(NULL), &err) < 0) {
        e2b_reply_rest_error(req, 401, "%s", err.msg[0] ? err.msg : "invalid signature");
        return false;
    }
    return true;
}

static struct agentc *sandbox_agent(struct e2b *e, const char *id);

/* Finding the sandbox a signed URL is for: uploadUrl()/downloadUrl() with a shared
 * E2B_SANDBOX_URL name no sandbox, so the signature itself is checked against each
 * running sandbox's token (a SHA-256 per sandbox). Expiry is not checked here: an
 * expired signature still names its sandbox, whose check then says it expired. */
struct signer {
    struct e2b *e;
    struct http_req *req;
    const char *op;
    char *id;
    size_t cap;
    bool found;
};

static void try_signer(struct sbx *s, void *arg)
{
    struct signer *f = arg;
    char tok[AUTH_TOKEN_MAX + STORE_ID_MAX + 2];
    const char *path = http_req_query(f->req, "path"), *user = http_req_query(f->req, "username");
    if (f->found || !sbx_agent(s) || e2b_token_for(f->e, sbx_id(s), tok, sizeof tok) < 0)
        return;
    if (e2b_sign_check(path ? path : "", f->op, user ? user : "", tok,
                       http_req_query(f->req, "signature"),
                       http_req_query(f->req, "signature_expiration"), 0, NULL) == 0) {
        snprintf(f->id, f->cap, "%s", sbx_id(s));
        f->found = true;
    }
}

bool e2b_files_signer(struct e2b *e, struct http_req *req, char *id, size_t cap)
{
    if (!http_req_query(req, "signature"))
        return false;
    struct signer f = {e, req, strcmp(http_req_method(req), "POST") == 0 ? "write" : "read",
                       id, cap, false};
    sbx_each(e->sp, try_signer, &f);
    return f.found;
}

/* ---- download ---------------------------------------------------------------------------- */

#define GZIP_MIN_SIZE 1024 /* smaller files are sent as they are */

struct download {
    struct http_req *req;     /* NULL once finished or closed */
    struct agentc_chan *ch;   /* NULL once closed */
    bool accepts_gzip;        /* the client's Accept-Encoding allows gzip */
    struct e2b_gzip *gz;      /* encoder when the response is gzipped (owned) */
    bool streaming;
    uint32_t owed;            /* OUT bytes not yet credited back */
    bool waiting;             /* drain callback registered */
    struct e2b_err err;
};

static void dl_release(struct download *d)
{
    if (d->req || d->ch)
        return;
    e2b_gzip_free(d->gz);
    free(d);
}

static int dl_sink(void *arg, const uint8_t *data, size_t len, struct e2b_err *err)
{
    struct download *d = arg;
    if (http_stream_write(d->req, data, len) < 0)
        return e2b_err_set(err, E2B_INTERNAL, "client stream closed");
    return 0;
}

static void dl_drain(struct http_req *req, void *arg)
{
    (void)req;
    struct download *d = arg;
    d->waiting = false;
    if (d->ch && d->owed) {
        agentc_grant(d->ch, FRAME_STREAM_OUT, d->owed);
        d->owed = 0;
    }
}

static void dl_event(void *arg, json_t *ev)
{
    struct download *d = arg;
    const char *type = json_string_value(json_object_get(ev, "type"));
    if (!d->req || d->streaming || strcmp(type, "stat") != 0)
        return;
    json_int_t size = json_integer_value(json_object_get(json_object_get(ev, "stat"), "size"));
    if (size < 0)
        size = 0;
    /* Compressed bodies have no length known in advance: chunked. */
    if (d->accepts_gzip && size >= GZIP_MIN_SIZE && (d->gz = e2b_gzip_new(true, dl_sink, d)))
        http_reply_add_header(d->req, "Content-Encoding", "gzip");
    if (http_stream_start(d->req, 200, "application/octet-stream", d->gz ? -1 : size) == 0)
        d->streaming = true;
}

static void dl_data(void *arg, enum frame_stream stream, const uint8_t *buf, size_t len)
{
    struct download *d = arg;
    if (!d->req || !d->streaming || stream != FRAME_STREAM_OUT)
        return;
    struct e2b_err err = {0};
    if (d->gz ? e2b_gzip_feed(d->gz, buf, len, &err) < 0
              : http_stream_write(d->req, buf, len) < 0) {
        /* The file grew past its stat size: end at the promised length. */
        http_stream_end(d->req);
        d->req = NULL;
        if (d->ch) {
            agentc_close(d->ch);
            d->ch = NULL;
        }
        dl_release(d);
        return;
    }
    if (http_stream_pending(d->req) <= E2B_HIGH_WATER) {
        agentc_grant(d->ch, FRAME_STREAM_OUT, (uint32_t)len);
        return;
    }
    d->owed += (uint32_t)len;
    if (!d->waiting) {
        d->waiting = true;
        http_stream_on_drain(d->req, dl_drain, d);
    }
}

static void dl_error(void *arg, const char *code, const char *message)
{
    struct download *d = arg;
    if (d->err.code == E2B_OK)
        e2b_agent_err(&d->err, code, message);
}

static void dl_close(void *arg)
{
    struct download *d = arg;
    d->ch = NULL;
    if (d->req) {
        if (d->streaming) {
            struct e2b_err err = {0};
            if (d->gz)
                e2b_gzip_finish(d->gz, &err);
            http_stream_end(d->req);
        } else {
            if (d->err.code == E2B_OK)
                e2b_err_set(&d->err, E2B_UNAVAILABLE, "the sandbox agent closed the request");
            e2b_reply_rest_error(d->req, rest_status(&d->err), "%s", d->err.msg);
        }
        d->req = NULL;
    }
    dl_release(d);
}

static const struct agentc_chan_ops dl_ops = {
    .on_event = dl_event,
    .on_data = dl_data,
    .on_error = dl_error,
    .on_close = dl_close,
};

static void dl_http_close(struct http_req *req, void *arg)
{
    (void)req;
    struct download *d = arg;
    d->req = NULL;
    if (d->ch) {
        agentc_close(d->ch);
        d->ch = NULL;
    }
    dl_release(d);
}

/* Resolves the `path` query for user; replies 400 and returns NULL if invalid. */
static char *query_path(struct http_req *req, const char *user, const char *fallback)
{
    char home[E2B_USER_MAX + 16];
    e2b_user_home(user, home, sizeof home);
    const char *path = http_req_query(req, "path");
    if (!path || !*path)
        path = fallback;
    struct e2b_err err = {0};
    char *abs = path ? e2b_path_resolve(path, home, &err) : NULL;
    if (!abs)
        e2b_reply_rest_error(req, 400, "%s", path ? err.msg : "missing path");
    return abs;
}

void e2b_files_get(struct e2b *e, struct http_req *req, struct e2b_box *box, const char *user,
                   bool token_ok)
{
    if (!files_auth(e, req, box, token_ok, "read"))
        return;
    char *abs = query_path(req, user, NULL);
    if (!abs)
        return;
    json_t *r = json_pack("{s:s, s:s, s:s}", "op", "read", "path", abs, "user", user);
    free(abs);
    struct agentc *a = sandbox_agent(e, box->id);
    struct download *d = calloc(1, sizeof *d);
    char why[128] = "sandbox is not running";
    if (!r || !a || !d ||
        !(d->ch = agentc_open(a, r, &dl_ops, d, AGENTC_MANUAL_CREDIT, why, sizeof why))) {
        json_decref(r);
        free(d);
        e2b_reply_rest_error(req, a ? 500 : 502, "%s", why);
        return;
    }
    json_decref(r);
    d->req = req;
    d->accepts_gzip = e2b_accepts_gzip(http_req_header(req, "Accept-Encoding"));
    http_req_on_close(req, dl_http_close, d);
}

/* ---- upload ------------------------------------------------------------------------------ */

struct upload;

struct wpart {
    struct upload *u;
    struct agentc_chan *ch;   /* NULL once closed */
    char *path;               /* absolute target (owned) */
    bool ok;                  /* agent reported the result */
    struct e2b_err err;
    struct wpart *next;
};

struct upload {
    struct e2b *e;
    char sandbox[STORE_ID_MAX]; /* by id: the box may go away with the sandbox */
    struct http_req *req;     /* NULL once replied or closed */
    char user[E2B_USER_MAX];
    char *path_override;      /* resolved `path` query, or NULL (owned) */
    struct e2b_mp *mp;        /* multipart parser, NULL for octet-stream */
    struct e2b_gzip *gz;      /* decoder when Content-Encoding: gzip */
    json_t *xattrs;           /* X-Metadata-<key> headers as {"user.e2b.<key>": value}
                                 (owned), NULL without them */
    struct wpart *parts;      /* in arrival order reversed */
    struct wpart *cur;        /* part receiving data, NULL between parts / skipped part */
    unsigned nparts;
    bool body_done;
    bool paused;
    struct e2b_err err;       /* first request-level error */
};

static bool parts_open(const struct upload *u)
{
    for (struct wpart *p = u->parts; p; p = p->next)
        if (p->ch)
            return true;
    return false;
}

static void up_release(struct upload *u)
{
    if (u->req || parts_open(u))
        return;
    while (u->parts) {
        struct wpart *p = u->parts;
        u->parts = p->next;
        free(p->path);
        free(p);
    }
    e2b_mp_free(u->mp);
    e2b_gzip_free(u->gz);
    json_decref(u->xattrs);
    free(u->path_override);
    free(u);
}

/* Cancels every open write (the agent discards their temporary files). */
static void up_abort_parts(struct upload *u)
{
    for (struct wpart *p = u->parts; p; p = p->next)
        if (p->ch) {
            agentc_close(p->ch);
            p->ch = NULL;
        }
}

/* Replies once the body is complete and every write has finished (or on an error).
 * Never frees u: every entry point calls up_release() last. */
static void up_maybe_reply(struct upload *u)
{
    if (!u->req)
        return;
    struct http_req *req = u->req;
    if (u->err.code != E2B_OK) {
        u->req = NULL;
        up_abort_parts(u);
        e2b_reply_rest_error(req, rest_status(&u->err), "%s", u->err.msg);
        return;
    }
    if (!u->body_done || parts_open(u))
        return;
    json_t *out = json_array();
    const struct e2b_err *perr = NULL;
    for (struct wpart *p = u->parts; p; p = p->next) {
        if (!p->ok && !perr)
            perr = p->err.code != E2B_OK ? &p->err : NULL;
        if (!p->ok && !perr) {
            e2b_err_set(&p->err, E2B_UNAVAILABLE, "the sandbox agent closed the upload");
            perr = &p->err;
        }
        const char *slash = strrchr(p->path, '/');
        json_t *info = json_pack("{s:s, s:s, s:s}", "name", slash + 1, "type", "file", "path",
                                 p->path);
        json_t *meta = e2b_xattrs_metadata(u->xattrs);
        if (info && meta)
            json_object_set(info, "metadata", meta);
        json_decref(meta);
        json_array_insert_new(out, 0, info);
    }
    u->req = NULL;
    if (perr)
        e2b_reply_rest_error(req, rest_status(perr), "%s", perr->msg);
    else if (json_array_size(out) == 0)
        e2b_reply_rest_error(req, 400, "the request holds no file");
    else
        http_reply_json(req, 200, out);
    json_decref(out);
}

static void wp_event(void *arg, json_t *ev)
{
    struct wpart *p = arg;
    if (strcmp(json_string_value(json_object_get(ev, "type")), "result") == 0)
        p->ok = true;
}

static void wp_error(void *arg, const char *code, const char *message)
{
    struct wpart *p = arg;
    if (p->err.code == E2B_OK)
        e2b_agent_err(&p->err, code, message);
}

static void wp_close(void *arg)
{
    struct wpart *p = arg;
    struct upload *u = p->u;
    p->ch = NULL;
    if (u->cur == p)
        u->cur = NULL;
    if (!p->ok && u->err.code == E2B_OK) {
        if (p->err.code != E2B_OK)
            u->err = p->err;
        else
            e2b_err_set(&u->err, E2B_UNAVAILABLE, "the sandbox agent closed the upload");
    }
    up_maybe_reply(u);
    up_release(u);
}

/* The agent accepted everything queued: resume reading the HTTP body. */
static void wp_drain(void *arg)
{
    struct wpart *p = arg;
    if (p->u->paused && p->u->req) {
        p->u->paused = false;
        http_req_pause_body(p->u->req, false);
    }
}

static const struct agentc_chan_ops wp_ops = {
    .on_event = wp_event,
    .on_error = wp_error,
    .on_close = wp_close,
    .on_drain = wp_drain,
};

static struct agentc *sandbox_agent(struct e2b *e, const char *id)
{
    struct sbx *s = sbx_find(e->sp, NULL, id);
    return s ? sbx_agent(s) : NULL;
}

/* Starts writing one file (target = path override, else the part's filename). */
static int part_begin(void *arg, const char *name, const char *filename, struct e2b_err *err)
{
    struct upload *u = arg;
    u->cur = NULL;
    if (name && strcmp(name, "file") != 0)
        return 0; /* other form fields are ignored */
    char home[E2B_USER_MAX + 16];
    e2b_user_home(u->user, home, sizeof home);
    char *abs = u->path_override ? strdup(u->path_override)
                                 : e2b_path_resolve(filename ? filename : "", home, err);
    if (!abs)
        return err->code ? -1 : e2b_err_set(err, E2B_INTERNAL, "out of memory");
    for (struct wpart *p = u->parts; p; p = p->next)
        if (strcmp(p->path, abs) == 0) {
            free(abs);
            return e2b_err_set(err, E2B_INVALID_ARGUMENT, "two parts write the same path");
        }
    if (u->nparts >= UPLOAD_PARTS_MAX) {
        free(abs);
        return e2b_err_set(err, E2B_INVALID_ARGUMENT, "more than %d files", UPLOAD_PARTS_MAX);
    }
    struct wpart *p = calloc(1, sizeof *p);
    /* In place, as envd writes: the file keeps its inode (hard links see the new
     * content) and a watcher sees a write of that file, not a rename of a temporary. */
    json_t *r = json_pack("{s:s, s:s, s:s, s:b}", "op", "write", "path", abs, "user", u->user,
                          "in_place", 1);
    if (r && u->xattrs)
        json_object_set(r, "xattrs", u->xattrs);
    struct agentc *a = sandbox_agent(u->e, u->sandbox);
    char why[128] = "sandbox is not running";
    if (!p || !r || !a || !(p->ch = agentc_open(a, r, &wp_ops, p, 0, why, sizeof why))) {
        json_decref(r);
        free(p);
        free(abs);
        return e2b_err_set(err, r ? E2B_UNAVAILABLE : E2B_INVALID_ARGUMENT, "%s",
                           r ? why : "path is not valid UTF-8");
    }
    json_decref(r);
    p->u = u;
    p->path = abs;
    p->next = u->parts;
    u->parts = p;
    u->nparts++;
    u->cur = p;
    return 0;
}

static int part_data(void *arg, const uint8_t *data, size_t len, struct e2b_err *err)
{
    struct upload *u = arg;
    if (!u->cur || !u->cur->ch)
        return 0;
    if (agentc_write(u->cur->ch, data, len) < 0)
        return e2b_err_set(err, E2B_UNAVAILABLE, "the sandbox agent refused the data");
    if (agentc_queued(u->cur->ch) > E2B_HIGH_WATER && !u->paused && u->req) {
        u->paused = true;
        http_req_pause_body(u->req, true);
    }
    return 0;
}

static int part_end(void *arg, struct e2b_err *err)
{
    (void)err;
    struct upload *u = arg;
    if (u->cur && u->cur->ch)
        agentc_eof(u->cur->ch);
    u->cur = NULL;
    return 0;
}

static const struct e2b_mp_callbacks mp_cbs = {part_begin, part_data, part_end};

/* Decoded body bytes: to the multipart parser or straight into the single file. */
static int body_sink(void *arg, const uint8_t *data, size_t len, struct e2b_err *err)
{
    struct upload *u = arg;
    return u->mp ? e2b_mp_feed(u->mp, data, len, err) : part_data(u, data, len, err);
}

static void up_chunk(struct http_req *req, const char *data, size_t len, void *arg)
{
    (void)req;
    struct upload *u = arg;
    if (u->err.code != E2B_OK)
        return;
    struct e2b_err err = {0};
    int rc = u->gz ? e2b_gzip_feed(u->gz, (const uint8_t *)data, len, &err)
                   : body_sink(u, (const uint8_t *)data, len, &err);
    if (rc < 0) {
        u->err = err;
        up_maybe_reply(u);
        up_release(u);
    }
}

static void up_end(struct http_req *req, void *arg)
{
    (void)req;
    struct upload *u = arg;
    struct e2b_err err = {0};
    if (u->err.code == E2B_OK && ((u->gz && e2b_gzip_finish(u->gz, &err) < 0) ||
                                  (u->mp && e2b_mp_finish(u->mp, &err) < 0)))
        u->err = err;
    if (u->err.code == E2B_OK && !u->mp)
        part_end(u, &err);
    u->body_done = true;
    up_maybe_reply(u);
    up_release(u);
}

static void up_http_close(struct http_req *req, void *arg)
{
    (void)req;
    struct upload *u = arg;
    u->req = NULL;
    up_abort_parts(u);
    up_release(u);
}

/* X-Metadata-<key>: <value> headers (envd >= 0.6.2) as the xattrs the agent writes,
 * {"user.e2b.<key>": value}; NULL when there are none or on an error (err set). Keys
 * arrive as the client's HTTP library spelled them (undici lowercases names). */
static json_t *upload_metadata(struct http_req *req, struct e2b_err *err)
{
    static const char prefix[] = "X-Metadata-";
    const char *name, *value;
    json_t *out = NULL;
    for (unsigned i = 0; http_req_header_at(req, i, &name, &value); i++) {
        if (strncasecmp(name, prefix, sizeof prefix - 1) != 0)
            continue;
        const char *key = name + sizeof prefix - 1;
        char xname[256];
        if (!*key || snprintf(xname, sizeof xname, "%s%s", E2B_XATTR_PREFIX, key) >= (int)sizeof xname ||
            strlen(value) > UPLOAD_META_VALUE_MAX || (out && json_object_size(out) >= UPLOAD_META_MAX)) {
            json_decref(out);
            e2b_err_set(err, E2B_INVALID_ARGUMENT,
                        "metadata: at most %d keys of <= %zu bytes, values <= %d bytes",
                        UPLOAD_META_MAX, sizeof xname - sizeof E2B_XATTR_PREFIX, UPLOAD_META_VALUE_MAX);
            return NULL;
        }
        json_t *v = json_string(value); /* NULL unless UTF-8 */
        if (!v || (!out && !(out = json_object()))) {
            json_decref(v);
            json_decref(out);
            e2b_err_set(err, E2B_INVALID_ARGUMENT, "metadata values must be text");
            return NULL;
        }
        json_object_set_new(out, xname, v);
    }
    return out;
}

void e2b_files_post(struct e2b *e, struct http_req *req, struct e2b_box *box,
                    const char *user, bool token_ok)
{
    if (!files_auth(e, req, box, token_ok, "write"))
        return;
    struct upload *u = calloc(1, sizeof *u);
    if (!u) {
        e2b_reply_rest_error(req, 500, "out of memory");
        return;
    }
    u->e = e;
    snprintf(u->sandbox, sizeof u->sandbox, "%s", box->id);
    snprintf(u->user, sizeof u->user, "%s", user);
    struct e2b_err err = {0};
    const char *ct = http_req_header(req, "Content-Type");
    const char *ce = http_req_header(req, "Content-Encoding");
    bool multipart = ct && strncasecmp(ct, "multipart/", 10) == 0;
    u->xattrs = upload_metadata(req, &err);
    if (http_req_query(req, "path")) {
        u->path_override = query_path(req, user, NULL);
        if (!u->path_override) {
            free(u);
            return;
        }
    }
    if (err.code != E2B_OK)
        ; /* bad metadata: answered below */
    else if (multipart)
        u->mp = e2b_mp_new(ct, &mp_cbs, u, &err);
    else if (!u->path_override)
        e2b_err_set(&err, E2B_INVALID_ARGUMENT, "an octet-stream upload needs the path parameter");
    else
        part_begin(u, NULL, NULL, &err); /* raw body: one file at path_override */
    if (err.code == E2B_OK && ce && strcasecmp(ce, "identity") != 0) {
        if (strcasecmp(ce, "gzip") != 0)
            e2b_err_set(&err, E2B_INVALID_ARGUMENT, "unsupported Content-Encoding %.32s", ce);
        else if (!(u->gz = e2b_gzip_new(false, body_sink, u)))
            e2b_err_set(&err, E2B_INTERNAL, "out of memory");
    }
    u->req = req;
    if (err.code == E2B_OK) {
        http_req_on_close(req, up_http_close, u);
        if (http_req_stream_body(req, up_chunk, up_end, u) == 0)
            return;
        e2b_err_set(&err, E2B_INTERNAL, "request body already consumed");
    }
    u->err = err;
    up_maybe_reply(u);
    up_release(u);
}
