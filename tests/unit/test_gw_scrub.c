/* test_gw_scrub: the credential path's secret scrubber: every copy of the secret is
 * overwritten whatever the read boundaries, the stream keeps its length, a held-back
 * tail is released by the next read or the end, and the token after an auth scheme is
 * scrubbed on its own. */
#include <event2/buffer.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <cmocka.h>

#include "gateway/gw_conn.h"

#define SECRET "Bearer s3cret-token-7f1c9b"
#define TOKEN "s3cret-token-7f1c9b"

/* Pipes text through a scrubber in reads of `step` bytes; returns the output. */
static char *run(const char *secret, const char *text, size_t step, size_t *outlen)
{
    struct gw_scrub *s = gw_scrub_new(secret);
    assert_non_null(s);
    struct evbuffer *from = evbuffer_new(), *to = evbuffer_new();
    size_t n = strlen(text);
    for (size_t off = 0; off < n; off += step) {
        evbuffer_add(from, text + off, n - off < step ? n - off : step);
        gw_scrub_pipe(s, from, to, false);
        assert_int_equal(evbuffer_get_length(from), 0);
    }
    gw_scrub_pipe(s, from, to, true);
    *outlen = evbuffer_get_length(to);
    char *out = calloc(1, *outlen + 1);
    evbuffer_remove(to, out, *outlen);
    evbuffer_free(from);
    evbuffer_free(to);
    gw_scrub_free(s);
    return out;
}

static void test_scrub_every_split(void **state)
{
    const char *text = "HTTP/1.1 200 OK\r\nX-Echo: " SECRET "\r\nContent-Length: 60\r\n\r\n"
                       "{\"a\":\"" TOKEN "\",\"b\":\"s3cret-tok\",\"c\":\"" TOKEN TOKEN "\"}";
    for (size_t step = 1; step <= strlen(text); step++) {
        size_t len;
        char *out = run(SECRET, text, step, &len);
        assert_int_equal(len, strlen(text));
        assert_null(strstr(out, TOKEN));
        assert_non_null(strstr(out, "Bearer *******************"));
        assert_non_null(strstr(out, "\"b\":\"s3cret-tok\"")); /* a partial copy stays */
        free(out);
    }
}

static void test_scrub_tail_released(void **state)
{
    struct gw_scrub *s = gw_scrub_new(SECRET);
    struct evbuffer *from = evbuffer_new(), *to = evbuffer_new();
    evbuffer_add(from, "ends with s3c", 13);
    gw_scrub_pipe(s, from, to, false);
    assert_int_equal(evbuffer_get_length(to), 10); /* "s3c" could start the token */
    evbuffer_add(from, "ret!", 4);
    gw_scrub_pipe(s, from, to, false);
    assert_int_equal(evbuffer_get_length(to), 17);
    evbuffer_add(from, "s3", 2);
    gw_scrub_pipe(s, from, to, true); /* end of stream: nothing held */
    assert_int_equal(evbuffer_get_length(to), 19);
    evbuffer_free(from);
    evbuffer_free(to);
    gw_scrub_free(s);
}

static void test_scrub_secret_without_scheme(void **state)
{
    size_t len;
    char *out = run("abc", "xabcabcyab", 1, &len);
    assert_string_equal(out, "x******yab");
    free(out);
    /* a short part after a space is not a token of its own: the whole value is scrubbed */
    out = run("k short", "k short short", 3, &len);
    assert_string_equal(out, "******* short");
    free(out);
    assert_null(gw_scrub_new(""));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scrub_every_split), cmocka_unit_test(test_scrub_tail_released),
        cmocka_unit_test(test_scrub_secret_without_scheme),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
