/* dns_msg.c: DNS query parser and answer builder; see dns_msg.h. */
#include "dns_msg.h"

#include <stdbool.h>
#include <string.h>

#define DNS_MAX_JUMPS 8

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }
static void wr16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)(v >> 8); p[1] = (uint8_t)v; }

/* Decodes the name at *off into q->wire and q->name (text, not yet normalised in
 * `text`); advances *off past the name as it appears in the message. */
static enum dns_parse_result read_name(const uint8_t *p, size_t n, size_t *off,
                                       struct dns_query *q, char *text, size_t *text_len)
{
    size_t pos = *off, end_in_msg = 0, w = 0, t = 0, limit = pos;
    int jumps = 0;
    for (;;) {
        if (pos >= n)
            return DNS_PARSE_FORMERR;
        uint8_t len = p[pos];
        if ((len & 0xc0) == 0xc0) {
            if (pos + 1 >= n || ++jumps > DNS_MAX_JUMPS)
                return DNS_PARSE_FORMERR;
            size_t target = (size_t)((len & 0x3f) << 8 | p[pos + 1]);
            /* Each jump lands strictly before every byte read so far, and never in the
             * header: the targets decrease, so no loop is possible. */
            if (target < DNS_HDR_LEN || target >= limit)
                return DNS_PARSE_FORMERR;
            if (!end_in_msg)
                end_in_msg = pos + 2;
            pos = limit = target;
            continue;
        }
        if (len & 0xc0)
            return DNS_PARSE_FORMERR; /* 0x40/0x80: extended/unknown label types */
        if (w + 1 + len > sizeof q->wire)
            return DNS_PARSE_FORMERR;
        q->wire[w++] = len;
        if (len == 0) {
            pos++;
            break;
        }
        if (pos + 1 + len > n)
            return DNS_PARSE_FORMERR;
        memcpy(q->wire + w, p + pos + 1, len);
        w += len;
        for (size_t i = 0; i < len; i++) {
            uint8_t c = p[pos + 1 + i];
            /* A '.' or a zero byte inside a label would change the name's meaning once
             * written as text: such a name is not a host name. */
            text[t++] = (c == '.' || c == 0 || c > 0x7e) ? '\x01' : (char)c;
        }
        text[t++] = '.';
        pos += 1 + len;
    }
    q->wire_len = w;
    *text_len = t;
    *off = end_in_msg ? end_in_msg : pos;
    return DNS_PARSE_OK;
}

enum dns_parse_result dns_query_parse(const uint8_t *p, size_t n, struct dns_query *q)
{
    memset(q, 0, sizeof *q);
    if (n < DNS_HDR_LEN || n > DNS_MSG_MAX)
        return DNS_PARSE_DROP;
    q->id = rd16(p);
    q->flags = rd16(p + 2);
    if (q->flags & 0x8000)
        return DNS_PARSE_DROP; /* a response: never answer it (no reflection loops) */
    if ((q->flags >> 11 & 0xf) != 0 || rd16(p + 4) != 1 || rd16(p + 6) != 0 ||
        rd16(p + 8) != 0 || rd16(p + 10) > 1)
        return DNS_PARSE_FORMERR;
    size_t off = DNS_HDR_LEN, tlen = 0;
    char text[260];
    enum dns_parse_result r = read_name(p, n, &off, q, text, &tlen);
    if (r != DNS_PARSE_OK)
        return r;
    if (off + 4 > n)
        return DNS_PARSE_FORMERR;
    q->qtype = rd16(p + off);
    q->qclass = rd16(p + off + 2);
    if (tlen == 0 || memchr(text, '\x01', tlen) ||
        policy_name_normalise(text, tlen, q->name) != 0)
        return DNS_PARSE_BADNAME;
    return DNS_PARSE_OK;
}

static size_t header(uint8_t *out, uint16_t id, uint16_t qflags, int rcode, uint16_t qd,
                     uint16_t an, bool tc)
{
    wr16(out, id);
    /* QR=1, opcode 0, TC if truncated, RD echoed, RA=1 */
    wr16(out + 2, (uint16_t)(0x8000 | (tc ? 0x0200 : 0) | (qflags & 0x0100) | 0x0080 | (rcode & 0xf)));
    wr16(out + 4, qd);
    wr16(out + 6, an);
    wr16(out + 8, 0);
    wr16(out + 10, 0);
    return DNS_HDR_LEN;
}

size_t dns_answer_build(uint8_t *out, size_t cap, const struct dns_query *q, int rcode,
                        const uint32_t *addrs, size_t naddrs, uint32_t ttl)
{
    if (naddrs > DNS_ANSWERS_MAX)
        naddrs = DNS_ANSWERS_MAX;
    size_t question = DNS_HDR_LEN + q->wire_len + 4;
    if (cap < question || q->wire_len == 0)
        return 0;
    bool tc = cap < question + naddrs * 16;
    if (tc)
        naddrs = 0;
    size_t o = header(out, q->id, q->flags, rcode, 1, (uint16_t)naddrs, tc);
    memcpy(out + o, q->wire, q->wire_len);
    o += q->wire_len;
    wr16(out + o, q->qtype);
    wr16(out + o + 2, q->qclass);
    o += 4;
    for (size_t i = 0; i < naddrs; i++) {
        wr16(out + o, 0xc000 | DNS_HDR_LEN); /* the question's name */
        wr16(out + o + 2, DNS_TYPE_A);
        wr16(out + o + 4, DNS_CLASS_IN);
        wr16(out + o + 6, (uint16_t)(ttl >> 16));
        wr16(out + o + 8, (uint16_t)ttl);
        wr16(out + o + 10, 4);
        out[o + 12] = (uint8_t)(addrs[i] >> 24);
        out[o + 13] = (uint8_t)(addrs[i] >> 16);
        out[o + 14] = (uint8_t)(addrs[i] >> 8);
        out[o + 15] = (uint8_t)addrs[i];
        o += 16;
    }
    return o;
}

size_t dns_answer_formerr(uint8_t *out, size_t cap, uint16_t id)
{
    if (cap < DNS_HDR_LEN)
        return 0;
    return header(out, id, 0, DNS_RCODE_FORMERR, 0, 0, false);
}

enum dns_frame_result dns_tcp_frame(const uint8_t *p, size_t n, size_t *msg_len)
{
    if (n < 2)
        return DNS_FRAME_NEED_MORE;
    size_t len = rd16(p);
    if (len < DNS_HDR_LEN || len > DNS_MSG_MAX)
        return DNS_FRAME_BAD;
    if (n - 2 < len)
        return DNS_FRAME_NEED_MORE;
    *msg_len = len;
    return DNS_FRAME_OK;
}
