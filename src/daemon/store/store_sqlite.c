/* store_sqlite.c: the SQLite (WAL) backend of store.h.
 *
 * SQL here stays within what PostgreSQL also accepts (TEXT/BIGINT/INTEGER columns,
 * INSERT ... ON CONFLICT DO UPDATE, partial unique index, keyset pagination), so a
 * PostgreSQL backend can reuse the statements nearly verbatim. Statements are prepared
 * per call: the control plane makes a handful per request, far below where caching
 * matters. Every call runs on the event loop thread; the connection is not shared. */
#include "store.h"

#include <jansson.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct store {
    sqlite3 *db;
    char err[256];
};

static const char *const store_schema =
    "CREATE TABLE IF NOT EXISTS tenants("
    " id TEXT PRIMARY KEY, name TEXT NOT NULL UNIQUE, created_ms BIGINT NOT NULL);"
    "CREATE TABLE IF NOT EXISTS api_keys("
    " id TEXT PRIMARY KEY, tenant TEXT NOT NULL, hash TEXT NOT NULL UNIQUE,"
    " prefix TEXT NOT NULL, admin INTEGER NOT NULL, created_ms BIGINT NOT NULL,"
    " expires_ms BIGINT NOT NULL, revoked_ms BIGINT NOT NULL);"
    "CREATE TABLE IF NOT EXISTS sandboxes("
    " id TEXT PRIMARY KEY, tenant TEXT NOT NULL, template TEXT NOT NULL,"
    " vcpus INTEGER NOT NULL, memory_mib INTEGER NOT NULL, env TEXT, metadata TEXT,"
    " network TEXT, timeout_s BIGINT NOT NULL, deadline_ms BIGINT NOT NULL,"
    " on_timeout TEXT NOT NULL, desired TEXT NOT NULL, state TEXT NOT NULL, failure TEXT,"
    " run_dir TEXT NOT NULL, created_ms BIGINT NOT NULL, updated_ms BIGINT NOT NULL);"
    "CREATE INDEX IF NOT EXISTS sandboxes_tenant ON sandboxes(tenant, id);"
    "CREATE TABLE IF NOT EXISTS operations("
    " id TEXT PRIMARY KEY, tenant TEXT NOT NULL, kind TEXT NOT NULL, target TEXT NOT NULL,"
    " state TEXT NOT NULL, error_code TEXT NOT NULL, error_message TEXT,"
    " progress INTEGER NOT NULL, detail TEXT, idem_key TEXT NOT NULL, body_hash TEXT NOT NULL,"
    " created_ms BIGINT NOT NULL, started_ms BIGINT NOT NULL, finished_ms BIGINT NOT NULL);"
    "CREATE UNIQUE INDEX IF NOT EXISTS operations_idem ON operations(tenant, idem_key)"
    " WHERE idem_key <> '';"
    "CREATE INDEX IF NOT EXISTS operations_state ON operations(state, created_ms);"
    "CREATE INDEX IF NOT EXISTS operations_target ON operations(tenant, target, created_ms);"
    "CREATE TABLE IF NOT EXISTS sessions("
    " id TEXT PRIMARY KEY, tenant TEXT NOT NULL, sandbox TEXT NOT NULL, spec TEXT,"
    " state TEXT NOT NULL, exit_code INTEGER NOT NULL, exit_signal INTEGER NOT NULL,"
    " created_ms BIGINT NOT NULL, updated_ms BIGINT NOT NULL);"
    "CREATE INDEX IF NOT EXISTS sessions_sandbox ON sessions(sandbox, id);"
    "CREATE TABLE IF NOT EXISTS templates("
    " name TEXT PRIMARY KEY, tenant TEXT NOT NULL, state TEXT NOT NULL, spec TEXT,"
    " failure TEXT, dir TEXT NOT NULL, created_ms BIGINT NOT NULL, updated_ms BIGINT NOT NULL);";

/* ---- helpers ------------------------------------------------------------------------ */

static int store_fail(struct store *st, const char *what)
{
    snprintf(st->err, sizeof st->err, "%s: %s", what, sqlite3_errmsg(st->db));
    return -1;
}

/* Prepares sql and binds arguments described by fmt: 's' const char * (NULL -> NULL),
 * 'i' int64_t, 'u' unsigned, 'b' bool (as int). */
static sqlite3_stmt *store_prep(struct store *st, const char *sql, const char *fmt, ...)
{
    sqlite3_stmt *q = NULL;
    if (sqlite3_prepare_v2(st->db, sql, -1, &q, NULL) != SQLITE_OK) {
        store_fail(st, "prepare");
        return NULL;
    }
    va_list ap;
    va_start(ap, fmt);
    int rc = SQLITE_OK;
    for (int i = 0; fmt[i] && rc == SQLITE_OK; i++) {
        int col = i + 1;
        switch (fmt[i]) {
        case 's': {
            const char *s = va_arg(ap, const char *);
            rc = s ? sqlite3_bind_text(q, col, s, -1, SQLITE_TRANSIENT) : sqlite3_bind_null(q, col);
            break;
        }
        case 'i': rc = sqlite3_bind_int64(q, col, va_arg(ap, int64_t)); break;
        case 'u': rc = sqlite3_bind_int64(q, col, (int64_t)va_arg(ap, unsigned)); break;
        case 'b': rc = sqlite3_bind_int(q, col, va_arg(ap, int) ? 1 : 0); break;
        default: rc = SQLITE_MISUSE; break;
        }
    }
    va_end(ap);
    if (rc != SQLITE_OK) {
        store_fail(st, "bind");
        sqlite3_finalize(q);
        return NULL;
    }
    return q;
}

/* Runs a statement that returns no rows. Maps uniqueness violations to STORE_CONFLICT. */
static int store_run(struct store *st, sqlite3_stmt *q)
{
    if (!q)
        return -1;
    int rc = sqlite3_step(q);
    int ext = sqlite3_extended_errcode(st->db);
    int ret = 0;
    if (rc != SQLITE_DONE) {
        ret = (ext == SQLITE_CONSTRAINT_UNIQUE || ext == SQLITE_CONSTRAINT_PRIMARYKEY)
                  ? STORE_CONFLICT
                  : store_fail(st, "step");
        if (ret == STORE_CONFLICT)
            snprintf(st->err, sizeof st->err, "already exists: %s", sqlite3_errmsg(st->db));
    }
    sqlite3_finalize(q);
    return ret;
}

/* Row reader: fills a record from the current row. */
typedef void (*store_row_fn)(sqlite3_stmt *q, void *rec);

/* Steps through q; for each row reads it into rec with rd, then calls each(rec, arg)
 * (stop when it returns nonzero) and clears rec with clr. With each == NULL, reads the
 * first row into rec and returns STORE_NOTFOUND if there is none. */
static int store_rows(struct store *st, sqlite3_stmt *q, store_row_fn rd, void *rec,
                      void (*clr)(void *), int (*each)(const void *, void *), void *arg)
{
    if (!q)
        return -1;
    int ret = each ? 0 : STORE_NOTFOUND;
    for (;;) {
        int rc = sqlite3_step(q);
        if (rc == SQLITE_DONE)
            break;
        if (rc != SQLITE_ROW) {
            ret = store_fail(st, "step");
            break;
        }
        rd(q, rec);
        if (!each) {
            ret = 0;
            break;
        }
        int stop = each(rec, arg);
        clr(rec);
        if (stop)
            break;
    }
    sqlite3_finalize(q);
    return ret;
}

static void col_copy(sqlite3_stmt *q, int col, char *dst, size_t cap)
{
    const unsigned char *s = sqlite3_column_text(q, col);
    snprintf(dst, cap, "%s", s ? (const char *)s : "");
}

static char *col_dup(sqlite3_stmt *q, int col)
{
    const unsigned char *s = sqlite3_column_text(q, col);
    return s ? strdup((const char *)s) : NULL;
}

/* ---- lifetime ------------------------------------------------------------------------- */

struct store *store_open(const char *path, char *errbuf, size_t errcap)
{
    struct store *st = calloc(1, sizeof *st);
    if (!st) {
        snprintf(errbuf, errcap, "out of memory");
        return NULL;
    }
    if (sqlite3_open_v2(path, &st->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
                                           SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK) {
        snprintf(errbuf, errcap, "cannot open %s: %s", path,
                 st->db ? sqlite3_errmsg(st->db) : "out of memory");
        sqlite3_close(st->db);
        free(st);
        return NULL;
    }
    /* busy_timeout covers a second process briefly holding the lock (sqlite3 CLI). */
    sqlite3_busy_timeout(st->db, 2000);
    char *msg = NULL;
    if (sqlite3_exec(st->db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;", NULL, NULL,
                     &msg) != SQLITE_OK ||
        sqlite3_exec(st->db, store_schema, NULL, NULL, &msg) != SQLITE_OK) {
        snprintf(errbuf, errcap, "cannot initialise %s: %s", path, msg ? msg : "?");
        sqlite3_free(msg);
        sqlite3_close(st->db);
        free(st);
        return NULL;
    }
    return st;
}

void store_close(struct store *st)
{
    if (!st)
        return;
    sqlite3_close(st->db);
    free(st);
}

const char *store_errmsg(struct store *st) { return st->err; }

static int store_exec(struct store *st, const char *sql)
{
    char *msg = NULL;
    if (sqlite3_exec(st->db, sql, NULL, NULL, &msg) != SQLITE_OK) {
        snprintf(st->err, sizeof st->err, "%s: %s", sql, msg ? msg : "?");
        sqlite3_free(msg);
        return -1;
    }
    return 0;
}

int store_begin(struct store *st) { return store_exec(st, "BEGIN IMMEDIATE"); }
int store_commit(struct store *st) { return store_exec(st, "COMMIT"); }
void store_rollback(struct store *st)
{
    if (!sqlite3_get_autocommit(st->db))
        store_exec(st, "ROLLBACK");
}

/* ---- tenants -------------------------------------------------------------------------- */

static void tenant_row(sqlite3_stmt *q, void *rec)
{
    struct store_tenant *t = rec;
    col_copy(q, 0, t->id, sizeof t->id);
    col_copy(q, 1, t->name, sizeof t->name);
    t->created_ms = sqlite3_column_int64(q, 2);
}

static void noop_clear(void *rec) { (void)rec; }

int store_tenant_put(struct store *st, const struct store_tenant *t)
{
    return store_run(st, store_prep(st, "INSERT INTO tenants(id,name,created_ms) VALUES(?,?,?)",
                                    "ssi", t->id, t->name, t->created_ms));
}

int store_tenant_get(struct store *st, const char *id, struct store_tenant *out)
{
    return store_rows(st, store_prep(st, "SELECT id,name,created_ms FROM tenants WHERE id=?", "s", id),
                      tenant_row, out, noop_clear, NULL, NULL);
}

int store_tenant_by_name(struct store *st, const char *name, struct store_tenant *out)
{
    return store_rows(st, store_prep(st, "SELECT id,name,created_ms FROM tenants WHERE name=?", "s", name),
                      tenant_row, out, noop_clear, NULL, NULL);
}

/* ---- api keys ------------------------------------------------------------------------- */

#define KEY_COLS "id,tenant,hash,prefix,admin,created_ms,expires_ms,revoked_ms"

static void key_row(sqlite3_stmt *q, void *rec)
{
    struct store_key *k = rec;
    col_copy(q, 0, k->id, sizeof k->id);
    col_copy(q, 1, k->tenant, sizeof k->tenant);
    col_copy(q, 2, k->hash, sizeof k->hash);
    col_copy(q, 3, k->prefix, sizeof k->prefix);
    k->admin = sqlite3_column_int(q, 4) != 0;
    k->created_ms = sqlite3_column_int64(q, 5);
    k->expires_ms = sqlite3_column_int64(q, 6);
    k->revoked_ms = sqlite3_column_int64(q, 7);
}

int store_key_put(struct store *st, const struct store_key *k)
{
    return store_run(st, store_prep(st, "INSERT INTO api_keys(" KEY_COLS ") VALUES(?,?,?,?,?,?,?,?)",
                                    "ssssbiii", k->id, k->tenant, k->hash, k->prefix, (int)k->admin,
                                    k->created_ms, k->expires_ms, k->revoked_ms));
}

int store_key_by_hash(struct store *st, const char *hash, struct store_key *out)
{
    return store_rows(st, store_prep(st, "SELECT " KEY_COLS " FROM api_keys WHERE hash=?", "s", hash),
                      key_row, out, noop_clear, NULL, NULL);
}

int store_key_get(struct store *st, const char *id, struct store_key *out)
{
    return store_rows(st, store_prep(st, "SELECT " KEY_COLS " FROM api_keys WHERE id=?", "s", id),
                      key_row, out, noop_clear, NULL, NULL);
}

int store_key_revoke(struct store *st, const char *id, int64_t now_ms)
{
    int rc = store_run(st, store_prep(st, "UPDATE api_keys SET revoked_ms=? WHERE id=? AND revoked_ms=0",
                                      "is", now_ms, id));
    if (rc == 0 && sqlite3_changes(st->db) == 0)
        return STORE_NOTFOUND;
    return rc;
}

int store_key_each(struct store *st, int (*fn)(const struct store_key *, void *), void *arg)
{
    struct store_key k;
    return store_rows(st, store_prep(st, "SELECT " KEY_COLS " FROM api_keys ORDER BY id", ""),
                      key_row, &k, noop_clear, (int (*)(const void *, void *))fn, arg);
}

/* ---- sandboxes ------------------------------------------------------------------------ */

#define SBX_COLS                                                                           \
    "id,tenant,template,vcpus,memory_mib,env,metadata,network,timeout_s,deadline_ms,"      \
    "on_timeout,desired,state,failure,run_dir,created_ms,updated_ms"

void store_sbx_clear(struct store_sbx *s)
{
    free(s->env_json);
    free(s->metadata_json);
    free(s->network_json);
    free(s->failure);
    memset(s, 0, sizeof *s);
}

static void sbx_clear_v(void *rec) { store_sbx_clear(rec); }

static void sbx_row(sqlite3_stmt *q, void *rec)
{
    struct store_sbx *s = rec;
    memset(s, 0, sizeof *s);
    col_copy(q, 0, s->id, sizeof s->id);
    col_copy(q, 1, s->tenant, sizeof s->tenant);
    col_copy(q, 2, s->template_name, sizeof s->template_name);
    s->vcpus = (unsigned)sqlite3_column_int64(q, 3);
    s->memory_mib = (unsigned)sqlite3_column_int64(q, 4);
    s->env_json = col_dup(q, 5);
    s->metadata_json = col_dup(q, 6);
    s->network_json = col_dup(q, 7);
    s->timeout_s = sqlite3_column_int64(q, 8);
    s->deadline_ms = sqlite3_column_int64(q, 9);
    col_copy(q, 10, s->on_timeout, sizeof s->on_timeout);
    col_copy(q, 11, s->desired, sizeof s->desired);
    col_copy(q, 12, s->state, sizeof s->state);
    s->failure = col_dup(q, 13);
    col_copy(q, 14, s->run_dir, sizeof s->run_dir);
    s->created_ms = sqlite3_column_int64(q, 15);
    s->updated_ms = sqlite3_column_int64(q, 16);
}

int store_sbx_put(struct store *st, const struct store_sbx *s)
{
    return store_run(st, store_prep(st,
        "INSERT INTO sandboxes(" SBX_COLS ") VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"
        " ON CONFLICT(id) DO UPDATE SET tenant=excluded.tenant, template=excluded.template,"
        " vcpus=excluded.vcpus, memory_mib=excluded.memory_mib, env=excluded.env,"
        " metadata=excluded.metadata, network=excluded.network, timeout_s=excluded.timeout_s,"
        " deadline_ms=excluded.deadline_ms, on_timeout=excluded.on_timeout,"
        " desired=excluded.desired, state=excluded.state, failure=excluded.failure,"
        " run_dir=excluded.run_dir, created_ms=excluded.created_ms, updated_ms=excluded.updated_ms",
        "sssuusssiisssssii", s->id, s->tenant, s->template_name, s->vcpus, s->memory_mib,
        s->env_json, s->metadata_json, s->network_json, s->timeout_s, s->deadline_ms,
        s->on_timeout, s->desired, s->state, s->failure, s->run_dir, s->created_ms,
        s->updated_ms));
}

int store_sbx_get(struct store *st, const char *id, struct store_sbx *out)
{
    return store_rows(st, store_prep(st, "SELECT " SBX_COLS " FROM sandboxes WHERE id=?", "s", id),
                      sbx_row, out, sbx_clear_v, NULL, NULL);
}

/* Metadata filtering happens here rather than in SQL: JSON operators differ between
 * SQLite and PostgreSQL, and per-tenant sandbox counts are small. */
static bool sbx_meta_match(const char *have_json, json_t *want)
{
    if (!want)
        return true;
    json_t *have = have_json ? json_loads(have_json, 0, NULL) : NULL;
    bool ok = true;
    const char *k;
    json_t *v;
    json_object_foreach(want, k, v) {
        json_t *h = have ? json_object_get(have, k) : NULL;
        if (!h || !json_equal(h, v)) {
            ok = false;
            break;
        }
    }
    json_decref(have);
    return ok;
}

int store_sbx_list(struct store *st, const struct store_sbx_filter *f,
                   int (*fn)(const struct store_sbx *, void *), void *arg, bool *more)
{
    *more = false;
    json_t *want = NULL;
    if (f->metadata_json) {
        want = json_loads(f->metadata_json, 0, NULL);
        if (!json_is_object(want)) {
            json_decref(want);
            snprintf(st->err, sizeof st->err, "metadata filter is not a JSON object");
            return -1;
        }
    }
    sqlite3_stmt *q = store_prep(st,
        "SELECT " SBX_COLS " FROM sandboxes WHERE tenant=? AND id>?"
        " AND ((? IS NULL AND state<>'deleted') OR state=?)"
        " AND (? IS NULL OR template=?) ORDER BY id",
        "ssssss", f->tenant, f->after_id ? f->after_id : "", f->state, f->state,
        f->template_name, f->template_name);
    if (!q) {
        json_decref(want);
        return -1;
    }
    unsigned n = 0;
    int ret = 0;
    struct store_sbx s;
    for (;;) {
        int rc = sqlite3_step(q);
        if (rc == SQLITE_DONE)
            break;
        if (rc != SQLITE_ROW) {
            ret = store_fail(st, "step");
            break;
        }
        sbx_row(q, &s);
        bool match = sbx_meta_match(s.metadata_json, want);
        if (match && n == f->limit) {
            *more = true;
            store_sbx_clear(&s);
            break;
        }
        int stop = match ? fn(&s, arg) : 0;
        n += match;
        store_sbx_clear(&s);
        if (stop)
            break;
    }
    sqlite3_finalize(q);
    json_decref(want);
    return ret;
}

int store_sbx_each_live(struct store *st, int (*fn)(const struct store_sbx *, void *), void *arg)
{
    struct store_sbx s;
    return store_rows(st, store_prep(st, "SELECT " SBX_COLS " FROM sandboxes WHERE state<>'deleted' ORDER BY id", ""),
                      sbx_row, &s, sbx_clear_v, (int (*)(const void *, void *))fn, arg);
}

int store_sbx_count_by_state(struct store *st, void (*fn)(const char *, int64_t, void *), void *arg)
{
    sqlite3_stmt *q = store_prep(st, "SELECT state, COUNT(*) FROM sandboxes GROUP BY state", "");
    if (!q)
        return -1;
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        const unsigned char *s = sqlite3_column_text(q, 0);
        fn(s ? (const char *)s : "", sqlite3_column_int64(q, 1), arg);
    }
    sqlite3_finalize(q);
    return rc == SQLITE_DONE ? 0 : store_fail(st, "step");
}

/* ---- operations ----------------------------------------------------------------------- */

#define OP_COLS                                                                            \
    "id,tenant,kind,target,state,error_code,error_message,progress,detail,idem_key,"       \
    "body_hash,created_ms,started_ms,finished_ms"

void store_op_clear(struct store_op *o)
{
    free(o->error_message);
    free(o->detail);
    memset(o, 0, sizeof *o);
}

static void op_clear_v(void *rec) { store_op_clear(rec); }

static void op_row(sqlite3_stmt *q, void *rec)
{
    struct store_op *o = rec;
    memset(o, 0, sizeof *o);
    col_copy(q, 0, o->id, sizeof o->id);
    col_copy(q, 1, o->tenant, sizeof o->tenant);
    col_copy(q, 2, o->kind, sizeof o->kind);
    col_copy(q, 3, o->target, sizeof o->target);
    col_copy(q, 4, o->state, sizeof o->state);
    col_copy(q, 5, o->error_code, sizeof o->error_code);
    o->error_message = col_dup(q, 6);
    o->progress = sqlite3_column_int(q, 7);
    o->detail = col_dup(q, 8);
    col_copy(q, 9, o->idem_key, sizeof o->idem_key);
    col_copy(q, 10, o->body_hash, sizeof o->body_hash);
    o->created_ms = sqlite3_column_int64(q, 11);
    o->started_ms = sqlite3_column_int64(q, 12);
    o->finished_ms = sqlite3_column_int64(q, 13);
}

int store_op_put(struct store *st, const struct store_op *o)
{
    return store_run(st, store_prep(st,
        "INSERT INTO operations(" OP_COLS ") VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?)"
        " ON CONFLICT(id) DO UPDATE SET state=excluded.state, error_code=excluded.error_code,"
        " error_message=excluded.error_message, progress=excluded.progress,"
        " detail=excluded.detail, started_ms=excluded.started_ms,"
        " finished_ms=excluded.finished_ms",
        "sssssssisssiii", o->id, o->tenant, o->kind, o->target, o->state, o->error_code,
        o->error_message, (int64_t)o->progress, o->detail, o->idem_key, o->body_hash,
        o->created_ms, o->started_ms, o->finished_ms));
}

int store_op_get(struct store *st, const char *id, struct store_op *out)
{
    return store_rows(st, store_prep(st, "SELECT " OP_COLS " FROM operations WHERE id=?", "s", id),
                      op_row, out, op_clear_v, NULL, NULL);
}

int store_op_by_idem(struct store *st, const char *tenant, const char *key, struct store_op *out)
{
    return store_rows(st, store_prep(st, "SELECT " OP_COLS " FROM operations WHERE tenant=? AND idem_key=? AND idem_key<>''",
                                     "ss", tenant, key),
                      op_row, out, op_clear_v, NULL, NULL);
}

int store_op_each_open(struct store *st, int (*fn)(const struct store_op *, void *), void *arg)
{
    struct store_op o;
    return store_rows(st, store_prep(st, "SELECT " OP_COLS " FROM operations WHERE state IN ('pending','running')"
                                         " ORDER BY created_ms, id", ""),
                      op_row, &o, op_clear_v, (int (*)(const void *, void *))fn, arg);
}

int store_op_list(struct store *st, const char *tenant, const char *target, unsigned limit,
                  int (*fn)(const struct store_op *, void *), void *arg)
{
    struct store_op o;
    return store_rows(st, store_prep(st, "SELECT " OP_COLS " FROM operations WHERE tenant=?"
                                         " AND (? IS NULL OR target=?) ORDER BY created_ms DESC, id DESC LIMIT ?",
                                     "sssu", tenant, target, target, limit),
                      op_row, &o, op_clear_v, (int (*)(const void *, void *))fn, arg);
}

/* ---- sessions ------------------------------------------------------------------------- */

#define SES_COLS "id,tenant,sandbox,spec,state,exit_code,exit_signal,created_ms,updated_ms"

void store_session_clear(struct store_session *s)
{
    free(s->spec_json);
    memset(s, 0, sizeof *s);
}

static void ses_clear_v(void *rec) { store_session_clear(rec); }

static void ses_row(sqlite3_stmt *q, void *rec)
{
    struct store_session *s = rec;
    memset(s, 0, sizeof *s);
    col_copy(q, 0, s->id, sizeof s->id);
    col_copy(q, 1, s->tenant, sizeof s->tenant);
    col_copy(q, 2, s->sandbox, sizeof s->sandbox);
    s->spec_json = col_dup(q, 3);
    col_copy(q, 4, s->state, sizeof s->state);
    s->exit_code = sqlite3_column_int(q, 5);
    s->exit_signal = sqlite3_column_int(q, 6);
    s->created_ms = sqlite3_column_int64(q, 7);
    s->updated_ms = sqlite3_column_int64(q, 8);
}

int store_session_put(struct store *st, const struct store_session *s)
{
    return store_run(st, store_prep(st,
        "INSERT INTO sessions(" SES_COLS ") VALUES(?,?,?,?,?,?,?,?,?)"
        " ON CONFLICT(id) DO UPDATE SET spec=excluded.spec, state=excluded.state,"
        " exit_code=excluded.exit_code, exit_signal=excluded.exit_signal,"
        " updated_ms=excluded.updated_ms",
        "sssssiiii", s->id, s->tenant, s->sandbox, s->spec_json, s->state,
        (int64_t)s->exit_code, (int64_t)s->exit_signal, s->created_ms, s->updated_ms));
}

int store_session_get(struct store *st, const char *id, struct store_session *out)
{
    return store_rows(st, store_prep(st, "SELECT " SES_COLS " FROM sessions WHERE id=?", "s", id),
                      ses_row, out, ses_clear_v, NULL, NULL);
}

int store_session_delete(struct store *st, const char *id)
{
    return store_run(st, store_prep(st, "DELETE FROM sessions WHERE id=?", "s", id));
}

int store_session_each(struct store *st, const char *sandbox,
                       int (*fn)(const struct store_session *, void *), void *arg)
{
    struct store_session s;
    return store_rows(st, store_prep(st, "SELECT " SES_COLS " FROM sessions WHERE sandbox=? ORDER BY id", "s", sandbox),
                      ses_row, &s, ses_clear_v, (int (*)(const void *, void *))fn, arg);
}

/* ---- templates ------------------------------------------------------------------------ */

#define TPL_COLS "name,tenant,state,spec,failure,dir,created_ms,updated_ms"

void store_tpl_clear(struct store_tpl *t)
{
    free(t->spec_json);
    free(t->failure);
    memset(t, 0, sizeof *t);
}

static void tpl_clear_v(void *rec) { store_tpl_clear(rec); }

static void tpl_row(sqlite3_stmt *q, void *rec)
{
    struct store_tpl *t = rec;
    memset(t, 0, sizeof *t);
    col_copy(q, 0, t->name, sizeof t->name);
    col_copy(q, 1, t->tenant, sizeof t->tenant);
    col_copy(q, 2, t->state, sizeof t->state);
    t->spec_json = col_dup(q, 3);
    t->failure = col_dup(q, 4);
    col_copy(q, 5, t->dir, sizeof t->dir);
    t->created_ms = sqlite3_column_int64(q, 6);
    t->updated_ms = sqlite3_column_int64(q, 7);
}

int store_tpl_put(struct store *st, const struct store_tpl *t)
{
    return store_run(st, store_prep(st,
        "INSERT INTO templates(" TPL_COLS ") VALUES(?,?,?,?,?,?,?,?)"
        " ON CONFLICT(name) DO UPDATE SET tenant=excluded.tenant, state=excluded.state,"
        " spec=excluded.spec, failure=excluded.failure, dir=excluded.dir,"
        " updated_ms=excluded.updated_ms",
        "ssssssii", t->name, t->tenant, t->state, t->spec_json, t->failure, t->dir,
        t->created_ms, t->updated_ms));
}

int store_tpl_get(struct store *st, const char *name, struct store_tpl *out)
{
    return store_rows(st, store_prep(st, "SELECT " TPL_COLS " FROM templates WHERE name=?", "s", name),
                      tpl_row, out, tpl_clear_v, NULL, NULL);
}

int store_tpl_each(struct store *st, int (*fn)(const struct store_tpl *, void *), void *arg)
{
    struct store_tpl t;
    return store_rows(st, store_prep(st, "SELECT " TPL_COLS " FROM templates ORDER BY name", ""),
                      tpl_row, &t, tpl_clear_v, (int (*)(const void *, void *))fn, arg);
}
