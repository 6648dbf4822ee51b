/* test_dns_query.h: builds DNS queries as a resolver in a sandbox sends them, shared by
 * the DNS message tests and the gateway's DNS server tests.
 *
 * Header-only (static functions) because each unit test is a separate program with no
 * shared object of its own. */
#ifndef SPACE_TEST_DNS_QUERY_H
#define SPACE_TEST_DNS_QUERY_H

#include <stdint.h>
#include <string.h>

/* Writes a standard one-question query (RD set, class IN) for `name` (dotted, no
 * trailing dot; labels taken as they are, unchecked) into buf, which has room for it.
 * Returns its length. */
static inline size_t tdns_query(uint8_t *buf, uint16_t id, const char *name, uint16_t qtype)
{
    const uint8_t hdr[12] = {(uint8_t)(id >> 8), (uint8_t)id, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0};
    size_t o = 12;
    memcpy(buf, hdr, 12);
    for (const char *s = name; *s;) {
        const char *dot = strchr(s, '.');
        size_t len = dot ? (size_t)(dot - s) : strlen(s);
        buf[o++] = (uint8_t)len;
        memcpy(buf + o, s, len);
        o += len;
        s += len + (dot ? 1 : 0);
    }
    buf[o++] = 0;
    buf[o++] = (uint8_t)(qtype >> 8);
    buf[o++] = (uint8_t)qtype;
    buf[o++] = 0;
    buf[o++] = 1;
    return o;
}

#endif
