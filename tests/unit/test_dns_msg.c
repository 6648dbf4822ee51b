/* test_dns_msg: strict DNS query parsing and answer building. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <cmocka.h>

#include "gateway/dns_msg.h"
#include "test_dns_query.h"

/* Every query of these tests carries this id. */
#define QID 0xabcd

static void test_good_query_and_answer(void **state)
{
    uint8_t buf[512], out[512];
    struct dns_query q;
    size_t n = tdns_query(buf, QID, "WWW.Allowed.test", DNS_TYPE_A);
    assert_int_equal(dns_query_parse(buf, n, &q), DNS_PARSE_OK);
    assert_string_equal(q.name, "www.allowed.test");
    assert_int_equal(q.id, QID);
    assert_int_equal(q.qtype, DNS_TYPE_A);
    uint32_t addrs[] = {0xcb007101, 0xcb007102};
    size_t len = dns_answer_build(out, sizeof out, &q, DNS_RCODE_OK, addrs, 2, 60);
    assert_int_equal(len, n + 32);
    assert_int_equal(out[0], 0xab);
    assert_int_equal(out[2] & 0x80, 0x80);   /* QR */
    assert_int_equal(out[3] & 0x0f, 0);      /* rcode */
    assert_int_equal(out[7], 2);             /* ancount */
    assert_memory_equal(out + 12, buf + 12, n - 12); /* question echoed with its case */
    assert_int_equal(out[n + 12], 0xcb);
    assert_int_equal(out[n + 15], 0x01);
    len = dns_answer_build(out, sizeof out, &q, DNS_RCODE_NXDOMAIN, NULL, 0, 0);
    assert_int_equal(out[3] & 0x0f, DNS_RCODE_NXDOMAIN);
    assert_int_equal(len, n);
}

static void test_rejects(void **state)
{
    uint8_t buf[700];
    struct dns_query q;
    size_t n = tdns_query(buf, QID, "allowed.test", DNS_TYPE_A);
    assert_int_equal(dns_query_parse(buf, 5, &q), DNS_PARSE_DROP);
    buf[2] |= 0x80; /* a response */
    assert_int_equal(dns_query_parse(buf, n, &q), DNS_PARSE_DROP);
    buf[2] &= 0x7f;
    buf[5] = 2; /* two questions */
    assert_int_equal(dns_query_parse(buf, n, &q), DNS_PARSE_FORMERR);
    buf[5] = 1;
    buf[7] = 1; /* an answer record in a query */
    assert_int_equal(dns_query_parse(buf, n, &q), DNS_PARSE_FORMERR);
    buf[7] = 0;
    buf[2] = 0x28; /* opcode UPDATE */
    assert_int_equal(dns_query_parse(buf, n, &q), DNS_PARSE_FORMERR);
    buf[2] = 0x01;
    assert_int_equal(dns_query_parse(buf, n - 3, &q), DNS_PARSE_FORMERR);
    memset(buf + n, 0, 600);
    assert_int_equal(dns_query_parse(buf, n + 600, &q), DNS_PARSE_DROP);
    /* a label with a dot inside, and a binary label: not host names */
    n = tdns_query(buf, QID, "a.test", DNS_TYPE_A);
    buf[13] = '.';
    assert_int_equal(dns_query_parse(buf, n, &q), DNS_PARSE_BADNAME);
    buf[13] = 0;
    assert_int_equal(dns_query_parse(buf, n, &q), DNS_PARSE_BADNAME);
    /* an IP literal name */
    n = tdns_query(buf, QID, "127.0.0.1", DNS_TYPE_A);
    assert_int_equal(dns_query_parse(buf, n, &q), DNS_PARSE_BADNAME);
    /* the root */
    n = tdns_query(buf, QID, "", DNS_TYPE_A);
    assert_int_equal(dns_query_parse(buf, n, &q), DNS_PARSE_BADNAME);
}

static void test_compression_pointers(void **state)
{
    uint8_t buf[64] = {0xab, 0xcd, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0};
    struct dns_query q;
    /* pointer to itself */
    memcpy(buf + 12, "\xc0\x0c\x00\x01\x00\x01", 6);
    assert_int_equal(dns_query_parse(buf, 18, &q), DNS_PARSE_FORMERR);
    /* forward pointer */
    memcpy(buf + 12, "\x01" "a\xc0\x20\x00\x01\x00\x01", 8);
    assert_int_equal(dns_query_parse(buf, 20, &q), DNS_PARSE_FORMERR);
    /* pointer into the header */
    memcpy(buf + 12, "\x01" "a\xc0\x02\x00\x01\x00\x01", 8);
    assert_int_equal(dns_query_parse(buf, 20, &q), DNS_PARSE_FORMERR);
    /* a backwards pointer to an earlier label inside the name is a loop too */
    memcpy(buf + 12, "\x01" "a\x01" "b\xc0\x0e\x00\x01\x00\x01", 10);
    assert_int_equal(dns_query_parse(buf, 22, &q), DNS_PARSE_FORMERR);
    /* reserved label types */
    memcpy(buf + 12, "\x41" "a\x00\x00\x01\x00\x01", 7);
    assert_int_equal(dns_query_parse(buf, 19, &q), DNS_PARSE_FORMERR);
}

static void test_long_names(void **state)
{
    uint8_t buf[512];
    struct dns_query q;
    char name[300];
    size_t o = 0;
    for (int i = 0; i < 4; i++) {
        memset(name + o, 'a', 63);
        o += 63;
        name[o++] = '.';
    }
    memcpy(name + o, "test", 5);
    size_t n = tdns_query(buf, QID, name, DNS_TYPE_A); /* 4*64 + 5 + 1 > 255 wire bytes */
    assert_int_equal(dns_query_parse(buf, n, &q), DNS_PARSE_FORMERR);
}

static void test_formerr_answer(void **state)
{
    uint8_t out[16];
    assert_int_equal(dns_answer_formerr(out, sizeof out, 0x1234), 12);
    assert_int_equal(out[3] & 0x0f, DNS_RCODE_FORMERR);
    assert_int_equal(dns_answer_formerr(out, 4, 0x1234), 0);
}

/* A long name with every record: too big for UDP (TC, no records), whole over TCP. */
static void test_truncation(void **state)
{
    uint8_t buf[512], udp[DNS_MSG_MAX], tcp[DNS_ANSWER_BYTES_MAX];
    struct dns_query q;
    char name[256];
    memset(name, 'a', 60);
    memcpy(name + 60, ".", 1);
    memset(name + 61, 'b', 60);
    memcpy(name + 121, ".test", 6);
    assert_int_equal(dns_query_parse(buf, tdns_query(buf, QID, name, DNS_TYPE_A), &q), DNS_PARSE_OK);
    uint32_t addrs[DNS_ANSWERS_MAX];
    for (size_t i = 0; i < DNS_ANSWERS_MAX; i++)
        addrs[i] = 0xcb007100 + (uint32_t)i;
    size_t n = dns_answer_build(udp, sizeof udp, &q, DNS_RCODE_OK, addrs, DNS_ANSWERS_MAX, 30);
    assert_int_equal(n, 12 + q.wire_len + 4);
    assert_true(udp[2] & 0x02);               /* TC */
    assert_int_equal(udp[6] << 8 | udp[7], 0); /* no records */
    n = dns_answer_build(tcp, sizeof tcp, &q, DNS_RCODE_OK, addrs, DNS_ANSWERS_MAX, 30);
    assert_int_equal(n, 12 + q.wire_len + 4 + DNS_ANSWERS_MAX * 16);
    assert_false(tcp[2] & 0x02);
    assert_int_equal(tcp[6] << 8 | tcp[7], DNS_ANSWERS_MAX);
    /* a few records fit in UDP as they are */
    n = dns_answer_build(udp, sizeof udp, &q, DNS_RCODE_OK, addrs, 4, 30);
    assert_false(udp[2] & 0x02);
    assert_int_equal(udp[6] << 8 | udp[7], 4);
    /* not even the question fits: nothing */
    assert_int_equal(dns_answer_build(udp, 20, &q, DNS_RCODE_OK, addrs, 1, 30), 0);
}

static void test_tcp_frames(void **state)
{
    uint8_t s[2 + 600] = {0};
    size_t len = 99;
    assert_int_equal(dns_tcp_frame(s, 0, &len), DNS_FRAME_NEED_MORE);
    s[1] = 30;
    assert_int_equal(dns_tcp_frame(s, 1, &len), DNS_FRAME_NEED_MORE);
    assert_int_equal(dns_tcp_frame(s, 31, &len), DNS_FRAME_NEED_MORE); /* one byte short */
    assert_int_equal(len, 99);
    assert_int_equal(dns_tcp_frame(s, 32, &len), DNS_FRAME_OK);
    assert_int_equal(len, 30);
    assert_int_equal(dns_tcp_frame(s, sizeof s, &len), DNS_FRAME_OK); /* the next frame follows */
    s[1] = 11; /* shorter than a header */
    assert_int_equal(dns_tcp_frame(s, sizeof s, &len), DNS_FRAME_BAD);
    s[0] = 0x02; /* 523 bytes: over DNS_MSG_MAX, refused before it all arrives */
    assert_int_equal(dns_tcp_frame(s, 2, &len), DNS_FRAME_BAD);
    s[0] = 0x02, s[1] = 0x00; /* exactly 512 */
    assert_int_equal(dns_tcp_frame(s, 2 + 512, &len), DNS_FRAME_OK);
    assert_int_equal(len, 512);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good_query_and_answer), cmocka_unit_test(test_rejects),
        cmocka_unit_test(test_compression_pointers), cmocka_unit_test(test_long_names),
        cmocka_unit_test(test_formerr_answer), cmocka_unit_test(test_truncation),
        cmocka_unit_test(test_tcp_frames),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
