/* Unit tests for procstat (CPU meter, /proc parsing) and hostload (a host's sample) on
 * fake /proc files. The meter's cases are the ones that made an idle sandbox read ~90 %:
 * no baseline (since boot), and two readings without a tick between them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "daemon/metrics/hostload.h"
#include "procstat.h"

static char dir[64];

static void put(const char *name, const char *text)
{
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/procstat-XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static struct procstat_cpu stat_of(const char *line)
{
    put("stat", line);
    char path[128];
    snprintf(path, sizeof path, "%s/stat", dir);
    struct procstat_cpu c;
    assert_int_equal(procstat_read_cpu(path, &c), 0);
    return c;
}

static void test_read_cpu(void **state)
{
    (void)state;
    /* user nice system idle iowait irq softirq steal guest guest_nice */
    struct procstat_cpu c = stat_of("cpu  14 1 270 2002 28 2 4 3 50 50\ncpu0 14 1 270 2002 28 2 4 3 50 50\n");
    assert_int_equal(c.total, 14 + 1 + 270 + 2002 + 28 + 2 + 4 + 3);
    assert_int_equal(c.busy, 14 + 1 + 270 + 2 + 4 + 3);
    put("stat", "intr 5\n");
    char path[128];
    snprintf(path, sizeof path, "%s/stat", dir);
    assert_int_equal(procstat_read_cpu(path, &c), -1);
    snprintf(path, sizeof path, "%s/missing", dir);
    assert_int_equal(procstat_read_cpu(path, &c), -1);
}

static void test_meter(void **state)
{
    (void)state;
    char path[128];
    snprintf(path, sizeof path, "%s/stat", dir);
    /* Boot: 900 of 1000 ticks busy. The baseline is taken after it. */
    stat_of("cpu  800 0 100 100 0 0 0 0\n");
    struct procstat_meter m;
    procstat_meter_start(&m, path);
    assert_true(m.have);
    /* Idle since: 2 busy of 500. */
    struct procstat_cpu now = stat_of("cpu  801 0 101 598 0 0 0 0\n");
    assert_float_equal(procstat_meter_pct(&m, &now), 0.4, 1e-9);
    /* No tick since: the previous figure, not the since-boot 90 %. */
    assert_float_equal(procstat_meter_pct(&m, &now), 0.4, 1e-9);
    /* Two ticks, both busy (the request's own work): still the previous figure, and the
     * baseline stays, so the next window covers them. */
    struct procstat_cpu two = stat_of("cpu  803 0 101 598 0 0 0 0\n");
    assert_float_equal(procstat_meter_pct(&m, &two), 0.4, 1e-9);
    now = stat_of("cpu  803 0 101 696 0 0 0 0\n");
    assert_float_equal(procstat_meter_pct(&m, &now), 2.0, 1e-9);
    /* Busy: 100 of 100. */
    now = stat_of("cpu  903 0 101 696 0 0 0 0\n");
    assert_float_equal(procstat_meter_pct(&m, &now), 100.0, 1e-9);
    /* Counters went backwards: the previous figure; the reading is the new baseline. */
    now = stat_of("cpu  10 0 10 80 0 0 0 0\n");
    assert_float_equal(procstat_meter_pct(&m, &now), 100.0, 1e-9);
    now = stat_of("cpu  10 0 20 170 0 0 0 0\n");
    assert_float_equal(procstat_meter_pct(&m, &now), 10.0, 1e-9);
    /* Without a baseline: since boot (what the first sample used to be). */
    struct procstat_meter cold = {0};
    now = stat_of("cpu  800 0 100 100 0 0 0 0\n");
    assert_float_equal(procstat_meter_pct(&cold, &now), 90.0, 1e-9);
    snprintf(path, sizeof path, "%s/missing", dir);
    procstat_meter_start(&cold, path);
    assert_false(cold.have);
}

static void test_mem_and_load(void **state)
{
    (void)state;
    char path[128];
    put("meminfo", "MemTotal:       2000 kB\nMemFree:         100 kB\nMemAvailable:    1500 kB\n"
                   "Buffers:          10 kB\nCached:           20 kB\n");
    snprintf(path, sizeof path, "%s/meminfo", dir);
    long long total, avail, cache;
    assert_int_equal(procstat_read_mem(path, &total, &avail, &cache), 0);
    assert_int_equal(total, 2000 * 1024);
    assert_int_equal(avail, 1500 * 1024);
    assert_int_equal(cache, 30 * 1024);
    put("meminfo", "MemTotal:       2000 kB\n");
    assert_int_equal(procstat_read_mem(path, &total, &avail, &cache), -1);
    put("loadavg", "0.50 1.25 2.00 1/123 4567\n");
    snprintf(path, sizeof path, "%s/loadavg", dir);
    double load[3];
    assert_int_equal(procstat_read_load(path, load), 0);
    assert_float_equal(load[0], 0.5, 1e-9);
    assert_float_equal(load[2], 2.0, 1e-9);
    put("loadavg", "garbage\n");
    assert_int_equal(procstat_read_load(path, load), -1);
}

static void test_hostload(void **state)
{
    (void)state;
    stat_of("cpu  100 0 0 900 0 0 0 0\n");
    put("meminfo", "MemTotal:       4000 kB\nMemAvailable:    3000 kB\n");
    put("loadavg", "0.10 0.20 0.30 1/50 99\n");
    struct hostload *h = hostload_new(dir);
    assert_non_null(h);
    stat_of("cpu  150 0 0 950 0 0 0 0\n"); /* 50 of 100 busy since the sampler was made */
    const json_t *j = hostload_get(h, 1000000, 1000);
    assert_non_null(j);
    assert_float_equal(json_real_value(json_object_get(j, "cpu_pct")), 50.0, 1e-9);
    assert_int_equal(json_integer_value(json_object_get(j, "mem_available")), 3000 * 1024);
    assert_float_equal(json_real_value(json_object_get(j, "load5")), 0.2, 1e-9);
    /* Within min_ms: the same sample, the files are not read again. */
    stat_of("cpu  150 0 0 1050 0 0 0 0\n");
    assert_ptr_equal(hostload_get(h, 1000500, 1000), j);
    const json_t *k = hostload_get(h, 1002000, 1000);
    assert_float_equal(json_real_value(json_object_get(k, "cpu_pct")), 0.0, 1e-9);
    /* Unreadable files: the last good sample. */
    put("loadavg", "x\n");
    assert_ptr_equal(hostload_get(h, 1004000, 1000), k);
    hostload_free(h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_read_cpu),
        cmocka_unit_test(test_meter),
        cmocka_unit_test(test_mem_and_load),
        cmocka_unit_test(test_hostload),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
