/* Unit tests for fetching a content-addressed blob from another node (template/tpl_blob.h)
 * against a real HTTP server on loopback (libevent's evhttp) in the same loop: a 20 MiB
 * blob arrives whole and verified under its name (more than the worker's queue bound, so
 * reading pauses and resumes), with the node token sent; other bytes of the right size
 * are refused (digest), a holder sending more or fewer bytes than expected and an HTTP
 * error are refused, a holder that does not listen is reported; after every refusal
 * neither the destination nor the temporary file exists. Serving: the token check. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "daemon/spaced.h"
#include "daemon/template/tpl_blob.h"
#include "daemon/template/tpl_digest.h"

#define BLOB_LEN ((20u << 20) + 13)

struct world {
    struct event_base *base;
    struct evhttp *http;
    int port;
    unsigned char *blob;
    char hex[TPL_DIGEST_HEX];
    char dir[64];
    char dest[256];
    bool done;
    struct spaced_err err;
    bool failed;
    char token_seen[64];
};

static void serve(struct evhttp_request *req, void *arg)
{
    struct world *w = arg;
    const char *uri = evhttp_request_get_uri(req);
    const char *tok = evhttp_find_header(evhttp_request_get_input_headers(req), "X-Space-Node-Token");
    snprintf(w->token_seen, sizeof w->token_seen, "%s", tok ? tok : "");
    struct evbuffer *out = evbuffer_new();
    size_t n = BLOB_LEN;
    int status = 200;
    if (strcmp(uri, "/short") == 0)
        n = BLOB_LEN - 1;
    else if (strcmp(uri, "/long") == 0)
        n = BLOB_LEN + 4096;
    else if (strcmp(uri, "/error") == 0)
        status = 500;
    if (status == 200 && strcmp(uri, "/flipped") == 0) {
        evbuffer_add(out, w->blob, BLOB_LEN);
        unsigned char *p = evbuffer_pullup(out, -1);
        p[BLOB_LEN / 2] ^= 0xff;
    } else if (status == 200) {
        unsigned char *big = malloc(n);
        memcpy(big, w->blob, n < BLOB_LEN ? n : BLOB_LEN);
        if (n > BLOB_LEN)
            memset(big + BLOB_LEN, 'x', n - BLOB_LEN);
        evbuffer_add(out, big, n);
        free(big);
    } else {
        evbuffer_add_printf(out, "no");
    }
    evhttp_send_reply(req, status, status == 200 ? "OK" : "Error", out);
    evbuffer_free(out);
}

static int setup(void **state)
{
    struct world *w = calloc(1, sizeof *w);
    w->base = event_base_new();
    w->http = evhttp_new(w->base);
    evhttp_set_gencb(w->http, serve, w);
    struct evhttp_bound_socket *s = evhttp_bind_socket_with_handle(w->http, "127.0.0.1", 0);
    if (!s)
        return -1;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    getsockname(evhttp_bound_socket_get_fd(s), (struct sockaddr *)&ss, &sl);
    w->port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
    w->blob = malloc(BLOB_LEN);
    for (size_t i = 0; i < BLOB_LEN; i++)
        w->blob[i] = (unsigned char)(i * 131 + (i >> 12));
    struct tpl_digest *h = tpl_digest_new();
    tpl_digest_update(h, w->blob, BLOB_LEN);
    tpl_digest_final(h, w->hex);
    snprintf(w->dir, sizeof w->dir, "/tmp/tpl-blob-XXXXXX");
    if (!mkdtemp(w->dir))
        return -1;
    snprintf(w->dest, sizeof w->dest, "%s/sha256-%s", w->dir, w->hex);
    *state = w;
    return 0;
}

static int teardown(void **state)
{
    struct world *w = *state;
    char tmp[256];
    unlink(w->dest);
    snprintf(tmp, sizeof tmp, "%s/.sha256-%s.fetch", w->dir, w->hex);
    unlink(tmp);
    rmdir(w->dir);
    evhttp_free(w->http);
    event_base_free(w->base);
    free(w->blob);
    free(w);
    return 0;
}

static void on_done(void *arg, const struct spaced_err *err)
{
    struct world *w = arg;
    w->done = true;
    w->failed = err != NULL;
    if (err)
        w->err = *err;
    event_base_loopexit(w->base, NULL);
}

/* Fetches target from the world's server (or port): the error code, "" on success. */
static const char *fetch(struct world *w, const char *target, int port)
{
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", port ? port : w->port);
    struct tpl_blob_req req = {.url = url, .target = target, .token = "tok-123", .sha256 = w->hex,
                               .size = BLOB_LEN, .dest = w->dest, .what = "test blob", .source = "n1",
                               .timeout_s = 10};
    w->done = false;
    memset(&w->err, 0, sizeof w->err);
    struct spaced_err err = {0};
    struct tpl_blob *b = tpl_blob_fetch(w->base, &req, on_done, w, &err);
    if (!b)
        return "start_failed";
    assert_false(w->done); /* never called from inside tpl_blob_fetch */
    event_base_dispatch(w->base);
    assert_true(w->done);
    return w->failed ? w->err.code : "";
}

static bool exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0;
}

static void assert_nothing_left(struct world *w)
{
    char tmp[256];
    snprintf(tmp, sizeof tmp, "%s/.sha256-%s.fetch", w->dir, w->hex);
    assert_false(exists(w->dest));
    assert_false(exists(tmp));
}

static void test_verified(void **state)
{
    struct world *w = *state;
    assert_string_equal(fetch(w, "/blob", 0), "");
    assert_string_equal(w->token_seen, "tok-123");
    char got[TPL_DIGEST_HEX];
    int64_t size = 0;
    assert_int_equal(tpl_digest_file(w->dest, 0, got, &size), 0);
    assert_int_equal(size, BLOB_LEN);
    assert_string_equal(got, w->hex);
    unlink(w->dest);
}

static void test_refused(void **state)
{
    struct world *w = *state;
    assert_string_equal(fetch(w, "/flipped", 0), "blob_digest_mismatch");
    assert_non_null(strstr(w->err.message, "SHA-256"));
    assert_nothing_left(w);
    assert_string_equal(fetch(w, "/short", 0), "blob_fetch_failed");
    assert_nothing_left(w);
    assert_string_equal(fetch(w, "/long", 0), "blob_fetch_failed");
    assert_non_null(strstr(w->err.message, "more than"));
    assert_nothing_left(w);
    assert_string_equal(fetch(w, "/error", 0), "blob_fetch_failed");
    assert_nothing_left(w);
    /* Nobody listens on the port of a socket just closed. */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    bind(fd, (struct sockaddr *)&a, sizeof a);
    getsockname(fd, (struct sockaddr *)&a, &al);
    close(fd);
    assert_string_equal(fetch(w, "/blob", ntohs(a.sin_port)), "blob_source_unavailable");
    assert_nothing_left(w);
}

static void test_bad_request(void **state)
{
    struct world *w = *state;
    struct spaced_err err = {0};
    w->done = false;
    struct tpl_blob_req req = {.url = "http://127.0.0.1:1", .target = "/x", .sha256 = "nothex", .size = 1,
                               .dest = w->dest};
    assert_null(tpl_blob_fetch(w->base, &req, on_done, w, &err));
    req.sha256 = w->hex;
    req.size = 0;
    assert_null(tpl_blob_fetch(w->base, &req, on_done, w, &err));
    req.size = 1;
    req.url = "not a url";
    assert_null(tpl_blob_fetch(w->base, &req, on_done, w, &err));
    assert_false(w->done);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_verified),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_bad_request),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
