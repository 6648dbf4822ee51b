/* e2b_error: Connect codes, their HTTP statuses and the three JSON error shapes. */
#include "e2b_error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Indexed by enum e2b_code: name and unary HTTP status from the Connect specification. */
static const struct {
    const char *name;
    int http;
} code_table[] = {
    [E2B_OK] = {"ok", 200},
    [E2B_CANCELED] = {"canceled", 499},
    [E2B_UNKNOWN] = {"unknown", 500},
    [E2B_INVALID_ARGUMENT] = {"invalid_argument", 400},
    [E2B_DEADLINE_EXCEEDED] = {"deadline_exceeded", 504},
    [E2B_NOT_FOUND] = {"not_found", 404},
    [E2B_ALREADY_EXISTS] = {"already_exists", 409},
    [E2B_PERMISSION_DENIED] = {"permission_denied", 403},
    [E2B_RESOURCE_EXHAUSTED] = {"resource_exhausted", 429},
    [E2B_FAILED_PRECONDITION] = {"failed_precondition", 400},
    [E2B_ABORTED] = {"aborted", 409},
    [E2B_OUT_OF_RANGE] = {"out_of_range", 400},
    [E2B_UNIMPLEMENTED] = {"unimplemented", 501},
    [E2B_INTERNAL] = {"internal", 500},
    [E2B_UNAVAILABLE] = {"unavailable", 503},
    [E2B_DATA_LOSS] = {"data_loss", 500},
    [E2B_UNAUTHENTICATED] = {"unauthenticated", 401},
};

#define CODE_COUNT (sizeof code_table / sizeof code_table[0])

int e2b_err_set(struct e2b_err *err, enum e2b_code code, const char *fmt, ...)
{
    if (!err)
        return -1;
    err->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    /* Messages embed client paths; keep them printable ASCII so every JSON encoder and
     * log line accepts them (jansson refuses invalid UTF-8). */
    for (char *p = err->msg; *p; p++)
        if ((unsigned char)*p < 0x20 || (unsigned char)*p >= 0x7f)
            *p = '?';
    return -1;
}

const char *e2b_code_name(enum e2b_code code)
{
    if ((unsigned)code >= CODE_COUNT)
        return "unknown";
    return code_table[code].name;
}

int e2b_code_http(enum e2b_code code)
{
    if ((unsigned)code >= CODE_COUNT)
        return 500;
    return code_table[code].http;
}

int e2b_code_rest(enum e2b_code code)
{
    return code == E2B_UNAVAILABLE ? 502 : e2b_code_http(code);
}

json_t *e2b_connect_error_json(const struct e2b_err *err)
{
    return json_pack("{s:s, s:s}", "code", e2b_code_name(err->code), "message", err->msg);
}

json_t *e2b_end_stream_json(const struct e2b_err *err)
{
    if (!err || err->code == E2B_OK)
        return json_object();
    return json_pack("{s:{s:s, s:s}}", "error", "code", e2b_code_name(err->code), "message",
                     err->msg);
}

json_t *e2b_rest_error_json(int status, const char *msg)
{
    return json_pack("{s:i, s:s}", "code", status, "message", msg ? msg : "");
}
