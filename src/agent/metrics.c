/* metrics.c: `metrics`: CPU, memory and disk use of the guest as its kernel sees them
 * (/proc/stat, /proc/meminfo, statvfs of /). CPU use is the busy share of all CPUs
 * since the previous `metrics` request (since boot for the first one), so a caller
 * polling every N seconds gets the average over those N seconds. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "agent/ops.h"

/* Totals of the "cpu" line of /proc/stat at the previous request. */
static unsigned long long metrics_prev_busy, metrics_prev_total;

/* Reads the aggregate cpu line: busy and total jiffies. 0 or -1. */
static int metrics_cpu(unsigned long long *busy, unsigned long long *total)
{
    FILE *f = fopen("/proc/stat", "re");
    if (!f)
        return -1;
    unsigned long long v[8] = {0};
    int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
                   &v[4], &v[5], &v[6], &v[7]);
    fclose(f);
    if (n < 4)
        return -1;
    *total = 0;
    for (int i = 0; i < 8; i++)
        *total += v[i];
    *busy = *total - v[3] - v[4]; /* idle and iowait are not busy */
    return 0;
}

/* MemTotal, MemAvailable, Cached + Buffers from /proc/meminfo, in bytes. 0 or -1. */
static int metrics_mem(long long *total, long long *avail, long long *cache)
{
    FILE *f = fopen("/proc/meminfo", "re");
    if (!f)
        return -1;
    char line[128];
    long long kb, buffers = 0, cached = 0;
    *total = *avail = -1;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "MemTotal: %lld kB", &kb) == 1)
            *total = kb * 1024;
        else if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1)
            *avail = kb * 1024;
        else if (sscanf(line, "Buffers: %lld kB", &kb) == 1)
            buffers = kb * 1024;
        else if (sscanf(line, "Cached: %lld kB", &kb) == 1)
            cached = kb * 1024;
    }
    fclose(f);
    *cache = buffers + cached;
    return *total < 0 || *avail < 0 ? -1 : 0;
}

void agent_op_metrics(struct agent_chan *ch, json_t *req)
{
    unsigned long long busy, total;
    long long mem_total, mem_avail, mem_cache;
    struct statvfs vfs;
    if (metrics_cpu(&busy, &total) < 0 || metrics_mem(&mem_total, &mem_avail, &mem_cache) < 0)
        return agent_chan_fail(ch, FRAME_E_INTERNAL, "cannot read /proc/stat or /proc/meminfo");
    if (statvfs("/", &vfs) < 0)
        return agent_chan_fail_errno(ch, errno, "statvfs /");
    unsigned long long dbusy = busy - metrics_prev_busy, dtotal = total - metrics_prev_total;
    if (busy < metrics_prev_busy || total <= metrics_prev_total) {
        dbusy = busy; /* first call, or counters went backwards (restore): since boot */
        dtotal = total;
    }
    metrics_prev_busy = busy;
    metrics_prev_total = total;
    double pct = dtotal ? 100.0 * (double)dbusy / (double)dtotal : 0.0;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    agent_op_result(ch, json_pack("{s:i, s:f, s:I, s:I, s:I, s:I, s:I}", "cpu_count",
                                  cpus > 0 ? (int)cpus : 1, "cpu_used_pct", pct, "mem_total",
                                  (json_int_t)mem_total, "mem_used",
                                  (json_int_t)(mem_total - mem_avail), "mem_cache",
                                  (json_int_t)mem_cache, "disk_total",
                                  (json_int_t)((unsigned long long)vfs.f_blocks * vfs.f_frsize),
                                  "disk_used",
                                  (json_int_t)((unsigned long long)(vfs.f_blocks - vfs.f_bfree) *
                                               vfs.f_frsize)));
}
