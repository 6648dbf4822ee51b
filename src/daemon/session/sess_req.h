/* sess_req: validation of every API request body and query of the sessions and files
 * routes, before anything reaches the agent.
 *
 * These functions are where untrusted API input for sessions and files enters: each
 * checks types, ranges, sizes and unknown fields, and fails with a 400 spaced_err whose
 * message names the offending field. They are pure (no I/O), so the fuzzer
 * (tests/fuzz/fuzz_sess_req.c) drives them directly. Outputs that go to the agent are
 * JSON request objects in the shape of docs/agent-protocol.md, built here so the routes
 * never copy a client's object through unchecked. */
#ifndef SPACE_SESS_REQ_H
#define SPACE_SESS_REQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "daemon/spaced.h"

#define SESS_ARGV_MAX 4096         /* argv entries (agent limit) */
#define SESS_EXEC_JSON_MAX 65536   /* serialised exec request (agent limit) */
#define SESS_ENV_MAX 256           /* environment variables */
#define SESS_PATH_MAX 4096         /* bytes in a guest path (agent limit) */
#define SESS_USER_MAX 32           /* bytes in a user name */
#define SESS_PTY_MAX 4096          /* rows or cols */
#define SESS_TIMEOUT_MAX_S (7LL * 24 * 3600)
#define SESS_TOKEN_TTL_DEFAULT_S (24LL * 3600)
#define SESS_TOKEN_TTL_MAX_S (30LL * 24 * 3600)
#define SESS_LIST_DEPTH_MAX 16

/* A validated session create request. */
struct sess_spec {
    json_t *exec;        /* agent request {"op":"exec",...} (owned; sess_spec_clear) */
    bool stdin_open;     /* the client will stream stdin */
    bool pty;            /* the process runs on a terminal */
    int64_t timeout_s;   /* kill the process (SIGKILL) this long after start; 0 = never */
    int64_t token_ttl_s; /* attach token lifetime */
};

/* Parses a POST .../sessions body: {"argv":[...]} or {"cmd":"..."}, plus optional env,
 * cwd, user, pty {rows, cols}, stdin, timeout, token_ttl, tag. Returns 0 or -1 + err. */
int sess_req_create(const char *body, size_t len, struct sess_spec *out,
                    struct spaced_err *err);
void sess_spec_clear(struct sess_spec *s);

/* {"signal": "TERM" | "SIGTERM" | 15} -> 1..64 in *sig. */
int sess_req_signal(const char *body, size_t len, int *sig, struct spaced_err *err);

/* {"rows": N, "cols": N} each 1..SESS_PTY_MAX. */
int sess_req_resize(const char *body, size_t len, unsigned *rows, unsigned *cols,
                    struct spaced_err *err);

/* A guest path from a query parameter or body field named `field`: present, non-empty,
 * at most SESS_PATH_MAX bytes, no control bytes. The agent normalises it. */
int sess_req_path(const char *path, const char *field, struct spaced_err *err);

/* A non-negative decimal integer query parameter in [min, max]; NULL takes *out as is. */
int sess_req_uint(const char *text, const char *field, int64_t min, int64_t max,
                  int64_t *out, struct spaced_err *err);

/* A boolean query parameter: true/false/1/0/yes/no; NULL or "" keeps *out. */
int sess_req_bool(const char *text, const char *field, bool *out, struct spaced_err *err);

/* A file mode: octal text "0644" / "755" (query) within 0..07777. NULL keeps *out. */
int sess_req_mode(const char *text, int *out, struct spaced_err *err);

/* A user name (query or body): 1..SESS_USER_MAX bytes of [A-Za-z0-9._-], not starting
 * with '-'. */
int sess_req_user(const char *user, struct spaced_err *err);

/* POST .../files/mkdir {"path", "parents"?: bool, "mode"?: int, "user"?} and
 * POST .../files/rename {"from", "to", "user"?}: return the agent request (new
 * reference) or NULL + err. */
json_t *sess_req_mkdir(const char *body, size_t len, struct spaced_err *err);
json_t *sess_req_rename(const char *body, size_t len, struct spaced_err *err);

#endif
