/* cli_session.c: what `space exec`, `space shell` and `space attach` share about command
 * sessions: creating one (POST /v1/sandboxes/{id}/sessions) or looking one up, checking
 * what the server returned before any of it goes into a request line or header, and
 * turning the events of the session's stream into output and an exit status.
 *
 * The server may be compromised: ids, URLs and tokens are length- and charset-checked,
 * output payloads are bounded by the SSE parser's line limit (CLI_SSE_LINE_MAX), and
 * exit codes and signal numbers are range-checked. */
#include "cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "b64.h"
#include "cli_sse.h"
#include "writeall.h"

/* An id the server gave us: [A-Za-z0-9_-], 1..63 characters. */
static bool plain_id(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n >= 64)
        return false;
    return strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") == n;
}

/* Printable ASCII without spaces, shorter than cap (it goes into a request line or an
 * Authorization header). */
static bool header_safe(const char *s, size_t cap)
{
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n >= cap)
        return false;
    for (size_t i = 0; i < n; i++)
        if (s[i] <= ' ' || s[i] > '~')
            return false;
    return true;
}

/* Fills the session's paths from the sandbox id (as typed) and the session id. */
static int set_paths(struct cli_session *s, const char *sandbox, const char *sid)
{
    char eid[128];
    if (!cli_pct(sandbox, eid, sizeof eid)) {
        cli_err("sandbox id too long");
        return -1;
    }
    if (!plain_id(sid)) {
        cli_err("the server returned no usable session id");
        return -1;
    }
    snprintf(s->sandbox, sizeof s->sandbox, "%s", sandbox);
    snprintf(s->id, sizeof s->id, "%s", sid);
    snprintf(s->path, sizeof s->path, "/v1/sandboxes/%s/sessions/%s", eid, sid);
    snprintf(s->url, sizeof s->url, "%s/attach", s->path);
    return 0;
}

int cli_session_create(struct cli_ctx *x, const char *sandbox, const json_t *body,
                       struct cli_session *s)
{
    char eid[128], path[256];
    memset(s, 0, sizeof *s);
    if (!cli_pct(sandbox, eid, sizeof eid)) {
        cli_err("sandbox id too long");
        return 2;
    }
    snprintf(path, sizeof path, "/v1/sandboxes/%s/sessions", eid);
    json_t *r = cli_call(x, "POST", path, body, NULL);
    if (!r)
        return 1;
    const char *url = json_string_value(json_object_get(r, "attach_url"));
    const char *token = json_string_value(json_object_get(r, "attach_token"));
    int rc = 1;
    if (!header_safe(url, sizeof s->url) || url[0] != '/' ||
        !header_safe(token, sizeof s->auth.key)) {
        cli_err("the server returned no usable attach URL/token");
    } else if (set_paths(s, sandbox, json_string_value(json_object_get(r, "id"))) == 0) {
        s->auth = *x;
        snprintf(s->auth.key, sizeof s->auth.key, "%s", token);
        snprintf(s->url, sizeof s->url, "%s", url);
        s->pty = json_is_object(json_object_get(body, "pty")) || json_is_true(json_object_get(body, "pty"));
        s->stdin_open = json_is_true(json_object_get(body, "stdin"));
        rc = 0;
    }
    json_decref(r);
    return rc;
}

/* The newest session of the sandbox that is running and has a terminal, for
 * `space attach ID` without a session id. */
static const char *newest_terminal(const json_t *list)
{
    const char *best = NULL;
    size_t i;
    json_t *e;
    json_array_foreach(list, i, e)
    {
        const char *state = json_string_value(json_object_get(e, "state"));
        json_t *pty = json_object_get(e, "pty");
        if (state && strcmp(state, "running") == 0 && pty && !json_is_null(pty) &&
            !json_is_false(pty))
            best = json_string_value(json_object_get(e, "id")); /* oldest first: keep last */
    }
    return best;
}

int cli_session_open(struct cli_ctx *x, const char *sandbox, const char *sid,
                     struct cli_session *s)
{
    char eid[128], path[256];
    memset(s, 0, sizeof *s);
    if (!cli_pct(sandbox, eid, sizeof eid) || (sid && !plain_id(sid))) {
        cli_err("bad sandbox or session id");
        return 2;
    }
    json_t *list = NULL;
    if (!sid) {
        snprintf(path, sizeof path, "/v1/sandboxes/%s/sessions", eid);
        list = cli_call(x, "GET", path, NULL, NULL);
        if (!list)
            return 1;
        sid = newest_terminal(json_object_get(list, "sessions"));
        if (!sid) {
            cli_err("sandbox %s has no running session with a terminal", sandbox);
            json_decref(list);
            return 1;
        }
    }
    int rc = set_paths(s, sandbox, sid) == 0 ? 0 : 1;
    json_decref(list);
    if (rc)
        return rc;
    json_t *r = cli_call(x, "GET", s->path, NULL, NULL);
    json_t *o = json_object_get(r, "session");
    if (!json_is_object(o)) {
        if (r)
            cli_err("the server returned no session object");
        json_decref(r);
        return 1;
    }
    json_t *pty = json_object_get(o, "pty");
    s->pty = pty && !json_is_null(pty) && !json_is_false(pty);
    s->stdin_open = json_is_true(json_object_get(o, "stdin"));
    s->auth = *x; /* the API key works on every route of the tenant's sessions */
    json_decref(r);
    return 0;
}

int cli_session_post(struct cli_session *s, const char *what, const json_t *body)
{
    char path[300];
    snprintf(path, sizeof path, "%s/%s", s->path, what);
    json_t *r = cli_call(&s->auth, "POST", path, body, NULL);
    json_decref(r);
    return r ? 0 : -1;
}

int cli_session_signal(struct cli_session *s, const char *name)
{
    json_t *body = json_pack("{s:s}", "signal", name);
    int rc = cli_session_post(s, "signal", body);
    json_decref(body);
    return rc;
}

int cli_session_stdin(struct cli_session *s, struct cli_conn *c)
{
    char path[300];
    snprintf(path, sizeof path, "%s/stdin", s->path);
    return cli_request(&s->auth, c, "POST", path, "Content-Type: application/octet-stream\r\n", -1);
}

int cli_session_attach(struct cli_session *s, const struct cli_sse *sse, struct cli_conn *c)
{
    char extra[256], err[256];
    int n = snprintf(extra, sizeof extra, "Accept: text/event-stream\r\n");
    /* last_id passed the SSE parser's bound and has no line break (ids are one line). */
    if (sse->last_id[0])
        snprintf(extra + n, sizeof extra - (size_t)n, "Last-Event-ID: %s\r\n", sse->last_id);
    if (cli_request(&s->auth, c, "GET", s->url, extra, -2) < 0)
        return 0;
    if (cli_http_read_head(c, err, sizeof err) < 0) {
        cli_http_close(c);
        return 0;
    }
    return c->status;
}

int cli_emit_output(int fd, const json_t *data)
{
    const char *b = json_string_value(json_object_get(data, "data"));
    if (!b)
        return -1;
    /* b is at most CLI_SSE_LINE_MAX long (the parser's bound). */
    size_t cap = strlen(b) / 4 * 3 + 3;
    uint8_t *out = malloc(cap);
    long n = out ? b64_decode(b, out, cap) : -1;
    int rc = n < 0 ? -1 : writeall_fd(fd, out, (size_t)n);
    free(out);
    return rc;
}

/* The exit status of an `exit` event: the code (0..255), 128+N for signal N (1..64),
 * 1 for anything else. */
static int exit_status(const json_t *j)
{
    json_t *code = json_object_get(j, "code"), *sig = json_object_get(j, "signal");
    if (json_is_integer(code) && json_integer_value(code) >= 0 && json_integer_value(code) <= 255)
        return (int)json_integer_value(code);
    if (json_is_integer(sig) && json_integer_value(sig) >= 1 && json_integer_value(sig) <= 64)
        return 128 + (int)json_integer_value(sig);
    return 1;
}

int cli_session_event(const struct cli_ctx *x, const char *event, const char *id,
                      const char *data, size_t len, int *status)
{
    json_t *j = json_loadb(data, len, 0, NULL);
    int rc = 0;
    if (x->json) {
        /* One JSON line per event, as the API sends it: {"id","event","data"}. */
        json_t *line = json_pack("{s:s,s:s,s:O?}", "id", id ? id : "", "event", event, "data", j);
        char *text = line ? json_dumps(line, JSON_COMPACT) : NULL;
        if (!text || printf("%s\n", text) < 0 || fflush(stdout) != 0)
            rc = -1;
        free(text);
        json_decref(line);
    } else if (strcmp(event, "stdout") == 0 || strcmp(event, "stderr") == 0) {
        if (cli_emit_output(event[3] == 'o' ? STDOUT_FILENO : STDERR_FILENO, j) < 0) {
            cli_err("bad %s event or closed output", event);
            rc = -1;
        }
    }
    if (rc == 0 && strcmp(event, "exit") == 0) {
        *status = exit_status(j);
        rc = 1;
    } else if (rc == 0 && strcmp(event, "error") == 0) {
        const char *code = json_string_value(json_object_get(j, "code"));
        if (!x->json) {
            const char *msg = json_string_value(json_object_get(j, "message"));
            cli_err("%.1000s (%.64s)", msg ? msg : "command failed", code ? code : "error");
        }
        /* Like a shell: 127 when the program does not exist. */
        *status = code && strcmp(code, "not_found") == 0 ? 127 : 1;
        rc = 1;
    }
    json_decref(j);
    return rc;
}
