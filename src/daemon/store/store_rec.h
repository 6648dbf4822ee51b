/* store_rec: the column tables that map store.h records to SQL rows, and the
 * (de)serialisation both backends share. Internal to src/daemon/store.
 *
 * Each table is described once (column name, C type, where the field lives in the
 * record); from that description store_rec builds the column list of SELECTs, the
 * INSERT/upsert statement, the parameters of a write and the record of a read row.
 * Adding a column means one line here plus a migration in store.c. */
#ifndef SPACE_STORE_REC_H
#define SPACE_STORE_REC_H

#include <stdbool.h>
#include <stddef.h>

#include "store_backend.h"

enum store_col_type {
    STORE_COL_TEXT, /* char[cap] inside the record (NOT NULL column, "" when empty) */
    STORE_COL_HEAP, /* char * owned by the record, NULL = SQL NULL */
    STORE_COL_I64,  /* int64_t */
    STORE_COL_UINT, /* unsigned */
    STORE_COL_INT,  /* int */
    STORE_COL_BOOL, /* bool, stored as INTEGER 0/1 */
};

struct store_col {
    const char *name;          /* SQL column */
    enum store_col_type type;
    size_t off;                /* offsetof the field in the record */
    size_t cap;                /* STORE_COL_TEXT: sizeof the array */
    bool keep;                 /* not replaced by an upsert of an existing row */
};

struct store_table {
    const char *name;               /* SQL table */
    const char *key;                /* primary key column (the upsert's conflict target) */
    bool upsert;                    /* put replaces an existing row; false: plain INSERT */
    const char *upsert_where;       /* upsert: replaces only a row meeting this condition
                                       (SQL on the table and `excluded`), NULL: any row */
    const struct store_col *cols;   /* in SELECT order */
    int ncols;
    size_t size;                    /* sizeof the record */
    void (*clear)(void *rec);       /* frees heap fields; NULL when there are none */
};

extern const struct store_table store_tbl_tenants, store_tbl_keys, store_tbl_sandboxes,
    store_tbl_operations, store_tbl_sessions, store_tbl_templates, store_tbl_nodes,
    store_tbl_quotas, store_tbl_snapshots, store_tbl_tpl_routes;

/* Writes "SELECT c1,c2,... FROM table" into buf (cap >= 1024 is always enough).
 * Returns buf. */
const char *store_rec_select(const struct store_table *t, char *buf, size_t cap);
/* Writes the put statement of t: INSERT, plus ON CONFLICT(key) DO UPDATE SET of the
 * columns not marked keep when t->upsert. Returns buf. */
const char *store_rec_insert(const struct store_table *t, char *buf, size_t cap);
/* Fills args[0..t->ncols-1] from rec (strings borrowed from rec). */
void store_rec_args(const struct store_table *t, const void *rec, struct store_arg *args);
/* Fills rec from a row of t's columns (zeroing it first); missing columns stay empty.
 * Returns -1 if a heap copy failed (rec then holds what was copied: clear it). */
int store_rec_read(const struct store_table *t, void *rec, const char *const *cols, int ncols);

#endif
