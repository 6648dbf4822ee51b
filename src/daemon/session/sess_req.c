/* sess_req.c: validation of sessions/files request bodies and queries; see sess_req.h. */
#include "daemon/session/sess_req.h"

#include <ctype.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define BAD "invalid_request"

/* Parses a JSON object body; NULL + err if it is not one. */
static json_t *parse_object(const char *body, size_t len, struct spaced_err *err)
{
    json_error_t je;
    if (!body || len == 0) {
        spaced_err_set(err, 400, "invalid_json", "request body must be a JSON object");
        return NULL;
    }
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        spaced_err_set(err, 400, "invalid_json", "body is not valid JSON: %s (line %d, column %d)",
                       je.text, je.line, je.column);
        return NULL;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        spaced_err_set(err, 400, "invalid_json", "request body must be a JSON object");
        return NULL;
    }
    return root;
}

/* Fails on the first key of obj not in the NULL-terminated list. */
static int only_fields(json_t *obj, const char *const *known, struct spaced_err *err)
{
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v) {
        int ok = 0;
        for (size_t i = 0; known[i]; i++)
            ok |= strcmp(key, known[i]) == 0;
        if (!ok) {
            char shown[64];
            snprintf(shown, sizeof shown, "%.60s", key);
            for (char *p = shown; *p; p++)
                if (!isprint((unsigned char)*p))
                    *p = '?';
            return spaced_err_set(err, 400, "unknown_field", "unknown field \"%s\"", shown);
        }
    }
    return 0;
}

static int no_ctl(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            return 0;
    return 1;
}

int sess_req_path(const char *path, const char *field, struct spaced_err *err)
{
    if (!path || !*path)
        return spaced_err_set(err, 400, BAD, "%s is required (a path in the sandbox)", field);
    if (strlen(path) > SESS_PATH_MAX)
        return spaced_err_set(err, 400, BAD, "%s is longer than %d bytes", field,
                              SESS_PATH_MAX);
    if (!no_ctl(path))
        return spaced_err_set(err, 400, BAD, "%s contains control characters", field);
    return 0;
}

int sess_req_user(const char *user, struct spaced_err *err)
{
    size_t n = user ? strlen(user) : 0;
    if (n == 0 || n > SESS_USER_MAX || user[0] == '-')
        return spaced_err_set(err, 400, BAD, "user must be 1..%d characters of A-Z a-z 0-9 . _ -",
                              SESS_USER_MAX);
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)user[i]) && !strchr("._-", user[i]))
            return spaced_err_set(err, 400, BAD,
                                  "user must be 1..%d characters of A-Z a-z 0-9 . _ -",
                                  SESS_USER_MAX);
    return 0;
}

static int get_int(json_t *obj, const char *field, int64_t min, int64_t max, int64_t *out,
                   struct spaced_err *err)
{
    json_t *v = json_object_get(obj, field);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_integer(v) || json_integer_value(v) < min || json_integer_value(v) > max)
        return spaced_err_set(err, 400, BAD, "%s must be an integer from %lld to %lld", field,
                              (long long)min, (long long)max);
    *out = json_integer_value(v);
    return 0;
}

static int get_bool(json_t *obj, const char *field, bool *out, struct spaced_err *err)
{
    json_t *v = json_object_get(obj, field);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_boolean(v))
        return spaced_err_set(err, 400, BAD, "%s must be true or false", field);
    *out = json_is_true(v);
    return 0;
}

/* A string field: absent -> *out NULL and 0; present must be a string. */
static int get_str(json_t *obj, const char *field, const char **out, struct spaced_err *err)
{
    json_t *v = json_object_get(obj, field);
    *out = NULL;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_string(v))
        return spaced_err_set(err, 400, BAD, "%s must be a string", field);
    *out = json_string_value(v);
    return 0;
}

static int check_argv(json_t *argv, struct spaced_err *err)
{
    size_t n = json_array_size(argv);
    if (!json_is_array(argv) || n == 0 || n > SESS_ARGV_MAX)
        return spaced_err_set(err, 400, BAD,
                              "argv must be a non-empty array of at most %d strings",
                              SESS_ARGV_MAX);
    if (!json_is_string(json_array_get(argv, 0)) ||
        json_string_length(json_array_get(argv, 0)) == 0)
        return spaced_err_set(err, 400, BAD, "argv[0] must be a non-empty string");
    for (size_t i = 0; i < n; i++)
        if (!json_is_string(json_array_get(argv, i)))
            return spaced_err_set(err, 400, BAD, "argv[%zu] must be a string", i);
    return 0;
}

static int check_env(json_t *env, struct spaced_err *err)
{
    if (!json_is_object(env) || json_object_size(env) > SESS_ENV_MAX)
        return spaced_err_set(err, 400, BAD,
                              "env must be an object of at most %d string values",
                              SESS_ENV_MAX);
    const char *k;
    json_t *v;
    json_object_foreach(env, k, v) {
        if (!*k || strchr(k, '=') || !no_ctl(k))
            return spaced_err_set(err, 400, BAD,
                                  "env names must be non-empty, without '=' or control bytes");
        if (!json_is_string(v))
            return spaced_err_set(err, 400, BAD, "env values must be strings");
    }
    return 0;
}

static int check_pty(json_t *pty, unsigned *rows, unsigned *cols, struct spaced_err *err)
{
    static const char *const known[] = {"rows", "cols", NULL};
    int64_t r = 24, c = 80;
    if (!json_is_object(pty))
        return spaced_err_set(err, 400, BAD, "pty must be an object {\"rows\": N, \"cols\": N}");
    if (only_fields(pty, known, err) < 0 || get_int(pty, "rows", 1, SESS_PTY_MAX, &r, err) < 0 ||
        get_int(pty, "cols", 1, SESS_PTY_MAX, &c, err) < 0)
        return -1;
    *rows = (unsigned)r;
    *cols = (unsigned)c;
    return 0;
}

/* Adds the validated fields of the create body to the exec request. */
static int build_exec(json_t *in, struct sess_spec *out, struct spaced_err *err)
{
    json_t *argv = json_object_get(in, "argv");
    const char *cmd, *cwd, *user, *tag;
    if (get_str(in, "cmd", &cmd, err) < 0 || get_str(in, "cwd", &cwd, err) < 0 ||
        get_str(in, "user", &user, err) < 0 || get_str(in, "tag", &tag, err) < 0)
        return -1;
    if (json_is_null(argv))
        argv = NULL;
    if ((argv != NULL) == (cmd != NULL))
        return spaced_err_set(err, 400, BAD,
                              "give exactly one of argv (array of strings) or cmd (shell string)");
    if (argv && check_argv(argv, err) < 0)
        return -1;
    if (cmd && (!*cmd || strlen(cmd) > SESS_EXEC_JSON_MAX))
        return spaced_err_set(err, 400, BAD, "cmd must be a non-empty string under %d bytes",
                              SESS_EXEC_JSON_MAX);
    if (cwd && sess_req_path(cwd, "cwd", err) < 0)
        return -1;
    if (user && sess_req_user(user, err) < 0)
        return -1;
    if (tag && (strlen(tag) > 128 || !no_ctl(tag)))
        return spaced_err_set(err, 400, BAD, "tag must be at most 128 printable bytes");

    json_t *x = out->exec;
    json_object_set_new(x, "op", json_string("exec"));
    if (argv)
        json_object_set(x, "argv", argv);
    else
        json_object_set_new(x, "cmd", json_string(cmd));
    json_t *env = json_object_get(in, "env");
    if (env && !json_is_null(env)) {
        if (check_env(env, err) < 0)
            return -1;
        json_object_set(x, "env", env);
    }
    if (cwd)
        json_object_set_new(x, "cwd", json_string(cwd));
    if (user)
        json_object_set_new(x, "user", json_string(user));
    if (tag)
        json_object_set_new(x, "tag", json_string(tag));
    json_object_set_new(x, "stdin", json_boolean(out->stdin_open));
    json_t *pty = json_object_get(in, "pty");
    if (pty && !json_is_null(pty) && !json_is_false(pty)) {
        unsigned rows = 24, cols = 80;
        if (!json_is_true(pty) && check_pty(pty, &rows, &cols, err) < 0)
            return -1;
        json_object_set_new(x, "pty", json_pack("{s:I,s:I}", "rows", (json_int_t)rows,
                                                "cols", (json_int_t)cols));
        out->pty = true;
    }
    char *text = json_dumps(x, JSON_COMPACT);
    size_t n = text ? strlen(text) : SIZE_MAX;
    free(text);
    if (n > SESS_EXEC_JSON_MAX)
        return spaced_err_set(err, 400, BAD,
                              "command, env and options together exceed %d bytes of JSON",
                              SESS_EXEC_JSON_MAX);
    return 0;
}

int sess_req_create(const char *body, size_t len, struct sess_spec *out,
                    struct spaced_err *err)
{
    static const char *const known[] = {"argv", "cmd", "env", "cwd", "user", "pty",
                                        "stdin", "timeout", "token_ttl", "tag", NULL};
    memset(out, 0, sizeof *out);
    out->token_ttl_s = SESS_TOKEN_TTL_DEFAULT_S;
    json_t *in = parse_object(body, len, err);
    if (!in)
        return -1;
    out->exec = json_object();
    int rc = -1;
    if (!out->exec) {
        spaced_err_set(err, 500, "internal", "out of memory");
        goto done;
    }
    if (only_fields(in, known, err) < 0 || get_bool(in, "stdin", &out->stdin_open, err) < 0 ||
        get_int(in, "timeout", 0, SESS_TIMEOUT_MAX_S, &out->timeout_s, err) < 0 ||
        get_int(in, "token_ttl", 1, SESS_TOKEN_TTL_MAX_S, &out->token_ttl_s, err) < 0 ||
        build_exec(in, out, err) < 0)
        goto done;
    rc = 0;
done:
    json_decref(in);
    if (rc < 0)
        sess_spec_clear(out);
    return rc;
}

void sess_spec_clear(struct sess_spec *s)
{
    json_decref(s->exec);
    s->exec = NULL;
}

/* Signal names the API accepts, without the SIG prefix. */
static const struct {
    const char *name;
    int num;
} sig_names[] = {
    {"HUP", SIGHUP},   {"INT", SIGINT},   {"QUIT", SIGQUIT}, {"KILL", SIGKILL},
    {"USR1", SIGUSR1}, {"USR2", SIGUSR2}, {"TERM", SIGTERM}, {"CONT", SIGCONT},
    {"STOP", SIGSTOP}, {"TSTP", SIGTSTP}, {"WINCH", SIGWINCH}, {"ALRM", SIGALRM},
    {"PIPE", SIGPIPE},
};

int sess_req_signal(const char *body, size_t len, int *sig, struct spaced_err *err)
{
    static const char *const known[] = {"signal", NULL};
    json_t *in = parse_object(body, len, err);
    if (!in)
        return -1;
    int rc = -1;
    json_t *v = json_object_get(in, "signal");
    if (only_fields(in, known, err) < 0)
        goto done;
    if (json_is_integer(v) && json_integer_value(v) >= 1 && json_integer_value(v) <= 64) {
        *sig = (int)json_integer_value(v);
        rc = 0;
    } else if (json_is_string(v)) {
        const char *name = json_string_value(v);
        if (strncasecmp(name, "SIG", 3) == 0)
            name += 3;
        for (size_t i = 0; i < sizeof sig_names / sizeof sig_names[0]; i++)
            if (strcasecmp(name, sig_names[i].name) == 0) {
                *sig = sig_names[i].num;
                rc = 0;
            }
    }
    if (rc < 0)
        spaced_err_set(err, 400, BAD,
                       "signal must be a number 1..64 or a name like \"TERM\", \"KILL\", \"INT\"");
done:
    json_decref(in);
    return rc;
}

int sess_req_resize(const char *body, size_t len, unsigned *rows, unsigned *cols,
                    struct spaced_err *err)
{
    json_t *in = parse_object(body, len, err);
    if (!in)
        return -1;
    int rc = -1;
    if (!json_object_get(in, "rows") || !json_object_get(in, "cols"))
        spaced_err_set(err, 400, BAD, "rows and cols are required");
    else
        rc = check_pty(in, rows, cols, err);
    json_decref(in);
    return rc;
}

int sess_req_uint(const char *text, const char *field, int64_t min, int64_t max,
                  int64_t *out, struct spaced_err *err)
{
    if (!text)
        return 0;
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (!isdigit((unsigned char)text[0]) || *end || errno || v < min || v > max)
        return spaced_err_set(err, 400, BAD, "%s must be an integer from %lld to %lld", field,
                              (long long)min, (long long)max);
    *out = v;
    return 0;
}

int sess_req_bool(const char *text, const char *field, bool *out, struct spaced_err *err)
{
    if (!text || !*text)
        return 0;
    if (!strcmp(text, "true") || !strcmp(text, "1") || !strcmp(text, "yes"))
        *out = true;
    else if (!strcmp(text, "false") || !strcmp(text, "0") || !strcmp(text, "no"))
        *out = false;
    else
        return spaced_err_set(err, 400, BAD, "%s must be true or false", field);
    return 0;
}

int sess_req_mode(const char *text, int *out, struct spaced_err *err)
{
    if (!text)
        return 0;
    char *end;
    errno = 0;
    long v = strtol(text, &end, 8);
    if (!*text || !isdigit((unsigned char)text[0]) || *end || errno || v < 0 || v > 07777)
        return spaced_err_set(err, 400, BAD, "mode must be octal permission bits, e.g. 0644");
    *out = (int)v;
    return 0;
}

/* Reads a required path field of a body object into the agent request under `as`. */
static int copy_path(json_t *in, const char *field, json_t *req, struct spaced_err *err)
{
    const char *p;
    if (get_str(in, field, &p, err) < 0 || sess_req_path(p, field, err) < 0)
        return -1;
    json_object_set_new(req, field, json_string(p));
    return 0;
}

static int copy_user(json_t *in, json_t *req, struct spaced_err *err)
{
    const char *u;
    if (get_str(in, "user", &u, err) < 0 || (u && sess_req_user(u, err) < 0))
        return -1;
    if (u)
        json_object_set_new(req, "user", json_string(u));
    return 0;
}

json_t *sess_req_mkdir(const char *body, size_t len, struct spaced_err *err)
{
    static const char *const known[] = {"path", "parents", "mode", "user", NULL};
    json_t *in = parse_object(body, len, err);
    if (!in)
        return NULL;
    json_t *req = json_pack("{s:s}", "op", "mkdir");
    bool parents = true;
    int64_t mode = 0755;
    if (!req || only_fields(in, known, err) < 0 || copy_path(in, "path", req, err) < 0 ||
        copy_user(in, req, err) < 0 || get_bool(in, "parents", &parents, err) < 0 ||
        get_int(in, "mode", 0, 07777, &mode, err) < 0) {
        json_decref(req);
        req = NULL;
    } else {
        json_object_set_new(req, "parents", json_boolean(parents));
        json_object_set_new(req, "mode", json_integer(mode));
    }
    json_decref(in);
    return req;
}

json_t *sess_req_rename(const char *body, size_t len, struct spaced_err *err)
{
    static const char *const known[] = {"from", "to", "user", NULL};
    json_t *in = parse_object(body, len, err);
    if (!in)
        return NULL;
    json_t *req = json_pack("{s:s}", "op", "rename");
    if (!req || only_fields(in, known, err) < 0 || copy_path(in, "from", req, err) < 0 ||
        copy_path(in, "to", req, err) < 0 || copy_user(in, req, err) < 0) {
        json_decref(req);
        req = NULL;
    }
    json_decref(in);
    return req;
}
