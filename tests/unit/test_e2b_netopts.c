/* test_e2b_netopts: E2B create's network options mapped onto spaced spec fields
 * (e2b_netopts.h): each row is a create body and the spec fields it gives, or the text
 * its 400 must contain. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "daemon/e2b/e2b_netopts.h"

struct row {
    const char *body;
    const char *spec; /* compact, sorted keys; NULL: an error */
    const char *err;  /* substring of the 400's message */
};

static const struct row rows[] = {
    {"{}", "{}", NULL},
    {"{\"network\":null,\"allow_internet_access\":null}", "{}", NULL},
    {"{\"allow_internet_access\":true}", "{\"network\":{\"mode\":\"open\"}}", NULL},
    {"{\"allow_internet_access\":false}", "{\"network\":{\"mode\":\"none\"}}", NULL},
    {"{\"network\":{\"allowPublicTraffic\":false}}", "{\"ports\":{\"public\":false}}", NULL},
    /* deny all but allowOut */
    {"{\"network\":{\"denyOut\":[\"0.0.0.0/0\"],\"allowOut\":[\"allowed.test\",\"198.51.100.7\"]}}",
     "{\"network\":{\"allow\":[\"allowed.test\",\"198.51.100.7/32\"],\"mode\":\"allowlist\"}}", NULL},
    {"{\"network\":{\"denyOut\":[\"0.0.0.0/0\"]}}", "{\"network\":{\"mode\":\"none\"}}", NULL},
    {"{\"allow_internet_access\":false,\"network\":{\"allowOut\":[\"*.ok.test\"]}}",
     "{\"network\":{\"allow\":[\"*.ok.test\"],\"mode\":\"allowlist\"}}", NULL},
    /* deny some: open with deny rules, allowOut as their exceptions */
    {"{\"network\":{\"denyOut\":[\"denied.test\",\"203.0.113.0/24\"]}}",
     "{\"network\":{\"deny\":[\"denied.test\",\"203.0.113.0/24\"],\"mode\":\"open\"}}", NULL},
    {"{\"allow_internet_access\":true,\"network\":{\"denyOut\":[\"*.bad.test\"],"
     "\"allowOut\":[\"ok.bad.test\"]}}",
     "{\"network\":{\"allow\":[\"ok.bad.test\"],\"deny\":[\"*.bad.test\"],\"mode\":\"open\"}}", NULL},
    {"{\"network\":{\"allowOut\":[\"a.test\"]}}", "{\"network\":{\"mode\":\"open\"}}", NULL},
    /* harmless options: accepted */
    {"{\"secure\":false,\"mcp\":null,\"network\":{\"maskRequestHost\":\"localhost:${PORT}\","
     "\"httpsPorts\":[443,8443],\"rules\":{},\"egressProxy\":null}}", "{}", NULL},
    /* refused */
    {"{\"network\":{\"denyOut\":[\"denied.test\",\"10.0.0.1:80\"]}}", NULL, "network.denyOut[1] (10.0.0.1:80)"},
    {"{\"network\":{\"allowOut\":[\"bad name.test\"]}}", NULL, "network.allowOut[0]"},
    {"{\"network\":{\"allowOut\":[7]}}", NULL, "network.allowOut[0] (not a string)"},
    {"{\"network\":{\"denyOut\":\"x.test\"}}", NULL, "network.denyOut must be an array"},
    {"{\"network\":{\"egressProxy\":{\"address\":\"proxy.test:1080\"}}}", NULL, "network.egressProxy"},
    {"{\"network\":{\"rules\":{\"api.test\":[{}]}}}", NULL, "network.rules"},
    {"{\"mcp\":{\"exa\":{\"apiKey\":\"k\"}}}", NULL, "mcp is not supported"},
    {"{\"network\":{\"httpsPorts\":[0]}}", NULL, "network.httpsPorts[0]"},
    {"{\"network\":{\"sideways\":1}}", NULL, "network.sideways is not a known field"},
    {"{\"network\":[]}", NULL, "network must be an object"},
    {"{\"allow_internet_access\":\"yes\"}", NULL, "allow_internet_access"},
    {"{\"secure\":1}", NULL, "secure must be a boolean"},
};

/* updateNetwork's body: the egress fields at the top level, replacing the policy. */
static const struct row update_rows[] = {
    {"{}", "{\"mode\":\"open\"}", NULL},
    {"{\"allow_internet_access\":false}", "{\"mode\":\"none\"}", NULL},
    {"{\"denyOut\":[\"0.0.0.0/0\"],\"allowOut\":[\"a.test\"]}",
     "{\"allow\":[\"a.test\"],\"mode\":\"allowlist\"}", NULL},
    {"{\"denyOut\":[\"evil.test\"],\"rules\":{}}", "{\"deny\":[\"evil.test\"],\"mode\":\"open\"}", NULL},
    {"{\"egressProxy\":{\"address\":\"p.test:1080\"}}", NULL, "network.egressProxy"},
    {"{\"denyOut\":[\"a b\"]}", NULL, "network.denyOut[0]"},
    {"{\"allowPublicTraffic\":false}", NULL, "allowPublicTraffic is not a known field"},
    {"[]", NULL, "must be an object"},
};

static void run_rows(const struct row *r, size_t n, json_t *(*fn)(const json_t *, char *, size_t))
{
    for (size_t i = 0; i < n; i++) {
        char msg[256] = "";
        json_t *body = json_loads(r[i].body, 0, NULL);
        assert_non_null(body);
        json_t *spec = fn(body, msg, sizeof msg);
        json_decref(body);
        char *got = spec ? json_dumps(spec, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
        json_decref(spec);
        bool ok = r[i].spec ? got && strcmp(got, r[i].spec) == 0
                            : !got && strstr(msg, r[i].err) != NULL;
        if (!ok)
            fail_msg("row %zu %s: got %s / %s", i, r[i].body, got ? got : "NULL", msg);
        free(got);
    }
}

static void test_rows(void **state)
{
    run_rows(rows, sizeof rows / sizeof *rows, e2b_netopts_spec);
}

static void test_update_rows(void **state)
{
    run_rows(update_rows, sizeof update_rows / sizeof *update_rows, e2b_netopts_update);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_rows), cmocka_unit_test(test_update_rows)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
