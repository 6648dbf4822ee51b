/* Unit tests for attach tokens and for the validation of sessions/files request bodies
 * and queries. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "daemon/session/sess_req.h"
#include "daemon/session/sess_token.h"

static void test_token_mint_verify(void **state)
{
    (void)state;
    struct sess_token a, b;
    char ta[SESS_TOKEN_LEN + 1], tb[SESS_TOKEN_LEN + 1];
    assert_int_equal(sess_token_mint(&a, 1000, ta), 0);
    assert_int_equal(sess_token_mint(&b, 1000, tb), 0);
    assert_int_equal(strlen(ta), SESS_TOKEN_LEN);
    assert_true(sess_token_is_attach(ta));
    assert_false(sess_token_is_attach("space_0123"));
    assert_string_not_equal(ta, tb);
    for (const char *p = ta + 4; *p; p++)
        assert_non_null(strchr("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_", *p));
    /* The digest, not the text, is kept. */
    assert_null(memmem(&a, sizeof a, ta + 4, 8));

    assert_int_equal(sess_token_verify(&a, ta, 999), SESS_TOKEN_VALID);
    assert_int_equal(sess_token_verify(&a, ta, 1000), SESS_TOKEN_VALID);
    assert_int_equal(sess_token_verify(&a, ta, 1001), SESS_TOKEN_EXPIRED);
    /* Another session's token, tampering, truncation, junk: all mismatch, even expired. */
    assert_int_equal(sess_token_verify(&a, tb, 999), SESS_TOKEN_MISMATCH);
    assert_int_equal(sess_token_verify(&b, ta, 999), SESS_TOKEN_MISMATCH);
    assert_int_equal(sess_token_verify(&a, tb, 5000), SESS_TOKEN_MISMATCH);
    char bad[SESS_TOKEN_LEN + 2];
    memcpy(bad, ta, sizeof ta);
    bad[10] = bad[10] == 'A' ? 'B' : 'A';
    assert_int_equal(sess_token_verify(&a, bad, 999), SESS_TOKEN_MISMATCH);
    memcpy(bad, ta, sizeof ta);
    bad[SESS_TOKEN_LEN - 1] = '\0';
    assert_int_equal(sess_token_verify(&a, bad, 999), SESS_TOKEN_MISMATCH);
    memcpy(bad, ta, sizeof ta);
    bad[SESS_TOKEN_LEN] = 'x';
    bad[SESS_TOKEN_LEN + 1] = '\0';
    assert_int_equal(sess_token_verify(&a, bad, 999), SESS_TOKEN_MISMATCH);
    assert_int_equal(sess_token_verify(&a, NULL, 999), SESS_TOKEN_MISMATCH);
    assert_int_equal(sess_token_verify(&a, "", 999), SESS_TOKEN_MISMATCH);
    /* Re-minting replaces: the old text stops working. */
    char tc[SESS_TOKEN_LEN + 1];
    assert_int_equal(sess_token_mint(&a, 1000, tc), 0);
    assert_int_equal(sess_token_verify(&a, ta, 999), SESS_TOKEN_MISMATCH);
    assert_int_equal(sess_token_verify(&a, tc, 999), SESS_TOKEN_VALID);
}

static int create_ok(const char *body, struct sess_spec *spec)
{
    struct spaced_err e = {0};
    int rc = sess_req_create(body, strlen(body), spec, &e);
    if (rc < 0)
        print_error("unexpected error for %s: %s\n", body, e.message);
    return rc;
}

static void create_bad(const char *body, int status, const char *code, const char *needle)
{
    struct sess_spec spec;
    struct spaced_err e = {0};
    assert_int_equal(sess_req_create(body, strlen(body), &spec, &e), -1);
    assert_null(spec.exec);
    assert_int_equal(e.status, status);
    assert_string_equal(e.code, code);
    if (!strstr(e.message, needle))
        fail_msg("message \"%s\" lacks \"%s\" (body %s)", e.message, needle, body);
}

static void test_create_valid(void **state)
{
    (void)state;
    struct sess_spec s;
    assert_int_equal(create_ok("{\"argv\":[\"ls\",\"-l\"]}", &s), 0);
    char *j = json_dumps(s.exec, JSON_COMPACT | JSON_SORT_KEYS);
    assert_string_equal(j, "{\"argv\":[\"ls\",\"-l\"],\"op\":\"exec\",\"stdin\":false}");
    free(j);
    assert_false(s.pty);
    assert_int_equal(s.token_ttl_s, SESS_TOKEN_TTL_DEFAULT_S);
    sess_spec_clear(&s);

    assert_int_equal(create_ok("{\"cmd\":\"echo hi >&2\",\"env\":{\"A\":\"1\"},\"cwd\":\"/tmp\","
                               "\"user\":\"nobody\",\"pty\":{\"rows\":40,\"cols\":100},"
                               "\"stdin\":true,\"timeout\":30,\"token_ttl\":5,\"tag\":\"t\"}",
                               &s),
                     0);
    j = json_dumps(s.exec, JSON_COMPACT | JSON_SORT_KEYS);
    assert_string_equal(j, "{\"cmd\":\"echo hi >&2\",\"cwd\":\"/tmp\",\"env\":{\"A\":\"1\"},"
                           "\"op\":\"exec\",\"pty\":{\"cols\":100,\"rows\":40},\"stdin\":true,"
                           "\"tag\":\"t\",\"user\":\"nobody\"}");
    free(j);
    assert_true(s.pty);
    assert_true(s.stdin_open);
    assert_int_equal(s.timeout_s, 30);
    assert_int_equal(s.token_ttl_s, 5);
    sess_spec_clear(&s);

    /* pty: true means a default 24x80 terminal; nulls mean absent. */
    assert_int_equal(create_ok("{\"cmd\":\"x\",\"pty\":true,\"env\":null,\"argv\":null}", &s), 0);
    assert_true(s.pty);
    sess_spec_clear(&s);
}

static void test_create_invalid(void **state)
{
    (void)state;
    create_bad("", 400, "invalid_json", "JSON object");
    create_bad("[1]", 400, "invalid_json", "JSON object");
    create_bad("{\"cmd\":", 400, "invalid_json", "not valid JSON");
    create_bad("{\"cmd\":\"a\",\"cmd\":\"b\"}", 400, "invalid_json", "not valid JSON");
    create_bad("{}", 400, "invalid_request", "exactly one of argv");
    create_bad("{\"cmd\":\"a\",\"argv\":[\"b\"]}", 400, "invalid_request", "exactly one");
    create_bad("{\"cmd\":\"\"}", 400, "invalid_request", "cmd must be");
    create_bad("{\"cmd\":5}", 400, "invalid_request", "cmd must be a string");
    create_bad("{\"argv\":[]}", 400, "invalid_request", "argv must be");
    create_bad("{\"argv\":\"ls\"}", 400, "invalid_request", "argv must be");
    create_bad("{\"argv\":[\"\"]}", 400, "invalid_request", "argv[0]");
    create_bad("{\"argv\":[\"ls\",3]}", 400, "invalid_request", "argv[1]");
    create_bad("{\"cmd\":\"x\",\"bogus\":1}", 400, "unknown_field", "bogus");
    create_bad("{\"cmd\":\"x\",\"env\":[]}", 400, "invalid_request", "env must be");
    create_bad("{\"cmd\":\"x\",\"env\":{\"A=B\":\"1\"}}", 400, "invalid_request", "env names");
    create_bad("{\"cmd\":\"x\",\"env\":{\"\":\"1\"}}", 400, "invalid_request", "env names");
    create_bad("{\"cmd\":\"x\",\"env\":{\"A\":1}}", 400, "invalid_request", "env values");
    create_bad("{\"cmd\":\"x\",\"cwd\":\"\"}", 400, "invalid_request", "cwd is required");
    create_bad("{\"cmd\":\"x\",\"cwd\":\"/a\\nb\"}", 400, "invalid_request", "control");
    create_bad("{\"cmd\":\"x\",\"user\":\"-rf\"}", 400, "invalid_request", "user must");
    create_bad("{\"cmd\":\"x\",\"user\":\"a b\"}", 400, "invalid_request", "user must");
    create_bad("{\"cmd\":\"x\",\"pty\":{\"rows\":0}}", 400, "invalid_request", "rows");
    create_bad("{\"cmd\":\"x\",\"pty\":{\"rows\":5,\"cols\":99999}}", 400, "invalid_request",
               "cols");
    create_bad("{\"cmd\":\"x\",\"pty\":{\"rows\":5,\"x\":1}}", 400, "unknown_field", "\"x\"");
    create_bad("{\"cmd\":\"x\",\"pty\":7}", 400, "invalid_request", "pty must");
    create_bad("{\"cmd\":\"x\",\"stdin\":1}", 400, "invalid_request", "stdin");
    create_bad("{\"cmd\":\"x\",\"timeout\":-1}", 400, "invalid_request", "timeout");
    create_bad("{\"cmd\":\"x\",\"timeout\":1.5}", 400, "invalid_request", "timeout");
    create_bad("{\"cmd\":\"x\",\"token_ttl\":0}", 400, "invalid_request", "token_ttl");
    create_bad("{\"cmd\":\"x\",\"tag\":\"\\u0001\"}", 400, "invalid_request", "tag");
    create_bad("{\"cmd\":\"a\\u0000b\"}", 400, "invalid_json", "not valid JSON");

    /* Oversized requests are refused before they reach the agent's 64 KiB limit. */
    size_t n = 70000;
    char *big = malloc(n + 32);
    strcpy(big, "{\"cmd\":\"");
    memset(big + 8, 'a', n);
    strcpy(big + 8 + n, "\"}");
    create_bad(big, 400, "invalid_request", "cmd must be");
    strcpy(big, "{\"argv\":[\"a\"],\"env\":{\"A\":\"");
    size_t h = strlen(big);
    memset(big + h, 'b', n - h);
    strcpy(big + n, "\"}}");
    create_bad(big, 400, "invalid_request", "exceed");
    free(big);
}

static void test_signal_resize(void **state)
{
    (void)state;
    struct spaced_err e;
    int sig = 0;
    unsigned rows = 0, cols = 0;
    assert_int_equal(sess_req_signal("{\"signal\":\"TERM\"}", 17, &sig, &e), 0);
    assert_int_equal(sig, 15);
    assert_int_equal(sess_req_signal("{\"signal\":\"sigkill\"}", 20, &sig, &e), 0);
    assert_int_equal(sig, 9);
    assert_int_equal(sess_req_signal("{\"signal\":2}", 12, &sig, &e), 0);
    assert_int_equal(sig, 2);
    assert_int_equal(sess_req_signal("{\"signal\":0}", 12, &sig, &e), -1);
    assert_int_equal(sess_req_signal("{\"signal\":65}", 13, &sig, &e), -1);
    assert_int_equal(sess_req_signal("{\"signal\":\"NOPE\"}", 17, &sig, &e), -1);
    assert_int_equal(e.status, 400);
    assert_int_equal(sess_req_signal("{}", 2, &sig, &e), -1);
    assert_int_equal(sess_req_signal("{\"signal\":9,\"x\":1}", 18, &sig, &e), -1);
    assert_string_equal(e.code, "unknown_field");

    assert_int_equal(sess_req_resize("{\"rows\":50,\"cols\":132}", 22, &rows, &cols, &e), 0);
    assert_int_equal(rows, 50);
    assert_int_equal(cols, 132);
    assert_int_equal(sess_req_resize("{\"rows\":50}", 11, &rows, &cols, &e), -1);
    assert_int_equal(sess_req_resize("{\"rows\":0,\"cols\":1}", 19, &rows, &cols, &e), -1);
    assert_int_equal(sess_req_resize("{\"rows\":\"5\",\"cols\":1}", 21, &rows, &cols, &e), -1);
}

static void test_queries(void **state)
{
    (void)state;
    struct spaced_err e;
    int64_t v = 7;
    bool b = false;
    int mode = -1;
    assert_int_equal(sess_req_uint(NULL, "depth", 1, 16, &v, &e), 0);
    assert_int_equal(v, 7);
    assert_int_equal(sess_req_uint("3", "depth", 1, 16, &v, &e), 0);
    assert_int_equal(v, 3);
    assert_int_equal(sess_req_uint("17", "depth", 1, 16, &v, &e), -1);
    assert_non_null(strstr(e.message, "depth"));
    assert_int_equal(sess_req_uint("-1", "depth", 0, 16, &v, &e), -1);
    assert_int_equal(sess_req_uint("", "depth", 0, 16, &v, &e), -1);
    assert_int_equal(sess_req_uint("1x", "depth", 0, 16, &v, &e), -1);
    assert_int_equal(sess_req_uint("99999999999999999999", "d", 0, INT64_MAX, &v, &e), -1);

    assert_int_equal(sess_req_bool("true", "recursive", &b, &e), 0);
    assert_true(b);
    assert_int_equal(sess_req_bool("0", "recursive", &b, &e), 0);
    assert_false(b);
    assert_int_equal(sess_req_bool("maybe", "recursive", &b, &e), -1);

    assert_int_equal(sess_req_mode("0644", &mode, &e), 0);
    assert_int_equal(mode, 0644);
    assert_int_equal(sess_req_mode("755", &mode, &e), 0);
    assert_int_equal(mode, 0755);
    assert_int_equal(sess_req_mode("0999", &mode, &e), -1);
    assert_int_equal(sess_req_mode("17777", &mode, &e), -1);
    assert_int_equal(sess_req_mode("", &mode, &e), -1);

    assert_int_equal(sess_req_path("/a/b", "path", &e), 0);
    assert_int_equal(sess_req_path("rel/ok", "path", &e), 0);
    assert_int_equal(sess_req_path(NULL, "path", &e), -1);
    assert_int_equal(sess_req_path("", "path", &e), -1);
    assert_int_equal(sess_req_path("/a\tb", "path", &e), -1);
    char *longp = malloc(SESS_PATH_MAX + 2);
    memset(longp, 'a', SESS_PATH_MAX + 1);
    longp[SESS_PATH_MAX + 1] = '\0';
    assert_int_equal(sess_req_path(longp, "path", &e), -1);
    free(longp);
}

static void test_mkdir_rename(void **state)
{
    (void)state;
    struct spaced_err e;
    const char *b = "{\"path\":\"/x/y\",\"mode\":448,\"parents\":false}";
    json_t *r = sess_req_mkdir(b, strlen(b), &e);
    assert_non_null(r);
    char *j = json_dumps(r, JSON_COMPACT | JSON_SORT_KEYS);
    assert_string_equal(j, "{\"mode\":448,\"op\":\"mkdir\",\"parents\":false,\"path\":\"/x/y\"}");
    free(j);
    json_decref(r);
    b = "{\"path\":\"/x\",\"mode\":9999}";
    assert_null(sess_req_mkdir(b, strlen(b), &e));
    b = "{\"mode\":1}";
    assert_null(sess_req_mkdir(b, strlen(b), &e));
    assert_non_null(strstr(e.message, "path is required"));

    b = "{\"from\":\"/a\",\"to\":\"/b\",\"user\":\"root\"}";
    r = sess_req_rename(b, strlen(b), &e);
    assert_non_null(r);
    j = json_dumps(r, JSON_COMPACT | JSON_SORT_KEYS);
    assert_string_equal(j, "{\"from\":\"/a\",\"op\":\"rename\",\"to\":\"/b\",\"user\":\"root\"}");
    free(j);
    json_decref(r);
    b = "{\"from\":\"/a\"}";
    assert_null(sess_req_rename(b, strlen(b), &e));
    assert_non_null(strstr(e.message, "to is required"));
    b = "{\"from\":\"/a\",\"to\":\"/b\",\"over\":true}";
    assert_null(sess_req_rename(b, strlen(b), &e));
    assert_string_equal(e.code, "unknown_field");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_token_mint_verify), cmocka_unit_test(test_create_valid),
        cmocka_unit_test(test_create_invalid),    cmocka_unit_test(test_signal_resize),
        cmocka_unit_test(test_queries),           cmocka_unit_test(test_mkdir_rename),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
