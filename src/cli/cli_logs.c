/* cli_logs.c: `space logs ID [--tail BYTES]`: the sandbox's console log
 * (GET /v1/sandboxes/{id}/logs, text/plain, at most 1 MiB).
 *
 * The bytes come from the guest (through a server that may be compromised too): at most
 * LOGS_READ_MAX are read, and on a terminal control characters other than tab and line
 * breaks are shown as '?' so that a guest cannot drive the user's terminal with escape
 * sequences. With --json the log is one JSON string {"log": ...} (bytes that are not
 * printable ASCII, tab or newline become '?', so the string is always valid). */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The server sends at most 1 MiB; anything longer is refused. */
#define LOGS_READ_MAX (1024 * 1024)

int cli_print_json(const json_t *j)
{
    char *text = json_dumps(j, JSON_COMPACT);
    int rc = text && printf("%s\n", text) >= 0 ? 0 : 1;
    free(text);
    return rc;
}

int cli_print_op(json_t *op)
{
    json_t *doc = json_pack("{s:o}", "operation", op);
    int rc = doc ? cli_print_json(doc) : 1;
    json_decref(doc);
    return rc;
}

/* Replaces what a terminal would interpret (or, for JSON, what is not ASCII text). */
static void neutralise(char *p, size_t n, bool ascii_only)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        bool keep = c == '\n' || c == '\t' || (c >= ' ' && c != 0x7f && (!ascii_only || c < 0x80));
        if (!keep && !(c == '\r' && !ascii_only))
            p[i] = '?';
    }
}

int cli_cmd_logs(struct cli_ctx *x, int argc, char **argv)
{
    char eid[128], path[256];
    long long tail = 0;
    if (argc == 3 && strcmp(argv[1], "--tail") == 0) {
        char *end;
        tail = strtoll(argv[2], &end, 10);
        if (!*argv[2] || *end || tail < 1)
            tail = -1;
    }
    if ((argc != 1 && argc != 3) || tail < 0 || argv[0][0] == '-') {
        cli_err("usage: space logs ID [--tail BYTES]");
        return 2;
    }
    if (!cli_pct(argv[0], eid, sizeof eid)) {
        cli_err("sandbox id too long");
        return 2;
    }
    if (tail)
        snprintf(path, sizeof path, "/v1/sandboxes/%s/logs?tail=%lld", eid, tail);
    else
        snprintf(path, sizeof path, "/v1/sandboxes/%s/logs", eid);
    struct cli_conn c;
    char err[256];
    if (cli_request(x, &c, "GET", path, "Accept: text/plain\r\n", -2) < 0)
        return 1;
    if (cli_http_read_head(&c, err, sizeof err) < 0) {
        cli_err("%s", err);
        cli_http_close(&c);
        return 1;
    }
    if (c.status != 200) {
        int rc = cli_report_error(&c);
        cli_http_close(&c);
        return rc;
    }
    size_t len = 0;
    char *text = cli_http_read_all(&c, LOGS_READ_MAX, &len);
    cli_http_close(&c);
    if (!text) {
        cli_err("truncated or oversized console log from the server");
        return 1;
    }
    int rc = 0;
    if (x->json) {
        neutralise(text, len, true);
        json_t *o = json_pack("{s:s%}", "log", text, len);
        rc = o ? cli_print_json(o) : 1;
        json_decref(o);
    } else {
        if (isatty(STDOUT_FILENO))
            neutralise(text, len, false);
        rc = fwrite(text, 1, len, stdout) == len ? 0 : 1;
    }
    free(text);
    return rc;
}
