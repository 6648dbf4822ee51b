/* agentc_tcp.c: opening `tcp` channels (docs/agent-protocol.md, op tcp); see agentc.h.
 * The target is checked with the same function the agent uses, so a bad port or host
 * fails here with a clear message instead of a round trip to the guest. */
#include <stdio.h>

#include "agentc.h"

struct agentc_chan *agentc_open_tcp(struct agentc *c, const char *host, unsigned port,
                                    const struct agentc_chan_ops *ops, void *arg,
                                    unsigned flags, char *err, size_t errlen)
{
    const char *why;
    if (!host)
        host = FRAME_TCP_HOST_DEFAULT;
    if (frame_tcp_target(host, port, NULL, NULL, &why) < 0) {
        snprintf(err, errlen, "tcp target: %s", why);
        return NULL;
    }
    json_t *req = json_pack("{s:s, s:s, s:i}", "op", "tcp", "host", host, "port", (int)port);
    if (!req) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    struct agentc_chan *ch = agentc_open(c, req, ops, arg, flags, err, errlen);
    json_decref(req);
    return ch;
}
