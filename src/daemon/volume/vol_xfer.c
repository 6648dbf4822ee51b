/* vol_xfer.c: volume file transfers between a request and the disk (vol_xfer.h). */
#include "vol_xfer.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "vol.h"
#include "vol_quota.h"

#define VOL_CHUNK (64 * 1024)

/* One transfer between a volume file and a request. */
struct xfer {
    struct http_req *req;
    const struct vol_xfer_ops *ops;
    void *arg;
    int fd;
    int64_t size;               /* the file's size when opened */
    int64_t done;
    int64_t paid;               /* bytes taken from the quota charge so far */
    struct vol_charge *charge;  /* uploads only */
    char path[VOL_PATH_MAX];
};

static void xfer_free(struct xfer *x)
{
    if (x->fd >= 0)
        close(x->fd);
    vol_quota_end(x->charge);
    free(x);
}

static void xfer_closed(struct http_req *req, void *arg)
{
    (void)req;
    xfer_free(arg);
}

/* Ends the transfer and replies err through the caller's ops. */
static void xfer_fail(struct xfer *x, int status, const char *code, const char *msg)
{
    struct http_req *req = x->req;
    const struct vol_xfer_ops *ops = x->ops;
    void *arg = x->arg;
    struct spaced_err err;
    spaced_err_set(&err, status, code, "%s", msg);
    http_req_on_close(req, NULL, NULL);
    xfer_free(x);
    ops->fail(req, &err, arg);
}

/* Opens path in the volume for a transfer (a regular file: nothing else is read or
 * written), or NULL after replying. */
static struct xfer *xfer_open(struct spaced *sp, struct http_req *req, const char *tenant,
                              const char *name, const char *path, int flags, bool mkdirs,
                              const struct vol_xfer_ops *ops, void *arg)
{
    struct spaced_err err;
    struct xfer *x = calloc(1, sizeof *x);
    if (!x) {
        spaced_err_set(&err, 503, "unavailable", "out of memory");
        ops->fail(req, &err, arg);
        return NULL;
    }
    x->fd = vol_open(sp, tenant, name, path, flags, mkdirs, &err);
    struct stat st;
    if (x->fd >= 0 && (fstat(x->fd, &st) != 0 || !S_ISREG(st.st_mode)))
        spaced_err_set(&err, 409, "not_a_file", "%.200s is not a regular file", path);
    else if (x->fd >= 0) {
        x->size = st.st_size;
        x->req = req;
        x->ops = ops;
        x->arg = arg;
        snprintf(x->path, sizeof x->path, "%s", path);
        http_req_on_close(req, xfer_closed, x);
        return x;
    }
    xfer_free(x);
    ops->fail(req, &err, arg);
    return NULL;
}

static void upload_chunk(struct http_req *req, const char *data, size_t len, void *arg)
{
    (void)req;
    struct xfer *x = arg;
    struct spaced_err err;
    if (x->done + (int64_t)len > VOL_FILE_MAX) {
        xfer_fail(x, 413, "too_large", "a volume file holds at most 1 GiB");
        return;
    }
    int64_t need = x->done + (int64_t)len - x->paid;
    if (need > 0 && vol_quota_take(x->charge, need, &err) < 0) {
        /* A body without a length passed the quota: the file was truncated already; it is
         * left empty, so the refused upload holds none of the tenant's bytes. */
        if (ftruncate(x->fd, 0) != 0)
            log_warn("volume.upload", "path=%.200s msg=\"cannot empty a refused upload: %s\"",
                     x->path, strerror(errno));
        xfer_fail(x, err.status, err.code, err.message);
        return;
    }
    if (need > 0)
        x->paid += need;
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
    http_req_on_close(req, NULL, NULL);
    x->ops->uploaded(req, x->path, x->fd, x->done, x->arg);
    xfer_free(x);
}

void vol_xfer_upload(struct spaced *sp, struct http_req *req, const char *tenant,
                     const char *name, const char *path, const struct vol_xfer_ops *ops,
                     void *arg)
{
    if (http_req_content_length(req) > VOL_FILE_MAX) {
        struct spaced_err err;
        spaced_err_set(&err, 413, "too_large", "a volume file holds at most 1 GiB");
        ops->fail(req, &err, arg);
        return;
    }
    /* Whether the upload makes the file: one the quota refuses is then removed again. */
    struct spaced_err err;
    int probe = vol_open(sp, tenant, name, path, O_PATH, false, &err);
    bool fresh = probe < 0 && err.status == 404;
    if (probe >= 0)
        close(probe);
    /* Not O_TRUNC: that would act on whatever node a guest left at the path before
     * xfer_open's check, and on a file the quota then refuses to replace. */
    struct xfer *x = xfer_open(sp, req, tenant, name, path, O_WRONLY | O_CREAT, true, ops, arg);
    if (!x)
        return;
    int64_t len = http_req_content_length(req);
    if (!(x->charge = vol_quota_begin(sp, tenant, x->size, &err)) ||
        (len > 0 && vol_quota_take(x->charge, len, &err) < 0)) {
        struct spaced_err ignored;
        if (fresh)
            vol_remove(sp, tenant, name, path, false, &ignored);
        xfer_fail(x, err.status, err.code, err.message); /* an existing file is untouched */
        return;
    }
    x->paid = len > 0 ? len : 0;
    if (ftruncate(x->fd, 0) != 0)
        xfer_fail(x, 500, "internal", strerror(errno));
    else if (http_req_stream_body(req, upload_chunk, upload_end, x) < 0)
        xfer_fail(x, 500, "internal", "request body already claimed");
}

static void download_pump(struct http_req *req, void *arg)
{
    struct xfer *x = arg;
    char buf[VOL_CHUNK];
    while (http_stream_pending(req) < VOL_XFER_PENDING_MAX) {
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

void vol_xfer_download(struct spaced *sp, struct http_req *req, const char *tenant,
                       const char *name, const char *path, const struct vol_xfer_ops *ops,
                       void *arg)
{
    struct xfer *x = xfer_open(sp, req, tenant, name, path, O_RDONLY, false, ops, arg);
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
