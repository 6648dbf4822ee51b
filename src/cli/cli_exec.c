/* cli_exec.c: `space exec ID -- CMD ARGS...`: creates a command session, attaches to its
 * event stream, writes stdout/stderr as they arrive, and exits with the command's
 * status. A dropped stream is re-attached with Last-Event-ID, so nothing is lost or
 * repeated. */
#include "cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "b64.h"
#include "cli_sse.h"

/* Re-attach attempts after a stream breaks before the command ended. */
#define EXEC_REATTACH_MAX 5

struct exec_state {
    int exit_status;  /* -1 until exit/error arrives */
    bool failed;      /* a local error (bad event) ended the stream */
};

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
    if (strcmp(event, "stdout") == 0 || strcmp(event, "stderr") == 0) {
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
static int attach_once(struct cli_ctx *x, const char *url, const char *token,
                       struct cli_sse *sse, struct exec_state *st)
{
    char extra[1024], err[256];
    int n = snprintf(extra, sizeof extra, "Accept: text/event-stream\r\n");
    if (sse->last_id[0])
        snprintf(extra + n, sizeof extra - (size_t)n, "Last-Event-ID: %s\r\n", sse->last_id);
    /* The attach token, not the API key, authorises the stream. */
    struct cli_ctx tok = *x;
    snprintf(tok.key, sizeof tok.key, "%s", token);
    struct cli_conn c;
    if (cli_request(&tok, &c, "GET", url, extra, -2) < 0)
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
    char buf[16384];
    for (;;) {
        ssize_t got = cli_http_read_body(&c, buf, sizeof buf);
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
    if (argc >= 2 && strcmp(argv[1], "--") == 0) {
        argv[1] = argv[0];
        argv++;
        argc--;
    }
    if (argc < 2) {
        cli_err("usage: space exec ID -- CMD [ARGS...]");
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
    json_t *body = json_pack("{s:o}", "argv", args);
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
    struct exec_state st = {.exit_status = -1};
    struct cli_sse sse = {0};
    int rc = 0;
    for (int attempt = 0; attempt <= EXEC_REATTACH_MAX && st.exit_status < 0 && rc == 0; attempt++) {
        if (attempt)
            sleep(1);
        cli_sse_reset(&sse);
        rc = attach_once(x, url, token, &sse, &st);
    }
    cli_sse_free(&sse);
    json_decref(r);
    if (rc)
        return 1;
    if (st.exit_status < 0) {
        cli_err("lost the event stream before the command ended");
        return 1;
    }
    return st.exit_status;
}
