/* vm_spawn: fork + (jail) + exec of QEMU, see vm_spawn.h.
 *
 * Between fork and exec the child only makes system calls (no allocation, no stdio):
 * spaced may have other threads (sanitizer runtimes) holding locks. */
#include "vm_spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/capability.h>
#include <linux/close_range.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

/* First byte of a child's error report: the jail (VM_E_JAIL) or the start itself. */
#define FAIL_JAIL 'J'
#define FAIL_START 'S'

/* Reports "<kind><what>: <strerror>" to the parent and exits the child. */
static void child_fail_kind(int errfd, char kind, const char *what)
{
    char buf[256];
    int e = errno;
    size_t n = 1, w = strlen(what);
    buf[0] = kind;
    const char *es = strerrordesc_np(e); /* static string: safe after fork */
    if (!es)
        es = "unknown error";
    if (w > 180)
        w = 180;
    memcpy(buf + n, what, w);
    n += w;
    buf[n++] = ':';
    buf[n++] = ' ';
    size_t el = strlen(es);
    if (el > sizeof(buf) - n - 1)
        el = sizeof(buf) - n - 1;
    memcpy(buf + n, es, el);
    n += el;
    if (write(errfd, buf, n) < 0) {
        /* nothing more can be done: the parent sees a failed start without message */
    }
    _exit(127);
}

static void child_fail(int errfd, const char *what) { child_fail_kind(errfd, FAIL_START, what); }

/* Builds root+path into out without allocating. */
static int join(char *out, size_t cap, const char *root, const char *path)
{
    int n = snprintf(out, cap, "%s%s", root, path);
    return n < 0 || (size_t)n >= cap ? -1 : 0;
}

/* mkdir -p for every directory component of `path` (which lies under the jail root). */
static int mkdirs(char *path)
{
    for (char *p = path + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = 0;
        int r = mkdir(path, 0755);
        *p = '/';
        if (r < 0 && errno != EEXIST)
            return -1;
    }
    return 0;
}

/* Bind-mounts host `src` at the same path under root, read-only unless writable. */
static int bind_into(const char *root, const char *src, int writable)
{
    char dst[4096];
    struct stat st;
    if (stat(src, &st) < 0 || join(dst, sizeof(dst), root, src) < 0 || mkdirs(dst) < 0)
        return -1;
    if (S_ISDIR(st.st_mode)) {
        if (mkdir(dst, 0755) < 0 && errno != EEXIST)
            return -1;
    } else {
        int fd = open(dst, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
        if (fd < 0)
            return -1;
        close(fd);
    }
    if (mount(src, dst, NULL, MS_BIND | MS_REC, NULL) < 0)
        return -1;
    if (!writable &&
        mount(NULL, dst, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) < 0)
        return -1;
    return 0;
}

/* Recreates a top-level entry (/lib, /bin, ...) inside the jail: symlinks as symlinks
 * (merged /usr), directories as read-only binds. Absent entries are skipped. */
static int mirror_top(const char *root, const char *top)
{
    struct stat st;
    char dst[4096], link[4096];
    if (lstat(top, &st) < 0)
        return 0;
    if (S_ISLNK(st.st_mode)) {
        ssize_t n = readlink(top, link, sizeof(link) - 1);
        if (n < 0 || join(dst, sizeof(dst), root, top) < 0)
            return -1;
        link[n] = 0;
        return symlink(link, dst);
    }
    return bind_into(root, top, 0);
}

static void jail_fail(int errfd, const char *what) { child_fail_kind(errfd, FAIL_JAIL, what); }

/* Before the uid switch: every capability but `keep` leaves the bounding set, and the
 * permitted set survives the switch (PR_SET_KEEPCAPS). */
static int keep_caps_before(unsigned long long keep)
{
    for (int c = 0; c <= CAP_LAST_CAP; c++)
        if (!(keep & (1ULL << c)) && prctl(PR_CAPBSET_DROP, c, 0, 0, 0) < 0 && errno != EINVAL)
            return -1;
    return prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0);
}

/* After the uid switch: `keep` becomes permitted, effective, inheritable and ambient (so
 * the exec'd program holds exactly those, nothing else). */
static int keep_caps_after(unsigned long long keep)
{
    struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
    struct __user_cap_data_struct d[2] = {{0}};
    d[0].permitted = d[0].effective = d[0].inheritable = (uint32_t)keep;
    d[1].permitted = d[1].effective = d[1].inheritable = (uint32_t)(keep >> 32);
    if (syscall(SYS_capset, &h, d) < 0)
        return -1;
    for (int c = 0; c <= CAP_LAST_CAP; c++)
        if ((keep & (1ULL << c)) && prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, c, 0, 0) < 0)
            return -1;
    return 0;
}

static void jail_child(const struct vm_spawn *s, int errfd)
{
    const char *root = s->jail_root;
    static const char *const tops[] = { "/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin" };
    static const char *const devs[] = { "/dev/null", "/dev/zero", "/dev/urandom", "/dev/random" };
    char p[4096];

    for (int i = 0; i < 3; i++)
        if (s->cgroup_fds[i] >= 0 && write(s->cgroup_fds[i], "0", 1) != 1)
            jail_fail(errfd, "join cgroup");
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
        jail_fail(errfd, "make mounts private");
    if (mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=755") < 0)
        jail_fail(errfd, "mount jail root");
    for (size_t i = 0; i < sizeof(tops) / sizeof(tops[0]); i++)
        if (mirror_top(root, tops[i]) < 0)
            jail_fail(errfd, tops[i]);
    if (access("/etc/ld.so.cache", R_OK) == 0 && bind_into(root, "/etc/ld.so.cache", 0) < 0)
        jail_fail(errfd, "/etc/ld.so.cache");
    if (join(p, sizeof(p), root, "/dev") < 0 || mkdir(p, 0755) < 0 ||
        mount("tmpfs", p, "tmpfs", MS_NOSUID | MS_NOEXEC, "size=64k,mode=755") < 0)
        jail_fail(errfd, "mount jail /dev");
    for (size_t i = 0; i < sizeof(devs) / sizeof(devs[0]); i++)
        if (bind_into(root, devs[i], 1) < 0)
            jail_fail(errfd, devs[i]);
    if (s->need_kvm && bind_into(root, "/dev/kvm", 1) < 0)
        jail_fail(errfd, "/dev/kvm");
    if (join(p, sizeof(p), root, "/proc") < 0 || mkdir(p, 0555) < 0 ||
        mount("proc", p, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
        jail_fail(errfd, "mount jail /proc");
    for (unsigned i = 0; i < s->n_paths; i++)
        if (bind_into(root, s->paths[i].path, s->paths[i].writable) < 0)
            jail_fail(errfd, s->paths[i].path);
    if (join(p, sizeof(p), root, "/.old") < 0 || mkdir(p, 0700) < 0 ||
        syscall(SYS_pivot_root, root, p) < 0 || chdir("/") < 0 ||
        umount2("/.old", MNT_DETACH) < 0 || rmdir("/.old") < 0)
        jail_fail(errfd, "pivot_root into jail");
    if (mount(NULL, "/", NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) < 0)
        jail_fail(errfd, "remount jail root read-only");
    if (s->keep_caps && keep_caps_before(s->keep_caps) < 0)
        jail_fail(errfd, "capability bounding set");
    if (setgroups(0, NULL) < 0 || setresgid(s->jail->gid, s->jail->gid, s->jail->gid) < 0 ||
        setresuid(s->jail->uid, s->jail->uid, s->jail->uid) < 0)
        jail_fail(errfd, "drop privileges");
    if (s->keep_caps && keep_caps_after(s->keep_caps) < 0)
        jail_fail(errfd, "ambient capabilities");
}

/* Installs s->fds at their fixed numbers. Sources are first moved above VM_FD_COUNT so
 * that installing one never overwrites another that is still to be installed. */
static void child_fds(const struct vm_spawn *s, int errfd)
{
    int high[VM_FD_COUNT];
    for (int i = 0; i < VM_FD_COUNT; i++) {
        high[i] = -1;
        if (i >= VM_FD_QMP && s->fds[i] >= 0 &&
            (high[i] = fcntl(s->fds[i], F_DUPFD_CLOEXEC, 64)) < 0)
            child_fail(errfd, "dup descriptor");
    }
    int nullfd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (nullfd < 0 || dup2(s->serve_fd > 0 ? s->serve_fd : nullfd, 0) < 0 || dup2(s->log_fd, 1) < 0 || dup2(s->log_fd, 2) < 0)
        child_fail(errfd, "stdio");
    for (int i = VM_FD_QMP; i < VM_FD_COUNT; i++) {
        if (high[i] < 0) {
            close(i); /* whatever spaced had at this number is not QEMU's */
            continue;
        }
        if (dup2(high[i], i) < 0) /* dup2 clears close-on-exec on the new number */
            child_fail(errfd, "install descriptor");
    }
}

int vm_spawn(const struct vm_spawn *s, pid_t *pid, char *err, size_t errlen)
{
    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC) < 0) {
        snprintf(err, errlen, "pipe: %s", strerror(errno));
        return -1;
    }
    unsigned long flags = SIGCHLD;
    if (s->jail && s->jail->enabled)
        flags |= CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC;
    /* Raw clone: like fork, but the child is born in its own mount, PID, network and IPC
     * namespaces (QEMU is PID 1 there, sees no other process, no host network: the tap
     * descriptor it inherits stays attached to its device in the sandbox's namespace). */
    pid_t c = (pid_t)syscall(SYS_clone, flags, NULL, NULL, NULL, NULL);
    if (c < 0) {
        snprintf(err, errlen, "clone: %s", strerror(errno));
        close(pfd[0]);
        close(pfd[1]);
        return -1;
    }
    if (c == 0) {
        close(pfd[0]);
        int efd = fcntl(pfd[1], F_DUPFD_CLOEXEC, 64);
        if (efd < 0)
            efd = pfd[1];
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        signal(SIGPIPE, SIG_DFL);
        setsid();
        child_fds(s, efd);
        /* Nothing of spaced's (API sockets, other sandboxes' descriptors) may leak into
         * QEMU: everything above the fixed numbers closes at exec. */
        if (syscall(SYS_close_range, VM_FD_COUNT, ~0U, CLOSE_RANGE_CLOEXEC) < 0)
            child_fail(efd, "close_range");
        if (s->jail && s->jail->enabled) {
            jail_child(s, efd);
            if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
                jail_fail(efd, "no_new_privs");
        }
        /* QEMU asks for huge pages (MADV_HUGEPAGE) for TCG's translation cache and some of
         * its own buffers, so each touched 2 MiB becomes resident whole: an idle TCG clone
         * holds ~4 MiB more (docs/benchmarks.md "Memory per idle clone"). The setting
         * survives exec. Not under KVM, where huge pages back guest RAM with fewer
         * page-table walks. */
        if (s->no_thp && prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0) < 0)
            child_fail(efd, "PR_SET_THP_DISABLE");
        execvpe(s->argv[0], s->argv, s->envp);
        child_fail(efd, s->argv[0]);
    }
    close(pfd[1]);
    char buf[300];
    ssize_t n;
    do
        n = read(pfd[0], buf, sizeof(buf) - 1);
    while (n < 0 && errno == EINTR);
    close(pfd[0]);
    if (n > 0) {
        buf[n] = 0;
        int jail = buf[0] == FAIL_JAIL;
        snprintf(err, errlen, "%s: %s", jail ? "QEMU jail setup failed" : "QEMU start failed",
                 n > 1 ? buf + 1 : "?");
        waitpid(c, NULL, 0);
        return jail ? -2 : -1;
    }
    *pid = c;
    return 0;
}

int vm_pidfd_open(pid_t pid)
{
#ifdef SYS_pidfd_open
    return (int)syscall(SYS_pidfd_open, pid, 0);
#else
    errno = ENOSYS;
    return -1;
#endif
}

unsigned long long vm_proc_starttime(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = 0;
    /* comm (field 2) may contain spaces and parentheses: fields restart after the last ')'. */
    char *p = strrchr(buf, ')');
    if (!p)
        return 0;
    p++;
    for (int field = 2; field < 21 && p; field++)
        p = strchr(p + 1, ' ');
    return p ? strtoull(p + 1, NULL, 10) : 0;
}
