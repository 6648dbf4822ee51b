/* metrics.c: `metrics`: CPU, memory and disk use of the guest as its kernel sees them
 * (/proc/stat, /proc/meminfo, statvfs of /; common/procstat.h). CPU use is the busy
 * share of all CPUs since the previous `metrics` request (since the agent started, after
 * the boot, for the first one: a sandbox restored from a snapshot would otherwise show
 * its template VM's boot), so a caller polling every N seconds gets the average over
 * those N seconds. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "agent/ops.h"
#include "procstat.h"

/* CPU use since the previous request, from the agent's start for the first one. */
static struct procstat_meter metrics_cpu;

void agent_metrics_start(void)
{
    procstat_meter_start(&metrics_cpu, "/proc/stat");
}

void agent_op_metrics(struct agent_chan *ch, json_t *req)
{
    struct procstat_cpu cpu;
    long long mem_total, mem_avail, mem_cache;
    struct statvfs vfs;
    if (procstat_read_cpu("/proc/stat", &cpu) < 0 ||
        procstat_read_mem("/proc/meminfo", &mem_total, &mem_avail, &mem_cache) < 0)
        return agent_chan_fail(ch, FRAME_E_INTERNAL, "cannot read /proc/stat or /proc/meminfo");
    if (statvfs("/", &vfs) < 0)
        return agent_chan_fail_errno(ch, errno, "statvfs /");
    double pct = procstat_meter_pct(&metrics_cpu, &cpu);
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
