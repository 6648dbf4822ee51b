/* test_ratelimit: token buckets (burst, refill, Retry-After arithmetic), isolation of
 * clients, the bounded table (idle eviction, shared overflow bucket when full of busy
 * clients), bad configurations, clocks going backwards. Time is passed in: no sleeping. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "daemon/http/ratelimit.h"

static struct rl_table *table(double rate, double burst, size_t max)
{
    struct rl_config cfg = {.rate = rate, .burst = burst, .max_buckets = max};
    struct rl_table *t = rl_new(&cfg);
    assert_non_null(t);
    return t;
}

static void test_burst_then_refill(void **state)
{
    struct rl_table *t = table(10, 5, 0); /* 10/s: a token every 100 ms */
    int64_t now = 1000000;
    for (int i = 0; i < 5; i++)
        assert_int_equal(rl_take(t, "key:a", now), 0);
    /* Empty: the next token is 100 ms away. */
    assert_int_equal(rl_take(t, "key:a", now), 100);
    assert_int_equal(rl_take(t, "key:a", now + 40), 60);
    assert_int_equal(rl_take(t, "key:a", now + 100), 0);
    assert_true(rl_take(t, "key:a", now + 100) > 0);
    /* A long pause refills to the burst, never beyond it. */
    now += 3600 * 1000;
    for (int i = 0; i < 5; i++)
        assert_int_equal(rl_take(t, "key:a", now), 0);
    assert_true(rl_take(t, "key:a", now) > 0);
    struct rl_stats st;
    rl_stats(t, &st);
    assert_int_equal(st.allowed, 11);
    assert_int_equal(st.limited, 4);
    rl_free(t);
}

static void test_slow_rate_wait(void **state)
{
    struct rl_table *t = table(0.5, 1, 0); /* one request per 2 s */
    assert_int_equal(rl_take(t, "ip:10.0.0.1", 0), 0);
    assert_int_equal(rl_take(t, "ip:10.0.0.1", 0), 2000);
    assert_int_equal(rl_take(t, "ip:10.0.0.1", 1999), 1);
    assert_int_equal(rl_take(t, "ip:10.0.0.1", 2000), 0);
    rl_free(t);
}

static void test_clients_are_independent(void **state)
{
    struct rl_table *t = table(1, 2, 0);
    assert_int_equal(rl_take(t, "key:a", 0), 0);
    assert_int_equal(rl_take(t, "key:a", 0), 0);
    assert_true(rl_take(t, "key:a", 0) > 0);
    /* Another key and an address are untouched by a's exhaustion. */
    assert_int_equal(rl_take(t, "key:b", 0), 0);
    assert_int_equal(rl_take(t, "ip:127.0.0.1", 0), 0);
    assert_int_equal(rl_take(t, "ip:127.0.0.1", 0), 0);
    assert_true(rl_take(t, "ip:127.0.0.1", 0) > 0);
    assert_int_equal(rl_take(t, "key:b", 0), 0);
    rl_free(t);
}

static void test_clock_backwards(void **state)
{
    struct rl_table *t = table(1, 1, 0);
    assert_int_equal(rl_take(t, "c", 5000), 0);
    /* Earlier time: no refill, no negative arithmetic. */
    assert_int_equal(rl_take(t, "c", 1000), 1000);
    assert_int_equal(rl_take(t, "c", 6000), 0);
    rl_free(t);
}

static void test_idle_buckets_evicted(void **state)
{
    struct rl_table *t = table(100, 10, 0);
    char key[32];
    for (int i = 0; i < 1000; i++) {
        snprintf(key, sizeof key, "ip:10.0.%d.%d", i / 256, i % 256);
        assert_int_equal(rl_take(t, key, 0), 0);
    }
    struct rl_stats st;
    rl_stats(t, &st);
    assert_int_equal(st.buckets, 1000);
    /* 100 ms later every bucket is full again: each call drops idle ones. */
    for (int i = 0; i < 600; i++)
        rl_take(t, "key:busy", 100 + i);
    rl_stats(t, &st);
    assert_true(st.buckets <= 2);
    assert_true(st.evicted >= 998);
    rl_free(t);
}

static void test_table_bounded_flood_shares_overflow(void **state)
{
    struct rl_table *t = table(1, 3, 8);
    char key[32];
    /* Eight busy clients fill the table (each left with fewer than burst tokens). */
    for (int i = 0; i < 8; i++) {
        snprintf(key, sizeof key, "key:k%d", i);
        assert_int_equal(rl_take(t, key, 0), 0);
    }
    /* A flood of fresh identities cannot grow the table or get fresh buckets: they all
     * draw on one shared overflow bucket of burst 3. */
    int allowed = 0;
    for (int i = 0; i < 10000; i++) {
        snprintf(key, sizeof key, "ip:198.51.100.%d", i);
        allowed += rl_take(t, key, 0) == 0;
    }
    assert_int_equal(allowed, 3);
    struct rl_stats st;
    rl_stats(t, &st);
    assert_int_equal(st.buckets, 8);
    assert_int_equal(st.overflowed, 10000);
    /* The busy clients keep their own buckets. */
    assert_int_equal(rl_take(t, "key:k0", 0), 0);
    assert_int_equal(rl_take(t, "key:k0", 0), 0);
    assert_true(rl_take(t, "key:k0", 0) > 0);
    /* Once they idle, their buckets go and new clients get their own again. */
    assert_int_equal(rl_take(t, "ip:192.0.2.1", 60 * 1000), 0);
    rl_stats(t, &st);
    assert_true(st.buckets < 8);
    assert_int_equal(st.overflowed, 10000);
    rl_free(t);
}

static void test_long_keys_truncated(void **state)
{
    struct rl_table *t = table(1, 1, 0);
    char a[300], b[300];
    memset(a, 'x', sizeof a - 1);
    a[sizeof a - 1] = 0;
    memcpy(b, a, sizeof b);
    b[250] = 'y'; /* differs only past RL_KEY_MAX: the same client */
    assert_int_equal(rl_take(t, a, 0), 0);
    assert_true(rl_take(t, b, 0) > 0);
    rl_free(t);
}

static void test_bad_config(void **state)
{
    struct rl_config zero_rate = {.rate = 0, .burst = 10};
    struct rl_config small_burst = {.rate = 1, .burst = 0.5};
    assert_null(rl_new(&zero_rate));
    assert_null(rl_new(&small_burst));
    assert_null(rl_new(NULL));
    rl_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_burst_then_refill),
        cmocka_unit_test(test_slow_rate_wait),
        cmocka_unit_test(test_clients_are_independent),
        cmocka_unit_test(test_clock_backwards),
        cmocka_unit_test(test_idle_buckets_evicted),
        cmocka_unit_test(test_table_bounded_flood_shares_overflow),
        cmocka_unit_test(test_long_keys_truncated),
        cmocka_unit_test(test_bad_config),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
