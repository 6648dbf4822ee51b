/* test_vm_cgroup: the per-sandbox cgroup (vm_cgroup.h) on a real kernel, both layouts.
 *
 * v1: the host's own hierarchies under /sys/fs/cgroup/{cpu,memory,pids} when the host is
 * v1 (skipped, saying so, on a v2 host). v2: a cgroup2 hierarchy mounted by the test on
 * a spare mount point, so it runs on a v1 host too. On such a host every controller is
 * bound to a v1 hierarchy and the v2 one offers none: then the test checks that a group
 * without limits works (created, joined, removed) and that asking for a limit fails with
 * an error naming the missing controller; where the v2 hierarchy offers the controllers,
 * it checks the limit files instead. Needs root (skips otherwise). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "daemon/vm/vm_cgroup.h"

#define V1_ROOT "/sys/fs/cgroup"

static char parent[64]; /* per run, so parallel runs do not meet */

static int read_file(const char *path, char *buf, size_t cap)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, buf, cap - 1) : -1;
    if (fd >= 0)
        close(fd);
    buf[n > 0 ? n : 0] = '\0';
    return n >= 0 ? 0 : -1;
}

static void expect_file(const char *dir, const char *name, const char *want)
{
    char p[700], got[256];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    assert_int_equal(read_file(p, got, sizeof got), 0);
    if (strncmp(got, want, strlen(want)) != 0)
        fail_msg("%s: got \"%s\", want \"%s\"", p, got, want);
}

/* A child joins the group through the opened cgroup.procs fds (as vm_spawn's child
 * does) and stays there until killed; returns its pid. */
static pid_t join_child(const int fds[3])
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        for (int i = 0; i < 3; i++)
            if (fds[i] >= 0 && write(fds[i], "0", 1) != 1)
                _exit(1);
        pause();
        _exit(0);
    }
    return pid;
}

static void end_child(pid_t pid)
{
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

/* True once pid is listed in dir/cgroup.procs (one pid per line). */
static int listed(const char *dir, pid_t pid)
{
    char p[700], buf[4096];
    snprintf(p, sizeof p, "%s/cgroup.procs", dir);
    for (int tries = 0; tries < 100; tries++) {
        if (read_file(p, buf, sizeof buf) == 0)
            for (char *save = NULL, *t = strtok_r(buf, "\n", &save); t; t = strtok_r(NULL, "\n", &save))
                if (atoi(t) == (int)pid)
                    return 1;
        usleep(10000);
    }
    return 0;
}

static const char *need_root(void)
{
    return geteuid() == 0 ? NULL : "not root: cgroups cannot be created";
}

static void test_v1_host_hierarchies(void **state)
{
    const char *why = need_root();
    char probe[256];
    snprintf(probe, sizeof probe, "%s/cgroup.controllers", V1_ROOT);
    if (!why && access(probe, F_OK) == 0)
        why = "the host is cgroup v2: no v1 hierarchies to test";
    if (!why && access(V1_ROOT "/cpu", F_OK) != 0)
        why = "no v1 cpu hierarchy at " V1_ROOT "/cpu";
    if (why) {
        fprintf(stderr, "skip: %s\n", why);
        skip();
    }
    struct vm_cgroup_limits lim = { .cpu_percent = 50, .mem_bytes = 256ull << 20, .pids_max = 32 };
    int fds[3];
    char err[512] = "";
    if (vm_cgroup_create(V1_ROOT, parent, "t1", &lim, fds, err, sizeof err) != 0)
        fail_msg("vm_cgroup_create: %s", err);
    char cpu[300], mem[300], pids[300];
    snprintf(cpu, sizeof cpu, "%s/cpu/%s/space-t1", V1_ROOT, parent);
    snprintf(mem, sizeof mem, "%s/memory/%s/space-t1", V1_ROOT, parent);
    snprintf(pids, sizeof pids, "%s/pids/%s/space-t1", V1_ROOT, parent);
    expect_file(cpu, "cpu.cfs_quota_us", "50000");
    expect_file(cpu, "cpu.cfs_period_us", "100000");
    expect_file(mem, "memory.limit_in_bytes", "268435456");
    expect_file(pids, "pids.max", "32");
    pid_t child = join_child(fds);
    assert_true(listed(cpu, child) && listed(mem, child) && listed(pids, child));
    end_child(child);
    for (int i = 0; i < 3; i++)
        close(fds[i]);
    vm_cgroup_remove(V1_ROOT, parent, "t1");
    assert_int_equal(access(cpu, F_OK), -1);
    assert_int_equal(access(mem, F_OK), -1);
    assert_int_equal(access(pids, F_OK), -1);
    static const char *const ctl[] = { "cpu", "memory", "pids" };
    for (int i = 0; i < 3; i++) {
        char p[300];
        snprintf(p, sizeof p, "%s/%s/%s", V1_ROOT, ctl[i], parent);
        rmdir(p);
    }
}

static void test_v2_mounted_hierarchy(void **state)
{
    const char *why = need_root();
    char root[] = "/tmp/space-cg2-XXXXXX";
    if (!why && !mkdtemp(root))
        why = "mkdtemp failed";
    if (!why && mount("none", root, "cgroup2", 0, NULL) != 0) {
        static char m[160];
        snprintf(m, sizeof m, "cannot mount cgroup2 here: %s", strerror(errno));
        why = m;
        rmdir(root);
    }
    if (why) {
        fprintf(stderr, "skip: %s\n", why);
        skip();
    }
    char ctl[300], offered[256] = "";
    snprintf(ctl, sizeof ctl, "%s/cgroup.controllers", root);
    read_file(ctl, offered, sizeof offered);
    int have_all = strstr(offered, "cpu") && strstr(offered, "memory") && strstr(offered, "pids");
    fprintf(stderr, "cgroup2 at %s offers: \"%.*s\"%s\n", root, (int)strcspn(offered, "\n"),
            offered, have_all ? "" : " (controllers bound to v1: limits cannot be tested)");
    char par[300], group[320];
    snprintf(par, sizeof par, "%s/%s", root, parent);
    snprintf(group, sizeof group, "%s/space-t2", par);

    /* No limits: the group is made, joined and removed on any v2 hierarchy. */
    struct vm_cgroup_limits none = { 0 };
    int fds[3];
    char err[512] = "";
    if (vm_cgroup_create(root, parent, "t2", &none, fds, err, sizeof err) != 0)
        fail_msg("vm_cgroup_create without limits: %s", err);
    assert_true(fds[0] >= 0 && fds[1] == -1 && fds[2] == -1);
    pid_t child = join_child(fds);
    assert_true(listed(group, child));
    end_child(child);
    close(fds[0]);
    vm_cgroup_remove(root, parent, "t2");
    assert_int_equal(access(group, F_OK), -1);

    struct vm_cgroup_limits lim = { .cpu_percent = 50, .mem_bytes = 256ull << 20, .pids_max = 32 };
    int rc = vm_cgroup_create(root, parent, "t3", &lim, fds, err, sizeof err);
    snprintf(group, sizeof group, "%s/space-t3", par);
    if (have_all) {
        if (rc != 0)
            fail_msg("vm_cgroup_create with limits: %s", err);
        expect_file(group, "cpu.max", "50000 100000");
        expect_file(group, "memory.max", "268435456");
        expect_file(group, "pids.max", "32");
        for (int i = 0; i < 3; i++)
            if (fds[i] >= 0)
                close(fds[i]);
        vm_cgroup_remove(root, parent, "t3");
    } else {
        /* A limit that cannot apply is refused, naming the controller, leaving no group. */
        assert_int_equal(rc, -1);
        fprintf(stderr, "with limits: %s\n", err);
        assert_non_null(strstr(err, "does not offer the"));
        assert_true(fds[0] == -1 && fds[1] == -1 && fds[2] == -1);
    }
    assert_int_equal(access(group, F_OK), -1);
    rmdir(par);
    assert_int_equal(umount2(root, MNT_DETACH), 0);
    rmdir(root);
}

int main(void)
{
    snprintf(parent, sizeof parent, "space-test-%d", (int)getpid());
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_v1_host_hierarchies),
        cmocka_unit_test(test_v2_mounted_hierarchy),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
