/* test_agent_tcp: the agent's `tcp` op as a host process, driven through agentc
 * (agentc_open_tcp): bytes both ways, half-close in each direction, credits (a host
 * that grants nothing stalls the server instead of growing the agent), refused
 * connections, bad targets checked on both ends, and the per-connection limit.
 * Servers are child processes on 127.0.0.1 ephemeral ports. */
#include "test_agent_harness.h"

#include <arpa/inet.h>
#include <netinet/in.h>

/* A listening socket on 127.0.0.1:<ephemeral>; returns the fd, *port its port. */
static int listen_local(unsigned *port, int backlog)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(fd, backlog), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    *port = ntohs(a.sin_port);
    return fd;
}

static size_t read_all(int fd, uint64_t *sum)
{
    uint8_t buf[65536];
    size_t total = 0;
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0) {
        for (ssize_t i = 0; i < n; i++)
            *sum = *sum * 31 + buf[i];
        total += (size_t)n;
    }
    return total;
}

static int write_all(int fd, const void *p, size_t n)
{
    for (size_t done = 0; done < n;) {
        ssize_t k = write(fd, (const char *)p + done, n - done);
        if (k <= 0)
            return -1;
        done += (size_t)k;
    }
    return 0;
}

/* Server child modes. */
enum srv_mode {
    SRV_COUNT,    /* read to EOF, answer "<bytes> <sum>\n", close */
    SRV_BANNER,   /* send "banner", half-close, read to EOF, exit 0 iff 1 MB arrived */
    SRV_FLOOD,    /* write 20 MiB of a pattern, close */
};

#define FLOOD_BYTES (20u * 1024 * 1024)

static pid_t serve_once(int lfd, enum srv_mode mode)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid > 0)
        return pid;
    int c = accept(lfd, NULL, NULL);
    if (c < 0)
        _exit(2);
    uint64_t sum = 0;
    if (mode == SRV_COUNT) {
        size_t n = read_all(c, &sum);
        char line[64];
        int k = snprintf(line, sizeof line, "%zu %llu\n", n, (unsigned long long)sum);
        _exit(write_all(c, line, (size_t)k) == 0 ? 0 : 3);
    }
    if (mode == SRV_BANNER) {
        if (write_all(c, "banner", 6) < 0 || shutdown(c, SHUT_WR) < 0)
            _exit(3);
        _exit(read_all(c, &sum) == 1000000 ? 0 : 4);
    }
    static uint8_t block[65536];
    for (size_t i = 0; i < sizeof block; i++)
        block[i] = (uint8_t)(i * 7 + 3);
    for (size_t sent = 0; sent < FLOOD_BYTES; sent += sizeof block)
        if (write_all(c, block, sizeof block) < 0)
            _exit(3);
    _exit(0);
}

static int child_status(pid_t pid)
{
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
}

static void open_tcp(struct ah *h, struct col *k, const char *host, unsigned port,
                     unsigned flags)
{
    char err[128];
    memset(k, 0, sizeof *k);
    k->h = h;
    k->keep = true;
    k->events = json_array();
    k->ch = agentc_open_tcp(h->c, host, port, &col_ops, k, flags, err, sizeof err);
    assert_non_null(k->ch);
}

/* 1 MB up, EOF (our half-close reaches the server as EOF), answer down, server close
 * reaches us as EOF OUT, then the channel closes without an error. */
static void test_tcp_roundtrip(void **state)
{
    struct ah h;
    ah_start(&h);
    unsigned port;
    int lfd = listen_local(&port, 4);
    pid_t srv = serve_once(lfd, SRV_COUNT);
    struct col k;
    open_tcp(&h, &k, NULL, port, 0);
    static char chunk[100000];
    uint64_t sum = 0;
    for (size_t i = 0; i < sizeof chunk; i++)
        chunk[i] = (char)('a' + i % 26);
    for (int r = 0; r < 10; r++) {
        assert_int_equal(agentc_write(k.ch, chunk, sizeof chunk), 0);
        for (size_t i = 0; i < sizeof chunk; i++)
            sum = sum * 31 + (uint8_t)chunk[i];
    }
    assert_int_equal(agentc_eof(k.ch), 0);
    ah_wait(&h, &k.closed);
    assert_string_equal(k.code, "");
    assert_non_null(col_find(&k, "connected"));
    assert_true(k.eof[FRAME_STREAM_OUT]);
    char want[64];
    snprintf(want, sizeof want, "1000000 %llu\n", (unsigned long long)sum);
    assert_string_equal(k.buf[FRAME_STREAM_OUT], want);
    assert_int_equal(child_status(srv), 0);
    col_free(&k);
    close(lfd);
    ah_stop(&h);
}

/* The server half-closes first: we get its bytes and EOF OUT, and can still send. */
static void test_tcp_server_half_close(void **state)
{
    struct ah h;
    ah_start(&h);
    unsigned port;
    int lfd = listen_local(&port, 4);
    pid_t srv = serve_once(lfd, SRV_BANNER);
    struct col k;
    open_tcp(&h, &k, "127.0.0.1", port, 0);
    ah_wait(&h, &k.eof[FRAME_STREAM_OUT]);
    assert_false(k.closed);
    assert_string_equal(k.buf[FRAME_STREAM_OUT], "banner");
    static char chunk[100000];
    memset(chunk, 'z', sizeof chunk);
    for (int r = 0; r < 10; r++)
        assert_int_equal(agentc_write(k.ch, chunk, sizeof chunk), 0);
    assert_int_equal(agentc_eof(k.ch), 0);
    ah_wait(&h, &k.closed);
    assert_string_equal(k.code, "");
    assert_int_equal(child_status(srv), 0);
    col_free(&k);
    close(lfd);
    ah_stop(&h);
}

static uint64_t health_peak(struct ah *h)
{
    json_t *r = ah_ok(h, json_pack("{s:s}", "op", "health"));
    uint64_t peak = (uint64_t)json_integer_value(json_object_get(r, "buffered_peak"));
    json_decref(r);
    return peak;
}

/* Credits: with no grants the agent sends one window and stops reading the socket
 * (the server blocks on TCP's window); granting drains all 20 MiB intact. */
static void test_tcp_backpressure(void **state)
{
    struct ah h;
    ah_start(&h);
    unsigned port;
    int lfd = listen_local(&port, 4);
    pid_t srv = serve_once(lfd, SRV_FLOOD);
    struct col k;
    open_tcp(&h, &k, NULL, port, AGENTC_MANUAL_CREDIT);
    k.keep = false;
    while (k.len[FRAME_STREAM_OUT] < FRAME_WINDOW_INITIAL)
        ah_step(&h);
    for (int i = 0; i < 5; i++)
        ah_step(&h); /* nothing more may arrive, however long we wait */
    assert_int_equal(k.len[FRAME_STREAM_OUT], FRAME_WINDOW_INITIAL);
    assert_true(health_peak(&h) < 1024 * 1024);
    size_t granted = FRAME_WINDOW_INITIAL;
    bool eof_sent = false;
    while (!k.closed) {
        if (k.len[FRAME_STREAM_OUT] == granted && !k.eof[FRAME_STREAM_OUT]) {
            assert_int_equal(agentc_grant(k.ch, FRAME_STREAM_OUT, 1024 * 1024), 0);
            granted += 1024 * 1024;
        }
        ah_step(&h);
        if (k.eof[FRAME_STREAM_OUT] && !k.closed && !eof_sent) {
            assert_int_equal(agentc_eof(k.ch), 0);
            eof_sent = true;
        }
    }
    assert_string_equal(k.code, "");
    assert_int_equal(k.len[FRAME_STREAM_OUT], FLOOD_BYTES);
    uint64_t want = 0;
    for (size_t sent = 0; sent < FLOOD_BYTES; sent += 65536)
        for (size_t i = 0; i < 65536; i++)
            want = want * 31 + (uint8_t)(i * 7 + 3);
    assert_true(k.sum == want);
    assert_int_equal(child_status(srv), 0);
    assert_true(health_peak(&h) < 2 * 1024 * 1024);
    col_free(&k);
    close(lfd);
    ah_stop(&h);
}

/* Nothing listening: connection_refused with the target in the message, then close. */
static void test_tcp_refused(void **state)
{
    struct ah h;
    ah_start(&h);
    unsigned port;
    close(listen_local(&port, 1)); /* a port that was free a moment ago */
    struct col k;
    open_tcp(&h, &k, NULL, port, 0);
    ah_wait(&h, &k.closed);
    assert_string_equal(k.code, FRAME_E_REFUSED);
    assert_null(col_find(&k, "connected"));
    col_free(&k);
    ah_stop(&h);
}

/* Bad targets: refused by agentc before sending, and by the agent when sent raw. */
static void test_tcp_bad_target(void **state)
{
    struct ah h;
    ah_start(&h);
    char err[128];
    assert_null(agentc_open_tcp(h.c, NULL, 0, &col_ops, NULL, 0, err, sizeof err));
    assert_non_null(strstr(err, "port"));
    assert_null(agentc_open_tcp(h.c, NULL, 65536, &col_ops, NULL, 0, err, sizeof err));
    assert_null(agentc_open_tcp(h.c, "localhost", 80, &col_ops, NULL, 0, err, sizeof err));
    assert_non_null(strstr(err, "host"));
    assert_null(agentc_open_tcp(h.c, "1.2.3.4.5", 80, &col_ops, NULL, 0, err, sizeof err));
    ah_expect_error(&h, json_pack("{s:s, s:i}", "op", "tcp", "port", 0), FRAME_E_INVALID_ARGUMENT);
    ah_expect_error(&h, json_pack("{s:s, s:i}", "op", "tcp", "port", 70000), FRAME_E_INVALID_ARGUMENT);
    ah_expect_error(&h, json_pack("{s:s}", "op", "tcp"), FRAME_E_INVALID_ARGUMENT);
    ah_expect_error(&h, json_pack("{s:s, s:s, s:i}", "op", "tcp", "host", "example.com", "port", 80),
                    FRAME_E_INVALID_ARGUMENT);
    ah_expect_error(&h, json_pack("{s:s, s:i, s:i}", "op", "tcp", "host", 7, "port", 80),
                    FRAME_E_INVALID_ARGUMENT);
    ah_expect_error(&h, json_pack("{s:s, s:s}", "op", "tcp", "port", "80"), FRAME_E_INVALID_ARGUMENT);
    ah_stop(&h);
}

/* FRAME_TCP_MAX open forwards, then too_many; closing one frees a slot. Connections
 * complete into the listen backlog without being accepted. */
static void test_tcp_limit(void **state)
{
    struct ah h;
    ah_start(&h);
    unsigned port;
    int lfd = listen_local(&port, FRAME_TCP_MAX * 2);
    static struct col k[FRAME_TCP_MAX + 1];
    for (int i = 0; i < FRAME_TCP_MAX; i++)
        open_tcp(&h, &k[i], NULL, port, 0);
    for (int i = 0; i < FRAME_TCP_MAX; i++)
        while (!col_find(&k[i], "connected")) {
            assert_false(k[i].closed);
            ah_step(&h);
        }
    open_tcp(&h, &k[FRAME_TCP_MAX], NULL, port, 0);
    ah_wait(&h, &k[FRAME_TCP_MAX].closed);
    assert_string_equal(k[FRAME_TCP_MAX].code, FRAME_E_TOO_MANY);
    col_free(&k[FRAME_TCP_MAX]);
    agentc_close(k[0].ch);
    col_free(&k[0]);
    open_tcp(&h, &k[0], NULL, port, 0);
    while (!col_find(&k[0], "connected")) {
        assert_false(k[0].closed);
        ah_step(&h);
    }
    for (int i = 0; i < FRAME_TCP_MAX; i++) {
        agentc_close(k[i].ch);
        col_free(&k[i]);
    }
    json_t *r = ah_ok(&h, json_pack("{s:s}", "op", "health"));
    assert_int_equal(json_integer_value(json_object_get(r, "channels")), 1); /* itself */
    json_decref(r);
    close(lfd);
    ah_stop(&h);
}

/* The agent announces the op. */
static void test_tcp_feature(void **state)
{
    struct ah h;
    ah_start(&h);
    json_t *f = json_object_get(agentc_hello(h.c), "features");
    bool found = false;
    size_t i;
    json_t *v;
    json_array_foreach(f, i, v)
        found |= strcmp(json_string_value(v), "tcp") == 0;
    assert_true(found);
    ah_stop(&h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tcp_roundtrip),
        cmocka_unit_test(test_tcp_server_half_close),
        cmocka_unit_test(test_tcp_backpressure),
        cmocka_unit_test(test_tcp_refused),
        cmocka_unit_test(test_tcp_bad_target),
        cmocka_unit_test(test_tcp_limit),
        cmocka_unit_test(test_tcp_feature),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
