/* Unit tests for the content digest of template images (template/tpl_digest.h) and the
 * holder lists of templates that travel (tpl_nodes_have): known SHA-256 vectors, a file
 * hashed whole, in pieces and on a worker thread agree, the size bound, a missing file,
 * what a digest string may look like, and node-list membership (no prefix matches). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <event2/event.h>

#include "daemon/store/store.h"
#include "daemon/template/tpl.h"
#include "daemon/template/tpl_digest.h"

#define ABC "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
#define EMPTY "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

static char path[64];

static int setup(void **state)
{
    (void)state;
    snprintf(path, sizeof path, "/tmp/tpl-digest-XXXXXX");
    int fd = mkstemp(path);
    if (fd < 0)
        return -1;
    /* 3 MiB + 7 bytes: more than one read chunk, not a multiple of it */
    size_t n = (3u << 20) + 7;
    unsigned char *buf = malloc(n);
    for (size_t i = 0; i < n; i++)
        buf[i] = (unsigned char)(i * 31 + 7);
    ssize_t w = write(fd, buf, n);
    free(buf);
    close(fd);
    return w == (ssize_t)n ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    unlink(path);
    return 0;
}

static void test_vectors(void **state)
{
    (void)state;
    char out[TPL_DIGEST_HEX];
    struct tpl_digest *h = tpl_digest_new();
    tpl_digest_update(h, "a", 1);
    tpl_digest_update(h, "", 0);
    tpl_digest_update(h, "bc", 2);
    tpl_digest_final(h, out);
    assert_string_equal(out, ABC);
    h = tpl_digest_new();
    tpl_digest_final(h, out);
    assert_string_equal(out, EMPTY);
    tpl_digest_free(NULL);
}

static void test_valid(void **state)
{
    (void)state;
    assert_true(tpl_digest_valid(ABC));
    assert_false(tpl_digest_valid(""));
    assert_false(tpl_digest_valid(NULL));
    assert_false(tpl_digest_valid("BA7816BF8F01CFEA414140DE5DAE2223B00361A396177A9CB410FF61F20015AD"));
    assert_false(tpl_digest_valid(ABC "0"));
    char g[TPL_DIGEST_HEX];
    snprintf(g, sizeof g, "g%s", ABC + 1);
    assert_false(tpl_digest_valid(g));
    assert_false(tpl_digest_valid("../../../etc/passwd"));
}

/* The whole file, the same bytes fed in odd pieces: one digest. */
static void test_file_and_pieces(void **state)
{
    (void)state;
    char whole[TPL_DIGEST_HEX], pieces[TPL_DIGEST_HEX];
    int64_t size = 0;
    assert_int_equal(tpl_digest_file(path, 0, whole, &size), 0);
    assert_int_equal(size, (3 << 20) + 7);
    assert_true(tpl_digest_valid(whole));
    FILE *f = fopen(path, "rb");
    struct tpl_digest *h = tpl_digest_new();
    char buf[4099];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0)
        tpl_digest_update(h, buf, n);
    fclose(f);
    tpl_digest_final(h, pieces);
    assert_string_equal(whole, pieces);
    /* bounded: exactly the size passes, one byte less is EFBIG */
    assert_int_equal(tpl_digest_file(path, size, pieces, &size), 0);
    assert_string_equal(whole, pieces);
    errno = 0;
    assert_int_equal(tpl_digest_file(path, size - 1, pieces, &size), -1);
    assert_int_equal(errno, EFBIG);
    assert_int_equal(tpl_digest_file("/nonexistent/rootfs.ext4", 0, pieces, &size), -1);
    assert_int_equal(errno, ENOENT);
}

struct job_result {
    int calls, rc;
    int64_t size;
    char hex[TPL_DIGEST_HEX];
};

static void on_done(void *arg, int rc, int err, const char *hex, int64_t size)
{
    struct job_result *r = arg;
    (void)err;
    r->calls++;
    r->rc = rc;
    r->size = size;
    snprintf(r->hex, sizeof r->hex, "%s", hex);
}

/* On a worker thread: the same digest, reported once on the loop. */
static void test_worker(void **state)
{
    (void)state;
    char whole[TPL_DIGEST_HEX];
    int64_t size;
    assert_int_equal(tpl_digest_file(path, 0, whole, &size), 0);
    struct event_base *base = event_base_new();
    struct job_result r = {0};
    struct tpl_digest_job *j = tpl_digest_start(base, path, on_done, &r);
    assert_non_null(j);
    while (r.calls == 0)
        event_base_loop(base, EVLOOP_ONCE);
    assert_int_equal(r.calls, 1);
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.size, size);
    assert_string_equal(r.hex, whole);
    /* a job dropped before it reports: joined, no callback */
    struct job_result r2 = {0};
    j = tpl_digest_start(base, path, on_done, &r2);
    assert_non_null(j);
    tpl_digest_job_free(j);
    event_base_loop(base, EVLOOP_NONBLOCK);
    assert_int_equal(r2.calls, 0);
    event_base_free(base);
}

static void test_nodes_have(void **state)
{
    (void)state;
    assert_true(tpl_nodes_have("node-a", "node-a"));
    assert_true(tpl_nodes_have("node-a,node-b", "node-b"));
    assert_true(tpl_nodes_have("x,node-a,y", "node-a"));
    assert_false(tpl_nodes_have("node-ab,xnode-a", "node-a"));
    assert_false(tpl_nodes_have("node-a", "node"));
    assert_false(tpl_nodes_have("", "node-a"));
    assert_false(tpl_nodes_have("node-a", ""));
    assert_false(tpl_nodes_have(",,", ""));
    /* walking a list: empty and overlong entries are skipped */
    char longer[200], list[300], id[STORE_ID_MAX];
    memset(longer, 'x', sizeof longer - 1);
    longer[sizeof longer - 1] = '\0';
    snprintf(list, sizeof list, ",a,,%s,b,", longer);
    const char *p = list;
    assert_true(tpl_nodes_next(&p, id, sizeof id));
    assert_string_equal(id, "a");
    assert_true(tpl_nodes_next(&p, id, sizeof id));
    assert_string_equal(id, "b");
    assert_false(tpl_nodes_next(&p, id, sizeof id));
    assert_false(tpl_nodes_next(&p, id, sizeof id));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vectors),
        cmocka_unit_test(test_valid),
        cmocka_unit_test(test_file_and_pieces),
        cmocka_unit_test(test_worker),
        cmocka_unit_test(test_nodes_have),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
