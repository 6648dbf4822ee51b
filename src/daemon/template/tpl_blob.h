/* tpl_blob: one file moved from one node of a cluster to another over the node API,
 * verified by size and SHA-256 before anyone uses it. The generic half of "things that
 * travel": a sandbox snapshot's files (sandbox/sbx_travel.c) use it; a built template's
 * image has its own older copy of the same steps (tpl_fetch.c).
 *
 * Fetch: GET <target> on a live node's advertised URL with the node token, streamed to
 * `dst` (created, truncated) while hashed; more bytes than `size` are refused as they
 * arrive. done runs once, on the loop: err NULL when dst holds exactly `size` bytes
 * whose SHA-256 is `sha256` (fsynced), else err says why and dst is removed:
 *   502 blob_digest_mismatch   other bytes than recorded
 *   502 blob_fetch_failed      the source answered an error, or sent too few/many bytes
 *   503 blob_source_unavailable the source is not live, has no address, or did not answer
 *   500 host_io                dst could not be written
 * The caller maps codes to its own vocabulary (code_prefix: "snapshot" gives
 * snapshot_digest_mismatch, ...).
 *
 * Serve: the node-token check every /internal route makes first (a request without it
 * learns nothing, not even whether the thing exists: 404), and streaming one regular
 * file. Prefix tpl_blob_. */
#ifndef SPACE_TPL_BLOB_H
#define SPACE_TPL_BLOB_H

#include <stdbool.h>
#include <stdint.h>

#include "daemon/spaced.h"

struct http_req;
struct tpl_blob;

/* A node is a source while its heartbeat is younger than this (cluster.h's CLUSTER_DEAD_MS). */
#define TPL_BLOB_SOURCE_DEAD_MS 10000

typedef void (*tpl_blob_done)(void *arg, const struct spaced_err *err);

/* Starts the fetch: the handle (done will run), or NULL with err (done never runs). */
struct tpl_blob *tpl_blob_fetch(struct spaced *sp, const char *node_id, const char *target, const char *dst,
                                int64_t size, const char *sha256, const char *code_prefix, tpl_blob_done done,
                                void *arg, struct spaced_err *err);
/* Stops a fetch whose done has not run yet (done never runs; dst removed). */
void tpl_blob_cancel(struct tpl_blob *b);

/* Whether the request carries this node's token; false after replying 404. */
bool tpl_blob_peer_ok(struct spaced *sp, struct http_req *req);
/* Streams the regular file at path (200), or replies 404 naming `what`. */
void tpl_blob_serve(struct http_req *req, const char *path, const char *what);

#endif
