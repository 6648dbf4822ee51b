/* test_pool: the warm pool's retry policy and its demand-sized target, without VMs. A fill that fails (here: the
 * clone's overlay lies in a directory that does not exist, so qemu-img fails to make it;
 * or the caller's prepare refuses) is retried after 1 s, then 2 s, ... rather than never again
 * or in a busy loop. Only lower bounds on the waits are checked: a loaded machine may
 * retry later, never sooner. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "clock.h"
#include "daemon/vm/pool.h"

#define CALLS 3

static char work[64];
static int64_t called_at_ms[CALLS];
static unsigned calls, discards;
static int refuse; /* prepare says no capacity */
static struct event_base *break_in_prepare; /* stop the loop as the first fill starts */

static int prepare(struct vm_config *cfg, void *arg)
{
    static char id[32], run[128], disk[160];
    if (calls < CALLS)
        called_at_ms[calls] = clock_mono_ms();
    calls++;
    if (break_in_prepare)
        event_base_loopbreak(break_in_prepare);
    if (refuse)
        return -1;
    snprintf(id, sizeof id, "pool%u", calls);
    snprintf(run, sizeof run, "%s/%s", work, id);
    snprintf(disk, sizeof disk, "%s/missing/%s.qcow2", work, id);
    mkdir(run, 0700);
    cfg->id = id;
    cfg->run_dir = run;
    cfg->disk = disk;
    return 0;
}

static void discard(const char *id, const char *run_dir, void *arg)
{
    discards++;
    rmdir(run_dir);
}

static void check(evutil_socket_t fd, short what, void *arg)
{
    if (calls >= CALLS && (refuse || discards >= CALLS))
        event_base_loopbreak(arg);
}

/* Runs the loop until prepare has been called CALLS times and each clone it made has
 * failed and been discarded (or 60 s passed). */
static void run_until_calls(struct event_base *base)
{
    struct event *tick = event_new(base, -1, EV_PERSIST, check, base);
    struct timeval every = {0, 20000}, limit = {60, 0};
    event_add(tick, &every);
    event_base_loopexit(base, &limit);
    event_base_dispatch(base);
    event_free(tick);
}

/* A fresh work dir holding a small file standing for the template's raw image (its path
 * in raw); the counters reset. */
static void make_work(char *raw, size_t cap)
{
    snprintf(work, sizeof work, "/tmp/test-pool-XXXXXX");
    assert_non_null(mkdtemp(work));
    calls = discards = 0;
    snprintf(raw, cap, "%s/rootfs.raw", work);
    FILE *f = fopen(raw, "w");
    assert_non_null(f);
    fputs("a raw image\n", f);
    fclose(f);
}

static void run_case(int refuse_prepare)
{
    char bad[128];
    make_work(bad, sizeof bad);
    refuse = refuse_prepare;
    struct event_base *base = event_base_new();
    struct pool_config pc = {.snapshot_dir = work, .template_overlay = bad,
                             .base = {.vcpus = 1, .mem_mib = 128, .kernel = "/nonexistent",
                                      .backing = {{bad, "raw"}}, .n_backing = 1,
                                      .net.tap_fd = -1},
                             .size = 1, .prepare = prepare, .discard = discard};
    struct pool *p = pool_new(base, &pc);
    assert_non_null(p);
    run_until_calls(base);
    assert_int_equal(calls, CALLS); /* it kept trying ... */
    /* ... backing off: 1 s before the 2nd try, 2 s before the 3rd */
    assert_true(called_at_ms[1] - called_at_ms[0] >= 950);
    assert_true(called_at_ms[2] - called_at_ms[1] >= 1950);
    /* every failed clone was handed back for cleanup; prepare refusing left nothing */
    assert_int_equal(discards, refuse_prepare ? 0 : CALLS);
    assert_int_equal(pool_ready(p), 0);
    pool_free(p);
    event_base_free(base);
    unlink(bad);
    rmdir(work);
}

static void test_failed_fill_retries_with_backoff(void **state) { run_case(0); }

static void test_refused_prepare_retries_with_backoff(void **state) { run_case(1); }

/* spaced stops (pool_free after its loop has ended) while qemu-img still makes a clone's
 * overlay: the clone is stopped and handed back for cleanup then, since no later loop
 * turn would report qemu-img's end (it leaked before, and its namespace was never
 * released). */
static void test_free_during_overlay(void **state)
{
    (void)state;
    char raw[128];
    make_work(raw, sizeof raw);
    refuse = 0;
    struct event_base *base = event_base_new();
    break_in_prepare = base;
    struct pool_config pc = {.snapshot_dir = work, .template_overlay = raw,
                             .base = {.vcpus = 1, .mem_mib = 128, .kernel = "/nonexistent",
                                      .backing = {{raw, "raw"}}, .n_backing = 1,
                                      .net.tap_fd = -1},
                             .size = 1, .prepare = prepare, .discard = discard};
    struct pool *p = pool_new(base, &pc);
    assert_non_null(p);
    run_until_calls(base); /* returns as the first fill's qemu-img starts */
    break_in_prepare = NULL;
    assert_int_equal(calls, 1);
    assert_int_equal(discards, 0);
    pool_free(p);
    assert_int_equal(discards, 1); /* handed back at once, its overlay removed */
    char disk[160];
    snprintf(disk, sizeof disk, "%s/missing/pool1.qcow2", work);
    assert_int_equal(access(disk, F_OK), -1);
    event_base_free(base);
    unlink(raw);
    rmdir(work);
}

/* The target follows the last minute's claims, between the floor and the budget's cap. */
static void test_demand_target(void **state)
{
    (void)state;
    int64_t now = 1000000, claims[POOL_DEMAND_MAX] = {0};
    assert_int_equal(pool_demand(claims, 0, now, 2, 10), 2); /* no claims: the floor */
    for (int i = 0; i < 6; i++)
        claims[i] = now - 1000 * i; /* six in the last 6 s */
    assert_int_equal(pool_demand(claims, 6, now, 2, 10), 6);
    assert_int_equal(pool_demand(claims, 6, now, 2, 4), 4);  /* the budget caps it */
    assert_int_equal(pool_demand(claims, 6, now, 3, 1), 3);  /* never below --pool */
    assert_int_equal(pool_demand(claims, 6, now, 8, 10), 8);
    for (int i = 0; i < 6; i += 2)
        claims[i] = now - (POOL_DEMAND_WINDOW_S + 1) * 1000; /* half fell out of the window */
    assert_int_equal(pool_demand(claims, 6, now, 1, 10), 3);
    for (int i = 0; i < POOL_DEMAND_MAX; i++)
        claims[i] = now;
    /* more claims than the ring holds count as a full ring */
    assert_int_equal(pool_demand(claims, 5 * POOL_DEMAND_MAX, now, 1, 1000), POOL_DEMAND_MAX);
}

static unsigned cap4(void *arg) { return 4; }

/* A create that finds the pool empty is demand too: five claims on a pool that has no
 * clone ready (its prepare refuses) raise its target to five, capped at the budget's 4. */
static void test_misses_count_as_demand(void **state)
{
    (void)state;
    refuse = 1;
    struct event_base *base = event_base_new();
    struct pool_config pc = {.snapshot_dir = "/nonexistent", .template_overlay = "/nonexistent",
                             .base = {.vcpus = 1, .mem_mib = 128, .net.tap_fd = -1},
                             .size = 1, .prepare = prepare, .discard = discard, .cap = cap4};
    struct pool *p = pool_new(base, &pc);
    assert_non_null(p);
    assert_int_equal(pool_target(p), 1); /* no demand yet: the floor */
    assert_int_equal(pool_ceiling(p), 4);
    for (int i = 0; i < 5; i++)
        assert_null(pool_claim(p, NULL, NULL));
    assert_int_equal(pool_recent(p), 5);
    assert_int_equal(pool_target(p), 4);
    assert_int_equal(pool_ready(p), 0);
    pool_free(p);
    event_base_free(base);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_failed_fill_retries_with_backoff),
        cmocka_unit_test(test_refused_prepare_retries_with_backoff),
        cmocka_unit_test(test_demand_target),
        cmocka_unit_test(test_misses_count_as_demand),
        cmocka_unit_test(test_free_during_overlay),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
