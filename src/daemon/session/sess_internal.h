/* sess_internal: the session structures shared by sess.c (table, process, agent
 * channel, credit) and sess_reader.c (SSE readers, stdin uploads). Not for other modules. */
#ifndef SPACE_SESS_INTERNAL_H
#define SPACE_SESS_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "daemon/session/sess.h"
#include "daemon/evlog/evlog_ring.h"
#include "frame.h"

struct event;
struct sess_link;

/* One attached SSE client. Owned by its session's reader list; freed when the stream
 * ends or the request closes. */
struct sess_reader {
    struct sess *s;          /* session it reads (owner) */
    struct http_req *req;    /* the streamed response */
    uint64_t next;           /* next event id to send */
    bool waiting;            /* a drain callback is registered */
    struct sess_reader *nx;  /* next reader of the session */
};

struct sess {
    struct sess_table *t;              /* owner */
    struct sess *nx;                   /* next session in the table */
    char id[SESS_ID_HEX + 3];          /* "ss" + hex */
    char tenant[64];                   /* owning tenant */
    char sbx[64];                      /* sandbox id */
    struct sess_spec spec;             /* what to run (exec request owned here) */
    struct sess_token tok;             /* digest + expiry of the attach token */
    enum sess_state state;
    int64_t pid;                       /* guest pid once started, else 0 */
    int exit_code;                     /* valid when exited and !exit_signal, else -1 */
    int exit_signal;                   /* signal that ended it, 0 if none */
    bool timed_out;                    /* spaced killed it at spec.timeout_s */
    char err_code[48];                 /* why failed/lost ("" otherwise) */
    char err_msg[320];
    int64_t created_ms, started_ms, finished_ms;
    struct evlog_ring ring;             /* replayable events */
    struct agentc_chan *chan;          /* exec/attach channel; NULL when detached */
    struct sess_link *link;            /* callback arg of chan (see sess.c) */
    uint32_t credit[FRAME_STREAM_COUNT]; /* OUT/ERR credit the agent still holds */
    bool eof[FRAME_STREAM_COUNT];      /* agent ended OUT/ERR */
    bool stdin_closed;                 /* close-stdin sent (or stdin never open) */
    bool confirm;                      /* the exec asked the agent to kill the process if
                                        * its channel ends before our CTRL confirm */
    struct sess_reader *readers;       /* attached SSE clients */
    unsigned nreaders;
    struct http_req *stdin_req;        /* the stdin upload in progress, or NULL */
    uint64_t stdin_bytes;              /* bytes of that upload given to the agent */
    struct event *timer;               /* process timeout (heap, owned), or NULL */
    uint64_t id_ceiling;               /* stored bound above every event id issued */
};

/* Event ids issued between two stores of the id ceiling. */
#define SESS_ID_STRIDE 65536

/* Allocates a session of the table (not linked in): ring, timer, ids left empty. */
struct sess *sess_alloc(struct sess_table *t, const char *tenant, const char *sbx_id);
/* Appends a session to the table's list. */
void sess_link_in(struct sess_table *t, struct sess *s);
/* Frees a session unlinked from the table (readers ended, channel forgotten). */
void sess_free(struct sess *s);
/* The daemon context of a table; its first session (follow ->nx for the rest). */
struct spaced *sess_table_spaced(const struct sess_table *t);
struct sess *sess_table_first(const struct sess_table *t);

/* sess_store.c: the session's row in the store (spec, token digest, state, pid, exit,
 * id ceiling). persist returns 0 or -1 (logged); unpersist deletes the row. */
int sess_persist(struct sess *s);
void sess_unpersist(struct sess *s);
/* Loads every stored session of the table's sandboxes at startup: not-yet-started ones
 * come back intact, running ones detached (re-attached by pid when their sandbox runs),
 * finished ones with their final event; event ids continue above the stored ceiling. */
void sess_restore_all(struct sess_table *t);

/* Lowest event id an attached reader still needs (ring next id when none). */
uint64_t sess_keep(const struct sess *s);
/* Grants the agent as much output credit as the ring can take. */
void sess_credit(struct sess *s);
/* Ends (and frees) every reader: called when the session is finished or freed. */
void sess_readers_end(struct sess *s);
/* Pushes retained events to every reader; ends readers of a finished session. */
void sess_readers_pump(struct sess *s);
/* Tells a stdin upload in progress that the process is gone (replies 409). */
void sess_stdin_abort(struct sess *s, const char *why);
/* Resumes a paused stdin upload (the agent accepted the queued bytes). */
void sess_stdin_drained(struct sess *s);
/* Opens the exec channel on first attach (or re-attaches a detached process); a
 * finished session needs nothing. 0 or -1 + err. */
int sess_start(struct sess *s, struct agentc *agent, struct spaced_err *err);
/* Makes sure a started session has its channel (re-attaching a detached process);
 * 409 if it was never started or has finished. 0 or -1 + err. */
int sess_running(struct sess *s, struct agentc *agent, struct spaced_err *err);
/* Sends an SSE comment to idle readers so dead clients are noticed. */
void sess_readers_keepalive(struct sess *s);
/* True once the session will produce no more events. */
bool sess_finished(const struct sess *s);

#endif
