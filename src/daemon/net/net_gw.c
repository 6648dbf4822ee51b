/* net_gw.c: spaced starts space-gateway, watches it, and restarts it when it dies.
 *
 * The gateway is started in its own session (a Ctrl-C meant for spaced does not take
 * the network down) and is left running when spaced stops: sandboxes outlive spaced,
 * and so must their network. Its pid is kept in <dir>/gateway.pid so the next spaced
 * adopts it (after checking that the pid still runs the same program) instead of
 * starting a second one. Death is noticed through a pidfd. A gateway that had served
 * for STABLE_MS is restarted at once (a crash of a working gateway costs its start-up
 * time, not a backoff: VM starts wait for it, sbx_gwwait.c); one that dies sooner, or
 * never answers, is restarted after a backoff from 200 ms to 10 s, so a gateway that
 * cannot start does not spin. Its control socket is polled every PING_EVERY_MS until
 * it answers. Each time a gateway answers its first ping, every sandbox's attach,
 * policy and credentials are sent again (net_gateway_resync, which starts net_resync.c's
 * walk on the loop: first what net_on_gateway_up registered, the tenants' rules, then
 * the sandboxes): the gateway keeps no state of its own across restarts. */
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "clock.h"
#include "daemon/net/net_internal.h"
#include "log.h"

#define GW_ARGS_MAX 40 /* our 5 + the caller's extra arguments */
#define BACKOFF_MIN_MS 200
#define BACKOFF_MAX_MS 10000
#define STABLE_MS 2000 /* served this long: its death is a crash, not a failed start */
#define PING_EVERY_MS 20 /* a refused connect on a local socket: cheap */
#define PING_TRIES 750   /* 15 s for a fresh gateway to open its control socket */

struct net_gw {
    struct net *n;
    struct event_base *base;
    char bin[PATH_MAX];          /* absolute path of space-gateway */
    char dir[PATH_MAX];          /* its --data-dir (CA, log, pid file) */
    char ctl[PATH_MAX + 32];     /* its control socket */
    char *argv[GW_ARGS_MAX + 1]; /* command line (strings owned, NULL-terminated) */
    size_t argc;                 /* entries of argv set (some NULL after a failed strdup) */
    pid_t pid;                   /* 0 when none */
    bool child;                  /* started by this spaced (we reap it) */
    int pidfd;                   /* -1 when none */
    struct event *pid_ev;        /* pidfd readable: the gateway is gone */
    struct event *timer;         /* restart backoff, then ping polling */
    int backoff_ms;
    int ping_left;               /* pings before giving up on a fresh gateway */
    bool up;                     /* answered a ping since it was (re)started */
    int64_t spawned_ms;          /* clock_mono_ms() of the last spawn (0: adopted) */
    int64_t up_ms;               /* of its first answered ping */
};

static void arm(struct net_gw *g, int ms)
{
    struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
    evtimer_add(g->timer, &tv);
}

static bool ping(struct net_gw *g)
{
    char err[128];
    json_t *req = json_pack("{s:s}", "op", "ping");
    json_t *rep = net_ctl_call(g->ctl, req, err, sizeof err);
    bool ok = json_is_true(json_object_get(rep, "ok"));
    json_decref(req);
    json_decref(rep);
    return ok;
}

static void on_exit_cb(evutil_socket_t fd, short what, void *arg);

static int watch(struct net_gw *g)
{
    g->pidfd = (int)syscall(SYS_pidfd_open, g->pid, 0);
    if (g->pidfd < 0)
        return -1;
    g->pid_ev = event_new(g->base, g->pidfd, EV_READ, on_exit_cb, g);
    if (!g->pid_ev || event_add(g->pid_ev, NULL) != 0)
        return -1;
    return 0;
}

static void unwatch(struct net_gw *g)
{
    if (g->pid_ev)
        event_free(g->pid_ev);
    g->pid_ev = NULL;
    if (g->pidfd >= 0)
        close(g->pidfd);
    g->pidfd = -1;
}

static void write_pid(struct net_gw *g)
{
    char path[PATH_MAX + 16], text[32];
    snprintf(path, sizeof path, "%s/gateway.pid", g->dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    int len = snprintf(text, sizeof text, "%d\n", (int)g->pid);
    if (fd < 0 || write(fd, text, (size_t)len) != len)
        log_warn("gateway.pidfile", "errno=%d", errno);
    if (fd >= 0)
        close(fd);
}

/* Starts the gateway; on failure the timer retries. */
static void spawn(struct net_gw *g)
{
    char logpath[PATH_MAX + 16];
    snprintf(logpath, sizeof logpath, "%s/gateway.log", g->dir);
    int logfd = open(logpath, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    pid_t pid = fork();
    if (pid == 0) {
        setsid();
        int nul = open("/dev/null", O_RDONLY);
        if (nul >= 0)
            dup2(nul, 0);
        if (logfd >= 0) {
            dup2(logfd, 1);
            dup2(logfd, 2);
        }
        closefrom(3);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        execv(g->bin, g->argv);
        _exit(127);
    }
    if (logfd >= 0)
        close(logfd);
    if (pid < 0 || (g->pid = pid, g->child = true, watch(g) != 0)) {
        log_error("gateway.spawn", "errno=%d", errno);
        if (pid > 0) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
        }
        g->pid = 0;
        unwatch(g);
        arm(g, g->backoff_ms);
        return;
    }
    write_pid(g);
    g->spawned_ms = clock_mono_ms();
    log_info("gateway.start", "pid=%d", (int)pid);
    g->ping_left = PING_TRIES;
    arm(g, PING_EVERY_MS);
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    struct net_gw *g = arg;
    if (!g->pid) {
        spawn(g);
        return;
    }
    if (g->up)
        return;
    if (ping(g)) {
        g->up = true;
        g->up_ms = clock_mono_ms();
        g->backoff_ms = BACKOFF_MIN_MS;
        log_info("gateway.up", "pid=%d start_ms=%lld", (int)g->pid,
                 (long long)(g->up_ms - g->spawned_ms));
        net_gateway_resync(g->n);
        return;
    }
    if (--g->ping_left > 0) {
        arm(g, PING_EVERY_MS);
        return;
    }
    /* Alive but never answering: kill it; the exit event restarts it. */
    log_error("gateway.unresponsive", "pid=%d", (int)g->pid);
    if (g->pidfd >= 0)
        syscall(SYS_pidfd_send_signal, g->pidfd, SIGKILL, NULL, 0);
}

static void on_exit_cb(evutil_socket_t fd, short what, void *arg)
{
    struct net_gw *g = arg;
    int status = 0;
    if (g->child)
        waitpid(g->pid, &status, 0);
    /* A gateway that served a while crashed: sandboxes wait for it, restart now. */
    bool stable = g->up && clock_mono_ms() - g->up_ms >= STABLE_MS;
    int delay = stable ? 0 : g->backoff_ms;
    log_error("gateway.exit", "pid=%d status=%d restart_in_ms=%d", (int)g->pid, status, delay);
    unwatch(g);
    g->pid = 0;
    g->up = false;
    evtimer_del(g->timer);
    arm(g, delay);
    if (stable)
        g->backoff_ms = BACKOFF_MIN_MS;
    else
        g->backoff_ms = g->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : g->backoff_ms * 2;
}

/* Adopts the gateway a previous spaced started, if its pid file names a live process
 * running our binary and it answers. */
static bool adopt(struct net_gw *g)
{
    char path[PATH_MAX + 16], exe[64], real[PATH_MAX];
    snprintf(path, sizeof path, "%s/gateway.pid", g->dir);
    FILE *f = fopen(path, "re");
    int pid = 0;
    if (!f)
        return false;
    if (fscanf(f, "%d", &pid) != 1 || pid <= 1) {
        fclose(f);
        return false;
    }
    fclose(f);
    snprintf(exe, sizeof exe, "/proc/%d/exe", pid);
    ssize_t n = readlink(exe, real, sizeof real - 1);
    if (n <= 0)
        return false;
    real[n] = 0;
    if (strcmp(real, g->bin) != 0 || !ping(g))
        return false;
    g->pid = pid;
    g->child = false;
    if (watch(g) != 0) {
        unwatch(g);
        g->pid = 0;
        return false;
    }
    g->up = true;
    g->up_ms = clock_mono_ms() - STABLE_MS; /* served before us */
    log_info("gateway.adopt", "pid=%d", pid);
    return true;
}

struct net_gw *net_gw_new(struct net *n, struct event_base *base, const char *bin,
                          const char *dir, const char *ctl, const char *const *extra,
                          char *err, size_t errlen)
{
    struct net_gw *g = calloc(1, sizeof *g);
    if (!g) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    g->n = n;
    g->base = base;
    g->pidfd = -1;
    g->backoff_ms = BACKOFF_MIN_MS;
    snprintf(g->dir, sizeof g->dir, "%s", dir);
    snprintf(g->ctl, sizeof g->ctl, "%s", ctl);
    if (!realpath(bin, g->bin)) {
        snprintf(err, errlen, "gateway program %s: %s", bin, strerror(errno));
        free(g);
        return NULL;
    }
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        snprintf(err, errlen, "mkdir %s: %s", dir, strerror(errno));
        free(g);
        return NULL;
    }
    const char *fixed[] = {g->bin, "--data-dir", g->dir, "--ctl", g->ctl};
    bool oom = false;
    for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++)
        oom |= !(g->argv[g->argc++] = strdup(fixed[i]));
    for (size_t i = 0; extra && extra[i]; i++) {
        if (g->argc >= GW_ARGS_MAX) {
            snprintf(err, errlen, "too many gateway arguments");
            net_gw_free(g);
            return NULL;
        }
        oom |= !(g->argv[g->argc++] = strdup(extra[i]));
    }
    g->timer = evtimer_new(base, on_timer, g);
    if (oom || !g->timer) {
        snprintf(err, errlen, "out of memory");
        net_gw_free(g);
        return NULL;
    }
    if (adopt(g))
        net_gateway_resync(n);
    else
        spawn(g);
    return g;
}

void net_gw_free(struct net_gw *g)
{
    if (!g)
        return;
    unwatch(g);
    if (g->timer)
        event_free(g->timer);
    for (size_t i = 0; i < g->argc; i++)
        free(g->argv[i]);
    free(g);
}

void net_gw_stop(struct net_gw *g)
{
    if (!g->pid || g->pidfd < 0)
        return;
    syscall(SYS_pidfd_send_signal, g->pidfd, SIGTERM, NULL, 0);
    struct pollfd p = {.fd = g->pidfd, .events = POLLIN};
    if (poll(&p, 1, 5000) != 1)
        syscall(SYS_pidfd_send_signal, g->pidfd, SIGKILL, NULL, 0);
    if (g->child)
        waitpid(g->pid, NULL, 0);
    char path[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/gateway.pid", g->dir);
    unlink(path);
    log_info("gateway.stop", "pid=%d", (int)g->pid);
    g->pid = 0;
}

bool net_gw_up(const struct net_gw *g)
{
    if (!g || !g->up || g->pidfd < 0)
        return false;
    /* Dead but not yet reaped by the loop (the exit event comes later in this turn or
     * the next): not up, so a VM start waits for the restart instead of failing. */
    struct pollfd p = {.fd = g->pidfd, .events = POLLIN};
    return poll(&p, 1, 0) == 0;
}
