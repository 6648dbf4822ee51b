/* e2b_pbjson: the proto3 canonical JSON rules the envd protocol uses, on jansson values.
 *
 * Input (from SDK clients, untrusted): a field may be spelled in lowerCamelCase or in its
 * original snake_case; null means "unset"; bytes arrive as base64 (standard or URL-safe,
 * padded or not); enums as the value name or its number; 64-bit integers as a JSON string
 * or number. Every getter checks the JSON type and range and reports invalid_argument
 * naming the field. Output: bytes as padded standard base64, int64 as strings, enums as
 * names, timestamps as RFC 3339 UTC with nanoseconds when non-zero. */
#ifndef SPACE_E2B_PBJSON_H
#define SPACE_E2B_PBJSON_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "e2b_error.h"

/* A field name in both spellings; snake may be NULL when both are equal. */
struct e2b_pb_field {
    const char *camel;
    const char *snake;
};

/* The member of `obj` for field f, or NULL if absent or JSON null. Two spellings of the
 * same field present at once is an error (-1 in *dup when dup is not NULL). */
json_t *e2b_pb_get(json_t *obj, struct e2b_pb_field f, struct e2b_err *err, int *dup);

/* Each getter: returns 1 if the field was present (value stored), 0 if absent (out left
 * untouched), -1 with err set if present but invalid. */
int e2b_pb_string(json_t *obj, struct e2b_pb_field f, const char **out, struct e2b_err *err);
int e2b_pb_bool(json_t *obj, struct e2b_pb_field f, bool *out, struct e2b_err *err);
int e2b_pb_u32(json_t *obj, struct e2b_pb_field f, uint32_t *out, struct e2b_err *err);
/* An object member (sub-message); *out is borrowed from obj. */
int e2b_pb_message(json_t *obj, struct e2b_pb_field f, json_t **out, struct e2b_err *err);
/* A map<string,string>: *out is the borrowed object, every value checked to be a string. */
int e2b_pb_strmap(json_t *obj, struct e2b_pb_field f, json_t **out, struct e2b_err *err);
/* A repeated string: *out is the borrowed array, every element checked. */
int e2b_pb_strlist(json_t *obj, struct e2b_pb_field f, json_t **out, struct e2b_err *err);
/* bytes: *out is malloc'd (caller frees; never NULL when 1 is returned, may be empty). */
int e2b_pb_bytes(json_t *obj, struct e2b_pb_field f, uint8_t **out, size_t *outlen,
                 struct e2b_err *err);

/* One enum value: its proto name and number. Tables end with a NULL name. */
struct e2b_pb_enum {
    const char *name;
    int number;
};
/* An enum given by name or number; numbers not in the table are rejected. */
int e2b_pb_enum(json_t *obj, struct e2b_pb_field f, const struct e2b_pb_enum *table, int *out,
                struct e2b_err *err);
/* The name of `number` in table, or NULL. */
const char *e2b_pb_enum_name(const struct e2b_pb_enum *table, int number);

/* Padded standard base64 of data[len]; malloc'd, NUL-terminated, NULL on OOM. */
char *e2b_b64_encode(const uint8_t *data, size_t len);
/* Decodes standard or URL-safe base64, padding optional, no whitespace. Returns a
 * malloc'd buffer (+1 NUL byte not counted in *outlen) or NULL if invalid or OOM.
 * `nopad` output of e2b_b64_encode_nopad also round-trips. */
uint8_t *e2b_b64_decode(const char *s, size_t n, size_t *outlen);
/* Standard base64 without '=' padding into out (cap >= 4*len/3+2), NUL-terminated. */
void e2b_b64_encode_nopad(const uint8_t *data, size_t len, char *out, size_t cap);

/* A new JSON string holding a 64-bit integer in decimal (proto3 JSON int64). */
json_t *e2b_pb_int64(int64_t v);
/* A new JSON string with a bytes field's base64 (NULL on OOM). */
json_t *e2b_pb_bytes_json(const uint8_t *data, size_t len);
/* RFC 3339 UTC timestamp: "2026-01-02T03:04:05Z" or "...05.000000123Z". out >= 40. */
void e2b_pb_timestamp(int64_t sec, long nsec, char *out, size_t cap);

#endif
