/* sbx_fork.c: forking a running sandbox (POST /v1/sandboxes/{id}/fork).
 *
 * Submit (sbx_submit_fork): one OP_FORK op on the parent, whose transaction also writes
 * the N fork rows (state creating, `source` = the capture id) after the quota check for
 * all N, as N creates would. The forks wait (awaiting_capture: busy, no op of their own)
 * while the parent is captured.
 *
 * Run (the OP_FORK executor): the parent's VM is captured once into
 * <data_dir>/captures/<capture id>/ (vm_fork_capture: the guest is stopped only for the
 * migration of its memory + device state and the copy of its disk overlay, then
 * continues), next to chain.json, the forks' disk chain: the overlay copy over the
 * parent's chain. Then each fork gets its own create op, whose template stage takes the
 * capture instead of the template's snapshot (sbx_fork_source), so a fork is a restore
 * like a suspended sandbox's, then the agent's refresh gives it its identity (hostname
 * = its id, fresh entropy, clock). The fork op finishes when every fork's create has:
 * succeeded if all did, otherwise failed naming how many did not.
 *
 * Chains: a fork's chain is its parent's plus one layer, the capture's overlay copy. The
 * depth is bounded by VM_DISK_BACKING_MAX: when the capture's chain would exceed it, the
 * copy is flattened over the parent's chain into one standalone raw image,
 * captures/<id>/disk.raw (vm_disk_flatten: `qemu-img convert` pinned by --image-opts,
 * every qcow2 header checked for an external data file, run as a child watched by the
 * loop), and the capture's chain is that one layer. So a line of forks flattens once
 * every VM_DISK_BACKING_MAX generations, the copy is the only input that is not read-only
 * already, and no layer anything stands on is touched: the parent keeps its chain (its
 * overlay is copied, not frozen) and the capture's own overlay copy goes only once the
 * flat image and the chain naming it are in place. The steps are ordered so a spaced
 * killed in between leaves a capture that nothing restores from: disk.raw.tmp, renamed
 * to disk.raw once complete and read-only, then chain.json (temporary file + rename),
 * then the copy is unlinked; a restart fails the op ("interrupted") and the capture
 * collection removes the directory with whatever it holds. A snapshot is captured the
 * same way (sbx_snap.c).
 *
 * The capture is mapped (vm_memmap.c): its memory is a RAM file, mem, that each fork
 * maps private copy-on-write like a template clone maps the template's (read-only for
 * every VM: root-owned 0444, bound read-only), plus a small device state; a fork's
 * restore loads no page. Should the split fail, the capture keeps the full stream and
 * the forks load it (slower, same result).
 *
 * Captures are garbage-collected (sbx_fork_gc, from the tick): a capture nothing
 * references (no sandbox in the table names it as source or stands on its overlay, no
 * fork in progress) is removed. Its device state is removed as soon as the forks are
 * created; the overlay copy and the RAM file stay in use while a fork lives (its pages
 * are shared by the forks through the page cache). A restart during a fork fails the op
 * ("interrupted") and its forks (failed, deletable). */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "daemon/quota/quota.h"
#include "log.h"
#include "sbx_internal.h"

#define CAPTURE_ID_HEX 16

void sbx_capture_dir(const struct spaced *sp, const char *id, char *out, size_t cap)
{
    snprintf(out, cap, "%s/captures%s%s", sp->opt.data_dir, id ? "/" : "", id ? id : "");
}

static struct sbx_fork *job_by_op(struct spaced *sp, const char *op_id)
{
    for (struct sbx_fork *f = sp->sbx->forks; f; f = f->next)
        if (strcmp(f->op_id, op_id) == 0)
            return f;
    return NULL;
}

void sbx_job_free(struct sbx_fork *f)
{
    struct sbx_fork **pp = &f->sp->sbx->forks;
    while (*pp && *pp != f)
        pp = &(*pp)->next;
    if (*pp)
        *pp = f->next;
    if (f->self)
        op_unwatch(f->sp, f->self);
    for (unsigned i = 0; i < f->n; i++)
        if (f->watch[i])
            op_unwatch(f->sp, f->watch[i]);
    free(f);
}

void sbx_fork_forget(struct sbx_table *t)
{
    while (t->forks) { /* the op engine's watches die with it */
        struct sbx_fork *f = t->forks;
        t->forks = f->next;
        vm_disk_job_cancel(f->flatten); /* its capture is collected after the restart */
        free(f);
    }
}

/* ---- submitting --------------------------------------------------------------------- */

struct fork_intent {
    struct store_sbx *recs; /* n rows */
    unsigned n;
};

static int write_forks(struct spaced *sp, const struct store_op *op, void *arg,
                       struct spaced_err *err)
{
    struct fork_intent *in = arg;
    struct store_sbx *r = &in->recs[0];
    struct store_quota_vals want = {.sandboxes = in->n, .vcpus = (int64_t)in->n * r->vcpus,
                                    .memory_mib = (int64_t)in->n * r->memory_mib,
                                    .disk_mib = (int64_t)in->n * r->disk_mib};
    if (quota_check(sp, op->tenant, &want, err) != 0)
        return -1;
    for (unsigned i = 0; i < in->n; i++) {
        struct store_sbx *c = &in->recs[i];
        c->created_ms = c->updated_ms = op->created_ms;
        c->deadline_ms = c->timeout_s ? op->created_ms + c->timeout_s * 1000 : 0;
        if (store_sbx_put(sp->store, c) != 0)
            return -1;
    }
    return 0;
}

static void child_fail(struct sbx_fork *f, unsigned i, const char *why);

/* The job's op ended without the job (canceled while pending, by a delete of the
 * parent): its forks will never be created, its snapshot never taken. */
static void on_job_op(const struct store_op *op, void *arg)
{
    struct sbx_fork *f = arg;
    if (!op_state_terminal((enum op_state)op_state_parse(op->state)))
        return;
    char why[200];
    snprintf(why, sizeof why, "the fork was %s before its capture", op->state);
    for (unsigned i = 0; i < f->n; i++)
        if (!f->watch[i])
            child_fail(f, i, why);
    if (f->snapshot[0])
        sbx_snap_abandon(f->sp, f->snapshot);
    sbx_job_free(f);
}

void sbx_job_add(struct spaced *sp, struct sbx_fork *f)
{
    f->sp = sp;
    f->next = sp->sbx->forks;
    sp->sbx->forks = f;
    f->self = op_watch(sp, f->op_id, on_job_op, f);
}

int sbx_capture_check(struct sbx *p, struct spaced_err *err)
{
    if (p->state != SBX_RUNNING || p->desired != SBX_RUNNING)
        return spaced_err_set(err, 409, "invalid_state", "sandbox %s is %s: only a running "
                              "sandbox can be forked or snapshotted", p->rec.id,
                              sbx_state_name(p->state));
    struct sbx_chain chain;
    if (sbx_chain_load(p, &chain) < 0)
        return spaced_err_set(err, 409, "invalid_state", "sandbox %s has no disk chain yet",
                              p->rec.id);
    return 0;
}

int sbx_submit_fork(struct spaced *sp, const char *tenant, const char *parent_id,
                    unsigned count, struct store_op *out, char ids[][STORE_ID_MAX],
                    struct spaced_err *err)
{
    memset(out, 0, sizeof *out);
    if (count < 1 || count > SBX_FORK_MAX)
        return spaced_err_set(err, 400, "invalid_request", "count must be an integer in 1..%d",
                              SBX_FORK_MAX);
    struct sbx *p = sbx_find(sp, tenant, parent_id);
    if (!p)
        return spaced_err_set(err, 404, "not_found", "sandbox %.64s not found", parent_id);
    if (sbx_capture_check(p, err) < 0)
        return -1;
    struct sbx_fork *f = calloc(1, sizeof *f);
    struct store_sbx *recs = calloc(count, sizeof *recs);
    if (!f || !recs || spaced_random_id(f->capture, "cp", CAPTURE_ID_HEX) < 0) {
        free(f);
        free(recs);
        return spaced_err_set(err, 500, "internal", "out of memory or random source failed");
    }
    for (unsigned i = 0; i < count; i++) {
        struct store_sbx *c = &recs[i];
        *c = p->rec; /* borrowed strings: the table copies them */
        c->failure = NULL;
        if (spaced_random_id(c->id, "sb", 16) < 0) {
            free(f);
            free(recs);
            return spaced_err_set(err, 500, "internal", "random source failed");
        }
        snprintf(c->source, sizeof c->source, "%s", f->capture);
        snprintf(c->desired, sizeof c->desired, "%s", sbx_state_name(SBX_RUNNING));
        snprintf(c->state, sizeof c->state, "%s", sbx_state_name(SBX_CREATING));
        snprintf(c->run_dir, sizeof c->run_dir, "%s/run/%s", sp->opt.data_dir, c->id);
        snprintf(c->node, sizeof c->node, "%s", sp->sbx->node_id);
    }
    struct fork_intent fi = {recs, count};
    struct op_intent in = {.write = write_forks, .arg = &fi};
    if (op_enqueue(sp, tenant, OP_FORK, parent_id, &in, out, err) < 0) {
        free(f);
        free(recs);
        return -1;
    }
    f->n = count;
    snprintf(f->op_id, sizeof f->op_id, "%s", out->id);
    snprintf(f->tenant, sizeof f->tenant, "%s", tenant);
    snprintf(f->parent, sizeof f->parent, "%s", parent_id);
    for (unsigned i = 0; i < count; i++) {
        struct sbx *c = sbx_table_add(sp, &recs[i]);
        if (c)
            c->awaiting_capture = true;
        snprintf(f->child[i], sizeof f->child[i], "%s", recs[i].id);
        snprintf(ids[i], STORE_ID_MAX, "%s", recs[i].id);
        log_info("sandbox.state", "sandbox=%s tenant=%s from=none to=creating desired=running "
                 "fork_of=%s capture=%s", recs[i].id, tenant, parent_id, f->capture);
    }
    free(recs);
    sbx_job_add(sp, f);
    return 0;
}

/* ---- running ------------------------------------------------------------------------ */

/* A fork that will not be created: failed, deletable, counted. */
static void child_fail(struct sbx_fork *f, unsigned i, const char *why)
{
    struct sbx *c = sbx_find(f->sp, NULL, f->child[i]);
    if (c) {
        c->awaiting_capture = false;
        sbx_set_desired(c, SBX_RUNNING);
        sbx_set_state(c, SBX_FAILED, why);
    }
    f->done++;
    f->failed++;
    if (!f->why[0])
        snprintf(f->why, sizeof f->why, "%s: %s", f->child[i], why);
}

static void fork_end(struct sbx_fork *f)
{
    struct spaced *sp = f->sp;
    char dir[SBX_PATH_MAX], p[SBX_PATH_MAX + 32];
    sbx_capture_dir(sp, f->capture, dir, sizeof dir);
    /* Every fork restored (or never will): the device state is not needed any more (the
     * RAM file is: the forks map it until they are gone and the collection removes it). */
    snprintf(p, sizeof p, "%s/state", dir);
    unlink(p);
    snprintf(p, sizeof p, "%s/snapshot.json", dir);
    unlink(p);
    log_info("sandbox.fork", "parent=%s capture=%s forks=%u failed=%u total_ms=%lld", f->parent,
             f->capture, f->n, f->failed, (long long)((clock_mono_us() - f->started_us) / 1000));
    char op[STORE_ID_MAX], msg[700];
    snprintf(op, sizeof op, "%s", f->op_id);
    snprintf(msg, sizeof msg, "%u of %u forks failed (first: %s)", f->failed, f->n, f->why);
    bool ok = f->failed == 0;
    sbx_job_free(f);
    op_finish(sp, op, ok, ok ? NULL : "fork_failed", ok ? NULL : msg);
}

static void fork_fail_all(struct sbx_fork *f, const char *why)
{
    if (f->snapshot[0]) {
        sbx_snap_captured(f, VM_E_STATE, why);
        return;
    }
    for (unsigned i = 0; i < f->n; i++)
        child_fail(f, i, why);
    char dir[SBX_PATH_MAX];
    sbx_capture_dir(f->sp, f->capture, dir, sizeof dir);
    spaced_rm_rf(dir);
    fork_end(f);
}

static void on_child_op(const struct store_op *op, void *arg)
{
    struct sbx_fork *f = arg;
    if (!op_state_terminal((enum op_state)op_state_parse(op->state)))
        return;
    for (unsigned i = 0; i < f->n; i++) {
        if (strcmp(f->child[i], op->target) != 0 || !f->watch[i])
            continue;
        op_unwatch(f->sp, f->watch[i]);
        f->watch[i] = NULL;
        f->done++;
        if (strcmp(op->state, "succeeded") != 0) {
            f->failed++;
            if (!f->why[0])
                snprintf(f->why, sizeof f->why, "%s: %s", op->target,
                         op->error_message ? op->error_message : op->error_code);
        }
    }
    if (f->done == f->n)
        fork_end(f);
}

/* The capture is complete (and flattened if it had to be): the snapshot is recorded, or
 * the forks' creates are queued. */
static void capture_ready(struct vm *vm, int err, const char *msg, void *arg)
{
    struct sbx_fork *f = arg;
    (void)vm;
    if (f->snapshot[0]) {
        sbx_snap_captured(f, err, msg);
        return;
    }
    if (err != VM_OK) {
        char why[600];
        snprintf(why, sizeof why, "the capture of %s failed: %s", f->parent,
                 msg ? msg : vm_error_code(err));
        fork_fail_all(f, why);
        return;
    }
    char detail[128];
    snprintf(detail, sizeof detail, "captured in %lld ms; restoring %u forks",
             (long long)((clock_mono_us() - f->started_us) / 1000), f->n);
    op_progress(f->sp, f->op_id, 50, detail);
    unsigned n = f->n;
    for (unsigned i = 0; i < n && f->done < n; i++) {
        struct sbx *c = sbx_find(f->sp, NULL, f->child[i]);
        struct store_op op;
        struct spaced_err e = {0};
        struct op_intent in = {0};
        if (!c) { /* cannot be deleted while awaiting (busy), but be safe */
            child_fail(f, i, "the fork is gone");
            continue;
        }
        c->awaiting_capture = false;
        if (op_enqueue(f->sp, f->tenant, OP_CREATE, f->child[i], &in, &op, &e) < 0) {
            child_fail(f, i, e.message[0] ? e.message : "cannot queue the fork's create");
            continue;
        }
        f->watch[i] = op_watch(f->sp, op.id, on_child_op, f);
        store_op_clear(&op);
        if (!f->watch[i])
            child_fail(f, i, "cannot follow the fork's create");
    }
    if (f->done == f->n) /* every fork failed to queue */
        fork_end(f);
}

/* The flat image is complete and read-only: it becomes the capture's whole chain, and
 * the overlay copy it was made from goes (nothing stands on it yet). */
static void on_flattened(struct vm *vm, int err, const char *msg, void *arg)
{
    struct sbx_fork *f = arg;
    f->flatten = NULL;
    char dir[SBX_PATH_MAX - 32], tmp[SBX_PATH_MAX], p[SBX_PATH_MAX];
    sbx_capture_dir(f->sp, f->capture, dir, sizeof dir);
    snprintf(tmp, sizeof tmp, "%s/disk.raw.tmp", dir);
    struct sbx_chain fc = {.n = 1};
    snprintf(fc.path[0], sizeof fc.path[0], "%s/disk.raw", dir);
    snprintf(fc.format[0], sizeof fc.format[0], "raw");
    char why[700];
    if (err != VM_OK) {
        snprintf(why, sizeof why, "flattening the captured disk failed: %s",
                 msg ? msg : vm_error_code(err));
        capture_ready(vm, VM_E_IO, why, f);
        return;
    }
    snprintf(p, sizeof p, "%s/chain.json", dir);
    if (rename(tmp, fc.path[0]) < 0 || sbx_chain_write(p, &fc) < 0) {
        snprintf(why, sizeof why, "cannot publish the flattened disk in %s", dir);
        capture_ready(vm, VM_E_IO, why, f);
        return;
    }
    snprintf(p, sizeof p, "%s/disk.qcow2", dir);
    unlink(p);
    log_info("sandbox.fork", "event=flattened capture=%s layers=%u ms=%lld", f->capture,
             f->flat_base.n + 1, (long long)((clock_mono_us() - f->started_us) / 1000));
    capture_ready(vm, VM_OK, NULL, f);
}

/* The capture's state and overlay copy are written (the parent runs again). A chain too
 * deep is flattened first, by a child process: the loop goes on meanwhile. */
static void on_captured(struct vm *vm, int err, const char *msg, void *arg)
{
    struct sbx_fork *f = arg;
    if (err != VM_OK || f->flat_base.n == 0) {
        capture_ready(vm, err, msg, f);
        return;
    }
    char dir[SBX_PATH_MAX - 32], copy[SBX_PATH_MAX], tmp[SBX_PATH_MAX];
    sbx_capture_dir(f->sp, f->capture, dir, sizeof dir);
    snprintf(copy, sizeof copy, "%s/disk.qcow2", dir);
    snprintf(tmp, sizeof tmp, "%s/disk.raw.tmp", dir);
    struct vm_disk_layer layers[VM_DISK_BACKING_MAX];
    for (unsigned i = 0; i < f->flat_base.n; i++)
        layers[i] = (struct vm_disk_layer){f->flat_base.path[i], f->flat_base.format[i]};
    op_progress(f->sp, f->op_id, 30, "flattening the captured disk");
    unlink(tmp);
    int rc = vm_disk_flatten(f->sp->base, copy, layers, f->flat_base.n, tmp, on_flattened, f,
                             &f->flatten);
    if (rc != VM_OK) {
        char why[200];
        snprintf(why, sizeof why, "cannot flatten the captured disk (%s)",
                 rc == VM_E_INVAL ? "a layer's header is not a plain qcow2" : vm_error_code(rc));
        capture_ready(vm, VM_E_IO, why, f);
    }
}

/* captures/<id>/template: the template whose layers the capture's chain stands on, for
 * sbx_capture_users. 0 or -1. */
static int write_template(const char *dir, const char *name)
{
    char p[SBX_PATH_MAX + 32];
    snprintf(p, sizeof p, "%s/template", dir);
    FILE *fp = fopen(p, "we");
    if (!fp)
        return -1;
    int ok = fputs(name, fp) >= 0;
    return fclose(fp) == 0 && ok ? 0 : -1;
}

static void fork_run(struct spaced *sp, const struct store_op *op, void *arg)
{
    (void)arg;
    struct sbx_fork *f = job_by_op(sp, op->id);
    if (!f) {
        op_finish(sp, op->id, false, "interrupted", "interrupted by a restart of spaced");
        return;
    }
    f->started_us = clock_mono_us();
    struct sbx *p = sbx_find(sp, NULL, f->parent);
    if (!p || p->state != SBX_RUNNING || !p->vm || vm_state(p->vm) != VM_STATE_RUNNING) {
        char why[200];
        snprintf(why, sizeof why, "the parent %s is no longer running (%s)", f->parent,
                 p ? sbx_state_name(p->state) : "deleted");
        fork_fail_all(f, why);
        return;
    }
    struct sbx_chain chain, fc;
    char dir[SBX_PATH_MAX - 32], p_chain[SBX_PATH_MAX];
    sbx_capture_dir(sp, f->capture, dir, sizeof dir);
    snprintf(p_chain, sizeof p_chain, "%s/chain.json", dir);
    memset(&fc, 0, sizeof fc);
    snprintf(fc.path[0], sizeof fc.path[0], "%s/disk.qcow2", dir);
    snprintf(fc.format[0], sizeof fc.format[0], "qcow2");
    fc.n = 1;
    if (sbx_chain_load(p, &chain) < 0) {
        fork_fail_all(f, "the parent's disk chain is unreadable");
        return;
    }
    if (chain.n + 1 > VM_DISK_BACKING_MAX) { /* flattened after the capture (on_captured) */
        f->flat_base = chain;
    } else {
        for (unsigned i = 0; i < chain.n; i++, fc.n++) {
            memcpy(fc.path[fc.n], chain.path[i], sizeof fc.path[0]);
            memcpy(fc.format[fc.n], chain.format[i], sizeof fc.format[0]);
        }
    }
    spaced_rm_rf(dir);
    /* A capture to flatten has no chain.json until its flat image is in place: a fork's
     * create finds none (capture_gone), the template module still sees the layers in use
     * through the parent, which the running op keeps. */
    if (spaced_mkdir_p(dir) < 0 || (!f->flat_base.n && sbx_chain_write(p_chain, &fc) < 0) ||
        write_template(dir, p->rec.template_name) < 0) {
        fork_fail_all(f, "cannot write the capture directory");
        return;
    }
    char room[400];
    if (vm_save_room(p->vm, dir, 1, room, sizeof room) != VM_OK) {
        fork_fail_all(f, room);
        return;
    }
    int rc = vm_fork_capture(p->vm, dir, on_captured, f);
    if (rc != VM_OK) {
        char why[200];
        snprintf(why, sizeof why, "the parent's VM refused the capture (%s)", vm_error_code(rc));
        fork_fail_all(f, why);
    }
}

static bool fork_busy(struct spaced *sp, const char *target, void *arg)
{
    (void)arg;
    struct sbx *s = sbx_find(sp, NULL, target);
    return s && sbx_busy(s);
}

/* After a restart the capture (a paused instant of the parent) cannot be redone: the
 * op fails "interrupted" and so do its forks, which wait for nothing any more. */
static void fail_orphan(struct sbx *s, void *arg)
{
    const struct store_op *op = arg;
    if (s->state == SBX_CREATING && s->rec.source[0] && !op_target_open(s->sp, s->rec.id) &&
        s->rec.created_ms == op->created_ms && strcmp(s->rec.tenant, op->tenant) == 0)
        sbx_set_state(s, SBX_FAILED, "its fork was interrupted by a restart of spaced");
}

static bool fork_resumable(struct spaced *sp, const struct store_op *op, void *arg)
{
    (void)arg;
    sbx_each(sp, fail_orphan, (void *)op);
    return false;
}

static bool snap_resumable(struct spaced *sp, const struct store_op *op, void *arg)
{
    (void)arg;
    sbx_snap_interrupted(sp, op);
    return false;
}

static const struct op_executor fork_executor = {
    .run = fork_run, .busy = fork_busy, .resumable = fork_resumable};
static const struct op_executor snap_executor = {
    .run = fork_run, .busy = fork_busy, .resumable = snap_resumable};

void sbx_fork_register(struct spaced *sp)
{
    op_register(sp->ops, OP_FORK, &fork_executor, NULL);
    op_register(sp->ops, OP_SNAPSHOT, &snap_executor, NULL);
}

/* ---- the create of a fork ----------------------------------------------------------- */

int sbx_fork_source(struct sbx *s, char *snap, size_t cap, struct sbx_chain *chain,
                    struct spaced_err *err)
{
    char dir[SBX_PATH_MAX], p[SBX_PATH_MAX + 32];
    sbx_capture_dir(s->sp, s->rec.source, dir, sizeof dir);
    snprintf(p, sizeof p, "%s/snapshot.json", dir);
    if (access(p, F_OK) != 0 || snprintf(p, sizeof p, "%s/chain.json", dir) < 0 ||
        sbx_chain_read(p, chain) < 0)
        return spaced_err_set(err, 409, "capture_gone", "the capture %s this fork restores "
                              "from is gone (a restart interrupted the fork)", s->rec.source);
    char what[STORE_ID_MAX + 16];
    snprintf(what, sizeof what, "snapshot %s", s->rec.source);
    if (sbx_runtime_check_dir(s->sp, dir, what, err) < 0) /* e.g. spaced restarted under a new QEMU */
        return -1;
    snprintf(snap, cap, "%s", dir);
    return 0;
}

/* ---- garbage collection ------------------------------------------------------------- */

/* Whether capture `id` is in use: a fork in progress, a sandbox restoring from it, or a
 * sandbox whose disk stands on its overlay. */
static bool capture_used(struct spaced *sp, const char *id)
{
    for (struct sbx_fork *f = sp->sbx->forks; f; f = f->next)
        if (strcmp(f->capture, id) == 0)
            return true;
    if (sbx_snap_kept(sp, id))
        return true;
    char dir[SBX_PATH_MAX];
    sbx_capture_dir(sp, id, dir, sizeof dir);
    size_t dl = strlen(dir);
    for (struct sbx *s = sp->sbx->head; s; s = s->next) {
        if (s->state == SBX_DELETED)
            continue;
        if (strcmp(s->rec.source, id) == 0)
            return true;
        struct sbx_chain c;
        sbx_chain_load(s, &c);
        for (unsigned i = 0; i < c.n; i++)
            if (strncmp(c.path[i], dir, dl) == 0 && c.path[i][dl] == '/')
                return true;
    }
    return false;
}

void sbx_capture_users(struct spaced *sp, tpl_use_fn use, void *arg)
{
    char root[SBX_PATH_MAX];
    sbx_capture_dir(sp, NULL, root, sizeof root);
    DIR *d = opendir(root);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' || strlen(e->d_name) >= STORE_ID_MAX)
            continue;
        char dir[SBX_PATH_MAX - 32], p[SBX_PATH_MAX], tpl[STORE_ID_MAX] = "";
        struct sbx_chain c;
        const char *layers[VM_DISK_BACKING_MAX];
        sbx_capture_dir(sp, e->d_name, dir, sizeof dir);
        snprintf(p, sizeof p, "%s/template", dir);
        FILE *fp = fopen(p, "re");
        if (fp) {
            if (!fgets(tpl, sizeof tpl, fp))
                tpl[0] = '\0';
            fclose(fp);
        }
        snprintf(p, sizeof p, "%s/chain.json", dir);
        if (!tpl[0] || sbx_chain_read(p, &c) < 0)
            continue; /* a capture being written: its parent's chain is reported anyway */
        for (unsigned i = 0; i < c.n; i++)
            layers[i] = c.path[i];
        use(tpl, layers, c.n, arg);
    }
    closedir(d);
}

void sbx_fork_gc(struct spaced *sp)
{
    char root[SBX_PATH_MAX];
    sbx_capture_dir(sp, NULL, root, sizeof root);
    DIR *d = opendir(root);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' || strlen(e->d_name) >= STORE_ID_MAX || capture_used(sp, e->d_name))
            continue;
        char dir[SBX_PATH_MAX];
        sbx_capture_dir(sp, e->d_name, dir, sizeof dir);
        log_info("sandbox.fork", "event=capture_removed capture=%s", e->d_name);
        spaced_rm_rf(dir);
    }
    closedir(d);
}
