/* test_vm_ping: when the supervision tick sends a QMP ping (vm_ping_due): rarely for a
 * running QEMU (each ping wakes an idle one), at once for a stopped or traced one so a
 * SIGSTOP is still judged a hang within two ticks, and on the first tick. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdint.h>

#include "daemon/vm/vm.h"

static void test_running_pinged_rarely(void **state)
{
    uint64_t sent = 1000000;
    assert_int_equal(vm_ping_due('S', sent + VM_PING_INTERVAL_MS, sent), 0);
    assert_int_equal(vm_ping_due('R', sent + VM_PING_QMP_MS - 1, sent), 0);
    assert_int_equal(vm_ping_due('D', sent + VM_PING_QMP_MS - 1, sent), 0);
    assert_int_equal(vm_ping_due('S', sent + VM_PING_QMP_MS, sent), 1);
    assert_int_equal(vm_ping_due('S', sent + 10 * VM_PING_QMP_MS, sent), 1);
    /* The tick must be much cheaper for QEMU than the ping it replaces. */
    assert_true(VM_PING_QMP_MS >= 10 * VM_PING_INTERVAL_MS);
}

static void test_stopped_pinged_at_once(void **state)
{
    uint64_t sent = 1000000;
    assert_int_equal(vm_ping_due('T', sent + 1, sent), 1);
    assert_int_equal(vm_ping_due('t', sent + 1, sent), 1);
}

static void test_first_tick_pings(void **state)
{
    assert_int_equal(vm_ping_due('S', 5, 0), 1);
    assert_int_equal(vm_ping_due('?', 5, 0), 1);
    assert_int_equal(vm_ping_due('?', 5000, 4000), 0); /* unreadable: the pidfd decides */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_running_pinged_rarely),
        cmocka_unit_test(test_stopped_pinged_at_once),
        cmocka_unit_test(test_first_tick_pings),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
