/* relay.c: a thread per command pipe; see relay.h.
 *
 * Why: the agent's loop relays FUSE for mounted volumes (fuse_relay.c) and used to read
 * and write the commands' pipes too. A command that sendfile()s or splice()s a volume
 * file into its stdout pipe (busybox `cat /mnt/v/f`) makes the kernel hold that pipe's
 * mutex while the FUSE read waits for its reply; any read() of the pipe, nonblocking or
 * not, waits for that mutex, so a loop reading the pipe could never relay the reply:
 * the sandbox's agent hung (issue 12). The same holds the other way for a command that
 * splice()s its stdin pipe into a volume file while the agent writes that pipe. epoll
 * never takes the mutex; read() and write() do. So the pipes are read and written only
 * here, off the loop: a relay thread that waits on the mutex waits for the loop, which
 * stays free to relay the FUSE reply that ends the wait.
 *
 * Why this and not FUSE on its own thread: the loop blocked in read() could not pass a
 * FUSE request to the host or its reply back either, since the connection's frames,
 * credits and output queue belong to the loop; a FUSE thread would have to share all
 * of them under a lock. A relay thread shares nothing in memory with the loop: its only
 * link is a socket pair, which the loop polls and reads like the pipe it replaces. (The
 * command is not handed the socket itself: programs expect a pipe, e.g. opening
 * /dev/stdout fails on a socket.)
 *
 * Batching: each read the thread forwards becomes one frame to the host, and a frame
 * costs about the same whatever its size (under TCG ~1 ms: the guest's wakeups and the
 * virtio-serial kick), so a command writing 4 KiB at a time (coreutils' buffer) was
 * relayed at one frame per 4 KiB. While output flows (the last forward was under
 * RELAY_BURST_NS ago), the thread lets the pipe fill for RELAY_BATCH_NS before reading,
 * so one read takes what the command wrote meanwhile (up to RELAY_CHUNK, a frame's
 * payload). The first output after a pause goes at once: an interactive prompt or a
 * line of progress waits for nothing; a stream's later pieces wait at most
 * RELAY_BATCH_NS. Measured: docs/benchmarks.md "What shaped these numbers" (`head -c`,
 * 4 KiB writes, about 2x through the API under TCG).
 *
 * Bounds: the thread holds at most RELAY_CHUNK bytes and each socket end at most its
 * SO_SNDBUF, so when the loop stops reading (no credit from the host) the thread's
 * send blocks, it stops reading the pipe, and the command blocks on its full pipe as
 * before. Threads are started with every signal blocked (the loop takes SIGCHLD from a
 * signalfd) and a small stack, and touch nothing but their own descriptors, so fork()
 * from the loop stays safe. */
#include "agent/relay.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "agent/thread.h"
#include "clock.h"

#define RELAY_CHUNK (64 * 1024)          /* one read, one frame (FRAME_MAX_PAYLOAD) */
#define RELAY_STACK (64 * 1024)          /* the buffer is in struct relay, not here */
#define RELAY_BURST_NS (5 * 1000000LL)   /* output this soon after the last is a stream */
#define RELAY_BATCH_NS (1 * 1000000LL)   /* how long a stream's pipe fills before a read */

struct relay {
    int pipe_fd;              /* the command's pipe end (owned) */
    int sock_fd;              /* the thread's socket end (owned) */
    enum agent_relay_dir dir;
    uint8_t buf[RELAY_CHUNK];
};

/* Writes all of p to fd (a blocking one). false when fd fails (EPIPE: the reader left). */
static bool relay_write_all(int fd, const uint8_t *p, size_t n, bool sock)
{
    while (n) {
        ssize_t w = sock ? send(fd, p, n, MSG_NOSIGNAL) : write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        p += w;
        n -= (size_t)w;
    }
    return true;
}

/* FROM_CMD: waits for pipe bytes; once the loop ends or shuts its side (the process
 * exited, or the loop dropped the stream) forwards what the pipe holds and stops. */
static void relay_from_cmd(struct relay *r)
{
    bool draining = false;
    int64_t last_ns = 0; /* when the last bytes were forwarded; 0: never */
    for (;;) {
        if (!draining) {
            struct pollfd pf[2] = {{.fd = r->pipe_fd, .events = POLLIN},
                                   {.fd = r->sock_fd, .events = POLLIN}};
            if (poll(pf, 2, -1) < 0) {
                if (errno == EINTR)
                    continue;
                return;
            }
            draining = pf[1].revents != 0; /* EOF (shutdown/close) or error */
            if (!pf[0].revents && !draining)
                continue;
        }
        if (!draining && last_ns && clock_mono_ns() - last_ns < RELAY_BURST_NS) {
            struct timespec batch = {0, RELAY_BATCH_NS};
            nanosleep(&batch, NULL); /* a signal cuts it short: harmless */
        }
        /* The read may wait on the pipe's mutex (a sendfile into it waiting for FUSE):
         * the loop is free meanwhile and relays the reply that releases it. */
        ssize_t n = read(r->pipe_fd, r->buf, sizeof r->buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN && !draining)
            continue;
        if (n <= 0 || !relay_write_all(r->sock_fd, r->buf, (size_t)n, true))
            return;
        last_ns = clock_mono_ns();
    }
}

/* TO_CMD: forwards socket bytes to the pipe until the loop closes its end (EOF) or the
 * command closes the pipe's read end (POLLERR on our write end, or EPIPE). */
static void relay_to_cmd(struct relay *r)
{
    for (;;) {
        struct pollfd pf[2] = {{.fd = r->sock_fd, .events = POLLIN},
                               {.fd = r->pipe_fd, .events = 0}};
        if (poll(pf, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            return;
        }
        if (pf[1].revents)
            return;
        ssize_t n = recv(r->sock_fd, r->buf, sizeof r->buf, MSG_DONTWAIT);
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        /* May wait on the pipe's mutex (a splice from it waiting for FUSE), or for room. */
        if (n <= 0 || !relay_write_all(r->pipe_fd, r->buf, (size_t)n, false))
            return;
    }
}

static void *relay_main(void *arg)
{
    struct relay *r = arg;
    if (r->dir == AGENT_RELAY_FROM_CMD)
        relay_from_cmd(r);
    else
        relay_to_cmd(r);
    close(r->pipe_fd);
    close(r->sock_fd);
    free(r);
    return NULL;
}

int agent_relay_start(int pipe_fd, enum agent_relay_dir dir)
{
    int sv[2] = {-1, -1};
    struct relay *r = NULL;
    int e;
    /* The thread reads the pipe nonblocking (after poll) and writes it blocking. */
    int fl = fcntl(pipe_fd, F_GETFL);
    if (fl < 0 || fcntl(pipe_fd, F_SETFL, dir == AGENT_RELAY_FROM_CMD ? fl | O_NONBLOCK
                                                                       : fl & ~O_NONBLOCK) < 0)
        goto fail;
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
        goto fail;
    int sndbuf = AGENT_RELAY_SOCKBUF;
    for (int i = 0; i < 2; i++)
        setsockopt(sv[i], SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
    if (fcntl(sv[0], F_SETFL, O_NONBLOCK) < 0 || !(r = malloc(sizeof *r)))
        goto fail;
    r->pipe_fd = pipe_fd; /* not a compound literal: that would zero the buffer too */
    r->sock_fd = sv[1];
    r->dir = dir;
    if (agent_thread_start(relay_main, r, RELAY_STACK) == 0)
        return sv[0];
fail:
    e = errno;
    free(r);
    close(pipe_fd);
    for (int i = 0; i < 2; i++)
        if (sv[i] >= 0)
            close(sv[i]);
    errno = e;
    return -1;
}

void agent_relay_finish(int sock_fd)
{
    shutdown(sock_fd, SHUT_WR);
}
