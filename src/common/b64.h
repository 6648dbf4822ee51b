/* b64: standard base64 (RFC 4648, with padding) for small binary fields in protocol
 * JSON (the entropy of the agent's `refresh`). No allocation: callers pass buffers. */
#ifndef SPACE_B64_H
#define SPACE_B64_H

#include <stddef.h>
#include <stdint.h>

/* Bytes b64_encode writes for n input bytes, including the terminating NUL. */
#define B64_ENCODED_SIZE(n) ((((n) + 2) / 3) * 4 + 1)

/* Encodes in[0..n) into out (B64_ENCODED_SIZE(n) bytes), NUL-terminated. Returns the
 * string length. */
size_t b64_encode(const uint8_t *in, size_t n, char *out);

/* Decodes the NUL-terminated `in` into out[cap]. Rejects whitespace, bad characters,
 * bad padding and output over cap. Returns the decoded length or -1. */
long b64_decode(const char *in, uint8_t *out, size_t cap);

#endif
