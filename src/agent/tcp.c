/* tcp.c: `tcp`: a TCP connection made inside the guest, carried as a byte channel.
 *
 * Host DATA IN is written to the socket, socket bytes go out as DATA OUT, each under
 * the channel's credits exactly like a process's stdin and stdout: the host is granted
 * IN bytes only once they are in the socket, and the socket is read only while the OUT
 * buffer has room, so a slow side stalls the other through TCP's own window and the
 * agent holds at most one window plus AGENT_TCP_BUF per connection. Half-closes travel
 * both ways: host EOF IN -> shutdown(SHUT_WR); the server's FIN -> EOF OUT. The channel
 * closes when both directions have ended (or on an error, after ERROR). */
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "agent/loop.h"
#include "agent/ops.h"
#include "agent/req.h"

#define AGENT_TCP_BUF (64 * 1024)  /* socket bytes read ahead of the host's credit */

struct tcp_fwd {
    struct agent_chan *ch;    /* our channel; NULL never (freed when it goes) */
    int fd;                   /* the connection (nonblocking), owned */
    struct agent_watch w;     /* interest follows the state below */
    bool connecting;          /* connect() in progress */
    struct agent_buf out;     /* read from the socket, not yet sent (<= AGENT_TCP_BUF) */
    struct agent_buf in;      /* from the host, not yet written to the socket */
    bool rd_eof;              /* the server sent FIN (or the read side failed) */
    bool out_eof_sent;        /* EOF OUT sent to the host */
    bool in_eof;              /* host sent EOF IN */
    bool wr_shut;             /* shutdown(SHUT_WR) done */
    bool hup;                 /* epoll said HUP: stop watching (level-triggered HUP would
                                 spin); what is left is read when the host makes room */
    char target[FRAME_TCP_HOST_MAX + 8]; /* "host:port" for messages */
};

static unsigned tcp_open_count; /* live forwards of this agent (FRAME_TCP_MAX) */

static void tcp_free(struct tcp_fwd *t)
{
    agent_loop_del(&t->w);
    close(t->fd);
    agent_buf_free(&t->out);
    agent_buf_free(&t->in);
    tcp_open_count--;
    free(t);
}

/* ERROR + CLOSE for a failed socket call, and the forward is gone. */
static void tcp_fail(struct tcp_fwd *t, int err, const char *what)
{
    struct agent_chan *ch = t->ch;
    const char *code = err == ECONNREFUSED ? FRAME_E_REFUSED
                       : err == ECONNRESET || err == EPIPE ? FRAME_E_RESET
                       : err == ENETUNREACH || err == EHOSTUNREACH || err == ETIMEDOUT
                           ? FRAME_E_UNREACHABLE
                           : agent_errno_code(err);
    agent_chan_error(ch, code, "%s %s: %s", what, t->target, strerror(err));
    tcp_free(t);
    agent_chan_close(ch);
}

static void tcp_watch(struct tcp_fwd *t)
{
    uint32_t ev = 0;
    if (t->hup)
        return agent_loop_del(&t->w);
    if (t->connecting || t->in.len)
        ev |= EPOLLOUT;
    if (!t->connecting && !t->rd_eof && t->out.len < AGENT_TCP_BUF)
        ev |= EPOLLIN;
    agent_loop_set(&t->w, ev);
}

/* Writes host bytes into the socket, granting them back as they go; shuts the write
 * side once the host's EOF has been reached. 0, or -1 after tcp_fail. */
static int tcp_flush_in(struct tcp_fwd *t)
{
    while (t->in.len) {
        ssize_t n = send(t->fd, agent_buf_peek(&t->in), t->in.len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return 0;
        if (n < 0) {
            tcp_fail(t, errno, "writing to");
            return -1;
        }
        agent_buf_drop(&t->in, (size_t)n);
        agent_chan_grant(t->ch, (uint32_t)n);
    }
    if (t->in_eof && !t->wr_shut) {
        t->wr_shut = true;
        shutdown(t->fd, SHUT_WR);
    }
    return 0;
}

/* Reads the socket into `out` while it has room. 0, or -1 after tcp_fail. */
static int tcp_fill_out(struct tcp_fwd *t)
{
    uint8_t tmp[AGENT_TCP_BUF];
    while (!t->rd_eof && t->out.len < AGENT_TCP_BUF) {
        ssize_t n = recv(t->fd, tmp, AGENT_TCP_BUF - t->out.len, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return 0;
        if (n < 0) {
            tcp_fail(t, errno, "reading from");
            return -1;
        }
        if (n == 0) {
            t->rd_eof = true;
            return 0;
        }
        if (agent_buf_add(&t->out, tmp, (size_t)n) < 0) {
            tcp_fail(t, ENOMEM, "buffering");
            return -1;
        }
    }
    return 0;
}

/* Moves everything that buffers, credit and sockets allow; ends the channel when both
 * directions are done. May free t. */
static void tcp_service(struct tcp_fwd *t)
{
    if (t->connecting)
        return tcp_watch(t);
    if (tcp_flush_in(t) < 0 || tcp_fill_out(t) < 0)
        return;
    size_t room;
    while (t->out.len && (room = agent_chan_room(t->ch, FRAME_STREAM_OUT)) > 0) {
        size_t n = t->out.len < room ? t->out.len : room;
        agent_chan_data(t->ch, FRAME_STREAM_OUT, agent_buf_peek(&t->out), n);
        agent_buf_drop(&t->out, n);
    }
    if (t->rd_eof && t->out.len == 0 && !t->out_eof_sent) {
        agent_chan_eof(t->ch, FRAME_STREAM_OUT);
        t->out_eof_sent = true;
    }
    if (t->out_eof_sent && t->wr_shut) {
        struct agent_chan *ch = t->ch;
        tcp_free(t);
        return agent_chan_close(ch);
    }
    tcp_watch(t);
}

static void tcp_connected(struct tcp_fwd *t)
{
    int err = 0;
    socklen_t len = sizeof err;
    if (getsockopt(t->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
        err = errno;
    if (err)
        return tcp_fail(t, err, "connecting to");
    t->connecting = false;
    agent_chan_event(t->ch, json_pack("{s:s}", "type", "connected"));
    tcp_service(t);
}

static void tcp_ready(struct agent_watch *w, uint32_t events)
{
    struct tcp_fwd *t = w->arg;
    if (t->connecting)
        return tcp_connected(t);
    if (events & (EPOLLHUP | EPOLLERR)) {
        int err = 0;
        socklen_t len = sizeof err;
        if (getsockopt(t->fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err)
            return tcp_fail(t, err, "connection to");
        t->hup = true;
    }
    tcp_service(t);
}

static void tcp_on_data(struct agent_chan *ch, const uint8_t *p, size_t n)
{
    struct tcp_fwd *t = ch->impl;
    if (t->wr_shut) {
        agent_chan_grant(ch, (uint32_t)n); /* cannot happen after EOF; keep flowing */
        return;
    }
    /* Bounded by the IN window: the host never has more than it in flight. */
    if (agent_buf_add(&t->in, p, n) < 0)
        return tcp_fail(t, ENOMEM, "buffering for");
    tcp_service(t);
}

static void tcp_on_eof(struct agent_chan *ch)
{
    struct tcp_fwd *t = ch->impl;
    t->in_eof = true;
    tcp_service(t);
}

static void tcp_on_writable(struct agent_chan *ch)
{
    tcp_service(ch->impl);
}

static void tcp_on_close(struct agent_chan *ch)
{
    tcp_free(ch->impl);
}

static const struct agent_chan_ops tcp_ops = {
    .on_data = tcp_on_data,
    .on_eof = tcp_on_eof,
    .on_writable = tcp_on_writable,
    .on_close = tcp_on_close,
};

void agent_op_tcp(struct agent_chan *ch, json_t *req)
{
    const char *host, *why;
    long long port;
    struct sockaddr_storage sa;
    unsigned salen = 0;
    if (agent_req_str(ch, req, "host", false, FRAME_TCP_HOST_DEFAULT, &host) < 0 ||
        agent_req_int(ch, req, "port", 0, 65535, 0, &port) < 0)
        return agent_chan_close(ch);
    if (frame_tcp_target(host, port, &sa, &salen, &why) < 0)
        return agent_chan_fail(ch, FRAME_E_INVALID_ARGUMENT, "tcp: %s", why);
    if (tcp_open_count >= FRAME_TCP_MAX)
        return agent_chan_fail(ch, FRAME_E_TOO_MANY, "%d tcp channels are open", FRAME_TCP_MAX);
    struct tcp_fwd *t = calloc(1, sizeof *t);
    if (!t)
        return agent_chan_fail(ch, FRAME_E_INTERNAL, "out of memory");
    if (strchr(host, ':'))
        snprintf(t->target, sizeof t->target, "[%s]:%lld", host, port);
    else
        snprintf(t->target, sizeof t->target, "%s:%lld", host, port);
    t->fd = socket(sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (t->fd < 0) {
        int e = errno;
        free(t);
        return agent_chan_fail_errno(ch, e, "socket");
    }
    tcp_open_count++;
    t->ch = ch;
    t->w = (struct agent_watch){.fd = t->fd, .fn = tcp_ready, .arg = t};
    ch->impl = t;
    ch->ops = &tcp_ops;
    t->connecting = true;
    if (connect(t->fd, (struct sockaddr *)&sa, salen) == 0)
        return tcp_connected(t);
    if (errno != EINPROGRESS)
        return tcp_fail(t, errno, "connecting to");
    tcp_watch(t);
}
