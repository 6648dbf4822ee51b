/* test_vm_logs: qemu.log (QEMU's own stderr, which a guest can make QEMU write to) stays
 * under VM_QEMU_LOG_MAX bytes on disk: vm_qemu_log_bound empties it past the bound, and
 * judges by allocated blocks so a sparse file (a QEMU writing at its own offset) is
 * neither spared nor emptied for nothing. No VM: the function only needs the run dir. */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "daemon/vm/vm_internal.h"

static char dir[64], path[128];

static off_t write_log(size_t n, off_t at)
{
    static char buf[64 * 1024];
    memset(buf, 'q', sizeof buf);
    int fd = open(path, O_WRONLY | O_CREAT, 0600);
    assert_true(fd >= 0);
    for (size_t done = 0; done < n;) {
        size_t k = n - done < sizeof buf ? n - done : sizeof buf;
        assert_int_equal(pwrite(fd, buf, k, at + (off_t)done), (ssize_t)k);
        done += k;
    }
    close(fd);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    return st.st_size;
}

static void test_qemu_log_bound(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/test-vm-logs-XXXXXX");
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/qemu.log", dir);
    struct vm vm;
    memset(&vm, 0, sizeof vm);
    vm.cfg.run_dir = dir;
    vm.cfg.id = "logs";
    struct stat st;

    assert_int_equal(write_log(100 * 1024, 0), 100 * 1024); /* under: kept */
    vm_qemu_log_bound(&vm);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_size, 100 * 1024);

    write_log(VM_QEMU_LOG_MAX + 4096, 0); /* over: emptied */
    vm_qemu_log_bound(&vm);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_size, 0);

    /* a few bytes far out (sparse): little on disk, kept */
    assert_int_equal(write_log(10, 64 * 1024 * 1024), 64 * 1024 * 1024 + 10);
    vm_qemu_log_bound(&vm);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_size, 64 * 1024 * 1024 + 10);
    unlink(path);
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qemu_log_bound),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
