/* store_rec.c: column tables of the store's records and the row mapping both backends
 * share; see store_rec.h. */
#include "store_rec.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TEXT(rec, f, ...) {#f, STORE_COL_TEXT, offsetof(rec, f), sizeof(((rec *)0)->f), __VA_ARGS__}
#define COL(name, type, rec, f, ...) {name, type, offsetof(rec, f), 0, __VA_ARGS__}
#define TABLE(tname, tkey, tupsert, rec, tcols, tclear)                                   \
    {.name = tname, .key = tkey, .upsert = tupsert, .cols = tcols,                         \
     .ncols = (int)(sizeof(tcols) / sizeof(tcols)[0]), .size = sizeof(rec), .clear = tclear}

static const struct store_col tenant_cols[] = {
    TEXT(struct store_tenant, id, false),
    TEXT(struct store_tenant, name, false),
    COL("created_ms", STORE_COL_I64, struct store_tenant, created_ms, false),
};
const struct store_table store_tbl_tenants = TABLE("tenants", "id", false, struct store_tenant, tenant_cols, NULL);

static const struct store_col key_cols[] = {
    TEXT(struct store_key, id, false),
    TEXT(struct store_key, tenant, false),
    TEXT(struct store_key, hash, false),
    TEXT(struct store_key, prefix, false),
    COL("admin", STORE_COL_BOOL, struct store_key, admin, false),
    COL("created_ms", STORE_COL_I64, struct store_key, created_ms, false),
    COL("expires_ms", STORE_COL_I64, struct store_key, expires_ms, false),
    COL("revoked_ms", STORE_COL_I64, struct store_key, revoked_ms, false),
};
const struct store_table store_tbl_keys = TABLE("api_keys", "id", false, struct store_key, key_cols, NULL);

static void sbx_clear_v(void *rec) { store_sbx_clear(rec); }

/* Every sandbox column except the id is replaced on put: the record is the whole truth. */
static const struct store_col sbx_cols[] = {
    TEXT(struct store_sbx, id, true),
    TEXT(struct store_sbx, tenant, false),
    {"template", STORE_COL_TEXT, offsetof(struct store_sbx, template_name),
     sizeof(((struct store_sbx *)0)->template_name), false},
    COL("vcpus", STORE_COL_UINT, struct store_sbx, vcpus, false),
    COL("memory_mib", STORE_COL_UINT, struct store_sbx, memory_mib, false),
    COL("env", STORE_COL_HEAP, struct store_sbx, env_json, false),
    COL("metadata", STORE_COL_HEAP, struct store_sbx, metadata_json, false),
    COL("network", STORE_COL_HEAP, struct store_sbx, network_json, false),
    COL("timeout_s", STORE_COL_I64, struct store_sbx, timeout_s, false),
    COL("deadline_ms", STORE_COL_I64, struct store_sbx, deadline_ms, false),
    TEXT(struct store_sbx, on_timeout, false),
    TEXT(struct store_sbx, desired, false),
    TEXT(struct store_sbx, state, false),
    COL("failure", STORE_COL_HEAP, struct store_sbx, failure, false),
    TEXT(struct store_sbx, run_dir, false),
    COL("created_ms", STORE_COL_I64, struct store_sbx, created_ms, false),
    COL("updated_ms", STORE_COL_I64, struct store_sbx, updated_ms, false),
    TEXT(struct store_sbx, node, false),
    COL("private_ports", STORE_COL_BOOL, struct store_sbx, private_ports, false),
    COL("disk_mib", STORE_COL_UINT, struct store_sbx, disk_mib, false),
    COL("auto_resume", STORE_COL_BOOL, struct store_sbx, auto_resume, false),
    TEXT(struct store_sbx, source, false),
    COL("volumes", STORE_COL_HEAP, struct store_sbx, volumes_json, false),
    COL("parts", STORE_COL_HEAP, struct store_sbx, parts, false),
};
/* A node writes only rows that name it: once a control moved a suspended sandbox to
 * another node (store_sbx_move), a late write of the old node's record changes nothing
 * (store_sbx_put: STORE_MOVED). */
const struct store_table store_tbl_sandboxes = {
    .name = "sandboxes", .key = "id", .upsert = true, .upsert_where = "sandboxes.node = excluded.node",
    .cols = sbx_cols, .ncols = (int)(sizeof sbx_cols / sizeof sbx_cols[0]), .size = sizeof(struct store_sbx),
    .clear = sbx_clear_v};

static void op_clear_v(void *rec) { store_op_clear(rec); }

/* What an operation is (kind, target, idempotency) never changes; its progress does. */
static const struct store_col op_cols[] = {
    TEXT(struct store_op, id, true),
    TEXT(struct store_op, tenant, true),
    TEXT(struct store_op, kind, true),
    TEXT(struct store_op, target, true),
    TEXT(struct store_op, state, false),
    TEXT(struct store_op, error_code, false),
    COL("error_message", STORE_COL_HEAP, struct store_op, error_message, false),
    COL("progress", STORE_COL_INT, struct store_op, progress, false),
    COL("detail", STORE_COL_HEAP, struct store_op, detail, false),
    TEXT(struct store_op, idem_key, true),
    TEXT(struct store_op, body_hash, true),
    COL("created_ms", STORE_COL_I64, struct store_op, created_ms, true),
    COL("started_ms", STORE_COL_I64, struct store_op, started_ms, false),
    COL("finished_ms", STORE_COL_I64, struct store_op, finished_ms, false),
    COL("seq", STORE_COL_I64, struct store_op, seq, true),
};
const struct store_table store_tbl_operations = TABLE("operations", "id", true, struct store_op, op_cols, op_clear_v);

static void ses_clear_v(void *rec) { store_session_clear(rec); }

static const struct store_col ses_cols[] = {
    TEXT(struct store_session, id, true),
    TEXT(struct store_session, tenant, true),
    TEXT(struct store_session, sandbox, true),
    COL("spec", STORE_COL_HEAP, struct store_session, spec_json, false),
    TEXT(struct store_session, state, false),
    COL("exit_code", STORE_COL_INT, struct store_session, exit_code, false),
    COL("exit_signal", STORE_COL_INT, struct store_session, exit_signal, false),
    COL("created_ms", STORE_COL_I64, struct store_session, created_ms, true),
    COL("updated_ms", STORE_COL_I64, struct store_session, updated_ms, false),
};
const struct store_table store_tbl_sessions = TABLE("sessions", "id", true, struct store_session, ses_cols, ses_clear_v);

static void tpl_clear_v(void *rec) { store_tpl_clear(rec); }

static const struct store_col tpl_cols[] = {
    TEXT(struct store_tpl, name, true),
    TEXT(struct store_tpl, tenant, false),
    TEXT(struct store_tpl, state, false),
    COL("spec", STORE_COL_HEAP, struct store_tpl, spec_json, false),
    COL("failure", STORE_COL_HEAP, struct store_tpl, failure, false),
    TEXT(struct store_tpl, dir, false),
    COL("created_ms", STORE_COL_I64, struct store_tpl, created_ms, true),
    COL("updated_ms", STORE_COL_I64, struct store_tpl, updated_ms, false),
    TEXT(struct store_tpl, nodes, false),
    TEXT(struct store_tpl, digest, false),
    COL("size_bytes", STORE_COL_I64, struct store_tpl, size_bytes, false),
    COL("meta", STORE_COL_HEAP, struct store_tpl, meta, false),
};
const struct store_table store_tbl_templates = TABLE("templates", "name", true, struct store_tpl, tpl_cols, tpl_clear_v);

static const struct store_col node_cols[] = {
    TEXT(struct store_node, id, true),
    TEXT(struct store_node, url, false),
    COL("vcpus", STORE_COL_UINT, struct store_node, vcpus, false),
    COL("memory_mib", STORE_COL_UINT, struct store_node, memory_mib, false),
    COL("heartbeat_ms", STORE_COL_I64, struct store_node, heartbeat_ms, false),
    COL("started_ms", STORE_COL_I64, struct store_node, started_ms, false),
    COL("draining", STORE_COL_BOOL, struct store_node, draining, true),
    TEXT(struct store_node, shapes, false),
    TEXT(struct store_node, host_load, false),
    TEXT(struct store_node, runtime, false),
};
static const struct store_col snap_cols[] = {
    TEXT(struct store_snap, id, true),
    TEXT(struct store_snap, tenant, true),
    TEXT(struct store_snap, name, false),
    TEXT(struct store_snap, source, true),
    {"template", STORE_COL_TEXT, offsetof(struct store_snap, template_name),
     sizeof(((struct store_snap *)0)->template_name), true},
    COL("vcpus", STORE_COL_UINT, struct store_snap, vcpus, true),
    COL("memory_mib", STORE_COL_UINT, struct store_snap, memory_mib, true),
    COL("nic", STORE_COL_BOOL, struct store_snap, nic, true),
    TEXT(struct store_snap, state, false),
    COL("size_bytes", STORE_COL_I64, struct store_snap, size_bytes, false),
    COL("created_ms", STORE_COL_I64, struct store_snap, created_ms, true),
    TEXT(struct store_snap, node, false),
    TEXT(struct store_snap, parts, false),
};
const struct store_table store_tbl_snapshots = TABLE("snapshots", "id", true, struct store_snap, snap_cols, NULL);

const struct store_table store_tbl_nodes = TABLE("nodes", "id", true, struct store_node, node_cols, NULL);

static const struct store_col tpl_route_cols[] = {
    TEXT(struct store_tpl_route, id, true),
    TEXT(struct store_tpl_route, tenant, false),
    TEXT(struct store_tpl_route, name, false),
    TEXT(struct store_tpl_route, node, false),
    COL("created_ms", STORE_COL_I64, struct store_tpl_route, created_ms, false),
};
const struct store_table store_tbl_tpl_routes =
    TABLE("template_routes", "id", true, struct store_tpl_route, tpl_route_cols, NULL);

static const struct store_col quota_cols[] = {
    TEXT(struct store_quota, tenant, true),
    COL("max_sandboxes", STORE_COL_I64, struct store_quota, limit.sandboxes, false),
    COL("max_vcpus", STORE_COL_I64, struct store_quota, limit.vcpus, false),
    COL("max_memory_mib", STORE_COL_I64, struct store_quota, limit.memory_mib, false),
    COL("max_disk_mib", STORE_COL_I64, struct store_quota, limit.disk_mib, false),
    COL("max_templates", STORE_COL_I64, struct store_quota, limit.templates, false),
    COL("max_snapshots", STORE_COL_I64, struct store_quota, limit.snapshots, false),
    COL("max_volume_mib", STORE_COL_I64, struct store_quota, limit.volume_mib, false),
    COL("updated_ms", STORE_COL_I64, struct store_quota, updated_ms, false),
};
const struct store_table store_tbl_quotas = TABLE("tenant_quotas", "tenant", true, struct store_quota, quota_cols, NULL);

/* ---- record clearing (backend-neutral, declared in store.h) --------------------------- */

void store_sbx_clear(struct store_sbx *s)
{
    free(s->env_json);
    free(s->metadata_json);
    free(s->network_json);
    free(s->volumes_json);
    free(s->parts);
    free(s->failure);
    memset(s, 0, sizeof *s);
}

void store_op_clear(struct store_op *o)
{
    free(o->error_message);
    free(o->detail);
    memset(o, 0, sizeof *o);
}

void store_session_clear(struct store_session *s)
{
    free(s->spec_json);
    memset(s, 0, sizeof *s);
}

void store_tpl_clear(struct store_tpl *t)
{
    free(t->spec_json);
    free(t->failure);
    free(t->meta);
    memset(t, 0, sizeof *t);
}

/* ---- SQL text ------------------------------------------------------------------------- */

/* Appends to buf at *len, never past cap (the statements are far shorter than cap). */
static void put(char *buf, size_t cap, size_t *len, const char *s)
{
    int n = snprintf(buf + *len, cap - *len, "%s", s);
    if (n > 0)
        *len = *len + (size_t)n < cap ? *len + (size_t)n : cap - 1;
}

static void col_list(const struct store_table *t, char *buf, size_t cap, size_t *len)
{
    for (int i = 0; i < t->ncols; i++) {
        if (i)
            put(buf, cap, len, ",");
        put(buf, cap, len, t->cols[i].name);
    }
}

const char *store_rec_select(const struct store_table *t, char *buf, size_t cap)
{
    size_t len = 0;
    buf[0] = '\0';
    put(buf, cap, &len, "SELECT ");
    col_list(t, buf, cap, &len);
    put(buf, cap, &len, " FROM ");
    put(buf, cap, &len, t->name);
    return buf;
}

const char *store_rec_insert(const struct store_table *t, char *buf, size_t cap)
{
    size_t len = 0;
    buf[0] = '\0';
    put(buf, cap, &len, "INSERT INTO ");
    put(buf, cap, &len, t->name);
    put(buf, cap, &len, "(");
    col_list(t, buf, cap, &len);
    put(buf, cap, &len, ") VALUES(");
    for (int i = 0; i < t->ncols; i++)
        put(buf, cap, &len, i ? ",?" : "?");
    put(buf, cap, &len, ")");
    if (!t->upsert)
        return buf;
    put(buf, cap, &len, " ON CONFLICT(");
    put(buf, cap, &len, t->key);
    put(buf, cap, &len, ") DO UPDATE SET ");
    bool first = true;
    for (int i = 0; i < t->ncols; i++) {
        if (t->cols[i].keep)
            continue;
        put(buf, cap, &len, first ? "" : ",");
        put(buf, cap, &len, t->cols[i].name);
        put(buf, cap, &len, "=excluded.");
        put(buf, cap, &len, t->cols[i].name);
        first = false;
    }
    if (t->upsert_where) {
        put(buf, cap, &len, " WHERE ");
        put(buf, cap, &len, t->upsert_where);
    }
    return buf;
}

/* ---- rows <-> records ----------------------------------------------------------------- */

void store_rec_args(const struct store_table *t, const void *rec, struct store_arg *args)
{
    const char *base = rec;
    for (int i = 0; i < t->ncols; i++) {
        const struct store_col *c = &t->cols[i];
        const void *f = base + c->off;
        switch (c->type) {
        case STORE_COL_TEXT: args[i] = STORE_ARG_S((const char *)f); break;
        case STORE_COL_HEAP: args[i] = STORE_ARG_S(*(char *const *)f); break;
        case STORE_COL_I64: args[i] = STORE_ARG_I(*(const int64_t *)f); break;
        case STORE_COL_UINT: args[i] = STORE_ARG_I(*(const unsigned *)f); break;
        case STORE_COL_INT: args[i] = STORE_ARG_I(*(const int *)f); break;
        case STORE_COL_BOOL: args[i] = STORE_ARG_I(*(const bool *)f ? 1 : 0); break;
        }
    }
}

int store_rec_read(const struct store_table *t, void *rec, const char *const *cols, int ncols)
{
    char *base = rec;
    int ret = 0;
    memset(rec, 0, t->size);
    for (int i = 0; i < t->ncols; i++) {
        const struct store_col *c = &t->cols[i];
        void *f = base + c->off;
        const char *v = i < ncols ? cols[i] : NULL;
        int64_t n = v ? strtoll(v, NULL, 10) : 0;
        switch (c->type) {
        case STORE_COL_TEXT: snprintf(f, c->cap, "%s", v ? v : ""); break;
        case STORE_COL_HEAP:
            *(char **)f = v ? strdup(v) : NULL;
            if (v && !*(char **)f)
                ret = -1;
            break;
        case STORE_COL_I64: *(int64_t *)f = n; break;
        case STORE_COL_UINT: *(unsigned *)f = (unsigned)n; break;
        case STORE_COL_INT: *(int *)f = (int)n; break;
        case STORE_COL_BOOL: *(bool *)f = n != 0; break;
        }
    }
    return ret;
}
