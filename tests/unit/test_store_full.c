/* Unit tests for the SQLite store on a full disk (store_sqlite.c, "The reserve"): the
 * database on a small tmpfs of its own, filled to the last byte after the store opened.
 * A write outside a transaction that the disk refuses runs again once the reserve is
 * given up; a transaction that begins nearly out of room gives the reserve up first (a
 * COMMIT the disk refuses may roll the whole transaction back). Either way every write
 * succeeds, and store_disk says the disk is full. Mounting a tmpfs needs root: without
 * it the tests skip, saying so. */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cmocka.h>

#include "daemon/store/store.h"

struct full {
    char dir[64];
    char db[128];
    char filler[128];
    struct store *st;
};

static int setup(void **state)
{
    struct full *f = calloc(1, sizeof *f);
    snprintf(f->dir, sizeof f->dir, "/tmp/test_store_full.XXXXXX");
    if (!f || !mkdtemp(f->dir))
        return -1;
    snprintf(f->db, sizeof f->db, "%s/space.db", f->dir);
    snprintf(f->filler, sizeof f->filler, "%s/filler", f->dir);
    if (mount("tmpfs", f->dir, "tmpfs", 0, "size=40m") != 0) {
        rmdir(f->dir);
        f->dir[0] = '\0';
    }
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct full *f = *state;
    if (f->st)
        store_close(f->st);
    if (f->dir[0]) {
        umount2(f->dir, MNT_DETACH);
        rmdir(f->dir);
    }
    free(f);
    return 0;
}

static long long avail(const char *dir)
{
    struct statvfs v;
    assert_int_equal(statvfs(dir, &v), 0);
    return (long long)v.f_bavail * (long long)v.f_frsize;
}

/* The store opened on the tmpfs with its reserve, then the disk filled. */
static void open_and_fill(struct full *f)
{
    if (!f->dir[0]) {
        print_message("skipped: mounting a tmpfs for the database needs root\n");
        skip();
    }
    char err[256];
    f->st = store_open(f->db, err, sizeof err);
    if (!f->st)
        fail_msg("store_open: %s", err);
    char reserve[160];
    struct stat st;
    snprintf(reserve, sizeof reserve, "%s-reserve", f->db);
    assert_int_equal(stat(reserve, &st), 0);
    assert_true(st.st_blocks * 512LL >= 16LL << 20);
    char buf[300];
    assert_null(store_disk(f->st, buf, sizeof buf));
    int fd = open(f->filler, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(posix_fallocate(fd, 0, avail(f->dir)), 0);
    close(fd);
    assert_int_equal(avail(f->dir), 0);
}

static void put_tenants(struct store *st, int from, int n)
{
    for (int i = from; i < from + n; i++) {
        struct store_tenant t = {.created_ms = i};
        snprintf(t.id, sizeof t.id, "tn%06d", i);
        snprintf(t.name, sizeof t.name, "tenant number %d with a longer name to fill pages", i);
        if (store_tenant_put(st, &t) != 0)
            fail_msg("tenant %d: %s", i, store_errmsg(st));
    }
}

static void assert_full_said(struct full *f)
{
    char buf[300];
    const char *why = store_disk(f->st, buf, sizeof buf);
    assert_non_null(why);
    assert_non_null(strstr(why, "full"));
    struct store_tenant t;
    assert_int_equal(store_tenant_get(f->st, "tn000001", &t), 0);
}

static void test_write_refused_runs_again(void **state)
{
    struct full *f = *state;
    open_and_fill(f);
    put_tenants(f->st, 1, 300); /* each its own autocommit statement */
    assert_full_said(f);
}

static void test_transaction_nearly_full(void **state)
{
    struct full *f = *state;
    open_and_fill(f);
    assert_int_equal(store_begin(f->st), 0);
    put_tenants(f->st, 1, 300);
    if (store_commit(f->st) != 0)
        fail_msg("commit: %s", store_errmsg(f->st));
    assert_full_said(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_write_refused_runs_again, setup, teardown),
        cmocka_unit_test_setup_teardown(test_transaction_nearly_full, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
