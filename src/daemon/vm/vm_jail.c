/* vm_jail: the jailer (vm.h struct vm_jailer: a jail policy and the uid allocator of the
 * VMs started under it), and the ownership of the files a jailed QEMU touches.
 *
 * uids: each jailed VM asking for VM_JAIL_UID_AUTO gets its own uid (gid = uid) from the
 * jailer's range, so two QEMUs never share one: a QEMU taken over by its guest cannot
 * signal, ptrace or open the files of another (they are not in its mount namespace
 * either; the uid is the second wall). A uid is held from the start until the process
 * is gone (finish, vm_kill_sync, a failed start); an adopted VM holds the uid its record
 * names (vm.json). Allocation goes round-robin from where the last one stopped, so a uid
 * is reused as late as possible, and skips any uid a live process on the host runs as
 * (/proc/<pid>/status), which covers VMs of an earlier spaced not yet adopted and
 * another spaced sharing the range.
 *
 * Files: the overlay (and a template VM's RAM file) is chowned to the VM's uid at start
 * and back to root when the VM is gone (only while still owned by that uid: a file
 * replaced meanwhile is left alone; a rename is told with vm_disk_renamed). Template
 * files, once frozen
 * (vm_jail_freeze), are root-owned 0444 for good. */
#include "vm_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct vm_jailer {
    struct vm_jail_policy policy; /* policy.shim points at `shim` */
    char *shim;                   /* owned copy */
    uint8_t *held;                /* bit per uid of the range: held by a VM of this jailer */
    unsigned cursor;              /* next offset to try */
};

struct vm_jailer *vm_jailer_new(const struct vm_jail_policy *p, char *err, size_t errlen)
{
    unsigned long long end = (unsigned long long)p->uid_base + p->uid_count;
    if (p->uid_count > VM_JAIL_UIDS_MAX || (p->uid_count && p->uid_base == 0) ||
        end > (unsigned long long)(uid_t)-1) {
        snprintf(err, errlen, "jail uid range %u:%u must be 1..%u uids above 0 and below %u",
                 (unsigned)p->uid_base, p->uid_count, VM_JAIL_UIDS_MAX, (unsigned)(uid_t)-1);
        return NULL;
    }
    struct vm_jailer *jl = calloc(1, sizeof *jl);
    if (jl && p->uid_count)
        jl->held = calloc((p->uid_count + 7) / 8, 1);
    if (jl && p->shim)
        jl->shim = strdup(p->shim);
    if (!jl || (p->uid_count && !jl->held) || (p->shim && !jl->shim)) {
        vm_jailer_free(jl);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    jl->policy = *p;
    jl->policy.shim = jl->shim;
    return jl;
}

void vm_jailer_free(struct vm_jailer *jl)
{
    if (!jl)
        return;
    free(jl->held);
    free(jl->shim);
    free(jl);
}

const struct vm_jail_policy *vm_jailer_policy(const struct vm_jailer *jl)
{
    static const struct vm_jail_policy none; /* constant: no range, no shim, not required */
    return jl ? &jl->policy : &none;
}

static int in_range(const struct vm_jailer *jl, uid_t u)
{
    const struct vm_jail_policy *p = vm_jailer_policy(jl);
    return p->uid_count && u >= p->uid_base && u - p->uid_base < p->uid_count;
}

static void set_held(struct vm_jailer *jl, uid_t u, int on)
{
    if (!in_range(jl, u))
        return;
    unsigned o = u - jl->policy.uid_base;
    if (on)
        jl->held[o / 8] |= (uint8_t)(1u << (o % 8));
    else
        jl->held[o / 8] &= (uint8_t)~(1u << (o % 8));
}

/* Marks in busy[] every uid of the range that a live process runs as (any of real,
 * effective, saved, filesystem uid). */
static void scan_processes(const struct vm_jailer *jl, uint8_t *busy)
{
    DIR *d = opendir("/proc");
    struct dirent *de;
    while (d && (de = readdir(d)) != NULL) {
        if (de->d_name[0] < '1' || de->d_name[0] > '9')
            continue;
        char p[300], buf[2048];
        snprintf(p, sizeof p, "/proc/%s/status", de->d_name);
        int fd = open(p, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        ssize_t n = read(fd, buf, sizeof buf - 1);
        close(fd);
        if (n <= 0)
            continue;
        buf[n] = 0;
        char *u = strstr(buf, "\nUid:");
        unsigned v[4];
        if (!u || sscanf(u + 5, "%u %u %u %u", &v[0], &v[1], &v[2], &v[3]) != 4)
            continue;
        for (int i = 0; i < 4; i++)
            if (in_range(jl, (uid_t)v[i])) {
                unsigned o = v[i] - jl->policy.uid_base;
                busy[o / 8] |= (uint8_t)(1u << (o % 8));
            }
    }
    if (d)
        closedir(d);
}

int vm_jail_uid_acquire(struct vm *vm, char *msg, size_t msglen)
{
    struct vm_jail *j = &vm->cfg.jail;
    struct vm_jailer *jl = j->jailer;
    if (j->uid != VM_JAIL_UID_AUTO)
        return 0;
    if (!vm_jailer_policy(jl)->uid_count) {
        snprintf(msg, msglen, "no jail uid range configured");
        return -1;
    }
    const struct vm_jail_policy *policy = &jl->policy;
    size_t bytes = (policy->uid_count + 7) / 8;
    uint8_t *busy = malloc(bytes);
    if (!busy) {
        snprintf(msg, msglen, "out of memory");
        return -1;
    }
    memcpy(busy, jl->held, bytes);
    scan_processes(jl, busy);
    for (unsigned i = 0; i < policy->uid_count; i++) {
        unsigned o = (jl->cursor + i) % policy->uid_count;
        if (busy[o / 8] & (1u << (o % 8)))
            continue;
        free(busy);
        jl->cursor = (o + 1) % policy->uid_count;
        j->uid = j->gid = policy->uid_base + o;
        set_held(jl, j->uid, 1);
        vm->uid_held = 1;
        return 0;
    }
    free(busy);
    snprintf(msg, msglen, "all %u jail uids from %u are in use", policy->uid_count,
             (unsigned)policy->uid_base);
    return -1;
}

void vm_jail_uid_hold(struct vm *vm)
{
    if (!vm->cfg.jail.enabled || vm->cfg.jail.uid == 0 || vm->cfg.jail.uid == VM_JAIL_UID_AUTO)
        return;
    set_held(vm->cfg.jail.jailer, vm->cfg.jail.uid, 1);
    vm->uid_held = 1;
}

/* chown path back to root if the VM's uid still owns it. */
static void disown(const char *path, uid_t uid)
{
    struct stat st;
    if (path && lstat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == uid &&
        chown(path, 0, 0) < 0) {
        /* left as it is: the next start chowns it again, and the uid is not reused soon */
    }
}

void vm_jail_release(struct vm *vm)
{
    if (!vm->uid_held)
        return;
    disown(vm->cfg.disk, vm->cfg.jail.uid);
    disown(vm->cfg.mem_path, vm->cfg.jail.uid);
    set_held(vm->cfg.jail.jailer, vm->cfg.jail.uid, 0);
    vm->uid_held = 0;
}

int vm_disk_renamed(struct vm *vm, const char *disk)
{
    char *d = strdup(disk);
    if (!d)
        return -1;
    free((char *)vm->cfg.disk);
    vm->cfg.disk = d;
    vm_write_record(vm);
    return 0;
}

int vm_jail_freeze(const char *path)
{
    return chown(path, 0, 0) < 0 || chmod(path, 0444) < 0 ? -1 : 0;
}
