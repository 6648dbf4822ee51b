/* agentc_call.c: blocking request -> result helper for tests and tools; see agentc.h. */
#include "agentc.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What one call collects. */
struct call {
    json_t *last;         /* last EVENT (owned) */
    char **out;           /* caller's output pointer, NULL to drop output */
    size_t *outlen;
    size_t cap;
    bool failed;
    bool done;
    char *code, *msg;     /* caller's buffers */
    size_t codelen, msglen;
    bool oom;
};

static void call_event(void *arg, json_t *ev)
{
    struct call *k = arg;
    json_decref(k->last);
    k->last = json_incref(ev);
}

static void call_data(void *arg, enum frame_stream stream, const uint8_t *buf, size_t len)
{
    struct call *k = arg;
    if (!k->out || k->oom)
        return;
    if (*k->outlen + len + 1 > k->cap) {
        size_t cap = k->cap ? k->cap : 4096;
        while (cap < *k->outlen + len + 1)
            cap *= 2;
        char *p = realloc(*k->out, cap);
        if (!p) {
            k->oom = true;
            return;
        }
        *k->out = p;
        k->cap = cap;
    }
    memcpy(*k->out + *k->outlen, buf, len);
    *k->outlen += len;
    (*k->out)[*k->outlen] = '\0';
}

static void call_error(void *arg, const char *code, const char *message)
{
    struct call *k = arg;
    if (k->failed)
        return; /* the first error is the cause; "disconnected" may follow */
    k->failed = true;
    snprintf(k->code, k->codelen, "%s", code);
    snprintf(k->msg, k->msglen, "%s", message);
}

static void call_close(void *arg)
{
    struct call *k = arg;
    k->done = true;
}

static const struct agentc_chan_ops call_ops = {
    .on_event = call_event,
    .on_data = call_data,
    .on_error = call_error,
    .on_close = call_close,
};

json_t *agentc_call(struct agentc *c, struct event_base *base, json_t *request,
                    char **out, size_t *outlen, char *code, size_t codelen, char *msg,
                    size_t msglen)
{
    struct call k = {.out = out, .outlen = outlen, .code = code, .codelen = codelen,
                     .msg = msg, .msglen = msglen};
    if (out) {
        *out = NULL;
        *outlen = 0;
    }
    code[0] = msg[0] = '\0';
    struct agentc_chan *ch = agentc_open(c, request, &call_ops, &k, 0, msg, msglen);
    if (!ch) {
        snprintf(code, codelen, "%s", FRAME_E_DISCONNECTED);
        return NULL;
    }
    while (!k.done)
        if (event_base_loop(base, EVLOOP_ONCE) < 0) {
            agentc_close(ch);
            snprintf(code, codelen, "%s", FRAME_E_INTERNAL);
            snprintf(msg, msglen, "event loop failed");
            k.failed = true;
            break;
        }
    if (k.oom && !k.failed) {
        k.failed = true;
        snprintf(code, codelen, "%s", FRAME_E_INTERNAL);
        snprintf(msg, msglen, "out of memory collecting output");
    }
    if (k.failed) {
        json_decref(k.last);
        return NULL;
    }
    return k.last ? k.last : json_object();
}
