/* cli_http.c: blocking HTTP/1.1 client for the CLI; see cli_http.h. */
#include "cli_http.h"

#include "http_parse.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int cli_url_parse(const char *s, struct cli_url *u, char *err, size_t errlen)
{
    memset(u, 0, sizeof *u);
    if (strncmp(s, "http://", 7) != 0) {
        snprintf(err, errlen, "SPACE_URL must start with http:// (got %s)", s);
        return -1;
    }
    const char *h = s + 7, *end = h + strcspn(h, "/");
    const char *port = NULL, *hend = end;
    if (*h == '[') {
        const char *rb = memchr(h, ']', (size_t)(end - h));
        if (!rb) {
            snprintf(err, errlen, "bad IPv6 address in %s", s);
            return -1;
        }
        if (rb + 1 < end && rb[1] == ':')
            port = rb + 2;
        h++;
        hend = rb;
    } else {
        const char *colon = memchr(h, ':', (size_t)(end - h));
        if (colon) {
            port = colon + 1;
            hend = colon;
        }
    }
    size_t hl = (size_t)(hend - h), pl = port ? (size_t)(end - port) : 0;
    if (hl == 0 || hl >= sizeof u->host || (port && (pl == 0 || pl >= sizeof u->port)) ||
        (port && strspn(port, "0123456789") < pl) || (*end && strcmp(end, "/") != 0)) {
        snprintf(err, errlen, "cannot use URL %s (want http://host:port)", s);
        return -1;
    }
    memcpy(u->host, h, hl);
    if (port)
        memcpy(u->port, port, pl);
    else
        strcpy(u->port, "80");
    snprintf(u->hostport, sizeof u->hostport, "%s%s%s:%s", s[7] == '[' ? "[" : "", u->host,
             s[7] == '[' ? "]" : "", u->port);
    return 0;
}

int cli_http_connect(struct cli_conn *c, const struct cli_url *u, char *err, size_t errlen)
{
    memset(c, 0, sizeof *c);
    c->fd = -1;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICSERV};
    struct addrinfo *ai = NULL;
    int rc = getaddrinfo(u->host, u->port, &hints, &ai);
    if (rc != 0) {
        snprintf(err, errlen, "cannot resolve %s: %s", u->host, gai_strerror(rc));
        return -1;
    }
    int e = 0;
    for (struct addrinfo *a = ai; a && c->fd < 0; a = a->ai_next) {
        int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) {
            e = errno;
            continue;
        }
        if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
            c->fd = fd;
        } else {
            e = errno;
            close(fd);
        }
    }
    freeaddrinfo(ai);
    if (c->fd < 0) {
        snprintf(err, errlen, "cannot connect to %s: %s (is spaced running?)", u->hostport,
                 strerror(e));
        return -1;
    }
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return 0;
}

int cli_http_send(struct cli_conn *c, const void *data, size_t len)
{
    const char *p = data;
    while (len) {
        ssize_t n = send(c->fd, p, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

int cli_http_send_head(struct cli_conn *c, const struct cli_url *u, const char *method,
                       const char *path, const char *headers, int64_t body_len)
{
    char head[8192];
    int n = snprintf(head, sizeof head, "%s %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: space-cli\r\n"
                                        "Connection: close\r\n%s",
                     method, path, u->hostport, headers ? headers : "");
    if (n < 0 || (size_t)n >= sizeof head - 64)
        return -1;
    if (body_len >= 0)
        n += snprintf(head + n, sizeof head - (size_t)n, "Content-Length: %lld\r\n",
                      (long long)body_len);
    else if (body_len == -1)
        n += snprintf(head + n, sizeof head - (size_t)n, "Transfer-Encoding: chunked\r\n");
    n += snprintf(head + n, sizeof head - (size_t)n, "\r\n");
    return cli_http_send(c, head, (size_t)n);
}

int cli_http_send_chunk(struct cli_conn *c, const void *data, size_t len)
{
    char size[32];
    int n = snprintf(size, sizeof size, "%zx\r\n", len);
    if (cli_http_send(c, size, (size_t)n) < 0)
        return -1;
    if (len && cli_http_send(c, data, len) < 0)
        return -1;
    return cli_http_send(c, "\r\n", 2);
}

/* Reads more bytes into buf. Returns >0, 0 on EOF, -1 on error. */
static ssize_t fill(struct cli_conn *c)
{
    if (c->off && c->len)
        memmove(c->buf, c->buf + c->off, c->len);
    c->off = 0;
    if (c->len == sizeof c->buf)
        return -1;
    ssize_t n;
    do
        n = recv(c->fd, c->buf + c->len, sizeof c->buf - c->len, 0);
    while (n < 0 && errno == EINTR && !c->interruptible);
    if (n > 0)
        c->len += (size_t)n;
    return n;
}

static void consume(struct cli_conn *c, size_t n)
{
    c->off += n;
    c->len -= n;
    if (c->len == 0)
        c->off = 0;
}

/* Returns the offset of `pat` in the unconsumed bytes, reading more as needed, or -1. */
static long find(struct cli_conn *c, const char *pat, size_t limit)
{
    for (;;) {
        char *hit = memmem(c->buf + c->off, c->len, pat, strlen(pat));
        if (hit)
            return hit - (c->buf + c->off);
        if (c->len >= limit || fill(c) <= 0)
            return -1;
    }
}

/* The CLI's limits for a response head (c->head holds it with its NUL). */
static const struct http_parse_limits resp_limits = {
    .max_header_bytes = CLI_HEAD_MAX - 1, .max_target_bytes = CLI_HEAD_MAX, .max_headers = 100};

const char *cli_http_header(const struct cli_conn *c, const char *name, char *out, size_t cap)
{
    /* c->head passed http_resp_parse in cli_http_read_head; parse it again rather than
     * keep an allocation in the connection. */
    struct http_head h;
    struct http_parse_error perr;
    if (cap == 0 || http_resp_parse(c->head, strlen(c->head), &resp_limits, &h, &perr) != HTTP_PARSE_OK)
        return NULL;
    const char *v = http_head_field(&h, name);
    if (v)
        snprintf(out, cap, "%s", v);
    http_head_free(&h);
    return v ? out : NULL;
}

int cli_http_read_head(struct cli_conn *c, char *err, size_t errlen)
{
    struct http_head h;
    for (;;) {
        long end = find(c, "\r\n\r\n", sizeof c->buf);
        if (end < 0 || (size_t)end + 4 >= sizeof c->head) {
            snprintf(err, errlen, "connection closed or bad response from the server");
            return -1;
        }
        size_t n = (size_t)end + 4;
        struct http_parse_error perr;
        if (http_resp_parse(c->buf + c->off, n, &resp_limits, &h, &perr) != HTTP_PARSE_OK) {
            snprintf(err, errlen, "bad response from the server: %s", perr.message);
            return -1;
        }
        memcpy(c->head, c->buf + c->off, n);
        c->head[n] = '\0';
        consume(c, n);
        c->status = h.status;
        if (c->status >= 200)
            break;
        http_head_free(&h);
    }
    c->chunked = h.chunked;
    c->until_close = false;
    c->body_done = false;
    c->left = 0;
    http_chunked_init(&c->chunk);
    if (c->status == 204 || c->status == 304)
        c->body_done = true;
    else if (h.until_close)
        c->until_close = true;
    else if (!h.chunked)
        c->left = h.content_length;
    c->body_done |= !c->chunked && !c->until_close && c->left == 0;
    http_head_free(&h);
    return 0;
}

/* Reads decoded bytes of a chunked body through the shared decoder. The decoder is
 * given at most cap bytes, so the data span it reports always fits in out. */
static ssize_t read_chunked(struct cli_conn *c, char *out, size_t cap)
{
    for (;;) {
        if (c->len == 0 && fill(c) <= 0)
            return -1;
        size_t consumed, off, n;
        struct http_parse_error perr;
        enum http_parse_result r = http_chunked_decode(&c->chunk, c->buf + c->off,
                                                       c->len < cap ? c->len : cap, &consumed,
                                                       &off, &n, &perr);
        if (r == HTTP_PARSE_ERROR)
            return -1;
        memcpy(out, c->buf + c->off + off, n);
        consume(c, consumed);
        if (r == HTTP_PARSE_OK)
            c->body_done = true;
        if (n || c->body_done)
            return (ssize_t)n;
    }
}

ssize_t cli_http_read_body(struct cli_conn *c, char *out, size_t cap)
{
    if (c->body_done || cap == 0)
        return 0;
    if (c->chunked)
        return read_chunked(c, out, cap);
    if (c->len == 0) {
        ssize_t n = fill(c);
        if (n == 0 && c->until_close) {
            c->body_done = true;
            return 0;
        }
        if (n <= 0)
            return -1;
    }
    size_t take = c->len < cap ? c->len : cap;
    if (!c->until_close && (int64_t)take > c->left)
        take = (size_t)c->left;
    memcpy(out, c->buf + c->off, take);
    consume(c, take);
    if (!c->until_close) {
        c->left -= (int64_t)take;
        if (c->left == 0)
            c->body_done = true;
    }
    return (ssize_t)take;
}

char *cli_http_read_all(struct cli_conn *c, size_t max, size_t *len)
{
    size_t cap = 4096, used = 0;
    char *out = malloc(cap);
    while (out) {
        if (used + 1 >= cap) {
            char *grown = cap < max + 1 ? realloc(out, cap * 2) : NULL;
            if (!grown)
                break;
            out = grown;
            cap *= 2;
        }
        ssize_t n = cli_http_read_body(c, out + used, cap - used - 1);
        if (n < 0)
            break;
        if (n == 0) {
            out[used] = '\0';
            if (len)
                *len = used;
            return out;
        }
        used += (size_t)n;
        if (used > max)
            break;
    }
    free(out);
    return NULL;
}

void cli_http_close(struct cli_conn *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
}
