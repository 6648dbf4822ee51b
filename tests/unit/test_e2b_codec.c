/* Unit tests for the pure pieces of the E2B layer: envelopes, protobuf-JSON, errors,
 * paths, query decoding, signatures, tokens. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "daemon/e2b/e2b_envelope.h"
#include "daemon/e2b/e2b_error.h"
#include "daemon/e2b/e2b_fsmsg.h"
#include "daemon/e2b/e2b_internal.h"
#include "daemon/e2b/e2b_pbjson.h"
#include "daemon/e2b/e2b_procmsg.h"
#include "daemon/e2b/e2b_util.h"

static char *dump(const json_t *j)
{
    return json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
}

static void assert_json(json_t *j, const char *want)
{
    assert_non_null(j);
    char *s = dump(j);
    assert_string_equal(s, want);
    free(s);
    json_decref(j);
}

static void test_envelope_roundtrip(void **state)
{
    (void)state;
    json_t *m = e2b_proc_ev_start(1000);
    size_t n;
    uint8_t *b = e2b_env_encode(m, 0, &n);
    json_decref(m);
    assert_non_null(b);
    assert_int_equal(n, 5 + 32);
    assert_int_equal(b[0], 0);
    assert_int_equal(b[4], 32);
    assert_memory_equal(b + 5, "{\"event\":{\"start\":{\"pid\":1000}}}", 32);
    free(b);

    uint8_t *end = e2b_env_encode_end(NULL, &n);
    assert_int_equal(n, 7);
    assert_memory_equal(end, "\x02\x00\x00\x00\x02{}", 7);
    free(end);

    struct e2b_err err = {0};
    e2b_err_set(&err, E2B_NOT_FOUND, "process with pid %d not found", 7);
    end = e2b_env_encode_end(&err, &n);
    assert_int_equal(end[0], 2);
    assert_memory_equal(end + 5, "{\"error\":{\"code\":\"not_found\",", 29);
    free(end);
}

static void test_envelope_parse_errors(void **state)
{
    (void)state;
    struct e2b_err err = {0};
    struct e2b_env env;
    const uint8_t partial[] = {0, 0, 0, 0, 9, '{'};
    assert_int_equal(e2b_env_parse(partial, 3, 100, &env, &err), 0);
    assert_int_equal(e2b_env_parse(partial, sizeof partial, 100, &env, &err), 0);
    const uint8_t huge[] = {0, 0x7f, 0, 0, 0};
    assert_int_equal(e2b_env_parse(huge, 5, E2B_ENV_MAX_PAYLOAD, &env, &err), -1);
    assert_int_equal(err.code, E2B_RESOURCE_EXHAUSTED);
    const uint8_t comp[] = {1, 0, 0, 0, 0};
    assert_int_equal(e2b_env_parse(comp, 5, 100, &env, &err), -1);
    const uint8_t badflag[] = {0x80, 0, 0, 0, 0};
    assert_int_equal(e2b_env_parse(badflag, 5, 100, &env, &err), -1);

    const uint8_t ok[] = "\x00\x00\x00\x00\x02{}";
    json_t *j = e2b_env_parse_single(ok, 7, &err);
    assert_non_null(j);
    json_decref(j);
    assert_null(e2b_env_parse_single(ok, 6, &err));           /* truncated */
    const uint8_t extra[] = "\x00\x00\x00\x00\x02{}x";
    assert_null(e2b_env_parse_single(extra, 8, &err));        /* trailing bytes */
    const uint8_t arr[] = "\x00\x00\x00\x00\x02[]";
    assert_null(e2b_env_parse_single(arr, 7, &err));          /* not an object */
    assert_int_equal(err.code, E2B_INVALID_ARGUMENT);
    const uint8_t endf[] = "\x02\x00\x00\x00\x02{}";
    assert_null(e2b_env_parse_single(endf, 7, &err));
}

static void test_error_shapes(void **state)
{
    (void)state;
    struct e2b_err err = {0};
    e2b_err_set(&err, E2B_NOT_FOUND, "file \x01\xff not found");
    assert_string_equal(err.msg, "file ?? not found");
    assert_json(e2b_connect_error_json(&err), "{\"code\":\"not_found\",\"message\":\"file ?? not found\"}");
    assert_json(e2b_rest_error_json(404, "x"), "{\"code\":404,\"message\":\"x\"}");
    assert_int_equal(e2b_code_http(E2B_NOT_FOUND), 404);
    assert_int_equal(e2b_code_http(E2B_ALREADY_EXISTS), 409);
    assert_int_equal(e2b_code_http(E2B_UNAUTHENTICATED), 401);
    assert_int_equal(e2b_code_rest(E2B_UNAVAILABLE), 502);
    assert_string_equal(e2b_code_name(E2B_DEADLINE_EXCEEDED), "deadline_exceeded");
    assert_string_equal(e2b_code_name((enum e2b_code)99), "unknown");
}

static json_t *parse(const char *s)
{
    json_t *j = json_loads(s, 0, NULL);
    assert_non_null(j);
    return j;
}

static void test_start_request(void **state)
{
    (void)state;
    struct e2b_err err = {0};
    struct e2b_proc_start st;
    json_t *r = parse("{\"process\":{\"cmd\":\"/bin/bash\",\"args\":[\"-l\",\"-c\",\"echo hi\"],"
                      "\"envs\":{\"A\":\"1\"},\"cwd\":\"\"},\"stdin\":false,"
                      "\"pty\":{\"size\":{\"cols\":100,\"rows\":\"30\"}}}");
    assert_int_equal(e2b_proc_parse_start(r, &st, &err), 0);
    assert_string_equal(st.cmd, "/bin/bash");
    assert_int_equal(json_array_size(st.args), 3);
    assert_null(st.cwd);
    assert_int_equal(st.stdin_mode, 0);
    assert_true(st.has_pty);
    assert_int_equal(st.cols, 100);
    assert_int_equal(st.rows, 30);
    json_decref(r);

    const char *bad[] = {
        "{}",
        "{\"process\":{\"cmd\":\"\"}}",
        "{\"process\":{\"cmd\":\"x\",\"args\":[1]}}",
        "{\"process\":{\"cmd\":\"x\",\"envs\":{\"A\":1}}}",
        "{\"process\":{\"cmd\":\"x\"},\"stdin\":\"yes\"}",
        "{\"process\":{\"cmd\":\"x\"},\"pty\":{\"size\":{\"cols\":-1,\"rows\":2}}}",
        "{\"process\":{\"cmd\":\"x\"},\"pty\":{\"size\":{\"cols\":0,\"rows\":2}}}",
        "{\"process\":7}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        r = parse(bad[i]);
        err.code = E2B_OK;
        assert_int_equal(e2b_proc_parse_start(r, &st, &err), -1);
        assert_int_equal(err.code, E2B_INVALID_ARGUMENT);
        json_decref(r);
    }
}

static void test_selector_input_signal(void **state)
{
    (void)state;
    struct e2b_err err = {0};
    struct e2b_proc_input in;
    json_t *r = parse("{\"process\":{\"pid\":1002},\"input\":{\"stdin\":\"aGVsbG8K\"}}");
    assert_int_equal(e2b_proc_parse_input(r, &in, &err), 0);
    assert_int_equal(in.sel.pid, 1002);
    assert_false(in.pty);
    assert_int_equal(in.len, 6);
    assert_memory_equal(in.data, "hello\n", 6);
    free(in.data);
    json_decref(r);
    /* URL-safe, unpadded base64 is accepted too. */
    r = parse("{\"process\":{\"pid\":\"5\"},\"input\":{\"pty\":\"_-8\"}}");
    assert_int_equal(e2b_proc_parse_input(r, &in, &err), 0);
    assert_true(in.pty);
    assert_int_equal(in.len, 2);
    assert_int_equal(in.data[0], 0xff);
    assert_int_equal(in.data[1], 0xef);
    free(in.data);
    json_decref(r);
    r = parse("{\"process\":{\"pid\":1},\"input\":{\"stdin\":\"!!\"}}");
    assert_int_equal(e2b_proc_parse_input(r, &in, &err), -1);
    json_decref(r);
    r = parse("{\"process\":{\"pid\":1,\"tag\":\"x\"},\"input\":{\"stdin\":\"\"}}");
    assert_int_equal(e2b_proc_parse_input(r, &in, &err), -1);
    json_decref(r);

    struct e2b_proc_selector sel;
    int sig;
    r = parse("{\"process\":{\"pid\":7},\"signal\":\"SIGNAL_SIGKILL\"}");
    assert_int_equal(e2b_proc_parse_signal(r, &sel, &sig, &err), 0);
    assert_int_equal(sig, 9);
    json_decref(r);
    r = parse("{\"process\":{\"tag\":\"t\"},\"signal\":15}");
    assert_int_equal(e2b_proc_parse_signal(r, &sel, &sig, &err), 0);
    assert_true(sel.by_tag);
    assert_string_equal(sel.tag, "t");
    assert_int_equal(sig, 15);
    json_decref(r);
    r = parse("{\"process\":{\"pid\":7},\"signal\":\"SIGNAL_SIGHUP\"}");
    assert_int_equal(e2b_proc_parse_signal(r, &sel, &sig, &err), -1);
    json_decref(r);
    r = parse("{\"process\":{\"pid\":4294967296}}");
    assert_int_equal(e2b_proc_parse_selector(r, &sel, &err), -1);
    json_decref(r);
    /* snake_case and camelCase of the same field at once is ambiguous. */
    r = parse("{\"watcherId\":\"a\",\"watcher_id\":\"b\"}");
    const char *id;
    assert_int_equal(e2b_fs_parse_watcher_id(r, &id, &err), -1);
    json_decref(r);
    r = parse("{\"watcher_id\":\"b\"}");
    assert_int_equal(e2b_fs_parse_watcher_id(r, &id, &err), 0);
    assert_string_equal(id, "b");
    json_decref(r);
}

static void test_events(void **state)
{
    (void)state;
    assert_json(e2b_proc_ev_data(E2B_STREAM_STDOUT, (const uint8_t *)"hi\n", 3),
                "{\"event\":{\"data\":{\"stdout\":\"aGkK\"}}}");
    assert_json(e2b_proc_ev_end(0, 0),
                "{\"event\":{\"end\":{\"exitCode\":0,\"exited\":true,\"status\":\"exit status 0\"}}}");
    assert_json(e2b_proc_ev_end(3, 0),
                "{\"event\":{\"end\":{\"error\":\"exit status 3\",\"exitCode\":3,\"exited\":true,"
                "\"status\":\"exit status 3\"}}}");
    assert_json(e2b_proc_ev_end(0, 9),
                "{\"event\":{\"end\":{\"error\":\"signal: killed\",\"exitCode\":-1,\"exited\":false,"
                "\"status\":\"signal: killed\"}}}");
    assert_json(e2b_proc_ev_keepalive(), "{\"event\":{\"keepalive\":{}}}");
    assert_json(e2b_proc_info(5, NULL, "/bin/bash", NULL, NULL, NULL),
                "{\"config\":{\"args\":[],\"cmd\":\"/bin/bash\",\"envs\":{}},\"pid\":5}");
}

static void test_entry(void **state)
{
    (void)state;
    struct e2b_entry e = {.name = "a.txt", .path = "/home/user/a.txt", .type = E2B_FILE_FILE,
                          .size = 9, .mode = 0100644, .owner = "user", .group = "user",
                          .mtime_sec = 1700000000, .mtime_nsec = 5};
    assert_json(e2b_fs_entry_json(&e),
                "{\"group\":\"user\",\"mode\":420,\"modifiedTime\":\"2023-11-14T22:13:20.000000005Z\","
                "\"name\":\"a.txt\",\"owner\":\"user\",\"path\":\"/home/user/a.txt\","
                "\"permissions\":\"-rw-r--r--\",\"size\":\"9\",\"type\":\"FILE_TYPE_FILE\"}");
    char perms[11];
    e2b_fs_permissions(E2B_FILE_DIRECTORY, false, 0755, perms);
    assert_string_equal(perms, "drwxr-xr-x");
    e2b_fs_permissions(E2B_FILE_DIRECTORY, true, 0755, perms);
    assert_string_equal(perms, "Lrwxrwxrwx");
    assert_json(e2b_fs_watch_msg("filesystem", e2b_fs_event_json("x", E2B_EVENT_CREATE, NULL)),
                "{\"filesystem\":{\"name\":\"x\",\"type\":\"EVENT_TYPE_CREATE\"}}");
    struct e2b_err err = {0};
    json_t *r = parse("{\"path\":\"/d\",\"depth\":0}");
    const char *p;
    uint32_t depth;
    assert_int_equal(e2b_fs_parse_list(r, &p, &depth, &err), 0);
    assert_int_equal(depth, 1);
    json_decref(r);
    r = parse("{\"path\":\"/d\",\"include_entry\":true,\"recursive\":true}");
    struct e2b_fs_watch w;
    assert_int_equal(e2b_fs_parse_watch(r, &w, &err), 0);
    assert_true(w.recursive && w.include_entry && !w.allow_network_mounts);
    json_decref(r);
    r = parse("{\"source\":\"a\"}");
    const char *s, *d;
    assert_int_equal(e2b_fs_parse_move(r, &s, &d, &err), -1);
    json_decref(r);
}

/* File metadata: user.e2b.* xattrs from an agent stat become EntryInfo.metadata. */
static void test_entry_metadata(void **state)
{
    (void)state;
    json_t *xa = parse("{\"user.e2b.owner\":\"alice\",\"user.other\":\"x\","
                       "\"user.e2b.\":\"empty key\",\"user.e2b.n\":3}");
    json_t *meta = e2b_xattrs_metadata(xa);
    assert_json(json_incref(meta), "{\"owner\":\"alice\"}");
    struct e2b_entry e = {.name = "m", .path = "/m", .type = E2B_FILE_FILE, .owner = "u",
                          .group = "u", .metadata = meta};
    json_t *j = e2b_fs_entry_json(&e);
    assert_json(json_incref(json_object_get(j, "metadata")), "{\"owner\":\"alice\"}");
    json_decref(j);
    json_decref(meta);
    json_decref(xa);
    assert_null(e2b_xattrs_metadata(NULL));
    json_t *st = parse("{\"name\":\"m\",\"path\":\"/m\",\"type\":\"file\"}");
    j = e2b_stat_entry(st);
    assert_null(json_object_get(j, "metadata")); /* none: no field at all */
    json_decref(j);
    json_decref(st);
}

/* Symlinks as envd reports them: the final target's type and mode, its absolute path
 * in symlinkTarget; a dangling link UNSPECIFIED; never FILE_TYPE_SYMLINK. */
static void test_symlink_entries(void **state)
{
    (void)state;
    json_t *st = parse("{\"name\":\"l\",\"path\":\"/d/l\",\"type\":\"symlink\",\"mode\":511,"
                       "\"size\":1,\"symlink_target\":\"y\",\"target\":{\"path\":\"/d/y\","
                       "\"type\":\"dir\",\"mode\":493}}");
    json_t *j = e2b_stat_entry(st);
    assert_string_equal(json_string_value(json_object_get(j, "type")), "FILE_TYPE_DIRECTORY");
    assert_string_equal(json_string_value(json_object_get(j, "symlinkTarget")), "/d/y");
    assert_int_equal(json_integer_value(json_object_get(j, "mode")), 493);
    assert_string_equal(json_string_value(json_object_get(j, "permissions")), "Lrwxrwxrwx");
    json_decref(j);
    json_decref(st);
    st = parse("{\"name\":\"b\",\"path\":\"/d/b\",\"type\":\"symlink\",\"mode\":511,"
               "\"symlink_target\":\"missing\"}");
    j = e2b_stat_entry(st);
    assert_string_equal(json_string_value(json_object_get(j, "type")), "FILE_TYPE_UNSPECIFIED");
    assert_string_equal(json_string_value(json_object_get(j, "symlinkTarget")), "/d/b");
    json_decref(j);
    json_decref(st);
}

/* ListDir order: envd's walk (each directory by name, a directory before its contents). */
static void test_walk_order(void **state)
{
    (void)state;
    assert_true(e2b_walk_order("/d/a", "/d/a/x") < 0);
    assert_true(e2b_walk_order("/d/a/x", "/d/a-b") < 0);
    assert_true(e2b_walk_order("/d/a-b", "/d/b") < 0);
    assert_true(e2b_walk_order("/d/B", "/d/a") < 0); /* bytes, not locale */
    assert_int_equal(e2b_walk_order("/d/a", "/d/a"), 0);
    json_t *l = parse("[{\"path\":\"/d/b\"},{\"path\":\"/d/a-b\"},{\"path\":\"/d/a/x\"},"
                      "{\"path\":\"/d/a\"}]");
    assert_int_equal(e2b_entries_sort(l), 0);
    assert_json(l, "[{\"path\":\"/d/a\"},{\"path\":\"/d/a/x\"},{\"path\":\"/d/a-b\"},"
                   "{\"path\":\"/d/b\"}]");
}

/* Which Connection/Upgrade pairs are protocol upgrades (501 on spaced's port). */
static void test_upgrade_detect(void **state)
{
    (void)state;
    assert_true(e2b_is_upgrade("Upgrade", "websocket"));
    assert_true(e2b_is_upgrade("keep-alive, upgrade", "websocket"));
    assert_false(e2b_is_upgrade("keep-alive", "websocket"));
    assert_false(e2b_is_upgrade("Upgrade", NULL));
    assert_false(e2b_is_upgrade("upgraded", "websocket"));
    assert_false(e2b_is_upgrade(NULL, NULL));
}

/* Sandbox ports by Host or by the E2b-Sandbox-* headers; envd's own port is not one. */
static void test_port_target(void **state)
{
    (void)state;
    unsigned port = 0;
    char id[64];
    assert_true(e2b_port_target("8080-sb0123456789abcdef.localhost:7071", NULL, NULL, &port, id, sizeof id));
    assert_int_equal(port, 8080);
    assert_string_equal(id, "sb0123456789abcdef");
    assert_false(e2b_port_target("49983-sb0123456789abcdef.localhost", NULL, NULL, &port, id, sizeof id));
    assert_false(e2b_port_target("70000-sb0.localhost", NULL, NULL, &port, id, sizeof id));
    assert_false(e2b_port_target("example.com", NULL, NULL, &port, id, sizeof id));
    assert_true(e2b_port_target("127.0.0.1:7070", "sb1", "3000", &port, id, sizeof id));
    assert_int_equal(port, 3000);
    assert_string_equal(id, "sb1");
    assert_false(e2b_port_target(NULL, "sb1", "49983", &port, id, sizeof id));
    assert_false(e2b_port_target(NULL, "sb1", "3000x", &port, id, sizeof id));
    assert_false(e2b_port_target(NULL, "sb1", "0", &port, id, sizeof id));
}

static void test_base64(void **state)
{
    (void)state;
    const char *in[] = {"", "f", "fo", "foo", "foob", "fooba", "foobar"};
    const char *want[] = {"", "Zg==", "Zm8=", "Zm9v", "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy"};
    for (size_t i = 0; i < 7; i++) {
        char *e = e2b_b64_encode((const uint8_t *)in[i], strlen(in[i]));
        assert_string_equal(e, want[i]);
        size_t n;
        uint8_t *d = e2b_b64_decode(e, strlen(e), &n);
        assert_int_equal(n, strlen(in[i]));
        assert_memory_equal(d, in[i], n);
        free(d);
        free(e);
    }
    size_t n;
    assert_null(e2b_b64_decode("Zg=", 3, &n));
    assert_null(e2b_b64_decode("Z", 1, &n));
    assert_null(e2b_b64_decode("Zm9v\n", 5, &n));
}

static void test_paths(void **state)
{
    (void)state;
    struct e2b_err err = {0};
    const char *cases[][2] = {
        {"a.txt", "/home/user/a.txt"}, {"~", "/home/user"},       {"~/x/../y", "/home/user/y"},
        {"/a//b/./c/", "/a/b/c"},      {"/../../etc", "/etc"},    {"/", "/"},
        {"~x", "/home/user/~x"},       {"..", "/home"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *p = e2b_path_resolve(cases[i][0], "/home/user", &err);
        assert_non_null(p);
        assert_string_equal(p, cases[i][1]);
        free(p);
    }
    assert_null(e2b_path_resolve("", "/home/user", &err));
}

static void test_metadata_filter(void **state)
{
    (void)state;
    struct e2b_err err = {0};
    /* Raw query a%252520b%3Dc%252526d, after the HTTP layer's decoding: */
    assert_json(e2b_metadata_filter("a%2520b=c%2526d&x=y", &err),
                "{\"a b\":\"c&d\",\"x\":\"y\"}");
    assert_json(e2b_metadata_filter("", &err), "{}");
    assert_json(e2b_metadata_filter("k=100%25", &err), "{\"k\":\"100%\"}");
    assert_null(e2b_metadata_filter("novalue", &err));
    assert_null(e2b_metadata_filter("=v", &err));
    assert_null(e2b_metadata_filter("k=%2500", &err));
    assert_true(e2b_csv_has("running,paused", "paused"));
    assert_false(e2b_csv_has("running,paused", "pause"));
    assert_false(e2b_csv_has(NULL, "x"));
}

static void test_signature_and_tokens(void **state)
{
    (void)state;
    char sig[E2B_SIG_MAX];
    assert_int_equal(e2b_sign("/home/user/a.txt", "read", "", "tok", NULL, sig), 0);
    /* "v1_" + 43 characters of unpadded base64 of a SHA-256. */
    assert_int_equal(strlen(sig), 46);
    assert_memory_equal(sig, "v1_", 3);
    struct e2b_err err = {0};
    assert_int_equal(e2b_sign_check("/home/user/a.txt", "read", "", "tok", sig, NULL, 0, &err), 0);
    assert_int_equal(e2b_sign_check("/home/user/a.txt", "write", "", "tok", sig, NULL, 0, &err), -1);
    assert_int_equal(err.code, E2B_UNAUTHENTICATED);
    assert_int_equal(e2b_sign("/p", "write", "user", "tok", "2000", sig), 0);
    assert_int_equal(e2b_sign_check("/p", "write", "user", "tok", sig, "2000", 1999, &err), 0);
    assert_int_equal(e2b_sign_check("/p", "write", "user", "tok", sig, "2000", 2001, &err), -1);
    assert_string_equal(err.msg, "signature is already expired");
    assert_int_equal(e2b_sign_check("/p", "write", "user", "tok", sig, "2000", 0, &err), 0);
    assert_int_equal(e2b_sign_check("/p", "write", "user", "tok2", sig, "2000", 2001, &err), -1);
    assert_string_equal(err.msg, "invalid signature");
    assert_int_equal(e2b_sign_check("/p", "write", "user", "tok", sig, "20x", 1, &err), -1);

    char id[64];
    assert_int_equal(e2b_token_sandbox("sb0011.4102444800000.abcdef", id, sizeof id), 0);
    assert_string_equal(id, "sb0011");
    assert_int_equal(e2b_token_sandbox("sb0011.x", id, 4), -1);
    assert_int_equal(e2b_token_sandbox("nodot", id, sizeof id), -1);
    assert_int_equal(e2b_token_sandbox(".x", id, sizeof id), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_envelope_roundtrip),
        cmocka_unit_test(test_envelope_parse_errors),
        cmocka_unit_test(test_error_shapes),
        cmocka_unit_test(test_start_request),
        cmocka_unit_test(test_selector_input_signal),
        cmocka_unit_test(test_events),
        cmocka_unit_test(test_entry),
        cmocka_unit_test(test_entry_metadata),
        cmocka_unit_test(test_symlink_entries),
        cmocka_unit_test(test_walk_order),
        cmocka_unit_test(test_upgrade_detect),
        cmocka_unit_test(test_port_target),
        cmocka_unit_test(test_base64),
        cmocka_unit_test(test_paths),
        cmocka_unit_test(test_metadata_filter),
        cmocka_unit_test(test_signature_and_tokens),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
