/* hostload.c: measured host load; see hostload.h. */
#include "hostload.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/spaced.h"

struct hostload *hostload_new(const char *proc_dir)
{
    struct hostload *h = calloc(1, sizeof *h);
    if (!h)
        return NULL;
    h->proc = proc_dir ? proc_dir : "/proc";
    char path[512];
    snprintf(path, sizeof path, "%s/stat", h->proc);
    procstat_meter_start(&h->cpu, path);
    return h;
}

void hostload_free(struct hostload *h)
{
    if (!h)
        return;
    json_decref(h->last);
    free(h);
}

static json_t *sample(struct hostload *h, int64_t now_ms)
{
    char path[512];
    struct procstat_cpu cpu;
    double load[3];
    long long total, avail, cache;
    snprintf(path, sizeof path, "%s/stat", h->proc);
    if (procstat_read_cpu(path, &cpu) < 0)
        return NULL;
    snprintf(path, sizeof path, "%s/loadavg", h->proc);
    if (procstat_read_load(path, load) < 0)
        return NULL;
    snprintf(path, sizeof path, "%s/meminfo", h->proc);
    if (procstat_read_mem(path, &total, &avail, &cache) < 0)
        return NULL;
    double pct = procstat_meter_pct(&h->cpu, &cpu);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    char at[32];
    return json_pack("{s:f, s:f, s:f, s:f, s:i, s:I, s:I, s:s}", "load1", load[0], "load5", load[1],
                     "load15", load[2], "cpu_pct", (double)(int)(pct * 10 + 0.5) / 10, "cpus",
                     cpus > 0 ? (int)cpus : 1, "mem_total", (json_int_t)total, "mem_available",
                     (json_int_t)avail, "sampled_at", spaced_fmt_time(now_ms, at));
}

const json_t *hostload_get(struct hostload *h, int64_t now_ms, int64_t min_ms)
{
    if (h->last && h->prev_ms && now_ms - h->prev_ms < min_ms && now_ms >= h->prev_ms)
        return h->last;
    json_t *j = sample(h, now_ms);
    if (!j)
        return h->last;
    json_decref(h->last);
    h->last = j;
    h->prev_ms = now_ms;
    return j;
}
