/* Tests of the `space` CLI commands against a fake spaced (the real HTTP server with
 * canned routes): create waits for its operation and prints the id, exec streams
 * output and re-attaches with Last-Event-ID after a dropped stream, cp streams files
 * both ways, ls follows pagination, API errors become one line and exit status 1. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <fcntl.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "cli/cli_http.h"
#include "cli/cli_sse.h"
#include "daemon/http/sse.h"
#include "log.h"
#include "test_http_harness.h"

static struct th_server T;
static atomic_int op_polls;
static char last_event_id_seen[32];
static char uploaded_path[256];
static char last_body[512];  /* the last JSON body create or network PUT received */
static uint64_t uploaded_bytes, uploaded_sum;

#define FILE_BYTES (3 * 1024 * 1024 + 17)

static bool authorised(struct http_req *req, const char *want)
{
    const char *a = http_req_header(req, "Authorization");
    if (a && strncmp(a, "Bearer ", 7) == 0 && strcmp(a + 7, want) == 0)
        return true;
    http_reply_error(req, 401, "unauthorized", "bad key");
    return false;
}

static void reply_json_text(struct http_req *req, int status, const char *text)
{
    http_reply(req, status, "application/json", text, strlen(text));
}

static void keep_body(const char *data, size_t len)
{
    snprintf(last_body, sizeof last_body, "%.*s", (int)len, data);
}

static void create_body(struct http_req *req, const char *data, size_t len, void *arg)
{
    keep_body(data, len);
    reply_json_text(req, 202, "{\"operation\":{\"id\":\"op1\",\"state\":\"pending\"},"
                              "\"sandbox\":{\"id\":\"sb0123456789abcdef\"}}");
}

static void h_create(struct http_req *req, void *arg)
{
    if (authorised(req, "testkey"))
        http_req_read_body(req, 0, create_body, NULL);
}

static void h_net_get(struct http_req *req, void *arg)
{
    if (!authorised(req, "testkey"))
        return;
    if (strcmp(router_param(req, "id"), "sbgone") == 0)
        http_reply_error(req, 404, "not_found", "sandbox sbgone not found");
    else
        reply_json_text(req, 200, "{\"mode\":\"allowlist\",\"allow\":[\"a.test\"],\"nic\":true}");
}

/* Answers with the policy it was given (as spaced answers with the policy in force). */
static void net_put_body(struct http_req *req, const char *data, size_t len, void *arg)
{
    keep_body(data, len);
    http_reply(req, 200, "application/json", data, len);
}

static void h_net_put(struct http_req *req, void *arg)
{
    if (authorised(req, "testkey"))
        http_req_read_body(req, 0, net_put_body, NULL);
}

static void h_net_log(struct http_req *req, void *arg)
{
    if (!authorised(req, "testkey"))
        return;
    const char *since = http_req_query(req, "since");
    char text[160];
    snprintf(text, sizeof text, "{\"entries\":[{\"seq\":%s,\"name\":\"a.test\",\"allowed\":true},"
                                "{\"seq\":9,\"name\":\"b.test\",\"allowed\":false}]}",
             since ? since : "0");
    reply_json_text(req, 200, text);
}

static void h_op(struct http_req *req, void *arg)
{
    if (!authorised(req, "testkey"))
        return;
    if (strcmp(router_param(req, "id"), "opfail") == 0) {
        reply_json_text(req, 200, "{\"operation\":{\"id\":\"opfail\",\"state\":\"failed\","
                                  "\"error\":{\"code\":\"boom\",\"message\":\"it broke\"}}}");
        return;
    }
    int n = atomic_fetch_add(&op_polls, 1);
    reply_json_text(req, 200, n < 2 ? "{\"operation\":{\"state\":\"running\",\"progress\":50}}"
                                    : "{\"operation\":{\"state\":\"succeeded\",\"progress\":100}}");
}

static void h_pause(struct http_req *req, void *arg)
{
    if (authorised(req, "testkey"))
        reply_json_text(req, 202, "{\"operation\":{\"id\":\"opfail\"}}");
}

static void h_list(struct http_req *req, void *arg)
{
    if (!authorised(req, "testkey"))
        return;
    const char *cur = http_req_query(req, "cursor");
    if (!cur)
        reply_json_text(req, 200, "{\"sandboxes\":[{\"id\":\"sbA\",\"state\":\"running\","
                                  "\"template\":\"base\",\"vcpus\":1,\"memory_mib\":256}],"
                                  "\"next_cursor\":\"sbA\"}");
    else
        reply_json_text(req, 200, "{\"sandboxes\":[{\"id\":\"sbB\",\"state\":\"paused\"}],"
                                  "\"next_cursor\":null}");
}

/* sbevilurl / sbevilid / sbeviltok: a compromised server's answers, which the CLI must
 * refuse before they reach a request line or header. */
static void h_session(struct http_req *req, void *arg)
{
    if (!authorised(req, "testkey"))
        return;
    const char *id = router_param(req, "id");
    if (strcmp(id, "sbevilurl") == 0)
        reply_json_text(req, 201, "{\"id\":\"ss1\",\"attach_url\":\"/a\\r\\nX-Evil: 1\","
                                  "\"attach_token\":\"sat_tok\"}");
    else if (strcmp(id, "sbevilid") == 0)
        reply_json_text(req, 201, "{\"id\":\"../../keys\",\"attach_url\":\"/attach/ss1\","
                                  "\"attach_token\":\"sat_tok\"}");
    else if (strcmp(id, "sbeviltok") == 0)
        reply_json_text(req, 201, "{\"id\":\"ss1\",\"attach_url\":\"/attach/ss1\","
                                  "\"attach_token\":\"sat tok\\nX: y\"}");
    else
        reply_json_text(req, 201, "{\"id\":\"ss1\",\"attach_url\":\"/attach/ss1\","
                                  "\"attach_token\":\"sat_tok\"}");
}

/* The console log: escape sequences from the guest; sbhuge: more than the CLI takes. */
static void h_logs(struct http_req *req, void *arg)
{
    if (!authorised(req, "testkey"))
        return;
    if (strcmp(router_param(req, "id"), "sbhuge") == 0) {
        size_t n = 1024 * 1024 + 1;
        char *big = malloc(n);
        memset(big, 'x', n);
        http_reply(req, 200, "text/plain", big, n);
        free(big);
        return;
    }
    const char *tail = http_req_query(req, "tail");
    static const char log_text[] = "boot \x1b]0;pwned\x07ok\r\n\xc3\xa9\n";
    http_reply(req, 200, "text/plain", log_text, tail ? 3 : sizeof log_text - 1);
}

#define SEND(id, event, lit) sse_send(req, id, event, lit, strlen(lit))

/* First attach: start + two outputs, then the stream breaks without an exit. The
 * re-attach (Last-Event-ID: 3) gets the rest. */
static void h_attach(struct http_req *req, void *arg)
{
    if (!authorised(req, "sat_tok"))
        return;
    const char *last = http_req_header(req, "Last-Event-ID");
    snprintf(last_event_id_seen, sizeof last_event_id_seen, "%s", last ? last : "");
    sse_start(req);
    if (!last) {
        SEND(1, "start", "{\"pid\":7}");
        SEND(2, "stdout", "{\"data\":\"aGVsbG8K\"}");
        SEND(3, "stderr", "{\"data\":\"b29wcwo=\"}");
        http_stream_end(req);
        return;
    }
    sse_keepalive(req);
    SEND(4, "stdout", "{\"data\":\"bW9yZQ==\"}");
    SEND(5, "exit", "{\"code\":3,\"signal\":null}");
    http_stream_end(req);
}

static void upload_chunk(struct http_req *req, const char *data, size_t len, void *arg)
{
    for (size_t i = 0; i < len; i++)
        uploaded_sum += (unsigned char)data[i];
    uploaded_bytes += len;
}

static void upload_end(struct http_req *req, void *arg)
{
    reply_json_text(req, 200, "{\"file\":{}}");
}

static void h_put_file(struct http_req *req, void *arg)
{
    if (!authorised(req, "testkey"))
        return;
    snprintf(uploaded_path, sizeof uploaded_path, "%s", http_req_query(req, "path"));
    uploaded_bytes = uploaded_sum = 0;
    http_req_stream_body(req, upload_chunk, upload_end, NULL);
}

static void h_get_file(struct http_req *req, void *arg)
{
    if (!authorised(req, "testkey"))
        return;
    if (strcmp(http_req_query(req, "path"), "/missing") == 0) {
        http_reply_error(req, 404, "not_found", "no such file: /missing");
        return;
    }
    char *buf = malloc(FILE_BYTES);
    for (size_t i = 0; i < FILE_BYTES; i++)
        buf[i] = (char)(i % 241);
    http_stream_start(req, 200, "application/octet-stream", FILE_BYTES);
    for (size_t off = 0; off < FILE_BYTES; off += 65536)
        http_stream_write(req, buf + off, FILE_BYTES - off < 65536 ? FILE_BYTES - off : 65536);
    http_stream_end(req);
    free(buf);
}

static void setup(struct router *r, struct th_server *t)
{
    router_add(r, "POST", "/v1/sandboxes", h_create, NULL);
    router_add(r, "GET", "/v1/sandboxes", h_list, NULL);
    router_add(r, "GET", "/v1/operations/{id}", h_op, NULL);
    router_add(r, "POST", "/v1/sandboxes/{id}/pause", h_pause, NULL);
    router_add(r, "POST", "/v1/sandboxes/{id}/sessions", h_session, NULL);
    router_add(r, "GET", "/attach/{sid}", h_attach, NULL);
    router_add(r, "PUT", "/v1/sandboxes/{id}/files", h_put_file, NULL);
    router_add(r, "GET", "/v1/sandboxes/{id}/files", h_get_file, NULL);
    router_add(r, "GET", "/v1/sandboxes/{id}/network", h_net_get, NULL);
    router_add(r, "PUT", "/v1/sandboxes/{id}/network", h_net_put, NULL);
    router_add(r, "GET", "/v1/sandboxes/{id}/network/log", h_net_log, NULL);
    router_add(r, "GET", "/v1/sandboxes/{id}/logs", h_logs, NULL);
}

static struct cli_ctx X;

static int start(void **state)
{
    th_start(&T, NULL, setup);
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", T.port);
    setenv("SPACE_URL", url, 1);
    setenv("SPACE_API_KEY", "testkey", 1);
    assert_int_equal(cli_ctx_init(&X), 0);
    *state = &T;
    return 0;
}

/* Runs fn with fd `which` (1 or 2) redirected to a file; returns what it wrote. */
static char *capture(int which, int (*fn)(int, char **), int argc, char **argv, int *rc)
{
    char tmpl[] = "/tmp/test_cli_XXXXXX";
    int fd = mkstemp(tmpl);
    unlink(tmpl);
    fflush(which == 1 ? stdout : stderr);
    int saved = dup(which);
    dup2(fd, which);
    *rc = fn(argc, argv);
    fflush(which == 1 ? stdout : stderr);
    dup2(saved, which);
    close(saved);
    off_t n = lseek(fd, 0, SEEK_END);
    char *out = calloc(1, (size_t)n + 1);
    assert_int_equal(pread(fd, out, (size_t)n, 0), n);
    close(fd);
    return out;
}

static int run_create(int argc, char **argv) { return cli_cmd_create(&X, argc, argv); }
static int run_exec(int argc, char **argv) { return cli_cmd_exec(&X, argc, argv); }
static int run_ls(int argc, char **argv) { return cli_cmd_ls(&X, argc, argv); }
static int run_pause(int argc, char **argv) { return cli_cmd_verb(&X, "pause", argc, argv); }
static int run_cp(int argc, char **argv) { return cli_cmd_cp(&X, argc, argv); }
static int run_network(int argc, char **argv) { return cli_cmd_network(&X, argc, argv); }
static int run_logs(int argc, char **argv) { return cli_cmd_logs(&X, argc, argv); }

static void test_create_waits(void **state)
{
    atomic_store(&op_polls, 0);
    char *argv[] = {"--template", "base", "--cpus", "2", "--memory", "512", "--timeout", "60"};
    int rc;
    char *out = capture(1, run_create, 8, argv, &rc);
    assert_int_equal(rc, 0);
    assert_string_equal(out, "sb0123456789abcdef\n");
    assert_int_equal(atomic_load(&op_polls), 3);
    free(out);
    assert_string_equal(last_body, "{\"template\":\"base\",\"vcpus\":2,\"memory_mib\":512,\"timeout\":60}");
    char *bad[] = {"--cpus", "x"};
    assert_int_equal(cli_cmd_create(&X, 2, bad), 2);
}

/* --allow (repeatable) makes an allowlist, --network none|open the other modes. */
static void test_create_network(void **state)
{
    int rc;
    char *allow[] = {"--allow", "a.test", "--allow", "203.0.113.0/24"};
    free(capture(1, run_create, 4, allow, &rc));
    assert_int_equal(rc, 0);
    assert_string_equal(last_body, "{\"network\":{\"mode\":\"allowlist\",\"allow\":"
                                   "[\"a.test\",\"203.0.113.0/24\"]},\"template\":\"python\"}");
    char *open_[] = {"--network", "open"};
    free(capture(1, run_create, 2, open_, &rc));
    assert_int_equal(rc, 0);
    assert_string_equal(last_body, "{\"network\":{\"mode\":\"open\"},\"template\":\"python\"}");
    char *both[] = {"--network", "open", "--allow", "a.test"};
    assert_int_equal(cli_cmd_create(&X, 4, both), 2);
    char *bogus[] = {"--network", "everything"};
    assert_int_equal(cli_cmd_create(&X, 2, bogus), 2);
    char *dangling[] = {"--allow"};
    assert_int_equal(cli_cmd_create(&X, 1, dangling), 2);
    /* --auto-resume is a flag: the option after it is read as an option. */
    char *ar[] = {"--auto-resume", "--template", "base"};
    free(capture(1, run_create, 3, ar, &rc));
    assert_int_equal(rc, 0);
    assert_string_equal(last_body, "{\"auto_resume\":true,\"template\":\"base\"}");
}

static void test_network_show_change_log(void **state)
{
    int rc;
    char *show[] = {"sb1"};
    char *out = capture(1, run_network, 1, show, &rc);
    assert_int_equal(rc, 0);
    assert_string_equal(out, "mode: allowlist\nnic: yes\nallow: a.test\n");
    free(out);

    char *allow[] = {"sb1", "allow", "b.test", "*.c.test"};
    out = capture(1, run_network, 4, allow, &rc);
    assert_int_equal(rc, 0);
    assert_string_equal(last_body, "{\"mode\":\"allowlist\",\"allow\":[\"b.test\",\"*.c.test\"]}");
    assert_string_equal(out, "mode: allowlist\nallow: b.test\nallow: *.c.test\n");
    free(out);
    char *open_[] = {"sb1", "open"};
    free(capture(1, run_network, 2, open_, &rc));
    assert_int_equal(rc, 0);
    assert_string_equal(last_body, "{\"mode\":\"open\"}");

    char *log_[] = {"sb1", "log", "--since", "3"};
    out = capture(1, run_network, 4, log_, &rc);
    assert_int_equal(rc, 0);
    assert_string_equal(out, "{\"seq\":3,\"name\":\"a.test\",\"allowed\":true}\n"
                             "{\"seq\":9,\"name\":\"b.test\",\"allowed\":false}\n");
    free(out);

    char *gone[] = {"sbgone"};
    char *err = capture(2, run_network, 1, gone, &rc);
    assert_int_equal(rc, 1);
    assert_non_null(strstr(err, "sandbox sbgone not found (not_found, HTTP 404)"));
    free(err);
    char *usage1[] = {"sb1", "allow"}, *usage2[] = {"sb1", "sideways"}, *usage3[] = {"sb1", "open", "x"},
         *usage4[] = {"sb1", "log", "--since", "-1"};
    assert_int_equal(cli_cmd_network(&X, 2, usage1), 2);
    assert_int_equal(cli_cmd_network(&X, 2, usage2), 2);
    assert_int_equal(cli_cmd_network(&X, 3, usage3), 2);
    assert_int_equal(cli_cmd_network(&X, 4, usage4), 2);
    assert_int_equal(cli_cmd_network(&X, 0, NULL), 2);
}

static void test_exec_reattaches(void **state)
{
    char *argv[] = {"sb1", "--", "sh", "-c", "echo hello"};
    int rc;
    char *out = capture(1, run_exec, 5, argv, &rc);
    assert_int_equal(rc, 3);
    assert_string_equal(out, "hello\nmore");
    assert_string_equal(last_event_id_seen, "3");
    free(out);
}

static void test_ls_and_errors(void **state)
{
    int rc;
    char *out = capture(1, run_ls, 0, NULL, &rc);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "sbA"));
    assert_non_null(strstr(out, "sbB"));
    free(out);
    /* A failed operation: one line naming the reason, status 1. */
    char *argv[] = {"sb1"};
    char *err = capture(2, run_pause, 1, argv, &rc);
    assert_int_equal(rc, 1);
    assert_non_null(strstr(err, "it broke (boom)"));
    free(err);
    /* A wrong key: the API's error message and a hint. */
    setenv("SPACE_API_KEY", "wrong", 1);
    assert_int_equal(cli_ctx_init(&X), 0);
    err = capture(2, run_ls, 0, NULL, &rc);
    assert_int_equal(rc, 1);
    assert_non_null(strstr(err, "bad key (unauthorized, HTTP 401)"));
    free(err);
    setenv("SPACE_API_KEY", "testkey", 1);
    assert_int_equal(cli_ctx_init(&X), 0);
}

/* Off a terminal, a long operation writes one plain line per stage (no \r, no escape
 * sequences), each with the time elapsed. */
static void test_wait_plain_lines(void **state)
{
    atomic_store(&op_polls, 0);
    char *argv[] = {"--template", "base"};
    int rc;
    char *err = capture(2, run_create, 2, argv, &rc);
    assert_int_equal(rc, 0);
    assert_null(strpbrk(err, "\r\033"));
    assert_non_null(strstr(err, "creating sb0123456789abcdef: running 50% ("));
    assert_non_null(strstr(err, "creating sb0123456789abcdef: succeeded 100% ("));
    /* Two polls said "running 50%": one line for them. */
    assert_null(strstr(strstr(err, "running") + 1, "running"));
    free(err);
}

/* --json: the API's documents, one per line. */
static void test_json_output(void **state)
{
    int rc;
    X.json = true;
    char *out = capture(1, run_ls, 0, NULL, &rc);
    assert_int_equal(rc, 0);
    assert_string_equal(out, "{\"sandboxes\":[{\"id\":\"sbA\",\"state\":\"running\",\"template\":"
                             "\"base\",\"vcpus\":1,\"memory_mib\":256},{\"id\":\"sbB\",\"state\":"
                             "\"paused\"}]}\n");
    free(out);
    char *show[] = {"sb1"};
    out = capture(1, run_network, 1, show, &rc);
    assert_int_equal(rc, 0);
    assert_int_equal(out[0], '{');
    assert_non_null(strstr(out, "\"mode\""));
    free(out);
    /* exec: every event as a JSON line, the exit status still the command's. */
    char *exec[] = {"sb1", "--", "true"};
    out = capture(1, run_exec, 3, exec, &rc);
    assert_int_equal(rc, 3);
    assert_non_null(strstr(out, "{\"id\":\"2\",\"event\":\"stdout\",\"data\":{\"data\":\"aGVsbG8K\"}}\n"));
    assert_non_null(strstr(out, "\"event\":\"exit\""));
    free(out);
    X.json = false;
}

/* A compromised server's session answers are refused before they are used. */
static void test_session_answers_checked(void **state)
{
    static const char *const evil[] = {"sbevilurl", "sbevilid", "sbeviltok"};
    for (size_t i = 0; i < 3; i++) {
        char *argv[] = {(char *)evil[i], "--", "true"};
        int rc;
        char *err = capture(2, run_exec, 3, argv, &rc);
        assert_int_equal(rc, 1);
        assert_non_null(strstr(err, "the server returned no usable"));
        free(err);
    }
}

/* space logs: raw to a pipe, one valid JSON string with --json, bounded. */
static void test_logs(void **state)
{
    int rc;
    char *argv[] = {"sb1"};
    char *out = capture(1, run_logs, 1, argv, &rc);
    assert_int_equal(rc, 0);
    assert_string_equal(out, "boot \x1b]0;pwned\x07ok\r\n\xc3\xa9\n");
    free(out);
    X.json = true;
    out = capture(1, run_logs, 1, argv, &rc);
    X.json = false;
    assert_int_equal(rc, 0);
    assert_string_equal(out, "{\"log\":\"boot ?]0;pwned?ok?\\n??\\n\"}\n");
    free(out);
    char *tail[] = {"sb1", "--tail", "3"};
    out = capture(1, run_logs, 3, tail, &rc);
    assert_int_equal(rc, 0);
    assert_string_equal(out, "boo");
    free(out);
    char *huge[] = {"sbhuge"};
    char *err = capture(2, run_logs, 1, huge, &rc);
    assert_int_equal(rc, 1);
    assert_non_null(strstr(err, "oversized"));
    free(err);
    char *bad[] = {"sb1", "--tail", "0"};
    assert_int_equal(cli_cmd_logs(&X, 3, bad), 2);
}

static void test_cp_both_ways(void **state)
{
    char local[] = "/tmp/test_cli_up_XXXXXX";
    int fd = mkstemp(local);
    uint64_t sum = 0;
    char *buf = malloc(FILE_BYTES);
    for (size_t i = 0; i < FILE_BYTES; i++) {
        buf[i] = (char)(i * 13 % 256);
        sum += (unsigned char)buf[i];
    }
    assert_int_equal(write(fd, buf, FILE_BYTES), FILE_BYTES);
    close(fd);
    char remote[] = "sb1:/tmp/a b&c";
    char *up[] = {local, remote};
    int rc;
    X.json = true; /* the upload prints the API's answer */
    char *out = capture(1, run_cp, 2, up, &rc);
    X.json = false;
    assert_int_equal(rc, 0);
    assert_string_equal(out, "{\"file\":{}}\n");
    free(out);
    assert_string_equal(uploaded_path, "/tmp/a b&c");
    assert_int_equal(uploaded_bytes, FILE_BYTES);
    assert_int_equal(uploaded_sum, sum);

    char from[] = "sb1:/data/x";
    char *down[] = {from, local};
    free(capture(1, run_cp, 2, down, &rc));
    assert_int_equal(rc, 0);
    fd = open(local, O_RDONLY);
    assert_int_equal(read(fd, buf, FILE_BYTES), FILE_BYTES);
    close(fd);
    for (size_t i = 0; i < FILE_BYTES; i++)
        if ((unsigned char)buf[i] != i % 241)
            fail_msg("byte %zu differs", i);
    unlink(local);
    free(buf);

    char missing[] = "sb1:/missing";
    char *miss[] = {missing, local};
    char *err = capture(2, run_cp, 2, miss, &rc);
    assert_int_equal(rc, 1);
    assert_non_null(strstr(err, "no such file: /missing (not_found, HTTP 404)"));
    free(err);
    char *two_local[] = {local, local};
    assert_int_equal(cli_cmd_cp(&X, 2, two_local), 2);
}

static int count_event(const char *event, const char *id, const char *data, size_t len, void *arg)
{
    char *out = arg;
    snprintf(out + strlen(out), 256 - strlen(out), "[%s|%s|%.*s]", event, id, (int)len, data);
    return 0;
}

static void test_sse_parser(void **state)
{
    const char *s = ": hi\r\nid: 1\r\nevent: a\r\ndata: x\r\ndata:y\r\n\r\ndata: z\n\n";
    for (size_t step = 1; step <= strlen(s); step++) {
        struct cli_sse p = {0};
        char out[256] = "";
        for (size_t i = 0; i < strlen(s); i += step)
            assert_int_equal(cli_sse_feed(&p, s + i, strlen(s) - i < step ? strlen(s) - i : step,
                                          count_event, out), 0);
        assert_string_equal(out, "[a|1|x\ny][||z]");
        assert_string_equal(p.last_id, "1");
        cli_sse_free(&p);
    }
}

/* Reads one canned response through cli_http over a socketpair: the head must parse
 * (ret 0) and the body, read `cap` bytes at a time, must equal `want` (NULL: the read
 * fails). Returns cli_http_read_head's result. */
static int canned(const char *resp, size_t cap, const char *want)
{
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    assert_int_equal(write(sv[1], resp, strlen(resp)), (ssize_t)strlen(resp));
    close(sv[1]);
    struct cli_conn *c = calloc(1, sizeof *c);
    c->fd = sv[0];
    char err[256], out[256];
    int rc = cli_http_read_head(c, err, sizeof err);
    if (rc == 0) {
        size_t len = 0;
        ssize_t n;
        while ((n = cli_http_read_body(c, out + len, cap)) > 0) {
            assert_true((size_t)n <= cap);
            len += (size_t)n;
        }
        if (want) {
            assert_int_equal(n, 0);
            assert_int_equal(len, strlen(want));
            assert_memory_equal(out, want, len);
        } else {
            assert_int_equal(n, -1);
        }
    }
    cli_http_close(c);
    free(c);
    return rc;
}

/* Responses go through the shared parser (http_resp_parse, http_chunked_decode). */
static void test_response_parse(void **state)
{
    (void)state;
    const char *chunked = "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n"
                          "Transfer-Encoding: chunked\r\n\r\n4;x=y\r\nWiki\r\n5\r\npedia\r\n"
                          "0\r\nT: 1\r\n\r\n";
    for (size_t cap = 1; cap <= 12; cap++)
        assert_int_equal(canned(chunked, cap, "Wikipedia"), 0);
    assert_int_equal(canned("HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabcdef", 2, "abc"), 0);
    assert_int_equal(canned("HTTP/1.0 200 OK\r\n\r\nuntil close", 4, "until close"), 0);
    assert_int_equal(canned("HTTP/1.1 204 No Content\r\n\r\n", 4, ""), 0);
    /* broken chunk framing, a truncated chunked body */
    assert_int_equal(canned("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nWikiX", 8,
                            NULL), 0);
    assert_int_equal(canned("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nWi", 8,
                            NULL), 0);
    /* heads the old sscanf-based reader took: ambiguous framing, bare LF, folded lines */
    static const char *const bad[] = {
        "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
        "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        "HTTP/1.1 200 OK\r\nX: a\nContent-Length: 3\r\n\r\nabc",
        "HTTP/1.1 200 OK\r\n folded\r\n\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        if (canned(bad[i], 8, "") != -1)
            fail_msg("bad response %zu accepted", i);
}

static void test_url_parse(void **state)
{
    struct cli_url u;
    char err[128];
    assert_int_equal(cli_url_parse("http://127.0.0.1:7070", &u, err, sizeof err), 0);
    assert_string_equal(u.host, "127.0.0.1");
    assert_string_equal(u.port, "7070");
    assert_int_equal(cli_url_parse("http://[::1]:80/", &u, err, sizeof err), 0);
    assert_string_equal(u.host, "::1");
    assert_string_equal(u.hostport, "[::1]:80");
    assert_int_equal(cli_url_parse("http://h", &u, err, sizeof err), 0);
    assert_string_equal(u.port, "80");
    assert_int_equal(cli_url_parse("https://h", &u, err, sizeof err), -1);
    assert_int_equal(cli_url_parse("http://h:x", &u, err, sizeof err), -1);
    assert_int_equal(cli_url_parse("http://h:1/prefix", &u, err, sizeof err), -1);
}

int main(void)
{
    log_init("test_cli", LOG_WARN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_create_waits, start, th_teardown),
        cmocka_unit_test_setup_teardown(test_create_network, start, th_teardown),
        cmocka_unit_test_setup_teardown(test_network_show_change_log, start, th_teardown),
        cmocka_unit_test_setup_teardown(test_exec_reattaches, start, th_teardown),
        cmocka_unit_test_setup_teardown(test_ls_and_errors, start, th_teardown),
        cmocka_unit_test_setup_teardown(test_cp_both_ways, start, th_teardown),
        cmocka_unit_test_setup_teardown(test_wait_plain_lines, start, th_teardown),
        cmocka_unit_test_setup_teardown(test_json_output, start, th_teardown),
        cmocka_unit_test_setup_teardown(test_session_answers_checked, start, th_teardown),
        cmocka_unit_test_setup_teardown(test_logs, start, th_teardown),
        cmocka_unit_test(test_sse_parser),
        cmocka_unit_test(test_url_parse),
        cmocka_unit_test(test_response_parse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
