/* evlog_sse.c: SSE representation of evlog_ring events; see evlog_sse.h. */
#include "daemon/evlog/evlog_sse.h"

#include <stdlib.h>
#include <string.h>

#include "b64.h"
#include "daemon/http/sse.h"
#include "daemon/spaced.h"

const char *evlog_sse_name(enum evlog_kind kind)
{
    switch (kind) {
    case EVLOG_START:
        return "start";
    case EVLOG_STDOUT:
        return "stdout";
    case EVLOG_STDERR:
        return "stderr";
    case EVLOG_EXIT:
        return "exit";
    case EVLOG_STAGE:
        return "stage";
    case EVLOG_END:
        return "end";
    case EVLOG_ERROR:
        break;
    }
    return "error";
}

long evlog_sse_data(const struct evlog_rec *r, char **out)
{
    static const char head[] = "{\"data\":\"", tail[] = "\"}";
    size_t n;
    char *s;
    if (r->kind == EVLOG_STDOUT || r->kind == EVLOG_STDERR) {
        n = sizeof head - 1 + B64_ENCODED_SIZE(r->len) - 1 + sizeof tail - 1;
        s = malloc(n + 1);
        if (!s)
            return -1;
        memcpy(s, head, sizeof head - 1);
        size_t e = b64_encode(r->data, r->len, s + sizeof head - 1);
        memcpy(s + sizeof head - 1 + e, tail, sizeof tail);
        n = sizeof head - 1 + e + sizeof tail - 1;
    } else {
        /* Control payloads are JSON text spaced wrote itself. */
        n = r->len;
        s = malloc(n + 1);
        if (!s)
            return -1;
        memcpy(s, r->data, n);
        s[n] = '\0';
    }
    *out = s;
    return (long)n;
}

enum evlog_pump evlog_sse_pump(const struct evlog_ring *r, struct http_req *req, uint64_t *next,
                               size_t high)
{
    while (*next < evlog_ring_next_id(r)) {
        if (http_stream_pending(req) > high)
            return EVLOG_PUMP_FULL;
        const struct evlog_rec *rec = evlog_ring_get(r, *next);
        if (!rec)
            return EVLOG_PUMP_GONE;
        char *data = NULL;
        long n = evlog_sse_data(rec, &data);
        if (n < 0)
            return EVLOG_PUMP_NOMEM;
        int rc = sse_send(req, (int64_t)rec->id, evlog_sse_name(rec->kind), data, (size_t)n);
        free(data);
        if (rc < 0)
            return EVLOG_PUMP_DEAD;
        (*next)++;
    }
    return EVLOG_PUMP_CAUGHT_UP;
}

int evlog_sse_resume(const struct evlog_ring *r, int64_t last, const char *what, uint64_t *from,
                      struct spaced_err *err)
{
    *from = evlog_ring_first_id(r);
    if (last < 0)
        return 0;
    switch (evlog_ring_resume(r, (uint64_t)last)) {
    case EVLOG_RING_GONE:
        return spaced_err_set(err, 410, "events_gone",
                              "events after id %lld are no longer buffered (the oldest kept is "
                              "%llu); reattach without Last-Event-ID to get the rest",
                              (long long)last, (unsigned long long)evlog_ring_first_id(r));
    case EVLOG_RING_FUTURE:
        return spaced_err_set(err, 400, "invalid_request",
                              "Last-Event-ID %lld is beyond the newest event of %s (%llu)",
                              (long long)last, what, (unsigned long long)(evlog_ring_next_id(r) - 1));
    case EVLOG_RING_OK:
        break;
    }
    *from = (uint64_t)last + 1;
    return 0;
}
