/* tpl_snapshot.c: template memory snapshots, one *version* per (template, vcpus, memory,
 * nic, fingerprint), built in the background and found again after a restart; and the
 * sweep that removes versions nothing uses any more.
 *
 * Fingerprint: SHA-256 over the identity (path, device, inode, size, mtime) of the
 * kernel, the initramfs and the template's rootfs, the bytes of its template.json (start
 * command, ready check, defaults), the kernel command line (a restored clone runs the
 * kernel as the template booted it), the shape, how the template VM was prepared
 * (TPL_SNAP_PREPARATION: warmed up by tpl_warm.c, then started and checked ready) and the
 * node's VM runtime (vm/vm_sig.h: QEMU release, accelerator, CPU). Any rebuild of the
 * guest or the template writes new files, so it gives a new fingerprint: a snapshot made
 * from the old files is never restored under the new ones; the next create cold-boots
 * while a new version is made beside the old one. A QEMU upgrade (or a move of the data
 * directory to another CPU) does the same: the old version's state would not load into
 * the new QEMU (vm_restore refuses it: VM_E_INCOMPATIBLE), so it is not current any more,
 * creates cold-boot until the new one is ready, and the sweep removes the old one once no
 * sandbox stands on it. (Hashing contents would cost seconds for a 2 GiB image on every
 * create; a rewrite always changes the identity.)
 *
 * A version directory (<data>/templates/<name>/snapshots/<v>x<m>[-net]-<fp16>/):
 *   disk.qcow2    the template VM's overlay, frozen: every clone's overlay backs onto it
 *   snap/         vm.h snapshot (state, mem = the RAM file clones map copy-on-write)
 *   version.json  the fingerprint's inputs, for humans
 *   ready         present once the snapshot is complete
 * Clones of a version name it in their disk chain (the sandbox module reports the
 * chains: tpl_users_fn, tpl.h) for their whole life (running, paused, suspended, stopped, failed), so the sweep removes
 * a version only when it is not current, not being built, and no live sandbox's chain
 * names it. Directories in the layout of earlier spaced versions
 * (<data>/templates/<name>/<v>x<m>[-net]/) are swept by the same rule. */
#include <dirent.h>
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <jansson.h>
#include <openssl/sha.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/agentc/agentc.h"
#include "daemon/jail/jail.h"
#include "daemon/net/net.h"
#include "daemon/vm/vm.h"
#include "daemon/vm/vm_greet.h"
#include "log.h"
#include "tpl_internal.h"

#define TPL_SNAP_BOOT_TIMEOUT_S 300 /* cold boot under TCG takes seconds; be generous */
#define TPL_FP_HEX 16               /* fingerprint digits in directory names */
/* How the template VM is brought to the state clones restore (tpl_warm.c, then the
 * probe): part of the fingerprint, so snapshots prepared an older way are replaced. */
#define TPL_SNAP_PREPARATION "warm-1"
/* A failed build is tried again after 30 s, doubling up to an hour: a cause that passes
 * (a loaded host missing the boot deadline, a full disk freed) should not leave every
 * create of the shape cold-booting for the life of the daemon, and one that stays should
 * not boot a VM in a loop. */
#define TPL_SNAP_RETRY_MAX_MS 3600000

enum tpl_snap_state { SNAP_BUILDING, SNAP_READY, SNAP_FAILED };
static const char *const snap_state_names[] = {"building", "ready", "failed"};

struct tpl_snap {
    struct spaced *sp;
    char name[64];
    unsigned vcpus, mem_mib;
    bool nic;                   /* built with a network device (see tpl.h) */
    bool nic_claimed;           /* its template namespace exists (released when done) */
    char fp[TPL_FP_HEX + 1];    /* fingerprint (version) */
    char vm_id[64];             /* "t-<name>-<v>x<m>[-net]-<fp8>" */
    enum tpl_snap_state state;
    unsigned fails;             /* failed builds in a row */
    int64_t retry_at_ms;        /* a failed one is built again from then on */
    char dir[TPL_PATH_MAX];     /* the version directory */
    char rootfs[TPL_PATH_MAX + 16];
    char tpl_dir[TPL_PATH_MAX]; /* the template's directory (template.json) */
    char run_dir[TPL_PATH_MAX];
    json_t *inputs;             /* what the fingerprint hashed (owned) */
    struct tpl_defaults d;      /* start/ready/defaults while building (owned) */
    struct tpl_warm *warm;      /* warm-up in flight (before the probe) */
    struct tpl_probe *probe;    /* start + ready check in flight */
    struct vm *vm;              /* template VM while building */
    struct agentc *agent;       /* its agent connection */
    struct vmg *greet;          /* boot until the agent's HELLO, TPL_SNAP_BOOT_TIMEOUT_S */
    struct tpl_snap *next;
};

static void snap_path(const struct tpl_snap *s, const char *leaf, char *out, size_t cap)
{
    snprintf(out, cap, "%s/%s", s->dir, leaf);
}

/* ---- fingerprint ------------------------------------------------------------------- */

static json_t *file_id(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return json_pack("{s:s, s:n}", "path", path, "missing");
    return json_pack("{s:s, s:I, s:I, s:I, s:I}", "path", path, "dev", (json_int_t)st.st_dev, "ino",
                     (json_int_t)st.st_ino, "size", (json_int_t)st.st_size, "mtime_ns",
                     (json_int_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec);
}

/* Fills fp (TPL_FP_HEX digits) and returns the inputs (new reference, or NULL). */
static json_t *fingerprint(struct spaced *sp, const struct tpl_info *t, unsigned vcpus,
                           unsigned mem_mib, bool nic, char *fp)
{
    char meta[TPL_PATH_MAX + 32];
    snprintf(meta, sizeof meta, "%s/template.json", t->dir);
    unsigned char md[SHA256_DIGEST_LENGTH];
    char mh[2 * SHA256_DIGEST_LENGTH + 1] = "none";
    FILE *f = fopen(meta, "rb");
    if (f) {
        char buf[65536];
        size_t n = fread(buf, 1, sizeof buf, f);
        fclose(f);
        SHA256((const unsigned char *)buf, n, md);
        for (size_t i = 0; i < sizeof md; i++)
            sprintf(mh + 2 * i, "%02x", md[i]);
    }
    json_t *in = json_pack("{s:o, s:o, s:o, s:s, s:s, s:I, s:I, s:b, s:s, s:s}", "kernel",
                           file_id(sp->tpl->kernel), "initramfs", file_id(sp->tpl->initramfs),
                           "rootfs", file_id(t->rootfs), "template_json_sha256", mh,
                           "kernel_cmdline", vm_kernel_cmdline(), "vcpus", (json_int_t)vcpus,
                           "memory_mib", (json_int_t)mem_mib, "nic", nic, "preparation",
                           TPL_SNAP_PREPARATION, "runtime", sp->runtime);
    char *canon = in ? json_dumps(in, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    if (!canon) {
        json_decref(in);
        return NULL;
    }
    SHA256((const unsigned char *)canon, strlen(canon), md);
    free(canon);
    for (size_t i = 0; i < TPL_FP_HEX / 2; i++)
        sprintf(fp + 2 * i, "%02x", md[i]);
    return in;
}

/* ---- building one version ---------------------------------------------------------- */

static void snap_release_nic(struct tpl_snap *s)
{
    if (s->nic_claimed && net_get(s->sp))
        net_release(net_get(s->sp), s->vm_id);
    s->nic_claimed = false;
}

static void snap_fail(struct tpl_snap *s, const char *why)
{
    snap_release_nic(s);
    char q[600];
    log_warn("template.snapshot", "template=%s shape=%ux%u version=%s result=failed reason=%s",
             s->name, s->vcpus, s->mem_mib, s->fp, log_quote(why, q, sizeof q));
    s->state = SNAP_FAILED;
    int64_t wait = s->sp->tpl->snap_retry_ms;
    for (unsigned i = 0; i < s->fails && wait < TPL_SNAP_RETRY_MAX_MS; i++)
        wait *= 2;
    s->fails++;
    s->retry_at_ms = spaced_now_ms() + (wait < TPL_SNAP_RETRY_MAX_MS ? wait : TPL_SNAP_RETRY_MAX_MS);
    tpl_warm_free(s->warm);
    s->warm = NULL;
    tpl_probe_free(s->probe);
    s->probe = NULL;
    if (s->vm && vm_state(s->vm) < VM_STATE_STOPPING)
        vm_kill(s->vm);
    agentc_free(s->agent);
    s->agent = NULL;
    if (s->greet)
        vmg_stop(s->greet);
    tpl_defaults_clear(&s->d);
}

static void on_snapshot_done(struct vm *vm, int err, const char *msg, void *arg)
{
    struct tpl_snap *s = arg;
    (void)vm;
    if (err != VM_OK) {
        snap_fail(s, msg ? msg : vm_error_code(err));
        return;
    }
    char ready[TPL_PATH_MAX + 16], ver[TPL_PATH_MAX + 16];
    snap_path(s, "version.json", ver, sizeof ver);
    json_t *v = json_pack("{s:s, s:s, s:O}", "template", s->name, "version", s->fp, "inputs", s->inputs);
    if (v)
        json_dump_file(v, ver, JSON_INDENT(2));
    json_decref(v);
    snap_path(s, "ready", ready, sizeof ready);
    int fd = open(ready, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        snap_fail(s, "cannot write the ready marker");
        return;
    }
    fsync(fd);
    close(fd);
    s->state = SNAP_READY;
    snap_release_nic(s);
    tpl_defaults_clear(&s->d);
    log_info("template.snapshot", "template=%s shape=%ux%u version=%s result=ready", s->name,
             s->vcpus, s->mem_mib, s->fp);
    tpl_snapshots_gc_soon(s->sp, NULL); /* an older version may be unused now */
}

static void take_snapshot(struct tpl_snap *s)
{
    char snap[TPL_PATH_MAX + 16];
    snap_path(s, "snap", snap, sizeof snap);
    /* The connection must not straddle the snapshot: clones reconnect on their own. */
    agentc_free(s->agent);
    s->agent = NULL;
    if (!s->vm || vm_template_snapshot(s->vm, snap, on_snapshot_done, s) != 0)
        snap_fail(s, "vm_template_snapshot refused");
}

static void on_probe(void *arg, const char *failure)
{
    struct tpl_snap *s = arg;
    tpl_warm_free(s->warm);
    s->warm = NULL;
    tpl_probe_free(s->probe);
    s->probe = NULL;
    if (failure)
        snap_fail(s, failure);
    else
        take_snapshot(s);
}

/* After the warm-up: the template's start command and ready check, then the snapshot. */
static void after_warm(struct tpl_snap *s)
{
    if (!s->d.start && !s->d.ready) {
        take_snapshot(s);
        return;
    }
    s->probe = tpl_probe_start(s->sp, s->agent, &s->d, on_probe, s);
    if (!s->probe)
        snap_fail(s, "cannot send the start command to the template VM");
}

static void on_warm(void *arg)
{
    struct tpl_snap *s = arg;
    tpl_warm_free(s->warm);
    s->warm = NULL;
    after_warm(s);
}

static void on_agent_ready(void *arg, json_t *hello)
{
    struct tpl_snap *s = arg;
    (void)hello;
    vmg_answered(s->greet);
    char label[96];
    snprintf(label, sizeof label, "%s/%ux%u-%s", s->name, s->vcpus, s->mem_mib, s->fp);
    s->warm = tpl_warm_start(s->agent, &s->d, label, on_warm, s);
    if (!s->warm)
        after_warm(s);
}

static void on_agent_closed(void *arg, const char *code, const char *message)
{
    struct tpl_snap *s = arg;
    if (s->state == SNAP_BUILDING && s->agent) {
        char why[256];
        snprintf(why, sizeof why, "agent connection closed (%s: %s)", code, message);
        snap_fail(s, why);
    }
}

static const struct agentc_callbacks snap_agent_cbs = {on_agent_ready, on_agent_closed};

static void on_vm_ready(struct vm *vm, int err, const char *msg, void *arg)
{
    if (err != VM_OK)
        snap_fail(arg, msg ? msg : vm_error_code(err));
    (void)vm;
}

static void on_vm_agent(struct vm *vm, int fd, void *arg)
{
    struct tpl_snap *s = arg;
    (void)vm;
    tpl_warm_free(s->warm);
    s->warm = NULL;
    tpl_probe_free(s->probe);
    s->probe = NULL;
    agentc_free(s->agent);
    s->agent = agentc_new(s->sp->base, fd, &snap_agent_cbs, s); /* sends the HELLO */
    vmg_sent(s->greet);
}

static void on_vm_exit(struct vm *vm, enum vm_exit_reason reason, const char *msg,
                       const char *tail, void *arg)
{
    struct tpl_snap *s = arg;
    (void)vm;
    (void)tail;
    s->vm = NULL;
    vmg_stop(s->greet);
    tpl_warm_free(s->warm);
    s->warm = NULL;
    tpl_probe_free(s->probe);
    s->probe = NULL;
    agentc_free(s->agent);
    s->agent = NULL;
    if (s->state == SNAP_BUILDING && reason != VM_EXIT_SAVED)
        snap_fail(s, msg ? msg : vm_exit_reason_name(reason));
}

static const struct vm_callbacks snap_vm_cbs = {on_vm_ready, on_vm_agent, on_vm_exit};

static void on_boot_timeout(void *arg, struct vm *vm, int err, const char *msg)
{
    (void)vm;
    (void)err;
    (void)msg;
    snap_fail(arg, "template VM did not report ready in time");
}

/* A cold boot: no HELLO retry (its agent is simply not up yet), one deadline. */
static const struct vmg_ops snap_greet_ops = {NULL, on_boot_timeout};
static const struct vmg_params snap_greet = {0, 0, TPL_SNAP_BOOT_TIMEOUT_S * 1000};

static void on_overlay(struct vm *unused, int err, const char *msg, void *arg)
{
    struct tpl_snap *s = arg;
    (void)unused;
    if (err != VM_OK) {
        snap_fail(s, msg ? msg : "qemu-img failed");
        return;
    }
    struct vm_config cfg;
    memset(&cfg, 0, sizeof cfg);
    struct spaced_err e;
    if (!s->greet) {
        snap_fail(s, "out of memory");
        return;
    }
    if (tpl_vm_base(s->sp, &cfg, &e) < 0) {
        snap_fail(s, e.message);
        return;
    }
    char disk[TPL_PATH_MAX + 16], ram[TPL_PATH_MAX + 16];
    snap_path(s, "disk.qcow2", disk, sizeof disk);
    snap_path(s, "ram", ram, sizeof ram);
    cfg.id = s->vm_id;
    struct net_lease lease = {.tap_fd = -1};
    if (s->nic) {
        struct net *n = net_get(s->sp);
        if (!n || net_claim_template(n, s->vm_id, &lease, &e) < 0) {
            snap_fail(s, n ? e.message : "sandbox networking is not available on this host");
            return;
        }
        s->nic_claimed = true;
        cfg.net.tap_fd = lease.tap_fd;
        cfg.net.mac = lease.mac;
    }
    cfg.vcpus = s->vcpus;
    cfg.mem_mib = s->mem_mib;
    cfg.disk = disk;
    cfg.backing[0].path = s->rootfs;
    cfg.backing[0].format = "raw";
    cfg.n_backing = 1;
    cfg.run_dir = s->run_dir;
    cfg.mem_path = ram;
    /* The template's start command may be a tenant's (built templates): the snapshot VM
     * is jailed like any other. Its RAM file and overlay are its uid's while it runs and
     * become root-owned 0444 once the snapshot is taken (vm_template_snapshot). */
    jail_fill(s->sp, &cfg);
    int verr = 0;
    char msgbuf[256] = "";
    s->vm = vmg_start(s->greet, &cfg, NULL, 0, &snap_greet, &snap_vm_cbs, s, &verr, msgbuf,
                      sizeof msgbuf);
    if (lease.tap_fd >= 0)
        close(lease.tap_fd); /* QEMU holds its own copy from the spawn */
    if (!s->vm) {
        snap_fail(s, msgbuf[0] ? msgbuf : vm_error_code(verr));
        return;
    }
}

/* True if process `pid`'s command line names `needle`. */
static bool cmdline_names(const char *pid, const char *needle)
{
    char p[300], cmd[8192];
    snprintf(p, sizeof p, "/proc/%s/cmdline", pid);
    FILE *f = fopen(p, "r");
    if (!f)
        return false;
    size_t n = fread(cmd, 1, sizeof cmd - 1, f);
    fclose(f);
    for (size_t i = 0; i < n; i++)
        if (cmd[i] == '\0')
            cmd[i] = ' ';
    cmd[n] = '\0';
    return strstr(cmd, needle) != NULL;
}

void tpl_kill_stale_vms(const char *data_dir)
{
    /* Template and build VMs a spaced killed mid-build left are of no use (snapshots
     * and builds are redone from scratch), and one of an older snapshot version would
     * never be looked for again. They are recognised by their command line: QEMU's
     * -name is the VM id ("t-..." or "b-...", never a sandbox's "sb..."/"pool-...") and
     * their disk and RAM files lie under this data dir's templates/ (their run
     * directory is not on the command line: the sockets are passed as descriptors), so
     * another spaced's VMs and recycled pids are never hit. No pid file is trusted: a
     * spaced killed between fork and writing it leaves none, and a rebuild overwrites
     * it. tests/e2e/test_hygiene.py checks this. */
    char tpls[TPL_PATH_MAX + 16];
    snprintf(tpls, sizeof tpls, "%s/templates/", data_dir);
    DIR *dp = opendir("/proc");
    struct dirent *e;
    while (dp && (e = readdir(dp))) {
        if (strspn(e->d_name, "0123456789") != strlen(e->d_name) || atoi(e->d_name) <= 1 ||
            atoi(e->d_name) == (int)getpid())
            continue;
        if (cmdline_names(e->d_name, "qemu") && cmdline_names(e->d_name, tpls) &&
            (cmdline_names(e->d_name, " -name t-") || cmdline_names(e->d_name, " -name b-"))) {
            log_warn("template.stale", "pid=%s msg=\"killing a template VM an earlier spaced left\"",
                     e->d_name);
            kill(atoi(e->d_name), SIGKILL);
        }
    }
    if (dp)
        closedir(dp);
}

static void snap_build(struct tpl_snap *s)
{
    s->state = SNAP_BUILDING;
    char p[TPL_PATH_MAX + 16];
    /* Leftovers of an interrupted build are never trusted. */
    spaced_rm_rf(s->dir);
    if (spaced_mkdir_p(s->dir) < 0 || spaced_mkdir_p(s->run_dir) < 0) {
        snap_fail(s, strerror(errno));
        return;
    }
    tpl_defaults_load(s->tpl_dir, &s->d);
    log_info("template.snapshot", "template=%s shape=%ux%u version=%s result=building%s", s->name,
             s->vcpus, s->mem_mib, s->fp, s->d.ready ? " ready_check=yes" : "");
    snap_path(s, "disk.qcow2", p, sizeof p);
    struct vm_disk_layer base = {s->rootfs, "raw"};
    if (vm_disk_overlay_create(s->sp->base, &base, 1, p, on_overlay, s, NULL) != 0)
        snap_fail(s, "cannot start qemu-img");
}

bool tpl_snapshot(struct spaced *sp, const struct tpl_info *t, unsigned vcpus, unsigned mem_mib,
                  bool nic, char *snap_dir, size_t snap_cap, char *overlay, size_t overlay_cap)
{
    struct tpl_registry *r = sp->tpl;
    char fp[TPL_FP_HEX + 1] = "";
    json_t *inputs = fingerprint(sp, t, vcpus, mem_mib, nic, fp);
    if (!inputs)
        return false;
    struct tpl_snap *s = r->snaps;
    while (s && !(strcmp(s->name, t->name) == 0 && s->vcpus == vcpus && s->mem_mib == mem_mib &&
                  s->nic == nic && strcmp(s->fp, fp) == 0))
        s = s->next;
    if (!s) {
        s = calloc(1, sizeof *s);
        if (!s) {
            json_decref(inputs);
            return false;
        }
        s->sp = sp;
        snprintf(s->name, sizeof s->name, "%s", t->name);
        s->vcpus = vcpus;
        s->mem_mib = mem_mib;
        s->nic = nic;
        memcpy(s->fp, fp, sizeof s->fp);
        s->inputs = json_incref(inputs);
        const char *sfx = nic ? "-net" : "";
        snprintf(s->vm_id, sizeof s->vm_id, "t-%.24s-%ux%u%s-%.8s", t->name, vcpus, mem_mib, sfx, fp);
        snprintf(s->dir, sizeof s->dir, "%s/templates/%s/snapshots/%ux%u%s-%s", sp->opt.data_dir,
                 t->name, vcpus, mem_mib, sfx, fp);
        snprintf(s->rootfs, sizeof s->rootfs, "%s", t->rootfs);
        snprintf(s->tpl_dir, sizeof s->tpl_dir, "%s", t->dir);
        snprintf(s->run_dir, sizeof s->run_dir, "%s/run/%s", sp->opt.data_dir, s->vm_id);
        s->greet = vmg_new(sp->base, &snap_greet_ops, s);
        s->next = r->snaps;
        r->snaps = s;
        char ready[TPL_PATH_MAX + 16];
        snap_path(s, "ready", ready, sizeof ready);
        if (access(ready, F_OK) == 0)
            s->state = SNAP_READY;
        else
            snap_build(s);
    }
    json_decref(inputs);
    if (s->state == SNAP_FAILED && !s->vm && spaced_now_ms() >= s->retry_at_ms)
        snap_build(s);
    if (s->state != SNAP_READY)
        return false;
    snap_path(s, "snap", snap_dir, snap_cap);
    snap_path(s, "disk.qcow2", overlay, overlay_cap);
    return true;
}

/* ---- the registry's view ----------------------------------------------------------- */

unsigned tpl_snapshots_ready(struct spaced *sp, const char *name)
{
    unsigned n = 0;
    for (struct tpl_snap *s = sp->tpl->snaps; s; s = s->next)
        n += s->state == SNAP_READY && strcmp(s->name, name) == 0;
    return n;
}

void tpl_snapshots_each_ready(struct spaced *sp,
                              void (*fn)(const char *name, unsigned vcpus, unsigned mem_mib,
                                         const char *snap_dir, void *arg),
                              void *arg)
{
    char snap_dir[TPL_PATH_MAX + 16];
    for (struct tpl_snap *s = sp->tpl ? sp->tpl->snaps : NULL; s; s = s->next)
        if (s->state == SNAP_READY) {
            snap_path(s, "snap", snap_dir, sizeof snap_dir);
            fn(s->name, s->vcpus, s->mem_mib, snap_dir, arg);
        }
}

bool tpl_snapshots_busy(struct spaced *sp, const char *name)
{
    for (struct tpl_snap *s = sp->tpl->snaps; s; s = s->next)
        if (s->state == SNAP_BUILDING && strcmp(s->name, name) == 0)
            return true;
    return false;
}

static void snap_free(struct tpl_snap *s)
{
    tpl_warm_free(s->warm);
    tpl_probe_free(s->probe);
    if (s->vm) {
        /* A half-built template VM is useless to a restarted spaced: end it. */
        kill(vm_pid(s->vm), SIGKILL);
        vm_detach(s->vm);
    }
    snap_release_nic(s);
    agentc_free(s->agent);
    vmg_free(s->greet);
    json_decref(s->inputs);
    tpl_defaults_clear(&s->d);
    free(s);
}

void tpl_snapshots_forget(struct spaced *sp, const char *name)
{
    for (struct tpl_snap **pp = &sp->tpl->snaps; *pp;) {
        struct tpl_snap *s = *pp;
        if (strcmp(s->name, name) == 0 && s->state != SNAP_BUILDING) {
            *pp = s->next;
            snap_free(s);
        } else {
            pp = &s->next;
        }
    }
}

void tpl_snapshots_free(struct tpl_registry *r)
{
    while (r->snaps) {
        struct tpl_snap *s = r->snaps;
        r->snaps = s->next;
        snap_free(s);
    }
}

/* ---- which versions are in use ----------------------------------------------------- */

/* Adds a live sandbox's disk-chain layers (tpl_use_fn) to the array arg. */
static void collect_chain(const char *template_name, const char *const *layers, unsigned n,
                          void *arg)
{
    (void)template_name;
    for (unsigned i = 0; i < n; i++)
        json_array_append_new(arg, json_string(layers[i]));
}

static unsigned users_of(const json_t *paths, const char *dir)
{
    size_t dl = strlen(dir), i;
    json_t *p;
    unsigned n = 0;
    json_array_foreach(paths, i, p) {
        const char *s = json_string_value(p);
        n += strncmp(s, dir, dl) == 0 && s[dl] == '/';
    }
    return n;
}

/* The layer paths of every live sandbox's disk chain, as the sandbox module reports them. */
static json_t *live_chains(struct spaced *sp)
{
    json_t *paths = json_array();
    tpl_users_each(sp, collect_chain, paths);
    return paths;
}

/* The registry entry for version directory `dir`, or NULL. */
static struct tpl_snap *snap_at(struct spaced *sp, const char *dir)
{
    for (struct tpl_snap *s = sp->tpl->snaps; s; s = s->next)
        if (strcmp(s->dir, dir) == 0)
            return s;
    return NULL;
}

/* Version directory names: "<v>x<m>[-net]-<fp>" (snapshots/) or "<v>x<m>[-net]" (old). */
static bool version_name(const char *n)
{
    unsigned v, m;
    int used = 0;
    if (sscanf(n, "%ux%u%n", &v, &m, &used) != 2 || used == 0)
        return false;
    const char *rest = n + used;
    if (strncmp(rest, "-net", 4) == 0)
        rest += 4;
    if (!*rest)
        return true;
    if (*rest++ != '-' || strlen(rest) != TPL_FP_HEX)
        return false;
    return strspn(rest, "0123456789abcdef") == TPL_FP_HEX;
}

/* Calls fn for each version directory of template directory `tdir` (both layouts). */
static void each_version(const char *tdir, void (*fn)(const char *dir, const char *leaf, void *),
                         void *arg)
{
    for (int sub = 0; sub < 2; sub++) {
        char d[TPL_PATH_MAX + 16];
        snprintf(d, sizeof d, "%s%s", tdir, sub ? "/snapshots" : "");
        DIR *dp = opendir(d);
        struct dirent *e;
        while (dp && (e = readdir(dp))) {
            if (!version_name(e->d_name))
                continue;
            char full[TPL_PATH_MAX + 300];
            snprintf(full, sizeof full, "%s/%s", d, e->d_name);
            fn(full, e->d_name, arg);
        }
        if (dp)
            closedir(dp);
    }
}

struct version_ctx {
    struct spaced *sp;
    const json_t *paths;
    json_t *out;       /* API list, or NULL when sweeping */
    const char *name;
};

/* Current: the entry the registry would hand to a create now, i.e. its fingerprint is
 * what the files give today. Stale entries are dropped from the registry here. */
static bool is_current(struct spaced *sp, struct tpl_snap *s)
{
    struct tpl_info t;
    char fp[TPL_FP_HEX + 1] = "";
    if (tpl_lookup(sp, NULL, s->name, &t, NULL) < 0)
        return false;
    json_t *in = fingerprint(sp, &t, s->vcpus, s->mem_mib, s->nic, fp);
    json_decref(in);
    return in && strcmp(fp, s->fp) == 0;
}

static void list_version(const char *dir, const char *leaf, void *arg)
{
    struct version_ctx *c = arg;
    struct tpl_snap *s = snap_at(c->sp, dir);
    char ready[TPL_PATH_MAX + 320];
    snprintf(ready, sizeof ready, "%s/ready", dir);
    const char *state = s ? snap_state_names[s->state] : access(ready, F_OK) == 0 ? "ready" : "unknown";
    const char *dash = strrchr(leaf, '-');
    bool has_fp = dash && strlen(dash + 1) == TPL_FP_HEX;
    json_t *v = json_pack("{s:s, s:s, s:s, s:b, s:I}", "version", has_fp ? dash + 1 : "legacy",
                          "dir", leaf, "state", state, "current", s && is_current(c->sp, s),
                          "in_use", (json_int_t)users_of(c->paths, dir));
    if (v && s && s->state == SNAP_FAILED) { /* when it is built again (tpl_snapshot) */
        json_object_set_new(v, "failures", json_integer(s->fails));
        json_object_set_new(v, "retry_in_ms", json_integer(s->retry_at_ms - spaced_now_ms()));
    }
    json_array_append_new(c->out, v);
}

json_t *tpl_snapshots_json(struct spaced *sp, const char *name)
{
    char tdir[TPL_PATH_MAX];
    snprintf(tdir, sizeof tdir, "%s/templates/%s", sp->opt.data_dir, name);
    json_t *paths = live_chains(sp);
    struct version_ctx c = {sp, paths, json_array(), name};
    each_version(tdir, list_version, &c);
    json_decref(paths);
    return c.out;
}

/* ---- the sweep ----------------------------------------------------------------------- */

static void sweep_version(const char *dir, const char *leaf, void *arg)
{
    struct version_ctx *c = arg;
    (void)leaf;
    struct tpl_snap *s = snap_at(c->sp, dir);
    if (s && (s->state == SNAP_BUILDING || is_current(c->sp, s)))
        return;
    if (!s) {
        /* Not known to this process: current if a create would compute this name. Only
         * versions a create asked for are in the registry; one made by an earlier run and
         * still current is recognised by its fingerprint, re-derived here. */
        struct tpl_info t;
        unsigned v, m;
        char fp[TPL_FP_HEX + 1] = "";
        if (tpl_lookup(c->sp, NULL, c->name, &t, NULL) == 0 && sscanf(leaf, "%ux%u", &v, &m) == 2) {
            json_t *in = fingerprint(c->sp, &t, v, m, strstr(leaf, "-net") != NULL, fp);
            json_decref(in);
            const char *dash = strrchr(leaf, '-');
            if (in && dash && strcmp(dash + 1, fp) == 0)
                return;
        }
    }
    unsigned users = users_of(c->paths, dir);
    if (users) {
        log_info("template.gc", "template=%s version=%s action=keep sandboxes=%u", c->name, leaf, users);
        return;
    }
    log_info("template.gc", "template=%s version=%s action=remove", c->name, leaf);
    if (s) {
        for (struct tpl_snap **pp = &c->sp->tpl->snaps; *pp; pp = &(*pp)->next)
            if (*pp == s) {
                *pp = s->next;
                break;
            }
        snap_free(s);
    }
    spaced_rm_rf(dir);
}

static void sweep_template(struct spaced *sp, const json_t *paths, const char *name)
{
    char tdir[TPL_PATH_MAX];
    snprintf(tdir, sizeof tdir, "%s/templates/%s", sp->opt.data_dir, name);
    struct version_ctx c = {sp, paths, NULL, name};
    each_version(tdir, sweep_version, &c);
}

static void collect_version(const char *dir, const char *leaf, void *arg)
{
    (void)leaf;
    json_array_append_new(arg, json_string(dir));
}

void tpl_snapshots_rootfs(struct spaced *sp, json_t *arr)
{
    for (struct tpl_snap *s = sp->tpl->snaps; s; s = s->next)
        json_array_append_new(arr, json_string(s->rootfs));
}

static void on_gc(evutil_socket_t fd, short what, void *arg)
{
    struct spaced *sp = arg;
    (void)fd;
    (void)what;
    tpl_copies_sweep(sp); /* first: what it removes, the sweeps below need not keep */
    json_t *paths = live_chains(sp), *left = json_array();
    char tdir[TPL_PATH_MAX], one[TPL_PATH_MAX + 300];
    snprintf(tdir, sizeof tdir, "%s/templates", sp->opt.data_dir);
    DIR *dp = opendir(tdir);
    struct dirent *e;
    while (dp && (e = readdir(dp)))
        if (tpl_name_valid(e->d_name)) {
            sweep_template(sp, paths, e->d_name);
            snprintf(one, sizeof one, "%s/%s", tdir, e->d_name);
            each_version(one, collect_version, left);
        }
    if (dp)
        closedir(dp);
    /* Then the pinned images the remaining versions and sandboxes do not need. */
    tpl_pins_sweep(sp, paths, left);
    json_decref(left);
    json_decref(paths);
}

void tpl_snapshots_gc_soon(struct spaced *sp, struct tpl_registry *r)
{
    if (!r)
        r = sp->tpl;
    if (!r)
        return;
    if (!r->gc && !(r->gc = evtimer_new(sp->base, on_gc, sp)))
        return;
    struct timeval tv = {0, 0};
    event_add(r->gc, &tv);
}
