/* fuzz_agentc: arbitrary agent->host byte streams into agentc, the host's client, over
 * a socketpair on a libevent loop, with two channels open (one with manual credit)
 * and a queued stdin write. If the first byte is odd a valid HELLO is sent first, so
 * the fuzzer reaches the channel logic quickly. Checks: no crash, no leak; the
 * connection either survives or ends through on_closed. */
#include <event2/event.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "daemon/agentc/agentc.h"

struct fz {
    struct agentc *c;
    struct agentc_chan *ch[2];
    bool closed;
    unsigned events;
};

static void fz_closed(void *arg, const char *code, const char *message)
{
    struct fz *z = arg;
    z->closed = true;
}

static const struct agentc_callbacks fz_cbs = {.on_closed = fz_closed};

static void ch_event(void *arg, json_t *ev)
{
    struct fz *z = arg;
    /* exercise closing from inside a callback */
    if (++z->events == 3 && z->ch[1]) {
        agentc_close(z->ch[1]);
        z->ch[1] = NULL;
    }
}

static void ch_data(void *arg, enum frame_stream s, const uint8_t *p, size_t n)
{
    struct fz *z = arg;
    if (z->ch[0])
        agentc_grant(z->ch[0], s, (uint32_t)n);
}

static void ch0_close(void *arg)
{
    ((struct fz *)arg)->ch[0] = NULL;
}

static void ch1_close(void *arg)
{
    ((struct fz *)arg)->ch[1] = NULL;
}

static const struct agentc_chan_ops ops0 = {.on_event = ch_event, .on_data = ch_data, .on_close = ch0_close};
static const struct agentc_chan_ops ops1 = {.on_event = ch_event, .on_close = ch1_close};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct event_base *base;
    if (!base) {
        signal(SIGPIPE, SIG_IGN);
        base = event_base_new();
    }
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
        return 0;
    int sz = 1 << 20;
    setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz);
    struct fz z = {0};
    z.c = agentc_new(base, sv[0], &fz_cbs, &z);
    if (!z.c) {
        close(sv[1]);
        return 0;
    }
    char err[64];
    json_t *req = json_pack("{s:s}", "op", "exec");
    z.ch[0] = agentc_open(z.c, req, &ops0, &z, AGENTC_MANUAL_CREDIT, err, sizeof err);
    z.ch[1] = agentc_open(z.c, req, &ops1, &z, 0, err, sizeof err);
    json_decref(req);
    if (z.ch[1])
        agentc_write(z.ch[1], "stdin bytes", 11);
    if (size > 0 && (data[0] & 1)) {
        static const char hello[] = "{\"version\":1,\"min_version\":1}";
        uint8_t hdr[FRAME_HEADER_SIZE];
        frame_encode_header(hdr, 0, FRAME_HELLO, FRAME_STREAM_NONE, sizeof hello - 1);
        if (write(sv[1], hdr, sizeof hdr) < 0 || write(sv[1], hello, sizeof hello - 1) < 0)
            __builtin_trap();
    }
    if (size > 1 && send(sv[1], data + 1, size - 1, MSG_DONTWAIT) < 0) {
        /* larger than the socket buffer: feed what fits */
    }
    shutdown(sv[1], SHUT_WR);
    /* Run until agentc has read everything (EOF ends the connection). */
    for (int i = 0; i < 10000 && !z.closed; i++)
        event_base_loop(base, EVLOOP_NONBLOCK);
    agentc_free(z.c);
    event_base_loop(base, EVLOOP_NONBLOCK); /* let libevent finalize the bufferevent */
    close(sv[1]);
    return 0;
}
