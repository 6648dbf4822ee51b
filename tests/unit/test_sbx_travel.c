/* Unit tests for what a node accepts as a travelling snapshot's parts (sbx_travel.c,
 * sbx_travel_parts_ok): the snapshots row is read before any file is fetched, and every
 * name (it becomes a file name under captures/), size (a bound on what is accepted from
 * the wire), digest, count and chain entry is checked. Each rejection is one change to
 * a valid record, so the test shows which rule refuses it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "daemon/sandbox/sbx_internal.h"

#define H "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
#define F(name, size) "{\"name\":\"" name "\",\"size\":" #size ",\"sha256\":\"" H "\"}"
#define GOOD_FILES F("snapshot.json", 120) "," F("state", 4096) "," F("mem", 268435456) "," \
                   F("disk.qcow2", 1000) "," F("template", 4) "," F("layer1", 196608) ","      \
                   F("layer2", 268435456)
#define GOOD_CHAIN "{\"part\":\"disk.qcow2\",\"format\":\"qcow2\"},{\"part\":\"layer1\",\"format\":\"qcow2\"}," \
                   "{\"part\":\"layer2\",\"format\":\"raw\"}"

static char buf[8192];

static const char *rec(const char *files, const char *chain)
{
    snprintf(buf, sizeof buf, "{\"files\":[%s],\"chain\":[%s]}", files, chain);
    return buf;
}

static void test_valid(void **state)
{
    (void)state;
    assert_true(sbx_travel_parts_ok(rec(GOOD_FILES, GOOD_CHAIN)));
    /* a flattened capture: one raw layer of its own */
    assert_true(sbx_travel_parts_ok(rec(F("snapshot.json", 1) "," F("state", 1) "," F("disk.raw", 0),
                                        "{\"part\":\"disk.raw\",\"format\":\"raw\"}")));
}

static void test_names(void **state)
{
    (void)state;
    static const char *const bad[] = {"../state", "chain.json", "layer", "layer01", "layer99",
                                      "layer-1", "disk.qcow2.tmp", "", "state/", "creds/",
                                      "creds.json", NULL};
    for (const char *const *b = bad; *b; b++) {
        char files[1024];
        snprintf(files, sizeof files, GOOD_FILES ",{\"name\":\"%s\",\"size\":1,\"sha256\":\"" H "\"}", *b);
        assert_false(sbx_travel_parts_ok(rec(files, GOOD_CHAIN)));
    }
    /* a moving sandbox's credential rules are never a snapshot's part */
    assert_false(sbx_travel_parts_ok(rec(GOOD_FILES "," F("creds", 10), GOOD_CHAIN)));
    /* the same name twice */
    assert_false(sbx_travel_parts_ok(rec(GOOD_FILES "," F("state", 1), GOOD_CHAIN)));
    /* required parts */
    assert_false(sbx_travel_parts_ok(rec(F("snapshot.json", 1) "," F("disk.raw", 0),
                                         "{\"part\":\"disk.raw\",\"format\":\"raw\"}")));
    assert_false(sbx_travel_parts_ok(rec(F("state", 1) "," F("disk.raw", 0),
                                         "{\"part\":\"disk.raw\",\"format\":\"raw\"}")));
}

static void test_sizes_and_digests(void **state)
{
    (void)state;
    assert_false(sbx_travel_parts_ok(rec(GOOD_FILES "," F("layer3", -1), GOOD_CHAIN)));
    assert_false(sbx_travel_parts_ok(rec(GOOD_FILES "," F("layer3", 4398046511105), GOOD_CHAIN)));
    assert_true(sbx_travel_parts_ok(rec(GOOD_FILES "," F("layer3", 4398046511104), GOOD_CHAIN)));
    assert_false(sbx_travel_parts_ok(rec(GOOD_FILES ",{\"name\":\"layer3\",\"size\":\"1\",\"sha256\":\"" H "\"}",
                                         GOOD_CHAIN)));
    assert_false(sbx_travel_parts_ok(rec(GOOD_FILES ",{\"name\":\"layer3\",\"size\":1.5,\"sha256\":\"" H "\"}",
                                         GOOD_CHAIN)));
    assert_false(sbx_travel_parts_ok(rec(GOOD_FILES ",{\"name\":\"layer3\",\"size\":1,\"sha256\":\"" H "0\"}",
                                         GOOD_CHAIN)));
    assert_false(sbx_travel_parts_ok(rec(GOOD_FILES ",{\"name\":\"layer3\",\"size\":1,\"sha256\":\"BA" H "\"}",
                                         GOOD_CHAIN)));
    assert_false(sbx_travel_parts_ok(rec(GOOD_FILES ",{\"name\":\"layer3\",\"size\":1}", GOOD_CHAIN)));
}

static void test_counts_and_chain(void **state)
{
    (void)state;
    /* chain: a part not listed, a bad format, none, too deep */
    assert_false(sbx_travel_parts_ok(rec(GOOD_FILES, "{\"part\":\"layer4\",\"format\":\"raw\"}")));
    assert_false(sbx_travel_parts_ok(rec(GOOD_FILES, "{\"part\":\"layer2\",\"format\":\"vmdk\"}")));
    assert_false(sbx_travel_parts_ok(rec(GOOD_FILES, "")));
    char chain[4096] = "";
    for (int i = 0; i <= VM_DISK_BACKING_MAX; i++)
        strcat(chain, i ? ",{\"part\":\"state\",\"format\":\"raw\"}" : "{\"part\":\"state\",\"format\":\"raw\"}");
    assert_false(sbx_travel_parts_ok(rec(GOOD_FILES, chain)));
    /* not an object, not JSON */
    assert_false(sbx_travel_parts_ok("[]"));
    assert_false(sbx_travel_parts_ok("{\"files\":"));
    assert_false(sbx_travel_parts_ok(""));
    assert_false(sbx_travel_parts_ok(NULL));
}

/* A suspended sandbox's record (sbx_move.c): the holder node travels in it, round-trips
 * through sbx_parts_json, and must be a short string; no snapshot.json is required of
 * a stopped sandbox's files. */
static void test_sandbox_record(void **state)
{
    (void)state;
    struct sbx_parts p;
    snprintf(buf, sizeof buf, "{\"node\":\"node-a\",\"files\":[%s],\"chain\":[%s]}",
             F("disk.qcow2", 10) "," F("layer0", 20), "{\"part\":\"layer0\",\"format\":\"qcow2\"}");
    assert_int_equal(sbx_parts_parse(buf, &p), 0);
    assert_string_equal(p.node, "node-a");
    assert_int_equal(p.n, 2);
    assert_false(sbx_travel_parts_ok(buf)); /* no snapshot.json nor state: not a snapshot's */
    char *js = sbx_parts_json(&p);
    struct sbx_parts q;
    assert_int_equal(sbx_parts_parse(js, &q), 0);
    assert_string_equal(q.node, "node-a");
    assert_int_equal(q.nchain, 1);
    assert_string_equal(q.f[q.chain[0]].name, "layer0");
    free(js);
    snprintf(buf, sizeof buf, "{\"node\":7,\"files\":[%s],\"chain\":[%s]}", F("layer0", 20),
             "{\"part\":\"layer0\",\"format\":\"qcow2\"}");
    assert_int_equal(sbx_parts_parse(buf, &p), -1);
    char big[200];
    memset(big, 'n', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    snprintf(buf, sizeof buf, "{\"node\":\"%s\",\"files\":[%s],\"chain\":[%s]}", big, F("layer0", 20),
             "{\"part\":\"layer0\",\"format\":\"qcow2\"}");
    assert_int_equal(sbx_parts_parse(buf, &p), -1);
    assert_int_equal(sbx_parts_parse(NULL, &p), -1);
}

/* The VM runtime that saved the state (vm/vm_sig.h) travels in the record: parsed,
 * round-tripped, read by placement (sbx_parts_runtime); absent in a record written
 * before runtimes were (accepted: ""), refused when it is no valid signature. */
static void test_runtime(void **state)
{
    (void)state;
    struct sbx_parts p;
    char rt[VM_SIG_MAX];
    snprintf(buf, sizeof buf, "{\"node\":\"node-a\",\"runtime\":\"QEMU 7.2/tcg/max\",\"files\":[%s],\"chain\":[%s]}",
             GOOD_FILES, GOOD_CHAIN);
    assert_int_equal(sbx_parts_parse(buf, &p), 0);
    assert_string_equal(p.runtime, "QEMU 7.2/tcg/max");
    assert_true(sbx_travel_parts_ok(buf));
    sbx_parts_runtime(buf, rt, sizeof rt);
    assert_string_equal(rt, "QEMU 7.2/tcg/max");
    char *js = sbx_parts_json(&p);
    struct sbx_parts q;
    assert_int_equal(sbx_parts_parse(js, &q), 0);
    assert_string_equal(q.runtime, "QEMU 7.2/tcg/max");
    free(js);
    /* none recorded: "" (anywhere, as before), and none written back */
    assert_int_equal(sbx_parts_parse(rec(GOOD_FILES, GOOD_CHAIN), &p), 0);
    assert_string_equal(p.runtime, "");
    js = sbx_parts_json(&p);
    assert_null(strstr(js, "runtime"));
    free(js);
    sbx_parts_runtime(rec(GOOD_FILES, GOOD_CHAIN), rt, sizeof rt);
    assert_string_equal(rt, "");
    sbx_parts_runtime(NULL, rt, sizeof rt);
    assert_string_equal(rt, "");
    sbx_parts_runtime("{not json", rt, sizeof rt);
    assert_string_equal(rt, "");
    /* not a signature: the whole record is refused */
    static const char *const bad[] = {"7", "\"\"", "\"QEMU\\n7.2\"", NULL};
    for (const char *const *b = bad; *b; b++) {
        snprintf(buf, sizeof buf, "{\"runtime\":%s,\"files\":[%s],\"chain\":[%s]}", *b, GOOD_FILES, GOOD_CHAIN);
        if (sbx_parts_parse(buf, &p) != -1)
            fail_msg("runtime %s accepted", *b);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_sizes_and_digests),
        cmocka_unit_test(test_counts_and_chain),
        cmocka_unit_test(test_sandbox_record),
        cmocka_unit_test(test_runtime),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
