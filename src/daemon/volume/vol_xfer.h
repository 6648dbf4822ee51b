/* vol_xfer: one volume file streamed to or from an HTTP request, for the two APIs that
 * move volume files without a sandbox: the native files API (api/routes_volumes.c) and
 * E2B's volume content API (e2b/e2b_volume.c). They differ only in their answers, so
 * the transfer reports every outcome through a vol_xfer_ops the caller supplies.
 *
 * Paths are resolved beneath the volume (vol_open: no "..", no symlinks); only regular
 * files are read or written (409 not_a_file otherwise: a guest may leave a FIFO or a
 * device node at a path). Uploads are bounded by VOL_FILE_MAX (413 too_large) and by the
 * tenant's volume quota (vol_quota.h: 507 quota_exceeded; by its Content-Length before the
 * file is touched, or, for a body without one, when it passes the quota: the file is then
 * left empty), and
 * written synchronously on the loop, 64 KiB at a time (local files); downloads are
 * paced by the client (at most VOL_XFER_PENDING_MAX queued). Prefix vol_xfer_. */
#ifndef SPACE_VOL_XFER_H
#define SPACE_VOL_XFER_H

#include <stdint.h>

#include "daemon/http/http.h"
#include "daemon/spaced.h"

#define VOL_XFER_PENDING_MAX (256 * 1024) /* queued download bytes before waiting for a drain */

struct vol_xfer_ops {
    /* The transfer failed (before or during it): reply err in the API's shape. */
    void (*fail)(struct http_req *req, const struct spaced_err *err, void *arg);
    /* An upload finished: `size` bytes written to `path` through fd (still open, closed
     * after the call); reply. */
    void (*uploaded)(struct http_req *req, const char *path, int fd, int64_t size, void *arg);
};

/* Streams req's body into `path` of the tenant's volume `name` (missing parents made,
 * the file truncated once known to be a regular file). arg must outlive the request. */
void vol_xfer_upload(struct spaced *sp, struct http_req *req, const char *tenant,
                     const char *name, const char *path, const struct vol_xfer_ops *ops,
                     void *arg);
/* Streams the file at `path` to req (200, application/octet-stream, its length); errors
 * before the first byte go to ops->fail, a read error after it cuts the stream. */
void vol_xfer_download(struct spaced *sp, struct http_req *req, const char *tenant,
                       const char *name, const char *path, const struct vol_xfer_ops *ops,
                       void *arg);

#endif
