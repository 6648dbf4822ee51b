/* test_vm_cmdline: the QEMU argv for sandboxes: required options present, per-launch
 * variants (template RAM file, restore, paused, KVM vs TCG), the explicit disk chain,
 * option-value escaping, and refusal of bad configs. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "daemon/vm/vm.h"
#include "daemon/vm/vm_cmdline.h"

static struct vm_config base_cfg(void)
{
    struct vm_config c = {
        .id = "sbx-1", .vcpus = 2, .mem_mib = 512, .kernel = "/g/vmlinux",
        .initramfs = "/g/initramfs.cpio", .disk = "/r/sbx-1/disk.qcow2", .run_dir = "/r/sbx-1",
        .net.tap_fd = -1,
        .backing = { { "/t/base/overlay.qcow2", "qcow2" }, { "/t/base/rootfs.ext4", "raw" } },
        .n_backing = 2,
    };
    return c;
}

static const struct vm_launch tcg = { .accel = VM_ACCEL_TCG, .tsc_khz = 2096000 };

/* Index of the argument equal to s, or -1. */
static int find(const struct vm_argv *a, const char *s)
{
    for (size_t i = 0; i < a->n; i++)
        if (strcmp(a->argv[i], s) == 0)
            return (int)i;
    return -1;
}

/* Value following option `opt` whose value starts with `prefix`, or NULL. */
static const char *opt_value(const struct vm_argv *a, const char *opt, const char *prefix)
{
    for (size_t i = 0; i + 1 < a->n; i++)
        if (!strcmp(a->argv[i], opt) && !strncmp(a->argv[i + 1], prefix, strlen(prefix)))
            return a->argv[i + 1];
    return NULL;
}

static void build_ok(const struct vm_config *c, const struct vm_launch *l, struct vm_argv *a)
{
    char err[256];
    if (vm_cmdline_build(c, l, a, err, sizeof(err)) != 0)
        fail_msg("build failed: %s", err);
    assert_null(a->argv[a->n]);
}

static void test_basic(void **state)
{
    struct vm_config c = base_cfg();
    struct vm_argv a;
    build_ok(&c, &tcg, &a);
    assert_string_equal(a.argv[0], "qemu-system-x86_64");
    assert_non_null(opt_value(&a, "-name", "sbx-1,process=space-sbx-1"));
    assert_non_null(opt_value(&a, "-M", "microvm,"));
    assert_non_null(strstr(opt_value(&a, "-M", "microvm,"), "memory-backend=ram0"));
    assert_non_null(opt_value(&a, "-accel", "tcg,tb-size="));
    assert_non_null(opt_value(&a, "-smp", "2"));
    assert_non_null(opt_value(&a, "-m", "512M"));
    assert_non_null(opt_value(&a, "-object", "memory-backend-ram,id=ram0,size=512M"));
    assert_non_null(opt_value(&a, "-sandbox", "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny"));
    const char *append = opt_value(&a, "-append", "console=ttyS0");
    assert_non_null(append);
    assert_non_null(strstr(append, "tsc_early_khz=2096000"));
    /* The command line a template snapshot is fingerprinted with is the one booted, and
     * it keeps an idle guest's timers quiet (vm_cmdline.c). */
    assert_int_equal(strncmp(append, vm_kernel_cmdline(), strlen(vm_kernel_cmdline())), 0);
    assert_non_null(strstr(append, "sysctl.vm.compaction_proactiveness=0"));
    assert_non_null(strstr(append, "nowatchdog"));
    assert_non_null(opt_value(&a, "-chardev", "socket,id=mon,fd=3,server=on"));
    assert_non_null(opt_value(&a, "-chardev", "socket,id=agent,fd=4,server=on"));
    assert_non_null(opt_value(&a, "-chardev", "socket,id=con,fd=5,server=on"));
    assert_non_null(opt_value(&a, "-device", "virtserialport,chardev=agent,name=space.agent"));
    assert_true(find(&a, "-no-reboot") > 0);
    assert_true(find(&a, "-nodefaults") > 0);
    assert_int_equal(find(&a, "-incoming"), -1);
    assert_int_equal(find(&a, "-S"), -1);
    assert_null(opt_value(&a, "-netdev", ""));
    vm_argv_free(&a);
}

/* The disk chain is spelled out node by node; the overlay's header is never followed. */
static void test_disk_chain(void **state)
{
    struct vm_config c = base_cfg();
    struct vm_argv a;
    build_ok(&c, &tcg, &a);
    const char *b1 = opt_value(&a, "-blockdev", "driver=raw,node-name=b1");
    const char *b0 = opt_value(&a, "-blockdev", "driver=qcow2,node-name=b0");
    const char *root = opt_value(&a, "-blockdev", "driver=qcow2,node-name=root");
    assert_non_null(b1);
    assert_non_null(b0);
    assert_non_null(root);
    assert_non_null(strstr(b1, "read-only=on"));
    assert_non_null(strstr(b1, "file.filename=/t/base/rootfs.ext4"));
    assert_non_null(strstr(b0, "backing=b1"));
    assert_non_null(strstr(root, "backing=b0"));
    assert_null(strstr(root, "read-only"));
    assert_true(find(&a, "virtio-blk-device,drive=root") > 0);
    vm_argv_free(&a);

    c.n_backing = 0; /* standalone overlay: backing explicitly none */
    build_ok(&c, &tcg, &a);
    assert_non_null(strstr(opt_value(&a, "-blockdev", "driver=qcow2,node-name=root"),
                           "backing=null"));
    vm_argv_free(&a);
}

static void test_template_and_restore(void **state)
{
    struct vm_config c = base_cfg();
    struct vm_argv a;
    struct vm_launch l = tcg;
    l.mem_path = "/t/base/snap/mem";
    l.mem_share = 1;
    build_ok(&c, &l, &a);
    const char *mem = opt_value(&a, "-object", "memory-backend-file,id=ram0");
    assert_non_null(mem);
    assert_non_null(strstr(mem, "mem-path=/t/base/snap/mem,share=on,size=512M"));
    vm_argv_free(&a);

    l.mem_share = 0;
    l.incoming = 1;
    l.paused = 1;
    build_ok(&c, &l, &a);
    assert_non_null(strstr(opt_value(&a, "-object", "memory-backend-file"), "share=off"));
    assert_non_null(opt_value(&a, "-incoming", "defer"));
    assert_true(find(&a, "-S") > 0);
    vm_argv_free(&a);
}

static void test_kvm_and_net(void **state)
{
    struct vm_config c = base_cfg();
    struct vm_argv a;
    struct vm_launch l = { .accel = VM_ACCEL_KVM, .tsc_khz = 2096000 };
    c.net.tap_fd = 9;
    c.net.mac = "52:54:00:12:34:56";
    build_ok(&c, &l, &a);
    assert_non_null(opt_value(&a, "-accel", "kvm"));
    assert_non_null(opt_value(&a, "-cpu", "host"));
    assert_null(strstr(opt_value(&a, "-append", "console"), "tsc_early_khz"));
    assert_non_null(opt_value(&a, "-netdev", "tap,id=net0,fd=6"));
    assert_non_null(opt_value(&a, "-device", "virtio-net-device,netdev=net0,mac=52:54:00:12:34:56"));
    vm_argv_free(&a);
}

/* Commas in paths would start a new QEMU option: they are doubled. */
static void test_escaping(void **state)
{
    struct vm_config c = base_cfg();
    struct vm_argv a;
    c.disk = "/r/a,b/disk.qcow2";
    c.backing[1].path = "/t/x,file.filename=/etc/shadow";
    build_ok(&c, &tcg, &a);
    assert_non_null(strstr(opt_value(&a, "-blockdev", "driver=qcow2,node-name=root"),
                           "file.filename=/r/a,,b/disk.qcow2"));
    assert_non_null(strstr(opt_value(&a, "-blockdev", "driver=raw"),
                           "/t/x,,file.filename=/etc/shadow"));
    vm_argv_free(&a);
}

static void test_rejects(void **state)
{
    struct vm_argv a;
    char err[256];
    struct vm_config c;
    const char *bad_ids[] = { "", "a b", "../x", "a,b", "x\n",
                              "0123456789012345678901234567890123456789012345678" };
    for (size_t i = 0; i < sizeof(bad_ids) / sizeof(bad_ids[0]); i++) {
        c = base_cfg();
        c.id = bad_ids[i];
        assert_int_equal(vm_cmdline_build(&c, &tcg, &a, err, sizeof(err)), -1);
        assert_null(a.argv);
    }
    c = base_cfg();
    c.vcpus = 0;
    assert_int_equal(vm_cmdline_build(&c, &tcg, &a, err, sizeof(err)), -1);
    c = base_cfg();
    c.mem_mib = 32;
    assert_int_equal(vm_cmdline_build(&c, &tcg, &a, err, sizeof(err)), -1);
    c = base_cfg();
    c.kernel = NULL;
    assert_int_equal(vm_cmdline_build(&c, &tcg, &a, err, sizeof(err)), -1);
    c = base_cfg();
    c.cmdline_extra = "init=/bin/sh\nx";
    assert_int_equal(vm_cmdline_build(&c, &tcg, &a, err, sizeof(err)), -1);
    c = base_cfg();
    c.backing[0].format = "vmdk";
    assert_int_equal(vm_cmdline_build(&c, &tcg, &a, err, sizeof(err)), -1);
    c = base_cfg();
    c.backing[0].format = "raw"; /* raw only as the base */
    assert_int_equal(vm_cmdline_build(&c, &tcg, &a, err, sizeof(err)), -1);
    c = base_cfg();
    c.net.tap_fd = 5;
    c.net.mac = "52:54:00:12:34:5";
    assert_int_equal(vm_cmdline_build(&c, &tcg, &a, err, sizeof(err)), -1);
    c = base_cfg();
    struct vm_launch l = { .accel = VM_ACCEL_AUTO };
    assert_int_equal(vm_cmdline_build(&c, &l, &a, err, sizeof(err)), -1);
    assert_true(strlen(err) > 0);
}

/* A process whose command line is the QEMU argv built for id (run by sh, which keeps
 * its positional arguments in /proc/<pid>/cmdline) until it is killed. */
static pid_t fake_qemu(const char *id)
{
    struct vm_config c = base_cfg();
    c.id = id;
    struct vm_argv a;
    build_ok(&c, &tcg, &a);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        char **argv = calloc(a.n + 4, sizeof *argv);
        argv[0] = "sh";
        argv[1] = "-c";
        argv[2] = "sleep 100; :";
        for (size_t i = 0; i < a.n; i++)
            argv[3 + i] = a.argv[i];
        execv("/bin/sh", argv);
        _exit(127);
    }
    vm_argv_free(&a);
    return pid;
}

/* vm_kill_strays finds a QEMU by the -name this module gives it, and only that one. */
static void test_kill_strays(void **state)
{
    pid_t mine = fake_qemu("sbx-1"), other = fake_qemu("sbx-10");
    char path[64], buf[64];
    snprintf(path, sizeof path, "/proc/%d/cmdline", (int)mine);
    for (int i = 0; i < 500; i++) { /* until the child has exec'd sh */
        FILE *f = fopen(path, "r");
        size_t n = f ? fread(buf, 1, sizeof buf, f) : 0;
        if (f)
            fclose(f);
        if (n >= 3 && memcmp(buf, "sh", 3) == 0)
            break;
        usleep(10000);
    }
    usleep(50000); /* and the decoy too */
    assert_int_equal(vm_kill_strays("sbx-1"), 1);
    int st = 0;
    assert_int_equal(waitpid(mine, &st, 0), mine);
    assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    assert_int_equal(waitpid(other, &st, WNOHANG), 0); /* "sbx-10" is another VM */
    assert_int_equal(vm_kill_strays("sbx-1"), 0);
    assert_int_equal(vm_kill_strays("../x"), 0);
    kill(other, SIGKILL);
    waitpid(other, NULL, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_basic),
        cmocka_unit_test(test_disk_chain),
        cmocka_unit_test(test_template_and_restore),
        cmocka_unit_test(test_kvm_and_net),
        cmocka_unit_test(test_escaping),
        cmocka_unit_test(test_rejects),
        cmocka_unit_test(test_kill_strays),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
