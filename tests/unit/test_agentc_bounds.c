/* test_agentc_bounds: a hostile agent cannot make spaced hold unbounded memory, and a
 * flooding or stalled agent is cut off with its own code while another connection on
 * the same loop keeps being served (docs/security.md "A hostile guest and the host's
 * resources").
 *
 * This drives the real agentc (the code spaced runs for every VM) against a fake agent
 * speaking the frame protocol on a socketpair, exactly as QEMU's agent.sock would carry
 * it. What spaced holds per connection is measured with agentc_buffered() (bytes queued
 * toward the agent plus received and not yet handled) after every loop pass; the
 * sandbox-level reaction to the codes (marked failed) is in sbx_act.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "agentc_fake.h"

/* What a connection may hold: the output bound, one more frame, and what one read and
 * the socket layer can leave in the input (a frame being assembled plus one read). */
#define HELD_MAX (AGENTC_OUTQ_MAX + 2u * (FRAME_HEADER_SIZE + FRAME_MAX_PAYLOAD) + 65536u)

static size_t held_peak;

static void pump_measure(struct fake *f)
{
    pump(f);
    if (f->c) {
        size_t n = agentc_buffered(f->c);
        if (n > held_peak)
            held_peak = n;
    }
}

/* A well-behaved agent on the same loop answers one request: the loop still serves it. */
static void good_round_trip(struct fake *g)
{
    struct rec r;
    char pl[4096];
    struct agentc_chan *ch = open_rec(g, &r, 0);
    uint32_t id = agentc_chan_id(ch);
    fake_json(g, id, FRAME_EVENT, "{\"type\":\"result\"}");
    fake_send(g, id, FRAME_CLOSE, 0, NULL, 0);
    expect(g, FRAME_CLOSE, id, pl, sizeof pl);
    assert_true(r.closed);
    assert_int_equal(json_array_size(r.events), 1);
    assert_false(g->closed);
    json_decref(r.events);
}

/* Writes n bytes from the fake without ever reading what agentc sends back, until
 * agentc ends the connection (or the budget is spent); measures as it goes. */
static void flood(struct fake *f, const uint8_t *chunk, size_t n, size_t budget_bytes)
{
    size_t sent = 0;
    while (!f->closed && sent < budget_bytes) {
        ssize_t k = send(f->peer, chunk, n, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (k < 0 && errno != EAGAIN)
            break; /* agentc hung up */
        if (k > 0)
            sent += (size_t)k;
        if (k > 0 && (size_t)k < n) { /* finish this chunk so frames stay whole */
            fake_write(f, chunk + k, n - (size_t)k);
            sent += n - (size_t)k;
        }
        pump_measure(f);
    }
    for (int i = 0; i < 100 && !f->closed; i++)
        pump_measure(f);
}

/* An agent whose output is answered (a CREDIT per DATA frame) but which never reads:
 * what agentc queues toward it stops at the bound and the connection ends as stalled.
 * Before the bound existed this grew by 16 bytes per 13-byte frame, without end. */
static void test_never_reads(void **state)
{
    (void)state;
    struct fake f, g;
    struct rec r;
    fake_start(&f);
    fake_start_on(&g, f.base);
    handshake(&f);
    handshake(&g);
    uint32_t id = agentc_chan_id(open_rec(&f, &r, 0));
    static uint8_t chunk[1000 * (FRAME_HEADER_SIZE + 1)];
    size_t n = 0;
    for (int i = 0; i < 1000; i++) {
        frame_encode_header(chunk + n, id, FRAME_DATA, FRAME_STREAM_OUT, 1);
        chunk[n + FRAME_HEADER_SIZE] = 'x';
        n += FRAME_HEADER_SIZE + 1;
    }
    held_peak = 0;
    /* replies of 16 bytes per 13 sent: 3 * the bound is plenty to reach it */
    flood(&f, chunk, n, 3u * AGENTC_OUTQ_MAX);
    printf("never-reads: held peak %zu bytes, bound %u, delivered %zu\n", held_peak,
           AGENTC_OUTQ_MAX, r.out);
    assert_true(held_peak <= HELD_MAX);
    assert_true(f.closed);
    assert_string_equal(f.code, AGENTC_E_STALLED);
    assert_true(r.closed);
    assert_string_equal(r.code, FRAME_E_DISCONNECTED);
    good_round_trip(&g); /* the other connection was never starved */
    json_decref(r.events);
    agentc_free(g.c);
    close(g.peer);
    fake_stop(&f);
}

/* PINGs beyond the rate end the connection as a flood, whether or not the agent reads
 * the PONGs; a few PINGs are still answered. */
static void test_ping_flood(void **state)
{
    (void)state;
    struct fake f, g;
    char pl[4096];
    fake_start(&f);
    fake_start_on(&g, f.base);
    handshake(&f);
    handshake(&g);
    fake_send(&f, 0, FRAME_PING, 0, "hi", 2);
    expect(&f, FRAME_PONG, 0, pl, sizeof pl);
    assert_string_equal(pl, "hi");
    static uint8_t chunk[256 * (FRAME_HEADER_SIZE + FRAME_PING_MAX)];
    size_t n = 0;
    for (int i = 0; i < 256; i++) {
        frame_encode_header(chunk + n, 0, FRAME_PING, 0, FRAME_PING_MAX);
        memset(chunk + n + FRAME_HEADER_SIZE, 'p', FRAME_PING_MAX);
        n += FRAME_HEADER_SIZE + FRAME_PING_MAX;
    }
    held_peak = 0;
    flood(&f, chunk, n, 64u * 1024u * 1024u);
    printf("ping flood: held peak %zu bytes\n", held_peak);
    assert_true(f.closed);
    assert_string_equal(f.code, AGENTC_E_FLOOD);
    assert_true(held_peak <= HELD_MAX);
    good_round_trip(&g);
    agentc_free(g.c);
    close(g.peer);
    fake_stop(&f);
}

/* The agent grants a huge IN window and stops reading: agentc moves IN bytes to the
 * socket only up to AGENTC_OUTQ_SOFT, the rest stays in the channel's queue (the
 * caller's to bound), and this is no reason to cut the agent off. When it reads again,
 * everything arrives. */
static void test_write_held_back(void **state)
{
    (void)state;
    struct fake f;
    struct rec r;
    fake_start(&f);
    handshake(&f);
    struct agentc_chan *ch = open_rec(&f, &r, 0);
    uint32_t id = agentc_chan_id(ch);
    uint8_t credit[4];
    frame_credit_payload(credit, FRAME_MAX_CREDIT - FRAME_WINDOW_INITIAL);
    fake_send(&f, id, FRAME_CREDIT, FRAME_STREAM_IN, credit, 4);
    for (int i = 0; i < 50; i++)
        pump(&f);
    static uint8_t blob[1u << 20];
    memset(blob, 'w', sizeof blob);
    held_peak = 0;
    for (int i = 0; i < 8; i++) {
        assert_int_equal(agentc_write(ch, blob, sizeof blob), 0);
        for (int k = 0; k < 20; k++)
            pump_measure(&f);
    }
    printf("held back: held peak %zu bytes, queued in the channel %zu\n", held_peak,
           agentc_queued(ch));
    assert_true(held_peak <= AGENTC_OUTQ_SOFT + FRAME_HEADER_SIZE + FRAME_MAX_PAYLOAD);
    assert_true(agentc_queued(ch) >= 8u * sizeof blob - 2u * 1024u * 1024u);
    assert_false(f.closed);
    /* the agent reads again: all 8 MiB arrive, in order, then on_drain */
    size_t got = 0;
    char *pl = malloc(FRAME_MAX_PAYLOAD + 1);
    struct frame fr;
    while (got < 8u * sizeof blob) {
        assert_true(fake_recv(&f, &fr, pl, FRAME_MAX_PAYLOAD + 1));
        assert_int_equal(fr.type, FRAME_DATA);
        got += fr.len;
    }
    free(pl);
    assert_int_equal(got, 8u * sizeof blob);
    assert_int_equal(agentc_queued(ch), 0);
    assert_true(r.drained);
    assert_false(f.closed);
    json_decref(r.events);
    fake_stop(&f);
}

/* Many EVENTs of the largest size are handled one by one (nothing accumulates in
 * agentc); one whose header claims more than a frame may carry ends the connection
 * before its payload is waited for. */
static void test_huge_events(void **state)
{
    (void)state;
    struct fake f;
    struct rec r;
    fake_start(&f);
    handshake(&f);
    uint32_t id = agentc_chan_id(open_rec(&f, &r, 0));
    static char ev[FRAME_MAX_PAYLOAD + 1];
    int pre = snprintf(ev, sizeof ev, "{\"type\":\"x\",\"pad\":\"");
    memset(ev + pre, 'a', FRAME_MAX_PAYLOAD - (size_t)pre - 2);
    memcpy(ev + FRAME_MAX_PAYLOAD - 2, "\"}", 2);
    held_peak = 0;
    for (int i = 0; i < 200; i++) {
        fake_send(&f, id, FRAME_EVENT, 0, ev, FRAME_MAX_PAYLOAD);
        pump_measure(&f);
        json_array_clear(r.events); /* the caller keeps nothing either */
    }
    for (int i = 0; i < 50; i++)
        pump_measure(&f);
    printf("max-size events: held peak %zu bytes\n", held_peak);
    assert_false(f.closed);
    assert_true(held_peak <= 2u * (FRAME_HEADER_SIZE + FRAME_MAX_PAYLOAD) + 65536u);
    uint8_t hdr[FRAME_HEADER_SIZE];
    frame_encode_header(hdr, id, FRAME_EVENT, 0, 16u * 1024u * 1024u);
    fake_write(&f, hdr, sizeof hdr);
    while (!f.closed)
        pump(&f);
    assert_string_equal(f.code, FRAME_E_PROTOCOL);
    json_decref(r.events);
    fake_stop(&f);
}

/* The weight callers bound kept event contents with grows with the bytes, not the count. */
static void test_json_weight(void **state)
{
    (void)state;
    json_t *small = json_pack("{s:s}", "name", "a");
    static char big[60000];
    memset(big, 'n', sizeof big - 1);
    json_t *large = json_pack("{s:s}", "name", big);
    json_t *arr = json_pack("[O,O,[i]]", small, large, 7);
    assert_true(agentc_json_weight(small) >= 5 && agentc_json_weight(small) < 128);
    assert_true(agentc_json_weight(large) >= sizeof big - 1);
    assert_true(agentc_json_weight(arr) >= agentc_json_weight(small) + agentc_json_weight(large));
    json_decref(small);
    json_decref(large);
    json_decref(arr);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json_weight),
        cmocka_unit_test(test_never_reads),
        cmocka_unit_test(test_ping_flood),
        cmocka_unit_test(test_write_held_back),
        cmocka_unit_test(test_huge_events),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
