/* cli: the `space` command-line client. Shared context and helpers for the commands:
 * configuration (SPACE_URL, SPACE_API_KEY or /var/lib/space/admin.key), JSON calls to
 * spaced's /v1 API with its {"error":{"code","message"}} errors turned into one line on
 * stderr, and waiting for asynchronous operations with progress on a terminal.
 *
 * Commands return a process exit status: 0 success, 1 failure (message printed),
 * 2 usage error; `space exec` returns the command's own exit status. */
#ifndef SPACE_CLI_H
#define SPACE_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "cli_http.h"

#define CLI_DEFAULT_URL "http://127.0.0.1:7070"
#define CLI_ADMIN_KEY_FILE "/var/lib/space/admin.key"
/* `space create` without --template: the Debian one with python3 and a `user`. */
#define CLI_DEFAULT_TEMPLATE "python"

struct cli_ctx {
    struct cli_url url;    /* spaced's address */
    char key[512];         /* API key, "" if none was found */
    bool tty;              /* stderr is a terminal: show progress */
    bool json;             /* --json: print the API's objects instead of tables/text */
};

/* Reads the configuration from the environment. Returns 0 or -1 (message printed). */
int cli_ctx_init(struct cli_ctx *x);

/* Prints "space: <message>" on stderr. */
void cli_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Percent-encodes s for a path segment or query value into out[cap]. Returns out, or
 * NULL if it does not fit. */
char *cli_pct(const char *s, char *out, size_t cap);

/* Opens a connection and sends an authenticated request head (extra: more header lines,
 * each ending in CRLF, or NULL; body_len as cli_http_send_head). Returns 0 or -1
 * (message printed). */
int cli_request(struct cli_ctx *x, struct cli_conn *c, const char *method, const char *path,
                const char *extra, int64_t body_len);

/* Reads an error response body already at hand and prints it. Returns 1. */
int cli_report_error(struct cli_conn *c);

/* One JSON call: sends body (may be NULL), returns the parsed response (caller
 * decrefs), or NULL after printing the API error. *status gets the HTTP status when
 * non-NULL. */
json_t *cli_call(struct cli_ctx *x, const char *method, const char *path, const json_t *body,
                 int *status);

/* GET for a listing command: returns the body for the caller's table, or NULL when there
 * is nothing left to print, with *rc the command's exit code: the call failed (1, error
 * printed) or --json printed the body whole (cli_print_json's result). */
json_t *cli_get_listing(struct cli_ctx *x, const char *path, int *rc);

/* Follows an operation until it ends (long-polling GET /v1/operations/{id}?wait=...),
 * showing `what` with state, progress, the current stage (the operation's detail) and
 * the time elapsed: on a terminal one line redrawn in place, otherwise a plain line on
 * stderr whenever the stage changes. Returns 0 if it succeeded, 1 otherwise (message
 * printed); *final (if not NULL) gets the last operation object seen (new reference)
 * when it ended. */
int cli_wait_op(struct cli_ctx *x, const char *op_id, const char *what, json_t **final);

/* Copies a server string for display: control characters (but line breaks when lines)
 * become '?', at most cap-1 bytes ("" for NULL). Returns out. */
const char *cli_clean(const char *s, bool lines, char *out, size_t cap);

/* A network policy object {"mode"[, "allow"]}: with allow entries it is an allowlist
 * whatever mode says (new reference). */
json_t *cli_policy(const char *mode, char *const *allow, int n_allow);

/* Progress of a byte transfer, shown on a terminal (see cli_progress_update). */
struct cli_progress {
    const char *what;      /* label, e.g. "upload /data/x" (borrowed) */
    int64_t total;         /* expected bytes, -1 if unknown */
    int64_t done;          /* bytes moved so far */
    int64_t start_ms;      /* monotonic clock at the start */
    int64_t shown_ms;      /* when the line was last drawn */
};

/* Starts a progress line for `what` (total -1 if unknown). */
void cli_progress_start(const struct cli_ctx *x, struct cli_progress *p, const char *what,
                        int64_t total);
/* Adds n moved bytes; redraws the line at most 4 times a second, on a terminal only. */
void cli_progress_update(const struct cli_ctx *x, struct cli_progress *p, int64_t n);
/* Draws the final state and ends the line (terminal only). */
void cli_progress_end(const struct cli_ctx *x, struct cli_progress *p);

/* Prints j as one line of JSON on stdout. Returns 0, or 1 if it could not be written. */
int cli_print_json(const json_t *j);
/* Prints {"operation": op} (--json after a wait) and drops the reference to op. */
int cli_print_op(json_t *op);

/* ---- command sessions (cli_session.c) ---- */

/* A session being followed; every field was checked before use in a request. */
struct cli_session {
    struct cli_ctx auth;   /* authorised by the attach token (or the API key on attach) */
    char sandbox[128];     /* the sandbox id as typed */
    char id[64];           /* the session id ([A-Za-z0-9_-]) */
    char path[256];        /* "/v1/sandboxes/<id>/sessions/<sid>" (encoded) */
    char url[512];         /* the attach URL (event stream) */
    bool pty, stdin_open;  /* as created */
};

/* POSTs body to the sandbox's sessions and fills *s from the answer. Returns 0, 1 (API
 * or bad answer, message printed) or 2 (bad sandbox id). */
int cli_session_create(struct cli_ctx *x, const char *sandbox, const json_t *body,
                       struct cli_session *s);
/* Looks up session sid of the sandbox (NULL: its newest running session with a pty)
 * for `space attach`, authorised by the API key. Returns like cli_session_create. */
int cli_session_open(struct cli_ctx *x, const char *sandbox, const char *sid,
                     struct cli_session *s);
/* POSTs body (NULL: none) to the session's route `what` (resize, close-stdin...).
 * Returns 0, or -1 (message printed). */
int cli_session_post(struct cli_session *s, const char *what, const json_t *body);
/* Sends signal `name` ("INT", "TERM") to the session's process group. 0 or -1. */
int cli_session_signal(struct cli_session *s, const char *name);
/* Opens a chunked POST .../stdin on c (send with cli_http_send_chunk). 0 or -1. */
int cli_session_stdin(struct cli_session *s, struct cli_conn *c);
/* Opens the session's event stream, resuming after sse->last_id when set. Returns the
 * HTTP status with the head read (the caller reads the events or the error), or 0 when
 * the connection failed (c closed; worth a retry). */
struct cli_sse;
int cli_session_attach(struct cli_session *s, const struct cli_sse *sse, struct cli_conn *c);
/* Handles one event of a session's stream: stdout/stderr to fds 1/2 (or every event as
 * a JSON line with --json); exit/error set *status. Returns 0 go on, 1 the session
 * ended, -1 bad event or closed output (message printed). */
int cli_session_event(const struct cli_ctx *x, const char *event, const char *id,
                      const char *data, size_t len, int *status);
/* Writes the bytes of an stdout/stderr event's data ({"data": base64}) to fd. 0 or -1. */
int cli_emit_output(int fd, const json_t *data);
/* Follows a template build's output (GET /v1/operations/{id}/logs, cli_buildlog.c): its
 * stages and its run steps' stdout and stderr, all on stderr as they come. Returns 0 when
 * the build's end was seen, -1 when the stream could not be had (the caller still waits
 * for the operation, which reports the outcome). */
int cli_follow_build(struct cli_ctx *x, const char *op_id);
/* Runs the session body describes (argv or cmd; pty, stdin and TERM are added) on the
 * local terminal (cli_shell.c); takes body. Returns the remote exit status. */
int cli_shell_run(struct cli_ctx *x, const char *sandbox, json_t *body);

/* ---- the local terminal (cli_term.c) ---- */

/* Ctrl-]: leaves `space shell`/`attach` with the session still running. */
#define CLI_DETACH_KEY 0x1d

/* Puts stdin's terminal in raw mode (restored at exit too). Returns 0 or -1. */
int cli_term_raw(void);
/* Restores the terminal's mode from before cli_term_raw (no-op if not raw). */
void cli_term_restore(void);
/* The window size of stdin's terminal; false if unknown. */
bool cli_term_size(unsigned *rows, unsigned *cols);
/* Routes SIGWINCH, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGTSTP and SIGCONT to a self-pipe;
 * returns its read end (for poll), or -1. */
int cli_term_signals(void);
/* The next signal from the pipe, 0 if none is pending. */
int cli_term_next_signal(void);
/* SIGTSTP: restores the terminal, stops, and takes it back (raw again) once continued. */
void cli_term_stop(void);

/* Commands (argv excludes the command word). */
int cli_cmd_create(struct cli_ctx *x, int argc, char **argv);
int cli_cmd_ls(struct cli_ctx *x, int argc, char **argv);
int cli_cmd_nodes(struct cli_ctx *x, int argc, char **argv); /* GET /v1/nodes (admin key) */
int cli_cmd_node(struct cli_ctx *x, int argc, char **argv);  /* drain|undrain|rm NODE (admin) */
int cli_cmd_rm(struct cli_ctx *x, int argc, char **argv);
int cli_cmd_verb(struct cli_ctx *x, const char *verb, int argc, char **argv);
int cli_cmd_exec(struct cli_ctx *x, int argc, char **argv);
int cli_cmd_cp(struct cli_ctx *x, int argc, char **argv);
int cli_cmd_template(struct cli_ctx *x, int argc, char **argv);
int cli_cmd_network(struct cli_ctx *x, int argc, char **argv);
int cli_cmd_fork(struct cli_ctx *x, int argc, char **argv);     /* cli_fork.c */
int cli_cmd_snapshot(struct cli_ctx *x, int argc, char **argv); /* create|ls|rm */
int cli_cmd_shell(struct cli_ctx *x, int argc, char **argv);
int cli_cmd_attach(struct cli_ctx *x, int argc, char **argv);
int cli_cmd_logs(struct cli_ctx *x, int argc, char **argv);
/* `space completion bash`: prints the completion script; usage is main.c's text. */
int cli_cmd_completion(int argc, char **argv);
int cli_cmd_volume(struct cli_ctx *x, int argc, char **argv); /* create|ls|rm|put|get */

/* Splits "ID:PATH" (a ':' before any '/'); false for a local path. */
bool cli_split_remote(const char *arg, char *id, size_t idcap, const char **path);
/* Streams a local file ("-" = stdin) to /v1/<coll>/<id>/files?path=rpath (PUT), or
 * that remote file to local ("-" = stdout). 0, 1 (printed) or 2 (bad path). */
int cli_upload(struct cli_ctx *x, const char *local, const char *coll, const char *id,
               const char *rpath);
int cli_download(struct cli_ctx *x, const char *coll, const char *id, const char *rpath,
                 const char *local);

#endif
