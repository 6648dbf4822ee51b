/* procstat: CPU, memory and load figures of a Linux kernel, read from /proc files. Used
 * by the guest agent (the sandbox's own figures, agent/metrics.c) and by spaced (its
 * host's, daemon/metrics/hostload.c), so both count the same way.
 *
 * CPU use is a share of time between two readings of /proc/stat's aggregate "cpu" line:
 * busy = user + nice + system + irq + softirq + steal; idle + iowait are not busy. The
 * guest/guest_nice columns are already inside user/nice and are not counted again. */
#ifndef SPACE_PROCSTAT_H
#define SPACE_PROCSTAT_H

#include <stdbool.h>

/* One reading of the aggregate cpu line, in clock ticks. */
struct procstat_cpu {
    unsigned long long busy, total;
};

/* Reads path's (normally "/proc/stat") aggregate cpu line. 0 or -1. */
int procstat_read_cpu(const char *path, struct procstat_cpu *out);

/* CPU use between readings. Start it with a baseline reading (procstat_meter_start)
 * when the process starts: the share since boot, which a meter without a baseline falls
 * back to, is mostly the boot itself (a sandbox restored from a snapshot reads 90 % or
 * more while idle under TCG). */
struct procstat_meter {
    struct procstat_cpu prev; /* the previous reading */
    double last_pct;          /* the previous result */
    bool have;                /* prev holds a reading */
};

/* Takes the baseline from path; a meter that cannot read it keeps none. */
void procstat_meter_start(struct procstat_meter *m, const char *path);

/* Fewer ticks than this (summed over CPUs; 100 a second per CPU) make no new figure: a
 * window of one or two ticks reads 0 or 100 % by chance (one tick that fell on the
 * request's own work is "100 % busy"). */
#define PROCSTAT_MIN_TICKS 20

/* Busy percent (0..100) between the previous reading and now, then now becomes the
 * previous. Fewer than PROCSTAT_MIN_TICKS since the previous reading (requests close
 * together), or counters that went backwards: the previous result again (the previous
 * reading stays the baseline, or now becomes it when they went backwards). No
 * baseline: the share since boot. */
double procstat_meter_pct(struct procstat_meter *m, const struct procstat_cpu *now);

/* From path (normally "/proc/meminfo"), in bytes: MemTotal, MemAvailable, and Buffers +
 * Cached. 0, or -1 when the file or MemTotal/MemAvailable is missing. */
int procstat_read_mem(const char *path, long long *total, long long *avail, long long *cache);

/* The three load averages of path (normally "/proc/loadavg"). 0 or -1. */
int procstat_read_load(const char *path, double load[3]);

#endif
