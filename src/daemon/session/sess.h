/* sess: command sessions — a process in a sandbox, its replayable output, and the
 * clients attached to it.
 *
 * A session is created with a validated spec (sess_req.h) and an attach token
 * (sess_token.h); nothing runs in the guest yet. The first attach opens the agent's
 * `exec` channel, so every byte of output lands in the session's event ring
 * (evlog_ring.h) and no early output is lost. Output is read from the agent only while
 * the ring has room (manual agent credit): readers that fall behind or no reader at all
 * stall the guest process on its pipe instead of growing spaced's memory.
 *
 * Sessions live in spaced's memory and outlive HTTP clients: a reader that disconnects
 * leaves the process running, and a later attach with `Last-Event-ID` replays exactly
 * the events after that id. If the agent connection goes away while the process runs
 * (pause, suspend/restore replace it), the session is "detached" and re-attaches with
 * the agent's `attach {pid}` the next time it is used or its sandbox is running again.
 * If the sandbox stops, fails or is deleted, its sessions end in state "lost".
 *
 * Ownership: the table owns its sessions; a session owns its ring, spec, timer and
 * reader records. A `struct sess *` is valid until the next return to the event loop;
 * keep ids across callbacks. Single-threaded, on spaced's loop. */
#ifndef SPACE_SESS_H
#define SPACE_SESS_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "daemon/session/sess_req.h"
#include "daemon/session/sess_token.h"
#include "daemon/spaced.h"

struct sess_table;
struct sess;
struct http_req;
struct agentc;

#define EVLOG_RING_CAP (4u * 1024 * 1024) /* output retained per session, bytes */
#define SESS_PER_SANDBOX_MAX 1024        /* live + finished sessions kept per sandbox */
#define SESS_KEEP_FINISHED_MS (15 * 60 * 1000) /* finished sessions forgotten after this */
#define SESS_ID_PREFIX "ss"              /* ids: "ss" + 24 hex digits */
#define SESS_ID_HEX 24

enum sess_state {
    SESS_CREATED = 0, /* waiting for the first attach; nothing runs yet */
    SESS_STARTING,    /* exec sent, no "started" yet */
    SESS_RUNNING,     /* the process runs */
    SESS_EXITED,      /* exit code/signal known */
    SESS_FAILED,      /* the process could not start (error says why) */
    SESS_LOST,        /* the sandbox stopped or the agent lost the process */
};

const char *sess_state_name(enum sess_state s);

/* Creates the table and listens to sandbox state changes. NULL on allocation failure. */
struct sess_table *sess_table_new(struct spaced *sp);
/* Ends every reader stream, detaches every process (they keep running), frees all,
 * including the callback args of the agent channels still open: call it only once no
 * agent channel can call back (spaced: from router_free at exit, after the sandbox
 * table and its agent connections are gone). */
void sess_table_free(struct sess_table *t);

/* Creates a session on sandbox `sbx_id` of `tenant` from *spec (moved: spec->exec is
 * taken, the spec is cleared). Writes the attach token text into token_out.
 * Returns the session, or NULL with err (429 when the sandbox has too many sessions). */
struct sess *sess_create(struct sess_table *t, const char *tenant, const char *sbx_id,
                         struct sess_spec *spec, char token_out[SESS_TOKEN_LEN + 1],
                         struct spaced_err *err);

/* The session `id`, or NULL. With tenant/sbx_id non-NULL, also NULL unless it belongs
 * to them. */
struct sess *sess_find(struct sess_table *t, const char *tenant, const char *sbx_id,
                       const char *id);

const char *sess_id(const struct sess *s);
const char *sess_tenant(const struct sess *s);
const char *sess_sandbox(const struct sess *s);
enum sess_state sess_state(const struct sess *s);

/* Checks an attach token against this session at the current time. */
enum sess_token_check sess_check_token(const struct sess *s, const char *token);

/* Replaces the attach token (the old one stops working). 0 or -1 + err. */
int sess_new_token(struct sess *s, int64_t ttl_s, char token_out[SESS_TOKEN_LEN + 1],
                   int64_t *expires_ms, struct spaced_err *err);

/* API object {"id","sandbox_id","state","pid","exit_code","exit_signal","timed_out",
 * "argv"|"cmd","pty","stdin","attach_url","attached","last_event_id","error",
 * "token_expires_at","created_at","started_at","finished_at"}. New reference. */
json_t *sess_to_json(const struct sess *s);
/* {"sessions":[...]} of one sandbox, oldest first. New reference. */
json_t *sess_list_json(struct sess_table *t, const char *tenant, const char *sbx_id);

/* Attaches req as an SSE reader. `agent` is the sandbox's live agent (NULL if not
 * running). `last` is the Last-Event-ID (-1 = none: replay everything retained).
 * Starts the process on the first attach. On success the session owns the stream
 * (replies, ends and cleans up on close) and 0 is returned; on failure -1 + err and the
 * caller replies. */
int sess_attach(struct sess *s, struct agentc *agent, struct http_req *req, int64_t last,
                struct spaced_err *err);

/* Streams req's body into the process's stdin (one upload at a time per session). The
 * session replies (200 {"bytes":N}) when the body ends. 0, or -1 + err (caller replies). */
int sess_stdin(struct sess *s, struct agentc *agent, struct http_req *req,
               struct spaced_err *err);

/* Process control: close stdin, send a signal (1..64), resize the PTY. 0 or -1 + err
 * (409 when the process is not running, or has no stdin / no PTY). */
int sess_close_stdin(struct sess *s, struct agentc *agent, struct spaced_err *err);
int sess_signal(struct sess *s, struct agentc *agent, int sig, struct spaced_err *err);
int sess_resize(struct sess *s, struct agentc *agent, unsigned rows, unsigned cols,
                struct spaced_err *err);

/* Deletes the session: a started process that has not ended is killed (SIGKILL to its
 * process group), attached readers' streams end, a stdin upload gets 409, the ring and
 * the store row are freed, and s is freed; its id and attach token open nothing
 * afterwards. Returns 0, or -1 + err (409 not_running, 503) and changes nothing when
 * such a process cannot be reached (suspended sandbox, agent down): deleting it then
 * would leave a process no request could stop. `agent` as for sess_attach. */
int sess_delete(struct sess *s, struct agentc *agent, struct spaced_err *err);

/* Number of sessions by state (for /metrics). */
void sess_count(const struct sess_table *t, unsigned counts[SESS_LOST + 1]);

#endif
