/* sess_event.c: SSE representation of session events; see sess_event.h. */
#include "daemon/session/sess_event.h"

#include <stdlib.h>
#include <string.h>

#include "b64.h"
#include "daemon/http/sse.h"
#include "daemon/spaced.h"

const char *sess_event_name(enum sess_ev_kind kind)
{
    switch (kind) {
    case SESS_EV_START:
        return "start";
    case SESS_EV_STDOUT:
        return "stdout";
    case SESS_EV_STDERR:
        return "stderr";
    case SESS_EV_EXIT:
        return "exit";
    case SESS_EV_STAGE:
        return "stage";
    case SESS_EV_END:
        return "end";
    case SESS_EV_ERROR:
        break;
    }
    return "error";
}

long sess_event_data(const struct sess_rec *r, char **out)
{
    static const char head[] = "{\"data\":\"", tail[] = "\"}";
    size_t n;
    char *s;
    if (r->kind == SESS_EV_STDOUT || r->kind == SESS_EV_STDERR) {
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

enum sess_pump sess_event_pump(const struct sess_ring *r, struct http_req *req, uint64_t *next,
                               size_t high)
{
    while (*next < sess_ring_next_id(r)) {
        if (http_stream_pending(req) > high)
            return SESS_PUMP_FULL;
        const struct sess_rec *rec = sess_ring_get(r, *next);
        if (!rec)
            return SESS_PUMP_GONE;
        char *data = NULL;
        long n = sess_event_data(rec, &data);
        if (n < 0)
            return SESS_PUMP_NOMEM;
        int rc = sse_send(req, (int64_t)rec->id, sess_event_name(rec->kind), data, (size_t)n);
        free(data);
        if (rc < 0)
            return SESS_PUMP_DEAD;
        (*next)++;
    }
    return SESS_PUMP_CAUGHT_UP;
}

int sess_event_resume(const struct sess_ring *r, int64_t last, const char *what, uint64_t *from,
                      struct spaced_err *err)
{
    *from = sess_ring_first_id(r);
    if (last < 0)
        return 0;
    switch (sess_ring_resume(r, (uint64_t)last)) {
    case SESS_RING_GONE:
        return spaced_err_set(err, 410, "events_gone",
                              "events after id %lld are no longer buffered (the oldest kept is "
                              "%llu); reattach without Last-Event-ID to get the rest",
                              (long long)last, (unsigned long long)sess_ring_first_id(r));
    case SESS_RING_FUTURE:
        return spaced_err_set(err, 400, "invalid_request",
                              "Last-Event-ID %lld is beyond the newest event of %s (%llu)",
                              (long long)last, what, (unsigned long long)(sess_ring_next_id(r) - 1));
    case SESS_RING_OK:
        break;
    }
    *from = (uint64_t)last + 1;
    return 0;
}
