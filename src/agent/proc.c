/* proc.c: exec / attach / ps, process I/O under credits, reaping; see proc.h. */
#include "agent/proc.h"

#include <errno.h>
#include <fcntl.h>
#include <pty.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include "agent/loop.h"
#include "agent/ops.h"
#include "agent/relay.h"
#include "agent/req.h"
#include "agent/spawn.h"
#include "agent/spawn_async.h"
#include "log.h"

#define PROC_DEFAULT_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#define PROC_MAX_ARGS 4096

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

/* ---- spawning ---- */

/* Everything exec needs, built before the spawn so the child only makes syscalls. */
struct spawn {
    char **argv;             /* NULL-terminated (owned) */
    char **envp;             /* NULL-terminated "K=V" (owned) */
    char cwd[PATH_MAX];      /* cwd_default: the workdir to try first, "" for none */
    bool cwd_default;        /* no cwd asked: spawn_pick_cwd chooses on the spawn thread */
    struct agent_user user;
    bool pty;
    bool stdin_pipe;
    bool confirm;            /* "confirm": unconfirmed until the host's CTRL confirm */
    struct winsize ws;
};

static void strv_free(char **v)
{
    for (size_t i = 0; v && v[i]; i++)
        free(v[i]);
    free(v);
}

/* Env precedence: login basics < sandbox default env (refresh) < request env (may be
 * NULL). */
static char **spawn_env(struct agent_chan *ch, const struct spawn *s, json_t *req_env)
{
    json_t *env = json_pack("{s:s, s:s, s:s, s:s, s:s}", "HOME", s->user.home, "USER",
                            s->user.name, "LOGNAME", s->user.name, "SHELL", s->user.shell,
                            "PATH", PROC_DEFAULT_PATH);
    if (!env)
        return NULL;
    if (s->pty)
        json_object_set_new(env, "TERM", json_string("xterm-256color"));
    if (proc_env)
        json_object_update(env, proc_env);
    const char *k;
    json_t *v;
    json_object_foreach(req_env, k, v) {
        if (!json_is_string(v) || !k[0] || strchr(k, '=') ||
            strlen(json_string_value(v)) != json_string_length(v)) {
            agent_chan_error(ch, FRAME_E_INVALID_ARGUMENT,
                             "env \"%.64s\": names are non-empty without '=', values strings", k);
            json_decref(env);
            return NULL;
        }
        json_object_set(env, k, v);
    }
    char **envp = calloc(json_object_size(env) + 1, sizeof *envp);
    size_t n = 0;
    json_object_foreach(env, k, v) {
        if (envp && asprintf(&envp[n], "%s=%s", k, json_string_value(v)) >= 0)
            n++;
    }
    json_decref(env);
    return envp;
}

static char **spawn_argv(struct agent_chan *ch, json_t *req, json_t *info)
{
    json_t *jargv = json_object_get(req, "argv");
    const char *cmd;
    if (agent_req_str(ch, req, "cmd", false, NULL, &cmd) < 0)
        return NULL;
    if ((jargv != NULL) == (cmd != NULL)) {
        agent_chan_error(ch, FRAME_E_INVALID_ARGUMENT, "exec needs exactly one of argv, cmd");
        return NULL;
    }
    if (cmd) {
        json_object_set_new(info, "cmd", json_string(cmd));
        char **argv = calloc(4, sizeof *argv);
        if (argv && (!(argv[0] = strdup("/bin/sh")) || !(argv[1] = strdup("-c")) ||
                     !(argv[2] = strdup(cmd)))) {
            strv_free(argv);
            return NULL;
        }
        return argv;
    }
    size_t n = json_array_size(jargv);
    if (!json_is_array(jargv) || n == 0 || n > PROC_MAX_ARGS) {
        agent_chan_error(ch, FRAME_E_INVALID_ARGUMENT, "argv must be 1..%d strings", PROC_MAX_ARGS);
        return NULL;
    }
    char **argv = calloc(n + 1, sizeof *argv);
    for (size_t i = 0; argv && i < n; i++) {
        json_t *a = json_array_get(jargv, i);
        if (!json_is_string(a) || strlen(json_string_value(a)) != json_string_length(a)) {
            agent_chan_error(ch, FRAME_E_INVALID_ARGUMENT, "argv[%zu] must be a string without NUL", i);
            strv_free(argv);
            return NULL;
        }
        if (!(argv[i] = strdup(json_string_value(a)))) {
            strv_free(argv);
            return NULL;
        }
    }
    json_object_set(info, "argv", jargv);
    return argv;
}

static void close_pair(int fds[2])
{
    for (int i = 0; i < 2; i++)
        if (fds[i] >= 0)
            close(fds[i]);
}

/* A spawn in flight (spawn_async.h): what the spawn thread reads, owned until it is
 * delivered. The loop does not touch s or sp meanwhile. */
struct proc_start {
    struct spawn s;
    struct agent_spawn sp;
    struct proc *p;          /* not yet in proc_list; its channel may go meanwhile */
    int in[2], out[2], err[2];
    int master, slave;       /* PTY */
};

static void proc_start_free(struct proc_start *st)
{
    strv_free(st->s.argv);
    strv_free(st->s.envp);
    free(st);
}

/* The descriptors the command gets (pipes through relays, or a PTY). 0, or -1 (errno). */
static int spawn_fds(struct proc_start *st)
{
    const struct spawn *s = &st->s;
    if (s->pty) {
        struct winsize ws = s->ws;
        if (openpty(&st->master, &st->slave, NULL, NULL, &ws) < 0)
            return -1;
        fcntl(st->master, F_SETFD, FD_CLOEXEC);
        fcntl(st->slave, F_SETFD, FD_CLOEXEC);
        return 0;
    }
    /* The loop gets relay sockets instead of the pipes' own ends (relay.c: a command's
     * pipe must never block the loop that relays FUSE). */
    int *in = st->in, *out = st->out, *err = st->err;
    bool ok = pipe2(out, O_CLOEXEC) == 0 && pipe2(err, O_CLOEXEC) == 0 &&
              (s->stdin_pipe ? pipe2(in, O_CLOEXEC) == 0
                             : (in[0] = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0) &&
              (out[0] = agent_relay_start(out[0], AGENT_RELAY_FROM_CMD)) >= 0 &&
              (err[0] = agent_relay_start(err[0], AGENT_RELAY_FROM_CMD)) >= 0 &&
              (!s->stdin_pipe || (in[1] = agent_relay_start(in[1], AGENT_RELAY_TO_CMD)) >= 0);
    return ok ? 0 : -1;
}

/* On the spawn thread, before the spawn: the default cwd (the template's workdir, else
 * the user's home, else /) is chosen by stat, and either may be on a volume mount, whose
 * FUSE the loop must stay free to relay. */
static void spawn_pick_cwd(void *arg)
{
    struct proc_start *st = arg;
    struct spawn *s = &st->s;
    struct stat sb;
    if (!s->cwd_default)
        return;
    if (!s->cwd[0] || stat(s->cwd, &sb) < 0 || !S_ISDIR(sb.st_mode))
        snprintf(s->cwd, sizeof s->cwd, "%s", stat(s->user.home, &sb) == 0 ? s->user.home : "/");
}

/* On the loop: the spawn thread's result. Hands the descriptors to p and lists it, or
 * reports the failure on p's channel (if it still has one) and frees p. */
static void spawn_done(void *arg, pid_t pid, int e, enum agent_spawn_stage stage)
{
    struct proc_start *st = arg;
    const struct spawn *s = &st->s;
    struct proc *p = st->p;
    struct agent_chan *ch = p->chan;
    if (st->slave >= 0)
        close(st->slave);
    /* The child's ends, marked closed so the failure path's close_pair skips them. */
    int *childs[] = {&st->in[0], &st->out[1], &st->err[1]};
    for (size_t i = 0; i < sizeof childs / sizeof childs[0]; i++)
        if (*childs[i] >= 0) {
            close(*childs[i]);
            *childs[i] = -1;
        }
    p->starting = false;
    if (pid < 0) {
        static const char *const stages[] = {"setting up stdio", "switching user",
                                              "changing to cwd", "executing"};
        const char *what = stage == AGENT_SPAWN_START ? "starting process" : stages[stage & 3];
        char msg[PATH_MAX + 64];
        snprintf(msg, sizeof msg, "%s %s", what,
                 stage == AGENT_SPAWN_CWD ? s->cwd : stage == AGENT_SPAWN_EXEC ? s->argv[0] : "");
        if (st->master >= 0)
            close(st->master);
        close_pair(st->in);
        close_pair(st->out);
        close_pair(st->err);
        if (ch) {
            agent_chan_errno(ch, e, msg);
            p->chan = NULL;
            ch->ops = NULL;
            agent_chan_close(ch);
        }
        proc_free(p);
        return proc_start_free(st);
    }
    if (s->pty) {
        p->out[0].fd = st->master;
        p->in_fd = fcntl(st->master, F_DUPFD_CLOEXEC, 0);
        if (p->ws_pending && ioctl(st->master, TIOCSWINSZ, &p->ws) < 0)
            log_debug("agent.pty_resize", "errno=%d", errno);
    } else {
        p->out[0].fd = st->out[0];
        p->out[1].fd = st->err[0];
        p->in_fd = st->in[1];
        p->out[0].relayed = p->out[1].relayed = true;
    }
    for (int i = 0; i < 2; i++)
        if (p->out[i].fd >= 0)
            fcntl(p->out[i].fd, F_SETFL, O_NONBLOCK);
    if (p->in_fd >= 0)
        fcntl(p->in_fd, F_SETFL, O_NONBLOCK);
    p->pid = pid;
    json_object_set_new(p->info, "cwd", json_string(s->cwd));
    json_object_set_new(p->info, "pid", json_integer(pid));
    proc_start_free(st);
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

static int exec_parse(struct agent_chan *ch, json_t *req, struct spawn *s, json_t *info)
{
    const char *tag;
    json_t *jpty = json_object_get(req, "pty"), *env = json_object_get(req, "env");
    if (agent_req_user(ch, req, &s->user) < 0 || agent_req_str(ch, req, "tag", false, NULL, &tag) < 0 ||
        agent_req_bool(ch, req, "stdin", false, &s->stdin_pipe) < 0 ||
        agent_req_bool(ch, req, "confirm", false, &s->confirm) < 0)
        return -1;
    if (json_object_get(req, "cwd")) {
        /* Resolved lexically only: a cwd on a volume mount is fine, since the chdir
         * happens in the child, off the loop (spawn_async.h). */
        if (agent_req_path_any(ch, req, "cwd", &s->user, s->cwd) < 0)
            return -1;
    } else {
        /* The template's workdir belongs to its default user (as a Dockerfile's WORKDIR
         * goes with its USER); anyone else starts at home. Service users often have a
         * home that does not exist (/nonexistent). The stat is spawn_pick_cwd's. */
        const char *wd = agent_user_workdir();
        s->cwd_default = true;
        snprintf(s->cwd, sizeof s->cwd, "%s",
                 wd && strcmp(s->user.name, agent_user_default()) == 0 ? wd : "");
    }
    if (env && !json_is_object(env)) {
        agent_chan_error(ch, FRAME_E_INVALID_ARGUMENT, "env must be an object");
        return -1;
    }
    if (jpty && !json_is_null(jpty)) {
        long long rows, cols;
        if (!json_is_object(jpty)) {
            agent_chan_error(ch, FRAME_E_INVALID_ARGUMENT, "pty must be an object {rows, cols}");
            return -1;
        }
        if (agent_req_int(ch, jpty, "rows", 1, 65535, 24, &rows) < 0 ||
            agent_req_int(ch, jpty, "cols", 1, 65535, 80, &cols) < 0)
            return -1;
        s->pty = true;
        s->ws = (struct winsize){.ws_row = (unsigned short)rows, .ws_col = (unsigned short)cols};
    }
    json_object_set_new(info, "user", json_string(s->user.name));
    json_object_set_new(info, "cwd", json_string(s->cwd));
    json_object_set_new(info, "pty", json_boolean(s->pty));
    if (tag)
        json_object_set_new(info, "tag", json_string(tag));
    if (!(s->argv = spawn_argv(ch, req, info)))
        return -1;
    if (!(s->envp = spawn_env(ch, s, env)))
        return -1;
    return 0;
}

void agent_op_exec(struct agent_chan *ch, json_t *req)
{
    unsigned running = agent_spawn_async_pending();
    for (struct proc *q = proc_list; q; q = q->next)
        running += !q->exited;
    if (running >= AGENT_PROC_MAX)
        return agent_chan_fail(ch, FRAME_E_TOO_MANY, "%d processes are running", AGENT_PROC_MAX);
    struct proc_start *st = calloc(1, sizeof *st);
    json_t *info = st ? json_object() : NULL;
    struct proc *p = info ? proc_new(info) : NULL;
    if (!p) {
        json_decref(info);
        free(st);
        return agent_chan_fail(ch, FRAME_E_INTERNAL, "out of memory");
    }
    st->p = p;
    st->master = st->slave = -1;
    for (int i = 0; i < 2; i++)
        st->in[i] = st->out[i] = st->err[i] = -1;
    struct spawn *s = &st->s;
    if (exec_parse(ch, req, s, info) < 0) {
        proc_free(p);
        proc_start_free(st);
        return agent_chan_close(ch);
    }
    if (spawn_fds(st) < 0) {
        int e = errno;
        spawn_done(st, -1, e, AGENT_SPAWN_START); /* no channel yet: just frees */
        return agent_chan_fail_errno(ch, e, "starting process");
    }
    st->sp = (struct agent_spawn){.argv = s->argv, .envp = s->envp, .cwd = s->cwd,
                                  .user = &s->user, .pty = s->pty,
                                  .in_fd = s->pty ? st->slave : st->in[0],
                                  .out_fd = s->pty ? st->slave : st->out[1],
                                  .err_fd = s->pty ? st->slave : st->err[1]};
    /* The channel is the process's from now on: stdin is kept, a resize is kept for the
     * pty, and a host that closes the channel before the spawn is delivered leaves a
     * detached process behind. */
    p->starting = true;
    p->pty = s->pty;
    p->unconfirmed = s->confirm;
    proc_attach(p, ch);
    if (agent_spawn_async_start(&st->sp, spawn_pick_cwd, spawn_done, st) < 0)
        spawn_done(st, -1, errno, AGENT_SPAWN_START);
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
