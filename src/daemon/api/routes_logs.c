/* routes_logs.c: a sandbox's console log.
 *
 *   GET /v1/sandboxes/{id}/logs[?tail=BYTES]   text/plain: the guest's serial console
 *
 * The VM module keeps the console in run_dir/console.log (and the previous half in
 * console.log.1), bounded to 1 MiB in all (vm_console.c). This route returns the newest
 * `tail` bytes of the two, oldest first: at most LOGS_MAX, whatever the files hold, so
 * an answer is bounded even if the files were not. The bytes are the guest's own, raw:
 * clients that show them on a terminal must neutralise control sequences (the `space`
 * CLI does). The tenant's API key is required; another tenant's sandbox is a 404 like a
 * missing one. A sandbox that never ran has an empty log. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/api/routes.h"
#include "daemon/auth/auth.h"
#include "daemon/sandbox/sbx.h"

#define LOGS_MAX (1024 * 1024)

/* Opens run_dir/name; *size gets its size (0 and fd -1 when missing). */
static int open_log(const char *run_dir, const char *name, off_t *size)
{
    char p[4096];
    struct stat st;
    *size = 0;
    if (snprintf(p, sizeof p, "%s/%s", run_dir, name) >= (int)sizeof p)
        return -1;
    int fd = open(p, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd >= 0 && (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))) {
        close(fd);
        return -1;
    }
    if (fd >= 0)
        *size = st.st_size;
    return fd;
}

/* Appends up to want bytes of fd from off to buf (a file that shrank gives fewer). */
static size_t read_at(int fd, off_t off, char *buf, size_t want)
{
    size_t got = 0;
    while (fd >= 0 && got < want) {
        ssize_t n = pread(fd, buf + got, want - got, off + (off_t)got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    return got;
}

static void h_logs(struct http_req *req, void *arg)
{
    struct spaced *sp = arg;
    struct auth_principal who;
    if (!auth_require(sp, req, &who))
        return;
    const char *id = router_param(req, "id");
    struct sbx *s = sbx_id_valid(id) ? sbx_find(sp, who.tenant, id) : NULL;
    if (!s) {
        routes_reply_error(sp, req, 404, "not_found", "sandbox %.64s not found", id ? id : "");
        return;
    }
    long long tail = LOGS_MAX;
    const char *q = http_req_query(req, "tail");
    if (q) {
        char *end;
        errno = 0;
        tail = strtoll(q, &end, 10);
        if (!*q || *end || errno || tail < 1 || tail > LOGS_MAX) {
            routes_reply_error(sp, req, 400, "invalid_request",
                               "tail must be a number of bytes 1..%d", LOGS_MAX);
            return;
        }
    }
    const char *dir = sbx_record(s)->run_dir;
    off_t n_old, n_new;
    int old = open_log(dir, "console.log.1", &n_old), cur = open_log(dir, "console.log", &n_new);
    /* The newest `tail` bytes of old+new: skip the start of old, then of new. */
    off_t total = n_old + n_new, skip = total > tail ? total - tail : 0;
    size_t want = (size_t)(total - skip);
    char *buf = malloc(want ? want : 1);
    if (!buf) {
        routes_reply_error(sp, req, 500, "internal", "out of memory");
    } else {
        size_t got = 0;
        if (skip < n_old)
            got = read_at(old, skip, buf, (size_t)(n_old - skip));
        off_t from_new = skip > n_old ? skip - n_old : 0;
        got += read_at(cur, from_new, buf + got, want - got);
        http_reply(req, 200, "text/plain", buf, got);
    }
    free(buf);
    if (old >= 0)
        close(old);
    if (cur >= 0)
        close(cur);
}

void routes_logs_register(struct router *r, struct spaced *sp)
{
    router_add(r, "GET", "/v1/sandboxes/{id}/logs", h_logs, sp);
}
