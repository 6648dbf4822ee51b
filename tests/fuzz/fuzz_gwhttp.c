/* Fuzzes the gateway's HTTP request checks: the head parser over the input, then the
 * body framer over what follows the head. Property: the framer's verdict and the
 * number of body bytes do not depend on how the bytes are split (byte 0 picks the
 * split), which is what keeps the gateway's request boundaries identical to the
 * upstream server's whatever the TCP segmentation; the decoded content (what a chunked
 * body is re-framed with) is the same whatever the split, too. */
#include <assert.h>
#include <stdint.h>
#include <string.h>

#include "gateway/gwhttp.h"

static enum gwhttp_body_result frame(const struct gwhttp_req *r, const uint8_t *p, size_t n,
                                     size_t step, size_t *total)
{
    struct gwhttp_body b;
    gwhttp_body_init(&b, r);
    size_t used;
    enum gwhttp_body_result res = gwhttp_body_feed(&b, NULL, 0, &used);
    *total = 0;
    for (size_t off = 0; off < n && res == GWHTTP_BODY_MORE;) {
        size_t k = n - off < step ? n - off : step;
        res = gwhttp_body_feed(&b, p + off, k, &used);
        assert(used <= k);
        *total += used;
        off += used;
        if (res == GWHTTP_BODY_MORE)
            assert(used == k);
    }
    return res;
}

/* Decodes the body with gwhttp_body_next in reads of `step` bytes into out (the
 * content the gateway re-frames); returns the result, *total bytes consumed. */
static enum gwhttp_body_result decode(const struct gwhttp_req *r, const uint8_t *p, size_t n,
                                      size_t step, uint8_t *out, size_t *outlen, size_t *total)
{
    struct gwhttp_body b;
    gwhttp_body_init(&b, r);
    size_t used, data;
    enum gwhttp_body_result res = gwhttp_body_next(&b, NULL, 0, &used, &data);
    size_t off = 0;
    *outlen = 0;
    while (off < n && res == GWHTTP_BODY_MORE) {
        size_t k = n - off < step ? n - off : step;
        res = gwhttp_body_next(&b, p + off, k, &used, &data);
        assert(data <= used && used <= k);
        memcpy(out + *outlen, p + off + used - data, data);
        *outlen += data;
        off += used;
    }
    *total = off;
    return res;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    size_t step = (size_t)(data[0] % 17) + 1;
    data++;
    size--;
    static struct gwhttp_req r;
    enum gwhttp_result hr = gwhttp_parse_head((const char *)data, size, &r);
    if (hr != GWHTTP_OK)
        return 0;
    assert(r.head_len <= size && r.head_len <= GWHTTP_HEAD_MAX);
    for (size_t i = 0; i < r.nheaders; i++)
        assert(r.headers[i].off + r.headers[i].len <= r.head_len);
    size_t t1, t2;
    enum gwhttp_body_result a = frame(&r, data + r.head_len, size - r.head_len, size, &t1);
    enum gwhttp_body_result b = frame(&r, data + r.head_len, size - r.head_len, step, &t2);
    assert(a == b && t1 == t2);
    /* Decoding (what the gateway re-frames with Content-Length) agrees with framing,
     * and its content does not depend on the split either. */
    static uint8_t d1[1 << 20], d2[1 << 20];
    size_t n = size - r.head_len, l1, l2, u1, u2;
    if (n > sizeof d1)
        return 0;
    enum gwhttp_body_result c = decode(&r, data + r.head_len, n, n ? n : 1, d1, &l1, &u1);
    enum gwhttp_body_result d = decode(&r, data + r.head_len, n, step, d2, &l2, &u2);
    assert(c == a && d == a && u1 == t1 && u2 == t1 && l1 == l2 && l1 <= u1);
    assert(memcmp(d1, d2, l1) == 0);
    return 0;
}
