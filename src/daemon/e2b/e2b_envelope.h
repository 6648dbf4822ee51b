/* e2b_envelope: Connect-RPC streaming envelopes (the framing of server-streaming calls).
 *
 * Every message on a Connect stream is prefixed by 5 bytes: one flags byte and the
 * payload length as a big-endian uint32. Flag 0x02 marks the end-of-stream message
 * (JSON: {} or {"error":...}); flag 0x01 marks a compressed payload, which we never send
 * and refuse to receive (the SDKs never compress). Request bodies of streaming calls hold
 * exactly one data envelope; e2b_env_parse_single checks that. */
#ifndef SPACE_E2B_ENVELOPE_H
#define SPACE_E2B_ENVELOPE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "e2b_error.h"

#define E2B_ENV_HDR 5                   /* bytes before each payload */
#define E2B_ENV_FLAG_COMPRESSED 0x01u
#define E2B_ENV_FLAG_END 0x02u
#define E2B_ENV_MAX_PAYLOAD (1u << 20)  /* largest request message we accept (1 MiB) */

/* Writes the 5-byte prefix for a payload of `len` bytes. */
void e2b_env_header(uint8_t out[E2B_ENV_HDR], uint8_t flags, uint32_t len);

/* One parsed envelope; payload points into the caller's buffer. */
struct e2b_env {
    uint8_t flags;
    const uint8_t *payload;
    uint32_t len;
};

/* Parses one envelope at the start of buf[len]. Returns the bytes consumed (> 0), 0 if
 * more bytes are needed, or -1 with err set (unknown flag bits, compressed payload,
 * payload larger than max). */
long e2b_env_parse(const uint8_t *buf, size_t len, uint32_t max, struct e2b_env *out,
                   struct e2b_err *err);

/* Parses a streaming request body: exactly one data envelope holding a JSON object,
 * nothing after it. Returns the object (new reference) or NULL with err set
 * (invalid_argument for framing and JSON errors). */
json_t *e2b_env_parse_single(const uint8_t *body, size_t len, struct e2b_err *err);

/* Serialises `msg` compactly into one envelope with `flags`: returns a malloc'd buffer
 * (caller frees) of *outlen bytes, or NULL on allocation/encoding failure. */
uint8_t *e2b_env_encode(const json_t *msg, uint8_t flags, size_t *outlen);

/* The end-of-stream envelope for `err` (NULL or OK: success `{}`). Same ownership. */
uint8_t *e2b_env_encode_end(const struct e2b_err *err, size_t *outlen);

#endif
