/* store_pg.c: the PostgreSQL backend (libpq) of the store; see store_pg.h.
 *
 * The SQL mirrors store_sqlite.c statement for statement so the two backends keep the
 * same semantics; differences are PostgreSQL's numbered parameters ($1), typed NULL
 * tests ($1::text IS NULL: an untyped parameter has no type to test), "C" collation on
 * ordered keys (keyset pagination must order bytewise like SQLite whatever the
 * database's locale) and the metadata filter, done in SQL on jsonb instead of in C.
 * Parameters travel as text; results are read as text and parsed. */
#include "store_pg.h"

#include <jansson.h>
#include <postgresql/libpq-fe.h> /* Debian installs it there, off the default path */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct store_pg {
    PGconn *conn; /* owned; one connection per handle */
    bool in_tx;   /* between store_pg_begin and commit/rollback */
    char err[256];
};

/* Each entry upgrades the schema by one version; entries are never edited once
 * released, only appended (a replica may open an older database). */
static const char *const pg_migrations[] = {
    "CREATE TABLE IF NOT EXISTS tenants("
    " id TEXT COLLATE \"C\" PRIMARY KEY, name TEXT NOT NULL UNIQUE, created_ms BIGINT NOT NULL);"
    "CREATE TABLE IF NOT EXISTS api_keys("
    " id TEXT COLLATE \"C\" PRIMARY KEY, tenant TEXT NOT NULL, hash TEXT NOT NULL UNIQUE,"
    " prefix TEXT NOT NULL, admin INTEGER NOT NULL, created_ms BIGINT NOT NULL,"
    " expires_ms BIGINT NOT NULL, revoked_ms BIGINT NOT NULL);"
    "CREATE TABLE IF NOT EXISTS sandboxes("
    " id TEXT COLLATE \"C\" PRIMARY KEY, tenant TEXT NOT NULL, template TEXT NOT NULL,"
    " vcpus INTEGER NOT NULL, memory_mib INTEGER NOT NULL, env TEXT, metadata TEXT,"
    " network TEXT, timeout_s BIGINT NOT NULL, deadline_ms BIGINT NOT NULL,"
    " on_timeout TEXT NOT NULL, desired TEXT NOT NULL, state TEXT NOT NULL, failure TEXT,"
    " run_dir TEXT NOT NULL, created_ms BIGINT NOT NULL, updated_ms BIGINT NOT NULL);"
    "CREATE INDEX IF NOT EXISTS sandboxes_tenant ON sandboxes(tenant, id);"
    "CREATE TABLE IF NOT EXISTS operations("
    " id TEXT COLLATE \"C\" PRIMARY KEY, tenant TEXT NOT NULL, kind TEXT NOT NULL,"
    " target TEXT NOT NULL, state TEXT NOT NULL, error_code TEXT NOT NULL, error_message TEXT,"
    " progress INTEGER NOT NULL, detail TEXT, idem_key TEXT NOT NULL, body_hash TEXT NOT NULL,"
    " created_ms BIGINT NOT NULL, started_ms BIGINT NOT NULL, finished_ms BIGINT NOT NULL);"
    "CREATE UNIQUE INDEX IF NOT EXISTS operations_idem ON operations(tenant, idem_key)"
    " WHERE idem_key <> '';"
    "CREATE INDEX IF NOT EXISTS operations_state ON operations(state, created_ms);"
    "CREATE INDEX IF NOT EXISTS operations_target ON operations(tenant, target, created_ms);"
    "CREATE TABLE IF NOT EXISTS sessions("
    " id TEXT COLLATE \"C\" PRIMARY KEY, tenant TEXT NOT NULL, sandbox TEXT NOT NULL, spec TEXT,"
    " state TEXT NOT NULL, exit_code INTEGER NOT NULL, exit_signal INTEGER NOT NULL,"
    " created_ms BIGINT NOT NULL, updated_ms BIGINT NOT NULL);"
    "CREATE INDEX IF NOT EXISTS sessions_sandbox ON sessions(sandbox, id);"
    "CREATE TABLE IF NOT EXISTS templates("
    " name TEXT COLLATE \"C\" PRIMARY KEY, tenant TEXT NOT NULL, state TEXT NOT NULL, spec TEXT,"
    " failure TEXT, dir TEXT NOT NULL, created_ms BIGINT NOT NULL, updated_ms BIGINT NOT NULL);",
};

/* Key of the advisory lock that serialises schema upgrades across replicas ("spac"). */
#define PG_MIGRATE_LOCK 0x73706163

#define PG_MAX_PARAMS 20
#define PG_UNIQUE_VIOLATION "23505"

/* ---- helpers ------------------------------------------------------------------------ */

/* Copies a libpq message without its trailing newline. */
static void pg_msg(char *dst, size_t cap, const char *what, const char *msg)
{
    int n = snprintf(dst, cap, "%s: %s", what, msg && msg[0] ? msg : "unknown error");
    for (size_t len = n > 0 && (size_t)n < cap ? (size_t)n : strlen(dst);
         len > 0 && (dst[len - 1] == '\n' || dst[len - 1] == ' '); len--)
        dst[len - 1] = '\0';
}

static int pg_fail(struct store_pg *st, const char *what)
{
    pg_msg(st->err, sizeof st->err, what, PQerrorMessage(st->conn));
    return -1;
}

/* Re-establishes a broken connection, but only between transactions: inside one, the
 * server has already rolled it back and the caller must learn that from the failure. */
static int pg_ready(struct store_pg *st)
{
    if (PQstatus(st->conn) == CONNECTION_OK)
        return 0;
    if (st->in_tx)
        return pg_fail(st, "connection lost inside a transaction");
    PQreset(st->conn);
    return PQstatus(st->conn) == CONNECTION_OK ? 0 : pg_fail(st, "reconnect");
}

/* Text parameters: pointers into the caller's strings or into num[] for integers. */
struct pg_params {
    const char *v[PG_MAX_PARAMS];
    char num[PG_MAX_PARAMS][24];
    int n;
};

/* Runs sql with parameters described by fmt ('s' const char * (NULL -> NULL), 'i'
 * int64_t, 'u' unsigned, 'b' bool as int). Returns 0 with the result in *out (caller
 * PQclear()s it; out may be NULL), STORE_CONFLICT on a uniqueness violation, -1
 * otherwise, with st->err set. */
static int pg_exec(struct store_pg *st, PGresult **out, const char *sql, const char *fmt, ...)
{
    if (out)
        *out = NULL;
    struct pg_params p;
    p.n = 0;
    va_list ap;
    va_start(ap, fmt);
    for (; fmt[p.n]; p.n++) {
        if (p.n == PG_MAX_PARAMS) {
            va_end(ap);
            snprintf(st->err, sizeof st->err, "too many parameters");
            return -1;
        }
        switch (fmt[p.n]) {
        case 's': p.v[p.n] = va_arg(ap, const char *); break;
        case 'i': snprintf(p.num[p.n], sizeof p.num[p.n], "%lld", (long long)va_arg(ap, int64_t)); break;
        case 'u': snprintf(p.num[p.n], sizeof p.num[p.n], "%u", va_arg(ap, unsigned)); break;
        case 'b': snprintf(p.num[p.n], sizeof p.num[p.n], "%d", va_arg(ap, int) ? 1 : 0); break;
        default:
            va_end(ap);
            snprintf(st->err, sizeof st->err, "bad parameter type '%c'", fmt[p.n]);
            return -1;
        }
        if (fmt[p.n] != 's')
            p.v[p.n] = p.num[p.n];
    }
    va_end(ap);
    if (pg_ready(st) != 0)
        return -1;
    PGresult *r = PQexecParams(st->conn, sql, p.n, NULL, p.v, NULL, NULL, 0);
    ExecStatusType es = PQresultStatus(r);
    if (es == PGRES_COMMAND_OK || es == PGRES_TUPLES_OK) {
        if (out)
            *out = r;
        else
            PQclear(r);
        return 0;
    }
    const char *state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
    int ret = -1;
    if (state && strcmp(state, PG_UNIQUE_VIOLATION) == 0) {
        pg_msg(st->err, sizeof st->err, "already exists", PQresultErrorMessage(r));
        ret = STORE_CONFLICT;
    } else {
        pg_msg(st->err, sizeof st->err, "query", r ? PQresultErrorMessage(r) : PQerrorMessage(st->conn));
    }
    PQclear(r);
    return ret;
}

/* Row reader: fills a record from row i of r. */
typedef void (*pg_row_fn)(const PGresult *r, int i, void *rec);

/* Reads the rows of a query: with each == NULL the first row goes into rec and an empty
 * result is STORE_NOTFOUND; otherwise each(rec, arg) runs per row (stop on nonzero)
 * and clr releases rec after it. */
static int pg_rows(int rc, PGresult *r, pg_row_fn rd, void *rec,
                   void (*clr)(void *), int (*each)(const void *, void *), void *arg)
{
    if (rc != 0)
        return rc;
    int n = PQntuples(r), ret = each ? 0 : STORE_NOTFOUND;
    for (int i = 0; i < n; i++) {
        rd(r, i, rec);
        if (!each) {
            ret = 0;
            break;
        }
        int stop = each(rec, arg);
        clr(rec);
        if (stop)
            break;
    }
    PQclear(r);
    return ret;
}

static void col_copy(const PGresult *r, int i, int col, char *dst, size_t cap)
{
    snprintf(dst, cap, "%s", PQgetvalue(r, i, col));
}

static char *col_dup(const PGresult *r, int i, int col)
{
    return PQgetisnull(r, i, col) ? NULL : strdup(PQgetvalue(r, i, col));
}

static int64_t col_i64(const PGresult *r, int i, int col)
{
    return strtoll(PQgetvalue(r, i, col), NULL, 10);
}

/* ---- lifetime ------------------------------------------------------------------------- */

bool store_pg_url_is_pg(const char *url)
{
    return strncmp(url, "postgres://", 11) == 0 || strncmp(url, "postgresql://", 13) == 0 ||
           strstr(url, "dbname=") || strstr(url, "host=");
}

/* Applies the migrations this database has not seen, in one transaction, holding an
 * advisory lock so concurrent openers wait instead of racing on CREATE TABLE. */
static int pg_migrate(struct store_pg *st)
{
    PGresult *r;
    if (pg_exec(st, NULL, "BEGIN", "") != 0 ||
        pg_exec(st, NULL, "SELECT pg_advisory_xact_lock($1)", "i", (int64_t)PG_MIGRATE_LOCK) != 0 ||
        pg_exec(st, NULL, "CREATE TABLE IF NOT EXISTS space_migrations("
                          "version INTEGER PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())",
                "") != 0 ||
        pg_exec(st, &r, "SELECT COALESCE(MAX(version), 0) FROM space_migrations", "") != 0)
        goto fail;
    int64_t have = col_i64(r, 0, 0);
    PQclear(r);
    int64_t want = (int64_t)(sizeof pg_migrations / sizeof pg_migrations[0]);
    if (have > want) {
        snprintf(st->err, sizeof st->err,
                 "database schema version %lld is newer than this spaced understands (%lld)",
                 (long long)have, (long long)want);
        goto fail;
    }
    for (int64_t v = have + 1; v <= want; v++) {
        /* Plain PQexec: a migration is several statements, which PQexecParams refuses. */
        r = PQexec(st->conn, pg_migrations[v - 1]);
        if (PQresultStatus(r) != PGRES_COMMAND_OK) {
            pg_msg(st->err, sizeof st->err, "migration", PQresultErrorMessage(r));
            PQclear(r);
            goto fail;
        }
        PQclear(r);
        if (pg_exec(st, NULL, "INSERT INTO space_migrations(version) VALUES($1)", "i", v) != 0)
            goto fail;
    }
    if (pg_exec(st, NULL, "COMMIT", "") == 0)
        return 0;
fail:
    store_pg_rollback(st);
    return -1;
}

struct store_pg *store_pg_open(const char *url, char *errbuf, size_t errcap)
{
    struct store_pg *st = calloc(1, sizeof *st);
    if (!st) {
        snprintf(errbuf, errcap, "out of memory");
        return NULL;
    }
    st->conn = PQconnectdb(url);
    if (PQstatus(st->conn) != CONNECTION_OK) {
        /* libpq's message names host and user, never the password. */
        pg_msg(errbuf, errcap, "cannot connect to PostgreSQL",
               st->conn ? PQerrorMessage(st->conn) : "out of memory");
        store_pg_close(st);
        return NULL;
    }
    /* Quiet "already exists, skipping" notices from idempotent DDL; keep warnings. */
    if (pg_exec(st, NULL, "SET client_min_messages = warning", "") != 0 || pg_migrate(st) != 0) {
        snprintf(errbuf, errcap, "cannot initialise the PostgreSQL store: %s", st->err);
        store_pg_close(st);
        return NULL;
    }
    return st;
}

void store_pg_close(struct store_pg *st)
{
    if (!st)
        return;
    PQfinish(st->conn);
    free(st);
}

const char *store_pg_errmsg(struct store_pg *st) { return st->err; }

int store_pg_begin(struct store_pg *st)
{
    int rc = pg_exec(st, NULL, "BEGIN", "");
    st->in_tx = rc == 0;
    return rc;
}

/* A failed COMMIT ends the transaction too (the server rolled it back). */
int store_pg_commit(struct store_pg *st)
{
    int rc = pg_exec(st, NULL, "COMMIT", "");
    st->in_tx = false;
    return rc;
}

void store_pg_rollback(struct store_pg *st)
{
    PGTransactionStatusType ts = PQtransactionStatus(st->conn);
    if (ts == PQTRANS_INTRANS || ts == PQTRANS_INERROR)
        PQclear(PQexec(st->conn, "ROLLBACK"));
    st->in_tx = false;
}

/* ---- tenants -------------------------------------------------------------------------- */

static void tenant_row(const PGresult *r, int i, void *rec)
{
    struct store_tenant *t = rec;
    col_copy(r, i, 0, t->id, sizeof t->id);
    col_copy(r, i, 1, t->name, sizeof t->name);
    t->created_ms = col_i64(r, i, 2);
}

static void noop_clear(void *rec) { (void)rec; }

int store_pg_tenant_put(struct store_pg *st, const struct store_tenant *t)
{
    return pg_exec(st, NULL, "INSERT INTO tenants(id,name,created_ms) VALUES($1,$2,$3)", "ssi", t->id,
                   t->name, t->created_ms);
}

static int tenant_where(struct store_pg *st, const char *sql, const char *v, struct store_tenant *out)
{
    PGresult *r;
    int rc = pg_exec(st, &r, sql, "s", v);
    return pg_rows(rc, r, tenant_row, out, noop_clear, NULL, NULL);
}

int store_pg_tenant_get(struct store_pg *st, const char *id, struct store_tenant *out)
{
    return tenant_where(st, "SELECT id,name,created_ms FROM tenants WHERE id=$1", id, out);
}

int store_pg_tenant_by_name(struct store_pg *st, const char *name, struct store_tenant *out)
{
    return tenant_where(st, "SELECT id,name,created_ms FROM tenants WHERE name=$1", name, out);
}

/* ---- api keys ------------------------------------------------------------------------- */

#define KEY_COLS "id,tenant,hash,prefix,admin,created_ms,expires_ms,revoked_ms"

static void key_row(const PGresult *r, int i, void *rec)
{
    struct store_key *k = rec;
    col_copy(r, i, 0, k->id, sizeof k->id);
    col_copy(r, i, 1, k->tenant, sizeof k->tenant);
    col_copy(r, i, 2, k->hash, sizeof k->hash);
    col_copy(r, i, 3, k->prefix, sizeof k->prefix);
    k->admin = col_i64(r, i, 4) != 0;
    k->created_ms = col_i64(r, i, 5);
    k->expires_ms = col_i64(r, i, 6);
    k->revoked_ms = col_i64(r, i, 7);
}

int store_pg_key_put(struct store_pg *st, const struct store_key *k)
{
    return pg_exec(st, NULL, "INSERT INTO api_keys(" KEY_COLS ") VALUES($1,$2,$3,$4,$5,$6,$7,$8)",
                   "ssssbiii", k->id, k->tenant, k->hash, k->prefix, (int)k->admin, k->created_ms,
                   k->expires_ms, k->revoked_ms);
}

static int key_where(struct store_pg *st, const char *sql, const char *v, struct store_key *out)
{
    PGresult *r;
    int rc = pg_exec(st, &r, sql, "s", v);
    return pg_rows(rc, r, key_row, out, noop_clear, NULL, NULL);
}

int store_pg_key_by_hash(struct store_pg *st, const char *hash, struct store_key *out)
{
    return key_where(st, "SELECT " KEY_COLS " FROM api_keys WHERE hash=$1", hash, out);
}

int store_pg_key_get(struct store_pg *st, const char *id, struct store_key *out)
{
    return key_where(st, "SELECT " KEY_COLS " FROM api_keys WHERE id=$1", id, out);
}

int store_pg_key_revoke(struct store_pg *st, const char *id, int64_t now_ms)
{
    PGresult *r;
    int rc = pg_exec(st, &r, "UPDATE api_keys SET revoked_ms=$1 WHERE id=$2 AND revoked_ms=0", "is",
                     now_ms, id);
    if (rc != 0)
        return rc;
    bool none = strcmp(PQcmdTuples(r), "0") == 0;
    PQclear(r);
    return none ? STORE_NOTFOUND : 0;
}

int store_pg_key_each(struct store_pg *st, int (*fn)(const struct store_key *, void *), void *arg)
{
    struct store_key k;
    PGresult *r;
    int rc = pg_exec(st, &r, "SELECT " KEY_COLS " FROM api_keys ORDER BY id", "");
    return pg_rows(rc, r, key_row, &k, noop_clear, (int (*)(const void *, void *))fn, arg);
}

/* ---- sandboxes ------------------------------------------------------------------------ */

#define SBX_COLS                                                                           \
    "id,tenant,template,vcpus,memory_mib,env,metadata,network,timeout_s,deadline_ms,"      \
    "on_timeout,desired,state,failure,run_dir,created_ms,updated_ms"

static void sbx_clear_v(void *rec) { store_sbx_clear(rec); }

static void sbx_row(const PGresult *r, int i, void *rec)
{
    struct store_sbx *s = rec;
    memset(s, 0, sizeof *s);
    col_copy(r, i, 0, s->id, sizeof s->id);
    col_copy(r, i, 1, s->tenant, sizeof s->tenant);
    col_copy(r, i, 2, s->template_name, sizeof s->template_name);
    s->vcpus = (unsigned)col_i64(r, i, 3);
    s->memory_mib = (unsigned)col_i64(r, i, 4);
    s->env_json = col_dup(r, i, 5);
    s->metadata_json = col_dup(r, i, 6);
    s->network_json = col_dup(r, i, 7);
    s->timeout_s = col_i64(r, i, 8);
    s->deadline_ms = col_i64(r, i, 9);
    col_copy(r, i, 10, s->on_timeout, sizeof s->on_timeout);
    col_copy(r, i, 11, s->desired, sizeof s->desired);
    col_copy(r, i, 12, s->state, sizeof s->state);
    s->failure = col_dup(r, i, 13);
    col_copy(r, i, 14, s->run_dir, sizeof s->run_dir);
    s->created_ms = col_i64(r, i, 15);
    s->updated_ms = col_i64(r, i, 16);
}

int store_pg_sbx_put(struct store_pg *st, const struct store_sbx *s)
{
    return pg_exec(st, NULL,
        "INSERT INTO sandboxes(" SBX_COLS ") VALUES($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16,$17)"
        " ON CONFLICT(id) DO UPDATE SET tenant=excluded.tenant, template=excluded.template,"
        " vcpus=excluded.vcpus, memory_mib=excluded.memory_mib, env=excluded.env,"
        " metadata=excluded.metadata, network=excluded.network, timeout_s=excluded.timeout_s,"
        " deadline_ms=excluded.deadline_ms, on_timeout=excluded.on_timeout,"
        " desired=excluded.desired, state=excluded.state, failure=excluded.failure,"
        " run_dir=excluded.run_dir, created_ms=excluded.created_ms, updated_ms=excluded.updated_ms",
        "sssuusssiisssssii", s->id, s->tenant, s->template_name, s->vcpus, s->memory_mib,
        s->env_json, s->metadata_json, s->network_json, s->timeout_s, s->deadline_ms,
        s->on_timeout, s->desired, s->state, s->failure, s->run_dir, s->created_ms,
        s->updated_ms);
}

int store_pg_sbx_get(struct store_pg *st, const char *id, struct store_sbx *out)
{
    PGresult *r;
    int rc = pg_exec(st, &r, "SELECT " SBX_COLS " FROM sandboxes WHERE id=$1", "s", id);
    return pg_rows(rc, r, sbx_row, out, sbx_clear_v, NULL, NULL);
}

/* The metadata filter runs in SQL: a row matches when no filter pair has a different
 * (or missing) value in the row's metadata, compared as jsonb, which is the same
 * structural equality the SQLite backend applies in C. One row past the limit is
 * fetched to learn whether more match. */
int store_pg_sbx_list(struct store_pg *st, const struct store_sbx_filter *f,
                      int (*fn)(const struct store_sbx *, void *), void *arg, bool *more)
{
    *more = false;
    if (f->metadata_json) {
        json_t *want = json_loads(f->metadata_json, 0, NULL);
        bool is_obj = json_is_object(want);
        json_decref(want);
        if (!is_obj) {
            snprintf(st->err, sizeof st->err, "metadata filter is not a JSON object");
            return -1;
        }
    }
    PGresult *r;
    int rc = pg_exec(st, &r,
        "SELECT " SBX_COLS " FROM sandboxes WHERE tenant=$1 AND id>$2"
        " AND (($3::text IS NULL AND state<>'deleted') OR state=$3)"
        " AND ($4::text IS NULL OR template=$4)"
        " AND ($5::jsonb IS NULL OR NOT EXISTS (SELECT 1 FROM jsonb_each($5::jsonb) w"
        "      WHERE (sandboxes.metadata::jsonb -> w.key) IS DISTINCT FROM w.value))"
        " ORDER BY id LIMIT $6",
        "sssssi", f->tenant, f->after_id ? f->after_id : "", f->state, f->template_name,
        f->metadata_json, (int64_t)f->limit + 1);
    if (rc != 0)
        return rc;
    int n = PQntuples(r);
    if ((unsigned)n > f->limit) {
        *more = true;
        n = (int)f->limit;
    }
    struct store_sbx s;
    for (int i = 0; i < n; i++) {
        sbx_row(r, i, &s);
        int stop = fn(&s, arg);
        store_sbx_clear(&s);
        if (stop)
            break;
    }
    PQclear(r);
    return 0;
}

int store_pg_sbx_each_live(struct store_pg *st, int (*fn)(const struct store_sbx *, void *), void *arg)
{
    struct store_sbx s;
    PGresult *r;
    int rc = pg_exec(st, &r, "SELECT " SBX_COLS " FROM sandboxes WHERE state<>'deleted' ORDER BY id", "");
    return pg_rows(rc, r, sbx_row, &s, sbx_clear_v, (int (*)(const void *, void *))fn, arg);
}

int store_pg_sbx_count_by_state(struct store_pg *st, void (*fn)(const char *, int64_t, void *), void *arg)
{
    PGresult *r;
    int rc = pg_exec(st, &r, "SELECT state, COUNT(*) FROM sandboxes GROUP BY state", "");
    if (rc != 0)
        return rc;
    for (int i = 0; i < PQntuples(r); i++)
        fn(PQgetvalue(r, i, 0), col_i64(r, i, 1), arg);
    PQclear(r);
    return 0;
}

/* ---- operations ----------------------------------------------------------------------- */

#define OP_COLS                                                                            \
    "id,tenant,kind,target,state,error_code,error_message,progress,detail,idem_key,"       \
    "body_hash,created_ms,started_ms,finished_ms"

static void op_clear_v(void *rec) { store_op_clear(rec); }

static void op_row(const PGresult *r, int i, void *rec)
{
    struct store_op *o = rec;
    memset(o, 0, sizeof *o);
    col_copy(r, i, 0, o->id, sizeof o->id);
    col_copy(r, i, 1, o->tenant, sizeof o->tenant);
    col_copy(r, i, 2, o->kind, sizeof o->kind);
    col_copy(r, i, 3, o->target, sizeof o->target);
    col_copy(r, i, 4, o->state, sizeof o->state);
    col_copy(r, i, 5, o->error_code, sizeof o->error_code);
    o->error_message = col_dup(r, i, 6);
    o->progress = (int)col_i64(r, i, 7);
    o->detail = col_dup(r, i, 8);
    col_copy(r, i, 9, o->idem_key, sizeof o->idem_key);
    col_copy(r, i, 10, o->body_hash, sizeof o->body_hash);
    o->created_ms = col_i64(r, i, 11);
    o->started_ms = col_i64(r, i, 12);
    o->finished_ms = col_i64(r, i, 13);
}

int store_pg_op_put(struct store_pg *st, const struct store_op *o)
{
    return pg_exec(st, NULL,
        "INSERT INTO operations(" OP_COLS ") VALUES($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14)"
        " ON CONFLICT(id) DO UPDATE SET state=excluded.state, error_code=excluded.error_code,"
        " error_message=excluded.error_message, progress=excluded.progress,"
        " detail=excluded.detail, started_ms=excluded.started_ms,"
        " finished_ms=excluded.finished_ms",
        "sssssssisssiii", o->id, o->tenant, o->kind, o->target, o->state, o->error_code,
        o->error_message, (int64_t)o->progress, o->detail, o->idem_key, o->body_hash,
        o->created_ms, o->started_ms, o->finished_ms);
}

int store_pg_op_get(struct store_pg *st, const char *id, struct store_op *out)
{
    PGresult *r;
    int rc = pg_exec(st, &r, "SELECT " OP_COLS " FROM operations WHERE id=$1", "s", id);
    return pg_rows(rc, r, op_row, out, op_clear_v, NULL, NULL);
}

int store_pg_op_by_idem(struct store_pg *st, const char *tenant, const char *key, struct store_op *out)
{
    PGresult *r;
    int rc = pg_exec(st, &r, "SELECT " OP_COLS " FROM operations WHERE tenant=$1 AND idem_key=$2 AND idem_key<>''",
                     "ss", tenant, key);
    return pg_rows(rc, r, op_row, out, op_clear_v, NULL, NULL);
}

int store_pg_op_each_open(struct store_pg *st, int (*fn)(const struct store_op *, void *), void *arg)
{
    struct store_op o;
    PGresult *r;
    int rc = pg_exec(st, &r, "SELECT " OP_COLS " FROM operations WHERE state IN ('pending','running')"
                             " ORDER BY created_ms, id", "");
    return pg_rows(rc, r, op_row, &o, op_clear_v, (int (*)(const void *, void *))fn, arg);
}

int store_pg_op_list(struct store_pg *st, const char *tenant, const char *target, unsigned limit,
                     int (*fn)(const struct store_op *, void *), void *arg)
{
    struct store_op o;
    PGresult *r;
    int rc = pg_exec(st, &r, "SELECT " OP_COLS " FROM operations WHERE tenant=$1"
                             " AND ($2::text IS NULL OR target=$2) ORDER BY created_ms DESC, id DESC LIMIT $3",
                     "ssu", tenant, target, limit);
    return pg_rows(rc, r, op_row, &o, op_clear_v, (int (*)(const void *, void *))fn, arg);
}

/* ---- sessions ------------------------------------------------------------------------- */

#define SES_COLS "id,tenant,sandbox,spec,state,exit_code,exit_signal,created_ms,updated_ms"

static void ses_clear_v(void *rec) { store_session_clear(rec); }

static void ses_row(const PGresult *r, int i, void *rec)
{
    struct store_session *s = rec;
    memset(s, 0, sizeof *s);
    col_copy(r, i, 0, s->id, sizeof s->id);
    col_copy(r, i, 1, s->tenant, sizeof s->tenant);
    col_copy(r, i, 2, s->sandbox, sizeof s->sandbox);
    s->spec_json = col_dup(r, i, 3);
    col_copy(r, i, 4, s->state, sizeof s->state);
    s->exit_code = (int)col_i64(r, i, 5);
    s->exit_signal = (int)col_i64(r, i, 6);
    s->created_ms = col_i64(r, i, 7);
    s->updated_ms = col_i64(r, i, 8);
}

int store_pg_session_put(struct store_pg *st, const struct store_session *s)
{
    return pg_exec(st, NULL,
        "INSERT INTO sessions(" SES_COLS ") VALUES($1,$2,$3,$4,$5,$6,$7,$8,$9)"
        " ON CONFLICT(id) DO UPDATE SET spec=excluded.spec, state=excluded.state,"
        " exit_code=excluded.exit_code, exit_signal=excluded.exit_signal,"
        " updated_ms=excluded.updated_ms",
        "sssssiiii", s->id, s->tenant, s->sandbox, s->spec_json, s->state,
        (int64_t)s->exit_code, (int64_t)s->exit_signal, s->created_ms, s->updated_ms);
}

int store_pg_session_get(struct store_pg *st, const char *id, struct store_session *out)
{
    PGresult *r;
    int rc = pg_exec(st, &r, "SELECT " SES_COLS " FROM sessions WHERE id=$1", "s", id);
    return pg_rows(rc, r, ses_row, out, ses_clear_v, NULL, NULL);
}

int store_pg_session_delete(struct store_pg *st, const char *id)
{
    return pg_exec(st, NULL, "DELETE FROM sessions WHERE id=$1", "s", id);
}

int store_pg_session_each(struct store_pg *st, const char *sandbox,
                          int (*fn)(const struct store_session *, void *), void *arg)
{
    struct store_session s;
    PGresult *r;
    int rc = pg_exec(st, &r, "SELECT " SES_COLS " FROM sessions WHERE sandbox=$1 ORDER BY id", "s", sandbox);
    return pg_rows(rc, r, ses_row, &s, ses_clear_v, (int (*)(const void *, void *))fn, arg);
}

/* ---- templates ------------------------------------------------------------------------ */

#define TPL_COLS "name,tenant,state,spec,failure,dir,created_ms,updated_ms"

static void tpl_clear_v(void *rec) { store_tpl_clear(rec); }

static void tpl_row(const PGresult *r, int i, void *rec)
{
    struct store_tpl *t = rec;
    memset(t, 0, sizeof *t);
    col_copy(r, i, 0, t->name, sizeof t->name);
    col_copy(r, i, 1, t->tenant, sizeof t->tenant);
    col_copy(r, i, 2, t->state, sizeof t->state);
    t->spec_json = col_dup(r, i, 3);
    t->failure = col_dup(r, i, 4);
    col_copy(r, i, 5, t->dir, sizeof t->dir);
    t->created_ms = col_i64(r, i, 6);
    t->updated_ms = col_i64(r, i, 7);
}

int store_pg_tpl_put(struct store_pg *st, const struct store_tpl *t)
{
    return pg_exec(st, NULL,
        "INSERT INTO templates(" TPL_COLS ") VALUES($1,$2,$3,$4,$5,$6,$7,$8)"
        " ON CONFLICT(name) DO UPDATE SET tenant=excluded.tenant, state=excluded.state,"
        " spec=excluded.spec, failure=excluded.failure, dir=excluded.dir,"
        " updated_ms=excluded.updated_ms",
        "ssssssii", t->name, t->tenant, t->state, t->spec_json, t->failure, t->dir,
        t->created_ms, t->updated_ms);
}

int store_pg_tpl_get(struct store_pg *st, const char *name, struct store_tpl *out)
{
    PGresult *r;
    int rc = pg_exec(st, &r, "SELECT " TPL_COLS " FROM templates WHERE name=$1", "s", name);
    return pg_rows(rc, r, tpl_row, out, tpl_clear_v, NULL, NULL);
}

int store_pg_tpl_each(struct store_pg *st, int (*fn)(const struct store_tpl *, void *), void *arg)
{
    struct store_tpl t;
    PGresult *r;
    int rc = pg_exec(st, &r, "SELECT " TPL_COLS " FROM templates ORDER BY name", "");
    return pg_rows(rc, r, tpl_row, &t, tpl_clear_v, (int (*)(const void *, void *))fn, arg);
}
