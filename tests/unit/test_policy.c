/* test_policy: policy parsing, name normalisation, matching, forbidden addresses,
 * internal names, the host's addresses followed live. */
#include <net/if.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "gateway/policy.h"
#include "rtnl.h"

static uint32_t ip(int a, int b, int c, int d)
{
    return (uint32_t)a << 24 | (uint32_t)b << 16 | (uint32_t)c << 8 | (uint32_t)d;
}

static void parse_or_fail(const char *json, struct policy *p)
{
    char err[128];
    json_error_t je;
    json_t *j = json_loads(json, 0, &je);
    assert_non_null(j);
    assert_int_equal(policy_parse(j, p, err, sizeof err), 0);
    json_decref(j);
}

static void test_normalise(void **state)
{
    char out[POLICY_NAME_MAX + 1];
    assert_int_equal(policy_name_normalise("API.Example.COM.", 16, out), 0);
    assert_string_equal(out, "api.example.com");
    assert_int_equal(policy_name_normalise("a_b.test", 8, out), 0);
    const char *bad[] = {"", ".", "a..b", ".a", "a.b..", "-a.test", "a-.test", "a b.test",
                         "127.0.0.1", "0x7f.1", "2130706433", "10.1", "a.123", "[::1]",
                         "::1", "a\x01b.test", "caf\xc3\xa9.test", "a/b.test"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(policy_name_normalise(bad[i], strlen(bad[i]), out), -1);
    char label[80];
    memset(label, 'a', 64);
    strcpy(label + 64, ".test");
    assert_int_equal(policy_name_normalise(label, strlen(label), out), -1);
    char longname[300];
    for (int i = 0; i < 60; i++)
        memcpy(longname + i * 4, "abc.", 4);
    strcpy(longname + 240, "abcdefghijklmno.test");
    assert_int_equal(policy_name_normalise(longname, strlen(longname), out), -1);
}

static void test_allowlist_matching(void **state)
{
    struct policy p;
    parse_or_fail("{\"mode\":\"allowlist\",\"allow\":[\"allowed.test\",\"*.wild.test\","
                  "\"api.test:443\",\"203.0.113.0/24:80\"]}", &p);
    assert_true(policy_name_may_resolve(&p, "allowed.test"));
    assert_true(policy_name_may_resolve(&p, "a.b.wild.test"));
    /* a CIDR rule never makes a name resolvable (that would be a DNS tunnel) */
    assert_false(policy_name_may_resolve(&p, "evil.test"));
    assert_false(policy_name_may_resolve(&p, "data.tunnel.evil.test"));
    uint32_t pub = ip(198, 51, 100, 7), net = ip(203, 0, 113, 9);
    assert_true(policy_addr_allowed(&p, "allowed.test", pub, 443));
    assert_true(policy_addr_allowed(&p, "x.wild.test", pub, 80));
    assert_false(policy_addr_allowed(&p, "wild.test", pub, 80));
    assert_false(policy_addr_allowed(&p, "evilwild.test", pub, 80));
    assert_false(policy_addr_allowed(&p, "allowed.test.evil.test", pub, 80));
    assert_true(policy_addr_allowed(&p, "api.test", pub, 443));
    assert_false(policy_addr_allowed(&p, "api.test", pub, 80));
    assert_true(policy_addr_allowed(&p, "api.test", pub, 0));
    /* ...nor allows any address for a name no name rule allows, even inside the CIDR */
    assert_false(policy_addr_allowed(&p, "evil.test", net, 80));
    assert_false(policy_addr_allowed(&p, "evil.test", pub, 80));
    /* for an allowed name it narrows nothing and adds its own port's addresses */
    assert_true(policy_addr_allowed(&p, "allowed.test", net, 80));
    json_t *back = policy_to_json(&p);
    char *s = json_dumps(back, JSON_COMPACT);
    assert_string_equal(s, "{\"mode\":\"allowlist\",\"allow\":[\"allowed.test\",\"*.wild.test\","
                           "\"api.test:443\",\"203.0.113.0/24:80\"]}");
    free(s);
    json_decref(back);
    policy_free(&p);
}

static void test_forbidden_always(void **state)
{
    struct policy p;
    parse_or_fail("{\"mode\":\"open\"}", &p);
    uint32_t bad[] = {ip(127, 0, 0, 1), ip(10, 9, 9, 9), ip(172, 16, 0, 1), ip(172, 31, 255, 255),
                      ip(192, 168, 1, 1), ip(169, 254, 169, 254), ip(100, 64, 0, 1),
                      ip(100, 127, 255, 255), ip(0, 0, 0, 0), ip(224, 0, 0, 251),
                      ip(255, 255, 255, 255), ip(198, 18, 0, 1), ip(192, 0, 0, 170)};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_true(policy_addr_forbidden(bad[i]));
        assert_false(policy_addr_allowed(&p, "x.test", bad[i], 443));
    }
    assert_false(policy_addr_forbidden(ip(172, 32, 0, 1)));
    assert_false(policy_addr_forbidden(ip(100, 128, 0, 1)));
    assert_true(policy_addr_allowed(&p, "x.test", ip(203, 0, 113, 1), 443));
    policy_host_addrs_add(ip(198, 51, 100, 200));
    assert_false(policy_addr_allowed(&p, "x.test", ip(198, 51, 100, 200), 443));
    policy_free(&p);
    /* an explicit CIDR never re-opens a forbidden range */
    parse_or_fail("{\"mode\":\"allowlist\",\"allow\":[\"x.test\",\"0.0.0.0/0\",\"10.0.0.0/8\"]}", &p);
    assert_false(policy_addr_allowed(&p, "x.test", ip(10, 1, 1, 1), 80));
    assert_true(policy_addr_allowed(&p, "x.test", ip(8, 8, 8, 8), 80));
    policy_free(&p);
}

static void test_cloud_and_internal(void **state)
{
    struct policy p;
    parse_or_fail("{\"mode\":\"open\"}", &p);
    /* Azure WireServer, Alibaba metadata (in 100.64/10), Oracle C@C (in 192.0.0/24) */
    uint32_t cloud[] = {ip(168, 63, 129, 16), ip(100, 100, 100, 200), ip(192, 0, 0, 192),
                        ip(169, 254, 169, 254), ip(169, 254, 170, 2)};
    for (size_t i = 0; i < sizeof cloud / sizeof cloud[0]; i++)
        assert_false(policy_addr_allowed(&p, "x.test", cloud[i], 80));
    assert_true(policy_addr_allowed(&p, "x.test", ip(168, 63, 129, 17), 80));
    const char *internal[] = {"metadata.google.internal", "db.internal", "printer.local",
                              "x.localhost", "localhost", "metadata", "wpad", "router.home.arpa",
                              "nas.lan", "a.corp", "1.0.0.127.in-addr.arpa", "x.onion",
                              "x.invalid", "box.localdomain"};
    for (size_t i = 0; i < sizeof internal / sizeof internal[0]; i++) {
        assert_true(policy_name_internal(internal[i]));
        assert_false(policy_name_may_resolve(&p, internal[i]));
        /* nor is any address allowed for it (found by fuzz_dns_policy: `open` allowed
         * every public address for a single-label name it would not resolve) */
        assert_false(policy_addr_allowed(&p, internal[i], ip(203, 0, 113, 10), 443));
    }
    const char *public[] = {"allowed.test", "internal.example.com", "local.example.com",
                            "mylan.test", "xinternal"};
    for (size_t i = 0; i < 4; i++) {
        assert_false(policy_name_internal(public[i]));
        assert_true(policy_name_may_resolve(&p, public[i]));
    }
    assert_true(policy_name_internal(public[4])); /* single label */
    policy_free(&p);
    /* even an explicit rule does not make an internal name resolvable */
    parse_or_fail("{\"mode\":\"allowlist\",\"allow\":[\"metadata.google.internal\",\"*.local\"]}", &p);
    assert_false(policy_name_may_resolve(&p, "metadata.google.internal"));
    assert_false(policy_name_may_resolve(&p, "printer.local"));
    policy_free(&p);
    /* a CIDR rule allows no name by itself: only addresses of names a name rule allows */
    parse_or_fail("{\"mode\":\"allowlist\",\"allow\":[\"203.0.113.0/24\",\"a.test\"]}", &p);
    assert_false(policy_addr_allowed(&p, "other.test", ip(203, 0, 113, 10), 443));
    assert_true(policy_addr_allowed(&p, "a.test", ip(203, 0, 113, 10), 443));
    policy_free(&p);
}

/* An address added to the host after the watch started is its own at once, and a
 * removed one is no longer; --deny-addr style addresses survive rescans. */
static void test_host_addrs_live(void **state)
{
    if (unshare(CLONE_NEWNET) != 0) {
        printf("skipped: needs root for a private network namespace (unshare CLONE_NEWNET)\n");
        skip();
    }
    struct rtnl r;
    char err[256];
    int lo = (int)if_nametoindex("lo");
    assert_int_equal(rtnl_open(&r, err, sizeof err), 0);
    assert_int_equal(rtnl_link_up(&r, lo, err, sizeof err), 0);
    policy_host_addrs_add(ip(198, 51, 100, 201));
    assert_int_equal(policy_host_addrs_watch(), 0);
    uint32_t late = ip(203, 0, 113, 77);
    assert_false(policy_addr_forbidden(late));
    assert_int_equal(rtnl_addr_add(&r, lo, late, 32, err, sizeof err), 0);
    assert_true(policy_addr_forbidden(late)); /* no event loop turn in between */
    assert_true(policy_addr_forbidden(ip(198, 51, 100, 201)));
    rtnl_close(&r);
}

static void test_none_mode(void **state)
{
    struct policy p;
    parse_or_fail("{\"mode\":\"none\",\"allow\":[\"allowed.test\"]}", &p);
    assert_false(policy_name_may_resolve(&p, "allowed.test"));
    assert_false(policy_addr_allowed(&p, "allowed.test", ip(203, 0, 113, 1), 80));
    policy_free(&p);
}

/* `open` with deny rules: a name or address a deny rule matches is refused unless an
 * allow rule matches it too. One row: a policy, then (name, address, port, expected). */
struct deny_case {
    const char *name;
    uint32_t addr;
    uint16_t port;
    bool resolves; /* policy_name_may_resolve */
    bool allowed;  /* policy_addr_allowed(name, addr, port) */
};

static void check_cases(const char *policy, const struct deny_case *c, size_t n)
{
    struct policy p;
    parse_or_fail(policy, &p);
    for (size_t i = 0; i < n; i++) {
        if (policy_name_may_resolve(&p, c[i].name) != c[i].resolves ||
            policy_addr_allowed(&p, c[i].name, c[i].addr, c[i].port) != c[i].allowed)
            fail_msg("%s: row %zu (%s, port %u)", policy, i, c[i].name, c[i].port);
    }
    policy_free(&p);
}

static void test_open_deny(void **state)
{
    uint32_t pub = ip(198, 51, 100, 7), denied_net = ip(203, 0, 113, 9);
    /* by name, wildcard, CIDR, port */
    const struct deny_case deny[] = {
        {"denied.test", pub, 443, false, false},
        {"denied.test", pub, 0, false, false},
        {"other.test", pub, 443, true, true},
        {"sub.denied.test", pub, 443, true, true}, /* an exact rule is that name only */
        {"a.wild.test", pub, 80, false, false},
        {"a.b.wild.test", pub, 80, false, false},
        {"wild.test", pub, 80, true, true},        /* "*." is below the suffix only */
        /* a CIDR deny covers its addresses whatever the name that resolved to them */
        {"other.test", denied_net, 443, true, false},
        {"other.test", denied_net, 0, true, false},
        /* a port rule refuses that port only: the name still resolves */
        {"port.test", pub, 25, true, false},
        {"port.test", pub, 443, true, true},
        {"port.test", pub, 0, true, true},
        {"other.test", ip(192, 0, 2, 1), 22, true, false},
        {"other.test", ip(192, 0, 2, 1), 80, true, true},
        {"other.test", ip(192, 0, 2, 1), 0, true, true},
        /* forbidden addresses and internal names stay refused */
        {"other.test", ip(10, 0, 0, 1), 443, true, false},
        {"db.internal", pub, 443, false, false},
    };
    check_cases("{\"mode\":\"open\",\"deny\":[\"denied.test\",\"*.wild.test\",\"203.0.113.0/24\","
                "\"port.test:25\",\"192.0.2.0/24:22\"]}", deny, sizeof deny / sizeof deny[0]);
    /* allow rules override deny rules */
    const struct deny_case over[] = {
        {"denied.test", pub, 443, false, false},
        {"ok.wild.test", pub, 443, true, true},
        {"bad.wild.test", pub, 443, false, false},
        {"ok.wild.test", denied_net, 443, true, true}, /* an allowed name in a denied CIDR */
        {"other.test", denied_net, 443, true, false},
        {"other.test", ip(203, 0, 113, 80), 443, true, true}, /* an allowed CIDR inside it */
        {"api.test", pub, 443, true, true},            /* allowed on 443 only */
        {"api.test", pub, 80, true, false},
        {"api.test", pub, 0, true, true},
        /* an allow CIDR never makes a denied name resolvable */
        {"blocked.test", ip(203, 0, 113, 80), 443, false, false},
        {"other.test", ip(10, 0, 0, 1), 443, true, false},
    };
    check_cases("{\"mode\":\"open\",\"deny\":[\"denied.test\",\"*.wild.test\",\"203.0.113.0/24\","
                "\"api.test\",\"blocked.test\"],\"allow\":[\"ok.wild.test\",\"203.0.113.80/32\","
                "\"api.test:443\"]}", over, sizeof over / sizeof over[0]);
    /* deny everything but the allow rules (E2B's denyOut ["0.0.0.0/0"]) */
    const struct deny_case all[] = {
        {"allowed.test", pub, 443, true, true},
        {"other.test", pub, 443, true, false},
        {"other.test", pub, 0, true, false},
    };
    check_cases("{\"mode\":\"open\",\"deny\":[\"0.0.0.0/0\"],\"allow\":[\"allowed.test\"]}", all,
                sizeof all / sizeof all[0]);
    struct policy p;
    parse_or_fail("{\"mode\":\"open\",\"deny\":[\"denied.test\",\"10.0.0.0/8:22\"],"
                  "\"allow\":[\"x.denied.test\"]}", &p);
    json_t *back = policy_to_json(&p);
    char *s = json_dumps(back, JSON_COMPACT);
    assert_string_equal(s, "{\"mode\":\"open\",\"allow\":[\"x.denied.test\"],"
                           "\"deny\":[\"denied.test\",\"10.0.0.0/8:22\"]}");
    free(s);
    json_decref(back);
    policy_free(&p);
}

static void test_parse_errors(void **state)
{
    const char *bad[] = {"[]", "{}", "{\"mode\":\"maybe\"}", "{\"mode\":\"allowlist\",\"allow\":\"x\"}",
                         "{\"mode\":\"allowlist\",\"allow\":[1]}",
                         "{\"mode\":\"allowlist\",\"allow\":[\"a.test:0\"]}",
                         "{\"mode\":\"allowlist\",\"allow\":[\"a.test:70000\"]}",
                         "{\"mode\":\"allowlist\",\"allow\":[\"1.2.3.4/33\"]}",
                         "{\"mode\":\"allowlist\",\"allow\":[\"1.2.3/8\"]}",
                         "{\"mode\":\"allowlist\",\"allow\":[\"*.\"]}",
                         "{\"mode\":\"allowlist\",\"allow\":[\"**.a.test\"]}",
                         "{\"mode\":\"allowlist\",\"allow\":[\"127.0.0.1\"]}",
                         /* deny rules exist in `open` mode only */
                         "{\"mode\":\"allowlist\",\"allow\":[\"a.test\"],\"deny\":[\"b.test\"]}",
                         "{\"mode\":\"none\",\"deny\":[\"b.test\"]}",
                         "{\"mode\":\"open\",\"deny\":\"b.test\"}",
                         "{\"mode\":\"open\",\"deny\":[\"b.test:0\"]}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct policy p;
        char err[128];
        json_error_t je;
        json_t *j = json_loads(bad[i], 0, &je);
        assert_non_null(j);
        assert_int_equal(policy_parse(j, &p, err, sizeof err), -1);
        assert_true(err[0] != '\0');
        if (strstr(bad[i], "\"deny\":[\"b.test\"]"))
            assert_non_null(strstr(err, "\"deny\" needs mode \"open\""));
        json_decref(j);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_normalise), cmocka_unit_test(test_allowlist_matching),
        cmocka_unit_test(test_forbidden_always), cmocka_unit_test(test_none_mode),
        cmocka_unit_test(test_parse_errors), cmocka_unit_test(test_cloud_and_internal),
        cmocka_unit_test(test_host_addrs_live), cmocka_unit_test(test_open_deny),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
