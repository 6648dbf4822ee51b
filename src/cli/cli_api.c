/* cli_api.c: configuration, authenticated requests, JSON calls, operation waiting. */
#include "cli.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"

/* Largest JSON response the CLI accepts (a full sandbox listing fits easily). */
#define CLI_JSON_MAX (64 * 1024 * 1024)

void cli_err(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("space: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* Copies the first line of the admin key file into key[cap]; "" if unreadable. */
static void read_key_file(const char *path, char *key, size_t cap)
{
    key[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    if (!fgets(key, (int)cap, f))
        key[0] = '\0';
    fclose(f);
    key[strcspn(key, "\r\n \t")] = '\0';
}

int cli_ctx_init(struct cli_ctx *x)
{
    memset(x, 0, sizeof *x);
    const char *url = getenv("SPACE_URL");
    char err[256];
    if (cli_url_parse(url && *url ? url : CLI_DEFAULT_URL, &x->url, err, sizeof err) < 0) {
        cli_err("%s", err);
        return -1;
    }
    const char *key = getenv("SPACE_API_KEY");
    if (key && *key)
        snprintf(x->key, sizeof x->key, "%s", key);
    else
        read_key_file(CLI_ADMIN_KEY_FILE, x->key, sizeof x->key);
    /* A key must fit in one header line. */
    if (strpbrk(x->key, "\r\n")) {
        cli_err("the API key contains a line break");
        return -1;
    }
    x->tty = isatty(STDERR_FILENO);
    return 0;
}

char *cli_pct(const char *s, char *out, size_t cap)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t o = 0;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                     c == '-' || c == '_' || c == '.' || c == '~' || c == '/';
        if (o + 4 > cap)
            return NULL;
        if (plain) {
            out[o++] = (char)c;
        } else {
            out[o++] = '%';
            out[o++] = hex[c >> 4];
            out[o++] = hex[c & 15];
        }
    }
    out[o] = '\0';
    return out;
}

int cli_request(struct cli_ctx *x, struct cli_conn *c, const char *method, const char *path,
                const char *extra, int64_t body_len)
{
    char err[512], headers[2048];
    if (cli_http_connect(c, &x->url, err, sizeof err) < 0) {
        cli_err("%s", err);
        return -1;
    }
    int n = 0;
    if (x->key[0])
        n = snprintf(headers, sizeof headers, "Authorization: Bearer %s\r\n", x->key);
    snprintf(headers + n, sizeof headers - (size_t)n, "%s", extra ? extra : "");
    if (cli_http_send_head(c, &x->url, method, path, headers, body_len) < 0) {
        cli_err("cannot send the request to %s", x->url.hostport);
        cli_http_close(c);
        return -1;
    }
    return 0;
}

int cli_report_error(struct cli_conn *c)
{
    char *body = cli_http_read_all(c, 1 << 20, NULL);
    json_t *j = body ? json_loads(body, 0, NULL) : NULL;
    json_t *e = json_object_get(j, "error");
    const char *code = json_string_value(json_object_get(e, "code"));
    const char *msg = json_string_value(json_object_get(e, "message"));
    if (msg)
        cli_err("%s (%s, HTTP %d)", msg, code ? code : "error", c->status);
    else
        cli_err("HTTP %d from the server", c->status);
    if (c->status == 401)
        fprintf(stderr, "space: set SPACE_API_KEY, or make %s readable\n", CLI_ADMIN_KEY_FILE);
    json_decref(j);
    free(body);
    return 1;
}

json_t *cli_call(struct cli_ctx *x, const char *method, const char *path, const json_t *body,
                 int *status)
{
    char *b = body ? json_dumps(body, JSON_COMPACT) : NULL;
    struct cli_conn c;
    char err[256];
    json_t *out = NULL;
    int rc = cli_request(x, &c, method, path,
                         b ? "Content-Type: application/json\r\nAccept: application/json\r\n"
                           : "Accept: application/json\r\n",
                         b ? (int64_t)strlen(b) : -2);
    if (rc == 0 && b && cli_http_send(&c, b, strlen(b)) < 0)
        rc = -1; /* the server may have answered early: still read its reply */
    free(b);
    if (c.fd < 0)
        return NULL;
    if (cli_http_read_head(&c, err, sizeof err) < 0) {
        cli_err("%s", err);
        cli_http_close(&c);
        return NULL;
    }
    if (status)
        *status = c.status;
    if (c.status >= 300) {
        cli_report_error(&c);
        cli_http_close(&c);
        return NULL;
    }
    size_t len = 0;
    char *text = cli_http_read_all(&c, CLI_JSON_MAX, &len);
    cli_http_close(&c);
    if (!text) {
        cli_err("truncated or oversized response from the server");
        return NULL;
    }
    json_error_t je;
    out = len ? json_loads(text, 0, &je) : json_object();
    if (!out)
        cli_err("server sent invalid JSON: %s", je.text);
    free(text);
    return out;
}

json_t *cli_get_listing(struct cli_ctx *x, const char *path, int *rc)
{
    json_t *r = cli_call(x, "GET", path, NULL, NULL);
    *rc = 1;
    if (r && x->json) {
        *rc = cli_print_json(r);
        json_decref(r);
        return NULL;
    }
    return r;
}

static bool op_terminal(const char *state)
{
    return state && (strcmp(state, "succeeded") == 0 || strcmp(state, "failed") == 0 ||
                     strcmp(state, "canceled") == 0);
}

const char *cli_clean(const char *s, bool lines, char *out, size_t cap)
{
    size_t o = 0;
    for (; s && *s && o + 1 < cap; s++) {
        unsigned char c = (unsigned char)*s;
        out[o++] = (c >= ' ' && c != 0x7f) || (lines && c == '\n') ? (char)c : '?';
    }
    out[cap ? o : 0] = '\0';
    return out;
}

/* "what: state P% detail (12.3s)" into line[cap], from the server's operation object. */
static void op_line(const json_t *op, const char *what, int64_t start_ms, char *line, size_t cap)
{
    char state[32], detail[160];
    json_int_t pct = json_integer_value(json_object_get(op, "progress"));
    const char *d = json_string_value(json_object_get(op, "detail"));
    cli_clean(json_string_value(json_object_get(op, "state")), false, state, sizeof state);
    cli_clean(d, false, detail, sizeof detail);
    snprintf(line, cap, "%s: %s %d%%%s%s (%.1fs)", what, state,
             pct >= 0 && pct <= 100 ? (int)pct : 0, d ? " " : "", detail,
             (double)(clock_mono_ms() - start_ms) / 1000.0);
}

int cli_wait_op(struct cli_ctx *x, const char *op_id, const char *what, json_t **final)
{
    char path[256], id[128], line[400], shown[400] = "";
    if (!op_id || !cli_pct(op_id, id, sizeof id)) {
        cli_err("the server did not return an operation id");
        return 1;
    }
    /* The long-poll returns early only at the end: a short one lets stages show. */
    snprintf(path, sizeof path, "/v1/operations/%s?wait=1", id);
    int64_t start = clock_mono_ms();
    for (;;) {
        json_t *r = cli_call(x, "GET", path, NULL, NULL);
        json_t *op = json_object_get(r, "operation");
        const char *state = json_string_value(json_object_get(op, "state"));
        if (!state) {
            json_decref(r);
            if (x->tty)
                fputc('\n', stderr);
            return 1;
        }
        op_line(op, what, start, line, sizeof line);
        if (x->tty) {
            /* One line redrawn in place; the long-poll is short so the clock moves. */
            fprintf(stderr, "\r\033[K%s", line);
        } else {
            /* Not a terminal: a plain line whenever the stage changes. */
            size_t stem = strlen(line) - strlen(strrchr(line, '('));
            if (strncmp(line, shown, stem) != 0 || shown[stem] != '(')
                fprintf(stderr, "%s\n", line);
            snprintf(shown, sizeof shown, "%s", line);
        }
        if (op_terminal(state)) {
            if (x->tty)
                fputc('\n', stderr);
            int rc = strcmp(state, "succeeded") == 0 ? 0 : 1;
            if (rc) {
                json_t *e = json_object_get(op, "error");
                char msg[4096], code[64];
                /* Line breaks kept: a failure may quote the guest console's last lines. */
                cli_clean(json_string_value(json_object_get(e, "message")), true, msg, sizeof msg);
                cli_clean(json_string_value(json_object_get(e, "code")), false, code, sizeof code);
                cli_err("%s %s: %s (%s)", what, state, msg[0] ? msg : "no reason given",
                        code[0] ? code : "error");
            }
            if (final)
                *final = json_incref(op);
            json_decref(r);
            return rc;
        }
        json_decref(r);
    }
}
