/* Router tests over a real server: `{param}` capture and decoding, literal-over-param
 * priority, `{rest...}`, HEAD falling back to GET, 404/405 (with Allow) JSON errors,
 * hooks that take requests by header or Host, query decoding, malformed patterns, and
 * router_replay (a parked request runs its route again from the top, hooks skipped). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "test_http_harness.h"

static struct th_server T;

/* Replies with "<tag> k=v ..." listing the route's tag and params given in arg. */
static void h_show(struct http_req *req, void *arg)
{
    const char *tag = arg;
    char out[512];
    int n = snprintf(out, sizeof out, "%s", tag);
    static const char *const names[] = {"id", "sid", "path"};
    for (size_t i = 0; i < 3; i++) {
        const char *v = router_param(req, names[i]);
        if (v)
            n += snprintf(out + n, sizeof out - (size_t)n, " %s=%s", names[i], v);
    }
    http_reply(req, 200, "text/plain", out, (size_t)n);
}

static void h_query(struct http_req *req, void *arg)
{
    char out[512];
    const char *a0 = http_req_query(req, "a"), *a1 = http_req_query_n(req, "a", 1);
    const char *e = http_req_query(req, "empty");
    int n = snprintf(out, sizeof out, "path=%s a0=%s a1=%s a2=%s empty=[%s] missing=%s",
                     http_req_path(req), a0 ? a0 : "-", a1 ? a1 : "-",
                     http_req_query_n(req, "a", 2) ? "?" : "-", e ? e : "-",
                     http_req_query(req, "nope") ? "?" : "-");
    http_reply(req, 200, "text/plain", out, (size_t)n);
}

/* Takes every request carrying E2b-Sandbox-Id, or whose Host is <port>-<id>.<domain>. */
static bool envd_hook(struct http_req *req, void *arg)
{
    const char *id = http_req_header(req, "E2b-Sandbox-Id");
    const char *host = http_req_header(req, "Host");
    char buf[128];
    if (!id && host && strchr(host, '-') && strchr(host, '.')) {
        const char *s = strchr(host, '-') + 1;
        size_t n = (size_t)(strchr(s, '.') - s);
        if (n < sizeof buf && strchr(host, '-') < strchr(host, '.')) {
            memcpy(buf, s, n);
            buf[n] = '\0';
            id = buf;
        }
    }
    if (!id)
        return false;
    char out[256];
    int n = snprintf(out, sizeof out, "envd %s %s", id, http_req_path(req));
    http_reply(req, 200, "text/plain", out, (size_t)n);
    return true;
}

/* Parks the first call (as an auto-resume wait does) and replays it from a timer; the
 * replayed call answers how many times the handler ran. Loop thread only. */
static unsigned park_runs;

static void on_unpark(evutil_socket_t fd, short what, void *arg)
{
    router_replay(arg);
}

static void h_park(struct http_req *req, void *arg)
{
    if (++park_runs == 1) {
        struct timeval tv = {0, 20000};
        event_base_once(T.base, -1, EV_TIMEOUT, on_unpark, req, &tv);
        return;
    }
    char out[64];
    int n = snprintf(out, sizeof out, "runs=%u id=%s", park_runs, router_param(req, "id"));
    http_reply(req, 200, "text/plain", out, (size_t)n);
}

/* Counts the hook's looks at /park requests: a replay must not pass the hooks again. */
static unsigned park_hook_looks;

static bool count_hook(struct http_req *req, void *arg)
{
    if (strncmp(http_req_path(req), "/park/", 6) == 0)
        park_hook_looks++;
    return false;
}

static void setup(struct router *r, struct th_server *t)
{
    assert_int_equal(router_add_hook(r, envd_hook, NULL), 0);
    assert_int_equal(router_add_hook(r, count_hook, NULL), 0);
    assert_int_equal(router_add(r, "GET", "/park/{id}", h_park, NULL), 0);
    assert_int_equal(router_add(r, "GET", "/v1/sandboxes/{id}", h_show, "get"), 0);
    assert_int_equal(router_add(r, "DELETE", "/v1/sandboxes/{id}", h_show, "delete"), 0);
    assert_int_equal(router_add(r, "GET", "/v1/sandboxes/mine", h_show, "mine"), 0);
    assert_int_equal(router_add(r, "GET", "/v1/sandboxes/{id}/sessions/{sid}", h_show, "session"), 0);
    assert_int_equal(router_add(r, "PUT", "/v1/sandboxes/{id}/files/{path...}", h_show, "file"), 0);
    assert_int_equal(router_add(r, "GET", "/q", h_query, NULL), 0);
    assert_int_equal(router_add(r, "GET", "/", h_show, "root"), 0);
    /* Malformed patterns are refused. */
    assert_int_equal(router_add(r, "GET", "relative", h_show, NULL), -1);
    assert_int_equal(router_add(r, "GET", "/a/{", h_show, NULL), -1);
    assert_int_equal(router_add(r, "GET", "/a/{}", h_show, NULL), -1);
    assert_int_equal(router_add(r, "GET", "/a/{x}/{x}", h_show, NULL), -1);
    assert_int_equal(router_add(r, "GET", "/a/{x...}/b", h_show, NULL), -1);
    assert_int_equal(router_add(r, "GET", "/a//b", h_show, NULL), -1);
    assert_int_equal(router_add(r, "GET", "/a/", h_show, NULL), -1);
    assert_int_equal(router_add(r, "GET", "/a/b{x}", h_show, NULL), -1);
}

static int start(void **state)
{
    th_start(&T, NULL, setup);
    return 0;
}

static int stop(void **state)
{
    th_stop(&T);
    return 0;
}

/* GETs `target` with extra header lines; checks status and body (NULL: skip). */
static void expect(const char *method, const char *target, const char *extra, int status,
                   const char *body)
{
    char req[1024];
    snprintf(req, sizeof req, "%s %s HTTP/1.1\r\nHost: api.local\r\n%s\r\n", method, target,
             extra ? extra : "");
    struct th_resp r;
    bool head = strcmp(method, "HEAD") == 0;
    struct th_conn *c = th_connect(T.port);
    assert_int_equal(th_sends(c, req), 0);
    assert_int_equal(th_read_resp(c, &r, head), 0);
    th_close(c);
    if (r.status != status)
        fail_msg("%s %s: want %d got %d (%s)", method, target, status, r.status, r.body);
    if (body)
        assert_string_equal(r.body, body);
    th_resp_free(&r);
}

static void test_params(void **state)
{
    expect("GET", "/v1/sandboxes/sb-1", NULL, 200, "get id=sb-1");
    expect("DELETE", "/v1/sandboxes/sb-1", NULL, 200, "delete id=sb-1");
    expect("GET", "/v1/sandboxes/mine", NULL, 200, "mine");
    expect("GET", "/v1/sandboxes/a%2Fb", NULL, 200, "get id=a/b");
    expect("GET", "/v1/sandboxes/x/sessions/s%20p", NULL, 200, "session id=x sid=s p");
    expect("PUT", "/v1/sandboxes/x/files/etc/a%20b/c", "Content-Length: 0\r\n", 200,
           "file id=x path=etc/a b/c");
    expect("GET", "/", NULL, 200, "root");
    expect("GET", "/q?a=1&a=x+y%26z&empty&b=", NULL, 200,
           "path=/q a0=1 a1=x y&z a2=- empty=[] missing=-");
}

static void test_errors(void **state)
{
    char req[256];
    expect("GET", "/v1/nothing", NULL, 404, NULL);
    expect("GET", "/v1/sandboxes/", NULL, 404, NULL);
    expect("GET", "/v1/sandboxes/x/sessions", NULL, 404, NULL);
    expect("POST", "/v1/sandboxes/x", "Content-Length: 0\r\n", 405, NULL);
    /* 405 carries Allow and a JSON error; the connection stays usable. */
    struct th_conn *c = th_connect(T.port);
    snprintf(req, sizeof req, "PATCH /v1/sandboxes/x HTTP/1.1\r\nHost: h\r\n\r\n");
    assert_int_equal(th_sends(c, req), 0);
    struct th_resp r;
    char v[128];
    assert_int_equal(th_read_resp(c, &r, false), 0);
    assert_int_equal(r.status, 405);
    assert_string_equal(th_hdr(&r, "Allow", v, sizeof v), "GET, DELETE");
    assert_non_null(strstr(r.body, "\"code\":\"method_not_allowed\""));
    th_resp_free(&r);
    assert_int_equal(th_sends(c, "GET /nope HTTP/1.1\r\nHost: h\r\n\r\n"), 0);
    assert_int_equal(th_read_resp(c, &r, false), 0);
    assert_int_equal(r.status, 404);
    assert_non_null(strstr(r.body, "{\"error\":{\"code\":\"not_found\",\"message\":"));
    th_resp_free(&r);
    th_close(c);
    /* HEAD uses the GET route, without a body. */
    expect("HEAD", "/v1/sandboxes/sb-9", NULL, 200, "");
}

static void test_hooks(void **state)
{
    expect("POST", "/process.Process/Start", "E2b-Sandbox-Id: isb1\r\nContent-Length: 0\r\n", 200,
           "envd isb1 /process.Process/Start");
    char req[256];
    snprintf(req, sizeof req, "GET /health HTTP/1.1\r\nHost: 49983-isb2.e2b.local\r\n\r\n");
    struct th_resp r;
    assert_int_equal(th_roundtrip(T.port, req, &r), 200);
    assert_string_equal(r.body, "envd isb2 /health");
    th_resp_free(&r);
    /* Without the header or such a Host, the normal routes apply. */
    expect("GET", "/health", NULL, 404, NULL);
}

static void test_replay(void **state)
{
    park_runs = park_hook_looks = 0;
    expect("GET", "/park/p%201", NULL, 200, "runs=2 id=p 1");
    assert_int_equal(park_hook_looks, 1);
}

/* Shutdown functions: router_free runs them newest first, each once. */
struct down_log {
    char order[8];
    unsigned n;
};

static void down_a(void *arg)
{
    struct down_log *l = arg;
    l->order[l->n++] = 'a';
}

static void down_b(void *arg)
{
    struct down_log *l = arg;
    l->order[l->n++] = 'b';
}

static void test_shutdown(void **state)
{
    struct down_log log = {{0}, 0};
    struct router *r = router_new();
    assert_non_null(r);
    assert_int_equal(router_on_shutdown(r, down_a, &log), 0);
    assert_int_equal(router_on_shutdown(r, down_b, &log), 0);
    assert_int_equal(log.n, 0);
    router_free(r);
    assert_string_equal(log.order, "ba");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_params, start, stop),
        cmocka_unit_test_setup_teardown(test_errors, start, stop),
        cmocka_unit_test_setup_teardown(test_hooks, start, stop),
        cmocka_unit_test_setup_teardown(test_replay, start, stop),
        cmocka_unit_test(test_shutdown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
