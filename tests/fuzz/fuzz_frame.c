/* fuzz_frame: the frame parser and validator on arbitrary bytes. Every parsed frame is
 * checked for both directions, its header re-encoded (must match the input bytes), and
 * its payload decoded as CREDIT or JSON when the type says so; a `tcp` OPEN's target
 * goes through frame_tcp_target (the check both ends apply). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <sys/socket.h>

#include "frame.h"

/* The target of a tcp OPEN: accepted ones must have produced an address. */
static void check_tcp(json_t *req)
{
    if (!json_is_string(json_object_get(req, "op")) ||
        strcmp(json_string_value(json_object_get(req, "op")), "tcp") != 0)
        return;
    struct sockaddr_storage sa;
    unsigned len = 0;
    const char *why = NULL;
    json_t *host = json_object_get(req, "host");
    if (frame_tcp_target(json_is_string(host) ? json_string_value(host) : FRAME_TCP_HOST_DEFAULT,
                         json_integer_value(json_object_get(req, "port")), &sa, &len, &why) == 0) {
        if (len == 0 || len > sizeof sa || (sa.ss_family != AF_INET && sa.ss_family != AF_INET6))
            __builtin_trap();
    } else if (!why) {
        __builtin_trap();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t off = 0;
    while (off < size) {
        struct frame f;
        size_t used;
        const char *why;
        enum frame_parse_result r = frame_parse(data + off, size - off, &f, &used, &why);
        if (r != FRAME_PARSE_OK)
            break;
        if (used < FRAME_HEADER_SIZE || used > size - off || f.len > FRAME_MAX_PAYLOAD)
            __builtin_trap();
        uint8_t hdr[FRAME_HEADER_SIZE];
        frame_encode_header(hdr, f.channel, (enum frame_type)f.type, (enum frame_stream)f.stream, f.len);
        if (memcmp(hdr, data + off, sizeof hdr) != 0)
            __builtin_trap();
        for (int dir = 0; dir < 2; dir++) {
            if (frame_check(&f, (enum frame_dir)dir, &why) != 0 && !why)
                __builtin_trap();
        }
        uint32_t credit;
        if (frame_credit_value(&f, &credit) == 0 && (credit == 0 || credit > FRAME_MAX_CREDIT))
            __builtin_trap();
        if (f.type == FRAME_HELLO || f.type == FRAME_OPEN || f.type == FRAME_CTRL ||
            f.type == FRAME_EVENT || f.type == FRAME_ERROR) {
            char err[128];
            json_t *j = frame_json(&f, err, sizeof err);
            if (j) {
                if (f.type == FRAME_OPEN)
                    check_tcp(j);
                size_t n;
                char *s = frame_json_dump(j, &n);
                free(s);
            }
            json_decref(j);
        }
        (void)frame_type_name(f.type);
        off += used;
    }
    return 0;
}
