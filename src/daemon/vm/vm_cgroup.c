/* vm_cgroup: per-sandbox cgroup on v2 or v1 hierarchies (see vm_cgroup.h). */
#include "vm_cgroup.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int write_file(const char *dir, const char *name, const char *val)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = write(fd, val, strlen(val));
    close(fd);
    return n == (ssize_t)strlen(val) ? 0 : -1;
}

static int is_v2(const char *root)
{
    char p[512];
    snprintf(p, sizeof(p), "%s/cgroup.controllers", root);
    return access(p, F_OK) == 0;
}

/* True if dir/cgroup.controllers lists controller `name`. */
static int v2_offers(const char *dir, const char *name)
{
    char p[512], buf[512];
    snprintf(p, sizeof(p), "%s/cgroup.controllers", dir);
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
    if (fd >= 0)
        close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    for (char *save = NULL, *t = strtok_r(buf, " \n", &save); t; t = strtok_r(NULL, " \n", &save))
        if (strcmp(t, name) == 0)
            return 1;
    return 0;
}

/* v2 gives a group a controller's files only when every ancestor enables it for its
 * children. Enables, one by one (a write naming a controller the parent does not offer
 * fails as a whole), each controller a limit needs, in root and in parent. A controller
 * that root does not offer (e.g. bound to a v1 hierarchy, or not delegated to us) is an
 * error naming it: limits that silently do not apply would be worse. */
static int v2_enable(const char *root, const char *parent, const struct vm_cgroup_limits *lim,
                     char *err, size_t errlen)
{
    const char *need[3];
    int n = 0;
    if (lim->cpu_percent)
        need[n++] = "cpu";
    if (lim->mem_bytes)
        need[n++] = "memory";
    if (lim->pids_max)
        need[n++] = "pids";
    for (int i = 0; i < n; i++) {
        char plus[16];
        snprintf(plus, sizeof(plus), "+%s", need[i]);
        if (!v2_offers(root, need[i])) {
            snprintf(err, errlen, "cgroup v2 at %s does not offer the %s controller", root, need[i]);
            return -1;
        }
        if ((!v2_offers(parent, need[i]) && write_file(root, "cgroup.subtree_control", plus) < 0) ||
            write_file(parent, "cgroup.subtree_control", plus) < 0) {
            snprintf(err, errlen, "cgroup v2: enabling %s under %s: %s", need[i], parent,
                     strerror(errno));
            return -1;
        }
    }
    return 0;
}

/* The three (v1) or one (v2) directories of the group; returns how many. */
static int group_dirs(const char *root, const char *parent, const char *id, char dirs[3][512],
                      char parents[3][512])
{
    if (is_v2(root)) {
        snprintf(parents[0], 512, "%s/%s", root, parent);
        snprintf(dirs[0], 512, "%s/space-%s", parents[0], id);
        return 1;
    }
    static const char *const ctl[3] = { "cpu", "memory", "pids" };
    for (int i = 0; i < 3; i++) {
        snprintf(parents[i], 512, "%s/%s/%s", root, ctl[i], parent);
        snprintf(dirs[i], 512, "%s/space-%s", parents[i], id);
    }
    return 3;
}

static int set_limits(int v2, int idx, const char *dir, const struct vm_cgroup_limits *lim)
{
    char v[64];
    const unsigned period = 100000;
    int ctl = v2 ? -1 : idx; /* v1: one controller per directory */
    if ((ctl < 0 || ctl == 0) && lim->cpu_percent) {
        unsigned long long quota = (unsigned long long)period * lim->cpu_percent / 100;
        if (v2) {
            snprintf(v, sizeof(v), "%llu %u", quota, period);
            if (write_file(dir, "cpu.max", v) < 0)
                return -1;
        } else {
            snprintf(v, sizeof(v), "%u", period);
            if (write_file(dir, "cpu.cfs_period_us", v) < 0)
                return -1;
            snprintf(v, sizeof(v), "%llu", quota);
            if (write_file(dir, "cpu.cfs_quota_us", v) < 0)
                return -1;
        }
    }
    if ((ctl < 0 || ctl == 1) && lim->mem_bytes) {
        snprintf(v, sizeof(v), "%llu", lim->mem_bytes);
        if (write_file(dir, v2 ? "memory.max" : "memory.limit_in_bytes", v) < 0)
            return -1;
    }
    if ((ctl < 0 || ctl == 2) && lim->pids_max) {
        snprintf(v, sizeof(v), "%u", lim->pids_max);
        if (write_file(dir, "pids.max", v) < 0)
            return -1;
    }
    return 0;
}

int vm_cgroup_create(const char *root, const char *parent, const char *id,
                     const struct vm_cgroup_limits *lim, int procs_fds[3], char *err,
                     size_t errlen)
{
    char dirs[3][512], parents[3][512];
    int v2 = is_v2(root);
    int n = group_dirs(root, parent, id, dirs, parents);
    for (int i = 0; i < 3; i++)
        procs_fds[i] = -1;
    for (int i = 0; i < n; i++) {
        if (mkdir(parents[i], 0755) < 0 && errno != EEXIST) {
            snprintf(err, errlen, "cgroup %s: %s", parents[i], strerror(errno));
            goto fail;
        }
        if (v2 && v2_enable(root, parents[i], lim, err, errlen) < 0)
            goto fail;
        if (mkdir(dirs[i], 0755) < 0 && errno != EEXIST) {
            snprintf(err, errlen, "cgroup %s: %s", dirs[i], strerror(errno));
            goto fail;
        }
        if (set_limits(v2, i, dirs[i], lim) < 0) {
            snprintf(err, errlen, "cgroup %s limits: %s", dirs[i], strerror(errno));
            goto fail;
        }
        char procs[600];
        if (snprintf(procs, sizeof(procs), "%s/cgroup.procs", dirs[i]) >= (int)sizeof(procs)) {
            snprintf(err, errlen, "cgroup path too long: %s", dirs[i]);
            goto fail;
        }
        if ((procs_fds[i] = open(procs, O_WRONLY | O_CLOEXEC)) < 0) {
            snprintf(err, errlen, "cgroup %s: %s", procs, strerror(errno));
            goto fail;
        }
    }
    return 0;
fail:
    for (int i = 0; i < 3; i++)
        if (procs_fds[i] >= 0)
            close(procs_fds[i]);
    vm_cgroup_remove(root, parent, id);
    return -1;
}

void vm_cgroup_remove(const char *root, const char *parent, const char *id)
{
    char dirs[3][512], parents[3][512];
    int n = group_dirs(root, parent, id, dirs, parents);
    for (int i = 0; i < n; i++)
        rmdir(dirs[i]);
}
