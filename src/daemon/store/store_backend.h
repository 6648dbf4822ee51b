/* store_backend: the interface between the backend-neutral store (store.c) and a
 * database driver (store_sqlite.c, store_pg.c). Internal to src/daemon/store.
 *
 * A backend is a small SQL driver, not a second implementation of store.h: store.c
 * writes every statement once, with `?` placeholders, in the SQL both SQLite and
 * PostgreSQL accept, and maps rows to records through the column tables of
 * store_rec.h. A driver only runs statements, reports rows as text, maps a uniqueness
 * violation to STORE_CONFLICT and handles transactions and its own connection.
 *
 * Every backend handle starts with `struct store` (the driver casts back to its own
 * type); store.c never looks past it. */
#ifndef SPACE_STORE_BACKEND_H
#define SPACE_STORE_BACKEND_H

#include "store.h"

/* One statement parameter. Typed so that PostgreSQL knows a parameter's type even where
 * the statement does not say (`? IS NULL`, LIMIT ?). */
struct store_arg {
    char type;     /* 's': text in s (NULL = SQL NULL), 'i': integer in i */
    const char *s; /* borrowed for the duration of the call */
    int64_t i;
};

#define STORE_ARG_S(v) ((struct store_arg){.type = 's', .s = (v)})
#define STORE_ARG_I(v) ((struct store_arg){.type = 'i', .i = (int64_t)(v)})

/* Receives one result row: cols[0..ncols-1] are the columns as text, NULL for SQL NULL
 * (integers in decimal). The strings are valid during the call only. Returns nonzero
 * to stop reading further rows (not an error). */
typedef int (*store_row_fn)(void *arg, const char *const *cols, int ncols);

#define STORE_MAX_COLS 32 /* columns of the widest table, with room to grow */

struct store_ops {
    const char *name; /* "sqlite" | "postgresql", for messages */
    /* Runs one statement with `?` placeholders bound to args[0..nargs-1]. Rows go to fn
     * (may be NULL); *changes (may be NULL) receives the rows a write touched. Returns 0,
     * STORE_CONFLICT on a uniqueness violation, -1 otherwise (st->err set). */
    int (*query)(struct store *st, const char *sql, const struct store_arg *args, int nargs,
                 store_row_fn fn, void *arg, int64_t *changes);
    /* Runs several statements without parameters or rows (schema migrations). */
    int (*script)(struct store *st, const char *sql);
    int (*begin)(struct store *st);
    int (*commit)(struct store *st);
    void (*rollback)(struct store *st); /* no-op outside a transaction */
    void (*close)(struct store *st);    /* frees the handle */
    /* Optional (NULL: every commit is durable): lazy=true makes the following
     * autocommit writes survive a crash of spaced but not of the host (SQLite:
     * synchronous=NORMAL in WAL mode, the commit reaches the OS without an fsync);
     * lazy=false restores the default. A no-op inside a transaction. */
    int (*lazy)(struct store *st, bool lazy);
    /* Optional: periodic upkeep (store_tick), on the loop thread. */
    void (*tick)(struct store *st);
    /* Optional (NULL: the disk is not this driver's concern): store_disk. */
    const char *(*disk)(struct store *st, char *buf, size_t cap);
    /* Statement run first inside the migration transaction so that concurrent openers
     * of one database migrate one after the other; NULL when begin already does that. */
    const char *migrate_lock_sql;
    /* Appended to a SELECT inside a transaction to lock the rows it reads until commit:
     * exclusively (for_update) or shared (for_share). "" when begin already serialises
     * every writer (SQLite's BEGIN IMMEDIATE takes the database's write lock). */
    const char *for_update;
    const char *for_share;
};

struct store {
    const struct store_ops *ops; /* the backend of this handle */
    char err[256];               /* last failure, for store_errmsg() */
};

/* Allocates a zeroed backend handle of `size` bytes (starting with struct store) bound
 * to ops; NULL with "out of memory" in err. Freed by ops->close (free()). */
void *store_handle_new(size_t size, const struct store_ops *ops, char *err, size_t errlen);

/* Driver constructors: connect or open, prepare the connection (not the schema: store.c
 * migrates after). NULL with a message in err on failure. */
struct store *store_sqlite_open(const char *path, char *err, size_t errlen);
struct store *store_pg_open(const char *url, char *err, size_t errlen);

#endif
