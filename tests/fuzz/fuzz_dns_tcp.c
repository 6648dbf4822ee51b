/* Fuzzes DNS over TCP as a sandbox can send it to gw:53: the input is the byte stream
 * of one connection. Frames are cut with dns_tcp_frame exactly as dns_tcp.c does
 * (stop at the first bad prefix, wait on a partial one); each whole message goes
 * through the query parser and both answer sizes. Properties: a frame never reaches
 * past the stream; a bad prefix is one announcing < 12 or > DNS_MSG_MAX bytes; the TCP
 * answer carries every record and no TC bit; the UDP answer fits DNS_MSG_MAX and has
 * either every record or none with TC set. */
#include <assert.h>
#include <stdint.h>
#include <string.h>

#include "gateway/dns_msg.h"

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }

static void answers(const struct dns_query *q)
{
    uint32_t addrs[DNS_ANSWERS_MAX];
    for (size_t i = 0; i < DNS_ANSWERS_MAX; i++)
        addrs[i] = 0xcb007100 + (uint32_t)i;
    uint8_t tcp[DNS_ANSWER_BYTES_MAX], udp[DNS_MSG_MAX];
    size_t n = q->id % (DNS_ANSWERS_MAX + 1); /* any count, chosen by the input */
    size_t tl = dns_answer_build(tcp, sizeof tcp, q, DNS_RCODE_OK, addrs, n, 60);
    assert(tl == DNS_HDR_LEN + q->wire_len + 4 + n * 16);
    assert(!(tcp[2] & 0x02) && rd16(tcp + 6) == n);
    size_t ul = dns_answer_build(udp, sizeof udp, q, DNS_RCODE_OK, addrs, n, 60);
    assert(ul >= DNS_HDR_LEN && ul <= DNS_MSG_MAX);
    if (udp[2] & 0x02)
        assert(rd16(udp + 6) == 0 && tl > DNS_MSG_MAX);
    else
        assert(ul == tl && memcmp(udp, tcp, tl) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t off = 0;
    for (;;) {
        size_t len = 0;
        enum dns_frame_result r = dns_tcp_frame(data + off, size - off, &len);
        if (r == DNS_FRAME_NEED_MORE) {
            assert(size - off < 2 || size - off - 2 < rd16(data + off));
            return 0;
        }
        if (r == DNS_FRAME_BAD) {
            size_t want = rd16(data + off);
            assert(want < DNS_HDR_LEN || want > DNS_MSG_MAX);
            return 0;
        }
        assert(len >= DNS_HDR_LEN && len <= DNS_MSG_MAX && off + 2 + len <= size);
        struct dns_query q;
        if (dns_query_parse(data + off + 2, len, &q) == DNS_PARSE_OK)
            answers(&q);
        off += 2 + len;
    }
}
