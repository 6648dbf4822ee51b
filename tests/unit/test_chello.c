/* test_chello: ClientHello reassembly and strict parsing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <cmocka.h>

#include "gateway/chello.h"

struct hello_spec {
    const char *snis[3];  /* NULL-terminated; snis[0] == NULL: no SNI extension */
    bool ech, dup, alpn, non_host_type;
};

static size_t put16(uint8_t *p, size_t v) { p[0] = (uint8_t)(v >> 8); p[1] = (uint8_t)v; return 2; }

/* The handshake message (type 1 + 3-byte length + body) into out. */
static size_t hello_msg(uint8_t *out, const struct hello_spec *s)
{
    uint8_t ext[2048];
    size_t e = 0;
    for (int rep = 0; s->snis[0] && rep < (s->dup ? 2 : 1); rep++) {
        uint8_t list[1024];
        size_t l = 0;
        for (int i = 0; i < 3 && s->snis[i]; i++) {
            list[l++] = s->non_host_type ? 1 : 0;
            l += put16(list + l, strlen(s->snis[i]));
            memcpy(list + l, s->snis[i], strlen(s->snis[i]));
            l += strlen(s->snis[i]);
        }
        e += put16(ext + e, 0);
        e += put16(ext + e, l + 2);
        e += put16(ext + e, l);
        memcpy(ext + e, list, l);
        e += l;
    }
    if (s->alpn) {
        static const uint8_t a[] = {0, 16, 0, 14, 0, 12, 2, 'h', '2', 8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
        memcpy(ext + e, a, sizeof a);
        e += sizeof a;
    }
    if (s->ech) {
        static const uint8_t x[] = {0xfe, 0x0d, 0, 2, 0, 0};
        memcpy(ext + e, x, sizeof x);
        e += sizeof x;
    }
    uint8_t *b = out + 4;
    size_t n = 0;
    b[n++] = 3;
    b[n++] = 3;
    memset(b + n, 7, 32);
    n += 32;
    b[n++] = 0;              /* session id */
    n += put16(b + n, 2);
    b[n++] = 0x13;
    b[n++] = 0x01;
    b[n++] = 1;              /* compression */
    b[n++] = 0;
    n += put16(b + n, e);
    memcpy(b + n, ext, e);
    n += e;
    out[0] = 1;
    out[1] = (uint8_t)(n >> 16);
    out[2] = (uint8_t)(n >> 8);
    out[3] = (uint8_t)n;
    return n + 4;
}

/* Frames msg into records of at most rec bytes. */
static size_t records(uint8_t *out, const uint8_t *msg, size_t n, size_t rec)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i += rec) {
        size_t len = n - i < rec ? n - i : rec;
        out[o++] = 22;
        out[o++] = 3;
        out[o++] = 1;
        o += put16(out + o, len);
        memcpy(out + o, msg + i, len);
        o += len;
    }
    return o;
}

static enum chello_result parse_spec(const struct hello_spec *s, size_t rec, struct chello *ch)
{
    uint8_t msg[4096], stream[8192];
    size_t n = hello_msg(msg, s);
    size_t len = records(stream, msg, n, rec);
    return chello_parse(stream, len, ch);
}

static void test_good(void **state)
{
    struct chello ch;
    struct hello_spec s = {.snis = {"API.Example.test.", NULL}, .alpn = true};
    assert_int_equal(parse_spec(&s, 16384, &ch), CHELLO_OK);
    assert_string_equal(ch.sni, "api.example.test");
    assert_true(ch.alpn_h2);
    assert_true(ch.alpn_http11);
}

static void test_split_records_and_prefixes(void **state)
{
    uint8_t msg[4096], stream[16384];
    struct hello_spec s = {.snis = {"allowed.test", NULL}};
    size_t n = hello_msg(msg, &s);
    for (size_t rec = 1; rec < 40; rec += 3) {
        size_t len = records(stream, msg, n, rec);
        struct chello ch;
        /* every strict prefix needs more; the whole thing parses */
        for (size_t cut = 0; cut < len; cut += 7)
            assert_int_equal(chello_parse(stream, cut, &ch), CHELLO_NEED_MORE);
        assert_int_equal(chello_parse(stream, len, &ch), CHELLO_OK);
        assert_int_equal(ch.consumed, len);
        assert_string_equal(ch.sni, "allowed.test");
    }
}

static void test_sni_rejections(void **state)
{
    struct chello ch;
    struct hello_spec none = {.snis = {NULL}};
    assert_int_equal(parse_spec(&none, 16384, &ch), CHELLO_NO_SNI);
    struct hello_spec two = {.snis = {"a.test", "b.test", NULL}};
    assert_int_equal(parse_spec(&two, 16384, &ch), CHELLO_NO_SNI);
    struct hello_spec ip = {.snis = {"203.0.113.10", NULL}};
    assert_int_equal(parse_spec(&ip, 16384, &ch), CHELLO_BAD_SNI);
    struct hello_spec sp = {.snis = {"a test", NULL}};
    assert_int_equal(parse_spec(&sp, 16384, &ch), CHELLO_BAD_SNI);
    struct hello_spec type = {.snis = {"a.test", NULL}, .non_host_type = true};
    assert_int_equal(parse_spec(&type, 16384, &ch), CHELLO_NO_SNI);
    struct hello_spec dup = {.snis = {"a.test", NULL}, .dup = true};
    assert_int_equal(parse_spec(&dup, 16384, &ch), CHELLO_MALFORMED);
    struct hello_spec ech = {.snis = {"a.test", NULL}, .ech = true};
    assert_int_equal(parse_spec(&ech, 16384, &ch), CHELLO_ECH);
}

static void test_not_tls_and_malformed(void **state)
{
    struct chello ch;
    assert_int_equal(chello_parse((const uint8_t *)"SSH-2.0-x\r\n", 11, &ch), CHELLO_NOT_TLS);
    assert_int_equal(chello_parse((const uint8_t *)"GET / HTTP/1.1\r\n", 16, &ch), CHELLO_NOT_TLS);
    assert_int_equal(chello_parse((const uint8_t *)"\x16\x02", 2, &ch), CHELLO_NOT_TLS);
    /* alert record first */
    assert_int_equal(chello_parse((const uint8_t *)"\x15\x03\x01\x00\x02\x02\x28", 7, &ch), CHELLO_NOT_TLS);
    /* empty record, oversized record */
    assert_int_equal(chello_parse((const uint8_t *)"\x16\x03\x01\x00\x00", 5, &ch), CHELLO_MALFORMED);
    assert_int_equal(chello_parse((const uint8_t *)"\x16\x03\x01\x40\x01", 5, &ch), CHELLO_MALFORMED);
    /* a ServerHello instead */
    assert_int_equal(chello_parse((const uint8_t *)"\x16\x03\x01\x00\x04\x02\x00\x00\x00", 9, &ch), CHELLO_MALFORMED);
    /* length fields that overrun: take a good hello and corrupt the extensions length */
    uint8_t msg[4096], stream[8192];
    struct hello_spec s = {.snis = {"allowed.test", NULL}};
    size_t n = hello_msg(msg, &s);
    size_t ext_len_off = 4 + 2 + 32 + 1 + 2 + 2 + 2;
    msg[ext_len_off + 1] ^= 0x40;
    size_t len = records(stream, msg, n, 16384);
    assert_int_equal(chello_parse(stream, len, &ch), CHELLO_MALFORMED);
    /* trailing handshake bytes after the hello in the same record */
    n = hello_msg(msg, &s);
    msg[n] = 0x14;
    len = records(stream, msg, n + 1, 16384);
    assert_int_equal(chello_parse(stream, len, &ch), CHELLO_MALFORMED);
    /* endless tiny records never reaching the end: bounded */
    static uint8_t big[CHELLO_STREAM_MAX + 16];
    memset(big, 0, sizeof big);
    msg[0] = 1;
    msg[1] = 0;
    msg[2] = 0x3f;
    msg[3] = 0xff;
    size_t o = 0;
    o += records(big, msg, 4, 4);
    while (o + 6 <= sizeof big) {
        memcpy(big + o, "\x16\x03\x01\x00\x01\x00", 6);
        o += 6;
    }
    assert_int_equal(chello_parse(big, o, &ch), CHELLO_MALFORMED);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good), cmocka_unit_test(test_split_records_and_prefixes),
        cmocka_unit_test(test_sni_rejections), cmocka_unit_test(test_not_tls_and_malformed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
