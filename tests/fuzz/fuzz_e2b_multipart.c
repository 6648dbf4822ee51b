/* Fuzzes e2b_multipart with a fixed boundary: the first input byte picks the feed step,
 * the rest is the body. Also runs the gzip decoder over the same bytes. */
#include <stddef.h>
#include <stdint.h>

#include "daemon/e2b/e2b_gzip.h"
#include "daemon/e2b/e2b_multipart.h"

static int on_begin(void *arg, const char *name, const char *filename, struct e2b_err *err)
{
    (void)arg;
    (void)err;
    /* Touch the strings so ASan sees any overread. */
    volatile size_t n = 0;
    for (const char *p = name; p && *p; p++)
        n++;
    for (const char *p = filename; p && *p; p++)
        n++;
    return 0;
}

static int on_data(void *arg, const uint8_t *d, size_t n, struct e2b_err *err)
{
    (void)err;
    size_t *total = arg;
    for (size_t i = 0; i < n; i++)
        *total += d[i];
    return 0;
}

static int on_end(void *arg, struct e2b_err *err)
{
    (void)arg;
    (void)err;
    return 0;
}

static int sink(void *arg, const uint8_t *d, size_t n, struct e2b_err *err)
{
    size_t *total = arg;
    *total += n;
    (void)d;
    return *total > (1u << 24) ? e2b_err_set(err, E2B_RESOURCE_EXHAUSTED, "bomb") : 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    size_t step = (size_t)data[0] + 1;
    data++;
    size--;
    static const struct e2b_mp_callbacks cbs = {on_begin, on_data, on_end};
    size_t total = 0;
    struct e2b_err err = {0};
    struct e2b_mp *mp = e2b_mp_new("multipart/form-data; boundary=\"b0undary\"", &cbs, &total, &err);
    if (mp) {
        int rc = 0;
        for (size_t off = 0; off < size && rc == 0; off += step)
            rc = e2b_mp_feed(mp, data + off, size - off < step ? size - off : step, &err);
        if (rc == 0)
            e2b_mp_finish(mp, &err);
        e2b_mp_free(mp);
    }
    total = 0;
    struct e2b_gzip *z = e2b_gzip_new(false, sink, &total);
    if (z) {
        if (e2b_gzip_feed(z, data, size, &err) == 0)
            e2b_gzip_finish(z, &err);
        e2b_gzip_free(z);
    }
    return 0;
}
