/* proc.c: a process from its start on: I/O under credits, signals, attach, ps, reaping;
 * see proc.h (exec.c starts it). */
#include "agent/proc.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include "agent/loop.h"
#include "agent/ops.h"
#include "agent/relay.h"
#include "agent/req.h"
#include "agent/spawn_async.h"
#include "log.h"

struct proc;

/* One output stream of a process (OUT, or ERR for pipes). */
struct proc_out {
    struct proc *p;          /* owner */
    enum frame_stream id;    /* FRAME_STREAM_OUT or FRAME_STREAM_ERR */
    int fd;                  /* a relay socket (relay.h) or the PTY master, -1 once ended */
    bool relayed;            /* fd is a relay socket (pipes; a PTY is read directly) */
    bool finish_sent;        /* relayed: agent_relay_finish told it the process exited */
    struct agent_watch w;    /* EPOLLIN while there is room in buf */
    struct agent_buf buf;    /* read, not yet sent (<= AGENT_PROC_OUTBUF) */
    bool ended;              /* no more bytes will come from fd */
    bool eof_sent;           /* EOF frame sent on the current channel */
};

struct proc {
    pid_t pid;
    json_t *info;            /* what `ps` shows (owned) */
    bool pty;
    int in_fd;               /* stdin: a relay socket (PTY: a dup of the master), -1 if none */
    struct agent_watch in_w; /* EPOLLOUT while in_buf has bytes */
    struct agent_buf in_buf; /* stdin accepted from the host, not yet written */
    bool in_eof;             /* host closed stdin: finish after in_buf */
    struct proc_out out[2];  /* [0] OUT, [1] ERR (unused with a PTY) */
    bool starting;           /* its spawn is in flight (spawn_async.h): no pid yet */
    bool unconfirmed;        /* exec "confirm": killed if its channel ends before the
                              * host's CTRL confirm (proc_orphan_kill) */
    bool ws_pending;         /* a resize came while starting: applied once the pty is ours */
    struct winsize ws;       /* that size */
    bool exited;
    int status;              /* waitpid status once exited */
    struct agent_chan *chan; /* attached channel, NULL when detached */
    struct proc *next;       /* proc_list */
};

static struct proc *proc_list;   /* every process (owned) */
static json_t *proc_env;         /* sandbox default env (owned), may be NULL */

static void proc_service(struct proc *p);

/* An exec with "confirm" whose channel ended before the host confirmed it: the host
 * never recorded its pid (the "started" event may have been lost with the connection,
 * or the host restarted before storing it), so nobody could reach it again. Killed,
 * with its process group, as the `signal` op's default would. */
static void proc_orphan_kill(struct proc *p)
{
    if (!p->unconfirmed || p->starting || p->exited || p->chan)
        return;
    log_info("agent.orphan_kill", "pid=%d", (int)p->pid);
    kill(-p->pid, SIGKILL);
    p->unconfirmed = false;
}

/* ---- lifetime ---- */

static void proc_out_close(struct proc_out *o)
{
    if (o->fd >= 0) {
        agent_loop_del(&o->w);
        close(o->fd);
        o->fd = -1;
    }
    o->ended = true;
}

static void proc_in_close(struct proc *p)
{
    if (p->in_fd >= 0) {
        agent_loop_del(&p->in_w);
        close(p->in_fd);
        p->in_fd = -1;
    }
    agent_buf_free(&p->in_buf);
}

static void proc_free(struct proc *p)
{
    for (struct proc **pp = &proc_list; *pp; pp = &(*pp)->next)
        if (*pp == p) {
            *pp = p->next;
            break;
        }
    proc_in_close(p);
    for (int i = 0; i < 2; i++) {
        proc_out_close(&p->out[i]);
        agent_buf_free(&p->out[i].buf);
    }
    json_decref(p->info);
    free(p);
}

unsigned agent_proc_count(void)
{
    unsigned n = 0;
    for (struct proc *p = proc_list; p; p = p->next)
        n++;
    return n;
}

void agent_proc_set_env(json_t *env)
{
    json_decref(proc_env);
    proc_env = env;
}

/* Keeps at most AGENT_PROC_KEEP detached exited processes: drops the oldest. */
static void proc_trim_exited(void)
{
    unsigned kept = 0;
    struct proc *oldest = NULL;
    for (struct proc *p = proc_list; p; p = p->next)
        if (p->exited && !p->chan) {
            kept++;
            oldest = p; /* list is newest-first */
        }
    if (kept > AGENT_PROC_KEEP)
        proc_free(oldest);
}

/* ---- output: fill buffers from fds, pump buffers to the channel ---- */

static void proc_out_watch(struct proc_out *o)
{
    if (o->fd >= 0)
        agent_loop_set(&o->w, o->buf.len < AGENT_PROC_OUTBUF ? EPOLLIN : 0);
}

/* One read into the buffer's free room. Returns true if it made progress. */
static bool proc_out_fill(struct proc_out *o)
{
    if (o->fd < 0 || o->buf.len >= AGENT_PROC_OUTBUF)
        return false;
    if (o->relayed && o->p->exited && !o->finish_sent) {
        agent_relay_finish(o->fd);
        o->finish_sent = true;
    }
    uint8_t tmp[AGENT_PROC_OUTBUF];
    ssize_t n = read(o->fd, tmp, AGENT_PROC_OUTBUF - o->buf.len);
    if (n > 0)
        return agent_buf_add(&o->buf, tmp, (size_t)n) == 0;
    if (n < 0 && errno == EINTR)
        return true;
    /* EAGAIN while running: wait. EAGAIN after exit: whatever still holds the PTY (a
     * background child) must not keep the exit from being reported; a relay ends by
     * itself once finished (EOF). EIO is how a PTY master says the last slave closed. */
    if (n < 0 && errno == EAGAIN && (!o->p->exited || o->relayed))
        return false;
    proc_out_close(o);
    return true;
}

/* Sends buffered output within credit. Returns true if it sent anything. */
static bool proc_out_pump(struct proc_out *o)
{
    struct agent_chan *ch = o->p->chan;
    bool sent = false;
    if (!ch)
        return false;
    while (o->buf.len) {
        size_t room = agent_chan_room(ch, o->id);
        if (room == 0)
            break;
        size_t n = o->buf.len < room ? o->buf.len : room;
        agent_chan_data(ch, o->id, agent_buf_peek(&o->buf), n);
        agent_buf_drop(&o->buf, n);
        sent = true;
    }
    if (o->ended && o->buf.len == 0 && !o->eof_sent) {
        agent_chan_eof(ch, o->id);
        o->eof_sent = true;
    }
    return sent;
}

static json_t *proc_exit_event(const struct proc *p)
{
    json_t *ev = json_pack("{s:s, s:i}", "type", "exit", "pid", (int)p->pid);
    if (!ev)
        return NULL;
    json_object_set_new(ev, "code", WIFEXITED(p->status) ? json_integer(WEXITSTATUS(p->status))
                                                         : json_null());
    json_object_set_new(ev, "signal", WIFSIGNALED(p->status) ? json_integer(WTERMSIG(p->status))
                                                             : json_null());
    return ev;
}

/* Moves bytes as far as buffers and credit allow; reports the exit once every stream
 * has ended and been flushed. May free p. */
static void proc_service(struct proc *p)
{
    int nout = p->pty ? 1 : 2;
    /* Bounded rounds: a fast writer must not starve the rest of the loop; epoll is
     * level-triggered and calls us again. */
    for (int round = 0; round < 16; round++) {
        bool progress = false;
        for (int i = 0; i < nout; i++) {
            progress |= proc_out_fill(&p->out[i]);
            progress |= proc_out_pump(&p->out[i]);
        }
        if (!progress)
            break;
    }
    for (int i = 0; i < nout; i++)
        proc_out_watch(&p->out[i]);
    if (!p->exited || !p->chan)
        return;
    for (int i = 0; i < nout; i++)
        if (!p->out[i].eof_sent)
            return;
    struct agent_chan *ch = p->chan;
    agent_chan_event(ch, proc_exit_event(p));
    agent_chan_close(ch);
    proc_free(p);
}

static void proc_out_ready(struct agent_watch *w, uint32_t events)
{
    struct proc_out *o = w->arg;
    proc_service(o->p);
}

/* ---- stdin ---- */

static void proc_in_flush(struct proc *p)
{
    while (p->in_fd >= 0 && p->in_buf.len) {
        ssize_t n = write(p->in_fd, agent_buf_peek(&p->in_buf), p->in_buf.len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            break;
        if (n <= 0) {
            /* EPIPE: the process closed stdin; what is left is dropped (granted, so the
             * host's writer never stalls on a reader that is gone). */
            if (p->chan)
                agent_chan_grant(p->chan, (uint32_t)p->in_buf.len);
            proc_in_close(p);
            break;
        }
        agent_buf_drop(&p->in_buf, (size_t)n);
        if (p->chan)
            agent_chan_grant(p->chan, (uint32_t)n);
    }
    if (p->in_fd >= 0 && p->in_buf.len == 0 && p->in_eof) {
        if (p->pty) {
            /* A terminal has no "close": send the EOF character (works at line start). */
            static const char veof = 4;
            if (write(p->in_fd, &veof, 1) < 0)
                log_debug("agent.pty_eof", "errno=%d", errno);
        }
        proc_in_close(p);
    }
    if (p->in_fd >= 0)
        agent_loop_set(&p->in_w, p->in_buf.len ? EPOLLOUT : 0);
}

static void proc_in_ready(struct agent_watch *w, uint32_t events)
{
    proc_in_flush(w->arg);
}

/* ---- channel ops of an exec/attach channel ---- */

static void proc_on_data(struct agent_chan *ch, const uint8_t *data, size_t n)
{
    struct proc *p = ch->impl;
    /* While starting, stdin is kept (within the channel's window) for the command. */
    if ((p->in_fd < 0 && !p->starting) || agent_buf_add(&p->in_buf, data, n) < 0) {
        agent_chan_grant(ch, (uint32_t)n);
        return;
    }
    proc_in_flush(p);
}

static void proc_on_eof(struct agent_chan *ch)
{
    struct proc *p = ch->impl;
    p->in_eof = true;
    proc_in_flush(p);
}

static void proc_on_ctrl(struct agent_chan *ch, json_t *ctrl)
{
    struct proc *p = ch->impl;
    const char *op;
    if (agent_req_str(ch, ctrl, "op", true, NULL, &op) < 0)
        return;
    if (strcmp(op, "signal") == 0) {
        long long sig;
        bool group;
        if (agent_req_int(ch, ctrl, "signal", 1, 64, SIGTERM, &sig) < 0 ||
            agent_req_bool(ch, ctrl, "group", true, &group) < 0)
            return;
        if (p->starting) /* no pid yet: kill(-0) would signal the agent's own group */
            agent_chan_error(ch, FRAME_E_NOT_FOUND, "the process is still starting");
        else if (p->exited)
            agent_chan_error(ch, FRAME_E_NOT_FOUND, "process %d already exited", (int)p->pid);
        else if (kill(group ? -p->pid : p->pid, (int)sig) < 0)
            agent_chan_errno(ch, errno, "kill");
    } else if (strcmp(op, "confirm") == 0) {
        /* The host has recorded the pid "started" gave: the process may outlive this
         * channel (detached) from now on. */
        if (p->starting)
            agent_chan_error(ch, FRAME_E_NOT_FOUND, "the process is still starting");
        else
            p->unconfirmed = false;
    } else if (strcmp(op, "resize") == 0) {
        long long rows, cols;
        if (agent_req_int(ch, ctrl, "rows", 1, 65535, 24, &rows) < 0 ||
            agent_req_int(ch, ctrl, "cols", 1, 65535, 80, &cols) < 0)
            return;
        struct winsize ws = {.ws_row = (unsigned short)rows, .ws_col = (unsigned short)cols};
        if (!p->pty) {
            agent_chan_error(ch, FRAME_E_INVALID_ARGUMENT, "resize needs a pty");
        } else if (p->starting) { /* a terminal client resizes at once: keep the last size */
            p->ws = ws;
            p->ws_pending = true;
        } else if (p->out[0].fd >= 0 && ioctl(p->out[0].fd, TIOCSWINSZ, &ws) < 0)
            agent_chan_errno(ch, errno, "TIOCSWINSZ");
    } else {
        agent_chan_error(ch, FRAME_E_UNSUPPORTED, "unknown ctrl op \"%.64s\"", op);
    }
}

static void proc_on_writable(struct agent_chan *ch)
{
    proc_service(ch->impl);
}

static void proc_on_close(struct agent_chan *ch)
{
    struct proc *p = ch->impl;
    p->chan = NULL;
    proc_orphan_kill(p); /* while starting: once its spawn is delivered (spawn_done) */
    proc_trim_exited();
}

static const struct agent_chan_ops proc_chan_ops = {
    .on_data = proc_on_data,
    .on_eof = proc_on_eof,
    .on_ctrl = proc_on_ctrl,
    .on_writable = proc_on_writable,
    .on_close = proc_on_close,
};

static void proc_attach(struct proc *p, struct agent_chan *ch)
{
    if (p->chan)
        agent_chan_close(p->chan); /* moved: the old channel ends */
    p->chan = ch;
    ch->impl = p;
    ch->ops = &proc_chan_ops;
    for (int i = 0; i < 2; i++)
        p->out[i].eof_sent = false;
}

/* ---- the process's start (exec.c builds and runs the spawn) ---- */

static struct proc *proc_new(json_t *info)
{
    struct proc *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->info = info;
    p->in_fd = -1;
    p->in_w = (struct agent_watch){.fd = -1, .fn = proc_in_ready, .arg = p};
    for (int i = 0; i < 2; i++) {
        struct proc_out *o = &p->out[i];
        o->p = p;
        o->id = i == 0 ? FRAME_STREAM_OUT : FRAME_STREAM_ERR;
        o->fd = -1;
        o->w = (struct agent_watch){.fd = -1, .fn = proc_out_ready, .arg = o};
    }
    return p;
}

struct proc *agent_proc_new_starting(struct agent_chan *ch, json_t *info, bool pty, bool confirm)
{
    struct proc *p = proc_new(info);
    if (!p)
        return NULL;
    /* The channel is the process's from now on: stdin is kept, a resize is kept for the
     * pty, and a host that closes the channel before the spawn is delivered leaves a
     * detached process behind (killed, if unconfirmed: proc_orphan_kill). */
    p->starting = true;
    p->pty = pty;
    p->unconfirmed = confirm;
    proc_attach(p, ch);
    return p;
}

void agent_proc_start_failed(struct proc *p, int err, const char *msg)
{
    struct agent_chan *ch = p->chan;
    if (ch) {
        agent_chan_errno(ch, err, msg);
        p->chan = NULL;
        ch->ops = NULL;
        agent_chan_close(ch);
    }
    proc_free(p);
}

void agent_proc_started(struct proc *p, pid_t pid, const char *cwd, int out_fd, int err_fd,
                        int in_fd, bool relayed)
{
    p->starting = false;
    p->out[0].fd = out_fd;
    p->out[1].fd = err_fd;
    p->in_fd = in_fd;
    p->out[0].relayed = p->out[1].relayed = relayed;
    if (p->pty && p->ws_pending && ioctl(out_fd, TIOCSWINSZ, &p->ws) < 0)
        log_debug("agent.pty_resize", "errno=%d", errno);
    for (int i = 0; i < 2; i++)
        if (p->out[i].fd >= 0)
            fcntl(p->out[i].fd, F_SETFL, O_NONBLOCK);
    if (p->in_fd >= 0)
        fcntl(p->in_fd, F_SETFL, O_NONBLOCK);
    p->pid = pid;
    json_object_set_new(p->info, "cwd", json_string(cwd));
    json_object_set_new(p->info, "pid", json_integer(pid));
    for (int i = 0; i < 2; i++)
        p->out[i].w.fd = p->out[i].fd;
    p->in_w.fd = p->in_fd;
    if (p->out[1].fd < 0)
        p->out[1].ended = p->out[1].eof_sent = true;
    p->next = proc_list;
    proc_list = p;
    /* A command quicker than this delivery was reaped as an unknown pid. */
    p->exited = agent_spawn_async_claim(pid, &p->status);
    if (p->chan)
        agent_chan_event(p->chan, json_pack("{s:s, s:i}", "type", "started", "pid", (int)pid));
    proc_orphan_kill(p); /* its channel closed while it was starting */
    if (p->in_fd < 0 && p->in_buf.len) { /* stdin sent to a command that takes none */
        if (p->chan)
            agent_chan_grant(p->chan, (uint32_t)p->in_buf.len);
        agent_buf_free(&p->in_buf);
    }
    proc_in_flush(p); /* stdin the host sent while the spawn was in flight */
    proc_service(p);
}

unsigned agent_proc_running(void)
{
    unsigned running = agent_spawn_async_pending();
    for (struct proc *q = proc_list; q; q = q->next)
        running += !q->exited;
    return running;
}

json_t *agent_proc_env(void)
{
    return proc_env;
}

void agent_op_attach(struct agent_chan *ch, json_t *req)
{
    long long pid;
    if (agent_req_int(ch, req, "pid", 1, 0x7fffffff, 0, &pid) < 0)
        return agent_chan_close(ch);
    struct proc *found = NULL;
    for (struct proc *p = proc_list; p; p = p->next)
        if (p->pid == pid && (!found || found->exited))
            found = p; /* a running process wins over an old record of the same pid */
    if (!found)
        return agent_chan_fail(ch, FRAME_E_NOT_FOUND, "no process %lld", pid);
    found->unconfirmed = false; /* the host knows its pid: it can reach it again */
    proc_attach(found, ch);
    agent_chan_event(ch, json_pack("{s:s, s:i, s:b}", "type", "attached", "pid", (int)pid, "pty",
                                   found->pty));
    proc_service(found);
}

void agent_op_ps(struct agent_chan *ch, json_t *req)
{
    json_t *list = json_array();
    for (struct proc *p = proc_list; p && list; p = p->next) {
        json_t *e = json_deep_copy(p->info);
        if (!e)
            continue;
        json_object_set_new(e, "attached", json_boolean(p->chan != NULL));
        json_object_set_new(e, "exited", json_boolean(p->exited));
        json_array_append_new(list, e);
    }
    agent_op_result(ch, json_pack("{s:o}", "processes", list ? list : json_array()));
}

void agent_proc_reap(void)
{
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        bool known = false;
        for (struct proc *p = proc_list; p; p = p->next) {
            if (p->pid != pid || p->exited)
                continue;
            known = true;
            p->exited = true;
            p->status = status;
            proc_service(p); /* may free p */
            break;
        }
        /* Maybe a command whose spawn has not been delivered yet (spawn_done claims it),
         * or an orphan reparented to us (PID 1). */
        if (!known)
            agent_spawn_async_reaped(pid, status);
    }
    proc_trim_exited();
}
