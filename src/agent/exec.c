/* exec.c: `exec`, the start of a process: the request turned into a spawn (argv, env,
 * default cwd, the descriptors: pipes through relays, or a PTY), run on a spawn thread
 * (spawn_async.h), and its result handed to proc.c, which owns the process from its
 * start on (I/O, signals, exit, attach). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pty.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <termios.h>
#include <unistd.h>

#include "agent/ops.h"
#include "agent/proc.h"
#include "agent/relay.h"
#include "agent/req.h"
#include "agent/spawn.h"
#include "agent/spawn_async.h"

#define EXEC_DEFAULT_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#define EXEC_MAX_ARGS 4096

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
                            "PATH", EXEC_DEFAULT_PATH);
    if (!env)
        return NULL;
    if (s->pty)
        json_object_set_new(env, "TERM", json_string("xterm-256color"));
    if (agent_proc_env())
        json_object_update(env, agent_proc_env());
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
    if (!json_is_array(jargv) || n == 0 || n > EXEC_MAX_ARGS) {
        agent_chan_error(ch, FRAME_E_INVALID_ARGUMENT, "argv must be 1..%d strings", EXEC_MAX_ARGS);
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
struct exec_start {
    struct spawn s;
    struct agent_spawn sp;
    struct proc *p;          /* starting (proc.c); its channel may go meanwhile */
    int in[2], out[2], err[2];
    int master, slave;       /* PTY */
};

static void exec_start_free(struct exec_start *st)
{
    strv_free(st->s.argv);
    strv_free(st->s.envp);
    free(st);
}

/* The descriptors the command gets (pipes through relays, or a PTY). 0, or -1 (errno). */
static int spawn_fds(struct exec_start *st)
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
    struct exec_start *st = arg;
    struct spawn *s = &st->s;
    struct stat sb;
    if (!s->cwd_default)
        return;
    if (!s->cwd[0] || stat(s->cwd, &sb) < 0 || !S_ISDIR(sb.st_mode))
        snprintf(s->cwd, sizeof s->cwd, "%s", stat(s->user.home, &sb) == 0 ? s->user.home : "/");
}

/* On the loop: the spawn thread's result. Hands the descriptors to p (proc.c), or has
 * it report the failure and freed. */
static void spawn_done(void *arg, pid_t pid, int e, enum agent_spawn_stage stage)
{
    struct exec_start *st = arg;
    const struct spawn *s = &st->s;
    if (st->slave >= 0)
        close(st->slave);
    /* The child's ends, marked closed so the failure path's close_pair skips them. */
    int *childs[] = {&st->in[0], &st->out[1], &st->err[1]};
    for (size_t i = 0; i < sizeof childs / sizeof childs[0]; i++)
        if (*childs[i] >= 0) {
            close(*childs[i]);
            *childs[i] = -1;
        }
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
        agent_proc_start_failed(st->p, e, msg);
        return exec_start_free(st);
    }
    if (s->pty)
        agent_proc_started(st->p, pid, s->cwd, st->master, -1,
                           fcntl(st->master, F_DUPFD_CLOEXEC, 0), false);
    else
        agent_proc_started(st->p, pid, s->cwd, st->out[0], st->err[0], st->in[1], true);
    exec_start_free(st);
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
    if (agent_proc_running() >= AGENT_PROC_MAX)
        return agent_chan_fail(ch, FRAME_E_TOO_MANY, "%d processes are running", AGENT_PROC_MAX);
    struct exec_start *st = calloc(1, sizeof *st);
    json_t *info = st ? json_object() : NULL;
    if (!info) {
        free(st);
        return agent_chan_fail(ch, FRAME_E_INTERNAL, "out of memory");
    }
    st->master = st->slave = -1;
    for (int i = 0; i < 2; i++)
        st->in[i] = st->out[i] = st->err[i] = -1;
    struct spawn *s = &st->s;
    if (exec_parse(ch, req, s, info) < 0) {
        json_decref(info);
        exec_start_free(st);
        return agent_chan_close(ch);
    }
    int e = spawn_fds(st) < 0 ? errno : 0;
    if (e == 0 && !(st->p = agent_proc_new_starting(ch, info, s->pty, s->confirm)))
        e = ENOMEM;
    if (e) {
        if (!st->p)
            json_decref(info);
        close_pair(st->in);
        close_pair(st->out);
        close_pair(st->err);
        int pty[2] = {st->master, st->slave};
        close_pair(pty);
        exec_start_free(st);
        return agent_chan_fail_errno(ch, e, "starting process");
    }
    st->sp = (struct agent_spawn){.argv = s->argv, .envp = s->envp, .cwd = s->cwd,
                                  .user = &s->user, .pty = s->pty,
                                  .in_fd = s->pty ? st->slave : st->in[0],
                                  .out_fd = s->pty ? st->slave : st->out[1],
                                  .err_fd = s->pty ? st->slave : st->err[1]};
    if (agent_spawn_async_start(&st->sp, spawn_pick_cwd, spawn_done, st) < 0)
        spawn_done(st, -1, errno, AGENT_SPAWN_START);
}
