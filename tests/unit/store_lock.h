/* store_lock.h: a SQLite store that refuses writes for a while, for the unit tests of
 * what must ride out a store outage (the op engine, the sandbox records). A second
 * connection takes the database's write lock: every write of the store's own
 * connection fails (after its busy timeout) until store_unlock, while reads still see
 * the last committed rows (WAL). Include after <cmocka.h>. */
#ifndef SPACE_TEST_STORE_LOCK_H
#define SPACE_TEST_STORE_LOCK_H

#include <sqlite3.h>

static inline sqlite3 *store_lock(const char *db_path)
{
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(db_path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "BEGIN EXCLUSIVE", NULL, NULL, NULL), SQLITE_OK);
    return db;
}

static inline void store_unlock(sqlite3 *db)
{
    assert_int_equal(sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
}

#endif
