/* tpl_blob: fetching one content-addressed blob (a file of known size and SHA-256) from
 * another node over the node API, written to a local path only once verified. Template
 * images travel with it (tpl_fetch.c); anything else named by its digest can (sandbox
 * snapshots). It knows nothing of templates, the store or the cluster: the caller picks
 * the holder and the request target.
 *
 * The bytes arrive on the event loop and go, in order, to a worker thread that opens
 * the temporary file, hashes and writes them, and fsyncs at the end: the loop never
 * waits on the disk or on SHA-256 (a 256 MiB image is seconds of hashing under ASan).
 * The size bound is checked on the loop before a byte is handed over (a holder sending
 * more is cut off), the digest after the last byte, and only then is the temporary file
 * renamed to the destination. While more than TPL_BLOB_QUEUE_HIGH bytes wait for the
 * worker, reading from the holder pauses. Prefix tpl_blob_. */
#ifndef SPACE_TPL_BLOB_H
#define SPACE_TPL_BLOB_H

#include <stdbool.h>
#include <stdint.h>

struct event_base;
struct spaced_err;

#define TPL_BLOB_QUEUE_HIGH (8u << 20) /* reading pauses above this many queued bytes */
#define TPL_BLOB_QUEUE_LOW (2u << 20)  /* and resumes below this */

struct tpl_blob_req {
    const char *url;    /* the holder's advertised base URL, http://HOST:PORT */
    const char *target; /* request target on it, e.g. /internal/templates/NAME/image */
    const char *token;  /* sent as the node token header (NULL: "") */
    const char *sha256; /* the expected digest, 64 lowercase hex digits */
    int64_t size;       /* the expected size in bytes (> 0); more is refused */
    const char *dest;   /* where the verified blob is renamed to; the bytes go first to
                         * DIR/.LEAF.fetch next to it (a name sweeps skip) */
    const char *what;   /* for messages, e.g. "template x" */
    const char *source; /* the holder's name, for messages */
    int timeout_s;      /* until the first byte and between bytes */
};

/* done(arg, NULL): req->dest holds exactly the expected bytes (fsynced, renamed).
 * done(arg, err): nothing was published and the temporary file is gone; err is 502
 * blob_digest_mismatch (other bytes than expected), 502 blob_fetch_failed (short,
 * long, an HTTP error), 502 blob_source_unavailable (no answer) or 500 host_io. The
 * caller may rename codes. Called once, from the loop, never from inside
 * tpl_blob_fetch; the blob is freed right after it returns. */
typedef void (*tpl_blob_done)(void *arg, const struct spaced_err *err);

struct tpl_blob;
/* Starts a fetch: the blob, or NULL with err (nothing started, no callback). */
struct tpl_blob *tpl_blob_fetch(struct event_base *base, const struct tpl_blob_req *req, tpl_blob_done done,
                                void *arg, struct spaced_err *err);
/* Abandons a fetch whose callback has not run: no callback follows, the temporary file
 * is removed, b is freed (waits for the worker's current write). */
void tpl_blob_cancel(struct tpl_blob *b);
/* Bytes received so far (for logs). */
int64_t tpl_blob_received(const struct tpl_blob *b);

/* ---- the holder's side ---- */

struct http_req;
/* Whether req carries the node token `want` (constant-time compare; false when want is
 * NULL or empty: a daemon without a token serves no blob). */
bool tpl_blob_token_ok(const struct http_req *req, const char *want);
/* Streams the regular file at path as a 200 application/octet-stream reply of its size,
 * reading no faster than the client takes it: 0, or -1 when the file cannot be opened
 * (nothing was replied: the caller answers). */
int tpl_blob_serve(struct http_req *req, const char *path, const char *what);

#endif
