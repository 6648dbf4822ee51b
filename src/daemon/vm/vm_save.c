/* vm_save: memory snapshots through QEMU migration to a file.
 *
 *   vm_suspend            stop, migrate everything (RAM + devices) to dir/state, quit
 *   vm_template_snapshot  stop, migrate devices only (x-ignore-shared skips the share=on
 *                         RAM file, which becomes dir/mem), quit
 *   vm_fork_capture       stop, migrate everything to dir/state, copy the disk overlay
 *                         to dir/disk.qcow2 (both sealed 0444), cont: the VM keeps running;
 *                         then the stream is split into a RAM file dir/mem + a state
 *                         without its pages (vm_memmap.c: kind "mapped") by a worker
 *                         thread, so the loop keeps serving while a large VM's stream
 *                         is read and written (seconds for GiBs); the op ends after it
 *   vm_restore            new QEMU with -incoming defer -S (template or mapped capture:
 *                         the RAM file mapped share=off, i.e. private copy-on-write),
 *                         load dir/state, cont
 *
 * A VM adopted from an earlier spaced may still carry that spaced's unfinished save: killed
 * while QEMU wrote a suspend's state, it left QEMU migrating to a file nobody will finish,
 * or done and parked in "postmigrate", and QEMU refuses a new migration in both cases.
 * So an adopted VM's save first ends what is left (save_settle): an active migration is
 * cancelled (migrate_cancel, polled until QEMU reports it over), a postmigrate VM is
 * continued (cont: QEMU takes its disk back, as after a fork capture), then the save runs
 * as usual. The orphaned stream is never used: nothing in it or in query-migrate tells
 * which migration wrote it or that the file holds all of it (its size is known only to
 * the QEMU that wrote it), and act_suspend has removed it already; saving again costs one
 * more write of the guest's RAM, once, after a crash.
 *
 * A template snapshot is sealed once the template's QEMU has exited (vm_save_seal): the
 * RAM file and the frozen overlay become root-owned 0444, out of reach of every VM uid.
 *
 * The migration stream goes through a descriptor passed over QMP (getfd), never a path
 * or a command: QEMU's -sandbox spawn=deny forbids exec: migration, and the jailed QEMU
 * cannot see the snapshot directory at all. */
#include "vm_internal.h"
#include "clock.h"
#include "log.h"
#include "vm_memmap.h"
#include "vm_sig.h"

#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define SAVE_FDNAME "space-save"
#define LOAD_FDNAME "space-load"
#define SAVE_STEP_TIMEOUT_MS 10000

/* ---- shared ------------------------------------------------------------------------- */

static json_t *caps_args(int ignore_shared)
{
    return json_pack("{s:[{s:s, s:b}, {s:s, s:b}]}", "capabilities",
                     "capability", "x-ignore-shared", "state", ignore_shared,
                     "capability", "events", "state", 1);
}

static int snap_path(const char *dir, const char *name, char *out, size_t cap)
{
    int n = snprintf(out, cap, "%s/%s", dir, name);
    return n < 0 || (size_t)n >= cap ? -1 : 0;
}

/* ---- saving ------------------------------------------------------------------------- */

static void save_fail(struct vm *vm, int err, const char *msg)
{
    char p[4096];
    vm->save_settling = 0;
    if (vm->save_timer)
        evtimer_del(vm->save_timer);
    if (vm->save_fd >= 0)
        close(vm->save_fd);
    vm->save_fd = -1;
    if (snap_path(vm->save_dir, "state.tmp", p, sizeof(p)) == 0)
        unlink(p);
    vm->state = vm->save_was_running ? VM_STATE_RUNNING : VM_STATE_PAUSED;
    if (vm->save_was_running && vm->qmp)
        qmp_command(vm->qmp, "cont", NULL, -1, 0, NULL, NULL);
    vm_op_done(vm, err, msg);
}

static int write_meta(struct vm *vm, const char *dir, int tmpl, long long state_bytes)
{
    char p[4096];
    json_t *j = json_pack("{s:s, s:i, s:i, s:I, s:I, s:s}", "kind",
                          tmpl ? "template" : "suspend", "mem_mib", (int)vm->cfg.mem_mib,
                          "vcpus", (int)vm->cfg.vcpus, "state_bytes", (json_int_t)state_bytes,
                          "created", (json_int_t)time(NULL), "accel", vm_accel_name(vm->accel));
    /* Which QEMU (release, accelerator, CPU) can load this stream again (vm_sig.h); an
     * unknown runtime records none, as before signatures existed. */
    if (j && vm->cfg.runtime && vm->cfg.runtime[0])
        json_object_set_new(j, "runtime", json_string(vm->cfg.runtime));
    char *s = j ? json_dumps(j, JSON_INDENT(1)) : NULL;
    json_decref(j);
    int r = s && snap_path(dir, "snapshot.json", p, sizeof(p)) == 0
                ? vm_write_file_atomic(p, s, strlen(s)) : -1;
    free(s);
    return r;
}

/* Copies src to dst (new, 0600): a reflink where the filesystem shares blocks, else
 * copy_file_range (which the kernel may also serve without moving data). 0 or -1. */
static int copy_file(const char *src, const char *dst)
{
    int in = open(src, O_RDONLY | O_CLOEXEC);
    if (in < 0)
        return -1;
    int out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (out < 0) {
        close(in);
        return -1;
    }
    int rc = 0;
#ifdef FICLONE
    if (ioctl(out, FICLONE, in) == 0)
        goto done;
#endif
    for (;;) {
        ssize_t n = copy_file_range(in, NULL, out, NULL, 1 << 30, 0);
        if (n == 0)
            break;
        if (n < 0) {
            rc = -1;
            break;
        }
    }
#ifdef FICLONE
done:
#endif
    if (rc == 0 && fsync(out) < 0)
        rc = -1;
    close(in);
    close(out);
    if (rc < 0)
        unlink(dst);
    return rc;
}

/* ---- the capture's split, off the loop ---------------------------------------------- */

/* One split of a capture's stream (vm_memmap_capture) on a worker thread. The thread
 * touches only this struct and the capture's files; it tells the loop it is done through
 * an eventfd. Owned by the VM (vm->split) until then. */
struct vm_split {
    struct vm *vm;
    char *dir;
    unsigned mem_mib;
    int efd;
    struct event *ev;
    pthread_t thread;
    int rc;
    long long ms;
    char why[300];
};

static void *split_main(void *arg)
{
    struct vm_split *sp = arg;
    int64_t t0 = clock_mono_ms();
    sp->rc = vm_memmap_capture(sp->dir, sp->mem_mib, sp->why, sizeof(sp->why));
    sp->ms = clock_mono_ms() - t0;
    uint64_t one = 1;
    while (write(sp->efd, &one, sizeof one) < 0 && errno == EINTR)
        ;
    return NULL;
}

/* Joins the thread and frees sp; the VM forgets it. */
static void split_free(struct vm_split *sp)
{
    pthread_join(sp->thread, NULL);
    if (sp->vm)
        sp->vm->split = NULL;
    event_free(sp->ev);
    close(sp->efd);
    free(sp->dir);
    free(sp);
}

void vm_split_abort(struct vm *vm)
{
    if (vm->split)
        split_free(vm->split);
}

/* A failed split leaves the full stream, which restores too (slower): only logged. */
static void split_log(const struct vm *vm, int rc, long long ms, const char *why)
{
    if (rc < 0) {
        char q[400];
        log_warn("vm.capture", "vm=%s event=map_failed ms=%lld msg=%s note=\"the capture keeps "
                 "its full stream: its restores load every page\"", vm->cfg.id, ms,
                 log_quote(why, q, sizeof(q)));
    } else {
        log_info("vm.capture", "vm=%s event=mapped ms=%lld", vm->cfg.id, ms);
    }
}

static void on_split_done(evutil_socket_t fd, short what, void *arg)
{
    struct vm_split *sp = arg;
    struct vm *vm = sp->vm;
    (void)fd;
    (void)what;
    int rc = sp->rc;
    long long ms = sp->ms;
    char why[300];
    snprintf(why, sizeof why, "%s", sp->why);
    split_free(sp);
    split_log(vm, rc, ms, why);
    vm_op_done(vm, VM_OK, NULL);
}

/* Starts the split on a worker thread: 0, or -1 (nothing started). */
static int split_start(struct vm *vm)
{
    struct vm_split *sp = calloc(1, sizeof(*sp));
    if (!sp)
        return -1;
    sp->vm = vm;
    sp->mem_mib = vm->cfg.mem_mib;
    sp->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    sp->dir = strdup(vm->save_dir);
    sp->ev = sp->efd >= 0 ? event_new(vm->base, sp->efd, EV_READ, on_split_done, sp) : NULL;
    if (!sp->dir || !sp->ev || event_add(sp->ev, NULL) < 0 ||
        pthread_create(&sp->thread, NULL, split_main, sp) != 0) {
        if (sp->ev)
            event_free(sp->ev);
        if (sp->efd >= 0)
            close(sp->efd);
        free(sp->dir);
        free(sp);
        return -1;
    }
    vm->split = sp;
    return 0;
}

/* The capture is complete and the guest runs again (or stays paused): its full stream is
 * split into a mappable RAM file + device state, so that each restore maps the memory
 * instead of loading it. Done after cont, so the parent's pause does not grow by it, and
 * on a worker thread, so the loop does not wait for it either; the op completes when it
 * is done. Should the thread not start, the split runs here. */
static void capture_done(struct vm *vm)
{
    if (split_start(vm) == 0)
        return;
    char why[300];
    int64_t t0 = clock_mono_ms();
    int r = vm_memmap_capture(vm->save_dir, vm->cfg.mem_mib, why, sizeof(why));
    split_log(vm, r, clock_mono_ms() - t0, why);
    vm_op_done(vm, VM_OK, NULL);
}

static void on_cont_capture(struct qmp *q, int err, const char *msg, json_t *ret, void *arg)
{
    struct vm *vm = arg;
    (void)q;
    (void)ret;
    if (err) { /* the guest cannot run again: a VM that stays stopped is a broken one */
        vm_op_done(vm, err, msg);
        vm_kill_reason(vm, VM_EXIT_CRASHED, "cont after a fork capture failed");
        return;
    }
    vm->state = VM_STATE_RUNNING;
    capture_done(vm);
}

/* A fork capture's state is written: while the guest is still stopped (the migration
 * flushed its disk and QEMU no longer writes it until cont), the overlay is copied
 * beside the state and both are sealed, then the guest continues. */
static void capture_complete(struct vm *vm)
{
    char disk[4096];
    const char *why = NULL;
    if (snap_path(vm->save_dir, "disk.qcow2", disk, sizeof(disk)) < 0)
        why = "capture path too long";
    else if (vm->cfg.disk && copy_file(vm->cfg.disk, disk) < 0)
        why = "cannot copy the disk overlay into the capture";
    else if ((vm->cfg.disk && vm_jail_freeze(disk) < 0) ||
             (snap_path(vm->save_dir, "state", disk, sizeof(disk)) == 0 && vm_jail_freeze(disk) < 0))
        why = "cannot make the capture read-only";
    if (why) {
        save_fail(vm, VM_E_IO, why);
        return;
    }
    if (!vm->save_was_running) {
        vm->state = VM_STATE_PAUSED;
        capture_done(vm);
    } else if (qmp_command(vm->qmp, "cont", NULL, -1, SAVE_STEP_TIMEOUT_MS, on_cont_capture,
                           vm) < 0) {
        save_fail(vm, VM_E_QMP, "monitor unavailable");
    }
}

/* Migration finished: make the files durable and final, then quit QEMU. */
static void save_complete(struct vm *vm)
{
    char tmp[4096], fin[4096], mem[4096];
    struct stat st;
    int fd = vm->save_fd;
    vm->save_fd = -1;
    if (fsync(fd) < 0 || fstat(fd, &st) < 0) {
        close(fd);
        save_fail(vm, VM_E_IO, "fsync of snapshot state failed");
        return;
    }
    close(fd);
    if (snap_path(vm->save_dir, "state.tmp", tmp, sizeof(tmp)) < 0 ||
        snap_path(vm->save_dir, "state", fin, sizeof(fin)) < 0 ||
        snap_path(vm->save_dir, "mem", mem, sizeof(mem)) < 0 || rename(tmp, fin) < 0) {
        save_fail(vm, VM_E_IO, "cannot rename snapshot state");
        return;
    }
    if (vm->save_template && strcmp(vm->cfg.mem_path, mem) != 0) {
        unlink(mem);
        if (link(vm->cfg.mem_path, mem) < 0) {
            save_fail(vm, VM_E_IO, "cannot link RAM file into snapshot (same filesystem?)");
            return;
        }
    }
    if (write_meta(vm, vm->save_dir, vm->save_template, (long long)st.st_size) < 0) {
        save_fail(vm, VM_E_IO, "cannot write snapshot.json");
        return;
    }
    if (vm->save_keep) {
        capture_complete(vm);
        return;
    }
    vm_set_exit(vm, VM_EXIT_SAVED, "saved to %s", vm->save_dir);
    /* The op completes when the process is gone (finish()), so "host resources
     * released" is true when the caller hears success. */
    qmp_command(vm->qmp, "quit", NULL, -1, 0, NULL, NULL);
}

int vm_save_seal(struct vm *vm, char *msg, size_t msglen)
{
    char mem[4096];
    if (!vm->save_template)
        return VM_OK;
    /* From now on every clone maps the RAM file privately and backs onto the overlay:
     * nobody may write either. Done only now that the template's QEMU, which held them
     * open for writing under its uid, is gone. */
    if (snap_path(vm->save_dir, "mem", mem, sizeof(mem)) < 0 || vm_jail_freeze(mem) < 0 ||
        (vm->cfg.disk && vm_jail_freeze(vm->cfg.disk) < 0)) {
        snprintf(msg, msglen, "cannot make the template snapshot read-only: %s", strerror(errno));
        return VM_E_IO;
    }
    return VM_OK;
}

static void on_migrate_reply(struct qmp *q, int err, const char *msg, json_t *ret, void *arg)
{
    struct vm *vm = arg;
    if (err)
        save_fail(vm, err, msg);
}

static void on_getfd_save(struct qmp *q, int err, const char *msg, json_t *ret, void *arg)
{
    struct vm *vm = arg;
    if (err) {
        save_fail(vm, err, msg);
        return;
    }
    json_t *a = json_pack("{s:s}", "uri", "fd:" SAVE_FDNAME);
    if (qmp_command(q, "migrate", a, -1, SAVE_STEP_TIMEOUT_MS, on_migrate_reply, vm) < 0)
        save_fail(vm, VM_E_QMP, "monitor unavailable");
}

static void on_params_save(struct qmp *q, int err, const char *msg, json_t *ret, void *arg)
{
    struct vm *vm = arg;
    if (err) {
        save_fail(vm, err, msg);
        return;
    }
    json_t *a = json_pack("{s:s}", "fdname", SAVE_FDNAME);
    if (qmp_command(q, "getfd", a, vm->save_fd, SAVE_STEP_TIMEOUT_MS, on_getfd_save, vm) < 0)
        save_fail(vm, VM_E_QMP, "monitor unavailable");
}

static void on_caps_save(struct qmp *q, int err, const char *msg, json_t *ret, void *arg)
{
    struct vm *vm = arg;
    if (err) {
        save_fail(vm, err, msg);
        return;
    }
    /* The default migration bandwidth cap (128 MiB/s) would make a suspend of a large
     * guest needlessly slow; the destination is a local file. */
    json_t *a = json_pack("{s:I}", "max-bandwidth", (json_int_t)1 << 40);
    if (qmp_command(q, "migrate-set-parameters", a, -1, SAVE_STEP_TIMEOUT_MS, on_params_save,
                    vm) < 0)
        save_fail(vm, VM_E_QMP, "monitor unavailable");
}

static void on_stop_save(struct qmp *q, int err, const char *msg, json_t *ret, void *arg)
{
    struct vm *vm = arg;
    if (err) {
        save_fail(vm, err, msg);
        return;
    }
    if (qmp_command(q, "migrate-set-capabilities", caps_args(vm->save_template), -1,
                    SAVE_STEP_TIMEOUT_MS, on_caps_save, vm) < 0)
        save_fail(vm, VM_E_QMP, "monitor unavailable");
}

/* `stop` also when already paused: harmless, and one path is easier to trust. 0 or -1
 * (the monitor is gone). */
static int save_stop(struct vm *vm)
{
    return qmp_command(vm->qmp, "stop", NULL, -1, SAVE_STEP_TIMEOUT_MS, on_stop_save, vm);
}

/* ---- an adopted VM's unfinished migration (see the top of this file) ------------------ */

#define SETTLE_POLL_MS 50
#define SETTLE_POLLS (SAVE_STEP_TIMEOUT_MS / SETTLE_POLL_MS)

static int save_settle(struct vm *vm);

static void settle_log(struct vm *vm, const char *status, const char *action)
{
    log_warn("vm.save", "vm=%s event=earlier_migration status=%s action=%s", vm->cfg.id,
             status, action);
}

/* The common start of the settle steps' QMP answers: false when the settling ended
 * meanwhile, or when the answer is an error (the save fails with it). */
static bool settle_answer_ok(struct vm *vm, int err, const char *msg)
{
    if (!vm->save_settling)
        return false;
    if (err) {
        save_fail(vm, err, msg);
        return false;
    }
    return true;
}

static void on_settle_step(struct qmp *q, int err, const char *msg, json_t *ret, void *arg)
{
    struct vm *vm = arg;
    (void)q;
    (void)ret;
    if (!settle_answer_ok(vm, err, msg))
        return;
    vm->save_settling = 0;
    if (save_stop(vm) < 0)
        save_fail(vm, VM_E_QMP, "monitor unavailable");
}

static void on_settle_status(struct qmp *q, int err, const char *msg, json_t *ret, void *arg)
{
    struct vm *vm = arg;
    if (!settle_answer_ok(vm, err, msg))
        return;
    const char *st = json_string_value(json_object_get(ret, "status"));
    if (st && !strcmp(st, "postmigrate")) {
        /* the earlier migration completed: QEMU migrates again only once continued */
        settle_log(vm, "completed", "cont");
        if (qmp_command(q, "cont", NULL, -1, SAVE_STEP_TIMEOUT_MS, on_settle_step, vm) < 0)
            save_fail(vm, VM_E_QMP, "monitor unavailable");
        return;
    }
    on_settle_step(q, 0, NULL, NULL, vm);
}

static void on_settle_poll(evutil_socket_t fd, short what, void *arg)
{
    struct vm *vm = arg;
    (void)fd;
    (void)what;
    if (vm->save_settling && save_settle(vm) < 0)
        save_fail(vm, VM_E_QMP, "monitor unavailable");
}

static void on_settle_migrate(struct qmp *q, int err, const char *msg, json_t *ret, void *arg)
{
    struct vm *vm = arg;
    if (!settle_answer_ok(vm, err, msg))
        return;
    const char *st = json_string_value(json_object_get(ret, "status"));
    if (!st || !strcmp(st, "none") || !strcmp(st, "completed") || !strcmp(st, "failed") ||
        !strcmp(st, "cancelled")) {
        /* over (or never begun): the run state says whether QEMU still holds it */
        if (qmp_command(q, "query-status", NULL, -1, SAVE_STEP_TIMEOUT_MS, on_settle_status,
                        vm) < 0)
            save_fail(vm, VM_E_QMP, "monitor unavailable");
        return;
    }
    /* setup, active, device, cancelling, ...: still writing to the orphaned file */
    if (vm->save_settle_polls == 0) {
        settle_log(vm, st, "cancel");
        if (qmp_command(q, "migrate_cancel", NULL, -1, SAVE_STEP_TIMEOUT_MS, NULL, vm) < 0) {
            save_fail(vm, VM_E_QMP, "monitor unavailable");
            return;
        }
    }
    if (++vm->save_settle_polls > SETTLE_POLLS) {
        save_fail(vm, VM_E_TIMEOUT, "an earlier migration of the adopted VM does not end");
        return;
    }
    if (!vm->save_timer)
        vm->save_timer = evtimer_new(vm->base, on_settle_poll, vm);
    struct timeval tv = {0, SETTLE_POLL_MS * 1000};
    if (!vm->save_timer || evtimer_add(vm->save_timer, &tv) < 0)
        save_fail(vm, VM_E_IO, "cannot arm a timer");
}

/* Asks QEMU where the adopted VM's last migration stands; the replies above end it and
 * then stop the VM for this save. 0 or -1 (the monitor is gone). */
static int save_settle(struct vm *vm)
{
    return qmp_command(vm->qmp, "query-migrate", NULL, -1, SAVE_STEP_TIMEOUT_MS,
                       on_settle_migrate, vm);
}

static int save_begin(struct vm *vm, const char *dir, int tmpl, int keep, vm_done_cb cb,
                      void *arg)
{
    char p[4096];
    if (vm->detached || vm->state == VM_STATE_EXITED)
        return VM_E_STATE;
    if (vm->op != VM_OP_NONE)
        return VM_E_BUSY;
    if (vm->state != VM_STATE_RUNNING && vm->state != VM_STATE_PAUSED)
        return VM_E_STATE;
    if ((tmpl && !vm->cfg.mem_path) || !vm->cfg.vcpus || !vm->cfg.mem_mib)
        return VM_E_STATE; /* size unknown: adopted from a record without it */
    if ((mkdir(dir, 0700) < 0 && errno != EEXIST) ||
        snap_path(dir, "state.tmp", p, sizeof(p)) < 0)
        return VM_E_IO;
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return VM_E_IO;
    char *d = strdup(dir);
    if (!d) {
        close(fd);
        unlink(p);
        return VM_E_IO;
    }
    free(vm->save_dir);
    vm->save_dir = d;
    vm->save_fd = fd;
    vm->save_template = tmpl;
    vm->save_keep = keep;
    vm->save_was_running = vm->state == VM_STATE_RUNNING;
    vm->op = VM_OP_SAVE;
    vm->op_cb = cb;
    vm->op_arg = arg;
    vm->state = VM_STATE_SAVING;
    if (vm->adopted) {
        vm->save_settling = 1;
        vm->save_settle_polls = 0;
        if (save_settle(vm) == 0)
            return VM_OK;
        vm->save_settling = 0;
    } else if (save_stop(vm) == 0) {
        return VM_OK;
    }
    {
        vm->op = VM_OP_NONE;
        vm->state = vm->save_was_running ? VM_STATE_RUNNING : VM_STATE_PAUSED;
        close(fd);
        vm->save_fd = -1;
        unlink(p);
        return VM_E_QMP;
    }
    return VM_OK;
}

int vm_suspend(struct vm *vm, const char *dir, vm_done_cb cb, void *arg)
{
    return save_begin(vm, dir, 0, 0, cb, arg);
}

int vm_fork_capture(struct vm *vm, const char *dir, vm_done_cb cb, void *arg)
{
    return save_begin(vm, dir, 0, 1, cb, arg);
}

int vm_template_snapshot(struct vm *vm, const char *dir, vm_done_cb cb, void *arg)
{
    return save_begin(vm, dir, 1, 0, cb, arg);
}

/* ---- restoring ---------------------------------------------------------------------- */

static void restore_fail(struct vm *vm, const char *msg)
{
    char m[600];
    snprintf(m, sizeof(m), "snapshot restore failed: %s", msg ? msg : "?");
    vm_kill_reason(vm, VM_EXIT_CRASHED, m);
}

static void on_cont_restore(struct qmp *q, int err, const char *msg, json_t *ret, void *arg)
{
    struct vm *vm = arg;
    if (err)
        restore_fail(vm, msg);
    else
        vm_started(vm, VM_STATE_RUNNING);
}

static void restore_loaded(struct vm *vm)
{
    if (vm->state_fd >= 0)
        close(vm->state_fd);
    vm->state_fd = -1;
    if (vm->restore_paused) {
        vm_started(vm, VM_STATE_PAUSED);
        return;
    }
    if (qmp_command(vm->qmp, "cont", NULL, -1, SAVE_STEP_TIMEOUT_MS, on_cont_restore, vm) < 0)
        restore_fail(vm, "monitor unavailable");
}

/* The migration to the state file failed: QEMU's reason (full disk, I/O error) is in
 * query-migrate's error-desc, which the MIGRATION event does not carry. */
static void on_save_failed_desc(struct qmp *q, int err, const char *msg, json_t *ret, void *arg)
{
    struct vm *vm = arg;
    if (vm->op != VM_OP_SAVE || vm->save_fd < 0)
        return;
    const char *desc = err ? NULL : json_string_value(json_object_get(ret, "error-desc"));
    char m[400];
    snprintf(m, sizeof(m), "migration to the snapshot file failed: %s",
             desc ? desc : "QEMU gave no reason");
    save_fail(vm, VM_E_IO, m);
}

void vm_save_on_migration(struct vm *vm, const char *status)
{
    int done = !strcmp(status, "completed");
    int bad = !strcmp(status, "failed") || !strcmp(status, "cancelled");
    if (vm->op == VM_OP_SAVE && vm->save_settling) {
        return; /* the earlier migration's end: save_settle polls for it */
    } else if (vm->op == VM_OP_SAVE && vm->save_fd >= 0) {
        if (done)
            save_complete(vm);
        else if (bad && qmp_command(vm->qmp, "query-migrate", NULL, -1, SAVE_STEP_TIMEOUT_MS,
                                    on_save_failed_desc, vm) < 0)
            save_fail(vm, VM_E_IO, "migration to the snapshot file failed");
    } else if (vm->op == VM_OP_START && vm->snap_dir) {
        if (done)
            restore_loaded(vm);
        else if (bad)
            restore_fail(vm, "QEMU could not load the snapshot state");
    }
}

static void on_incoming_reply(struct qmp *q, int err, const char *msg, json_t *ret, void *arg)
{
    if (err)
        restore_fail(arg, msg);
}

static void on_getfd_load(struct qmp *q, int err, const char *msg, json_t *ret, void *arg)
{
    struct vm *vm = arg;
    if (err) {
        restore_fail(vm, msg);
        return;
    }
    json_t *a = json_pack("{s:s}", "uri", "fd:" LOAD_FDNAME);
    if (qmp_command(q, "migrate-incoming", a, -1, SAVE_STEP_TIMEOUT_MS, on_incoming_reply, vm) < 0)
        restore_fail(vm, "monitor unavailable");
}

static void on_caps_load(struct qmp *q, int err, const char *msg, json_t *ret, void *arg)
{
    struct vm *vm = arg;
    if (err) {
        restore_fail(vm, msg);
        return;
    }
    json_t *a = json_pack("{s:s}", "fdname", LOAD_FDNAME);
    if (qmp_command(q, "getfd", a, vm->state_fd, SAVE_STEP_TIMEOUT_MS, on_getfd_load, vm) < 0)
        restore_fail(vm, "monitor unavailable");
}

void vm_restore_begin(struct vm *vm)
{
    if (qmp_command(vm->qmp, "migrate-set-capabilities", caps_args(vm->snap_ignore_shared), -1,
                    SAVE_STEP_TIMEOUT_MS, on_caps_load, vm) < 0)
        restore_fail(vm, "monitor unavailable");
}

/* Reads and checks dir/snapshot.json against cfg. Returns 0 with *mapped set (the RAM
 * comes from dir/mem: a template's, x-ignore-shared, or a mapped capture's, whose stream
 * was taken without it) and *ignore_shared; else VM_E_SNAPSHOT or VM_E_INCOMPATIBLE with
 * msg. The runtime is compared first: another QEMU's stream is refused before its sizes
 * are read, with a message that says so rather than what QEMU would fail with later. A
 * snapshot.json without "runtime" (saved before it was recorded) is accepted as before
 * (vm_sig_compatible). */
static int check_meta(const char *dir, const struct vm_config *cfg, int *mapped,
                      int *ignore_shared, char *msg, size_t msglen)
{
    char p[4096];
    json_error_t je;
    if (snap_path(dir, "snapshot.json", p, sizeof(p)) < 0) {
        snprintf(msg, msglen, "snapshot path too long");
        return VM_E_SNAPSHOT;
    }
    json_t *j = json_load_file(p, JSON_REJECT_DUPLICATES, &je);
    if (!j) {
        snprintf(msg, msglen, "snapshot %s: missing or corrupt snapshot.json", dir);
        return VM_E_SNAPSHOT;
    }
    const char *kind = json_string_value(json_object_get(j, "kind"));
    json_int_t mem = json_integer_value(json_object_get(j, "mem_mib"));
    json_int_t cpus = json_integer_value(json_object_get(j, "vcpus"));
    json_int_t bytes = json_integer_value(json_object_get(j, "state_bytes"));
    json_t *rt = json_object_get(j, "runtime");
    int r = VM_E_SNAPSHOT;
    struct stat st;
    if (rt && (!json_is_string(rt) || !vm_sig_valid(json_string_value(rt))))
        snprintf(msg, msglen, "snapshot %s: invalid runtime in snapshot.json", dir);
    else if (rt && !vm_sig_compatible(json_string_value(rt), cfg->runtime)) {
        char what[4200];
        snprintf(what, sizeof what, "snapshot %s", dir);
        vm_sig_refusal(what, json_string_value(rt), cfg->runtime, msg, msglen);
        r = VM_E_INCOMPATIBLE;
    } else if (!kind || (strcmp(kind, "template") && strcmp(kind, "suspend") && strcmp(kind, "mapped")))
        snprintf(msg, msglen, "snapshot %s: unknown kind", dir);
    else if (mem != cfg->mem_mib || cpus != cfg->vcpus)
        snprintf(msg, msglen, "snapshot %s was taken with %lld MiB / %lld vCPUs, config asks "
                 "%u MiB / %u vCPUs", dir, (long long)mem, (long long)cpus, cfg->mem_mib,
                 cfg->vcpus);
    else if (snap_path(dir, "state", p, sizeof(p)) < 0 || stat(p, &st) < 0 ||
             st.st_size != bytes)
        snprintf(msg, msglen, "snapshot %s: state file missing or truncated", dir);
    else if ((*ignore_shared = !strcmp(kind, "template"),
              *mapped = *ignore_shared || !strcmp(kind, "mapped")) &&
             (snap_path(dir, "mem", p, sizeof(p)) < 0 || stat(p, &st) < 0 ||
              st.st_size != (off_t)cfg->mem_mib << 20))
        snprintf(msg, msglen, "snapshot %s: RAM file missing or of the wrong size", dir);
    else
        r = VM_OK;
    json_decref(j);
    return r;
}

struct vm *vm_restore(struct event_base *base, const struct vm_config *cfg,
                      const char *snapshot_dir, int paused,
                      const struct vm_callbacks *cbs, void *arg, int *err, char *msg,
                      size_t msglen)
{
    char state[4096], mem[4096];
    int mapped = 0, ignore_shared = 0;
    int bad = snapshot_dir ? check_meta(snapshot_dir, cfg, &mapped, &ignore_shared, msg, msglen)
                           : VM_E_SNAPSHOT;
    if (bad != VM_OK) {
        if (!snapshot_dir)
            snprintf(msg, msglen, "no snapshot directory");
        *err = bad;
        return NULL;
    }
    struct vm *vm = vm_new(base, cfg, cbs, arg, err, msg, msglen);
    if (!vm)
        return NULL;
    snap_path(snapshot_dir, "state", state, sizeof(state));
    snap_path(snapshot_dir, "mem", mem, sizeof(mem));
    vm->snap_dir = strdup(snapshot_dir);
    vm->snap_mapped = mapped;
    vm->snap_ignore_shared = ignore_shared;
    vm->restore_paused = paused;
    vm->state_fd = open(state, O_RDONLY | O_CLOEXEC);
    if (!vm->snap_dir || vm->state_fd < 0) {
        *err = VM_E_SNAPSHOT;
        snprintf(msg, msglen, "open %s: %s", state, strerror(errno));
        if (vm->state_fd >= 0)
            close(vm->state_fd);
        vm_free_unstarted(vm);
        return NULL;
    }
    /* A restored VM keeps no RAM file of its own: the template's (or a mapped capture's)
     * is mapped private, a suspended VM's RAM comes back from the stream into anonymous
     * memory. */
    free((char *)vm->cfg.mem_path);
    vm->cfg.mem_path = NULL;
    if (vm_start_process(vm, mapped ? mem : NULL, 0, 1, 1, err, msg, msglen) < 0) {
        close(vm->state_fd);
        vm_free_unstarted(vm);
        return NULL;
    }
    return vm;
}
