/* accel: KVM usability probe (see accel.h). */
#include "accel.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/kvm.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
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
