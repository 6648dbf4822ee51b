/* test_agentc: the host client against a scripted (and hostile) fake agent on the other
 * end of a socketpair: every protocol violation ends the connection with "protocol",
 * never a crash; credits are honoured both ways; callbacks may free and close. */
#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <event2/event.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "daemon/agentc/agentc.h"

struct fake {
    struct event_base *base;
    struct agentc *c;
    int peer;                     /* the fake agent's end (blocking) */
    uint8_t in[FRAME_HEADER_SIZE + FRAME_MAX_PAYLOAD];
    size_t inlen;
    bool ready, closed;
    char code[64];
};

static void on_ready(void *arg, json_t *hello)
{
    ((struct fake *)arg)->ready = true;
}

static void on_closed(void *arg, const char *code, const char *message)
{
    struct fake *f = arg;
    f->closed = true;
    snprintf(f->code, sizeof f->code, "%s", code);
}

static const struct agentc_callbacks cbs = {.on_ready = on_ready, .on_closed = on_closed};

static void fake_start(struct fake *f)
{
    int sv[2];
    memset(f, 0, sizeof *f);
    signal(SIGPIPE, SIG_IGN);
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    f->base = event_base_new();
    f->c = agentc_new(f->base, sv[0], &cbs, f);
    assert_non_null(f->c);
    f->peer = sv[1];
}

static void fake_stop(struct fake *f)
{
    agentc_free(f->c);
    close(f->peer);
    event_base_free(f->base);
}

static void pump(struct fake *f)
{
    event_base_loop(f->base, EVLOOP_NONBLOCK);
}

static void pump(struct fake *f);

/* Writes everything, running agentc's loop while the socket is full. */
static void fake_write(struct fake *f, const void *p, size_t n)
{
    const uint8_t *b = p;
    for (int spins = 0; n > 0; spins++) {
        assert_true(spins < 1000000); /* hang guard */
        ssize_t k = send(f->peer, b, n, MSG_DONTWAIT);
        if (k < 0) {
            assert_int_equal(errno, EAGAIN);
            pump(f);
            continue;
        }
        b += k;
        n -= (size_t)k;
    }
}

static void fake_send(struct fake *f, uint32_t ch, unsigned type, unsigned stream, const void *p,
                      size_t n)
{
    uint8_t hdr[FRAME_HEADER_SIZE];
    frame_encode_header(hdr, ch, (enum frame_type)type, (enum frame_stream)stream, (uint32_t)n);
    fake_write(f, hdr, sizeof hdr);
    fake_write(f, p, n);
}

static void fake_json(struct fake *f, uint32_t ch, unsigned type, const char *json)
{
    fake_send(f, ch, type, 0, json, strlen(json));
}

/* Next frame from agentc (running its loop while waiting); false at EOF. */
static bool fake_recv(struct fake *f, struct frame *fr, char *pl, size_t cap)
{
    for (int spins = 0;; spins++) {
        size_t used;
        const char *why;
        if (frame_parse(f->in, f->inlen, fr, &used, &why) == FRAME_PARSE_OK) {
            assert_int_equal(frame_check(fr, FRAME_FROM_HOST, &why), 0);
            assert_true(fr->len < cap);
            memcpy(pl, fr->payload, fr->len);
            pl[fr->len] = '\0';
            memmove(f->in, f->in + used, f->inlen - used);
            f->inlen -= used;
            return true;
        }
        assert_true(spins < 100000); /* hang guard */
        pump(f);
        struct pollfd p = {.fd = f->peer, .events = POLLIN};
        if (poll(&p, 1, 10) != 1)
            continue;
        ssize_t n = read(f->peer, f->in + f->inlen, sizeof f->in - f->inlen);
        if (n <= 0)
            return false;
        f->inlen += (size_t)n;
    }
}

static void expect(struct fake *f, unsigned type, uint32_t ch, char *pl, size_t cap)
{
    struct frame fr;
    assert_true(fake_recv(f, &fr, pl, cap));
    assert_int_equal(fr.type, type);
    assert_int_equal(fr.channel, ch);
}

/* Host HELLO read, agent HELLO sent, agentc ready. */
static void handshake(struct fake *f)
{
    char pl[4096];
    expect(f, FRAME_HELLO, 0, pl, sizeof pl);
    assert_non_null(strstr(pl, "\"version\":1"));
    fake_json(f, 0, FRAME_HELLO, "{\"version\":1,\"min_version\":1,\"software\":\"fake\"}");
    while (!f->ready)
        pump(f);
    assert_true(agentc_is_ready(f->c));
    assert_string_equal(json_string_value(json_object_get(agentc_hello(f->c), "software")), "fake");
}

/* ---- a channel recorder ---- */

struct rec {
    json_t *events;
    size_t out, err;
    bool eof_out, closed, drained;
    char code[64];
    struct fake *f;
    bool free_in_event;          /* agentc_free from inside on_event */
    bool close_in_data;          /* agentc_close from inside on_data */
    struct agentc_chan *ch;
};

static void r_event(void *arg, json_t *ev)
{
    struct rec *r = arg;
    json_array_append(r->events, ev);
    if (r->free_in_event) {
        agentc_free(r->f->c);
        r->f->c = NULL;
    }
}

static void r_data(void *arg, enum frame_stream s, const uint8_t *p, size_t n)
{
    struct rec *r = arg;
    if (s == FRAME_STREAM_OUT)
        r->out += n;
    else
        r->err += n;
    if (r->close_in_data)
        agentc_close(r->ch);
}

static void r_eof(void *arg, enum frame_stream s)
{
    ((struct rec *)arg)->eof_out |= s == FRAME_STREAM_OUT;
}

static void r_error(void *arg, const char *code, const char *message)
{
    struct rec *r = arg;
    snprintf(r->code, sizeof r->code, "%s", code);
}

static void r_close(void *arg)
{
    ((struct rec *)arg)->closed = true;
}

static void r_drain(void *arg)
{
    ((struct rec *)arg)->drained = true;
}

static const struct agentc_chan_ops rec_ops = {
    .on_event = r_event, .on_data = r_data, .on_eof = r_eof,
    .on_error = r_error, .on_close = r_close, .on_drain = r_drain,
};

static struct agentc_chan *open_rec(struct fake *f, struct rec *r, unsigned flags)
{
    char err[128], pl[4096];
    memset(r, 0, sizeof *r);
    r->f = f;
    r->events = json_array();
    json_t *req = json_pack("{s:s}", "op", "exec");
    r->ch = agentc_open(f->c, req, &rec_ops, r, flags, err, sizeof err);
    json_decref(req);
    assert_non_null(r->ch);
    expect(f, FRAME_OPEN, agentc_chan_id(r->ch), pl, sizeof pl);
    assert_string_equal(pl, "{\"op\":\"exec\"}");
    return r->ch;
}

static void test_happy_path(void **state)
{
    struct fake f;
    struct rec r;
    char pl[4096];
    fake_start(&f);
    handshake(&f);
    struct agentc_chan *ch = open_rec(&f, &r, 0);
    uint32_t id = agentc_chan_id(ch);
    assert_int_equal(id & 1, 1);
    fake_json(&f, id, FRAME_EVENT, "{\"type\":\"started\",\"pid\":5}");
    fake_send(&f, id, FRAME_DATA, FRAME_STREAM_OUT, "hello", 5);
    fake_send(&f, id, FRAME_DATA, FRAME_STREAM_ERR, "e", 1);
    /* automatic credit: agentc re-grants what it delivered */
    expect(&f, FRAME_CREDIT, id, pl, sizeof pl);
    expect(&f, FRAME_CREDIT, id, pl, sizeof pl);
    fake_send(&f, id, FRAME_EOF, FRAME_STREAM_OUT, NULL, 0);
    fake_json(&f, id, FRAME_ERROR, "{\"code\":\"not_found\",\"message\":\"m\"}");
    fake_send(&f, 0, FRAME_PING, 0, "p", 1);
    expect(&f, FRAME_PONG, 0, pl, sizeof pl);
    assert_string_equal(pl, "p");
    fake_send(&f, id, FRAME_CLOSE, 0, NULL, 0);
    expect(&f, FRAME_CLOSE, id, pl, sizeof pl);
    assert_true(r.closed && r.eof_out);
    assert_int_equal(r.out, 5);
    assert_int_equal(r.err, 1);
    assert_int_equal(json_array_size(r.events), 1);
    assert_string_equal(r.code, "not_found");
    assert_false(f.closed);
    json_decref(r.events);
    fake_stop(&f);
}

/* IN data goes out only within the agent's credit; on_drain when the queue empties. */
static void test_write_credit(void **state)
{
    struct fake f;
    struct rec r;
    static char pl[FRAME_MAX_PAYLOAD + 1];
    fake_start(&f);
    handshake(&f);
    struct agentc_chan *ch = open_rec(&f, &r, 0);
    uint32_t id = agentc_chan_id(ch);
    static uint8_t big[FRAME_WINDOW_INITIAL + 1000];
    assert_int_equal(agentc_write(ch, big, sizeof big), 0);
    assert_int_equal(agentc_queued(ch), 1000);
    assert_int_equal(agentc_eof(ch), 0);
    size_t got = 0;
    struct frame fr;
    while (got < FRAME_WINDOW_INITIAL) {
        assert_true(fake_recv(&f, &fr, pl, sizeof pl));
        assert_int_equal(fr.type, FRAME_DATA);
        got += fr.len;
    }
    assert_int_equal(got, FRAME_WINDOW_INITIAL);
    pump(&f);
    assert_int_equal(agentc_queued(ch), 1000);
    assert_false(r.drained);
    uint8_t credit[4];
    frame_credit_payload(credit, 600);
    fake_send(&f, id, FRAME_CREDIT, FRAME_STREAM_IN, credit, 4);
    assert_true(fake_recv(&f, &fr, pl, sizeof pl));
    assert_int_equal(fr.len, 600);
    fake_send(&f, id, FRAME_CREDIT, FRAME_STREAM_IN, credit, 4);
    assert_true(fake_recv(&f, &fr, pl, sizeof pl));
    assert_int_equal(fr.len, 400);
    expect(&f, FRAME_EOF, id, pl, sizeof pl);
    assert_true(r.drained);
    assert_int_equal(agentc_write(ch, "x", 1), -1); /* after EOF */
    agentc_close(ch);
    expect(&f, FRAME_CLOSE, id, pl, sizeof pl);
    /* frames in flight after our CLOSE are swallowed, then the agent's CLOSE frees it */
    fake_send(&f, id, FRAME_DATA, FRAME_STREAM_OUT, "late", 4);
    fake_send(&f, id, FRAME_CLOSE, 0, NULL, 0);
    pump(&f);
    pump(&f);
    assert_false(r.closed); /* no callback after agentc_close */
    assert_int_equal(r.out, 0);
    assert_false(f.closed);
    json_decref(r.events);
    fake_stop(&f);
}

/* Manual credit: nothing beyond the window is accepted from the agent. */
static void test_manual_credit(void **state)
{
    struct fake f;
    struct rec r;
    char pl[4096];
    fake_start(&f);
    handshake(&f);
    struct agentc_chan *ch = open_rec(&f, &r, AGENTC_MANUAL_CREDIT);
    uint32_t id = agentc_chan_id(ch);
    static uint8_t chunk[FRAME_MAX_PAYLOAD];
    for (unsigned i = 0; i < FRAME_WINDOW_INITIAL / sizeof chunk; i++)
        fake_send(&f, id, FRAME_DATA, FRAME_STREAM_OUT, chunk, sizeof chunk);
    while (r.out < FRAME_WINDOW_INITIAL)
        pump(&f);
    assert_int_equal(agentc_grant(ch, FRAME_STREAM_OUT, 10), 0);
    expect(&f, FRAME_CREDIT, id, pl, sizeof pl);
    assert_int_equal(agentc_grant(ch, FRAME_STREAM_IN, 10), -1);
    fake_send(&f, id, FRAME_DATA, FRAME_STREAM_OUT, chunk, 11); /* one byte too many */
    while (!f.closed)
        pump(&f);
    assert_string_equal(f.code, FRAME_E_PROTOCOL);
    assert_true(r.closed);
    assert_string_equal(r.code, FRAME_E_DISCONNECTED);
    json_decref(r.events);
    fake_stop(&f);
}

/* Each hostile input ends the connection with "protocol" (or its own code). */
static void hostile(const void *frame, size_t n, bool with_hello, bool with_chan, const char *code)
{
    struct fake f;
    struct rec r = {0};
    fake_start(&f);
    if (with_hello)
        handshake(&f);
    if (with_chan)
        open_rec(&f, &r, 0);
    fake_write(&f, frame, n);
    while (!f.closed)
        pump(&f);
    assert_string_equal(f.code, code);
    assert_false(agentc_is_ready(f.c));
    char err[128];
    json_t *req = json_pack("{s:s}", "op", "ps");
    assert_null(agentc_open(f.c, req, &rec_ops, &r, 0, err, sizeof err));
    json_decref(req);
    if (with_chan) {
        assert_true(r.closed);
        json_decref(r.events);
    }
    fake_stop(&f);
}

static size_t mk(uint8_t *buf, uint32_t ch, unsigned type, unsigned stream, const char *p, size_t n)
{
    frame_encode_header(buf, ch, (enum frame_type)type, (enum frame_stream)stream, (uint32_t)n);
    memcpy(buf + FRAME_HEADER_SIZE, p, n);
    return FRAME_HEADER_SIZE + n;
}

static size_t mks(uint8_t *buf, uint32_t ch, unsigned type, unsigned stream, const char *p)
{
    return mk(buf, ch, type, stream, p, strlen(p));
}

/* The answer to an earlier connection's HELLO arriving after this one's (a restore or a
 * reconnect): ignored, the session and its channels carry on. */
static void test_stale_hello_ignored(void **state)
{
    struct fake f;
    struct rec r;
    char pl[4096];
    fake_start(&f);
    handshake(&f);
    struct agentc_chan *ch = open_rec(&f, &r, 0);
    uint32_t id = agentc_chan_id(ch);
    fake_json(&f, 0, FRAME_HELLO, "{\"version\":1,\"min_version\":1,\"software\":\"stale\"}");
    fake_send(&f, id, FRAME_DATA, FRAME_STREAM_OUT, "after", 5);
    expect(&f, FRAME_CREDIT, id, pl, sizeof pl);
    assert_int_equal(r.out, 5);
    assert_true(agentc_is_ready(f.c));
    assert_false(f.closed);
    assert_string_equal(json_string_value(json_object_get(agentc_hello(f.c), "software")), "fake");
    fake_send(&f, id, FRAME_CLOSE, 0, NULL, 0);
    expect(&f, FRAME_CLOSE, id, pl, sizeof pl);
    json_decref(r.events);
    fake_stop(&f);
}

static void test_hostile_agent(void **state)
{
    uint8_t b[1024];
    size_t n;
    const char *hello = "{\"version\":1,\"min_version\":1}";
    n = mks(b, 0, FRAME_HELLO, 0, hello);
    b[10] = 7; /* reserved */
    hostile(b, n, false, false, FRAME_E_PROTOCOL);
    frame_encode_header(b, 0, FRAME_DATA, 0, FRAME_MAX_PAYLOAD + 1);
    hostile(b, FRAME_HEADER_SIZE, false, false, FRAME_E_PROTOCOL);
    n = mks(b, 1, FRAME_DATA, FRAME_STREAM_OUT, "x"); /* before HELLO */
    hostile(b, n, false, false, FRAME_E_PROTOCOL);
    n = mks(b, 0, FRAME_HELLO, 0, "[1]");
    hostile(b, n, false, false, FRAME_E_PROTOCOL);
    const char *future = "{\"version\":7,\"min_version\":5}";
    n = mks(b, 0, FRAME_HELLO, 0, future);
    hostile(b, n, false, false, FRAME_E_UNSUPPORTED);
    n = 0; /* more extra HELLOs than stale connections can explain */
    for (int i = 0; i < 9; i++)
        n += mks(b + n, 0, FRAME_HELLO, 0, hello);
    hostile(b, n, true, false, FRAME_E_PROTOCOL);
    n = mks(b, 3, FRAME_DATA, FRAME_STREAM_OUT, "x"); /* unknown channel */
    hostile(b, n, true, true, FRAME_E_PROTOCOL);
    n = mks(b, 1, FRAME_DATA, FRAME_STREAM_IN, "x"); /* agent cannot send IN */
    hostile(b, n, true, true, FRAME_E_PROTOCOL);
    n = mks(b, 1, FRAME_OPEN, 0, "{}");
    hostile(b, n, true, true, FRAME_E_PROTOCOL);
    n = mks(b, 1, 42, 0, "");
    hostile(b, n, true, true, FRAME_E_PROTOCOL);
    n = mks(b, 1, FRAME_EVENT, 0, "{\"typ\":1}");
    hostile(b, n, true, true, FRAME_E_PROTOCOL);
    n = mks(b, 1, FRAME_EVENT, 0, "{\"type\":");
    hostile(b, n, true, true, FRAME_E_PROTOCOL);
    n = mks(b, 1, FRAME_ERROR, 0, "{\"code\":\"Bad Code\"}");
    hostile(b, n, true, true, FRAME_E_PROTOCOL);
    n = mks(b, 1, FRAME_ERROR, 0, "{\"code\":\"x\",\"message\":5}");
    hostile(b, n, true, true, FRAME_E_PROTOCOL);
    n = mks(b, 0, FRAME_ERROR, 0, "{\"code\":\"unsupported\",\"message\":\"bye\"}");
    hostile(b, n, true, false, FRAME_E_UNSUPPORTED);
    uint8_t credit[4];
    frame_credit_payload(credit, FRAME_MAX_CREDIT);
    n = mk(b, 1, FRAME_CREDIT, FRAME_STREAM_IN, (const char *)credit, 4); /* window overflow */
    hostile(b, n, true, true, FRAME_E_PROTOCOL);
    n = mks(b, 1, FRAME_EOF, FRAME_STREAM_OUT, "");
    n += mks(b + n, 1, FRAME_EOF, FRAME_STREAM_OUT, ""); /* twice */
    hostile(b, n, true, true, FRAME_E_PROTOCOL);
    n = mks(b, 1, FRAME_EOF, FRAME_STREAM_OUT, "");
    n += mks(b + n, 1, FRAME_DATA, FRAME_STREAM_OUT, "x"); /* after EOF */
    hostile(b, n, true, true, FRAME_E_PROTOCOL);
}

/* Freeing the client, or closing a channel, from inside callbacks. */
static void test_reentrancy(void **state)
{
    struct fake f;
    struct rec r;
    char pl[4096];
    fake_start(&f);
    handshake(&f);
    struct agentc_chan *ch = open_rec(&f, &r, 0);
    uint32_t id = agentc_chan_id(ch);
    r.close_in_data = true;
    fake_send(&f, id, FRAME_DATA, FRAME_STREAM_OUT, "a", 1);
    fake_send(&f, id, FRAME_DATA, FRAME_STREAM_OUT, "b", 1);
    expect(&f, FRAME_CLOSE, id, pl, sizeof pl);
    assert_int_equal(r.out, 1); /* nothing after the close */
    json_decref(r.events);

    ch = open_rec(&f, &r, 0);
    r.free_in_event = true;
    fake_json(&f, agentc_chan_id(ch), FRAME_EVENT, "{\"type\":\"a\"}");
    fake_json(&f, agentc_chan_id(ch), FRAME_EVENT, "{\"type\":\"b\"}");
    while (f.c)
        pump(&f);
    assert_int_equal(json_array_size(r.events), 1);
    json_decref(r.events);
    /* the socket is closed at once */
    struct frame fr;
    while (fake_recv(&f, &fr, pl, sizeof pl)) {
    }
    close(f.peer);
    event_base_free(f.base);
}

/* The agent hanging up: channels get "disconnected", then on_closed. */
static void test_agent_gone(void **state)
{
    struct fake f;
    struct rec r;
    fake_start(&f);
    handshake(&f);
    open_rec(&f, &r, 0);
    close(f.peer);
    f.peer = -1;
    while (!f.closed)
        pump(&f);
    assert_string_equal(f.code, FRAME_E_DISCONNECTED);
    assert_string_equal(r.code, FRAME_E_DISCONNECTED);
    assert_true(r.closed);
    json_decref(r.events);
    agentc_free(f.c);
    event_base_free(f.base);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_happy_path),    cmocka_unit_test(test_write_credit),
        cmocka_unit_test(test_manual_credit), cmocka_unit_test(test_stale_hello_ignored),
        cmocka_unit_test(test_hostile_agent),
        cmocka_unit_test(test_reentrancy),    cmocka_unit_test(test_agent_gone),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
