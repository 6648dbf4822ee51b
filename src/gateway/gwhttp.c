/* gwhttp.c: HTTP/1.x request heads and body framing; see gwhttp.h. */
#include "gwhttp.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static enum gwhttp_result fail(struct gwhttp_req *r, enum gwhttp_result res, const char *why)
{
    r->why = why;
    return res;
}

bool gwhttp_header_is(const char *head, const struct gwhttp_header *h, const char *name)
{
    return h->name_len == strlen(name) && strncasecmp(head + h->off, name, h->name_len) == 0;
}

/* Parses "host[:port]" of len bytes into out/port. */
static int parse_authority(const char *s, size_t len, char *out, uint16_t *port)
{
    const char *colon = memchr(s, ':', len);
    size_t hlen = colon ? (size_t)(colon - s) : len;
    *port = 0;
    if (colon) {
        size_t plen = len - hlen - 1;
        unsigned v = 0;
        if (plen == 0 || plen > 5)
            return -1;
        for (size_t i = 0; i < plen; i++) {
            if (!isdigit((unsigned char)colon[1 + i]))
                return -1;
            v = v * 10 + (unsigned)(colon[1 + i] - '0');
        }
        if (v == 0 || v > 65535)
            return -1;
        *port = (uint16_t)v;
    }
    return policy_name_normalise(s, hlen, out);
}

/* Does the comma-separated value contain `token` (case-insensitive)? */
static bool list_has(const char *v, size_t len, const char *token)
{
    size_t tl = strlen(token);
    for (size_t i = 0; i < len;) {
        while (i < len && (v[i] == ' ' || v[i] == '\t' || v[i] == ','))
            i++;
        size_t s = i;
        while (i < len && v[i] != ',')
            i++;
        size_t e = i;
        while (e > s && (v[e - 1] == ' ' || v[e - 1] == '\t'))
            e--;
        if (e - s == tl && strncasecmp(v + s, token, tl) == 0)
            return true;
    }
    return false;
}

static enum gwhttp_result parse_request_line(const char *b, size_t len, struct gwhttp_req *r,
                                             char *abs_host, uint16_t *abs_port)
{
    const char *sp1 = memchr(b, ' ', len);
    if (!sp1 || sp1 == b)
        return fail(r, GWHTTP_BAD, "request_line");
    if (!http_is_token(b, (size_t)(sp1 - b)))
        return fail(r, GWHTTP_BAD, "method");
    size_t mlen = (size_t)(sp1 - b);
    if (mlen == 7 && memcmp(b, "CONNECT", 7) == 0)
        return fail(r, GWHTTP_FORBIDDEN, "connect");
    if (mlen == 3 && memcmp(b, "PRI", 3) == 0)
        return fail(r, GWHTTP_FORBIDDEN, "h2_preface");
    const char *target = sp1 + 1;
    const char *sp2 = memchr(target, ' ', len - mlen - 1);
    if (!sp2 || sp2 == target)
        return fail(r, GWHTTP_BAD, "request_line");
    size_t tlen = (size_t)(sp2 - target), vlen = len - (size_t)(sp2 + 1 - b);
    if (vlen != 8 || (memcmp(sp2 + 1, "HTTP/1.1", 8) != 0 && memcmp(sp2 + 1, "HTTP/1.0", 8) != 0))
        return fail(r, GWHTTP_BAD, "version");
    for (size_t i = 0; i < tlen; i++)
        if ((unsigned char)target[i] <= 0x20 || (unsigned char)target[i] >= 0x7f)
            return fail(r, GWHTTP_BAD, "target");
    abs_host[0] = '\0';
    if (target[0] == '/' || (tlen == 1 && target[0] == '*'))
        return GWHTTP_OK;
    if (tlen > 7 && strncasecmp(target, "http://", 7) == 0) {
        const char *auth = target + 7;
        size_t alen = strcspn(auth, "/?# ");
        if (alen > (size_t)(sp2 - auth))
            alen = (size_t)(sp2 - auth);
        if (memchr(auth, '@', alen))
            return fail(r, GWHTTP_BAD, "userinfo");
        if (parse_authority(auth, alen, abs_host, abs_port) != 0)
            return fail(r, GWHTTP_BAD, "absolute_host");
        return GWHTTP_OK;
    }
    return fail(r, GWHTTP_BAD, "target_form");
}

enum gwhttp_result gwhttp_parse_head(const char *b, size_t n, struct gwhttp_req *r)
{
    memset(r, 0, sizeof *r);
    r->content_length = -1;
    if (n >= 3 && memcmp(b, "PRI", 3) == 0)
        return fail(r, GWHTTP_FORBIDDEN, "h2_preface");
    /* Find the end of the head first; until then nothing is decided. */
    size_t end = 0;
    for (size_t i = 0; i + 3 < n && i + 4 <= GWHTTP_HEAD_MAX; i++)
        if (b[i] == '\r' && b[i + 1] == '\n' && b[i + 2] == '\r' && b[i + 3] == '\n') {
            end = i + 4;
            break;
        }
    if (!end)
        return n >= GWHTTP_HEAD_MAX ? fail(r, GWHTTP_TOO_LARGE, "head_too_large") : GWHTTP_NEED_MORE;
    r->head_len = end;
    char abs_host[POLICY_NAME_MAX + 1];
    uint16_t abs_port = 0;
    int hosts = 0, cls = 0, tes = 0;
    bool upgrade = false;
    size_t off = 0;
    for (size_t line = 0;; line++) {
        const char *eol = memchr(b + off, '\n', end - off);
        if (!eol || eol == b + off || eol[-1] != '\r')
            return fail(r, GWHTTP_BAD, "bare_lf");
        size_t len = (size_t)(eol - 1 - (b + off));
        const char *s = b + off;
        for (size_t i = 0; i < len; i++)
            if (s[i] == '\r' || s[i] == '\n' || s[i] == '\0')
                return fail(r, GWHTTP_BAD, "control_char");
        if (line == 0) {
            enum gwhttp_result e = parse_request_line(s, len, r, abs_host, &abs_port);
            if (e != GWHTTP_OK)
                return e;
        } else if (len == 0) {
            break;
        } else {
            if (s[0] == ' ' || s[0] == '\t')
                return fail(r, GWHTTP_BAD, "obs_fold");
            const char *colon = memchr(s, ':', len);
            if (!colon || colon == s)
                return fail(r, GWHTTP_BAD, "header");
            if (!http_is_token(s, (size_t)(colon - s)))
                return fail(r, GWHTTP_BAD, "header_name");
            if (r->nheaders == GWHTTP_HEADERS_MAX)
                return fail(r, GWHTTP_TOO_LARGE, "too_many_headers");
            struct gwhttp_header *h = &r->headers[r->nheaders++];
            h->off = off;
            h->len = len + 2;
            h->name_len = (size_t)(colon - s);
            const char *v = colon + 1;
            size_t vlen = len - h->name_len - 1;
            while (vlen && (*v == ' ' || *v == '\t'))
                v++, vlen--;
            while (vlen && (v[vlen - 1] == ' ' || v[vlen - 1] == '\t'))
                vlen--;
            if (gwhttp_header_is(b, h, "Host")) {
                if (++hosts > 1 || parse_authority(v, vlen, r->host, &r->port) != 0)
                    return fail(r, GWHTTP_BAD, "host");
            } else if (gwhttp_header_is(b, h, "Content-Length")) {
                if (++cls > 1 || vlen == 0 || vlen > 15)
                    return fail(r, GWHTTP_BAD, "content_length");
                int64_t cl = 0;
                for (size_t i = 0; i < vlen; i++) {
                    if (!isdigit((unsigned char)v[i]))
                        return fail(r, GWHTTP_BAD, "content_length");
                    cl = cl * 10 + (v[i] - '0');
                }
                r->content_length = cl;
            } else if (gwhttp_header_is(b, h, "Transfer-Encoding")) {
                if (++tes > 1 || vlen != 7 || strncasecmp(v, "chunked", 7) != 0)
                    return fail(r, GWHTTP_BAD, "transfer_encoding");
                r->chunked = true;
            } else if (gwhttp_header_is(b, h, "Upgrade")) {
                if (list_has(v, vlen, "h2c"))
                    return fail(r, GWHTTP_FORBIDDEN, "h2c");
                if (upgrade || vlen != 9 || strncasecmp(v, "websocket", 9) != 0)
                    return fail(r, GWHTTP_FORBIDDEN, "upgrade");
                upgrade = true;
            } else if (gwhttp_header_is(b, h, "HTTP2-Settings")) {
                return fail(r, GWHTTP_FORBIDDEN, "h2c");
            }
        }
        off = (size_t)(eol + 1 - b);
    }
    if (hosts != 1)
        return fail(r, GWHTTP_BAD, "host");
    if (cls && tes)
        return fail(r, GWHTTP_BAD, "cl_and_te");
    if (abs_host[0] && (strcmp(abs_host, r->host) != 0 || abs_port != r->port))
        return fail(r, GWHTTP_FORBIDDEN, "absolute_uri_host");
    r->websocket = upgrade;
    return GWHTTP_OK;
}

enum { B_DONE, B_FIXED, B_CHUNKED };

void gwhttp_body_init(struct gwhttp_body *b, const struct gwhttp_req *r)
{
    memset(b, 0, sizeof *b);
    if (r->chunked) {
        b->state = B_CHUNKED;
        http_chunked_init(&b->chunked);
    } else if (r->content_length > 0) {
        b->state = B_FIXED;
        b->left = (uint64_t)r->content_length;
    } else {
        b->state = B_DONE;
    }
}

enum gwhttp_body_result gwhttp_body_next(struct gwhttp_body *b, const uint8_t *p, size_t n,
                                         size_t *used, size_t *data)
{
    *used = *data = 0;
    if (b->state == B_FIXED && n) {
        size_t k = n < b->left ? n : (size_t)b->left;
        b->left -= k;
        if (b->left == 0)
            b->state = B_DONE;
        *used = *data = k;
    } else if (b->state == B_CHUNKED && n) {
        /* The shared decoder reports at most one data span per call and returns right
         * after it, so the span is the tail of what it consumed, as promised above. */
        size_t off, len;
        struct http_parse_error err;
        enum http_parse_result r =
            http_chunked_decode(&b->chunked, (const char *)p, n, used, &off, &len, &err);
        *data = len;
        if (r == HTTP_PARSE_ERROR)
            return GWHTTP_BODY_BAD;
        if (r == HTTP_PARSE_OK)
            b->state = B_DONE;
    }
    return b->state == B_DONE ? GWHTTP_BODY_DONE : GWHTTP_BODY_MORE;
}

enum gwhttp_body_result gwhttp_body_feed(struct gwhttp_body *b, const uint8_t *p, size_t n,
                                         size_t *used)
{
    size_t off = 0, k, data;
    enum gwhttp_body_result r;
    do {
        r = gwhttp_body_next(b, p ? p + off : p, n - off, &k, &data);
        off += k;
    } while (r == GWHTTP_BODY_MORE && off < n);
    *used = off;
    return r;
}
