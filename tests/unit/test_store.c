/* Unit tests for the SQLite store: every table's round trip, filters and keyset
 * pagination, uniqueness, transactions, and crash consistency (a writer killed with
 * SIGKILL mid-transaction and mid-stream of commits, then the store reopened), and a file
 * from before schema versions were recorded opening in place. */
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
#include <sqlite3.h>

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


static struct store *checks_open_quiet(char *err, size_t cap) { return store_open(dbpath, err, cap); }

static struct store *checks_open(void)
{
    char err[256];
    struct store *st = checks_open_quiet(err, sizeof err);
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
    assert_false(store_url_is_pg("/var/lib/space/space.db"));
    assert_false(store_url_is_pg("space.db"));
}

/* A file written before schema versions were recorded (tables, no space_migrations)
 * opens as version 1 with its rows intact; a second open applies nothing. */
static void test_upgrades_unversioned_file(void **state)
{
    (void)state;
    sqlite3 *db;
    assert_int_equal(sqlite3_open(dbpath, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db,
                                  "CREATE TABLE tenants(id TEXT PRIMARY KEY, name TEXT NOT NULL UNIQUE,"
                                  " created_ms BIGINT NOT NULL);"
                                  "INSERT INTO tenants VALUES('tn1','old',7);",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(db);
    struct store *st = checks_open();
    assert_string_equal(store_backend_name(st), "sqlite");
    struct store_tenant t;
    assert_int_equal(store_tenant_get(st, "tn1", &t), 0);
    assert_string_equal(t.name, "old");
    store_close(st);
    store_close(checks_open());
    assert_int_equal(sqlite3_open(dbpath, &db), SQLITE_OK);
    sqlite3_stmt *q;
    assert_int_equal(sqlite3_prepare_v2(db, "SELECT COUNT(*), MAX(version) FROM space_migrations", -1, &q, NULL),
                     SQLITE_OK);
    assert_int_equal(sqlite3_step(q), SQLITE_ROW);
    assert_int_equal(sqlite3_column_int(q, 0), sqlite3_column_int(q, 1));
    sqlite3_finalize(q);
    sqlite3_close(db);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(check_tenants_and_keys, setup, teardown),
        cmocka_unit_test_setup_teardown(check_sandboxes_list, setup, teardown),
        cmocka_unit_test_setup_teardown(check_operations, setup, teardown),
        cmocka_unit_test_setup_teardown(check_sessions_templates_tx, setup, teardown),
        cmocka_unit_test_setup_teardown(check_nodes, setup, teardown),
        cmocka_unit_test_setup_teardown(check_reservations, setup, teardown),
        cmocka_unit_test_setup_teardown(check_reservations_race, setup, teardown),
        cmocka_unit_test_setup_teardown(check_quotas, setup, teardown),
        cmocka_unit_test_setup_teardown(check_snapshots, setup, teardown),
        cmocka_unit_test_setup_teardown(check_tpl_routes, setup, teardown),
        cmocka_unit_test_setup_teardown(check_tpl_delete_vs_create, setup, teardown),
        cmocka_unit_test_setup_teardown(check_sandbox_move, setup, teardown),
        cmocka_unit_test_setup_teardown(check_crash_mid_transaction, setup, teardown),
        cmocka_unit_test_setup_teardown(check_crash_loses_nothing_acknowledged, setup, teardown),
        cmocka_unit_test_setup_teardown(check_crash_keeps_lazy_writes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_upgrades_unversioned_file, setup, teardown),
        cmocka_unit_test(test_open_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
