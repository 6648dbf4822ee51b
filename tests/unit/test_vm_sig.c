/* test_vm_sig: the VM runtime signature (vm_sig.h): QEMU's release series from its
 * -version line, the host CPU from /proc/cpuinfo, the composed string, the comparison
 * (states recorded before signatures existed are accepted), the refusal's words,
 * snapshot.json's "runtime", and a probe of the QEMU installed here. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/vm/vm_sig.h"

static void test_qemu_series(void **state)
{
    (void)state;
    char out[32];
    assert_int_equal(vm_sig_qemu_series("QEMU emulator version 7.2.22 (Debian 1:7.2+dfsg-7+deb12u18+b3)\n",
                                        out, sizeof out), 0);
    assert_string_equal(out, "7.2");
    /* a point release is the same series; a new series is not */
    assert_int_equal(vm_sig_qemu_series("QEMU emulator version 7.2.0", out, sizeof out), 0);
    assert_string_equal(out, "7.2");
    assert_int_equal(vm_sig_qemu_series("QEMU emulator version 10.1.50 (v10.1.0-1234-gabc)", out, sizeof out), 0);
    assert_string_equal(out, "10.1");
    assert_int_equal(vm_sig_qemu_series("QEMU emulator version 8.0", out, sizeof out), 0);
    assert_string_equal(out, "8.0");
    assert_int_equal(vm_sig_qemu_series("qemu-system-x86_64: unknown option", out, sizeof out), -1);
    assert_int_equal(vm_sig_qemu_series("QEMU emulator version x.y", out, sizeof out), -1);
    assert_int_equal(vm_sig_qemu_series("QEMU emulator version 7", out, sizeof out), -1);
    assert_int_equal(vm_sig_qemu_series("", out, sizeof out), -1);
    char tiny[3];
    assert_int_equal(vm_sig_qemu_series("QEMU emulator version 7.2.1", tiny, sizeof tiny), -1);
}

static const char cpuinfo[] =
    "processor\t: 0\n"
    "vendor_id\t: GenuineIntel\n"
    "model name\t: Intel(R) Xeon(R) CPU @ 2.20GHz\n"
    "flags\t\t: fpu vme de pse tsc msr pae mce\n"
    "\n"
    "processor\t: 1\n"
    "model name\t: Another CPU\n"
    "flags\t\t: fpu\n";

static void test_host_cpu(void **state)
{
    (void)state;
    char a[VM_SIG_MAX], b[VM_SIG_MAX];
    assert_int_equal(vm_sig_host_cpu(cpuinfo, a, sizeof a), 0);
    /* the first processor's model, and a hash of its flags */
    assert_true(strncmp(a, "Intel(R) Xeon(R) CPU @ 2.20GHz flags:", 37) == 0);
    assert_int_equal(strlen(a), 37 + 16);
    assert_int_equal(strspn(a + 37, "0123456789abcdef"), 16);
    /* the same flags with other whitespace: the same hash; one flag more: another */
    assert_int_equal(vm_sig_host_cpu("model name : Intel(R) Xeon(R) CPU @ 2.20GHz\n"
                                     "flags : fpu vme de pse tsc msr pae mce \n", b, sizeof b), 0);
    assert_string_equal(a, b);
    assert_int_equal(vm_sig_host_cpu("model name : Intel(R) Xeon(R) CPU @ 2.20GHz\n"
                                     "flags : fpu vme de pse tsc msr pae mce avx\n", b, sizeof b), 0);
    assert_string_not_equal(a, b);
    /* bytes outside printable ASCII do not reach the signature */
    assert_int_equal(vm_sig_host_cpu("model name\t: Odd\x01\xff CPU\nflags\t: fpu\n", b, sizeof b), 0);
    assert_true(strncmp(b, "Odd?? CPU flags:", 16) == 0);
    assert_int_equal(vm_sig_host_cpu("model name : x\n", b, sizeof b), -1);
    assert_int_equal(vm_sig_host_cpu("flags : fpu\n", b, sizeof b), -1);
    assert_int_equal(vm_sig_host_cpu("", b, sizeof b), -1);
}

static void test_compose_and_valid(void **state)
{
    (void)state;
    char out[VM_SIG_MAX];
    assert_int_equal(vm_sig_compose("7.2", "tcg", "max", out, sizeof out), 0);
    assert_string_equal(out, "QEMU 7.2/tcg/max");
    assert_true(vm_sig_valid(out));
    assert_int_equal(vm_sig_compose("8.2", "kvm", "EPYC\n", out, sizeof out), 0);
    assert_string_equal(out, "QEMU 8.2/kvm/EPYC?");
    char big[VM_SIG_MAX + 8];
    memset(big, 'c', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    assert_int_equal(vm_sig_compose("7.2", "kvm", big, out, sizeof out), -1);
    char small[8];
    assert_int_equal(vm_sig_compose("7.2", "tcg", "max", small, sizeof small), -1);
    assert_false(vm_sig_valid(""));
    assert_false(vm_sig_valid(NULL));
    assert_false(vm_sig_valid("QEMU 7.2/tcg/max\n"));
    assert_false(vm_sig_valid(big));
    big[VM_SIG_MAX - 1] = '\0';
    assert_true(vm_sig_valid(big));
}

static void test_compatible(void **state)
{
    (void)state;
    assert_true(vm_sig_compatible("QEMU 7.2/tcg/max", "QEMU 7.2/tcg/max"));
    assert_false(vm_sig_compatible("QEMU 7.2/tcg/max", "QEMU 8.0/tcg/max"));
    assert_false(vm_sig_compatible("QEMU 7.2/tcg/max", "QEMU 7.2/kvm/EPYC flags:0123456789abcdef"));
    assert_false(vm_sig_compatible("QEMU 7.2/kvm/EPYC flags:0123456789abcdef",
                                   "QEMU 7.2/kvm/EPYC flags:fedcba9876543210"));
    /* recorded before signatures existed, or unknown here: accepted as before */
    assert_true(vm_sig_compatible(NULL, "QEMU 7.2/tcg/max"));
    assert_true(vm_sig_compatible("", "QEMU 7.2/tcg/max"));
    assert_true(vm_sig_compatible("QEMU 7.2/tcg/max", ""));
    assert_true(vm_sig_compatible("QEMU 7.2/tcg/max", NULL));
    char msg[400];
    vm_sig_refusal("snapshot sn1", "QEMU 7.2/tcg/max", "QEMU 8.0/tcg/max", msg, sizeof msg);
    assert_non_null(strstr(msg, "snapshot sn1 was saved by QEMU 7.2/tcg/max; this node runs QEMU 8.0/tcg/max"));
    assert_non_null(strstr(msg, "cannot be restored here"));
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void test_of_snapshot(void **state)
{
    (void)state;
    char dir[] = "/tmp/space-vmsig-XXXXXX", p[64], out[VM_SIG_MAX];
    assert_non_null(mkdtemp(dir));
    snprintf(p, sizeof p, "%s/snapshot.json", dir);
    assert_int_equal(vm_sig_of_snapshot(dir, out, sizeof out), -1); /* no file */
    write_file(p, "{\"kind\": \"suspend\", \"runtime\": \"QEMU 7.2/tcg/max\"}");
    assert_int_equal(vm_sig_of_snapshot(dir, out, sizeof out), 0);
    assert_string_equal(out, "QEMU 7.2/tcg/max");
    write_file(p, "{\"kind\": \"suspend\", \"accel\": \"tcg\"}"); /* written before signatures */
    assert_int_equal(vm_sig_of_snapshot(dir, out, sizeof out), 0);
    assert_string_equal(out, "");
    write_file(p, "{\"kind\": \"suspend\", \"runtime\": 7}");
    assert_int_equal(vm_sig_of_snapshot(dir, out, sizeof out), -1);
    write_file(p, "{\"kind\": \"suspend\", \"runtime\": \"bad\\u0001\"}");
    assert_int_equal(vm_sig_of_snapshot(dir, out, sizeof out), -1);
    write_file(p, "not json");
    assert_int_equal(vm_sig_of_snapshot(dir, out, sizeof out), -1);
    assert_string_equal(out, "");
    unlink(p);
    rmdir(dir);
}

/* The QEMU installed here gives a valid signature; a binary that does not exist, or
 * that prints no version, gives none and says why. */
static void test_probe(void **state)
{
    (void)state;
    char out[VM_SIG_MAX], why[256];
    if (access("/usr/bin/qemu-system-x86_64", X_OK) != 0) {
        print_message("skipped the QEMU probe: /usr/bin/qemu-system-x86_64 is not installed\n");
    } else {
        assert_int_equal(vm_sig_probe(NULL, VM_ACCEL_TCG, out, sizeof out, why, sizeof why), 0);
        assert_true(vm_sig_valid(out));
        assert_true(strncmp(out, "QEMU ", 5) == 0);
        assert_non_null(strstr(out, "/tcg/max"));
    }
    assert_int_equal(vm_sig_probe("/nonexistent/qemu", VM_ACCEL_TCG, out, sizeof out, why, sizeof why), -1);
    assert_string_equal(out, "");
    assert_non_null(strstr(why, "/nonexistent/qemu"));
    assert_int_equal(vm_sig_probe("/bin/true", VM_ACCEL_TCG, out, sizeof out, why, sizeof why), -1);
    assert_string_equal(out, "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qemu_series),
        cmocka_unit_test(test_host_cpu),
        cmocka_unit_test(test_compose_and_valid),
        cmocka_unit_test(test_compatible),
        cmocka_unit_test(test_of_snapshot),
        cmocka_unit_test(test_probe),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
