/* test_frame: the agent protocol's wire format (frame.h) and base64 (b64.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "b64.h"
#include "frame.h"

/* Encodes one frame into buf; returns its size. */
static size_t put(uint8_t *buf, uint32_t ch, unsigned type, unsigned stream, const void *p,
                  uint32_t n)
{
    frame_encode_header(buf, ch, (enum frame_type)type, (enum frame_stream)stream, n);
    if (n)
        memcpy(buf + FRAME_HEADER_SIZE, p, n);
    return FRAME_HEADER_SIZE + n;
}

static void test_roundtrip(void **state)
{
    uint8_t buf[128];
    size_t n = put(buf, 7, FRAME_DATA, FRAME_STREAM_OUT, "hello", 5);
    assert_int_equal(n, 17);
    /* little-endian header layout */
    assert_int_equal(buf[0], 5);
    assert_int_equal(buf[4], 7);
    assert_int_equal(buf[8], FRAME_DATA);
    assert_int_equal(buf[9], FRAME_STREAM_OUT);
    struct frame f;
    size_t used;
    const char *why;
    assert_int_equal(frame_parse(buf, n, &f, &used, &why), FRAME_PARSE_OK);
    assert_int_equal(used, n);
    assert_int_equal(f.len, 5);
    assert_int_equal(f.channel, 7);
    assert_memory_equal(f.payload, "hello", 5);
    assert_int_equal(frame_check(&f, FRAME_FROM_AGENT, &why), 0);
    assert_int_equal(frame_check(&f, FRAME_FROM_HOST, &why), -1); /* host sends only IN */
}

static void test_need_more(void **state)
{
    uint8_t buf[64];
    size_t n = put(buf, 1, FRAME_DATA, FRAME_STREAM_IN, "abcdef", 6);
    struct frame f;
    size_t used;
    const char *why;
    for (size_t k = 0; k < n; k++)
        assert_int_equal(frame_parse(buf, k, &f, &used, &why), FRAME_PARSE_MORE);
    assert_int_equal(frame_parse(buf, n, &f, &used, &why), FRAME_PARSE_OK);
}

static void test_bad_headers(void **state)
{
    uint8_t buf[16] = {0};
    struct frame f;
    size_t used;
    const char *why;
    frame_encode_header(buf, 1, FRAME_DATA, FRAME_STREAM_IN, FRAME_MAX_PAYLOAD + 1);
    assert_int_equal(frame_parse(buf, sizeof buf, &f, &used, &why), FRAME_PARSE_ERROR);
    assert_non_null(why);
    frame_encode_header(buf, 1, FRAME_DATA, FRAME_STREAM_IN, 1);
    buf[11] = 1;
    assert_int_equal(frame_parse(buf, sizeof buf, &f, &used, &why), FRAME_PARSE_ERROR);
    /* the maximum is accepted (as "need more" until complete) */
    frame_encode_header(buf, 1, FRAME_DATA, FRAME_STREAM_IN, FRAME_MAX_PAYLOAD);
    assert_int_equal(frame_parse(buf, sizeof buf, &f, &used, &why), FRAME_PARSE_MORE);
}

/* frame_check against the table in docs/agent-protocol.md. */
static int check(enum frame_dir dir, uint32_t ch, unsigned type, unsigned stream, const char *p,
                 uint32_t n)
{
    struct frame f = {.len = n, .channel = ch, .type = (uint8_t)type, .stream = (uint8_t)stream,
                      .payload = (const uint8_t *)p};
    const char *why;
    return frame_check(&f, dir, &why);
}

static void test_check_rules(void **state)
{
    const enum frame_dir H = FRAME_FROM_HOST, A = FRAME_FROM_AGENT;
    static const uint8_t credit[4] = {0, 0, 1, 0}; /* 65536 */
    static const uint8_t zero[4] = {0};
    static const uint8_t huge[4] = {0, 0, 0, 0x10}; /* 256 MiB */
    assert_int_equal(check(H, 0, FRAME_HELLO, 0, "{}", 2), 0);
    assert_int_equal(check(H, 1, FRAME_HELLO, 0, "{}", 2), -1);
    assert_int_equal(check(H, 0, FRAME_HELLO, 0, "", 0), -1);
    assert_int_equal(check(A, 0, FRAME_PING, 0, "x", 1), 0);
    assert_int_equal(check(A, 0, FRAME_PING, 0, NULL, 65), -1);
    assert_int_equal(check(H, 1, FRAME_OPEN, 0, "{}", 2), 0);
    assert_int_equal(check(H, 2, FRAME_OPEN, 0, "{}", 2), -1); /* even */
    assert_int_equal(check(A, 1, FRAME_OPEN, 0, "{}", 2), -1); /* agent cannot open */
    assert_int_equal(check(H, 1, FRAME_OPEN, 1, "{}", 2), -1); /* stream set */
    assert_int_equal(check(H, 0, FRAME_DATA, FRAME_STREAM_IN, "x", 1), -1);
    assert_int_equal(check(H, 1, FRAME_DATA, FRAME_STREAM_IN, "", 0), -1);
    assert_int_equal(check(A, 1, FRAME_DATA, FRAME_STREAM_ERR, "x", 1), 0);
    assert_int_equal(check(A, 1, FRAME_DATA, 9, "x", 1), -1);
    assert_int_equal(check(A, 1, FRAME_EOF, FRAME_STREAM_OUT, NULL, 0), 0);
    assert_int_equal(check(A, 1, FRAME_EOF, FRAME_STREAM_OUT, "x", 1), -1);
    assert_int_equal(check(H, 1, FRAME_CREDIT, FRAME_STREAM_OUT, (const char *)credit, 4), 0);
    assert_int_equal(check(H, 1, FRAME_CREDIT, FRAME_STREAM_IN, (const char *)credit, 4), -1);
    assert_int_equal(check(A, 1, FRAME_CREDIT, FRAME_STREAM_IN, (const char *)credit, 4), 0);
    assert_int_equal(check(A, 1, FRAME_CREDIT, FRAME_STREAM_IN, (const char *)zero, 4), -1);
    assert_int_equal(check(A, 1, FRAME_CREDIT, FRAME_STREAM_IN, (const char *)huge, 4), -1);
    assert_int_equal(check(A, 1, FRAME_CREDIT, FRAME_STREAM_IN, (const char *)credit, 3), -1);
    assert_int_equal(check(H, 1, FRAME_CTRL, 0, "{}", 2), 0);
    assert_int_equal(check(A, 1, FRAME_CTRL, 0, "{}", 2), -1);
    assert_int_equal(check(A, 1, FRAME_EVENT, 0, "{}", 2), 0);
    assert_int_equal(check(A, 0, FRAME_EVENT, 0, "{}", 2), -1);
    assert_int_equal(check(H, 1, FRAME_EVENT, 0, "{}", 2), -1);
    assert_int_equal(check(A, 0, FRAME_ERROR, 0, "{}", 2), 0);
    assert_int_equal(check(A, 3, FRAME_ERROR, 0, "", 0), -1);
    assert_int_equal(check(H, 1, FRAME_CLOSE, 0, NULL, 0), 0);
    assert_int_equal(check(H, 0, FRAME_CLOSE, 0, NULL, 0), -1);
    assert_int_equal(check(H, 1, FRAME_CLOSE, 0, "x", 1), -1);
    assert_int_equal(check(H, 1, 0, 0, NULL, 0), -1);
    assert_int_equal(check(H, 1, 12, 0, NULL, 0), -1);
    assert_int_equal(check(H, 1, 255, 0, NULL, 0), -1);
}

static void test_credit(void **state)
{
    uint8_t p[4];
    frame_credit_payload(p, 262144);
    struct frame f = {.len = 4, .channel = 1, .type = FRAME_CREDIT, .stream = FRAME_STREAM_OUT,
                      .payload = p};
    uint32_t v;
    assert_int_equal(frame_credit_value(&f, &v), 0);
    assert_int_equal(v, 262144);
    frame_credit_payload(p, FRAME_MAX_CREDIT + 1);
    assert_int_equal(frame_credit_value(&f, &v), -1);
}

static void test_json(void **state)
{
    char err[128];
    struct frame f = {.len = 13, .type = FRAME_OPEN, .payload = (const uint8_t *)"{\"op\":\"ps\"}  "};
    json_t *j = frame_json(&f, err, sizeof err);
    assert_non_null(j);
    assert_string_equal(json_string_value(json_object_get(j, "op")), "ps");
    json_decref(j);
    const char *bad[] = {"[1,2]", "{\"a\":1,\"a\":2}", "{\"a\":", "{\"a\":\"\\u0000\"}", "\"s\""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        f.payload = (const uint8_t *)bad[i];
        f.len = (uint32_t)strlen(bad[i]);
        assert_null(frame_json(&f, err, sizeof err));
        assert_true(err[0] != '\0');
    }
    json_t *big = json_pack("{s:s}", "x", "small");
    size_t n;
    char *s = frame_json_dump(big, &n);
    assert_non_null(s);
    free(s);
    char *blob = malloc(FRAME_MAX_PAYLOAD + 1);
    memset(blob, 'a', FRAME_MAX_PAYLOAD);
    blob[FRAME_MAX_PAYLOAD] = '\0';
    json_object_set_new(big, "x", json_string(blob));
    assert_null(frame_json_dump(big, &n));
    free(blob);
    json_decref(big);
}

static void test_type_names(void **state)
{
    assert_string_equal(frame_type_name(FRAME_CREDIT), "CREDIT");
    assert_string_equal(frame_type_name(0), "?");
    assert_string_equal(frame_type_name(200), "?");
}

static void test_b64(void **state)
{
    const char *cases[][2] = {{"", ""}, {"f", "Zg=="}, {"fo", "Zm8="}, {"foo", "Zm9v"},
                              {"foob", "Zm9vYg=="}, {"fooba", "Zm9vYmE="}, {"foobar", "Zm9vYmFy"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char enc[32];
        uint8_t dec[32];
        size_t n = strlen(cases[i][0]);
        b64_encode((const uint8_t *)cases[i][0], n, enc);
        assert_string_equal(enc, cases[i][1]);
        assert_int_equal(b64_decode(cases[i][1], dec, sizeof dec), (long)n);
        assert_memory_equal(dec, cases[i][0], n);
    }
    uint8_t out[4];
    assert_int_equal(b64_decode("Zm9", out, sizeof out), -1);       /* length */
    assert_int_equal(b64_decode("Zm=v", out, sizeof out), -1);      /* pad in middle */
    assert_int_equal(b64_decode("Zg==Zg==", out, sizeof out), -1);  /* pad not last */
    assert_int_equal(b64_decode("Z!9v", out, sizeof out), -1);      /* alphabet */
    assert_int_equal(b64_decode("Zm9vYmFy", out, sizeof out), -1);  /* over cap */
    assert_int_equal(b64_decode("Zm9v", out, 3), 3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip),   cmocka_unit_test(test_need_more),
        cmocka_unit_test(test_bad_headers), cmocka_unit_test(test_check_rules),
        cmocka_unit_test(test_credit),      cmocka_unit_test(test_json),
        cmocka_unit_test(test_type_names),  cmocka_unit_test(test_b64),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
