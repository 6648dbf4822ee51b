/* accel: decides whether KVM can run a normal Linux guest on this host.
 *
 * "Usable" means: the device opens, speaks API version 12, creates a VM and a vCPU, and
 * is not KVM-PVM. PVM (a software-only nested KVM, /sys/module/kvm_pvm) passes the
 * ioctl checks but only runs PVM-built guest kernels, so a stock kernel would fail to
 * boot on it; it must be detected by its module, not by trying. */
#ifndef SPACE_ACCEL_H
#define SPACE_ACCEL_H

#include <stddef.h>

enum accel_kvm {
    ACCEL_KVM_USABLE = 0,
    ACCEL_KVM_ABSENT,  /* device missing or cannot be opened */
    ACCEL_KVM_PVM,     /* KVM-PVM: unusable for a normal guest */
    ACCEL_KVM_BROKEN,  /* opens but API version / VM / vCPU creation fails */
};

/* Probes `dev` (normally "/dev/kvm"); `pvm_marker` is a path whose existence means PVM
 * (normally "/sys/module/kvm_pvm"). Writes a one-line reason to why[cap]. Never leaves
 * a descriptor open. */
enum accel_kvm accel_probe_kvm(const char *dev, const char *pvm_marker, char *why,
                               size_t cap);

/* The host TSC frequency in kHz: rdtsc against CLOCK_MONOTONIC_RAW over 20 ms (blocks
 * that long, so callers cache it), falling back to /proc/cpuinfo's "cpu MHz". 0 if
 * neither works. A TCG guest's TSC ticks at this rate. */
unsigned accel_host_tsc_khz(void);

#endif
