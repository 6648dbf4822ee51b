/* e2b_util: guest paths, query decoding, /files signatures, envd tokens. */
#include "e2b_util.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "e2b_pbjson.h"
#include "http_parse.h"

char *e2b_path_resolve(const char *path, const char *home, struct e2b_err *err)
{
    if (!path || !*path) {
        e2b_err_set(err, E2B_INVALID_ARGUMENT, "path is empty");
        return NULL;
    }
    size_t plen = strlen(path), hlen = strlen(home);
    if (plen > E2B_PATH_MAX || hlen > E2B_PATH_MAX) {
        e2b_err_set(err, E2B_INVALID_ARGUMENT, "path is longer than %d bytes", E2B_PATH_MAX);
        return NULL;
    }
    /* Joined input: home + "/" + path for relative paths, "~" replaced by home. */
    char *joined = malloc(hlen + plen + 3);
    if (!joined) {
        e2b_err_set(err, E2B_INTERNAL, "out of memory");
        return NULL;
    }
    if (path[0] == '/')
        memcpy(joined, path, plen + 1);
    else if (path[0] == '~' && (path[1] == '\0' || path[1] == '/'))
        snprintf(joined, hlen + plen + 3, "%s/%s", home, path + 1);
    else
        snprintf(joined, hlen + plen + 3, "%s/%s", home, path);

    /* Normalise in place: out never grows past the input. */
    char *out = malloc(strlen(joined) + 2);
    if (!out) {
        free(joined);
        e2b_err_set(err, E2B_INTERNAL, "out of memory");
        return NULL;
    }
    size_t o = 0;
    const char *p = joined;
    while (*p) {
        while (*p == '/')
            p++;
        const char *seg = p;
        while (*p && *p != '/')
            p++;
        size_t n = (size_t)(p - seg);
        if (n == 0 || (n == 1 && seg[0] == '.'))
            continue;
        if (n == 2 && seg[0] == '.' && seg[1] == '.') {
            while (o > 0 && out[o - 1] != '/')
                o--;
            if (o > 0)
                o--;
            continue;
        }
        out[o++] = '/';
        memcpy(out + o, seg, n);
        o += n;
    }
    if (o == 0)
        out[o++] = '/';
    out[o] = '\0';
    free(joined);
    return out;
}

char *e2b_pct_decode(const char *s, size_t n, bool plus_space, size_t *outlen)
{
    char *out = malloc(n + 1);
    if (!out)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        int h, l;
        if (s[i] == '%' && i + 2 < n &&
            (h = http_hexval((unsigned char)s[i + 1])) >= 0 &&
            (l = http_hexval((unsigned char)s[i + 2])) >= 0) {
            out[o++] = (char)(h << 4 | l);
            i += 2;
        } else if (s[i] == '+' && plus_space) {
            out[o++] = ' ';
        } else {
            out[o++] = s[i];
        }
    }
    out[o] = '\0';
    if (outlen)
        *outlen = o;
    return out;
}

/* Decodes one form component twice (form layer, then the SDK's extra layer). */
static char *decode_component(const char *s, size_t n)
{
    size_t l1, l2;
    char *once = e2b_pct_decode(s, n, true, &l1);
    if (!once)
        return NULL;
    char *twice = e2b_pct_decode(once, l1, false, &l2);
    free(once);
    if (twice && strlen(twice) != l2) {
        free(twice);
        return NULL;
    }
    return twice;
}

json_t *e2b_metadata_filter(const char *value, struct e2b_err *err)
{
    json_t *out = json_object();
    if (!out) {
        e2b_err_set(err, E2B_INTERNAL, "out of memory");
        return NULL;
    }
    const char *p = value ? value : "";
    while (*p) {
        const char *end = strchr(p, '&');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if (n > 0) {
            const char *eq = memchr(p, '=', n);
            if (!eq) {
                e2b_err_set(err, E2B_INVALID_ARGUMENT, "metadata filter: pair without '='");
                goto fail;
            }
            char *k = decode_component(p, (size_t)(eq - p));
            char *v = decode_component(eq + 1, n - (size_t)(eq - p) - 1);
            int bad = !k || !v || !*k || json_object_set_new(out, k, json_string(v)) < 0;
            free(k);
            free(v);
            if (bad) {
                e2b_err_set(err, E2B_INVALID_ARGUMENT,
                            "metadata filter: empty or invalid key or value");
                goto fail;
            }
        }
        p += n;
        if (*p == '&')
            p++;
    }
    return out;
fail:
    json_decref(out);
    return NULL;
}

bool e2b_csv_has(const char *list, const char *word)
{
    size_t wl = strlen(word);
    for (const char *p = list; p && *p;) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if (n == wl && strncmp(p, word, n) == 0)
            return true;
        p = end ? end + 1 : p + n;
    }
    return false;
}

int e2b_sign(const char *path, const char *op, const char *user, const char *token,
             const char *expiration, char *out)
{
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    unsigned char md[SHA256_DIGEST_LENGTH];
    unsigned mdlen = 0;
    int ok = ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) == 1;
    const char *parts[] = {path, ":", op, ":", user ? user : "", ":", token};
    for (size_t i = 0; ok && i < sizeof parts / sizeof parts[0]; i++)
        ok = EVP_DigestUpdate(ctx, parts[i], strlen(parts[i])) == 1;
    if (ok && expiration)
        ok = EVP_DigestUpdate(ctx, ":", 1) == 1 &&
             EVP_DigestUpdate(ctx, expiration, strlen(expiration)) == 1;
    ok = ok && EVP_DigestFinal_ex(ctx, md, &mdlen) == 1;
    EVP_MD_CTX_free(ctx);
    if (!ok)
        return -1;
    memcpy(out, "v1_", 3);
    e2b_b64_encode_nopad(md, mdlen, out + 3, E2B_SIG_MAX - 3);
    return 0;
}

int e2b_sign_check(const char *path, const char *op, const char *user, const char *token,
                   const char *signature, const char *expiration, time_t now,
                   struct e2b_err *err)
{
    long long exp = 0;
    if (expiration) {
        char *end;
        errno = 0;
        exp = strtoll(expiration, &end, 10);
        if (!*expiration || *end || errno || exp < 0)
            return e2b_err_set(err, E2B_UNAUTHENTICATED, "invalid signature expiration");
    }
    char want[E2B_SIG_MAX];
    if (e2b_sign(path, op, user, token, expiration, want) < 0)
        return e2b_err_set(err, E2B_INTERNAL, "cannot compute signature");
    size_t wl = strlen(want);
    if (!signature || strlen(signature) != wl || CRYPTO_memcmp(want, signature, wl) != 0)
        return e2b_err_set(err, E2B_UNAUTHENTICATED, "invalid signature");
    /* As envd: a genuine signature past its time is told apart from a forged one. */
    if (expiration && now && (long long)now > exp)
        return e2b_err_set(err, E2B_UNAUTHENTICATED, "signature is already expired");
    return 0;
}

int e2b_token_sandbox(const char *token, char *id, size_t cap)
{
    const char *dot = token ? strchr(token, '.') : NULL;
    if (!dot || dot == token || (size_t)(dot - token) >= cap)
        return -1;
    memcpy(id, token, (size_t)(dot - token));
    id[dot - token] = '\0';
    return 0;
}
