/* agentc_fake.h: a scripted fake agent for agentc tests, on the other end of a
 * socketpair (blocking; the test drives agentc's loop while it waits), plus a channel
 * recorder. Used by test_agentc.c and test_agentc_bounds.c; include after <cmocka.h>. */
#ifndef SPACE_AGENTC_FAKE_H
#define SPACE_AGENTC_FAKE_H

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <event2/event.h>
#include <sys/socket.h>
#include <unistd.h>

#include "daemon/agentc/agentc.h"

struct fake {
    struct event_base *base;
    struct agentc *c;
    int peer;                     /* the fake agent's end (blocking) */
    uint8_t in[FRAME_HEADER_SIZE + FRAME_MAX_PAYLOAD];
    size_t inlen;
    bool ready, closed;
    char code[64];
};

static void on_ready(void *arg, json_t *hello)
{
    ((struct fake *)arg)->ready = true;
}

static void on_closed(void *arg, const char *code, const char *message)
{
    struct fake *f = arg;
    f->closed = true;
    snprintf(f->code, sizeof f->code, "%s", code);
}

static const struct agentc_callbacks cbs = {.on_ready = on_ready, .on_closed = on_closed};

/* A fake agent whose agentc runs on `base` (NULL: a new base of its own). */
static void fake_start_on(struct fake *f, struct event_base *base)
{
    int sv[2];
    memset(f, 0, sizeof *f);
    signal(SIGPIPE, SIG_IGN);
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    f->base = base ? base : event_base_new();
    f->c = agentc_new(f->base, sv[0], &cbs, f);
    assert_non_null(f->c);
    f->peer = sv[1];
}

static void fake_start(struct fake *f)
{
    fake_start_on(f, NULL);
}

static void fake_stop(struct fake *f)
{
    agentc_free(f->c);
    close(f->peer);
    event_base_free(f->base);
}

static void pump(struct fake *f)
{
    event_base_loop(f->base, EVLOOP_NONBLOCK);
}

static void pump(struct fake *f);

/* Writes everything, running agentc's loop while the socket is full. */
static void fake_write(struct fake *f, const void *p, size_t n)
{
    const uint8_t *b = p;
    for (int spins = 0; n > 0; spins++) {
        assert_true(spins < 1000000); /* hang guard */
        ssize_t k = send(f->peer, b, n, MSG_DONTWAIT);
        if (k < 0) {
            assert_int_equal(errno, EAGAIN);
            pump(f);
            continue;
        }
        b += k;
        n -= (size_t)k;
    }
}

static void fake_send(struct fake *f, uint32_t ch, unsigned type, unsigned stream, const void *p,
                      size_t n)
{
    uint8_t hdr[FRAME_HEADER_SIZE];
    frame_encode_header(hdr, ch, (enum frame_type)type, (enum frame_stream)stream, (uint32_t)n);
    fake_write(f, hdr, sizeof hdr);
    fake_write(f, p, n);
}

static void fake_json(struct fake *f, uint32_t ch, unsigned type, const char *json)
{
    fake_send(f, ch, type, 0, json, strlen(json));
}

/* Next frame from agentc (running its loop while waiting); false at EOF. */
static bool fake_recv(struct fake *f, struct frame *fr, char *pl, size_t cap)
{
    for (int spins = 0;; spins++) {
        size_t used;
        const char *why;
        if (frame_parse(f->in, f->inlen, fr, &used, &why) == FRAME_PARSE_OK) {
            assert_int_equal(frame_check(fr, FRAME_FROM_HOST, &why), 0);
            assert_true(fr->len < cap);
            memcpy(pl, fr->payload, fr->len);
            pl[fr->len] = '\0';
            memmove(f->in, f->in + used, f->inlen - used);
            f->inlen -= used;
            return true;
        }
        assert_true(spins < 100000); /* hang guard */
        pump(f);
        struct pollfd p = {.fd = f->peer, .events = POLLIN};
        if (poll(&p, 1, 10) != 1)
            continue;
        ssize_t n = read(f->peer, f->in + f->inlen, sizeof f->in - f->inlen);
        if (n <= 0)
            return false;
        f->inlen += (size_t)n;
    }
}

static void expect(struct fake *f, unsigned type, uint32_t ch, char *pl, size_t cap)
{
    struct frame fr;
    assert_true(fake_recv(f, &fr, pl, cap));
    assert_int_equal(fr.type, type);
    assert_int_equal(fr.channel, ch);
}

/* Host HELLO read, agent HELLO sent, agentc ready. */
static void handshake(struct fake *f)
{
    char pl[4096];
    expect(f, FRAME_HELLO, 0, pl, sizeof pl);
    assert_non_null(strstr(pl, "\"version\":1"));
    fake_json(f, 0, FRAME_HELLO, "{\"version\":1,\"min_version\":1,\"software\":\"fake\"}");
    while (!f->ready)
        pump(f);
    assert_true(agentc_is_ready(f->c));
    assert_string_equal(json_string_value(json_object_get(agentc_hello(f->c), "software")), "fake");
}

/* ---- a channel recorder ---- */

struct rec {
    json_t *events;
    size_t out, err;
    bool eof_out, closed, drained;
    char code[64];
    struct fake *f;
    bool free_in_event;          /* agentc_free from inside on_event */
    bool close_in_data;          /* agentc_close from inside on_data */
    struct agentc_chan *ch;
};

static void r_event(void *arg, json_t *ev)
{
    struct rec *r = arg;
    json_array_append(r->events, ev);
    if (r->free_in_event) {
        agentc_free(r->f->c);
        r->f->c = NULL;
    }
}

static void r_data(void *arg, enum frame_stream s, const uint8_t *p, size_t n)
{
    struct rec *r = arg;
    if (s == FRAME_STREAM_OUT)
        r->out += n;
    else
        r->err += n;
    if (r->close_in_data)
        agentc_close(r->ch);
}

static void r_eof(void *arg, enum frame_stream s)
{
    ((struct rec *)arg)->eof_out |= s == FRAME_STREAM_OUT;
}

static void r_error(void *arg, const char *code, const char *message)
{
    struct rec *r = arg;
    snprintf(r->code, sizeof r->code, "%s", code);
}

static void r_close(void *arg)
{
    ((struct rec *)arg)->closed = true;
}

static void r_drain(void *arg)
{
    ((struct rec *)arg)->drained = true;
}

static const struct agentc_chan_ops rec_ops = {
    .on_event = r_event, .on_data = r_data, .on_eof = r_eof,
    .on_error = r_error, .on_close = r_close, .on_drain = r_drain,
};

static struct agentc_chan *open_rec(struct fake *f, struct rec *r, unsigned flags)
{
    char err[128], pl[4096];
    memset(r, 0, sizeof *r);
    r->f = f;
    r->events = json_array();
    json_t *req = json_pack("{s:s}", "op", "exec");
    r->ch = agentc_open(f->c, req, &rec_ops, r, flags, err, sizeof err);
    json_decref(req);
    assert_non_null(r->ch);
    expect(f, FRAME_OPEN, agentc_chan_id(r->ch), pl, sizeof pl);
    assert_string_equal(pl, "{\"op\":\"exec\"}");
    return r->ch;
}

#endif
