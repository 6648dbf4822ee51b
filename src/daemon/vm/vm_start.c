/* vm_start: turning a config into a running QEMU process: accelerator choice, config
 * checks, the sockets QEMU inherits, the jail's file list and cgroup, the spawn, and the
 * adoption record. The process is then supervised by vm.c. */
#include "vm_internal.h"
#include "accel.h"
#include "clock.h"
#include "log.h"
#include "vm_cgroup.h"
#include "vm_spawn.h"

#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#define VM_START_TIMEOUT_MS 30000 /* QEMU up and (restore) state loaded */
/* A restore that loads a full memory image (a suspend's, a capture that could not be
 * mapped: not a template's or a mapped capture's, whose RAM is mapped) reads and decodes
 * every page in QEMU's main loop: its deadline grows by 1 s per VM_START_LOAD_MIB_PER_S
 * MiB of state, so a large or loaded host's restore is not killed for its size. */
#define VM_START_LOAD_MIB_PER_S 4

static unsigned start_timeout_ms(const struct vm *vm)
{
    struct stat st;
    if (!vm->snap_dir || vm->snap_mapped || vm->state_fd < 0 || fstat(vm->state_fd, &st) < 0)
        return VM_START_TIMEOUT_MS;
    return VM_START_TIMEOUT_MS + (unsigned)(st.st_size / (VM_START_LOAD_MIB_PER_S << 20)) * 1000;
}

/* ---- accelerator --------------------------------------------------------------------- */

enum vm_accel vm_accel_resolve(enum vm_accel want)
{
    /* Facts of the host, not state of a daemon: probed once per process. */
    static int probed;
    static enum vm_accel cached;
    if (want != VM_ACCEL_AUTO)
        return want;
    if (!probed) {
        char why[256];
        probed = 1;
        enum accel_kvm k = accel_probe_kvm("/dev/kvm", "/sys/module/kvm_pvm", why, sizeof(why));
        cached = k == ACCEL_KVM_USABLE ? VM_ACCEL_KVM : VM_ACCEL_TCG;
        if (cached == VM_ACCEL_TCG) {
            char q[300];
            log_warn("vm.accel", "accel=tcg reason=%s note=\"KVM unusable: VMs run under "
                     "software emulation (TCG), expect much slower guests\"",
                     log_quote(why, q, sizeof(q)));
        }
    }
    return cached;
}

static int listen_unix(const struct vm *vm, const char *name, char *msg, size_t msglen)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    char p[4096];
    if (vm_path(vm, name, p, sizeof(p)) < 0 || strlen(p) >= sizeof(sa.sun_path)) {
        snprintf(msg, msglen, "run_dir too long for a unix socket path");
        return -1;
    }
    memcpy(sa.sun_path, p, strlen(p) + 1);
    unlink(p);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || chmod(p, 0600) < 0 ||
        listen(fd, 8) < 0) {
        snprintf(msg, msglen, "socket %s: %s", p, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

/* The files the jailed QEMU must see, and their ownership for its uid. mem_path with
 * mem_share is a template VM's own RAM file (written through share=on: its uid's);
 * without, it is a template's frozen RAM file that a clone maps copy-on-write: root-owned
 * 0444 (made so again here: files of an older spaced may still be owned by a jail uid)
 * and bound read-only, so the kernel refuses any write-open whatever QEMU does; the shim
 * makes QEMU 7.2, which asks for O_RDWR even with share=off, ask for O_RDONLY. */
static int jail_paths(struct vm *vm, struct vm_spawn *s, const char *mem_path, int mem_share,
                      const char *shim)
{
    const struct vm_config *c = &vm->cfg;
    s->n_paths = 0;
    s->paths[s->n_paths++] = (struct vm_spawn_path){ c->kernel, 0 };
    if (c->initramfs)
        s->paths[s->n_paths++] = (struct vm_spawn_path){ c->initramfs, 0 };
    if (c->disk) {
        s->paths[s->n_paths++] = (struct vm_spawn_path){ c->disk, 1 };
        if (chown(c->disk, c->jail.uid, c->jail.gid) < 0)
            return -1;
    }
    for (unsigned i = 0; i < c->n_backing; i++)
        s->paths[s->n_paths++] = (struct vm_spawn_path){ c->backing[i].path, 0 };
    if (mem_path) {
        s->paths[s->n_paths++] = (struct vm_spawn_path){ mem_path, mem_share };
        if (mem_share ? chown(mem_path, c->jail.uid, c->jail.gid) < 0 : vm_jail_freeze(mem_path) < 0)
            return -1;
    }
    if (shim)
        s->paths[s->n_paths++] = (struct vm_spawn_path){ shim, 0 };
    return 0;
}

/* QEMU's environment: PATH, and for a clone the shim and the one path it opens read-only.
 * Strings live in env (caller's storage). */
struct qemu_env {
    char path[4096], preload[4200], ro[4200];
    char *envp[4];
};

static void qemu_env_build(struct qemu_env *e, const char *shim, const char *ro_path)
{
    const char *path = getenv("PATH");
    size_t n = 0;
    snprintf(e->path, sizeof e->path, "PATH=%s",
             path ? path : "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
    e->envp[n++] = e->path;
    if (shim) {
        snprintf(e->preload, sizeof e->preload, "LD_PRELOAD=%s", shim);
        snprintf(e->ro, sizeof e->ro, "SPACE_QEMU_RO_PATH=%s", ro_path);
        e->envp[n++] = e->preload;
        e->envp[n++] = e->ro;
    }
    e->envp[n] = NULL;
}

/* The jailed parts of a start: uid, file list and ownership, cgroup. 0 or -1 with msg. */
static int jail_prepare(struct vm *vm, struct vm_spawn *s, char *root, size_t root_cap,
                        const char *mem_path, int mem_share, const char *shim, char *msg,
                        size_t msglen)
{
    struct vm_jail *j = &vm->cfg.jail;
    if (vm_jail_uid_acquire(vm, msg, msglen) < 0)
        return -1;
    if (j->uid == 0) {
        snprintf(msg, msglen, "jail uid must not be 0");
        return -1;
    }
    if (vm_path(vm, "root", root, root_cap) < 0 || (mkdir(root, 0700) < 0 && errno != EEXIST)) {
        snprintf(msg, msglen, "jail root: %s", strerror(errno));
        return -1;
    }
    s->jail_root = root;
    if (jail_paths(vm, s, mem_path, mem_share, shim) < 0) {
        snprintf(msg, msglen, "file ownership for the jail: %s", strerror(errno));
        return -1;
    }
    if (!j->cgroup_parent)
        return 0;
    struct vm_cgroup_limits lim = {
        .cpu_percent = j->cpu_percent,
        .mem_bytes = ((unsigned long long)vm->cfg.mem_mib +
                      (j->mem_overhead_mib ? j->mem_overhead_mib : 384)) << 20,
        .pids_max = j->pids_max ? j->pids_max : 64,
    };
    return vm_cgroup_create(CGROUP_ROOT, j->cgroup_parent, vm->cfg.id, &lim, s->cgroup_fds,
                            msg, msglen);
}

/* The shim a start needs: a clone (template RAM mapped private) that is jailed must have
 * it (without, QEMU's read-write open fails on the read-only file: refuse first, with a
 * clear message); an unjailed one (development) uses it when configured. Returns 0 with
 * *shim (NULL: none needed or, unjailed, none configured), or -1 with msg. */
static int shim_for(const struct vm *vm, const char *mem_path, int mem_share,
                    const char **shim, char *msg, size_t msglen)
{
    const char *p = vm_jailer_policy(vm->cfg.jail.jailer)->shim;
    *shim = NULL;
    if (!mem_path || mem_share)
        return 0;
    if (p && access(p, R_OK) == 0) {
        *shim = p;
        return 0;
    }
    if (!vm->cfg.jail.enabled)
        return 0;
    snprintf(msg, msglen, "a clone needs the QEMU shim that opens the template memory read-only: %s",
             p ? strerror(errno) : "none configured");
    if (p) {
        size_t l = strlen(msg);
        snprintf(msg + l, msglen - l, " (%s)", p);
    }
    return -1;
}

int vm_start_process(struct vm *vm, const char *mem_path, int mem_share, int incoming,
                     int paused, int *err, char *msg, size_t msglen)
{
    static unsigned tsc_khz; /* the host's TSC frequency: a fact, read once */
    if (vm->accel == VM_ACCEL_TCG && !tsc_khz)
        tsc_khz = accel_host_tsc_khz();
    struct vm_launch l = { .accel = vm->accel, .mem_path = mem_path, .mem_share = mem_share,
                           .incoming = incoming, .paused = paused, .tsc_khz = tsc_khz };
    struct vm_argv argv;
    struct vm_spawn s = { .log_fd = -1, .jail = &vm->cfg.jail,
                          .cgroup_fds = { -1, -1, -1 } };
    char p[4096], root[4096];
    int rc = -1;
    *err = VM_E_START;
    for (int i = 0; i < VM_FD_COUNT; i++)
        s.fds[i] = -1;
    if (vm_cmdline_build(&vm->cfg, &l, &argv, msg, msglen) < 0) {
        *err = VM_E_INVAL;
        return -1;
    }
    s.argv = argv.argv;
    s.need_kvm = vm->accel == VM_ACCEL_KVM;
    s.no_thp = vm->accel == VM_ACCEL_TCG;
    if ((s.fds[VM_FD_QMP] = listen_unix(vm, "qmp.sock", msg, msglen)) < 0 ||
        (s.fds[VM_FD_AGENT] = listen_unix(vm, "agent.sock", msg, msglen)) < 0 ||
        (s.fds[VM_FD_CONSOLE] = listen_unix(vm, "console.sock", msg, msglen)) < 0)
        goto out;
    s.fds[VM_FD_TAP] = vm->cfg.net.tap_fd;
    if (vm_path(vm, "qemu.log", p, sizeof(p)) < 0 ||
        (s.log_fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0600)) < 0) {
        snprintf(msg, msglen, "open qemu.log: %s", strerror(errno));
        goto out;
    }
    const char *shim = NULL;
    struct qemu_env env;
    int64_t t_prep = clock_mono_us();
    *err = VM_E_JAIL;
    if (!vm->cfg.jail.enabled && vm_jailer_policy(vm->cfg.jail.jailer)->required) {
        snprintf(msg, msglen, "QEMU must run jailed (unjailed QEMUs need spaced --no-jail)");
        goto out;
    }
    if (shim_for(vm, mem_path, mem_share, &shim, msg, msglen) < 0)
        goto out;
    if (vm->cfg.jail.enabled &&
        jail_prepare(vm, &s, root, sizeof root, mem_path, mem_share, shim, msg, msglen) < 0)
        goto out;
    if (!vm->cfg.jail.enabled)
        log_warn("vm.unjailed", "id=%s msg=\"QEMU runs unjailed as spaced's user with spaced's "
                 "view of the host (development only)\"", vm->cfg.id);
    qemu_env_build(&env, shim, mem_path);
    s.envp = env.envp;
    *err = VM_E_START;
    int64_t t_spawn = clock_mono_us();
    int sr = vm_spawn(&s, &vm->pid, msg, msglen);
    if (sr < 0) {
        if (sr == -2)
            *err = VM_E_JAIL;
        goto out;
    }
    vm->is_child = 1;
    vm->starttime = vm_proc_starttime(vm->pid);
    if (vm_attach_process(vm, msg, msglen) < 0) {
        kill(vm->pid, SIGKILL);
        waitpid(vm->pid, NULL, 0);
        goto out;
    }
    int64_t t_record = clock_mono_us();
    vm_write_record(vm);
    vm->op = VM_OP_START;
    vm_arm_kill_timer(vm, start_timeout_ms(vm));
    char q[200];
    int64_t t_end = clock_mono_us();
    /* The synchronous parts of a start, in us: the jail's preparation (uid, file
     * ownership, cgroup), the spawn until QEMU's exec, the run dir's record. */
    log_info("vm.start", "id=%s pid=%d accel=%s vcpus=%u mem_mib=%u restore=%s jail=%d uid=%u "
             "prep_us=%lld spawn_us=%lld record_us=%lld",
             vm->cfg.id, (int)vm->pid, vm_accel_name(vm->accel), vm->cfg.vcpus,
             vm->cfg.mem_mib, log_quote(vm->snap_dir, q, sizeof(q)), vm->cfg.jail.enabled,
             vm->cfg.jail.enabled ? (unsigned)vm->cfg.jail.uid : 0,
             (long long)(t_spawn - t_prep), (long long)(t_record - t_spawn),
             (long long)(t_end - t_record));
    rc = 0;
out:
    for (int i = VM_FD_QMP; i < VM_FD_TAP; i++)
        if (s.fds[i] >= 0)
            close(s.fds[i]);
    for (int i = 0; i < 3; i++)
        if (s.cgroup_fds[i] >= 0)
            close(s.cgroup_fds[i]);
    if (s.log_fd >= 0)
        close(s.log_fd);
    vm_argv_free(&argv);
    if (rc < 0)
        vm_remove_runtime_files(vm);
    return rc;
}

int vm_write_record(struct vm *vm)
{
    char p[4096], pid[32];
    /* uid and disk: an adopted VM keeps holding its uid, and its overlay goes back to
     * root when it is gone (vm_jail.c). vcpus and mem_mib: a save of the adopted VM
     * records them in snapshot.json, which a restore checks against its config. */
    json_t *j = json_pack("{s:i, s:I, s:s, s:s, s:i, s:s?, s:I, s:s?, s:i, s:i}", "pid",
                          (int)vm->pid, "starttime", (json_int_t)vm->starttime, "id",
                          vm->cfg.id, "accel", vm_accel_name(vm->accel), "jail",
                          vm->cfg.jail.enabled, "cgroup_parent", vm->cfg.jail.cgroup_parent,
                          "uid", (json_int_t)(vm->cfg.jail.enabled ? vm->cfg.jail.uid : 0),
                          "disk", vm->cfg.disk, "vcpus", (int)vm->cfg.vcpus, "mem_mib",
                          (int)vm->cfg.mem_mib);
    /* The runtime this QEMU was started as (vm_sig.h): a save of the VM adopted after a
     * restart records it, not the restarted spaced's (whose QEMU may be newer). */
    if (j && vm->cfg.runtime && vm->cfg.runtime[0])
        json_object_set_new(j, "runtime", json_string(vm->cfg.runtime));
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    int r = -1;
    /* Written before spaced acts on the VM (QMP, the agent), without an fsync: both
     * files only describe the live QEMU, for adoption after a restart of spaced, which
     * reads them from the page cache (a SIGKILL of spaced loses nothing). An OS crash
     * may lose them, but it ends that QEMU too: adoption then finds no VM, as it would
     * find a dead pid in a synced file. Two fsyncs were 4-23 ms of every start's
     * synchronous part on a loaded host (vm.start's record_us). */
    if (s && vm_path(vm, "vm.json", p, sizeof(p)) == 0)
        r = vm_write_file_atomic_nosync(p, s, strlen(s));
    free(s);
    int n = snprintf(pid, sizeof(pid), "%d\n", (int)vm->pid);
    if (vm_path(vm, "qemu.pid", p, sizeof(p)) == 0)
        vm_write_file_atomic_nosync(p, pid, (size_t)n);
    return r;
}

/* Builds the struct and checks what can be checked before starting anything. */
struct vm *vm_new(struct event_base *base, const struct vm_config *cfg,
                  const struct vm_callbacks *cbs, void *arg, int *err, char *msg, size_t msglen)
{
    const char *files[3 + VM_DISK_BACKING_MAX] = { cfg->kernel, cfg->initramfs, cfg->disk };
    for (unsigned i = 0; i < cfg->n_backing && i < VM_DISK_BACKING_MAX; i++)
        files[3 + i] = cfg->backing[i].path;
    *err = VM_E_INVAL;
    if (!vm_id_valid(cfg->id)) {
        snprintf(msg, msglen, "invalid sandbox id");
        return NULL;
    }
    if (!cfg->run_dir || access(cfg->run_dir, W_OK) < 0) {
        snprintf(msg, msglen, "run_dir %s not writable", cfg->run_dir ? cfg->run_dir : "(null)");
        return NULL;
    }
    if (cfg->n_backing > VM_DISK_BACKING_MAX) {
        snprintf(msg, msglen, "too many backing layers");
        return NULL;
    }
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        if (files[i] && access(files[i], R_OK) < 0) {
            *err = VM_E_NOENT;
            snprintf(msg, msglen, "%s: %s", files[i], strerror(errno));
            return NULL;
        }
    }
    struct vm *vm = calloc(1, sizeof(*vm));
    if (!vm || vm_config_copy(&vm->cfg, cfg) < 0) {
        free(vm);
        snprintf(msg, msglen, "out of memory");
        return NULL;
    }
    vm->base = base;
    if (cbs)
        vm->cbs = *cbs;
    vm->arg = arg;
    vm->pidfd = vm->con_fd = vm->log_fd = vm->state_fd = vm->save_fd = -1;
    vm->state = VM_STATE_STARTING;
    vm->accel = vm_accel_resolve(cfg->accel);
    if (cfg->accel == VM_ACCEL_KVM) {
        char why[256];
        if (accel_probe_kvm("/dev/kvm", "/sys/module/kvm_pvm", why, sizeof(why)) !=
            ACCEL_KVM_USABLE) {
            *err = VM_E_START;
            snprintf(msg, msglen, "accel=kvm forced but %s", why);
            vm_config_free(&vm->cfg);
            free(vm);
            return NULL;
        }
    }
    return vm;
}

void vm_free_unstarted(struct vm *vm)
{
    vm_config_free(&vm->cfg);
    free(vm->snap_dir);
    free(vm->save_dir);
    free(vm);
}

struct vm *vm_boot(struct event_base *base, const struct vm_config *cfg,
                   const struct vm_callbacks *cbs, void *arg, int *err, char *msg,
                   size_t msglen)
{
    struct vm *vm = vm_new(base, cfg, cbs, arg, err, msg, msglen);
    if (!vm)
        return NULL;
    if (cfg->mem_path) {
        /* The template's RAM file must exist (with its size) before QEMU maps it: the
         * jail bind-mounts files, it cannot create them. A previous file is unlinked,
         * never truncated: clones of an older snapshot may still map that inode, and
         * truncating it would turn their unmodified pages into SIGBUS. */
        unlink(cfg->mem_path);
        int fd = open(cfg->mem_path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd < 0 || ftruncate(fd, (off_t)cfg->mem_mib << 20) < 0) {
            *err = VM_E_IO;
            snprintf(msg, msglen, "memory file %s: %s", cfg->mem_path, strerror(errno));
            if (fd >= 0)
                close(fd);
            vm_free_unstarted(vm);
            return NULL;
        }
        close(fd);
    }
    if (vm_start_process(vm, cfg->mem_path, 1, 0, 0, err, msg, msglen) < 0) {
        vm_free_unstarted(vm);
        return NULL;
    }
    return vm;
}

