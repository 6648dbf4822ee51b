/* gw_scrub.c: overwrites an injected secret in what an upstream sends back on the
 * credential path; see gw_conn.h. The needle is the header value or, when the value
 * has an auth scheme ("Bearer x", "token x") and the part after it has at least
 * SCRUB_PART_MIN bytes, that part: an echo that parses the header may return only the
 * token, and scrubbing it also scrubs the whole value. */
#include <event2/buffer.h>
#include <openssl/crypto.h>
#include <stdlib.h>
#include <string.h>

#include "gw_conn.h"

#define SCRUB_PART_MIN 8

struct gw_scrub {
    char *needle;
    size_t len;
    struct evbuffer *carry; /* bytes held back: they may start the secret */
};

struct gw_scrub *gw_scrub_new(const char *secret)
{
    struct gw_scrub *s = calloc(1, sizeof *s);
    const char *sp = strchr(secret, ' ');
    if (sp && strlen(sp + 1) >= SCRUB_PART_MIN)
        secret = sp + 1;
    if (!s || !*secret || !(s->carry = evbuffer_new()) || !(s->needle = strdup(secret))) {
        gw_scrub_free(s);
        return NULL;
    }
    s->len = strlen(s->needle);
    return s;
}

void gw_scrub_free(struct gw_scrub *s)
{
    if (!s)
        return;
    if (s->needle) {
        OPENSSL_cleanse(s->needle, s->len);
        free(s->needle);
    }
    if (s->carry)
        evbuffer_free(s->carry);
    free(s);
}

/* Length of the longest tail of buf[0..n) that is a proper prefix of the needle. */
static size_t partial_tail(const struct gw_scrub *s, const unsigned char *buf, size_t n)
{
    for (size_t k = s->len - 1 < n ? s->len - 1 : n; k > 0; k--)
        if (memcmp(buf + n - k, s->needle, k) == 0)
            return k;
    return 0;
}

void gw_scrub_pipe(struct gw_scrub *s, struct evbuffer *from, struct evbuffer *to, bool flush)
{
    evbuffer_add_buffer(s->carry, from);
    size_t n = evbuffer_get_length(s->carry);
    if (n == 0)
        return;
    /* The carry is at most one read (PIPE_CHUNK) plus a needle: linearising is cheap. */
    unsigned char *buf = evbuffer_pullup(s->carry, -1);
    for (unsigned char *at = buf; (at = memmem(at, n - (size_t)(at - buf), s->needle, s->len));) {
        memset(at, '*', s->len);
        at += s->len;
    }
    size_t hold = flush ? 0 : partial_tail(s, buf, n);
    evbuffer_remove_buffer(s->carry, to, n - hold);
}
