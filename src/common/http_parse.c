/* http_parse.c: strict HTTP/1 head parser, chunked decoder and percent-decoder; see
 * http_parse.h. */
#include "http_parse.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Chunked decoder states. */
enum {
    CH_SIZE = 0,     /* reading hex digits of a chunk size */
    CH_EXT,          /* inside ";ext" after the size, up to CR */
    CH_SIZE_LF,      /* saw CR after the size line, need LF */
    CH_DATA,         /* payload bytes of the current chunk */
    CH_DATA_CR,      /* need CR after the payload */
    CH_DATA_LF,      /* need LF after the payload */
    CH_TRAILER,      /* inside a trailer line (or at its start) */
    CH_TRAILER_LF,   /* saw CR ending a trailer line, need LF */
};

#define CHUNK_LINE_MAX 4096          /* size line incl. extensions */
#define CHUNK_TRAILER_MAX 8192       /* all trailer lines together */
#define CHUNK_SIZE_MAX (1ULL << 62)  /* far beyond any body we accept; stops overflow */
#define CHUNK_DIGITS_MAX 16

static enum http_parse_result fail(struct http_parse_error *err, int status, const char *code,
                                   const char *message)
{
    if (err) {
        err->status = status;
        err->code = code;
        err->message = message;
    }
    return HTTP_PARSE_ERROR;
}

#define BAD(msg) fail(err, 400, "bad_request", msg)

/* RFC 9110 tchar. */
static bool is_tchar(unsigned char c)
{
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
        return true;
    return c && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

bool http_is_token(const char *s, size_t n)
{
    if (n == 0)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!is_tchar((unsigned char)s[i]))
            return false;
    return true;
}

enum http_parse_result http_head_find_end(const char *data, size_t len,
                                          const struct http_parse_limits *lim, size_t *scan,
                                          size_t *head_len, struct http_parse_error *err)
{
    size_t i = *scan > 3 ? *scan - 3 : 0;
    const char *end = len >= 4 ? memmem(data + i, len - i, "\r\n\r\n", 4) : NULL;
    size_t found = end ? (size_t)(end - data) + 4 : 0;
    if (end && found <= lim->max_header_bytes) {
        *head_len = found;
        return HTTP_PARSE_OK;
    }
    *scan = len;
    /* Reject early so a slow client cannot make us hold a huge request line: the
     * request line ends at the first CRLF; without one, everything so far belongs to it. */
    const char *eol = memchr(data, '\n', len);
    size_t line = eol ? (size_t)(eol - data) : len;
    const char *sp = memchr(data, ' ', line);
    if (sp && line - (size_t)(sp - data) > lim->max_target_bytes + 16)
        return fail(err, 414, "uri_too_long", "request target too long");
    if (end || len >= lim->max_header_bytes)
        return fail(err, 431, "header_too_large", "request head too large");
    return HTTP_PARSE_INCOMPLETE;
}

void http_head_free(struct http_head *h)
{
    free(h->buf);
    free(h->fields);
    memset(h, 0, sizeof *h);
}

/* Parses decimal Content-Length; false on anything but 1..18 digits. */
static bool parse_length(const char *s, int64_t *out)
{
    size_t n = strlen(s);
    if (n == 0 || n > 18)
        return false;
    int64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return true;
}

/* True if comma-separated list `v` holds token `tok` (case-insensitive). */
static bool list_has(const char *v, const char *tok)
{
    size_t tl = strlen(tok);
    while (*v) {
        while (*v == ' ' || *v == '\t' || *v == ',')
            v++;
        const char *e = v;
        while (*e && *e != ',')
            e++;
        const char *t = e;
        while (t > v && (t[-1] == ' ' || t[-1] == '\t'))
            t--;
        if ((size_t)(t - v) == tl && strncasecmp(v, tok, tl) == 0)
            return true;
        v = e;
    }
    return false;
}

/* Validates the request line "METHOD SP target SP HTTP/1.x" in-place (line is
 * NUL-terminated, CRLF removed). */
static enum http_parse_result parse_request_line(char *line, const struct http_parse_limits *lim,
                                                 struct http_head *h,
                                                 struct http_parse_error *err)
{
    char *sp1 = strchr(line, ' ');
    if (!sp1)
        return BAD("malformed request line");
    char *target = sp1 + 1;
    char *sp2 = strchr(target, ' ');
    if (!sp2)
        return BAD("malformed request line");
    char *version = sp2 + 1;
    if (strchr(version, ' '))
        return BAD("malformed request line");
    *sp1 = '\0';
    *sp2 = '\0';
    size_t mlen = (size_t)(sp1 - line);
    if (!http_is_token(line, mlen) || mlen > 32)
        return BAD("invalid method");
    size_t tlen = (size_t)(sp2 - target);
    if (tlen > lim->max_target_bytes)
        return fail(err, 414, "uri_too_long", "request target too long");
    if (tlen == 0)
        return BAD("empty request target");
    for (size_t i = 0; i < tlen; i++) {
        unsigned char c = (unsigned char)target[i];
        if (c <= 0x20 || c >= 0x7f)
            return BAD("invalid byte in request target");
    }
    if (strncmp(version, "HTTP/", 5) != 0 || strlen(version) != 8 || version[6] != '.' ||
        version[5] < '0' || version[5] > '9' || version[7] < '0' || version[7] > '9')
        return BAD("malformed HTTP version");
    if (version[5] != '1')
        return fail(err, 505, "version_not_supported", "only HTTP/1.0 and HTTP/1.1 are supported");
    if (version[7] > '1')
        return fail(err, 505, "version_not_supported", "only HTTP/1.0 and HTTP/1.1 are supported");
    h->method = line;
    h->target = target;
    h->version_minor = version[7] - '0';
    return HTTP_PARSE_OK;
}

/* Validates the status line "HTTP/1.x SP 3DIGIT [SP reason]" in place. */
static enum http_parse_result parse_status_line(char *line, struct http_head *h,
                                                struct http_parse_error *err)
{
    if (strncmp(line, "HTTP/1.", 7) != 0 || (line[7] != '0' && line[7] != '1') ||
        line[8] != ' ')
        return BAD("malformed status line");
    const char *code = line + 9;
    if (code[0] < '1' || code[0] > '5' || code[1] < '0' || code[1] > '9' || code[2] < '0' ||
        code[2] > '9' || (code[3] != ' ' && code[3] != '\0'))
        return BAD("malformed status code");
    const char *reason = code[3] ? code + 4 : code + 3;
    for (const char *p = reason; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if ((c < 0x20 && c != '\t') || c == 0x7f)
            return BAD("invalid byte in reason phrase");
    }
    h->status = (code[0] - '0') * 100 + (code[1] - '0') * 10 + (code[2] - '0');
    h->reason = reason;
    h->version_minor = line[7] - '0';
    return HTTP_PARSE_OK;
}

/* Splits "name: value" in place and validates it. */
static enum http_parse_result parse_field(char *line, struct http_field *f,
                                          struct http_parse_error *err)
{
    if (line[0] == ' ' || line[0] == '\t')
        return BAD("obsolete line folding");
    char *colon = strchr(line, ':');
    if (!colon)
        return BAD("header line without ':'");
    if (!http_is_token(line, (size_t)(colon - line)))
        return BAD("invalid header name");
    *colon = '\0';
    char *v = colon + 1;
    while (*v == ' ' || *v == '\t')
        v++;
    char *e = v + strlen(v);
    while (e > v && (e[-1] == ' ' || e[-1] == '\t'))
        e--;
    *e = '\0';
    for (char *p = v; p < e; p++) {
        unsigned char c = (unsigned char)*p;
        if ((c < 0x20 && c != '\t') || c == 0x7f)
            return BAD("invalid byte in header value");
    }
    f->name = line;
    f->value = v;
    return HTTP_PARSE_OK;
}

/* Applies the framing and connection rules once all fields are known. */
static enum http_parse_result check_framing(struct http_head *h, struct http_parse_error *err)
{
    unsigned ncl = 0, nte = 0, nhost = 0;
    bool close = false, keep = false;
    h->content_length = 0;
    for (unsigned i = 0; i < h->nfields; i++) {
        const struct http_field *f = &h->fields[i];
        if (strcasecmp(f->name, "Content-Length") == 0) {
            if (++ncl > 1)
                return BAD("duplicate Content-Length");
            if (!parse_length(f->value, &h->content_length))
                return BAD("invalid Content-Length");
        } else if (strcasecmp(f->name, "Transfer-Encoding") == 0) {
            if (++nte > 1)
                return BAD("duplicate Transfer-Encoding");
            if (strcasecmp(f->value, "chunked") != 0)
                return fail(err, 501, "not_implemented", "only Transfer-Encoding: chunked is supported");
        } else if (strcasecmp(f->name, "Host") == 0) {
            if (++nhost > 1)
                return BAD("duplicate Host");
        } else if (strcasecmp(f->name, "Connection") == 0) {
            close |= list_has(f->value, "close");
            keep |= list_has(f->value, "keep-alive");
        } else if (!h->status && strcasecmp(f->name, "Expect") == 0) {
            if (strcasecmp(f->value, "100-continue") != 0)
                return fail(err, 417, "expectation_failed", "unsupported Expect");
            h->expect_continue = true;
        }
    }
    if (nte && ncl)
        return BAD("both Content-Length and Transfer-Encoding");
    if (nte && h->version_minor == 0)
        return BAD("Transfer-Encoding in an HTTP/1.0 message");
    if (!h->status && h->version_minor == 1 && nhost == 0)
        return BAD("missing Host header");
    if (nte) {
        h->chunked = true;
        h->content_length = -1;
    } else if (h->status && !ncl) {
        h->until_close = true;
        h->content_length = -1;
    }
    h->keep_alive = h->version_minor == 1 ? !close : (keep && !close);
    return HTTP_PARSE_OK;
}

/* Parses a request head (response false) or a response head (response true). */
static enum http_parse_result parse_head(const char *data, size_t head_len,
                                         const struct http_parse_limits *lim, bool response,
                                         struct http_head *out, struct http_parse_error *err)
{
    memset(out, 0, sizeof *out);
    if (head_len < 4 || head_len > lim->max_header_bytes ||
        memcmp(data + head_len - 4, "\r\n\r\n", 4) != 0)
        return BAD("incomplete message head");
    if (memchr(data, '\0', head_len))
        return BAD("NUL byte in message head");
    /* Every CR must start CRLF and every LF must end one; anything else is the bare CR
     * or LF that differently-lenient parsers split differently. */
    for (size_t i = 0; i < head_len; i++) {
        if (data[i] == '\r' && (i + 1 >= head_len || data[i + 1] != '\n'))
            return BAD("bare CR in message head");
        if (data[i] == '\n' && (i == 0 || data[i - 1] != '\r'))
            return BAD("bare LF in message head");
    }
    struct http_head h = {0};
    h.buf = malloc(head_len + 1);
    if (!h.buf)
        return fail(err, 503, "unavailable", "out of memory");
    memcpy(h.buf, data, head_len);
    h.buf[head_len] = '\0';
    /* Count lines to size the field array: one per CRLF minus request line and blank. */
    unsigned lines = 0;
    for (size_t i = 0; i < head_len; i++)
        lines += h.buf[i] == '\n';
    unsigned nfields_max = lines >= 2 ? lines - 2 : 0;
    if (nfields_max > lim->max_headers) {
        http_head_free(&h);
        return fail(err, 431, "header_too_large", "too many header fields");
    }
    h.fields = calloc(nfields_max ? nfields_max : 1, sizeof *h.fields);
    if (!h.fields) {
        http_head_free(&h);
        return fail(err, 503, "unavailable", "out of memory");
    }
    char *p = h.buf;
    char *eol = strstr(p, "\r\n");
    *eol = '\0';
    enum http_parse_result r =
        response ? parse_status_line(p, &h, err) : parse_request_line(p, lim, &h, err);
    p = eol + 2;
    while (r == HTTP_PARSE_OK && *p != '\r') {
        eol = strstr(p, "\r\n");
        *eol = '\0';
        r = parse_field(p, &h.fields[h.nfields], err);
        if (r == HTTP_PARSE_OK)
            h.nfields++;
        p = eol + 2;
    }
    if (r == HTTP_PARSE_OK)
        r = check_framing(&h, err);
    if (r != HTTP_PARSE_OK) {
        http_head_free(&h);
        return r;
    }
    *out = h;
    return HTTP_PARSE_OK;
}

enum http_parse_result http_head_parse(const char *data, size_t head_len,
                                       const struct http_parse_limits *lim,
                                       struct http_head *out, struct http_parse_error *err)
{
    return parse_head(data, head_len, lim, false, out, err);
}

enum http_parse_result http_resp_parse(const char *data, size_t head_len,
                                       const struct http_parse_limits *lim,
                                       struct http_head *out, struct http_parse_error *err)
{
    return parse_head(data, head_len, lim, true, out, err);
}

const char *http_head_field(const struct http_head *h, const char *name)
{
    for (unsigned i = 0; i < h->nfields; i++)
        if (strcasecmp(h->fields[i].name, name) == 0)
            return h->fields[i].value;
    return NULL;
}

int http_hexval(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

char *http_pct_decode(const char *src, size_t len, bool plus_space)
{
    char *out = malloc(len + 1);
    if (!out)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)src[i];
        if (c == '%') {
            int hi = i + 2 < len ? http_hexval((unsigned char)src[i + 1]) : -1;
            int lo = i + 2 < len ? http_hexval((unsigned char)src[i + 2]) : -1;
            if (hi < 0 || lo < 0 || (hi == 0 && lo == 0)) {
                free(out);
                return NULL;
            }
            out[o++] = (char)(hi * 16 + lo);
            i += 2;
        } else if (c == '\0') {
            free(out);
            return NULL;
        } else {
            out[o++] = plus_space && c == '+' ? ' ' : (char)c;
        }
    }
    out[o] = '\0';
    return out;
}

void http_chunked_init(struct http_chunked *d)
{
    memset(d, 0, sizeof *d);
}

enum http_parse_result http_chunked_decode(struct http_chunked *d, const char *in, size_t len,
                                           size_t *consumed, size_t *data_off, size_t *data_len,
                                           struct http_parse_error *err)
{
    size_t i = 0;
    *data_off = 0;
    *data_len = 0;
    while (i < len) {
        unsigned char c = (unsigned char)in[i];
        switch (d->state) {
        case CH_SIZE:
            if (http_hexval(c) >= 0) {
                if (++d->digits > CHUNK_DIGITS_MAX)
                    goto too_big;
                d->remaining = d->remaining * 16 + (uint64_t)http_hexval(c);
                if (d->remaining > CHUNK_SIZE_MAX)
                    goto too_big;
            } else if (d->digits == 0) {
                *consumed = i;
                return BAD("invalid chunk size");
            } else if (c == ';') {
                d->state = CH_EXT;
            } else if (c == '\r') {
                d->state = CH_SIZE_LF;
            } else {
                *consumed = i;
                return BAD("invalid chunk size");
            }
            if (++d->line_bytes > CHUNK_LINE_MAX) {
                *consumed = i;
                return BAD("chunk size line too long");
            }
            i++;
            break;
        case CH_EXT:
            /* Extensions are ignored but must stay on the line: no bare LF, no controls. */
            if (c == '\r') {
                d->state = CH_SIZE_LF;
            } else if ((c < 0x20 && c != '\t') || c == 0x7f) {
                *consumed = i;
                return BAD("invalid chunk extension");
            }
            if (++d->line_bytes > CHUNK_LINE_MAX) {
                *consumed = i;
                return BAD("chunk size line too long");
            }
            i++;
            break;
        case CH_SIZE_LF:
            if (c != '\n') {
                *consumed = i;
                return BAD("chunk size line without CRLF");
            }
            i++;
            d->line_bytes = 0;
            d->digits = 0;
            d->state = d->remaining ? CH_DATA : CH_TRAILER;
            break;
        case CH_DATA: {
            size_t n = len - i;
            if (n > d->remaining)
                n = (size_t)d->remaining;
            *data_off = i;
            *data_len = n;
            d->remaining -= n;
            i += n;
            if (d->remaining == 0)
                d->state = CH_DATA_CR;
            /* Hand the span back now: one span per call keeps the interface simple. */
            *consumed = i;
            return HTTP_PARSE_INCOMPLETE;
        }
        case CH_DATA_CR:
            if (c != '\r') {
                *consumed = i;
                return BAD("chunk data not followed by CRLF");
            }
            d->state = CH_DATA_LF;
            i++;
            break;
        case CH_DATA_LF:
            if (c != '\n') {
                *consumed = i;
                return BAD("chunk data not followed by CRLF");
            }
            d->state = CH_SIZE;
            i++;
            break;
        case CH_TRAILER:
            if (c == '\r') {
                d->state = CH_TRAILER_LF;
            } else if ((c < 0x20 && c != '\t') || c == 0x7f) {
                /* the field-value rule: no bare LF, NUL or other control byte */
                *consumed = i;
                return BAD("invalid byte in trailer");
            } else {
                d->line_bytes++;
            }
            if (++d->trailer_bytes > CHUNK_TRAILER_MAX) {
                *consumed = i;
                return fail(err, 431, "header_too_large", "chunked trailers too large");
            }
            i++;
            break;
        case CH_TRAILER_LF:
            if (c != '\n') {
                *consumed = i;
                return BAD("trailer line without CRLF");
            }
            i++;
            if (d->line_bytes == 0) {
                *consumed = i;
                return HTTP_PARSE_OK;
            }
            d->line_bytes = 0;
            d->state = CH_TRAILER;
            break;
        default:
            *consumed = i;
            return BAD("chunked decoder in invalid state");
        }
    }
    *consumed = i;
    return HTTP_PARSE_INCOMPLETE;

too_big:
    *consumed = i;
    return fail(err, 413, "payload_too_large", "chunk size too large");
}
