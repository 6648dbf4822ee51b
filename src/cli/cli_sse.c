/* cli_sse.c: text/event-stream parsing; see cli_sse.h. */
#include "cli_sse.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static bool grow(char **buf, size_t *cap, size_t need)
{
    if (need <= *cap)
        return true;
    if (need > CLI_SSE_LINE_MAX)
        return false;
    size_t n = *cap ? *cap : 256;
    while (n < need)
        n *= 2;
    char *p = realloc(*buf, n);
    if (!p)
        return false;
    *buf = p;
    *cap = n;
    return true;
}

/* Applies one complete line (without its line break). */
static int take_line(struct cli_sse *s, cli_sse_fn fn, void *arg)
{
    char *l = s->line;
    size_t n = s->linelen;
    if (n == 0) {
        if (!s->datalen && !s->event[0])
            return 0;
        if (!grow(&s->data, &s->datacap, s->datalen + 1))
            return -1;
        /* The data buffer ends with the "\n" of its last line; drop it. */
        size_t len = s->datalen ? s->datalen - 1 : 0;
        s->data[len] = '\0';
        if (s->id[0])
            memcpy(s->last_id, s->id, sizeof s->last_id);
        int rc = fn(s->event, s->id, s->data, len, arg);
        s->datalen = 0;
        s->event[0] = '\0';
        s->id[0] = '\0';
        return rc;
    }
    if (l[0] == ':')
        return 0; /* comment (keepalive) */
    char *colon = memchr(l, ':', n);
    size_t fl = colon ? (size_t)(colon - l) : n;
    const char *v = colon ? colon + 1 : l + n;
    size_t vl = colon ? n - fl - 1 : 0;
    if (vl && *v == ' ') {
        v++;
        vl--;
    }
    if (fl == 4 && memcmp(l, "data", 4) == 0) {
        if (!grow(&s->data, &s->datacap, s->datalen + vl + 2))
            return -1;
        memcpy(s->data + s->datalen, v, vl);
        s->datalen += vl;
        s->data[s->datalen++] = '\n';
    } else if (fl == 5 && memcmp(l, "event", 5) == 0 && vl < sizeof s->event) {
        memcpy(s->event, v, vl);
        s->event[vl] = '\0';
    } else if (fl == 2 && memcmp(l, "id", 2) == 0 && vl < sizeof s->id) {
        memcpy(s->id, v, vl);
        s->id[vl] = '\0';
    }
    return 0;
}

int cli_sse_feed(struct cli_sse *s, const char *buf, size_t n, cli_sse_fn fn, void *arg)
{
    for (size_t i = 0; i < n; i++) {
        char c = buf[i];
        if (c == '\n') {
            /* CRLF: the CR was stored; drop it. */
            if (s->linelen && s->line[s->linelen - 1] == '\r')
                s->linelen--;
            int rc = take_line(s, fn, arg);
            s->linelen = 0;
            if (rc)
                return rc;
            continue;
        }
        if (!grow(&s->line, &s->linecap, s->linelen + 1))
            return -1;
        s->line[s->linelen++] = c;
    }
    return 0;
}

void cli_sse_reset(struct cli_sse *s)
{
    s->linelen = 0;
    s->datalen = 0;
    s->event[0] = '\0';
    s->id[0] = '\0';
}

void cli_sse_free(struct cli_sse *s)
{
    free(s->line);
    free(s->data);
    s->line = s->data = NULL;
    s->linelen = s->linecap = s->datalen = s->datacap = 0;
}
