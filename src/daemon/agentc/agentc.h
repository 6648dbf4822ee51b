/* agentc: the host side of the agent protocol, a client of one guest's space-agent.
 *
 * spaced holds one `struct agentc` per running VM, on its libevent loop, over the
 * connected unix socket of the VM's virtio-serial port. Requests (exec, read, write,
 * stat, watch, ...; see docs/agent-protocol.md) each get a channel; a channel delivers
 * events, output bytes, errors and a close through callbacks.
 *
 * The guest is hostile: every frame and every JSON field from it is validated here; a
 * frame that breaks the protocol (bad header, unknown channel or type, data beyond the
 * credit we granted, JSON that is not an object) ends the whole connection with
 * on_closed(code="protocol"), never a crash. Callers still treat event JSON contents as
 * untrusted data (check types of the fields they use).
 *
 * Flow control: for agent->host streams (OUT, ERR) agentc grants credit. By default it
 * re-grants every byte as soon as on_data returns (fine for small outputs). With
 * AGENTC_MANUAL_CREDIT the caller grants with agentc_grant() when it has actually
 * consumed the bytes (e.g. when the HTTP client's output buffer drained), so a slow
 * client stalls the guest process instead of growing spaced's memory. For host->agent
 * (IN) agentc_write() queues without limit and sends only as the agent grants credit:
 * callers bound their own queue with agentc_queued() and the on_drain callback.
 *
 * Bounds toward a hostile agent (docs/security.md "A hostile guest and the host's
 * resources"): queued IN bytes move to the socket only while less than AGENTC_OUTQ_SOFT
 * is waiting there, so what the socket holds beyond that is control traffic (PONG,
 * CREDIT, OPEN, CTRL, CLOSE); an agent that stops reading while that grows past
 * AGENTC_OUTQ_MAX is cut off (on_closed(AGENTC_E_STALLED)), and one that sends more
 * PINGs than AGENTC_PING_RATE per second (the agent never needs to) is cut off as a
 * flood (AGENTC_E_FLOOD). Input is read 16 KiB at a time (libevent's default) and every
 * complete frame is handled before the next read, so the input buffer holds at most one
 * frame (64 KiB + header) plus one read.
 *
 * Re-entrancy: any agentc function may be called from inside any callback, including
 * agentc_close() and agentc_free(). Single-threaded: all calls on the loop's thread.
 * The process must ignore SIGPIPE (spaced does): writing to an agent that hung up is
 * reported through on_closed, not by a signal. */
#ifndef SPACE_AGENTC_H
#define SPACE_AGENTC_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "frame.h"

struct event_base;
struct agentc;         /* one connection to one agent (opaque) */
struct agentc_chan;    /* one request channel on it (opaque) */

/* Connection callbacks. `arg` is the agentc_new() arg. */
struct agentc_callbacks {
    /* The agent's HELLO arrived and the version was agreed. `hello` is the agent's HELLO
     * object (borrowed for the call: json_incref to keep it). May be NULL. */
    void (*on_ready)(void *arg, json_t *hello);
    /* The connection ended: agent closed, I/O error, or protocol violation (code is one
     * of the FRAME_E_* strings, message is for humans). Every open channel has already
     * been given on_error(FRAME_E_DISCONNECTED) + on_close. No further callbacks follow;
     * the caller still calls agentc_free(). May be NULL. */
    void (*on_closed)(void *arg, const char *code, const char *message);
};

/* Channel callbacks; all may be NULL. `arg` is the agentc_open() arg. Pointers passed
 * in are borrowed for the duration of the call. */
struct agentc_chan_ops {
    /* An EVENT: exec "started"/"exit", file "stat"/"result"/"entries", watch "fs"...
     * Guaranteed to be a JSON object with a string "type". */
    void (*on_event)(void *arg, json_t *event);
    /* Bytes of FRAME_STREAM_OUT or FRAME_STREAM_ERR (1..65536 bytes). */
    void (*on_data)(void *arg, enum frame_stream stream, const uint8_t *buf, size_t len);
    /* The agent ended OUT or ERR. */
    void (*on_eof)(void *arg, enum frame_stream stream);
    /* An ERROR from the agent (code is not necessarily one we know; message may be "").
     * The channel stays open until on_close. */
    void (*on_error)(void *arg, const char *code, const char *message);
    /* The channel is finished (agent CLOSE, or connection lost). The handle is invalid
     * once this returns. Not called after agentc_close(). */
    void (*on_close)(void *arg);
    /* The IN queue (agentc_write) became empty after having bytes. */
    void (*on_drain)(void *arg);
};

#define AGENTC_MAX_CHANNELS 1024    /* channels per connection, tombstones included */
#define AGENTC_OUTQ_SOFT (256u * 1024u)      /* IN data waits in its channel above this */
#define AGENTC_OUTQ_MAX  (4u * 1024u * 1024u) /* bytes toward the agent: more = stalled */
#define AGENTC_PING_RATE 64u                 /* PINGs answered per second (and burst) */
/* on_closed codes for a hostile agent (host-local, like FRAME_E_DISCONNECTED) */
#define AGENTC_E_STALLED "agent_stalled"     /* stopped reading: output over the bound */
#define AGENTC_E_FLOOD   "agent_flood"       /* PINGs over the rate */

/* agentc_open flags */
#define AGENTC_MANUAL_CREDIT 0x1u   /* caller grants OUT/ERR credit with agentc_grant */

/* Starts a client on `fd`, a connected stream socket (ownership of fd passes to agentc:
 * it is made nonblocking and closed by agentc_free). Sends our HELLO at once.
 * `cbs` and `arg` are borrowed and must outlive the agentc. Returns NULL on allocation
 * failure (fd is then closed). */
struct agentc *agentc_new(struct event_base *base, int fd, const struct agentc_callbacks *cbs,
                          void *arg);

/* Closes the socket and frees everything. Open channels are dropped without callbacks.
 * Safe from inside callbacks (freed when the callback returns). NULL is a no-op. */
void agentc_free(struct agentc *c);

/* true once the agent's HELLO arrived and until the connection ends. */
bool agentc_is_ready(const struct agentc *c);

/* The agent's HELLO (borrowed, valid until agentc_free), NULL before on_ready. */
json_t *agentc_hello(const struct agentc *c);

/* Opens a channel with `request` (an object with "op"; borrowed, agentc serialises it
 * now). May be called before on_ready: it is sent after our HELLO, in order. `ops`
 * and `arg` are borrowed and must stay valid until on_close or agentc_close.
 * Returns NULL with a reason in err[errlen] (connection closed, request too large, too
 * many channels). */
struct agentc_chan *agentc_open(struct agentc *c, json_t *request,
                                const struct agentc_chan_ops *ops, void *arg, unsigned flags,
                                char *err, size_t errlen);

/* Opens a `tcp` channel: a connection the agent makes inside the guest to host:port
 * (host NULL = 127.0.0.1; an IPv4/IPv6 literal, port 1..65535: checked here with
 * frame_tcp_target, as the agent does). Bytes written with agentc_write go to the
 * guest's server, its bytes arrive as FRAME_STREAM_OUT data; agentc_eof half-closes
 * our side, on_eof(OUT) is the server's half-close. The agent sends EVENT
 * {"type":"connected"} once connected, ERROR (connection_refused, unreachable,
 * connection_reset, too_many, ...) + close on failure, and closes the channel when
 * both directions have ended. Returns NULL with a reason in err like agentc_open. */
struct agentc_chan *agentc_open_tcp(struct agentc *c, const char *host, unsigned port,
                                    const struct agentc_chan_ops *ops, void *arg,
                                    unsigned flags, char *err, size_t errlen);

/* Queues bytes for FRAME_STREAM_IN (copied). Sent in frames as the agent grants credit.
 * Returns 0, or -1 if the channel's IN stream was already ended or the connection is down. */
int agentc_write(struct agentc_chan *ch, const void *data, size_t len);

/* Bytes queued by agentc_write that the agent has not yet accepted (credit-limited). */
size_t agentc_queued(const struct agentc_chan *ch);

/* Ends FRAME_STREAM_IN after the queued bytes (stdin close / end of upload). */
int agentc_eof(struct agentc_chan *ch);

/* Sends a CTRL object (borrowed), e.g. {"op":"signal","signal":15}. 0 or -1. */
int agentc_ctrl(struct agentc_chan *ch, json_t *ctrl);

/* With AGENTC_MANUAL_CREDIT: lets the agent send `bytes` more on `stream` (OUT or ERR).
 * Outstanding credit is capped at FRAME_MAX_CREDIT. 0 or -1. */
int agentc_grant(struct agentc_chan *ch, enum frame_stream stream, uint32_t bytes);

/* Ends our use of the channel: sends CLOSE, no more callbacks for it, handle invalid at
 * once. For exec channels the process keeps running (detached; see op "attach"). */
void agentc_close(struct agentc_chan *ch);

/* Roughly the heap bytes a JSON value from the guest costs once kept: string and key
 * bytes plus a fixed 32 per value. Callers that keep event contents beyond the callback
 * (directory listings, watch events) bound their total with it, since a count of entries
 * says nothing about their size. */
size_t agentc_json_weight(const json_t *v);

/* Bytes agentc holds for this connection: queued toward the agent plus received and not
 * yet handled (not the channels' IN queues, which are the callers' to bound). */
size_t agentc_buffered(const struct agentc *c);

/* The channel id on the wire (for logs). */
uint32_t agentc_chan_id(const struct agentc_chan *ch);

/* ---- blocking helper for tests and tools (not for spaced's loop) ----
 *
 * Runs `base` until `request` (borrowed) completes and returns its last EVENT (new
 * reference: the "result" of stat/mkdir/..., or "exit" of an exec without stdin), or
 * NULL with the ERROR code/message copied into code[codelen], msg[msglen]. Output bytes,
 * if any, are appended to *out (malloc'd, caller frees; out may be NULL to drop them). */
json_t *agentc_call(struct agentc *c, struct event_base *base, json_t *request,
                    char **out, size_t *outlen, char *code, size_t codelen, char *msg,
                    size_t msglen);

#endif
