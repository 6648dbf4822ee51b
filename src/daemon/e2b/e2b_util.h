/* e2b_util: small text helpers of the E2B layer: guest paths, query strings, the
 * /files URL signatures, and the per-sandbox envd access tokens.
 *
 * Paths: envd accepts absolute paths, "~" / "~/x" and paths relative to the user's
 * home; every response carries the absolute form. e2b_path_resolve produces it,
 * normalised (no "//", ".", ".."; ".." never climbs above "/").
 *
 * Tokens: envdAccessToken = "<sandbox id>.<auth token for scope e2b-envd:<id>>" (auth.h
 * signs it with the daemon's persistent secret), so a token alone names its sandbox (the
 * SDK's fallback routing when E2b-Sandbox-Id is missing), survives restarts, and the
 * daemon stores nothing per sandbox. */
#ifndef SPACE_E2B_UTIL_H
#define SPACE_E2B_UTIL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "e2b_error.h"

#define E2B_PATH_MAX 4096

/* Absolute, normalised form of `path` for a user whose home is `home` (absolute).
 * Returns a malloc'd string (caller frees) or NULL with err (empty path, NUL bytes, too
 * long: invalid_argument). */
char *e2b_path_resolve(const char *path, const char *home, struct e2b_err *err);

/* Percent-decodes s[n] leniently ('%' not followed by two hex digits stays literal);
 * plus_space turns '+' into ' '. Returns malloc'd NUL-terminated text (may contain NUL
 * bytes when %00 was given: *outlen says the length), or NULL on OOM. */
char *e2b_pct_decode(const char *s, size_t n, bool plus_space, size_t *outlen);

/* The metadata filter of GET /v2/sandboxes, as received in the (already once-decoded)
 * `metadata` query value: "k1=v1&k2=v2" form encoding whose keys and values are
 * percent-encoded once more. Returns a new object {key: value} or NULL with err
 * (invalid_argument: a pair without '=', an empty key, a NUL byte, non-UTF-8). */
json_t *e2b_metadata_filter(const char *value, struct e2b_err *err);

/* Splits a comma-joined list value ("running,paused") and tests membership. */
bool e2b_csv_has(const char *list, const char *word);

/* /files signature: "v1_" + unpadded base64 of SHA-256("<path>:<op>:<user>:<token>"
 * [":<expiration>"]). op is "read" or "write"; user "" when not given; expiration NULL
 * when not given. out must hold E2B_SIG_MAX bytes. Returns 0, -1 on failure. */
#define E2B_SIG_MAX 64
int e2b_sign(const char *path, const char *op, const char *user, const char *token,
             const char *expiration, char *out);
/* Checks a signature against the token; `expiration` (text of unix seconds, may be NULL)
 * must be a valid number, and not in the past at `now` (now == 0: not checked, for
 * finding whose signature it is). 0 if valid, -1 with err (unauthenticated: "invalid
 * signature", then "signature is already expired", envd's messages) otherwise. */
int e2b_sign_check(const char *path, const char *op, const char *user, const char *token,
                   const char *signature, const char *expiration, time_t now,
                   struct e2b_err *err);

/* The sandbox id a token claims (text before the first '.'; not verified), copied into
 * id[cap]. 0, or -1 when there is none or it does not fit. */
int e2b_token_sandbox(const char *token, char *id, size_t cap);

#endif
