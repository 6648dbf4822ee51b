/* spaced.c: small helpers every control-plane module uses (errors, time, ids). */
#include "spaced.h"

#include <openssl/rand.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

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

int64_t spaced_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

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
