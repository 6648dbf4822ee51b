/* sess_event.c: SSE representation of session events; see sess_event.h. */
#include "daemon/session/sess_event.h"

#include <stdlib.h>
#include <string.h>

#include "b64.h"

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
