/* auth.c: API keys (SHA-256 hashed at rest), tenants, and HMAC-signed scoped tokens.
 * The HTTP side (reading the key from a request, replying 401) is in auth_http.c. */
#include "auth.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/spaced.h"
#include "log.h"

struct auth {
    struct store *st;         /* borrowed from the daemon */
    unsigned char secret[32]; /* token HMAC key, from <data_dir>/token.secret */
};

static void hex_encode(const unsigned char *in, size_t n, char *out)
{
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = hex[in[i] >> 4];
        out[2 * i + 1] = hex[in[i] & 0xf];
    }
    out[2 * n] = '\0';
}

void auth_hash_secret(const char *secret, char out[65])
{
    unsigned char md[SHA256_DIGEST_LENGTH];
    SHA256((const unsigned char *)secret, strlen(secret), md);
    hex_encode(md, sizeof md, out);
}

/* Writes data to path atomically (temp file + rename) with mode 0600. */
static int write_private_file(const char *path, const void *data, size_t len)
{
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp)
        return -1;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return -1;
    int ok = write(fd, data, len) == (ssize_t)len && fchmod(fd, 0600) == 0 && fsync(fd) == 0;
    close(fd);
    if (!ok || rename(tmp, path) != 0) {
        unlink(tmp);
        return -1;
    }
    return 0;
}

static int load_token_secret(struct auth *a, const char *data_dir, char *err, size_t errlen)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/token.secret", data_dir);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t n = read(fd, a->secret, sizeof a->secret);
        close(fd);
        if (n == (ssize_t)sizeof a->secret)
            return 0;
        snprintf(err, errlen, "%s is truncated; remove it to make a new one (tokens "
                 "already handed out become invalid)", path);
        return -1;
    }
    if (errno != ENOENT || RAND_bytes(a->secret, sizeof a->secret) != 1 ||
        write_private_file(path, a->secret, sizeof a->secret) != 0) {
        snprintf(err, errlen, "cannot create %s: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

static int find_admin(const struct store_key *k, void *arg)
{
    if (k->admin && k->revoked_ms == 0) {
        *(bool *)arg = true;
        return 1;
    }
    return 0;
}

static int ensure_admin_key(struct auth *a, const char *data_dir, char *err, size_t errlen)
{
    bool have = false;
    if (store_key_each(a->st, find_admin, &have) < 0) {
        snprintf(err, errlen, "reading keys: %s", store_errmsg(a->st));
        return -1;
    }
    if (have)
        return 0;
    struct store_key k;
    char secret[AUTH_SECRET_LEN + 1];
    if (auth_key_create(a, AUTH_ADMIN_TENANT, true, 0, &k, secret, err, errlen) < 0)
        return -1;
    char path[4096], line[AUTH_SECRET_LEN + 2];
    snprintf(path, sizeof path, "%s/admin.key", data_dir);
    int n = snprintf(line, sizeof line, "%s\n", secret);
    if (write_private_file(path, line, (size_t)n) != 0) {
        snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
        return -1;
    }
    log_info("auth.admin_key", "key_id=%s path=%s", k.id, path);
    return 0;
}

struct auth *auth_new(struct store *st, const char *data_dir, char *err, size_t errlen)
{
    struct auth *a = calloc(1, sizeof *a);
    if (!a) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    a->st = st;
    if (load_token_secret(a, data_dir, err, errlen) < 0 ||
        ensure_admin_key(a, data_dir, err, errlen) < 0) {
        auth_free(a);
        return NULL;
    }
    return a;
}

void auth_free(struct auth *a)
{
    if (!a)
        return;
    OPENSSL_cleanse(a->secret, sizeof a->secret);
    free(a);
}

int auth_check_key(struct auth *a, const char *key, struct auth_principal *who, char *why,
                   size_t cap)
{
    size_t plen = strlen(AUTH_SECRET_PREFIX);
    if (!key || strlen(key) != AUTH_SECRET_LEN || strncmp(key, AUTH_SECRET_PREFIX, plen) != 0) {
        snprintf(why, cap, "malformed API key (expected %s followed by 48 hex digits)",
                 AUTH_SECRET_PREFIX);
        return -1;
    }
    char hash[65];
    auth_hash_secret(key, hash);
    struct store_key k;
    int rc = store_key_by_hash(a->st, hash, &k);
    if (rc == STORE_NOTFOUND) {
        snprintf(why, cap, "unknown API key");
        return -1;
    }
    if (rc != 0) {
        snprintf(why, cap, "the store cannot be read (%s); retry later", store_errmsg(a->st));
        return AUTH_E_STORE;
    }
    if (k.revoked_ms) {
        snprintf(why, cap, "API key %s was revoked", k.id);
        return -1;
    }
    if (k.expires_ms && k.expires_ms <= spaced_now_ms()) {
        snprintf(why, cap, "API key %s has expired", k.id);
        return -1;
    }
    memset(who, 0, sizeof *who);
    snprintf(who->tenant, sizeof who->tenant, "%s", k.tenant);
    snprintf(who->key_id, sizeof who->key_id, "%s", k.id);
    who->admin = k.admin;
    return 0;
}

/* Finds the tenant by name or creates it ("admin" keeps the fixed id "admin"); losing
 * the insert to a concurrent creator is finding it. */
static int tenant_ensure(struct auth *a, const char *name, struct store_tenant *t, char *err,
                         size_t errlen)
{
    int rc = store_tenant_by_name(a->st, name, t);
    if (rc == 0)
        return 0;
    if (rc != STORE_NOTFOUND) {
        snprintf(err, errlen, "tenant lookup: %s", store_errmsg(a->st));
        return -1;
    }
    memset(t, 0, sizeof *t);
    if (strcmp(name, AUTH_ADMIN_TENANT) == 0)
        snprintf(t->id, sizeof t->id, "%s", AUTH_ADMIN_TENANT);
    else if (spaced_random_id(t->id, "tn", 16) < 0) {
        snprintf(err, errlen, "random source failed");
        return -1;
    }
    snprintf(t->name, sizeof t->name, "%s", name);
    t->created_ms = spaced_now_ms();
    rc = store_tenant_put(a->st, t);
    if (rc == STORE_CONFLICT) {
        /* Another daemon on the same store (a control and its nodes started together)
         * created it between our lookup and our insert: theirs is the tenant. */
        if (store_tenant_by_name(a->st, name, t) == 0)
            return 0;
    }
    if (rc != 0) {
        snprintf(err, errlen, "creating tenant: %s", store_errmsg(a->st));
        return -1;
    }
    log_info("tenant.created", "tenant=%s", t->id);
    return 0;
}

int auth_key_create(struct auth *a, const char *tenant_name, bool admin, int64_t ttl_s,
                    struct store_key *out, char *secret_out, char *err, size_t errlen)
{
    struct store_tenant t;
    if (tenant_ensure(a, tenant_name, &t, err, errlen) < 0)
        return -1;
    unsigned char raw[24];
    if (RAND_bytes(raw, sizeof raw) != 1) {
        snprintf(err, errlen, "random source failed");
        return -1;
    }
    memcpy(secret_out, AUTH_SECRET_PREFIX, strlen(AUTH_SECRET_PREFIX));
    hex_encode(raw, sizeof raw, secret_out + strlen(AUTH_SECRET_PREFIX));
    OPENSSL_cleanse(raw, sizeof raw);
    memset(out, 0, sizeof *out);
    if (spaced_random_id(out->id, "ak", 16) < 0) {
        snprintf(err, errlen, "random source failed");
        return -1;
    }
    snprintf(out->tenant, sizeof out->tenant, "%s", t.id);
    auth_hash_secret(secret_out, out->hash);
    snprintf(out->prefix, sizeof out->prefix, "%.10s", secret_out);
    out->admin = admin;
    out->created_ms = spaced_now_ms();
    out->expires_ms = ttl_s > 0 ? out->created_ms + ttl_s * 1000 : 0;
    if (store_key_put(a->st, out) != 0) {
        snprintf(err, errlen, "storing key: %s", store_errmsg(a->st));
        return -1;
    }
    log_info("key.created", "key_id=%s tenant=%s admin=%d", out->id, out->tenant, (int)admin);
    return 0;
}

static void token_mac(struct auth *a, const char *scope, int64_t expires_ms, char hexout[65])
{
    char msg[1024];
    int n = snprintf(msg, sizeof msg, "%s.%lld", scope, (long long)expires_ms);
    if (n < 0 || n >= (int)sizeof msg)
        n = (int)sizeof msg - 1; /* over-long scopes are refused by the callers first */
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned mdlen = 0;
    HMAC(EVP_sha256(), a->secret, sizeof a->secret, (const unsigned char *)msg, (size_t)n, md,
         &mdlen);
    hex_encode(md, 32, hexout);
}

int auth_token_mint(struct auth *a, const char *scope, int64_t expires_ms, char *out, size_t cap)
{
    if (strlen(scope) > 512)
        return -1;
    char mac[65];
    token_mac(a, scope, expires_ms, mac);
    int n = snprintf(out, cap, "%lld.%s", (long long)expires_ms, mac);
    return n > 0 && (size_t)n < cap ? 0 : -1;
}

bool auth_token_verify(struct auth *a, const char *scope, const char *token, int64_t now_ms)
{
    if (!token || strlen(scope) > 512)
        return false;
    char *end = NULL;
    errno = 0;
    long long exp = strtoll(token, &end, 10);
    if (errno || end == token || *end != '.' || exp <= 0 || strlen(end + 1) != 64)
        return false;
    char mac[65];
    token_mac(a, scope, (int64_t)exp, mac);
    if (CRYPTO_memcmp(mac, end + 1, 64) != 0)
        return false;
    return (int64_t)exp > now_ms;
}
