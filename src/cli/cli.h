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

/* Follows an operation until it ends (long-polling GET /v1/operations/{id}?wait=...),
 * showing `what` with state and progress on a terminal. Returns 0 if it succeeded,
 * 1 otherwise (message printed). */
int cli_wait_op(struct cli_ctx *x, const char *op_id, const char *what);

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

#endif
