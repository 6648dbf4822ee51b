/* dns_msg: strict parsing of the DNS queries a sandbox sends, and building the
 * gateway's answers. Pure code, no I/O.
 *
 * A query is accepted only if it is a standard query (QR=0, OPCODE=0) with exactly one
 * question, no answer or authority records, at most one additional record (EDNS OPT,
 * ignored), and a name whose labels decode within 255 wire bytes. A compression pointer
 * must land strictly before every byte of the name read so far and outside the header;
 * in a one-question query nothing qualifies, so compressed questions (never sent by real
 * stub resolvers) are FORMERR, and pointer loops cannot exist. The name's text form must pass
 * policy_name_normalise (the only names the gateway ever resolves).
 *
 * Over TCP (RFC 1035 4.2.2, RFC 7766) every message is preceded by its length in two
 * bytes, big-endian; dns_tcp_frame finds one such message at the start of a stream.
 * Queries are held to DNS_MSG_MAX on both transports (a one-question stub query is far
 * smaller). Answers over UDP are held to DNS_MSG_MAX: one that does not fit goes out
 * without its records and with the TC bit, and the client asks again over TCP. */
#ifndef SPACE_GW_DNS_MSG_H
#define SPACE_GW_DNS_MSG_H

#include <stddef.h>
#include <stdint.h>

#include "policy.h"

#define DNS_MSG_MAX 512     /* UDP payload the gateway reads and writes; query size limit */
#define DNS_ANSWERS_MAX 32  /* A records in one answer (more than UDP can carry with a
                               long name: those answers are truncated, TC set) */
#define DNS_HDR_LEN 12
/* Largest answer dns_answer_build makes: header, a 255-byte name, type and class,
 * DNS_ANSWERS_MAX records of 16 bytes. A TCP answer buffer of this size always fits. */
#define DNS_ANSWER_BYTES_MAX (DNS_HDR_LEN + 256 + 4 + DNS_ANSWERS_MAX * 16)

enum { DNS_TYPE_A = 1, DNS_TYPE_NULL = 10, DNS_TYPE_TXT = 16, DNS_TYPE_AAAA = 28,
       DNS_TYPE_SVCB = 64, DNS_TYPE_HTTPS = 65, DNS_TYPE_ANY = 255, DNS_CLASS_IN = 1 };
enum { DNS_RCODE_OK = 0, DNS_RCODE_FORMERR = 1, DNS_RCODE_SERVFAIL = 2,
       DNS_RCODE_NXDOMAIN = 3, DNS_RCODE_REFUSED = 5 };

/* dns_query_parse results */
enum dns_parse_result {
    DNS_PARSE_OK = 0,
    DNS_PARSE_DROP,     /* too short for a header, or a response: send nothing */
    DNS_PARSE_FORMERR,  /* header readable: answer FORMERR with q->id */
    DNS_PARSE_BADNAME,  /* well formed but the name is not a host name: answer REFUSED */
};

struct dns_query {
    uint16_t id;                            /* copied into the answer */
    uint16_t flags;                         /* the query's flags word (RD is echoed) */
    uint16_t qtype, qclass;
    char name[POLICY_NAME_MAX + 1];         /* normalised text form */
    uint8_t wire[256];                      /* the question name, decompressed, as sent */
    size_t wire_len;                        /* bytes used in wire (incl. final zero) */
};

enum dns_parse_result dns_query_parse(const uint8_t *p, size_t n, struct dns_query *q);

/* Builds the answer to q in out[cap]: rcode, plus one A record per address (host order;
 * at most DNS_ANSWERS_MAX used) with `ttl`. If the records do not fit in cap (UDP:
 * DNS_MSG_MAX), the answer has none and the TC bit set. Returns its length, or 0 if
 * not even the question fits. */
size_t dns_answer_build(uint8_t *out, size_t cap, const struct dns_query *q, int rcode,
                        const uint32_t *addrs, size_t naddrs, uint32_t ttl);

/* Same for a query that failed to parse past the header (FORMERR): no question. */
size_t dns_answer_formerr(uint8_t *out, size_t cap, uint16_t id);

enum dns_frame_result {
    DNS_FRAME_NEED_MORE, /* the length prefix or the message is not all there yet */
    DNS_FRAME_OK,        /* *msg_len bytes of message follow the 2-byte prefix */
    DNS_FRAME_BAD,       /* the prefix announces fewer than a header's bytes or more
                            than DNS_MSG_MAX: the stream cannot be trusted further */
};

/* Looks for one length-prefixed message at the start of p[n] (a TCP stream). */
enum dns_frame_result dns_tcp_frame(const uint8_t *p, size_t n, size_t *msg_len);

#endif
