/* store_pg.c: the PostgreSQL (libpq) driver of the store (store_backend.h); what a
 * caller can observe of it is described in store.h, "PostgreSQL".
 *
 * store.c's statements use `?` placeholders; they are numbered ($1, $2...) here before
 * sending. Parameters travel as text with their type declared (text or int8), so a
 * bare `? IS NULL` or `LIMIT ?` needs no cast. A result is read whole, then handed to
 * the row callback one row at a time. */
#include <postgresql/libpq-fe.h> /* Debian installs it there, off the default path */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_backend.h"

struct store_pg {
    struct store base; /* first: the handle store.c sees */
    PGconn *conn;      /* owned; one connection per handle */
    bool in_tx;        /* between begin and commit/rollback */
};

#define PG_MAX_PARAMS 32
#define PG_UNIQUE_VIOLATION "23505"
#define PG_TEXTOID 25 /* pg_type OIDs (catalog/pg_type_d.h, a server header) */
#define PG_INT8OID 20

static struct store_pg *pg_of(struct store *st) { return (struct store_pg *)st; }

/* Copies a libpq message without its trailing newline. */
static void pg_msg(char *dst, size_t cap, const char *what, const char *msg)
{
    int n = snprintf(dst, cap, "%s: %s", what, msg && msg[0] ? msg : "unknown error");
    for (size_t len = n > 0 && (size_t)n < cap ? (size_t)n : strlen(dst);
         len > 0 && (dst[len - 1] == '\n' || dst[len - 1] == ' '); len--)
        dst[len - 1] = '\0';
}

static int pg_fail(struct store *st, const char *what)
{
    pg_msg(st->err, sizeof st->err, what, PQerrorMessage(pg_of(st)->conn));
    return -1;
}

/* Re-establishes a broken connection, but only between transactions: inside one, the
 * server has already rolled it back and the caller must learn that from the failure. */
static int pg_ready(struct store *st)
{
    struct store_pg *pg = pg_of(st);
    if (PQstatus(pg->conn) == CONNECTION_OK)
        return 0;
    if (pg->in_tx)
        return pg_fail(st, "connection lost inside a transaction");
    PQreset(pg->conn);
    return PQstatus(pg->conn) == CONNECTION_OK ? 0 : pg_fail(st, "reconnect");
}

/* Rewrites each `?` outside a quoted string as $1, $2... into out. Returns the number
 * of placeholders, or -1 if out is too small. */
static int pg_number(const char *sql, char *out, size_t cap)
{
    size_t o = 0;
    int n = 0;
    bool quoted = false;
    for (const char *p = sql; *p; p++) {
        if (*p == '\'')
            quoted = !quoted;
        int w = *p == '?' && !quoted ? snprintf(out + o, cap - o, "$%d", ++n)
                                     : snprintf(out + o, cap - o, "%c", *p);
        if (w < 0 || (size_t)w >= cap - o)
            return -1;
        o += (size_t)w;
    }
    return n;
}

/* Maps a failed result to STORE_CONFLICT (uniqueness) or -1, with st->err set. */
static int pg_result_error(struct store *st, const PGresult *r)
{
    const char *state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
    if (state && strcmp(state, PG_UNIQUE_VIOLATION) == 0) {
        pg_msg(st->err, sizeof st->err, "already exists", PQresultErrorMessage(r));
        return STORE_CONFLICT;
    }
    pg_msg(st->err, sizeof st->err, "query", r ? PQresultErrorMessage(r) : PQerrorMessage(pg_of(st)->conn));
    return -1;
}

static int pg_query(struct store *st, const char *sql, const struct store_arg *args, int nargs,
                    store_row_fn fn, void *arg, int64_t *changes)
{
    char text[4096];
    int n = pg_number(sql, text, sizeof text);
    if (n < 0 || n != nargs || nargs > PG_MAX_PARAMS) {
        snprintf(st->err, sizeof st->err, "statement has %d placeholders for %d parameters", n, nargs);
        return -1;
    }
    const char *vals[PG_MAX_PARAMS];
    Oid types[PG_MAX_PARAMS];
    char num[PG_MAX_PARAMS][24];
    for (int i = 0; i < nargs; i++) {
        types[i] = args[i].type == 'i' ? PG_INT8OID : PG_TEXTOID;
        vals[i] = args[i].s;
        if (args[i].type == 'i') {
            snprintf(num[i], sizeof num[i], "%lld", (long long)args[i].i);
            vals[i] = num[i];
        }
    }
    if (pg_ready(st) != 0)
        return -1;
    PGresult *r = PQexecParams(pg_of(st)->conn, text, nargs, types, vals, NULL, NULL, 0);
    ExecStatusType es = PQresultStatus(r);
    if (es != PGRES_COMMAND_OK && es != PGRES_TUPLES_OK) {
        int ret = pg_result_error(st, r);
        PQclear(r);
        return ret;
    }
    if (changes)
        *changes = strtoll(PQcmdTuples(r), NULL, 10);
    int rows = PQntuples(r), ncols = PQnfields(r);
    if (ncols > STORE_MAX_COLS)
        ncols = STORE_MAX_COLS;
    for (int i = 0; fn && i < rows; i++) {
        const char *cols[STORE_MAX_COLS];
        for (int c = 0; c < ncols; c++)
            cols[c] = PQgetisnull(r, i, c) ? NULL : PQgetvalue(r, i, c);
        if (fn(arg, cols, ncols))
            break;
    }
    PQclear(r);
    return 0;
}

/* Plain PQexec: a migration is several statements, which PQexecParams refuses. */
static int pg_script(struct store *st, const char *sql)
{
    if (pg_ready(st) != 0)
        return -1;
    PGresult *r = PQexec(pg_of(st)->conn, sql);
    int ret = PQresultStatus(r) == PGRES_COMMAND_OK ? 0 : pg_result_error(st, r);
    PQclear(r);
    return ret;
}

/* READ COMMITTED (the server's default): reads lock nothing. */
static int pg_begin(struct store *st)
{
    int rc = pg_script(st, "BEGIN");
    pg_of(st)->in_tx = rc == 0;
    return rc;
}

/* A failed COMMIT ends the transaction too (the server rolled it back). */
static int pg_commit(struct store *st)
{
    int rc = pg_script(st, "COMMIT");
    pg_of(st)->in_tx = false;
    return rc;
}

static void pg_rollback(struct store *st)
{
    struct store_pg *pg = pg_of(st);
    PGTransactionStatusType ts = PQtransactionStatus(pg->conn);
    if (ts == PQTRANS_INTRANS || ts == PQTRANS_INERROR)
        PQclear(PQexec(pg->conn, "ROLLBACK"));
    pg->in_tx = false;
}

static void pg_close(struct store *st)
{
    PQfinish(pg_of(st)->conn);
    free(st);
}

static const struct store_ops pg_ops = {
    .name = "postgresql",
    .query = pg_query,
    .script = pg_script,
    .begin = pg_begin,
    .commit = pg_commit,
    .rollback = pg_rollback,
    .close = pg_close,
    /* Transaction-scoped advisory lock, key "spac": replicas starting together migrate
     * one after the other, and the later ones find nothing left to apply. */
    .migrate_lock_sql = "SELECT pg_advisory_xact_lock(1936744803)",
    /* Row locks held to commit. READ COMMITTED: a locking SELECT that waited returns the
     * row as the other transaction committed it, and the statements after it see that
     * transaction's writes. */
    .for_update = " FOR UPDATE",
    .for_share = " FOR SHARE",
};

struct store *store_pg_open(const char *url, char *err, size_t errlen)
{
    struct store_pg *pg = store_handle_new(sizeof *pg, &pg_ops, err, errlen);
    if (!pg)
        return NULL;
    pg->conn = PQconnectdb(url);
    if (PQstatus(pg->conn) != CONNECTION_OK) {
        /* libpq's message names host and user, never the password. */
        pg_msg(err, errlen, "cannot connect to PostgreSQL",
               pg->conn ? PQerrorMessage(pg->conn) : "out of memory");
        pg_close(&pg->base);
        return NULL;
    }
    /* Quiet "already exists, skipping" notices from idempotent DDL; keep warnings. */
    if (pg_script(&pg->base, "SET client_min_messages = warning") != 0) {
        snprintf(err, errlen, "cannot initialise the PostgreSQL store: %s", pg->base.err);
        pg_close(&pg->base);
        return NULL;
    }
    return &pg->base;
}
