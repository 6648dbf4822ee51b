/* spaced.c: small helpers every control-plane module uses (errors, time, ids). */
#include "spaced.h"

#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

int spaced_err_set(struct spaced_err *err, int status, const char *code, const char *fmt, ...)
{
    if (!err)
        return -1;
    err->status = status;
    snprintf(err->code, sizeof err->code, "%s", code);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    return -1;
}

int spaced_err_store(struct spaced_err *err, struct store *st, const char *what)
{
    return spaced_err_set(err, 503, "store_unavailable", "%s: the store failed: %s", what,
                          store_errmsg(st));
}

int64_t spaced_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

bool spaced_retry_due(const struct spaced_retry *r) { return spaced_now_ms() >= r->next_ms; }

void spaced_retry_failed(struct spaced_retry *r)
{
    r->wait_ms = r->wait_ms ? r->wait_ms * 2 : SPACED_RETRY_MIN_MS;
    if (r->wait_ms > SPACED_RETRY_MAX_MS)
        r->wait_ms = SPACED_RETRY_MAX_MS;
    r->next_ms = spaced_now_ms() + r->wait_ms;
}

void spaced_retry_ok(struct spaced_retry *r) { r->next_ms = r->wait_ms = 0; }

void spaced_retry_mark(struct spaced_retry *r, bool *unsaved, bool now_unsaved)
{
    if (now_unsaved && !*unsaved)
        r->first++;
    else if (!now_unsaved && *unsaved && r->first > 0)
        r->first--;
    *unsaved = now_unsaved;
}

bool spaced_retry_ops_due(const struct spaced_retry *r) { return r->first == 0 && spaced_retry_due(r); }

int spaced_random_id(char *out, const char *prefix, unsigned nhex)
{
    unsigned char raw[64];
    unsigned nbytes = (nhex + 1) / 2;
    if (nbytes > sizeof raw || RAND_bytes(raw, (int)nbytes) != 1)
        return -1;
    size_t p = strlen(prefix);
    memcpy(out, prefix, p);
    static const char hex[] = "0123456789abcdef";
    for (unsigned i = 0; i < nhex; i++)
        out[p + i] = hex[(raw[i / 2] >> ((i & 1) ? 0 : 4)) & 0xf];
    out[p + nhex] = '\0';
    return 0;
}

const char *spaced_fmt_time(int64_t ms, char out[32])
{
    time_t secs = (time_t)(ms / 1000);
    struct tm tm;
    gmtime_r(&secs, &tm);
    size_t n = strftime(out, 32, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out + n, 32 - n, ".%03dZ", (int)(ms % 1000));
    return out;
}

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)ftw;
    if ((flag == FTW_DP ? rmdir(path) : unlink(path)) != 0 && errno != ENOENT)
        log_warn("cleanup", "path=%s errno=%d", path, errno);
    return 0;
}

void spaced_rm_rf(const char *path)
{
    if (access(path, F_OK) == 0)
        nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
}

int spaced_mkdir_p(const char *path)
{
    char tmp[PATH_MAX];
    if (snprintf(tmp, sizeof tmp, "%s", path) >= (int)sizeof tmp) {
        errno = ENAMETOOLONG;
        return -1;
    }
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            if (mkdir(tmp, 0700) != 0 && errno != EEXIST)
                return -1;
            *p = '/';
        }
    return mkdir(tmp, 0700) != 0 && errno != EEXIST ? -1 : 0;
}
