/* test_http_hdr: the shared hop-by-hop and credential header lists, Host values. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <cmocka.h>

#include "http_hdr.h"

static void test_hop_by_hop(void **state)
{
    (void)state;
    const char *fixed[] = {"Connection", "keep-alive", "PROXY-CONNECTION", "te", "Trailer",
                           "transfer-encoding", "Upgrade"};
    for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++)
        assert_true(hh_hop_by_hop(fixed[i], NULL));
    assert_false(hh_hop_by_hop("Content-Type", NULL));
    assert_false(hh_hop_by_hop("Host", "close"));
    /* Fields the Connection header names, with OWS and empty list elements. */
    assert_true(hh_hop_by_hop("X-Foo", "close, x-foo"));
    assert_true(hh_hop_by_hop("x-foo", " ,X-Foo\t, bar"));
    assert_true(hh_hop_by_hop("Bar", "x-foo,bar "));
    assert_false(hh_hop_by_hop("X-Fo", "X-Foo"));
    assert_false(hh_hop_by_hop("X-Foo", "X-Fo, X-Foob"));
    assert_false(hh_hop_by_hop("X-Foo", ""));
}

static void test_credentials(void **state)
{
    (void)state;
    const char *creds[] = {"Authorization", "proxy-authorization", "X-API-KEY", "x-api-key",
                           "X-Space-Node-Token", "x-access-token", "E2B-Traffic-Access-Token"};
    for (size_t i = 0; i < sizeof creds / sizeof *creds; i++)
        assert_true(hh_credential(creds[i]));
    assert_false(hh_credential("Cookie"));
    assert_false(hh_credential("X-API-Key2"));
    assert_false(hh_credential("E2b-Sandbox-Id"));
}

static void test_host(void **state)
{
    (void)state;
    const char *ok[] = {"localhost", "127.0.0.1:3000", "[::1]:8080", "api.example-1.test"};
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++)
        assert_true(hh_host_ok(ok[i]));
    const char *bad[] = {"", "a b", "host/path", "user@host", "host?x", "host#f", "h\r\nX: y", "h%41"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        assert_false(hh_host_ok(bad[i]));
    assert_false(hh_host_ok(NULL));
    char longest[257];
    memset(longest, 'a', sizeof longest - 1);
    longest[256] = 0;
    assert_false(hh_host_ok(longest));
    longest[255] = 0;
    assert_true(hh_host_ok(longest));
}

static void test_public_url(void **state)
{
    (void)state;
    const char *ok[] = {"http://127.0.0.1:3000", "https://space.example.test:8443", "http://[::1]:80"};
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++)
        assert_true(hh_public_url_ok(ok[i]));
    const char *bad[] = {"", "127.0.0.1:3000", "ftp://host", "http://", "http://host/", "https://h/p?q",
                         "http://user@host", "http://h\r\nX: y", "HTTP://host"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        assert_false(hh_public_url_ok(bad[i]));
    assert_false(hh_public_url_ok(NULL));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hop_by_hop),
        cmocka_unit_test(test_credentials),
        cmocka_unit_test(test_host),
        cmocka_unit_test(test_public_url),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
