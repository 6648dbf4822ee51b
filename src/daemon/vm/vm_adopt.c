/* vm_adopt: re-attaching to a QEMU that outlived the spaced that started it.
 *
 * run_dir/vm.json names the pid and its start time; the pair must still match a live
 * process (a recycled pid never gets adopted). The QMP and agent sockets are files in
 * run_dir that QEMU still listens on, so reconnecting needs nothing from the old spaced. */
#include "vm_internal.h"
#include "vm_sig.h"
#include "vm_spawn.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"

static void on_status(struct qmp *q, int err, const char *msg, json_t *ret, void *arg)
{
    struct vm *vm = arg;
    if (err) {
        vm_kill_reason(vm, VM_EXIT_CRASHED, "adopted VM does not answer query-status");
        return;
    }
    const char *st = json_string_value(json_object_get(ret, "status"));
    vm->adopting = 0;
    vm_started(vm, st && !strcmp(st, "running") ? VM_STATE_RUNNING : VM_STATE_PAUSED);
}

void vm_adopt_ready(struct vm *vm)
{
    if (qmp_command(vm->qmp, "query-status", NULL, -1, VM_HANG_MS * 5, on_status, vm) < 0)
        vm_kill_reason(vm, VM_EXIT_CRASHED, "monitor unavailable");
}

struct vm *vm_adopt(struct event_base *base, struct vm_jailer *jailer, const char *run_dir,
                    const struct vm_callbacks *cbs, void *arg, int *err, char *msg,
                    size_t msglen)
{
    char p[4096];
    json_error_t je;
    *err = VM_E_EXITED;
    if (snprintf(p, sizeof(p), "%s/vm.json", run_dir) >= (int)sizeof(p)) {
        *err = VM_E_INVAL;
        snprintf(msg, msglen, "run_dir too long");
        return NULL;
    }
    json_t *j = json_load_file(p, JSON_REJECT_DUPLICATES, &je);
    if (!j) {
        snprintf(msg, msglen, "%s: no adoption record (VM not running)", p);
        return NULL;
    }
    json_int_t pid = json_integer_value(json_object_get(j, "pid"));
    json_int_t start = json_integer_value(json_object_get(j, "starttime"));
    const char *id = json_string_value(json_object_get(j, "id"));
    const char *accel = json_string_value(json_object_get(j, "accel"));
    const char *cg = json_string_value(json_object_get(j, "cgroup_parent"));
    json_int_t uid = json_integer_value(json_object_get(j, "uid"));
    json_int_t vcpus = json_integer_value(json_object_get(j, "vcpus"));
    json_int_t mem = json_integer_value(json_object_get(j, "mem_mib"));
    /* What a save of it records (vm_sig.h): the runtime it was started as; a record from
     * before runtimes were kept has none, and its saves record none (accepted anywhere,
     * as before). */
    const char *runtime = json_string_value(json_object_get(j, "runtime"));
    /* The size is what a save of this VM writes into snapshot.json (a restore compares
     * it with its own config). A record from before it was kept has none: 0, and such a
     * VM is not saved (vm_save.c) rather than saved under a made-up size. */
    struct vm_config cfg = { .id = id, .run_dir = run_dir,
                             .vcpus = vcpus >= 1 && vcpus <= 16 ? (unsigned)vcpus : 0,
                             .mem_mib = mem >= 64 && mem <= 65536 ? (unsigned)mem : 0,
                             .kernel = "-", .net.tap_fd = -1,
                             .disk = json_string_value(json_object_get(j, "disk")),
                             .accel = accel && !strcmp(accel, "kvm") ? VM_ACCEL_KVM : VM_ACCEL_TCG,
                             .jail = { .enabled = json_integer_value(json_object_get(j, "jail")) != 0,
                                       .jailer = jailer, .cgroup_parent = cg },
                             .runtime = vm_sig_valid(runtime) ? runtime : NULL };
    if (uid > 0 && uid < (json_int_t)VM_JAIL_UID_AUTO)
        cfg.jail.uid = cfg.jail.gid = (uid_t)uid; /* held again below: no other VM gets it */
    struct vm *vm = NULL;
    if (pid <= 1 || !vm_id_valid(id) || start <= 0) {
        *err = VM_E_INVAL;
        snprintf(msg, msglen, "%s: malformed adoption record", p);
    } else if (vm_proc_starttime((pid_t)pid) != (unsigned long long)start) {
        snprintf(msg, msglen, "QEMU pid %lld is no longer running", (long long)pid);
    } else if ((vm = calloc(1, sizeof(*vm))) == NULL || vm_config_copy(&vm->cfg, &cfg) < 0) {
        *err = VM_E_IO;
        snprintf(msg, msglen, "out of memory");
        free(vm);
        vm = NULL;
    }
    json_decref(j);
    if (!vm)
        return NULL;
    vm->base = base;
    if (cbs)
        vm->cbs = *cbs;
    vm->arg = arg;
    vm->pidfd = vm->con_fd = vm->log_fd = vm->state_fd = vm->save_fd = -1;
    vm->state = VM_STATE_STARTING;
    vm->accel = vm->cfg.accel;
    vm->pid = (pid_t)pid;
    vm->starttime = (unsigned long long)start;
    vm->adopting = 1;
    vm->adopted = 1;
    vm->op = VM_OP_START;
    vm_jail_uid_hold(vm);
    if (vm_attach_process(vm, msg, msglen) < 0) {
        *err = VM_E_IO;
        /* attach may have opened the pidfd / events: free through the normal path */
        vm_detach(vm);
        return NULL;
    }
    return vm;
}

/* True if the NUL-separated argv in buf[0..n) has "-name" followed by an argument that
 * starts with want. */
static int names_vm(const char *buf, size_t n, const char *want)
{
    size_t wl = strlen(want);
    for (size_t i = 0; i < n;) {
        size_t l = strnlen(buf + i, n - i);
        size_t next = i + l + 1;
        if (l == 5 && memcmp(buf + i, "-name", 5) == 0 && next < n &&
            strnlen(buf + next, n - next) >= wl && memcmp(buf + next, want, wl) == 0)
            return 1;
        i = next;
    }
    return 0;
}

int vm_kill_strays(const char *id)
{
    char want[160];
    if (!vm_id_valid(id) ||
        snprintf(want, sizeof want, "%s,process=space-%s,", id, id) >= (int)sizeof want)
        return 0;
    DIR *d = opendir("/proc");
    if (!d)
        return 0;
    int killed = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        char *end;
        long pid = strtol(de->d_name, &end, 10);
        if (*end || pid <= 1 || pid == (long)getpid())
            continue;
        char path[64], buf[4096];
        snprintf(path, sizeof path, "/proc/%ld/cmdline", pid);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        /* -name is the first option QEMU gets (vm_cmdline.c): 4 KiB always hold it */
        ssize_t n = read(fd, buf, sizeof buf);
        close(fd);
        if (n > 0 && names_vm(buf, (size_t)n, want) && kill((pid_t)pid, SIGKILL) == 0) {
            log_warn("vm.stray", "id=%s pid=%ld msg=\"killed a QEMU that could not be adopted\"", id,
                     pid);
            killed++;
        }
    }
    closedir(d);
    return killed;
}
