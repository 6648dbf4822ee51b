/* console.c: the web console's static files (console.h). */
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "daemon/api/routes.h"
#include "daemon/console/console.h"
#include "readall.h"

/* Scripts and styles from this origin only, no inline script, fetches to this origin
 * only (the JSON API and its event streams), no plugins, no framing. style-src allows
 * inline styles because xterm.js's renderer writes its theme and cell sizes as a <style>
 * element it creates; inline style cannot run code. */
#define CONSOLE_CSP                                                                        \
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "            \
    "img-src 'self' data:; font-src 'self'; connect-src 'self'; base-uri 'none'; "        \
    "form-action 'none'; frame-ancestors 'none'"

static const struct {
    const char *ext;
    const char *type;
} types[] = {
    {".html", "text/html; charset=utf-8"},   {".css", "text/css; charset=utf-8"},
    {".js", "text/javascript; charset=utf-8"}, {".mjs", "text/javascript; charset=utf-8"},
    {".txt", "text/plain; charset=utf-8"},    {".png", "image/png"},
    {".svg", "image/svg+xml"},                {".ico", "image/x-icon"},
};

bool console_path_ok(const char *rel, const char **type)
{
    size_t len = strlen(rel);
    if (len == 0 || len > CONSOLE_PATH_MAX)
        return false;
    bool seg_start = true;
    for (const char *p = rel; *p; p++) {
        char c = *p;
        if (c == '/') {
            if (seg_start) /* empty segment: "a//b" or a leading '/' */
                return false;
            seg_start = true;
            continue;
        }
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '.' || c == '_' || c == '-';
        /* A dot opening a segment would allow "..", "." and hidden files. */
        if (!ok || (seg_start && c == '.'))
            return false;
        seg_start = false;
    }
    if (seg_start) /* trailing '/' */
        return false;
    for (size_t i = 0; i < sizeof types / sizeof *types; i++) {
        size_t el = strlen(types[i].ext);
        if (len > el && strcmp(rel + len - el, types[i].ext) == 0) {
            *type = types[i].type;
            return true;
        }
    }
    return false;
}

static void add_security_headers(struct http_req *req)
{
    http_reply_add_header(req, "Content-Security-Policy", CONSOLE_CSP);
    http_reply_add_header(req, "X-Content-Type-Options", "nosniff");
    http_reply_add_header(req, "X-Frame-Options", "DENY");
    http_reply_add_header(req, "Referrer-Policy", "no-referrer");
    /* No validators: a browser asks again each time, so an upgrade shows at once. */
    http_reply_add_header(req, "Cache-Control", "no-cache");
}

/* Reads the whole regular file dir/rel (at most CONSOLE_FILE_MAX bytes). Returns the
 * bytes (caller frees) or NULL with errno set. rel is resolved beneath dir and through
 * no symlink at all (openat2 RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS, as volumes do): a
 * link planted in the directory, to a file or to a directory, is never followed, on top
 * of the shape console_path_ok already enforces. The read is blocking, on the event
 * loop: the files are small and local. */
static char *read_asset(const char *dir, const char *rel, size_t *len)
{
    int dfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return NULL;
    struct open_how how = {.flags = O_RDONLY | O_NOFOLLOW | O_CLOEXEC,
                           .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS};
    int fd = (int)syscall(SYS_openat2, dfd, rel, &how, sizeof how);
    close(dfd);
    if (fd < 0)
        return NULL;
    char *buf = readall_fd(fd, CONSOLE_FILE_MAX, len);
    if (!buf && (errno == EINVAL || errno == EFBIG))
        errno = ENOENT; /* not a servable file: answered as missing */
    close(fd);
    return buf;
}

static void serve(struct spaced *sp, struct http_req *req, const char *rel)
{
    add_security_headers(req);
    const char *dir = sp->opt.console_dir;
    struct stat st;
    if (!dir || stat(dir, &st) < 0 || !S_ISDIR(st.st_mode)) {
        routes_reply_error(sp, req, 404, "console_missing",
                           "the web console is not installed here: build it with `make console`");
        return;
    }
    const char *type = NULL;
    if (!console_path_ok(rel, &type)) {
        routes_reply_error(sp, req, 404, "not_found", "no such console file");
        return;
    }
    size_t len = 0;
    char *data = read_asset(dir, rel, &len);
    if (!data) {
        routes_reply_error(sp, req, 404, "not_found", "no such console file");
        return;
    }
    http_reply(req, 200, type, data, len);
    free(data);
}

static void h_index(struct http_req *req, void *arg) { serve(arg, req, "index.html"); }

static void h_file(struct http_req *req, void *arg)
{
    const char *rel = router_param(req, "path");
    serve(arg, req, rel ? rel : "");
}

/* "/console/" has an empty last segment, which no route pattern matches: a hook serves
 * it like "/console" (people type either). */
static bool hook_slash(struct http_req *req, void *arg)
{
    const char *m = http_req_method(req);
    if (strcmp(http_req_path(req), "/console/") != 0 || (strcmp(m, "GET") && strcmp(m, "HEAD")))
        return false;
    serve(arg, req, "index.html");
    return true;
}

void console_register(struct router *r, struct spaced *sp)
{
    router_add_hook(r, hook_slash, sp);
    router_add(r, "GET", "/console", h_index, sp);
    router_add(r, "GET", "/console/{path...}", h_file, sp);
}
