/* test_vm_jail: what a program in a VM jail can reach, shown with a probe (python3, in
 * /usr, which the jail mirrors) started by vm_spawn exactly as QEMU is: same namespaces,
 * pivot_root, uid switch, file binds, environment. A QEMU taken over by its guest is
 * such a program. The probe must not reach a TCP port on the host's loopback (spaced's
 * API, PostgreSQL), the metadata address or a host abstract unix socket; must not open
 * another VM's overlay (absent from its mount namespace; and when bound in anyway, not
 * its uid's) nor the template RAM file for writing; and must still open its own overlay
 * and read the template RAM file (controls, so each refusal can fail). Also: the uid
 * allocator hands distinct uids, and a jail that cannot be set up fails the spawn as a
 * jail error. Needs root (namespaces, chown); skips, saying so, otherwise. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "daemon/vm/vm_internal.h"
#include "daemon/vm/vm_spawn.h"

#define UID_BASE 2100000000u
#define UID_COUNT 64u

/* Each check prints "<name> ok" or "<name> <errno name>". argv: port, abstract name,
 * own overlay, other VM's overlay (bound in), other VM's overlay (not bound), template
 * RAM file. */
static const char probe[] =
    "import errno, os, socket, sys\n"
    "port, abstract, own, other, hidden, mem = sys.argv[1:7]\n"
    "def check(name, fn):\n"
    "    try:\n"
    "        fn()\n"
    "        print(name, 'ok')\n"
    "    except OSError as e:\n"
    "        print(name, errno.errorcode.get(e.errno, e.errno))\n"
    "def tcp(addr, p):\n"
    "    s = socket.socket(); s.settimeout(3); s.connect((addr, p)); s.close()\n"
    "def unix(name):\n"
    "    s = socket.socket(socket.AF_UNIX); s.connect('\\0' + name); s.close()\n"
    "def opn(path, flags):\n"
    "    os.close(os.open(path, flags))\n"
    "check('loopback', lambda: tcp('127.0.0.1', int(port)))\n"
    "check('metadata', lambda: tcp('169.254.169.254', 80))\n"
    "check('abstract', lambda: unix(abstract))\n"
    "check('own_rw', lambda: opn(own, os.O_RDWR))\n"
    "check('other_read', lambda: opn(other, os.O_RDONLY))\n"
    "check('hidden_read', lambda: opn(hidden, os.O_RDONLY))\n"
    "check('mem_read', lambda: opn(mem, os.O_RDONLY))\n"
    "check('mem_write', lambda: opn(mem, os.O_RDWR))\n"
    "check('mem_chmod', lambda: os.chmod(mem, 0o666))\n"
    "print('uid', os.getuid(), os.getgid(), os.getgroups())\n"
    "print('net', os.readlink('/proc/self/ns/net'))\n"
    "print('ipc', os.readlink('/proc/self/ns/ipc'))\n"
    "sys.stdout.flush()\n";

static char dir[64];
static struct vm_jailer *jailer;

static int setup(void **state)
{
    char err[200];
    struct vm_jail_policy p = { .required = 1, .uid_base = UID_BASE, .uid_count = UID_COUNT };
    snprintf(dir, sizeof dir, "/tmp/vmjail-XXXXXX");
    if (!mkdtemp(dir) || !(jailer = vm_jailer_new(&p, err, sizeof err)))
        return -1;
    return 0;
}

static int teardown(void **state)
{
    vm_jailer_free(jailer);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

#define NEED_ROOT()                                                              \
    do {                                                                         \
        if (geteuid() != 0) {                                                    \
            fprintf(stderr, "SKIP: the jail needs root (namespaces, chown)\n"); \
            skip();                                                              \
        }                                                                        \
    } while (0)

/* A file at dir/name with content, owner and mode; its path in out. */
static void make_file(const char *name, uid_t uid, mode_t mode, char *out, size_t cap)
{
    snprintf(out, cap, "%s/%s", dir, name);
    int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "template bytes\n", 15), 15);
    close(fd);
    assert_int_equal(chown(out, uid, uid), 0);
    assert_int_equal(chmod(out, mode), 0);
}

static uid_t take_uid(struct vm *vm)
{
    char msg[200];
    memset(vm, 0, sizeof *vm);
    vm->cfg.jail.enabled = 1;
    vm->cfg.jail.jailer = jailer;
    vm->cfg.jail.uid = VM_JAIL_UID_AUTO;
    if (vm_jail_uid_acquire(vm, msg, sizeof msg) < 0)
        fail_msg("uid: %s", msg);
    assert_true(vm->cfg.jail.uid >= UID_BASE && vm->cfg.jail.uid < UID_BASE + UID_COUNT);
    assert_int_equal(vm->cfg.jail.gid, vm->cfg.jail.uid);
    return vm->cfg.jail.uid;
}

static int listen_tcp(int *port)
{
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t l = sizeof sa;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    assert_int_equal(listen(fd, 4), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &l), 0);
    *port = ntohs(sa.sin_port);
    /* control: the port answers from the host's namespace */
    int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_int_equal(connect(c, (struct sockaddr *)&sa, sizeof sa), 0);
    close(c);
    return fd;
}

static int listen_abstract(const char *name)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    memcpy(sa.sun_path + 1, name, strlen(name));
    socklen_t l = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + strlen(name));
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, l), 0);
    assert_int_equal(listen(fd, 4), 0);
    return fd;
}

/* The line of out that starts with "<name> ", or fails. */
static const char *line_of(const char *out, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = out; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        if (!strncmp(p, name, n) && p[n] == ' ')
            return p + n + 1;
    fail_msg("probe printed no `%s` line:\n%s", name, out);
    return NULL;
}

static void expect(const char *out, const char *name, const char *want)
{
    const char *got = line_of(out, name);
    if (strncmp(got, want, strlen(want)) != 0 || got[strlen(want)] != '\n')
        fail_msg("%s: want %s, got %.40s", name, want, got);
}

static void expect_refused(const char *out, const char *name)
{
    const char *got = line_of(out, name);
    if (!strncmp(got, "ok\n", 3))
        fail_msg("%s: the jailed probe succeeded", name);
}

static void test_probe_in_jail(void **state)
{
    NEED_ROOT();
    struct vm a, b;
    uid_t ua = take_uid(&a), ub = take_uid(&b);
    assert_int_not_equal(ua, ub);

    char own[128], other[128], hidden[128], mem[128], root[128], logp[128], port_s[16];
    char abstract[64], out[4096];
    make_file("own.qcow2", ua, 0600, own, sizeof own);
    make_file("other.qcow2", ub, 0600, other, sizeof other);
    make_file("hidden.qcow2", ub, 0600, hidden, sizeof hidden);
    make_file("mem", 0, 0600, mem, sizeof mem);
    assert_int_equal(vm_jail_freeze(mem), 0);
    struct stat st;
    assert_int_equal(stat(mem, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0444);
    snprintf(root, sizeof root, "%s/root", dir);
    assert_int_equal(mkdir(root, 0700), 0);
    snprintf(logp, sizeof logp, "%s/probe.log", dir);
    int port, lfd = listen_tcp(&port);
    snprintf(port_s, sizeof port_s, "%d", port);
    snprintf(abstract, sizeof abstract, "space-jail-probe-%d", (int)getpid());
    int afd = listen_abstract(abstract);
    int log_fd = open(logp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    assert_true(log_fd >= 0);

    char *argv[] = { "python3", "-c", (char *)probe, port_s, abstract, own, other, hidden,
                     mem, NULL };
    char *envp[] = { "PATH=/usr/bin:/bin", NULL };
    /* other.qcow2 is bound in on purpose (as if the mount namespace leaked it, even
     * writable): the uid alone must keep it closed. */
    struct vm_spawn s = { .argv = argv, .envp = envp, .log_fd = log_fd, .jail = &a.cfg.jail,
                          .jail_root = root, .cgroup_fds = { -1, -1, -1 },
                          .paths = { { own, 1 }, { other, 1 }, { mem, 0 } }, .n_paths = 3 };
    for (int i = 0; i < VM_FD_COUNT; i++)
        s.fds[i] = -1;
    pid_t pid;
    char err[300];
    if (vm_spawn(&s, &pid, err, sizeof err) != 0)
        fail_msg("spawn: %s", err);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    ssize_t n = pread(log_fd, out, sizeof out - 1, 0);
    assert_true(n > 0);
    out[n] = 0;
    fprintf(stderr, "probe:\n%s", out);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);

    expect_refused(out, "loopback");
    expect_refused(out, "metadata");
    expect_refused(out, "abstract");
    expect(out, "own_rw", "ok");
    expect(out, "other_read", "EACCES");
    expect(out, "hidden_read", "ENOENT");
    expect(out, "mem_read", "ok");
    expect_refused(out, "mem_write");
    expect_refused(out, "mem_chmod");
    char want[64];
    snprintf(want, sizeof want, "%u %u []", (unsigned)ua, (unsigned)ua);
    expect(out, "uid", want);
    char host[64];
    ssize_t hl = readlink("/proc/self/ns/net", host, sizeof host - 1);
    assert_true(hl > 0);
    host[hl] = 0;
    assert_string_not_equal(line_of(out, "net"), host);
    assert_true(strncmp(line_of(out, "net"), host, (size_t)hl) != 0);
    hl = readlink("/proc/self/ns/ipc", host, sizeof host - 1);
    assert_true(hl > 0);
    host[hl] = 0;
    assert_true(strncmp(line_of(out, "ipc"), host, (size_t)hl) != 0);
    /* the template RAM file is untouched */
    char buf[32] = "";
    int fd = open(mem, O_RDONLY | O_CLOEXEC);
    assert_int_equal(read(fd, buf, sizeof buf), 15);
    close(fd);
    assert_memory_equal(buf, "template bytes\n", 15);

    close(lfd);
    close(afd);
    close(log_fd);
    vm_jail_release(&a);
    vm_jail_release(&b);
}

/* The allocator never hands out a uid a live VM holds, and hands it again once freed. */
static void test_uids_distinct(void **state)
{
    static struct vm vms[UID_COUNT];
    char msg[200];
    for (unsigned i = 0; i < UID_COUNT; i++)
        take_uid(&vms[i]);
    for (unsigned i = 0; i < UID_COUNT; i++)
        for (unsigned j = i + 1; j < UID_COUNT; j++)
            assert_int_not_equal(vms[i].cfg.jail.uid, vms[j].cfg.jail.uid);
    struct vm extra;
    memset(&extra, 0, sizeof extra);
    extra.cfg.jail.enabled = 1;
    extra.cfg.jail.jailer = jailer;
    extra.cfg.jail.uid = VM_JAIL_UID_AUTO;
    assert_int_equal(vm_jail_uid_acquire(&extra, msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "in use"));
    uid_t freed = vms[7].cfg.jail.uid;
    vm_jail_release(&vms[7]);
    assert_int_equal(take_uid(&extra), freed);
    vm_jail_release(&extra);
    for (unsigned i = 0; i < UID_COUNT; i++)
        vm_jail_release(&vms[i]);
}

/* A jail that cannot be built fails the spawn as a jail error, nothing runs unjailed. */
static void test_jail_failure_is_an_error(void **state)
{
    NEED_ROOT();
    struct vm a;
    take_uid(&a);
    char root[128], err[300];
    snprintf(root, sizeof root, "%s/root2", dir);
    assert_int_equal(mkdir(root, 0700), 0);
    char *argv[] = { "true", NULL };
    char *envp[] = { "PATH=/usr/bin:/bin", NULL };
    struct vm_spawn s = { .argv = argv, .envp = envp, .log_fd = 2, .jail = &a.cfg.jail,
                          .jail_root = root, .cgroup_fds = { -1, -1, -1 },
                          .paths = { { "/nonexistent/disk.qcow2", 1 } }, .n_paths = 1 };
    for (int i = 0; i < VM_FD_COUNT; i++)
        s.fds[i] = -1;
    pid_t pid = 0;
    assert_int_equal(vm_spawn(&s, &pid, err, sizeof err), -2);
    assert_non_null(strstr(err, "jail"));
    assert_non_null(strstr(err, "/nonexistent/disk.qcow2"));
    vm_jail_release(&a);
}

/* Ranges that would include root or wrap are refused; two jailers keep separate books. */
static void test_policy_ranges(void **state)
{
    char err[200];
    struct vm_jail_policy p = { .uid_base = 0, .uid_count = 10 };
    assert_null(vm_jailer_new(&p, err, sizeof err));
    p.uid_base = 4294967000u;
    p.uid_count = 1000;
    assert_null(vm_jailer_new(&p, err, sizeof err));
    p.uid_base = 1000;
    p.uid_count = VM_JAIL_UIDS_MAX + 1;
    assert_null(vm_jailer_new(&p, err, sizeof err));
    p = (struct vm_jail_policy){ .required = 1, .uid_base = UID_BASE, .uid_count = UID_COUNT };
    struct vm_jailer *other = vm_jailer_new(&p, err, sizeof err);
    assert_non_null(other);
    assert_int_equal(vm_jailer_policy(other)->required, 1);
    assert_int_equal(vm_jailer_policy(NULL)->required, 0); /* no jailer: no policy */
    static struct vm all[UID_COUNT]; /* every uid of the range, held in `jailer` */
    for (unsigned i = 0; i < UID_COUNT; i++)
        take_uid(&all[i]);
    struct vm b;
    memset(&b, 0, sizeof b);
    b.cfg.jail = (struct vm_jail){ .enabled = 1, .jailer = other, .uid = VM_JAIL_UID_AUTO };
    char msg[200];
    assert_int_equal(vm_jail_uid_acquire(&b, msg, sizeof msg), 0); /* its own books */
    assert_int_equal(b.cfg.jail.uid, UID_BASE);
    vm_jail_release(&b);
    for (unsigned i = 0; i < UID_COUNT; i++)
        vm_jail_release(&all[i]);
    vm_jailer_free(other);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_probe_in_jail),
        cmocka_unit_test(test_uids_distinct),
        cmocka_unit_test(test_jail_failure_is_an_error),
        cmocka_unit_test(test_policy_ranges),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
