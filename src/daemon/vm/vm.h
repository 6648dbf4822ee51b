/* vm: one QEMU `-M microvm` process per sandbox, driven asynchronously from spaced's
 * libevent loop.
 *
 * This module is the only code that starts QEMU. It builds the command line, speaks QMP
 * (qmp.h), owns the per-sandbox run directory (sockets, console log, pidfile, state),
 * supervises the process (death noticed through a pidfd, hangs through a QMP ping, see
 * VM_HANG_MS), and jails it (vm_spawn.h, vm_jail.c: a uid of its own per VM, own mount,
 * PID, network and IPC namespaces showing only the files it needs, a minimal
 * environment, seccomp `-sandbox`, a cgroup with cpu/memory/pids limits).
 *
 * Threading: everything runs on the caller's `struct event_base`; no call blocks the loop
 * for more than a few syscalls (QEMU start, QMP, migration, `qemu-img` are all watched by
 * the loop). No callback is ever invoked from inside the call that requested it: results
 * always come back from the loop, so callers may free their own state in a callback.
 *
 * Ownership: a `struct vm` belongs to this module. It is created by vm_boot, vm_restore
 * or vm_adopt and stays valid until cbs->on_exit has returned (called exactly once, and
 * always last) or until vm_detach returns. After that the pointer must not be used.
 *
 * Run directory (cfg->run_dir, created by the caller, one per sandbox, mode 0700 owned by
 * root; this module chowns what QEMU must reach when jailed):
 *   qmp.sock      QMP monitor (QEMU listens; spaced reconnects after a restart)
 *   agent.sock    virtio-serial port "space.agent" (QEMU listens; the agent client
 *                 connects, see agentc.h)
 *   console.log   guest serial console, bounded to cfg->console_max bytes (the oldest
 *                 half is dropped when full)
 *   qemu.log      QEMU's own stderr, emptied past 1 MiB on disk (VM_QEMU_LOG_MAX)
 *   qemu.pid      QEMU's pid as seen from spaced's namespace
 *   vm.json       what vm_adopt needs: pid, start time, accel, config summary
 *
 * Snapshot directory (written by vm_template_snapshot / vm_suspend / vm_fork_capture,
 * read by vm_restore):
 *   state         QEMU migration stream (device state; plus all RAM for a suspend)
 *   mem           guest RAM file (template snapshots and mapped fork captures; mapped
 *                 private copy-on-write by every clone, so it must never be written
 *                 after the snapshot: it is root-owned 0444 from then on, and clones open
 *                 it read-only)
 *   snapshot.json kind ("template" | "suspend" | "mapped": a capture split by
 *                 vm_memmap.h), mem_mib, vcpus, state_bytes, created, accel, and
 *                 runtime (the VM runtime signature of the QEMU that saved it, vm_sig.h;
 *                 absent when unknown, and in states saved before it was recorded);
 *                 vm_restore refuses a snapshot whose shape differs from the config, or
 *                 whose runtime differs from the config's (VM_E_INCOMPATIBLE).
 *
 * Files and prefixes of src/daemon/vm/ (one prefix per header): vm_ (this header, and the
 * internal vm_cgroup.h, vm_cmdline.h, vm_memmap.h: a capture's stream split into a RAM
 * file, vm_spawn.h), qmp_ (qmp.h: the QMP client), accel_
 * (accel.h: the KVM probe), pool_ (pool.h: the warm pool), vmg_ (vm_greet.h: boot or
 * restore and wait for the agent's HELLO, with the lost-HELLO retry), vm_sig_ (vm_sig.h:
 * the VM runtime signature a saved state records and is checked against). Errors travel as
 * enum vm_error plus a message in the caller's msg[msglen] (or a callback's msg).
 *
 * Disk consistency for templates: the guest page cache inside a template snapshot must
 * match the disk it was taken on. The template VM therefore boots on its own overlay,
 * which is frozen by the snapshot and becomes the backing file of every clone's overlay:
 *   clone overlay (qcow2) -> template overlay (qcow2) -> base rootfs (raw)
 */
#ifndef SPACE_VM_H
#define SPACE_VM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct event_base;
struct vm;

/* Error codes passed to completion callbacks. Stable: the control plane maps them to API
 * error codes with vm_error_code(). */
enum vm_error {
    VM_OK = 0,
    VM_E_INVAL,    /* bad configuration (id, sizes, paths) */
    VM_E_NOENT,    /* kernel, initramfs, disk image or snapshot file missing */
    VM_E_START,    /* QEMU failed to start or exited before QMP was up */
    VM_E_QMP,      /* QMP error reply or malformed QMP traffic */
    VM_E_TIMEOUT,  /* an operation did not finish in its time limit */
    VM_E_IO,       /* host I/O error (disk full, permission, ...) */
    VM_E_SNAPSHOT, /* snapshot missing, corrupt or incompatible with the config */
    VM_E_EXITED,   /* the VM exited while the operation was in progress */
    VM_E_BUSY,     /* another operation is in progress on this VM */
    VM_E_STATE,    /* the VM is not in a state that allows the operation */
    VM_E_JAIL,     /* namespaces, cgroup or uid switch failed */
    VM_E_INCOMPATIBLE, /* snapshot saved by another VM runtime (QEMU release, accelerator,
                          CPU: vm_sig.h): it cannot be loaded here */
    VM_E_NOSPACE,  /* the host's disk has no room for what the operation writes */
};

/* Short stable identifier for an error ("vm_start_failed", ...). */
const char *vm_error_code(int err);

enum vm_accel {
    VM_ACCEL_AUTO = 0, /* KVM if usable for a normal guest (not KVM-PVM), else TCG */
    VM_ACCEL_KVM,      /* forced; fails to start if KVM is unusable */
    VM_ACCEL_TCG,      /* forced software emulation */
};

/* Resolves `auto` once per process (cached) and logs one warning line when falling back
 * to TCG. Returns VM_ACCEL_KVM or VM_ACCEL_TCG. See accel.h for the probe itself. */
enum vm_accel vm_accel_resolve(enum vm_accel want);
const char *vm_accel_name(enum vm_accel a); /* "auto", "kvm", "tcg" */
/* The kernel command line every VM boots with (vm_cmdline.c), without the per-host TSC
 * items: a template snapshot keeps the guest it was booted with, so it is part of the
 * snapshot's fingerprint (tpl_snapshot.c). */
const char *vm_kernel_cmdline(void);

enum vm_state {
    VM_STATE_STARTING, /* process started, QMP not yet ready (or migration loading) */
    VM_STATE_RUNNING,  /* vCPUs running */
    VM_STATE_PAUSED,   /* vCPUs stopped, memory resident (vm_pause, or restored paused) */
    VM_STATE_SAVING,   /* vm_suspend / vm_template_snapshot in progress */
    VM_STATE_STOPPING, /* vm_shutdown / vm_kill in progress */
    VM_STATE_EXITED,   /* process gone; on_exit is about to be / has been called */
};
const char *vm_state_name(enum vm_state s);

enum vm_exit_reason {
    VM_EXIT_SHUTDOWN, /* guest powered off or vm_shutdown completed */
    VM_EXIT_KILLED,   /* vm_kill, or vm_shutdown's timeout expired */
    VM_EXIT_SAVED,    /* quit after a successful vm_suspend / vm_template_snapshot */
    VM_EXIT_CRASHED,  /* QEMU died on its own (signal, error exit, QMP EOF) */
    VM_EXIT_HUNG,     /* QMP stopped answering; the process was killed */
    VM_EXIT_FAILED,   /* start or restore failed (on_ready got the error first) */
};
const char *vm_exit_reason_name(enum vm_exit_reason r);

/* Networking (optional). A tap device already created inside the sandbox's network
 * namespace by the network module; QEMU receives the open fd. */
struct vm_net {
    int tap_fd;      /* open /dev/net/tun fd attached to the tap, or -1 for no NIC */
    const char *mac; /* "52:54:00:xx:xx:xx"; required when tap_fd >= 0 */
};

struct vm_jailer; /* a jail policy and the uid allocator of the VMs under it (below) */

/* Jail settings. With enabled=0 QEMU runs as spaced's user in spaced's namespaces (tests,
 * development; refused when the jailer's policy says `required`); `-sandbox` seccomp is
 * applied either way. */
struct vm_jail {
    int enabled;               /* 1: namespaces + uid switch + cgroup */
    struct vm_jailer *jailer;  /* the policy this VM starts under (uid range, shim,
                                  required); borrowed, must outlive the VM. NULL: no
                                  policy (tests, tools): no range, no shim, unjailed ok */
    uid_t uid;                 /* unprivileged uid QEMU runs as (never 0), or
                                  VM_JAIL_UID_AUTO: one of the jailer's range that no
                                  other live VM of it has, gid = uid (vm_jail.c) */
    gid_t gid;                 /* its gid (ignored with VM_JAIL_UID_AUTO) */
    const char *cgroup_parent; /* cgroup name (e.g. "space"); the sandbox's group is
                                  <parent>/space-<id> in cgroup v2 (/sys/fs/cgroup) or in
                                  each v1 hierarchy (cpu, memory, pids); NULL: no cgroup */
    unsigned cpu_percent;      /* cpu.max as % of one CPU (100 = 1 CPU); 0 = no limit */
    unsigned mem_overhead_mib; /* memory.max = mem_mib + this (QEMU's own memory, with the
                                  TCG translation cache: VM_TCG_TB_MIB); 0 = 384 */
    unsigned pids_max;         /* pids.max; 0 = default (64) */
    /* Namespaces: mount, PID, network (empty: only a down `lo`; the tap arrives as a
     * descriptor and keeps working across namespaces) and IPC.
     * Files QEMU sees: the kernel, initramfs, disk chain (overlay read-write, layers
     * read-only) and RAM file, bind-mounted at their own paths; /usr and libraries
     * read-only; /dev/{null,zero,urandom,random} (+kvm). Not the run directory: its
     * sockets are inherited as descriptors. The overlay (and a template VM's RAM file)
     * is chowned to uid while QEMU runs, back to root when it is gone. A clone's
     * template RAM file is root-owned 0444 and bound read-only; QEMU opens it read-only
     * through the jailer's shim (vm_jail_policy). */
};

#define VM_JAIL_UID_AUTO ((uid_t)-1)

/* What a jailer enforces (spaced: one jailer, made by jail_resolve (jail/jail.h) and
 * held in struct spaced; tests: as they need). */
struct vm_jail_policy {
    int required;       /* 1: a VM with jail.enabled == 0 fails to start (VM_E_JAIL) */
    uid_t uid_base;     /* VM_JAIL_UID_AUTO draws from [uid_base, uid_base + uid_count) */
    unsigned uid_count; /* 0: no range (a VM asking for VM_JAIL_UID_AUTO fails) */
    const char *shim;   /* space-qemu-shim.so: preloaded into clones' QEMU so the template
                           RAM file is opened read-only (src/qemushim); a jailed clone
                           fails to start without it. Copied. */
};

/* A jailer enforcing p (copied). VMs name it in cfg.jail.jailer; it hands each a uid of
 * its range that no other of its live VMs holds and no host process runs as. Returns
 * NULL with err[cap] for a range that is too large (> VM_JAIL_UIDS_MAX), contains 0 or
 * wraps past the last uid, or when out of memory. */
#define VM_JAIL_UIDS_MAX (1u << 20)
struct vm_jailer *vm_jailer_new(const struct vm_jail_policy *p, char *err, size_t errlen);

/* Frees it once no VM started under it is left (NULL is fine). */
void vm_jailer_free(struct vm_jailer *jl);

/* The policy jl enforces; for NULL, the empty policy (no range, no shim, not required). */
const struct vm_jail_policy *vm_jailer_policy(const struct vm_jailer *jl);

/* One read-only layer under a sandbox's overlay. The chain is given explicitly (from the
 * store) and passed to QEMU node by node: the overlay's own header is writable by QEMU,
 * so the backing file name inside it is never trusted, neither by QEMU nor by the jail
 * deciding which files to expose. */
struct vm_disk_layer {
    const char *path;   /* image file */
    const char *format; /* "qcow2" (template overlay) or "raw" (base rootfs) */
};
#define VM_DISK_BACKING_MAX 4

struct vm_config {
    const char *id;            /* sandbox id, [A-Za-z0-9_-]{1,48}: -name and cgroup */
    const char *qemu;          /* QEMU binary; NULL = "qemu-system-x86_64" from PATH */
    unsigned vcpus;            /* 1..16 */
    unsigned mem_mib;          /* 64..65536 */
    enum vm_accel accel;
    const char *kernel;        /* uncompressed vmlinux (PVH) or bzImage */
    const char *initramfs;     /* cpio whose /init is space-agent; NULL = none */
    const char *cmdline_extra; /* appended to the built-in kernel command line; may be NULL */
    const char *disk;          /* qcow2 overlay (vm_disk_overlay_create); NULL = no disk */
    struct vm_disk_layer backing[VM_DISK_BACKING_MAX]; /* disk's backing chain, nearest
                                  first (e.g. template overlay, then base rootfs) */
    unsigned n_backing;        /* entries used in backing[] */
    const char *run_dir;       /* per-sandbox directory, see above */
    const char *mem_path;      /* template VMs: RAM file created here, mapped share=on so
                                  vm_template_snapshot can skip it; NULL = anonymous RAM */
    size_t console_max;        /* console.log bound in bytes; 0 = 1 MiB */
    struct vm_net net;
    struct vm_jail jail;
    const char *runtime;       /* this node's VM runtime signature (vm_sig.h): a save
                                  records it in snapshot.json, vm_restore refuses a state
                                  recorded with another; NULL or "" = unknown (nothing
                                  recorded, nothing compared) */
};

/* Completion of an asynchronous operation: err is enum vm_error, msg a human message
 * (NULL when err == VM_OK; valid only during the call). */
typedef void (*vm_done_cb)(struct vm *vm, int err, const char *msg, void *arg);

struct vm_callbacks {
    /* Boot / restore / adopt finished: QMP is up and (for restore) the state is loaded.
     * err != VM_OK means the VM is being torn down; on_exit(VM_EXIT_FAILED) follows. */
    vm_done_cb on_ready;
    /* The agent socket is connected: fd (nonblocking, close-on-exec) now belongs to the
     * callee, who hands it to agentc. Called once after on_ready succeeded; again after
     * vm_agent_reconnect. Guest readiness is the agent's hello, not this call. For a VM
     * from pool_claim the connection has already been greeted once (warm-up); the
     * caller's HELLO restarts the agent session on it. May be NULL: no connection. */
    void (*on_agent)(struct vm *vm, int fd, void *arg);
    /* The VM is gone (see enum vm_exit_reason). msg says why, console_tail holds the last
     * console lines (may be empty). Both are valid only during the call. The vm is freed
     * when this returns. Always called exactly once, last. */
    void (*on_exit)(struct vm *vm, enum vm_exit_reason reason, const char *msg,
                    const char *console_tail, void *arg);
};

/* ---- disks ---------------------------------------------------------------------------- */

/* Creates `overlay` as a qcow2 over `chain` (nearest layer first: e.g. a template's
 * frozen overlay "qcow2", then its rootfs "raw"; the last layer is the only raw one), by
 * running `qemu-img create` watched by the loop. No layer is opened: the overlay's
 * virtual size is the raw image's file size, and the header records chain[0] by
 * absolute path and format for humans (QEMU gets the chain node by node). Returns VM_OK
 * (cb follows, with vm == NULL and qemu-img's message on failure) or an error with no
 * callback: VM_E_NOENT if a layer is missing, VM_E_INVAL for a bad chain. *job, if job
 * != NULL, is the run until the callback (vm_disk_job_cancel stops it: an owner going
 * away while the loop will not run again). Deleting a sandbox's disk is a plain unlink of
 * its overlay. */
struct vm_disk_job;
int vm_disk_overlay_create(struct event_base *base, const struct vm_disk_layer *chain,
                           unsigned n_chain, const char *overlay, vm_done_cb cb, void *arg,
                           struct vm_disk_job **job);

/* Remembered overlays: what vm_disk_overlay_create writes depends only on chain[0]'s
 * format and absolute path and the raw image's size, so an overlay it made can stand in
 * for the next one with the same three (a file write instead of a qemu-img run; the
 * VM_DISK_PROTOS most recently used are kept in memory). The caller owns the set. */
struct vm_disk_protos;
struct vm_disk_protos *vm_disk_protos_new(void);
void vm_disk_protos_free(struct vm_disk_protos *ps);
/* Remembers `overlay`, just made by vm_disk_overlay_create over `chain` (before anything
 * wrote to it). Best effort: nothing is remembered on any error. */
void vm_disk_overlay_remember(struct vm_disk_protos *ps, const struct vm_disk_layer *chain,
                              unsigned n_chain, const char *overlay);
/* Writes `overlay` (replacing a file there) as a copy of the remembered overlay with
 * chain's arguments, synchronously: VM_OK, VM_E_NOENT when none is remembered (or the
 * chain is bad: vm_disk_overlay_create then says why), VM_E_IO (nothing left behind). */
int vm_disk_overlay_copy(struct vm_disk_protos *ps, const struct vm_disk_layer *chain,
                         unsigned n_chain, const char *overlay);

/* The --image-opts argument for a qemu-img that must read `overlay` (a qcow2 a VM may
 * have written) over `chain`: every node's driver and file named, every backing pinned,
 * commas in paths doubled, so neither the overlay's probed format nor the backing name
 * in its header is used. 0, or -1 if the chain is invalid or out[cap] too small. */
int vm_disk_image_opts(const char *overlay, const struct vm_disk_layer *chain, unsigned n_chain,
                       char *out, size_t cap);

/* Starts `qemu-img convert` of overlay-over-chain into the raw image out_raw (pinned as
 * vm_disk_image_opts says), after checking the overlay's header asks for no external
 * data file (another name qemu-img would follow). *pid is the child to wait for.
 * VM_OK, VM_E_INVAL (bad chain, unsafe or unreadable header) or VM_E_IO. */
int vm_disk_flatten_spawn(const char *overlay, const struct vm_disk_layer *chain,
                          unsigned n_chain, const char *out_raw, pid_t *pid);

/* Flattens overlay-over-chain into the new raw image out_raw, asynchronously: the same
 * pinned, header-checked `qemu-img convert` as vm_disk_flatten_spawn (every qcow2 of the
 * chain checked too), run as a child watched by the loop; on success out_raw is made
 * read-only for VMs (root-owned 0444) before cb. Returns VM_OK (cb follows, vm == NULL,
 * out_raw removed on failure; *job, if job != NULL, is the run until then) or VM_E_INVAL
 * (bad chain, unsafe header) / VM_E_IO with no callback. */
struct vm_disk_job;
int vm_disk_flatten(struct event_base *base, const char *overlay,
                    const struct vm_disk_layer *chain, unsigned n_chain, const char *out_raw,
                    vm_done_cb cb, void *arg, struct vm_disk_job **job);
/* Kills a run of vm_disk_flatten that has not called back, removes its output, frees it;
 * no callback follows. NULL is fine. */
void vm_disk_job_cancel(struct vm_disk_job *j);

/* ---- lifecycle ------------------------------------------------------------------------ */

/* Cold boot. Validates cfg (missing files fail here, synchronously, with *err/msg set and
 * NULL returned, nothing left behind), starts QEMU, then reports through cbs. cfg is
 * copied; the caller may free it after the call. */
struct vm *vm_boot(struct event_base *base, const struct vm_config *cfg,
                   const struct vm_callbacks *cbs, void *arg, int *err, char *msg,
                   size_t msglen);

/* Starts a new QEMU from a snapshot directory (template or suspend). With `paused` the
 * vCPUs stay stopped after the load (vm_resume continues). For template snapshots
 * cfg->disk must be an overlay whose backing chain (cfg->backing) starts with the
 * template's frozen overlay, and cfg->mem_path is ignored (the snapshot's mem is mapped
 * private copy-on-write). A snapshot whose snapshot.json disagrees with cfg (memory,
 * vCPUs) or whose files are missing/truncated fails synchronously with VM_E_SNAPSHOT;
 * one saved by another runtime (its "runtime" differs from cfg->runtime, both known:
 * vm_sig_compatible) with VM_E_INCOMPATIBLE and a message naming both, before any QEMU
 * starts; one that QEMU cannot load fails through on_ready(VM_E_SNAPSHOT, QEMU's
 * message). */
struct vm *vm_restore(struct event_base *base, const struct vm_config *cfg,
                      const char *snapshot_dir, int paused,
                      const struct vm_callbacks *cbs, void *arg, int *err, char *msg,
                      size_t msglen);

/* Re-attaches to a QEMU still running from a previous spaced (run_dir/vm.json +
 * qemu.pid, process identity checked by start time so a recycled pid is never adopted).
 * A jailed one holds its uid again in `jailer` (no other VM gets it). on_ready reports
 * success, then on_agent hands a fresh agent connection. */
struct vm *vm_adopt(struct event_base *base, struct vm_jailer *jailer, const char *run_dir,
                    const struct vm_callbacks *cbs, void *arg, int *err, char *msg,
                    size_t msglen);

/* SIGKILLs every QEMU started for VM `id` (found by its `-name id,process=space-id,...`
 * argument in /proc/<pid>/cmdline) and returns how many. For a VM that cannot be adopted:
 * a spaced killed between starting QEMU and writing vm.json leaves a QEMU nobody knows
 * about, holding its memory until this finds it. */
int vm_kill_strays(const char *id);

/* Operations below return VM_OK when started (cb will be called once, from the loop) or
 * an error code (VM_E_BUSY, VM_E_STATE, ...) with no callback. */

/* Pause / resume vCPUs (QMP stop / cont). Memory stays resident. */
int vm_pause(struct vm *vm, vm_done_cb cb, void *arg);
int vm_resume(struct vm *vm, vm_done_cb cb, void *arg);

/* Writes the VM's full memory + device state to `dir` (created if absent), then quits
 * QEMU: every host resource is released except the disk overlay and `dir`. cb reports
 * the result; on success on_exit(VM_EXIT_SAVED) follows. On failure the VM keeps
 * running (paused state is restored to what it was). */
int vm_suspend(struct vm *vm, const char *dir, vm_done_cb cb, void *arg);

/* Room left on the disk after a save, for everything else that writes there (the
 * store, logs, other sandboxes' disks). */
#define VM_SAVE_KEEP_FREE (64LL << 20)

/* Whether the file system of `dir` (or of its parent while dir does not exist) has room
 * for vm_suspend (fork 0) or vm_fork_capture (fork 1) of vm, checked before either so
 * that a save never fills the disk under the sandboxes that share it: the guest's RAM
 * size (what the stream can reach), a fork's copy of the disk overlay, 1 MiB of device
 * state, and VM_SAVE_KEEP_FREE. VM_OK, or VM_E_NOSPACE with what is needed and free in
 * msg (starting "No space left on device"). A file system it cannot ask: VM_OK (the
 * save's own write errors then say). */
int vm_save_room(const struct vm *vm, const char *dir, int fork, char *msg, size_t msglen);

/* 1 while the VM is stopped because the host's disk refused a guest write for lack of
 * space (it continues by itself once there is room: vm_room.c), else 0. */
int vm_room_waiting(const struct vm *vm);

/* Fork capture: stops the VM, writes its full memory + device state to dir/state (and
 * dir/snapshot.json, kind "suspend": vm_restore takes the directory like a suspend's),
 * copies the disk overlay to dir/disk.qcow2 while the guest is stopped, makes both
 * root-owned 0444, then continues the guest (left paused if it was paused). Then, with
 * the guest running, the stream is split (vm_memmap_capture, on a worker thread: the
 * loop goes on; the op stays in progress until it ends; vm_save.c) into
 * dir/mem, root-owned 0444, and a small dir/state, kind "mapped": a restore maps the RAM
 * like a template clone's instead of loading it; if the split fails, the full stream
 * stays (logged). cb reports the result with the VM running again; on failure the files
 * are not complete (the caller removes dir) and the VM runs as before. The pause lasts
 * the migration plus the copy (a reflink where the filesystem can). */
int vm_fork_capture(struct vm *vm, const char *dir, vm_done_cb cb, void *arg);

/* Template snapshot: only for a VM booted with cfg->mem_path (share=on RAM). Stops the
 * VM, migrates device state only (x-ignore-shared) to dir/state, links the RAM file as
 * dir/mem (same filesystem; or boot with mem_path = dir/mem), writes dir/snapshot.json,
 * then quits QEMU (the RAM file and the template's disk overlay are frozen from then on:
 * once the process is gone, before cb reports success, both become root-owned 0444).
 * Call it after the agent reported ready, and close the agent connection first: a clone
 * must greet its own host, not inherit a session in the middle (the agent notices the
 * new connection after restore and answers its HELLO). */
int vm_template_snapshot(struct vm *vm, const char *dir, vm_done_cb cb, void *arg);

/* Graceful stop: the control plane has already asked the agent to power off; this waits
 * up to timeout_ms for QEMU to exit (sending QMP system_powerdown meanwhile), then kills.
 * on_exit(VM_EXIT_SHUTDOWN or VM_EXIT_KILLED) follows cb. */
int vm_shutdown(struct vm *vm, unsigned timeout_ms, vm_done_cb cb, void *arg);

/* SIGKILL now; on_exit(VM_EXIT_KILLED) follows from the loop. */
void vm_kill(struct vm *vm);

/* Forgets the VM without touching QEMU (spaced shutting down, to be adopted later):
 * closes sockets and frees the vm. No callback is called. */
void vm_detach(struct vm *vm);

/* The VM's overlay was renamed to `disk` (a pool claim; QEMU keeps its open file):
 * records the new name, for adoption (vm.json) and for handing the file back to root
 * when the VM is gone. Returns 0, or -1 when out of memory (the old name stays). */
int vm_disk_renamed(struct vm *vm, const char *disk);

/* Opens a new agent connection (e.g. after agentc lost its stream); on_agent follows. */
int vm_agent_reconnect(struct vm *vm);

/* Writes a whole file atomically, 0600 (<path>.tmp + fsync + rename): a reader never sees
 * half of it. 0 or -1. */
int vm_write_file_atomic(const char *path, const char *data, size_t len);
/* The same without the fsync: whole or absent to any reader while the host runs (a
 * SIGKILL of spaced loses nothing: the page cache is the kernel's), but an OS crash may
 * leave it absent or empty. Only for what describes a live process, which such a crash
 * ends too (vm.json, qemu.pid). */
int vm_write_file_atomic_nosync(const char *path, const char *data, size_t len);

/* ---- accessors ------------------------------------------------------------------------ */

pid_t vm_pid(const struct vm *vm);
enum vm_state vm_state(const struct vm *vm);
enum vm_accel vm_accel(const struct vm *vm);  /* resolved: KVM or TCG */
const char *vm_id(const struct vm *vm);
const char *vm_run_dir(const struct vm *vm);
/* The jail the VM runs under (uid, gid, enabled), for helpers jailed alike (volumes). */
const struct vm_jail *vm_jail_of(const struct vm *vm);
/* Copies the last lines of the console log (at most cap-1 bytes, NUL-terminated). */
size_t vm_console_tail(const struct vm *vm, char *out, size_t cap);

/* Supervision constants. A supervision tick runs every VM_PING_INTERVAL_MS; it reads the
 * QEMU main thread's state from /proc (no wakeup of QEMU) and sends a QMP query-status
 * (a ping) every VM_PING_QMP_MS, or at once when the process is stopped (SIGSTOP, a
 * tracer) or reported an unrequested STOP event; the next ping goes out only once the
 * last one is answered. A ping unanswered for VM_HANG_MS (VM_HANG_SAVE_MS
 * while a snapshot is written, when QEMU's main loop can wait on the migration thread)
 * means hung: the process is killed. Only time in which the QEMU could have answered
 * counts: the time spaced's own loop ran late (its timer fired late: a reply may sit
 * unread), the time QEMU's threads spent runnable but waiting for a CPU (from
 * /proc/<pid>/task/<tid>/schedstat) and the time its main thread sat in disk sleep are
 * excused, so an overloaded host slows detection down instead of killing healthy VMs. A
 * stopped (SIGSTOP) QEMU is pinged by the first tick that sees it stopped and declared
 * hung by the next: 2 to 4 s after it stopped. A QEMU whose main loop deadlocked while
 * running is found by the periodic ping: within VM_PING_QMP_MS + 4 s. A dead process is
 * noticed at once through its pidfd.
 * The ping is an idle VM's largest host-side cost: each wakes QEMU's monitor iothread
 * twice and its main loop about twice, and costs spaced a QMP round trip (TCG, idle
 * `base` clone: at 250 ms 77 QEMU thread wakeups/s and ~0.7 % of a core more than
 * without pings; at 2 s ~0.07 % of a core, two thirds of an idle clone's CPU;
 * docs/benchmarks.md "Idle cost"), so it is rare and the tick asks /proc instead. */
/* TCG's translation cache in MiB (`-accel tcg,tb-size=`). QEMU's default (1 GiB) grows
 * with everything the guest ever ran (seen at 700 MiB RSS for a 256 MiB guest), which
 * would push a jailed QEMU over its cgroup memory limit; a full cache is flushed and
 * refilled instead. */
#define VM_TCG_TB_MIB 192

#define VM_PING_INTERVAL_MS 2000
#define VM_PING_QMP_MS      30000
/* Whether a supervision tick at now_ms sends a QMP ping, given the QEMU main thread's
 * state letter from /proc ('T'/'t': stopped or traced; '?': unreadable) and when the last
 * ping went out (0: never): 1 when stopped, never pinged, or VM_PING_QMP_MS passed. */
int vm_ping_due(char proc_state, uint64_t now_ms, uint64_t last_sent_ms);
#define VM_HANG_MS          1000
#define VM_HANG_SAVE_MS     10000

#endif
