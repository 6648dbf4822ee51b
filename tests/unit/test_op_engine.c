/* Unit tests for the operation engine (ops/op.h) with a fake executor, a real SQLite
 * store in a temp dir and no VM: FIFO per target and parallelism across targets, busy
 * targets deferred, intent and op row in one transaction (rolled back together),
 * idempotency replay and mismatch, terminal states persisted and final, a delete
 * superseding pending ops, watches, the on_change hook, the tick hook, recovery after the daemon was
 * killed with SIGKILL mid-operation (pending ops resume in order, a running op is resumed
 * or failed "interrupted" as its executor says, ops of another owner left alone), and a
 * store that refuses writes for a while (another connection holds SQLite's write lock):
 * the op's outcome is kept and retried until stored, its target's queue waits for it,
 * and it is not stored before a record refused earlier that must come first. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <event2/event.h>

#include "daemon/metrics/metrics.h"
#include "daemon/ops/op.h"
#include "daemon/spaced.h"
#include "daemon/store/store.h"
#include "store_lock.h"

#define CALLS_MAX 32

/* What the fake executor saw, in order. */
struct fake {
    struct {
        char id[STORE_ID_MAX];
        char target[STORE_ID_MAX];
        char state[STORE_STATE_MAX]; /* the op's state when run was called */
        int seq;
    } runs[CALLS_MAX];
    int nruns;
    char busy[STORE_ID_MAX];   /* a target the executor says is busy, "" = none */
    char resumed_no[CALLS_MAX][STORE_ID_MAX]; /* ops resumable() was asked about */
    int nresumable;
    int seq;                   /* counts every callback, to check their order */
    int recover_seq;           /* seq at which the on_recover hook ran, 0 = never */
    int ticks;
    bool *record;              /* a record that comes before outcomes, unsaved while true */
    bool store_record;         /* the tick hook stores it (as sbx_table_retry would) */
};

struct fx {
    char dir[64];
    char db[96];
    struct spaced sp;
    struct fake fake;
};

static void fake_run(struct spaced *sp, const struct store_op *op, void *arg)
{
    struct fake *f = arg;
    (void)sp;
    assert_true(f->nruns < CALLS_MAX);
    snprintf(f->runs[f->nruns].id, sizeof f->runs[0].id, "%s", op->id);
    snprintf(f->runs[f->nruns].target, sizeof f->runs[0].target, "%s", op->target);
    snprintf(f->runs[f->nruns].state, sizeof f->runs[0].state, "%s", op->state);
    f->runs[f->nruns].seq = ++f->seq;
    f->nruns++;
}

static bool fake_busy(struct spaced *sp, const char *target, void *arg)
{
    struct fake *f = arg;
    (void)sp;
    return strcmp(f->busy, target) == 0;
}

/* Like a template build: never resumed after a restart. */
static bool fake_not_resumable(struct spaced *sp, const struct store_op *op, void *arg)
{
    struct fake *f = arg;
    (void)sp;
    assert_true(f->nresumable < CALLS_MAX);
    snprintf(f->resumed_no[f->nresumable++], STORE_ID_MAX, "%s", op->id);
    f->seq++;
    return false;
}

static const struct op_executor fake_ex = {.run = fake_run, .busy = fake_busy};
static const struct op_executor fake_build_ex = {.run = fake_run, .resumable = fake_not_resumable};

static void fake_on_recover(struct spaced *sp, void *arg)
{
    struct fake *f = arg;
    (void)sp;
    f->recover_seq = ++f->seq;
}

static void fake_on_tick(struct spaced *sp, void *arg)
{
    struct fake *f = arg;
    f->ticks++;
    if (f->record && f->store_record)
        spaced_retry_mark(&sp->store_retry, f->record, false);
}

/* Owns every op except those whose target starts with "other". */
static bool fake_owns(struct spaced *sp, const struct store_op *op)
{
    (void)sp;
    return strncmp(op->target, "other", 5) != 0;
}

/* A daemon's worth of engine: loop, store, metrics, engine, the fake registered for
 * start/stop/delete and (not resumable) template_build. */
static void fx_start(struct fx *f)
{
    char err[256];
    memset(&f->sp, 0, sizeof f->sp);
    memset(&f->fake, 0, sizeof f->fake);
    f->sp.base = event_base_new();
    assert_non_null(f->sp.base);
    f->sp.store = store_open(f->db, err, sizeof err);
    if (!f->sp.store)
        fail_msg("store_open: %s", err);
    f->sp.metrics = metrics_new();
    assert_non_null(f->sp.metrics);
    f->sp.ops = op_engine_new(&f->sp);
    assert_non_null(f->sp.ops);
    op_register(f->sp.ops, OP_START, &fake_ex, &f->fake);
    op_register(f->sp.ops, OP_STOP, &fake_ex, &f->fake);
    op_register(f->sp.ops, OP_DELETE, &fake_ex, &f->fake);
    op_register(f->sp.ops, OP_TEMPLATE_BUILD, &fake_build_ex, &f->fake);
    assert_int_equal(op_on_recover(f->sp.ops, fake_on_recover, &f->fake), 0);
    assert_int_equal(op_on_tick(f->sp.ops, fake_on_tick, &f->fake), 0);
    op_set_owner(f->sp.ops, fake_owns);
}

static void fx_stop(struct fx *f)
{
    op_engine_free(f->sp.ops);
    metrics_free(f->sp.metrics);
    store_close(f->sp.store);
    event_base_free(f->sp.base);
    memset(&f->sp, 0, sizeof f->sp);
}

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof *f);
    if (!f)
        return -1;
    snprintf(f->dir, sizeof f->dir, "/tmp/test_op_engine.XXXXXX");
    if (!mkdtemp(f->dir))
        return -1;
    snprintf(f->db, sizeof f->db, "%s/space.db", f->dir);
    fx_start(f);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;
    if (f->sp.ops)
        fx_stop(f);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", f->dir);
    int rc = system(cmd);
    free(f);
    return rc == 0 ? 0 : -1;
}

/* Lets the loop run what is due now (the deferred pump, one-shot watch events). */
static void turn(struct fx *f)
{
    for (int i = 0; i < 3; i++)
        event_base_loop(f->sp.base, EVLOOP_NONBLOCK);
}

static void submit(struct fx *f, enum op_kind kind, const char *target, struct store_op *out)
{
    struct spaced_err err;
    if (op_enqueue(&f->sp, "tn1", kind, target, NULL, out, &err) != 0)
        fail_msg("op_enqueue: %d %s %s", err.status, err.code, err.message);
    assert_string_equal(out->state, "pending");
}

static void assert_op_state(struct fx *f, const char *id, const char *state)
{
    struct store_op op;
    assert_int_equal(store_op_get(f->sp.store, id, &op), 0);
    assert_string_equal(op.state, state);
    store_op_clear(&op);
}

static void test_fifo_per_target_parallel_across(void **state)
{
    struct fx *f = *state;
    struct store_op a1, a2, b1;
    submit(f, OP_START, "sbA", &a1);
    submit(f, OP_STOP, "sbA", &a2);
    submit(f, OP_START, "sbB", &b1);
    assert_int_equal(f->fake.nruns, 0); /* nothing runs inside the submit */
    turn(f);
    /* A's first op and B's op run; A's second waits for the first. */
    assert_int_equal(f->fake.nruns, 2);
    assert_string_equal(f->fake.runs[0].id, a1.id);
    assert_string_equal(f->fake.runs[0].state, "running");
    assert_string_equal(f->fake.runs[1].id, b1.id);
    assert_op_state(f, a1.id, "running");
    assert_op_state(f, a2.id, "pending");
    assert_true(op_target_open(&f->sp, "sbA"));

    op_finish(&f->sp, a1.id, true, NULL, NULL);
    turn(f);
    assert_int_equal(f->fake.nruns, 3);
    assert_string_equal(f->fake.runs[2].id, a2.id);

    struct store_op done;
    assert_int_equal(store_op_get(f->sp.store, a1.id, &done), 0);
    assert_string_equal(done.state, "succeeded");
    assert_int_equal(done.progress, 100);
    assert_true(done.started_ms > 0 && done.finished_ms >= done.started_ms);
    store_op_clear(&done);
    op_finish(&f->sp, a2.id, true, NULL, NULL);
    op_finish(&f->sp, b1.id, true, NULL, NULL);
    assert_false(op_target_open(&f->sp, "sbA"));
    assert_false(op_target_open(&f->sp, "sbB"));
}

static void test_busy_target_deferred(void **state)
{
    struct fx *f = *state;
    snprintf(f->fake.busy, sizeof f->fake.busy, "sbA");
    struct store_op a, b;
    submit(f, OP_START, "sbA", &a);
    submit(f, OP_START, "sbB", &b);
    turn(f);
    assert_int_equal(f->fake.nruns, 1); /* only B: A's executor is busy */
    assert_string_equal(f->fake.runs[0].id, b.id);
    assert_op_state(f, a.id, "pending");
    f->fake.busy[0] = '\0';
    op_reconcile_soon(&f->sp);
    turn(f);
    assert_int_equal(f->fake.nruns, 2);
    assert_string_equal(f->fake.runs[1].id, a.id);
}

/* The caller's row and the op row: both or neither. */
struct intent_arg {
    const char *name;
    int fail_status; /* 0: succeed; -1: fail as a store failure; else fail with it */
};

static int write_tpl(struct spaced *sp, const struct store_op *op, void *arg, struct spaced_err *err)
{
    struct intent_arg *ia = arg;
    struct store_tpl t = {.created_ms = op->created_ms, .updated_ms = op->created_ms};
    snprintf(t.name, sizeof t.name, "%s", ia->name);
    snprintf(t.tenant, sizeof t.tenant, "%s", op->tenant);
    snprintf(t.state, sizeof t.state, "building");
    snprintf(t.dir, sizeof t.dir, "/nonexistent/%s", ia->name);
    if (store_tpl_put(sp->store, &t) != 0)
        return -1;
    if (ia->fail_status > 0)
        return spaced_err_set(err, ia->fail_status, "quota_exceeded", "over quota");
    return ia->fail_status < 0 ? -1 : 0;
}

static int count_open(const struct store_op *op, void *arg)
{
    (void)op;
    (*(int *)arg)++;
    return 0;
}

static void test_intent_with_op_in_one_transaction(void **state)
{
    struct fx *f = *state;
    struct store_op op;
    struct spaced_err err;
    struct store_tpl t;

    struct intent_arg refused = {"t-refused", 403};
    struct op_intent in = {.write = write_tpl, .arg = &refused};
    assert_int_equal(op_enqueue(&f->sp, "tn1", OP_TEMPLATE_BUILD, "t-refused", &in, &op, &err), -1);
    assert_int_equal(err.status, 403);
    assert_string_equal(err.code, "quota_exceeded");
    assert_int_equal(store_tpl_get(f->sp.store, "t-refused", &t), STORE_NOTFOUND);

    struct intent_arg broken = {"t-broken", -1};
    in.arg = &broken;
    assert_int_equal(op_enqueue(&f->sp, "tn1", OP_TEMPLATE_BUILD, "t-broken", &in, &op, &err), -1);
    assert_int_equal(err.status, 503);
    assert_string_equal(err.code, "store_unavailable");
    assert_int_equal(store_tpl_get(f->sp.store, "t-broken", &t), STORE_NOTFOUND);

    int n = 0;
    assert_int_equal(store_op_each_open(f->sp.store, count_open, &n), 0);
    assert_int_equal(n, 0); /* neither refusal left an op row */
    assert_false(op_target_open(&f->sp, "t-refused"));

    struct intent_arg good = {"t-good", 0};
    in.arg = &good;
    assert_int_equal(op_enqueue(&f->sp, "tn1", OP_TEMPLATE_BUILD, "t-good", &in, &op, &err), 0);
    assert_int_equal(store_tpl_get(f->sp.store, "t-good", &t), 0);
    assert_int_equal(t.created_ms, op.created_ms);
    store_tpl_clear(&t);
    assert_op_state(f, op.id, "pending");
    assert_true(op_target_open(&f->sp, "t-good"));
}

static void test_idempotency(void **state)
{
    struct fx *f = *state;
    struct store_op orig, again;
    struct spaced_err err;
    const char *hash = "aaaa", *other = "bbbb";
    assert_int_equal(op_idem_replay(&f->sp, "tn1", "key-1", hash, &again, &err), 0);
    assert_int_equal(op_idem_replay(&f->sp, "tn1", NULL, hash, &again, &err), 0);
    struct op_intent in = {.idem_key = "key-1", .body_hash = hash};
    assert_int_equal(op_enqueue(&f->sp, "tn1", OP_START, "sbA", &in, &orig, &err), 0);

    /* the same key and body: the original op, nothing new */
    assert_int_equal(op_idem_replay(&f->sp, "tn1", "key-1", hash, &again, &err), 1);
    assert_string_equal(again.id, orig.id);
    store_op_clear(&again);
    /* another tenant's key space is its own */
    assert_int_equal(op_idem_replay(&f->sp, "tn2", "key-1", other, &again, &err), 0);
    /* the same key, another body */
    assert_int_equal(op_idem_replay(&f->sp, "tn1", "key-1", other, &again, &err), -1);
    assert_int_equal(err.status, 422);
    assert_string_equal(err.code, "idempotency_mismatch");
    assert_non_null(strstr(err.message, "key-1"));
    /* longer than the store keeps */
    char longkey[200];
    memset(longkey, 'k', sizeof longkey - 1);
    longkey[sizeof longkey - 1] = '\0';
    assert_int_equal(op_idem_replay(&f->sp, "tn1", longkey, hash, &again, &err), -1);
    assert_int_equal(err.status, 400);
    assert_string_equal(err.code, "invalid_request");
}

static void test_terminal_states_are_final(void **state)
{
    struct fx *f = *state;
    struct store_op a, b;
    submit(f, OP_START, "sbA", &a);
    submit(f, OP_START, "sbB", &b);
    turn(f);
    op_finish(&f->sp, a.id, false, "vm_failed", "the VM did not boot");
    op_finish(&f->sp, a.id, true, NULL, NULL); /* too late: stays failed */
    struct store_op got;
    assert_int_equal(store_op_get(f->sp.store, a.id, &got), 0);
    assert_string_equal(got.state, "failed");
    assert_string_equal(got.error_code, "vm_failed");
    assert_string_equal(got.error_message, "the VM did not boot");
    store_op_clear(&got);

    op_finish(&f->sp, b.id, false, "canceled", "stopped by the owner");
    assert_op_state(f, b.id, "canceled");
    op_finish(&f->sp, b.id, false, "vm_failed", "x");
    assert_op_state(f, b.id, "canceled");
}

static void test_supersede_cancels_pending(void **state)
{
    struct fx *f = *state;
    struct store_op a1, a2, a3, del;
    submit(f, OP_START, "sbA", &a1);
    turn(f); /* a1 running */
    submit(f, OP_STOP, "sbA", &a2);
    submit(f, OP_START, "sbA", &a3);
    struct op_intent in = {.supersede = true};
    struct spaced_err err;
    assert_int_equal(op_enqueue(&f->sp, "tn1", OP_DELETE, "sbA", &in, &del, &err), 0);
    assert_op_state(f, a1.id, "running"); /* a running op is left to finish */
    char want[128];
    snprintf(want, sizeof want, "superseded by delete operation %s", del.id);
    const char *ids[] = {a2.id, a3.id};
    for (int i = 0; i < 2; i++) {
        struct store_op got;
        assert_int_equal(store_op_get(f->sp.store, ids[i], &got), 0);
        assert_string_equal(got.state, "canceled");
        assert_string_equal(got.error_code, "canceled");
        assert_string_equal(got.error_message, want);
        store_op_clear(&got);
    }
    op_finish(&f->sp, a1.id, true, NULL, NULL);
    turn(f);
    assert_int_equal(f->fake.nruns, 2); /* a1, then the delete: never a2 or a3 */
    assert_string_equal(f->fake.runs[1].id, del.id);
}

static void test_kind_without_executor(void **state)
{
    struct fx *f = *state;
    struct store_op op;
    submit(f, OP_PAUSE, "sbA", &op);
    turn(f);
    assert_int_equal(f->fake.nruns, 0);
    struct store_op got;
    assert_int_equal(store_op_get(f->sp.store, op.id, &got), 0);
    assert_string_equal(got.state, "failed");
    assert_string_equal(got.error_code, "internal");
    store_op_clear(&got);
}

struct seen {
    int calls;
    char last_state[STORE_STATE_MAX];
    int last_progress;
    struct op_watch *self; /* unwatch from inside the callback when terminal */
    struct spaced *sp;
};

static void on_change(const struct store_op *op, void *arg)
{
    struct seen *s = arg;
    s->calls++;
    snprintf(s->last_state, sizeof s->last_state, "%s", op->state);
    s->last_progress = op->progress;
    int st = op_state_parse(op->state);
    if (s->self && st >= 0 && op_state_terminal((enum op_state)st)) {
        op_unwatch(s->sp, s->self);
        s->self = NULL;
    }
}

static void test_watches(void **state)
{
    struct fx *f = *state;
    struct store_op op;
    submit(f, OP_START, "sbA", &op);
    struct seen s = {.sp = &f->sp};
    s.self = op_watch(&f->sp, op.id, on_change, &s);
    assert_non_null(s.self);
    assert_null(op_watch(&f->sp, "op-missing", on_change, &s));
    turn(f); /* -> running */
    assert_int_equal(s.calls, 1);
    assert_string_equal(s.last_state, "running");
    op_progress(&f->sp, op.id, 40, "halfway");
    assert_int_equal(s.calls, 2);
    assert_int_equal(s.last_progress, 40);
    op_finish(&f->sp, op.id, true, NULL, NULL);
    assert_int_equal(s.calls, 3);
    assert_string_equal(s.last_state, "succeeded");
    assert_null(s.self); /* unwatched itself inside the callback */
    op_progress(&f->sp, op.id, 50, NULL);
    assert_int_equal(s.calls, 3);

    /* An op already terminal: one call, from the loop, never inside op_watch. */
    struct seen late = {.sp = &f->sp};
    struct op_watch *w = op_watch(&f->sp, op.id, on_change, &late);
    assert_non_null(w);
    assert_int_equal(late.calls, 0);
    turn(f);
    assert_int_equal(late.calls, 1);
    assert_string_equal(late.last_state, "succeeded");
    op_unwatch(&f->sp, w);
}

/* What the on_change hook saw: "<op id> <state>" per call, in order. */
struct changes {
    char seen[CALLS_MAX][STORE_ID_MAX + STORE_STATE_MAX + 2];
    int n;
};

static void on_any_change(struct spaced *sp, const struct store_op *op, void *arg)
{
    struct changes *c = arg;
    (void)sp;
    assert_true(c->n < CALLS_MAX);
    snprintf(c->seen[c->n++], sizeof c->seen[0], "%s %s", op->id, op->state);
}

static void assert_change(const struct changes *c, int i, const char *id, const char *state)
{
    char want[sizeof c->seen[0]];
    snprintf(want, sizeof want, "%s %s", id, state);
    assert_true(i < c->n);
    assert_string_equal(c->seen[i], want);
}

/* op_on_change hears of every stored change of every op, the enqueue included, a
 * supersede's cancels too, and nothing when a watch of a terminal op is served. */
static void test_change_hook(void **state)
{
    struct fx *f = *state;
    struct changes c = {0};
    assert_int_equal(op_on_change(f->sp.ops, on_any_change, &c), 0);
    struct store_op a, b, del;
    submit(f, OP_START, "sbA", &a);
    assert_int_equal(c.n, 1);
    assert_change(&c, 0, a.id, "pending");
    turn(f);
    assert_change(&c, 1, a.id, "running");
    op_progress(&f->sp, a.id, 40, "halfway");
    assert_change(&c, 2, a.id, "running");
    submit(f, OP_STOP, "sbA", &b);
    assert_change(&c, 3, b.id, "pending");
    struct op_intent in = {.supersede = true};
    struct spaced_err err;
    assert_int_equal(op_enqueue(&f->sp, "tn1", OP_DELETE, "sbA", &in, &del, &err), 0);
    assert_change(&c, 4, b.id, "canceled");
    assert_change(&c, 5, del.id, "pending");
    op_finish(&f->sp, a.id, true, NULL, NULL);
    assert_change(&c, 6, a.id, "succeeded");
    assert_int_equal(c.n, 7);
    struct seen late = {.sp = &f->sp};
    struct op_watch *w = op_watch(&f->sp, a.id, on_change, &late);
    turn(f); /* the late watch's call, and the delete starts running */
    assert_int_equal(late.calls, 1);
    assert_int_equal(c.n, 8);
    assert_change(&c, 7, del.id, "running");
    op_unwatch(&f->sp, w);
}

static void stop_loop(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    event_base_loopbreak(arg);
}

static void test_tick_runs_hooks_then_pumps(void **state)
{
    struct fx *f = *state;
    snprintf(f->fake.busy, sizeof f->fake.busy, "sbA");
    struct store_op op;
    submit(f, OP_START, "sbA", &op);
    turn(f);
    assert_int_equal(f->fake.nruns, 0);
    f->fake.busy[0] = '\0'; /* no poke: only the tick can start it */
    struct event *stop = evtimer_new(f->sp.base, stop_loop, f->sp.base);
    struct timeval tv = {OP_TICK_MS / 1000, (OP_TICK_MS % 1000) * 1000 + 300000};
    assert_int_equal(event_add(stop, &tv), 0);
    event_base_dispatch(f->sp.base);
    event_free(stop);
    assert_true(f->fake.ticks >= 1);
    assert_int_equal(f->fake.nruns, 1);
}

/* The child is a daemon killed with SIGKILL mid-work: op1 of sbA running, op2 and op3
 * of sbA pending, sbB's op pending behind a busy executor, a template build running,
 * and an op on another node's target. */
static void crash_child(struct fx *f, void *out)
{
    char (*ids)[STORE_ID_MAX] = out;
    struct store_op op;
    snprintf(f->fake.busy, sizeof f->fake.busy, "sbB");
    submit(f, OP_START, "sbA", &op);
    snprintf(ids[0], STORE_ID_MAX, "%s", op.id);
    submit(f, OP_TEMPLATE_BUILD, "tpl-x", &op);
    snprintf(ids[1], STORE_ID_MAX, "%s", op.id);
    submit(f, OP_START, "sbB", &op);
    snprintf(ids[2], STORE_ID_MAX, "%s", op.id);
    turn(f); /* sbA's op and the build run; sbB waits */
    submit(f, OP_STOP, "sbA", &op);
    snprintf(ids[3], STORE_ID_MAX, "%s", op.id);
    submit(f, OP_DELETE, "sbA", &op);
    snprintf(ids[4], STORE_ID_MAX, "%s", op.id);
    submit(f, OP_START, "other-sb", &op);
    snprintf(ids[5], STORE_ID_MAX, "%s", op.id);
}

/* Runs work(f, out) in a child daemon on the same store, which sends the len bytes of
 * out back through a pipe and is killed with SIGKILL; returns with out filled and this
 * process's engine started again on the store the child left. */
static void crash_after(struct fx *f, void (*work)(struct fx *f, void *out), void *out, size_t len)
{
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    fx_stop(f); /* the child opens its own engine on the same store */
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        fx_start(f);
        work(f, out);
        if (write(fds[1], out, len) != (ssize_t)len)
            _exit(3);
        raise(SIGKILL);
        _exit(4);
    }
    close(fds[1]);
    ssize_t got = read(fds[0], out, len);
    close(fds[0]);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    assert_int_equal(got, (ssize_t)len);
    fx_start(f);
}

static void test_recovery_after_kill(void **state)
{
    struct fx *f = *state;
    char ids[6][STORE_ID_MAX];
    crash_after(f, crash_child, ids, sizeof ids);
    assert_op_state(f, ids[0], "running");
    assert_op_state(f, ids[1], "running");
    assert_op_state(f, ids[2], "pending");
    op_engine_recover(&f->sp);
    /* The hook ran first; the build was asked and failed "interrupted" at once. */
    assert_int_equal(f->fake.recover_seq, 1);
    assert_int_equal(f->fake.nresumable, 1);
    assert_string_equal(f->fake.resumed_no[0], ids[1]);
    struct store_op b;
    assert_int_equal(store_op_get(f->sp.store, ids[1], &b), 0);
    assert_string_equal(b.state, "failed");
    assert_string_equal(b.error_code, "interrupted");
    assert_non_null(strstr(b.error_message, "spaced restarted"));
    store_op_clear(&b);
    assert_int_equal(f->fake.nruns, 0); /* nothing runs before the loop turns */

    turn(f);
    /* sbA's running op resumed, sbB's pending op started; the other node's op untouched. */
    assert_int_equal(f->fake.nruns, 2);
    assert_string_equal(f->fake.runs[0].id, ids[0]);
    assert_string_equal(f->fake.runs[1].id, ids[2]);
    assert_op_state(f, ids[5], "pending");
    assert_false(op_target_open(&f->sp, "other-sb"));
    /* sbA's queue keeps its order: stop, then delete. */
    op_finish(&f->sp, ids[0], true, NULL, NULL);
    turn(f);
    assert_int_equal(f->fake.nruns, 3);
    assert_string_equal(f->fake.runs[2].id, ids[3]);
    op_finish(&f->sp, ids[3], true, NULL, NULL);
    turn(f);
    assert_int_equal(f->fake.nruns, 4);
    assert_string_equal(f->fake.runs[3].id, ids[4]);
}

/* ---- a store that refuses writes for a while ---------------------------------------- */

static bool op_in_state(struct fx *f, const char *id, const char *state)
{
    struct store_op op;
    if (store_op_get(f->sp.store, id, &op) != 0)
        return false;
    bool same = strcmp(op.state, state) == 0;
    store_op_clear(&op);
    return same;
}

/* Runs the loop (ticks included) until op id is stored in `state`, at most 15 s. */
static void loop_until_state(struct fx *f, const char *id, const char *state)
{
    for (int i = 0; i < 150 && !op_in_state(f, id, state); i++) {
        struct event *stop = evtimer_new(f->sp.base, stop_loop, f->sp.base);
        struct timeval tv = {0, 100000};
        assert_int_equal(event_add(stop, &tv), 0);
        event_base_dispatch(f->sp.base);
        event_free(stop);
    }
    assert_op_state(f, id, state);
}

static void test_outcome_retried_until_stored(void **state)
{
    struct fx *f = *state;
    struct store_op a1, a2;
    submit(f, OP_START, "sbA", &a1);
    submit(f, OP_STOP, "sbA", &a2);
    struct seen s = {.sp = &f->sp};
    struct op_watch *w = op_watch(&f->sp, a1.id, on_change, &s);
    assert_non_null(w);

    sqlite3 *lock = store_lock(f->db);
    turn(f); /* a1 starts although its running state cannot be written */
    assert_int_equal(f->fake.nruns, 1);
    assert_string_equal(f->fake.runs[0].id, a1.id);
    assert_string_equal(f->fake.runs[0].state, "running");
    op_progress(&f->sp, a1.id, 60, "booting");
    op_finish(&f->sp, a1.id, true, NULL, NULL);
    turn(f);
    /* Nothing reached the store, no watcher heard of it, and a2 still waits its turn. */
    assert_op_state(f, a1.id, "pending");
    assert_int_equal(s.calls, 0);
    assert_int_equal(f->fake.nruns, 1);
    assert_true(op_target_open(&f->sp, "sbA"));

    store_unlock(lock);
    loop_until_state(f, a1.id, "succeeded");
    struct store_op got;
    assert_int_equal(store_op_get(f->sp.store, a1.id, &got), 0);
    assert_int_equal(got.progress, 100);
    assert_true(got.started_ms > 0 && got.finished_ms >= got.started_ms);
    store_op_clear(&got);
    /* Watchers hear of the outcome once, when it is stored; then a2 runs. */
    assert_int_equal(s.calls, 1);
    assert_string_equal(s.last_state, "succeeded");
    turn(f);
    assert_int_equal(f->fake.nruns, 2);
    assert_string_equal(f->fake.runs[1].id, a2.id);
    assert_op_state(f, a2.id, "running");
    op_unwatch(&f->sp, w);

    /* The same for a failure written while the store is down. */
    lock = store_lock(f->db);
    op_finish(&f->sp, a2.id, false, "vm_failed", "the VM did not boot");
    assert_op_state(f, a2.id, "running");
    assert_true(op_target_open(&f->sp, "sbA"));
    store_unlock(lock);
    loop_until_state(f, a2.id, "failed");
    assert_false(op_target_open(&f->sp, "sbA"));
}

/* Runs the loop, ticks included, for about ms. */
static void loop_for(struct fx *f, int ms)
{
    struct event *stop = evtimer_new(f->sp.base, stop_loop, f->sp.base);
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    assert_int_equal(event_add(stop, &tv), 0);
    event_base_dispatch(f->sp.base);
    event_free(stop);
}

/* A record the outcome describes (a sandbox's state) was refused by the store and waits
 * for the tick. The outcome is not written before it, though the store answers again
 * and the backoff has run out (a success elsewhere ended it, or it ran out between the
 * tick's passes): CI once read a sandbox `creating` next to its create `succeeded`. */
static void test_outcome_waits_for_records_first(void **state)
{
    struct fx *f = *state;
    struct store_op a1;
    submit(f, OP_START, "sbA", &a1);
    turn(f);
    assert_op_state(f, a1.id, "running");
    bool record_unsaved = false;
    f->fake.record = &record_unsaved;
    spaced_retry_mark(&f->sp.store_retry, &record_unsaved, true); /* its write was refused */
    spaced_retry_failed(&f->sp.store_retry);
    spaced_retry_ok(&f->sp.store_retry); /* another write succeeded: no backoff left */
    assert_true(spaced_retry_due(&f->sp.store_retry));
    assert_false(spaced_retry_ops_due(&f->sp.store_retry));

    op_finish(&f->sp, a1.id, true, NULL, NULL);
    turn(f);
    assert_op_state(f, a1.id, "running"); /* not written by op_finish */
    loop_for(f, OP_TICK_MS + 300);
    assert_true(f->fake.ticks >= 1);
    assert_op_state(f, a1.id, "running"); /* nor by the tick while the record waits */
    assert_true(op_target_open(&f->sp, "sbA"));

    f->fake.store_record = true; /* the record's module stores it on the next tick */
    loop_until_state(f, a1.id, "succeeded");
    assert_false(record_unsaved);
    assert_int_equal(f->sp.store_retry.first, 0);
    assert_false(op_target_open(&f->sp, "sbA"));
    f->fake.record = NULL;
}

/* The child: sbA's op runs, then finishes while the store refuses writes (the lock
 * dies with the child). */
static void finish_unstored_child(struct fx *f, void *out)
{
    struct store_op op;
    submit(f, OP_START, "sbA", &op);
    turn(f);
    store_lock(f->db);
    op_finish(&f->sp, op.id, true, NULL, NULL); /* cannot be written */
    snprintf(out, STORE_ID_MAX, "%s", op.id);
}

/* spaced killed while an outcome waits for the store: the row still says running, and
 * recovery carries the op out again to a terminal state. */
static void test_kill_with_outcome_pending(void **state)
{
    struct fx *f = *state;
    char id[STORE_ID_MAX];
    crash_after(f, finish_unstored_child, id, sizeof id);
    assert_op_state(f, id, "running");
    op_engine_recover(&f->sp);
    turn(f);
    assert_int_equal(f->fake.nruns, 1);
    assert_string_equal(f->fake.runs[0].id, id);
    op_finish(&f->sp, id, true, NULL, NULL);
    assert_op_state(f, id, "succeeded");
    assert_false(op_target_open(&f->sp, "sbA"));
}

/* op_finish_with: the caller's row and the outcome in one transaction; the watchers hear
 * of the outcome only once both are stored. A refused row leaves the op to the retry
 * (stored alone) and says so, so the caller writes its row itself. */
static void test_finish_with_rows_in_one_transaction(void **state)
{
    struct fx *f = *state;
    struct store_op a, b;
    struct store_tpl t;
    submit(f, OP_START, "sbA", &a);
    submit(f, OP_START, "sbB", &b);
    turn(f);
    struct seen s = {.sp = &f->sp};
    struct op_watch *w = op_watch(&f->sp, a.id, on_change, &s);
    assert_non_null(w);

    struct intent_arg good = {"t-done", 0};
    struct op_intent in = {.write = write_tpl, .arg = &good};
    assert_int_equal(op_finish_with(&f->sp, a.id, true, NULL, NULL, &in), 0);
    assert_op_state(f, a.id, "succeeded");
    assert_int_equal(store_tpl_get(f->sp.store, "t-done", &t), 0);
    store_tpl_clear(&t);
    assert_int_equal(s.calls, 1);
    assert_string_equal(s.last_state, "succeeded");
    op_unwatch(&f->sp, w);
    /* already terminal: nothing written, the caller is told */
    struct intent_arg late = {"t-late", 0};
    in.arg = &late;
    assert_int_equal(op_finish_with(&f->sp, a.id, true, NULL, NULL, &in), -1);
    assert_int_equal(store_tpl_get(f->sp.store, "t-late", &t), STORE_NOTFOUND);

    struct intent_arg broken = {"t-broken", -1};
    in.arg = &broken;
    assert_int_equal(op_finish_with(&f->sp, b.id, true, NULL, NULL, &in), -1);
    assert_int_equal(store_tpl_get(f->sp.store, "t-broken", &t), STORE_NOTFOUND);
    assert_op_state(f, b.id, "running"); /* rolled back with the row */
    loop_until_state(f, b.id, "succeeded");
    assert_int_equal(store_tpl_get(f->sp.store, "t-broken", &t), STORE_NOTFOUND);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_fifo_per_target_parallel_across, setup, teardown),
        cmocka_unit_test_setup_teardown(test_busy_target_deferred, setup, teardown),
        cmocka_unit_test_setup_teardown(test_intent_with_op_in_one_transaction, setup, teardown),
        cmocka_unit_test_setup_teardown(test_idempotency, setup, teardown),
        cmocka_unit_test_setup_teardown(test_terminal_states_are_final, setup, teardown),
        cmocka_unit_test_setup_teardown(test_supersede_cancels_pending, setup, teardown),
        cmocka_unit_test_setup_teardown(test_kind_without_executor, setup, teardown),
        cmocka_unit_test_setup_teardown(test_watches, setup, teardown),
        cmocka_unit_test_setup_teardown(test_change_hook, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tick_runs_hooks_then_pumps, setup, teardown),
        cmocka_unit_test_setup_teardown(test_recovery_after_kill, setup, teardown),
        cmocka_unit_test_setup_teardown(test_outcome_retried_until_stored, setup, teardown),
        cmocka_unit_test_setup_teardown(test_outcome_waits_for_records_first, setup, teardown),
        cmocka_unit_test_setup_teardown(test_kill_with_outcome_pending, setup, teardown),
        cmocka_unit_test_setup_teardown(test_finish_with_rows_in_one_transaction, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
