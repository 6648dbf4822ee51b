/* cli_cp.c: `space cp LOCAL ID:PATH` and `space cp ID:PATH LOCAL`, streamed both ways
 * (any size; "-" is stdin/stdout); with --json an upload prints the API's {"file": stat}.
 * An argument is remote when it has a ':' before any '/' ("./a:b" is a local file). The
 * transfers serve `space volume put|get` too (cli_upload, cli_download: the same files
 * API under /v1/volumes). */
#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CP_BUF (256 * 1024)

/* --json after an upload: the API's answer ({"file": stat}), read with a bound. */
static int print_reply(struct cli_conn *c)
{
    size_t len = 0;
    char *text = cli_http_read_all(c, 1 << 20, &len);
    json_t *j = text ? json_loadb(text, len, 0, NULL) : NULL;
    int rc = j ? cli_print_json(j) : 1;
    if (!j)
        cli_err("the server's answer to the upload is not JSON");
    json_decref(j);
    free(text);
    return rc;
}

bool cli_split_remote(const char *arg, char *id, size_t idcap, const char **path)
{
    const char *colon = strchr(arg, ':');
    const char *slash = strchr(arg, '/');
    if (!colon || colon == arg || (slash && slash < colon) || (size_t)(colon - arg) >= idcap)
        return false;
    memcpy(id, arg, (size_t)(colon - arg));
    id[colon - arg] = '\0';
    *path = colon + 1;
    return true;
}

/* Builds /v1/<coll>/<id>/files?path=<p>. Returns 0 or -1. */
static int files_url(const char *coll, const char *id, const char *p, char *out, size_t cap)
{
    char eid[128], ep[3 * 4096 + 1];
    if (!*p || !cli_pct(id, eid, sizeof eid) || !cli_pct(p, ep, sizeof ep))
        return -1;
    int n = snprintf(out, cap, "/v1/%s/%s/files?path=%s", coll, eid, ep);
    return n < 0 || (size_t)n >= cap ? -1 : 0;
}

int cli_upload(struct cli_ctx *x, const char *local, const char *coll, const char *id,
               const char *rpath)
{
    char url[16384], err[256];
    if (files_url(coll, id, rpath, url, sizeof url) < 0) {
        cli_err("bad remote path");
        return 2;
    }
    int fd = strcmp(local, "-") == 0 ? STDIN_FILENO : open(local, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0) {
        cli_err("cannot open %s: %s", local, strerror(errno));
        return 1;
    }
    /* Regular files go with a length; pipes and stdin as chunks. */
    bool sized = S_ISREG(st.st_mode);
    struct cli_conn c;
    if (cli_request(x, &c, "PUT", url, "Content-Type: application/octet-stream\r\n",
                    sized ? (int64_t)st.st_size : -1) < 0) {
        if (fd != STDIN_FILENO)
            close(fd);
        return 1;
    }
    char *buf = malloc(CP_BUF);
    int rc = buf ? 0 : -1;
    char what[160];
    struct cli_progress pr;
    snprintf(what, sizeof what, "upload %.140s", rpath);
    cli_progress_start(x, &pr, what, sized ? (int64_t)st.st_size : -1);
    while (rc == 0) {
        ssize_t n = read(fd, buf, CP_BUF);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            cli_err("reading %s: %s", local, strerror(errno));
            rc = -2;
            break;
        }
        if (n == 0) {
            if (!sized)
                rc = cli_http_send_chunk(&c, NULL, 0);
            break;
        }
        rc = sized ? cli_http_send(&c, buf, (size_t)n) : cli_http_send_chunk(&c, buf, (size_t)n);
        cli_progress_update(x, &pr, n);
    }
    cli_progress_end(x, &pr);
    free(buf);
    if (fd != STDIN_FILENO)
        close(fd);
    /* Even if sending failed, the server may have said why before closing. */
    int ret = 1;
    if (rc != -2 && cli_http_read_head(&c, err, sizeof err) == 0) {
        if (c.status == 200)
            ret = x->json ? print_reply(&c) : 0;
        else
            cli_report_error(&c);
    } else if (rc != -2) {
        cli_err("upload failed: %s", err);
    }
    cli_http_close(&c);
    return ret;
}

int cli_download(struct cli_ctx *x, const char *coll, const char *id, const char *rpath,
                 const char *local)
{
    char url[16384], err[256];
    if (files_url(coll, id, rpath, url, sizeof url) < 0) {
        cli_err("bad remote path");
        return 2;
    }
    struct cli_conn c;
    if (cli_request(x, &c, "GET", url, NULL, -2) < 0)
        return 1;
    if (cli_http_read_head(&c, err, sizeof err) < 0) {
        cli_err("%s", err);
        cli_http_close(&c);
        return 1;
    }
    if (c.status != 200) {
        cli_report_error(&c);
        cli_http_close(&c);
        return 1;
    }
    bool to_stdout = strcmp(local, "-") == 0;
    int fd = to_stdout ? STDOUT_FILENO : open(local, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        cli_err("cannot create %s: %s", local, strerror(errno));
        cli_http_close(&c);
        return 1;
    }
    char *buf = malloc(CP_BUF);
    int ret = buf ? 0 : 1;
    char what[160], len[32];
    struct cli_progress pr;
    snprintf(what, sizeof what, "download %.140s", rpath);
    cli_progress_start(x, &pr, what,
                       cli_http_header(&c, "Content-Length", len, sizeof len) ? strtoll(len, NULL, 10) : -1);
    while (ret == 0) {
        ssize_t n = cli_http_read_body(&c, buf, CP_BUF);
        if (n == 0)
            break;
        if (n < 0) {
            cli_err("download of %s cut short", rpath);
            ret = 1;
            break;
        }
        for (ssize_t off = 0; off < n && ret == 0;) {
            ssize_t w = write(fd, buf + off, (size_t)(n - off));
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0) {
                cli_err("writing %s: %s", local, strerror(errno));
                ret = 1;
            }
            off += w > 0 ? w : 0;
        }
        cli_progress_update(x, &pr, n);
    }
    cli_progress_end(x, &pr);
    free(buf);
    if (!to_stdout && close(fd) < 0 && ret == 0) {
        cli_err("writing %s: %s", local, strerror(errno));
        ret = 1;
    }
    cli_http_close(&c);
    return ret;
}

int cli_cmd_cp(struct cli_ctx *x, int argc, char **argv)
{
    char sid[128], did[128];
    const char *spath, *dpath;
    if (argc != 2) {
        cli_err("usage: space cp LOCAL ID:PATH | space cp ID:PATH LOCAL");
        return 2;
    }
    bool src_remote = cli_split_remote(argv[0], sid, sizeof sid, &spath);
    bool dst_remote = cli_split_remote(argv[1], did, sizeof did, &dpath);
    if (src_remote == dst_remote) {
        cli_err("cp needs exactly one remote side written ID:PATH");
        return 2;
    }
    return dst_remote ? cli_upload(x, argv[0], "sandboxes", did, dpath)
                      : cli_download(x, "sandboxes", sid, spath, argv[1]);
}
