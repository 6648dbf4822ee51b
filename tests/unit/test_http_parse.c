/* Unit tests for the pure HTTP parsers (http_parse.h) and SSE framing (sse_format):
 * valid heads, every smuggling-relevant rejection, chunked decoding under every split. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "http_parse.h"
#include "daemon/http/sse.h"

static const struct http_parse_limits lim = {
    .max_header_bytes = 16384, .max_target_bytes = 8192, .max_headers = 100};

/* Runs find_end + parse over a whole head; returns the status (200 for success). */
static int parse_status(const char *text, struct http_head *out)
{
    size_t scan = 0, head_len = 0;
    struct http_parse_error err = {0};
    struct http_head h;
    enum http_parse_result r = http_head_find_end(text, strlen(text), &lim, &scan, &head_len, &err);
    if (r == HTTP_PARSE_INCOMPLETE)
        return 0;
    if (r == HTTP_PARSE_OK)
        r = http_head_parse(text, head_len, &lim, &h, &err);
    if (r != HTTP_PARSE_OK) {
        assert_non_null(err.code);
        assert_non_null(err.message);
        return err.status;
    }
    if (out)
        *out = h;
    else
        http_head_free(&h);
    return 200;
}

static void test_parse_valid(void **state)
{
    (void)state;
    struct http_head h;
    assert_int_equal(parse_status("POST /a/b?x=1 HTTP/1.1\r\nHost: h\r\nX-A:  v 1 \t\r\n"
                                  "content-length: 12\r\nX-A: two\r\n\r\n",
                                  &h),
                     200);
    assert_string_equal(h.method, "POST");
    assert_string_equal(h.target, "/a/b?x=1");
    assert_int_equal(h.version_minor, 1);
    assert_int_equal(h.nfields, 4);
    assert_string_equal(h.fields[1].name, "X-A");
    assert_string_equal(h.fields[1].value, "v 1");
    assert_int_equal(h.content_length, 12);
    assert_false(h.chunked);
    assert_true(h.keep_alive);
    http_head_free(&h);

    assert_int_equal(parse_status("GET / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: Chunked\r\n"
                                  "Connection: foo, close\r\nExpect: 100-continue\r\n\r\n",
                                  &h),
                     200);
    assert_true(h.chunked);
    assert_int_equal(h.content_length, -1);
    assert_false(h.keep_alive);
    assert_true(h.expect_continue);
    http_head_free(&h);

    assert_int_equal(parse_status("GET / HTTP/1.0\r\n\r\n", &h), 200);
    assert_false(h.keep_alive);
    http_head_free(&h);
    assert_int_equal(parse_status("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", &h), 200);
    assert_true(h.keep_alive);
    http_head_free(&h);
    assert_int_equal(parse_status("GET / HTTP/1.1\r\nHost: h\r\n", NULL), 0);
}

static void test_parse_rejects(void **state)
{
    (void)state;
    static const struct {
        const char *head;
        int status;
    } cases[] = {
        /* smuggling: framing ambiguity */
        {"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
        {"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n", 400},
        {"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5, 5\r\n\r\n", 400},
        {"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: -1\r\n\r\n", 400},
        {"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: +5\r\n\r\n", 400},
        {"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 0x10\r\n\r\n", 400},
        {"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 99999999999999999999\r\n\r\n", 400},
        {"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: \r\n\r\n", 400},
        {"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501},
        {"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
        {"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: xchunked\r\n\r\n", 501},
        {"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
        {"POST / HTTP/1.1\r\nHost: h\r\nContent-Length : 5\r\n\r\n", 400},
        {"POST / HTTP/1.1\r\nHost: h\r\n Content-Length: 5\r\n\r\n", 400},
        {"POST / HTTP/1.1\r\nHost: h\r\nX: a\r\n b\r\n\r\n", 400},
        {"GET / HTTP/1.1\nHost: h\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nHost: h\rX: y\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nHost: h\r\nX: a\x01" "b\r\n\r\n", 400},
        /* request line */
        {"GET  / HTTP/1.1\r\nHost: h\r\n\r\n", 400},
        {"GET / HTTP/1.1 \r\nHost: h\r\n\r\n", 400},
        {"G@T / HTTP/1.1\r\nHost: h\r\n\r\n", 400},
        {"GET / HTTP/2.0\r\nHost: h\r\n\r\n", 505},
        {"GET / HTTP/1.2\r\nHost: h\r\n\r\n", 505},
        {"GET / HTTP/1.1x\r\nHost: h\r\n\r\n", 400},
        {"GET / http/1.1\r\nHost: h\r\n\r\n", 400},
        {"GET /\x7f HTTP/1.1\r\nHost: h\r\n\r\n", 400},
        {"GET\r\n\r\n", 400},
        /* Host */
        {"GET / HTTP/1.1\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nHost: a\r\nExpect: something\r\n\r\n", 417},
        {"GET / HTTP/1.1\r\nHost: a\r\nBad Name: x\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nHost: a\r\n: x\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nHost: a\r\nnocolon\r\n\r\n", 400},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int got = parse_status(cases[i].head, NULL);
        if (got != cases[i].status)
            fail_msg("case %zu: want %d got %d", i, cases[i].status, got);
    }
    /* A NUL inside the head (strlen-based helper cannot express it). */
    static const char nul[] = "GET / HTTP/1.1\r\nHost: a\0b\r\n\r\n";
    struct http_head h;
    struct http_parse_error err;
    assert_int_equal(http_head_parse(nul, sizeof nul - 1, &lim, &h, &err), HTTP_PARSE_ERROR);
    assert_int_equal(err.status, 400);
}

static void test_parse_limits(void **state)
{
    (void)state;
    size_t big = 20000;
    char *s = malloc(big + 64);
    /* Head too large: 431 as soon as max_header_bytes arrive without an end. */
    int n = sprintf(s, "GET / HTTP/1.1\r\nHost: h\r\nX: ");
    memset(s + n, 'a', big - (size_t)n);
    s[big] = '\0';
    assert_int_equal(parse_status(s, NULL), 431);
    /* Target too long: 414 even before the head ends. */
    n = sprintf(s, "GET /");
    memset(s + n, 'a', 9000);
    s[n + 9000] = '\0';
    assert_int_equal(parse_status(s, NULL), 414);
    strcpy(s + n + 9000, " HTTP/1.1\r\nHost: h\r\n\r\n");
    assert_int_equal(parse_status(s, NULL), 414);
    /* Too many fields. */
    n = sprintf(s, "GET / HTTP/1.1\r\nHost: h\r\n");
    for (int i = 0; i < 100; i++)
        n += sprintf(s + n, "X%d: y\r\n", i);
    strcpy(s + n, "\r\n");
    assert_int_equal(parse_status(s, NULL), 431);
    free(s);

    /* Incremental search: trickled bytes find the same end. */
    const char *head = "GET / HTTP/1.1\r\nHost: h\r\n\r\nNEXT";
    size_t scan = 0, hl = 0;
    struct http_parse_error err;
    enum http_parse_result r = HTTP_PARSE_INCOMPLETE;
    size_t len;
    for (len = 1; len <= strlen(head) && r == HTTP_PARSE_INCOMPLETE; len++)
        r = http_head_find_end(head, len, &lim, &scan, &hl, &err);
    assert_int_equal(r, HTTP_PARSE_OK);
    assert_int_equal(hl, strlen(head) - 4);
}

static void test_pct_decode(void **state)
{
    (void)state;
    char *s = http_pct_decode("/a%20b%2Fc+d", 12, false);
    assert_string_equal(s, "/a b/c+d");
    free(s);
    s = http_pct_decode("a+b%2b", 6, true);
    assert_string_equal(s, "a b+");
    free(s);
    assert_null(http_pct_decode("%00", 3, false));
    assert_null(http_pct_decode("%0", 2, false));
    assert_null(http_pct_decode("%", 1, false));
    assert_null(http_pct_decode("%zz", 3, false));
    assert_null(http_pct_decode("a\0b", 3, false));
}

/* Decodes `in` fed in pieces of `step` bytes; returns the status (200 ok) and the
 * payload in out[]; *rest is the number of bytes left after the body. */
static int chunked_run(const char *in, size_t len, size_t step, char *out, size_t *outlen,
                       size_t *rest)
{
    struct http_chunked d;
    http_chunked_init(&d);
    size_t pos = 0, end = 0;
    *outlen = 0;
    for (;;) {
        end = end + step < len ? end + step : len;
        size_t consumed, off, dl;
        struct http_parse_error err;
        enum http_parse_result r =
            http_chunked_decode(&d, in + pos, end - pos, &consumed, &off, &dl, &err);
        assert_true(consumed <= end - pos);
        assert_true(off + dl <= consumed);
        memcpy(out + *outlen, in + pos + off, dl);
        *outlen += dl;
        pos += consumed;
        if (r == HTTP_PARSE_ERROR)
            return err.status;
        if (r == HTTP_PARSE_OK) {
            *rest = len - pos;
            return 200;
        }
        if (consumed == 0 && end == len)
            return 0; /* needs more input than exists */
    }
}

static void test_chunked(void **state)
{
    (void)state;
    const char *ok = "4\r\nWiki\r\n5;ext=1;q=\"x\"\r\npedia\r\nE\r\n in\r\n\r\nchunks.\r\n"
                     "0\r\nTrailer: v\r\n\r\nGET";
    char out[128];
    size_t outlen, rest;
    for (size_t step = 1; step <= strlen(ok); step++) {
        assert_int_equal(chunked_run(ok, strlen(ok), step, out, &outlen, &rest), 200);
        assert_int_equal(outlen, 23);
        assert_memory_equal(out, "Wikipedia in\r\n\r\nchunks.", 23);
        assert_int_equal(rest, 3);
    }
    static const struct {
        const char *in;
        int status;
    } bad[] = {
        {"zz\r\n", 400},
        {"0x10\r\n", 400},
        {" 5\r\nhello\r\n0\r\n\r\n", 400},
        {"-5\r\n", 400},
        {"5\r\nhelloX\r\n", 400},
        {"5\r\nhello\n0\r\n\r\n", 400},
        {"5\nhello\r\n", 400},
        {"5 \r\nhello\r\n", 400},
        {"fffffffffffffffffff\r\n", 413},
        {"4000000000000001\r\n", 413},
        {"\r\n", 400},
        {"0\r\nX: y\ny\r\n\r\n", 400},
        {"1;a\nb\r\nx\r\n", 400},
        {"0\r\nX: a\x01b\r\n\r\n", 400},  /* control byte in a trailer */
        {"0\r\nX: a\x7f\r\n\r\n", 400},
        {"1;a\x7f\r\nx\r\n0\r\n\r\n", 400},
        {"00000000000000001\r\nx\r\n", 413},  /* 17 digits */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int got = chunked_run(bad[i].in, strlen(bad[i].in), 1, out, &outlen, &rest);
        if (got != bad[i].status)
            fail_msg("bad chunk case %zu: want %d got %d", i, bad[i].status, got);
    }
    /* An incomplete body is not an error, just incomplete. */
    assert_int_equal(chunked_run("5\r\nhel", 7, 3, out, &outlen, &rest), 0);
    /* Trailers are bounded. */
    char *huge = malloc(20000);
    strcpy(huge, "0\r\n");
    for (int i = 0; i < 1000; i++)
        strcat(huge, "X-Trailer: 1234\r\n");
    strcat(huge, "\r\n");
    assert_int_equal(chunked_run(huge, strlen(huge), 4096, out, &outlen, &rest), 431);
    free(huge);
}

/* Response heads: status line, framing, the same field rules as requests. */
static void test_resp_parse(void **state)
{
    (void)state;
    struct http_head h;
    struct http_parse_error err;
    const char *ok = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A:  v \r\n\r\n";
    assert_int_equal(http_resp_parse(ok, strlen(ok), &lim, &h, &err), HTTP_PARSE_OK);
    assert_int_equal(h.status, 200);
    assert_string_equal(h.reason, "OK");
    assert_int_equal(h.content_length, 5);
    assert_false(h.chunked || h.until_close);
    assert_string_equal(http_head_field(&h, "x-a"), "v");
    assert_null(http_head_field(&h, "Host"));
    assert_null(h.method);
    http_head_free(&h);
    const char *chunked = "HTTP/1.1 404\r\nTransfer-Encoding: chunked\r\n\r\n";
    assert_int_equal(http_resp_parse(chunked, strlen(chunked), &lim, &h, &err), HTTP_PARSE_OK);
    assert_int_equal(h.status, 404);
    assert_string_equal(h.reason, "");
    assert_true(h.chunked);
    assert_int_equal(h.content_length, -1);
    http_head_free(&h);
    const char *eof = "HTTP/1.0 101 Switching Protocols\r\n\r\n";
    assert_int_equal(http_resp_parse(eof, strlen(eof), &lim, &h, &err), HTTP_PARSE_OK);
    assert_true(h.until_close);
    assert_int_equal(h.version_minor, 0);
    http_head_free(&h);
    static const char *const bad[] = {
        "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
        "HTTP/1.1 200 OK\r\n folded\r\n\r\n",
        "HTTP/1.1 200 OK\nX: y\r\n\r\n",
        "HTTP/1.1 2000 OK\r\n\r\n",
        "HTTP/1.1 20 OK\r\n\r\n",
        "HTTP/1.1 099 OK\r\n\r\n",
        "HTTP/1.1 600 OK\r\n\r\n",
        "HTTP/2.0 200 OK\r\n\r\n",
        "HTTP/1.1  200 OK\r\n\r\n",
        "HTTP/1.1 200 O\x01K\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a\r\n\r\n",
        "HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        if (http_resp_parse(bad[i], strlen(bad[i]), &lim, &h, &err) != HTTP_PARSE_ERROR ||
            err.status != (i == 2 ? 501 : 400))
            fail_msg("bad response %zu accepted", i);
}

static void test_sse_format(void **state)
{
    (void)state;
    char *s;
    long n = sse_format(7, "stdout", "a\nb\r\nc\rd\n", 9, &s);
    const char *want = "id: 7\nevent: stdout\ndata: a\ndata: b\ndata: c\ndata: d\ndata: \n\n";
    assert_int_equal(n, (long)strlen(want));
    assert_memory_equal(s, want, (size_t)n);
    free(s);
    n = sse_format(-1, NULL, "", 0, &s);
    assert_int_equal(n, 8);
    assert_memory_equal(s, "data: \n\n", 8);
    free(s);
    assert_int_equal(sse_format(1, "bad\nevent", "x", 1, &s), -1);
    assert_int_equal(sse_format(1, "e", "x\0y", 3, &s), -1);
    /* Worst case growth: every byte a line break. */
    n = sse_format(123456789012LL, "e", "\n\n\n\n", 4, &s);
    assert_int_equal(n, (long)strlen("id: 123456789012\nevent: e\n") + 5 * 7 + 1);
    free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_valid),  cmocka_unit_test(test_parse_rejects),
        cmocka_unit_test(test_parse_limits), cmocka_unit_test(test_pct_decode),
        cmocka_unit_test(test_chunked),      cmocka_unit_test(test_sse_format),
        cmocka_unit_test(test_resp_parse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
