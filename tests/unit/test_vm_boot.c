/* test_vm_boot: the VM runtime against real QEMU and the real guest (kernel + agent
 * initramfs + base rootfs): cold boot to the agent's HELLO, pause/resume, template
 * snapshot and restores, suspend/restore, kill, death and hang detection, adoption
 * after a "restart", bad input, and the jail's isolation between two sandboxes.
 *
 * Skips with a message when the guest artifacts are missing (`make templates`).
 * Timeouts are generous limits for "it never happened", not performance checks. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>

#include "daemon/vm/pool.h"
#include "vm_harness.h"

#define BOOT_LIMIT_MS 120000

static const char *skip_why;

static void box_init(struct vmh_box *b, const char *id, const char *backing_overlay)
{
    assert_int_equal(vmh_box_init(b, id, backing_overlay), 0);
}

static void wait_ready_hello(struct vmh_obs *o)
{
    vmh_run_until(vmh_base, &o->ready, BOOT_LIMIT_MS);
    assert_int_equal(o->ready, 1);
    if (o->ready_err)
        fail_msg("start failed: %s", o->ready_msg);
    vmh_run_until(vmh_base, &o->hello.got, BOOT_LIMIT_MS);
    if (o->hello.got != 1)
        fail_msg("no agent HELLO (got=%d exited=%d: %s)", o->hello.got, o->exited, o->exit_msg);
}

static struct vm *boot(struct vmh_box *b, struct vmh_obs *o)
{
    int err;
    char msg[512];
    vmh_obs_init(o);
    struct vm *vm = vm_boot(vmh_base, &b->cfg, &vmh_cbs, o, &err, msg, sizeof(msg));
    if (!vm)
        fail_msg("vm_boot: %s", msg);
    wait_ready_hello(o);
    return vm;
}

static void kill_and_wait(struct vm *vm, struct vmh_obs *o)
{
    assert_int_equal(vmh_kill_wait(vm, o), 1);
}

static int setup(void **state)
{
    if ((skip_why = vmh_find_guest(&vmh_guest)) != NULL)
        return 0;
    snprintf(vmh_work, sizeof(vmh_work), "/tmp/space-vmt-XXXXXX");
    if (!mkdtemp(vmh_work))
        return -1;
    chmod(vmh_work, 0755);
    vmh_base = event_base_new();
    return vmh_base ? 0 : -1;
}

static int teardown(void **state)
{
    if (vmh_base)
        event_base_free(vmh_base);
    if (vmh_work[0] && !getenv("SPACE_VMTEST_KEEP")) {
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "rm -rf %s", vmh_work);
        if (system(cmd) != 0)
            fprintf(stderr, "could not remove %s\n", vmh_work);
    }
    return 0;
}

#define NEED_GUEST()                                   \
    do {                                               \
        if (skip_why) {                                \
            fprintf(stderr, "SKIP: %s\n", skip_why);   \
            skip();                                    \
        }                                              \
    } while (0)

/* Cold boot to the agent's HELLO; the process is named after the sandbox; pause and
 * resume change the state; kill is reported as such. */
static void test_boot_pause_kill(void **state)
{
    NEED_GUEST();
    struct vmh_box b;
    struct vmh_obs o;
    box_init(&b, "boot1", NULL);
    double t0 = vmh_now_ms();
    struct vm *vm = boot(&b, &o);
    fprintf(stderr, "cold boot to agent HELLO: %.0f ms (%s)\n", o.hello.at_ms - t0,
            vm_accel_name(vm_accel(vm)));
    assert_int_equal(vm_state(vm), VM_STATE_RUNNING);

    char p[256], comm[64] = "";
    snprintf(p, sizeof(p), "/proc/%d/comm", (int)vm_pid(vm));
    FILE *f = fopen(p, "r");
    assert_non_null(f);
    assert_non_null(fgets(comm, sizeof(comm), f));
    fclose(f);
    assert_true(strncmp(comm, "space-boot1", 11) == 0);
    /* Under TCG QEMU runs without transparent huge pages (vm_spawn.c): its translation
     * cache is then resident 4 KiB at a time. */
    if (vm_accel(vm) == VM_ACCEL_TCG) {
        char line[128];
        int thp_off = 0;
        snprintf(p, sizeof(p), "/proc/%d/status", (int)vm_pid(vm));
        f = fopen(p, "r");
        assert_non_null(f);
        while (fgets(line, sizeof(line), f))
            if (strcmp(line, "THP_enabled:\t0\n") == 0)
                thp_off = 1;
        fclose(f);
        assert_true(thp_off);
    }

    struct vmh_done d = { 0 };
    assert_int_equal(vm_pause(vm, vmh_done_cb, &d), VM_OK);
    assert_int_equal(vm_pause(vm, vmh_done_cb, &d), VM_E_BUSY);
    vmh_run_until(vmh_base, &d.done, 10000);
    assert_int_equal(d.err, VM_OK);
    assert_int_equal(vm_state(vm), VM_STATE_PAUSED);
    memset(&d, 0, sizeof(d));
    assert_int_equal(vm_resume(vm, vmh_done_cb, &d), VM_OK);
    vmh_run_until(vmh_base, &d.done, 10000);
    assert_int_equal(d.err, VM_OK);
    assert_int_equal(vm_state(vm), VM_STATE_RUNNING);

    kill_and_wait(vm, &o);
    assert_int_equal(o.reason, VM_EXIT_KILLED);
    snprintf(p, sizeof(p), "%s/qmp.sock", b.run);
    assert_int_equal(access(p, F_OK), -1); /* runtime files cleaned up */
}


/* Template snapshot, then clones restored from it (running and paused-then-resumed),
 * each greeted by the agent; a clone is then suspended and restored from its own
 * snapshot. */
static char tmpl_overlay[160], tmpl_snap[160];

static void make_template(void)
{
    struct vmh_box t;
    struct vmh_obs o;
    if (tmpl_snap[0])
        return;
    box_init(&t, "tmpl", NULL);
    char mem[200];
    snprintf(tmpl_snap, sizeof(tmpl_snap), "%s/tmpl-snap", vmh_work);
    mkdir(tmpl_snap, 0700);
    snprintf(mem, sizeof(mem), "%s/mem", tmpl_snap);
    t.cfg.mem_path = mem;
    struct vm *vm = boot(&t, &o);
    /* The clone's agent must greet a new host: the template's connection is closed
     * before the snapshot. */
    vmh_hello_stop(&o.hello);
    struct vmh_done d = { 0 };
    double t0 = vmh_now_ms();
    assert_int_equal(vm_template_snapshot(vm, tmpl_snap, vmh_done_cb, &d), VM_OK);
    vmh_run_until(vmh_base, &d.done, 60000);
    if (d.err)
        fail_msg("template snapshot: %s", d.msg);
    fprintf(stderr, "template snapshot: %.0f ms\n", vmh_now_ms() - t0);
    vmh_run_until(vmh_base, &o.exited, 10000);
    assert_int_equal(o.reason, VM_EXIT_SAVED);
    snprintf(tmpl_overlay, sizeof(tmpl_overlay), "%s", t.disk);
}

static struct vm *restore(struct vmh_box *b, struct vmh_obs *o, const char *dir, int paused)
{
    int err;
    char msg[512];
    vmh_obs_init(o);
    struct vm *vm = vm_restore(vmh_base, &b->cfg, dir, paused, &vmh_cbs, o, &err, msg, sizeof(msg));
    if (!vm)
        fail_msg("vm_restore: %s", msg);
    return vm;
}

static void test_template_snapshot_restore(void **state)
{
    NEED_GUEST();
    make_template();
    struct vmh_box c;
    struct vmh_obs o;
    box_init(&c, "clone1", tmpl_overlay);
    double t0 = vmh_now_ms();
    struct vm *vm = restore(&c, &o, tmpl_snap, 0);
    wait_ready_hello(&o);
    fprintf(stderr, "template restore to agent HELLO: %.0f ms\n", o.hello.at_ms - t0);
    assert_int_equal(vm_state(vm), VM_STATE_RUNNING);

    /* suspend the clone, restore it from its own snapshot */
    char sdir[200];
    snprintf(sdir, sizeof(sdir), "%s/clone1-susp", vmh_work);
    vmh_hello_stop(&o.hello);
    struct vmh_done d = { 0 };
    assert_int_equal(vm_suspend(vm, sdir, vmh_done_cb, &d), VM_OK);
    vmh_run_until(vmh_base, &d.done, 60000);
    if (d.err)
        fail_msg("suspend: %s", d.msg);
    vmh_run_until(vmh_base, &o.exited, 10000);
    assert_int_equal(o.reason, VM_EXIT_SAVED);
    vm = restore(&c, &o, sdir, 0);
    wait_ready_hello(&o);
    kill_and_wait(vm, &o);

    /* paused restore (warm pool shape), then resume */
    struct vmh_box c2;
    box_init(&c2, "clone2", tmpl_overlay);
    vm = restore(&c2, &o, tmpl_snap, 1);
    vmh_run_until(vmh_base, &o.ready, BOOT_LIMIT_MS);
    assert_int_equal(o.ready_err, VM_OK);
    assert_int_equal(vm_state(vm), VM_STATE_PAUSED);
    memset(&d, 0, sizeof(d));
    assert_int_equal(vm_resume(vm, vmh_done_cb, &d), VM_OK);
    vmh_run_until(vmh_base, &o.hello.got, BOOT_LIMIT_MS);
    assert_int_equal(o.hello.got, 1);
    assert_int_equal(vm_state(vm), VM_STATE_RUNNING);
    kill_and_wait(vm, &o);
}

/* Fork capture (vm_fork_capture): the parent keeps running (same process, QMP answers,
 * pause/resume work), the capture's state, RAM file and disk copy are sealed root 0444,
 * the capture is mapped (a RAM file + a small state), and a fork restores from it on the
 * copy over the parent's chain, while the parent runs on. */
static void test_fork_capture(void **state)
{
    NEED_GUEST();
    make_template();
    struct vmh_box p, f;
    struct vmh_obs o, fo;
    box_init(&p, "fparent", tmpl_overlay);
    struct vm *vm = restore(&p, &o, tmpl_snap, 0);
    wait_ready_hello(&o);
    pid_t pid = vm_pid(vm);
    char cdir[200], disk[240], st[240];
    snprintf(cdir, sizeof(cdir), "%s/fparent-capture", vmh_work);
    struct vmh_done d = { 0 };
    double t0 = vmh_now_ms();
    assert_int_equal(vm_fork_capture(vm, cdir, vmh_done_cb, &d), VM_OK);
    vmh_run_until(vmh_base, &d.done, 60000);
    if (d.err)
        fail_msg("fork capture: %s", d.msg);
    fprintf(stderr, "fork capture (guest paused): %.0f ms\n", vmh_now_ms() - t0);
    assert_int_equal(o.exited, 0);
    assert_int_equal(vm_state(vm), VM_STATE_RUNNING);
    assert_int_equal(vm_pid(vm), pid);
    snprintf(disk, sizeof(disk), "%s/disk.qcow2", cdir);
    snprintf(st, sizeof(st), "%s/state", cdir);
    struct stat sb;
    assert_int_equal(stat(disk, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0444);
    assert_int_equal(sb.st_uid, 0);
    assert_int_equal(stat(st, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0444);
    /* mapped (vm_memmap.c): the RAM in a file of the guest's size, root 0444, and a
     * state without its pages (a full one is tens of MB) */
    assert_true(sb.st_size < (1 << 20));
    snprintf(st, sizeof(st), "%s/mem", cdir);
    assert_int_equal(stat(st, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0444);
    assert_int_equal(sb.st_uid, 0);
    assert_int_equal(sb.st_size, (off_t)p.cfg.mem_mib << 20);
    memset(&d, 0, sizeof(d));
    assert_int_equal(vm_pause(vm, vmh_done_cb, &d), VM_OK); /* the monitor still obeys */
    vmh_run_until(vmh_base, &d.done, 30000);
    assert_int_equal(d.err, VM_OK);
    memset(&d, 0, sizeof(d));
    assert_int_equal(vm_resume(vm, vmh_done_cb, &d), VM_OK);
    vmh_run_until(vmh_base, &d.done, 30000);
    assert_int_equal(d.err, VM_OK);

    /* the fork: its own overlay over [capture copy, template overlay, rootfs] */
    box_init(&f, "fchild", disk);
    f.cfg.backing[1] = (struct vm_disk_layer){ tmpl_overlay, "qcow2" };
    f.cfg.backing[2] = (struct vm_disk_layer){ vmh_guest.rootfs, "raw" };
    f.cfg.n_backing = 3;
    t0 = vmh_now_ms();
    struct vm *fv = restore(&f, &fo, cdir, 0);
    wait_ready_hello(&fo);
    fprintf(stderr, "fork restore to agent HELLO: %.0f ms\n", fo.hello.at_ms - t0);
    assert_int_equal(vm_state(fv), VM_STATE_RUNNING);
    assert_int_equal(o.exited, 0);
    kill_and_wait(fv, &fo);
    kill_and_wait(vm, &o);
}

/* A signal from outside: SIGKILL is a death (noticed through the pidfd, reported as
 * crashed), SIGSTOP a hang (QMP stops answering; killed and reported as hung within
 * about VM_HANG_MS). Either way with the console tail. The delay is printed, not
 * asserted: it depends on the host's load. */
static void signal_detected(const char *id, int sig, enum vm_exit_reason want)
{
    struct vmh_box b;
    struct vmh_obs o;
    box_init(&b, id, NULL);
    struct vm *vm = boot(&b, &o);
    kill(vm_pid(vm), sig);
    double t0 = vmh_now_ms();
    vmh_run_until(vmh_base, &o.exited, 30000);
    assert_int_equal(o.exited, 1);
    fprintf(stderr, "%s noticed after %.0f ms: %s\n", strsignal(sig), o.exit_at - t0, o.exit_msg);
    assert_int_equal(o.reason, want);
    assert_non_null(strstr(o.tail, "space-agent"));
}

static void test_crash_detected(void **state)
{
    NEED_GUEST();
    signal_detected("crash1", SIGKILL, VM_EXIT_CRASHED);
}

static void test_hang_detected(void **state)
{
    NEED_GUEST();
    signal_detected("hang1", SIGSTOP, VM_EXIT_HUNG);
}

/* spaced "restarts": the VM is detached, then adopted from its run directory and the
 * agent greets the new connection. A record whose process is gone is refused. */
static void test_adopt(void **state)
{
    NEED_GUEST();
    struct vmh_box b;
    struct vmh_obs o;
    int err;
    char msg[512];
    box_init(&b, "adopt1", NULL);
    struct vm *vm = boot(&b, &o);
    pid_t pid = vm_pid(vm);
    vmh_hello_stop(&o.hello);
    vm_detach(vm);
    assert_int_equal(kill(pid, 0), 0); /* still running */
    vmh_obs_init(&o);
    vm = vm_adopt(vmh_base, NULL, b.run, &vmh_cbs, &o, &err, msg, sizeof(msg));
    if (!vm)
        fail_msg("adopt: %s", msg);
    wait_ready_hello(&o);
    assert_int_equal(vm_pid(vm), pid);
    assert_int_equal(vm_state(vm), VM_STATE_RUNNING);
    /* the adopted VM is supervised like any other */
    kill(pid, SIGKILL);
    vmh_run_until(vmh_base, &o.exited, 30000);
    assert_int_equal(o.reason, VM_EXIT_CRASHED);
    waitpid(pid, NULL, 0); /* our child in this test process: reap it */
    assert_null(vm_adopt(vmh_base, NULL, b.run, &vmh_cbs, &o, &err, msg, sizeof(msg)));
}

/* A suspend of an adopted VM restores with the VM's own config: the adoption record keeps
 * the VM's size (without it the image claimed 1 vCPU / 64 MiB and the restore refused it). */
static void test_adopt_suspend(void **state)
{
    NEED_GUEST();
    struct vmh_box b;
    struct vmh_obs o;
    int err;
    char msg[512], sdir[200];
    box_init(&b, "adopt3", NULL);
    struct vm *vm = boot(&b, &o);
    pid_t pid = vm_pid(vm);
    vmh_hello_stop(&o.hello);
    vm_detach(vm);
    vmh_obs_init(&o);
    vm = vm_adopt(vmh_base, NULL, b.run, &vmh_cbs, &o, &err, msg, sizeof(msg));
    if (!vm)
        fail_msg("adopt: %s", msg);
    wait_ready_hello(&o);
    vmh_hello_stop(&o.hello);
    snprintf(sdir, sizeof(sdir), "%s/adopt3-susp", vmh_work);
    struct vmh_done d = { 0 };
    assert_int_equal(vm_suspend(vm, sdir, vmh_done_cb, &d), VM_OK);
    vmh_run_until(vmh_base, &d.done, 60000);
    if (d.err)
        fail_msg("suspend of an adopted VM: %s", d.msg);
    vmh_run_until(vmh_base, &o.exited, 10000);
    assert_int_equal(o.reason, VM_EXIT_SAVED);
    waitpid(pid, NULL, 0); /* our child in this test process: reap it */
    vm = restore(&b, &o, sdir, 0);
    wait_ready_hello(&o);
    kill_and_wait(vm, &o);
}

/* Bad input fails cleanly with the right code and leaves nothing running. */
static void test_bad_input(void **state)
{
    NEED_GUEST();
    struct vmh_box b;
    struct vmh_obs o;
    int err;
    char msg[512];
    box_init(&b, "bad1", NULL);
    vmh_obs_init(&o);

    struct vm_config c = b.cfg;
    c.kernel = "/nonexistent/vmlinux";
    assert_null(vm_boot(vmh_base, &c, &vmh_cbs, &o, &err, msg, sizeof(msg)));
    assert_int_equal(err, VM_E_NOENT);

    c = b.cfg;
    c.id = "bad id";
    assert_null(vm_boot(vmh_base, &c, &vmh_cbs, &o, &err, msg, sizeof(msg)));
    assert_int_equal(err, VM_E_INVAL);

    c = b.cfg;
    c.accel = VM_ACCEL_KVM; /* unusable here (PVM or absent) */
    if (access("/sys/module/kvm_pvm", F_OK) == 0 || access("/dev/kvm", F_OK) != 0) {
        assert_null(vm_boot(vmh_base, &c, &vmh_cbs, &o, &err, msg, sizeof(msg)));
        assert_int_equal(err, VM_E_START);
    }

    /* QEMU that cannot start: a synchronous error with the reason, nothing left behind */
    c = b.cfg;
    c.qemu = "/nonexistent/qemu-system-x86_64";
    assert_null(vm_boot(vmh_base, &c, &vmh_cbs, &o, &err, msg, sizeof(msg)));
    assert_int_equal(err, VM_E_START);
    assert_non_null(strstr(msg, "/nonexistent/qemu-system-x86_64"));
    char sock[300];
    snprintf(sock, sizeof(sock), "%s/qmp.sock", b.run);
    assert_int_equal(access(sock, F_OK), -1);

    /* QEMU that starts but rejects its configuration (an unreadable disk image) */
    char junk[200];
    snprintf(junk, sizeof(junk), "%s/junk.qcow2", vmh_work);
    FILE *jf = fopen(junk, "w");
    assert_non_null(jf);
    fputs("not a qcow2 image", jf);
    fclose(jf);
    c = b.cfg;
    c.disk = junk;
    struct vm *vj = vm_boot(vmh_base, &c, &vmh_cbs, &o, &err, msg, sizeof(msg));
    assert_non_null(vj);
    vmh_run_until(vmh_base, &o.exited, BOOT_LIMIT_MS);
    assert_int_equal(o.ready_err, VM_E_START);
    assert_int_equal(o.reason, VM_EXIT_FAILED);
    fprintf(stderr, "bad disk: %s\n", o.ready_msg);
    assert_non_null(strstr(o.ready_msg, "qemu:"));
    vmh_obs_init(&o);

    /* snapshot dir without a snapshot */
    assert_null(vm_restore(vmh_base, &b.cfg, vmh_work, 0, &vmh_cbs, &o, &err, msg, sizeof(msg)));
    assert_int_equal(err, VM_E_SNAPSHOT);

    /* a corrupt state file: QEMU starts, fails to load, and the start reports it */
    make_template();
    char bad[200], cmd[2048];
    snprintf(bad, sizeof(bad), "%s/corrupt-snap", vmh_work);
    snprintf(cmd, sizeof(cmd), "mkdir -p %s && ln -f %s/mem %s/mem && cp %s/state "
             "%s/snapshot.json %s/ && dd if=/dev/urandom of=%s/state bs=1 seek=64 count=256 "
             "conv=notrunc status=none", bad, tmpl_snap, bad, tmpl_snap, tmpl_snap, bad, bad);
    assert_int_equal(system(cmd), 0);
    struct vmh_box cl;
    box_init(&cl, "bad2", tmpl_overlay);
    struct vm *vm = vm_restore(vmh_base, &cl.cfg, bad, 0, &vmh_cbs, &o, &err, msg, sizeof(msg));
    assert_non_null(vm);
    vmh_run_until(vmh_base, &o.exited, BOOT_LIMIT_MS);
    assert_int_equal(o.ready, 1);
    assert_int_equal(o.ready_err, VM_E_SNAPSHOT);
    assert_int_equal(o.reason, VM_EXIT_FAILED);
    fprintf(stderr, "corrupt snapshot: %s\n", o.ready_msg);
    char p[300];
    snprintf(p, sizeof(p), "%s/qmp.sock", cl.run);
    assert_int_equal(access(p, F_OK), -1);

    /* a snapshot taken with another memory size is refused before starting */
    cl.cfg.mem_mib = 512;
    assert_null(vm_restore(vmh_base, &cl.cfg, tmpl_snap, 0, &vmh_cbs, &o, &err, msg, sizeof(msg)));
    assert_int_equal(err, VM_E_SNAPSHOT);
}

/* "Uid:" / "Gid:" real ids of pid, and whether it is PID 1 of its own PID namespace. */
static void proc_ids(pid_t pid, unsigned *uid, unsigned *gid, int *nspid1)
{
    char p[64], line[256];
    snprintf(p, sizeof(p), "/proc/%d/status", (int)pid);
    FILE *f = fopen(p, "r");
    assert_non_null(f);
    *uid = *gid = 0;
    *nspid1 = 0;
    while (fgets(line, sizeof(line), f)) {
        unsigned r, e;
        if (sscanf(line, "Uid: %u %u", &r, &e) == 2)
            *uid = r == e ? r : 0;
        if (sscanf(line, "Gid: %u %u", &r, &e) == 2)
            *gid = r == e ? r : 0;
        if (!strncmp(line, "NSpid:", 6))
            *nspid1 = strstr(line, "\t1\n") != NULL;
    }
    fclose(f);
}

/* 1 if pid's namespace `ns` is the test's own. */
static int same_ns(pid_t pid, const char *ns)
{
    char a[64], b[64], la[64] = "", lb[64] = "";
    snprintf(a, sizeof(a), "/proc/%d/ns/%s", (int)pid, ns);
    snprintf(b, sizeof(b), "/proc/self/ns/%s", ns);
    assert_true(readlink(a, la, sizeof(la) - 1) > 0);
    assert_true(readlink(b, lb, sizeof(lb) - 1) > 0);
    return strcmp(la, lb) == 0;
}

/* The access mode (O_RDONLY, O_RDWR...) of pid's descriptors of path; -1 if none. */
static int open_mode(pid_t pid, const char *path)
{
    char d[64], p[400], link[4096];
    int mode = -1;
    snprintf(d, sizeof(d), "/proc/%d/fd", (int)pid);
    DIR *dp = opendir(d);
    struct dirent *e;
    while (dp && (e = readdir(dp))) {
        snprintf(p, sizeof(p), "%s/%s", d, e->d_name);
        ssize_t n = readlink(p, link, sizeof(link) - 1);
        if (n <= 0)
            continue;
        link[n] = 0;
        if (strcmp(link, path))
            continue;
        snprintf(p, sizeof(p), "/proc/%d/fdinfo/%s", (int)pid, e->d_name);
        FILE *f = fopen(p, "r");
        char line[128];
        unsigned flags;
        while (f && fgets(line, sizeof(line), f))
            if (sscanf(line, "flags: %o", &flags) == 1 && (int)(flags & O_ACCMODE) > mode)
                mode = (int)(flags & O_ACCMODE);
        if (f)
            fclose(f);
    }
    if (dp)
        closedir(dp);
    return mode;
}

/* Two jailed sandboxes: each QEMU runs under a uid of its own, in its own namespaces
 * (network and IPC included), sees its own disk and none of the other's files; a jailed
 * clone opens the template RAM file read-only through the shim, and without the shim
 * refuses to start. */
static void test_jail_isolation(void **state)
{
    NEED_GUEST();
    if (geteuid() != 0) {
        fprintf(stderr, "SKIP: jail test needs root\n");
        skip();
    }
    make_template(); /* unjailed: made before the policy below requires the jail */
    char shim[PATH_MAX + 32], exe[PATH_MAX], err[256];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    assert_true(n > 0);
    exe[n] = 0;
    *strrchr(exe, '/') = 0; /* build/san/tests -> the shim is in build/san */
    snprintf(shim, sizeof(shim), "%s/../space-qemu-shim.so", exe);
    struct vm_jail_policy pol = { .required = 1, .uid_base = 2100000100, .uid_count = 64,
                                  .shim = shim };
    struct vm_jailer *jl = vm_jailer_new(&pol, err, sizeof(err));
    assert_non_null(jl);
    struct vmh_box a, b;
    struct vmh_obs oa, ob;
    box_init(&a, "jaila", NULL);
    box_init(&b, "jailb", NULL);
    struct vm_jail j = { .enabled = 1, .jailer = jl, .uid = VM_JAIL_UID_AUTO,
                         .cgroup_parent = "space-test", .cpu_percent = 100, .pids_max = 64 };
    a.cfg.jail = j;
    b.cfg.jail = j;
    struct vm *va = boot(&a, &oa);
    struct vm *vb = boot(&b, &ob);
    char p[400];
    /* seen from inside A's mount namespace */
    snprintf(p, sizeof(p), "/proc/%d/root%s", (int)vm_pid(va), a.disk);
    assert_int_equal(access(p, F_OK), 0); /* its own disk: there (so this check can fail) */
    snprintf(p, sizeof(p), "/proc/%d/root%s", (int)vm_pid(va), b.disk);
    assert_int_equal(access(p, F_OK), -1); /* the other's disk: absent */
    snprintf(p, sizeof(p), "/proc/%d/root%s/agent.sock", (int)vm_pid(va), b.run);
    assert_int_equal(access(p, F_OK), -1); /* the other's sockets: absent */
    snprintf(p, sizeof(p), "/proc/%d/root%s", (int)vm_pid(va), b.run);
    assert_int_equal(access(p, F_OK), -1);
    /* each runs under a uid of its own from the range, as PID 1 of its own namespace */
    unsigned ua, ga, ub, gb;
    int pid1;
    proc_ids(vm_pid(va), &ua, &ga, &pid1);
    assert_true(pid1);
    assert_true(ua >= 2100000100 && ua < 2100000164 && ga == ua);
    proc_ids(vm_pid(vb), &ub, &gb, &pid1);
    assert_true(ub >= 2100000100 && ub < 2100000164 && gb == ub);
    assert_int_not_equal(ua, ub);
    struct stat st;
    assert_int_equal(stat(a.disk, &st), 0);
    assert_int_equal(st.st_uid, ua); /* its overlay is its uid's while it runs */
    for (int i = 0; i < 2; i++) {
        assert_false(same_ns(vm_pid(i ? vb : va), "net"));
        assert_false(same_ns(vm_pid(i ? vb : va), "ipc"));
    }
    /* and sits in its own cgroup */
    char cg[4096] = "";
    snprintf(p, sizeof(p), "/proc/%d/cgroup", (int)vm_pid(va));
    FILE *f = fopen(p, "r");
    size_t cgn = f ? fread(cg, 1, sizeof(cg) - 1, f) : 0;
    cg[cgn] = 0;
    if (f)
        fclose(f);
    assert_non_null(strstr(cg, "space-test/space-jaila"));
    kill_and_wait(va, &oa);
    kill_and_wait(vb, &ob);
    assert_int_equal(stat(a.disk, &st), 0);
    assert_int_equal(st.st_uid, 0); /* back to root once its QEMU is gone */

    /* an unjailed VM is refused while the policy requires the jail */
    struct vmh_box u;
    int verr;
    char msg[512];
    box_init(&u, "jailu", NULL);
    u.cfg.jail.jailer = jl;
    vmh_obs_init(&oa);
    assert_null(vm_boot(vmh_base, &u.cfg, &vmh_cbs, &oa, &verr, msg, sizeof(msg)));
    assert_int_equal(verr, VM_E_JAIL);

    /* a jailed clone restores from the template snapshot, the RAM file read-only */
    char mem[300];
    snprintf(mem, sizeof(mem), "%s/mem", tmpl_snap);
    struct vmh_box c;
    box_init(&c, "jailc", tmpl_overlay);
    c.cfg.jail = j;
    struct vm *vc = restore(&c, &oa, tmpl_snap, 0);
    wait_ready_hello(&oa);
    assert_int_equal(open_mode(vm_pid(vc), mem), O_RDONLY);
    assert_int_equal(stat(mem, &st), 0);
    assert_true(st.st_uid == 0 && (st.st_mode & 07777) == 0444);
    kill_and_wait(vc, &oa);

    /* without the shim a jailed clone does not start (no writable fallback) */
    pol.shim = "/nonexistent/space-qemu-shim.so";
    struct vm_jailer *noshim = vm_jailer_new(&pol, err, sizeof(err));
    assert_non_null(noshim);
    c.cfg.jail.jailer = noshim;
    vmh_obs_init(&oa);
    assert_null(vm_restore(vmh_base, &c.cfg, tmpl_snap, 0, &vmh_cbs, &oa, &verr, msg, sizeof(msg)));
    assert_int_equal(verr, VM_E_JAIL);
    assert_non_null(strstr(msg, "/nonexistent/space-qemu-shim.so"));
    fprintf(stderr, "no shim: %s\n", msg);
    vm_jailer_free(noshim);
    vm_jailer_free(jl);
}

/* Warm pool: fills with paused clones, a claim resumes one and the agent greets; the pool
 * refills; freeing it kills what is left and discards their directories. */
static int discarded;

static void pool_discard(const char *id, const char *run_dir, void *arg)
{
    discarded++;
}

/* Runs the loop until the pool has `n` VMs ready (fails after BOOT_LIMIT_MS). */
static void wait_pool_full(struct pool *p, unsigned n)
{
    double end = vmh_now_ms() + BOOT_LIMIT_MS;
    while (pool_ready(p) < n && vmh_now_ms() < end) {
        int tick = 0;
        vmh_run_until(vmh_base, &tick, 50);
    }
    assert_int_equal(pool_ready(p), n);
}

static void test_pool(void **state)
{
    NEED_GUEST();
    make_template();
    struct vmh_box t;
    box_init(&t, "poolbase", tmpl_overlay); /* only for its config shape */
    struct pool_config pc = { .snapshot_dir = tmpl_snap, .template_overlay = tmpl_overlay,
                              .base = t.cfg, .size = 2, .prepare = vmh_pool_prepare,
                              .discard = pool_discard, .prepare_arg = (void *)"pool" };
    pc.base.id = NULL;
    pc.base.run_dir = NULL;
    pc.base.disk = NULL;
    struct pool *p = pool_new(vmh_base, &pc);
    assert_non_null(p);
    struct vmh_obs o;
    vmh_obs_init(&o);
    assert_null(pool_claim(p, &vmh_cbs, &o)); /* nothing ready yet */
    wait_pool_full(p, 2);
    double t0 = vmh_now_ms();
    struct vm *vm = pool_claim(p, &vmh_cbs, &o);
    assert_non_null(vm);
    wait_ready_hello(&o);
    fprintf(stderr, "warm pool claim to agent HELLO: %.1f ms\n", o.hello.at_ms - t0);
    assert_int_equal(vm_state(vm), VM_STATE_RUNNING);
    kill_and_wait(vm, &o);
    assert_int_equal(o.reason, VM_EXIT_KILLED);
    /* The claim is replaced (after a short delay that keeps the refill off the claimed
     * VM's critical path). */
    wait_pool_full(p, 2);
    pool_free(p);
    int settle = 0;
    vmh_run_until(vmh_base, &settle, 3000); /* orphaned qemu-img jobs, deferred frees */
    assert_int_equal(discarded, 2); /* the two ready ones */
}

/* Graceful stop: the agent is asked to power off (as the control plane does), then
 * vm_shutdown waits for QEMU to exit on its own. A guest that ignores the request is
 * killed when the timeout expires. Either way the disk overlay stays. */
static void send_open(int fd, uint32_t ch, const char *json)
{
    uint8_t msg[256];
    size_t n = strlen(json);
    frame_encode_header(msg, ch, FRAME_OPEN, FRAME_STREAM_NONE, (uint32_t)n);
    memcpy(msg + FRAME_HEADER_SIZE, json, n);
    assert_int_equal(write(fd, msg, FRAME_HEADER_SIZE + n), (ssize_t)(FRAME_HEADER_SIZE + n));
}

static void test_shutdown(void **state)
{
    NEED_GUEST();
    struct vmh_box b;
    struct vmh_obs o;
    box_init(&b, "stop1", NULL);
    struct vm *vm = boot(&b, &o);
    send_open(o.hello.fd, 1, "{\"op\":\"shutdown\"}");
    struct vmh_done d = { 0 };
    assert_int_equal(vm_shutdown(vm, 60000, vmh_done_cb, &d), VM_OK);
    vmh_run_until(vmh_base, &o.exited, 70000);
    assert_int_equal(d.done, 1);
    assert_int_equal(d.err, VM_OK);
    assert_int_equal(o.reason, VM_EXIT_SHUTDOWN);
    assert_int_equal(access(b.disk, F_OK), 0);

    /* start again on the same disk; this time nobody asks the agent: killed at timeout */
    vm = boot(&b, &o);
    memset(&d, 0, sizeof(d));
    assert_int_equal(vm_shutdown(vm, 500, vmh_done_cb, &d), VM_OK);
    vmh_run_until(vmh_base, &o.exited, 30000);
    assert_int_equal(d.err, VM_OK);
    assert_true(o.reason == VM_EXIT_KILLED || o.reason == VM_EXIT_SHUTDOWN);
}

/* The real thing: the process that started QEMU is SIGKILLed (QEMU is not its child any
 * more, nobody will reap it for us), and a fresh event loop adopts the VM. */
static void test_adopt_after_sigkill(void **state)
{
    NEED_GUEST();
    struct vmh_box b;
    struct vmh_obs o;
    int err, pfd[2];
    char msg[512];
    box_init(&b, "adopt2", NULL);
    assert_int_equal(pipe(pfd), 0);
    pid_t child = fork();
    if (child == 0) {
        /* a stand-in spaced: its own loop, boots the VM, reports, then waits to die */
        struct event_base *cb = event_base_new();
        struct vmh_obs co;
        vmh_obs_init(&co);
        vmh_base = cb;
        struct vm *vm = vm_boot(cb, &b.cfg, &vmh_cbs, &co, &err, msg, sizeof(msg));
        char ok = vm && vmh_run_until(cb, &co.ready, BOOT_LIMIT_MS) && !co.ready_err ? 'y' : 'n';
        if (write(pfd[1], &ok, 1) != 1)
            _exit(1);
        for (;;)
            pause();
    }
    char ok = 0;
    assert_int_equal(read(pfd[0], &ok, 1), 1);
    assert_int_equal(ok, 'y');
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    close(pfd[0]);
    close(pfd[1]);
    vmh_obs_init(&o);
    struct vm *vm = vm_adopt(vmh_base, NULL, b.run, &vmh_cbs, &o, &err, msg, sizeof(msg));
    if (!vm)
        fail_msg("adopt after SIGKILL: %s", msg);
    wait_ready_hello(&o);
    kill_and_wait(vm, &o); /* killing an adopted VM works through its pidfd */
    assert_int_equal(o.reason, VM_EXIT_KILLED);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_boot_pause_kill),
        cmocka_unit_test(test_template_snapshot_restore),
        cmocka_unit_test(test_fork_capture),
        cmocka_unit_test(test_crash_detected),
        cmocka_unit_test(test_hang_detected),
        cmocka_unit_test(test_adopt),
        cmocka_unit_test(test_adopt_after_sigkill),
        cmocka_unit_test(test_adopt_suspend),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_jail_isolation),
        cmocka_unit_test(test_pool),
        cmocka_unit_test(test_shutdown),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
