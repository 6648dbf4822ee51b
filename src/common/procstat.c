/* procstat.c: /proc/stat, /proc/meminfo and /proc/loadavg figures; see procstat.h. */
#include "procstat.h"

#include <stdio.h>

int procstat_read_cpu(const char *path, struct procstat_cpu *out)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    /* user nice system idle iowait irq softirq steal (guest, guest_nice: within user/nice) */
    unsigned long long v[8] = {0};
    int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
                   &v[4], &v[5], &v[6], &v[7]);
    fclose(f);
    if (n < 4)
        return -1;
    out->total = 0;
    for (int i = 0; i < 8; i++)
        out->total += v[i];
    out->busy = out->total - v[3] - v[4];
    return 0;
}

void procstat_meter_start(struct procstat_meter *m, const char *path)
{
    m->last_pct = 0;
    m->have = procstat_read_cpu(path, &m->prev) == 0;
}

double procstat_meter_pct(struct procstat_meter *m, const struct procstat_cpu *now)
{
    if (!m->have) {
        m->have = true;
        m->prev = *now;
        m->last_pct = now->total ? 100.0 * (double)now->busy / (double)now->total : 0.0;
        return m->last_pct;
    }
    if (now->total < m->prev.total || now->busy < m->prev.busy) {
        m->prev = *now;
        return m->last_pct;
    }
    unsigned long long busy = now->busy - m->prev.busy, total = now->total - m->prev.total;
    if (total < PROCSTAT_MIN_TICKS || busy > total)
        return m->last_pct; /* too short a window: keep the baseline, nothing new to say */
    m->prev = *now;
    m->last_pct = 100.0 * (double)busy / (double)total;
    return m->last_pct;
}

int procstat_read_mem(const char *path, long long *total, long long *avail, long long *cache)
{
    FILE *f = fopen(path, "re");
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

int procstat_read_load(const char *path, double load[3])
{
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    int n = fscanf(f, "%lf %lf %lf", &load[0], &load[1], &load[2]);
    fclose(f);
    return n == 3 ? 0 : -1;
}
