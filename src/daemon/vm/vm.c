/* vm: supervision (pidfd, QMP events and pings, exit reporting), QMP wiring and the
 * simple operations (pause, resume, shutdown, kill, detach). Starting QEMU lives in
 * vm_start.c, snapshots in vm_save.c, adoption in vm_adopt.c, the command line in
 * vm_cmdline.c, the jail in vm_spawn.c. */
#include "vm_internal.h"
#include "clock.h"
#include "log.h"
#include "vm_cgroup.h"
#include "vm_spawn.h"

#include <dirent.h>
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#define QMP_LOST_GRACE_MS 300     /* monitor EOF -> wait this long for the exit itself */

/* ---- small helpers ------------------------------------------------------------------- */

void vm_set_exit(struct vm *vm, enum vm_exit_reason r, const char *fmt, ...)
{
    if (vm->exit_reason_set)
        return;
    vm->exit_reason_set = 1;
    vm->exit_reason = r;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(vm->exit_msg, sizeof(vm->exit_msg), fmt, ap);
    va_end(ap);
}

static void send_signal(struct vm *vm, int sig)
{
    /* Through the pidfd: a pid alone could have been recycled by the time we signal. */
    if (vm->pidfd >= 0)
        syscall(SYS_pidfd_send_signal, vm->pidfd, sig, NULL, 0);
}

void vm_kill_reason(struct vm *vm, enum vm_exit_reason r, const char *msg)
{
    if (vm->state == VM_STATE_EXITED)
        return;
    vm_set_exit(vm, r, "%s", msg);
    send_signal(vm, SIGKILL);
}

void vm_op_done(struct vm *vm, int err, const char *msg)
{
    vm_done_cb cb = vm->op_cb;
    void *arg = vm->op_arg;
    vm->op = VM_OP_NONE;
    vm->op_cb = NULL;
    vm->op_arg = NULL;
    if (cb)
        cb(vm, err, err ? msg : NULL, arg);
}

static void free_later_cb(evutil_socket_t fd, short what, void *arg)
{
    struct vm *vm = arg;
    vm_config_free(&vm->cfg);
    free(vm->snap_dir);
    free(vm->save_dir);
    free(vm);
}

/* Releases everything but the struct itself, which is freed from the loop: code up the
 * stack (a QMP dispatch, an event callback) may still look at vm->detached. */
static void release(struct vm *vm)
{
    vm_split_abort(vm);
    vm_console_close(vm);
    if (vm->qmp)
        qmp_free(vm->qmp);
    vm->qmp = NULL;
    if (vm->ping_timer)
        event_free(vm->ping_timer);
    vm->ping_timer = NULL;
    if (vm->kill_timer)
        event_free(vm->kill_timer);
    vm->kill_timer = NULL;
    if (vm->lost_timer)
        event_free(vm->lost_timer);
    vm->lost_timer = NULL;
    if (vm->save_timer)
        event_free(vm->save_timer);
    vm->save_timer = NULL;
    if (vm->pid_ev)
        event_free(vm->pid_ev);
    vm->pid_ev = NULL;
    if (vm->pidfd >= 0)
        close(vm->pidfd);
    vm->pidfd = -1;
    if (vm->state_fd >= 0)
        close(vm->state_fd);
    vm->state_fd = -1;
    if (vm->save_fd >= 0)
        close(vm->save_fd);
    vm->save_fd = -1;
    vm->detached = 1;
    event_base_once(vm->base, -1, EV_TIMEOUT, free_later_cb, vm, NULL);
}

void vm_remove_runtime_files(struct vm *vm)
{
    static const char *const names[] = { "qmp.sock", "agent.sock", "console.sock", "qemu.pid",
                                         "vm.json" };
    char p[4096];
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (vm_path(vm, names[i], p, sizeof(p)) == 0)
            unlink(p);
    if (vm_path(vm, "root", p, sizeof(p)) == 0)
        rmdir(p);
    if (vm->cfg.jail.enabled && vm->cfg.jail.cgroup_parent)
        vm_cgroup_remove(CGROUP_ROOT, vm->cfg.jail.cgroup_parent, vm->cfg.id);
    vm_jail_release(vm);
}

/* The process is gone: report, clean up, free. */
static void finish(struct vm *vm, int status)
{
    if (vm->state == VM_STATE_EXITED)
        return;
    if (!vm->exit_reason_set) {
        if (vm->op == VM_OP_SHUTDOWN)
            vm_set_exit(vm, VM_EXIT_SHUTDOWN, "guest powered off");
        else if (status >= 0 && WIFSIGNALED(status))
            vm_set_exit(vm, VM_EXIT_CRASHED, "QEMU killed by signal %d", WTERMSIG(status));
        else if (status >= 0)
            vm_set_exit(vm, VM_EXIT_CRASHED, "QEMU exited with status %d", WEXITSTATUS(status));
        else
            vm_set_exit(vm, VM_EXIT_CRASHED, "QEMU exited");
    }
    vm->state = VM_STATE_EXITED;
    vm_split_abort(vm); /* before the op fails and its owner removes the capture */
    vm_console_drain(vm);
    char tail[2048], qlog[512];
    vm_console_tail(vm, tail, sizeof(tail));
    vm_remove_runtime_files(vm);
    enum vm_exit_reason reason = vm->exit_reason;
    char msg[1100];
    snprintf(msg, sizeof(msg), "%s", vm->exit_msg);
    if (vm->op == VM_OP_START) {
        /* A start that never completed: QEMU's own stderr says why (bad disk, corrupt
         * snapshot, unknown option). */
        if (vm_qemu_log_tail(vm, qlog, sizeof(qlog)) > 0) {
            size_t l = strlen(msg);
            snprintf(msg + l, sizeof(msg) - l, "; qemu: %s", qlog);
            /* QEMU may echo bytes of a corrupt stream: keep the message printable. */
            for (char *c = msg + l; *c; c++)
                if (*c == '\n')
                    *c = ' ';
                else if ((unsigned char)*c < 0x20 || (unsigned char)*c >= 0x7f)
                    *c = '?';
        }
        int err = reason == VM_EXIT_HUNG ? VM_E_TIMEOUT
                  : vm->snap_dir && reason == VM_EXIT_CRASHED ? VM_E_SNAPSHOT
                  : vm->start_timed_out ? VM_E_TIMEOUT
                  : VM_E_START;
        vm->op = VM_OP_NONE;
        reason = VM_EXIT_FAILED;
        if (vm->cbs.on_ready)
            vm->cbs.on_ready(vm, err, msg, vm->arg);
    } else if (vm->op == VM_OP_SAVE) {
        int err = reason == VM_EXIT_SAVED ? vm_save_seal(vm, msg, sizeof msg) : VM_E_EXITED;
        vm_op_done(vm, err, msg);
    } else if (vm->op == VM_OP_SHUTDOWN) {
        vm_op_done(vm, VM_OK, NULL);
    } else if (vm->op != VM_OP_NONE) {
        vm_op_done(vm, VM_E_EXITED, msg);
    }
    char q1[600];
    log_info("vm.exit", "id=%s pid=%d reason=%s msg=%s", vm->cfg.id, (int)vm->pid,
             vm_exit_reason_name(reason), log_quote(msg, q1, sizeof(q1)));
    if (vm->cbs.on_exit)
        vm->cbs.on_exit(vm, reason, msg, tail, vm->arg);
    release(vm);
}

static void on_pid(evutil_socket_t fd, short what, void *arg)
{
    struct vm *vm = arg;
    int status = -1;
    if (vm->is_child) {
        pid_t r;
        do
            r = waitpid(vm->pid, &status, WNOHANG);
        while (r < 0 && errno == EINTR);
        if (r != vm->pid)
            status = -1;
    }
    finish(vm, status);
}

/* ---- supervision: QMP ping ------------------------------------------------------------ */

/* Milliseconds QEMU's threads have spent runnable but waiting for a CPU, summed over its
 * threads (field 2 of /proc/<pid>/task/<tid>/schedstat, in ns); 0 when unreadable. */
static uint64_t runq_wait_ms(pid_t pid)
{
    char dir[64], p[128];
    snprintf(dir, sizeof(dir), "/proc/%d/task", (int)pid);
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    unsigned long long sum = 0, run, wait;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        snprintf(p, sizeof(p), "%s/%.20s/schedstat", dir, de->d_name);
        FILE *f = fopen(p, "re");
        if (f && fscanf(f, "%llu %llu", &run, &wait) == 2)
            sum += wait;
        if (f)
            fclose(f);
    }
    closedir(d);
    return sum / 1000000;
}

/* The scheduler state letter of QEMU's main thread ('T' when stopped), or '?'. */
static char proc_state(pid_t pid)
{
    char p[64], buf[512];
    snprintf(p, sizeof(p), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(p, "re");
    size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
    if (f)
        fclose(f);
    buf[n] = '\0';
    const char *paren = strrchr(buf, ')'); /* the command name may hold anything */
    return paren && paren[1] == ' ' && paren[2] ? paren[2] : '?';
}

/* A ping is still unanswered at a tick `gap` ms after the previous one: add what does not
 * count to its excused time, then judge its age (see VM_HANG_MS). */
static void ping_check(struct vm *vm, uint64_t now, uint64_t gap)
{
    uint64_t late = gap > VM_PING_INTERVAL_MS ? gap - VM_PING_INTERVAL_MS : 0;
    uint64_t runq = runq_wait_ms(vm->pid);
    uint64_t waited = vm->ping_runq_set && runq > vm->ping_runq_ms ? runq - vm->ping_runq_ms : 0;
    vm->ping_runq_ms = runq;
    vm->ping_runq_set = 1;
    /* A main thread in uninterruptible disk sleep ('D') waits for the host's storage,
     * not for itself: the whole gap is excused. The sum over threads can exceed the
     * wall time; never excuse more than passed. */
    if (proc_state(vm->pid) == 'D' || late + waited > gap)
        vm->ping_excused_ms += gap;
    else
        vm->ping_excused_ms += late + waited;
    uint64_t span = now - vm->ping_sent_ms;
    uint64_t age = span > vm->ping_excused_ms ? span - vm->ping_excused_ms : 0;
    unsigned limit = vm->op == VM_OP_SAVE ? VM_HANG_SAVE_MS : VM_HANG_MS;
    if (age < limit)
        return;
    char m[160];
    snprintf(m, sizeof(m), "QMP did not answer for %llu ms (%llu ms counted; process state %c)",
             (unsigned long long)span, (unsigned long long)age, proc_state(vm->pid));
    vm_kill_reason(vm, VM_EXIT_HUNG, m);
}

static void on_ping_reply(struct qmp *q, int err, const char *msg, json_t *ret, void *arg)
{
    struct vm *vm = arg;
    vm->ping_outstanding = 0;
    if (err)
        return; /* the connection is going away: on_qmp_close handles it */
    const char *st = json_string_value(json_object_get(ret, "status"));
    if (st && !strcmp(st, "running"))
        vm->room_waiting = 0; /* continued (by vm_room.c or a resume) */
    else if (st && !strcmp(st, "io-error"))
        vm_room_io_error(vm); /* a full host disk: waits for room, not a crash (vm_room.c) */
    else if (st && (!strcmp(st, "guest-panicked") || !strcmp(st, "internal-error")))
        vm_kill_reason(vm, VM_EXIT_CRASHED, st);
}

/* Sends a query-status unless one is outstanding or QMP cannot take it now. */
static void ping_send(struct vm *vm, uint64_t now)
{
    /* An incoming migration loads in a coroutine of QEMU's main loop that does not yield
     * while reading a regular file, so QMP is legitimately silent during a restore; the
     * start has its own deadline (VM_START_TIMEOUT_MS). */
    if (vm->ping_outstanding || !vm->qmp || !qmp_is_ready(vm->qmp) || vm->op == VM_OP_START)
        return;
    /* No per-command timeout: the reply is awaited as long as it takes, and ping_check
     * decides when waiting has become a hang. */
    if (qmp_command(vm->qmp, "query-status", NULL, -1, 0, on_ping_reply, vm) == 0) {
        vm->ping_outstanding = 1;
        vm->ping_sent_ms = now;
        vm->ping_excused_ms = 0;
        vm->ping_runq_set = 0;
    }
}

static void on_ping_timer(evutil_socket_t fd, short what, void *arg)
{
    struct vm *vm = arg;
    uint64_t now = (uint64_t)clock_mono_ms();
    uint64_t gap = vm->ping_tick_ms ? now - vm->ping_tick_ms : VM_PING_INTERVAL_MS;
    vm->ping_tick_ms = now;
    vm_qemu_log_bound(vm);
    if (vm->ping_outstanding) {
        ping_check(vm, now, gap);
        return;
    }
    /* The tick itself costs QEMU nothing: a QMP round trip goes out every VM_PING_QMP_MS,
     * or at once when the process is stopped (SIGSTOP, a tracer), so such a hang is
     * judged by ping_check on the next tick as if every tick pinged (see vm.h). */
    if (vm_ping_due(proc_state(vm->pid), now, vm->ping_sent_ms))
        ping_send(vm, now);
}

int vm_ping_due(char proc_state, uint64_t now_ms, uint64_t last_sent_ms)
{
    return proc_state == 'T' || proc_state == 't' || !last_sent_ms ||
           now_ms - last_sent_ms >= VM_PING_QMP_MS;
}

/* ---- QMP handlers --------------------------------------------------------------------- */

static void on_qmp_ready(struct qmp *q, void *arg)
{
    struct vm *vm = arg;
    if (vm->op != VM_OP_START)
        return;
    if (vm->adopting)
        vm_adopt_ready(vm);
    else if (vm->snap_dir)
        vm_restore_begin(vm);
    else
        vm_started(vm, VM_STATE_RUNNING);
}

static void on_qmp_event(struct qmp *q, const char *ev, json_t *data, void *arg)
{
    struct vm *vm = arg;
    if (!strcmp(ev, "MIGRATION")) {
        const char *st = json_string_value(json_object_get(data, "status"));
        if (st)
            vm_save_on_migration(vm, st);
    } else if (!strcmp(ev, "SHUTDOWN")) {
        const char *why = json_string_value(json_object_get(data, "reason"));
        if (why && !strcmp(why, "guest-shutdown"))
            vm_set_exit(vm, VM_EXIT_SHUTDOWN, "guest powered off");
        else if (why && (!strcmp(why, "guest-reset") || !strcmp(why, "guest-panic")))
            vm_set_exit(vm, VM_EXIT_CRASHED, "guest reset or panicked (%s)", why);
    } else if (!strcmp(ev, "GUEST_PANICKED")) {
        vm_kill_reason(vm, VM_EXIT_CRASHED, "guest kernel panicked");
    } else if (vm->op == VM_OP_NONE && !strcmp(ev, "STOP") && vm->state == VM_STATE_RUNNING) {
        vm->state = VM_STATE_PAUSED;
        /* Not asked for by spaced: a query-status now tells an internal or I/O error
         * (on_ping_reply) without waiting for the next periodic ping. */
        ping_send(vm, (uint64_t)clock_mono_ms());
    } else if (vm->op == VM_OP_NONE && !strcmp(ev, "RESUME") && vm->state == VM_STATE_PAUSED) {
        vm->state = VM_STATE_RUNNING;
    }
}

static void on_qmp_lost(evutil_socket_t fd, short what, void *arg)
{
    struct vm *vm = arg;
    char m[200];
    snprintf(m, sizeof(m), "QMP connection lost: %s", vm->qmp_lost_why);
    vm_kill_reason(vm, VM_EXIT_CRASHED, m);
}

static void on_qmp_close(struct qmp *q, const char *why, void *arg)
{
    struct vm *vm = arg;
    /* Normally the echo of an exit the pidfd reports a moment later (with the real
     * cause); a process still alive without its monitor after QMP_LOST_GRACE_MS can no
     * longer be controlled, so it is killed. */
    snprintf(vm->qmp_lost_why, sizeof(vm->qmp_lost_why), "%s", why);
    struct timeval tv = { 0, QMP_LOST_GRACE_MS * 1000 };
    if (!vm->lost_timer)
        vm->lost_timer = evtimer_new(vm->base, on_qmp_lost, vm);
    if (vm->lost_timer)
        evtimer_add(vm->lost_timer, &tv);
    else
        on_qmp_lost(-1, 0, vm);
}

static const struct qmp_handlers qmp_h = {
    .on_ready = on_qmp_ready,
    .on_event = on_qmp_event,
    .on_close = on_qmp_close,
};

int vm_connect_unix(const char *path)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    if (strlen(path) >= sizeof(sa.sun_path)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(sa.sun_path, path, strlen(path) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    evutil_make_socket_nonblocking(fd);
    return fd;
}

/* Connects QMP (and the console) and starts watching the process. */
int vm_attach_process(struct vm *vm, char *msg, size_t msglen)
{
    char p[4096];
    vm->pidfd = vm_pidfd_open(vm->pid);
    if (vm->pidfd < 0) {
        snprintf(msg, msglen, "pidfd_open(%d): %s", (int)vm->pid, strerror(errno));
        return -1;
    }
    vm->pid_ev = event_new(vm->base, vm->pidfd, EV_READ, on_pid, vm);
    vm->ping_timer = event_new(vm->base, -1, EV_PERSIST, on_ping_timer, vm);
    int fd = vm_path(vm, "qmp.sock", p, sizeof(p)) == 0 ? vm_connect_unix(p) : -1;
    if (fd < 0 || !vm->pid_ev || !vm->ping_timer) {
        snprintf(msg, msglen, "connect QMP %s: %s", p, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    vm->qmp = qmp_new(vm->base, fd, &qmp_h, vm);
    if (!vm->qmp) {
        snprintf(msg, msglen, "out of memory");
        return -1;
    }
    event_add(vm->pid_ev, NULL);
    struct timeval tv = { VM_PING_INTERVAL_MS / 1000, (VM_PING_INTERVAL_MS % 1000) * 1000 };
    event_add(vm->ping_timer, &tv);
    vm_console_attach(vm);
    return 0;
}

/* ---- starting ------------------------------------------------------------------------- */

static void on_start_timeout(evutil_socket_t fd, short what, void *arg)
{
    struct vm *vm = arg;
    if (vm->op == VM_OP_START) {
        vm->start_timed_out = 1;
        vm_kill_reason(vm, VM_EXIT_KILLED, "start timed out");
    }
    else if (vm->op == VM_OP_SHUTDOWN)
        vm_kill_reason(vm, VM_EXIT_KILLED, "shutdown timed out: killed");
}

void vm_arm_kill_timer(struct vm *vm, unsigned ms)
{
    if (!vm->kill_timer)
        vm->kill_timer = evtimer_new(vm->base, on_start_timeout, vm);
    struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };
    if (vm->kill_timer)
        evtimer_add(vm->kill_timer, &tv);
}

void vm_started(struct vm *vm, enum vm_state st)
{
    if (vm->kill_timer)
        evtimer_del(vm->kill_timer);
    vm->state = st;
    vm->op = VM_OP_NONE;
    if (vm->cbs.on_ready)
        vm->cbs.on_ready(vm, VM_OK, NULL, vm->arg);
    if (vm->detached || vm->state == VM_STATE_EXITED)
        return;
    vm_agent_reconnect(vm);
}

int vm_agent_reconnect(struct vm *vm)
{
    char p[4096];
    if (vm->detached || vm->state == VM_STATE_EXITED)
        return VM_E_STATE;
    if (!vm->cbs.on_agent)
        return VM_OK; /* nobody to give it to (a pooled VM) */
    int fd = vm_path(vm, "agent.sock", p, sizeof(p)) == 0 ? vm_connect_unix(p) : -1;
    if (fd < 0)
        return VM_E_IO;
    vm->cbs.on_agent(vm, fd, vm->arg);
    return VM_OK;
}

/* ---- simple operations ---------------------------------------------------------------- */

static int op_begin(struct vm *vm, enum vm_op op, vm_done_cb cb, void *arg)
{
    if (vm->detached || vm->state == VM_STATE_EXITED)
        return VM_E_STATE;
    if (vm->op != VM_OP_NONE)
        return VM_E_BUSY;
    vm->op = op;
    vm->op_cb = cb;
    vm->op_arg = arg;
    return VM_OK;
}

static void on_runstate_reply(struct qmp *q, int err, const char *msg, json_t *ret, void *arg)
{
    struct vm *vm = arg;
    if (!err)
        vm->state = vm->op == VM_OP_PAUSE ? VM_STATE_PAUSED : VM_STATE_RUNNING;
    vm_op_done(vm, err, msg);
}

static int runstate_op(struct vm *vm, enum vm_op op, vm_done_cb cb, void *arg)
{
    enum vm_state need = op == VM_OP_PAUSE ? VM_STATE_RUNNING : VM_STATE_PAUSED;
    if (vm->state != need && !vm->detached && vm->state != VM_STATE_EXITED)
        return VM_E_STATE;
    int r = op_begin(vm, op, cb, arg);
    if (r)
        return r;
    if (qmp_command(vm->qmp, op == VM_OP_PAUSE ? "stop" : "cont", NULL, -1, 10000,
                    on_runstate_reply, vm) < 0) {
        vm->op = VM_OP_NONE;
        return VM_E_QMP;
    }
    return VM_OK;
}

int vm_pause(struct vm *vm, vm_done_cb cb, void *arg)
{
    return runstate_op(vm, VM_OP_PAUSE, cb, arg);
}

int vm_resume(struct vm *vm, vm_done_cb cb, void *arg)
{
    return runstate_op(vm, VM_OP_RESUME, cb, arg);
}

int vm_shutdown(struct vm *vm, unsigned timeout_ms, vm_done_cb cb, void *arg)
{
    int r = op_begin(vm, VM_OP_SHUTDOWN, cb, arg);
    if (r)
        return r;
    int was_paused = vm->state == VM_STATE_PAUSED;
    vm->state = VM_STATE_STOPPING;
    /* The agent was asked to power off already; the ACPI button is the fallback for a
     * guest whose agent is gone. A paused guest can do neither, so it is continued. */
    if (vm->qmp && qmp_is_ready(vm->qmp)) {
        if (was_paused)
            qmp_command(vm->qmp, "cont", NULL, -1, 0, NULL, NULL);
        qmp_command(vm->qmp, "system_powerdown", NULL, -1, 0, NULL, NULL);
    }
    vm_arm_kill_timer(vm, timeout_ms ? timeout_ms : 1);
    return VM_OK;
}

void vm_kill(struct vm *vm)
{
    vm_kill_reason(vm, VM_EXIT_KILLED, "killed");
}

void vm_kill_sync(struct vm *vm)
{
    if (vm->detached)
        return;
    if (vm->state != VM_STATE_EXITED) {
        send_signal(vm, SIGKILL);
        /* Bounded: SIGKILL cannot be caught, the exit takes milliseconds. */
        if (vm->is_child)
            waitpid(vm->pid, NULL, 0);
        vm_remove_runtime_files(vm);
        vm->state = VM_STATE_EXITED;
    }
    release(vm);
}

void vm_detach(struct vm *vm)
{
    if (vm->detached)
        return;
    release(vm);
}

/* ---- accessors ------------------------------------------------------------------------ */

pid_t vm_pid(const struct vm *vm) { return vm->pid; }
enum vm_state vm_state(const struct vm *vm) { return vm->state; }
enum vm_accel vm_accel(const struct vm *vm) { return vm->accel; }
const char *vm_id(const struct vm *vm) { return vm->cfg.id; }
const char *vm_run_dir(const struct vm *vm) { return vm->cfg.run_dir; }
const struct vm_jail *vm_jail_of(const struct vm *vm) { return &vm->cfg.jail; }
