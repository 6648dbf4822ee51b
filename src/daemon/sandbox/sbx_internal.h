/* sbx_internal.h: the sandbox object, shared by the files of the sandbox module only
 * (sbx_table.c keeps the table and the record, sbx_act.c drives the VM). */
#ifndef SPACE_SBX_INTERNAL_H
#define SPACE_SBX_INTERNAL_H

#include "sbx.h"

struct vm;
struct agentc;
struct agentc_chan;
struct event;
struct vmg;

struct sbx {
    struct spaced *sp;
    struct store_sbx rec;        /* persisted record (owned); rec.state mirrors `state` */
    enum sbx_state state;        /* actual state */
    enum sbx_state desired;      /* where queued ops lead */
    struct vm *vm;               /* QEMU, NULL when none (owned by vm.c until on_exit) */
    struct agentc *agent;        /* agent connection (owned), NULL when not connected */
    bool agent_ready;            /* HELLO received on `agent` */
    unsigned agent_drops;        /* agent connections lost in the current window */
    int64_t agent_drops_since;   /* start of that window (ms) */
    struct agentc_chan *pending; /* refresh/shutdown request in flight, or NULL */
    char op_id[STORE_ID_MAX];    /* op being carried out, "" when idle */
    enum op_kind op_kind;        /* its kind (valid when op_id[0]) */
    bool recovering;             /* startup adoption in progress (busy) */
    bool expect_exit;            /* the current action ends QEMU: on_exit is not a failure */
    bool restored;               /* started from a snapshot (template or suspend) */
    bool cold_fallback;          /* create: snapshot restore failed, now cold booting */
    struct event *timer;         /* agent-hello deadline of the current action (owned) */
    struct vmg *greet;           /* restored VM: greet again on a fresh connection (owned,
                                    made on first use) */
    bool refresh_ok;             /* refresh request got its result */
    char refresh_err[256];       /* or why it failed */
    struct sbx *next;            /* table list */
};

struct sbx_table {
    struct sbx *head;
    struct {
        sbx_state_fn fn;
        void *arg;
    } listeners[SBX_LISTENERS_MAX];
    unsigned nlisteners;
};

/* Moves the sandbox to `state` (failure text for SBX_FAILED, else NULL), persists the
 * record, logs one line, tells listeners. */
void sbx_set_state(struct sbx *s, enum sbx_state state, const char *failure);
/* Persists the record as it is in memory. */
int sbx_persist(struct sbx *s);
/* Unlinks and frees a deleted sandbox (its VM must be gone). */
void sbx_table_remove(struct spaced *sp, struct sbx *s);

/* Paths under the data dir for this sandbox (out[cap]). */
void sbx_path(const struct sbx *s, const char *leaf, char *out, size_t cap);

#endif
