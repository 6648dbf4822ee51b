/* sess_token.c: minting and verifying attach tokens; see sess_token.h. */
#include "daemon/session/sess_token.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <string.h>

static const char b64url[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/* Encodes 32 bytes as 43 unpadded base64url characters. */
static void encode32(const uint8_t in[32], char *out)
{
    size_t o = 0;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < 32; i++) {
        acc = (acc << 8) | in[i];
        bits += 8;
        while (bits >= 6) {
            bits -= 6;
            out[o++] = b64url[(acc >> bits) & 63];
        }
    }
    if (bits > 0)
        out[o++] = b64url[(acc << (6 - bits)) & 63];
    out[o] = '\0';
}

static int digest(const char *text, size_t len, uint8_t out[32])
{
    unsigned int n = 0;
    return EVP_Digest(text, len, out, &n, EVP_sha256(), NULL) == 1 && n == 32 ? 0 : -1;
}

int sess_token_mint(struct sess_token *t, time_t expires, char out[SESS_TOKEN_LEN + 1])
{
    uint8_t raw[32];
    if (RAND_bytes(raw, sizeof raw) != 1)
        return -1;
    memcpy(out, SESS_TOKEN_PREFIX, 4);
    encode32(raw, out + 4);
    OPENSSL_cleanse(raw, sizeof raw);
    t->expires = expires;
    return digest(out, SESS_TOKEN_LEN, t->digest);
}

int sess_token_is_attach(const char *text)
{
    return text && strncmp(text, SESS_TOKEN_PREFIX, 4) == 0;
}

enum sess_token_check sess_token_verify(const struct sess_token *t, const char *text,
                                        time_t now)
{
    uint8_t d[32];
    if (!text || strlen(text) != SESS_TOKEN_LEN || !sess_token_is_attach(text))
        return SESS_TOKEN_MISMATCH;
    if (digest(text, SESS_TOKEN_LEN, d) < 0)
        return SESS_TOKEN_MISMATCH;
    if (CRYPTO_memcmp(d, t->digest, sizeof d) != 0)
        return SESS_TOKEN_MISMATCH;
    return now > t->expires ? SESS_TOKEN_EXPIRED : SESS_TOKEN_VALID;
}
