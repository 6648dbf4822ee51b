/* sse: Server-Sent Events (text/event-stream) over a streamed http reply.
 *
 * A thin layer over http_stream_*: sse_start sends the head, each sse_send writes one
 * complete event as one chunk (so a proxy or client never sees half an event), and
 * http_stream_pending / http_stream_on_drain / http_req_on_close from http.h apply
 * unchanged for backpressure and disconnects. Finish with http_stream_end(req).
 */
#ifndef SPACE_SSE_H
#define SPACE_SSE_H

#include <stddef.h>
#include <stdint.h>

#include "http.h"

/* Starts the event stream: 200, Content-Type text/event-stream, Cache-Control
 * no-cache, X-Accel-Buffering no. Returns 0 or -1 if a reply was already started. */
int sse_start(struct http_req *req);

/* Sends one event. id < 0 omits the id line (ids are written in decimal); event NULL
 * omits the event line (the client then sees "message"). data[len] may hold any bytes
 * except NUL; it is split on CRLF, CR and LF into one `data:` line each, so a payload
 * can never inject fields. Returns 0, or -1 if the stream is not active, the event
 * name holds CR/LF, or data holds NUL. */
int sse_send(struct http_req *req, int64_t id, const char *event, const char *data, size_t len);

/* Sends a comment line (": keepalive") so idle proxies and clients keep the stream open
 * and a vanished client is detected by the failed write. Returns 0 or -1. */
int sse_keepalive(struct http_req *req);

/* Parses the request's Last-Event-ID header: the decimal id, or -1 if absent/invalid. */
int64_t sse_last_event_id(const struct http_req *req);

/* Formats one event into a malloc'd buffer (*out, caller frees); for tests and for
 * callers that buffer events. Returns the length, or -1 on invalid input. */
long sse_format(int64_t id, const char *event, const char *data, size_t len, char **out);

#endif
