/* test_gw_ctl: control requests that need no namespace (errors, tenants, ping), the
 * nftables ruleset text, the rate limiter and the decision log. The namespace paths
 * are exercised by tests/netsec (root). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "gateway/gw_ctl.h"

struct fixture {
    struct gw gw;
    char dir[64];
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof *f);
    char err[256];
    strcpy(f->dir, "/tmp/test_gw_ctl.XXXXXX");
    if (!mkdtemp(f->dir))
        return -1;
    f->gw.base = event_base_new();
    f->gw.dns = evdns_base_new(f->gw.base, 0);
    if (tls_ca_open(f->dir, NULL, &f->gw.ca, err, sizeof err) != 0)
        return -1;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    char cmd[128];
    gw_shutdown(&f->gw);
    tls_ca_free(f->gw.ca);
    evdns_base_free(f->gw.dns, 0);
    event_base_free(f->gw.base);
    snprintf(cmd, sizeof cmd, "rm -rf %s", f->dir);
    if (system(cmd) != 0)
        return -1;
    free(f);
    return 0;
}

static json_t *call(struct fixture *f, const char *req)
{
    json_error_t je;
    json_t *j = json_loads(req, 0, &je);
    assert_non_null(j);
    json_t *rep = gw_ctl_handle(&f->gw, j);
    json_decref(j);
    return rep;
}

static void expect_error(struct fixture *f, const char *req, const char *code)
{
    json_t *rep = call(f, req);
    assert_false(json_is_true(json_object_get(rep, "ok")));
    assert_string_equal(json_string_value(json_object_get(json_object_get(rep, "error"), "code")), code);
    json_decref(rep);
}

static void test_requests(void **state)
{
    struct fixture *f = *state;
    json_t *rep = call(f, "{\"op\":\"ping\"}");
    assert_true(json_is_true(json_object_get(rep, "ok")));
    assert_non_null(strstr(json_string_value(json_object_get(rep, "ca")), "space-ca.crt"));
    json_decref(rep);
    expect_error(f, "{}", "bad_request");
    expect_error(f, "{\"op\":\"fly\",\"sandbox\":\"a\"}", "bad_request");
    expect_error(f, "{\"op\":\"attach\",\"sandbox\":\"../x\"}", "bad_request");
    expect_error(f, "{\"op\":\"attach\",\"sandbox\":\"a\",\"policy\":{\"mode\":\"open\"},\"dev\":\"tap0\","
                    "\"guest_mac\":\"02:00:00:00:00:01\",\"guest_ip\":\"10.0.2.15\",\"gateway_ip\":\"10.0.2.2\","
                    "\"netns\":\"/nonexistent/ns\"}", "netns");
    expect_error(f, "{\"op\":\"attach\",\"sandbox\":\"a\",\"policy\":{\"mode\":\"open\"},\"dev\":\"tap0\","
                    "\"guest_mac\":\"01:00:00:00:00:01\",\"guest_ip\":\"10.0.2.15\",\"gateway_ip\":\"10.0.2.2\","
                    "\"netns\":\"/proc/self/ns/net\"}", "bad_request");
    expect_error(f, "{\"op\":\"policy\",\"sandbox\":\"nope\",\"policy\":{\"mode\":\"open\"}}", "not_found");
    expect_error(f, "{\"op\":\"log\",\"sandbox\":\"nope\"}", "not_found");
    expect_error(f, "{\"op\":\"detach\",\"sandbox\":\"nope\"}", "not_found");
    expect_error(f, "{\"op\":\"creds\",\"sandbox\":\"nope\",\"rules\":[]}", "bad_request");
    expect_error(f, "{\"op\":\"creds\",\"tenant\":\"t1\",\"rules\":[{\"host\":\"a.test\",\"header\":\"X:Y\",\"value\":\"v\"}]}",
                 "bad_request");
    expect_error(f, "{\"op\":\"creds\",\"tenant\":\"t1\",\"rules\":[{\"host\":\"a.test\",\"header\":\"X\",\"value\":\"v\\r\\nY: z\"}]}",
                 "bad_request");
    rep = call(f, "{\"op\":\"creds\",\"tenant\":\"t1\",\"rules\":[{\"host\":\"A.test\",\"header\":\"Authorization\",\"value\":\"Bearer x\"}]}");
    assert_true(json_is_true(json_object_get(rep, "ok")));
    json_decref(rep);
    assert_non_null(f->gw.tenants);
    assert_string_equal(f->gw.tenants->creds.rules[0].host, "a.test");
    /* A sandbox of t1 sees the tenant's rule; its own rule for the same host wins; a
     * sandbox of another tenant sees neither. */
    rep = call(f, "{\"op\":\"creds\",\"tenant\":\"t1\",\"rules\":[{\"host\":\"a.test\",\"header\":\"Authorization\","
                  "\"value\":\"tenant\"},{\"host\":\"b.test\",\"header\":\"X-Key\",\"value\":\"tenant-b\"}]}");
    json_decref(rep);
    struct gw_sandbox sb = {.gw = &f->gw, .tenant = "t1"};
    assert_string_equal(gw_cred_find(&sb, "a.test")->value, "tenant");
    struct gw_cred own = {.host = "a.test", .header = "Authorization", .value = "sandbox"};
    sb.creds = (struct gw_credset){.n = 1, .rules = &own};
    assert_string_equal(gw_cred_find(&sb, "a.test")->value, "sandbox");
    assert_string_equal(gw_cred_find(&sb, "b.test")->value, "tenant-b");
    assert_null(gw_cred_find(&sb, "c.test"));
    struct gw_sandbox other = {.gw = &f->gw, .tenant = "t2"};
    assert_null(gw_cred_find(&other, "a.test"));
}

static void test_rules_render(void **state)
{
    struct netns_wiring w = {.dev = "tap0", .guest_mac = {2, 0x5b, 0, 0, 0, 1},
                             .guest_ip = 0x0a00020f, .gw_ip = 0x0a000202};
    char out[4096];
    size_t n = netns_rules_render(&w, out, sizeof out);
    assert_true(n > 0);
    assert_non_null(strstr(out, "ether saddr != 02:5b:00:00:00:01 drop"));
    assert_non_null(strstr(out, "ether type ip ip saddr 10.0.2.15 accept"));
    assert_non_null(strstr(out, "arp saddr ether 02:5b:00:00:00:01 arp saddr ip 10.0.2.15 accept"));
    assert_non_null(strstr(out, "tcp dport 443 redirect to :15443"));
    assert_non_null(strstr(out, "ip daddr 10.0.2.2 udp dport 53 accept"));
    assert_non_null(strstr(out, "ip daddr 10.0.2.2 tcp dport 53 accept"));
    assert_non_null(strstr(out, "ip daddr 10.0.2.2 tcp dport 15080 ct original proto-dst 80 accept"));
    assert_non_null(strstr(out, "ip daddr 10.0.2.2 tcp dport 15443 ct original proto-dst 443 accept"));
    assert_non_null(strstr(out, "hook forward priority 0; policy drop"));
    assert_int_equal(netns_rules_render(&w, out, 100), 0);
    uint8_t mac[6];
    assert_int_equal(netns_parse_mac("02:5b:00:00:00:01", mac), 0);
    assert_int_equal(netns_parse_mac("ff:ff:ff:ff:ff:ff", mac), -1);
    assert_int_equal(netns_parse_mac("02:5b:00:00:00", mac), -1);
    assert_int_equal(netns_parse_mac("02:5b:00:00:00:01x", mac), -1);
}

static void test_rate_and_log(void **state)
{
    struct gw_rate r;
    gw_rate_init(&r, 10, 3);
    int64_t t = r.last_ms;
    assert_true(gw_rate_take(&r, t));
    assert_true(gw_rate_take(&r, t));
    assert_true(gw_rate_take(&r, t));
    assert_false(gw_rate_take(&r, t));
    assert_int_equal(r.refused_total, 1);
    assert_true(gw_rate_take(&r, t + 100)); /* 10/s: one token back after 100 ms */
    struct gw_sandbox sb = {.log = calloc(GW_LOG_RING, sizeof(struct gw_decision))};
    strcpy(sb.id, "s");
    for (int i = 0; i < GW_LOG_RING + 5; i++)
        gw_decide(&sb, "dns", i % 2, "a.test", "policy", 0, 53);
    json_t *all = gw_declog_json(&sb, 0);
    assert_int_equal(json_array_size(all), GW_LOG_RING);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(all, 0), "seq")), 6);
    json_decref(all);
    json_t *tail = gw_declog_json(&sb, GW_LOG_RING + 3);
    assert_int_equal(json_array_size(tail), 2);
    json_decref(tail);
    free(sb.log);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_requests, setup, teardown),
        cmocka_unit_test(test_rules_render), cmocka_unit_test(test_rate_and_log),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
