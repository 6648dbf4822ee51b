/* Unit tests for the sandbox table's record writes (sandbox/sbx_table.c) with a real
 * SQLite store in a temp dir and no VM: a state change the store refuses (another
 * connection holds SQLite's write lock) stays unsaved and is written by
 * sbx_table_retry once the store is back, after the backoff and not before; the same
 * for the record of a sandbox deleted (and gone from the table) while the store was
 * refusing it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "daemon/sandbox/sbx_internal.h"
#include "daemon/spaced.h"
#include "daemon/store/store.h"
#include "store_lock.h"

struct fx {
    char dir[64];
    char db[96];
    struct spaced sp;
};

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof *f);
    if (!f)
        return -1;
    snprintf(f->dir, sizeof f->dir, "/tmp/test_sbx_table.XXXXXX");
    if (!mkdtemp(f->dir))
        return -1;
    snprintf(f->db, sizeof f->db, "%s/space.db", f->dir);
    char err[256];
    f->sp.store = store_open(f->db, err, sizeof err);
    f->sp.sbx = sbx_table_new(&f->sp);
    if (!f->sp.store || !f->sp.sbx)
        return -1;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;
    sbx_table_free(f->sp.sbx);
    store_close(f->sp.store);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", f->dir);
    int rc = system(cmd);
    free(f);
    return rc == 0 ? 0 : -1;
}

static void assert_stored_state(struct fx *f, const char *id, const char *state)
{
    struct store_sbx got;
    assert_int_equal(store_sbx_get(f->sp.store, id, &got), 0);
    assert_string_equal(got.state, state);
    store_sbx_clear(&got);
}

/* Lets the backoff after a failed write run out. */
static void wait_backoff(void) { usleep((SPACED_RETRY_MIN_MS + 100) * 1000); }

static void test_refused_writes_are_retried(void **state)
{
    struct fx *f = *state;
    struct store_sbx rec = {.vcpus = 1, .memory_mib = 256};
    snprintf(rec.id, sizeof rec.id, "sbtest");
    snprintf(rec.tenant, sizeof rec.tenant, "tn1");
    snprintf(rec.state, sizeof rec.state, "creating");
    snprintf(rec.desired, sizeof rec.desired, "running");
    assert_int_equal(store_sbx_put(f->sp.store, &rec), 0);
    struct sbx *s = sbx_table_add(&f->sp, &rec);
    assert_non_null(s);

    /* The VM came up while the store refuses writes: running stays in memory. */
    sqlite3 *lock = store_lock(f->db);
    sbx_set_state(s, SBX_RUNNING, NULL);
    assert_int_equal(sbx_state(s), SBX_RUNNING);
    assert_stored_state(f, "sbtest", "creating");
    store_unlock(lock);
    sbx_table_retry(&f->sp); /* within the backoff: no attempt yet */
    assert_stored_state(f, "sbtest", "creating");
    wait_backoff();
    sbx_table_retry(&f->sp);
    assert_stored_state(f, "sbtest", "running");

    /* Deleted and gone from the table while the store refuses it: still written. */
    lock = store_lock(f->db);
    sbx_set_state(s, SBX_DELETED, NULL);
    sbx_table_remove(&f->sp, s);
    assert_null(sbx_find(&f->sp, NULL, "sbtest"));
    store_unlock(lock);
    wait_backoff();
    sbx_table_retry(&f->sp);
    assert_stored_state(f, "sbtest", "deleted");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_refused_writes_are_retried, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
