/* op.c: operation names and the API representation of an operation. */
#include "op.h"

#include <jansson.h>
#include <string.h>

static const char *const op_kind_names[OP_KIND_COUNT] = {
    [OP_CREATE] = "create",   [OP_DELETE] = "delete",   [OP_START] = "start",
    [OP_STOP] = "stop",       [OP_PAUSE] = "pause",     [OP_RESUME] = "resume",
    [OP_SUSPEND] = "suspend", [OP_RESTORE] = "restore", [OP_WAKE] = "wake",
    [OP_TEMPLATE_BUILD] = "template_build", [OP_FORK] = "fork",
    [OP_SNAPSHOT] = "snapshot",
};

static const char *const op_state_names[OP_STATE_COUNT] = {
    [OP_PENDING] = "pending",     [OP_RUNNING] = "running", [OP_SUCCEEDED] = "succeeded",
    [OP_FAILED] = "failed",       [OP_CANCELED] = "canceled",
};

const char *op_kind_name(enum op_kind k)
{
    return (unsigned)k < OP_KIND_COUNT ? op_kind_names[k] : "unknown";
}

int op_kind_parse(const char *s)
{
    for (int i = 0; s && i < OP_KIND_COUNT; i++)
        if (strcmp(s, op_kind_names[i]) == 0)
            return i;
    return -1;
}

const char *op_state_name(enum op_state s)
{
    return (unsigned)s < OP_STATE_COUNT ? op_state_names[s] : "unknown";
}

int op_state_parse(const char *s)
{
    for (int i = 0; s && i < OP_STATE_COUNT; i++)
        if (strcmp(s, op_state_names[i]) == 0)
            return i;
    return -1;
}

bool op_state_terminal(enum op_state s)
{
    return s == OP_SUCCEEDED || s == OP_FAILED || s == OP_CANCELED;
}

static json_t *time_or_null(int64_t ms)
{
    char buf[32];
    return ms ? json_string(spaced_fmt_time(ms, buf)) : json_null();
}

json_t *op_to_json(const struct store_op *op)
{
    bool tpl = strcmp(op->kind, "template_build") == 0;
    json_t *err = op->error_code[0]
                      ? json_pack("{s:s, s:s}", "code", op->error_code, "message",
                                  op->error_message ? op->error_message : "")
                      : json_null();
    return json_pack("{s:s, s:s, s:s, s:o, s:o, s:i, s:o, s:o, s:o, s:o, s:o}", "id", op->id,
                     "kind", op->kind, "state", op->state, "sandbox_id",
                     tpl ? json_null() : json_string(op->target), "template",
                     tpl ? json_string(op->target) : json_null(), "progress", op->progress,
                     "detail", op->detail ? json_string(op->detail) : json_null(), "error", err,
                     "created_at", time_or_null(op->created_ms), "started_at",
                     time_or_null(op->started_ms), "finished_at", time_or_null(op->finished_ms));
}
