/* e2b_multipart: multipart/form-data as a push state machine over a small window. */
#include "e2b_multipart.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

enum mp_state {
    MP_PREAMBLE,   /* before the first delimiter (discarded) */
    MP_AFTER_DELIM,/* just after a delimiter: "--" (end), or optional LWSP then CRLF */
    MP_HEADERS,    /* a part's header block up to the empty line */
    MP_BODY,       /* part content up to the next CRLF delimiter */
    MP_DONE,       /* after the close delimiter: epilogue ignored */
    MP_FAILED,
};

struct e2b_mp {
    enum mp_state state;
    const struct e2b_mp_callbacks *cbs;
    void *arg;
    char delim[E2B_MP_MAX_BOUNDARY + 5]; /* "\r\n--" boundary */
    size_t dlen;
    uint8_t *buf;   /* pending bytes not yet consumed; capacity cap */
    size_t len, cap;
    bool in_part;   /* part_begin was called and part_end not yet */
};

/* Reads the parameter `name` (case-insensitive) of a header value like
 * `form-data; name="file"; filename="/a b"` into out (malloc'd) or NULL. Quoted strings
 * are unescaped (\x -> x). Returns -1 on malformed syntax. */
static int header_param(const char *v, const char *name, char **out)
{
    *out = NULL;
    size_t nl = strlen(name);
    const char *p = strchr(v, ';');
    while (p) {
        p++;
        while (*p == ' ' || *p == '\t')
            p++;
        const char *key = p;
        while (*p && *p != '=' && *p != ';')
            p++;
        size_t kl = (size_t)(p - key);
        while (kl && (key[kl - 1] == ' ' || key[kl - 1] == '\t'))
            kl--;
        if (*p != '=') {
            p = *p ? p : NULL;
            continue;
        }
        p++;
        while (*p == ' ' || *p == '\t')
            p++;
        char *val = malloc(strlen(p) + 1);
        if (!val)
            return -1;
        size_t o = 0;
        if (*p == '"') {
            p++;
            while (*p && *p != '"') {
                if (*p == '\\' && p[1])
                    p++;
                val[o++] = *p++;
            }
            if (*p != '"') {
                free(val);
                return -1;
            }
            p++;
            while (*p == ' ' || *p == '\t')
                p++;
        } else {
            while (*p && *p != ';' && *p != ' ' && *p != '\t')
                val[o++] = *p++;
            while (*p == ' ' || *p == '\t')
                p++;
        }
        val[o] = '\0';
        if (kl == nl && strncasecmp(key, name, nl) == 0 && !*out)
            *out = val;
        else
            free(val);
        if (*p && *p != ';') {
            free(*out);
            *out = NULL;
            return -1;
        }
        p = *p ? p : NULL;
    }
    return 0;
}

struct e2b_mp *e2b_mp_new(const char *content_type, const struct e2b_mp_callbacks *cbs,
                          void *arg, struct e2b_err *err)
{
    if (!content_type || strncasecmp(content_type, "multipart/form-data", 19) != 0 ||
        (content_type[19] && content_type[19] != ';' && content_type[19] != ' ')) {
        e2b_err_set(err, E2B_INVALID_ARGUMENT, "content type is not multipart/form-data");
        return NULL;
    }
    char *boundary = NULL;
    if (header_param(content_type, "boundary", &boundary) < 0 || !boundary) {
        e2b_err_set(err, E2B_INVALID_ARGUMENT, "multipart boundary missing or malformed");
        return NULL;
    }
    size_t bl = strlen(boundary);
    if (bl == 0 || bl > E2B_MP_MAX_BOUNDARY) {
        free(boundary);
        e2b_err_set(err, E2B_INVALID_ARGUMENT, "multipart boundary length %zu invalid", bl);
        return NULL;
    }
    struct e2b_mp *mp = calloc(1, sizeof *mp);
    if (!mp) {
        free(boundary);
        e2b_err_set(err, E2B_INTERNAL, "out of memory");
        return NULL;
    }
    mp->cbs = cbs;
    mp->arg = arg;
    memcpy(mp->delim, "\r\n--", 4);
    memcpy(mp->delim + 4, boundary, bl);
    mp->dlen = 4 + bl;
    free(boundary);
    /* The first delimiter may open the body without a CRLF before it: pretend one. */
    mp->cap = 2 * (E2B_MP_MAX_HEADERS + mp->dlen);
    mp->buf = malloc(mp->cap);
    if (!mp->buf) {
        free(mp);
        e2b_err_set(err, E2B_INTERNAL, "out of memory");
        return NULL;
    }
    memcpy(mp->buf, "\r\n", 2);
    mp->len = 2;
    mp->state = MP_PREAMBLE;
    return mp;
}

void e2b_mp_free(struct e2b_mp *mp)
{
    if (!mp)
        return;
    free(mp->buf);
    free(mp);
}

static void consume(struct e2b_mp *mp, size_t n)
{
    memmove(mp->buf, mp->buf + n, mp->len - n);
    mp->len -= n;
}

/* Parses one header block (without the final CRLF CRLF) and starts the part. */
static int begin_part(struct e2b_mp *mp, char *block, struct e2b_err *err)
{
    char *name = NULL, *filename = NULL;
    bool seen = false;
    for (char *line = block; line;) {
        char *next = strstr(line, "\r\n");
        if (next) {
            *next = '\0';
            next += 2;
        }
        char *colon = strchr(line, ':');
        if (!colon || colon == line) {
            free(name);
            free(filename);
            return e2b_err_set(err, E2B_INVALID_ARGUMENT, "multipart: malformed part header");
        }
        if ((size_t)(colon - line) == 19 && strncasecmp(line, "Content-Disposition", 19) == 0) {
            if (seen) {
                free(name);
                free(filename);
                return e2b_err_set(err, E2B_INVALID_ARGUMENT,
                                   "multipart: two Content-Disposition headers");
            }
            seen = true;
            char *v = colon + 1;
            while (*v == ' ' || *v == '\t')
                v++;
            if (header_param(v, "name", &name) < 0 ||
                header_param(v, "filename", &filename) < 0) {
                free(name);
                free(filename);
                return e2b_err_set(err, E2B_INVALID_ARGUMENT,
                                   "multipart: malformed Content-Disposition");
            }
        }
        line = next;
    }
    mp->in_part = true;
    int r = mp->cbs->part_begin ? mp->cbs->part_begin(mp->arg, name, filename, err) : 0;
    free(name);
    free(filename);
    return r;
}

static int emit_data(struct e2b_mp *mp, size_t n, struct e2b_err *err)
{
    if (n == 0)
        return 0;
    int r = mp->cbs->part_data ? mp->cbs->part_data(mp->arg, mp->buf, n, err) : 0;
    consume(mp, n);
    return r;
}

static int end_part(struct e2b_mp *mp, struct e2b_err *err)
{
    mp->in_part = false;
    return mp->cbs->part_end ? mp->cbs->part_end(mp->arg, err) : 0;
}

/* Runs the state machine over the buffered bytes until it needs more input. */
static int step(struct e2b_mp *mp, struct e2b_err *err)
{
    for (;;) {
        switch (mp->state) {
        case MP_PREAMBLE:
        case MP_BODY: {
            uint8_t *hit = memmem(mp->buf, mp->len, mp->delim, mp->dlen);
            if (!hit) {
                /* Keep the tail that may be the start of a delimiter. */
                size_t keep = mp->dlen - 1 < mp->len ? mp->dlen - 1 : mp->len;
                if (mp->state == MP_BODY)
                    return emit_data(mp, mp->len - keep, err);
                consume(mp, mp->len - keep);
                return 0;
            }
            size_t before = (size_t)(hit - mp->buf);
            if (mp->state == MP_BODY) {
                if (emit_data(mp, before, err) < 0 || end_part(mp, err) < 0)
                    return -1;
            } else {
                consume(mp, before);
            }
            consume(mp, mp->dlen);
            mp->state = MP_AFTER_DELIM;
            break;
        }
        case MP_AFTER_DELIM: {
            size_t i = 0;
            if (mp->len >= 2 && mp->buf[0] == '-' && mp->buf[1] == '-') {
                mp->len = 0;
                mp->state = MP_DONE;
                return 0;
            }
            while (i < mp->len && (mp->buf[i] == ' ' || mp->buf[i] == '\t'))
                i++;
            if (i > 64)
                return e2b_err_set(err, E2B_INVALID_ARGUMENT, "multipart: junk after boundary");
            if (i + 2 > mp->len)
                return 0;
            if (mp->buf[i] != '\r' || mp->buf[i + 1] != '\n')
                return e2b_err_set(err, E2B_INVALID_ARGUMENT, "multipart: junk after boundary");
            consume(mp, i + 2);
            mp->state = MP_HEADERS;
            break;
        }
        case MP_HEADERS: {
            size_t hl;
            if (mp->len >= 2 && mp->buf[0] == '\r' && mp->buf[1] == '\n') {
                hl = 0; /* no headers at all */
            } else {
                uint8_t *end = memmem(mp->buf, mp->len, "\r\n\r\n", 4);
                if (!end) {
                    if (mp->len > E2B_MP_MAX_HEADERS)
                        return e2b_err_set(err, E2B_INVALID_ARGUMENT,
                                           "multipart: part headers exceed %d bytes",
                                           E2B_MP_MAX_HEADERS);
                    return 0;
                }
                hl = (size_t)(end - mp->buf) + 2;
                if (hl > E2B_MP_MAX_HEADERS)
                    return e2b_err_set(err, E2B_INVALID_ARGUMENT,
                                       "multipart: part headers exceed %d bytes",
                                       E2B_MP_MAX_HEADERS);
            }
            if (memchr(mp->buf, '\0', hl))
                return e2b_err_set(err, E2B_INVALID_ARGUMENT, "multipart: NUL in part headers");
            char block[E2B_MP_MAX_HEADERS + 1];
            size_t bl = hl >= 2 ? hl - 2 : 0;
            memcpy(block, mp->buf, bl);
            block[bl] = '\0';
            consume(mp, hl + 2); /* the block and the empty line ending it */
            if (begin_part(mp, bl ? block : NULL, err) < 0)
                return -1;
            mp->state = MP_BODY;
            break;
        }
        case MP_DONE:
            mp->len = 0;
            return 0;
        case MP_FAILED:
            return -1;
        }
    }
}

int e2b_mp_feed(struct e2b_mp *mp, const uint8_t *data, size_t len, struct e2b_err *err)
{
    if (mp->state == MP_FAILED)
        return e2b_err_set(err, E2B_INVALID_ARGUMENT, "multipart: parser already failed");
    while (len > 0) {
        size_t room = mp->cap - mp->len;
        if (room == 0) { /* unreachable: step() always leaves less than cap buffered */
            mp->state = MP_FAILED;
            return e2b_err_set(err, E2B_INTERNAL, "multipart: window full");
        }
        size_t n = len < room ? len : room;
        memcpy(mp->buf + mp->len, data, n);
        mp->len += n;
        data += n;
        len -= n;
        if (step(mp, err) < 0) {
            if (err && err->code == E2B_OK)
                e2b_err_set(err, E2B_INVALID_ARGUMENT, "multipart: rejected");
            mp->state = MP_FAILED;
            return -1;
        }
    }
    return 0;
}

int e2b_mp_finish(struct e2b_mp *mp, struct e2b_err *err)
{
    if (mp->state == MP_DONE)
        return 0;
    mp->state = MP_FAILED;
    return e2b_err_set(err, E2B_INVALID_ARGUMENT, "multipart: body ended before the closing "
                                                  "boundary");
}
