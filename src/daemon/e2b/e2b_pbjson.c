/* e2b_pbjson: typed, validated access to proto3-JSON messages; base64; timestamps. */
#include "e2b_pbjson.h"

#include "b64.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *fname(struct e2b_pb_field f)
{
    return f.camel;
}

json_t *e2b_pb_get(json_t *obj, struct e2b_pb_field f, struct e2b_err *err, int *dup)
{
    if (!json_is_object(obj))
        return NULL;
    json_t *a = json_object_get(obj, f.camel);
    json_t *b = f.snake ? json_object_get(obj, f.snake) : NULL;
    if (a && b && !json_is_null(a) && !json_is_null(b)) {
        e2b_err_set(err, E2B_INVALID_ARGUMENT, "field %s given twice (%s and %s)", f.camel,
                    f.camel, f.snake);
        if (dup)
            *dup = -1;
        return NULL;
    }
    json_t *v = a && !json_is_null(a) ? a : b;
    return v && !json_is_null(v) ? v : NULL;
}

/* Common prologue: fetch the field, turning "given twice" into -1. */
static int fetch(json_t *obj, struct e2b_pb_field f, json_t **v, struct e2b_err *err)
{
    int dup = 0;
    *v = e2b_pb_get(obj, f, err, &dup);
    if (dup)
        return -1;
    return *v ? 1 : 0;
}

int e2b_pb_string(json_t *obj, struct e2b_pb_field f, const char **out, struct e2b_err *err)
{
    json_t *v;
    int r = fetch(obj, f, &v, err);
    if (r <= 0)
        return r;
    if (!json_is_string(v))
        return e2b_err_set(err, E2B_INVALID_ARGUMENT, "field %s: expected a string", fname(f));
    *out = json_string_value(v);
    return 1;
}

int e2b_pb_bool(json_t *obj, struct e2b_pb_field f, bool *out, struct e2b_err *err)
{
    json_t *v;
    int r = fetch(obj, f, &v, err);
    if (r <= 0)
        return r;
    if (!json_is_boolean(v))
        return e2b_err_set(err, E2B_INVALID_ARGUMENT, "field %s: expected a boolean", fname(f));
    *out = json_is_true(v);
    return 1;
}

/* Reads an integer given as a JSON integer, an integral real, or a decimal string. */
static int integer(json_t *v, struct e2b_pb_field f, int64_t lo, int64_t hi, int64_t *out,
                   struct e2b_err *err)
{
    int64_t x;
    if (json_is_integer(v)) {
        x = json_integer_value(v);
    } else if (json_is_real(v)) {
        double d = json_real_value(v);
        if (!(d >= -9.2e18 && d <= 9.2e18) || d != (double)(int64_t)d)
            return e2b_err_set(err, E2B_INVALID_ARGUMENT, "field %s: not an integer", fname(f));
        x = (int64_t)d;
    } else if (json_is_string(v)) {
        const char *s = json_string_value(v);
        char *end;
        errno = 0;
        long long ll = strtoll(s, &end, 10);
        if (!*s || *end || errno || s[0] == ' ' || s[0] == '+')
            return e2b_err_set(err, E2B_INVALID_ARGUMENT, "field %s: not an integer",
                               fname(f));
        x = ll;
    } else {
        return e2b_err_set(err, E2B_INVALID_ARGUMENT, "field %s: expected a number", fname(f));
    }
    if (x < lo || x > hi)
        return e2b_err_set(err, E2B_INVALID_ARGUMENT, "field %s: %" PRId64 " out of range",
                           fname(f), x);
    *out = x;
    return 1;
}

int e2b_pb_u32(json_t *obj, struct e2b_pb_field f, uint32_t *out, struct e2b_err *err)
{
    json_t *v;
    int r = fetch(obj, f, &v, err);
    if (r <= 0)
        return r;
    int64_t x = 0; /* set whenever integer() succeeds; the compiler cannot see across e2b_err_set */
    if (integer(v, f, 0, UINT32_MAX, &x, err) < 0)
        return -1;
    *out = (uint32_t)x;
    return 1;
}

int e2b_pb_message(json_t *obj, struct e2b_pb_field f, json_t **out, struct e2b_err *err)
{
    json_t *v;
    int r = fetch(obj, f, &v, err);
    if (r <= 0)
        return r;
    if (!json_is_object(v))
        return e2b_err_set(err, E2B_INVALID_ARGUMENT, "field %s: expected an object", fname(f));
    *out = v;
    return 1;
}

int e2b_pb_strmap(json_t *obj, struct e2b_pb_field f, json_t **out, struct e2b_err *err)
{
    json_t *v;
    int r = e2b_pb_message(obj, f, &v, err);
    if (r <= 0)
        return r;
    const char *k;
    json_t *val;
    json_object_foreach(v, k, val) {
        if (!json_is_string(val))
            return e2b_err_set(err, E2B_INVALID_ARGUMENT, "field %s: value of a key is not a string",
                               fname(f));
    }
    *out = v;
    return 1;
}

int e2b_pb_strlist(json_t *obj, struct e2b_pb_field f, json_t **out, struct e2b_err *err)
{
    json_t *v;
    int r = fetch(obj, f, &v, err);
    if (r <= 0)
        return r;
    if (!json_is_array(v))
        return e2b_err_set(err, E2B_INVALID_ARGUMENT, "field %s: expected an array", fname(f));
    size_t i;
    json_t *el;
    json_array_foreach(v, i, el) {
        if (!json_is_string(el))
            return e2b_err_set(err, E2B_INVALID_ARGUMENT, "field %s[%zu]: expected a string",
                               fname(f), i);
    }
    *out = v;
    return 1;
}

int e2b_pb_bytes(json_t *obj, struct e2b_pb_field f, uint8_t **out, size_t *outlen,
                 struct e2b_err *err)
{
    json_t *v;
    int r = fetch(obj, f, &v, err);
    if (r <= 0)
        return r;
    if (!json_is_string(v))
        return e2b_err_set(err, E2B_INVALID_ARGUMENT, "field %s: expected base64 text", fname(f));
    uint8_t *b = e2b_b64_decode(json_string_value(v), json_string_length(v), outlen);
    if (!b)
        return e2b_err_set(err, E2B_INVALID_ARGUMENT, "field %s: invalid base64", fname(f));
    *out = b;
    return 1;
}

int e2b_pb_enum(json_t *obj, struct e2b_pb_field f, const struct e2b_pb_enum *table, int *out,
                struct e2b_err *err)
{
    json_t *v;
    int r = fetch(obj, f, &v, err);
    if (r <= 0)
        return r;
    for (const struct e2b_pb_enum *e = table; e->name; e++) {
        if ((json_is_string(v) && strcmp(json_string_value(v), e->name) == 0) ||
            (json_is_integer(v) && json_integer_value(v) == e->number)) {
            *out = e->number;
            return 1;
        }
    }
    return e2b_err_set(err, E2B_INVALID_ARGUMENT, "field %s: unknown enum value", fname(f));
}

const char *e2b_pb_enum_name(const struct e2b_pb_enum *table, int number)
{
    for (const struct e2b_pb_enum *e = table; e->name; e++)
        if (e->number == number)
            return e->name;
    return NULL;
}

char *e2b_b64_encode(const uint8_t *data, size_t len)
{
    if (len > SIZE_MAX / 2)
        return NULL;
    char *out = malloc(B64_ENCODED_SIZE(len));
    if (out)
        b64_encode(data, len, out);
    return out;
}

void e2b_b64_encode_nopad(const uint8_t *data, size_t len, char *out, size_t cap)
{
    if (cap < B64_ENCODED_SIZE(len)) {
        if (cap)
            out[0] = '\0';
        return;
    }
    size_t n = b64_encode(data, len, out);
    while (n > 0 && out[n - 1] == '=')
        out[--n] = '\0';
}

/* The decoder is our own rather than common/b64's strict one: proto3 JSON readers must
 * accept URL-safe and unpadded base64 too. */
static int b64_value(char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+' || c == '-')
        return 62;
    if (c == '/' || c == '_')
        return 63;
    return -1;
}

uint8_t *e2b_b64_decode(const char *s, size_t n, size_t *outlen)
{
    /* Strip up to two '=' of padding; then the length mod 4 must not be 1. */
    if (n >= 1 && s[n - 1] == '=') {
        if (n % 4 != 0)
            return NULL;
        n--;
        if (n >= 1 && s[n - 1] == '=')
            n--;
    }
    if (n % 4 == 1)
        return NULL;
    uint8_t *out = malloc(n / 4 * 3 + 3);
    if (!out)
        return NULL;
    size_t o = 0;
    uint32_t acc = 0;
    unsigned bits = 0;
    for (size_t i = 0; i < n; i++) {
        int v = b64_value(s[i]);
        if (v < 0) {
            free(out);
            return NULL;
        }
        acc = acc << 6 | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[o++] = (uint8_t)(acc >> bits);
            acc &= (1u << bits) - 1;
        }
    }
    out[o] = 0;
    *outlen = o;
    return out;
}

json_t *e2b_pb_int64(int64_t v)
{
    char buf[24];
    snprintf(buf, sizeof buf, "%" PRId64, v);
    return json_string(buf);
}

json_t *e2b_pb_bytes_json(const uint8_t *data, size_t len)
{
    char *s = e2b_b64_encode(data, len);
    if (!s)
        return NULL;
    json_t *j = json_string(s);
    free(s);
    return j;
}

void e2b_pb_timestamp(int64_t sec, long nsec, char *out, size_t cap)
{
    time_t t = (time_t)sec;
    struct tm tm;
    if (!gmtime_r(&t, &tm)) {
        snprintf(out, cap, "1970-01-01T00:00:00Z");
        return;
    }
    char base[32];
    strftime(base, sizeof base, "%Y-%m-%dT%H:%M:%S", &tm);
    if (nsec > 0 && nsec < 1000000000L)
        snprintf(out, cap, "%s.%09ldZ", base, nsec);
    else
        snprintf(out, cap, "%sZ", base);
}
