/* e2b_error: error values of the E2B-compatible layer and their three wire shapes.
 *
 * The E2B SDKs read errors in three different ways and each must be exact:
 *   - Connect-RPC unary errors: non-200 status, Content-Type application/json, body
 *     {"code":"not_found","message":"..."} with the Connect code *string*;
 *   - Connect-RPC stream errors: HTTP 200 and an end-of-stream frame whose JSON is
 *     {"error":{"code":"not_found","message":"..."}} (or {} on success);
 *   - REST errors (control plane and envd /files, /health): {"code":404,"message":...}
 *     with the *numeric* HTTP status in `code` (the JS SDK tests body.code === 404).
 * One `struct e2b_err` carries a Connect code plus a human message; the functions below
 * turn it into each shape. */
#ifndef SPACE_E2B_ERROR_H
#define SPACE_E2B_ERROR_H

#include <jansson.h>
#include <stddef.h>

/* Connect-RPC error codes (connectrpc.com/docs/protocol#error-codes), plus OK. */
enum e2b_code {
    E2B_OK = 0,
    E2B_CANCELED,
    E2B_UNKNOWN,
    E2B_INVALID_ARGUMENT,
    E2B_DEADLINE_EXCEEDED,
    E2B_NOT_FOUND,
    E2B_ALREADY_EXISTS,
    E2B_PERMISSION_DENIED,
    E2B_RESOURCE_EXHAUSTED,
    E2B_FAILED_PRECONDITION,
    E2B_ABORTED,
    E2B_OUT_OF_RANGE,
    E2B_UNIMPLEMENTED,
    E2B_INTERNAL,
    E2B_UNAVAILABLE,
    E2B_DATA_LOSS,
    E2B_UNAUTHENTICATED,
};

#define E2B_ERR_MSG_MAX 240

/* An error: a code and a NUL-terminated human message (truncated to fit). */
struct e2b_err {
    enum e2b_code code;          /* E2B_OK when there is no error */
    char msg[E2B_ERR_MSG_MAX];   /* for humans; never parsed */
};

/* Sets err (if not NULL) and returns -1, so callers can `return e2b_err_set(...)`. */
int e2b_err_set(struct e2b_err *err, enum e2b_code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* "not_found" etc.; "unknown" for out-of-range values. */
const char *e2b_code_name(enum e2b_code code);
/* The HTTP status Connect assigns to a code for unary errors (not_found -> 404). */
int e2b_code_http(enum e2b_code code);
/* The status an envd REST endpoint (/files) uses for a code. Same as e2b_code_http except
 * that `unavailable` becomes 502, which the SDK reads as "sandbox gone". */
int e2b_code_rest(enum e2b_code code);

/* New JSON objects (caller owns; NULL only on allocation failure):
 * {"code":"<name>","message":msg}  -- Connect unary error body */
json_t *e2b_connect_error_json(const struct e2b_err *err);
/* {} when err is NULL or OK, else {"error":{"code":..,"message":..}} -- end-of-stream */
json_t *e2b_end_stream_json(const struct e2b_err *err);
/* {"code":<status>,"message":msg} -- REST error body */
json_t *e2b_rest_error_json(int status, const char *msg);

#endif
