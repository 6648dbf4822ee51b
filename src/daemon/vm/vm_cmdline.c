/* vm_cmdline: QEMU argv for a microvm sandbox (see vm_cmdline.h). */
#include "vm_cmdline.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Kernel command line every sandbox gets (each item measured, see docs/guest.md):
 * quiet (console bytes are slow emulated port writes), mitigations=off (the guest is one
 * tenant's; the host protects itself), cryptomgr.notests (self-tests are slow under TCG),
 * one 8250 UART. panic=-1 + -no-reboot turn a guest panic into a QEMU exit.
 * The rest keeps an idle guest asleep: every timer that fires wakes QEMU's main loop and
 * vCPU thread (docs/benchmarks.md "Idle cost": 26 -> 2 QEMU wakeups/s, ~0.6 -> 0.07 % of
 * a core per idle `base` clone under TCG). The big one is kcompactd's proactive
 * compaction check every 500 ms (compaction_proactiveness=0; compaction on demand stays);
 * then the soft-lockup watchdog's 4 s timer, RCU callbacks run from the idle CPU's tick
 * (rcu_nocbs=0 hands them to a kthread), vmstat every 1 s (10 s), PSI averaging every
 * 2 s, the guest memory cgroup's stats flush every 2 s (the guest has no use for memory
 * cgroups: the sandbox's limit is the host's jail cgroup) and khungtaskd. */
#define VM_KERNEL_CMDLINE                                                                  \
    "console=ttyS0 quiet panic=-1 reboot=t mitigations=off cryptomgr.notests 8250.nr_uarts=1" \
    " sysctl.vm.compaction_proactiveness=0 nowatchdog nmi_watchdog=0 rcu_nocbs=0"          \
    " sysctl.vm.stat_interval=10 psi=0 cgroup_disable=memory"                            \
    " sysctl.kernel.hung_task_timeout_secs=0"
#define VM_CMDLINE_EXTRA_MAX 1024

const char *vm_kernel_cmdline(void) { return VM_KERNEL_CMDLINE; }

int vm_id_valid(const char *id)
{
    size_t n = id ? strlen(id) : 0;
    if (n == 0 || n > 48)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = id[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_'))
            return 0;
    }
    return 1;
}

static int push(struct vm_argv *a, char *s)
{
    if (!s)
        return -1;
    if (a->n + 2 > a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 64;
        char **v = realloc(a->argv, cap * sizeof(*v));
        if (!v) {
            free(s);
            return -1;
        }
        a->argv = v;
        a->cap = cap;
    }
    a->argv[a->n++] = s;
    a->argv[a->n] = NULL;
    return 0;
}

static int pushf(struct vm_argv *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int pushf(struct vm_argv *a, const char *fmt, ...)
{
    char *s = NULL;
    va_list ap;
    va_start(ap, fmt);
    int r = vasprintf(&s, fmt, ap);
    va_end(ap);
    return push(a, r < 0 ? NULL : s);
}

/* QEMU option values use ',' as separator; a literal comma is written ",,". */
static char *opt_escape(const char *s)
{
    size_t n = strlen(s), commas = 0;
    for (size_t i = 0; i < n; i++)
        commas += s[i] == ',';
    char *out = malloc(n + commas + 1), *p = out;
    if (!out)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        *p++ = s[i];
        if (s[i] == ',')
            *p++ = ',';
    }
    *p = 0;
    return out;
}

static int printable(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            return 0;
    return 1;
}

static int check_backing(const struct vm_config *cfg)
{
    if (cfg->n_backing > VM_DISK_BACKING_MAX || (cfg->n_backing && !cfg->disk))
        return -1;
    for (unsigned i = 0; i < cfg->n_backing; i++) {
        const struct vm_disk_layer *l = &cfg->backing[i];
        if (!l->path || !*l->path || !printable(l->path) || !l->format)
            return -1;
        int raw = strcmp(l->format, "raw") == 0;
        if (!raw && strcmp(l->format, "qcow2") != 0)
            return -1;
        if (raw && i + 1 != cfg->n_backing)
            return -1;
    }
    return 0;
}

static int check(const struct vm_config *cfg, const struct vm_launch *l, char *err, size_t errlen)
{
    if (!vm_id_valid(cfg->id))
        snprintf(err, errlen, "invalid sandbox id (want [A-Za-z0-9_-]{1,48})");
    else if (cfg->vcpus < 1 || cfg->vcpus > 16)
        snprintf(err, errlen, "vcpus %u out of range 1..16", cfg->vcpus);
    else if (cfg->mem_mib < 64 || cfg->mem_mib > 65536)
        snprintf(err, errlen, "memory %u MiB out of range 64..65536", cfg->mem_mib);
    else if (!cfg->kernel || !*cfg->kernel || !printable(cfg->kernel))
        snprintf(err, errlen, "no kernel given");
    else if (cfg->cmdline_extra && (strlen(cfg->cmdline_extra) > VM_CMDLINE_EXTRA_MAX ||
                                    !printable(cfg->cmdline_extra)))
        snprintf(err, errlen, "kernel command line extra too long or not printable");
    else if ((cfg->initramfs && !printable(cfg->initramfs)) ||
             (cfg->disk && !printable(cfg->disk)) ||
             (l->mem_path && !printable(l->mem_path)))
        snprintf(err, errlen, "path with control characters");
    else if (check_backing(cfg) < 0)
        snprintf(err, errlen, "bad disk backing chain (qcow2 layers, raw only as the base)");
    else if (cfg->net.tap_fd >= 0 && (!cfg->net.mac || strlen(cfg->net.mac) != 17 ||
                                      strspn(cfg->net.mac, "0123456789abcdefABCDEF:") != 17))
        snprintf(err, errlen, "tap given without a valid MAC address");
    else if (l->accel != VM_ACCEL_KVM && l->accel != VM_ACCEL_TCG)
        snprintf(err, errlen, "accelerator not resolved");
    else
        return 0;
    return -1;
}

/* A `-opt key=<escaped path>` pair: the path is escaped, the rest is ours. */
static int push_path_opt(struct vm_argv *a, const char *opt, const char *prefix,
                         const char *path, const char *suffix)
{
    char *e = opt_escape(path);
    if (!e || push(a, strdup(opt)) < 0) {
        free(e);
        return -1;
    }
    int r = pushf(a, "%s%s%s", prefix, e, suffix);
    free(e);
    return r;
}

/* The disk as explicit -blockdev nodes, base first, each qcow2 layer naming its backing
 * node: QEMU then never opens a backing file named inside a (guest-writable) header. */
static int push_disk(struct vm_argv *a, const struct vm_config *cfg)
{
    int r = 0;
    char below[16] = "null";
    for (unsigned i = cfg->n_backing; i-- > 0;) {
        const struct vm_disk_layer *l = &cfg->backing[i];
        int qcow2 = strcmp(l->format, "qcow2") == 0;
        char pre[96], sfx[32] = "";
        snprintf(pre, sizeof(pre), "driver=%s,node-name=b%u,read-only=on,file.driver=file,"
                 "file.filename=", l->format, i);
        if (qcow2)
            snprintf(sfx, sizeof(sfx), ",backing=%s", below);
        r |= push_path_opt(a, "-blockdev", pre, l->path, sfx);
        snprintf(below, sizeof(below), "b%u", i);
    }
    char sfx[32];
    snprintf(sfx, sizeof(sfx), ",backing=%s", below);
    r |= push_path_opt(a, "-blockdev", "driver=qcow2,node-name=root,discard=unmap,"
                       "file.driver=file,file.filename=", cfg->disk, sfx);
    return r;
}

int vm_cmdline_build(const struct vm_config *cfg, const struct vm_launch *l,
                     struct vm_argv *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof(*out));
    if (check(cfg, l, err, errlen) < 0)
        return -1;
    struct vm_argv *a = out;
    int kvm = l->accel == VM_ACCEL_KVM;
    int r = 0;

    r |= push(a, strdup(cfg->qemu ? cfg->qemu : "qemu-system-x86_64"));
    /* process= renames the main thread so `ps` shows the sandbox id; debug-threads names
     * vCPU threads too. */
    r |= push(a, strdup("-name"));
    r |= pushf(a, "%s,process=space-%s,debug-threads=on", cfg->id, cfg->id);
    r |= push(a, strdup("-M"));
    r |= push(a, strdup("microvm,x-option-roms=off,acpi=on,pit=off,pic=off,rtc=on,isa-serial=on,"
                        "memory-backend=ram0"));
    r |= push(a, strdup("-accel"));
    if (kvm)
        r |= push(a, strdup("kvm"));
    else
        r |= pushf(a, "tcg,tb-size=%u", VM_TCG_TB_MIB);
    r |= push(a, strdup("-cpu"));
    r |= push(a, strdup(kvm ? "host" : "max"));
    r |= push(a, strdup("-smp"));
    r |= pushf(a, "%u", cfg->vcpus);
    r |= push(a, strdup("-m"));
    r |= pushf(a, "%uM", cfg->mem_mib);
    /* RAM is always a backend object named ram0, so the migration stream names the same
     * RAM block whether the VM ran from a template file or anonymous memory: a clone
     * (file-backed) can be suspended and restored into anonymous RAM. */
    if (l->mem_path) {
        char suffix[64];
        snprintf(suffix, sizeof(suffix), ",share=%s,size=%uM", l->mem_share ? "on" : "off",
                 cfg->mem_mib);
        r |= push_path_opt(a, "-object", "memory-backend-file,id=ram0,mem-path=", l->mem_path,
                           suffix);
    } else {
        r |= push(a, strdup("-object"));
        r |= pushf(a, "memory-backend-ram,id=ram0,size=%uM", cfg->mem_mib);
    }
    r |= push(a, strdup("-nodefaults"));
    r |= push(a, strdup("-no-user-config"));
    r |= push(a, strdup("-display"));
    r |= push(a, strdup("none"));
    r |= push(a, strdup("-no-reboot"));
    r |= push(a, strdup("-sandbox"));
    r |= push(a, strdup("on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny"));
    r |= push(a, strdup("-kernel"));
    r |= push(a, strdup(cfg->kernel));
    if (cfg->initramfs) {
        r |= push(a, strdup("-initrd"));
        r |= push(a, strdup(cfg->initramfs));
    }
    /* Without PIT/HPET the guest cannot calibrate its TSC (and calibrating against the
     * emulated PIT is unreliable under TCG), so it is told the host's TSC rate, which is
     * what a TCG guest's TSC runs at. KVM guests use kvm-clock instead. */
    char tsc[96] = "";
    if (!kvm && l->tsc_khz)
        snprintf(tsc, sizeof(tsc), " tsc_early_khz=%u tsc=reliable", l->tsc_khz);
    r |= push(a, strdup("-append"));
    r |= pushf(a, "%s%s%s%s", VM_KERNEL_CMDLINE, tsc,
               cfg->cmdline_extra && *cfg->cmdline_extra ? " " : "",
               cfg->cmdline_extra ? cfg->cmdline_extra : "");
    r |= push(a, strdup("-chardev"));
    r |= pushf(a, "socket,id=mon,fd=%d,server=on,wait=off", VM_FD_QMP);
    r |= push(a, strdup("-mon"));
    r |= push(a, strdup("chardev=mon,mode=control"));
    r |= push(a, strdup("-chardev"));
    r |= pushf(a, "socket,id=con,fd=%d,server=on,wait=off", VM_FD_CONSOLE);
    r |= push(a, strdup("-serial"));
    r |= push(a, strdup("chardev:con"));
    r |= push(a, strdup("-device"));
    r |= push(a, strdup("virtio-serial-device,max_ports=2"));
    r |= push(a, strdup("-chardev"));
    r |= pushf(a, "socket,id=agent,fd=%d,server=on,wait=off", VM_FD_AGENT);
    r |= push(a, strdup("-device"));
    r |= push(a, strdup("virtserialport,chardev=agent,name=space.agent"));
    if (cfg->disk) {
        r |= push_disk(a, cfg);
        r |= push(a, strdup("-device"));
        r |= push(a, strdup("virtio-blk-device,drive=root"));
    }
    r |= push(a, strdup("-device"));
    r |= push(a, strdup("virtio-rng-device"));
    if (cfg->net.tap_fd >= 0) {
        r |= push(a, strdup("-netdev"));
        r |= pushf(a, "tap,id=net0,fd=%d", VM_FD_TAP);
        r |= push(a, strdup("-device"));
        r |= pushf(a, "virtio-net-device,netdev=net0,mac=%s", cfg->net.mac);
    }
    if (l->incoming) {
        r |= push(a, strdup("-incoming"));
        r |= push(a, strdup("defer"));
    }
    if (l->paused)
        r |= push(a, strdup("-S"));
    if (r) {
        vm_argv_free(a);
        snprintf(err, errlen, "out of memory building QEMU command line");
        return -1;
    }
    return 0;
}

void vm_argv_free(struct vm_argv *a)
{
    for (size_t i = 0; i < a->n; i++)
        free(a->argv[i]);
    free(a->argv);
    memset(a, 0, sizeof(*a));
}
