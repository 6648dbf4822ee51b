/* test_gw_dns: the gateway's DNS server on real sockets, UDP and TCP (RFC 7766), with
 * the same policy and answers on both: truncation (TC) of UDP answers too big for 512
 * bytes, pipelined TCP queries, frames split over many segments, bad or oversized
 * frames, the per-sandbox connection limit, the bound on queries in flight per
 * connection, idle close, a connection closing while its queries wait upstream, and a
 * UDP flood faster than the gateway reads (the kernel's drops count as refusals).
 *
 * Runs in a private network namespace of its own (loopback only: the "sandbox" is
 * 127.0.0.15, the gateway 127.0.0.2, a silent "upstream" 127.0.0.99), so it needs
 * root; without it every test skips saying why. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

#include "clock.h"
#include "gateway/dns_server.h"
#include "test_dns_query.h"

#define GUEST 0x7f00000fu  /* 127.0.0.15 */
#define GW_IP 0x7f000002u  /* 127.0.0.2 */
#define SILENT "127.0.0.99" /* upstream resolver that never answers */

struct fixture {
    struct gw gw;
    struct gw_sandbox *sb;
    int silent_fd;         /* the silent upstream's socket (never read) */
};

static const char *skip_why;

static int lo_up(void)
{
    int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct ifreq ifr = {0};
    snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "lo");
    int rc = s >= 0 && ioctl(s, SIOCGIFFLAGS, &ifr) == 0 &&
             (ifr.ifr_flags |= IFF_UP, ioctl(s, SIOCSIFFLAGS, &ifr) == 0) ? 0 : -1;
    if (s >= 0)
        close(s);
    return rc;
}

static void cache_put(struct gw_sandbox *sb, size_t slot, const char *name, size_t n)
{
    struct gw_cache_entry *e = &sb->cache[slot];
    snprintf(e->name, sizeof e->name, "%s", name);
    for (size_t i = 0; i < n; i++)
        e->addrs[i] = 0xcb007100 + (uint32_t)i; /* 203.0.113.x */
    e->naddrs = n;
    e->expires_ms = clock_mono_ms() + 3600 * 1000;
}

static int setup(void **state)
{
    static struct fixture f;
    char err[256];
    if (unshare(CLONE_NEWNET) != 0 || lo_up() != 0 || netns_init() != 0) {
        skip_why = "needs root for a private network namespace (unshare CLONE_NEWNET)";
        *state = NULL;
        return 0;
    }
    memset(&f, 0, sizeof f);
    f.gw.base = event_base_new();
    f.gw.dns = evdns_base_new(f.gw.base, 0);
    assert_non_null(f.gw.dns);
    f.silent_fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(53)};
    inet_pton(AF_INET, SILENT, &sa.sin_addr);
    assert_int_equal(bind(f.silent_fd, (struct sockaddr *)&sa, sizeof sa), 0);
    assert_int_equal(evdns_base_nameserver_ip_add(f.gw.dns, SILENT), 0);
    evdns_base_set_option(f.gw.dns, "timeout:", "60");
    struct gw_sandbox *sb = calloc(1, sizeof *sb);
    sb->gw = &f.gw;
    snprintf(sb->id, sizeof sb->id, "sbdns");
    sb->nsfd = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    sb->dns_fd = -1;
    sb->wiring.guest_ip = GUEST;
    sb->wiring.gw_ip = GW_IP;
    sb->cache = calloc(GW_CACHE_MAX, sizeof *sb->cache);
    sb->log = calloc(GW_LOG_RING, sizeof *sb->log);
    gw_rate_init(&sb->dns_rate, 1e6, 1e6);
    json_t *p = json_loads("{\"mode\":\"allowlist\",\"allow\":[\"allowed.test\",\"*.allowed.test\","
                           "\"many.test\"]}", 0, NULL);
    assert_int_equal(policy_parse(p, &sb->policy, err, sizeof err), 0);
    json_decref(p);
    cache_put(sb, 0, "many.test", DNS_ANSWERS_MAX);
    cache_put(sb, 1, "allowed.test", 1);
    assert_int_equal(dns_server_start(sb, err, sizeof err), 0);
    f.sb = sb;
    f.gw.sandboxes = sb;
    *state = &f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    if (!f)
        return 0;
    struct gw_sandbox *sb = f->sb;
    dns_server_stop(sb);
    gw_lookups_orphan(sb);
    close(sb->nsfd);
    policy_free(&sb->policy);
    free(sb->cache);
    free(sb->log);
    free(sb);
    evdns_base_free(f->gw.dns, 1);
    event_base_loop(f->gw.base, EVLOOP_NONBLOCK); /* the failed lookups' deferred callbacks */
    event_base_free(f->gw.base);
    close(f->silent_fd);
    return 0;
}

#define NEED_ROOT(state)                                                                   \
    do {                                                                                   \
        if (!*(state)) {                                                                   \
            printf("skipped: %s\n", skip_why);                                            \
            skip();                                                                        \
        }                                                                                  \
    } while (0)

static void spin(struct fixture *f)
{
    event_base_loop(f->gw.base, EVLOOP_NONBLOCK);
}

/* A query framed for TCP at buf; returns the frame's length. */
static size_t frame(uint8_t *buf, uint16_t id, const char *name, uint16_t qtype)
{
    size_t n = tdns_query(buf + 2, id, name, qtype);
    buf[0] = (uint8_t)(n >> 8);
    buf[1] = (uint8_t)n;
    return n + 2;
}

static int client(int type, uint32_t from)
{
    int fd = socket(AF_INET, type | SOCK_CLOEXEC, 0);
    struct sockaddr_in me = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(from)};
    struct sockaddr_in gw = {.sin_family = AF_INET, .sin_port = htons(53),
                             .sin_addr.s_addr = htonl(GW_IP)};
    assert_true(fd >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&me, sizeof me), 0);
    assert_int_equal(connect(fd, (struct sockaddr *)&gw, sizeof gw), 0);
    return fd;
}

/* Reads up to cap bytes (at least `want`), running the gateway's loop meanwhile.
 * Returns the count, or -1 once the gateway closed the connection with less. */
static ssize_t recv_spin(struct fixture *f, int fd, uint8_t *buf, size_t want, size_t cap)
{
    size_t got = 0;
    for (int i = 0; i < 3000 && got < want; i++) {
        spin(f);
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 5) != 1)
            continue;
        ssize_t n = recv(fd, buf + got, cap - got, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN))
            return -1;
        if (n > 0)
            got += (size_t)n;
    }
    return (ssize_t)got;
}

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }

/* Reads one TCP answer into msg[cap]; returns its length. */
static size_t tcp_answer(struct fixture *f, int fd, uint8_t *msg, size_t cap)
{
    uint8_t pre[2];
    assert_int_equal(recv_spin(f, fd, pre, 2, 2), 2);
    size_t len = rd16(pre);
    assert_true(len >= 12 && len <= cap);
    assert_int_equal(recv_spin(f, fd, msg, len, len), (ssize_t)len);
    return len;
}

static void test_udp_truncates_large_answers(void **state)
{
    NEED_ROOT(state);
    struct fixture *f = *state;
    int fd = client(SOCK_DGRAM, GUEST);
    uint8_t q[300], a[DNS_MSG_MAX + 1];
    assert_int_equal(send(fd, q, tdns_query(q, 7, "many.test", DNS_TYPE_A), 0) > 0, 1);
    ssize_t n = recv_spin(f, fd, a, 12, sizeof a);
    assert_true(n >= 12 && n <= DNS_MSG_MAX);
    /* many.test's 32 records fit 512 bytes only just; a long name would not. The
     * 32-record answer is 12 + 11 + 4 + 512 bytes: truncated. */
    assert_true(a[2] & 0x02);
    assert_int_equal(rd16(a + 6), 0);
    assert_int_equal(send(fd, q, tdns_query(q, 8, "allowed.test", DNS_TYPE_A), 0) > 0, 1);
    n = recv_spin(f, fd, a, 12, sizeof a);
    assert_false(a[2] & 0x02);
    assert_int_equal(rd16(a + 6), 1);
    close(fd);
}

static void test_tcp_pipelined_same_policy(void **state)
{
    NEED_ROOT(state);
    struct fixture *f = *state;
    int fd = client(SOCK_STREAM, GUEST);
    uint8_t out[1024], a[DNS_ANSWER_BYTES_MAX];
    size_t o = frame(out, 1, "many.test", DNS_TYPE_A);
    o += frame(out + o, 2, "blocked.test", DNS_TYPE_A);
    o += frame(out + o, 3, "allowed.test", DNS_TYPE_TXT);
    o += frame(out + o, 4, "allowed.test", DNS_TYPE_AAAA);
    assert_int_equal(send(fd, out, o, 0), (ssize_t)o);
    bool seen[5] = {false};
    for (int i = 0; i < 4; i++) {
        size_t n = tcp_answer(f, fd, a, sizeof a);
        uint16_t id = rd16(a);
        assert_true(id >= 1 && id <= 4 && !seen[id]);
        seen[id] = true;
        assert_false(a[2] & 0x02); /* never truncated over TCP */
        if (id == 1) {
            assert_int_equal(a[3] & 0xf, DNS_RCODE_OK);
            assert_int_equal(rd16(a + 6), DNS_ANSWERS_MAX);
            assert_true(n > DNS_MSG_MAX);
        } else {
            assert_int_equal(a[3] & 0xf, id == 2 ? DNS_RCODE_NXDOMAIN : id == 3 ? DNS_RCODE_REFUSED
                                                                              : DNS_RCODE_OK);
            assert_int_equal(rd16(a + 6), 0);
        }
    }
    close(fd);
}

static void test_tcp_frame_split_bytewise(void **state)
{
    NEED_ROOT(state);
    struct fixture *f = *state;
    int fd = client(SOCK_STREAM, GUEST);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, 1 /* TCP_NODELAY */, &one, sizeof one);
    uint8_t out[300], a[DNS_ANSWER_BYTES_MAX];
    size_t o = frame(out, 9, "allowed.test", DNS_TYPE_A);
    for (size_t i = 0; i < o; i++) {
        assert_int_equal(send(fd, out + i, 1, 0), 1);
        spin(f);
    }
    tcp_answer(f, fd, a, sizeof a);
    assert_int_equal(rd16(a), 9);
    assert_int_equal(rd16(a + 6), 1);
    close(fd);
}

static bool logged(struct fixture *f, const char *reason)
{
    json_t *log = gw_declog_json(f->sb, 0);
    size_t i;
    json_t *e;
    bool found = false;
    json_array_foreach(log, i, e)
        found |= strcmp(json_string_value(json_object_get(e, "reason")), reason) == 0;
    json_decref(log);
    return found;
}

static void test_tcp_bad_frames_close(void **state)
{
    NEED_ROOT(state);
    struct fixture *f = *state;
    static const uint8_t bad[][2] = {{0x02, 0x01}, {0x00, 0x05}, {0xff, 0xff}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int fd = client(SOCK_STREAM, GUEST);
        uint8_t a[16];
        assert_int_equal(send(fd, bad[i], 2, 0), 2);
        assert_int_equal(recv_spin(f, fd, a, 1, sizeof a), -1);
        close(fd);
    }
    assert_true(logged(f, "tcp_bad_frame"));
    /* The server still answers afterwards. */
    int fd = client(SOCK_STREAM, GUEST);
    uint8_t out[300], a[DNS_ANSWER_BYTES_MAX];
    assert_true(send(fd, out, frame(out, 5, "allowed.test", DNS_TYPE_A), 0) > 0);
    tcp_answer(f, fd, a, sizeof a);
    close(fd);
}

static void test_tcp_other_source_and_connection_limit(void **state)
{
    NEED_ROOT(state);
    struct fixture *f = *state;
    uint8_t a[16];
    int other = client(SOCK_STREAM, GUEST + 1);
    assert_int_equal(recv_spin(f, other, a, 1, sizeof a), -1);
    close(other);
    int fds[DNS_TCP_CONNS_MAX];
    for (int i = 0; i < DNS_TCP_CONNS_MAX; i++)
        fds[i] = client(SOCK_STREAM, GUEST);
    for (int i = 0; i < 200 && f->sb->ndns_tcps < DNS_TCP_CONNS_MAX; i++) {
        spin(f);
        usleep(1000);
    }
    assert_int_equal(f->sb->ndns_tcps, DNS_TCP_CONNS_MAX);
    int extra = client(SOCK_STREAM, GUEST);
    assert_int_equal(recv_spin(f, extra, a, 1, sizeof a), -1);
    assert_true(logged(f, "tcp_too_many_connections"));
    close(extra);
    for (int i = 0; i < DNS_TCP_CONNS_MAX; i++)
        close(fds[i]);
    for (int i = 0; i < 2000 && f->sb->ndns_tcps; i++) {
        spin(f);
        usleep(1000);
    }
    assert_int_equal(f->sb->ndns_tcps, 0);
}

static void test_udp_flood_kernel_drops_are_counted(void **state)
{
    NEED_ROOT(state);
    struct fixture *f = *state;
    int fd = client(SOCK_DGRAM, GUEST);
    uint8_t q[300], a[DNS_MSG_MAX + 1];
    size_t n = tdns_query(q, 11, "allowed.test", DNS_TYPE_A);
    /* Far more than the socket's receive queue holds while the loop does not run. */
    for (int i = 0; i < 5000; i++)
        assert_int_equal(send(fd, q, n, 0), (ssize_t)n);
    uint64_t before = f->sb->dns_rate.refused_total;
    for (int i = 0; i < 200; i++) {
        spin(f);
        while (recv(fd, a, sizeof a, MSG_DONTWAIT) > 0)
            ;
    }
    /* The kernel reports its drops with the next datagram it queues. */
    assert_int_equal(send(fd, q, n, 0), (ssize_t)n);
    for (int i = 0; i < 200; i++)
        spin(f);
    assert_true(f->sb->dns_rate.refused_total > before + 1000);
    json_t *log = gw_declog_json(f->sb, 0);
    size_t i;
    json_t *e;
    bool flood = false;
    json_array_foreach(log, i, e)
        flood |= strncmp(json_string_value(json_object_get(e, "reason")), "rate_limited x", 14) == 0;
    json_decref(log);
    assert_true(flood);
    close(fd);
}

/* Sends `count` queries for uncached names, which wait on the silent upstream. */
static int waiting_queries(struct fixture *f, int count)
{
    int fd = client(SOCK_STREAM, GUEST);
    uint8_t out[40 * 64];
    size_t o = 0;
    for (int i = 0; i < count; i++) {
        char name[64];
        snprintf(name, sizeof name, "n%d.allowed.test", i);
        o += frame(out + o, (uint16_t)(100 + i), name, DNS_TYPE_A);
    }
    assert_int_equal(send(fd, out, o, 0), (ssize_t)o);
    for (int i = 0; i < 500; i++) {
        spin(f);
        usleep(1000);
    }
    return fd;
}

static void test_tcp_close_drops_pending(void **state)
{
    NEED_ROOT(state);
    struct fixture *f = *state;
    int fd = waiting_queries(f, 3);
    assert_int_equal(f->sb->dns_pending, 3);
    /* A reset, not a FIN: after a half close the queries are still answered. */
    struct linger l = {.l_onoff = 1, .l_linger = 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    close(fd);
    for (int i = 0; i < 2000 && (f->sb->ndns_tcps || f->sb->dns_pending); i++) {
        spin(f);
        usleep(1000);
    }
    assert_int_equal(f->sb->ndns_tcps, 0);
    assert_int_equal(f->sb->dns_pending, 0);
}

/* At most DNS_TCP_INFLIGHT_MAX queries of one connection wait at a time; the rest stay
 * unread (the fixture's teardown drops them with the connection). Runs last. */
static void test_tcp_inflight_bound(void **state)
{
    NEED_ROOT(state);
    struct fixture *f = *state;
    waiting_queries(f, DNS_TCP_INFLIGHT_MAX + 8);
    assert_int_equal(f->sb->dns_pending, DNS_TCP_INFLIGHT_MAX);
}

static void test_tcp_idle_connection_closes(void **state)
{
    NEED_ROOT(state);
    struct fixture *f = *state;
    int fd = client(SOCK_STREAM, GUEST);
    uint8_t a[16];
    /* recv_spin waits up to ~15 s (3000 polls of 5 ms), longer than DNS_TCP_IDLE_S. */
    assert_int_equal(recv_spin(f, fd, a, 1, sizeof a), -1);
    close(fd);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_udp_truncates_large_answers),
        cmocka_unit_test(test_tcp_pipelined_same_policy),
        cmocka_unit_test(test_tcp_frame_split_bytewise),
        cmocka_unit_test(test_tcp_bad_frames_close),
        cmocka_unit_test(test_tcp_other_source_and_connection_limit),
        cmocka_unit_test(test_udp_flood_kernel_drops_are_counted),
        cmocka_unit_test(test_tcp_close_drops_pending),
        cmocka_unit_test(test_tcp_idle_connection_closes),
        cmocka_unit_test(test_tcp_inflight_bound),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
