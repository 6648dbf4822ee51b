/* store_sqlite.c: the SQLite (WAL) driver of the store (store_backend.h).
 *
 * Statements are prepared per call: the control plane makes a handful per request, far
 * below where caching matters. Every call runs on the event loop thread; the
 * connection is not shared. Rows are streamed: a row callback may itself call the
 * store (SQLite allows other statements while one is being stepped).
 *
 * The reserve. The database shares its file system with what fills disks (snapshots,
 * disk overlays, uploads). Were the disk full, spaced could act (fail a suspend, stop a
 * VM) and not record it: an operation would stay `running` for good. So the driver
 * keeps STORE_RESERVE bytes allocated beside the database (<db>-reserve) and gives them
 * up at the first write the disk refuses (SQLITE_FULL), then runs that write again, or
 * before a transaction when less than STORE_NEARLY_FULL is free (SQLite may roll back a
 * whole transaction whose COMMIT the disk refused, which no retry here can undo). The
 * records written since live on that room until the disk has room again, when the tick
 * (store_tick) allocates the reserve anew. store_disk says which. */
#include <errno.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "clock.h"
#include "fsroom.h"
#include "log.h"
#include "store_backend.h"

#define STORE_RESERVE (16LL << 20)
/* Taken anew only with this much free beside it: room for the next snapshot's header
 * and some records, so the reserve is not made and given up again at once. */
#define STORE_RESERVE_AGAIN (4 * STORE_RESERVE)
#define STORE_RESERVE_CHECK_S 5
/* Less free than this when a transaction begins: the reserve is given up first (room for
 * any transaction spaced writes, which are a few pages each). */
#define STORE_NEARLY_FULL (4LL << 20)

struct store_sqlite {
    struct store base;  /* first: the handle store.c sees */
    sqlite3 *db;        /* owned */
    char *reserve;      /* the reserve file's path; NULL: none kept (in-memory database) */
    bool held;          /* the reserve is allocated */
    int64_t checked_ms; /* last attempt to take the reserve again (clock_mono_ms) */
};

static sqlite3 *db_of(struct store *st) { return ((struct store_sqlite *)st)->db; }

static int sq_fail(struct store *st, const char *what)
{
    snprintf(st->err, sizeof st->err, "%s: %s", what, sqlite3_errmsg(db_of(st)));
    return -1;
}

static struct store_sqlite *sq_of(struct store *st) { return (struct store_sqlite *)st; }

/* Allocates the reserve (all of it, or nothing is left behind). */
static void reserve_take(struct store_sqlite *sq)
{
    int fd = open(sq->reserve, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    int err = fd < 0 ? errno : posix_fallocate(fd, 0, STORE_RESERVE);
    if (fd >= 0)
        close(fd);
    sq->held = err == 0;
    if (!sq->held) {
        unlink(sq->reserve);
        log_warn("store.reserve", "event=not_taken path=%s bytes=%lld errno=%d msg=\"%s\"",
                 sq->reserve, STORE_RESERVE, err, strerror(err));
    }
}

/* Gives the reserve up (logged). False when there was none to give. */
static bool reserve_give_up(struct store_sqlite *sq, const char *why)
{
    if (!sq->held)
        return false;
    sq->held = false;
    sq->checked_ms = clock_mono_ms();
    if (unlink(sq->reserve) < 0 && errno != ENOENT)
        return false;
    log_error("store.reserve", "event=used path=%s bytes=%lld why=%s note=\"the data dir's disk "
              "is full: the store writes on its reserve until there is room again\"",
              sq->reserve, STORE_RESERVE, why);
    return true;
}

/* The disk refused a write (SQLITE_FULL): gives up the reserve, once. True when the
 * statement may run again: the reserve was just given up and the failure took back no
 * more than the statement (a transaction it ran in is still open). */
static bool sq_full_retry(struct store *st, bool was_auto)
{
    struct store_sqlite *sq = sq_of(st);
    return (sqlite3_errcode(sq->db) & 0xff) == SQLITE_FULL && reserve_give_up(sq, "write_refused") &&
           sqlite3_get_autocommit(sq->db) == was_auto;
}

static void sq_tick(struct store *st)
{
    struct store_sqlite *sq = sq_of(st);
    int64_t now = clock_mono_ms();
    if (!sq->reserve || sq->held || now - sq->checked_ms < STORE_RESERVE_CHECK_S * 1000)
        return;
    sq->checked_ms = now;
    long long avail = fsroom_avail(sq->reserve);
    if (avail < STORE_RESERVE_AGAIN)
        return;
    reserve_take(sq);
    if (sq->held)
        log_info("store.reserve", "event=taken path=%s bytes=%lld free=%lld", sq->reserve,
                 STORE_RESERVE, avail);
}

static const char *sq_disk(struct store *st, char *buf, size_t cap)
{
    struct store_sqlite *sq = sq_of(st);
    if (!sq->reserve || sq->held)
        return NULL;
    snprintf(buf, cap, "full: the store's reserve (%lld MiB) is in use; %lld MiB free for %s",
             STORE_RESERVE >> 20, fsroom_avail(sq->reserve) >> 20, sq->reserve);
    return buf;
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
    int ncols = sqlite3_column_count(stmt), ret = 0, rows = 0;
    if (ncols > STORE_MAX_COLS)
        ncols = STORE_MAX_COLS;
    bool was_auto = sqlite3_get_autocommit(db);
    for (;;) {
        int rc = sqlite3_step(stmt);
        if (rc == SQLITE_DONE)
            break;
        if (rc != SQLITE_ROW && rows == 0 && sq_full_retry(st, was_auto)) {
            sqlite3_reset(stmt);
            continue;
        }
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
        rows++;
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
    bool was_auto = sqlite3_get_autocommit(db_of(st));
    int rc = sqlite3_exec(db_of(st), sql, NULL, NULL, &msg);
    /* One statement (BEGIN, COMMIT) runs again; a script of several may have done some
     * of them already (a migration fails whole and is redone at the next start). */
    if (rc != SQLITE_OK && !strchr(sql, ';') && sq_full_retry(st, was_auto)) {
        sqlite3_free(msg);
        msg = NULL;
        rc = sqlite3_exec(db_of(st), sql, NULL, NULL, &msg);
    }
    if (rc != SQLITE_OK) {
        snprintf(st->err, sizeof st->err, "%.60s...: %s", sql, msg ? msg : "?");
        sqlite3_free(msg);
        return -1;
    }
    return 0;
}

/* IMMEDIATE takes the write lock at once, so a transaction never fails half-way for
 * lock contention; it also serialises migrations of concurrent openers. */
static int sq_begin(struct store *st)
{
    /* A transaction the disk refuses may be rolled back whole (SQLite's COMMIT on
     * SQLITE_FULL), which sq_full_retry cannot undo: nearly out of room, the reserve is
     * given up before one starts. A statvfs per transaction: microseconds. */
    struct store_sqlite *sq = sq_of(st);
    if (sq->held) {
        long long avail = fsroom_avail(sq->reserve);
        if (avail >= 0 && avail < STORE_NEARLY_FULL)
            reserve_give_up(sq, "nearly_full");
    }
    return sq_script(st, "BEGIN IMMEDIATE");
}
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
    free(sq_of(st)->reserve);
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
    .tick = sq_tick,
    .disk = sq_disk,
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

/* A database in a file keeps its reserve beside it (see the top of this file). */
static struct store *sq_reserve_open(struct store_sqlite *sq, const char *path, char *err,
                                     size_t errlen)
{
    if (!strcmp(path, ":memory:") || !strncmp(path, "file:", 5) || !path[0])
        return &sq->base;
    size_t n = strlen(path) + sizeof "-reserve";
    if (!(sq->reserve = malloc(n))) {
        snprintf(err, errlen, "out of memory");
        sq_close(&sq->base);
        return NULL;
    }
    snprintf(sq->reserve, n, "%s-reserve", path);
    struct stat st;
    sq->held = stat(sq->reserve, &st) == 0 && st.st_blocks * 512LL >= STORE_RESERVE;
    if (!sq->held)
        reserve_take(sq);
    sq->checked_ms = clock_mono_ms();
    return &sq->base;
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
        return sq_reserve_open(sq, path, err, errlen);
    snprintf(err, errlen, "cannot initialise %s: %s", path, sq->base.err);
    sq_close(&sq->base);
    return NULL;
}
