/* conn.c: frame dispatch, channel table and credits of one host connection; see conn.h. */
#include "agent/conn.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "log.h"

struct agent_conn {
    const struct agent_conn_hooks *hooks;  /* borrowed */
    struct agent_buf in;                   /* received, not yet parsed */
    struct agent_buf out;                  /* frames queued for the host */
    struct agent_chan *chans;              /* live channels and tombstones (owned) */
    unsigned live;                         /* channels with sent_close == false */
    unsigned tombstones;                   /* channels with sent_close == true */
    bool hello;                            /* host HELLO received */
    bool broken;                           /* unrecoverable framing error seen */
    bool congested;                        /* out was above HIGH; wake producers at LOW */
    int64_t in_at_ns;                      /* clock_mono_ns() of the input being handled */
};

static void conn_send(struct agent_conn *c, uint32_t channel, enum frame_type type,
                      enum frame_stream stream, const void *p, size_t n)
{
    uint8_t hdr[FRAME_HEADER_SIZE];
    frame_encode_header(hdr, channel, type, stream, (uint32_t)n);
    /* Out of memory leaves a truncated stream the host would misparse: mark broken. */
    if (agent_buf_add(&c->out, hdr, sizeof hdr) < 0 || agent_buf_add(&c->out, p, n) < 0) {
        c->broken = true;
        return;
    }
    if (c->out.len > AGENT_OUT_HIGH)
        c->congested = true;
}

static void conn_send_json(struct agent_conn *c, uint32_t channel, enum frame_type type,
                           json_t *obj)
{
    size_t n;
    char *s = frame_json_dump(obj, &n);
    if (!s) {
        /* Too large (a huge result): say so instead of a frame the host would reject. */
        json_t *e = json_pack("{s:s, s:s}", "code", FRAME_E_TOO_MANY, "message",
                              "reply larger than one frame");
        s = e ? frame_json_dump(e, &n) : NULL;
        json_decref(e);
        type = FRAME_ERROR;
        if (!s)
            return;
    }
    conn_send(c, channel, type, FRAME_STREAM_NONE, s, n);
    free(s);
}

static void conn_error(struct agent_conn *c, uint32_t channel, const char *code,
                       const char *msg)
{
    json_t *e = json_pack("{s:s, s:s}", "code", code, "message", msg);
    if (e)
        conn_send_json(c, channel, FRAME_ERROR, e);
    json_decref(e);
}

static void conn_send_hello(struct agent_conn *c)
{
    json_t *h = c->hooks->hello();
    if (h)
        conn_send_json(c, FRAME_CONTROL_CHANNEL, FRAME_HELLO, h);
    json_decref(h);
    if (h && c->hooks->flush)
        c->hooks->flush();
}

void agent_conn_flush(struct agent_conn *c)
{
    if (c->hooks->flush)
        c->hooks->flush();
}

struct agent_conn *agent_conn_new(const struct agent_conn_hooks *hooks)
{
    struct agent_conn *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->hooks = hooks;
    return c;
}

static struct agent_chan *conn_find(struct agent_conn *c, uint32_t id)
{
    for (struct agent_chan *ch = c->chans; ch; ch = ch->next)
        if (ch->id == id)
            return ch;
    return NULL;
}

static void conn_unlink(struct agent_conn *c, struct agent_chan *ch)
{
    for (struct agent_chan **pp = &c->chans; *pp; pp = &(*pp)->next)
        if (*pp == ch) {
            *pp = ch->next;
            break;
        }
    if (ch->sent_close)
        c->tombstones--;
    else
        c->live--;
    free(ch);
}

/* Detaches the op of ch (if any) with on_close: the op forgets the channel. */
static void chan_detach(struct agent_chan *ch)
{
    const struct agent_chan_ops *ops = ch->ops;
    ch->ops = NULL;
    if (ops && ops->on_close)
        ops->on_close(ch);
    ch->impl = NULL;
}

/* Drops every channel (host gone, or a new HELLO restarted the session). */
static void conn_drop_channels(struct agent_conn *c)
{
    while (c->chans) {
        struct agent_chan *ch = c->chans;
        chan_detach(ch);
        conn_unlink(c, ch);
    }
}

void agent_conn_free(struct agent_conn *c)
{
    if (!c)
        return;
    conn_drop_channels(c);
    agent_buf_free(&c->in);
    agent_buf_free(&c->out);
    free(c);
}

static int hello_int(json_t *h, const char *key)
{
    json_t *v = json_object_get(h, key);
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 1000000)
        return -1;
    return (int)json_integer_value(v);
}

static void conn_on_hello(struct agent_conn *c, const struct frame *f)
{
    char err[160];
    json_t *h = frame_json(f, err, sizeof err);
    int ver = h ? hello_int(h, "version") : -1;
    int min = h ? hello_int(h, "min_version") : -1;
    json_decref(h);
    if (ver < 0 || min < 0 || min > ver) {
        conn_error(c, 0, FRAME_E_PROTOCOL, "HELLO needs integer version >= min_version");
        return;
    }
    int use = ver < FRAME_VERSION ? ver : FRAME_VERSION;
    if (use < FRAME_MIN_VERSION || use < min) {
        conn_error(c, 0, FRAME_E_UNSUPPORTED, "no common protocol version");
        c->broken = true;
        return;
    }
    if (c->hello) {
        /* A second HELLO means a new host session on the same byte stream (after a
         * snapshot restore the guest may never see the disconnect): start over. What
         * was queued for the old session would confuse the new one. */
        conn_drop_channels(c);
        agent_buf_free(&c->out);
        c->congested = false;
    }
    c->hello = true;
    conn_send_hello(c);
}

static void conn_on_open(struct agent_conn *c, const struct frame *f)
{
    if (conn_find(c, f->channel)) {
        conn_error(c, f->channel, FRAME_E_PROTOCOL, "OPEN on a channel in use");
        return;
    }
    /* Refusals still get a channel entry (a tombstone), so frames the host pipelined
     * after its OPEN are absorbed instead of answered as unknown. Only a host that
     * never answers our CLOSEs runs out of tombstones. */
    struct agent_chan *ch = c->tombstones < AGENT_MAX_TOMBSTONES ? calloc(1, sizeof *ch) : NULL;
    if (!ch) {
        conn_error(c, f->channel, FRAME_E_TOO_MANY, "too many channels awaiting CLOSE");
        conn_send(c, f->channel, FRAME_CLOSE, FRAME_STREAM_NONE, NULL, 0);
        return;
    }
    ch->id = f->channel;
    ch->conn = c;
    ch->credit[FRAME_STREAM_OUT] = ch->credit[FRAME_STREAM_ERR] = FRAME_WINDOW_INITIAL;
    ch->window[FRAME_STREAM_IN] = FRAME_WINDOW_INITIAL;
    ch->next = c->chans;
    c->chans = ch;
    c->live++;
    if (c->live > AGENT_MAX_CHANNELS) {
        agent_chan_fail(ch, FRAME_E_TOO_MANY, "more than %d open channels", AGENT_MAX_CHANNELS);
        return;
    }

    char err[160];
    json_t *req = frame_json(f, err, sizeof err);
    if (!req) {
        agent_chan_fail(ch, FRAME_E_INVALID_ARGUMENT, "request: %s", err);
        return;
    }
    c->hooks->open(ch, req);
    json_decref(req);
}

/* Host broke a channel-level rule: tell it, and end the channel on our side. */
static void chan_violation(struct agent_chan *ch, const char *why)
{
    chan_detach(ch);
    agent_chan_fail(ch, FRAME_E_PROTOCOL, "%s", why);
}

static void conn_on_channel_frame(struct agent_conn *c, const struct frame *f)
{
    struct agent_chan *ch = conn_find(c, f->channel);
    /* Never answer an ERROR with an ERROR (two peers could loop), nor a CLOSE: it may
     * cross a refusal we sent without keeping state. */
    if (!ch && (f->type == FRAME_ERROR || f->type == FRAME_CLOSE))
        return;
    if (!ch) {
        conn_error(c, f->channel, FRAME_E_PROTOCOL, "frame for a channel that is not open");
        return;
    }
    if (f->type == FRAME_CLOSE) {
        chan_detach(ch);
        if (!ch->sent_close)
            conn_send(c, ch->id, FRAME_CLOSE, FRAME_STREAM_NONE, NULL, 0);
        conn_unlink(c, ch);
        return;
    }
    if (ch->sent_close)
        return; /* in flight when we closed */
    const struct agent_chan_ops *ops = ch->ops;
    switch (f->type) {
    case FRAME_DATA:
        if (ch->in_eof)
            return chan_violation(ch, "DATA after EOF");
        if (f->len > ch->window[FRAME_STREAM_IN])
            return chan_violation(ch, "DATA beyond the granted credit");
        ch->window[FRAME_STREAM_IN] -= f->len;
        if (ops && ops->on_data)
            ops->on_data(ch, f->payload, f->len);
        else
            agent_chan_grant(ch, f->len); /* nobody reads IN here: discard, keep flowing */
        return;
    case FRAME_EOF:
        if (ch->in_eof)
            return chan_violation(ch, "second EOF");
        ch->in_eof = true;
        if (ops && ops->on_eof)
            ops->on_eof(ch);
        return;
    case FRAME_CREDIT: {
        uint32_t v = 0;
        frame_credit_value(f, &v);
        if (ch->credit[f->stream] + v > FRAME_MAX_CREDIT)
            return chan_violation(ch, "credit window over 64 MiB");
        ch->credit[f->stream] += v;
        if (ops && ops->on_writable)
            ops->on_writable(ch);
        return;
    }
    case FRAME_CTRL: {
        char err[160];
        json_t *ctrl = frame_json(f, err, sizeof err);
        if (!ctrl)
            agent_chan_error(ch, FRAME_E_INVALID_ARGUMENT, "ctrl: %s", err);
        else if (!ops || !ops->on_ctrl)
            agent_chan_error(ch, FRAME_E_UNSUPPORTED, "this channel takes no CTRL");
        else
            ops->on_ctrl(ch, ctrl);
        json_decref(ctrl);
        return;
    }
    case FRAME_ERROR:
        log_warn("agent.host_error", "channel=%u", ch->id);
        return;
    default:
        return;
    }
}

static void conn_dispatch(struct agent_conn *c, const struct frame *f)
{
    const char *why;
    if (frame_check(f, FRAME_FROM_HOST, &why) < 0) {
        conn_error(c, f->channel, FRAME_E_PROTOCOL, why);
        return;
    }
    if (f->type == FRAME_HELLO)
        return conn_on_hello(c, f);
    if (!c->hello) {
        conn_error(c, f->channel, FRAME_E_PROTOCOL, "HELLO must come first");
        return;
    }
    switch (f->type) {
    case FRAME_PING:
        conn_send(c, 0, FRAME_PONG, FRAME_STREAM_NONE, f->payload, f->len);
        return;
    case FRAME_PONG:
        return;
    case FRAME_OPEN:
        return conn_on_open(c, f);
    case FRAME_ERROR:
        if (f->channel == FRAME_CONTROL_CHANNEL) {
            log_warn("agent.host_error", "channel=0");
            return;
        }
        return conn_on_channel_frame(c, f);
    default:
        return conn_on_channel_frame(c, f);
    }
}

int64_t agent_conn_input_age_ns(const struct agent_conn *c)
{
    int64_t age = c->in_at_ns ? clock_mono_ns() - c->in_at_ns : 0;
    return age > 0 ? age : 0;
}

int agent_conn_input(struct agent_conn *c, const uint8_t *p, size_t n)
{
    if (c->broken)
        return -1;
    c->in_at_ns = clock_mono_ns();
    if (agent_buf_add(&c->in, p, n) < 0) {
        c->broken = true;
        return -1;
    }
    while (!c->broken) {
        struct frame f;
        size_t used;
        const char *why;
        enum frame_parse_result r = frame_parse(agent_buf_peek(&c->in), c->in.len, &f, &used, &why);
        if (r == FRAME_PARSE_MORE)
            break;
        if (r == FRAME_PARSE_ERROR) {
            conn_error(c, 0, FRAME_E_PROTOCOL, why);
            c->broken = true;
            break;
        }
        conn_dispatch(c, &f);
        /* A HELLO restart may have emptied nothing of `in`, so drop exactly this frame. */
        agent_buf_drop(&c->in, used);
    }
    c->in_at_ns = 0;
    return c->broken ? -1 : 0;
}

struct agent_buf *agent_conn_output(struct agent_conn *c)
{
    return &c->out;
}

void agent_conn_wrote(struct agent_conn *c)
{
    if (!c->congested || c->out.len > AGENT_OUT_LOW)
        return;
    c->congested = false;
    /* Waking an op may free nothing (frees happen only on host CLOSE), but be safe
     * against an op closing its own channel: take next first. */
    for (struct agent_chan *ch = c->chans, *next; ch; ch = next) {
        next = ch->next;
        if (ch->ops && ch->ops->on_writable)
            ch->ops->on_writable(ch);
        if (c->congested)
            break;
    }
}

bool agent_conn_congested(const struct agent_conn *c)
{
    return c->congested;
}

unsigned agent_conn_channels(const struct agent_conn *c)
{
    return c->live;
}

size_t agent_chan_room(const struct agent_chan *ch, enum frame_stream stream)
{
    if (ch->sent_close || ch->conn->congested || ch->conn->broken)
        return 0;
    uint64_t r = ch->credit[stream];
    return r > FRAME_MAX_PAYLOAD ? FRAME_MAX_PAYLOAD : (size_t)r;
}

void agent_chan_data(struct agent_chan *ch, enum frame_stream stream, const void *p, size_t n)
{
    if (ch->sent_close || n == 0 || n > ch->credit[stream] || n > FRAME_MAX_PAYLOAD)
        return;
    ch->credit[stream] -= n;
    conn_send(ch->conn, ch->id, FRAME_DATA, stream, p, n);
}

void agent_chan_eof(struct agent_chan *ch, enum frame_stream stream)
{
    if (!ch->sent_close)
        conn_send(ch->conn, ch->id, FRAME_EOF, stream, NULL, 0);
}

void agent_chan_event(struct agent_chan *ch, json_t *ev)
{
    if (ev && !ch->sent_close)
        conn_send_json(ch->conn, ch->id, FRAME_EVENT, ev);
    json_decref(ev);
}

__attribute__((format(printf, 3, 0)))
static void chan_verror(struct agent_chan *ch, const char *code, const char *fmt, va_list ap)
{
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    if (!ch->sent_close)
        conn_error(ch->conn, ch->id, code, msg);
}

void agent_chan_error(struct agent_chan *ch, const char *code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    chan_verror(ch, code, fmt, ap);
    va_end(ap);
}

void agent_chan_errno(struct agent_chan *ch, int err, const char *what)
{
    agent_chan_error(ch, agent_errno_code(err), "%s: %s", what, strerror(err));
}

void agent_chan_grant(struct agent_chan *ch, uint32_t n)
{
    if (ch->sent_close || ch->in_eof || n == 0)
        return;
    uint8_t p[4];
    ch->window[FRAME_STREAM_IN] += n;
    frame_credit_payload(p, n);
    conn_send(ch->conn, ch->id, FRAME_CREDIT, FRAME_STREAM_IN, p, sizeof p);
}

void agent_chan_close(struct agent_chan *ch)
{
    if (ch->sent_close)
        return;
    ch->ops = NULL;
    ch->impl = NULL;
    ch->sent_close = true;
    ch->conn->live--;
    ch->conn->tombstones++;
    conn_send(ch->conn, ch->id, FRAME_CLOSE, FRAME_STREAM_NONE, NULL, 0);
}

void agent_chan_fail(struct agent_chan *ch, const char *code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    chan_verror(ch, code, fmt, ap);
    va_end(ap);
    agent_chan_close(ch);
}

void agent_chan_fail_errno(struct agent_chan *ch, int err, const char *what)
{
    agent_chan_errno(ch, err, what);
    agent_chan_close(ch);
}

const char *agent_errno_code(int err)
{
    switch (err) {
    case ENOENT:
    case ESRCH:
        return FRAME_E_NOT_FOUND;
    case EACCES:
    case EPERM:
    case EROFS:
        return FRAME_E_PERMISSION_DENIED;
    case EEXIST:
        return FRAME_E_ALREADY_EXISTS;
    case ENOTDIR:
        return FRAME_E_NOT_DIR;
    case EISDIR:
        return FRAME_E_IS_DIR;
    case ENOTEMPTY:
        return FRAME_E_NOT_EMPTY;
    case ENOSPC:
    case EDQUOT:
        return FRAME_E_NO_SPACE;
    case EINVAL:
    case ENAMETOOLONG:
    case ELOOP:
        return FRAME_E_INVALID_ARGUMENT;
    case EMFILE:
    case ENFILE:
    case EAGAIN:
        return FRAME_E_TOO_MANY;
    default:
        return FRAME_E_INTERNAL;
    }
}
