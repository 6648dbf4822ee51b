/* op_engine.c: recording operations (intent first), running them one at a time per
 * target through the executors registered per kind, following them (watches),
 * recovering them after a crash, and the periodic tick. Knows no sandbox or template:
 * see op.h for the contract.
 *
 * The row of every open op lives in memory (struct op_open) and is the truth while the
 * op is open: running, progress and the outcome change it there, then it is written.
 * When the write fails (the store is down) the row is kept "unsaved" and written again
 * from the tick, with backoff, until it is stored; only then are watchers told, and a
 * terminal op leaves the queue only then, so the next op of its target waits for it. */
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/metrics/metrics.h"
#include "log.h"
#include "op.h"

_Static_assert(OP_KIND_COUNT <= METRICS_OP_KINDS && OP_STATE_COUNT <= METRICS_OP_STATES,
               "metrics counters must have room for every operation kind and state");

/* An operation that is not terminal yet, in submission order. */
struct op_open {
    char id[STORE_ID_MAX];
    char target[STORE_ID_MAX];
    enum op_kind kind;
    bool running;      /* handed to its executor */
    bool done;         /* terminal in `row`; leaves the queue once that is stored */
    bool unsaved;      /* `row` differs from the store: written again from the tick */
    bool state_changed;/* `row.state` changed since the last write (logged when stored) */
    int64_t unsaved_ms;/* when the first write of the unsaved change failed */
    struct store_op row; /* the op as it is now (owned) */
    struct op_open *next;
};

struct op_watch {
    char op_id[STORE_ID_MAX];
    op_watch_fn fn;
    void *arg;
    bool dead;           /* unwatched while callbacks were being dispatched */
    struct event *once;  /* delivers the first call for an already terminal op */
    struct spaced *sp;
    struct op_watch *next;
};

struct op_hook {
    op_hook_fn fn;
    void *arg;
};

struct op_engine {
    struct spaced *sp;
    struct op_open *open;       /* owned list */
    struct op_watch *watches;   /* owned list */
    int dispatching;            /* >0 while watch callbacks run */
    struct event *pump_ev;      /* deferred pump */
    struct event *tick;         /* periodic backstop */
    struct {
        const struct op_executor *ex;
        void *arg;
    } exec[OP_KIND_COUNT];
    struct op_hook recover_hooks[OP_HOOKS_MAX], tick_hooks[OP_HOOKS_MAX];
    unsigned nrecover, ntick;
    struct {
        op_change_fn fn;
        void *arg;
    } change_hooks[OP_HOOKS_MAX];
    unsigned nchange;
    op_owner_fn owns;
    int64_t seq;                /* last store_op.seq handed out */
};

static void op_pump(struct spaced *sp);

/* ---- watches ------------------------------------------------------------------------ */

static void watch_free(struct op_watch *w)
{
    if (w->once)
        event_free(w->once);
    free(w);
}

static void watches_sweep(struct op_engine *e)
{
    for (struct op_watch **pp = &e->watches; *pp;) {
        struct op_watch *w = *pp;
        if (w->dead) {
            *pp = w->next;
            watch_free(w);
        } else {
            pp = &w->next;
        }
    }
}

static void notify(struct spaced *sp, const struct store_op *op)
{
    struct op_engine *e = sp->ops;
    e->dispatching++;
    for (struct op_watch *w = e->watches; w; w = w->next)
        if (!w->dead && strcmp(w->op_id, op->id) == 0)
            w->fn(op, w->arg);
    if (--e->dispatching == 0)
        watches_sweep(e);
    for (unsigned i = 0; i < e->nchange; i++)
        e->change_hooks[i].fn(sp, op, e->change_hooks[i].arg);
}

static void watch_once(evutil_socket_t fd, short what, void *arg)
{
    struct op_watch *w = arg;
    (void)fd;
    (void)what;
    struct store_op op;
    if (store_op_get(w->sp->store, w->op_id, &op) != 0)
        return;
    struct op_engine *e = w->sp->ops;
    e->dispatching++;
    if (!w->dead)
        w->fn(&op, w->arg);
    if (--e->dispatching == 0)
        watches_sweep(e);
    store_op_clear(&op);
}

struct op_watch *op_watch(struct spaced *sp, const char *op_id, op_watch_fn fn, void *arg)
{
    struct store_op op;
    if (store_op_get(sp->store, op_id, &op) != 0)
        return NULL;
    int st = op_state_parse(op.state);
    store_op_clear(&op);
    struct op_watch *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    snprintf(w->op_id, sizeof w->op_id, "%s", op_id);
    w->fn = fn;
    w->arg = arg;
    w->sp = sp;
    if (st < 0 || op_state_terminal((enum op_state)st)) {
        w->once = evtimer_new(sp->base, watch_once, w);
        struct timeval now = {0, 0};
        if (!w->once || event_add(w->once, &now) != 0) {
            watch_free(w);
            return NULL;
        }
    }
    w->next = sp->ops->watches;
    sp->ops->watches = w;
    return w;
}

void op_unwatch(struct spaced *sp, struct op_watch *w)
{
    struct op_engine *e = sp->ops;
    if (!w)
        return;
    w->dead = true;
    if (w->once)
        event_del(w->once);
    if (e->dispatching == 0)
        watches_sweep(e);
}

/* ---- open list ---------------------------------------------------------------------- */

/* A deep copy of src into dst (heap strings duplicated). -1 when out of memory. */
static int row_copy(struct store_op *dst, const struct store_op *src)
{
    *dst = *src;
    dst->error_message = src->error_message ? strdup(src->error_message) : NULL;
    dst->detail = src->detail ? strdup(src->detail) : NULL;
    if ((src->error_message && !dst->error_message) || (src->detail && !dst->detail)) {
        store_op_clear(dst);
        return -1;
    }
    return 0;
}

static void open_free(struct op_open *o)
{
    store_op_clear(&o->row);
    free(o);
}

static struct op_open *open_find(struct op_engine *e, const char *id)
{
    for (struct op_open *o = e->open; o; o = o->next)
        if (strcmp(o->id, id) == 0)
            return o;
    return NULL;
}

static struct op_open *open_add(struct op_engine *e, const struct store_op *op)
{
    struct op_open *o = calloc(1, sizeof *o);
    if (!o)
        return NULL;
    if (row_copy(&o->row, op) < 0) {
        free(o);
        return NULL;
    }
    snprintf(o->id, sizeof o->id, "%s", op->id);
    snprintf(o->target, sizeof o->target, "%s", op->target);
    int k = op_kind_parse(op->kind);
    o->kind = k < 0 ? OP_KIND_COUNT : (enum op_kind)k;
    struct op_open **pp = &e->open;
    while (*pp)
        pp = &(*pp)->next;
    *pp = o;
    return o;
}

static void open_remove(struct op_engine *e, const char *id)
{
    for (struct op_open **pp = &e->open; *pp; pp = &(*pp)->next)
        if (strcmp((*pp)->id, id) == 0) {
            struct op_open *o = *pp;
            *pp = o->next;
            open_free(o);
            return;
        }
}

/* ---- lifecycle ---------------------------------------------------------------------- */

static void on_pump(evutil_socket_t fd, short what, void *arg);
static void on_tick(evutil_socket_t fd, short what, void *arg);

struct op_engine *op_engine_new(struct spaced *sp)
{
    struct op_engine *e = calloc(1, sizeof *e);
    if (!e)
        return NULL;
    e->sp = sp;
    e->pump_ev = evtimer_new(sp->base, on_pump, sp);
    e->tick = event_new(sp->base, -1, EV_PERSIST, on_tick, sp);
    struct timeval tv = {OP_TICK_MS / 1000, (OP_TICK_MS % 1000) * 1000};
    if (!e->pump_ev || !e->tick || event_add(e->tick, &tv) != 0) {
        op_engine_free(e);
        return NULL;
    }
    return e;
}

void op_engine_free(struct op_engine *e)
{
    if (!e)
        return;
    while (e->open) {
        struct op_open *o = e->open;
        e->open = o->next;
        open_free(o);
    }
    while (e->watches) {
        struct op_watch *w = e->watches;
        e->watches = w->next;
        watch_free(w);
    }
    if (e->pump_ev)
        event_free(e->pump_ev);
    if (e->tick)
        event_free(e->tick);
    free(e);
}

void op_register(struct op_engine *e, enum op_kind kind, const struct op_executor *ex, void *arg)
{
    if ((unsigned)kind >= OP_KIND_COUNT)
        return;
    e->exec[kind].ex = ex;
    e->exec[kind].arg = arg;
}

static int hook_add(struct op_hook *hooks, unsigned *n, op_hook_fn fn, void *arg)
{
    if (*n >= OP_HOOKS_MAX)
        return -1;
    hooks[*n].fn = fn;
    hooks[*n].arg = arg;
    (*n)++;
    return 0;
}

int op_on_recover(struct op_engine *e, op_hook_fn fn, void *arg)
{
    return hook_add(e->recover_hooks, &e->nrecover, fn, arg);
}

int op_on_tick(struct op_engine *e, op_hook_fn fn, void *arg)
{
    return hook_add(e->tick_hooks, &e->ntick, fn, arg);
}

int op_on_change(struct op_engine *e, op_change_fn fn, void *arg)
{
    if (e->nchange >= OP_HOOKS_MAX)
        return -1;
    e->change_hooks[e->nchange].fn = fn;
    e->change_hooks[e->nchange].arg = arg;
    e->nchange++;
    return 0;
}

void op_set_owner(struct op_engine *e, op_owner_fn owns) { e->owns = owns; }

void op_reconcile_soon(struct spaced *sp)
{
    struct timeval now = {0, 0};
    if (sp->ops && sp->ops->pump_ev)
        event_add(sp->ops->pump_ev, &now);
}

static void op_log(const struct store_op *op)
{
    char q[300];
    log_info("operation.state", "op=%s kind=%s target=%s tenant=%s state=%s%s%s%s%s", op->id,
             op->kind, op->target, op->tenant, op->state, op->error_code[0] ? " code=" : "",
             op->error_code, op->error_message ? " msg=" : "",
             op->error_message ? log_quote(op->error_message, q, sizeof q) : "");
}

/* Writes o's row, with in's rows in one transaction when in is given. A progress-only
 * change or the change to `running` need not wait for the disk (store.h: lazy writes):
 * neither promises anything a crash could take back. */
static int op_put(struct spaced *sp, struct op_open *o, const struct op_intent *in)
{
    if (!in || !in->write) {
        bool lazy = !o->done && (!o->state_changed ||
                                 strcmp(o->row.state, op_state_name(OP_RUNNING)) == 0);
        return lazy ? store_op_put_lazy(sp->store, &o->row) : store_op_put(sp->store, &o->row);
    }
    struct spaced_err werr = {0};
    if (store_begin(sp->store) != 0)
        return -1;
    if (in->write(sp, &o->row, in->arg, &werr) != 0 || store_op_put(sp->store, &o->row) != 0 ||
        store_commit(sp->store) != 0) {
        store_rollback(sp->store);
        return -1;
    }
    return 0;
}

/* Writes o's row (and in's, see op_put). Stored: logs a state change, tells the watchers,
 * and a terminal op leaves the queue (o is freed). Not stored: o stays unsaved for
 * op_retry; the first failure of a change is logged, not every retry. Returns 0 when
 * stored. */
static int op_write(struct spaced *sp, struct op_open *o, const struct op_intent *in)
{
    struct op_engine *e = sp->ops;
    if (op_put(sp, o, in) != 0) {
        if (!o->unsaved) {
            char q[300];
            log_warn("operation.unsaved", "op=%s state=%s msg=%s retry=until_stored", o->id,
                     o->row.state, log_quote(store_errmsg(sp->store), q, sizeof q));
            o->unsaved_ms = spaced_now_ms();
        }
        o->unsaved = true;
        spaced_retry_failed(&sp->store_retry);
        return -1;
    }
    spaced_retry_ok(&sp->store_retry);
    if (o->unsaved)
        log_info("operation.saved", "op=%s state=%s after_ms=%lld", o->id, o->row.state,
                 (long long)(spaced_now_ms() - o->unsaved_ms));
    o->unsaved = false;
    bool changed = o->state_changed;
    o->state_changed = false;
    /* The watchers get a row of their own: a callback may finish this op or free o. A
     * terminal op leaves the queue and hands its row over; another's is copied (out of
     * memory: the watchers miss this change, they get the next one). */
    struct store_op row;
    if (o->done) {
        row = o->row;
        memset(&o->row, 0, sizeof o->row);
        open_remove(e, row.id);
        metrics_op_done(sp->metrics, op_kind_parse(row.kind), op_state_parse(row.state),
                        row.finished_ms - row.created_ms);
        op_reconcile_soon(sp);
    } else if (row_copy(&row, &o->row) < 0) {
        return 0;
    }
    if (changed)
        op_log(&row);
    notify(sp, &row);
    store_op_clear(&row);
    return 0;
}

/* Writes o's changed row now (with in's rows, see op_put), or leaves it (o's row only)
 * to op_retry while the store is failing (another write failed and the backoff has not
 * run out, or o's own did) or while a record that must be stored first waits (spaced.h:
 * spaced_retry). Returns 0 when written now. */
static int op_save(struct spaced *sp, struct op_open *o, const struct op_intent *in)
{
    if (o->unsaved || !spaced_retry_ops_due(&sp->store_retry)) {
        if (!o->unsaved) {
            log_warn("operation.unsaved", "op=%s state=%s msg=\"the store refused a write: "
                     "waiting for the retry\" retry=until_stored", o->id, o->row.state);
            o->unsaved_ms = spaced_now_ms();
        }
        o->unsaved = true;
        return -1;
    }
    return op_write(sp, o, in);
}

/* From the tick: writes the unsaved rows in queue order, stopping at the first failure
 * (the store is still down) until the backoff runs out, and not before the records that
 * come first are stored. Rescans after each write: its watchers may have finished (and
 * freed) other ops. */
static void op_retry(struct spaced *sp)
{
    struct op_engine *e = sp->ops;
    while (spaced_retry_ops_due(&sp->store_retry)) {
        struct op_open *o = e->open;
        while (o && !o->unsaved)
            o = o->next;
        if (!o || op_write(sp, o, NULL) != 0)
            return;
    }
}

void op_finish(struct spaced *sp, const char *op_id, bool ok, const char *code, const char *msg)
{
    op_finish_with(sp, op_id, ok, code, msg, NULL);
}

int op_finish_with(struct spaced *sp, const char *op_id, bool ok, const char *code,
                   const char *msg, const struct op_intent *in)
{
    struct op_open *o = open_find(sp->ops, op_id);
    if (!o) {
        /* Not queued here (e.g. already terminal): take the stored row. */
        struct store_op op;
        if (store_op_get(sp->store, op_id, &op) != 0) {
            log_error("store.error", "op=%s msg=op_finish: %s", op_id, store_errmsg(sp->store));
            return -1;
        }
        int st = op_state_parse(op.state);
        if (!(st >= 0 && op_state_terminal((enum op_state)st)))
            o = open_add(sp->ops, &op);
        store_op_clear(&op);
        if (!o)
            return -1;
    }
    if (o->done)
        return -1; /* terminal states never change */
    struct store_op *op = &o->row;
    enum op_state final = ok ? OP_SUCCEEDED : (code && strcmp(code, "canceled") == 0 ? OP_CANCELED : OP_FAILED);
    snprintf(op->state, sizeof op->state, "%s", op_state_name(final));
    snprintf(op->error_code, sizeof op->error_code, "%s", ok ? "" : (code ? code : "failed"));
    free(op->error_message);
    op->error_message = ok ? NULL : strdup(msg ? msg : "");
    if (ok)
        op->progress = 100;
    op->finished_ms = spaced_now_ms();
    o->done = o->running = o->state_changed = true;
    return op_save(sp, o, in);
}

void op_progress(struct spaced *sp, const char *op_id, int percent, const char *detail)
{
    struct op_open *o = open_find(sp->ops, op_id);
    if (!o || o->done)
        return;
    o->row.progress = percent < 0 ? 0 : percent > 100 ? 100 : percent;
    free(o->row.detail);
    o->row.detail = detail ? strdup(detail) : NULL;
    op_save(sp, o, NULL);
}

/* Marks the op running and hands it to the executor of its kind. The executor runs even
 * when the running state could not be written yet (it is retried; after a crash the op
 * is found pending or running and carried out again, its steps being idempotent). */
static void op_begin(struct spaced *sp, struct op_open *o)
{
    struct op_engine *e = sp->ops;
    struct store_op op;
    o->running = o->state_changed = true;
    snprintf(o->row.state, sizeof o->row.state, "%s", op_state_name(OP_RUNNING));
    if (!o->row.started_ms)
        o->row.started_ms = spaced_now_ms();
    enum op_kind kind = o->kind;
    /* The executor gets a copy: it may finish the op at once, which can free o. */
    if (row_copy(&op, &o->row) < 0) {
        op_finish(sp, o->id, false, "internal", "out of memory");
        return;
    }
    op_save(sp, o, NULL);
    if (kind >= OP_KIND_COUNT || !e->exec[kind].ex)
        op_finish(sp, op.id, false, "internal", "unknown operation kind");
    else
        e->exec[kind].ex->run(sp, &op, e->exec[kind].arg);
    store_op_clear(&op);
}

static bool target_busy(struct op_engine *e, const struct op_open *o)
{
    if (o->kind >= OP_KIND_COUNT || !e->exec[o->kind].ex || !e->exec[o->kind].ex->busy)
        return false;
    return e->exec[o->kind].ex->busy(e->sp, o->target, e->exec[o->kind].arg);
}

/* Starts every op whose target is idle and which is the oldest open op of its target.
 * Restarts the scan after each start: starting may finish ops synchronously. */
static void op_pump(struct spaced *sp)
{
    struct op_engine *e = sp->ops;
    for (int guard = 0; guard < 100000; guard++) {
        struct op_open *pick = NULL;
        for (struct op_open *o = e->open; o && !pick; o = o->next) {
            if (o->running || o->done)
                continue;
            bool first = true;
            for (struct op_open *p = e->open; p != o; p = p->next)
                if (strcmp(p->target, o->target) == 0)
                    first = false;
            if (first && !target_busy(e, o))
                pick = o;
        }
        if (!pick)
            return;
        op_begin(sp, pick);
    }
}

/* ---- submitting --------------------------------------------------------------------- */

static int new_op(struct op_engine *e, struct store_op *op, const char *tenant, enum op_kind kind,
                  const char *target, struct spaced_err *err)
{
    memset(op, 0, sizeof *op);
    if (spaced_random_id(op->id, "op", 16) < 0)
        return spaced_err_set(err, 500, "internal", "random source failed");
    snprintf(op->tenant, sizeof op->tenant, "%s", tenant);
    snprintf(op->kind, sizeof op->kind, "%s", op_kind_name(kind));
    snprintf(op->target, sizeof op->target, "%s", target);
    snprintf(op->state, sizeof op->state, "%s", op_state_name(OP_PENDING));
    op->created_ms = spaced_now_ms();
    op->seq = ++e->seq; /* ties of created_ms keep submission order after a restart */
    return 0;
}

static int store_failed(struct spaced *sp, struct spaced_err *err)
{
    store_rollback(sp->store);
    log_error("store.error", "msg=%s", store_errmsg(sp->store));
    return spaced_err_store(err, sp->store, "recording the operation");
}

int op_idem_replay(struct spaced *sp, const char *tenant, const char *idem_key,
                   const char *body_hash, struct store_op *out, struct spaced_err *err)
{
    memset(out, 0, sizeof *out);
    if (!idem_key || !idem_key[0])
        return 0;
    if (strlen(idem_key) >= sizeof out->idem_key)
        return spaced_err_set(err, 400, "invalid_request",
                              "Idempotency-Key is longer than %zu bytes", sizeof out->idem_key - 1);
    int rc = store_op_by_idem(sp->store, tenant, idem_key, out);
    if (rc == STORE_NOTFOUND)
        return 0;
    if (rc != 0)
        return store_failed(sp, err);
    if (strcmp(out->body_hash, body_hash ? body_hash : "") != 0) {
        store_op_clear(out);
        return spaced_err_set(err, 422, "idempotency_mismatch",
                              "Idempotency-Key \"%.64s\" was already used with a different body",
                              idem_key);
    }
    return 1;
}

/* Cancels the still-pending ops of a target (inside the caller's transaction). */
static int cancel_pending(struct spaced *sp, const struct store_op *by)
{
    for (struct op_open *o = sp->ops->open; o; o = o->next) {
        if (o->running || o->done || strcmp(o->target, by->target) != 0)
            continue;
        struct store_op op;
        if (row_copy(&op, &o->row) < 0)
            return -1;
        snprintf(op.state, sizeof op.state, "%s", op_state_name(OP_CANCELED));
        snprintf(op.error_code, sizeof op.error_code, "canceled");
        free(op.error_message);
        char msg[128];
        snprintf(msg, sizeof msg, "superseded by %s operation %s", by->kind, by->id);
        op.error_message = strdup(msg);
        op.finished_ms = spaced_now_ms();
        int rc = store_op_put(sp->store, &op);
        store_op_clear(&op);
        if (rc != 0)
            return -1;
    }
    return 0;
}

/* After the cancel transaction committed: drop the canceled ops and tell watchers. */
static void cancel_pending_done(struct spaced *sp, const char *target)
{
    struct op_open *o = sp->ops->open, *next;
    for (; o; o = next) {
        next = o->next;
        if (o->running || o->done || strcmp(o->target, target) != 0)
            continue;
        struct store_op op;
        if (store_op_get(sp->store, o->id, &op) == 0) {
            notify(sp, &op);
            op_log(&op);
            metrics_op_done(sp->metrics, o->kind, OP_CANCELED, op.finished_ms - op.created_ms);
            store_op_clear(&op);
        }
        open_remove(sp->ops, o->id);
    }
}

int op_enqueue(struct spaced *sp, const char *tenant, enum op_kind kind, const char *target,
               const struct op_intent *in, struct store_op *out, struct spaced_err *err)
{
    if (new_op(sp->ops, out, tenant, kind, target, err) < 0)
        return -1;
    snprintf(out->idem_key, sizeof out->idem_key, "%s", in && in->idem_key ? in->idem_key : "");
    snprintf(out->body_hash, sizeof out->body_hash, "%s", in && in->body_hash ? in->body_hash : "");
    if (store_begin(sp->store) != 0)
        return store_failed(sp, err);
    if (in && in->write) {
        struct spaced_err werr = {0};
        if (in->write(sp, out, in->arg, &werr) != 0) {
            if (werr.status == 0)
                return store_failed(sp, err);
            store_rollback(sp->store);
            if (err)
                *err = werr;
            return -1;
        }
    }
    bool supersede = in && in->supersede;
    if ((supersede && cancel_pending(sp, out) != 0) || store_op_put(sp->store, out) != 0 ||
        store_commit(sp->store) != 0)
        return store_failed(sp, err);
    if (supersede)
        cancel_pending_done(sp, target);
    if (!open_add(sp->ops, out))
        return spaced_err_set(err, 500, "internal", "out of memory");
    op_log(out);
    notify(sp, out); /* no watch can name it yet: this tells the on_change hooks */
    op_reconcile_soon(sp);
    return 0;
}

bool op_target_open(struct spaced *sp, const char *target)
{
    for (struct op_open *o = sp->ops->open; o; o = o->next)
        if (strcmp(o->target, target) == 0)
            return true;
    return false;
}

/* ---- recovery and the tick ---------------------------------------------------------- */

static int recover_op(const struct store_op *op, void *arg)
{
    struct spaced *sp = arg;
    if (sp->ops->owns && !sp->ops->owns(sp, op))
        return 0; /* e.g. another node daemon's (--role=node) */
    struct op_open *o = open_add(sp->ops, op);
    if (!o)
        return 1;
    log_info("operation.recover", "op=%s kind=%s target=%s was=%s action=%s", op->id, op->kind,
             op->target, op->state, strcmp(op->state, "running") == 0 ? "resume" : "queue");
    return 0;
}

/* Whether the executor of an open op found at startup can carry it out again. */
static bool recoverable(struct spaced *sp, const struct op_open *o)
{
    struct op_engine *e = sp->ops;
    if (o->kind >= OP_KIND_COUNT || !e->exec[o->kind].ex)
        return false;
    if (!e->exec[o->kind].ex->resumable)
        return true;
    return e->exec[o->kind].ex->resumable(sp, &o->row, e->exec[o->kind].arg);
}

void op_engine_recover(struct spaced *sp)
{
    struct op_engine *e = sp->ops;
    for (unsigned i = 0; i < e->nrecover; i++)
        e->recover_hooks[i].fn(sp, e->recover_hooks[i].arg);
    if (store_op_each_open(sp->store, recover_op, sp) != 0)
        log_error("store.error", "msg=recovering operations: %s", store_errmsg(sp->store));
    struct op_open *o = e->open, *next;
    for (; o; o = next) {
        next = o->next;
        if (!recoverable(sp, o))
            op_finish(sp, o->id, false, "interrupted",
                      "spaced restarted while this operation was running; submit it again");
    }
    op_reconcile_soon(sp);
}

static void on_pump(evutil_socket_t fd, short what, void *arg)
{
    struct spaced *sp = arg;
    (void)fd;
    (void)what;
    op_pump(sp);
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    struct spaced *sp = arg;
    struct op_engine *e = sp->ops;
    (void)fd;
    (void)what;
    for (unsigned i = 0; i < e->ntick; i++)
        e->tick_hooks[i].fn(sp, e->tick_hooks[i].arg);
    store_tick(sp->store); /* the store may have room again before the retries */
    op_retry(sp); /* after the hooks: the sandbox rows an outcome goes with come first */
    op_pump(sp);
}
