/* chello: strict parser of a TLS ClientHello as it arrives on a TCP stream.
 *
 * The guest's first bytes on port 443 must be TLS handshake records (content type 22,
 * version 3.x, 1..16384 bytes each) carrying exactly one ClientHello, possibly split over
 * many records and any number of TCP segments; the caller feeds the bytes received so
 * far and gets NEED_MORE until the whole message is there. The ClientHello must parse
 * to the last byte, carry each extension at most once, exactly one server_name entry of
 * type host_name that passes policy_name_normalise, and no encrypted_client_hello (or
 * the older ESNI) extension. Anything else is an error: the gateway resets, it never
 * guesses. Pure code, no I/O. */
#ifndef SPACE_GW_CHELLO_H
#define SPACE_GW_CHELLO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "policy.h"

#define CHELLO_MAX 16384 /* largest ClientHello message (handshake body) accepted */
#define CHELLO_STREAM_MAX (CHELLO_MAX + 2048) /* raw stream bytes read before giving up */

enum chello_result {
    CHELLO_OK = 0,
    CHELLO_NEED_MORE,
    CHELLO_NOT_TLS,      /* first bytes are not a TLS handshake record */
    CHELLO_MALFORMED,    /* record or message structure broken, or too large */
    CHELLO_NO_SNI,       /* no server_name, or not exactly one host_name */
    CHELLO_BAD_SNI,      /* SNI is an IP literal or not a host name */
    CHELLO_ECH,          /* encrypted_client_hello / ESNI present */
};

struct chello {
    char sni[POLICY_NAME_MAX + 1]; /* normalised server name */
    bool alpn_h2;                  /* ALPN offers "h2" */
    bool alpn_http11;              /* ALPN offers "http/1.1" */
    size_t consumed;               /* stream bytes making up the records of the hello */
};

/* Parses the stream prefix p[0..n). */
enum chello_result chello_parse(const uint8_t *p, size_t n, struct chello *out);

/* Short reason word for logs ("no_sni", "ech", ...). */
const char *chello_result_str(enum chello_result r);

#endif
