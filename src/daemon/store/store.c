/* store.c: the backend-neutral store of store.h. Every statement is written once here,
 * in SQL that SQLite and PostgreSQL both accept (`?` placeholders, INSERT ... ON CONFLICT
 * DO UPDATE, partial unique index, keyset pagination); the handle's driver
 * (store_backend.h) runs it and records map to rows through store_rec.h. */
#include "store.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_backend.h"
#include "store_rec.h"

/* Each entry upgrades the schema by one version; entries are never edited once
 * released, only appended (a replica may open an older database). Ordered keys are
 * COLLATE "C" so pagination is bytewise whatever a PostgreSQL database's locale (the
 * SQLite driver registers "C" as a byte comparison). A SQLite file created before the
 * version table existed has these tables already: IF NOT EXISTS makes version 1 a no-op
 * there. */
static const char *const store_migrations[] = {
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
    /* 2: multi-node roles: the node that runs each sandbox, and the nodes themselves. */
    "ALTER TABLE sandboxes ADD COLUMN node TEXT NOT NULL DEFAULT '';"
    "CREATE INDEX IF NOT EXISTS sandboxes_node ON sandboxes(node, state);"
    "CREATE TABLE IF NOT EXISTS nodes("
    " id TEXT COLLATE \"C\" PRIMARY KEY, url TEXT NOT NULL, vcpus INTEGER NOT NULL,"
    " memory_mib INTEGER NOT NULL, heartbeat_ms BIGINT NOT NULL, started_ms BIGINT NOT NULL);",
    /* 3: private sandbox ports (a per-sandbox traffic token is required; sbx_traffic.c). */
    "ALTER TABLE sandboxes ADD COLUMN private_ports INTEGER NOT NULL DEFAULT 0;",
    /* 4: per-tenant quotas (-1 = the daemon's default, 0 = unlimited) and each sandbox's
     * disk size, which the disk quota sums. */
    "ALTER TABLE sandboxes ADD COLUMN disk_mib INTEGER NOT NULL DEFAULT 0;"
    "CREATE TABLE IF NOT EXISTS tenant_quotas("
    " tenant TEXT COLLATE \"C\" PRIMARY KEY, max_sandboxes BIGINT NOT NULL,"
    " max_vcpus BIGINT NOT NULL, max_memory_mib BIGINT NOT NULL, max_disk_mib BIGINT NOT NULL,"
    " max_templates BIGINT NOT NULL, max_snapshots BIGINT NOT NULL, updated_ms BIGINT NOT NULL);"
    "CREATE INDEX IF NOT EXISTS templates_tenant ON templates(tenant, state);",
    /* 5: operations submitted within one millisecond keep their order across a restart
     * (a target's stop and delete must not swap): seq breaks created_ms ties. */
    "ALTER TABLE operations ADD COLUMN seq BIGINT NOT NULL DEFAULT 0;",
    /* 6: an operator drains a node (no new sandbox is placed on it). */
    "ALTER TABLE nodes ADD COLUMN draining INTEGER NOT NULL DEFAULT 0;",
    /* 7: placement: what each node has ready (snapshots, warm clones: its heartbeat) and
     * the capacity control daemons reserve for creates they are forwarding. */
    "ALTER TABLE nodes ADD COLUMN shapes TEXT NOT NULL DEFAULT '';"
    "CREATE TABLE IF NOT EXISTS node_reservations("
    " id TEXT COLLATE \"C\" PRIMARY KEY, node TEXT NOT NULL, vcpus INTEGER NOT NULL,"
    " memory_mib INTEGER NOT NULL, created_ms BIGINT NOT NULL);"
    "CREATE INDEX IF NOT EXISTS node_reservations_node ON node_reservations(node, created_ms);",
    /* 8: auto-resume: an API call that needs a paused or suspended sandbox's VM wakes it
     * (sandbox/sbx_wake.c). */
    "ALTER TABLE sandboxes ADD COLUMN auto_resume INTEGER NOT NULL DEFAULT 0;",
    /* 9: a fork or a sandbox made from a snapshot restores from a capture (source), not
     * from its template's snapshot; tenants' persistent snapshots. */
    "ALTER TABLE sandboxes ADD COLUMN source TEXT NOT NULL DEFAULT '';"
    "CREATE TABLE IF NOT EXISTS snapshots("
    " id TEXT COLLATE \"C\" PRIMARY KEY, tenant TEXT NOT NULL, name TEXT NOT NULL,"
    " source TEXT NOT NULL, template TEXT NOT NULL, vcpus INTEGER NOT NULL,"
    " memory_mib INTEGER NOT NULL, nic INTEGER NOT NULL, state TEXT NOT NULL,"
    " size_bytes BIGINT NOT NULL, created_ms BIGINT NOT NULL);"
    "CREATE INDEX IF NOT EXISTS snapshots_tenant ON snapshots(tenant, id);",
    /* 10: the volumes a sandbox mounts (sandbox/sbx_vol.c), mounted again after a
     * restart. */
    "ALTER TABLE sandboxes ADD COLUMN volumes TEXT;",
    /* 11: a quota on the bytes of a tenant's volumes (volume/vol_quota.c). */
    "ALTER TABLE tenant_quotas ADD COLUMN max_volume_mib BIGINT NOT NULL DEFAULT -1;",
    /* 12: each node's measured host load (load averages, CPU %, memory available) from
     * its heartbeat, for operators (GET /v1/nodes). */
    "ALTER TABLE nodes ADD COLUMN host_load TEXT NOT NULL DEFAULT '';",
    /* 13: templates that travel between nodes (template/tpl_fetch.c): the nodes holding a
     * built template's image, the image's SHA-256 and size, and its template.json. */
    "ALTER TABLE templates ADD COLUMN nodes TEXT NOT NULL DEFAULT '';"
    "ALTER TABLE templates ADD COLUMN digest TEXT NOT NULL DEFAULT '';"
    "ALTER TABLE templates ADD COLUMN size_bytes BIGINT NOT NULL DEFAULT 0;"
    "ALTER TABLE templates ADD COLUMN meta TEXT;",
    /* 14: sandbox snapshots that travel between nodes (sandbox/sbx_travel.c): the node
     * holding a snapshot's files and their names, sizes and SHA-256s. */
    ("ALTER TABLE snapshots ADD COLUMN node TEXT NOT NULL DEFAULT '';"
     "ALTER TABLE snapshots ADD COLUMN parts TEXT NOT NULL DEFAULT '';"), /* one migration, two statements (clang's -Wstring-concatenation) */
    /* 15: which node holds an E2B template build before its templates row exists (the
     * control role routes its later calls there: cluster/cluster_e2btpl.c). */
    ("CREATE TABLE IF NOT EXISTS template_routes("
     " id TEXT COLLATE \"C\" PRIMARY KEY, tenant TEXT NOT NULL, name TEXT NOT NULL,"
     " node TEXT NOT NULL, created_ms BIGINT NOT NULL);"
     "CREATE INDEX IF NOT EXISTS template_routes_created ON template_routes(created_ms);"),
    /* 16: suspended and stopped sandboxes that move off a drained node (sandbox/
     * sbx_move.c): the names, sizes and SHA-256s of their files, and where they are. */
    "ALTER TABLE sandboxes ADD COLUMN parts TEXT;",
    /* 17: each node's VM runtime signature (vm/vm_sig.h), from its heartbeat: a suspended
     * sandbox moves, and a snapshot travels, only to a node with the one that saved it. */
    "ALTER TABLE nodes ADD COLUMN runtime TEXT NOT NULL DEFAULT '';",
};

#define SQL_CAP 2048

/* ---- generic reads and writes --------------------------------------------------------- */

static int q(struct store *st, const char *sql, const struct store_arg *args, int nargs,
             store_row_fn fn, void *arg)
{
    return st->ops->query(st, sql, args, nargs, fn, arg, NULL);
}

/* State of one SELECT of records: the first row into rec (each == NULL) or every row
 * through each. */
struct rec_scan {
    const struct store_table *t;
    void *rec;
    int (*each)(const void *rec, void *arg);
    void *arg;
    bool found;
    bool oom;
};

static int rec_row(void *p, const char *const *cols, int ncols)
{
    struct rec_scan *sc = p;
    if (store_rec_read(sc->t, sc->rec, cols, ncols) != 0) {
        sc->oom = true;
        if (sc->t->clear)
            sc->t->clear(sc->rec);
        return 1;
    }
    sc->found = true;
    if (!sc->each)
        return 1;
    int stop = sc->each(sc->rec, sc->arg);
    if (sc->t->clear)
        sc->t->clear(sc->rec);
    return stop;
}

/* Runs "SELECT <t's columns> FROM <t> <tail>" with args. With each == NULL the first
 * row fills rec and no row is STORE_NOTFOUND; otherwise every row goes through
 * each(rec, arg) (nonzero stops), rec serving as scratch. */
static int rec_select(struct store *st, const struct store_table *t, const char *tail,
                      const struct store_arg *args, int nargs, void *rec,
                      int (*each)(const void *, void *), void *arg)
{
    char sql[SQL_CAP];
    store_rec_select(t, sql, sizeof sql);
    snprintf(sql + strlen(sql), sizeof sql - strlen(sql), " %s", tail);
    struct rec_scan sc = {.t = t, .rec = rec, .each = each, .arg = arg};
    int rc = q(st, sql, args, nargs, rec_row, &sc);
    if (rc == 0 && sc.oom) {
        snprintf(st->err, sizeof st->err, "out of memory reading %s", t->name);
        return -1;
    }
    if (rc == 0 && !each && !sc.found)
        return STORE_NOTFOUND;
    return rc;
}

/* The one-row lookup by a single text value. */
static int rec_get(struct store *st, const struct store_table *t, const char *where,
                   const char *v, void *out)
{
    struct store_arg a = STORE_ARG_S(v);
    return rec_select(st, t, where, &a, 1, out, NULL, NULL);
}

static int rec_put(struct store *st, const struct store_table *t, const void *rec)
{
    char sql[SQL_CAP];
    struct store_arg args[STORE_MAX_COLS];
    store_rec_args(t, rec, args);
    int64_t changed = 1;
    int rc = st->ops->query(st, store_rec_insert(t, sql, sizeof sql), args, t->ncols, NULL, NULL,
                            t->upsert_where ? &changed : NULL);
    if (rc == 0 && changed == 0) {
        snprintf(st->err, sizeof st->err, "the %s row is not this writer's any more", t->name);
        return STORE_MOVED;
    }
    return rc;
}

/* ---- lifetime ------------------------------------------------------------------------- */

bool store_url_is_pg(const char *url)
{
    return strncmp(url, "postgres://", 11) == 0 || strncmp(url, "postgresql://", 13) == 0 ||
           strstr(url, "dbname=") || strstr(url, "host=");
}

static int read_i64(void *arg, const char *const *cols, int ncols)
{
    *(int64_t *)arg = ncols > 0 && cols[0] ? strtoll(cols[0], NULL, 10) : 0;
    return 1;
}

/* Applies the migrations this database has not seen, in one transaction, after the
 * driver's lock so that concurrent openers wait instead of racing on CREATE TABLE. */
static int store_migrate(struct store *st)
{
    int64_t have = 0, want = (int64_t)(sizeof store_migrations / sizeof store_migrations[0]);
    if (st->ops->begin(st) != 0 ||
        (st->ops->migrate_lock_sql && q(st, st->ops->migrate_lock_sql, NULL, 0, NULL, NULL) != 0) ||
        st->ops->script(st, "CREATE TABLE IF NOT EXISTS space_migrations(version INTEGER PRIMARY KEY,"
                            " applied_at TIMESTAMPTZ NOT NULL DEFAULT CURRENT_TIMESTAMP)") != 0 ||
        q(st, "SELECT COALESCE(MAX(version), 0) FROM space_migrations", NULL, 0, read_i64, &have) != 0)
        goto fail;
    if (have > want) {
        snprintf(st->err, sizeof st->err,
                 "database schema version %lld is newer than this spaced understands (%lld)",
                 (long long)have, (long long)want);
        goto fail;
    }
    for (int64_t v = have + 1; v <= want; v++) {
        struct store_arg a = STORE_ARG_I(v);
        if (st->ops->script(st, store_migrations[v - 1]) != 0 ||
            q(st, "INSERT INTO space_migrations(version) VALUES(?)", &a, 1, NULL, NULL) != 0)
            goto fail;
    }
    if (st->ops->commit(st) == 0)
        return 0;
fail:
    st->ops->rollback(st);
    return -1;
}

void *store_handle_new(size_t size, const struct store_ops *ops, char *err, size_t errlen)
{
    struct store *st = calloc(1, size);
    if (!st) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    st->ops = ops;
    return st;
}

struct store *store_open(const char *url_or_path, char *err, size_t errlen)
{
    bool pg = store_url_is_pg(url_or_path);
    struct store *st = pg ? store_pg_open(url_or_path, err, errlen)
                          : store_sqlite_open(url_or_path, err, errlen);
    if (!st)
        return NULL;
    if (store_migrate(st) != 0) {
        if (pg)
            snprintf(err, errlen, "cannot initialise the PostgreSQL store: %s", st->err);
        else
            snprintf(err, errlen, "cannot initialise %s: %s", url_or_path, st->err);
        st->ops->close(st);
        return NULL;
    }
    return st;
}

void store_close(struct store *st)
{
    if (st)
        st->ops->close(st);
}

const char *store_errmsg(struct store *st) { return st->err; }
const char *store_backend_name(const struct store *st) { return st->ops->name; }

int store_begin(struct store *st) { return st->ops->begin(st); }
int store_commit(struct store *st) { return st->ops->commit(st); }
void store_rollback(struct store *st) { st->ops->rollback(st); }

/* ---- tenants and keys ----------------------------------------------------------------- */

int store_tenant_put(struct store *st, const struct store_tenant *t)
{
    return rec_put(st, &store_tbl_tenants, t);
}

int store_tenant_get(struct store *st, const char *id, struct store_tenant *out)
{
    return rec_get(st, &store_tbl_tenants, "WHERE id=?", id, out);
}

int store_tenant_by_name(struct store *st, const char *name, struct store_tenant *out)
{
    return rec_get(st, &store_tbl_tenants, "WHERE name=?", name, out);
}

int store_key_put(struct store *st, const struct store_key *k) { return rec_put(st, &store_tbl_keys, k); }

int store_key_by_hash(struct store *st, const char *hash, struct store_key *out)
{
    return rec_get(st, &store_tbl_keys, "WHERE hash=?", hash, out);
}

int store_key_get(struct store *st, const char *id, struct store_key *out)
{
    return rec_get(st, &store_tbl_keys, "WHERE id=?", id, out);
}

int store_key_revoke(struct store *st, const char *id, int64_t now_ms)
{
    struct store_arg a[] = {STORE_ARG_I(now_ms), STORE_ARG_S(id)};
    int64_t changed = 0;
    int rc = st->ops->query(st, "UPDATE api_keys SET revoked_ms=? WHERE id=? AND revoked_ms=0", a, 2,
                            NULL, NULL, &changed);
    return rc == 0 && changed == 0 ? STORE_NOTFOUND : rc;
}

int store_key_each(struct store *st, int (*fn)(const struct store_key *, void *), void *arg)
{
    struct store_key k;
    return rec_select(st, &store_tbl_keys, "ORDER BY id", NULL, 0, &k,
                      (int (*)(const void *, void *))fn, arg);
}

/* ---- sandboxes ------------------------------------------------------------------------ */

int store_sbx_put(struct store *st, const struct store_sbx *s) { return rec_put(st, &store_tbl_sandboxes, s); }

int store_sbx_get(struct store *st, const char *id, struct store_sbx *out)
{
    return rec_get(st, &store_tbl_sandboxes, "WHERE id=?", id, out);
}

int store_sbx_move(struct store *st, const char *id, const char *from, const char *to, const char *parts,
                   const char *new_parts, int64_t now_ms)
{
    struct store_arg a[] = {STORE_ARG_S(to), STORE_ARG_S(new_parts), STORE_ARG_I(now_ms), STORE_ARG_S(id),
                            STORE_ARG_S(from), STORE_ARG_S(parts)};
    int64_t changed = 0;
    int rc = st->ops->query(st, "UPDATE sandboxes SET node=?, parts=?, updated_ms=? WHERE id=? AND node=? AND "
                            "parts=? AND state IN ('suspended','stopped') AND desired=state",
                            a, 6, NULL, NULL, &changed);
    return rc == 0 && changed == 0 ? STORE_NOTFOUND : rc;
}

/* Metadata filtering happens in C rather than in SQL: JSON operators differ between
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

struct sbx_list_scan {
    const struct store_sbx_filter *f;
    json_t *want;
    int (*fn)(const struct store_sbx *, void *);
    void *arg;
    unsigned n;
    bool *more;
};

static int sbx_list_row(const void *rec, void *p)
{
    const struct store_sbx *s = rec;
    struct sbx_list_scan *sc = p;
    if (!sbx_meta_match(s->metadata_json, sc->want))
        return 0;
    if (sc->n == sc->f->limit) {
        *sc->more = true;
        return 1;
    }
    sc->n++;
    return sc->fn(s, sc->arg);
}

int store_sbx_list(struct store *st, const struct store_sbx_filter *f,
                   int (*fn)(const struct store_sbx *, void *), void *arg, bool *more)
{
    *more = false;
    struct sbx_list_scan sc = {.f = f, .fn = fn, .arg = arg, .more = more};
    if (f->metadata_json) {
        sc.want = json_loads(f->metadata_json, 0, NULL);
        if (!json_is_object(sc.want)) {
            json_decref(sc.want);
            snprintf(st->err, sizeof st->err, "metadata filter is not a JSON object");
            return -1;
        }
    }
    struct store_arg a[] = {
        STORE_ARG_S(f->tenant),        STORE_ARG_S(f->after_id ? f->after_id : ""),
        STORE_ARG_S(f->state),         STORE_ARG_S(f->state),
        STORE_ARG_S(f->template_name), STORE_ARG_S(f->template_name),
    };
    struct store_sbx s;
    int rc = rec_select(st, &store_tbl_sandboxes,
                        "WHERE tenant=? AND id>? AND ((? IS NULL AND state<>'deleted') OR state=?)"
                        " AND (? IS NULL OR template=?) ORDER BY id",
                        a, 6, &s, sbx_list_row, &sc);
    json_decref(sc.want);
    return rc;
}

int store_sbx_each_live(struct store *st, int (*fn)(const struct store_sbx *, void *), void *arg)
{
    struct store_sbx s;
    return rec_select(st, &store_tbl_sandboxes, "WHERE state<>'deleted' ORDER BY id", NULL, 0, &s,
                      (int (*)(const void *, void *))fn, arg);
}

struct count_scan {
    void (*fn)(const char *, int64_t, void *);
    void *arg;
};

static int count_row(void *p, const char *const *cols, int ncols)
{
    struct count_scan *sc = p;
    if (ncols >= 2)
        sc->fn(cols[0] ? cols[0] : "", cols[1] ? strtoll(cols[1], NULL, 10) : 0, sc->arg);
    return 0;
}

int store_ping(struct store *st)
{
    return q(st, "SELECT 1", NULL, 0, NULL, NULL) == 0 ? 0 : -1;
}

void store_tick(struct store *st)
{
    if (st->ops->tick)
        st->ops->tick(st);
}

const char *store_disk(struct store *st, char *buf, size_t cap)
{
    return st->ops->disk ? st->ops->disk(st, buf, cap) : NULL;
}

int store_sbx_count_by_state(struct store *st, void (*fn)(const char *, int64_t, void *), void *arg)
{
    struct count_scan sc = {fn, arg};
    return q(st, "SELECT state, COUNT(*) FROM sandboxes GROUP BY state", NULL, 0, count_row, &sc);
}

/* ---- operations ----------------------------------------------------------------------- */

/* Session rows and op progress are written without an fsync where the backend allows
 * (store.h says why that is enough): a command wrote its session row three times, a
 * create its progress once, each an fsync otherwise. */
static int lazy_begin(struct store *st)
{
    return st->ops->lazy ? st->ops->lazy(st, true) : 0;
}

static int lazy_end(struct store *st, int rc)
{
    if (st->ops->lazy && st->ops->lazy(st, false) != 0)
        return -1; /* a handle left lazy would weaken every later commit */
    return rc;
}

static int rec_put_lazy(struct store *st, const struct store_table *t, const void *rec)
{
    if (lazy_begin(st) != 0)
        return lazy_end(st, -1);
    return lazy_end(st, rec_put(st, t, rec));
}

int store_op_put(struct store *st, const struct store_op *o) { return rec_put(st, &store_tbl_operations, o); }

int store_op_put_lazy(struct store *st, const struct store_op *o)
{
    return rec_put_lazy(st, &store_tbl_operations, o);
}

int store_sbx_put_lazy(struct store *st, const struct store_sbx *s)
{
    return rec_put_lazy(st, &store_tbl_sandboxes, s);
}

int store_op_get(struct store *st, const char *id, struct store_op *out)
{
    return rec_get(st, &store_tbl_operations, "WHERE id=?", id, out);
}

int store_op_by_idem(struct store *st, const char *tenant, const char *key, struct store_op *out)
{
    struct store_arg a[] = {STORE_ARG_S(tenant), STORE_ARG_S(key)};
    return rec_select(st, &store_tbl_operations, "WHERE tenant=? AND idem_key=? AND idem_key<>''", a, 2,
                      out, NULL, NULL);
}

int store_op_each_open(struct store *st, int (*fn)(const struct store_op *, void *), void *arg)
{
    struct store_op o;
    return rec_select(st, &store_tbl_operations,
                      "WHERE state IN ('pending','running') ORDER BY created_ms, seq, id", NULL, 0, &o,
                      (int (*)(const void *, void *))fn, arg);
}

int store_op_list(struct store *st, const char *tenant, const char *target, unsigned limit,
                  int (*fn)(const struct store_op *, void *), void *arg)
{
    struct store_op o;
    struct store_arg a[] = {STORE_ARG_S(tenant), STORE_ARG_S(target), STORE_ARG_S(target),
                            STORE_ARG_I(limit)};
    return rec_select(st, &store_tbl_operations,
                      "WHERE tenant=? AND (? IS NULL OR target=?) ORDER BY created_ms DESC, seq DESC, id DESC LIMIT ?",
                      a, 4, &o, (int (*)(const void *, void *))fn, arg);
}

/* ---- sessions and templates ----------------------------------------------------------- */

int store_session_put(struct store *st, const struct store_session *s)
{
    return rec_put_lazy(st, &store_tbl_sessions, s);
}

int store_session_get(struct store *st, const char *id, struct store_session *out)
{
    return rec_get(st, &store_tbl_sessions, "WHERE id=?", id, out);
}

int store_session_delete(struct store *st, const char *id)
{
    struct store_arg a = STORE_ARG_S(id);
    if (lazy_begin(st) != 0)
        return lazy_end(st, -1);
    return lazy_end(st, q(st, "DELETE FROM sessions WHERE id=?", &a, 1, NULL, NULL));
}

int store_session_each(struct store *st, const char *sandbox,
                       int (*fn)(const struct store_session *, void *), void *arg)
{
    struct store_session s;
    struct store_arg a = STORE_ARG_S(sandbox);
    return rec_select(st, &store_tbl_sessions, "WHERE sandbox=? ORDER BY id", &a, 1, &s,
                      (int (*)(const void *, void *))fn, arg);
}

int store_tpl_put(struct store *st, const struct store_tpl *t) { return rec_put(st, &store_tbl_templates, t); }

int store_tpl_get(struct store *st, const char *name, struct store_tpl *out)
{
    return rec_get(st, &store_tbl_templates, "WHERE name=?", name, out);
}

int store_tpl_each(struct store *st, int (*fn)(const struct store_tpl *, void *), void *arg)
{
    struct store_tpl t;
    return rec_select(st, &store_tbl_templates, "ORDER BY name", NULL, 0, &t,
                      (int (*)(const void *, void *))fn, arg);
}

/* ---- template deletion against creates ------------------------------------------------- */

/* Ends a transaction that failed or decided against writing, keeping the reason in
 * st->err (the failure, not the rollback, is the news); returns rc. */
static int tx_abort(struct store *st, int rc)
{
    char err[sizeof st->err];
    memcpy(err, st->err, sizeof err);
    st->ops->rollback(st);
    memcpy(st->err, err, sizeof err);
    return rc;
}

/* The locked template row's tenant and state. */
struct tpl_locked {
    bool found;
    char tenant[STORE_ID_MAX];
    char state[STORE_STATE_MAX];
};

static int read_tpl_locked(void *arg, const char *const *cols, int ncols)
{
    struct tpl_locked *r = arg;
    r->found = true;
    snprintf(r->tenant, sizeof r->tenant, "%s", ncols > 0 && cols[0] ? cols[0] : "");
    snprintf(r->state, sizeof r->state, "%s", ncols > 1 && cols[1] ? cols[1] : "");
    return 1;
}

/* Reads template `name`'s row with the lock clause `lock` (the driver's for_update or
 * for_share). */
static int tpl_lock(struct store *st, const char *name, const char *lock, struct tpl_locked *r)
{
    char sql[128];
    snprintf(sql, sizeof sql, "SELECT tenant, state FROM templates WHERE name=?%s", lock);
    struct store_arg a = STORE_ARG_S(name);
    return q(st, sql, &a, 1, read_tpl_locked, r);
}

/* One row per node: its count of sandboxes of the template. */
static int read_tpl_user(void *arg, const char *const *cols, int ncols)
{
    struct store_tpl_users *u = arg;
    const char *node = ncols > 0 && cols[0] ? cols[0] : "";
    u->sandboxes += ncols > 1 && cols[1] ? strtoll(cols[1], NULL, 10) : 0;
    size_t len = strlen(u->nodes);
    if (node[0] && len + strlen(node) + 2 < sizeof u->nodes)
        snprintf(u->nodes + len, sizeof u->nodes - len, "%s%s", len ? "," : "", node);
    return 0;
}

/* A template being built: counted when its spec's base is the template. Specs are
 * parsed here rather than in SQL (JSON operators differ between the backends, and few
 * builds run at a time). */
struct tpl_base_scan {
    const char *name;
    int64_t n;
};

static int read_tpl_build(void *arg, const char *const *cols, int ncols)
{
    struct tpl_base_scan *b = arg;
    json_t *spec = ncols > 0 && cols[0] ? json_loads(cols[0], 0, NULL) : NULL;
    const char *base = json_string_value(json_object_get(spec, "base"));
    if (base && strcmp(base, b->name) == 0)
        b->n++;
    json_decref(spec);
    return 0;
}

/* store_tpl_delete_unused inside its transaction. */
static int tpl_delete_locked(struct store *st, const char *name, const char *tenant, int64_t now_ms,
                             struct store_tpl_users *u)
{
    struct tpl_locked r = {0};
    if (tpl_lock(st, name, st->ops->for_update, &r) != 0)
        return -1;
    if (!r.found || strcmp(r.tenant, tenant) != 0 || strcmp(r.state, "deleted") == 0)
        return STORE_NOTFOUND;
    if (strcmp(r.state, "building") == 0)
        return STORE_NOT_READY;
    /* Read after the lock was granted: every create or build that held the row has
     * committed (or rolled back) by now, and its rows are counted. */
    struct store_arg a = STORE_ARG_S(name);
    struct tpl_base_scan b = {name, 0};
    if (q(st, "SELECT node, COUNT(*) FROM sandboxes WHERE template=? AND state<>'deleted' GROUP BY node ORDER BY node",
          &a, 1, read_tpl_user, u) != 0 ||
        q(st, "SELECT spec FROM templates WHERE state='building'", NULL, 0, read_tpl_build, &b) != 0)
        return -1;
    u->builds = b.n;
    if (u->sandboxes || u->builds)
        return STORE_IN_USE;
    struct store_arg w[] = {STORE_ARG_I(now_ms), STORE_ARG_S(name)};
    return q(st, "UPDATE templates SET state='deleted', failure=NULL, updated_ms=? WHERE name=?", w, 2, NULL, NULL);
}

int store_tpl_delete_unused(struct store *st, const char *name, const char *tenant, int64_t now_ms,
                            struct store_tpl_users *users)
{
    struct store_tpl_users scratch;
    struct store_tpl_users *u = users ? users : &scratch;
    memset(u, 0, sizeof *u);
    if (st->ops->begin(st) != 0)
        return -1;
    int rc = tpl_delete_locked(st, name, tenant, now_ms, u);
    if (rc != 0)
        return tx_abort(st, rc);
    return st->ops->commit(st) == 0 ? 0 : -1;
}

int store_tpl_hold(struct store *st, const char *name)
{
    struct tpl_locked r = {0};
    if (tpl_lock(st, name, st->ops->for_share, &r) != 0)
        return -1;
    return r.found && strcmp(r.state, "ready") == 0 ? 0 : STORE_NOTFOUND;
}

/* ---- quotas --------------------------------------------------------------------------- */

int store_quota_put(struct store *st, const struct store_quota *q) { return rec_put(st, &store_tbl_quotas, q); }

int store_quota_get(struct store *st, const char *tenant, struct store_quota *out)
{
    return rec_get(st, &store_tbl_quotas, "WHERE tenant=?", tenant, out);
}

int store_quota_lock(struct store *st, const char *tenant)
{
    /* The no-op update of an existing row still takes its row lock (PostgreSQL), held to
     * the end of the transaction: a second checker of the same tenant waits here and then
     * reads usage that includes the first one's committed sandbox. */
    struct store_arg a = STORE_ARG_S(tenant);
    return q(st,
             "INSERT INTO tenant_quotas(tenant,max_sandboxes,max_vcpus,max_memory_mib,max_disk_mib,"
             "max_templates,max_snapshots,updated_ms) VALUES(?,-1,-1,-1,-1,-1,-1,0)"
             " ON CONFLICT(tenant) DO UPDATE SET updated_ms=tenant_quotas.updated_ms",
             &a, 1, NULL, NULL);
}

static int read_sums(void *arg, const char *const *cols, int ncols)
{
    struct store_quota_vals *u = arg;
    int64_t *f[] = {&u->sandboxes, &u->vcpus, &u->memory_mib, &u->disk_mib};
    for (int i = 0; i < 4 && i < ncols; i++)
        *f[i] = cols[i] ? strtoll(cols[i], NULL, 10) : 0;
    return 1;
}

int store_quota_usage(struct store *st, const char *tenant, struct store_quota_vals *out)
{
    memset(out, 0, sizeof *out);
    struct store_arg a = STORE_ARG_S(tenant);
    if (q(st,
          "SELECT COUNT(*), COALESCE(SUM(vcpus),0), COALESCE(SUM(memory_mib),0),"
          " COALESCE(SUM(disk_mib),0) FROM sandboxes WHERE tenant=? AND state<>'deleted'",
          &a, 1, read_sums, out) != 0)
        return -1;
    if (q(st, "SELECT COUNT(*) FROM templates WHERE tenant=? AND state<>'deleted'", &a, 1, read_i64,
          &out->templates) != 0)
        return -1;
    return q(st, "SELECT COUNT(*) FROM snapshots WHERE tenant=?", &a, 1, read_i64, &out->snapshots);
}

/* ---- snapshots ------------------------------------------------------------------------ */

int store_snap_put(struct store *st, const struct store_snap *s) { return rec_put(st, &store_tbl_snapshots, s); }

int store_snap_get(struct store *st, const char *id, struct store_snap *out)
{
    return rec_get(st, &store_tbl_snapshots, "WHERE id=?", id, out);
}

int store_snap_find(struct store *st, const char *tenant, const char *id_or_name,
                    struct store_snap *out)
{
    struct store_arg a[] = {STORE_ARG_S(tenant), STORE_ARG_S(id_or_name), STORE_ARG_S(id_or_name)};
    return rec_select(st, &store_tbl_snapshots, "WHERE tenant=? AND (id=? OR (name<>'' AND name=?)) "
                      "ORDER BY id", a, 3, out, NULL, NULL);
}

int store_snap_delete(struct store *st, const char *id)
{
    struct store_arg a = STORE_ARG_S(id);
    int64_t changed = 0;
    int rc = st->ops->query(st, "DELETE FROM snapshots WHERE id=?", &a, 1, NULL, NULL, &changed);
    return rc == 0 && changed == 0 ? STORE_NOTFOUND : rc;
}

int store_snap_each(struct store *st, const char *tenant,
                    int (*fn)(const struct store_snap *, void *), void *arg)
{
    struct store_snap s;
    struct store_arg a = STORE_ARG_S(tenant);
    return rec_select(st, &store_tbl_snapshots, "WHERE tenant=? ORDER BY id", &a, 1, &s,
                      (int (*)(const void *, void *))fn, arg);
}

/* ---- template routes ------------------------------------------------------------------ */

/* The row's key: tenant and name (a tenant id has no '/'), so one tenant's request never
 * replaces another's route. -1 when they do not fit. */
static int route_key(const char *tenant, const char *name, char *out, size_t cap)
{
    int n = snprintf(out, cap, "%s/%s", tenant, name);
    return n < 0 || (size_t)n >= cap ? -1 : 0;
}

int store_tpl_route_put(struct store *st, const struct store_tpl_route *r)
{
    struct store_tpl_route row = *r;
    if (route_key(r->tenant, r->name, row.id, sizeof row.id) < 0) {
        snprintf(st->err, sizeof st->err, "template route key too long");
        return -1;
    }
    return rec_put(st, &store_tbl_tpl_routes, &row);
}

int store_tpl_route_get(struct store *st, const char *tenant, const char *name, struct store_tpl_route *out)
{
    char id[sizeof out->id];
    if (route_key(tenant, name, id, sizeof id) < 0)
        return STORE_NOTFOUND;
    return rec_get(st, &store_tbl_tpl_routes, "WHERE id=?", id, out);
}

int store_tpl_route_expire(struct store *st, int64_t before_ms)
{
    struct store_arg a = STORE_ARG_I(before_ms);
    return q(st, "DELETE FROM template_routes WHERE created_ms<?", &a, 1, NULL, NULL);
}

/* ---- nodes ---------------------------------------------------------------------------- */

int store_node_put(struct store *st, const struct store_node *n) { return rec_put(st, &store_tbl_nodes, n); }

int store_node_get(struct store *st, const char *id, struct store_node *out)
{
    return rec_get(st, &store_tbl_nodes, "WHERE id=?", id, out);
}

int store_node_set_draining(struct store *st, const char *id, bool draining)
{
    struct store_arg a[] = {STORE_ARG_I(draining ? 1 : 0), STORE_ARG_S(id)};
    int64_t changed = 0;
    int rc = st->ops->query(st, "UPDATE nodes SET draining=? WHERE id=?", a, 2, NULL, NULL, &changed);
    return rc == 0 && changed == 0 ? STORE_NOTFOUND : rc;
}

int store_node_delete(struct store *st, const char *id)
{
    struct store_arg a = STORE_ARG_S(id);
    int64_t changed = 0;
    int rc = st->ops->query(st, "DELETE FROM nodes WHERE id=?", &a, 1, NULL, NULL, &changed);
    return rc == 0 && changed == 0 ? STORE_NOTFOUND : rc;
}

int store_node_each(struct store *st, int (*fn)(const struct store_node *, void *), void *arg)
{
    struct store_node n;
    return rec_select(st, &store_tbl_nodes, "ORDER BY id", NULL, 0, &n,
                      (int (*)(const void *, void *))fn, arg);
}

/* ---- node capacity and reservations ----------------------------------------------------- */

/* Sandboxes in these states hold no VM on their node (store_node_use). */
#define NO_VM_STATES "('suspended','stopped','deleted','failed')"
/* Per node: its sandboxes' and its reservations' sums, as sub-selects (s, r) joined on. */
#define USE_JOIN                                                                                   \
    " LEFT JOIN (SELECT node, SUM(vcpus) AS v, SUM(memory_mib) AS m FROM sandboxes WHERE state"   \
    " NOT IN " NO_VM_STATES " GROUP BY node) s ON s.node=nodes.id"                                \
    " LEFT JOIN (SELECT node, SUM(vcpus) AS v, SUM(memory_mib) AS m FROM node_reservations"       \
    " GROUP BY node) r ON r.node=nodes.id"

struct usage_scan {
    int (*fn)(const struct store_node *, const struct store_node_use *, void *);
    void *arg;
};

static int usage_row(void *p, const char *const *cols, int ncols)
{
    struct usage_scan *sc = p;
    int n = store_tbl_nodes.ncols;
    struct store_node node;
    store_rec_read(&store_tbl_nodes, &node, cols, ncols < n ? ncols : n); /* no heap fields */
    int64_t v[4] = {0};
    for (int i = 0; i < 4 && n + i < ncols; i++)
        v[i] = cols[n + i] ? strtoll(cols[n + i], NULL, 10) : 0;
    struct store_node_use u = {v[0], v[1], v[2], v[3]};
    return sc->fn(&node, &u, sc->arg);
}

int store_node_usage(struct store *st,
                     int (*fn)(const struct store_node *, const struct store_node_use *, void *), void *arg)
{
    /* "SELECT <node columns> FROM nodes" with the four sums spliced in before FROM. */
    static const char tail[] = ", COALESCE(s.v,0), COALESCE(s.m,0), COALESCE(r.v,0), COALESCE(r.m,0)"
                               " FROM nodes" USE_JOIN " ORDER BY nodes.id";
    char sql[SQL_CAP];
    store_rec_select(&store_tbl_nodes, sql, sizeof sql - sizeof tail);
    char *from = strstr(sql, " FROM ");
    if (!from)
        return -1;
    memcpy(from, tail, sizeof tail);
    struct usage_scan sc = {fn, arg};
    return q(st, sql, NULL, 0, usage_row, &sc);
}

int store_resv_take(struct store *st, const struct store_resv *r, int64_t live_since_ms)
{
    if (st->ops->begin(st) != 0)
        return -1;
    /* The no-op update takes the node row's lock to the end of the transaction (as
     * store_quota_lock does for a tenant): a second reserver of this node waits here,
     * then its INSERT reads sums that include the first one's committed reservation. */
    struct store_arg lk = STORE_ARG_S(r->node);
    int64_t changed = 0;
    int rc = st->ops->query(st, "UPDATE nodes SET draining=draining WHERE id=?", &lk, 1, NULL, NULL, &changed);
    if (rc == 0 && changed == 0)
        rc = STORE_NOTFOUND;
    if (rc == 0) {
        struct store_arg a[] = {STORE_ARG_S(r->id),        STORE_ARG_I(r->vcpus),
                                STORE_ARG_I(r->memory_mib), STORE_ARG_I(r->created_ms),
                                STORE_ARG_S(r->node),      STORE_ARG_I(r->resume),
                                STORE_ARG_I(live_since_ms), STORE_ARG_I(r->vcpus),
                                STORE_ARG_I(r->memory_mib)};
        rc = st->ops->query(st,
                            "INSERT INTO node_reservations(id,node,vcpus,memory_mib,created_ms)"
                            " SELECT ?,nodes.id,?,?,? FROM nodes" USE_JOIN
                            " WHERE nodes.id=? AND (nodes.draining=0 OR ?=1) AND nodes.heartbeat_ms>=?"
                            " AND nodes.vcpus-COALESCE(s.v,0)-COALESCE(r.v,0)>=?"
                            " AND nodes.memory_mib-COALESCE(s.m,0)-COALESCE(r.m,0)>=?",
                            a, 9, NULL, NULL, &changed);
        if (rc == 0 && changed == 0)
            rc = STORE_FULL;
    }
    if (rc == 0)
        return st->ops->commit(st) == 0 ? 0 : -1;
    return tx_abort(st, rc);
}

int store_resv_release(struct store *st, const char *id)
{
    struct store_arg a = STORE_ARG_S(id);
    return q(st, "DELETE FROM node_reservations WHERE id=?", &a, 1, NULL, NULL);
}

int store_resv_expire(struct store *st, const char *node, int64_t before_ms, int64_t *n)
{
    struct store_arg a[] = {STORE_ARG_S(node), STORE_ARG_I(before_ms)};
    int64_t changed = 0;
    int rc = st->ops->query(st, "DELETE FROM node_reservations WHERE node=? AND created_ms<?", a, 2, NULL, NULL,
                            &changed);
    if (n)
        *n = rc == 0 ? changed : 0;
    return rc;
}
