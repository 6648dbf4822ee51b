/* e2b_envelope: encode and parse Connect streaming envelopes. */
#include "e2b_envelope.h"

#include <stdlib.h>
#include <string.h>

void e2b_env_header(uint8_t out[E2B_ENV_HDR], uint8_t flags, uint32_t len)
{
    out[0] = flags;
    out[1] = (uint8_t)(len >> 24);
    out[2] = (uint8_t)(len >> 16);
    out[3] = (uint8_t)(len >> 8);
    out[4] = (uint8_t)len;
}

long e2b_env_parse(const uint8_t *buf, size_t len, uint32_t max, struct e2b_env *out,
                   struct e2b_err *err)
{
    if (len < E2B_ENV_HDR)
        return 0;
    uint8_t flags = buf[0];
    uint32_t plen = (uint32_t)buf[1] << 24 | (uint32_t)buf[2] << 16 | (uint32_t)buf[3] << 8 |
                    buf[4];
    if (flags & ~(E2B_ENV_FLAG_COMPRESSED | E2B_ENV_FLAG_END))
        return e2b_err_set(err, E2B_INVALID_ARGUMENT, "envelope: unknown flags 0x%02x", flags);
    if (flags & E2B_ENV_FLAG_COMPRESSED)
        return e2b_err_set(err, E2B_INVALID_ARGUMENT,
                           "envelope: compressed messages are not supported");
    if (plen > max)
        return e2b_err_set(err, E2B_RESOURCE_EXHAUSTED,
                           "envelope: message of %u bytes exceeds the limit of %u", plen, max);
    if (len - E2B_ENV_HDR < plen)
        return 0;
    out->flags = flags;
    out->payload = buf + E2B_ENV_HDR;
    out->len = plen;
    return (long)(E2B_ENV_HDR + plen);
}

json_t *e2b_env_parse_single(const uint8_t *body, size_t len, struct e2b_err *err)
{
    struct e2b_env env;
    long n = e2b_env_parse(body, len, E2B_ENV_MAX_PAYLOAD, &env, err);
    if (n < 0)
        return NULL;
    if (n == 0) {
        e2b_err_set(err, E2B_INVALID_ARGUMENT, "envelope: truncated request (%zu bytes)", len);
        return NULL;
    }
    if ((size_t)n != len) {
        e2b_err_set(err, E2B_INVALID_ARGUMENT, "envelope: %zu bytes after the request message",
                    len - (size_t)n);
        return NULL;
    }
    if (env.flags & E2B_ENV_FLAG_END) {
        e2b_err_set(err, E2B_INVALID_ARGUMENT, "envelope: request is an end-of-stream message");
        return NULL;
    }
    json_error_t jerr;
    json_t *msg = json_loadb((const char *)env.payload, env.len, JSON_REJECT_DUPLICATES, &jerr);
    if (!msg) {
        e2b_err_set(err, E2B_INVALID_ARGUMENT, "request message is not JSON: %s", jerr.text);
        return NULL;
    }
    if (!json_is_object(msg)) {
        json_decref(msg);
        e2b_err_set(err, E2B_INVALID_ARGUMENT, "request message is not a JSON object");
        return NULL;
    }
    return msg;
}

uint8_t *e2b_env_encode(const json_t *msg, uint8_t flags, size_t *outlen)
{
    size_t n = json_dumpb(msg, NULL, 0, JSON_COMPACT);
    if (n == 0 || n > UINT32_MAX - E2B_ENV_HDR)
        return NULL;
    uint8_t *buf = malloc(E2B_ENV_HDR + n);
    if (!buf)
        return NULL;
    if (json_dumpb(msg, (char *)buf + E2B_ENV_HDR, n, JSON_COMPACT) != n) {
        free(buf);
        return NULL;
    }
    e2b_env_header(buf, flags, (uint32_t)n);
    *outlen = E2B_ENV_HDR + n;
    return buf;
}

uint8_t *e2b_env_encode_end(const struct e2b_err *err, size_t *outlen)
{
    json_t *end = e2b_end_stream_json(err);
    if (!end)
        return NULL;
    uint8_t *buf = e2b_env_encode(end, E2B_ENV_FLAG_END, outlen);
    json_decref(end);
    return buf;
}
