/* auth: API keys, tenants and signed tokens.
 *
 * API keys: a secret "space_<48 hex>" shown once at creation; the store keeps only its
 * SHA-256 (store_key.hash), so a leaked database reveals no usable key. Requests carry
 * it as `Authorization: Bearer <key>` or `X-API-Key: <key>`. Every key belongs to one
 * tenant; admin keys (tenant "admin") may also create, list and revoke keys. On first
 * start spaced creates an admin key and writes it to <data-dir>/admin.key (mode 0600).
 *
 * Tokens (attach tokens for sessions, E2B envd access tokens): HMAC-SHA256 over
 * "<scope>.<expiry ms>" with a 32-byte secret kept in <data-dir>/token.secret (0600), so
 * they survive a restart and need no store row. A token is valid only for the exact
 * scope string it was minted for (e.g. "session:<sandbox>:<session>"), which is how a
 * token for one session is refused by every other session and sandbox. */
#ifndef SPACE_AUTH_H
#define SPACE_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon/store/store.h"

struct spaced;
struct http_req;
struct auth;

#define AUTH_ADMIN_TENANT "admin"
#define AUTH_SECRET_PREFIX "space_"
#define AUTH_SECRET_LEN (6 + 48)  /* "space_" + 48 hex digits */
#define AUTH_TOKEN_MAX 256        /* room for any token auth_token_mint produces */

/* Who made the request (filled by auth_require; caller-owned, plain data). */
struct auth_principal {
    char tenant[STORE_ID_MAX]; /* tenant id: scope of every lookup */
    char key_id[STORE_ID_MAX]; /* which key authenticated */
    bool admin;                /* key may manage keys */
};

/* Loads or creates <data_dir>/token.secret and, if no admin key exists yet, creates one
 * and writes <data_dir>/admin.key (0600). Returns NULL with a message on failure. */
struct auth *auth_new(struct store *st, const char *data_dir, char *err, size_t errlen);
void auth_free(struct auth *a);

/* Authenticates req. On success fills *who and returns true. On failure sends 401
 * {"error":{"code":"unauthorized",...}} itself (missing, malformed, unknown, revoked or
 * expired key: the message says which, never echoing the key) and returns false. */
bool auth_require(struct spaced *sp, struct http_req *req, struct auth_principal *who);
/* Same, and additionally 403 "forbidden" unless the key is an admin key. */
bool auth_require_admin(struct spaced *sp, struct http_req *req, struct auth_principal *who);
/* The API key a request presents ("Authorization: Bearer <key>", else "X-API-Key"),
 * unchecked; "" for an Authorization header of another scheme, NULL when absent. */
const char *auth_request_key(struct http_req *req);

/* The check itself, without HTTP: key is the presented secret. Returns 0 and fills who,
 * -1 with a reason in why[cap] ("unknown API key", "API key revoked", ...), or
 * AUTH_E_STORE when the store could not be read (the key is neither good nor bad: the
 * caller answers 503, never 401, so a client does not discard a valid key). */
#define AUTH_E_STORE (-2)
int auth_check_key(struct auth *a, const char *key, struct auth_principal *who, char *why,
                   size_t cap);

/* Creates a key for tenant `tenant_name` (creating the tenant if new). secret_out
 * receives the secret (AUTH_SECRET_LEN + 1 bytes), shown to the user once.
 * ttl_s > 0 sets an expiry. */
int auth_key_create(struct auth *a, const char *tenant_name, bool admin, int64_t ttl_s,
                    struct store_key *out, char *secret_out, char *err, size_t errlen);

/* Hex SHA-256 of a secret (65 bytes with NUL), as stored in store_key.hash. */
void auth_hash_secret(const char *secret, char out[65]);

/* Signed tokens. mint writes "<expiry ms>.<hex hmac>" to out (AUTH_TOKEN_MAX) for scope,
 * valid until expires_ms. verify returns true only for an unexpired token minted for
 * exactly this scope (constant-time comparison). */
int auth_token_mint(struct auth *a, const char *scope, int64_t expires_ms, char *out,
                    size_t cap);
bool auth_token_verify(struct auth *a, const char *scope, const char *token, int64_t now_ms);

#endif
