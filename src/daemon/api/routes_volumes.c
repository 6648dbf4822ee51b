/* routes_volumes.c: /v1/volumes, named volumes per tenant, and their files without a
 * sandbox (volume/vol.h: directories on the host, every path resolved beneath the
 * volume). Mounting volumes into sandboxes is not wired yet: a sandbox create with
 * "volumes" is still an unknown field.
 *
 *   POST   /v1/volumes {"name": "v"}          201 {"volume": {"name","created_at"}}
 *   GET    /v1/volumes                        200 {"volumes": [...]}
 *   GET    /v1/volumes/{name}                 200 {"volume": {...}}
 *   DELETE /v1/volumes/{name}                 204
 *   PUT    /v1/volumes/{name}/files?path=/a   streamed body -> 200 {"file": {"path","size"}}
 *                                             (missing parent directories are made)
 *   GET    /v1/volumes/{name}/files?path=/a   the file's bytes, streamed
 *   DELETE /v1/volumes/{name}/files?path=/a   204 (a file, or an empty directory)
 *   GET    /v1/volumes/{name}/files/list?path=/   200 {"entries": [{"name","type","size"}]}
 *
 * Disk writes are synchronous on the loop (local files, 64 KiB at a time); uploads are
 * bounded by VOL_FILE_MAX. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/auth/auth.h"
#include "daemon/volume/vol.h"
#include "routes.h"

#define VOL_CHUNK (64 * 1024)
#define VOL_PENDING_MAX (256 * 1024) /* queued download bytes before waiting for a drain */

/* Authenticates and returns the path's volume name (checked later by vol.c), or NULL
 * after replying. */
static const char *vol_auth(struct spaced *sp, struct http_req *req, struct auth_principal *who)
{
    return auth_require(sp, req, who) ? router_param(req, "name") : NULL;
}

static void reply_volume(struct http_req *req, int status, json_t *v)
{
    json_t *o = json_pack("{s:o}", "volume", v);
    http_reply_json(req, status, o);
    json_decref(o);
}

static void create_body(struct http_req *req, const char *data, size_t len, void *sp)
{
    struct auth_principal who;
    struct spaced_err err;
    static const char *const known[] = {"name", NULL};
    if (!auth_require(sp, req, &who))
        return;
    json_t *b = routes_parse_object(sp, req, data, len, known);
    if (!b)
        return;
    const char *name = json_string_value(json_object_get(b, "name"));
    json_t *v = NULL;
    if (!name)
        spaced_err_set(&err, 400, "invalid_request", "name (a string) is required");
    else if (vol_create(sp, who.tenant, name, &err) == 0)
        v = vol_get(sp, who.tenant, name, &err);
    json_decref(b);
    if (v) {
        reply_volume(req, 201, v);
        return;
    }
    routes_reply_err(sp, req, &err);
}

static void h_create(struct http_req *req, void *sp)
{
    struct auth_principal who;
    if (auth_require(sp, req, &who))
        http_req_read_body(req, ROUTES_BODY_MAX, create_body, sp);
}

static void h_list(struct http_req *req, void *sp)
{
    struct auth_principal who;
    if (!auth_require(sp, req, &who))
        return;
    json_t *o = json_pack("{s:o}", "volumes", vol_list(sp, who.tenant));
    http_reply_json(req, 200, o);
    json_decref(o);
}

static void h_get(struct http_req *req, void *sp)
{
    struct auth_principal who;
    struct spaced_err err;
    const char *name = vol_auth(sp, req, &who);
    json_t *v = name ? vol_get(sp, who.tenant, name, &err) : NULL;
    if (v)
        reply_volume(req, 200, v);
    else if (name)
        routes_reply_err(sp, req, &err);
}

static void h_delete(struct http_req *req, void *sp)
{
    struct auth_principal who;
    struct spaced_err err;
    const char *name = vol_auth(sp, req, &who);
    if (!name)
        return;
    if (vol_delete(sp, who.tenant, name, &err) == 0)
        http_reply(req, 204, NULL, NULL, 0);
    else
        routes_reply_err(sp, req, &err);
}

/* ---- files ---------------------------------------------------------------------------- */

/* One transfer between a volume file and a request. */
struct xfer {
    struct spaced *sp;
    struct http_req *req;
    int fd;
    int64_t done;
    char path[VOL_PATH_MAX];
};

static void xfer_free(struct xfer *x)
{
    if (x->fd >= 0)
        close(x->fd);
    free(x);
}

static void xfer_closed(struct http_req *req, void *arg)
{
    (void)req;
    xfer_free(arg);
}

/* Opens the query's path in the path's volume for a transfer, or NULL after replying. */
static struct xfer *xfer_open(struct spaced *sp, struct http_req *req, int flags, bool mkdirs)
{
    struct auth_principal who;
    struct spaced_err err;
    const char *name = vol_auth(sp, req, &who);
    if (!name)
        return NULL;
    const char *path = http_req_query(req, "path");
    struct xfer *x = calloc(1, sizeof *x);
    if (!x) {
        routes_reply_error(sp, req, 503, "unavailable", "out of memory");
        return NULL;
    }
    /* Truncated only once known to be a regular file: O_TRUNC in the open would act on
     * whatever node a guest left at the path before the check below. */
    x->fd = vol_open(sp, who.tenant, name, path, flags & ~O_TRUNC, mkdirs, &err);
    struct stat st;
    if (x->fd >= 0 && (fstat(x->fd, &st) != 0 || !S_ISREG(st.st_mode)))
        spaced_err_set(&err, 409, "not_a_file", "%.200s is not a regular file", path);
    else if (x->fd >= 0 && (flags & O_TRUNC) && ftruncate(x->fd, 0) != 0)
        spaced_err_set(&err, 500, "internal", "%.200s: cannot truncate: %s", path, strerror(errno));
    else if (x->fd >= 0) {
        x->sp = sp;
        x->req = req;
        snprintf(x->path, sizeof x->path, "%s", path);
        http_req_on_close(req, xfer_closed, x);
        return x;
    }
    xfer_free(x);
    routes_reply_err(sp, req, &err);
    return NULL;
}

static void xfer_fail(struct xfer *x, int status, const char *code, const char *msg)
{
    struct http_req *req = x->req;
    struct spaced *sp = x->sp;
    http_req_on_close(req, NULL, NULL);
    xfer_free(x);
    routes_reply_error(sp, req, status, code, "%s", msg);
}

static void upload_chunk(struct http_req *req, const char *data, size_t len, void *arg)
{
    struct xfer *x = arg;
    if (x->done + (int64_t)len > VOL_FILE_MAX) {
        xfer_fail(x, 413, "too_large", "a volume file holds at most 1 GiB");
        return;
    }
    for (size_t off = 0; off < len;) {
        ssize_t n = write(x->fd, data + off, len - off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            xfer_fail(x, errno == ENOSPC ? 507 : 500, "write_failed", strerror(errno));
            return;
        }
        off += (size_t)n;
    }
    x->done += (int64_t)len;
}

static void upload_end(struct http_req *req, void *arg)
{
    struct xfer *x = arg;
    json_t *o = json_pack("{s:{s:s, s:I}}", "file", "path", x->path, "size", (json_int_t)x->done);
    http_req_on_close(req, NULL, NULL);
    xfer_free(x);
    http_reply_json(req, 200, o);
    json_decref(o);
}

static void h_put(struct http_req *req, void *sp)
{
    if (http_req_content_length(req) > VOL_FILE_MAX) {
        routes_reply_error(sp, req, 413, "too_large", "a volume file holds at most 1 GiB");
        return;
    }
    struct xfer *x = xfer_open(sp, req, O_WRONLY | O_CREAT | O_TRUNC, true);
    if (x && http_req_stream_body(req, upload_chunk, upload_end, x) < 0)
        xfer_fail(x, 500, "internal", "request body already claimed");
}

static void download_pump(struct http_req *req, void *arg)
{
    struct xfer *x = arg;
    char buf[VOL_CHUNK];
    while (http_stream_pending(req) < VOL_PENDING_MAX) {
        ssize_t n = read(x->fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) { /* end (a shorter file than announced: the stream is cut, not padded) */
            http_req_on_close(req, NULL, NULL);
            xfer_free(x);
            if (n < 0)
                http_reply_abort(req, "volume file read failed");
            else
                http_stream_end(req);
            return;
        }
        http_stream_write(req, buf, (size_t)n);
    }
    http_stream_on_drain(req, download_pump, x);
}

static void h_download(struct http_req *req, void *sp)
{
    struct xfer *x = xfer_open(sp, req, O_RDONLY, false);
    struct stat st;
    if (!x)
        return;
    if (fstat(x->fd, &st) != 0 ||
        http_stream_start(req, 200, "application/octet-stream", st.st_size) < 0) {
        xfer_fail(x, 500, "internal", "cannot start the download");
        return;
    }
    download_pump(req, x);
}

static void h_remove(struct http_req *req, void *sp)
{
    struct auth_principal who;
    struct spaced_err err;
    const char *name = vol_auth(sp, req, &who);
    if (!name)
        return;
    if (vol_remove(sp, who.tenant, name, http_req_query(req, "path"), &err) == 0)
        http_reply(req, 204, NULL, NULL, 0);
    else
        routes_reply_err(sp, req, &err);
}

static void h_list_dir(struct http_req *req, void *sp)
{
    struct auth_principal who;
    struct spaced_err err;
    const char *name = vol_auth(sp, req, &who);
    if (!name)
        return;
    const char *path = http_req_query(req, "path");
    json_t *e = vol_list_dir(sp, who.tenant, name, path ? path : "/", &err);
    if (!e) {
        routes_reply_err(sp, req, &err);
        return;
    }
    json_t *o = json_pack("{s:o}", "entries", e);
    http_reply_json(req, 200, o);
    json_decref(o);
}

void routes_volumes_register(struct router *r, struct spaced *sp)
{
    router_add(r, "POST", "/v1/volumes", h_create, sp);
    router_add(r, "GET", "/v1/volumes", h_list, sp);
    router_add(r, "GET", "/v1/volumes/{name}", h_get, sp);
    router_add(r, "DELETE", "/v1/volumes/{name}", h_delete, sp);
    router_add(r, "PUT", "/v1/volumes/{name}/files", h_put, sp);
    router_add(r, "GET", "/v1/volumes/{name}/files", h_download, sp);
    router_add(r, "DELETE", "/v1/volumes/{name}/files", h_remove, sp);
    router_add(r, "GET", "/v1/volumes/{name}/files/list", h_list_dir, sp);
}
