/* cli_exec.c: `space exec [-i] [-u USER] [-w DIR] ID -- CMD ARGS...`: creates a command
 * session (as USER in DIR, else the template's defaults), attaches to its event stream, writes stdout/stderr as they arrive, and exits with the command's
 * status. A dropped stream is re-attached with Last-Event-ID, so nothing is lost or
 * repeated. With -i, a child process streams our stdin into the command's stdin (and
 * closes it at EOF) once the command has started, while the parent follows the output. */
#include "cli.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "b64.h"
#include "cli_sse.h"

/* Re-attach attempts after a stream breaks before the command ended. */
#define EXEC_REATTACH_MAX 5

struct exec_state {
    int exit_status;  /* -1 until exit/error arrives */
    bool failed;      /* a local error (bad event) ended the stream */
    struct cli_ctx *tok;       /* context authorised by the attach token */
    const char *session_path;  /* "/v1/sandboxes/<id>/sessions/<sid>" (encoded) */
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
    char path[600];
    const char *name = exec_signal == SIGTERM ? "TERM" : "INT";
    exec_signal = 0;
    snprintf(path, sizeof path, "%s/signal", st->session_path);
    json_t *body = json_pack("{s:s}", "signal", name);
    json_decref(cli_call(st->tok, "POST", path, body, NULL));
    json_decref(body);
}

/* Child: POST our stdin as a chunked body, then close the command's stdin. */
static int feed_stdin(struct exec_state *st)
{
    char path[512], err[256], buf[65536];
    struct cli_conn c;
    snprintf(path, sizeof path, "%s/stdin", st->session_path);
    if (cli_request(st->tok, &c, "POST", path, "Content-Type: application/octet-stream\r\n", -1) < 0)
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
    snprintf(path, sizeof path, "%s/close-stdin", st->session_path);
    json_t *r = cli_call(st->tok, "POST", path, NULL, NULL);
    rc |= r ? 0 : 1;
    json_decref(r);
    return rc;
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

static int write_all(int fd, const uint8_t *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Writes the base64 payload of an stdout/stderr event to fd. */
static int emit(int fd, const json_t *data)
{
    const char *b = json_string_value(json_object_get(data, "data"));
    if (!b)
        return -1;
    size_t cap = strlen(b) / 4 * 3 + 3;
    uint8_t *out = malloc(cap);
    long n = out ? b64_decode(b, out, cap) : -1;
    int rc = n < 0 ? -1 : write_all(fd, out, (size_t)n);
    free(out);
    return rc;
}

static int on_event(const char *event, const char *id, const char *data, size_t len, void *arg)
{
    struct exec_state *st = arg;
    json_t *j = json_loadb(data, len, 0, NULL);
    int stop = 0;
    if (strcmp(event, "start") == 0 && st->want_stdin && !st->feeder) {
        start_feeder(st); /* the process exists now: its stdin accepts data */
    } else if (strcmp(event, "stdout") == 0 || strcmp(event, "stderr") == 0) {
        if (emit(event[3] == 'o' ? STDOUT_FILENO : STDERR_FILENO, j) < 0) {
            cli_err("bad %s event or closed output", event);
            st->failed = true;
            stop = 1;
        }
    } else if (strcmp(event, "exit") == 0) {
        json_t *code = json_object_get(j, "code"), *sig = json_object_get(j, "signal");
        st->exit_status = json_is_integer(code) ? (int)json_integer_value(code)
                        : json_is_integer(sig)  ? 128 + (int)json_integer_value(sig)
                                                : 1;
        stop = 1;
    } else if (strcmp(event, "error") == 0) {
        const char *msg = json_string_value(json_object_get(j, "message"));
        const char *code = json_string_value(json_object_get(j, "code"));
        cli_err("%s (%s)", msg ? msg : "command failed", code ? code : "error");
        /* Like a shell: 127 when the program does not exist. */
        st->exit_status = code && strcmp(code, "not_found") == 0 ? 127 : 1;
        stop = 1;
    }
    json_decref(j);
    return stop;
}

/* Attaches once and follows the stream. Returns 0 when the stream ended (by an exit or
 * error event, or a break worth retrying: st->exit_status tells), 1 on a definite
 * failure (message printed). */
static int attach_once(const char *url, struct cli_sse *sse, struct exec_state *st)
{
    char extra[1024], err[256];
    int n = snprintf(extra, sizeof extra, "Accept: text/event-stream\r\n");
    if (sse->last_id[0])
        snprintf(extra + n, sizeof extra - (size_t)n, "Last-Event-ID: %s\r\n", sse->last_id);
    /* The attach token, not the API key, authorises the stream. */
    struct cli_conn c;
    if (cli_request(st->tok, &c, "GET", url, extra, -2) < 0)
        return 0;
    if (cli_http_read_head(&c, err, sizeof err) < 0) {
        cli_http_close(&c);
        return 0;
    }
    if (c.status != 200) {
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
    static const char usage[] = "usage: space exec [-i] [-u USER] [-w DIR] ID -- CMD [ARGS...]";
    bool want_stdin = false;
    const char *user = NULL, *cwd = NULL;
    while (argc > 0 && argv[0][0] == '-' && strcmp(argv[0], "--") != 0) {
        const char *o = argv[0];
        if (strcmp(o, "-i") == 0 || strcmp(o, "--stdin") == 0) {
            want_stdin = true;
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
    char eid[128], path[256];
    if (!cli_pct(argv[0], eid, sizeof eid)) {
        cli_err("sandbox id too long");
        return 2;
    }
    json_t *args = json_array();
    for (int i = 1; i < argc; i++)
        json_array_append_new(args, json_string(argv[i]));
    json_t *body = json_pack("{s:o,s:b}", "argv", args, "stdin", want_stdin);
    /* Without them the sandbox's template decides (its default user and workdir). */
    if (user)
        json_object_set_new(body, "user", json_string(user));
    if (cwd)
        json_object_set_new(body, "cwd", json_string(cwd));
    snprintf(path, sizeof path, "/v1/sandboxes/%s/sessions", eid);
    json_t *r = cli_call(x, "POST", path, body, NULL);
    json_decref(body);
    if (!r)
        return 1;
    const char *url = json_string_value(json_object_get(r, "attach_url"));
    const char *token = json_string_value(json_object_get(r, "attach_token"));
    if (!url || !token || url[0] != '/' || strpbrk(url, " \r\n") || strpbrk(token, "\r\n")) {
        cli_err("the server returned no usable attach URL/token");
        json_decref(r);
        return 1;
    }
    const char *sid = json_string_value(json_object_get(r, "id"));
    char esid[128], spath[512];
    struct cli_ctx tok = *x;
    snprintf(tok.key, sizeof tok.key, "%s", token);
    if (!sid || !cli_pct(sid, esid, sizeof esid)) {
        cli_err("the server returned no session id");
        json_decref(r);
        return 1;
    }
    snprintf(spath, sizeof spath, "/v1/sandboxes/%s/sessions/%s", eid, esid);
    struct sigaction sa = {.sa_handler = exec_on_signal}; /* no SA_RESTART: reads see EINTR */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    struct exec_state st = {.exit_status = -1, .tok = &tok, .session_path = spath,
                            .want_stdin = want_stdin};
    struct cli_sse sse = {0};
    int rc = 0;
    for (int attempt = 0; attempt <= EXEC_REATTACH_MAX && st.exit_status < 0 && rc == 0; attempt++) {
        if (attempt)
            sleep(1);
        cli_sse_reset(&sse);
        rc = attach_once(url, &sse, &st);
    }
    cli_sse_free(&sse);
    json_decref(r);
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
