/* test_agent_harness: runs the real agent serve loop as a child process over a
 * socketpair (or a unix socket) and drives it with agentc on a libevent loop.
 *
 * Header-only (static functions): each unit test is a separate program. */
#ifndef SPACE_TEST_AGENT_HARNESS_H
#define SPACE_TEST_AGENT_HARNESS_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <event2/event.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "agent/serve.h"
#include "agent/sys.h"
#include "daemon/agentc/agentc.h"

/* A hang guard, not a timing assertion: nothing here should take near this long. */
#define AH_HANG_SECONDS 300

struct ah {
    struct event_base *base;
    struct agentc *c;
    pid_t agent;              /* the agent child */
    bool ready, closed;
    char closed_code[64];
    char dir[64];             /* scratch directory, removed by ah_stop */
    char sock[108];           /* unix socket path in socket mode, else "" */
    time_t started;           /* for the hang guard */
};

static inline void ah_on_ready(void *arg, json_t *hello)
{
    ((struct ah *)arg)->ready = true;
}

static inline void ah_on_closed(void *arg, const char *code, const char *message)
{
    struct ah *h = arg;
    h->closed = true;
    snprintf(h->closed_code, sizeof h->closed_code, "%s", code);
}

static const struct agentc_callbacks ah_cbs = {.on_ready = ah_on_ready, .on_closed = ah_on_closed};

/* One loop iteration (at most a second), failing the test if it has hung. */
static inline void ah_step(struct ah *h)
{
    assert_true(time(NULL) - h->started < AH_HANG_SECONDS);
    struct timeval tv = {.tv_sec = 1};
    event_base_loopexit(h->base, &tv);
    event_base_loop(h->base, EVLOOP_ONCE);
}

/* Runs the loop until *flag is true. */
static inline void ah_wait(struct ah *h, const bool *flag)
{
    while (!*flag)
        ah_step(h);
}

static inline void ah_connect_fd(struct ah *h, int fd)
{
    h->ready = h->closed = false;
    h->c = agentc_new(h->base, fd, &ah_cbs, h);
    assert_non_null(h->c);
    ah_wait(h, &h->ready);
}

/* Connects (again) to the agent in socket mode. */
static inline void ah_reconnect(struct ah *h)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s", h->sock);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    for (int tries = 0; connect(fd, (struct sockaddr *)&a, sizeof a) < 0; tries++) {
        assert_true(tries < 3000); /* the child may not listen yet */
        usleep(10000);
    }
    ah_connect_fd(h, fd);
}

/* Starts an agent child. socket_mode: it listens on a unix socket (reconnects
 * possible), else it serves one end of a socketpair. */
static inline void ah_start_mode(struct ah *h, bool socket_mode)
{
    memset(h, 0, sizeof *h);
    h->started = time(NULL);
    signal(SIGPIPE, SIG_IGN); /* as in spaced: a vanished agent is an error, not a signal */
    snprintf(h->dir, sizeof h->dir, "/tmp/space-agent-test.XXXXXX");
    assert_non_null(mkdtemp(h->dir));
    int sv[2] = {-1, -1};
    if (socket_mode)
        snprintf(h->sock, sizeof h->sock, "%s/agent.sock", h->dir);
    else
        assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    h->agent = fork();
    assert_true(h->agent >= 0);
    if (h->agent == 0) {
        agent_sys_init(false);
        if (socket_mode)
            _exit(agent_serve_socket(h->sock) < 0 ? 1 : 0);
        close(sv[0]);
        _exit(agent_serve_fd(sv[1]) < 0 ? 1 : 0);
    }
    h->base = event_base_new();
    assert_non_null(h->base);
    if (socket_mode) {
        ah_reconnect(h);
    } else {
        close(sv[1]);
        ah_connect_fd(h, sv[0]);
    }
}

static inline void ah_start(struct ah *h)
{
    ah_start_mode(h, false);
}

static inline void ah_stop(struct ah *h)
{
    agentc_free(h->c);
    h->c = NULL;
    if (h->sock[0])
        kill(h->agent, SIGTERM); /* a listening agent never sees "the end" */
    int status;
    assert_int_equal(waitpid(h->agent, &status, 0), h->agent);
    if (!h->sock[0])
        assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    event_base_free(h->base);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", h->dir);
    assert_int_equal(system(cmd), 0);
}

/* A blocking request; takes req. Returns the result (new ref) or NULL with code set. */
static inline json_t *ah_call(struct ah *h, json_t *req, char **out, size_t *outlen, char *code)
{
    char msg[512];
    json_t *r = agentc_call(h->c, h->base, req, out, outlen, code, 64, msg, sizeof msg);
    json_decref(req);
    return r;
}

/* Expects req to fail with `code`. */
static inline void ah_expect_error(struct ah *h, json_t *req, const char *code)
{
    char got[64];
    json_t *r = ah_call(h, req, NULL, NULL, got);
    if (r) {
        char *s = json_dumps(r, 0);
        print_error("expected %s, got result %s\n", code, s);
        free(s);
    }
    assert_null(r);
    assert_string_equal(got, code);
}

/* Expects req to succeed; returns the result (caller decrefs). */
static inline json_t *ah_ok(struct ah *h, json_t *req)
{
    char code[64];
    json_t *r = ah_call(h, req, NULL, NULL, code);
    if (!r)
        print_error("request failed: %s\n", code);
    assert_non_null(r);
    return r;
}

/* ---- collecting one streaming channel ---- */

struct col {
    struct ah *h;
    struct agentc_chan *ch;
    bool keep;                          /* keep OUT/ERR bytes (else count only) */
    char *buf[FRAME_STREAM_COUNT];      /* kept bytes (owned, NUL-terminated) */
    size_t len[FRAME_STREAM_COUNT];     /* bytes received per stream */
    size_t cap[FRAME_STREAM_COUNT];
    json_t *events;                     /* every EVENT (owned array) */
    char code[64];                      /* first ERROR code */
    bool eof[FRAME_STREAM_COUNT];
    bool closed;
    bool started;                       /* "started"/"attached"/"watching"/"stat" seen */
    bool drained;                       /* on_drain fired since last reset */
    uint64_t sum;                       /* byte checksum of OUT (when !keep) */
};

static inline void col_event(void *arg, json_t *ev)
{
    struct col *k = arg;
    const char *t = json_string_value(json_object_get(ev, "type"));
    if (t && (!strcmp(t, "started") || !strcmp(t, "attached") || !strcmp(t, "watching") ||
              !strcmp(t, "stat")))
        k->started = true;
    json_array_append(k->events, ev);
}

static inline void col_data(void *arg, enum frame_stream s, const uint8_t *p, size_t n)
{
    struct col *k = arg;
    if (k->keep) {
        if (k->len[s] + n + 1 > k->cap[s]) {
            k->cap[s] = (k->len[s] + n + 1) * 2;
            k->buf[s] = realloc(k->buf[s], k->cap[s]);
            assert_non_null(k->buf[s]);
        }
        memcpy(k->buf[s] + k->len[s], p, n);
        k->buf[s][k->len[s] + n] = '\0';
    } else if (s == FRAME_STREAM_OUT) {
        for (size_t i = 0; i < n; i++)
            k->sum = k->sum * 31 + p[i];
    }
    k->len[s] += n;
}

static inline void col_eof(void *arg, enum frame_stream s)
{
    ((struct col *)arg)->eof[s] = true;
}

static inline void col_error(void *arg, const char *code, const char *message)
{
    struct col *k = arg;
    if (!k->code[0])
        snprintf(k->code, sizeof k->code, "%s", code);
}

static inline void col_close(void *arg)
{
    ((struct col *)arg)->closed = true;
}

static inline void col_drain(void *arg)
{
    ((struct col *)arg)->drained = true;
}

static const struct agentc_chan_ops col_ops = {
    .on_event = col_event, .on_data = col_data, .on_eof = col_eof,
    .on_error = col_error, .on_close = col_close, .on_drain = col_drain,
};

/* Opens a channel collected into k (takes req). */
static inline void col_open(struct ah *h, struct col *k, json_t *req, unsigned flags, bool keep)
{
    char err[128];
    memset(k, 0, sizeof *k);
    k->h = h;
    k->keep = keep;
    k->events = json_array();
    k->ch = agentc_open(h->c, req, &col_ops, k, flags, err, sizeof err);
    json_decref(req);
    assert_non_null(k->ch);
}

/* The last event of a type (borrowed), or NULL. */
static inline json_t *col_find(struct col *k, const char *type)
{
    json_t *found = NULL, *ev;
    size_t i;
    json_array_foreach(k->events, i, ev)
        if (!strcmp(json_string_value(json_object_get(ev, "type")), type))
            found = ev;
    return found;
}

static inline void col_free(struct col *k)
{
    for (int i = 0; i < FRAME_STREAM_COUNT; i++)
        free(k->buf[i]);
    json_decref(k->events);
}

/* Exit code from a collected exec (-1000 - signal if killed). */
static inline int col_exit(struct col *k)
{
    json_t *ex = col_find(k, "exit");
    assert_non_null(ex);
    json_t *code = json_object_get(ex, "code");
    if (json_is_integer(code))
        return (int)json_integer_value(code);
    return -1000 - (int)json_integer_value(json_object_get(ex, "signal"));
}

/* Runs exec request `req` to its end and checks its stdout is exactly `want`. */
static inline void col_expect_stdout(struct ah *h, json_t *req, const char *want)
{
    struct col k;
    col_open(h, &k, req, 0, true);
    ah_wait(h, &k.closed);
    assert_non_null(k.buf[FRAME_STREAM_OUT]);
    assert_string_equal(k.buf[FRAME_STREAM_OUT], want);
    col_free(&k);
}

#endif
