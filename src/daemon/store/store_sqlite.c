/* store_sqlite.c: the SQLite (WAL) driver of the store (store_backend.h).
 *
 * Statements are prepared per call: the control plane makes a handful per request, far
 * below where caching matters. Every call runs on the event loop thread; the
 * connection is not shared. Rows are streamed: a row callback may itself call the
 * store (SQLite allows other statements while one is being stepped). */
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_backend.h"

struct store_sqlite {
    struct store base; /* first: the handle store.c sees */
    sqlite3 *db;       /* owned */
};

static sqlite3 *db_of(struct store *st) { return ((struct store_sqlite *)st)->db; }

static int sq_fail(struct store *st, const char *what)
{
    snprintf(st->err, sizeof st->err, "%s: %s", what, sqlite3_errmsg(db_of(st)));
    return -1;
}

static int sq_bind(sqlite3_stmt *stmt, const struct store_arg *args, int nargs)
{
    int rc = SQLITE_OK;
    for (int i = 0; i < nargs && rc == SQLITE_OK; i++) {
        const struct store_arg *a = &args[i];
        if (a->type == 'i')
            rc = sqlite3_bind_int64(stmt, i + 1, a->i);
        else if (a->s)
            rc = sqlite3_bind_text(stmt, i + 1, a->s, -1, SQLITE_TRANSIENT);
        else
            rc = sqlite3_bind_null(stmt, i + 1);
    }
    return rc;
}

static int sq_query(struct store *st, const char *sql, const struct store_arg *args, int nargs,
                    store_row_fn fn, void *arg, int64_t *changes)
{
    sqlite3 *db = db_of(st);
    sqlite3_stmt *stmt = NULL;
    if (sqlite3_prepare_v2(db, sql, -1, &stmt, NULL) != SQLITE_OK)
        return sq_fail(st, "prepare");
    if (sq_bind(stmt, args, nargs) != SQLITE_OK) {
        sq_fail(st, "bind");
        sqlite3_finalize(stmt);
        return -1;
    }
    int ncols = sqlite3_column_count(stmt), ret = 0;
    if (ncols > STORE_MAX_COLS)
        ncols = STORE_MAX_COLS;
    for (;;) {
        int rc = sqlite3_step(stmt);
        if (rc == SQLITE_DONE)
            break;
        if (rc != SQLITE_ROW) {
            int ext = sqlite3_extended_errcode(db);
            if (ext == SQLITE_CONSTRAINT_UNIQUE || ext == SQLITE_CONSTRAINT_PRIMARYKEY) {
                snprintf(st->err, sizeof st->err, "already exists: %s", sqlite3_errmsg(db));
                ret = STORE_CONFLICT;
            } else {
                ret = sq_fail(st, "step");
            }
            break;
        }
        const char *cols[STORE_MAX_COLS];
        for (int i = 0; i < ncols; i++)
            cols[i] = (const char *)sqlite3_column_text(stmt, i);
        if (fn && fn(arg, cols, ncols))
            break;
    }
    if (changes)
        *changes = sqlite3_changes(db);
    sqlite3_finalize(stmt);
    return ret;
}

static int sq_script(struct store *st, const char *sql)
{
    char *msg = NULL;
    if (sqlite3_exec(db_of(st), sql, NULL, NULL, &msg) != SQLITE_OK) {
        snprintf(st->err, sizeof st->err, "%.60s...: %s", sql, msg ? msg : "?");
        sqlite3_free(msg);
        return -1;
    }
    return 0;
}

/* IMMEDIATE takes the write lock at once, so a transaction never fails half-way for
 * lock contention; it also serialises migrations of concurrent openers. */
static int sq_begin(struct store *st) { return sq_script(st, "BEGIN IMMEDIATE"); }
static int sq_commit(struct store *st) { return sq_script(st, "COMMIT"); }
static void sq_rollback(struct store *st)
{
    if (!sqlite3_get_autocommit(db_of(st)))
        sq_script(st, "ROLLBACK");
}

/* WAL + synchronous=NORMAL: a commit is in the WAL file (the OS's page cache) when it
 * returns, so a SIGKILL of spaced loses nothing; only an OS crash or power loss can roll
 * it back. The WAL stays ordered: the next FULL commit syncs these rows too. */
static int sq_lazy(struct store *st, bool lazy)
{
    if (!sqlite3_get_autocommit(db_of(st)))
        return 0; /* inside a transaction: its commit decides */
    return sq_script(st, lazy ? "PRAGMA synchronous=NORMAL" : "PRAGMA synchronous=FULL");
}

static void sq_close(struct store *st)
{
    sqlite3_close(db_of(st));
    free(st);
}

static const struct store_ops sqlite_ops = {
    .name = "sqlite",
    .query = sq_query,
    .script = sq_script,
    .begin = sq_begin,
    .commit = sq_commit,
    .rollback = sq_rollback,
    .close = sq_close,
    .lazy = sq_lazy,
    .migrate_lock_sql = NULL,
    .for_update = "", /* BEGIN IMMEDIATE already holds the database's write lock */
    .for_share = "",
};

/* The schema orders keys with COLLATE "C" (PostgreSQL's byte order); here it is the
 * same byte comparison SQLite's BINARY does. */
static int collate_c(void *arg, int na, const void *a, int nb, const void *b)
{
    (void)arg;
    int n = memcmp(a, b, (size_t)(na < nb ? na : nb));
    return n ? n : na - nb;
}

struct store *store_sqlite_open(const char *path, char *err, size_t errlen)
{
    struct store_sqlite *sq = store_handle_new(sizeof *sq, &sqlite_ops, err, errlen);
    if (!sq)
        return NULL;
    if (sqlite3_open_v2(path, &sq->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                        NULL) != SQLITE_OK) {
        snprintf(err, errlen, "cannot open %s: %s", path, sq->db ? sqlite3_errmsg(sq->db) : "out of memory");
        sq_close(&sq->base);
        return NULL;
    }
    /* busy_timeout covers a second process briefly holding the lock (sqlite3 CLI). */
    sqlite3_busy_timeout(sq->db, 2000);
    /* synchronous=FULL: a commit that returned is on disk, so SIGKILL loses nothing. */
    if (sqlite3_create_collation(sq->db, "C", SQLITE_UTF8, NULL, collate_c) != SQLITE_OK)
        sq_fail(&sq->base, "collation");
    else if (sq_script(&sq->base, "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;") == 0)
        return &sq->base;
    snprintf(err, errlen, "cannot initialise %s: %s", path, sq->base.err);
    sq_close(&sq->base);
    return NULL;
}
