/* http_parse: pure, socket-free parsers for HTTP/1.x message heads (requests and
 * responses), chunked bodies and percent-encoding: the one HTTP/1 parser of the project.
 * spaced's server (src/daemon/http), the gateway (src/gateway/gwhttp.c: request heads,
 * chunked bodies) and the CLI's client (src/cli/cli_http.c: response heads, chunked
 * bodies) all use it, so they cannot disagree on where a message ends.
 *
 * This is where untrusted HTTP bytes are first validated; it is kept free of I/O so
 * it can be fuzzed (tests/fuzz/fuzz_http.c) and unit-tested directly. The rules are
 * strict on purpose (RFC 9112, resolving every ambiguity by rejecting), because a
 * parser that is lenient where a proxy in front is strict, or the reverse, is how
 * request smuggling happens:
 *   - lines end in CRLF; a bare CR or bare LF anywhere in the head is an error;
 *   - request line is exactly `method SP target SP HTTP/1.x`; methods are tokens;
 *   - field names are tokens with no whitespace before ':'; obs-fold is rejected;
 *     values hold no NUL/CR/LF (HTAB and obs-text allowed), OWS is trimmed;
 *   - Content-Length: digits only, at most once, no overflow; Transfer-Encoding: exactly
 *     "chunked" (HTTP/1.1 only), at most once, never together with Content-Length;
 *   - HTTP/1.1 requests need exactly one Host;
 *   - a response's status line is exactly `HTTP/1.x SP 3DIGIT [SP reason]`, the reason
 *     without control bytes; the same field and framing rules apply (no Host needed).
 * Callers with stricter rules of their own (the gateway) check them on the result.
 */
#ifndef SPACE_HTTP_PARSE_H
#define SPACE_HTTP_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One header field; both strings point into http_head.buf. */
struct http_field {
    const char *name;   /* as sent (case preserved) */
    const char *value;  /* OWS-trimmed */
};

/* A parsed request or response head. Everything points into `buf`, which the head
 * owns; buf is a byte-for-byte copy of the head with NULs written over separators, so
 * `field.name - buf` is the field line's offset in the original bytes. */
struct http_head {
    char *buf;                  /* owned copy of the head bytes, split with NULs */
    const char *method;         /* request: token; response: NULL */
    const char *target;         /* request: raw request target; response: NULL */
    int status;                 /* response: 100..599; request: 0 */
    const char *reason;         /* response: reason phrase (maybe ""); request: NULL */
    int version_minor;          /* 0 or 1 (HTTP/1.x) */
    struct http_field *fields;  /* owned array of nfields */
    unsigned nfields;
    int64_t content_length;     /* >= 0, or -1 when chunked (or, in a response, when the
                                   body runs until close); 0 in a request with neither */
    bool chunked;               /* Transfer-Encoding: chunked */
    bool until_close;           /* response without either: the body ends at EOF */
    bool keep_alive;            /* connection persists after this exchange */
    bool expect_continue;       /* Expect: 100-continue (requests) */
};

/* Limits the head parser enforces. */
struct http_parse_limits {
    size_t max_header_bytes;    /* whole head, request line to final CRLF */
    size_t max_target_bytes;    /* request target (response: the status line after the
                                   version) */
    unsigned max_headers;       /* number of fields */
};

/* Why a head or body was rejected: the HTTP status to answer and a machine code plus
 * a human message for the JSON error body. Strings are static. */
struct http_parse_error {
    int status;           /* 400, 413, 414, 431, 501, 505 */
    const char *code;     /* "bad_request", "header_too_large", ... */
    const char *message;  /* e.g. "duplicate Content-Length" */
};

enum http_parse_result {
    HTTP_PARSE_INCOMPLETE = 0,  /* need more bytes */
    HTTP_PARSE_OK = 1,          /* done */
    HTTP_PARSE_ERROR = -1,      /* invalid; see http_parse_error */
};

/* Looks for the end of a head (CRLFCRLF) in data[len]. *scan is the caller's resume
 * offset (start at 0, keep it between calls for the same head) so trickled bytes are
 * not rescanned. Returns HTTP_PARSE_OK with *head_len set (bytes up to and including
 * the blank line), HTTP_PARSE_INCOMPLETE, or HTTP_PARSE_ERROR when the head is already
 * too large (431) or its request line already exceeds the target limit (414). */
enum http_parse_result http_head_find_end(const char *data, size_t len,
                                          const struct http_parse_limits *lim, size_t *scan,
                                          size_t *head_len, struct http_parse_error *err);

/* Parses a complete head data[head_len] (as delimited by http_head_find_end). On
 * HTTP_PARSE_OK *out holds the result (free with http_head_free); on HTTP_PARSE_ERROR
 * *err says why and *out needs no freeing. Never returns INCOMPLETE. */
enum http_parse_result http_head_parse(const char *data, size_t head_len,
                                       const struct http_parse_limits *lim,
                                       struct http_head *out, struct http_parse_error *err);

/* The same for a response head (status line instead of request line). Transfer-Encoding
 * other than exactly "chunked", CL+TE, or a repeated or malformed Content-Length are
 * errors here too: a client must not guess where a response ends. */
enum http_parse_result http_resp_parse(const char *data, size_t head_len,
                                       const struct http_parse_limits *lim,
                                       struct http_head *out, struct http_parse_error *err);

/* Value of the first field named `name` (case-insensitive) in h, or NULL. */
const char *http_head_field(const struct http_head *h, const char *name);

/* Frees what a successful http_head_parse allocated; safe on a zeroed head. */
void http_head_free(struct http_head *h);

/* Value of hex digit c (either case), or -1: the one hex helper for HTTP code. */
int http_hexval(unsigned char c);

/* RFC 9110 token (tchar+): true for n >= 1 bytes of s that are all tchar. */
bool http_is_token(const char *s, size_t n);

/* Percent-decodes src[len] into a malloc'd NUL-terminated string (caller frees).
 * plus_space turns '+' into ' ' (query strings). Returns NULL on a malformed escape,
 * a %00 or raw NUL, or allocation failure. */
char *http_pct_decode(const char *src, size_t len, bool plus_space);

/* ---- chunked transfer decoding --------------------------------------------------- */

/* Incremental decoder state; zero-initialise (or http_chunked_init) before use. */
struct http_chunked {
    int state;             /* internal: where in the chunk grammar we are */
    uint64_t remaining;    /* payload bytes left in the current chunk */
    size_t line_bytes;     /* bytes of the current size/trailer line seen so far */
    size_t trailer_bytes;  /* total trailer bytes seen (bounded) */
    unsigned digits;       /* hex digits in the current size */
};

void http_chunked_init(struct http_chunked *d);

/* Feeds in[len]. Consumes a prefix, reporting it in *consumed, and reports at most one
 * payload span in[*data_off .. *data_off + *data_len) (inside the consumed prefix;
 * *data_len 0 if none). Call again with the unconsumed rest while it returns
 * HTTP_PARSE_INCOMPLETE and consumed > 0. Returns HTTP_PARSE_OK once the final CRLF
 * after the last chunk and trailers has been consumed (bytes after it belong to the
 * next request), HTTP_PARSE_ERROR on a malformed size line, missing CRLF, chunk size
 * overflow (> 2^62, or more than 16 digits), a size line above 4 KiB, a control byte
 * (but HTAB) in an extension or trailer, or trailers above 8 KiB (431). Trailers are
 * discarded. */
enum http_parse_result http_chunked_decode(struct http_chunked *d, const char *in, size_t len,
                                           size_t *consumed, size_t *data_off, size_t *data_len,
                                           struct http_parse_error *err);

#endif
