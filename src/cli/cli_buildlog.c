/* cli_buildlog.c: a template build's output while it runs (`space template build`).
 *
 * Follows GET /v1/operations/{id}/logs (SSE, docs/api.md): each `stage` becomes a line
 * "==> STAGE (12.3s)" (bold on a terminal, plain otherwise), the run steps' stdout and
 * stderr are copied to stderr as they arrive (stdout stays for the result: the template's
 * name, or the operation with --json), and `end` stops. A broken stream is reopened with
 * Last-Event-ID, so nothing is shown twice. */
#include "cli.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli_sse.h"

#define FOLLOW_RECONNECT_MAX 5

struct follow {
    const struct cli_ctx *x;
    bool ended;  /* `end` arrived */
    bool failed; /* a bad event, an `error` event or closed output */
};

static int on_event(const char *event, const char *id, const char *data, size_t len, void *arg)
{
    struct follow *f = arg;
    (void)id;
    json_t *j = json_loadb(data, len, 0, NULL);
    if (strcmp(event, "stdout") == 0 || strcmp(event, "stderr") == 0) {
        if (cli_emit_output(STDERR_FILENO, j) < 0)
            f->failed = true;
    } else if (strcmp(event, "stage") == 0) {
        char stage[300];
        cli_clean(json_string_value(json_object_get(j, "stage")), false, stage, sizeof stage);
        double secs = (double)json_integer_value(json_object_get(j, "elapsed_ms")) / 1000.0;
        fprintf(stderr, f->x->tty ? "\033[1m==> %s\033[0m (%.1fs)\n" : "==> %s (%.1fs)\n", stage,
                secs);
    } else if (strcmp(event, "end") == 0) {
        f->ended = true;
    } else if (strcmp(event, "error") == 0) {
        char msg[600];
        cli_clean(json_string_value(json_object_get(j, "message")), false, msg, sizeof msg);
        cli_err("build output: %s", msg[0] ? msg : "the stream failed");
        f->failed = true;
    }
    json_decref(j);
    return f->ended || f->failed;
}

int cli_follow_build(struct cli_ctx *x, const char *op_id)
{
    char id[128], path[200];
    if (!op_id || !cli_pct(op_id, id, sizeof id))
        return -1;
    snprintf(path, sizeof path, "/v1/operations/%s/logs", id);
    struct follow f = {.x = x};
    struct cli_sse sse = {0};
    for (int attempt = 0; attempt <= FOLLOW_RECONNECT_MAX && !f.ended && !f.failed; attempt++) {
        char extra[128], err[256];
        int n = snprintf(extra, sizeof extra, "Accept: text/event-stream\r\n");
        /* last_id passed the SSE parser's bound and has no line break. */
        if (sse.last_id[0])
            snprintf(extra + n, sizeof extra - (size_t)n, "Last-Event-ID: %.32s\r\n", sse.last_id);
        struct cli_conn c;
        if (cli_request(x, &c, "GET", path, extra, -2) < 0)
            break;
        if (cli_http_read_head(&c, err, sizeof err) < 0) {
            cli_http_close(&c);
            continue;
        }
        if (c.status != 200) {
            cli_report_error(&c);
            cli_http_close(&c);
            break;
        }
        cli_sse_reset(&sse);
        char buf[16384];
        ssize_t got;
        while ((got = cli_http_read_body(&c, buf, sizeof buf)) > 0) {
            int rc = cli_sse_feed(&sse, buf, (size_t)got, on_event, &f);
            if (rc < 0) {
                cli_err("malformed build output stream");
                f.failed = true;
            }
            if (rc)
                break;
        }
        cli_http_close(&c);
    }
    cli_sse_free(&sse);
    return f.ended ? 0 : -1;
}
