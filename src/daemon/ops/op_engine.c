/* op_engine.c: recording operations (intent first), running them one at a time per
 * sandbox, following them (watches), recovering them after a crash, and the periodic
 * reconciler (timeouts, stuck states). */
#include <event2/event.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "daemon/cluster/cluster.h"
#include "daemon/metrics/metrics.h"
#include "daemon/quota/quota.h"
#include "daemon/sandbox/sbx.h"
#include "daemon/template/tpl.h"
#include "log.h"
#include "op.h"

_Static_assert(OP_KIND_COUNT <= METRICS_OP_KINDS && OP_STATE_COUNT <= METRICS_OP_STATES,
               "metrics counters must have room for every operation kind and state");

#define OP_TICK_MS 1000

/* An operation that is not terminal yet, in submission order. */
struct op_open {
    char id[STORE_ID_MAX];
    char target[STORE_ID_MAX];
    enum op_kind kind;
    bool running;      /* handed to the sandbox (or template) module */
    int64_t created_ms;
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

struct op_engine {
    struct spaced *sp;
    struct op_open *open;       /* owned list */
    struct op_watch *watches;   /* owned list */
    int dispatching;            /* >0 while watch callbacks run */
    struct event *pump_ev;      /* deferred pump + reconcile */
    struct event *tick;         /* periodic backstop */
    int64_t last_reconcile_ms;
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

static struct op_open *open_add(struct op_engine *e, const struct store_op *op)
{
    struct op_open *o = calloc(1, sizeof *o);
    if (!o)
        return NULL;
    snprintf(o->id, sizeof o->id, "%s", op->id);
    snprintf(o->target, sizeof o->target, "%s", op->target);
    int k = op_kind_parse(op->kind);
    o->kind = k < 0 ? OP_KIND_COUNT : (enum op_kind)k;
    o->created_ms = op->created_ms;
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
            free(o);
            return;
        }
}

static bool open_has_target(struct op_engine *e, const char *target)
{
    for (struct op_open *o = e->open; o; o = o->next)
        if (strcmp(o->target, target) == 0)
            return true;
    return false;
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
        free(o);
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

void op_reconcile_soon(struct spaced *sp)
{
    struct timeval now = {0, 0};
    if (sp->ops && sp->ops->pump_ev)
        event_add(sp->ops->pump_ev, &now);
}

/* Persists a changed op row, then tells its watchers. */
static void op_save(struct spaced *sp, struct store_op *op)
{
    if (store_op_put(sp->store, op) != 0)
        log_error("store.error", "op=%s msg=%s", op->id, store_errmsg(sp->store));
    notify(sp, op);
}

static void op_log(const struct store_op *op)
{
    char q[300];
    log_info("operation.state", "op=%s kind=%s target=%s tenant=%s state=%s%s%s%s%s", op->id,
             op->kind, op->target, op->tenant, op->state, op->error_code[0] ? " code=" : "",
             op->error_code, op->error_message ? " msg=" : "",
             op->error_message ? log_quote(op->error_message, q, sizeof q) : "");
}

void op_finish(struct spaced *sp, const char *op_id, bool ok, const char *code, const char *msg)
{
    struct store_op op;
    if (store_op_get(sp->store, op_id, &op) != 0) {
        log_error("store.error", "op=%s msg=op_finish: %s", op_id, store_errmsg(sp->store));
        return;
    }
    int st = op_state_parse(op.state);
    if (st >= 0 && op_state_terminal((enum op_state)st)) {
        store_op_clear(&op);
        return;
    }
    enum op_state final = ok ? OP_SUCCEEDED : (code && strcmp(code, "canceled") == 0 ? OP_CANCELED : OP_FAILED);
    snprintf(op.state, sizeof op.state, "%s", op_state_name(final));
    snprintf(op.error_code, sizeof op.error_code, "%s", ok ? "" : (code ? code : "failed"));
    free(op.error_message);
    op.error_message = ok ? NULL : strdup(msg ? msg : "");
    if (ok)
        op.progress = 100;
    op.finished_ms = spaced_now_ms();
    open_remove(sp->ops, op.id);
    op_save(sp, &op);
    op_log(&op);
    metrics_op_done(sp->metrics, op_kind_parse(op.kind), (int)final, op.finished_ms - op.created_ms);
    store_op_clear(&op);
    op_reconcile_soon(sp);
}

void op_progress(struct spaced *sp, const char *op_id, int percent, const char *detail)
{
    struct store_op op;
    if (store_op_get(sp->store, op_id, &op) != 0)
        return;
    op.progress = percent < 0 ? 0 : percent > 100 ? 100 : percent;
    free(op.detail);
    op.detail = detail ? strdup(detail) : NULL;
    op_save(sp, &op);
    store_op_clear(&op);
}

/* Marks the op running and hands it to the module that carries it out. */
static void op_begin(struct spaced *sp, struct op_open *o)
{
    struct store_op op;
    if (store_op_get(sp->store, o->id, &op) != 0) {
        open_remove(sp->ops, o->id);
        return;
    }
    o->running = true;
    snprintf(op.state, sizeof op.state, "%s", op_state_name(OP_RUNNING));
    if (!op.started_ms)
        op.started_ms = spaced_now_ms();
    op_save(sp, &op);
    op_log(&op);
    store_op_clear(&op);
    if (o->kind == OP_TEMPLATE_BUILD) {
        tpl_build_start(sp, o->id, o->target);
        return;
    }
    if (o->kind >= OP_KIND_COUNT) {
        op_finish(sp, o->id, false, "internal", "unknown operation kind");
        return;
    }
    struct sbx *s = sbx_find(sp, NULL, o->target);
    if (!s) {
        if (o->kind == OP_DELETE)
            op_finish(sp, o->id, true, NULL, NULL);
        else
            op_finish(sp, o->id, false, "not_found", "the sandbox no longer exists");
        return;
    }
    sbx_act(sp, s, o->kind, o->id);
}

/* Starts every op whose sandbox is idle and which is the oldest open op of its target.
 * Restarts the scan after each start: starting may finish ops synchronously. */
static void op_pump(struct spaced *sp)
{
    struct op_engine *e = sp->ops;
    for (int guard = 0; guard < 100000; guard++) {
        struct op_open *pick = NULL;
        for (struct op_open *o = e->open; o && !pick; o = o->next) {
            if (o->running)
                continue;
            bool first = true;
            for (struct op_open *p = e->open; p != o; p = p->next)
                if (strcmp(p->target, o->target) == 0)
                    first = false;
            if (!first)
                continue;
            struct sbx *s = o->kind == OP_TEMPLATE_BUILD ? NULL : sbx_find(sp, NULL, o->target);
            if (s && sbx_busy(s))
                continue;
            pick = o;
        }
        if (!pick)
            return;
        op_begin(sp, pick);
    }
}

/* ---- submitting --------------------------------------------------------------------- */

static int new_op(struct store_op *op, const char *tenant, enum op_kind kind, const char *target,
                  struct spaced_err *err)
{
    memset(op, 0, sizeof *op);
    if (spaced_random_id(op->id, "op", 16) < 0)
        return spaced_err_set(err, 500, "internal", "random source failed");
    snprintf(op->tenant, sizeof op->tenant, "%s", tenant);
    snprintf(op->kind, sizeof op->kind, "%s", op_kind_name(kind));
    snprintf(op->target, sizeof op->target, "%s", target);
    snprintf(op->state, sizeof op->state, "%s", op_state_name(OP_PENDING));
    op->created_ms = spaced_now_ms();
    return 0;
}

static int store_failed(struct spaced *sp, struct spaced_err *err)
{
    store_rollback(sp->store);
    log_error("store.error", "msg=%s", store_errmsg(sp->store));
    return spaced_err_store(err, sp->store, "recording the operation");
}

/* A sandbox disk's virtual size: its template image's, in MiB rounded up (0 if unknown:
 * the create then fails later, when the disk is made). */
static unsigned disk_mib(const char *image)
{
    struct stat stt;
    if (stat(image, &stt) != 0 || stt.st_size <= 0)
        return 0;
    return (unsigned)(((uint64_t)stt.st_size + (1u << 20) - 1) >> 20);
}

int op_submit_create(struct spaced *sp, const char *tenant, const struct sbx_spec *spec,
                     const char *idem_key, const char *body_hash, struct store_op *out,
                     struct spaced_err *err)
{
    memset(out, 0, sizeof *out);
    if (idem_key && idem_key[0]) {
        if (strlen(idem_key) >= sizeof out->idem_key)
            return spaced_err_set(err, 400, "invalid_request",
                                  "Idempotency-Key is longer than %zu bytes", sizeof out->idem_key - 1);
        int rc = store_op_by_idem(sp->store, tenant, idem_key, out);
        if (rc == 0) {
            if (strcmp(out->body_hash, body_hash) != 0) {
                store_op_clear(out);
                return spaced_err_set(err, 422, "idempotency_mismatch",
                                      "Idempotency-Key \"%.64s\" was already used with a different body",
                                      idem_key);
            }
            return 1;
        }
        if (rc != STORE_NOTFOUND)
            return store_failed(sp, err);
    }
    struct tpl_info t;
    if (tpl_lookup(sp, tenant, spec->template_name, &t, err) < 0)
        return -1;
    struct store_sbx rec;
    memset(&rec, 0, sizeof rec);
    if (spaced_random_id(rec.id, "sb", 16) < 0)
        return spaced_err_set(err, 500, "internal", "random source failed");
    if (new_op(out, tenant, OP_CREATE, rec.id, err) < 0)
        return -1;
    snprintf(out->idem_key, sizeof out->idem_key, "%s", idem_key ? idem_key : "");
    snprintf(out->body_hash, sizeof out->body_hash, "%s", body_hash ? body_hash : "");
    snprintf(rec.tenant, sizeof rec.tenant, "%s", tenant);
    snprintf(rec.template_name, sizeof rec.template_name, "%s", spec->template_name);
    rec.vcpus = spec->vcpus;
    rec.memory_mib = spec->memory_mib;
    rec.env_json = spec->env_json;
    rec.metadata_json = spec->metadata_json;
    rec.network_json = spec->network_json;
    rec.private_ports = spec->private_ports;
    rec.timeout_s = spec->timeout_s;
    rec.deadline_ms = spec->timeout_s ? out->created_ms + spec->timeout_s * 1000 : 0;
    snprintf(rec.on_timeout, sizeof rec.on_timeout, "%s", spec->on_timeout);
    snprintf(rec.desired, sizeof rec.desired, "%s", sbx_state_name(SBX_RUNNING));
    snprintf(rec.state, sizeof rec.state, "%s", sbx_state_name(SBX_CREATING));
    snprintf(rec.run_dir, sizeof rec.run_dir, "%s/run/%s", sp->opt.data_dir, rec.id);
    snprintf(rec.node, sizeof rec.node, "%s", cluster_node_id(sp));
    rec.created_ms = rec.updated_ms = out->created_ms;
    rec.disk_mib = disk_mib(t.rootfs);
    /* The quota check and the sandbox row share one transaction: see quota.h. */
    struct store_quota_vals want = {.sandboxes = 1, .vcpus = rec.vcpus,
                                    .memory_mib = rec.memory_mib, .disk_mib = rec.disk_mib};
    if (store_begin(sp->store) != 0)
        return store_failed(sp, err);
    if (quota_check(sp, tenant, &want, err) != 0) {
        store_rollback(sp->store);
        return -1;
    }
    if (store_sbx_put(sp->store, &rec) != 0 || store_op_put(sp->store, out) != 0 ||
        store_commit(sp->store) != 0)
        return store_failed(sp, err);
    /* rec's JSON strings belong to spec; the table copies them. */
    if (!sbx_table_add(sp, &rec) || !open_add(sp->ops, out))
        return spaced_err_set(err, 500, "internal", "out of memory");
    log_info("sandbox.state", "sandbox=%s tenant=%s from=none to=creating desired=running template=%s",
             rec.id, tenant, rec.template_name);
    op_log(out);
    op_reconcile_soon(sp);
    return 0;
}

/* Cancels the still-pending ops of a sandbox (inside the caller's transaction). */
static int cancel_pending(struct spaced *sp, const char *target, const char *by)
{
    for (struct op_open *o = sp->ops->open; o; o = o->next) {
        if (o->running || strcmp(o->target, target) != 0)
            continue;
        struct store_op op;
        if (store_op_get(sp->store, o->id, &op) != 0)
            return -1;
        snprintf(op.state, sizeof op.state, "%s", op_state_name(OP_CANCELED));
        snprintf(op.error_code, sizeof op.error_code, "canceled");
        free(op.error_message);
        char msg[128];
        snprintf(msg, sizeof msg, "superseded by delete operation %s", by);
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
        if (o->running || strcmp(o->target, target) != 0)
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

int op_submit(struct spaced *sp, const char *tenant, enum op_kind kind, const char *sandbox_id,
              struct store_op *out, struct spaced_err *err)
{
    memset(out, 0, sizeof *out);
    struct sbx *s = sbx_find(sp, tenant, sandbox_id);
    if (!s)
        return spaced_err_set(err, 404, "not_found", "sandbox %.64s not found", sandbox_id);
    enum sbx_state target;
    struct spaced_err terr;
    if (sbx_transition(sbx_desired(s), sbx_state(s), kind, &target, &terr) < 0)
        return spaced_err_set(err, terr.status, terr.code, "sandbox %s: %s", sandbox_id, terr.message);
    if (new_op(out, tenant, kind, sandbox_id, err) < 0)
        return -1;
    enum sbx_state old_desired = sbx_desired(s);
    sbx_set_desired(s, target);
    struct store_sbx rec = *sbx_record(s);
    rec.updated_ms = out->created_ms;
    if (store_begin(sp->store) != 0 ||
        (kind == OP_DELETE && cancel_pending(sp, sandbox_id, out->id) != 0) ||
        store_sbx_put(sp->store, &rec) != 0 || store_op_put(sp->store, out) != 0 ||
        store_commit(sp->store) != 0) {
        sbx_set_desired(s, old_desired);
        return store_failed(sp, err);
    }
    if (kind == OP_DELETE)
        cancel_pending_done(sp, sandbox_id);
    if (!open_add(sp->ops, out))
        return spaced_err_set(err, 500, "internal", "out of memory");
    op_log(out);
    op_reconcile_soon(sp);
    return 0;
}

int op_submit_template(struct spaced *sp, const char *tenant, const char *name,
                       const char *spec_json, struct store_op *out, struct spaced_err *err)
{
    if (open_has_target(sp->ops, name))
        return spaced_err_set(err, 409, "conflict", "template %s is already being built", name);
    if (new_op(out, tenant, OP_TEMPLATE_BUILD, name, err) < 0)
        return -1;
    struct store_tpl t = {.created_ms = out->created_ms, .updated_ms = out->created_ms};
    snprintf(t.name, sizeof t.name, "%s", name);
    snprintf(t.tenant, sizeof t.tenant, "%s", tenant);
    snprintf(t.state, sizeof t.state, "building");
    snprintf(t.dir, sizeof t.dir, "%s/templates/%s", sp->opt.data_dir, name);
    t.spec_json = (char *)spec_json;
    /* A rebuild of the tenant's own failed template reuses its row: nothing new. */
    struct store_tpl old;
    bool fresh = true;
    if (store_tpl_get(sp->store, name, &old) == 0) {
        fresh = strcmp(old.tenant, tenant) != 0 || strcmp(old.state, "deleted") == 0;
        store_tpl_clear(&old);
    }
    struct store_quota_vals want = {.templates = fresh ? 1 : 0};
    if (store_begin(sp->store) != 0)
        return store_failed(sp, err);
    if (quota_check(sp, tenant, &want, err) != 0) {
        store_rollback(sp->store);
        return -1;
    }
    if (store_tpl_put(sp->store, &t) != 0 || store_op_put(sp->store, out) != 0 ||
        store_commit(sp->store) != 0)
        return store_failed(sp, err);
    if (!open_add(sp->ops, out))
        return spaced_err_set(err, 500, "internal", "out of memory");
    op_log(out);
    op_reconcile_soon(sp);
    return 0;
}

/* ---- recovery and the reconciler ---------------------------------------------------- */

static void recover_sbx(struct sbx *s, void *arg) { sbx_recover(arg, s); }

static int recover_op(const struct store_op *op, void *arg)
{
    struct spaced *sp = arg;
    if (!cluster_owns_op(sp, op))
        return 0; /* another node daemon's (--role=node) */
    struct op_open *o = open_add(sp->ops, op);
    if (!o)
        return 1;
    log_info("operation.recover", "op=%s kind=%s target=%s was=%s action=%s", op->id, op->kind,
             op->target, op->state, strcmp(op->state, "running") == 0 ? "resume" : "queue");
    return 0;
}

void op_engine_recover(struct spaced *sp)
{
    sbx_each(sp, recover_sbx, sp);
    if (store_op_each_open(sp->store, recover_op, sp) != 0)
        log_error("store.error", "msg=recovering operations: %s", store_errmsg(sp->store));
    /* Template builds cannot be resumed half-way: their build VM died with spaced. */
    struct op_open *o = sp->ops->open, *next;
    for (; o; o = next) {
        next = o->next;
        if (o->kind == OP_TEMPLATE_BUILD || o->kind >= OP_KIND_COUNT) {
            if (o->kind == OP_TEMPLATE_BUILD)
                tpl_build_interrupted(sp, o->target);
            op_finish(sp, o->id, false, "interrupted",
                      "spaced restarted while this operation was running; submit it again");
        }
    }
    op_reconcile_soon(sp);
}

/* Fires expired timeouts: a suspend or delete op on the owner's behalf. */
static void check_timeout(struct sbx *s, void *arg)
{
    struct spaced *sp = arg;
    const struct store_sbx *r = sbx_record(s);
    if (!r->deadline_ms || r->deadline_ms > spaced_now_ms() || sbx_busy(s) ||
        open_has_target(sp->ops, r->id))
        return;
    enum sbx_state st = sbx_state(s);
    if (st != SBX_RUNNING && st != SBX_PAUSED)
        return;
    enum op_kind kind = strcmp(r->on_timeout, "delete") == 0 ? OP_DELETE : OP_SUSPEND;
    struct store_op op;
    struct spaced_err err;
    char id[STORE_ID_MAX], tenant[STORE_ID_MAX];
    snprintf(id, sizeof id, "%s", r->id);
    snprintf(tenant, sizeof tenant, "%s", r->tenant);
    log_info("sandbox.timeout", "sandbox=%s action=%s", id, op_kind_name(kind));
    if (op_submit(sp, tenant, kind, id, &op, &err) < 0)
        log_warn("sandbox.timeout", "sandbox=%s action=%s error=%s", id, op_kind_name(kind), err.code);
    store_op_clear(&op);
}

static void reconcile_sbx(struct sbx *s, void *arg)
{
    struct spaced *sp = arg;
    if (!sbx_busy(s) && !open_has_target(sp->ops, sbx_id(s)))
        sbx_reconcile(sp, s);
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
    (void)fd;
    (void)what;
    sbx_each(sp, check_timeout, sp);
    int64_t now = spaced_now_ms();
    if (now - sp->ops->last_reconcile_ms >= OP_RECONCILE_PERIOD_MS) {
        sp->ops->last_reconcile_ms = now;
        sbx_each(sp, reconcile_sbx, sp);
    }
    op_pump(sp);
}
