/* fuzz_agent_conn: arbitrary host byte streams into the agent's frame dispatcher
 * (agent_conn), with stub ops in place of the real ones (a fuzzer must not run
 * programs or touch files): "echo" attaches a channel that echoes IN to OUT within
 * credit and answers CTRL, "fail" fails, anything else answers a result. The input is
 * fed in pieces whose sizes come from its first bytes, so frames split across reads.
 * Checks: no crash, no leak, output always well-formed frames. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "agent/conn.h"

static void echo_data(struct agent_chan *ch, const uint8_t *p, size_t n)
{
    size_t room = agent_chan_room(ch, FRAME_STREAM_OUT);
    agent_chan_data(ch, FRAME_STREAM_OUT, p, n < room ? n : room);
    agent_chan_grant(ch, (uint32_t)n);
}

static void echo_eof(struct agent_chan *ch)
{
    agent_chan_eof(ch, FRAME_STREAM_OUT);
    agent_chan_event(ch, json_pack("{s:s}", "type", "result"));
    agent_chan_close(ch);
}

static void echo_ctrl(struct agent_chan *ch, json_t *ctrl)
{
    if (json_object_get(ctrl, "close"))
        return agent_chan_fail(ch, FRAME_E_INVALID_ARGUMENT, "closing on request");
    agent_chan_event(ch, json_pack("{s:s, s:O}", "type", "ctrl", "echo", ctrl));
}

static void echo_writable(struct agent_chan *ch)
{
    agent_chan_event(ch, json_pack("{s:s}", "type", "writable"));
}

static void echo_close(struct agent_chan *ch)
{
}

static const struct agent_chan_ops echo_ops = {
    .on_data = echo_data, .on_eof = echo_eof, .on_ctrl = echo_ctrl,
    .on_writable = echo_writable, .on_close = echo_close,
};

static void stub_open(struct agent_chan *ch, json_t *req)
{
    const char *op = json_string_value(json_object_get(req, "op"));
    if (op && strcmp(op, "echo") == 0) {
        ch->ops = &echo_ops;
        agent_chan_event(ch, json_pack("{s:s}", "type", "started"));
        return;
    }
    if (op && strcmp(op, "fail") == 0)
        return agent_chan_fail_errno(ch, 2, "stub");
    agent_chan_event(ch, json_pack("{s:s, s:O}", "type", "result", "request", req));
    agent_chan_close(ch);
}

static json_t *stub_hello(void)
{
    return json_pack("{s:i, s:i}", "version", FRAME_VERSION, "min_version", FRAME_MIN_VERSION);
}

static const struct agent_conn_hooks stub_hooks = {.open = stub_open, .hello = stub_hello};

/* Every byte the agent would send must parse as valid agent->host frames. */
static void drain(struct agent_conn *c)
{
    struct agent_buf *out = agent_conn_output(c);
    size_t off = 0;
    while (off < out->len) {
        struct frame f;
        size_t used;
        const char *why;
        if (frame_parse(agent_buf_peek(out) + off, out->len - off, &f, &used, &why) != FRAME_PARSE_OK ||
            frame_check(&f, FRAME_FROM_AGENT, &why) != 0)
            __builtin_trap();
        off += used;
    }
    agent_buf_drop(out, out->len);
    agent_conn_wrote(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct agent_conn *c = agent_conn_new(&stub_hooks);
    if (!c)
        return 0;
    size_t off = size > 0 ? 1 : 0;
    unsigned piece = size > 0 ? (unsigned)data[0] * 7 + 1 : 1;
    while (off < size) {
        size_t n = size - off < piece ? size - off : piece;
        int rc = agent_conn_input(c, data + off, n);
        drain(c);
        if (rc < 0)
            break;
        off += n;
    }
    agent_conn_free(c);
    return 0;
}
