/* vm_config: deep copy of a struct vm_config, names, small file helpers. */
#include "vm_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int dup_str(const char **dst, const char *src)
{
    *dst = NULL;
    if (!src)
        return 0;
    return (*dst = strdup(src)) ? 0 : -1;
}

int vm_config_copy(struct vm_config *dst, const struct vm_config *src)
{
    *dst = *src;
    int r = 0;
    r |= dup_str(&dst->id, src->id);
    r |= dup_str(&dst->qemu, src->qemu);
    r |= dup_str(&dst->kernel, src->kernel);
    r |= dup_str(&dst->initramfs, src->initramfs);
    r |= dup_str(&dst->cmdline_extra, src->cmdline_extra);
    r |= dup_str(&dst->disk, src->disk);
    r |= dup_str(&dst->run_dir, src->run_dir);
    r |= dup_str(&dst->mem_path, src->mem_path);
    r |= dup_str(&dst->net.mac, src->net.mac);
    r |= dup_str(&dst->jail.cgroup_parent, src->jail.cgroup_parent);
    r |= dup_str(&dst->runtime, src->runtime);
    for (unsigned i = 0; i < VM_DISK_BACKING_MAX; i++) {
        r |= dup_str(&dst->backing[i].path, i < src->n_backing ? src->backing[i].path : NULL);
        r |= dup_str(&dst->backing[i].format, i < src->n_backing ? src->backing[i].format : NULL);
    }
    if (r) {
        vm_config_free(dst);
        return -1;
    }
    return 0;
}

void vm_config_free(struct vm_config *c)
{
    free((char *)c->id);
    free((char *)c->qemu);
    free((char *)c->kernel);
    free((char *)c->initramfs);
    free((char *)c->cmdline_extra);
    free((char *)c->disk);
    free((char *)c->run_dir);
    free((char *)c->mem_path);
    free((char *)c->net.mac);
    free((char *)c->jail.cgroup_parent);
    free((char *)c->runtime);
    for (unsigned i = 0; i < VM_DISK_BACKING_MAX; i++) {
        free((char *)c->backing[i].path);
        free((char *)c->backing[i].format);
    }
    memset(c, 0, sizeof(*c));
}

int vm_path(const struct vm *vm, const char *name, char *out, size_t cap)
{
    int n = snprintf(out, cap, "%s/%s", vm->cfg.run_dir, name);
    return n < 0 || (size_t)n >= cap ? -1 : 0;
}

static int write_file_atomic(const char *path, const char *data, size_t len, int sync)
{
    char tmp[4200];
    if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
        return -1;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return -1;
    size_t off = 0;
    while (off < len) {
        ssize_t n = write(fd, data + off, len - off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            close(fd);
            unlink(tmp);
            return -1;
        }
        off += (size_t)n;
    }
    if ((sync && fsync(fd) < 0) || close(fd) < 0 || rename(tmp, path) < 0) {
        unlink(tmp);
        return -1;
    }
    return 0;
}

int vm_write_file_atomic(const char *path, const char *data, size_t len)
{
    return write_file_atomic(path, data, len, 1);
}

int vm_write_file_atomic_nosync(const char *path, const char *data, size_t len)
{
    return write_file_atomic(path, data, len, 0);
}

const char *vm_error_code(int err)
{
    switch (err) {
    case VM_OK: return "ok";
    case VM_E_INVAL: return "vm_invalid_config";
    case VM_E_NOENT: return "vm_file_missing";
    case VM_E_START: return "vm_start_failed";
    case VM_E_QMP: return "vm_monitor_error";
    case VM_E_TIMEOUT: return "vm_timeout";
    case VM_E_IO: return "vm_io_error";
    case VM_E_SNAPSHOT: return "vm_snapshot_invalid";
    case VM_E_EXITED: return "vm_exited";
    case VM_E_BUSY: return "vm_busy";
    case VM_E_STATE: return "vm_wrong_state";
    case VM_E_JAIL: return "vm_jail_failed";
    case VM_E_INCOMPATIBLE: return "snapshot_incompatible";
    case VM_E_NOSPACE: return "no_space";
    }
    return "vm_error";
}

const char *vm_state_name(enum vm_state s)
{
    static const char *const n[] = { "starting", "running", "paused", "saving", "stopping",
                                     "exited" };
    return (unsigned)s < sizeof(n) / sizeof(n[0]) ? n[s] : "unknown";
}

const char *vm_exit_reason_name(enum vm_exit_reason r)
{
    static const char *const n[] = { "shutdown", "killed", "saved", "crashed", "hung",
                                     "failed" };
    return (unsigned)r < sizeof(n) / sizeof(n[0]) ? n[r] : "unknown";
}

const char *vm_accel_name(enum vm_accel a)
{
    return a == VM_ACCEL_KVM ? "kvm" : a == VM_ACCEL_TCG ? "tcg" : "auto";
}
