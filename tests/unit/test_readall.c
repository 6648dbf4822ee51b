/* Unit tests for readall: whole regular files in, everything else refused with the errno
 * the callers map to their own answers (console: 404; CLI: "not a regular file"). */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "readall.h"

static char dir[64];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/readall-XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static int open_put(const char *name, const char *text)
{
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    assert_true(fd >= 0);
    return fd;
}

static void test_whole_file_nul_terminated(void **state)
{
    (void)state;
    int fd = open_put("a", "hello\nworld");
    size_t len = 99;
    char *s = readall_fd(fd, 11, &len); /* exactly at the bound */
    assert_non_null(s);
    assert_int_equal(len, 11);
    assert_string_equal(s, "hello\nworld");
    free(s);
    close(fd);

    fd = open_put("empty", "");
    s = readall_fd(fd, 0, &len);
    assert_non_null(s);
    assert_int_equal(len, 0);
    assert_string_equal(s, "");
    free(s);
    close(fd);
}

static void test_over_the_bound_is_efbig(void **state)
{
    (void)state;
    int fd = open_put("big", "0123456789");
    size_t len = 99;
    errno = 0;
    assert_null(readall_fd(fd, 9, &len));
    assert_int_equal(errno, EFBIG);
    assert_int_equal(len, 0);
    close(fd);
}

static void test_not_a_regular_file_is_einval(void **state)
{
    (void)state;
    size_t len;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    assert_true(fd >= 0);
    errno = 0;
    assert_null(readall_fd(fd, 1 << 20, &len));
    assert_int_equal(errno, EINVAL);
    close(fd);

    /* A FIFO would block a reader forever: refused before any read. */
    char path[128];
    snprintf(path, sizeof path, "%s/fifo", dir);
    assert_int_equal(mkfifo(path, 0600), 0);
    fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    assert_true(fd >= 0);
    errno = 0;
    assert_null(readall_fd(fd, 1 << 20, &len));
    assert_int_equal(errno, EINVAL);
    close(fd);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_whole_file_nul_terminated),
        cmocka_unit_test(test_over_the_bound_is_efbig),
        cmocka_unit_test(test_not_a_regular_file_is_einval),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
