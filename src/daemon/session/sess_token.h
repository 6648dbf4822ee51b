/* sess_token: attach tokens, the capability that lets a client drive one session.
 *
 * A token is `sat_` followed by 43 base64url characters encoding 32 bytes from the
 * kernel CSPRNG (256 bits). spaced keeps only the token's SHA-256 digest and its expiry,
 * so a memory or log dump does not reveal usable tokens, and verification compares
 * digests in constant time. A token is bound to its session simply by being stored in
 * that session only: presenting it to any other session or sandbox fails the compare.
 *
 * The `sat_` prefix lets the API tell an attach token from a tenant API key in the same
 * `Authorization: Bearer` header without trying both. */
#ifndef SPACE_SESS_TOKEN_H
#define SPACE_SESS_TOKEN_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#define SESS_TOKEN_PREFIX "sat_"
/* Characters in a token including the prefix, without the terminating NUL. */
#define SESS_TOKEN_LEN (4 + 43)

struct sess_token {
    uint8_t digest[32]; /* SHA-256 of the full token text */
    time_t expires;     /* CLOCK_REALTIME second after which the token is refused */
};

enum sess_token_check {
    SESS_TOKEN_VALID = 0,
    SESS_TOKEN_MISMATCH = 1, /* not this session's token (or malformed) */
    SESS_TOKEN_EXPIRED = 2,  /* this session's token, but past its expiry */
};

/* Mints a fresh token valid until `expires`: writes its text (NUL-terminated) into
 * out[SESS_TOKEN_LEN + 1] and its digest into *t. Returns 0, or -1 if the CSPRNG fails. */
int sess_token_mint(struct sess_token *t, time_t expires, char out[SESS_TOKEN_LEN + 1]);

/* Checks presented text against *t at time `now`. The digest compare is constant-time;
 * the expiry is only reported for a matching token so a probe learns nothing. */
enum sess_token_check sess_token_verify(const struct sess_token *t, const char *text,
                                        time_t now);

/* True if text looks like an attach token (prefix), as opposed to an API key. */
int sess_token_is_attach(const char *text);

#endif
