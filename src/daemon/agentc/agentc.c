/* agentc.c: host side of the agent protocol on a libevent bufferevent; see agentc.h.
 * Every byte from the guest is hostile: frames go through frame_parse + frame_check,
 * then channel state, credit and JSON shape checks here; any violation ends the whole
 * connection (fail_conn), because a guest that breaks framing once cannot be trusted to
 * frame the rest. */
#include "agentc.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"
#include "log.h"

#define AGENTC_ERR_CODE_MAX 64
#define AGENTC_SOFTWARE "spaced agentc 0.1"
#define AGENTC_STALE_HELLOS_MAX 8 /* answers to earlier connections' HELLOs tolerated */

struct agentc_chan {
    struct agentc *c;                       /* owner */
    uint32_t id;                            /* odd wire id */
    const struct agentc_chan_ops *ops;      /* caller's (borrowed) */
    void *arg;
    unsigned flags;                         /* AGENTC_MANUAL_CREDIT */
    uint64_t in_credit;                     /* IN bytes the agent lets us send */
    uint64_t window[FRAME_STREAM_COUNT];    /* OUT/ERR bytes the agent may still send */
    bool out_eof[FRAME_STREAM_COUNT];       /* agent ended OUT/ERR */
    struct evbuffer *inq;                   /* IN bytes waiting for credit (owned) */
    bool eof_queued;                        /* agentc_eof called */
    bool eof_sent;
    bool drain_pending;                     /* bytes were left queued: on_drain when empty */
    bool pumping;                           /* inside chan_pump (re-entrancy guard) */
    bool user_closed;                       /* agentc_close called: no more callbacks */
    bool sent_close;                        /* our CLOSE is out */
    struct agentc_chan *next;
};

struct agentc {
    struct bufferevent *bev;                /* owned, owns the fd; NULL once ended */
    const struct agentc_callbacks *cbs;     /* borrowed */
    void *arg;
    json_t *hello;                          /* agent's HELLO (owned) */
    unsigned stale_hellos;                  /* extra HELLOs ignored (on_hello) */
    bool ready;
    bool closed;                            /* connection ended (on_closed sent) */
    uint32_t next_id;                       /* next odd channel id to try */
    struct agentc_chan *chans;              /* owned list */
    unsigned nchans;
    int depth;                              /* nesting of our libevent callbacks */
    bool free_pending;                      /* agentc_free called inside a callback */
    bool stalled;                           /* output hit AGENTC_OUTQ_MAX: nothing more is
                                               queued; stall_ev ends the connection */
    struct event *stall_ev;                 /* owned; fires from the loop */
    double ping_tokens;                     /* PING budget (AGENTC_PING_RATE per second) */
    int64_t ping_at_us;                     /* when it was last refilled (clock_mono_us) */
};

static void agentc_destroy(struct agentc *c);

/* Hangs up at once and frees the bufferevent. libevent finalizes a bufferevent (and,
 * with BEV_OPT_CLOSE_ON_FREE, closes its fd) on a later loop pass; shutdown() makes the
 * agent see the hang-up now, even if the loop never runs again. */
static void drop_socket(struct agentc *c)
{
    if (!c->bev)
        return;
    shutdown(bufferevent_getfd(c->bev), SHUT_RDWR);
    bufferevent_free(c->bev);
    c->bev = NULL;
}

/* ---- output ---- */

static size_t outq(const struct agentc *c)
{
    return c->bev ? evbuffer_get_length(bufferevent_get_output(c->bev)) : 0;
}

/* Queues one frame toward the agent. Past AGENTC_OUTQ_MAX the agent is not reading:
 * nothing more is queued and the connection ends from the loop (not here: callers still
 * hold channel pointers that fail_conn would free). */
static void send_frame(struct agentc *c, uint32_t channel, enum frame_type type,
                       enum frame_stream stream, const void *p, size_t n)
{
    if (!c->bev || c->stalled)
        return;
    if (outq(c) + FRAME_HEADER_SIZE + n > AGENTC_OUTQ_MAX) {
        c->stalled = true;
        event_active(c->stall_ev, EV_TIMEOUT, 0);
        return;
    }
    uint8_t hdr[FRAME_HEADER_SIZE];
    frame_encode_header(hdr, channel, type, stream, (uint32_t)n);
    struct evbuffer *out = bufferevent_get_output(c->bev);
    evbuffer_add(out, hdr, sizeof hdr);
    if (n)
        evbuffer_add(out, p, n);
}

static int send_json(struct agentc *c, uint32_t channel, enum frame_type type, json_t *obj)
{
    size_t n;
    char *s = frame_json_dump(obj, &n);
    if (!s)
        return -1;
    send_frame(c, channel, type, FRAME_STREAM_NONE, s, n);
    free(s);
    return 0;
}

/* ---- channels ---- */

static struct agentc_chan *find_chan(struct agentc *c, uint32_t id)
{
    for (struct agentc_chan *ch = c->chans; ch; ch = ch->next)
        if (ch->id == id)
            return ch;
    return NULL;
}

static void free_chan(struct agentc_chan *ch)
{
    struct agentc *c = ch->c;
    for (struct agentc_chan **pp = &c->chans; *pp; pp = &(*pp)->next)
        if (*pp == ch) {
            *pp = ch->next;
            break;
        }
    c->nchans--;
    evbuffer_free(ch->inq);
    free(ch);
}

/* true if callbacks must stop: connection being freed, or the caller closed ch. */
static bool chan_gone(const struct agentc_chan *ch)
{
    return ch->user_closed || ch->c->free_pending || ch->c->closed;
}

/* Sends queued IN bytes within credit, then EOF if asked; reports drain. */
static void chan_pump(struct agentc_chan *ch)
{
    struct agentc *c = ch->c;
    if (ch->pumping || !c->bev || ch->sent_close)
        return;
    ch->pumping = true;
    for (;;) {
        size_t len;
        /* IN data moves only while the socket's queue is short: the rest waits in the
         * channel (bounded by its caller) until write_cb sees the queue drain. */
        while ((len = evbuffer_get_length(ch->inq)) > 0 && ch->in_credit > 0 &&
               outq(c) < AGENTC_OUTQ_SOFT && !c->stalled) {
            size_t n = len;
            if (n > ch->in_credit)
                n = (size_t)ch->in_credit;
            if (n > FRAME_MAX_PAYLOAD)
                n = FRAME_MAX_PAYLOAD;
            uint8_t hdr[FRAME_HEADER_SIZE];
            frame_encode_header(hdr, ch->id, FRAME_DATA, FRAME_STREAM_IN, (uint32_t)n);
            struct evbuffer *out = bufferevent_get_output(c->bev);
            evbuffer_add(out, hdr, sizeof hdr);
            evbuffer_remove_buffer(ch->inq, out, n);
            ch->in_credit -= n;
        }
        if (evbuffer_get_length(ch->inq) || !ch->drain_pending)
            break;
        ch->drain_pending = false;
        if (ch->ops->on_drain && !chan_gone(ch)) {
            ch->ops->on_drain(ch->arg);
            if (chan_gone(ch) || !c->bev)
                break;
            continue; /* the callback may have queued more */
        }
        break;
    }
    if (c->bev && !c->stalled && !ch->sent_close && ch->eof_queued && !ch->eof_sent &&
        evbuffer_get_length(ch->inq) == 0) {
        send_frame(c, ch->id, FRAME_EOF, FRAME_STREAM_IN, NULL, 0);
        ch->eof_sent = true;
    }
    ch->pumping = false;
}

/* ---- connection end ---- */

/* Ends the connection: every channel the caller still holds gets on_error + on_close,
 * then on_closed. Channels are freed after all were told (callbacks may close others). */
static void fail_conn(struct agentc *c, const char *code, const char *message)
{
    if (c->closed)
        return;
    char qmsg[256];
    log_warn("agentc.closed", "code=%s message=%s", code, log_quote(message, qmsg, sizeof qmsg));
    c->closed = true;
    c->ready = false;
    drop_socket(c); /* safe inside its own callbacks: bufferevents are refcounted */
    for (struct agentc_chan *ch = c->chans; ch && !c->free_pending; ch = ch->next) {
        if (ch->user_closed)
            continue;
        ch->user_closed = true; /* no callbacks after on_close */
        if (ch->ops->on_error)
            ch->ops->on_error(ch->arg, FRAME_E_DISCONNECTED, message);
        if (ch->ops->on_close && !c->free_pending)
            ch->ops->on_close(ch->arg);
    }
    while (c->chans)
        free_chan(c->chans);
    if (c->cbs->on_closed && !c->free_pending)
        c->cbs->on_closed(c->arg, code, message);
}

static void protocol_error(struct agentc *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void protocol_error(struct agentc *c, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fail_conn(c, FRAME_E_PROTOCOL, msg);
}

/* ---- input ---- */

/* Validates an ERROR payload: {"code": [a-z_]{1,64}, "message": string}. */
static int parse_error(const struct frame *f, char *code, size_t codelen, const char **msg,
                       json_t **owner)
{
    char err[128];
    json_t *e = frame_json(f, err, sizeof err);
    if (!e)
        return -1;
    json_t *jc = json_object_get(e, "code"), *jm = json_object_get(e, "message");
    const char *cs = json_string_value(jc);
    size_t n = cs ? strlen(cs) : 0;
    if (!cs || n == 0 || n >= codelen || n != json_string_length(jc) ||
        strspn(cs, "abcdefghijklmnopqrstuvwxyz_") != n || (jm && !json_is_string(jm))) {
        json_decref(e);
        return -1;
    }
    memcpy(code, cs, n + 1);
    *msg = jm ? json_string_value(jm) : "";
    *owner = e;
    return 0;
}

static void on_hello(struct agentc *c, const struct frame *f)
{
    char err[128];
    if (c->hello) {
        /* The answer to a HELLO sent on an earlier connection to this port: after a
         * snapshot restore or a reconnect, the guest can receive that old HELLO late and
         * answer it on this connection. It was written before this connection existed,
         * so in the agent's input it precedes every frame sent here, and the agent's
         * session reset for it cannot have touched this connection's channels. Ignore
         * a few; more means a confused or hostile agent. */
        if (++c->stale_hellos > AGENTC_STALE_HELLOS_MAX)
            return protocol_error(c, "more than %d extra HELLOs", AGENTC_STALE_HELLOS_MAX);
        log_info("agentc.hello", "event=stale_ignored n=%u", c->stale_hellos);
        return;
    }
    json_t *h = frame_json(f, err, sizeof err);
    if (!h)
        return protocol_error(c, "HELLO: %s", err);
    json_t *jv = json_object_get(h, "version"), *jm = json_object_get(h, "min_version");
    json_int_t ver = json_integer_value(jv), min = json_integer_value(jm);
    if (!json_is_integer(jv) || !json_is_integer(jm) || min < 0 || min > ver) {
        json_decref(h);
        return protocol_error(c, "HELLO needs integer version >= min_version");
    }
    json_int_t use = ver < FRAME_VERSION ? ver : FRAME_VERSION;
    if (use < FRAME_MIN_VERSION || use < min) {
        json_decref(h);
        return fail_conn(c, FRAME_E_UNSUPPORTED, "no common protocol version with the agent");
    }
    c->hello = h;
    c->ready = true;
    if (c->cbs->on_ready)
        c->cbs->on_ready(c->arg, h);
}

static void on_chan_data(struct agentc_chan *ch, const struct frame *f)
{
    struct agentc *c = ch->c;
    if (ch->out_eof[f->stream])
        return protocol_error(c, "DATA after EOF on channel %u", ch->id);
    if (f->len > ch->window[f->stream])
        return protocol_error(c, "DATA beyond credit on channel %u", ch->id);
    ch->window[f->stream] -= f->len;
    if (ch->user_closed)
        return;
    if (ch->ops->on_data)
        ch->ops->on_data(ch->arg, (enum frame_stream)f->stream, f->payload, f->len);
    if (!(ch->flags & AGENTC_MANUAL_CREDIT) && !chan_gone(ch))
        agentc_grant(ch, (enum frame_stream)f->stream, f->len);
}

static void on_chan_frame(struct agentc *c, const struct frame *f)
{
    struct agentc_chan *ch = find_chan(c, f->channel);
    if (!ch)
        return protocol_error(c, "%s for unknown channel %u", frame_type_name(f->type), f->channel);
    char err[128];
    switch (f->type) {
    case FRAME_DATA:
        return on_chan_data(ch, f);
    case FRAME_EOF:
        if (ch->out_eof[f->stream])
            return protocol_error(c, "second EOF on channel %u", ch->id);
        ch->out_eof[f->stream] = true;
        if (!ch->user_closed && ch->ops->on_eof)
            ch->ops->on_eof(ch->arg, (enum frame_stream)f->stream);
        return;
    case FRAME_CREDIT: {
        uint32_t v = 0;
        frame_credit_value(f, &v);
        if (ch->in_credit + v > FRAME_MAX_CREDIT)
            return protocol_error(c, "credit window over 64 MiB on channel %u", ch->id);
        ch->in_credit += v;
        return chan_pump(ch);
    }
    case FRAME_EVENT: {
        json_t *ev = frame_json(f, err, sizeof err);
        if (!ev || !json_is_string(json_object_get(ev, "type"))) {
            json_decref(ev);
            return protocol_error(c, "EVENT on channel %u: %s", ch->id, ev ? "no string \"type\"" : err);
        }
        if (!ch->user_closed && ch->ops->on_event)
            ch->ops->on_event(ch->arg, ev);
        json_decref(ev);
        return;
    }
    case FRAME_ERROR: {
        char code[AGENTC_ERR_CODE_MAX];
        const char *msg;
        json_t *owner;
        if (parse_error(f, code, sizeof code, &msg, &owner) < 0)
            return protocol_error(c, "malformed ERROR on channel %u", ch->id);
        if (!ch->user_closed && ch->ops->on_error)
            ch->ops->on_error(ch->arg, code, msg);
        json_decref(owner);
        return;
    }
    case FRAME_CLOSE:
        if (!ch->user_closed) {
            ch->user_closed = true; /* on_close is the last callback */
            if (ch->ops->on_close)
                ch->ops->on_close(ch->arg);
        }
        if (!ch->sent_close && !c->closed)
            send_frame(c, ch->id, FRAME_CLOSE, FRAME_STREAM_NONE, NULL, 0);
        if (!c->closed)
            free_chan(ch);
        return;
    default:
        return protocol_error(c, "unexpected %s on channel %u", frame_type_name(f->type), ch->id);
    }
}

/* Token bucket: AGENTC_PING_RATE per second, as many in a burst. */
static bool ping_allowed(struct agentc *c)
{
    int64_t now = clock_mono_us();
    c->ping_tokens += (double)(now - c->ping_at_us) * AGENTC_PING_RATE / 1e6;
    if (c->ping_tokens > AGENTC_PING_RATE)
        c->ping_tokens = AGENTC_PING_RATE;
    c->ping_at_us = now;
    if (c->ping_tokens < 1)
        return false;
    c->ping_tokens -= 1;
    return true;
}

static void dispatch(struct agentc *c, const struct frame *f)
{
    const char *why;
    if (frame_check(f, FRAME_FROM_AGENT, &why) < 0)
        return protocol_error(c, "%s frame on channel %u: %s", frame_type_name(f->type), f->channel, why);
    if (f->type == FRAME_ERROR && f->channel == FRAME_CONTROL_CHANNEL) {
        char code[AGENTC_ERR_CODE_MAX];
        const char *msg;
        json_t *owner;
        if (parse_error(f, code, sizeof code, &msg, &owner) < 0)
            return protocol_error(c, "malformed connection ERROR");
        char m[256];
        snprintf(m, sizeof m, "agent: %s", msg);
        json_decref(owner);
        return fail_conn(c, code, m);
    }
    if (f->type == FRAME_HELLO)
        return on_hello(c, f);
    if (!c->hello)
        return protocol_error(c, "%s before HELLO", frame_type_name(f->type));
    if (f->type == FRAME_PING) {
        if (!ping_allowed(c)) {
            char m[96];
            snprintf(m, sizeof m, "the agent sent more than %u PINGs per second",
                     AGENTC_PING_RATE);
            return fail_conn(c, AGENTC_E_FLOOD, m);
        }
        return send_frame(c, 0, FRAME_PONG, FRAME_STREAM_NONE, f->payload, f->len);
    }
    if (f->type == FRAME_PONG)
        return;
    on_chan_frame(c, f);
}

static void read_cb(struct bufferevent *bev, void *arg)
{
    struct agentc *c = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    c->depth++;
    while (!c->closed && !c->free_pending) {
        size_t len = evbuffer_get_length(in);
        if (len < FRAME_HEADER_SIZE)
            break;
        /* Pull up the header first: the payload length says how much to make
         * contiguous, and it is checked before we trust it. */
        struct frame f;
        size_t used;
        const char *why;
        const uint8_t *hdr = evbuffer_pullup(in, FRAME_HEADER_SIZE);
        enum frame_parse_result r = frame_parse(hdr, FRAME_HEADER_SIZE, &f, &used, &why);
        if (r == FRAME_PARSE_ERROR) {
            protocol_error(c, "bad frame header: %s", why);
            break;
        }
        size_t need = FRAME_HEADER_SIZE + (size_t)(hdr[0] | hdr[1] << 8 | hdr[2] << 16 | (uint32_t)hdr[3] << 24);
        if (len < need)
            break;
        const uint8_t *p = evbuffer_pullup(in, (ssize_t)need);
        if (frame_parse(p, need, &f, &used, &why) != FRAME_PARSE_OK) {
            protocol_error(c, "bad frame");
            break;
        }
        dispatch(c, &f);
        if (c->closed || c->free_pending)
            break;
        evbuffer_drain(in, used);
    }
    c->depth--;
    if (c->free_pending && c->depth == 0)
        agentc_destroy(c);
}

/* The socket's queue drained below the low watermark: IN data held back by
 * AGENTC_OUTQ_SOFT may move now. */
static void write_cb(struct bufferevent *bev, void *arg)
{
    struct agentc *c = arg;
    (void)bev;
    c->depth++;
    for (struct agentc_chan *ch = c->chans; ch && !c->closed && !c->free_pending; ch = ch->next)
        if (evbuffer_get_length(ch->inq) || (ch->eof_queued && !ch->eof_sent))
            chan_pump(ch);
    c->depth--;
    if (c->free_pending && c->depth == 0)
        agentc_destroy(c);
}

static void on_stall(evutil_socket_t fd, short what, void *arg)
{
    struct agentc *c = arg;
    (void)fd;
    (void)what;
    c->depth++;
    char m[128];
    snprintf(m, sizeof m, "the agent stopped reading: %u bytes were queued toward it",
             AGENTC_OUTQ_MAX);
    fail_conn(c, AGENTC_E_STALLED, m);
    c->depth--;
    if (c->free_pending && c->depth == 0)
        agentc_destroy(c);
}

static void event_cb(struct bufferevent *bev, short what, void *arg)
{
    struct agentc *c = arg;
    c->depth++;
    if (what & BEV_EVENT_EOF)
        fail_conn(c, FRAME_E_DISCONNECTED, "agent closed the connection");
    else if (what & BEV_EVENT_ERROR)
        fail_conn(c, FRAME_E_DISCONNECTED, strerror(EVUTIL_SOCKET_ERROR()));
    c->depth--;
    if (c->free_pending && c->depth == 0)
        agentc_destroy(c);
}

/* ---- API ---- */

struct agentc *agentc_new(struct event_base *base, int fd, const struct agentc_callbacks *cbs,
                          void *arg)
{
    struct agentc *c = calloc(1, sizeof *c);
    if (!c) {
        close(fd);
        return NULL;
    }
    evutil_make_socket_nonblocking(fd);
    evutil_make_socket_closeonexec(fd);
    c->bev = bufferevent_socket_new(base, fd, BEV_OPT_CLOSE_ON_FREE);
    c->stall_ev = event_new(base, -1, 0, on_stall, c);
    if (!c->bev || !c->stall_ev) {
        if (c->bev)
            bufferevent_free(c->bev);
        else
            close(fd);
        if (c->stall_ev)
            event_free(c->stall_ev);
        free(c);
        return NULL;
    }
    c->cbs = cbs;
    c->arg = arg;
    c->next_id = 1;
    c->ping_tokens = AGENTC_PING_RATE;
    c->ping_at_us = clock_mono_us();
    bufferevent_setcb(c->bev, read_cb, write_cb, event_cb, c);
    bufferevent_setwatermark(c->bev, EV_WRITE, AGENTC_OUTQ_SOFT / 2, 0);
    bufferevent_enable(c->bev, EV_READ | EV_WRITE);
    json_t *h = json_pack("{s:i, s:i, s:s, s:[]}", "version", FRAME_VERSION, "min_version",
                          FRAME_MIN_VERSION, "software", AGENTC_SOFTWARE, "features");
    if (!h || send_json(c, 0, FRAME_HELLO, h) < 0) {
        json_decref(h);
        agentc_destroy(c);
        return NULL;
    }
    json_decref(h);
    return c;
}

static void agentc_destroy(struct agentc *c)
{
    while (c->chans)
        free_chan(c->chans);
    drop_socket(c);
    event_free(c->stall_ev);
    json_decref(c->hello);
    free(c);
}

void agentc_free(struct agentc *c)
{
    if (!c)
        return;
    if (c->depth > 0) {
        c->free_pending = true;
        return;
    }
    agentc_destroy(c);
}

bool agentc_is_ready(const struct agentc *c)
{
    return c->ready && !c->closed;
}

json_t *agentc_hello(const struct agentc *c)
{
    return c->hello;
}

struct agentc_chan *agentc_open(struct agentc *c, json_t *request,
                                const struct agentc_chan_ops *ops, void *arg, unsigned flags,
                                char *err, size_t errlen)
{
    if (c->closed || c->free_pending) {
        snprintf(err, errlen, "agent connection is closed");
        return NULL;
    }
    if (c->nchans >= AGENTC_MAX_CHANNELS) {
        snprintf(err, errlen, "too many open agent channels");
        return NULL;
    }
    if (!json_is_object(request)) {
        snprintf(err, errlen, "request must be a JSON object");
        return NULL;
    }
    size_t n;
    char *s = frame_json_dump(request, &n);
    if (!s) {
        snprintf(err, errlen, "request larger than %u bytes", FRAME_MAX_PAYLOAD);
        return NULL;
    }
    struct agentc_chan *ch = calloc(1, sizeof *ch);
    if (ch)
        ch->inq = evbuffer_new();
    if (!ch || !ch->inq) {
        free(ch);
        free(s);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    /* Odd ids, skipping any still in use (tombstones of closed channels). */
    while (find_chan(c, c->next_id))
        c->next_id = c->next_id >= 0x7ffffffd ? 1 : c->next_id + 2;
    ch->id = c->next_id;
    c->next_id = c->next_id >= 0x7ffffffd ? 1 : c->next_id + 2;
    ch->c = c;
    ch->ops = ops;
    ch->arg = arg;
    ch->flags = flags;
    ch->in_credit = FRAME_WINDOW_INITIAL;
    ch->window[FRAME_STREAM_OUT] = ch->window[FRAME_STREAM_ERR] = FRAME_WINDOW_INITIAL;
    ch->next = c->chans;
    c->chans = ch;
    c->nchans++;
    send_frame(c, ch->id, FRAME_OPEN, FRAME_STREAM_NONE, s, n);
    free(s);
    return ch;
}

int agentc_write(struct agentc_chan *ch, const void *data, size_t len)
{
    if (ch->c->closed || ch->user_closed || ch->sent_close || ch->eof_queued)
        return -1;
    if (len && evbuffer_add(ch->inq, data, len) < 0)
        return -1;
    chan_pump(ch);
    if (evbuffer_get_length(ch->inq))
        ch->drain_pending = true;
    return 0;
}

size_t agentc_queued(const struct agentc_chan *ch)
{
    return evbuffer_get_length(ch->inq);
}

int agentc_eof(struct agentc_chan *ch)
{
    if (ch->c->closed || ch->user_closed || ch->eof_queued)
        return -1;
    ch->eof_queued = true;
    chan_pump(ch);
    return 0;
}

int agentc_ctrl(struct agentc_chan *ch, json_t *ctrl)
{
    if (ch->c->closed || ch->user_closed || !json_is_object(ctrl))
        return -1;
    return send_json(ch->c, ch->id, FRAME_CTRL, ctrl);
}

int agentc_grant(struct agentc_chan *ch, enum frame_stream stream, uint32_t bytes)
{
    if (ch->c->closed || ch->sent_close || (stream != FRAME_STREAM_OUT && stream != FRAME_STREAM_ERR))
        return -1;
    if (ch->window[stream] + bytes > FRAME_MAX_CREDIT)
        bytes = (uint32_t)(FRAME_MAX_CREDIT - ch->window[stream]);
    if (bytes == 0 || ch->out_eof[stream])
        return 0;
    uint8_t p[4];
    frame_credit_payload(p, bytes);
    ch->window[stream] += bytes;
    send_frame(ch->c, ch->id, FRAME_CREDIT, stream, p, sizeof p);
    return 0;
}

void agentc_close(struct agentc_chan *ch)
{
    if (ch->user_closed && ch->sent_close)
        return;
    ch->user_closed = true;
    if (!ch->sent_close && !ch->c->closed) {
        send_frame(ch->c, ch->id, FRAME_CLOSE, FRAME_STREAM_NONE, NULL, 0);
        ch->sent_close = true;
    }
    evbuffer_drain(ch->inq, evbuffer_get_length(ch->inq));
}

size_t agentc_json_weight(const json_t *v)
{
    size_t n = 32, i;
    const char *k;
    json_t *x;
    if (json_is_string(v))
        return n + json_string_length(v);
    if (json_is_array(v))
        json_array_foreach(v, i, x) n += agentc_json_weight(x);
    if (json_is_object(v))
        json_object_foreach((json_t *)v, k, x) n += strlen(k) + agentc_json_weight(x);
    return n;
}

size_t agentc_buffered(const struct agentc *c)
{
    return c->bev ? outq(c) + evbuffer_get_length(bufferevent_get_input(c->bev)) : 0;
}

uint32_t agentc_chan_id(const struct agentc_chan *ch)
{
    return ch->id;
}
