/* Unit tests for e2b_multipart (streaming multipart/form-data) and e2b_gzip. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <zlib.h>

#include "daemon/e2b/e2b_gzip.h"
#include "daemon/e2b/e2b_multipart.h"

/* Records parts as "name|filename|content;" into a text log. */
struct rec {
    char log[4096];
    size_t len;
};

static void append(struct rec *r, const char *s, size_t n)
{
    if (r->len + n < sizeof r->log) {
        memcpy(r->log + r->len, s, n);
        r->len += n;
        r->log[r->len] = '\0';
    }
}

static int on_begin(void *arg, const char *name, const char *filename, struct e2b_err *err)
{
    (void)err;
    char buf[512];
    int n = snprintf(buf, sizeof buf, "%s|%s|", name ? name : "-", filename ? filename : "-");
    append(arg, buf, (size_t)n);
    return 0;
}

static int on_data(void *arg, const uint8_t *d, size_t n, struct e2b_err *err)
{
    (void)err;
    append(arg, (const char *)d, n);
    return 0;
}

static int on_end(void *arg, struct e2b_err *err)
{
    (void)err;
    append(arg, ";", 1);
    return 0;
}

static const struct e2b_mp_callbacks cbs = {on_begin, on_data, on_end};

/* Parses body in pieces of `step` bytes; returns 0/-1 and fills r. */
static int run(const char *ctype, const char *body, size_t len, size_t step, struct rec *r)
{
    struct e2b_err err = {0};
    memset(r, 0, sizeof *r);
    struct e2b_mp *mp = e2b_mp_new(ctype, &cbs, r, &err);
    if (!mp)
        return -1;
    int rc = 0;
    for (size_t off = 0; off < len && rc == 0; off += step)
        rc = e2b_mp_feed(mp, (const uint8_t *)body + off, len - off < step ? len - off : step, &err);
    if (rc == 0)
        rc = e2b_mp_finish(mp, &err);
    e2b_mp_free(mp);
    return rc;
}

static const char body1[] =
    "preamble\r\n"
    "--XyZ\r\n"
    "Content-Disposition: form-data; name=\"file\"; filename=\"/home/user/a \\\"q\\\".txt\"\r\n"
    "Content-Type: application/octet-stream\r\n"
    "\r\n"
    "content-A\r\n--Xy\r\n-XyZ\r\n"
    "--XyZ\r\n"
    "content-disposition: form-data; name=file; filename=rel/b.bin\r\n"
    "\r\n"
    "\r\n"
    "--XyZ--\r\n"
    "epilogue";

static void test_multipart_every_split(void **state)
{
    (void)state;
    const char *want = "file|/home/user/a \"q\".txt|content-A\r\n--Xy\r\n-XyZ;"
                       "file|rel/b.bin|;";
    for (size_t step = 1; step <= sizeof body1; step++) {
        struct rec r;
        assert_int_equal(run("multipart/form-data; boundary=XyZ", body1, sizeof body1 - 1, step, &r), 0);
        assert_string_equal(r.log, want);
    }
    struct rec r;
    assert_int_equal(run("multipart/form-data; boundary=\"XyZ\"", body1, sizeof body1 - 1, 7, &r), 0);
}

static void test_multipart_errors(void **state)
{
    (void)state;
    struct rec r;
    const char *ct = "multipart/form-data; boundary=B";
    assert_int_equal(run("application/json", "", 0, 1, &r), -1);
    assert_int_equal(run("multipart/form-data", "", 0, 1, &r), -1);
    assert_int_equal(run("multipart/form-data; boundary=", "", 0, 1, &r), -1);
    /* no closing boundary */
    const char *trunc = "--B\r\nContent-Disposition: form-data; name=file\r\n\r\nabc";
    assert_int_equal(run(ct, trunc, strlen(trunc), 3, &r), -1);
    /* junk after a boundary */
    const char *junk = "--Bxx\r\n\r\n--B--";
    assert_int_equal(run(ct, junk, strlen(junk), 100, &r), -1);
    /* unterminated quoted filename */
    const char *q = "--B\r\nContent-Disposition: form-data; filename=\"abc\r\n\r\nx\r\n--B--";
    assert_int_equal(run(ct, q, strlen(q), 100, &r), -1);
    /* header block over the limit */
    size_t n = E2B_MP_MAX_HEADERS + 100;
    char *big = malloc(n + 32);
    strcpy(big, "--B\r\nX-Pad: ");
    memset(big + strlen(big), 'a', n);
    big[12 + n] = '\0';
    assert_int_equal(run(ct, big, strlen(big), 1000, &r), -1);
    free(big);
    /* empty body is an error (no closing boundary) */
    assert_int_equal(run(ct, "", 0, 1, &r), -1);
    /* a part without headers is accepted, with no name */
    const char *nohdr = "--B\r\n\r\ndata\r\n--B--";
    assert_int_equal(run(ct, nohdr, strlen(nohdr), 2, &r), 0);
    assert_string_equal(r.log, "-|-|data;");
}

struct sink {
    uint8_t buf[1 << 16];
    size_t len;
};

static int sink_fn(void *arg, const uint8_t *d, size_t n, struct e2b_err *err)
{
    struct sink *s = arg;
    if (s->len + n > sizeof s->buf)
        return e2b_err_set(err, E2B_RESOURCE_EXHAUSTED, "too big");
    memcpy(s->buf + s->len, d, n);
    s->len += n;
    return 0;
}

static void test_gzip_roundtrip(void **state)
{
    (void)state;
    static struct sink packed, plain;
    uint8_t data[40000];
    for (size_t i = 0; i < sizeof data; i++)
        data[i] = (uint8_t)(i * 7 % 251);
    struct e2b_err err = {0};
    struct e2b_gzip *z = e2b_gzip_new(true, sink_fn, &packed);
    assert_int_equal(e2b_gzip_feed(z, data, sizeof data, &err), 0);
    assert_int_equal(e2b_gzip_finish(z, &err), 0);
    e2b_gzip_free(z);
    assert_int_equal(packed.buf[0], 0x1f);
    assert_int_equal(packed.buf[1], 0x8b);

    z = e2b_gzip_new(false, sink_fn, &plain);
    for (size_t off = 0; off < packed.len; off += 13)
        assert_int_equal(e2b_gzip_feed(z, packed.buf + off, packed.len - off < 13 ? packed.len - off : 13, &err), 0);
    assert_int_equal(e2b_gzip_finish(z, &err), 0);
    e2b_gzip_free(z);
    assert_int_equal(plain.len, sizeof data);
    assert_memory_equal(plain.buf, data, sizeof data);

    /* truncated, corrupt and trailing garbage */
    plain.len = 0;
    z = e2b_gzip_new(false, sink_fn, &plain);
    assert_int_equal(e2b_gzip_feed(z, packed.buf, packed.len / 2, &err), 0);
    assert_int_equal(e2b_gzip_finish(z, &err), -1);
    e2b_gzip_free(z);
    plain.len = 0;
    z = e2b_gzip_new(false, sink_fn, &plain);
    assert_int_equal(e2b_gzip_feed(z, (const uint8_t *)"not gzip at all", 15, &err), -1);
    e2b_gzip_free(z);
    plain.len = 0;
    packed.buf[packed.len] = 'x';
    z = e2b_gzip_new(false, sink_fn, &plain);
    assert_int_equal(e2b_gzip_feed(z, packed.buf, packed.len + 1, &err), -1);
    e2b_gzip_free(z);

    assert_true(e2b_accepts_gzip("gzip, deflate"));
    assert_true(e2b_accepts_gzip("br;q=1, gzip;q=0.5"));
    assert_false(e2b_accepts_gzip("gzip;q=0"));
    assert_false(e2b_accepts_gzip("deflate"));
    assert_false(e2b_accepts_gzip(NULL));
    assert_true(e2b_accepts_gzip("*"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_multipart_every_split),
        cmocka_unit_test(test_multipart_errors),
        cmocka_unit_test(test_gzip_roundtrip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
