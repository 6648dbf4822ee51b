/* cli_shell.c: an interactive terminal on a command session with a pty.
 *
 *   space shell [-u USER] [-w DIR] ID     the user's login shell (exec $SHELL -l)
 *   space exec -t [...] ID -- CMD...      CMD on a terminal
 *   space attach ID [SESSION]             back into a running session (default: the
 *                                         newest running one with a terminal)
 *
 * One loop (poll) moves three things: keystrokes from the local terminal (raw mode, see
 * cli_term.c) into one long chunked POST .../stdin, the session's event stream
 * (text/event-stream, authorised by the attach token) onto stdout, and signals
 * (SIGWINCH becomes POST .../resize). Ctrl-C, Ctrl-D, Ctrl-Z are plain bytes for the
 * guest's terminal. Ctrl-] (CLI_DETACH_KEY) detaches: the session keeps running and
 * `space attach` brings it back.
 *
 * Nothing is lost across a lost connection: a broken stream is re-attached with
 * Last-Event-ID (up to SHELL_REATTACH_MAX times in a row); a later `space attach`
 * replays what spaced still buffers for the session (up to 4 MiB, see docs/api.md), so
 * output produced while no client was attached appears. The exit status is the remote
 * command's (128+N for signal N). */
#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli_sse.h"
#include "clock.h"

#define SHELL_REATTACH_MAX 5
/* Consecutive failures to open the stdin upload before input is given up. */
#define SHELL_INPUT_TRIES 3
/* spaced aborts a request body idle for 30 s (408): an upload idle this long is ended
 * cleanly instead, and the next keystroke opens a new one. */
#define SHELL_INPUT_IDLE_MS 20000

struct tty_run {
    const struct cli_ctx *x;
    struct cli_session *s;
    bool raw;             /* the local terminal is in raw mode */
    int status;           /* exit status once the session ended, -1 before */
    struct cli_sse sse;   /* stream parser; keeps the last event id across attaches */
    struct cli_conn out;  /* the event stream (non-blocking), fd -1 while not attached */
    bool out_starved;     /* what out buffers is not a whole piece: wait for the socket */
    struct cli_conn in;   /* the stdin upload, fd -1 while not open */
    int in_failures;      /* consecutive failures of the stdin upload */
    int64_t in_last_ms;   /* when the upload last carried a byte */
    bool in_done;         /* no more input: local EOF, or given up */
    bool detached;        /* Ctrl-]: leave, the session keeps running */
    int leave_sig;        /* a signal that ends the CLI (the session keeps running) */
    bool failed;          /* a definite error (message printed) */
};

static int on_event(const char *event, const char *id, const char *data, size_t len, void *arg)
{
    struct tty_run *t = arg;
    int rc = cli_session_event(t->x, event, id, data, len, &t->status);
    if (rc < 0)
        t->failed = true;
    return rc ? 1 : 0;
}

static void send_resize(struct tty_run *t)
{
    unsigned rows, cols;
    if (!t->s->pty || !cli_term_size(&rows, &cols))
        return;
    json_t *body = json_pack("{s:I,s:I}", "rows", (json_int_t)rows, "cols", (json_int_t)cols);
    cli_session_post(t->s, "resize", body);
    json_decref(body);
}

/* Opens the event stream (resuming after the last event seen). Returns 0 attached,
 * 1 worth retrying (connection trouble), -1 refused (message printed). */
static int attach(struct tty_run *t)
{
    cli_sse_reset(&t->sse);
    int status = cli_session_attach(t->s, &t->sse, &t->out);
    if (status == 0)
        return 1;
    if (status == 410 && t->sse.last_id[0]) {
        /* Evicted meanwhile: take what is left rather than nothing. */
        cli_http_close(&t->out);
        t->sse.last_id[0] = '\0';
        cli_term_restore();
        cli_err("some output was dropped by the server while the connection was down");
        if (t->raw)
            cli_term_raw();
        return attach(t);
    }
    if (status != 200) {
        cli_term_restore();
        cli_report_error(&t->out);
        cli_http_close(&t->out);
        return -1;
    }
    /* Non-blocking: the chunked decoder may want more bytes after consuming framing, and
     * must not sit in recv while keystrokes wait (EAGAIN leaves its state intact). */
    fcntl(t->out.fd, F_SETFL, fcntl(t->out.fd, F_GETFL) | O_NONBLOCK);
    t->out.interruptible = true;
    t->out_starved = false;
    send_resize(t); /* the session runs now; this terminal may differ from the last one */
    return 0;
}

/* Sends bytes to the session's stdin, opening the upload on first use. */
static void send_input(struct tty_run *t, const char *buf, size_t n)
{
    while (!t->in_done) {
        if (t->in.fd < 0 && cli_session_stdin(t->s, &t->in) < 0)
            t->in.fd = -1;
        if (t->in.fd >= 0 && cli_http_send_chunk(&t->in, buf, n) == 0) {
            t->in_failures = 0;
            t->in_last_ms = clock_mono_ms();
            return;
        }
        cli_http_close(&t->in);
        if (++t->in_failures >= SHELL_INPUT_TRIES) {
            t->in_done = true;
            cli_term_restore();
            cli_err("cannot send input to the session any more; still showing its output");
            if (t->raw)
                cli_term_raw();
        }
    }
}

/* The server answered the stdin upload before we ended it: it was refused or cut. */
static void input_answered(struct tty_run *t)
{
    char err[256];
    if (cli_http_read_head(&t->in, err, sizeof err) == 0 && t->in.status != 200) {
        char *body = cli_http_read_all(&t->in, 4096, NULL);
        /* stdin_closed: the process is ending; its exit event follows. */
        if (!body || !strstr(body, "stdin_closed"))
            t->in_failures++;
        free(body);
    }
    cli_http_close(&t->in);
}

/* Ends the stdin upload (the process's stdin stays open). */
static void end_upload(struct tty_run *t)
{
    char err[256];
    if (t->in.fd >= 0 && cli_http_send_chunk(&t->in, NULL, 0) == 0)
        cli_http_read_head(&t->in, err, sizeof err);
    cli_http_close(&t->in);
}

/* Local EOF (stdin not a terminal): a pty reads Ctrl-D as end of input; a pipe is
 * closed. */
static void input_eof(struct tty_run *t)
{
    if (t->s->pty)
        send_input(t, "\x04", 1);
    end_upload(t);
    if (!t->s->pty)
        cli_session_post(t->s, "close-stdin", NULL);
    t->in_done = true;
}

static void read_terminal(struct tty_run *t)
{
    char buf[4096];
    ssize_t n = read(STDIN_FILENO, buf, sizeof buf);
    if (n < 0 && (errno == EINTR || errno == EAGAIN))
        return;
    if (n <= 0) {
        input_eof(t);
        return;
    }
    char *key = t->raw ? memchr(buf, CLI_DETACH_KEY, (size_t)n) : NULL;
    size_t send = key ? (size_t)(key - buf) : (size_t)n;
    if (send)
        send_input(t, buf, send);
    if (key)
        t->detached = true;
}

/* Reads what the stream has. Returns false when the stream broke or ended. */
static bool read_stream(struct tty_run *t)
{
    char buf[16384];
    errno = 0; /* malformed framing fails without setting it */
    ssize_t got = cli_http_read_body(&t->out, buf, sizeof buf);
    if (got < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) {
        t->out_starved = errno != EINTR;
        return true;
    }
    if (got <= 0)
        return false;
    int rc = cli_sse_feed(&t->sse, buf, (size_t)got, on_event, t);
    if (rc < 0) {
        cli_term_restore();
        cli_err("malformed event stream");
        t->failed = true;
    }
    return rc == 0;
}

static void on_signal(struct tty_run *t, int sig)
{
    if (sig == SIGWINCH || sig == SIGCONT) {
        send_resize(t);
    } else if (sig == SIGTSTP) {
        cli_term_stop();
    } else if (!t->raw && (sig == SIGINT || sig == SIGTERM)) {
        /* Not on a terminal: like `space exec`, the command gets the signal. */
        cli_session_signal(t->s, sig == SIGINT ? "INT" : "TERM");
    } else {
        t->leave_sig = sig;
    }
}

/* Follows the session until it ends, the user detaches or a signal ends the CLI. */
static int run_loop(struct tty_run *t, int sigfd)
{
    int tries = 0;
    while (t->status < 0 && !t->detached && !t->leave_sig && !t->failed) {
        if (t->out.fd < 0) {
            if (tries++ > SHELL_REATTACH_MAX)
                break;
            if (tries > 1)
                sleep(1);
            int rc = attach(t);
            if (rc < 0)
                return 1;
            if (rc > 0)
                continue;
        }
        struct pollfd p[4] = {{.fd = sigfd, .events = POLLIN},
                              {.fd = t->out.fd, .events = POLLIN},
                              {.fd = t->in_done ? -1 : STDIN_FILENO, .events = POLLIN},
                              {.fd = t->in.fd, .events = POLLIN}};
        int wait = -1;
        if (t->in.fd >= 0) {
            int64_t left = t->in_last_ms + SHELL_INPUT_IDLE_MS - clock_mono_ms();
            wait = left > 0 ? (int)left : 0;
        }
        /* Bytes already buffered in the connection do not show in poll. */
        if (t->out.len && !t->out_starved)
            wait = 0;
        if (poll(p, 4, wait) < 0 && errno != EINTR)
            break;
        /* The server answered the upload (refused or cut it), or it idled: either way
         * it is over before any keystroke of this round goes out. */
        if (p[3].revents && t->in.fd == p[3].fd)
            input_answered(t);
        else if (t->in.fd >= 0 && clock_mono_ms() - t->in_last_ms >= SHELL_INPUT_IDLE_MS)
            end_upload(t);
        if (p[1].revents)
            t->out_starved = false;
        int sig;
        while ((sig = cli_term_next_signal()) > 0)
            on_signal(t, sig);
        if ((p[1].revents || (t->out.len && !t->out_starved)) && !read_stream(t)) {
            cli_http_close(&t->out);
            continue;
        }
        tries = 0;
        if (p[2].revents)
            read_terminal(t);
    }
    return 0;
}

static int follow(struct cli_ctx *x, struct cli_session *s)
{
    struct tty_run t = {.x = x, .s = s, .status = -1, .out.fd = -1, .in.fd = -1,
                        .in_done = !s->stdin_open};
    int sigfd = cli_term_signals();
    if (sigfd < 0) {
        cli_err("cannot set up signal handling: %s", strerror(errno));
        return 1;
    }
    t.raw = isatty(STDIN_FILENO) && !x->json && cli_term_raw() == 0;
    int rc = run_loop(&t, sigfd);
    cli_http_close(&t.in); /* an unfinished upload leaves the process's stdin open */
    cli_http_close(&t.out);
    cli_sse_free(&t.sse);
    cli_term_restore();
    if (rc || t.failed)
        return 1;
    if (t.status >= 0)
        return t.status;
    if (t.detached || t.leave_sig) {
        fprintf(stderr, "\nspace: %s; session %s keeps running: space attach %s %s\n",
                t.detached ? "detached" : "interrupted", s->id, s->sandbox, s->id);
        return t.detached ? 0 : 128 + t.leave_sig;
    }
    cli_err("lost the connection to the session; it keeps running: space attach %s %s",
            s->sandbox, s->id);
    return 1;
}

/* $TERM if it is a plain terminal name, for the guest's terminfo. */
static const char *local_term(void)
{
    const char *t = getenv("TERM");
    size_t n = t ? strlen(t) : 0;
    if (n == 0 || n > 64 ||
        strspn(t, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.+_-") != n)
        return NULL;
    return t;
}

int cli_shell_run(struct cli_ctx *x, const char *sandbox, json_t *body)
{
    unsigned rows = 24, cols = 80;
    cli_term_size(&rows, &cols);
    json_object_set_new(body, "pty", json_pack("{s:I,s:I}", "rows", (json_int_t)rows, "cols",
                                               (json_int_t)cols));
    json_object_set_new(body, "stdin", json_true());
    const char *term = local_term();
    if (term)
        json_object_set_new(body, "env", json_pack("{s:s}", "TERM", term));
    struct cli_session s;
    int rc = cli_session_create(x, sandbox, body, &s);
    json_decref(body);
    return rc ? rc : follow(x, &s);
}

int cli_cmd_shell(struct cli_ctx *x, int argc, char **argv)
{
    const char *user = NULL, *cwd = NULL;
    for (; argc > 1 && argv[0][0] == '-'; argc -= 2, argv += 2) {
        if (strcmp(argv[0], "-u") == 0 || strcmp(argv[0], "--user") == 0)
            user = argv[1];
        else if (strcmp(argv[0], "-w") == 0 || strcmp(argv[0], "--cwd") == 0)
            cwd = argv[1];
        else
            break;
    }
    if (argc != 1 || argv[0][0] == '-') {
        cli_err("usage: space shell [-u USER] [-w DIR] ID");
        return 2;
    }
    /* The agent sets SHELL to the user's login shell. */
    json_t *body = json_pack("{s:s}", "cmd", "exec \"${SHELL:-/bin/sh}\" -l");
    if (user)
        json_object_set_new(body, "user", json_string(user));
    if (cwd)
        json_object_set_new(body, "cwd", json_string(cwd));
    return cli_shell_run(x, argv[0], body);
}

int cli_cmd_attach(struct cli_ctx *x, int argc, char **argv)
{
    if (argc < 1 || argc > 2 || argv[0][0] == '-') {
        cli_err("usage: space attach ID [SESSION]");
        return 2;
    }
    struct cli_session s;
    int rc = cli_session_open(x, argv[0], argc == 2 ? argv[1] : NULL, &s);
    return rc ? rc : follow(x, &s);
}
