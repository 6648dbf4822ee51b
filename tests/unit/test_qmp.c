/* test_qmp: the QMP parser (accepted shapes, rejected ones) and the client against a fake
 * QEMU on a socketpair: greeting + negotiation, id matching, errors, events, timeouts,
 * fd passing, and connection teardown on malformed or oversized input. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "daemon/vm/qmp.h"
#include "daemon/vm/vm.h"

/* ---- parser ------------------------------------------------------------------------ */

static int parse(const char *s, struct qmp_msg *m)
{
    char err[128];
    return qmp_parse(s, strlen(s), m, err, sizeof(err));
}

static void test_parse_ok(void **state)
{
    struct qmp_msg m;
    assert_int_equal(parse("{\"QMP\": {\"version\": {}, \"capabilities\": []}}", &m), 0);
    assert_int_equal(m.kind, QMP_MSG_GREETING);
    qmp_msg_clear(&m);
    assert_int_equal(parse("{\"return\": {\"status\": \"running\"}, \"id\": 7}\r", &m), 0);
    assert_int_equal(m.kind, QMP_MSG_RETURN);
    assert_true(m.has_id);
    assert_int_equal(m.id, 7);
    assert_string_equal(json_string_value(json_object_get(m.ret, "status")), "running");
    qmp_msg_clear(&m);
    assert_int_equal(parse("{\"error\": {\"class\": \"GenericError\", \"desc\": \"no\"}, \"id\": 3}", &m), 0);
    assert_int_equal(m.kind, QMP_MSG_ERROR);
    assert_string_equal(m.err_desc, "no");
    qmp_msg_clear(&m);
    assert_int_equal(parse("{\"event\": \"STOP\", \"timestamp\": {\"seconds\": 1}}", &m), 0);
    assert_int_equal(m.kind, QMP_MSG_EVENT);
    assert_string_equal(m.event, "STOP");
    assert_null(m.data);
    qmp_msg_clear(&m);
    /* an id we could not have sent just matches nothing */
    assert_int_equal(parse("{\"return\": {}, \"id\": \"x\"}", &m), 0);
    assert_false(m.has_id);
    qmp_msg_clear(&m);
}

static void test_parse_rejects(void **state)
{
    struct qmp_msg m;
    const char *bad[] = {
        "", "not json", "[1,2]", "\"s\"", "{}", "{\"foo\": 1}",
        "{\"QMP\": 1}",
        "{\"error\": {\"class\": 1, \"desc\": \"x\"}, \"id\": 1}",
        "{\"error\": \"x\", \"id\": 1}",
        "{\"event\": 5}",
        "{\"event\": \"\"}",
        "{\"event\": \"STOP\", \"data\": [1]}",
        "{\"return\": {}, \"id\": 1} {\"return\": {}}",
        "{\"return\": {}, \"return\": {}, \"id\": 1}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (parse(bad[i], &m) == 0)
            fail_msg("accepted: %s", bad[i]);
        assert_null(m.root);
    }
    char *big = malloc(QMP_LINE_MAX + 2);
    memset(big, ' ', QMP_LINE_MAX + 1);
    big[QMP_LINE_MAX + 1] = 0;
    assert_int_equal(parse(big, &m), -1);
    free(big);
}

/* ---- client against a fake QEMU ------------------------------------------------------ */

static struct event_base *base;
static int peer; /* the fake QEMU's end */

struct seen {
    int ready, closed, events, replies, last_err;
    char last_event[32], why[160];
    json_t *last_ret;
};

static void h_ready(struct qmp *q, void *arg) { ((struct seen *)arg)->ready++; }
static void h_event(struct qmp *q, const char *ev, json_t *data, void *arg)
{
    struct seen *s = arg;
    s->events++;
    snprintf(s->last_event, sizeof(s->last_event), "%s", ev);
}
static void h_close(struct qmp *q, const char *why, void *arg)
{
    struct seen *s = arg;
    s->closed++;
    snprintf(s->why, sizeof(s->why), "%s", why);
}
static const struct qmp_handlers H = { h_ready, h_event, h_close };

static void on_reply(struct qmp *q, int err, const char *msg, json_t *ret, void *arg)
{
    struct seen *s = arg;
    s->replies++;
    s->last_err = err;
    json_decref(s->last_ret);
    s->last_ret = ret ? json_incref(ret) : NULL;
}

static void spin(int rounds)
{
    for (int i = 0; i < rounds; i++)
        event_base_loop(base, EVLOOP_NONBLOCK);
}

static void peer_send(const char *s)
{
    assert_int_equal(write(peer, s, strlen(s)), (ssize_t)strlen(s));
}

/* Reads one command line from the client; returns its parsed JSON. */
static json_t *peer_read(int *fd_out)
{
    char buf[4096];
    size_t len = 0;
    union { char b[CMSG_SPACE(sizeof(int))]; struct cmsghdr a; } ctl;
    if (fd_out)
        *fd_out = -1;
    while (len == 0 || buf[len - 1] != '\n') {
        spin(5);
        struct iovec iov = { buf + len, 1 };
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.b,
                             .msg_controllen = sizeof(ctl.b) };
        ssize_t n = recvmsg(peer, &mh, MSG_DONTWAIT);
        if (n < 0 && errno == EAGAIN)
            continue;
        assert_true(n == 1);
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        if (c && c->cmsg_type == SCM_RIGHTS && fd_out)
            memcpy(fd_out, CMSG_DATA(c), sizeof(int));
        len++;
    }
    json_t *j = json_loadb(buf, len, 0, NULL);
    assert_non_null(j);
    return j;
}

static struct qmp *connect_client(struct seen *s)
{
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    peer = sv[1];
    memset(s, 0, sizeof(*s));
    struct qmp *q = qmp_new(base, sv[0], &H, s);
    assert_non_null(q);
    peer_send("{\"QMP\": {\"version\": {}, \"capabilities\": []}}\r\n");
    json_t *caps = peer_read(NULL);
    assert_string_equal(json_string_value(json_object_get(caps, "execute")), "qmp_capabilities");
    char reply[128];
    snprintf(reply, sizeof(reply), "{\"return\": {}, \"id\": %lld}\n",
             (long long)json_integer_value(json_object_get(caps, "id")));
    json_decref(caps);
    peer_send(reply);
    spin(5);
    assert_int_equal(s->ready, 1);
    return q;
}

static void test_client_commands(void **state)
{
    struct seen s;
    base = event_base_new();
    struct qmp *q = connect_client(&s);
    /* two commands, answered out of order */
    assert_int_equal(qmp_command(q, "query-status", NULL, -1, 0, on_reply, &s), 0);
    assert_int_equal(qmp_command(q, "stop", NULL, -1, 0, on_reply, &s), 0);
    assert_int_equal(s.replies, 0); /* never synchronously */
    json_t *c1 = peer_read(NULL), *c2 = peer_read(NULL);
    char r[200];
    snprintf(r, sizeof(r), "{\"error\": {\"class\": \"GenericError\", \"desc\": \"nope\"}, \"id\": %lld}\n",
             (long long)json_integer_value(json_object_get(c2, "id")));
    peer_send(r);
    spin(5);
    assert_int_equal(s.replies, 1);
    assert_int_equal(s.last_err, VM_E_QMP);
    snprintf(r, sizeof(r), "{\"return\": {\"status\": \"paused\"}, \"id\": %lld}\n",
             (long long)json_integer_value(json_object_get(c1, "id")));
    peer_send(r);
    /* a reply to nobody is ignored */
    peer_send("{\"return\": {}, \"id\": 999}\n");
    peer_send("{\"event\": \"STOP\", \"timestamp\": {\"seconds\": 1, \"microseconds\": 2}}\n");
    spin(5);
    assert_int_equal(s.replies, 2);
    assert_int_equal(s.last_err, 0);
    assert_string_equal(json_string_value(json_object_get(s.last_ret, "status")), "paused");
    assert_int_equal(s.events, 1);
    assert_string_equal(s.last_event, "STOP");
    json_decref(c1);
    json_decref(c2);

    /* arguments are sent, and a descriptor rides along */
    int pass[2];
    assert_int_equal(pipe(pass), 0);
    assert_int_equal(qmp_command(q, "getfd", json_pack("{s:s}", "fdname", "x"), pass[1], 0,
                                 on_reply, &s), 0);
    int got;
    json_t *c3 = peer_read(&got);
    assert_string_equal(json_string_value(json_object_get(json_object_get(c3, "arguments"), "fdname")), "x");
    assert_true(got >= 0);
    assert_int_equal(write(got, "z", 1), 1);
    char z;
    assert_int_equal(read(pass[0], &z, 1), 1);
    close(got);
    close(pass[0]);
    close(pass[1]);
    json_decref(c3);

    /* a command nobody answers times out; the connection stays */
    assert_int_equal(qmp_command(q, "query-status", NULL, -1, 50, on_reply, &s), 0);
    int before = s.replies;
    for (int i = 0; i < 200 && s.replies == before; i++) {
        usleep(2000);
        spin(1);
    }
    assert_int_equal(s.last_err, VM_E_TIMEOUT);
    assert_int_equal(s.closed, 0);

    /* EOF: pending commands fail, then on_close */
    assert_int_equal(qmp_command(q, "cont", NULL, -1, 0, on_reply, &s), 0);
    spin(5);
    close(peer);
    spin(5);
    assert_int_equal(s.last_err, VM_E_EXITED);
    assert_int_equal(s.closed, 1);
    assert_int_equal(qmp_command(q, "cont", NULL, -1, 0, on_reply, &s), -1);
    qmp_free(q);
    json_decref(s.last_ret);
    event_base_free(base);
}

static void test_client_malformed(void **state)
{
    struct seen s;
    base = event_base_new();
    struct qmp *q = connect_client(&s);
    peer_send("{\"event\": 42}\n");
    spin(5);
    assert_int_equal(s.closed, 1);
    assert_non_null(strstr(s.why, "malformed"));
    qmp_free(q);
    close(peer);

    /* a line that never ends is cut off at QMP_LINE_MAX */
    q = connect_client(&s);
    char *junk = malloc(8192);
    memset(junk, 'a', 8192);
    for (int i = 0; i < QMP_LINE_MAX / 8192 + 2 && !s.closed; i++) {
        ssize_t n = write(peer, junk, 8192);
        (void)n;
        spin(3);
    }
    free(junk);
    assert_int_equal(s.closed, 1);
    qmp_free(q);
    close(peer);

    /* a second greeting is a protocol violation */
    q = connect_client(&s);
    peer_send("{\"QMP\": {}}\n");
    spin(5);
    assert_int_equal(s.closed, 1);
    qmp_free(q);
    close(peer);
    event_base_free(base);
}

/* qmp_free from inside a callback is safe. */
static struct qmp *self_free_q;
static void free_in_close(struct qmp *q, const char *why, void *arg)
{
    qmp_free(q);
    self_free_q = NULL;
}

static void test_free_in_callback(void **state)
{
    base = event_base_new();
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    struct qmp_handlers h = { NULL, NULL, free_in_close };
    self_free_q = qmp_new(base, sv[0], &h, NULL);
    close(sv[1]);
    spin(5);
    assert_null(self_free_q);
    event_base_free(base);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_ok),
        cmocka_unit_test(test_parse_rejects),
        cmocka_unit_test(test_client_commands),
        cmocka_unit_test(test_client_malformed),
        cmocka_unit_test(test_free_in_callback),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
