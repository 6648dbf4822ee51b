/* e2b_gzip: streaming gzip for envd /files bodies (zlib).
 *
 * Uploads may arrive with Content-Encoding: gzip (JS SDK `gzip: true`); downloads may
 * be gzipped when the client accepts it. Both directions work chunk by chunk into a
 * sink callback so no whole file is held in memory. Decompression is bounded by the
 * caller's sink (which sees every output byte) and rejects trailing garbage. */
#ifndef SPACE_E2B_GZIP_H
#define SPACE_E2B_GZIP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "e2b_error.h"

/* Receives output bytes; returns 0 to continue, -1 to abort (err set by the sink). */
typedef int (*e2b_gzip_sink)(void *arg, const uint8_t *data, size_t len, struct e2b_err *err);

struct e2b_gzip;

/* compress: true = gzip encoder, false = gzip decoder. NULL on OOM. */
struct e2b_gzip *e2b_gzip_new(bool compress, e2b_gzip_sink sink, void *arg);
/* Feeds input; output goes to the sink. 0, or -1 with err (corrupt data:
 * invalid_argument; sink failure). */
int e2b_gzip_feed(struct e2b_gzip *z, const uint8_t *data, size_t len, struct e2b_err *err);
/* End of input: flushes the encoder, or checks the decoder saw a complete stream. */
int e2b_gzip_finish(struct e2b_gzip *z, struct e2b_err *err);
void e2b_gzip_free(struct e2b_gzip *z);

/* true if an Accept-Encoding value allows gzip (q=0 refuses it). */
bool e2b_accepts_gzip(const char *accept_encoding);

#endif
