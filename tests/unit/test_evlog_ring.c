/* Unit tests for the event ring (evlog_ring) (replay, eviction, credit room) and the SSE
 * representation of its events. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "daemon/evlog/evlog_sse.h"
#include "daemon/evlog/evlog_ring.h"

/* Concatenates the payload of every retained record of `kind` from id `from` on. */
static size_t collect(const struct evlog_ring *r, uint64_t from, enum evlog_kind kind,
                      uint8_t *out, size_t cap)
{
    size_t n = 0;
    for (uint64_t id = from; id < evlog_ring_next_id(r); id++) {
        const struct evlog_rec *rec = evlog_ring_get(r, id);
        assert_non_null(rec);
        assert_int_equal(rec->id, id);
        if (rec->kind != kind)
            continue;
        assert_true(n + rec->len <= cap);
        memcpy(out + n, rec->data, rec->len);
        n += rec->len;
    }
    return n;
}

static void test_ids_and_merge(void **state)
{
    (void)state;
    struct evlog_ring r;
    assert_int_equal(evlog_ring_init(&r, 1 << 20), 0);
    assert_int_equal(evlog_ring_next_id(&r), 1);
    assert_int_equal(evlog_ring_resume(&r, 0), EVLOG_RING_OK);
    assert_int_equal(evlog_ring_resume(&r, 1), EVLOG_RING_FUTURE);
    assert_int_equal(evlog_ring_append(&r, EVLOG_START, "{\"pid\":7}", 9, 1), 0);
    /* Unseen output of one stream merges into one record, one byte at a time or not. */
    for (int i = 0; i < 100; i++)
        assert_int_equal(evlog_ring_append(&r, EVLOG_STDOUT, "x", 1, 1), 0);
    assert_int_equal(evlog_ring_next_id(&r), 3);
    assert_int_equal(evlog_ring_get(&r, 2)->len, 100);
    /* Another stream starts a new record; so does a sealed tail. */
    assert_int_equal(evlog_ring_append(&r, EVLOG_STDERR, "e", 1, 1), 0);
    evlog_ring_seal(&r, 3);
    assert_int_equal(evlog_ring_append(&r, EVLOG_STDERR, "f", 1, 1), 0);
    assert_int_equal(evlog_ring_next_id(&r), 5);
    assert_int_equal(evlog_ring_get(&r, 3)->len, 1);
    assert_memory_equal(evlog_ring_get(&r, 4)->data, "f", 1);
    /* Sealing is clamped to what exists. */
    evlog_ring_seal(&r, 1000);
    assert_int_equal(r.sealed, 4);
    evlog_ring_free(&r);
}

static void test_split_large_write(void **state)
{
    (void)state;
    struct evlog_ring r;
    size_t big = 3 * EVLOG_EVENT_MAX + 5;
    uint8_t *buf = malloc(big), *back = malloc(big);
    for (size_t i = 0; i < big; i++)
        buf[i] = (uint8_t)(i * 131 + 7);
    assert_int_equal(evlog_ring_init(&r, 1 << 22), 0);
    assert_int_equal(evlog_ring_append(&r, EVLOG_STDOUT, buf, big, 1), 0);
    assert_int_equal(evlog_ring_next_id(&r), 5);
    for (uint64_t id = 1; id < 5; id++)
        assert_true(evlog_ring_get(&r, id)->len <= EVLOG_EVENT_MAX);
    assert_int_equal(collect(&r, 1, EVLOG_STDOUT, back, big), big);
    assert_memory_equal(buf, back, big);
    evlog_ring_free(&r);
    free(buf);
    free(back);
}

/* Unseen records are never evicted; seen ones go when room is needed, and a reader
 * resuming before them is told they are gone. */
static void test_eviction_and_resume(void **state)
{
    (void)state;
    struct evlog_ring r;
    char chunk[1000];
    memset(chunk, 'a', sizeof chunk);
    size_t cap = 10 * (sizeof chunk + EVLOG_REC_OVERHEAD);
    assert_int_equal(evlog_ring_init(&r, cap), 0);
    for (int i = 0; i < 10; i++) /* alternating streams: one record each, none seen */
        assert_int_equal(evlog_ring_append(&r, i % 2 ? EVLOG_STDERR : EVLOG_STDOUT, chunk,
                                          sizeof chunk, evlog_ring_next_id(&r)), 0);
    assert_int_equal(evlog_ring_first_id(&r), 1);
    assert_int_equal(evlog_ring_room(&r, evlog_ring_next_id(&r)), 0);
    /* Nothing was seen: an append goes over budget rather than dropping output. */
    assert_int_equal(evlog_ring_append(&r, EVLOG_EXIT, "{}", 2, 11), 0);
    assert_int_equal(evlog_ring_first_id(&r), 1);
    assert_true(r.cost > cap);

    /* A reader saw 1..4: they are evictable and room counts only what is pinned. */
    evlog_ring_seal(&r, 4);
    size_t rec = sizeof chunk + EVLOG_REC_OVERHEAD, exit_cost = 2 + EVLOG_REC_OVERHEAD;
    assert_int_equal(evlog_ring_room(&r, 5), cap - (6 * rec + exit_cost));
    /* keep beyond the sealed mark: unseen records stay pinned anyway. */
    assert_int_equal(evlog_ring_room(&r, 12), cap - (6 * rec + exit_cost));
    evlog_ring_seal(&r, 8);
    assert_int_equal(evlog_ring_room(&r, 12), cap - (2 * rec + exit_cost));
    /* A slower reader at 6 pins 6.. even though 8 is the sealed mark. */
    assert_int_equal(evlog_ring_room(&r, 6), cap - (5 * rec + exit_cost));

    evlog_ring_seal(&r, 11);
    assert_int_equal(evlog_ring_append(&r, EVLOG_STDOUT, chunk, sizeof chunk, 6), 0);
    /* Just enough of the oldest seen records went to fit the new one. */
    assert_int_equal(evlog_ring_first_id(&r), 3);
    assert_true(r.cost <= cap);
    assert_int_equal(evlog_ring_resume(&r, 1), EVLOG_RING_GONE);
    assert_int_equal(evlog_ring_resume(&r, 2), EVLOG_RING_OK);
    assert_int_equal(evlog_ring_resume(&r, 12), EVLOG_RING_OK);
    assert_int_equal(evlog_ring_resume(&r, 13), EVLOG_RING_FUTURE);
    assert_null(evlog_ring_get(&r, 2));
    assert_null(evlog_ring_get(&r, 13));
    assert_non_null(evlog_ring_get(&r, 12));
    /* A reader pinning 3 keeps it even when the budget would need it gone. */
    evlog_ring_seal(&r, 12);
    assert_int_equal(evlog_ring_append(&r, EVLOG_STDOUT, chunk, sizeof chunk, 3), 0);
    assert_int_equal(evlog_ring_first_id(&r), 3);
    assert_true(r.cost > cap);
    evlog_ring_free(&r);
}

/* The contract the session relies on: feeding the ring only what evlog_ring_room allows
 * and reading everything back with a reader that stops and resumes loses nothing and
 * repeats nothing, whatever the interleaving. */
static void test_backpressure_no_loss(void **state)
{
    (void)state;
    struct evlog_ring r;
    size_t total = 2u << 20, produced = 0, consumed = 0;
    uint8_t *want = malloc(total), *got = malloc(total);
    uint32_t seed = 12345;
    for (size_t i = 0; i < total; i++)
        want[i] = (uint8_t)((seed = seed * 1103515245u + 12345u) >> 16);
    assert_int_equal(evlog_ring_init(&r, 256 * 1024), 0);
    uint64_t next = 1; /* the reader's position */
    unsigned rounds = 0;
    while (consumed < total) {
        rounds++;
        /* Producer: a random burst within the room the ring grants. */
        size_t room = evlog_ring_room(&r, next);
        size_t burst = (seed = seed * 1103515245u + 12345u) % 70000;
        if (burst > room)
            burst = room > EVLOG_REC_OVERHEAD ? room - EVLOG_REC_OVERHEAD : 0;
        if (burst > total - produced)
            burst = total - produced;
        enum evlog_kind k = (rounds & 1) ? EVLOG_STDOUT : EVLOG_STDERR;
        if (burst) {
            assert_int_equal(evlog_ring_append(&r, k, want + produced, burst, next), 0);
            produced += burst;
        }
        assert_true(r.cost <= r.cap + EVLOG_EVENT_MAX + 2 * EVLOG_REC_OVERHEAD);
        /* Reader: takes a few events, sometimes "reconnects" at the last id it saw. */
        unsigned take = (seed >> 8) % 5;
        for (unsigned i = 0; i < take && next < evlog_ring_next_id(&r); i++) {
            const struct evlog_rec *rec = evlog_ring_get(&r, next);
            assert_non_null(rec);
            memcpy(got + consumed, rec->data, rec->len);
            consumed += rec->len;
            evlog_ring_seal(&r, next);
            next++;
        }
        if ((seed >> 4) % 7 == 0)
            assert_int_equal(evlog_ring_resume(&r, next - 1), EVLOG_RING_OK);
        assert_true(rounds < 1000000);
    }
    assert_memory_equal(want, got, total);
    evlog_ring_free(&r);
    free(want);
    free(got);
}

static void test_event_format(void **state)
{
    (void)state;
    struct evlog_ring r;
    char *d = NULL;
    assert_int_equal(evlog_ring_init(&r, 4096), 0);
    assert_int_equal(evlog_ring_append(&r, EVLOG_STDOUT, "\0\xff\n", 3, 1), 0);
    assert_int_equal(evlog_ring_append(&r, EVLOG_EXIT, "{\"code\":3,\"signal\":null}", 24, 1),
                     0);
    const struct evlog_rec *a = evlog_ring_get(&r, 1), *b = evlog_ring_get(&r, 2);
    assert_string_equal(evlog_sse_name(a->kind), "stdout");
    assert_int_equal(evlog_sse_data(a, &d), 15);
    assert_string_equal(d, "{\"data\":\"AP8K\"}");
    free(d);
    assert_string_equal(evlog_sse_name(b->kind), "exit");
    assert_int_equal(evlog_sse_data(b, &d), 24);
    assert_string_equal(d, "{\"code\":3,\"signal\":null}");
    free(d);
    assert_string_equal(evlog_sse_name(EVLOG_START), "start");
    assert_string_equal(evlog_sse_name(EVLOG_STDERR), "stderr");
    assert_string_equal(evlog_sse_name(EVLOG_ERROR), "error");
    evlog_ring_free(&r);
}

/* After a restart ids continue above a stored ceiling: everything older is gone. */
static void test_renumber(void **state)
{
    (void)state;
    struct evlog_ring r;
    assert_int_equal(evlog_ring_init(&r, 4096), 0);
    evlog_ring_renumber(&r, 65537);
    assert_int_equal(evlog_ring_next_id(&r), 65537);
    assert_int_equal(evlog_ring_resume(&r, 12), EVLOG_RING_GONE);
    assert_int_equal(evlog_ring_resume(&r, 65536), EVLOG_RING_OK);
    assert_int_equal(evlog_ring_resume(&r, 65537), EVLOG_RING_FUTURE);
    assert_int_equal(evlog_ring_append(&r, EVLOG_STDOUT, "x", 1, 65537), 0);
    assert_int_equal(evlog_ring_get(&r, 65537)->len, 1);
    /* Only an empty ring is renumbered. */
    evlog_ring_renumber(&r, 1 << 20);
    assert_int_equal(evlog_ring_next_id(&r), 65538);
    evlog_ring_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ids_and_merge),
        cmocka_unit_test(test_split_large_write),
        cmocka_unit_test(test_eviction_and_resume),
        cmocka_unit_test(test_backpressure_no_loss),
        cmocka_unit_test(test_event_format),
        cmocka_unit_test(test_renumber),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
