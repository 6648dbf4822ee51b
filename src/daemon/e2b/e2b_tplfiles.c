/* e2b_tplfiles: the file archives of E2B's template builder copy() (SDK 2.51).
 *
 * The SDK hashes each copy()'s files (sha256 hex, 64 characters), asks
 *   GET /templates/{id}/files/{hash}  -> {"present": bool, "url"?}
 * and, when not present, PUTs a tar(.gz) of the files to url. The url is spaced's own
 * (the Host the SDK reached it by) on the same path, with ?tenant=T&token=K: K is an
 * auth token (auth.h) for the scope "e2b-tplfile:<tenant>:<hash>", valid
 * TPLFILE_TTL_MS, so a link is good for one tenant and one hash only, and expires.
 * The PUT needs no API key (the SDK sends none to upload links). Through a control
 * daemon the link names the control (HH_PUBLIC_URL_HEADER), which routes the PUT back to
 * this node by tenant and template (cluster/cluster_e2btpl.c).
 *
 * An archive is kept as <data_dir>/e2b-files/<tenant>/<hash> (0600, written whole through
 * a temporary file and a rename, so a half-written one is never taken as present), at most
 * TPL_COPY_MAX bytes (413 past it, before a byte is read when Content-Length says so):
 * the build carries it into the build VM as a copy step's content, which has that
 * bound. A tenant keeps at most TPLFILE_KEEP archives (256 MiB): storing one more drops the
 * least recently stored or used. It is never unpacked on the host: the build unpacks it inside the VM
 * (e2b_template.c). The hash is the SDK's name for the files, not checked against the
 * bytes (the SDK hashes the files, not the archive): a tenant can only replace its own. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/auth/auth.h"
#include "daemon/http/router.h"
#include "daemon/spaced.h"
#include "daemon/template/tpl.h"
#include "daemon/template/tpl_blob.h"
#include "daemon/vm/vm.h"
#include "e2b.h"
#include "e2b_internal.h"
#include "http_hdr.h"
#include "readall.h"

#define TPLFILE_TTL_MS (3600LL * 1000) /* a build's uploads start right after the link */
#define TPLFILE_KEEP 32                /* archives kept per tenant: 32 x 8 MiB = 256 MiB */

bool e2b_tplfile_hash_valid(const char *h)
{
    size_t n = 0;
    for (; h && h[n]; n++)
        if (!((h[n] >= '0' && h[n] <= '9') || (h[n] >= 'a' && h[n] <= 'f')))
            return false;
    return n == 64;
}

static int archive_path(struct e2b *e, const char *tenant, const char *hash, char *out, size_t cap)
{
    int n = snprintf(out, cap, "%s/e2b-files/%s/%s", e->sp->opt.data_dir, tenant, hash);
    return n < 0 || (size_t)n >= cap ? -1 : 0;
}

static int scope_of(const char *tenant, const char *hash, char *out, size_t cap)
{
    int n = snprintf(out, cap, "e2b-tplfile:%s:%s", tenant, hash);
    return n < 0 || (size_t)n >= cap ? -1 : 0;
}

void e2b_tplfile_link(struct e2b *e, struct http_req *req, const char *tenant, const char *name,
                      const char *hash)
{
    char path[PATH_MAX], scope[STORE_ID_MAX + 96], tok[AUTH_TOKEN_MAX];
    const char *host = http_req_header(req, "Host");
    struct stat st;
    if (!e2b_tplfile_hash_valid(hash)) {
        e2b_reply_rest_error(req, 400, "files hash must be 64 lowercase hex digits (sha256)");
        return;
    }
    if (archive_path(e, tenant, hash, path, sizeof path) < 0 || scope_of(tenant, hash, scope, sizeof scope) < 0) {
        e2b_reply_rest_error(req, 500, "path too long");
        return;
    }
    if (lstat(path, &st) == 0 && S_ISREG(st.st_mode)) {
        utimensat(AT_FDCWD, path, NULL, AT_SYMLINK_NOFOLLOW); /* used: kept longest */
        json_t *r = json_pack("{s:b}", "present", 1);
        http_reply_json(req, 200, r);
        json_decref(r);
        return;
    }
    /* The link is the address the client reached us at: through a control daemon, the
     * control's (it names it beside the node token, and drops a client's copy of that
     * header); else configured when a proxy terminates TLS in front of spaced, else plain
     * HTTP to the Host it named. */
    const char *fwd = http_req_header(req, HH_PUBLIC_URL_HEADER);
    const char *base = fwd && tpl_blob_token_ok(req, e->sp->opt.node_token) && hh_public_url_ok(fwd)
                           ? fwd : e->sp->opt.public_url;
    char hostbase[300];
    if (!base) {
        if (!hh_host_ok(host)) {
            e2b_reply_rest_error(req, 400, "a Host header (host[:port]) is needed to build the upload link");
            return;
        }
        snprintf(hostbase, sizeof hostbase, "http://%s", host);
        base = hostbase;
    }
    if (auth_token_mint(e->sp->auth, scope, spaced_now_ms() + TPLFILE_TTL_MS, tok, sizeof tok) < 0) {
        e2b_reply_rest_error(req, 500, "cannot mint an upload token");
        return;
    }
    char url[1024];
    snprintf(url, sizeof url, "%s/templates/%s/files/%s?tenant=%s&token=%s", base, name,
             hash, tenant, tok);
    json_t *r = json_pack("{s:b, s:s}", "present", 0, "url", url);
    http_reply_json(req, 200, r);
    json_decref(r);
}

/* Makes room for one more archive in the tenant's directory: while it holds
 * TPLFILE_KEEP or more, the least recently stored or used one goes (they are a cache:
 * the SDK uploads again when told not present), so a tenant's archives take at most
 * TPLFILE_KEEP x TPL_COPY_MAX of the data dir's disk. */
static void evict_oldest(const char *dir)
{
    for (;;) {
        DIR *d = opendir(dir);
        struct dirent *de;
        char oldest[65] = ""; /* a hash: 64 hex digits */
        long long old_t = 0;
        unsigned n = 0;
        if (!d)
            return;
        while ((de = readdir(d))) {
            struct stat st;
            if (!e2b_tplfile_hash_valid(de->d_name) ||
                fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                continue;
            n++;
            long long t = (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
            if (!oldest[0] || t < old_t) {
                old_t = t;
                memcpy(oldest, de->d_name, sizeof oldest); /* checked: 64 + NUL */
            }
        }
        if (n < TPLFILE_KEEP || !oldest[0] || unlinkat(dirfd(d), oldest, 0) < 0) {
            closedir(d);
            return;
        }
        closedir(d);
    }
}

static void upload_body(struct http_req *req, const char *data, size_t len, void *arg)
{
    struct e2b *e = arg;
    const char *tenant = http_req_query(req, "tenant"), *hash = router_param(req, "hash");
    char path[PATH_MAX], dir[PATH_MAX];
    if (archive_path(e, tenant, hash, path, sizeof path) < 0 ||
        snprintf(dir, sizeof dir, "%s/e2b-files/%s", e->sp->opt.data_dir, tenant) >= (int)sizeof dir ||
        spaced_mkdir_p(dir) < 0 || (evict_oldest(dir), vm_write_file_atomic(path, data, len) < 0)) {
        e2b_reply_rest_error(req, 500, "cannot store the archive");
        return;
    }
    json_t *r = json_object();
    http_reply_json(req, 200, r);
    json_decref(r);
}

/* PUT /templates/{id}/files/{hash}?tenant=T&token=K: the archive of an upload link. */
static void h_upload(struct http_req *req, void *arg)
{
    struct e2b *e = arg;
    const char *tenant = http_req_query(req, "tenant"), *token = http_req_query(req, "token");
    const char *hash = router_param(req, "hash");
    char scope[STORE_ID_MAX + 96];
    if (!e2b_tplfile_hash_valid(hash)) {
        e2b_reply_rest_error(req, 400, "files hash must be 64 lowercase hex digits (sha256)");
        return;
    }
    if (!tenant || !token || strlen(tenant) >= STORE_ID_MAX || strchr(tenant, '/') ||
        tenant[0] == '.' || scope_of(tenant, hash, scope, sizeof scope) < 0 ||
        !auth_token_verify(e->sp->auth, scope, token, spaced_now_ms())) {
        e2b_reply_rest_error(req, 401, "invalid or expired upload link");
        return;
    }
    http_req_read_body(req, TPL_COPY_MAX, upload_body, e);
}

int e2b_tplfile_read(struct e2b *e, const char *tenant, const char *hash, char **out, size_t *len)
{
    char path[PATH_MAX];
    *out = NULL;
    *len = 0;
    if (!e2b_tplfile_hash_valid(hash) || archive_path(e, tenant, hash, path, sizeof path) < 0)
        return -1;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return -1;
    *out = readall_fd(fd, TPL_COPY_MAX, len);
    close(fd);
    return *out ? 0 : -1;
}

void e2b_tplfiles_register(struct router *r, struct e2b *e)
{
    router_add(r, "PUT", "/templates/{id}/files/{hash}", h_upload, e);
}
