/* e2b_procmsg: the messages of envd's `process.Process` service in protobuf-JSON.
 *
 * Parsers take a request object (the unary body or the single envelope of a stream) and
 * fill a struct whose strings and JSON members are BORROWED from that object: keep the
 * request alive while using them. Builders return new JSON (caller owns) in canonical
 * form: {"event":{"start":{"pid":1000}}}, {"event":{"data":{"stdout":"<base64>"}}},
 * {"event":{"end":{"exitCode":1,"exited":true,"status":"exit status 1","error":...}}}. */
#ifndef SPACE_E2B_PROCMSG_H
#define SPACE_E2B_PROCMSG_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "e2b_error.h"

/* enum process.Signal numbers (equal to the Linux signal numbers). */
enum e2b_signal { E2B_SIGNAL_UNSPECIFIED = 0, E2B_SIGNAL_SIGKILL = 9, E2B_SIGNAL_SIGTERM = 15 };

/* ProcessSelector: oneof pid / tag. */
struct e2b_proc_selector {
    bool by_tag;       /* true: tag is set; false: pid is set */
    uint32_t pid;
    const char *tag;   /* borrowed */
};

/* StartRequest. */
struct e2b_proc_start {
    const char *cmd;   /* ProcessConfig.cmd, non-empty */
    json_t *args;      /* array of strings or NULL (borrowed) */
    json_t *envs;      /* object of strings or NULL (borrowed) */
    const char *cwd;   /* NULL when unset or "" (both mean the user's home) */
    bool has_pty;      /* pty.size given: run on a terminal of cols x rows */
    uint32_t cols, rows;
    const char *tag;   /* NULL when unset */
    int stdin_mode;    /* -1 unset (keep stdin open, envd default), 0 false, 1 true */
};

/* SendInputRequest; data is malloc'd (caller frees with free()). */
struct e2b_proc_input {
    struct e2b_proc_selector sel;
    bool pty;          /* input.pty instead of input.stdin */
    uint8_t *data;
    size_t len;
};

/* Where output came from (DataEvent oneof). */
enum e2b_proc_stream { E2B_STREAM_STDOUT, E2B_STREAM_STDERR, E2B_STREAM_PTY };

int e2b_proc_parse_start(json_t *req, struct e2b_proc_start *out, struct e2b_err *err);
/* Reads req.process (required) as a selector: Connect, CloseStdin, SendSignal, Update. */
int e2b_proc_parse_selector(json_t *req, struct e2b_proc_selector *out, struct e2b_err *err);
int e2b_proc_parse_input(json_t *req, struct e2b_proc_input *out, struct e2b_err *err);
/* SendSignalRequest: *signal is SIGKILL or SIGTERM (unspecified is rejected). */
int e2b_proc_parse_signal(json_t *req, struct e2b_proc_selector *sel, int *signal,
                          struct e2b_err *err);
/* UpdateRequest: *has_pty false when no pty.size was given. */
int e2b_proc_parse_update(json_t *req, struct e2b_proc_selector *sel, bool *has_pty,
                          uint32_t *cols, uint32_t *rows, struct e2b_err *err);

json_t *e2b_proc_ev_start(uint32_t pid);
json_t *e2b_proc_ev_data(enum e2b_proc_stream s, const uint8_t *data, size_t len);
json_t *e2b_proc_ev_keepalive(void);
/* EndEvent as envd fills it: signal > 0 -> exitCode -1, exited false, "signal: killed";
 * else exitCode = code, exited true, "exit status N", error set when N != 0. */
json_t *e2b_proc_ev_end(int code, int signal);
/* ProcessInfo (config always present: the SDK dereferences it). args/envs borrowed,
 * may be NULL; cwd/tag may be NULL. */
json_t *e2b_proc_info(uint32_t pid, const char *tag, const char *cmd, json_t *args,
                      json_t *envs, const char *cwd);

#endif
