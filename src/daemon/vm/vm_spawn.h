/* vm_spawn: starts the QEMU process, jailed or not.
 *
 * The parent prepares everything that needs spaced's privileges and view (argv, the
 * environment, the descriptors QEMU inherits, the cgroup); the child only rearranges
 * descriptors, builds its private root (when jailed) and execs. A jailed child is born
 * in new mount, PID, network (empty: a down `lo`, no route, so no host loopback service,
 * metadata address or abstract unix socket is reachable) and IPC namespaces, pivots into
 * a root that shows only the files it is given, and drops to the jail's uid/gid with no
 * supplementary groups and no_new_privs. Errors in the child travel back over a
 * close-on-exec pipe, so a failed start is a synchronous error with a message, never a
 * silently missing process. The wait is bounded by the child's setup (a few ms). */
#ifndef SPACE_VM_SPAWN_H
#define SPACE_VM_SPAWN_H

#include <stddef.h>
#include <sys/types.h>
#include "vm.h"
#include "vm_cmdline.h"

#define VM_SPAWN_PATHS_MAX 16

/* A file the jailed QEMU may see, bind-mounted at the same absolute path. */
struct vm_spawn_path {
    const char *path;
    int writable; /* 0: read-only bind */
};

struct vm_spawn {
    char *const *argv;            /* argv[0] is looked up in spaced's PATH */
    char *const *envp;            /* QEMU's whole environment (nothing of spaced's: it may
                                     hold secrets such as SPACE_NODE_TOKEN) */
    int fds[VM_FD_COUNT];         /* fds[VM_FD_QMP..VM_FD_TAP]: descriptor to install at
                                     that number in QEMU, or -1 (entries 0..2 unused) */
    int log_fd;                   /* QEMU's stdout/stderr (run_dir/qemu.log) */
    const struct vm_jail *jail;   /* jail->enabled == 0: plain fork+exec */
    const char *jail_root;        /* empty directory used as the jail's root mount */
    struct vm_spawn_path paths[VM_SPAWN_PATHS_MAX]; /* files exposed in the jail */
    unsigned n_paths;
    int need_kvm;                 /* expose /dev/kvm */
    int no_thp;                   /* no transparent huge pages for QEMU (see vm_spawn.c) */
    int cgroup_fds[3];            /* open cgroup.procs files to join, -1 = unused */
    int serve_fd;                 /* > 0: installed as the child's fd 0 instead of /dev/null
                                     (space-volfs serves its stream there) */
    unsigned long long keep_caps; /* jailed: capabilities (1ULL << CAP_X) the child keeps
                                     across the uid switch and exec, as ambient ones, all
                                     others dropped from its bounding set (space-volfs:
                                     CAP_DAC_OVERRIDE and CAP_FOWNER); 0 for QEMU */
};

/* Forks and execs QEMU. Returns 0 with *pid set, or -1 with err[cap] (nothing left
 * running), -2 when it was the jail that could not be set up (namespaces, mounts, uid
 * switch, cgroup join). Descriptors in s stay owned by the caller. */
int vm_spawn(const struct vm_spawn *s, pid_t *pid, char *err, size_t errlen);

/* pidfd for pid (Linux >= 5.3), or -1. */
int vm_pidfd_open(pid_t pid);

/* Process start time (field 22 of /proc/<pid>/stat) or 0: pairs with the pid to identify
 * a process across a spaced restart (pids get recycled). */
unsigned long long vm_proc_starttime(pid_t pid);

#endif
