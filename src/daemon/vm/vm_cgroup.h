/* vm_cgroup: one cgroup per sandbox QEMU with cpu, memory and pids limits.
 *
 * Works on cgroup v2 (unified, /sys/fs/cgroup/cgroup.controllers present) and on v1
 * hierarchies (/sys/fs/cgroup/{cpu,memory,pids}); the group is
 * <hierarchy>/<parent>/space-<id>. */
#ifndef SPACE_VM_CGROUP_H
#define SPACE_VM_CGROUP_H

#include <stddef.h>

struct vm_cgroup_limits {
    unsigned cpu_percent;      /* 100 = one CPU; 0 = unlimited */
    unsigned long long mem_bytes; /* 0 = unlimited */
    unsigned pids_max;         /* 0 = unlimited */
};

/* Creates the group(s), writes limits, opens each cgroup.procs for the child to join
 * (procs_fds[0..2], -1 where unused). Returns 0 or -1 with err[cap] (nothing left). */
int vm_cgroup_create(const char *root, const char *parent, const char *id,
                     const struct vm_cgroup_limits *lim, int procs_fds[3], char *err,
                     size_t errlen);

/* Removes the group(s) once empty; silent if absent. */
void vm_cgroup_remove(const char *root, const char *parent, const char *id);

#endif
