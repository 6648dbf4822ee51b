/* cli_sse: incremental parser of a text/event-stream, for `space exec`. Bytes go in as
 * they arrive; each complete event comes out through a callback with its id, type and
 * data (multi-line data joined with "\n"). Lines end in LF or CRLF (spaced never uses a
 * lone CR) and are bounded (CLI_SSE_LINE_MAX). */
#ifndef SPACE_CLI_SSE_H
#define SPACE_CLI_SSE_H

#include <stddef.h>

#define CLI_SSE_LINE_MAX (16 * 1024 * 1024)

struct cli_sse {
    char *line;         /* owned, the line being assembled */
    size_t linelen, linecap;
    char *data;         /* owned, the event's data so far */
    size_t datalen, datacap;
    char event[64];     /* event type ("" = "message") */
    char id[32];        /* id of this event, "" if none */
    char last_id[32];   /* id of the last dispatched event (for Last-Event-ID) */
};

/* Called per event; returns 0 to go on, nonzero to stop parsing (that value is
 * returned by cli_sse_feed). */
typedef int (*cli_sse_fn)(const char *event, const char *id, const char *data, size_t len,
                          void *arg);

/* Feeds buf[n]. Returns 0, the callback's nonzero value, or -1 (line too long / OOM). */
int cli_sse_feed(struct cli_sse *s, const char *buf, size_t n, cli_sse_fn fn, void *arg);

/* Forgets a partly received event (after a broken connection), keeping last_id. */
void cli_sse_reset(struct cli_sse *s);

/* Frees the buffers; the struct can be reused after memset 0. */
void cli_sse_free(struct cli_sse *s);

#endif
