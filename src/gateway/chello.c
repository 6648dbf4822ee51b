/* chello.c: TLS ClientHello reassembly and parsing; see chello.h. */
#include "chello.h"

#include <string.h>

#define REC_HDR 5
#define REC_MAX 16384
#define EXT_SERVER_NAME 0
#define EXT_ALPN 16
#define EXT_ECH 0xfe0d
#define EXT_ESNI 0xffce

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }

/* A bounded reader over one message: every take checks what is left. */
struct rd {
    const uint8_t *p;
    size_t n, off;
    bool bad;
};

static const uint8_t *take(struct rd *r, size_t len)
{
    if (r->bad || len > r->n - r->off) {
        r->bad = true;
        return NULL;
    }
    const uint8_t *s = r->p + r->off;
    r->off += len;
    return s;
}

static size_t take_len(struct rd *r, int bytes)
{
    const uint8_t *s = take(r, (size_t)bytes);
    if (!s)
        return 0;
    return bytes == 1 ? s[0] : bytes == 2 ? rd16(s) : (size_t)(s[0] << 16 | s[1] << 8 | s[2]);
}

static struct rd sub(struct rd *r, int len_bytes)
{
    size_t len = take_len(r, len_bytes);
    const uint8_t *s = take(r, len);
    struct rd v = {.p = s, .n = s ? len : 0, .bad = r->bad};
    return v;
}

static enum chello_result parse_sni(struct rd ext, struct chello *out)
{
    struct rd list = sub(&ext, 2);
    if (list.bad || ext.off != ext.n)
        return CHELLO_MALFORMED;
    int names = 0;
    while (list.off < list.n) {
        const uint8_t *type = take(&list, 1);
        struct rd name = sub(&list, 2);
        if (list.bad || !type)
            return CHELLO_MALFORMED;
        if (*type != 0 || ++names > 1)
            return CHELLO_NO_SNI;
        if (name.n == 0 || memchr(name.p, 0, name.n) ||
            policy_name_normalise((const char *)name.p, name.n, out->sni) != 0)
            return CHELLO_BAD_SNI;
    }
    return names == 1 ? CHELLO_OK : CHELLO_NO_SNI;
}

static enum chello_result parse_alpn(struct rd ext, struct chello *out)
{
    struct rd list = sub(&ext, 2);
    if (list.bad || ext.off != ext.n || list.n == 0)
        return CHELLO_MALFORMED;
    while (list.off < list.n) {
        struct rd proto = sub(&list, 1);
        if (list.bad || proto.n == 0)
            return CHELLO_MALFORMED;
        if (proto.n == 2 && memcmp(proto.p, "h2", 2) == 0)
            out->alpn_h2 = true;
        if (proto.n == 8 && memcmp(proto.p, "http/1.1", 8) == 0)
            out->alpn_http11 = true;
    }
    return CHELLO_OK;
}

static enum chello_result parse_hello(const uint8_t *m, size_t n, struct chello *out)
{
    struct rd r = {.p = m, .n = n};
    const uint8_t *ver = take(&r, 2);
    take(&r, 32); /* random */
    struct rd sid = sub(&r, 1);
    struct rd suites = sub(&r, 2);
    struct rd comp = sub(&r, 1);
    struct rd exts = sub(&r, 2);
    if (r.bad || r.off != r.n || ver[0] != 3 || sid.n > 32 || suites.n < 2 ||
        suites.n % 2 || comp.n < 1)
        return CHELLO_MALFORMED;
    uint16_t seen[64];
    size_t nseen = 0;
    bool have_sni = false;
    while (exts.off < exts.n) {
        const uint8_t *t = take(&exts, 2);
        struct rd body = sub(&exts, 2);
        if (exts.bad || !t)
            return CHELLO_MALFORMED;
        uint16_t type = rd16(t);
        for (size_t i = 0; i < nseen; i++)
            if (seen[i] == type)
                return CHELLO_MALFORMED; /* duplicates are forbidden by RFC 8446 4.2 */
        if (nseen == sizeof seen / sizeof seen[0])
            return CHELLO_MALFORMED;
        seen[nseen++] = type;
        enum chello_result e = CHELLO_OK;
        if (type == EXT_ECH || type == EXT_ESNI)
            return CHELLO_ECH;
        if (type == EXT_SERVER_NAME) {
            e = parse_sni(body, out);
            have_sni = true;
        } else if (type == EXT_ALPN) {
            e = parse_alpn(body, out);
        }
        if (e != CHELLO_OK)
            return e;
    }
    return have_sni ? CHELLO_OK : CHELLO_NO_SNI;
}

enum chello_result chello_parse(const uint8_t *p, size_t n, struct chello *out)
{
    memset(out, 0, sizeof *out);
    /* Reassemble the handshake message from consecutive records. The header of the
     * message says its length; we need 4 + that many bytes of record payload. */
    uint8_t msg[4 + CHELLO_MAX];
    size_t have = 0, want = 0, off = 0;
    for (;;) {
        if (n - off < REC_HDR) {
            if (n - off >= 1 && p[off] != 22)
                return CHELLO_NOT_TLS;
            if (n - off >= 2 && p[off + 1] != 3)
                return CHELLO_NOT_TLS;
            return n >= CHELLO_STREAM_MAX ? CHELLO_MALFORMED : CHELLO_NEED_MORE;
        }
        const uint8_t *h = p + off;
        size_t len = rd16(h + 3);
        if (h[0] != 22 || h[1] != 3)
            return off == 0 ? CHELLO_NOT_TLS : CHELLO_MALFORMED;
        if (len == 0 || len > REC_MAX)
            return CHELLO_MALFORMED;
        if (n - off - REC_HDR < len)
            return n >= CHELLO_STREAM_MAX ? CHELLO_MALFORMED : CHELLO_NEED_MORE;
        const uint8_t *payload = h + REC_HDR;
        size_t copy = len;
        size_t room = sizeof msg - have;
        if (copy > room)
            return CHELLO_MALFORMED;
        memcpy(msg + have, payload, copy);
        have += copy;
        off += REC_HDR + len;
        if (have >= 4 && want == 0) {
            if (msg[0] != 1)
                return CHELLO_MALFORMED; /* first handshake message must be ClientHello */
            want = 4 + ((size_t)msg[1] << 16 | (size_t)msg[2] << 8 | msg[3]);
            if (want > sizeof msg || want < 4 + 38)
                return CHELLO_MALFORMED;
        }
        if (want && have >= want) {
            /* The hello must end exactly at a record boundary: anything after it in
             * the handshake stream would be a message the client cannot send yet. */
            if (have != want)
                return CHELLO_MALFORMED;
            out->consumed = off;
            return parse_hello(msg + 4, want - 4, out);
        }
    }
}

const char *chello_result_str(enum chello_result r)
{
    switch (r) {
    case CHELLO_OK: return "ok";
    case CHELLO_NEED_MORE: return "incomplete";
    case CHELLO_NOT_TLS: return "not_tls";
    case CHELLO_MALFORMED: return "malformed_hello";
    case CHELLO_NO_SNI: return "no_sni";
    case CHELLO_BAD_SNI: return "bad_sni";
    case CHELLO_ECH: return "ech";
    }
    return "unknown";
}
