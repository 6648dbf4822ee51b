/* spawn_probe: what starting one process costs where this runs (host or guest).
 *
 * bench/bench_spawn.py builds it statically (it must run in any template, whatever libc
 * the guest has), runs it on the host and inside a sandbox, and prints the two side by
 * side. A command's round trip through spaced is the agent's round trip plus one spawn
 * plus the exit path; this isolates the spawn, the part the accelerator (TCG or KVM)
 * scales and spaced cannot.
 *
 * Each way of spawning runs N times (after 3 unmeasured warm-ups) and reports its p50
 * and p95 in milliseconds, from spawn call to the child reaped:
 *   fork_exec_true     fork() + execve("/bin/true")
 *   vfork_exec_true    vfork() + execve("/bin/true")   (the agent's way since clone(VFORK))
 *   vfork_exec_sh      vfork() + execve("/bin/sh -c true") (what `run("true")` starts)
 *   pipes              the agent's per-command descriptors alone: 3 pipes + 1 socketpair
 * Output: one JSON object on stdout.  Usage: spawn_probe [N]   (N 1..10000, default 30) */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define WARMUP 3

static char *const true_argv[] = {"/bin/true", NULL};
static char *const sh_argv[] = {"/bin/sh", "-c", "true", NULL};
static char *const no_env[] = {"PATH=/usr/bin:/bin", NULL};

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int reap(pid_t pid)
{
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return -1;
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

static int spawn_fork(char *const *argv)
{
    pid_t pid = fork();
    if (pid == 0) {
        execve(argv[0], argv, no_env);
        _exit(127);
    }
    return pid < 0 ? -1 : reap(pid);
}

static int spawn_vfork(char *const *argv)
{
    pid_t pid = vfork();
    if (pid == 0) {
        execve(argv[0], argv, no_env);
        _exit(127);
    }
    return pid < 0 ? -1 : reap(pid);
}

static int fork_true(void) { return spawn_fork(true_argv); }
static int vfork_true(void) { return spawn_vfork(true_argv); }
static int vfork_sh(void) { return spawn_vfork(sh_argv); }

static int pipes(void)
{
    int p[3][2], s[2];
    for (int i = 0; i < 3; i++)
        if (pipe2(p[i], O_CLOEXEC) < 0)
            return -1;
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, s) < 0)
        return -1;
    for (int i = 0; i < 3; i++)
        close(p[i][0]), close(p[i][1]);
    close(s[0]);
    close(s[1]);
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Runs fn WARMUP + n times; prints `"name": {"p50": .., "p95": ..}`. -1 if one failed. */
static int measure(const char *name, int (*fn)(void), int n, double *t, int last)
{
    for (int i = 0; i < WARMUP; i++)
        if (fn() < 0)
            return -1;
    for (int i = 0; i < n; i++) {
        double t0 = now_ms();
        if (fn() < 0)
            return -1;
        t[i] = now_ms() - t0;
    }
    qsort(t, n, sizeof *t, cmp_double);
    printf("\"%s\": {\"p50\": %.3f, \"p95\": %.3f}%s", name, t[(n - 1) / 2],
           t[(int)((n - 1) * 0.95 + 0.5)], last ? "" : ", ");
    return 0;
}

int main(int argc, char **argv)
{
    char *end = NULL;
    long n = argc > 1 ? strtol(argv[1], &end, 10) : 30;
    if ((argc > 1 && (*end || end == argv[1])) || n < 1 || n > 10000) {
        fprintf(stderr, "usage: spawn_probe [N]   (N spawns per way, 1..10000)\n");
        return 2;
    }
    double *t = malloc(n * sizeof *t);
    if (!t)
        return 1;
    static const struct {
        const char *name;
        int (*fn)(void);
    } ways[] = {{"fork_exec_true", fork_true}, {"vfork_exec_true", vfork_true},
                {"vfork_exec_sh", vfork_sh},   {"pipes", pipes}};
    size_t nw = sizeof ways / sizeof *ways;
    printf("{\"n\": %ld, ", n);
    for (size_t i = 0; i < nw; i++)
        if (measure(ways[i].name, ways[i].fn, n, t, i + 1 == nw) < 0) {
            fprintf(stderr, "\nspawn_probe: %s failed: %s\n", ways[i].name, strerror(errno));
            return 1;
        }
    printf("}\n");
    free(t);
    return 0;
}
