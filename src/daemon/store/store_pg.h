/* store_pg: the PostgreSQL backend of the store (libpq), for a control plane whose
 * replicas share one database.
 *
 * Same records, same semantics and same return codes as store.h (0, STORE_NOTFOUND,
 * STORE_CONFLICT, -1 with store_pg_errmsg()); each function here is the store.h function
 * of the same name with the `store_pg_` prefix and a `struct store_pg *` handle. The
 * prefix exists because store.h is a set of plain functions with one definition (the
 * SQLite backend's): two backends cannot both define them in one binary until store.h
 * dispatches through a per-handle table (see docs/multinode.md, "Store").
 *
 * Connection: a libpq connection string, URI or key=value form
 * ("postgres://user@host/db", "postgresql:///space?host=/run/pg"); store_pg_url_is_pg()
 * tells such a string from an SQLite path. The schema is created or upgraded at open,
 * under a transaction-scoped advisory lock so that replicas starting together apply each
 * migration once.
 *
 * Differences from SQLite a caller can observe:
 *   - After a failed statement inside store_pg_begin/store_pg_commit, PostgreSQL has
 *     aborted the transaction: every later statement fails until store_pg_rollback (the
 *     op engine already rolls back on any failure).
 *   - store_pg_begin starts a READ COMMITTED transaction. Rows are not locked by reads,
 *     so two replicas that read-modify-write the same row race (last writer wins), as
 *     two threads would with SQLite; see docs/multinode.md for what is replica-safe.
 *   - Every call blocks on a round trip to the server (the caller's event loop waits).
 *   - A broken connection is re-established at the start of the next call outside a
 *     transaction; a statement is never re-sent after a failure (its effect is unknown).
 *
 * Durability: a call that returns 0 has committed with the server's synchronous_commit
 * (default on: flushed to its WAL), so a SIGKILL of spaced loses nothing acknowledged.
 *
 * Ownership and threading: as store.h (records caller-owned, heap fields released with
 * store_*_clear from store.h). One handle is one connection, used by one thread. */
#ifndef SPACE_STORE_PG_H
#define SPACE_STORE_PG_H

#include "store.h"

struct store_pg;

/* True when `url` names a PostgreSQL database ("postgres://", "postgresql://" or a
 * key=value string with "dbname=" or "host="), false for a file path. */
bool store_pg_url_is_pg(const char *url);

/* Connects and creates or upgrades the schema. Returns NULL with a message in errbuf
 * (never containing the password) on failure. */
struct store_pg *store_pg_open(const char *url, char *errbuf, size_t errcap);
void store_pg_close(struct store_pg *st);
const char *store_pg_errmsg(struct store_pg *st);

int store_pg_begin(struct store_pg *st);
int store_pg_commit(struct store_pg *st);
void store_pg_rollback(struct store_pg *st);

int store_pg_tenant_put(struct store_pg *st, const struct store_tenant *t);
int store_pg_tenant_get(struct store_pg *st, const char *id, struct store_tenant *out);
int store_pg_tenant_by_name(struct store_pg *st, const char *name, struct store_tenant *out);

int store_pg_key_put(struct store_pg *st, const struct store_key *k);
int store_pg_key_by_hash(struct store_pg *st, const char *hash, struct store_key *out);
int store_pg_key_get(struct store_pg *st, const char *id, struct store_key *out);
int store_pg_key_revoke(struct store_pg *st, const char *id, int64_t now_ms);
int store_pg_key_each(struct store_pg *st, int (*fn)(const struct store_key *, void *), void *arg);

int store_pg_sbx_put(struct store_pg *st, const struct store_sbx *s);
int store_pg_sbx_get(struct store_pg *st, const char *id, struct store_sbx *out);
int store_pg_sbx_list(struct store_pg *st, const struct store_sbx_filter *f,
                      int (*fn)(const struct store_sbx *, void *), void *arg, bool *more);
int store_pg_sbx_each_live(struct store_pg *st, int (*fn)(const struct store_sbx *, void *), void *arg);
int store_pg_sbx_count_by_state(struct store_pg *st, void (*fn)(const char *state, int64_t n, void *),
                                void *arg);

int store_pg_op_put(struct store_pg *st, const struct store_op *o);
int store_pg_op_get(struct store_pg *st, const char *id, struct store_op *out);
int store_pg_op_by_idem(struct store_pg *st, const char *tenant, const char *key, struct store_op *out);
int store_pg_op_each_open(struct store_pg *st, int (*fn)(const struct store_op *, void *), void *arg);
int store_pg_op_list(struct store_pg *st, const char *tenant, const char *target, unsigned limit,
                     int (*fn)(const struct store_op *, void *), void *arg);

int store_pg_session_put(struct store_pg *st, const struct store_session *s);
int store_pg_session_get(struct store_pg *st, const char *id, struct store_session *out);
int store_pg_session_delete(struct store_pg *st, const char *id);
int store_pg_session_each(struct store_pg *st, const char *sandbox,
                          int (*fn)(const struct store_session *, void *), void *arg);

int store_pg_tpl_put(struct store_pg *st, const struct store_tpl *t);
int store_pg_tpl_get(struct store_pg *st, const char *name, struct store_tpl *out);
int store_pg_tpl_each(struct store_pg *st, int (*fn)(const struct store_tpl *, void *), void *arg);

#endif
