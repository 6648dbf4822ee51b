/* frame.c: agent protocol wire format (parse, validate, encode); see frame.h. */
#include "frame.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define FRAME_HELLO_MAX 4096u

static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void put_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

enum frame_parse_result frame_parse(const uint8_t *buf, size_t len, struct frame *out,
                                    size_t *consumed, const char **why)
{
    *why = NULL;
    if (len < FRAME_HEADER_SIZE)
        return FRAME_PARSE_MORE;
    uint32_t plen = get_u32(buf);
    if (plen > FRAME_MAX_PAYLOAD) {
        *why = "payload length over 65536";
        return FRAME_PARSE_ERROR;
    }
    if (buf[10] != 0 || buf[11] != 0) {
        *why = "reserved header bytes not zero";
        return FRAME_PARSE_ERROR;
    }
    if (len - FRAME_HEADER_SIZE < plen)
        return FRAME_PARSE_MORE;
    out->len = plen;
    out->channel = get_u32(buf + 4);
    out->type = buf[8];
    out->stream = buf[9];
    out->payload = buf + FRAME_HEADER_SIZE;
    *consumed = FRAME_HEADER_SIZE + (size_t)plen;
    return FRAME_PARSE_OK;
}

/* Which streams may carry DATA/EOF (data_dir) and CREDIT from each sender. */
static int stream_sends_data(uint8_t stream, enum frame_dir dir)
{
    if (dir == FRAME_FROM_HOST)
        return stream == FRAME_STREAM_IN;
    return stream == FRAME_STREAM_OUT || stream == FRAME_STREAM_ERR;
}

int frame_check(const struct frame *f, enum frame_dir dir, const char **why)
{
    const enum frame_dir other = dir == FRAME_FROM_HOST ? FRAME_FROM_AGENT : FRAME_FROM_HOST;
    *why = NULL;
    switch (f->type) {
    case FRAME_HELLO:
    case FRAME_PING:
    case FRAME_PONG:
        if (f->channel != FRAME_CONTROL_CHANNEL) {
            *why = "control frame on a request channel";
            return -1;
        }
        if (f->type == FRAME_HELLO ? (f->len < 2 || f->len > FRAME_HELLO_MAX)
                                   : f->len > FRAME_PING_MAX) {
            *why = "bad control frame length";
            return -1;
        }
        break;
    case FRAME_OPEN:
        if (dir != FRAME_FROM_HOST || (f->channel & 1u) == 0) {
            *why = "OPEN must come from the host on an odd channel";
            return -1;
        }
        if (f->len < 2) {
            *why = "empty OPEN";
            return -1;
        }
        break;
    case FRAME_CTRL:
    case FRAME_EVENT:
        if ((f->type == FRAME_CTRL) != (dir == FRAME_FROM_HOST)) {
            *why = "CTRL is host->agent, EVENT agent->host";
            return -1;
        }
        if (f->channel == FRAME_CONTROL_CHANNEL || f->len < 2) {
            *why = "CTRL/EVENT needs a request channel and a JSON payload";
            return -1;
        }
        break;
    case FRAME_ERROR:
        if (f->len < 2) {
            *why = "empty ERROR";
            return -1;
        }
        break;
    case FRAME_CLOSE:
        if (f->channel == FRAME_CONTROL_CHANNEL || f->len != 0) {
            *why = "CLOSE needs a request channel and no payload";
            return -1;
        }
        break;
    case FRAME_DATA:
    case FRAME_EOF:
        if (f->channel == FRAME_CONTROL_CHANNEL || !stream_sends_data(f->stream, dir)) {
            *why = "DATA/EOF on a bad channel or stream";
            return -1;
        }
        if (f->type == FRAME_DATA ? f->len == 0 : f->len != 0) {
            *why = "DATA must be non-empty, EOF empty";
            return -1;
        }
        return 0;
    case FRAME_CREDIT:
        /* Credit flows opposite to data: the host credits the agent's streams. */
        if (f->channel == FRAME_CONTROL_CHANNEL || !stream_sends_data(f->stream, other)) {
            *why = "CREDIT on a bad channel or stream";
            return -1;
        }
        uint32_t v;
        if (frame_credit_value(f, &v) < 0) {
            *why = "CREDIT payload must be a u32 in 1..64 MiB";
            return -1;
        }
        return 0;
    default:
        *why = "unknown frame type";
        return -1;
    }
    if (f->stream != FRAME_STREAM_NONE) {
        *why = "stream set on a frame without a stream";
        return -1;
    }
    return 0;
}

void frame_encode_header(uint8_t hdr[FRAME_HEADER_SIZE], uint32_t channel,
                         enum frame_type type, enum frame_stream stream, uint32_t len)
{
    put_u32(hdr, len);
    put_u32(hdr + 4, channel);
    hdr[8] = (uint8_t)type;
    hdr[9] = (uint8_t)stream;
    hdr[10] = 0;
    hdr[11] = 0;
}

void frame_credit_payload(uint8_t out[4], uint32_t bytes)
{
    put_u32(out, bytes);
}

int frame_credit_value(const struct frame *f, uint32_t *bytes)
{
    if (f->type != FRAME_CREDIT || f->len != 4)
        return -1;
    uint32_t v = get_u32(f->payload);
    if (v == 0 || v > FRAME_MAX_CREDIT)
        return -1;
    *bytes = v;
    return 0;
}

json_t *frame_json(const struct frame *f, char *err, size_t errlen)
{
    json_error_t jerr;
    json_t *v = json_loadb((const char *)f->payload, f->len,
                           JSON_REJECT_DUPLICATES, &jerr);
    if (!v) {
        snprintf(err, errlen, "bad JSON at %d: %s", jerr.position, jerr.text);
        return NULL;
    }
    if (!json_is_object(v)) {
        json_decref(v);
        snprintf(err, errlen, "JSON payload is not an object");
        return NULL;
    }
    return v;
}

char *frame_json_dump(const json_t *obj, size_t *len)
{
    char *s = json_dumps(obj, JSON_COMPACT);
    if (!s)
        return NULL;
    size_t n = strlen(s);
    if (n > FRAME_MAX_PAYLOAD) {
        free(s);
        return NULL;
    }
    *len = n;
    return s;
}

const char *frame_type_name(unsigned type)
{
    static const char *const names[] = {"?",    "HELLO", "PING",  "PONG",  "OPEN",  "DATA",
                                        "EOF",  "CREDIT", "CTRL", "EVENT", "ERROR", "CLOSE"};
    return type <= FRAME_TYPE_MAX ? names[type] : "?";
}

int frame_tcp_target(const char *host, long long port, struct sockaddr_storage *addr,
                     unsigned *addrlen, const char **why)
{
    struct sockaddr_in v4 = {.sin_family = AF_INET};
    struct sockaddr_in6 v6 = {.sin6_family = AF_INET6};
    if (port < 1 || port > 65535) {
        *why = "port must be 1..65535";
        return -1;
    }
    if (!host || strlen(host) > FRAME_TCP_HOST_MAX) {
        *why = "host must be an IPv4 or IPv6 address";
        return -1;
    }
    if (inet_pton(AF_INET, host, &v4.sin_addr) == 1) {
        v4.sin_port = htons((uint16_t)port);
        if (addr) {
            memcpy(addr, &v4, sizeof v4);
            *addrlen = sizeof v4;
        }
        return 0;
    }
    if (inet_pton(AF_INET6, host, &v6.sin6_addr) == 1) {
        v6.sin6_port = htons((uint16_t)port);
        if (addr) {
            memcpy(addr, &v6, sizeof v6);
            *addrlen = sizeof v6;
        }
        return 0;
    }
    *why = "host must be an IPv4 or IPv6 address";
    return -1;
}
