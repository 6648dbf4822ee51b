/* test_agent_wire: raw frames at the agent (no agentc): malformed, unknown and
 * out-of-order input gets ERROR frames and the agent keeps serving; an unparseable
 * header ends the connection but not the processes. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "agent/serve.h"
#include "agent/sys.h"
#include "frame.h"

struct raw {
    int fd;
    pid_t agent;
    uint8_t in[FRAME_HEADER_SIZE + FRAME_MAX_PAYLOAD];
    size_t inlen;
};

static void raw_send(struct raw *r, uint32_t ch, unsigned type, unsigned stream, const void *p,
                     size_t n)
{
    uint8_t hdr[FRAME_HEADER_SIZE];
    frame_encode_header(hdr, ch, (enum frame_type)type, (enum frame_stream)stream, (uint32_t)n);
    assert_int_equal(write(r->fd, hdr, sizeof hdr), sizeof hdr);
    if (n)
        assert_int_equal(write(r->fd, p, n), (ssize_t)n);
}

static void raw_json(struct raw *r, uint32_t ch, unsigned type, const char *json)
{
    raw_send(r, ch, type, 0, json, strlen(json));
}

/* Next frame (payload copied into pl, NUL-terminated); false at EOF. */
static bool raw_recv(struct raw *r, struct frame *f, char *pl, size_t cap)
{
    for (;;) {
        size_t used;
        const char *why;
        enum frame_parse_result pr = frame_parse(r->in, r->inlen, f, &used, &why);
        assert_int_not_equal(pr, FRAME_PARSE_ERROR);
        if (pr == FRAME_PARSE_OK) {
            assert_int_equal(frame_check(f, FRAME_FROM_AGENT, &why), 0);
            assert_true(f->len < cap);
            memcpy(pl, f->payload, f->len);
            pl[f->len] = '\0';
            memmove(r->in, r->in + used, r->inlen - used);
            r->inlen -= used;
            return true;
        }
        struct pollfd p = {.fd = r->fd, .events = POLLIN};
        assert_int_equal(poll(&p, 1, 60000), 1); /* hang guard */
        ssize_t n = read(r->fd, r->in + r->inlen, sizeof r->in - r->inlen);
        if (n <= 0)
            return false;
        r->inlen += (size_t)n;
    }
}

/* Expects an ERROR on channel ch with the given code. */
static void expect_error(struct raw *r, uint32_t ch, const char *code)
{
    struct frame f;
    char pl[4096];
    assert_true(raw_recv(r, &f, pl, sizeof pl));
    if (f.type != FRAME_ERROR)
        print_error("expected ERROR, got %s %s\n", frame_type_name(f.type), pl);
    assert_int_equal(f.type, FRAME_ERROR);
    assert_int_equal(f.channel, ch);
    json_t *e = json_loads(pl, 0, NULL);
    assert_string_equal(json_string_value(json_object_get(e, "code")), code);
    json_decref(e);
}

static void expect_type(struct raw *r, uint32_t ch, unsigned type, char *pl, size_t cap)
{
    struct frame f;
    assert_true(raw_recv(r, &f, pl, cap));
    if (f.type != type)
        print_error("expected %s, got %s %s\n", frame_type_name(type), frame_type_name(f.type), pl);
    assert_int_equal(f.type, type);
    assert_int_equal(f.channel, ch);
}

static void raw_start(struct raw *r)
{
    int sv[2];
    memset(r, 0, sizeof *r);
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    r->agent = fork();
    assert_true(r->agent >= 0);
    if (r->agent == 0) {
        close(sv[0]);
        agent_sys_init(false);
        _exit(agent_serve_fd(sv[1]) < 0 ? 1 : 0);
    }
    close(sv[1]);
    r->fd = sv[0];
}

static void raw_stop(struct raw *r)
{
    close(r->fd);
    int st;
    assert_int_equal(waitpid(r->agent, &st, 0), r->agent);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* A health request on ch must still be answered. */
static void expect_serving(struct raw *r, uint32_t ch)
{
    char pl[4096];
    raw_json(r, ch, FRAME_OPEN, "{\"op\":\"health\"}");
    expect_type(r, ch, FRAME_EVENT, pl, sizeof pl);
    assert_non_null(strstr(pl, "\"status\":\"ok\""));
    expect_type(r, ch, FRAME_CLOSE, pl, sizeof pl);
    raw_send(r, ch, FRAME_CLOSE, 0, NULL, 0);
}

static void test_bad_frames(void **state)
{
    struct raw r;
    char pl[4096];
    raw_start(&r);
    /* anything before HELLO */
    raw_json(&r, 1, FRAME_OPEN, "{\"op\":\"health\"}");
    expect_error(&r, 1, FRAME_E_PROTOCOL);
    raw_json(&r, 0, FRAME_HELLO, "{\"version\":\"x\"}");
    expect_error(&r, 0, FRAME_E_PROTOCOL);
    raw_json(&r, 0, FRAME_HELLO, "{\"version\":1,\"min_version\":1}");
    expect_type(&r, 0, FRAME_HELLO, pl, sizeof pl);
    assert_non_null(strstr(pl, "\"version\":1"));

    raw_send(&r, 0, FRAME_PING, 0, "abc", 3);
    expect_type(&r, 0, FRAME_PONG, pl, sizeof pl);
    assert_string_equal(pl, "abc");

    raw_send(&r, 3, 99, 0, NULL, 0);                       /* unknown type */
    expect_error(&r, 3, FRAME_E_PROTOCOL);
    raw_send(&r, 5, FRAME_DATA, FRAME_STREAM_IN, "x", 1);  /* unknown channel */
    expect_error(&r, 5, FRAME_E_PROTOCOL);
    raw_json(&r, 2, FRAME_OPEN, "{\"op\":\"health\"}");    /* even channel */
    expect_error(&r, 2, FRAME_E_PROTOCOL);
    raw_send(&r, 7, FRAME_DATA, FRAME_STREAM_OUT, "x", 1); /* wrong direction stream */
    expect_error(&r, 7, FRAME_E_PROTOCOL);
    raw_json(&r, 1, FRAME_EVENT, "{\"type\":\"x\"}");      /* agent-only type */
    expect_error(&r, 1, FRAME_E_PROTOCOL);
    raw_send(&r, 9, FRAME_CLOSE, 0, NULL, 0);              /* close of nothing: ignored */
    raw_json(&r, 1, FRAME_ERROR, "{\"code\":\"x\"}");      /* never answered */

    raw_send(&r, 11, FRAME_OPEN, 0, "not json", 8);
    expect_error(&r, 11, FRAME_E_INVALID_ARGUMENT);
    expect_type(&r, 11, FRAME_CLOSE, pl, sizeof pl);
    raw_send(&r, 11, FRAME_CLOSE, 0, NULL, 0);
    raw_json(&r, 13, FRAME_OPEN, "[\"op\"]");
    expect_error(&r, 13, FRAME_E_INVALID_ARGUMENT);
    expect_type(&r, 13, FRAME_CLOSE, pl, sizeof pl);
    raw_send(&r, 13, FRAME_CLOSE, 0, NULL, 0);
    raw_json(&r, 15, FRAME_OPEN, "{\"op\":\"stat\",\"path\":\"/a\\u0000b\"}"); /* NUL */
    expect_error(&r, 15, FRAME_E_INVALID_ARGUMENT);
    expect_type(&r, 15, FRAME_CLOSE, pl, sizeof pl);
    raw_send(&r, 15, FRAME_CLOSE, 0, NULL, 0);
    raw_json(&r, 17, FRAME_OPEN, "{\"op\":\"exec\",\"argv\":[\"true\"],\"user\":\"ghost\"}");
    expect_error(&r, 17, FRAME_E_NOT_FOUND);
    expect_type(&r, 17, FRAME_CLOSE, pl, sizeof pl);
    raw_send(&r, 17, FRAME_CLOSE, 0, NULL, 0);

    /* a live exec channel: CTRL garbage, DATA beyond the window, OPEN on it again */
    raw_json(&r, 19, FRAME_OPEN, "{\"op\":\"exec\",\"cmd\":\"cat\",\"stdin\":true}");
    expect_type(&r, 19, FRAME_EVENT, pl, sizeof pl);
    assert_non_null(strstr(pl, "started"));
    raw_json(&r, 19, FRAME_OPEN, "{\"op\":\"health\"}");
    expect_error(&r, 19, FRAME_E_PROTOCOL);
    raw_json(&r, 19, FRAME_CTRL, "{\"op\":\"dance\"}");
    expect_error(&r, 19, FRAME_E_UNSUPPORTED);
    raw_send(&r, 19, FRAME_CTRL, 0, "{{", 2);
    expect_error(&r, 19, FRAME_E_INVALID_ARGUMENT);
    expect_serving(&r, 21); /* other channels are unaffected */

    /* credit overflow from the host */
    uint8_t credit[4];
    frame_credit_payload(credit, FRAME_MAX_CREDIT);
    raw_send(&r, 19, FRAME_CREDIT, FRAME_STREAM_OUT, credit, 4);
    expect_error(&r, 19, FRAME_E_PROTOCOL);
    expect_type(&r, 19, FRAME_CLOSE, pl, sizeof pl);
    raw_send(&r, 19, FRAME_DATA, FRAME_STREAM_IN, "late", 4); /* in flight: ignored */
    raw_send(&r, 19, FRAME_CLOSE, 0, NULL, 0);
    expect_serving(&r, 19); /* the id is free again */

    /* too much stdin for the window */
    raw_json(&r, 23, FRAME_OPEN, "{\"op\":\"exec\",\"cmd\":\"sleep 1000\",\"stdin\":true}");
    expect_type(&r, 23, FRAME_EVENT, pl, sizeof pl);
    static uint8_t big[FRAME_MAX_PAYLOAD];
    /* far beyond window + pipe capacity: the agent grants only what the pipe took */
    for (unsigned sent = 0; sent < 4 * FRAME_WINDOW_INITIAL; sent += sizeof big)
        raw_send(&r, 23, FRAME_DATA, FRAME_STREAM_IN, big, sizeof big);
    for (;;) { /* CREDIT frames may come first, as the agent writes into the pipe */
        struct frame f;
        assert_true(raw_recv(&r, &f, pl, sizeof pl));
        if (f.type == FRAME_CREDIT)
            continue;
        assert_int_equal(f.type, FRAME_ERROR);
        assert_non_null(strstr(pl, FRAME_E_PROTOCOL));
        break;
    }
    expect_type(&r, 23, FRAME_CLOSE, pl, sizeof pl);
    raw_send(&r, 23, FRAME_CLOSE, 0, NULL, 0);
    expect_serving(&r, 25);

    /* the process of channel 23 lives on, detached */
    raw_json(&r, 27, FRAME_OPEN, "{\"op\":\"ps\"}");
    expect_type(&r, 27, FRAME_EVENT, pl, sizeof pl);
    json_t *ps = json_loads(pl, 0, NULL);
    json_t *p0 = json_array_get(json_object_get(ps, "processes"), 0);
    assert_string_equal(json_string_value(json_object_get(p0, "cmd")), "sleep 1000");
    assert_int_equal(kill((pid_t)json_integer_value(json_object_get(p0, "pid")), SIGKILL), 0);
    json_decref(ps);
    expect_type(&r, 27, FRAME_CLOSE, pl, sizeof pl);
    raw_send(&r, 27, FRAME_CLOSE, 0, NULL, 0);

    /* an oversized header cannot be skipped: ERROR on channel 0, then hang-up */
    uint8_t hdr[FRAME_HEADER_SIZE];
    frame_encode_header(hdr, 1, FRAME_DATA, FRAME_STREAM_IN, FRAME_MAX_PAYLOAD + 1);
    assert_int_equal(write(r.fd, hdr, sizeof hdr), sizeof hdr);
    expect_error(&r, 0, FRAME_E_PROTOCOL);
    struct frame f;
    assert_false(raw_recv(&r, &f, pl, sizeof pl));
    raw_stop(&r);
}

/* A second HELLO restarts the session (snapshot restore without a visible hang-up). */
static void test_hello_restart(void **state)
{
    struct raw r;
    char pl[4096];
    raw_start(&r);
    raw_json(&r, 0, FRAME_HELLO, "{\"version\":3,\"min_version\":1}");
    expect_type(&r, 0, FRAME_HELLO, pl, sizeof pl);
    raw_json(&r, 1, FRAME_OPEN, "{\"op\":\"watch\",\"path\":\"/tmp\"}");
    expect_type(&r, 1, FRAME_EVENT, pl, sizeof pl);
    raw_json(&r, 0, FRAME_HELLO, "{\"version\":1,\"min_version\":1}");
    expect_type(&r, 0, FRAME_HELLO, pl, sizeof pl);
    /* channel 1 is gone with the old session: a frame for it is unknown now */
    raw_json(&r, 1, FRAME_CTRL, "{\"op\":\"x\"}");
    expect_error(&r, 1, FRAME_E_PROTOCOL);
    expect_serving(&r, 1);
    raw_json(&r, 0, FRAME_HELLO, "{\"version\":9,\"min_version\":9}");
    expect_error(&r, 0, FRAME_E_UNSUPPORTED);
    struct frame f;
    assert_false(raw_recv(&r, &f, pl, sizeof pl));
    raw_stop(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_frames),
        cmocka_unit_test(test_hello_restart),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
