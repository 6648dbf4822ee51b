/* b64.c: base64 encode/decode; see b64.h. */
#include "b64.h"

#include <string.h>

static const char b64_alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t b64_encode(const uint8_t *in, size_t n, char *out)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16;
        if (i + 1 < n)
            v |= (uint32_t)in[i + 1] << 8;
        if (i + 2 < n)
            v |= in[i + 2];
        out[o++] = b64_alphabet[(v >> 18) & 63];
        out[o++] = b64_alphabet[(v >> 12) & 63];
        out[o++] = i + 1 < n ? b64_alphabet[(v >> 6) & 63] : '=';
        out[o++] = i + 2 < n ? b64_alphabet[v & 63] : '=';
    }
    out[o] = '\0';
    return o;
}

static int b64_value(char c)
{
    const char *p = c ? strchr(b64_alphabet, c) : NULL;
    return p ? (int)(p - b64_alphabet) : -1;
}

long b64_decode(const char *in, uint8_t *out, size_t cap)
{
    size_t len = strlen(in), o = 0;
    if (len % 4 != 0)
        return -1;
    for (size_t i = 0; i < len; i += 4) {
        int pad = (in[i + 3] == '=') + (in[i + 2] == '=');
        if (pad && i + 4 != len)
            return -1;
        if (pad == 1 && in[i + 3] != '=')
            return -1;
        uint32_t v = 0;
        for (int k = 0; k < 4 - pad; k++) {
            int d = b64_value(in[i + k]);
            if (d < 0)
                return -1;
            v |= (uint32_t)d << (18 - 6 * k);
        }
        size_t bytes = 3 - (size_t)pad;
        if (o + bytes > cap)
            return -1;
        for (size_t k = 0; k < bytes; k++)
            out[o++] = (uint8_t)(v >> (16 - 8 * k));
    }
    return (long)o;
}
