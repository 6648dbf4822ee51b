/* e2b_gzip: zlib streams with a fixed output window flushed into a sink. */
#include "e2b_gzip.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <zlib.h>

#define GZ_WINDOW 16384

struct e2b_gzip {
    z_stream zs;
    bool compress;
    bool ended;        /* decoder: Z_STREAM_END seen */
    e2b_gzip_sink sink;
    void *arg;
    uint8_t out[GZ_WINDOW];
};

struct e2b_gzip *e2b_gzip_new(bool compress, e2b_gzip_sink sink, void *arg)
{
    struct e2b_gzip *z = calloc(1, sizeof *z);
    if (!z)
        return NULL;
    z->compress = compress;
    z->sink = sink;
    z->arg = arg;
    /* windowBits 15 + 16 selects the gzip wrapper. */
    int r = compress ? deflateInit2(&z->zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY)
                     : inflateInit2(&z->zs, 15 + 16);
    if (r != Z_OK) {
        free(z);
        return NULL;
    }
    return z;
}

void e2b_gzip_free(struct e2b_gzip *z)
{
    if (!z)
        return;
    if (z->compress)
        deflateEnd(&z->zs);
    else
        inflateEnd(&z->zs);
    free(z);
}

/* Runs zlib over the current input with `flush`, emitting every full window. */
static int pump(struct e2b_gzip *z, int flush, struct e2b_err *err)
{
    for (;;) {
        z->zs.next_out = z->out;
        z->zs.avail_out = GZ_WINDOW;
        int r = z->compress ? deflate(&z->zs, flush) : inflate(&z->zs, Z_NO_FLUSH);
        size_t produced = GZ_WINDOW - z->zs.avail_out;
        if (r == Z_STREAM_ERROR || r == Z_DATA_ERROR || r == Z_MEM_ERROR || r == Z_NEED_DICT)
            return e2b_err_set(err, E2B_INVALID_ARGUMENT, "gzip: %s",
                               z->zs.msg ? z->zs.msg : "corrupt data");
        if (produced && z->sink(z->arg, z->out, produced, err) < 0)
            return -1;
        if (r == Z_STREAM_END) {
            z->ended = true;
            if (!z->compress && z->zs.avail_in > 0)
                return e2b_err_set(err, E2B_INVALID_ARGUMENT, "gzip: data after the stream");
            return 0;
        }
        /* Z_BUF_ERROR only means no progress was possible: wait for more input. */
        if (z->zs.avail_out != 0 && (z->zs.avail_in == 0 || r == Z_BUF_ERROR))
            return 0;
    }
}

int e2b_gzip_feed(struct e2b_gzip *z, const uint8_t *data, size_t len, struct e2b_err *err)
{
    if (len == 0)
        return 0;
    if (z->ended)
        return e2b_err_set(err, E2B_INVALID_ARGUMENT, "gzip: data after the stream");
    while (len > 0) {
        uInt n = len > (1u << 30) ? (1u << 30) : (uInt)len;
        z->zs.next_in = (Bytef *)(uintptr_t)data;
        z->zs.avail_in = n;
        if (pump(z, Z_NO_FLUSH, err) < 0)
            return -1;
        size_t used = n - z->zs.avail_in;
        if (z->ended && !z->compress && used < n)
            return e2b_err_set(err, E2B_INVALID_ARGUMENT, "gzip: data after the stream");
        data += n;
        len -= n;
    }
    return 0;
}

int e2b_gzip_finish(struct e2b_gzip *z, struct e2b_err *err)
{
    if (!z->compress)
        return z->ended ? 0 : e2b_err_set(err, E2B_INVALID_ARGUMENT, "gzip: truncated stream");
    z->zs.next_in = NULL;
    z->zs.avail_in = 0;
    return pump(z, Z_FINISH, err);
}

bool e2b_accepts_gzip(const char *ae)
{
    for (const char *p = ae; p && *p;) {
        while (*p == ' ' || *p == ',')
            p++;
        const char *tok = p;
        while (*p && *p != ',' && *p != ';' && *p != ' ')
            p++;
        size_t n = (size_t)(p - tok);
        const char *q = NULL;
        while (*p && *p != ',') {
            if (*p == ';') {
                const char *s = p + 1;
                while (*s == ' ')
                    s++;
                if (strncasecmp(s, "q=", 2) == 0)
                    q = s + 2;
            }
            p++;
        }
        if ((n == 4 && strncasecmp(tok, "gzip", 4) == 0) || (n == 1 && tok[0] == '*'))
            return !q || strtod(q, NULL) > 0;
    }
    return false;
}
