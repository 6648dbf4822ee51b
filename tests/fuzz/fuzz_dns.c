/* Fuzzes the DNS query parser and answer builder with whatever a sandbox can send to
 * the gateway's port 53. Properties: a parsed name is already normalised (normalising
 * it again gives the same text), and an answer always fits in DNS_MSG_MAX and parses
 * back as a response (QR set) with the same id. */
#include <assert.h>
#include <stdint.h>
#include <string.h>

#include "gateway/dns_msg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct dns_query q;
    uint8_t out[DNS_MSG_MAX];
    enum dns_parse_result r = dns_query_parse(data, size, &q);
    if (r != DNS_PARSE_OK)
        return 0;
    char again[POLICY_NAME_MAX + 1];
    assert(policy_name_normalise(q.name, strlen(q.name), again) == 0);
    assert(strcmp(again, q.name) == 0);
    uint32_t addrs[DNS_ANSWERS_MAX + 2] = {0x01020304, 0xcb007101};
    size_t len = dns_answer_build(out, sizeof out, &q, DNS_RCODE_OK, addrs, DNS_ANSWERS_MAX + 2, 60);
    assert(len > 12 && len <= DNS_MSG_MAX);
    assert(out[0] == data[0] && out[1] == data[1] && (out[2] & 0x80));
    struct dns_query back;
    assert(dns_query_parse(out, len, &back) == DNS_PARSE_DROP); /* a response is never served */
    return 0;
}
