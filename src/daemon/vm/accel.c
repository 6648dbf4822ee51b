/* accel: KVM usability probe (see accel.h). */
#include "accel.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/kvm.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <time.h>
#include <x86intrin.h>
#include <unistd.h>

enum accel_kvm accel_probe_kvm(const char *dev, const char *pvm_marker, char *why,
                               size_t cap)
{
    if (pvm_marker && access(pvm_marker, F_OK) == 0) {
        snprintf(why, cap, "%s is KVM-PVM (%s present), which cannot boot a stock kernel",
                 dev, pvm_marker);
        return ACCEL_KVM_PVM;
    }
    int kvm = open(dev, O_RDWR | O_CLOEXEC);
    if (kvm < 0) {
        snprintf(why, cap, "cannot open %s: %s", dev, strerror(errno));
        return ACCEL_KVM_ABSENT;
    }
    enum accel_kvm res = ACCEL_KVM_BROKEN;
    int vmfd = -1, cpufd = -1;
    int ver = ioctl(kvm, KVM_GET_API_VERSION, 0);
    if (ver != KVM_API_VERSION) {
        snprintf(why, cap, "%s: unexpected KVM API version %d", dev, ver);
    } else if ((vmfd = ioctl(kvm, KVM_CREATE_VM, 0)) < 0) {
        snprintf(why, cap, "%s: KVM_CREATE_VM failed: %s", dev, strerror(errno));
    } else if ((cpufd = ioctl(vmfd, KVM_CREATE_VCPU, 0)) < 0) {
        snprintf(why, cap, "%s: KVM_CREATE_VCPU failed: %s", dev, strerror(errno));
    } else {
        snprintf(why, cap, "%s usable", dev);
        res = ACCEL_KVM_USABLE;
    }
    if (cpufd >= 0)
        close(cpufd);
    if (vmfd >= 0)
        close(vmfd);
    close(kvm);
    return res;
}

static unsigned cpuinfo_khz(void)
{
    FILE *f = fopen("/proc/cpuinfo", "re");
    char line[256];
    unsigned khz = 0;
    while (f && !khz && fgets(line, sizeof(line), f)) {
        double mhz;
        if (sscanf(line, "cpu MHz : %lf", &mhz) == 1 && mhz > 100 && mhz < 20000)
            khz = (unsigned)(mhz * 1000);
    }
    if (f)
        fclose(f);
    return khz;
}

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_RAW, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

unsigned accel_host_tsc_khz(void)
{
    double t0 = now_ns();
    unsigned long long c0 = __rdtsc();
    struct timespec d = { 0, 20 * 1000 * 1000 };
    while (nanosleep(&d, &d) < 0 && errno == EINTR)
        ;
    double t1 = now_ns();
    unsigned long long c1 = __rdtsc();
    double khz = (double)(c1 - c0) / ((t1 - t0) / 1e6);
    if (khz > 100000 && khz < 20000000)
        return (unsigned)(khz + 0.5);
    return cpuinfo_khz();
}
