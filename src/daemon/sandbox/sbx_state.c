/* sbx_state.c: sandbox state names and the legal-transition table (see sbx.h). */
#include <string.h>

#include "sbx.h"

static const char *const sbx_state_names[SBX_STATE_COUNT] = {
    [SBX_CREATING] = "creating",     [SBX_STARTING] = "starting",
    [SBX_RUNNING] = "running",       [SBX_PAUSING] = "pausing",
    [SBX_PAUSED] = "paused",         [SBX_RESUMING] = "resuming",
    [SBX_SUSPENDING] = "suspending", [SBX_SUSPENDED] = "suspended",
    [SBX_RESTORING] = "restoring",   [SBX_STOPPING] = "stopping",
    [SBX_STOPPED] = "stopped",       [SBX_DELETING] = "deleting",
    [SBX_DELETED] = "deleted",       [SBX_FAILED] = "failed",
};

const char *sbx_state_name(enum sbx_state s)
{
    return (unsigned)s < SBX_STATE_COUNT ? sbx_state_names[s] : "unknown";
}

int sbx_state_parse(const char *s)
{
    for (int i = 0; s && i < SBX_STATE_COUNT; i++)
        if (strcmp(s, sbx_state_names[i]) == 0)
            return i;
    return -1;
}

/* Bit per desired state from which a verb is legal. */
#define B(s) (1u << (s))
static const struct {
    unsigned from;         /* desired states allowing the verb */
    enum sbx_state target; /* desired state afterwards */
} sbx_verbs[OP_KIND_COUNT] = {
    [OP_DELETE] = {B(SBX_RUNNING) | B(SBX_PAUSED) | B(SBX_SUSPENDED) | B(SBX_STOPPED) |
                       B(SBX_FAILED),
                   SBX_DELETED},
    [OP_STOP] = {B(SBX_RUNNING) | B(SBX_PAUSED) | B(SBX_SUSPENDED), SBX_STOPPED},
    [OP_START] = {B(SBX_STOPPED) | B(SBX_FAILED), SBX_RUNNING},
    [OP_PAUSE] = {B(SBX_RUNNING), SBX_PAUSED},
    [OP_RESUME] = {B(SBX_PAUSED), SBX_RUNNING},
    [OP_SUSPEND] = {B(SBX_RUNNING) | B(SBX_PAUSED), SBX_SUSPENDED},
    [OP_RESTORE] = {B(SBX_SUSPENDED), SBX_RUNNING},
    [OP_WAKE] = {B(SBX_RUNNING) | B(SBX_PAUSED) | B(SBX_SUSPENDED) | B(SBX_STOPPED) |
                     B(SBX_FAILED),
                 SBX_RUNNING},
};

int sbx_transition(enum sbx_state desired, enum sbx_state current, enum op_kind kind,
                   enum sbx_state *target, struct spaced_err *err)
{
    if ((unsigned)kind >= OP_KIND_COUNT || sbx_verbs[kind].from == 0)
        return spaced_err_set(err, 400, "invalid_request", "%s is not a sandbox verb",
                              op_kind_name(kind));
    /* A failed sandbox is failed whatever was desired: judge by what it is. */
    enum sbx_state from = current == SBX_FAILED ? SBX_FAILED : desired;
    if ((unsigned)from < SBX_STATE_COUNT && (sbx_verbs[kind].from & B(from))) {
        *target = sbx_verbs[kind].target;
        return 0;
    }
    if (desired != current && current != SBX_FAILED)
        return spaced_err_set(err, 409, "invalid_state",
                              "cannot %s the sandbox: it is %s (heading to %s)",
                              op_kind_name(kind), sbx_state_name(current), sbx_state_name(desired));
    return spaced_err_set(err, 409, "invalid_state", "cannot %s the sandbox: it is %s",
                          op_kind_name(kind), sbx_state_name(current));
}
#undef B
