/* test_gwhttp: request-head parsing and body framing for the gateway's HTTP checks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <cmocka.h>

#include "gateway/gwhttp.h"

static enum gwhttp_result parse(const char *s, struct gwhttp_req *r)
{
    return gwhttp_parse_head(s, strlen(s), r);
}

static void test_good_heads(void **state)
{
    struct gwhttp_req r;
    const char *h = "GET /x?y=1 HTTP/1.1\r\nHost: Allowed.Test:80\r\nX-A: b\r\n\r\nBODY";
    assert_int_equal(parse(h, &r), GWHTTP_OK);
    assert_string_equal(r.host, "allowed.test");
    assert_int_equal(r.port, 80);
    assert_int_equal(r.head_len, strlen(h) - 4);
    assert_int_equal(r.nheaders, 2);
    assert_true(gwhttp_header_is(h, &r.headers[1], "x-a"));
    assert_int_equal(parse("POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 12\r\n\r\n", &r), GWHTTP_OK);
    assert_int_equal(r.content_length, 12);
    assert_int_equal(parse("POST / HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: Chunked\r\n\r\n", &r), GWHTTP_OK);
    assert_true(r.chunked);
    assert_int_equal(parse("GET http://a.test/p HTTP/1.1\r\nHost: a.test\r\n\r\n", &r), GWHTTP_OK);
    assert_int_equal(parse("OPTIONS * HTTP/1.1\r\nHost: a.test\r\n\r\n", &r), GWHTTP_OK);
    assert_int_equal(parse("GET / HTTP/1.1\r\nHost: a.test\r\nUpgrade: websocket\r\n\r\n", &r), GWHTTP_OK);
    assert_true(r.websocket);
}

static void test_incomplete_and_too_large(void **state)
{
    struct gwhttp_req r;
    assert_int_equal(parse("GET / HTTP/1.1\r\nHost: a.test\r\n", &r), GWHTTP_NEED_MORE);
    assert_int_equal(parse("", &r), GWHTTP_NEED_MORE);
    static char big[GWHTTP_HEAD_MAX + 10];
    memset(big, 'a', sizeof big - 1);
    assert_int_equal(parse(big, &r), GWHTTP_TOO_LARGE);
}

static void test_forbidden(void **state)
{
    struct gwhttp_req r;
    const char *cases[] = {
        "CONNECT a.test:443 HTTP/1.1\r\nHost: a.test:443\r\n\r\n",
        "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a.test\r\nUpgrade: h2c\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a.test\r\nUpgrade: foo, h2c\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a.test\r\nHTTP2-Settings: AAA\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a.test\r\nUpgrade: tls/1.2\r\n\r\n",
        "GET http://b.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n",
        "GET http://a.test:8080/ HTTP/1.1\r\nHost: a.test\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        assert_int_equal(parse(cases[i], &r), GWHTTP_FORBIDDEN);
}

static void test_bad(void **state)
{
    struct gwhttp_req r;
    const char *cases[] = {
        "GET / HTTP/1.1\r\n\r\n",                                             /* no Host */
        "GET / HTTP/1.0\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a.test\r\nHost: b.test\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a.test:0\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a.test:99999\r\n\r\n",
        "GET / HTTP/1.1\r\nHost : a.test\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a.test\r\n folded\r\n\r\n",
        "GET / HTTP/1.1\nHost: a.test\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a.test\r\nContent-Length: -1\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: gzip\r\n\r\n",
        "GET / HTTP/2\r\nHost: a.test\r\n\r\n",
        "GET  / HTTP/1.1\r\nHost: a.test\r\n\r\n",
        "G(T / HTTP/1.1\r\nHost: a.test\r\n\r\n",
        "GET https://a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n",
        "GET http://u@a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n",
        "GET a.test HTTP/1.1\r\nHost: a.test\r\n\r\n",
        "GET /\x7f HTTP/1.1\r\nHost: a.test\r\n\r\n",
        /* the shared parser's rules (the gateway's own parser took these) */
        "GET / HTTP/1.1\r\nHost: a.test\r\nX: a\x01b\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a.test\r\nX: a\x7f\r\n\r\n",
        "POST / HTTP/1.0\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 1000000000000000\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        enum gwhttp_result res = parse(cases[i], &r);
        assert_int_equal(res, GWHTTP_BAD);
        assert_non_null(r.why);
    }
}

static enum gwhttp_body_result feed_all(struct gwhttp_body *b, const char *s, size_t *used)
{
    return gwhttp_body_feed(b, (const uint8_t *)s, strlen(s), used);
}

static void test_body_framing(void **state)
{
    struct gwhttp_req r = {.content_length = 5};
    struct gwhttp_body b;
    size_t used;
    gwhttp_body_init(&b, &r);
    assert_int_equal(feed_all(&b, "hel", &used), GWHTTP_BODY_MORE);
    assert_int_equal(used, 3);
    assert_int_equal(feed_all(&b, "loGET", &used), GWHTTP_BODY_DONE);
    assert_int_equal(used, 2);
    r.content_length = -1;
    r.chunked = true;
    gwhttp_body_init(&b, &r);
    const char *chunked = "5;ext=1\r\nhello\r\nA\r\n0123456789\r\n0\r\nX-T: 1\r\n\r\nNEXT";
    assert_int_equal(feed_all(&b, chunked, &used), GWHTTP_BODY_DONE);
    assert_int_equal(used, strlen(chunked) - 4);
    /* byte by byte gives the same answer */
    gwhttp_body_init(&b, &r);
    size_t total = 0;
    enum gwhttp_body_result res = GWHTTP_BODY_MORE;
    for (size_t i = 0; i < strlen(chunked) && res == GWHTTP_BODY_MORE; i++) {
        res = gwhttp_body_feed(&b, (const uint8_t *)chunked + i, 1, &used);
        total += used;
    }
    assert_int_equal(res, GWHTTP_BODY_DONE);
    assert_int_equal(total, strlen(chunked) - 4);
    /* the shared decoder's rules: also more than 16 size digits, DEL in an extension or
     * a trailer (the gateway's own decoder took these) */
    const char *bad[] = {"x\r\n", "5\r\nhelloXX", "\r\n", "5\n", "ffffffffffffffffff\r\n",
                         "0\r\nX\n", "00000000000000005\r\nhello\r\n0\r\n\r\n",
                         "5;a\x7f\r\nhello\r\n0\r\n\r\n", "0\r\nX: \x7f\r\n\r\n"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        gwhttp_body_init(&b, &r);
        assert_int_equal(feed_all(&b, bad[i], &used), GWHTTP_BODY_BAD);
    }
    struct gwhttp_req none = {.content_length = -1};
    gwhttp_body_init(&b, &none);
    assert_int_equal(gwhttp_body_feed(&b, NULL, 0, &used), GWHTTP_BODY_DONE);
}

/* gwhttp_body_next decodes: the data runs are the body's content, whatever the split;
 * extensions, trailers and framing never appear in them. */
static void test_body_decode(void **state)
{
    struct gwhttp_req r = {.content_length = -1, .chunked = true};
    const char *chunked = "5;ext=\"GET / HTTP/1.1\"\r\nhello\r\nA\r\n0123456789\r\n0;x\r\n"
                          "X-T: 1\r\n\r\nNEXT";
    size_t n = strlen(chunked);
    for (size_t step = 1; step <= n; step++) {
        struct gwhttp_body b;
        gwhttp_body_init(&b, &r);
        char out[64];
        size_t outlen = 0, off = 0;
        enum gwhttp_body_result res = GWHTTP_BODY_MORE;
        while (res == GWHTTP_BODY_MORE && off < n) {
            size_t k = n - off < step ? n - off : step, used, data;
            res = gwhttp_body_next(&b, (const uint8_t *)chunked + off, k, &used, &data);
            assert_true(data <= used && used <= k);
            assert_true(outlen + data < sizeof out);
            memcpy(out + outlen, chunked + off + used - data, data);
            outlen += data;
            off += used;
        }
        assert_int_equal(res, GWHTTP_BODY_DONE);
        assert_int_equal(off, n - 4);
        assert_int_equal(outlen, 15);
        assert_memory_equal(out, "hello0123456789", 15);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good_heads), cmocka_unit_test(test_incomplete_and_too_large),
        cmocka_unit_test(test_forbidden), cmocka_unit_test(test_bad),
        cmocka_unit_test(test_body_framing), cmocka_unit_test(test_body_decode),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
