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

/* The gateway's rules for the request line the shared parser accepted: CONNECT and the
 * HTTP/2 preface are refused, the target must be origin-, absolute-(http://) or
 * *-form; an absolute-form authority is returned in abs_host/abs_port. */
static enum gwhttp_result check_target(const struct http_head *h, struct gwhttp_req *r,
                                       char *abs_host, uint16_t *abs_port)
{
    if (strcmp(h->method, "CONNECT") == 0)
        return fail(r, GWHTTP_FORBIDDEN, "connect");
    if (strcmp(h->method, "PRI") == 0)
        return fail(r, GWHTTP_FORBIDDEN, "h2_preface");
    const char *target = h->target;
    size_t tlen = strlen(target);
    abs_host[0] = '\0';
    if (target[0] == '/' || strcmp(target, "*") == 0)
        return GWHTTP_OK;
    if (tlen > 7 && strncasecmp(target, "http://", 7) == 0) {
        const char *auth = target + 7;
        size_t alen = strcspn(auth, "/?#");
        if (memchr(auth, '@', alen))
            return fail(r, GWHTTP_BAD, "userinfo");
        if (parse_authority(auth, alen, abs_host, abs_port) != 0)
            return fail(r, GWHTTP_BAD, "absolute_host");
        return GWHTTP_OK;
    }
    return fail(r, GWHTTP_BAD, "target_form");
}

/* The gateway's rules for the fields: exactly one Host that parses as host[:port],
 * Content-Length of at most 15 digits, Upgrade only to websocket (never h2c), no
 * HTTP2-Settings; records each field line's place in the original bytes. */
static enum gwhttp_result check_fields(const char *b, const struct http_head *h,
                                       struct gwhttp_req *r)
{
    bool upgrade = false;
    int hosts = 0;
    for (unsigned i = 0; i < h->nfields; i++) {
        const struct http_field *f = &h->fields[i];
        /* h->buf is a byte-for-byte copy of b: offsets carry over. */
        struct gwhttp_header *gh = &r->headers[r->nheaders++];
        gh->off = (size_t)(f->name - h->buf);
        gh->name_len = strlen(f->name);
        gh->len = (size_t)((const char *)memmem(b + gh->off, r->head_len - gh->off, "\r\n", 2) -
                           (b + gh->off)) + 2;
        size_t vlen = strlen(f->value);
        if (strcasecmp(f->name, "Host") == 0) {
            if (++hosts > 1 || parse_authority(f->value, vlen, r->host, &r->port) != 0)
                return fail(r, GWHTTP_BAD, "host");
        } else if (strcasecmp(f->name, "Content-Length") == 0) {
            if (vlen > 15)
                return fail(r, GWHTTP_BAD, "content_length");
        } else if (strcasecmp(f->name, "Upgrade") == 0) {
            if (list_has(f->value, vlen, "h2c"))
                return fail(r, GWHTTP_FORBIDDEN, "h2c");
            if (upgrade || strcasecmp(f->value, "websocket") != 0)
                return fail(r, GWHTTP_FORBIDDEN, "upgrade");
            upgrade = true;
        } else if (strcasecmp(f->name, "HTTP2-Settings") == 0) {
            return fail(r, GWHTTP_FORBIDDEN, "h2c");
        }
    }
    if (hosts != 1)
        return fail(r, GWHTTP_BAD, "host");
    r->websocket = upgrade;
    return GWHTTP_OK;
}

/* Limits for the shared parser: the head bound is the gateway's; the target is bounded
 * only by the head. */
static const struct http_parse_limits gw_limits = {
    .max_header_bytes = GWHTTP_HEAD_MAX, .max_target_bytes = GWHTTP_HEAD_MAX,
    .max_headers = GWHTTP_HEADERS_MAX};

enum gwhttp_result gwhttp_parse_head(const char *b, size_t n, struct gwhttp_req *r)
{
    memset(r, 0, sizeof *r);
    r->content_length = -1;
    if (n >= 3 && memcmp(b, "PRI", 3) == 0)
        return fail(r, GWHTTP_FORBIDDEN, "h2_preface");
    /* Find the end of the head first; until then nothing is decided. */
    size_t scan = 0, end = 0;
    struct http_parse_error err;
    enum http_parse_result pr = http_head_find_end(b, n, &gw_limits, &scan, &end, &err);
    if (pr == HTTP_PARSE_INCOMPLETE)
        return GWHTTP_NEED_MORE;
    if (pr == HTTP_PARSE_ERROR)
        return fail(r, GWHTTP_TOO_LARGE, "head_too_large");
    r->head_len = end;
    /* The shared strict parser: CRLF only (no bare CR/LF), no obs-fold, token names,
     * no control bytes in values, HTTP/1.0 or 1.1, one Content-Length of digits, TE
     * exactly "chunked" and never with Content-Length or in HTTP/1.0, one Host. */
    struct http_head h;
    if (http_head_parse(b, end, &gw_limits, &h, &err) != HTTP_PARSE_OK)
        return fail(r, err.status == 431 || err.status == 414 || err.status == 413
                           ? GWHTTP_TOO_LARGE : GWHTTP_BAD, err.message);
    char abs_host[POLICY_NAME_MAX + 1];
    uint16_t abs_port = 0;
    enum gwhttp_result res = check_target(&h, r, abs_host, &abs_port);
    if (res == GWHTTP_OK)
        res = check_fields(b, &h, r);
    if (res == GWHTTP_OK && abs_host[0] && (strcmp(abs_host, r->host) != 0 || abs_port != r->port))
        res = fail(r, GWHTTP_FORBIDDEN, "absolute_uri_host");
    if (res == GWHTTP_OK) {
        r->chunked = h.chunked;
        if (!h.chunked && http_head_field(&h, "Content-Length"))
            r->content_length = h.content_length;
    }
    http_head_free(&h);
    return res;
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
