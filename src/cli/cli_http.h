/* cli_http: the CLI's tiny blocking HTTP/1.1 client (plain http:// only, one request per
 * connection, no libcurl). It sends a head and an optional body (fixed length or
 * chunked), then reads the response head and lets the caller pull the decoded body in
 * pieces, so downloads and event streams never need to fit in memory.
 *
 * Everything read from the server is length-checked and parsed by the project's one
 * HTTP/1 parser (src/common/http_parse.h): the response head by http_resp_parse
 * (bounded, strict status line and framing), a chunked body by http_chunked_decode, and
 * the body never exceeds what its framing declares. */
#ifndef SPACE_CLI_HTTP_H
#define SPACE_CLI_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "http_parse.h"

#define CLI_HEAD_MAX 16384

/* Where the server is: parsed from "http://host:port" (port defaults to 80). */
struct cli_url {
    char host[256];  /* name or address; IPv6 without brackets */
    char port[8];    /* decimal */
    char hostport[272]; /* as written for the Host header */
};

/* One connection carrying one exchange. */
struct cli_conn {
    int fd;                  /* owned socket, -1 when closed */
    char buf[16384];         /* bytes read but not consumed */
    size_t off, len;         /* unconsumed range buf[off .. off+len) */
    /* response framing, set by cli_http_read_head */
    int status;
    char head[CLI_HEAD_MAX]; /* response head text, NUL-terminated */
    bool chunked;            /* Transfer-Encoding: chunked */
    int64_t left;            /* Content-Length bytes left */
    struct http_chunked chunk; /* chunked body decoder */
    bool until_close;        /* no framing: body ends at EOF */
    bool body_done;          /* the body has been read to its end */
    bool interruptible;      /* a signal interrupting a read makes it fail with EINTR
                                (state intact: the read can be retried) */
};

/* Parses "http://host[:port][/]" into *u. Returns 0 or -1 (message in err). */
int cli_url_parse(const char *s, struct cli_url *u, char *err, size_t errlen);

/* Connects. Returns 0 or -1 with a message in err. */
int cli_http_connect(struct cli_conn *c, const struct cli_url *u, char *err, size_t errlen);

/* Sends a request head. headers: extra "Name: value" lines each ending in CRLF (or
 * NULL). body_len >= 0: Content-Length; -1: chunked body follows (use
 * cli_http_send_chunk); -2: no body. Returns 0 or -1. */
int cli_http_send_head(struct cli_conn *c, const struct cli_url *u, const char *method,
                       const char *path, const char *headers, int64_t body_len);

/* Writes raw body bytes (fixed-length bodies). Returns 0 or -1. */
int cli_http_send(struct cli_conn *c, const void *data, size_t len);

/* Writes one chunk of a chunked body; len 0 writes the last chunk. Returns 0 or -1. */
int cli_http_send_chunk(struct cli_conn *c, const void *data, size_t len);

/* Reads the response head (skipping 1xx interim responses). Returns 0 or -1. */
int cli_http_read_head(struct cli_conn *c, char *err, size_t errlen);

/* Value of a response header (first occurrence) copied into out, or NULL. */
const char *cli_http_header(const struct cli_conn *c, const char *name, char *out, size_t cap);

/* Reads up to cap decoded body bytes. Returns the count, 0 at the end of the body, -1
 * on a broken connection or malformed framing. */
ssize_t cli_http_read_body(struct cli_conn *c, char *out, size_t cap);

/* Reads the whole body (at most max bytes) into a malloc'd NUL-terminated string
 * (caller frees). Returns NULL on error or when larger than max. */
char *cli_http_read_all(struct cli_conn *c, size_t max, size_t *len);

void cli_http_close(struct cli_conn *c);

#endif
