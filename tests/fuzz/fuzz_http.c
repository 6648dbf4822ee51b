/* Fuzzes the one HTTP/1 parser (src/common/http_parse.c) without sockets: the head
 * terminator search (fed in pieces, as trickled bytes arrive), the request-head parser
 * (spaced, gateway), the response-head parser (CLI) over the same head, target
 * decoding, and the chunked decoder over whatever follows the head. The chunked decoder
 * must give the same payload and verdict whatever the split of its input, which is the
 * property that keeps the server's framing independent of TCP segmentation.
 * Input byte 0 chooses the split size. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "http_parse.h"

static const struct http_parse_limits lim = {
    .max_header_bytes = 4096, .max_target_bytes = 1024, .max_headers = 32};

/* Decodes in[len] feeding `step` new bytes at a time; payload into out (cap >= len).
 * Returns the verdict; *outlen the payload size, *used the bytes consumed. */
static int chunked_all(const char *in, size_t len, size_t step, char *out, size_t *outlen,
                       size_t *used)
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
        if (consumed > end - pos || off + dl > consumed)
            abort();
        memcpy(out + *outlen, in + pos + off, dl);
        *outlen += dl;
        pos += consumed;
        *used = pos;
        if (r != HTTP_PARSE_INCOMPLETE)
            return r == HTTP_PARSE_OK ? 1 : -err.status;
        if (consumed == 0 && end == len)
            return 0;
    }
}

static void check_head(const struct http_head *h)
{
    if (!h->method || !h->target || h->version_minor < 0 || h->version_minor > 1)
        abort();
    if (h->chunked != (h->content_length == -1) || h->content_length < -1)
        abort();
    for (unsigned i = 0; i < h->nfields; i++)
        if (!h->fields[i].name[0] || strpbrk(h->fields[i].value, "\r\n"))
            abort();
    char *p = http_pct_decode(h->target, strlen(h->target), false);
    if (p && strlen(p) > strlen(h->target))
        abort();
    free(p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    size_t step = (size_t)(data[0] % 64) + 1;
    const char *in = (const char *)data + 1;
    size_t len = size - 1;

    size_t scan = 0, head_len = 0, avail = 0;
    struct http_parse_error err;
    enum http_parse_result r = HTTP_PARSE_INCOMPLETE;
    while (r == HTTP_PARSE_INCOMPLETE && avail < len) {
        avail = avail + step < len ? avail + step : len;
        r = http_head_find_end(in, avail, &lim, &scan, &head_len, &err);
    }
    size_t body_at = 0;
    if (r == HTTP_PARSE_OK) {
        if (head_len > avail || head_len > lim.max_header_bytes)
            abort();
        struct http_head h;
        if (http_head_parse(in, head_len, &lim, &h, &err) == HTTP_PARSE_OK) {
            check_head(&h);
            http_head_free(&h);
        } else if (err.status < 400 || !err.code || !err.message) {
            abort();
        }
        if (http_resp_parse(in, head_len, &lim, &h, &err) == HTTP_PARSE_OK) {
            if (h.status < 100 || h.status > 599 || !h.reason || h.method ||
                h.chunked + h.until_close + (h.content_length >= 0) != 1)
                abort();
            http_head_free(&h);
        } else if (err.status < 400 || !err.code || !err.message) {
            abort();
        }
        body_at = head_len;
    }

    /* Whatever follows (or the whole input if no head) as a chunked body. */
    const char *body = in + body_at;
    size_t blen = len - body_at;
    char *a = malloc(blen + 1), *b = malloc(blen + 1);
    size_t alen, blen2, aused, bused;
    int va = chunked_all(body, blen, blen ? blen : 1, a, &alen, &aused);
    int vb = chunked_all(body, blen, step, b, &blen2, &bused);
    if (va != vb || alen != blen2 || memcmp(a, b, alen) != 0 || (va == 1 && aused != bused))
        abort();
    free(a);
    free(b);
    return 0;
}
