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

#include "agentc_fake.h"

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
