/* e2b_multipart: a streaming multipart/form-data parser for envd's POST /files.
 *
 * Bodies may be gigabytes, so nothing but one part's header block (bounded by
 * E2B_MP_MAX_HEADERS) and the tail that could start a boundary is ever buffered: bytes
 * are fed as they arrive and part contents go straight to the callbacks. The E2B SDKs
 * put the full target path in the part's `filename` parameter, so it is returned as
 * sent (quoted-string unescaped), never reduced to a base name.
 *
 * Callbacks return 0 to continue or -1 to abort (the parser then fails with the error
 * the callback stored, or invalid_argument). */
#ifndef SPACE_E2B_MULTIPART_H
#define SPACE_E2B_MULTIPART_H

#include <stddef.h>
#include <stdint.h>

#include "e2b_error.h"

#define E2B_MP_MAX_HEADERS 8192   /* bytes of one part's header block */
#define E2B_MP_MAX_BOUNDARY 70    /* RFC 2046 */

struct e2b_mp_callbacks {
    /* A part starts. name/filename from Content-Disposition (NULL when absent), valid
     * during the call only. */
    int (*part_begin)(void *arg, const char *name, const char *filename, struct e2b_err *err);
    /* Content bytes of the current part (never empty). */
    int (*part_data)(void *arg, const uint8_t *data, size_t len, struct e2b_err *err);
    /* The current part ended. */
    int (*part_end)(void *arg, struct e2b_err *err);
};

struct e2b_mp;

/* Parses the boundary out of a Content-Type value ("multipart/form-data; boundary=x").
 * Returns a parser (caller frees with e2b_mp_free) or NULL with err (invalid_argument
 * when the type is not multipart/form-data or the boundary is missing or invalid).
 * cbs and arg are borrowed for the parser's life. */
struct e2b_mp *e2b_mp_new(const char *content_type, const struct e2b_mp_callbacks *cbs,
                          void *arg, struct e2b_err *err);
/* Feeds body bytes. 0, or -1 with err (malformed body or a callback's error); after an
 * error every further call fails. */
int e2b_mp_feed(struct e2b_mp *mp, const uint8_t *data, size_t len, struct e2b_err *err);
/* The body ended: 0 if the closing boundary was seen, else -1 with err. */
int e2b_mp_finish(struct e2b_mp *mp, struct e2b_err *err);
void e2b_mp_free(struct e2b_mp *mp);

#endif
