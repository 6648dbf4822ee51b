/* e2b_procmsg: parse process.Process requests, build its events. */
#include "e2b_procmsg.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "e2b_pbjson.h"

#define F(c) ((struct e2b_pb_field){c, NULL})
#define F2(c, s) ((struct e2b_pb_field){c, s})

static const struct e2b_pb_enum signal_enum[] = {
    {"SIGNAL_UNSPECIFIED", E2B_SIGNAL_UNSPECIFIED},
    {"SIGNAL_SIGTERM", E2B_SIGNAL_SIGTERM},
    {"SIGNAL_SIGKILL", E2B_SIGNAL_SIGKILL},
    {NULL, 0},
};

/* PTY { size { cols, rows } }: fills cols/rows, 1 if a size was given. */
static int parse_pty(json_t *req, uint32_t *cols, uint32_t *rows, struct e2b_err *err)
{
    json_t *pty, *size;
    int r = e2b_pb_message(req, F("pty"), &pty, err);
    if (r <= 0)
        return r;
    r = e2b_pb_message(pty, F("size"), &size, err);
    if (r <= 0)
        return r;
    *cols = 80;
    *rows = 24;
    if (e2b_pb_u32(size, F("cols"), cols, err) < 0 || e2b_pb_u32(size, F("rows"), rows, err) < 0)
        return -1;
    if (*cols == 0 || *rows == 0 || *cols > 10000 || *rows > 10000)
        return e2b_err_set(err, E2B_INVALID_ARGUMENT, "pty size %ux%u out of range", *cols,
                           *rows);
    return 1;
}

int e2b_proc_parse_start(json_t *req, struct e2b_proc_start *out, struct e2b_err *err)
{
    memset(out, 0, sizeof *out);
    out->stdin_mode = -1;
    json_t *cfg;
    int r = e2b_pb_message(req, F("process"), &cfg, err);
    if (r < 0)
        return -1;
    if (r == 0)
        return e2b_err_set(err, E2B_INVALID_ARGUMENT, "field process is required");
    if (e2b_pb_string(cfg, F("cmd"), &out->cmd, err) < 0 ||
        e2b_pb_strlist(cfg, F("args"), &out->args, err) < 0 ||
        e2b_pb_strmap(cfg, F("envs"), &out->envs, err) < 0 ||
        e2b_pb_string(cfg, F("cwd"), &out->cwd, err) < 0 ||
        e2b_pb_string(req, F("tag"), &out->tag, err) < 0)
        return -1;
    if (!out->cmd || !*out->cmd)
        return e2b_err_set(err, E2B_INVALID_ARGUMENT, "field process.cmd is required");
    if (out->cwd && !*out->cwd)
        out->cwd = NULL;
    r = parse_pty(req, &out->cols, &out->rows, err);
    if (r < 0)
        return -1;
    out->has_pty = r == 1;
    bool in;
    r = e2b_pb_bool(req, F("stdin"), &in, err);
    if (r < 0)
        return -1;
    if (r == 1)
        out->stdin_mode = in;
    return 0;
}

int e2b_proc_parse_selector(json_t *req, struct e2b_proc_selector *out, struct e2b_err *err)
{
    memset(out, 0, sizeof *out);
    json_t *sel;
    int r = e2b_pb_message(req, F("process"), &sel, err);
    if (r < 0)
        return -1;
    if (r == 0)
        return e2b_err_set(err, E2B_INVALID_ARGUMENT, "field process is required");
    int has_pid = e2b_pb_u32(sel, F("pid"), &out->pid, err);
    if (has_pid < 0)
        return -1;
    int has_tag = e2b_pb_string(sel, F("tag"), &out->tag, err);
    if (has_tag < 0)
        return -1;
    if (has_pid == has_tag)
        return e2b_err_set(err, E2B_INVALID_ARGUMENT,
                           "process selector needs exactly one of pid and tag");
    out->by_tag = has_tag == 1;
    return 0;
}

int e2b_proc_parse_input(json_t *req, struct e2b_proc_input *out, struct e2b_err *err)
{
    memset(out, 0, sizeof *out);
    if (e2b_proc_parse_selector(req, &out->sel, err) < 0)
        return -1;
    json_t *in;
    int r = e2b_pb_message(req, F("input"), &in, err);
    if (r < 0)
        return -1;
    if (r == 0)
        return e2b_err_set(err, E2B_INVALID_ARGUMENT, "field input is required");
    uint8_t *a = NULL, *b = NULL;
    size_t alen = 0, blen = 0;
    int ra = e2b_pb_bytes(in, F("stdin"), &a, &alen, err);
    if (ra < 0)
        return -1;
    int rb = e2b_pb_bytes(in, F("pty"), &b, &blen, err);
    if (rb < 0 || ra == rb) {
        free(a);
        free(b);
        return rb < 0 ? -1
                      : e2b_err_set(err, E2B_INVALID_ARGUMENT,
                                    "input needs exactly one of stdin and pty");
    }
    out->pty = rb == 1;
    out->data = out->pty ? b : a;
    out->len = out->pty ? blen : alen;
    return 0;
}

int e2b_proc_parse_signal(json_t *req, struct e2b_proc_selector *sel, int *signal,
                          struct e2b_err *err)
{
    if (e2b_proc_parse_selector(req, sel, err) < 0)
        return -1;
    int s = E2B_SIGNAL_UNSPECIFIED;
    if (e2b_pb_enum(req, F("signal"), signal_enum, &s, err) < 0)
        return -1;
    if (s == E2B_SIGNAL_UNSPECIFIED)
        return e2b_err_set(err, E2B_INVALID_ARGUMENT, "field signal is required");
    *signal = s;
    return 0;
}

int e2b_proc_parse_update(json_t *req, struct e2b_proc_selector *sel, bool *has_pty,
                          uint32_t *cols, uint32_t *rows, struct e2b_err *err)
{
    if (e2b_proc_parse_selector(req, sel, err) < 0)
        return -1;
    int r = parse_pty(req, cols, rows, err);
    if (r < 0)
        return -1;
    *has_pty = r == 1;
    return 0;
}

/* Wraps one ProcessEvent member: {"event":{<kind>:<body>}}; steals body. */
static json_t *event(const char *kind, json_t *body)
{
    if (!body)
        return NULL;
    return json_pack("{s:{s:o}}", "event", kind, body);
}

json_t *e2b_proc_ev_start(uint32_t pid)
{
    return event("start", json_pack("{s:I}", "pid", (json_int_t)pid));
}

json_t *e2b_proc_ev_data(enum e2b_proc_stream s, const uint8_t *data, size_t len)
{
    static const char *const names[] = {"stdout", "stderr", "pty"};
    json_t *b = e2b_pb_bytes_json(data, len);
    if (!b)
        return NULL;
    return event("data", json_pack("{s:o}", names[s], b));
}

json_t *e2b_proc_ev_keepalive(void)
{
    return event("keepalive", json_object());
}

json_t *e2b_proc_ev_end(int code, int signal)
{
    char status[64];
    if (signal > 0) {
        /* Go's os.ProcessState prints "signal: killed"; strsignal gives "Killed". */
        const char *name = strsignal(signal);
        snprintf(status, sizeof status, "signal: %s", name ? name : "unknown");
        status[8] = (char)tolower((unsigned char)status[8]);
        return event("end", json_pack("{s:i, s:b, s:s, s:s}", "exitCode", -1, "exited", 0,
                                      "status", status, "error", status));
    }
    snprintf(status, sizeof status, "exit status %d", code);
    json_t *end = json_pack("{s:i, s:b, s:s}", "exitCode", code, "exited", 1, "status", status);
    if (end && code != 0)
        json_object_set_new(end, "error", json_string(status));
    return event("end", end);
}

json_t *e2b_proc_info(uint32_t pid, const char *tag, const char *cmd, json_t *args,
                      json_t *envs, const char *cwd)
{
    json_t *a = args ? json_incref(args) : json_array();
    json_t *e = envs ? json_incref(envs) : json_object();
    json_t *cfg = json_pack("{s:s, s:o, s:o}", "cmd", cmd ? cmd : "", "args", a, "envs", e);
    if (!cfg)
        return NULL;
    if (cwd)
        json_object_set_new(cfg, "cwd", json_string(cwd));
    json_t *info = json_pack("{s:o, s:I}", "config", cfg, "pid", (json_int_t)pid);
    if (info && tag)
        json_object_set_new(info, "tag", json_string(tag));
    return info;
}
