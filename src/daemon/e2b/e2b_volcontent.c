/* e2b_volcontent: E2B's volume content API (SDK 2.51: Volume#list, makeDir, getInfo,
 * exists, updateMetadata, readFile, writeFile, remove) over a native volume's files,
 * without a sandbox. The SDK sends these to E2B_VOLUME_API_URL (else api.<domain>) with
 * "Authorization: Bearer <volume token>" (e2b_volume.c): the token alone names the
 * tenant, and holds only for the volume it was made for.
 *
 *   GET    /volumecontent/{id}/dir?path=&depth=        200 [VolumeEntryStat] (depth 1..16)
 *   POST   /volumecontent/{id}/dir?path=&uid=&gid=&mode=&force=   201 VolumeEntryStat
 *          (force: the missing parents too)
 *   GET    /volumecontent/{id}/path?path=              200 VolumeEntryStat
 *   PATCH  /volumecontent/{id}/path?path= {"uid","gid","mode"}    200 VolumeEntryStat
 *   DELETE /volumecontent/{id}/path?path=              204 (a file or an empty directory)
 *   GET    /volumecontent/{id}/file?path=              the bytes, streamed
 *   PUT    /volumecontent/{id}/file?path=&uid=&gid=&mode=  streamed body, parents made:
 *          200 VolumeEntryStat
 *
 * VolumeEntryStat: {"name","path","type" (file, directory, symlink, unknown),"size",
 * "mode" (permission bits),"uid","gid","atime","mtime","ctime"}. Errors are the
 * content API's {"code": "<snake_case>", "message"} with the native statuses (404 no such
 * path, 400 a path leaving the volume or through a symlink, 409 ...), 401 for a missing,
 * expired or foreign token.
 *
 * Every path is resolved beneath the volume as in the native API (vol.h): no "..", no
 * symlink followed anywhere. Below a listed directory the walk opens each child by one
 * name, O_NOFOLLOW, from its parent's fd, so a guest swapping a directory for a symlink
 * meanwhile makes the open fail rather than leave the volume; a listing stops at
 * E2B_VOL_LIST_MAX entries (400). Modes are permission bits only (0..0777): no setuid,
 * setgid or sticky file is made on the host through this API. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/auth/auth.h"
#include "daemon/http/router.h"
#include "daemon/volume/vol.h"
#include "daemon/volume/vol_xfer.h"
#include "e2b.h"
#include "e2b_internal.h"

#define BODY_MAX (16u * 1024)
#define E2B_VOL_DEPTH_MAX 16
#define E2B_VOL_LIST_MAX 10000

/* Ownership and mode a request asks for; has_* false for those it leaves alone. */
struct meta {
    bool has_uid, has_gid, has_mode;
    uint32_t uid, gid, mode;
};

static void reply_err(struct http_req *req, const struct spaced_err *err)
{
    json_t *o = json_pack("{s:s, s:s}", "code", err->code[0] ? err->code : "internal",
                          "message", err->message);
    http_reply_json(req, err->status ? err->status : 500, o);
    json_decref(o);
}

static void xfer_fail(struct http_req *req, const struct spaced_err *err, void *arg)
{
    (void)arg;
    reply_err(req, err);
}

/* The volume the path names and the tenant its token is for, or NULL after 401. */
static const char *content_auth(struct e2b *e, struct http_req *req, char tenant[STORE_ID_MAX])
{
    const char *name = router_param(req, "volumeID");
    if (name && e2b_volume_token_tenant(e, auth_request_key(req), name, tenant))
        return name;
    struct spaced_err err;
    spaced_err_set(&err, 401, "unauthorized", "a volume token for volume %.64s is required "
                   "(Authorization: Bearer <token from Volume.create or Volume.connect>); this "
                   "one is missing, expired or for another volume", name ? name : "");
    reply_err(req, &err);
    return NULL;
}

static int64_t ts_ms(struct timespec t)
{
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* VolumeEntryStat of the node at path (its last component is the name; "" for "/"). */
static json_t *entry_json(const char *path, const struct stat *st)
{
    const char *slash = strrchr(path, '/');
    const char *type = S_ISREG(st->st_mode) ? "file" : S_ISDIR(st->st_mode) ? "directory"
                       : S_ISLNK(st->st_mode) ? "symlink" : "unknown";
    char a[32], m[32], c[32];
    return json_pack("{s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:s, s:s, s:s}", "name",
                     slash ? slash + 1 : path, "path", path, "type", type, "size",
                     (json_int_t)st->st_size, "mode", (json_int_t)(st->st_mode & 07777), "uid",
                     (json_int_t)st->st_uid, "gid", (json_int_t)st->st_gid, "atime",
                     spaced_fmt_time(ts_ms(st->st_atim), a), "mtime",
                     spaced_fmt_time(ts_ms(st->st_mtim), m), "ctime",
                     spaced_fmt_time(ts_ms(st->st_ctim), c));
}

/* An unsigned query parameter in 0..max: 0 (absent: *has false), -1 after err 400. */
static int query_num(struct http_req *req, const char *key, uint32_t max, bool *has,
                     uint32_t *out, struct spaced_err *err)
{
    const char *v = http_req_query(req, key);
    *has = false;
    if (!v)
        return 0;
    char *end;
    errno = 0;
    unsigned long n = strtoul(v, &end, 10);
    if (!*v || *end || errno || n > max || v[0] == '-' || v[0] == '+')
        return spaced_err_set(err, 400, "invalid_request", "%s must be an integer 0..%u, not "
                              "\"%.32s\"", key, max, v);
    *has = true;
    *out = (uint32_t)n;
    return 0;
}

/* uid, gid (0..2^32-2: -1 means "unchanged" to chown) and mode (0..0777) from the query. */
static int query_meta(struct http_req *req, struct meta *m, struct spaced_err *err)
{
    return query_num(req, "uid", UINT32_MAX - 1, &m->has_uid, &m->uid, err) < 0 ||
                   query_num(req, "gid", UINT32_MAX - 1, &m->has_gid, &m->gid, err) < 0 ||
                   query_num(req, "mode", 0777, &m->has_mode, &m->mode, err) < 0
               ? -1 : 0;
}

/* Applies m to the node fd refers to (any open mode, O_PATH too: the chmod goes through
 * /proc/self/fd, which names this very inode, never a path). 0 or -1 with err. */
static int apply_meta(int fd, const struct meta *m, const char *path, struct spaced_err *err)
{
    char proc[64];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
    if ((m->has_uid || m->has_gid) &&
        fchownat(fd, "", m->has_uid ? m->uid : (uid_t)-1, m->has_gid ? m->gid : (gid_t)-1,
                 AT_EMPTY_PATH) != 0)
        return spaced_err_set(err, 500, "internal", "%.200s: chown: %s", path, strerror(errno));
    if (m->has_mode && chmod(proc, m->mode) != 0)
        return spaced_err_set(err, 500, "internal", "%.200s: chmod: %s", path, strerror(errno));
    return 0;
}

/* fstat(fd) as a VolumeEntryStat reply. */
static void reply_stat(struct http_req *req, int status, int fd, const char *path)
{
    struct stat st;
    struct spaced_err err;
    if (fstat(fd, &st) != 0) {
        spaced_err_set(&err, 500, "internal", "%.200s: %s", path, strerror(errno));
        reply_err(req, &err);
        return;
    }
    json_t *o = entry_json(path, &st);
    http_reply_json(req, status, o);
    json_decref(o);
}

/* ---- directories ------------------------------------------------------------------------ */

/* Appends the entries under the directory fd (its path dpath), depth levels down. */
static int list_into(json_t *out, int fd, const char *dpath, int depth, struct spaced_err *err)
{
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return spaced_err_set(err, 500, "internal", "%.200s: %s", dpath, strerror(errno));
    }
    int rc = 0;
    for (struct dirent *de; rc == 0 && (de = readdir(d));) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        struct stat st;
        char path[VOL_PATH_MAX];
        int n = snprintf(path, sizeof path, "%s/%s", strcmp(dpath, "/") ? dpath : "", de->d_name);
        if (n < 0 || (size_t)n >= sizeof path ||
            fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0)
            continue; /* too deep to name, or gone meanwhile */
        if (json_array_size(out) >= E2B_VOL_LIST_MAX) {
            rc = spaced_err_set(err, 400, "too_many_entries", "more than %d entries under "
                                "%.200s: list with a smaller depth", E2B_VOL_LIST_MAX, dpath);
            break;
        }
        json_array_append_new(out, entry_json(path, &st));
        if (depth > 1 && S_ISDIR(st.st_mode)) {
            int cfd = openat(dirfd(d), de->d_name,
                             O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
            if (cfd >= 0)
                rc = list_into(out, cfd, path, depth - 1, err);
        }
    }
    closedir(d);
    return rc;
}

static void h_list(struct http_req *req, void *arg)
{
    char tenant[STORE_ID_MAX];
    struct spaced_err err;
    const char *name = content_auth(arg, req, tenant), *path = http_req_query(req, "path");
    if (!name)
        return;
    bool has;
    uint32_t depth = 1;
    if (query_num(req, "depth", E2B_VOL_DEPTH_MAX, &has, &depth, &err) < 0 || depth == 0) {
        spaced_err_set(&err, 400, "invalid_request", "depth must be 1..%d", E2B_VOL_DEPTH_MAX);
        reply_err(req, &err);
        return;
    }
    int fd = vol_open(((struct e2b *)arg)->sp, tenant, name, path ? path : "/",
                      O_RDONLY | O_DIRECTORY, false, &err);
    json_t *out = json_array();
    if (fd < 0 || list_into(out, fd, path ? path : "/", (int)depth, &err) < 0)
        reply_err(req, &err);
    else
        http_reply_json(req, 200, out);
    json_decref(out);
}

static void h_mkdir(struct http_req *req, void *arg)
{
    struct e2b *e = arg;
    char tenant[STORE_ID_MAX];
    struct spaced_err err;
    struct meta m;
    const char *name = content_auth(e, req, tenant), *path = http_req_query(req, "path");
    if (!name)
        return;
    const char *force = http_req_query(req, "force");
    int fd = -1;
    if (query_meta(req, &m, &err) == 0 &&
        vol_mkdir(e->sp, tenant, name, path, force && strcmp(force, "true") == 0,
                  m.has_mode ? m.mode : 0755, &err) == 0)
        fd = vol_open(e->sp, tenant, name, path, O_PATH | O_DIRECTORY, false, &err);
    if (fd >= 0 && apply_meta(fd, &m, path, &err) == 0)
        reply_stat(req, 201, fd, path);
    else
        reply_err(req, &err);
    if (fd >= 0)
        close(fd);
}

/* ---- paths ---------------------------------------------------------------------------------- */

static void h_stat(struct http_req *req, void *arg)
{
    struct e2b *e = arg;
    char tenant[STORE_ID_MAX];
    struct spaced_err err;
    const char *name = content_auth(e, req, tenant), *path = http_req_query(req, "path");
    if (!name)
        return;
    int fd = vol_open(e->sp, tenant, name, path, O_PATH, false, &err);
    if (fd < 0) {
        reply_err(req, &err);
        return;
    }
    reply_stat(req, 200, fd, path);
    close(fd);
}

/* The PATCH body {"uid","gid","mode"} (each optional) into m: 0, or -1 with err 400. */
static int body_meta(const char *data, size_t len, struct meta *m, struct spaced_err *err)
{
    json_t *b = json_loadb(data, len, 0, NULL);
    const char *keys[] = {"uid", "gid", "mode"};
    bool *has[] = {&m->has_uid, &m->has_gid, &m->has_mode};
    uint32_t *val[] = {&m->uid, &m->gid, &m->mode};
    const json_int_t max[] = {UINT32_MAX - 1, UINT32_MAX - 1, 0777};
    int rc = json_is_object(b) ? 0 : spaced_err_set(err, 400, "invalid_request",
                                                    "body must be a JSON object {uid, gid, mode}");
    for (int i = 0; rc == 0 && i < 3; i++) {
        json_t *v = json_object_get(b, keys[i]);
        *has[i] = v && !json_is_null(v);
        if (*has[i] && (!json_is_integer(v) || json_integer_value(v) < 0 ||
                        json_integer_value(v) > max[i]))
            rc = spaced_err_set(err, 400, "invalid_request", "%s must be an integer 0..%lld",
                                keys[i], (long long)max[i]);
        else if (*has[i])
            *val[i] = (uint32_t)json_integer_value(v);
    }
    json_decref(b);
    return rc;
}

static void patch_body(struct http_req *req, const char *data, size_t len, void *arg)
{
    struct e2b *e = arg;
    char tenant[STORE_ID_MAX];
    struct spaced_err err;
    struct meta m = {0};
    const char *name = content_auth(e, req, tenant), *path = http_req_query(req, "path");
    if (!name)
        return;
    int fd = body_meta(data, len, &m, &err) == 0
                 ? vol_open(e->sp, tenant, name, path, O_PATH, false, &err) : -1;
    if (fd >= 0 && apply_meta(fd, &m, path, &err) == 0)
        reply_stat(req, 200, fd, path);
    else
        reply_err(req, &err);
    if (fd >= 0)
        close(fd);
}

static void h_patch(struct http_req *req, void *arg)
{
    char tenant[STORE_ID_MAX];
    if (content_auth(arg, req, tenant) && http_req_read_body(req, BODY_MAX, patch_body, arg) < 0)
        http_reply_abort(req, "request body already claimed");
}

static void h_remove(struct http_req *req, void *arg)
{
    struct e2b *e = arg;
    char tenant[STORE_ID_MAX];
    struct spaced_err err;
    const char *name = content_auth(e, req, tenant);
    if (!name)
        return;
    /* E2B removes a directory with everything in it, as envd's Remove does. */
    if (vol_remove(e->sp, tenant, name, http_req_query(req, "path"), true, &err) < 0)
        reply_err(req, &err);
    else
        http_reply(req, 204, NULL, NULL, 0);
}

/* ---- files ---------------------------------------------------------------------------------- */

static void uploaded(struct http_req *req, const char *path, int fd, int64_t size, void *arg)
{
    (void)size;
    (void)arg;
    struct meta m;
    struct spaced_err err;
    if (query_meta(req, &m, &err) == 0 && apply_meta(fd, &m, path, &err) == 0)
        reply_stat(req, 200, fd, path);
    else
        reply_err(req, &err);
}

static const struct vol_xfer_ops xfer_ops = {xfer_fail, uploaded};

static void h_read(struct http_req *req, void *arg)
{
    struct e2b *e = arg;
    char tenant[STORE_ID_MAX];
    const char *name = content_auth(e, req, tenant);
    if (name)
        vol_xfer_download(e->sp, req, tenant, name, http_req_query(req, "path"), &xfer_ops, e);
}

static void h_write(struct http_req *req, void *arg)
{
    struct e2b *e = arg;
    char tenant[STORE_ID_MAX];
    struct spaced_err err;
    struct meta m;
    const char *name = content_auth(e, req, tenant);
    if (!name)
        return;
    if (query_meta(req, &m, &err) < 0) /* refused before a byte is written */
        reply_err(req, &err);
    else
        vol_xfer_upload(e->sp, req, tenant, name, http_req_query(req, "path"), &xfer_ops, e);
}

void e2b_volcontent_register(struct router *r, struct e2b *e)
{
    router_add(r, "GET", "/volumecontent/{volumeID}/dir", h_list, e);
    router_add(r, "POST", "/volumecontent/{volumeID}/dir", h_mkdir, e);
    router_add(r, "GET", "/volumecontent/{volumeID}/path", h_stat, e);
    router_add(r, "PATCH", "/volumecontent/{volumeID}/path", h_patch, e);
    router_add(r, "DELETE", "/volumecontent/{volumeID}/path", h_remove, e);
    router_add(r, "GET", "/volumecontent/{volumeID}/file", h_read, e);
    router_add(r, "PUT", "/volumecontent/{volumeID}/file", h_write, e);
}
