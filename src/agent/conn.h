/* agent_conn: the agent's side of one host connection: frame parsing and validation,
 * the channel table, credits, and queued output. Transport-free: the serve layer feeds
 * received bytes in with agent_conn_input() and writes agent_conn_output() to the fd,
 * so the fuzzer can drive the dispatcher with no I/O at all.
 *
 * Requests (OPEN) go to the `open` hook; the op module answers on the channel and, if
 * the request lives on (exec, read, write, watch), attaches its own state and ops.
 *
 * Channel lifetime: each side sends CLOSE once. agent_chan_close() sends ours and
 * detaches the op (no more callbacks); the struct stays as a tombstone that swallows
 * in-flight frames until the host's CLOSE, then it is freed. A host CLOSE first calls
 * ops->on_close (the op detaches and must not use the channel again), then we answer
 * CLOSE and free. So an op may use its channel until it closes it or gets on_close. */
#ifndef SPACE_AGENT_CONN_H
#define SPACE_AGENT_CONN_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "agent/buf.h"
#include "frame.h"

#define AGENT_MAX_CHANNELS   1024          /* live channels per connection */
#define AGENT_MAX_TOMBSTONES 1024          /* closed by us, awaiting the host's CLOSE */
#define AGENT_OUT_HIGH       (1024 * 1024) /* output queue size that pauses producers */
#define AGENT_OUT_LOW        (256 * 1024)  /* ... and that resumes them */

struct agent_conn;
struct agent_chan;

/* What an op attaches to a channel that outlives its OPEN. All may be NULL. */
struct agent_chan_ops {
    /* DATA on IN; the op calls agent_chan_grant() as it consumes the bytes. */
    void (*on_data)(struct agent_chan *ch, const uint8_t *p, size_t n);
    /* EOF on IN. */
    void (*on_eof)(struct agent_chan *ch);
    /* A CTRL object (borrowed). */
    void (*on_ctrl)(struct agent_chan *ch, json_t *ctrl);
    /* Credit arrived or the output queue drained: the op may send again. */
    void (*on_writable)(struct agent_chan *ch);
    /* The host closed the channel or the connection is gone: the op forgets the
     * channel (it must not send or keep the pointer). */
    void (*on_close)(struct agent_chan *ch);
};

struct agent_chan {
    uint32_t id;                              /* wire id (odd) */
    struct agent_conn *conn;                  /* owner */
    const struct agent_chan_ops *ops;         /* attached op, NULL if none/detached */
    void *impl;                               /* the op's state (owned by the op) */
    uint64_t credit[FRAME_STREAM_COUNT];      /* bytes we may still send (OUT, ERR) */
    uint64_t window[FRAME_STREAM_COUNT];      /* bytes the host may still send (IN) */
    bool in_eof;                              /* host ended IN */
    bool sent_close;                          /* our CLOSE is out (tombstone) */
    struct agent_chan *next;                  /* conn's list */
};

/* Hooks from the connection to the rest of the agent. */
struct agent_conn_hooks {
    /* An OPEN for a new channel (request borrowed, an object). The hook answers on ch
     * (event/error + close) or attaches ops/impl. */
    void (*open)(struct agent_chan *ch, json_t *request);
    /* Our HELLO payload (new reference); sent in answer to each host HELLO. */
    json_t *(*hello)(void);
    /* May be NULL. Called right after the HELLO's answer is queued, from inside
     * agent_conn_input, and by agent_conn_flush: the transport writes what it can of the
     * output now, without tearing anything down (errors wait for its usual flush). The
     * host may have sent requests right behind its HELLO (a pooled clone's refresh), which
     * this input handles next; its HELLO's answer must not wait for them (the host retries
     * a HELLO left unanswered for a few seconds). */
    void (*flush)(void);
};

/* Creates a connection (it answers the host's HELLO with ours). hooks are borrowed (static). NULL on OOM. */
struct agent_conn *agent_conn_new(const struct agent_conn_hooks *hooks);
/* Connection gone: every attached op gets on_close, then everything is freed. */
void agent_conn_free(struct agent_conn *c);

/* Feeds bytes received from the host. Returns 0, or -1 if the stream broke the protocol
 * beyond repair (bad header): an ERROR is queued and the caller should drop the
 * connection once the output is flushed. */
int agent_conn_input(struct agent_conn *c, const uint8_t *p, size_t n);
/* Writes what the transport takes of the queued output now (the flush hook; no-op
 * without one). For an op that has answered and still has work to do that the host need
 * not wait for (refresh: the CPU-time baseline after its result). */
void agent_conn_flush(struct agent_conn *c);
/* How long ago (ns, clock_mono_ns) the input now being handled arrived: 0 outside
 * agent_conn_input. A request handled behind others of the same input (the host's HELLO,
 * then a pipelined refresh) can correct a time it carries by this (refresh's time_ns). */
int64_t agent_conn_input_age_ns(const struct agent_conn *c);
/* Queued bytes for the host (the transport writes and agent_buf_drop()s them, then
 * calls agent_conn_wrote()). */
struct agent_buf *agent_conn_output(struct agent_conn *c);
/* After the transport drained output: wakes producers if the queue fell below LOW. */
void agent_conn_wrote(struct agent_conn *c);
/* true while the output queue is above HIGH (producers should not read more). */
bool agent_conn_congested(const struct agent_conn *c);
/* Live channels (for health). */
unsigned agent_conn_channels(const struct agent_conn *c);

/* ---- used by ops on their channel ---- */

/* Bytes the op may send now on stream (OUT/ERR): min(credit, frame max), 0 if closed or
 * the connection is congested. */
size_t agent_chan_room(const struct agent_chan *ch, enum frame_stream stream);
/* Sends DATA (n <= agent_chan_room). */
void agent_chan_data(struct agent_chan *ch, enum frame_stream stream, const void *p, size_t n);
void agent_chan_eof(struct agent_chan *ch, enum frame_stream stream);
/* Sends an EVENT; takes the reference to ev. */
void agent_chan_event(struct agent_chan *ch, json_t *ev);
/* Sends ERROR {code, message}. */
void agent_chan_error(struct agent_chan *ch, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* ERROR with the code for errno `err` and "<what>: <strerror>" as message. */
void agent_chan_errno(struct agent_chan *ch, int err, const char *what);
/* Grants the host n more bytes on IN. */
void agent_chan_grant(struct agent_chan *ch, uint32_t n);
/* Sends CLOSE and detaches the op; the op must not use ch afterwards. */
void agent_chan_close(struct agent_chan *ch);
/* Shorthands: error+close, and errno error+close. */
void agent_chan_fail(struct agent_chan *ch, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void agent_chan_fail_errno(struct agent_chan *ch, int err, const char *what);

/* The FRAME_E_* code for an errno value. */
const char *agent_errno_code(int err);

#endif
