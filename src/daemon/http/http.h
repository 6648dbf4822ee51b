/* http: a small, strict HTTP/1.1 server on libevent bufferevents.
 *
 * Why not evhttp: it buffers whole request bodies, which rules out streaming 1 GiB
 * uploads with backpressure, and it gives no control over slowloris heads. This server
 * hands the request to the application as soon as the HEAD is complete and valid; the
 * application then chooses to read the body buffered (bounded) or streamed (with pause
 * for backpressure), and replies buffered or streamed (chunked, with drain callbacks).
 *
 * Threading: everything runs on the event_base's thread. Every function below must be
 * called from that thread (from a callback, or from an event on the same base).
 * The process must ignore SIGPIPE (a write to a vanished client would kill it).
 *
 * What the server does by itself (the application never sees these requests):
 *   - malformed or hostile heads: 400/413/414/431/501/505 with a JSON error body
 *     {"error":{"code":"...","message":"..."}}, then closes the connection;
 *   - request smuggling defences (RFC 9112 6.3): Content-Length together with
 *     Transfer-Encoding, two Content-Length fields, a Transfer-Encoding other than
 *     exactly "chunked", bad chunk sizes, obs-fold, bare CR/LF: all rejected with 400/501;
 *   - slowloris: the whole head must arrive within header_timeout_ms;
 *   - beyond max_connections: 503 and close, the server keeps serving;
 *   - Expect: 100-continue: "100 Continue" is sent when the application starts reading
 *     the body (not if it replies first, e.g. with an error);
 *   - HEAD: replies keep their headers (Content-Length included), bodies are dropped;
 *   - keep-alive and pipelining: requests on one connection are handled one at a time,
 *     in order; the next head is parsed only after the current reply has been queued;
 *   - Date header on every response; one log line per response:
 *     event=request method=.. path=.. status=.. bytes=.. ms=.. peer=..
 *
 * REQUEST LIFETIME (the one rule to remember):
 *   A `struct http_req *` is valid from the dispatch call until EITHER
 *     (a) the application finishes its reply: http_reply*() returned, or
 *         http_stream_end() returned;  OR
 *     (b) the request's on_close callback has returned (client went away, timeout,
 *         invalid body, server shutdown). on_close fires only for requests whose reply
 *         was not finished, so it is the single place to free per-request state.
 *   After that, no callback of that request fires again and the handle must not be used.
 *   The server owns the handle; the application never frees it.
 *   http_reply_abort() and http_req_upgrade() also finish the request (case a).
 */
#ifndef SPACE_HTTP_H
#define SPACE_HTTP_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

struct event_base;
struct http_server;
struct http_req;

/* Limits; zero fields take the default shown (see http_limits_default). */
struct http_limits {
    size_t max_header_bytes;        /* whole head incl. request line (16 KiB) -> 431 */
    size_t max_target_bytes;        /* request target length (8 KiB) -> 414 */
    unsigned max_headers;           /* header fields per request (100) -> 431 */
    unsigned header_timeout_ms;     /* whole head must arrive within this (10 s) */
    unsigned body_idle_timeout_ms;  /* no body byte for this long -> abort (30 s);
                                       not counted while the application paused the body */
    unsigned write_timeout_ms;      /* queued output not accepted by the client for this
                                       long -> abort (60 s); idle streams do not count */
    unsigned keepalive_idle_ms;     /* idle keep-alive connection closed after (60 s) */
    unsigned max_connections;       /* open connections; beyond: 503 + close (1024) */
    unsigned max_conns_per_client;  /* open connections from one address; beyond: 429 +
                                       Retry-After + close (128; UINT_MAX = no cap) */
    size_t max_body_default;        /* http_req_read_body() with max 0 uses this (1 MiB) */
    size_t stream_low_water;        /* http_stream_on_drain fires when at most this many
                                       bytes remain queued (64 KiB) */
};

/* Fills every field with its default. */
void http_limits_default(struct http_limits *lim);

/* Called once per request when its head is complete and valid. The handler must
 * eventually reply (now or later, from any callback on the same base) or be told by
 * on_close that the request died. */
typedef void (*http_handler_fn)(struct http_req *req, void *arg);

/* ---- server ---------------------------------------------------------------------- */

/* Creates a server on `base`. `lim` may be NULL (defaults); it is copied. `dispatch`
 * receives every valid request (router_dispatch from router.h fits here, with the
 * router as arg). Returns NULL on allocation failure. Caller owns the server. */
struct http_server *http_server_new(struct event_base *base, const struct http_limits *lim,
                                    http_handler_fn dispatch, void *arg);

/* Listens on "host:port": "127.0.0.1:7070", "[::1]:0", "0.0.0.0:80". Port 0 binds an
 * ephemeral port (see http_server_port). May be called more than once (several
 * listeners). Returns 0, or -1 with a message in err[errlen]. */
int http_server_listen(struct http_server *srv, const char *addr, char *err, size_t errlen);

/* The port of the most recently added listener (useful after port 0), or 0. */
int http_server_port(const struct http_server *srv);

/* Number of open client connections (for tests and metrics). */
unsigned http_server_connections(const struct http_server *srv);

/* Closes listeners and every connection (firing on_close of live requests), frees srv.
 * NULL is accepted. */
void http_server_free(struct http_server *srv);

/* ---- request accessors (all strings are owned by the request, NUL-terminated, valid
 * while the request is) ------------------------------------------------------------- */

const char *http_req_method(const struct http_req *req);  /* "GET", "POST", ... */
bool http_req_is_head(const struct http_req *req);         /* method is HEAD */
/* Path, percent-decoded, without the query; always starts with '/', never holds NUL. */
const char *http_req_path(const struct http_req *req);
/* The raw request target as sent ("/a%20b?x=1"). */
const char *http_req_target(const struct http_req *req);
/* Decoded query parameter (`+` is a space). http_req_query returns the first value or
 * NULL; http_req_query_n the idx-th (0-based) value of a repeated parameter or NULL.
 * A parameter without '=' has the value "". */
const char *http_req_query(const struct http_req *req, const char *name);
const char *http_req_query_n(const struct http_req *req, const char *name, unsigned idx);
/* Header by name, case-insensitive: first value or NULL; the idx-th of repeated ones. */
const char *http_req_header(const struct http_req *req, const char *name);
const char *http_req_header_n(const struct http_req *req, const char *name, unsigned idx);
/* Header iteration in arrival order: returns false past the end. */
bool http_req_header_at(const struct http_req *req, unsigned i, const char **name,
                        const char **value);
/* Body framing: content length (>= 0), or -1 when the body is chunked. A request with
 * neither has length 0. */
int64_t http_req_content_length(const struct http_req *req);
bool http_req_chunked(const struct http_req *req);
/* Peer address as "ip:port" ("[v6]:port" for IPv6). */
const char *http_req_peer(const struct http_req *req);
/* Path parameters set by a router (router_param reads them). name/value are copied;
 * returns 0 or -1 on allocation failure. Unknown name -> NULL. */
int http_req_set_param(struct http_req *req, const char *name, const char *value);
const char *http_req_param(const struct http_req *req, const char *name);
/* A pointer for the application; the server never touches what it points to. */
void http_req_set_user(struct http_req *req, void *user);
void *http_req_user(const struct http_req *req);
/* The handler a router dispatched the request to (router.c records it; NULL before),
 * so a request parked before its handler did anything can be run again from the top
 * (router_replay). */
void http_req_set_route(struct http_req *req, http_handler_fn fn, void *arg);
http_handler_fn http_req_route(const struct http_req *req, void **arg);

/* Registers cb to run if the request dies before the reply is finished (client closed,
 * read/write error or timeout, invalid body, server freed). The handle is dead after cb
 * returns. Calling again replaces the callback. */
typedef void (*http_close_fn)(struct http_req *req, void *arg);
void http_req_on_close(struct http_req *req, http_close_fn cb, void *arg);

/* ---- request body ----------------------------------------------------------------- */

/* Buffered body: `done` runs once with the whole body (data is NUL-terminated for
 * convenience, len excludes the NUL; valid only during the call). max == 0 means
 * limits.max_body_default. A body larger than max makes the server answer 413 itself
 * and fire on_close instead of done (Content-Length is checked before any byte is read).
 * Returns 0, or -1 if the body was already claimed. */
typedef void (*http_body_fn)(struct http_req *req, const char *data, size_t len, void *arg);
int http_req_read_body(struct http_req *req, size_t max, http_body_fn done, void *arg);

/* Streamed body (Content-Length or chunked): `chunk` runs for each piece as it arrives
 * (decoded payload, never empty), `end` once after the last byte. Pieces are valid only
 * during the call. The handler may reply from any of them; once it replies, no further
 * body callback fires and the rest of the body is drained or the connection closed.
 * Returns 0, or -1 if the body was already claimed. */
typedef void (*http_chunk_fn)(struct http_req *req, const char *data, size_t len, void *arg);
typedef void (*http_end_fn)(struct http_req *req, void *arg);
int http_req_stream_body(struct http_req *req, http_chunk_fn chunk, http_end_fn end, void *arg);

/* Backpressure for streamed bodies: paused == true stops chunk (and end) delivery and,
 * once 256 KiB is buffered, stops reading the socket; the body idle timeout does not
 * run while paused. false resumes (deliveries of already-buffered data happen from the
 * event loop, not inside this call). */
void http_req_pause_body(struct http_req *req, bool paused);

/* A body the application never claims is discarded after the reply: drained if small
 * (<= 64 KiB remaining), else the connection is closed after the response. */

/* ---- buffered replies (each finishes the request) ---------------------------------- */

/* Adds a response header before the reply starts. The server sets Date,
 * Content-Length / Transfer-Encoding and Connection itself (adding one of those is
 * refused). Returns -1 (and adds nothing) for those, if the value holds CR or LF, or if
 * the name is not a token. */
int http_reply_add_header(struct http_req *req, const char *name, const char *value);

/* Replies with `len` bytes of `data` (copied). content_type may be NULL (no header). */
void http_reply(struct http_req *req, int status, const char *content_type, const void *data,
                size_t len);
/* Replies with `json` serialised compactly, Content-Type application/json. Does not take
 * ownership of json. A NULL json or serialisation failure gives a 500 error reply. */
void http_reply_json(struct http_req *req, int status, const json_t *json);
/* Replies {"error":{"code":code,"message":<formatted>}} with the given status. */
void http_reply_error(struct http_req *req, int status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void http_reply_verror(struct http_req *req, int status, const char *code, const char *fmt,
                       va_list ap) __attribute__((format(printf, 4, 0)));

/* ---- streamed replies --------------------------------------------------------------- */

/* Starts a streamed response and sends the head immediately. length < 0: body of
 * unknown length (chunked for HTTP/1.1 clients, close-delimited for HTTP/1.0);
 * length >= 0: exactly that many bytes follow (Content-Length, e.g. file downloads).
 * Returns 0, or -1 if a reply was already started. */
int http_stream_start(struct http_req *req, int status, const char *content_type, int64_t length);
/* Queues data (copied) and flushes it as soon as the socket allows; every call becomes
 * one chunk so frames are never held back. Empty writes are ignored. Returns 0, or -1
 * if no stream is active or the data would exceed a declared length. Writing never
 * blocks: use http_stream_pending / http_stream_on_drain to bound memory. */
int http_stream_write(struct http_req *req, const void *data, size_t len);
/* Bytes queued on the connection that the client has not accepted yet. */
size_t http_stream_pending(const struct http_req *req);
/* Caps the kernel's send buffer of the stream's connection at about `bytes` (the kernel
 * doubles it for bookkeeping; autotuning, which grows it to megabytes, stops). For
 * streams of small notifications: a client that stops reading then shows in
 * http_stream_pending after kilobytes, not after the megabytes the kernel would hold for
 * it first. */
void http_stream_cap_sndbuf(struct http_req *req, int bytes);
/* Runs cb once, from the event loop, when pending drops to limits.stream_low_water or
 * below (immediately-next-loop if it already is). Re-register for the next drain. */
typedef void (*http_drain_fn)(struct http_req *req, void *arg);
void http_stream_on_drain(struct http_req *req, http_drain_fn cb, void *arg);
/* Finishes the stream (last chunk). If a declared length was not reached the connection
 * is closed instead, so the client sees a truncated body rather than a wrong one.
 * Finishes the request. */
void http_stream_end(struct http_req *req);

/* ---- ending a reply abnormally ------------------------------------------------------ */

/* Gives up on the reply in progress (e.g. a proxied upstream died mid-body): the
 * connection is closed once what was already queued is flushed, without a terminating
 * chunk and before a declared Content-Length is reached, so the client sees an error
 * rather than a complete-looking response. If no reply was started the client gets no
 * response at all (the connection just closes). Logged as event=http.abort with `why`.
 * Finishes the request. For HTTP/1.0 close-delimited streams the client cannot tell a
 * cut from the end: such clients get no framing to check. */
void http_reply_abort(struct http_req *req, const char *why);

/* ---- protocol upgrades (101 Switching Protocols) ----------------------------------- */

/* Receives the connection after an upgrade. `bev` is a socket bufferevent (read and
 * write enabled, no callbacks, no timeouts, watermarks 0) that the callee now owns and
 * frees (it closes the socket). Its input may already hold bytes the client sent after
 * the request head (they belong to the new protocol: process them before waiting for a
 * read callback); its output may still hold the 101 head being flushed. bev is NULL if
 * the connection died before the hand-over (write error, server freed): nothing to
 * free then. */
struct bufferevent;
typedef void (*http_upgrade_fn)(struct bufferevent *bev, void *arg);

/* Answers `101 Switching Protocols` with the headers added by http_reply_add_header,
 * "Connection: Upgrade" and "Upgrade: <protocol>", and hands the connection over: `cb`
 * runs once, from the event loop (never inside this call), with the bufferevent. From
 * then on the connection is no longer the server's: no head/idle/body/write timeouts,
 * not counted in max_connections nor http_server_connections, not closed by
 * http_server_free. The new owner applies its own limits and backpressure in both
 * directions (bufferevent_disable(EV_READ) while its peer is slow, watch the output
 * length for the other way). Finishes the request (the handle is dead on return).
 * Refused with -1 (nothing sent, the request stays alive for an ordinary reply) if a
 * reply was started, the request is HTTP/1.0, a request body is not fully read
 * (upgrade requests normally have none), or `protocol` is empty or holds a control
 * character. */
int http_req_upgrade(struct http_req *req, const char *protocol, http_upgrade_fn cb, void *arg);

/* Reason phrase for a status code ("Not Found"), "Unknown" for others. */
const char *http_status_reason(int status);

#endif
