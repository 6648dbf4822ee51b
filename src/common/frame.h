/* frame: the wire format of the agent protocol (host spaced <-> guest space-agent).
 *
 * One byte stream (virtio-serial port "space.agent") carries frames:
 *
 *   offset 0  u32 payload_len   little-endian, <= FRAME_MAX_PAYLOAD
 *   offset 4  u32 channel       0 = connection control, else one request/stream
 *   offset 8  u8  type          enum frame_type
 *   offset 9  u8  stream        enum frame_stream (0 unless DATA/EOF/CREDIT)
 *   offset 10 u16 reserved      must be 0
 *   offset 12 payload           JSON object (HELLO OPEN CTRL EVENT ERROR), raw bytes
 *                               (DATA, PING, PONG), u32 LE (CREDIT) or empty (EOF CLOSE)
 *
 * This module is pure: parse, validate and encode, no I/O, no allocation except in
 * frame_json(). Both the agent and the host client (agentc) use it, and the fuzzers
 * drive it directly. docs/agent-protocol.md is the full specification (ops, errors,
 * flow control); this header is the part the code relies on. */
#ifndef SPACE_FRAME_H
#define SPACE_FRAME_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#define FRAME_HEADER_SIZE   12
#define FRAME_MAX_PAYLOAD   65536u          /* payload bytes in one frame */
#define FRAME_VERSION       1               /* protocol version this code speaks */
#define FRAME_MIN_VERSION   1               /* oldest version it still accepts */
/* Every stream of every channel starts with this many bytes of credit in each direction,
 * so a request can stream at once; the receiver tops it up with CREDIT frames. */
#define FRAME_WINDOW_INITIAL (256u * 1024u)
#define FRAME_MAX_CREDIT    (64u * 1024u * 1024u) /* largest single CREDIT grant, and the
                                                     largest window a sender may hold */
#define FRAME_PING_MAX      64              /* PING/PONG payload bytes */
#define FRAME_CONTROL_CHANNEL 0u

enum frame_type {
    FRAME_HELLO  = 1,   /* ch 0, both ways: JSON {version, min_version, features, ...} */
    FRAME_PING   = 2,   /* ch 0, both ways: <= 64 opaque bytes, answered by PONG */
    FRAME_PONG   = 3,   /* ch 0, both ways: the PING payload echoed */
    FRAME_OPEN   = 4,   /* host->agent, odd ch: JSON request {"op": ...} opens channel */
    FRAME_DATA   = 5,   /* ch != 0: 1..65536 raw bytes of one stream, within credit */
    FRAME_EOF    = 6,   /* ch != 0: the stream ended (stdin closed, output done) */
    FRAME_CREDIT = 7,   /* ch != 0: u32 LE bytes more the peer may send on `stream` */
    FRAME_CTRL   = 8,   /* host->agent, ch != 0: JSON {"op": "signal"|"resize", ...} */
    FRAME_EVENT  = 9,   /* agent->host, ch != 0: JSON {"type": ...} */
    FRAME_ERROR  = 10,  /* both ways, any ch: JSON {"code", "message"} */
    FRAME_CLOSE  = 11,  /* ch != 0, both ways: this side is done with the channel */
};
#define FRAME_TYPE_MAX FRAME_CLOSE

/* Streams of a channel. IN flows host->agent (process stdin, content of a `write`);
 * OUT and ERR flow agent->host (stdout/stderr of a process; OUT is also the content of a
 * `read`). CREDIT for a stream travels the opposite way to its data. */
enum frame_stream {
    FRAME_STREAM_NONE = 0,
    FRAME_STREAM_IN   = 1,
    FRAME_STREAM_OUT  = 2,
    FRAME_STREAM_ERR  = 3,
};
#define FRAME_STREAM_COUNT 4

/* Who sent the frame being validated. */
enum frame_dir {
    FRAME_FROM_HOST  = 0,
    FRAME_FROM_AGENT = 1,
};

/* A parsed frame. `payload` points into the caller's buffer (no copy): it is valid only
 * as long as that buffer is. */
struct frame {
    uint32_t len;              /* payload bytes */
    uint32_t channel;          /* channel id */
    uint8_t type;              /* enum frame_type (not yet checked by frame_parse) */
    uint8_t stream;            /* enum frame_stream (not yet checked by frame_parse) */
    const uint8_t *payload;    /* len bytes, borrowed from the parse buffer */
};

enum frame_parse_result {
    FRAME_PARSE_OK = 0,        /* *out holds one frame, *consumed bytes were used */
    FRAME_PARSE_MORE = 1,      /* incomplete: read more bytes and call again */
    FRAME_PARSE_ERROR = -1,    /* bad header: the byte stream cannot be resynchronised */
};

/* Error codes carried in ERROR frames ({"code": ..., "message": ...}). Stable strings:
 * spaced maps them to HTTP statuses. */
#define FRAME_E_INVALID_ARGUMENT  "invalid_argument"   /* bad request field */
#define FRAME_E_NOT_FOUND         "not_found"          /* path, user, pid, channel */
#define FRAME_E_PERMISSION_DENIED "permission_denied"
#define FRAME_E_ALREADY_EXISTS    "already_exists"
#define FRAME_E_NOT_DIR           "exists_not_dir"     /* a path component is a file */
#define FRAME_E_IS_DIR            "is_dir"             /* file op on a directory */
#define FRAME_E_NOT_EMPTY         "not_empty"          /* non-recursive remove of a dir */
#define FRAME_E_NO_SPACE          "no_space"           /* ENOSPC / EDQUOT */
#define FRAME_E_PROTOCOL          "protocol"           /* frame breaks the protocol */
#define FRAME_E_TOO_MANY          "too_many"           /* channel/process/size limit */
#define FRAME_E_UNSUPPORTED       "unsupported"        /* unknown op or version */
#define FRAME_E_DISCONNECTED      "disconnected"       /* connection went away (host) */
#define FRAME_E_REFUSED           "connection_refused" /* tcp: nothing listens there */
#define FRAME_E_UNREACHABLE       "unreachable"        /* tcp: no route, or timed out */
#define FRAME_E_RESET             "connection_reset"   /* tcp: the peer reset it */
#define FRAME_E_INTERNAL          "internal"           /* anything else (errno text) */

/* Parses one frame from buf[0..len). Checks the header only: reserved bytes are zero and
 * payload_len <= FRAME_MAX_PAYLOAD. On FRAME_PARSE_ERROR *why says what was wrong. */
enum frame_parse_result frame_parse(const uint8_t *buf, size_t len, struct frame *out,
                                    size_t *consumed, const char **why);

/* Checks a parsed frame's (type, channel, stream, length) against the rules for frames
 * sent by `dir` (see docs/agent-protocol.md "Frame rules"). Does not know channel state:
 * whether a channel is open is the receiver's business. Returns 0 if acceptable, else
 * -1 with *why a static string. */
int frame_check(const struct frame *f, enum frame_dir dir, const char **why);

/* Writes the 12-byte header for a frame into hdr. The caller guarantees
 * len <= FRAME_MAX_PAYLOAD. */
void frame_encode_header(uint8_t hdr[FRAME_HEADER_SIZE], uint32_t channel,
                         enum frame_type type, enum frame_stream stream, uint32_t len);

/* Encodes/decodes the 4-byte CREDIT payload. frame_credit_value returns 0 and the grant
 * in *bytes (1..FRAME_MAX_CREDIT), -1 if the frame is not a well-formed CREDIT. */
void frame_credit_payload(uint8_t out[4], uint32_t bytes);
int frame_credit_value(const struct frame *f, uint32_t *bytes);

/* Parses a JSON payload (HELLO OPEN CTRL EVENT ERROR) that must be an object. Returns a
 * new reference (caller owns it) or NULL with a message in err[errlen]. */
json_t *frame_json(const struct frame *f, char *err, size_t errlen);

/* Serialises `obj` compactly for a frame payload. Returns a malloc'd string the caller
 * frees and its length in *len, or NULL if it does not fit in FRAME_MAX_PAYLOAD. */
char *frame_json_dump(const json_t *obj, size_t *len);

/* The `tcp` op (a byte channel to a TCP port in the guest): limits and the target check
 * both ends apply, agentc before sending the OPEN and the agent on receipt. */
#define FRAME_TCP_MAX          64          /* open tcp channels per connection */
#define FRAME_TCP_HOST_DEFAULT "127.0.0.1"
#define FRAME_TCP_HOST_MAX     45          /* longest IPv6 literal */

/* Checks a tcp target: host is an IPv4 or IPv6 literal (no names: the agent must not
 * resolve), port 1..65535. Fills *addr (a struct sockaddr_in or sockaddr_in6) and
 * *addrlen when addr is non-NULL. Returns 0, or -1 with *why a static string. */
struct sockaddr_storage;
int frame_tcp_target(const char *host, long long port, struct sockaddr_storage *addr,
                     unsigned *addrlen, const char **why);

/* Name of a frame type for logs ("DATA"), "?" if unknown. */
const char *frame_type_name(unsigned type);

#endif
