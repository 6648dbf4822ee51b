/* Tests of the HTTP server over real sockets: keep-alive, pipelining, chunked bodies
 * both ways, HEAD, 100-continue, head/body limits, slowloris and body-idle timeouts,
 * smuggling attempts, bad methods, overload (1000 connections against 200 allowed),
 * a 200 MiB upload through a pausing consumer with bounded buffering, streamed
 * downloads with drain callbacks, and on_close when a client vanishes mid-stream. */
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <event2/buffer.h>

#include "daemon/http/http_internal.h"
#include "daemon/http/sse.h"
#include "log.h"
#include "test_http_harness.h"

static struct th_server T;
static atomic_int sse_closed;
static atomic_int poll_closed;
static atomic_int uploads_aborted;
static atomic_int downloads_aborted;

/* ---- handlers (run on the loop thread) ------------------------------------------- */

static void echo_done(struct http_req *req, const char *data, size_t len, void *arg)
{
    char n[32];
    snprintf(n, sizeof n, "%zu", len);
    http_reply_add_header(req, "X-Len", n);
    http_reply(req, 200, "application/octet-stream", data, len);
}

static void h_echo(struct http_req *req, void *arg)
{
    const char *max = http_req_query(req, "max");
    http_req_read_body(req, max ? strtoul(max, NULL, 10) : 0, echo_done, NULL);
}

static void h_chunked(struct http_req *req, void *arg)
{
    http_stream_start(req, 200, "text/plain", -1);
    http_stream_write(req, "a", 1);
    http_stream_write(req, "bb", 2);
    http_stream_write(req, "ccc", 3);
    http_stream_end(req);
}

static void sse_gone(struct http_req *req, void *arg)
{
    atomic_fetch_add(&sse_closed, 1);
}

static void h_sse(struct http_req *req, void *arg)
{
    http_req_on_close(req, sse_gone, NULL);
    sse_start(req);
    sse_send(req, 1, "stdout", "one", 3);
    sse_send(req, 2, "stdout", "two\nlines", 9);
    sse_keepalive(req);
}

static void poll_gone(struct http_req *req, void *arg)
{
    atomic_fetch_add(&poll_closed, 1);
}

static void h_poll(struct http_req *req, void *arg)
{
    http_req_on_close(req, poll_gone, NULL);
}

static void h_stats(struct http_req *req, void *arg)
{
    json_t *j = json_pack("{s:i}", "connections", (int)http_server_connections(T.srv));
    http_reply_json(req, 200, j);
    json_decref(j);
}

/* A slow consumer of an upload: pauses every 1 MiB and resumes from a timer, like the
 * agent waiting for guest credits. Records the most input the server ever buffered. */
struct counter {
    struct http_req *req;
    struct event *resume;
    uint64_t bytes, since_pause, sum;
    size_t max_buffered;
};

static void counter_free(struct counter *k)
{
    event_free(k->resume);
    free(k);
}

static void counter_resume(evutil_socket_t fd, short what, void *arg)
{
    struct counter *k = arg;
    http_req_pause_body(k->req, false);
}

static void counter_chunk(struct http_req *req, const char *data, size_t len, void *arg)
{
    struct counter *k = arg;
    size_t in = evbuffer_get_length(req->conn->in);
    if (in > k->max_buffered)
        k->max_buffered = in;
    for (size_t i = 0; i < len; i++)
        k->sum += (unsigned char)data[i];
    k->bytes += len;
    k->since_pause += len;
    if (k->since_pause >= (1 << 20)) {
        k->since_pause = 0;
        http_req_pause_body(req, true);
        struct timeval tv = {.tv_usec = 1000};
        evtimer_add(k->resume, &tv);
    }
}

static void counter_end(struct http_req *req, void *arg)
{
    struct counter *k = arg;
    json_t *j = json_pack("{s:I,s:I,s:I}", "bytes", (json_int_t)k->bytes, "sum", (json_int_t)k->sum,
                          "max_buffered", (json_int_t)k->max_buffered);
    http_reply_json(req, 200, j);
    json_decref(j);
    counter_free(k);
}

static void counter_closed(struct http_req *req, void *arg)
{
    atomic_fetch_add(&uploads_aborted, 1);
    counter_free(arg);
}

static void h_count(struct http_req *req, void *arg)
{
    struct counter *k = calloc(1, sizeof *k);
    k->req = req;
    k->resume = evtimer_new(T.base, counter_resume, k);
    http_req_on_close(req, counter_closed, k);
    http_req_stream_body(req, counter_chunk, counter_end, k);
}

/* A download produced only as fast as the client reads (drain callbacks). */
struct producer {
    uint64_t left, pos;
    size_t max_pending;
};

static void produce(struct http_req *req, void *arg)
{
    struct producer *p = arg;
    char buf[16384];
    while (p->left && http_stream_pending(req) < 256 * 1024) {
        size_t n = p->left < sizeof buf ? p->left : sizeof buf;
        for (size_t i = 0; i < n; i++)
            buf[i] = (char)((p->pos + i) % 251);
        http_stream_write(req, buf, n);
        p->pos += n;
        p->left -= n;
        if (http_stream_pending(req) > p->max_pending)
            p->max_pending = http_stream_pending(req);
    }
    if (p->left) {
        http_stream_on_drain(req, produce, p);
        return;
    }
    http_stream_end(req);
    free(p);
}

static void producer_closed(struct http_req *req, void *arg)
{
    atomic_fetch_add(&downloads_aborted, 1);
    free(arg);
}

static void h_big(struct http_req *req, void *arg)
{
    struct producer *p = calloc(1, sizeof *p);
    p->left = strtoull(http_req_query(req, "n") ? http_req_query(req, "n") : "0", NULL, 10);
    http_req_on_close(req, producer_closed, p);
    const char *len = http_req_query(req, "len");
    http_stream_start(req, 200, "application/octet-stream", len ? (int64_t)p->left : -1);
    produce(req, p);
}

/* Refuses an upload without reading it (e.g. no permission): the server must not wait
 * for the whole body, and the client must still see the answer. */
static void h_refuse(struct http_req *req, void *arg)
{
    http_reply_error(req, 403, "forbidden", "no uploads here");
}

static void setup_routes(struct router *r, struct th_server *t)
{
    router_add(r, "POST", "/refuse", h_refuse, NULL);
    router_add(r, "GET", "/hello", th_hello, NULL);
    router_add(r, "POST", "/echo", h_echo, NULL);
    router_add(r, "GET", "/chunked", h_chunked, NULL);
    router_add(r, "GET", "/sse", h_sse, NULL);
    router_add(r, "GET", "/poll", h_poll, NULL);
    router_add(r, "GET", "/stats", h_stats, NULL);
    router_add(r, "POST", "/count", h_count, NULL);
    router_add(r, "GET", "/big", h_big, NULL);
}

static int start(void **state)
{
    return th_setup(state, &T, NULL, setup_routes);
}

#define GET(path) "GET " path " HTTP/1.1\r\nHost: t\r\n\r\n"

/* ---- tests -------------------------------------------------------------------------- */

static void test_keepalive(void **state)
{
    struct th_conn *c = th_connect(T.port);
    struct th_resp r;
    char v[128];
    for (int i = 0; i < 3; i++) {
        assert_int_equal(th_sends(c, GET("/hello")), 0);
        assert_int_equal(th_read_resp(c, &r, false), 0);
        assert_int_equal(r.status, 200);
        assert_string_equal(r.body, "hello");
        assert_non_null(th_hdr(&r, "Date", v, sizeof v));
        assert_string_equal(th_hdr(&r, "Content-Type", v, sizeof v), "text/plain");
        assert_null(th_hdr(&r, "Connection", v, sizeof v));
        th_resp_free(&r);
    }
    /* Connection: close is honoured: response then EOF. */
    assert_int_equal(th_sends(c, "GET /hello HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"), 0);
    assert_int_equal(th_read_resp(c, &r, false), 0);
    assert_string_equal(th_hdr(&r, "Connection", v, sizeof v), "close");
    th_resp_free(&r);
    assert_true(th_wait_closed(c));
    th_close(c);
}

static void test_pipelining(void **state)
{
    struct th_conn *c = th_connect(T.port);
    /* Three requests in one write, the middle one with a body: answered in order. */
    assert_int_equal(th_sends(c, GET("/hello") "POST /echo HTTP/1.1\r\nHost: t\r\n"
                                 "Content-Length: 6\r\n\r\nbody-2" GET("/chunked")),
                     0);
    struct th_resp r;
    assert_int_equal(th_read_resp(c, &r, false), 0);
    assert_string_equal(r.body, "hello");
    th_resp_free(&r);
    assert_int_equal(th_read_resp(c, &r, false), 0);
    assert_string_equal(r.body, "body-2");
    th_resp_free(&r);
    assert_int_equal(th_read_resp(c, &r, false), 0);
    assert_string_equal(r.body, "abbccc");
    th_resp_free(&r);
    /* An unread small body (no handler claims it) is skipped, keeping the framing. */
    assert_int_equal(th_sends(c, "GET /hello HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\nxyz" GET("/hello")), 0);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(th_read_resp(c, &r, false), 0);
        assert_string_equal(r.body, "hello");
        th_resp_free(&r);
    }
    th_close(c);
}

static void test_chunked_both_ways(void **state)
{
    struct th_conn *c = th_connect(T.port);
    struct th_resp r;
    char v[64];
    assert_int_equal(th_sends(c, "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
                                 "4;x=y\r\nWiki\r\n5\r\npedia\r\n0\r\nT: 1\r\n\r\n"),
                     0);
    assert_int_equal(th_read_resp(c, &r, false), 0);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, "Wikipedia");
    assert_string_equal(th_hdr(&r, "X-Len", v, sizeof v), "9");
    th_resp_free(&r);
    assert_int_equal(th_sends(c, GET("/chunked")), 0);
    assert_int_equal(th_read_resp(c, &r, false), 0);
    assert_string_equal(th_hdr(&r, "Transfer-Encoding", v, sizeof v), "chunked");
    assert_string_equal(r.body, "abbccc");
    th_resp_free(&r);
    th_close(c);
}

static void test_head_and_http10(void **state)
{
    struct th_conn *c = th_connect(T.port);
    struct th_resp r;
    char v[64];
    assert_int_equal(th_sends(c, "HEAD /hello HTTP/1.1\r\nHost: t\r\n\r\n" GET("/hello")), 0);
    assert_int_equal(th_read_resp(c, &r, true), 0);
    assert_int_equal(r.status, 200);
    assert_string_equal(th_hdr(&r, "Content-Length", v, sizeof v), "5");
    th_resp_free(&r);
    /* No body bytes were sent for HEAD: the next response parses cleanly. */
    assert_int_equal(th_read_resp(c, &r, false), 0);
    assert_string_equal(r.body, "hello");
    th_resp_free(&r);
    th_close(c);

    /* HTTP/1.0: no chunks; a stream is delimited by closing the connection. */
    c = th_connect(T.port);
    assert_int_equal(th_sends(c, "GET /chunked HTTP/1.0\r\n\r\n"), 0);
    assert_int_equal(th_read_resp(c, &r, false), 0);
    assert_null(th_hdr(&r, "Transfer-Encoding", v, sizeof v));
    assert_string_equal(r.body, "abbccc");
    th_resp_free(&r);
    th_close(c);
}

static void test_expect_continue(void **state)
{
    struct th_conn *c = th_connect(T.port);
    struct th_resp r;
    assert_int_equal(th_sends(c, "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n"
                                 "Expect: 100-continue\r\n\r\n"),
                     0);
    assert_int_equal(th_read_resp(c, &r, false), 0);
    assert_int_equal(r.status, 100);
    th_resp_free(&r);
    assert_int_equal(th_sends(c, "12345"), 0);
    assert_int_equal(th_read_resp(c, &r, false), 0);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, "12345");
    th_resp_free(&r);
    /* Too large for the handler: 413 straight away, no 100, body never sent. */
    assert_int_equal(th_sends(c, "POST /echo?max=4 HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n"
                                 "Expect: 100-continue\r\n\r\n"),
                     0);
    assert_int_equal(th_read_resp(c, &r, false), 0);
    assert_int_equal(r.status, 413);
    th_resp_free(&r);
    th_close(c);
}

/* Sends `req` and expects `status` with a JSON error body, then the connection closed. */
static void expect_error_close(const char *req, size_t len, int status, const char *code)
{
    struct th_conn *c = th_connect(T.port);
    struct th_resp r;
    th_send(c, req, len);
    if (th_read_resp(c, &r, false) != 0)
        fail_msg("no response for %.40s", req);
    if (r.status != status)
        fail_msg("want %d got %d for %.60s", status, r.status, req);
    json_error_t je;
    json_t *j = json_loads(r.body, 0, &je);
    assert_non_null(j);
    const char *got = json_string_value(json_object_get(json_object_get(j, "error"), "code"));
    assert_non_null(got);
    if (code)
        assert_string_equal(got, code);
    assert_non_null(json_string_value(json_object_get(json_object_get(j, "error"), "message")));
    json_decref(j);
    th_resp_free(&r);
    assert_true(th_wait_closed(c));
    th_close(c);
}

#define EXPECT_ERR(req, status, code) expect_error_close(req, sizeof(req) - 1, status, code)

static void test_limits(void **state)
{
    size_t n = 20000;
    char *big = malloc(n + 100);
    int off = sprintf(big, "GET /hello HTTP/1.1\r\nHost: t\r\nX-Big: ");
    memset(big + off, 'a', n);
    strcpy(big + off + n, "\r\n\r\n");
    expect_error_close(big, strlen(big), 431, "header_too_large");
    off = sprintf(big, "GET /");
    memset(big + off, 'a', 10000);
    strcpy(big + off + 10000, " HTTP/1.1\r\nHost: t\r\n\r\n");
    expect_error_close(big, strlen(big), 414, "uri_too_long");
    off = sprintf(big, "GET /hello HTTP/1.1\r\nHost: t\r\n");
    for (int i = 0; i < 120; i++)
        off += sprintf(big + off, "X-%d: 1\r\n", i);
    strcpy(big + off, "\r\n");
    expect_error_close(big, strlen(big), 431, "header_too_large");
    free(big);
}

static void test_body_too_large(void **state)
{
    /* Declared too large: refused before the body is read. */
    EXPECT_ERR("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 2000000\r\n\r\n", 413,
               "payload_too_large");
    /* Chunked and too large: refused once the limit is crossed, while the client is still
     * sending; the lingering close lets it read the 413 instead of a reset. */
    struct th_conn *c = th_connect(T.port);
    assert_int_equal(th_sends(c, "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"), 0);
    char *chunk = malloc(65536 + 16);
    int hl = sprintf(chunk, "10000\r\n");
    memset(chunk + hl, 'x', 65536);
    memcpy(chunk + hl + 65536, "\r\n", 2);
    for (int i = 0; i < 20; i++)
        if (th_send(c, chunk, (size_t)hl + 65538) < 0)
            break;
    free(chunk);
    struct th_resp r;
    assert_int_equal(th_read_resp(c, &r, false), 0);
    assert_int_equal(r.status, 413);
    th_resp_free(&r);
    assert_true(th_wait_closed(c));
    th_close(c);
}

static void test_smuggling(void **state)
{
    /* CL + TE: rejected, and the "smuggled" request after it is never executed. */
    EXPECT_ERR("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
               "0\r\n\r\nGET /poll HTTP/1.1\r\nHost: t\r\n\r\n",
               400, "bad_request");
    EXPECT_ERR("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nabcdef", 400, NULL);
    EXPECT_ERR("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nabcde", 400, NULL);
    EXPECT_ERR("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: -1\r\n\r\n", 400, NULL);
    EXPECT_ERR("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 18446744073709551621\r\n\r\n", 400, NULL);
    EXPECT_ERR("POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked, identity\r\n\r\n", 501, NULL);
    EXPECT_ERR("POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding : chunked\r\n\r\n", 400, NULL);
    EXPECT_ERR("POST /echo HTTP/1.1\r\nHost: t\r\nX: y\r\n Transfer-Encoding: chunked\r\n\r\n", 400, NULL);
    EXPECT_ERR("POST /echo HTTP/1.1\r\nHost: t\nTransfer-Encoding: chunked\r\n\r\n", 400, NULL);
    /* Bad chunk sizes: the handler saw the head, the server rejects the body. */
    EXPECT_ERR("POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400, NULL);
    EXPECT_ERR("POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n-1\r\n", 400, NULL);
    EXPECT_ERR("POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n0x5\r\n", 400, NULL);
    EXPECT_ERR("POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
               "ffffffffffffffffffffff\r\n",
               413, NULL);
    EXPECT_ERR("POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcd\r\n", 400, NULL);
}

static void test_bad_requests(void **state)
{
    EXPECT_ERR("G(T /hello HTTP/1.1\r\nHost: t\r\n\r\n", 400, NULL);
    EXPECT_ERR("BREW /hello HTTP/1.1\r\nHost: t\r\n\r\n", 501, "not_implemented");
    EXPECT_ERR("CONNECT t:443 HTTP/1.1\r\nHost: t\r\n\r\n", 501, NULL);
    EXPECT_ERR("GET /hello HTTP/2.0\r\nHost: t\r\n\r\n", 505, "version_not_supported");
    EXPECT_ERR("GET /hello HTTP/1.1\r\n\r\n", 400, NULL);
    EXPECT_ERR("GET http://t/hello HTTP/1.1\r\nHost: t\r\n\r\n", 400, NULL);
    EXPECT_ERR("GET /a%00b HTTP/1.1\r\nHost: t\r\n\r\n", 400, NULL);
    EXPECT_ERR("GET /hello?x=%zz HTTP/1.1\r\nHost: t\r\n\r\n", 400, NULL);
    EXPECT_ERR("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", 400, NULL);
}

static void test_timeouts(void **state)
{
    th_stop(&T);
    struct http_limits lim = {.header_timeout_ms = 300, .body_idle_timeout_ms = 300,
                              .keepalive_idle_ms = 300, .write_timeout_ms = 300};
    th_start(&T, &lim, setup_routes);
    /* Slowloris: a head trickled slower than the deadline gets 408 and a close. */
    struct th_conn *c = th_connect(T.port);
    const char *head = "GET /hello HTTP/1.1\r\nHost: t\r\n";
    bool cut = false;
    for (const char *p = head; *p && !cut; p++) {
        cut = th_send(c, p, 1) < 0;
        usleep(50 * 1000);
    }
    assert_true(th_wait_closed(c));
    th_close(c);
    /* Idle connection that never sends anything: closed too. */
    c = th_connect(T.port);
    assert_true(th_wait_closed(c));
    th_close(c);
    /* Body that stops arriving: 408 and close. */
    c = th_connect(T.port);
    th_sends(c, "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\nabc");
    struct th_resp r;
    assert_int_equal(th_read_resp(c, &r, false), 0);
    assert_int_equal(r.status, 408);
    th_resp_free(&r);
    assert_true(th_wait_closed(c));
    th_close(c);
    /* A long-poll (no body, no reply yet) is NOT a body timeout: it lives until the
     * client leaves, then on_close fires. */
    atomic_store(&poll_closed, 0);
    c = th_connect(T.port);
    th_sends(c, GET("/poll"));
    usleep(700 * 1000);
    assert_int_equal(atomic_load(&poll_closed), 0);
    th_close(c);
    for (int i = 0; i < 6000 && atomic_load(&poll_closed) == 0; i++)
        usleep(10 * 1000);
    assert_int_equal(atomic_load(&poll_closed), 1);
    /* An idle keep-alive connection is closed after keepalive_idle_ms. */
    c = th_connect(T.port);
    th_sends(c, GET("/hello"));
    assert_int_equal(th_read_resp(c, &r, false), 0);
    th_resp_free(&r);
    assert_true(th_wait_closed(c));
    th_close(c);
    /* A client that stops reading a download is dropped after write_timeout_ms, and the
     * producer learns it through on_close. */
    atomic_store(&downloads_aborted, 0);
    c = th_connect(T.port);
    th_sends(c, GET("/big?n=1000000000"));
    for (int i = 0; i < 6000 && atomic_load(&downloads_aborted) == 0; i++)
        usleep(10 * 1000);
    assert_int_equal(atomic_load(&downloads_aborted), 1);
    th_close(c);
}

static int stats_connections(void)
{
    struct th_resp r;
    if (th_roundtrip(T.port, GET("/stats"), &r) != 200)
        return -1;
    json_t *j = json_loads(r.body, 0, NULL);
    int n = (int)json_integer_value(json_object_get(j, "connections"));
    json_decref(j);
    th_resp_free(&r);
    return n;
}

/* One address may hold max_conns_per_client connections; more are answered 429 with
 * Retry-After and closed, while the ones it holds are still served. */
static void test_per_client_cap(void **state)
{
    th_stop(&T);
    struct http_limits lim = {.max_conns_per_client = 5, .header_timeout_ms = 60000};
    th_start(&T, &lim, setup_routes);
    enum { N = 8 };
    int fds[N];
    for (int i = 0; i < N; i++) {
        fds[i] = th_connect_fd(T.port);
        assert_true(fds[i] >= 0);
        usleep(20 * 1000); /* accepted in order */
    }
    struct th_conn *c = calloc(1, sizeof *c);
    int ok = 0, limited = 0;
    for (int i = 0; i < N; i++) {
        c->fd = fds[i];
        c->len = 0;
        struct th_resp r;
        if (th_sends(c, GET("/hello")) == 0 && th_read_resp(c, &r, false) == 0) {
            ok += r.status == 200;
            if (r.status == 429) {
                limited++;
                assert_non_null(strstr(r.headers, "Retry-After: 1"));
                assert_non_null(strstr(r.body, "too many open connections"));
            }
            th_resp_free(&r);
        }
    }
    free(c);
    assert_int_equal(ok, 5);
    assert_int_equal(limited, N - 5);
    for (int i = 0; i < N; i++)
        close(fds[i]);
}

static void test_overload(void **state)
{
    th_stop(&T);
    struct http_limits lim = {.max_connections = 200, .max_conns_per_client = UINT_MAX,
                              .header_timeout_ms = 60000};
    th_start(&T, &lim, setup_routes);
    enum { N = 1000 };
    int *fds = calloc(N, sizeof *fds);
    for (int i = 0; i < N; i++) {
        fds[i] = th_connect_fd(T.port);
        assert_true(fds[i] >= 0);
    }
    int ok = 0, busy = 0, dropped = 0;
    struct th_conn *c = calloc(1, sizeof *c);
    for (int i = 0; i < N; i++) {
        c->fd = fds[i];
        c->len = 0;
        struct th_resp r;
        if (th_sends(c, GET("/hello")) == 0 && th_read_resp(c, &r, false) == 0) {
            ok += r.status == 200;
            busy += r.status == 503;
            th_resp_free(&r);
        } else {
            dropped++;
        }
    }
    free(c);
    /* Exactly the first max_connections are served; every other one was refused. */
    assert_int_equal(ok, 200);
    assert_int_equal(ok + busy + dropped, N);
    assert_true(busy > 0);
    for (int i = 0; i < N; i++)
        close(fds[i]);
    free(fds);
    /* The server survives and frees the slots once the clients leave. */
    int n = -1;
    for (int i = 0; i < 6000 && (n = stats_connections()) != 1; i++)
        usleep(10 * 1000);
    assert_int_equal(n, 1);
}

struct sender {
    int fd;
    uint64_t total;
    uint64_t sum;
    bool chunked;
};

static void *send_body(void *arg)
{
    struct sender *s = arg;
    size_t bs = 1 << 20;
    char *buf = malloc(bs + 32);
    struct th_conn c = {.fd = s->fd};
    for (uint64_t sent = 0; sent < s->total; sent += bs) {
        for (size_t i = 0; i < bs; i++) {
            buf[i] = (char)((sent + i) * 7 % 253);
            s->sum += (unsigned char)buf[i];
        }
        if (s->chunked) {
            char hdr[32];
            int n = sprintf(hdr, "%zx\r\n", bs);
            if (th_send(&c, hdr, (size_t)n) < 0)
                break;
        }
        if (th_send(&c, buf, bs) < 0 || (s->chunked && th_send(&c, "\r\n", 2) < 0))
            break;
    }
    if (s->chunked)
        th_send(&c, "0\r\n\r\n", 5);
    free(buf);
    return NULL;
}

/* Uploads `total` bytes to the pausing consumer and checks count, checksum and that
 * the server never buffered more than its read high-water mark. */
static void upload_through_pausing_consumer(uint64_t total, bool chunked)
{
    struct th_conn *c = th_connect(T.port);
    /* The answer comes only after the whole upload: allow for a slow, loaded machine. */
    th_set_timeout(c->fd, 600);
    char head[160];
    if (chunked)
        snprintf(head, sizeof head, "POST /count HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n");
    else
        snprintf(head, sizeof head, "POST /count HTTP/1.1\r\nHost: t\r\nContent-Length: %llu\r\n\r\n",
                 (unsigned long long)total);
    assert_int_equal(th_sends(c, head), 0);
    struct sender s = {.fd = c->fd, .total = total, .chunked = chunked};
    pthread_t th;
    pthread_create(&th, NULL, send_body, &s);
    struct th_resp r;
    int rc = th_read_resp(c, &r, false);
    pthread_join(th, NULL);
    assert_int_equal(rc, 0);
    assert_int_equal(r.status, 200);
    json_t *j = json_loads(r.body, 0, NULL);
    assert_int_equal(json_integer_value(json_object_get(j, "bytes")), total);
    assert_int_equal(json_integer_value(json_object_get(j, "sum")), s.sum);
    json_int_t maxbuf = json_integer_value(json_object_get(j, "max_buffered"));
    print_message("upload %llu MiB (%s): server buffered at most %lld bytes\n",
                  (unsigned long long)(total >> 20), chunked ? "chunked" : "length", (long long)maxbuf);
    assert_true(maxbuf <= HTTP_READ_HIGH);
    json_decref(j);
    th_resp_free(&r);
    th_close(c);
}

static void test_stream_upload_200mib(void **state)
{
    upload_through_pausing_consumer(200ULL << 20, false);
    upload_through_pausing_consumer(32ULL << 20, true);
}

static void test_upload_refused_or_abandoned(void **state)
{
    /* Early refusal of a large body: 403 with Connection: close, then the close. */
    struct th_conn *c = th_connect(T.port);
    uint64_t total = 64ULL << 20;
    char head[128];
    snprintf(head, sizeof head, "POST /refuse HTTP/1.1\r\nHost: t\r\nContent-Length: %llu\r\n\r\n",
             (unsigned long long)total);
    assert_int_equal(th_sends(c, head), 0);
    struct sender s = {.fd = c->fd, .total = total};
    pthread_t th;
    pthread_create(&th, NULL, send_body, &s);
    struct th_resp r;
    char v[64];
    assert_int_equal(th_read_resp(c, &r, false), 0);
    assert_int_equal(r.status, 403);
    assert_string_equal(th_hdr(&r, "Connection", v, sizeof v), "close");
    th_resp_free(&r);
    assert_true(th_wait_closed(c));
    shutdown(c->fd, SHUT_RDWR); /* unblocks the sender if it is still writing */
    pthread_join(th, NULL);
    th_close(c);

    /* A client that gives up mid-upload: the consumer's on_close runs (and frees). */
    atomic_store(&uploads_aborted, 0);
    c = th_connect(T.port);
    snprintf(head, sizeof head, "POST /count HTTP/1.1\r\nHost: t\r\nContent-Length: %llu\r\n\r\n",
             (unsigned long long)total);
    assert_int_equal(th_sends(c, head), 0);
    char *chunk = calloc(1, 1 << 20);
    for (int i = 0; i < 5; i++)
        assert_int_equal(th_send(c, chunk, 1 << 20), 0);
    free(chunk);
    th_close(c);
    for (int i = 0; i < 6000 && atomic_load(&uploads_aborted) == 0; i++)
        usleep(10 * 1000);
    assert_int_equal(atomic_load(&uploads_aborted), 1);
}

static void test_listen_addresses(void **state)
{
    char err[256];
    assert_int_equal(http_server_listen(T.srv, "nonsense", err, sizeof err), -1);
    assert_non_null(strstr(err, "invalid listen address"));
    assert_int_equal(http_server_listen(T.srv, "127.0.0.1:x", err, sizeof err), -1);
    assert_int_equal(http_server_listen(T.srv, "[::1:0", err, sizeof err), -1);
    char taken[64];
    snprintf(taken, sizeof taken, "127.0.0.1:%d", T.port);
    assert_int_equal(http_server_listen(T.srv, taken, err, sizeof err), -1);
    assert_non_null(strstr(err, "cannot listen"));
    /* IPv6 loopback, when the host has it. */
    int fd = socket(AF_INET6, SOCK_STREAM, 0);
    struct sockaddr_in6 sa = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    bool v6 = fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
    if (fd >= 0)
        close(fd);
    if (!v6) {
        print_message("skipping the IPv6 part: no ::1 on this host\n");
        return;
    }
    assert_int_equal(http_server_listen(T.srv, "[::1]:0", err, sizeof err), 0);
    int port = http_server_port(T.srv);
    assert_true(port > 0);
    fd = socket(AF_INET6, SOCK_STREAM, 0);
    sa.sin6_port = htons((uint16_t)port);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    th_set_timeout(fd, TH_RECV_TIMEOUT_S);
    struct th_conn *c = calloc(1, sizeof *c);
    c->fd = fd;
    struct th_resp r;
    assert_int_equal(th_sends(c, GET("/hello")), 0);
    assert_int_equal(th_read_resp(c, &r, false), 0);
    assert_string_equal(r.body, "hello");
    th_resp_free(&r);
    th_close(c);
}

static void check_pattern(const struct th_resp *r, size_t n)
{
    assert_int_equal(r->body_len, n);
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)r->body[i] != i % 251)
            fail_msg("byte %zu wrong", i);
}

static void test_stream_download(void **state)
{
    struct th_conn *c = th_connect(T.port);
    struct th_resp r;
    char v[64];
    assert_int_equal(th_sends(c, GET("/big?n=8388608") GET("/big?n=3000000&len=1")), 0);
    assert_int_equal(th_read_resp(c, &r, false), 0);
    assert_string_equal(th_hdr(&r, "Transfer-Encoding", v, sizeof v), "chunked");
    check_pattern(&r, 8388608);
    th_resp_free(&r);
    assert_int_equal(th_read_resp(c, &r, false), 0);
    assert_string_equal(th_hdr(&r, "Content-Length", v, sizeof v), "3000000");
    check_pattern(&r, 3000000);
    th_resp_free(&r);
    th_close(c);
}

static void test_disconnect_fires_on_close(void **state)
{
    atomic_store(&sse_closed, 0);
    struct th_conn *c = th_connect(T.port);
    assert_int_equal(th_sends(c, GET("/sse")), 0);
    assert_true(th_find(c, ": keepalive\n\n") >= 0);
    assert_non_null(memmem(c->buf, c->len, "Content-Type: text/event-stream", 31));
    assert_non_null(memmem(c->buf, c->len, "id: 2\nevent: stdout\ndata: two\ndata: lines\n\n", 43));
    assert_int_equal(atomic_load(&sse_closed), 0);
    th_close(c);
    for (int i = 0; i < 6000 && atomic_load(&sse_closed) == 0; i++)
        usleep(10 * 1000);
    assert_int_equal(atomic_load(&sse_closed), 1);
    /* A client that vanishes mid-download: on_close frees the producer (ASan checks). */
    c = th_connect(T.port);
    assert_int_equal(th_sends(c, GET("/big?n=100000000")), 0);
    assert_true(th_fill(c) > 0);
    th_close(c);
    int n = -1;
    for (int i = 0; i < 6000 && (n = stats_connections()) != 1; i++)
        usleep(10 * 1000);
    assert_int_equal(n, 1);
}

int main(void)
{
    log_init("test_http", LOG_ERROR); /* the overload test would log 800 warnings */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_keepalive, start, th_teardown),
        cmocka_unit_test_setup_teardown(test_listen_addresses, start, th_teardown),
        cmocka_unit_test_setup_teardown(test_pipelining, start, th_teardown),
        cmocka_unit_test_setup_teardown(test_chunked_both_ways, start, th_teardown),
        cmocka_unit_test_setup_teardown(test_head_and_http10, start, th_teardown),
        cmocka_unit_test_setup_teardown(test_expect_continue, start, th_teardown),
        cmocka_unit_test_setup_teardown(test_limits, start, th_teardown),
        cmocka_unit_test_setup_teardown(test_body_too_large, start, th_teardown),
        cmocka_unit_test_setup_teardown(test_smuggling, start, th_teardown),
        cmocka_unit_test_setup_teardown(test_bad_requests, start, th_teardown),
        cmocka_unit_test_setup_teardown(test_timeouts, start, th_teardown),
        cmocka_unit_test_setup_teardown(test_overload, start, th_teardown),
        cmocka_unit_test_setup_teardown(test_per_client_cap, start, th_teardown),
        cmocka_unit_test_setup_teardown(test_stream_upload_200mib, start, th_teardown),
        cmocka_unit_test_setup_teardown(test_upload_refused_or_abandoned, start, th_teardown),
        cmocka_unit_test_setup_teardown(test_stream_download, start, th_teardown),
        cmocka_unit_test_setup_teardown(test_disconnect_fires_on_close, start, th_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
