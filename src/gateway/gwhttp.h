/* gwhttp: the gateway's HTTP/1.x request checks and body framer for its port-80 proxy
 * and its TLS-terminating (credential injection) path. Pure code.
 *
 * Parsing is the project's one strict HTTP/1 parser (src/common/http_parse.h: heads by
 * http_head_parse, chunked bodies by http_chunked_decode), the same code spaced's
 * server runs; this module adds the gateway's own rules as checks on its result.
 * Every request on a connection goes through gwhttp_parse_head; its body is then
 * delimited with gwhttp_body_* so the next head is found exactly where the upstream
 * server will find it (no request smuggling). Refused outright: obsolete line folding,
 * bare LF, header names with spaces, more than one Host, Content-Length together with
 * Transfer-Encoding, any Transfer-Encoding but "chunked", non-numeric or repeated
 * Content-Length, CONNECT, HTTP/2 prior knowledge, Upgrade other than websocket
 * (so h2c is refused), targets that are not origin-, absolute-(http://) or *-form, and
 * an absolute-form target whose host differs from Host. */
#ifndef SPACE_GW_HTTP_H
#define SPACE_GW_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "http_parse.h"
#include "policy.h"

#define GWHTTP_HEAD_MAX 16384
#define GWHTTP_HEADERS_MAX 100

enum gwhttp_result {
    GWHTTP_OK = 0,
    GWHTTP_NEED_MORE,
    GWHTTP_BAD,        /* malformed or ambiguous: 400 */
    GWHTTP_TOO_LARGE,  /* head longer than GWHTTP_HEAD_MAX: 431 */
    GWHTTP_FORBIDDEN,  /* CONNECT, h2c, other upgrades, HTTP/2 preface: 403 */
};

struct gwhttp_header {
    size_t off;      /* start of the line in the head */
    size_t len;      /* line length including CRLF */
    size_t name_len; /* length of the name (before ':') */
};

struct gwhttp_req {
    char host[POLICY_NAME_MAX + 1]; /* normalised Host (without port) */
    uint16_t port;                  /* port given in Host, 0 if none */
    size_t head_len;                /* bytes of the head including the blank line */
    int64_t content_length;         /* -1 if absent */
    bool chunked;                   /* Transfer-Encoding: chunked */
    bool websocket;                 /* Upgrade: websocket (stream becomes opaque after 101) */
    size_t nheaders;
    struct gwhttp_header headers[GWHTTP_HEADERS_MAX];
    const char *why;                /* short reason when the result is not OK */
};

enum gwhttp_result gwhttp_parse_head(const char *buf, size_t n, struct gwhttp_req *r);

/* Body framing: feed bytes, learn how many belong to the current request's body. A
 * chunked body is decoded by the project's one chunked decoder (http_chunked_decode in
 * src/common/http_parse.c: strict hex sizes of at most 16 digits, CRLF everywhere, no
 * control byte in extensions or trailers, trailers bounded to 8 KiB). */
struct gwhttp_body {
    int state;                   /* internal: done, fixed length, chunked */
    uint64_t left;               /* Content-Length bytes left */
    struct http_chunked chunked; /* chunked decoder state */
};

enum gwhttp_body_result { GWHTTP_BODY_MORE, GWHTTP_BODY_DONE, GWHTTP_BODY_BAD };

void gwhttp_body_init(struct gwhttp_body *b, const struct gwhttp_req *r);
/* Consumes up to n bytes of p; *used says how many belong to this body (forward them). */
enum gwhttp_body_result gwhttp_body_feed(struct gwhttp_body *b, const uint8_t *p, size_t n,
                                         size_t *used);
/* The same, one step at a time, for a proxy that re-frames the body: consumes framing
 * bytes (chunk-size lines, extensions, CRLFs, trailers) and at most one run of body
 * data, which is then the last *data of the *used bytes. A chunked body is thus
 * decoded: the data runs, in order, are its content. */
enum gwhttp_body_result gwhttp_body_next(struct gwhttp_body *b, const uint8_t *p, size_t n,
                                         size_t *used, size_t *data);

/* True if header i of r is named `name` (case-insensitive). */
bool gwhttp_header_is(const char *head, const struct gwhttp_header *h, const char *name);

#endif
