/* serve.c: transports (fd, listening socket, virtio port) around agent_conn; see serve.h. */
#include "agent/serve.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <sys/un.h>
#include <unistd.h>

#include "agent/conn.h"
#include "agent/loop.h"
#include "agent/ops.h"
#include "agent/proc.h"
#include "agent/sys.h"
#include "log.h"

/* Bytes taken from the connection per wakeup: four full frames. */
#define SERVE_READ_MAX (4 * (FRAME_MAX_PAYLOAD + FRAME_HEADER_SIZE))

enum serve_mode { SERVE_FD, SERVE_SOCKET, SERVE_PORT };

static void serve_flush_now(void);

static const struct agent_conn_hooks serve_hooks = {
    .open = agent_ops_open,
    .hello = agent_sys_hello,
    .flush = serve_flush_now,
};

/* The one transport of this process. */
static struct {
    enum serve_mode mode;
    struct agent_conn *conn;      /* current connection (owned), NULL between hosts */
    struct agent_watch io;        /* the connection fd (owned) */
    bool closing;                 /* broken stream: flush what is queued, then drop */
    bool suspect;                 /* SERVE_PORT: saw a hang-up, re-checking in 50 ms */
    struct agent_watch listen;    /* SERVE_SOCKET: listening fd (owned) */
    struct agent_watch timer;     /* SERVE_PORT: reopen timer (owned timerfd) */
    const char *port;             /* SERVE_PORT: device path */
    struct agent_watch sig;       /* signalfd for SIGCHLD (owned) */
} sv;

/* Writes what the fd takes of the queued output: 0 when it is all written or the fd is
 * full, -1 when the write failed. */
static int serve_write_out(void)
{
    struct agent_buf *out = agent_conn_output(sv.conn);
    while (out->len) {
        ssize_t n = write(sv.io.fd, agent_buf_peek(out), out->len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return 0;
        if (n <= 0)
            return -1;
        agent_buf_drop(out, (size_t)n);
    }
    return 0;
}

/* The conn's flush hook (the HELLO's answer, from inside agent_conn_input): writes what
 * the fd takes now and nothing else; a failed write is left to serve_flush, which may
 * drop the connection (not allowed from in here). */
static void serve_flush_now(void)
{
    if (sv.conn && !sv.suspect && !sv.closing)
        serve_write_out();
}

static void serve_io(struct agent_watch *w, uint32_t events);

static void serve_arm_reopen(void)
{
    struct itimerspec its = {.it_value = {.tv_nsec = 50 * 1000000}};
    timerfd_settime(sv.timer.fd, 0, &its, NULL);
}

static void serve_start_conn(int fd)
{
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    fcntl(fd, F_SETFD, FD_CLOEXEC);
    sv.conn = agent_conn_new(&serve_hooks);
    sv.closing = false;
    sv.suspect = false;
    sv.io = (struct agent_watch){.fd = fd, .fn = serve_io};
    if (!sv.conn || agent_loop_set(&sv.io, EPOLLIN) < 0) {
        log_error("agent.conn_setup", "errno=%d", errno);
        agent_conn_free(sv.conn);
        sv.conn = NULL;
        close(fd);
        sv.io.fd = -1;
        if (sv.mode == SERVE_PORT)
            serve_arm_reopen();
    }
}

/* The host is gone: processes detach, transfers and watches end. */
static void serve_drop_conn(void)
{
    if (!sv.conn)
        return;
    agent_conn_free(sv.conn);
    sv.conn = NULL;
    agent_loop_del(&sv.io);
    /* The virtio port stays open: closing it would make the guest kernel discard what
     * a quickly reconnecting host has already sent (its HELLO). */
    if (sv.mode != SERVE_PORT) {
        close(sv.io.fd);
        sv.io.fd = -1;
    }
    log_info("agent.disconnected", NULL);
    if (sv.mode == SERVE_FD)
        agent_loop_stop();
    else if (sv.mode == SERVE_SOCKET)
        agent_loop_set(&sv.listen, EPOLLIN);
    else
        serve_arm_reopen();
}

/* The peer seems gone. A virtio port can report a hang-up for a moment right after a
 * host connects (the guest learns "host connected" on the control queue, which may lag
 * the first data), so there it is only suspected: the port goes quiet and
 * serve_reopen looks again in 50 ms before the session is dropped. */
static void serve_lost(void)
{
    if (sv.mode != SERVE_PORT)
        return serve_drop_conn();
    if (sv.suspect)
        return;
    sv.suspect = true;
    agent_loop_set(&sv.io, 0);
    serve_arm_reopen();
}

/* Writes queued output; keeps EPOLLOUT interest while some remains. */
static void serve_flush(void)
{
    if (!sv.conn || sv.suspect)
        return;
    struct agent_buf *out = agent_conn_output(sv.conn);
    if (serve_write_out() < 0)
        return serve_lost();
    if (sv.closing && out->len == 0)
        return serve_drop_conn();
    if (!sv.suspect)
        agent_loop_set(&sv.io, (sv.closing ? 0 : EPOLLIN) | (out->len ? EPOLLOUT : 0));
    /* Producers paused on a full queue resume here (may queue more, flushed next batch). */
    agent_conn_wrote(sv.conn);
}

static void serve_io(struct agent_watch *w, uint32_t events)
{
    if ((events & EPOLLIN) && !sv.closing) {
        /* A virtio-serial read returns at most one of the port's page-sized buffers:
         * read on until the buffer is full or the port is empty, so a 64 KiB frame
         * costs one wakeup and one parse instead of sixteen (under TCG each is dear). */
        uint8_t buf[SERVE_READ_MAX];
        size_t got = 0;
        ssize_t n;
        do {
            n = read(w->fd, buf + got, sizeof buf - got);
            if (n > 0)
                got += (size_t)n;
        } while (n > 0 && got < sizeof buf);
        if (got == 0 && (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)))
            return serve_lost();
        /* An end or error after some bytes: those are taken first, the next wakeup
         * (level-triggered) sees the end again. */
        if (got > 0 && agent_conn_input(sv.conn, buf, got) < 0) {
            log_warn("agent.protocol_error", "action=drop_connection");
            sv.closing = true;
        }
        return;
    }
    if (events & (EPOLLHUP | EPOLLERR)) {
        /* Virtio-serial reports HUP while no host is connected; a socket peer that
         * closed also gets here once its last bytes were read. */
        return serve_lost();
    }
}

static void serve_accept(struct agent_watch *w, uint32_t events)
{
    int fd = accept4(w->fd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0)
        return;
    agent_loop_set(&sv.listen, 0); /* one host at a time */
    serve_start_conn(fd);
}

/* SERVE_PORT timer: opens the port once, then checks whether a host is connected (no
 * POLLHUP, or data waiting). With a suspected session: resume it, or drop it if the
 * host is really gone. Without one: start a session, or look again in 50 ms. */
static void serve_reopen(struct agent_watch *w, uint32_t events)
{
    uint64_t ticks;
    if (read(w->fd, &ticks, sizeof ticks) < 0 && errno == EAGAIN)
        return;
    if (sv.io.fd < 0)
        sv.io.fd = open(sv.port, O_RDWR | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (sv.io.fd < 0)
        return serve_arm_reopen();
    struct pollfd p = {.fd = sv.io.fd, .events = POLLIN};
    bool gone = poll(&p, 1, 0) == 1 && (p.revents & POLLHUP) && !(p.revents & POLLIN);
    if (sv.conn) {
        sv.suspect = false;
        if (gone)
            return serve_drop_conn();
        agent_loop_set(&sv.io, EPOLLIN | (agent_conn_output(sv.conn)->len ? EPOLLOUT : 0));
        return;
    }
    if (gone)
        return serve_arm_reopen(); /* host not there yet */
    log_info("agent.connected", NULL);
    serve_start_conn(sv.io.fd);
}

static void serve_signal(struct agent_watch *w, uint32_t events)
{
    struct signalfd_siginfo si;
    while (read(w->fd, &si, sizeof si) == (ssize_t)sizeof si) {
    }
    agent_proc_reap();
}

/* Sets up the loop and signals, starts the transport (setup: a connected fd for
 * SERVE_FD), runs, and tears down. */
static int serve_run(int fd)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    sigprocmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    if (agent_loop_init() < 0)
        return -1;
    sv.sig = (struct agent_watch){.fd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC),
                                  .fn = serve_signal};
    int rc = sv.sig.fd < 0 ? -1 : agent_loop_set(&sv.sig, EPOLLIN);
    if (rc == 0 && sv.mode == SERVE_FD)
        serve_start_conn(fd);
    else if (rc == 0 && sv.mode == SERVE_SOCKET)
        rc = agent_loop_set(&sv.listen, EPOLLIN);
    else if (rc == 0 && (rc = agent_loop_set(&sv.timer, EPOLLIN)) == 0)
        serve_arm_reopen();
    if (rc == 0) {
        agent_loop_on_batch(serve_flush);
        agent_proc_reap(); /* children that exited before the signalfd existed */
        rc = agent_loop_run();
    }
    /* Shutdown: give the host its answer before we stop (bounded wait). */
    if (sv.conn) {
        struct agent_buf *out = agent_conn_output(sv.conn);
        while (out->len) {
            struct pollfd p = {.fd = sv.io.fd, .events = POLLOUT};
            ssize_t n = poll(&p, 1, 1000) == 1 ? write(sv.io.fd, agent_buf_peek(out), out->len) : -1;
            if (n <= 0 && !(n < 0 && errno == EAGAIN))
                break;
            if (n > 0)
                agent_buf_drop(out, (size_t)n);
        }
        sv.mode = SERVE_FD; /* no reconnect while stopping */
        serve_drop_conn();
    }
    agent_loop_on_batch(NULL);
    struct agent_watch *owned[] = {&sv.sig, &sv.listen, &sv.timer, &sv.io};
    for (size_t i = 0; i < 4; i++)
        if (owned[i]->fd >= 0) {
            agent_loop_del(owned[i]);
            close(owned[i]->fd);
        }
    agent_loop_fini();
    return rc;
}

static void serve_reset(enum serve_mode mode)
{
    memset(&sv, 0, sizeof sv);
    sv.mode = mode;
    sv.io.fd = sv.listen.fd = sv.timer.fd = sv.sig.fd = -1;
}

int agent_serve_fd(int fd)
{
    serve_reset(SERVE_FD);
    return serve_run(fd);
}

int agent_serve_socket(const char *path)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof a.sun_path) {
        errno = ENAMETOOLONG;
        return -1;
    }
    strcpy(a.sun_path, path);
    serve_reset(SERVE_SOCKET);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    unlink(path);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(fd, 4) < 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        errno = e;
        return -1;
    }
    sv.listen = (struct agent_watch){.fd = fd, .fn = serve_accept};
    return serve_run(-1);
}

int agent_serve_port(const char *dev)
{
    serve_reset(SERVE_PORT);
    sv.port = dev;
    sv.timer = (struct agent_watch){.fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC),
                                    .fn = serve_reopen};
    if (sv.timer.fd < 0)
        return -1;
    return serve_run(-1);
}
