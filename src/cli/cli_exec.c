/* cli_exec.c: `space exec [-i] [-u USER] [-w DIR] ID -- CMD ARGS...`: creates a command
 * session (as USER in DIR, else the template's defaults), attaches to its event stream,
 * writes stdout/stderr as they arrive (or, with --json, the events as JSON lines), and
 * exits with the command's status; `-t` hands the session to cli_shell.c (a terminal).
 * A dropped stream is re-attached with Last-Event-ID, so nothing is lost or repeated. With -i, a child process streams our stdin into the command's stdin (and
 * closes it at EOF) once the command has started, while the parent follows the output. */
#include "cli.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli_sse.h"

/* Re-attach attempts after a stream breaks before the command ended. */
#define EXEC_REATTACH_MAX 5

struct exec_state {
    int exit_status;  /* -1 until exit/error arrives */
    bool failed;      /* a local error (bad event) ended the stream */
    const struct cli_ctx *x;   /* the command line's context (--json) */
    struct cli_session *sess;  /* the session (its token authorises every call) */
    bool want_stdin;           /* -i: forward our stdin */
    pid_t feeder;              /* child streaming stdin, 0 if none */
    int stream_fd;             /* the event stream's socket (the child closes it) */
};

/* SIGINT/SIGTERM received while following the stream, to be forwarded to the command
 * (Ctrl-C interrupts the remote command, not just the client). */
static volatile sig_atomic_t exec_signal;

static void exec_on_signal(int sig)
{
    exec_signal = sig;
}

/* Sends a pending signal to the session's process group. */
static void forward_signal(const struct exec_state *st)
{
    const char *name = exec_signal == SIGTERM ? "TERM" : "INT";
    exec_signal = 0;
    cli_session_signal(st->sess, name);
}

/* Child: POST our stdin as a chunked body, then close the command's stdin. */
static int feed_stdin(struct exec_state *st)
{
    char err[256], buf[65536];
    struct cli_conn c;
    if (cli_session_stdin(st->sess, &c) < 0)
        return 1;
    int rc = 0;
    for (;;) {
        ssize_t n = read(STDIN_FILENO, buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0 || cli_http_send_chunk(&c, buf, (size_t)n) < 0) {
            rc = n < 0 ? 1 : 0;
            break;
        }
    }
    if (cli_http_send_chunk(&c, NULL, 0) < 0 || cli_http_read_head(&c, err, sizeof err) < 0) {
        cli_http_close(&c);
        return 1;
    }
    if (c.status != 200)
        rc = cli_report_error(&c);
    cli_http_close(&c);
    return rc | (cli_session_post(st->sess, "close-stdin", NULL) < 0);
}

static void start_feeder(struct exec_state *st)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        /* Ctrl-C is the parent's to forward; SIGTERM from the parent must end us. */
        signal(SIGINT, SIG_IGN);
        signal(SIGTERM, SIG_DFL);
        close(st->stream_fd);
        _exit(feed_stdin(st));
    }
    if (pid < 0)
        cli_err("cannot forward stdin: %s", strerror(errno));
    st->feeder = pid > 0 ? pid : 0;
}

static int on_event(const char *event, const char *id, const char *data, size_t len, void *arg)
{
    struct exec_state *st = arg;
    if (strcmp(event, "start") == 0 && st->want_stdin && !st->feeder)
        start_feeder(st); /* the process exists now: its stdin accepts data */
    int rc = cli_session_event(st->x, event, id, data, len, &st->exit_status);
    if (rc < 0)
        st->failed = true;
    return rc ? 1 : 0;
}

/* Attaches once and follows the stream. Returns 0 when the stream ended (by an exit or
 * error event, or a break worth retrying: st->exit_status tells), 1 on a definite
 * failure (message printed). */
static int attach_once(struct cli_sse *sse, struct exec_state *st)
{
    /* The attach token, not the API key, authorises the stream. */
    struct cli_conn c;
    int status = cli_session_attach(st->sess, sse, &c);
    if (status == 0)
        return 0;
    if (status != 200) {
        cli_report_error(&c);
        cli_http_close(&c);
        return 1;
    }
    st->stream_fd = c.fd;
    c.interruptible = true;
    char buf[16384];
    for (;;) {
        ssize_t got = cli_http_read_body(&c, buf, sizeof buf);
        if (exec_signal)
            forward_signal(st);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            break;
        int rc = cli_sse_feed(sse, buf, (size_t)got, on_event, st);
        if (rc < 0) {
            cli_err("malformed event stream");
            st->failed = true;
        }
        if (rc)
            break;
    }
    cli_http_close(&c);
    return st->failed ? 1 : 0;
}

int cli_cmd_exec(struct cli_ctx *x, int argc, char **argv)
{
    static const char usage[] = "usage: space exec [-i] [-t] [-u USER] [-w DIR] ID -- CMD [ARGS...]";
    bool want_stdin = false, tty = false;
    const char *user = NULL, *cwd = NULL;
    while (argc > 0 && argv[0][0] == '-' && strcmp(argv[0], "--") != 0) {
        const char *o = argv[0];
        if (strcmp(o, "-i") == 0 || strcmp(o, "--stdin") == 0) {
            want_stdin = true;
        } else if (strcmp(o, "-t") == 0 || strcmp(o, "--tty") == 0) {
            tty = true; /* a terminal: cli_shell.c */
        } else if (strcmp(o, "-it") == 0 || strcmp(o, "-ti") == 0) {
            want_stdin = tty = true;
        } else if ((strcmp(o, "-u") == 0 || strcmp(o, "--user") == 0) && argc > 1) {
            user = *++argv;
            argc--;
        } else if ((strcmp(o, "-w") == 0 || strcmp(o, "--cwd") == 0) && argc > 1) {
            cwd = *++argv;
            argc--;
        } else {
            cli_err("%s (unknown or incomplete option %s)", usage, o);
            return 2;
        }
        argv++;
        argc--;
    }
    if (argc >= 2 && strcmp(argv[1], "--") == 0) {
        argv[1] = argv[0];
        argv++;
        argc--;
    }
    if (argc < 2) {
        cli_err("%s", usage);
        return 2;
    }
    json_t *args = json_array();
    for (int i = 1; i < argc; i++)
        json_array_append_new(args, json_string(argv[i]));
    json_t *body = json_pack("{s:o,s:b}", "argv", args, "stdin", want_stdin || tty);
    /* Without them the sandbox's template decides (its default user and workdir). */
    if (user)
        json_object_set_new(body, "user", json_string(user));
    if (cwd)
        json_object_set_new(body, "cwd", json_string(cwd));
    if (tty)
        return cli_shell_run(x, argv[0], body);
    struct cli_session sess;
    int made = cli_session_create(x, argv[0], body, &sess);
    json_decref(body);
    if (made)
        return made;
    struct sigaction sa = {.sa_handler = exec_on_signal}; /* no SA_RESTART: reads see EINTR */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    struct exec_state st = {.exit_status = -1, .x = x, .sess = &sess,
                            .want_stdin = want_stdin};
    struct cli_sse sse = {0};
    int rc = 0;
    for (int attempt = 0; attempt <= EXEC_REATTACH_MAX && st.exit_status < 0 && rc == 0; attempt++) {
        if (attempt)
            sleep(1);
        cli_sse_reset(&sse);
        rc = attach_once(&sse, &st);
    }
    cli_sse_free(&sse);
    if (st.feeder > 0) {
        /* The command is over: whatever stdin was still coming has nowhere to go. */
        kill(st.feeder, SIGTERM);
        waitpid(st.feeder, NULL, 0);
    }
    if (rc)
        return 1;
    if (st.exit_status < 0) {
        cli_err("lost the event stream before the command ended");
        return 1;
    }
    return st.exit_status;
}
