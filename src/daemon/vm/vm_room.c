/* vm_room: room on the host's disk.
 *
 * Saves check before they write (vm_save_room): a suspend's stream can reach the guest's
 * memory size, and one that fills the disk takes the room of every sandbox beside it.
 *
 * A guest whose disk write the host's full disk refused is stopped by QEMU (virtio-blk's
 * default werror=enospc: only ENOSPC stops, other write errors go to the guest), its run
 * state "io-error". The write is kept and retried on cont. So such a VM is not a crashed
 * one: the supervision tick (vm.c) hands it here, where it waits, stopped, until there
 * is room again and then continues where it was; nothing the guest wrote is lost. A VM
 * spaced paused itself (vm_pause, a save) is left to whoever paused it. */
#include "vm_internal.h"
#include "clock.h"
#include "fsroom.h"
#include "log.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

/* Continued once this much is free: a little more than one write's worth, so that a VM
 * does not continue only to stop again at its next block. */
#define VM_ROOM_RESUME (8LL << 20)

int vm_save_room(const struct vm *vm, const char *dir, int fork, char *msg, size_t msglen)
{
    struct stat ov;
    long long avail = fsroom_avail(dir);
    if (avail < 0)
        return VM_OK;
    long long state = ((long long)vm->cfg.mem_mib << 20) + (1LL << 20);
    long long disk = fork && vm->cfg.disk && stat(vm->cfg.disk, &ov) == 0
                         ? (long long)ov.st_blocks * 512 : 0;
    long long need = state + disk + VM_SAVE_KEEP_FREE;
    if (avail >= need)
        return VM_OK;
    snprintf(msg, msglen, "No space left on device for the %s: it needs up to %lld MiB "
             "(%lld MiB of guest memory and device state%s%lld MiB%s, and %lld MiB kept free "
             "for the store and the other sandboxes), and %lld MiB are free",
             fork ? "fork's capture" : "suspended state", need >> 20, state >> 20,
             fork ? ", " : "", fork ? disk >> 20 : 0, fork ? " of disk overlay" : "",
             VM_SAVE_KEEP_FREE >> 20, avail >> 20);
    return VM_E_NOSPACE;
}

static void on_room_cont(struct qmp *q, int err, const char *msg, json_t *ret, void *arg)
{
    struct vm *vm = arg;
    (void)q;
    (void)ret;
    vm->room_cont_outstanding = 0;
    if (err) {
        log_warn("vm.disk_full", "vm=%s event=cont_failed msg=\"%s\"", vm->cfg.id, msg ? msg : "?");
        return;
    }
    log_info("vm.disk_full", "vm=%s event=continued stopped_ms=%lld", vm->cfg.id,
             (long long)(clock_mono_ms() - vm->room_wait_since_ms));
    vm->room_waiting = 0;
}

void vm_room_io_error(struct vm *vm)
{
    if (!vm->room_waiting) {
        vm->room_waiting = 1;
        vm->room_wait_since_ms = clock_mono_ms();
        log_warn("vm.disk_full", "vm=%s event=stopped disk=%s msg=\"the host's disk refused a "
                 "guest write (no space): the guest waits, stopped, until there is room\"",
                 vm->cfg.id, vm->cfg.disk ? vm->cfg.disk : "?");
        /* QEMU stopped on its own, and its STOP event made the VM paused (vm.c): it is
         * still meant to run. A pause asked for later is kept (no cont then). */
        if (vm->op == VM_OP_NONE && vm->state == VM_STATE_PAUSED)
            vm->state = VM_STATE_RUNNING;
    }
    /* Only a VM that should be running; a save or pause in progress decides itself. */
    if (vm->room_cont_outstanding || vm->state != VM_STATE_RUNNING || vm->op != VM_OP_NONE ||
        !vm->cfg.disk || fsroom_avail(vm->cfg.disk) < VM_ROOM_RESUME)
        return;
    if (qmp_command(vm->qmp, "cont", NULL, -1, 0, on_room_cont, vm) == 0)
        vm->room_cont_outstanding = 1;
}

int vm_room_waiting(const struct vm *vm) { return vm->room_waiting; }
