/* Unit tests for the SQLite store: every table's round trip, filters and keyset
 * pagination, uniqueness, transactions, and crash consistency (a writer killed with
 * SIGKILL mid-transaction and mid-stream of commits, then the store reopened). */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "daemon/store/store.h"

static char dir[64];
static char dbpath[128];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/test_store.XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    snprintf(dbpath, sizeof dbpath, "%s/space.db", dir);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

#define STORE_T struct store
#define STORE_FN(name) store_##name

static STORE_T *checks_open_quiet(char *err, size_t cap) { return store_open(dbpath, err, cap); }

static STORE_T *checks_open(void)
{
    char err[256];
    STORE_T *st = checks_open_quiet(err, sizeof err);
    if (!st)
        fail_msg("store_open: %s", err);
    return st;
}

#include "store_checks.h"

static void test_open_errors(void **state)
{
    (void)state;
    char err[256] = "";
    assert_null(store_open("/nonexistent-dir/x/space.db", err, sizeof err));
    assert_non_null(strstr(err, "cannot open"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(check_tenants_and_keys, setup, teardown),
        cmocka_unit_test_setup_teardown(check_sandboxes_list, setup, teardown),
        cmocka_unit_test_setup_teardown(check_operations, setup, teardown),
        cmocka_unit_test_setup_teardown(check_sessions_templates_tx, setup, teardown),
        cmocka_unit_test_setup_teardown(check_crash_mid_transaction, setup, teardown),
        cmocka_unit_test_setup_teardown(check_crash_loses_nothing_acknowledged, setup, teardown),
        cmocka_unit_test(test_open_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
