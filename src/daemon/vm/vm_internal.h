/* vm_internal: struct vm and the helpers shared by the vm_*.c files. Not for callers
 * outside src/daemon/vm. */
#ifndef SPACE_VM_INTERNAL_H
#define SPACE_VM_INTERNAL_H

#include <jansson.h>
#include <stdint.h>
#include "qmp.h"
#include "vm.h"

struct event;

/* What the current operation is (one at a time; the QMP ping is not an operation). */
enum vm_op {
    VM_OP_NONE,
    VM_OP_START,    /* boot / restore / adopt until on_ready */
    VM_OP_PAUSE,
    VM_OP_RESUME,
    VM_OP_SAVE,     /* vm_suspend or vm_template_snapshot */
    VM_OP_SHUTDOWN,
};

struct vm {
    struct event_base *base;
    struct vm_config cfg;     /* deep copy: strings owned (see vm_config_copy) */
    struct vm_callbacks cbs;
    void *arg;
    enum vm_state state;
    enum vm_accel accel;      /* resolved */
    pid_t pid;
    unsigned long long starttime; /* /proc/<pid>/stat field 22 */
    int is_child;             /* spawned by this spaced (waitpid possible) */
    int uid_held;             /* cfg.jail.uid is held in the allocator (vm_jail.c) */
    int pidfd;                /* -1 if none */
    struct event *pid_ev;     /* owned: pidfd readable = process gone */
    struct qmp *qmp;          /* owned */
    struct event *ping_timer; /* owned: the supervision tick (vm.h VM_PING_INTERVAL_MS) */
    int ping_outstanding;     /* a query-status is waiting for its reply */
    uint64_t ping_tick_ms;    /* monotonic time of the last ping tick (0: none yet) */
    uint64_t ping_sent_ms;    /* when the outstanding ping was sent */
    uint64_t ping_excused_ms; /* of its age, time that does not count (see vm.h VM_HANG_MS) */
    uint64_t ping_runq_ms;    /* QEMU's threads' run-queue wait at the last check */
    int ping_runq_set;        /* ping_runq_ms holds a baseline for the outstanding ping */
    int room_waiting;         /* stopped by a full host disk (vm_room.c) */
    int room_cont_outstanding; /* its cont is on the way */
    int64_t room_wait_since_ms; /* clock_mono_ms() when it stopped */
    int con_fd;               /* console socket, -1 if not connected */
    struct event *con_ev;     /* owned */
    int log_fd;               /* console.log, O_APPEND */
    size_t log_size;
    struct event *kill_timer; /* owned: start / vm_shutdown deadline */
    struct event *lost_timer; /* owned: QMP closed, process not yet seen exiting */
    char qmp_lost_why[128];

    enum vm_op op;            /* operation in progress */
    vm_done_cb op_cb;
    void *op_arg;

    /* restore (VM_OP_START with a snapshot) */
    char *snap_dir;           /* owned */
    int snap_mapped;          /* RAM mapped from snap_dir/mem (template, mapped capture) */
    int snap_ignore_shared;   /* the stream was taken with x-ignore-shared (template) */
    int restore_paused;
    int adopting;             /* VM_OP_START is a re-attach (vm_adopt) */
    int adopted;              /* started by an earlier spaced (vm_adopt): see vm_save.c */
    int start_timed_out;      /* the start deadline killed it */
    int state_fd;             /* snapshot state file while loading, or -1 */

    /* save (VM_OP_SAVE) */
    char *save_dir;           /* owned */
    int save_template;
    int save_keep;            /* vm_fork_capture: copy the disk and continue, no quit */
    int save_was_running;
    int save_fd;              /* state.tmp while writing */
    struct vm_split *split;   /* a fork capture's stream being split by a worker thread
                                 (vm_save.c), or NULL */
    int save_settling;        /* an adopted VM's earlier migration is being ended */
    int save_settle_polls;    /* query-migrate polls since migrate_cancel */
    struct event *save_timer; /* owned: the next poll */

    /* exit bookkeeping */
    int exit_reason_set;
    enum vm_exit_reason exit_reason;
    char exit_msg[512];
    int finished;             /* on_exit delivered (vm is being freed) */
    int depth;                /* nested callbacks into the owner */
    int detached;
};

/* Records why the VM is going away (first writer wins: the cause, not the echo). */
void vm_set_exit(struct vm *vm, enum vm_exit_reason r, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Waits for a capture split in progress (vm->split) and drops it without completing the
 * operation: the VM is going away (vm.c). No-op without one. */
void vm_split_abort(struct vm *vm);

/* Completes the current operation (clears it first so cb may start another). */
void vm_op_done(struct vm *vm, int err, const char *msg);

/* Starts the QEMU process for vm->cfg with launch settings; connects QMP and console.
 * On failure returns -1 with *err/msg (nothing left running). */
int vm_start_process(struct vm *vm, const char *mem_path, int mem_share, int incoming,
                     int paused, int *err, char *msg, size_t msglen);

/* Allocates a vm for cfg after checking it (files readable, id valid, accel usable). */
struct vm *vm_new(struct event_base *base, const struct vm_config *cfg,
                  const struct vm_callbacks *cbs, void *arg, int *err, char *msg, size_t msglen);
/* Frees a vm that never started a process. */
void vm_free_unstarted(struct vm *vm);
/* Watches vm->pid (pidfd), connects QMP and the console. */
int vm_attach_process(struct vm *vm, char *msg, size_t msglen);

/* Adopt side: QMP is up again for an adopted VM. */
void vm_adopt_ready(struct vm *vm);

/* Restore side: called when QMP is ready during a restore start. */
void vm_restore_begin(struct vm *vm);
/* Save side: the saving QEMU is gone; a template snapshot's RAM file and disk overlay
 * become root-owned 0444 (no VM uid can write them from now on). Returns VM_OK, or
 * VM_E_IO with msg[cap]. */
int vm_save_seal(struct vm *vm, char *msg, size_t msglen);
/* vm_room.c: the ping found QEMU in run state "io-error" (a full host disk stopped it):
 * waits for room, then continues the VM. Called at every such ping. */
void vm_room_io_error(struct vm *vm);

/* Save/restore side: a MIGRATION event (status string). */
void vm_save_on_migration(struct vm *vm, const char *status);

/* Moves to running/paused after a successful start; reports on_ready and connects the
 * agent. */
void vm_started(struct vm *vm, enum vm_state st);

/* Kills QEMU (SIGKILL) with a reason; the pidfd event finishes the VM. */
void vm_kill_reason(struct vm *vm, enum vm_exit_reason r, const char *msg);

/* Kills QEMU and waits for it (blocking, a few ms after SIGKILL), removes the runtime
 * files and frees the vm without any callback (pool teardown). */
void vm_kill_sync(struct vm *vm);

/* Console: connect to run_dir/console.sock and start copying into console.log. */
void vm_console_attach(struct vm *vm);
void vm_console_drain(struct vm *vm);
void vm_console_close(struct vm *vm);

/* Tail of run_dir/qemu.log (QEMU's own stderr) for start failure messages. */
size_t vm_qemu_log_tail(const struct vm *vm, char *out, size_t cap);

/* QEMU writes qemu.log itself (its stderr), and some of what it reports is caused by the
 * guest: once the file holds more than VM_QEMU_LOG_MAX bytes on disk it is emptied
 * (QEMU's descriptor is O_APPEND, so it goes on at the start). Called on every
 * supervision tick (VM_PING_INTERVAL_MS). */
#define VM_QEMU_LOG_MAX (1024 * 1024)
void vm_qemu_log_bound(const struct vm *vm);

/* Removes sockets, pidfile, adoption record, jail root and cgroup of a VM that is gone. */
void vm_remove_runtime_files(struct vm *vm);
/* (Re)arms the start / shutdown deadline (vm->kill_timer). */
void vm_arm_kill_timer(struct vm *vm, unsigned ms);
/* Blocking connect to a unix socket path; returns a nonblocking fd or -1 (errno). */
int vm_connect_unix(const char *path);

#define CGROUP_ROOT "/sys/fs/cgroup"

/* vm_jail.c: under cfg.jail.jailer, VM_JAIL_UID_AUTO resolved into vm->cfg.jail.uid/gid
 * (0, or -1 with msg); an adopted VM's uid held; the VM is gone: its files back to
 * root, its uid free; a template file made root-owned 0444 (0 or -1, errno). */
int vm_jail_uid_acquire(struct vm *vm, char *msg, size_t msglen);
void vm_jail_uid_hold(struct vm *vm);
void vm_jail_release(struct vm *vm);
int vm_jail_freeze(const char *path);

/* Writes run_dir/vm.json (adoption record). */
int vm_write_record(struct vm *vm);

/* Path helper: run_dir + "/" + name into out[cap]; -1 if it does not fit. */
int vm_path(const struct vm *vm, const char *name, char *out, size_t cap);

/* Deep copy / free of a config's strings. */
int vm_config_copy(struct vm_config *dst, const struct vm_config *src);
void vm_config_free(struct vm_config *c);

#endif
