/* bench_vm: how fast the VM runtime makes sandboxes, for one template in one run.
 *
 * Prints, each labelled with the accelerator used:
 *   cold boot -> agent ready            (vm_boot, median of N)
 *   snapshot restore -> agent ready     (vm_restore from the template snapshot, median)
 *   bare QEMU restore -> agent ready    (the same restore by a plain fork/exec of QEMU and
 *                                         blocking QMP, no spaced code: the VMM's own time)
 *   warm-pool create -> agent ready     (pool_claim, p50/p95 over >= 20)
 *   4 parallel restores: creates/s
 *   PSS per idle VM (template clones, and a cold-booted VM for comparison)
 * and the ratios the goals are stated in (restore vs cold boot, platform overhead).
 *
 * "Agent ready" = the agent answered our HELLO on the agent socket.
 * Not a test: it asserts nothing, it measures. Usage: bench_vm [-n N] [-c claims] [-j]
 * (-j: also print one JSON object at the end, for docs/benchmarks.md). */
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>

#include "daemon/vm/pool.h"
#include "log.h"
#include "../tests/unit/vm_harness.h"

static int seq;

/* A box with the next bench id. */
static int box_init(struct vmh_box *b, const char *backing_overlay)
{
    char id[32];
    snprintf(id, sizeof(id), "bench%d", seq++);
    return vmh_box_init(b, id, backing_overlay);
}

static int wait_hello(struct vmh_obs *o)
{
    vmh_run_until(vmh_base, &o->ready, 120000);
    if (!o->ready || o->ready_err) {
        fprintf(stderr, "start failed: %s\n", o->ready_msg);
        return -1;
    }
    vmh_run_until(vmh_base, &o->hello.got, 120000);
    return o->hello.got == 1 ? 0 : -1;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(double *v, int n, double p)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_d);
    int i = (int)(p * (n - 1) + 0.5);
    return v[i];
}

static long pss_kib(pid_t pid)
{
    char p[64], line[256];
    long kib = -1;
    snprintf(p, sizeof(p), "/proc/%d/smaps_rollup", (int)pid);
    FILE *f = fopen(p, "r");
    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "Pss: %ld kB", &kib) == 1)
            break;
    if (f)
        fclose(f);
    return kib;
}

/* ---- the template ---------------------------------------------------------------- */

static char tmpl_overlay[160], tmpl_snap[160];

static int make_template(void)
{
    struct vmh_box t;
    struct vmh_obs o;
    int err;
    char msg[512], mem[200];
    if (box_init(&t, NULL) < 0)
        return -1;
    snprintf(tmpl_snap, sizeof(tmpl_snap), "%s/template", vmh_work);
    mkdir(tmpl_snap, 0700);
    snprintf(mem, sizeof(mem), "%s/mem", tmpl_snap);
    t.cfg.mem_path = mem;
    vmh_obs_init(&o);
    struct vm *vm = vm_boot(vmh_base, &t.cfg, &vmh_cbs, &o, &err, msg, sizeof(msg));
    if (!vm || wait_hello(&o) < 0) {
        fprintf(stderr, "template boot failed: %s\n", vm ? "no agent" : msg);
        return -1;
    }
    vmh_hello_stop(&o.hello);
    struct vmh_done d = { 0 };
    if (vm_template_snapshot(vm, tmpl_snap, vmh_done_cb, &d) != VM_OK)
        return -1;
    vmh_run_until(vmh_base, &d.done, 60000);
    vmh_run_until(vmh_base, &o.exited, 10000);
    snprintf(tmpl_overlay, sizeof(tmpl_overlay), "%s", t.disk);
    return d.err ? -1 : 0;
}

/* ---- bare QEMU: plain fork/exec + blocking QMP, none of spaced's code ------------------ */

static int unix_connect_retry(const char *path)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    for (int i = 0; i < 5000; i++) {
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
            return fd;
        close(fd);
        usleep(1000);
    }
    return -1;
}

/* Reads QMP lines until one contains `want`. */
static int qmp_wait(int fd, const char *want)
{
    char buf[65536];
    size_t len = 0;
    for (;;) {
        ssize_t n = read(fd, buf + len, sizeof(buf) - 1 - len);
        if (n <= 0)
            return -1;
        len += (size_t)n;
        buf[len] = 0;
        if (strstr(buf, want))
            return 0;
        char *nl = strrchr(buf, '\n');
        if (nl) {
            size_t keep = len - (size_t)(nl + 1 - buf);
            memmove(buf, nl + 1, keep);
            len = keep;
        }
    }
}

static double bare_restore(const char *disk, const char *dir)
{
    char qmp[200], agent[200], mem[200], state[200], memobj[1024], drive_b[1024],
         drive_t[1024], drive_r[1024], incoming[1024];
    snprintf(qmp, sizeof(qmp), "%s/bare-qmp.sock", vmh_work);
    snprintf(agent, sizeof(agent), "%s/bare-agent.sock", vmh_work);
    snprintf(mem, sizeof(mem), "%s/mem", tmpl_snap);
    snprintf(state, sizeof(state), "%s/state", dir);
    unlink(qmp);
    unlink(agent);
    snprintf(memobj, sizeof(memobj), "memory-backend-file,id=ram0,mem-path=%s,share=off,size=256M", mem);
    snprintf(drive_b, sizeof(drive_b), "driver=raw,node-name=b1,read-only=on,file.driver=file,file.filename=%s", vmh_guest.rootfs);
    snprintf(drive_t, sizeof(drive_t), "driver=qcow2,node-name=b0,read-only=on,file.driver=file,file.filename=%s,backing=b1", tmpl_overlay);
    snprintf(drive_r, sizeof(drive_r), "driver=qcow2,node-name=root,file.driver=file,file.filename=%s,backing=b0", disk);
    snprintf(incoming, sizeof(incoming), "{\"execute\":\"migrate-incoming\",\"arguments\":{\"uri\":\"exec:cat %s\"}}\n", state);
    char chq[260], cha[260], tcg[32];
    snprintf(tcg, sizeof(tcg), "tcg,tb-size=%u", VM_TCG_TB_MIB); /* as vm_cmdline.c */
    snprintf(chq, sizeof(chq), "socket,id=mon,path=%s,server=on,wait=off", qmp);
    snprintf(cha, sizeof(cha), "socket,id=agent,path=%s,server=on,wait=off", agent);
    char *argv[] = { "qemu-system-x86_64", "-M",
        "microvm,x-option-roms=off,acpi=on,pit=off,pic=off,rtc=on,isa-serial=on,memory-backend=ram0",
        "-accel", tcg, "-cpu", "max", "-smp", "1", "-m", "256M", "-object", memobj,
        "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
        "-kernel", vmh_guest.kernel, "-initrd", vmh_guest.initramfs,
        "-chardev", chq, "-mon", "chardev=mon,mode=control", "-serial", "null",
        "-device", "virtio-serial-device,max_ports=2", "-chardev", cha,
        "-device", "virtserialport,chardev=agent,name=space.agent",
        "-blockdev", drive_b, "-blockdev", drive_t, "-blockdev", drive_r,
        "-device", "virtio-blk-device,drive=root", "-device", "virtio-rng-device",
        "-incoming", "defer", NULL };
    double t0 = vmh_now_ms();
    pid_t pid = fork();
    if (pid == 0) {
        int nul = open("/dev/null", O_RDWR);
        dup2(nul, 1);
        if (!getenv("BENCH_DEBUG"))
            dup2(nul, 2);
        execvp(argv[0], argv);
        _exit(127);
    }
    int q = unix_connect_retry(qmp);
    double r = -1;
    if (q >= 0 && qmp_wait(q, "\"QMP\"") == 0) {
        const char *caps = "{\"execute\":\"qmp_capabilities\"}\n"
            "{\"execute\":\"migrate-set-capabilities\",\"arguments\":{\"capabilities\":"
            "[{\"capability\":\"x-ignore-shared\",\"state\":true},{\"capability\":\"events\",\"state\":true}]}}\n";
        if (write(q, caps, strlen(caps)) > 0 && write(q, incoming, strlen(incoming)) > 0 &&
            qmp_wait(q, "\"completed\"") == 0 &&
            /* the snapshot was taken stopped, so the loaded VM stays paused until cont */
            write(q, "{\"execute\":\"cont\"}\n", 19) == 19) {
            int a = unix_connect_retry(agent);
            struct vmh_hello h;
            vmh_hello_start(&h, vmh_base, a);
            vmh_run_until(vmh_base, &h.got, 60000);
            if (h.got == 1)
                r = h.at_ms - t0;
            vmh_hello_stop(&h);
        }
    }
    if (r < 0)
        fprintf(stderr, "bare restore failed (qmp fd %d)\n", q);
    if (q >= 0)
        close(q);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return r;
}

int main(int argc, char **argv)
{
    int n = 5, claims = 20, json = 0, c;
    while ((c = getopt(argc, argv, "n:c:j")) != -1) {
        if (c == 'n')
            n = atoi(optarg);
        else if (c == 'c')
            claims = atoi(optarg);
        else if (c == 'j')
            json = 1;
    }
    if (n < 1 || n > 50 || claims < 1 || claims > 500)
        return 2;
    const char *why = vmh_find_guest(&vmh_guest);
    if (why) {
        fprintf(stderr, "bench_vm: %s\n", why);
        return 2;
    }
    snprintf(vmh_work, sizeof(vmh_work), "/tmp/space-bench-XXXXXX");
    if (!mkdtemp(vmh_work))
        return 1;
    vmh_base = event_base_new();
    signal(SIGPIPE, SIG_IGN);
    log_init("bench_vm", LOG_WARN);
    const char *acc = vm_accel_name(vm_accel_resolve(VM_ACCEL_AUTO));
    double cold[50], rest[50], bare[50], claim[500], claim_cont[500];
    long pss_clone = 0, pss_cold = 0;

    /* cold boot */
    for (int i = 0; i < n; i++) {
        struct vmh_box b;
        struct vmh_obs o;
        int err;
        char msg[512];
        box_init(&b, NULL);
        vmh_obs_init(&o);
        double t0 = vmh_now_ms();
        struct vm *vm = vm_boot(vmh_base, &b.cfg, &vmh_cbs, &o, &err, msg, sizeof(msg));
        if (!vm || wait_hello(&o) < 0) {
            fprintf(stderr, "cold boot failed\n");
            return 1;
        }
        cold[i] = o.hello.at_ms - t0;
        if (i == n - 1) {
            int idle = 0;
            vmh_run_until(vmh_base, &idle, 2000);
            pss_cold = pss_kib(vm_pid(vm));
        }
        vmh_kill_wait(vm, &o);
    }
    if (make_template() < 0)
        return 1;

    /* snapshot restore via the runtime, and the same restore bare */
    for (int i = 0; i < n; i++) {
        struct vmh_box b;
        struct vmh_obs o;
        int err;
        char msg[512];
        box_init(&b, tmpl_overlay);
        vmh_obs_init(&o);
        double t0 = vmh_now_ms();
        struct vm *vm = vm_restore(vmh_base, &b.cfg, tmpl_snap, 0, &vmh_cbs, &o, &err, msg, sizeof(msg));
        if (!vm || wait_hello(&o) < 0) {
            fprintf(stderr, "restore failed: %s\n", vm ? "no agent" : msg);
            return 1;
        }
        rest[i] = o.hello.at_ms - t0;
        vmh_kill_wait(vm, &o);
        struct vmh_box bb;
        box_init(&bb, tmpl_overlay);
        bare[i] = bare_restore(bb.disk, tmpl_snap);
    }

    /* warm pool */
    struct vmh_box pb;
    box_init(&pb, tmpl_overlay);
    struct pool_config pc = { .snapshot_dir = tmpl_snap, .template_overlay = tmpl_overlay,
                              .base = pb.cfg, .size = 2, .prepare = vmh_pool_prepare,
                              .prepare_arg = (void *)"benchpool" };
    pc.base.id = pc.base.run_dir = pc.base.disk = NULL;
    struct pool *p = pool_new(vmh_base, &pc);
    for (int i = 0; i < claims; i++) {
        double end = vmh_now_ms() + 120000;
        while (pool_ready(p) < 1 && vmh_now_ms() < end) {
            int tick = 0;
            vmh_run_until(vmh_base, &tick, 20);
        }
        struct vmh_obs o;
        vmh_obs_init(&o);
        double t0 = vmh_now_ms();
        struct vm *vm = pool_claim(p, &vmh_cbs, &o);
        if (!vm || wait_hello(&o) < 0) {
            fprintf(stderr, "pool claim failed\n");
            return 1;
        }
        claim[i] = o.hello.at_ms - t0;
        claim_cont[i] = o.ready_at - t0;
        vmh_kill_wait(vm, &o);
    }
    pool_free(p);

    /* 4 parallel restores */
    enum { PAR = 4 };
    struct vmh_box pbx[PAR];
    struct vmh_obs po[PAR];
    struct vm *pv[PAR];
    for (int i = 0; i < PAR; i++)
        box_init(&pbx[i], tmpl_overlay);
    double t0 = vmh_now_ms(), last = t0;
    for (int i = 0; i < PAR; i++) {
        int err;
        char msg[512];
        vmh_obs_init(&po[i]);
        pv[i] = vm_restore(vmh_base, &pbx[i].cfg, tmpl_snap, 0, &vmh_cbs, &po[i], &err, msg, sizeof(msg));
        if (!pv[i]) {
            fprintf(stderr, "parallel restore: %s\n", msg);
            return 1;
        }
    }
    for (int i = 0; i < PAR; i++) {
        if (wait_hello(&po[i]) < 0)
            return 1;
        if (po[i].hello.at_ms > last)
            last = po[i].hello.at_ms;
    }
    double par_rate = PAR / ((last - t0) / 1000.0);
    int idle = 0;
    vmh_run_until(vmh_base, &idle, 3000);
    for (int i = 0; i < PAR; i++)
        pss_clone += pss_kib(vm_pid(pv[i]));
    pss_clone /= PAR;
    for (int i = 0; i < PAR; i++)
        vmh_kill_wait(pv[i], &po[i]);

    double cold50 = pct(cold, n, 0.5), rest50 = pct(rest, n, 0.5), bare50 = pct(bare, n, 0.5);
    double claim50 = pct(claim, claims, 0.5), claim95 = pct(claim, claims, 0.95);
    double cont50 = pct(claim_cont, claims, 0.5);
    printf("accelerator: %s   (guest: 1 vCPU, 256 MiB, base template)\n", acc);
    printf("cold boot -> agent ready            [%s] median %8.1f ms  (n=%d)\n", acc, cold50, n);
    printf("snapshot restore -> agent ready     [%s] median %8.1f ms  (n=%d)\n", acc, rest50, n);
    printf("bare QEMU restore -> agent ready    [%s] median %8.1f ms  (n=%d)\n", acc, bare50, n);
    printf("warm-pool create -> agent ready     [%s] p50 %8.1f ms  p95 %8.1f ms  (n=%d; resume alone p50 %.1f ms)\n",
           acc, claim50, claim95, claims, cont50);
    printf("4 parallel restores                 [%s] %8.2f creates/s\n", acc, par_rate);
    printf("PSS per idle VM                     [%s] clone %ld KiB, cold-booted %ld KiB\n", acc,
           pss_clone, pss_cold);
    printf("ratio cold boot / snapshot restore  [%s] %8.1fx  (goal >= 5x)\n", acc, cold50 / rest50);
    printf("platform overhead on restore        [%s] %+8.1f ms = %+.1f%% of bare  (goal < 10%%)\n",
           acc, rest50 - bare50, 100.0 * (rest50 - bare50) / bare50);
    if (json)
        printf("{\"accel\":\"%s\",\"cold_ms\":%.1f,\"restore_ms\":%.1f,\"bare_restore_ms\":%.1f,"
               "\"pool_p50_ms\":%.1f,\"pool_p95_ms\":%.1f,\"parallel4_per_s\":%.2f,"
               "\"pss_clone_kib\":%ld,\"pss_cold_kib\":%ld}\n", acc, cold50, rest50, bare50,
               claim50, claim95, par_rate, pss_clone, pss_cold);
    event_base_free(vmh_base);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", vmh_work);
    return system(cmd) == 0 ? 0 : 1;
}
