/* vm_cmdline: builds the QEMU argv for one start of a sandbox VM.
 *
 * Pure (no I/O), so unit tests check exactly what QEMU will be given. Everything QEMU
 * talks to spaced through is a descriptor inherited at a fixed number (sockets are
 * created and listened on by spaced before exec), so QEMU needs no path to the run
 * directory and a restarted spaced reconnects through the socket files. */
#ifndef SPACE_VM_CMDLINE_H
#define SPACE_VM_CMDLINE_H

#include <stddef.h>
#include "vm.h"

/* Descriptor numbers inside the QEMU process. */
enum {
    VM_FD_QMP = 3,     /* listening unix socket: QMP monitor */
    VM_FD_AGENT = 4,   /* listening unix socket: virtio-serial port space.agent */
    VM_FD_CONSOLE = 5, /* listening unix socket: serial console */
    VM_FD_TAP = 6,     /* tap device, when the sandbox has a NIC */
    VM_FD_COUNT = 7,   /* first number above the fixed ones */
};

/* What differs between starts of the same config. */
struct vm_launch {
    enum vm_accel accel;  /* resolved: KVM or TCG */
    const char *mem_path; /* file-backed RAM, or NULL for anonymous RAM */
    int mem_share;        /* 1: share=on (template VM), 0: private copy-on-write */
    int incoming;         /* 1: -incoming defer (restore) */
    int paused;           /* 1: -S, vCPUs do not start by themselves */
    unsigned tsc_khz;     /* TCG: host TSC rate for the guest (accel_host_tsc_khz) */
};

/* NULL-terminated argv; every string is owned by the struct. */
struct vm_argv {
    char **argv;
    size_t n;
    size_t cap;
};

/* Checks cfg (id charset/length, vcpus, memory, required paths present as strings) and
 * fills out. Returns 0, or -1 with a reason in err[cap] and out left empty. */
int vm_cmdline_build(const struct vm_config *cfg, const struct vm_launch *l,
                     struct vm_argv *out, char *err, size_t errlen);
void vm_argv_free(struct vm_argv *a);

/* 1 if id is a valid sandbox id ([A-Za-z0-9_-]{1,48}). */
int vm_id_valid(const char *id);

#endif
