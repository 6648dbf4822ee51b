/* Unit tests for the PostgreSQL store against a real server: the shared behavioural
 * checks (store_checks.h) plus what only a shared database has: migrations applied once
 * by replicas opening together, a newer schema refused, two handles seeing each other's
 * commits, a failed statement aborting the transaction, reconnection after the server
 * dropped the connection, and bytewise key order whatever the database's locale.
 *
 * Needs SPACE_TEST_PG, a libpq connection string to a database the test may create
 * schemas in (scripts/pg-test-server.sh start DIR prints one). Each test runs in its own
 * schema (selected for every connection, children included, through PGOPTIONS) that
 * teardown drops. Without SPACE_TEST_PG every test skips, saying why. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>
#include <postgresql/libpq-fe.h>

#include "daemon/store/store.h"


static const char *pg_url;
static char schema[64];
static char appname[96];

static struct store *checks_open_quiet(char *err, size_t cap) { return store_open(pg_url, err, cap); }

static struct store *checks_open(void)
{
    char err[256];
    struct store *st = checks_open_quiet(err, sizeof err);
    if (!st)
        fail_msg("store_open: %s", err);
    return st;
}

#include "store_checks.h"

static void quiet_notice(void *arg, const char *msg) { (void)arg; (void)msg; }

/* Runs one statement on a separate admin connection: explicit options and name, so
 * neither the test schema (PGOPTIONS) nor the name it kills by (PGAPPNAME) apply. */
static void admin_sql(const char *sql)
{
    const char *const keys[] = {"dbname", "options", "application_name", NULL};
    const char *const vals[] = {pg_url, "-c search_path=public", "space_test_admin", NULL};
    PGconn *c = PQconnectdbParams(keys, vals, 1);
    char msg[256];
    if (PQstatus(c) != CONNECTION_OK) {
        snprintf(msg, sizeof msg, "%s", PQerrorMessage(c));
        PQfinish(c);
        fail_msg("admin connection: %s", msg);
    }
    PQsetNoticeProcessor(c, quiet_notice, NULL);
    PGresult *r = PQexec(c, sql);
    ExecStatusType es = PQresultStatus(r);
    snprintf(msg, sizeof msg, "%s", PQresultErrorMessage(r));
    PQclear(r);
    PQfinish(c);
    if (es != PGRES_COMMAND_OK && es != PGRES_TUPLES_OK)
        fail_msg("%s: %s", sql, msg);
}

static int setup(void **state)
{
    (void)state;
    static unsigned n;
    if (!pg_url)
        return 0;
    snprintf(schema, sizeof schema, "t%ld_%u", (long)getpid(), n++);
    snprintf(appname, sizeof appname, "space_test_%s", schema);
    char sql[160];
    snprintf(sql, sizeof sql, "CREATE SCHEMA %s", schema);
    admin_sql(sql);
    char opt[128];
    snprintf(opt, sizeof opt, "-c search_path=%s", schema);
    setenv("PGOPTIONS", opt, 1);
    setenv("PGAPPNAME", appname, 1);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    if (!pg_url)
        return 0;
    char sql[160];
    snprintf(sql, sizeof sql, "DROP SCHEMA %s CASCADE", schema);
    admin_sql(sql);
    unsetenv("PGOPTIONS");
    unsetenv("PGAPPNAME");
    return 0;
}

#define NEED_PG()                                                                          \
    do {                                                                                   \
        if (!pg_url)                                                                       \
            skip();                                                                        \
    } while (0)

static void test_tenants_and_keys(void **state) { NEED_PG(); check_tenants_and_keys(state); }
static void test_sandboxes_list(void **state) { NEED_PG(); check_sandboxes_list(state); }
static void test_operations(void **state) { NEED_PG(); check_operations(state); }
static void test_sessions_templates_tx(void **state) { NEED_PG(); check_sessions_templates_tx(state); }
static void test_nodes(void **state) { NEED_PG(); check_nodes(state); }
static void test_reservations(void **state) { NEED_PG(); check_reservations(state); }
static void test_reservations_race(void **state) { NEED_PG(); check_reservations_race(state); }
static void test_quotas(void **state) { NEED_PG(); check_quotas(state); }
static void test_snapshots(void **state) { NEED_PG(); check_snapshots(state); }
static void test_tpl_routes(void **state) { NEED_PG(); check_tpl_routes(state); }
static void test_tpl_delete_vs_create(void **state) { NEED_PG(); check_tpl_delete_vs_create(state); }
static void test_sandbox_move(void **state) { NEED_PG(); check_sandbox_move(state); }
static void test_crash_mid_transaction(void **state) { NEED_PG(); check_crash_mid_transaction(state); }
static void test_crash_loses_nothing_acknowledged(void **state)
{
    NEED_PG();
    check_crash_loses_nothing_acknowledged(state);
}
static void test_crash_keeps_lazy_writes(void **state)
{
    NEED_PG();
    check_crash_keeps_lazy_writes(state);
}

/* Waits for the n forked children; each must have exited 0. */
static void wait_children(const pid_t *pids, int n)
{
    for (int i = 0; i < n; i++) {
        int status;
        assert_int_equal(waitpid(pids[i], &status, 0), pids[i]);
        assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
}

/* Replicas starting together: each migration applied exactly once, all opens succeed. */
static void test_concurrent_open_migrates_once(void **state)
{
    (void)state;
    NEED_PG();
    enum { N = 4 };
    pid_t pids[N];
    for (int i = 0; i < N; i++) {
        pids[i] = fork();
        assert_true(pids[i] >= 0);
        if (pids[i] == 0) {
            char err[256];
            struct store *st = checks_open_quiet(err, sizeof err);
            if (!st) {
                fprintf(stderr, "child open: %s\n", err);
                _exit(1);
            }
            store_close(st);
            _exit(0);
        }
    }
    wait_children(pids, N);
    struct store *st = checks_open(); /* a further open applies nothing either */
    store_close(st);
    char sql[320];
    snprintf(sql, sizeof sql,
             "DO $$BEGIN IF (SELECT COUNT(*) <> MAX(version) OR MAX(version) < 2 FROM %s.space_migrations)"
             " THEN RAISE 'migrations applied more than once or not at all'; END IF; END$$",
             schema);
    admin_sql(sql);
}

/* Replicas checking one tenant's quota at once (quota.h): each child takes the quota
 * lock, reads usage, waits a little (so that without the lock both would read 0), and
 * inserts a sandbox only if the tenant has none. The lock serialises them: exactly one
 * sandbox exists afterwards. */
static void test_quota_lock_serialises_replicas(void **state)
{
    (void)state;
    NEED_PG();
    store_close(checks_open()); /* schema in place before the children race */
    enum { N = 4 };
    pid_t pids[N];
    for (int i = 0; i < N; i++) {
        pids[i] = fork();
        assert_true(pids[i] >= 0);
        if (pids[i] == 0) {
            char err[256], id[16];
            struct store *st = checks_open_quiet(err, sizeof err);
            struct store_quota_vals u;
            struct store_sbx s;
            snprintf(id, sizeof id, "sbq%d", i);
            fill_sbx(&s, id, "T", "base", "creating", NULL);
            if (!st || store_begin(st) != 0 || store_quota_lock(st, "T") != 0 ||
                store_quota_usage(st, "T", &u) != 0)
                _exit(1);
            usleep(200 * 1000);
            if ((u.sandboxes == 0 && store_sbx_put(st, &s) != 0) || store_commit(st) != 0)
                _exit(1);
            store_close(st);
            _exit(0);
        }
    }
    wait_children(pids, N);
    struct store *st = checks_open();
    struct store_quota_vals u;
    assert_int_equal(store_quota_usage(st, "T", &u), 0);
    assert_int_equal(u.sandboxes, 1);
    store_close(st);
}

/* A database upgraded by a newer spaced is refused, not written with the old layout. */
static void test_newer_schema_refused(void **state)
{
    (void)state;
    NEED_PG();
    store_close(checks_open());
    char sql[160];
    snprintf(sql, sizeof sql, "INSERT INTO %s.space_migrations(version) VALUES(99)", schema);
    admin_sql(sql);
    char err[256] = "";
    assert_null(store_open(pg_url, err, sizeof err));
    assert_non_null(strstr(err, "newer"));
}

/* Two handles are two control-plane replicas on one database. */
static void test_two_replicas_share_rows(void **state)
{
    (void)state;
    NEED_PG();
    struct store *a = checks_open(), *b = checks_open();
    assert_string_equal(store_backend_name(a), "postgresql");
    struct store_tenant t = {.id = "tn1", .name = "team", .created_ms = 5}, got;
    assert_int_equal(store_tenant_put(a, &t), 0);
    assert_int_equal(store_tenant_get(b, "tn1", &got), 0);
    assert_string_equal(got.name, "team");
    struct store_tenant t2 = {.id = "tn2", .name = "team"};
    assert_int_equal(store_tenant_put(b, &t2), STORE_CONFLICT);
    assert_non_null(strstr(store_errmsg(b), "already exists"));

    /* Uncommitted writes of one replica are invisible to the other until commit. */
    struct store_sbx s;
    fill_sbx(&s, "sbx", "A", "base", "creating", "{}");
    assert_int_equal(store_begin(a), 0);
    assert_int_equal(store_sbx_put(a, &s), 0);
    struct store_sbx g;
    assert_int_equal(store_sbx_get(b, "sbx", &g), STORE_NOTFOUND);
    assert_int_equal(store_commit(a), 0);
    assert_int_equal(store_sbx_get(b, "sbx", &g), 0);
    store_sbx_clear(&g);
    store_close(a);
    store_close(b);
}

/* Two replicas take the same Idempotency-Key at once: whether the second insert runs
 * before the first commits (it then waits on the unique index) or after, exactly one
 * wins and the other gets STORE_CONFLICT. */
static void test_replicas_race_on_idempotency_key(void **state)
{
    (void)state;
    NEED_PG();
    struct store *a = checks_open();
    struct store_op o;
    fill_op(&o, "opa", "A", "pending", "same-key", 1);
    assert_int_equal(store_begin(a), 0);
    assert_int_equal(store_op_put(a, &o), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        char err[256];
        struct store *b = checks_open_quiet(err, sizeof err);
        struct store_op ob;
        fill_op(&ob, "opb", "A", "pending", "same-key", 2);
        _exit(b && store_op_put(b, &ob) == STORE_CONFLICT ? 0 : 1);
    }
    assert_int_equal(store_commit(a), 0);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    struct store_op got;
    assert_int_equal(store_op_by_idem(a, "A", "same-key", &got), 0);
    assert_string_equal(got.id, "opa");
    store_op_clear(&got);
    store_close(a);
}

/* PostgreSQL aborts a transaction on its first failed statement; the store reports every
 * later statement as failed until rollback, after which the handle works again. */
static void test_failed_statement_aborts_transaction(void **state)
{
    (void)state;
    NEED_PG();
    struct store *st = checks_open();
    struct store_tenant t = {.id = "tn1", .name = "team"};
    assert_int_equal(store_tenant_put(st, &t), 0);
    assert_int_equal(store_begin(st), 0);
    assert_int_equal(store_tenant_put(st, &t), STORE_CONFLICT);
    struct store_tenant t2 = {.id = "tn2", .name = "other"};
    assert_int_equal(store_tenant_put(st, &t2), -1);
    assert_non_null(strstr(store_errmsg(st), "aborted"));
    store_rollback(st);
    struct store_tenant got;
    assert_int_equal(store_tenant_get(st, "tn2", &got), STORE_NOTFOUND);
    assert_int_equal(store_tenant_put(st, &t2), 0);
    store_close(st);
}

/* The server drops the connection (restart, failover, idle kill): the call that finds
 * out fails (its effect is unknown, it is not re-sent); the next one reconnects. */
static void test_reconnects_after_server_drop(void **state)
{
    (void)state;
    NEED_PG();
    struct store *st = checks_open();
    char sql[200];
    snprintf(sql, sizeof sql,
             "SELECT pg_terminate_backend(pid, 60000) FROM pg_stat_activity WHERE application_name='%s'",
             appname);
    admin_sql(sql);
    struct store_tenant got;
    assert_int_equal(store_tenant_get(st, "tn1", &got), -1);
    assert_true(store_errmsg(st)[0] != '\0');
    assert_int_equal(store_tenant_get(st, "tn1", &got), STORE_NOTFOUND);

    /* Inside a transaction the loss is reported, never papered over by a reconnect. */
    assert_int_equal(store_begin(st), 0);
    admin_sql(sql);
    assert_int_equal(store_tenant_get(st, "tn1", &got), -1);
    assert_int_equal(store_tenant_get(st, "tn1", &got), -1);
    assert_non_null(strstr(store_errmsg(st), "inside a transaction"));
    store_rollback(st);
    assert_int_equal(store_tenant_get(st, "tn1", &got), STORE_NOTFOUND);
    store_close(st);
}

static void count_running(const char *st, int64_t n, void *arg)
{
    if (strcmp(st, "running") == 0)
        *(int64_t *)arg = n;
}

/* Keyset pagination orders bytewise (as SQLite does) even in a database whose default
 * collation is a locale's; metadata matches by exact value, nested values included. */
static void test_order_and_metadata(void **state)
{
    (void)state;
    NEED_PG();
    struct store *st = checks_open();
    struct store_sbx s;
    fill_sbx(&s, "sba", "A", "base", "running", "{\"o\":{\"x\":1}}");
    assert_int_equal(store_sbx_put(st, &s), 0);
    fill_sbx(&s, "sb_", "A", "base", "running", "{\"o\":{\"x\":1,\"y\":2}}");
    assert_int_equal(store_sbx_put(st, &s), 0);
    fill_sbx(&s, "sbA", "A", "base", "running", NULL);
    assert_int_equal(store_sbx_put(st, &s), 0);
    char ids[128] = "";
    bool more;
    struct store_sbx_filter f = {.tenant = "A", .limit = 2};
    assert_int_equal(store_sbx_list(st, &f, count_cb, ids, &more), 0);
    assert_string_equal(ids, "sbA,sb_,");
    assert_true(more);
    ids[0] = '\0';
    f.after_id = "sb_";
    assert_int_equal(store_sbx_list(st, &f, count_cb, ids, &more), 0);
    assert_string_equal(ids, "sba,");
    assert_false(more);

    ids[0] = '\0';
    struct store_sbx_filter m = {.tenant = "A", .limit = 10, .metadata_json = "{\"o\":{\"x\":1}}"};
    assert_int_equal(store_sbx_list(st, &m, count_cb, ids, &more), 0);
    assert_string_equal(ids, "sba,"); /* not sb_ (a superset), not sbA (no metadata) */
    ids[0] = '\0';
    m.metadata_json = "{}";
    assert_int_equal(store_sbx_list(st, &m, count_cb, ids, &more), 0);
    assert_string_equal(ids, "sbA,sb_,sba,");
    m.metadata_json = "not json";
    assert_int_equal(store_sbx_list(st, &m, count_cb, ids, &more), -1);

    int64_t running = 0;
    assert_int_equal(store_sbx_count_by_state(st, count_running, &running), 0);
    assert_int_equal(running, 3);
    store_close(st);
}

static void test_open_errors(void **state)
{
    (void)state;
    char err[256] = "";
    assert_null(store_open("postgresql:///space?host=/nonexistent-dir&connect_timeout=2", err, sizeof err));
    assert_non_null(strstr(err, "cannot connect"));
    assert_true(store_url_is_pg("postgres://u@h/db"));
    assert_true(store_url_is_pg("postgresql:///db?host=/run/pg"));
    assert_true(store_url_is_pg("host=db dbname=space"));
    assert_false(store_url_is_pg("/var/lib/space/space.db"));
}

int main(void)
{
    pg_url = getenv("SPACE_TEST_PG");
    if (pg_url && !pg_url[0])
        pg_url = NULL;
    if (!pg_url)
        fprintf(stderr, "test_store_pg: SKIP: SPACE_TEST_PG is not set; start a throwaway server with\n"
                        "  export SPACE_TEST_PG=$(scripts/pg-test-server.sh start /tmp/space-pg)\n"
                        "and stop it with scripts/pg-test-server.sh stop /tmp/space-pg\n");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_tenants_and_keys, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sandboxes_list, setup, teardown),
        cmocka_unit_test_setup_teardown(test_operations, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sessions_templates_tx, setup, teardown),
        cmocka_unit_test_setup_teardown(test_crash_mid_transaction, setup, teardown),
        cmocka_unit_test_setup_teardown(test_crash_loses_nothing_acknowledged, setup, teardown),
        cmocka_unit_test_setup_teardown(test_crash_keeps_lazy_writes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nodes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reservations, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reservations_race, setup, teardown),
        cmocka_unit_test_setup_teardown(test_quotas, setup, teardown),
        cmocka_unit_test_setup_teardown(test_snapshots, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tpl_routes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tpl_delete_vs_create, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sandbox_move, setup, teardown),
        cmocka_unit_test_setup_teardown(test_quota_lock_serialises_replicas, setup, teardown),
        cmocka_unit_test_setup_teardown(test_concurrent_open_migrates_once, setup, teardown),
        cmocka_unit_test_setup_teardown(test_newer_schema_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_two_replicas_share_rows, setup, teardown),
        cmocka_unit_test_setup_teardown(test_replicas_race_on_idempotency_key, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failed_statement_aborts_transaction, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reconnects_after_server_drop, setup, teardown),
        cmocka_unit_test_setup_teardown(test_order_and_metadata, setup, teardown),
        cmocka_unit_test(test_open_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
