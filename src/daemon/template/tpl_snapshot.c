/* tpl_snapshot.c: building template memory snapshots in the background, one per
 * (template, vcpus, memory) shape, and finding them again after a restart. */
#include <dirent.h>
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/agentc/agentc.h"
#include "daemon/net/net.h"
#include "daemon/vm/vm.h"
#include "log.h"
#include "tpl_internal.h"

#define TPL_SNAP_BOOT_TIMEOUT_S 300 /* cold boot under TCG takes seconds; be generous */

enum tpl_snap_state { SNAP_BUILDING, SNAP_READY, SNAP_FAILED };

struct tpl_snap {
    struct spaced *sp;
    char name[64];
    unsigned vcpus, mem_mib;
    bool nic;                   /* built with a network device (see tpl.h) */
    bool nic_claimed;           /* its template namespace exists (released when done) */
    char vm_id[64];             /* "t-<name>-<v>x<m>[-net]" */
    enum tpl_snap_state state;
    char dir[TPL_PATH_MAX];     /* <data>/templates/<name>/<v>x<m> */
    char rootfs[TPL_PATH_MAX + 16];
    char run_dir[TPL_PATH_MAX];
    struct vm *vm;              /* template VM while building */
    struct agentc *agent;       /* its agent connection */
    struct event *timer;        /* boot timeout */
    struct tpl_snap *next;
};

static void snap_path(const struct tpl_snap *s, const char *leaf, char *out, size_t cap)
{
    snprintf(out, cap, "%s/%s", s->dir, leaf);
}

static void snap_release_nic(struct tpl_snap *s)
{
    if (s->nic_claimed && net_get(s->sp))
        net_release(net_get(s->sp), s->vm_id);
    s->nic_claimed = false;
}

static void snap_fail(struct tpl_snap *s, const char *why)
{
    snap_release_nic(s);
    char q[300];
    log_warn("template.snapshot", "template=%s shape=%ux%u result=failed reason=%s", s->name,
             s->vcpus, s->mem_mib, log_quote(why, q, sizeof q));
    s->state = SNAP_FAILED;
    if (s->vm && vm_state(s->vm) < VM_STATE_STOPPING)
        vm_kill(s->vm);
    agentc_free(s->agent);
    s->agent = NULL;
    event_del(s->timer);
}

static void on_snapshot_done(struct vm *vm, int err, const char *msg, void *arg)
{
    struct tpl_snap *s = arg;
    (void)vm;
    if (err != VM_OK) {
        snap_fail(s, msg ? msg : vm_error_code(err));
        return;
    }
    char ready[TPL_PATH_MAX + 16];
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
    log_info("template.snapshot", "template=%s shape=%ux%u result=ready", s->name, s->vcpus,
             s->mem_mib);
}

static void on_agent_ready(void *arg, json_t *hello)
{
    struct tpl_snap *s = arg;
    (void)hello;
    event_del(s->timer);
    char snap[TPL_PATH_MAX + 16];
    snap_path(s, "snap", snap, sizeof snap);
    /* The connection must not straddle the snapshot: clones reconnect on their own. */
    agentc_free(s->agent);
    s->agent = NULL;
    if (!s->vm || vm_template_snapshot(s->vm, snap, on_snapshot_done, s) != 0)
        snap_fail(s, "vm_template_snapshot refused");
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
    agentc_free(s->agent);
    s->agent = agentc_new(s->sp->base, fd, &snap_agent_cbs, s);
}

static void on_vm_exit(struct vm *vm, enum vm_exit_reason reason, const char *msg,
                       const char *tail, void *arg)
{
    struct tpl_snap *s = arg;
    (void)vm;
    (void)tail;
    s->vm = NULL;
    agentc_free(s->agent);
    s->agent = NULL;
    if (s->state == SNAP_BUILDING && reason != VM_EXIT_SAVED)
        snap_fail(s, msg ? msg : vm_exit_reason_name(reason));
}

static const struct vm_callbacks snap_vm_cbs = {on_vm_ready, on_vm_agent, on_vm_exit};

static void on_boot_timeout(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    snap_fail(arg, "template VM did not report ready in time");
}

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
    int verr = 0;
    char msgbuf[256] = "";
    s->vm = vm_boot(s->sp->base, &cfg, &snap_vm_cbs, s, &verr, msgbuf, sizeof msgbuf);
    if (lease.tap_fd >= 0)
        close(lease.tap_fd); /* QEMU holds its own copy from the spawn */
    if (!s->vm) {
        snap_fail(s, msgbuf[0] ? msgbuf : vm_error_code(verr));
        return;
    }
    struct timeval tv = {TPL_SNAP_BOOT_TIMEOUT_S, 0};
    event_add(s->timer, &tv);
}

static int mkdir_p(const char *path)
{
    char tmp[TPL_PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            if (mkdir(tmp, 0700) != 0 && errno != EEXIST)
                return -1;
            *p = '/';
        }
    return mkdir(tmp, 0700) != 0 && errno != EEXIST ? -1 : 0;
}

/* Template VMs (snapshot builders "t-...", API builds "b-...") are never adopted: their
 * work is redone from scratch. One left by a spaced killed mid-build would run forever,
 * and its pid file is no guide (it may not have been written yet, or a rebuild has
 * overwritten it), so the process table is searched instead: a QEMU named "t-..." or
 * "b-..." (-name) whose command line names a disk under this data dir's templates/.
 * Sandboxes ("sb...", "pool-...") match neither name, and another data dir's VMs do not
 * name our path, so only our own leftovers are hit. */
void tpl_kill_stale_vms(const char *data_dir)
{
    char prefix[TPL_PATH_MAX + 32], path[64], cmd[8192];
    snprintf(prefix, sizeof prefix, "%s/templates/", data_dir);
    DIR *proc = opendir("/proc");
    struct dirent *de;
    while (proc && (de = readdir(proc))) {
        char *end;
        long pid = strtol(de->d_name, &end, 10);
        if (*end || pid <= 1 || pid == (long)getpid())
            continue;
        snprintf(path, sizeof path, "/proc/%ld/cmdline", pid);
        FILE *f = fopen(path, "re");
        if (!f)
            continue;
        size_t n = fread(cmd, 1, sizeof cmd - 1, f);
        fclose(f);
        cmd[n] = '\0';
        bool named = false, ours = false;
        for (size_t i = 0; i < n; i += strlen(cmd + i) + 1) {
            const char *arg = cmd + i;
            if (strcmp(arg, "-name") == 0 && i + 6 < n)
                named = strncmp(arg + 6, "t-", 2) == 0 || strncmp(arg + 6, "b-", 2) == 0;
            if (strstr(arg, prefix))
                ours = true;
        }
        if (named && ours) {
            log_warn("template.stale_vm", "pid=%ld msg=\"killing a template VM left by an earlier spaced\"",
                     pid);
            kill((pid_t)pid, SIGKILL);
        }
    }
    if (proc)
        closedir(proc);
}

static void snap_build(struct tpl_snap *s)
{
    s->state = SNAP_BUILDING;
    char p[TPL_PATH_MAX + 16];
    if (mkdir_p(s->dir) < 0 || mkdir_p(s->run_dir) < 0) {
        snap_fail(s, strerror(errno));
        return;
    }
    /* Leftovers of an interrupted build are never trusted. */
    static const char *const stale[] = {"disk.qcow2", "ram", "snap/state", "snap/mem",
                                        "snap/snapshot.json", "ready"};
    for (size_t i = 0; i < sizeof stale / sizeof *stale; i++) {
        snap_path(s, stale[i], p, sizeof p);
        unlink(p);
    }
    log_info("template.snapshot", "template=%s shape=%ux%u result=building", s->name, s->vcpus,
             s->mem_mib);
    snap_path(s, "disk.qcow2", p, sizeof p);
    if (vm_disk_overlay_create(s->sp->base, s->rootfs, "raw", p, on_overlay, s) != 0)
        snap_fail(s, "cannot start qemu-img");
}

bool tpl_snapshot(struct spaced *sp, const struct tpl_info *t, unsigned vcpus, unsigned mem_mib,
                  bool nic, char *snap_dir, size_t snap_cap, char *overlay, size_t overlay_cap)
{
    struct tpl_registry *r = sp->tpl;
    struct tpl_snap *s = r->snaps;
    while (s && !(strcmp(s->name, t->name) == 0 && s->vcpus == vcpus && s->mem_mib == mem_mib &&
                  s->nic == nic))
        s = s->next;
    if (!s) {
        s = calloc(1, sizeof *s);
        if (!s)
            return false;
        s->sp = sp;
        snprintf(s->name, sizeof s->name, "%s", t->name);
        s->vcpus = vcpus;
        s->mem_mib = mem_mib;
        s->nic = nic;
        const char *sfx = nic ? "-net" : "";
        snprintf(s->vm_id, sizeof s->vm_id, "t-%.32s-%ux%u%s", t->name, vcpus, mem_mib, sfx);
        snprintf(s->dir, sizeof s->dir, "%s/templates/%s/%ux%u%s", sp->opt.data_dir, t->name,
                 vcpus, mem_mib, sfx);
        snprintf(s->rootfs, sizeof s->rootfs, "%s", t->rootfs);
        snprintf(s->run_dir, sizeof s->run_dir, "%s/run/%s", sp->opt.data_dir, s->vm_id);
        s->timer = evtimer_new(sp->base, on_boot_timeout, s);
        s->next = r->snaps;
        r->snaps = s;
        char ready[TPL_PATH_MAX + 16];
        snap_path(s, "ready", ready, sizeof ready);
        if (access(ready, F_OK) == 0)
            s->state = SNAP_READY;
        else
            snap_build(s);
    }
    if (s->state != SNAP_READY)
        return false;
    snap_path(s, "snap", snap_dir, snap_cap);
    snap_path(s, "disk.qcow2", overlay, overlay_cap);
    return true;
}

unsigned tpl_snapshots_ready(struct spaced *sp, const char *name)
{
    unsigned n = 0;
    for (struct tpl_snap *s = sp->tpl->snaps; s; s = s->next)
        n += s->state == SNAP_READY && strcmp(s->name, name) == 0;
    return n;
}

void tpl_snapshots_free(struct tpl_registry *r)
{
    while (r->snaps) {
        struct tpl_snap *s = r->snaps;
        r->snaps = s->next;
        if (s->vm) {
            /* A half-built template VM is useless to a restarted spaced: end it. */
            kill(vm_pid(s->vm), SIGKILL);
            vm_detach(s->vm);
        }
        agentc_free(s->agent);
        if (s->timer)
            event_free(s->timer);
        free(s);
    }
}
