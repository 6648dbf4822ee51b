/* test_vm_accel: KVM probe outcomes (absent device, KVM-PVM marker, a device that is not
 * KVM), forced accelerators, the host TSC rate, and the resolved choice on this host. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/vm/accel.h"
#include "daemon/vm/vm.h"

static void test_absent(void **state)
{
    char why[256];
    assert_int_equal(accel_probe_kvm("/nonexistent/kvm", "/nonexistent/marker", why, sizeof(why)),
                     ACCEL_KVM_ABSENT);
    assert_non_null(strstr(why, "/nonexistent/kvm"));
}

static void test_pvm_marker(void **state)
{
    char why[256], marker[] = "/tmp/space-pvm-XXXXXX";
    int fd = mkstemp(marker);
    assert_true(fd >= 0);
    close(fd);
    /* the marker wins even if the device would open */
    assert_int_equal(accel_probe_kvm("/dev/null", marker, why, sizeof(why)), ACCEL_KVM_PVM);
    assert_non_null(strstr(why, "PVM"));
    unlink(marker);
}

static void test_not_kvm(void **state)
{
    char why[256];
    assert_int_equal(accel_probe_kvm("/dev/null", "/nonexistent/marker", why, sizeof(why)),
                     ACCEL_KVM_BROKEN);
}

static void test_forced_and_auto(void **state)
{
    assert_int_equal(vm_accel_resolve(VM_ACCEL_TCG), VM_ACCEL_TCG);
    assert_int_equal(vm_accel_resolve(VM_ACCEL_KVM), VM_ACCEL_KVM);
    char why[256];
    enum accel_kvm k = accel_probe_kvm("/dev/kvm", "/sys/module/kvm_pvm", why, sizeof(why));
    enum vm_accel a = vm_accel_resolve(VM_ACCEL_AUTO);
    assert_int_equal(a, k == ACCEL_KVM_USABLE ? VM_ACCEL_KVM : VM_ACCEL_TCG);
    fprintf(stderr, "this host: auto -> %s (%s)\n", vm_accel_name(a), why);
    assert_string_equal(vm_accel_name(VM_ACCEL_AUTO), "auto");
}

static void test_tsc(void **state)
{
    unsigned khz = accel_host_tsc_khz();
    fprintf(stderr, "host TSC: %u kHz\n", khz);
    assert_true(khz > 100000 && khz < 20000000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_absent),
        cmocka_unit_test(test_pvm_marker),
        cmocka_unit_test(test_not_kvm),
        cmocka_unit_test(test_forced_and_auto),
        cmocka_unit_test(test_tsc),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
