/* spawn_async.c: spawns on a thread per command, results back on the loop; see
 * spawn_async.h. */
#include "agent/spawn_async.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "agent/loop.h"
#include "agent/thread.h"
#include "log.h"

/* The thread's: agent_spawn_start's child stack (32 KiB) and its PATH buffer live on it. */
#define SPAWN_ASYNC_STACK (256 * 1024)
/* Unknown pids reaped while spawns are in flight: orphans reparented to PID 1 land here
 * too, so the oldest go first; a just-spawned child is among the newest. */
#define SPAWN_ASYNC_KEEP 256

struct agent_spawn_async {
    const struct agent_spawn *s;
    void (*prepare)(void *arg);
    agent_spawn_async_fn fn;
    void *arg;
    pid_t pid; /* the thread's result, read by the loop after the pipe said so */
    int err;
    enum agent_spawn_stage stage;
};

static int sa_pipe[2] = {-1, -1};   /* threads write finished jobs' pointers; the loop reads */
static struct agent_watch sa_watch; /* on sa_pipe[0] while spawns are in flight */
static unsigned sa_pending;
static struct {
    pid_t pid;
    int status;
} sa_reaped[SPAWN_ASYNC_KEEP];
static unsigned sa_nreaped;

static void *sa_main(void *arg)
{
    struct agent_spawn_async *j = arg;
    if (j->prepare)
        j->prepare(j->arg);
    j->pid = agent_spawn_start(j->s, &j->stage);
    j->err = errno;
    /* A pointer is 8 bytes: below PIPE_BUF, so written whole; the write blocks only if
     * 8192 results wait unread, and the loop reads them. */
    ssize_t n;
    do
        n = write(sa_pipe[1], &j, sizeof j);
    while (n < 0 && errno == EINTR);
    if (n != (ssize_t)sizeof j)
        log_error("agent.spawn_async", "result lost: errno=%d", errno);
    return NULL;
}

static void sa_ready(struct agent_watch *w, uint32_t events)
{
    struct agent_spawn_async *done[64];
    ssize_t n;
    while ((n = read(w->fd, done, sizeof done)) > 0) {
        for (size_t i = 0; i < (size_t)n / sizeof done[0]; i++) {
            struct agent_spawn_async *j = done[i];
            sa_pending--;
            j->fn(j->arg, j->pid, j->err, j->stage);
            free(j);
        }
    }
    if (sa_pending == 0) {
        agent_loop_del(&sa_watch);
        sa_nreaped = 0; /* no spawn left that could claim one */
    }
}

static int sa_init(void)
{
    if (sa_pipe[0] >= 0)
        return 0;
    if (pipe2(sa_pipe, O_CLOEXEC) < 0)
        return -1;
    fcntl(sa_pipe[0], F_SETFL, O_NONBLOCK);
    sa_watch = (struct agent_watch){.fd = sa_pipe[0], .fn = sa_ready};
    return 0;
}

int agent_spawn_async_start(const struct agent_spawn *s, void (*prepare)(void *arg),
                            agent_spawn_async_fn fn, void *arg)
{
    struct agent_spawn_async *j = NULL;
    if (sa_init() < 0 || agent_loop_set(&sa_watch, EPOLLIN) < 0 || !(j = malloc(sizeof *j)))
        goto fail;
    *j = (struct agent_spawn_async){.s = s, .prepare = prepare, .fn = fn, .arg = arg};
    if (agent_thread_start(sa_main, j, SPAWN_ASYNC_STACK) == 0) {
        sa_pending++;
        return 0;
    }
fail:;
    int e = errno;
    free(j);
    if (sa_pending == 0)
        agent_loop_del(&sa_watch);
    errno = e;
    return -1;
}

unsigned agent_spawn_async_pending(void)
{
    return sa_pending;
}

void agent_spawn_async_reaped(pid_t pid, int status)
{
    if (sa_pending == 0)
        return;
    if (sa_nreaped == SPAWN_ASYNC_KEEP) {
        memmove(sa_reaped, sa_reaped + 1, (SPAWN_ASYNC_KEEP - 1) * sizeof sa_reaped[0]);
        sa_nreaped--;
    }
    sa_reaped[sa_nreaped].pid = pid;
    sa_reaped[sa_nreaped].status = status;
    sa_nreaped++;
}

bool agent_spawn_async_claim(pid_t pid, int *status)
{
    for (unsigned i = 0; i < sa_nreaped; i++)
        if (sa_reaped[i].pid == pid) {
            *status = sa_reaped[i].status;
            memmove(sa_reaped + i, sa_reaped + i + 1, (sa_nreaped - i - 1) * sizeof sa_reaped[0]);
            sa_nreaped--;
            return true;
        }
    return false;
}
