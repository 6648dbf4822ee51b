/* Tests of the HTTP server's exits from the request/response cycle, over real sockets:
 * protocol upgrades (101 head with the application's headers, bytes pipelined after
 * the head reach the new owner, the upgraded connection outlives the server's head and
 * idle timers and leaves its connection count, refusals leave the request usable) and
 * aborted replies (chunked, Content-Length, and before any head: the client must see
 * the truncation, never a complete-looking response). */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>

#include "daemon/http/http.h"
#include "log.h"
#include "test_http_harness.h"

static struct th_server T;
static atomic_int upgraded;   /* connections handed over */
static atomic_int freed;      /* handed-over connections closed by their owner */
static atomic_int conns_after; /* http_server_connections right after a hand-over */

/* ---- the new owner: an echo protocol on the raw bufferevent ---------------------- */

static void echo_read(struct bufferevent *bev, void *arg)
{
    bufferevent_write_buffer(bev, bufferevent_get_input(bev));
}

static void echo_event(struct bufferevent *bev, short what, void *arg)
{
    bufferevent_free(bev);
    atomic_fetch_add(&freed, 1);
}

static void on_upgraded(struct bufferevent *bev, void *arg)
{
    if (!bev)
        return;
    atomic_store(&conns_after, (int)http_server_connections(T.srv));
    atomic_fetch_add(&upgraded, 1);
    bufferevent_setcb(bev, echo_read, NULL, echo_event, NULL);
    echo_read(bev, NULL); /* bytes that came with the head */
}

/* ---- handlers (run on the loop thread) ------------------------------------------- */

static void h_ws(struct http_req *req, void *arg)
{
    http_reply_add_header(req, "X-Echo", "yes");
    if (http_req_upgrade(req, "echo", on_upgraded, NULL) < 0)
        http_reply_error(req, 400, "no_upgrade", "upgrade refused");
}

static void h_bad_proto(struct http_req *req, void *arg)
{
    if (http_req_upgrade(req, "bad\r\nX-Injected: 1", on_upgraded, NULL) < 0)
        http_reply_error(req, 400, "no_upgrade", "upgrade refused");
}

static void h_cut(struct http_req *req, void *arg)
{
    const char *len = http_req_query(req, "len");
    if (http_req_query(req, "early")) {
        http_reply_abort(req, "upstream gone before the head");
        return;
    }
    http_stream_start(req, 200, "text/plain", len ? strtoll(len, NULL, 10) : -1);
    http_stream_write(req, "partial", 7);
    http_reply_abort(req, "upstream cut");
}

static void setup(struct router *r, struct th_server *t)
{
    router_add(r, "GET", "/ws", h_ws, NULL);
    router_add(r, "POST", "/ws", h_ws, NULL);
    router_add(r, "GET", "/badproto", h_bad_proto, NULL);
    router_add(r, "GET", "/cut", h_cut, NULL);
    router_add(r, "GET", "/hello", th_hello, NULL);
}

static int start(void **state)
{
    /* Short head and idle timers: an upgraded connection must not be subject to them. */
    struct http_limits lim = {.header_timeout_ms = 300, .keepalive_idle_ms = 300,
                              .body_idle_timeout_ms = 300};
    return th_setup(state, &T, &lim, setup);
}

#define WS_HEAD(method, ver) \
    method " /ws HTTP/1." ver "\r\nHost: t\r\nConnection: Upgrade\r\nUpgrade: echo\r\n"

static void wait_count(atomic_int *v, int want)
{
    for (int i = 0; i < 6000 && atomic_load(v) != want; i++)
        usleep(10 * 1000);
    assert_int_equal(atomic_load(v), want);
}

static void test_upgrade_echo(void **state)
{
    atomic_store(&upgraded, 0);
    atomic_store(&freed, 0);
    atomic_store(&conns_after, -1);
    struct th_conn *c = th_connect(T.port);
    /* Bytes pipelined right behind the head belong to the new protocol. */
    assert_int_equal(th_sends(c, WS_HEAD("GET", "1") "\r\nearly|"), 0);
    struct th_resp r;
    char v[64];
    assert_int_equal(th_read_resp(c, &r, false), 0);
    assert_int_equal(r.status, 101);
    assert_string_equal(th_hdr(&r, "Upgrade", v, sizeof v), "echo");
    assert_string_equal(th_hdr(&r, "Connection", v, sizeof v), "Upgrade");
    assert_string_equal(th_hdr(&r, "X-Echo", v, sizeof v), "yes");
    assert_null(th_hdr(&r, "Content-Length", v, sizeof v));
    th_resp_free(&r);
    assert_true(th_need(c, 6));
    assert_memory_equal(c->buf, "early|", 6);
    th_consume(c, 6);
    wait_count(&upgraded, 1);
    assert_int_equal(atomic_load(&conns_after), 0);
    /* Well past the head, idle and body timers of the server (300 ms). */
    usleep(1200 * 1000);
    assert_int_equal(th_sends(c, "GET / HTTP/1.1\r\n\r\nnot http for us"), 0);
    assert_true(th_need(c, 33));
    assert_memory_equal(c->buf, "GET / HTTP/1.1\r\n\r\nnot http for us", 33);
    th_close(c);
    wait_count(&freed, 1);
    /* The server still serves ordinary requests. */
    assert_int_equal(th_roundtrip(T.port, "GET /hello HTTP/1.1\r\nHost: t\r\n\r\n", &r), 200);
    th_resp_free(&r);
}

static void test_upgrade_refused(void **state)
{
    atomic_store(&upgraded, 0);
    struct th_resp r;
    char v[64];
    /* HTTP/1.0 has no upgrades. */
    assert_int_equal(th_roundtrip(T.port, WS_HEAD("GET", "0") "\r\n", &r), 400);
    th_resp_free(&r);
    /* A request body that was not read. */
    assert_int_equal(th_roundtrip(T.port, WS_HEAD("POST", "1") "Content-Length: 3\r\n\r\nabc", &r),
                     400);
    th_resp_free(&r);
    /* A protocol that would break the head. */
    assert_int_equal(th_roundtrip(T.port, "GET /badproto HTTP/1.1\r\nHost: t\r\n\r\n", &r), 400);
    assert_null(th_hdr(&r, "X-Injected", v, sizeof v));
    th_resp_free(&r);
    assert_int_equal(atomic_load(&upgraded), 0);
}

static void test_abort_chunked(void **state)
{
    struct th_conn *c = th_connect(T.port);
    assert_int_equal(th_sends(c, "GET /cut HTTP/1.1\r\nHost: t\r\n\r\n"), 0);
    struct th_resp r;
    assert_int_equal(th_read_resp(c, &r, false), -1); /* no terminating chunk */
    th_resp_free(&r);
    th_close(c);
    /* The bytes sent before the cut did arrive, then the connection closed. */
    c = th_connect(T.port);
    assert_int_equal(th_sends(c, "GET /cut HTTP/1.1\r\nHost: t\r\n\r\n"), 0);
    assert_true(th_find(c, "7\r\npartial\r\n") >= 0);
    assert_true(th_wait_closed(c));
    assert_null(memmem(c->buf, c->len, "0\r\n\r\n", 5));
    th_close(c);
}

static void test_abort_length(void **state)
{
    struct th_conn *c = th_connect(T.port);
    assert_int_equal(th_sends(c, "GET /cut?len=100 HTTP/1.1\r\nHost: t\r\n\r\n"), 0);
    struct th_resp r;
    assert_int_equal(th_read_resp(c, &r, false), -1); /* 7 of 100 bytes, then EOF */
    th_resp_free(&r);
    th_close(c);
}

static void test_abort_before_head(void **state)
{
    struct th_conn *c = th_connect(T.port);
    assert_int_equal(th_sends(c, "GET /cut?early=1 HTTP/1.1\r\nHost: t\r\n\r\n"), 0);
    assert_true(th_wait_closed(c));
    assert_int_equal(c->len, 0);
    th_close(c);
}

int main(void)
{
    log_init("test_http_upgrade", LOG_ERROR);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_upgrade_echo, start, th_teardown),
        cmocka_unit_test_setup_teardown(test_upgrade_refused, start, th_teardown),
        cmocka_unit_test_setup_teardown(test_abort_chunked, start, th_teardown),
        cmocka_unit_test_setup_teardown(test_abort_length, start, th_teardown),
        cmocka_unit_test_setup_teardown(test_abort_before_head, start, th_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
