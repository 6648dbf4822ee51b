/* sse.c: text/event-stream framing over http streams; see sse.h. */
#include "sse.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int sse_start(struct http_req *req)
{
    if (http_reply_add_header(req, "Cache-Control", "no-cache") < 0 ||
        http_reply_add_header(req, "X-Accel-Buffering", "no") < 0)
        return -1;
    return http_stream_start(req, 200, "text/event-stream", -1);
}

long sse_format(int64_t id, const char *event, const char *data, size_t len, char **out)
{
    *out = NULL;
    if (event && strpbrk(event, "\r\n"))
        return -1;
    if (len && memchr(data, '\0', len))
        return -1;
    /* Worst case: every byte a line break, each becoming "\ndata: ". */
    size_t cap = 64 + (event ? strlen(event) : 0) + len * 7 + 8;
    char *buf = malloc(cap);
    if (!buf)
        return -1;
    size_t o = 0;
    if (id >= 0)
        o += (size_t)snprintf(buf + o, cap - o, "id: %" PRId64 "\n", id);
    if (event)
        o += (size_t)snprintf(buf + o, cap - o, "event: %s\n", event);
    size_t i = 0;
    for (;;) {
        size_t s = i;
        while (i < len && data[i] != '\r' && data[i] != '\n')
            i++;
        memcpy(buf + o, "data: ", 6);
        o += 6;
        memcpy(buf + o, data + s, i - s);
        o += i - s;
        buf[o++] = '\n';
        if (i >= len)
            break;
        /* CRLF is one line break; a lone CR or LF is one too. */
        if (data[i] == '\r' && i + 1 < len && data[i + 1] == '\n')
            i++;
        i++;
    }
    buf[o++] = '\n';
    *out = buf;
    return (long)o;
}

int sse_send(struct http_req *req, int64_t id, const char *event, const char *data, size_t len)
{
    char *buf;
    long n = sse_format(id, event, data, len, &buf);
    if (n < 0)
        return -1;
    int rc = http_stream_write(req, buf, (size_t)n);
    free(buf);
    return rc;
}

int sse_keepalive(struct http_req *req)
{
    return http_stream_write(req, ": keepalive\n\n", 13);
}

int64_t sse_last_event_id(const struct http_req *req)
{
    const char *v = http_req_header(req, "Last-Event-ID");
    if (!v || !*v || strlen(v) > 18 || strspn(v, "0123456789") != strlen(v))
        return -1;
    return strtoll(v, NULL, 10);
}
