/* ops.c: request dispatch by "op"; see ops.h. */
#include "agent/ops.h"

#include <string.h>

#include "agent/req.h"

static const struct {
    const char *name;
    agent_op_fn fn;
} ops_table[] = {
    {"exec", agent_op_exec},       {"attach", agent_op_attach},   {"ps", agent_op_ps},
    {"stat", agent_op_stat},       {"list", agent_op_list},       {"mkdir", agent_op_mkdir},
    {"remove", agent_op_remove},   {"rename", agent_op_rename},   {"read", agent_op_read},
    {"write", agent_op_write},     {"watch", agent_op_watch},     {"refresh", agent_op_refresh},
    {"health", agent_op_health},   {"shutdown", agent_op_shutdown}, {"tcp", agent_op_tcp},
    {"metrics", agent_op_metrics}, {"mount", agent_op_mount},
};

void agent_ops_open(struct agent_chan *ch, json_t *req)
{
    const char *op;
    if (agent_req_str(ch, req, "op", true, NULL, &op) < 0)
        return agent_chan_close(ch);
    for (size_t i = 0; i < sizeof ops_table / sizeof ops_table[0]; i++)
        if (strcmp(op, ops_table[i].name) == 0)
            return ops_table[i].fn(ch, req);
    agent_chan_fail(ch, FRAME_E_UNSUPPORTED, "unknown op \"%.64s\"", op);
}

void agent_op_result(struct agent_chan *ch, json_t *fields)
{
    json_t *ev = fields ? fields : json_object();
    json_object_set_new(ev, "type", json_string("result"));
    agent_chan_event(ch, ev);
    agent_chan_close(ch);
}
