/* Unit tests for the operation and sandbox state machines: names round-trip, the
 * legal-transition table (every verb from every state), 409 messages naming the state,
 * create-request validation, and the operation's API representation. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "daemon/ops/op.h"
#include "daemon/sandbox/sbx.h"

static void test_names(void **state)
{
    (void)state;
    for (int k = 0; k < OP_KIND_COUNT; k++)
        assert_int_equal(op_kind_parse(op_kind_name((enum op_kind)k)), k);
    for (int s = 0; s < OP_STATE_COUNT; s++)
        assert_int_equal(op_state_parse(op_state_name((enum op_state)s)), s);
    for (int s = 0; s < SBX_STATE_COUNT; s++)
        assert_int_equal(sbx_state_parse(sbx_state_name((enum sbx_state)s)), s);
    assert_int_equal(op_kind_parse("explode"), -1);
    assert_int_equal(op_state_parse(NULL), -1);
    assert_int_equal(sbx_state_parse("sleeping"), -1);
    assert_false(op_state_terminal(OP_PENDING));
    assert_false(op_state_terminal(OP_RUNNING));
    assert_true(op_state_terminal(OP_SUCCEEDED));
    assert_true(op_state_terminal(OP_FAILED));
    assert_true(op_state_terminal(OP_CANCELED));
}

/* Expected target of each verb from each stable desired state; -1 = illegal. */
static int expected(enum sbx_state from, enum op_kind k)
{
    switch (k) {
    case OP_DELETE: return from == SBX_DELETED ? -1 : SBX_DELETED;
    case OP_STOP: return from == SBX_RUNNING || from == SBX_PAUSED || from == SBX_SUSPENDED ? SBX_STOPPED : -1;
    case OP_START: return from == SBX_STOPPED || from == SBX_FAILED ? SBX_RUNNING : -1;
    case OP_PAUSE: return from == SBX_RUNNING ? SBX_PAUSED : -1;
    case OP_RESUME: return from == SBX_PAUSED ? SBX_RUNNING : -1;
    case OP_SUSPEND: return from == SBX_RUNNING || from == SBX_PAUSED ? SBX_SUSPENDED : -1;
    case OP_RESTORE: return from == SBX_SUSPENDED ? SBX_RUNNING : -1;
    case OP_WAKE: return from == SBX_DELETED ? -1 : SBX_RUNNING;
    default: return -1;
    }
}

static void test_transition_table(void **state)
{
    (void)state;
    const enum sbx_state stable[] = {SBX_RUNNING, SBX_PAUSED, SBX_SUSPENDED, SBX_STOPPED,
                                     SBX_FAILED, SBX_DELETED};
    for (size_t i = 0; i < sizeof stable / sizeof *stable; i++) {
        for (int k = OP_DELETE; k <= OP_WAKE; k++) {
            enum sbx_state target = SBX_STATE_COUNT;
            struct spaced_err err;
            int rc = sbx_transition(stable[i], stable[i], (enum op_kind)k, &target, &err);
            int want = expected(stable[i], (enum op_kind)k);
            if (want < 0) {
                assert_int_equal(rc, -1);
                assert_int_equal(err.status, 409);
                assert_string_equal(err.code, "invalid_state");
                assert_non_null(strstr(err.message, sbx_state_name(stable[i])));
                assert_non_null(strstr(err.message, op_kind_name((enum op_kind)k)));
            } else {
                assert_int_equal(rc, 0);
                assert_int_equal(target, want);
            }
        }
    }
    /* judged against the desired state: pause queued right after create is fine */
    enum sbx_state t;
    struct spaced_err err;
    assert_int_equal(sbx_transition(SBX_RUNNING, SBX_CREATING, OP_PAUSE, &t, &err), 0);
    assert_int_equal(t, SBX_PAUSED);
    /* ... and the message names both when they differ */
    assert_int_equal(sbx_transition(SBX_STOPPED, SBX_STOPPING, OP_RESUME, &t, &err), -1);
    assert_non_null(strstr(err.message, "stopping"));
    assert_non_null(strstr(err.message, "stopped"));
    /* a failed sandbox is judged by what it is, whatever was desired */
    assert_int_equal(sbx_transition(SBX_RUNNING, SBX_FAILED, OP_PAUSE, &t, &err), -1);
    assert_non_null(strstr(err.message, "failed"));
    assert_int_equal(sbx_transition(SBX_RUNNING, SBX_FAILED, OP_START, &t, &err), 0);
    /* create and template builds are not sandbox verbs */
    assert_int_equal(sbx_transition(SBX_RUNNING, SBX_RUNNING, OP_CREATE, &t, &err), -1);
    assert_int_equal(err.status, 400);
    assert_int_equal(sbx_transition(SBX_RUNNING, SBX_RUNNING, OP_TEMPLATE_BUILD, &t, &err), -1);
}

static int parse(const char *body, struct sbx_spec *spec, struct spaced_err *err)
{
    return sbx_spec_parse(body, strlen(body), spec, err);
}

static void test_spec_defaults_and_canonical(void **state)
{
    (void)state;
    struct sbx_spec s;
    struct spaced_err err;
    assert_int_equal(sbx_spec_parse("", 0, &s, &err), 0);
    assert_string_equal(s.template_name, "base");
    assert_int_equal(s.vcpus, 0); /* not given: the template's (sbx_spec_shape) */
    assert_int_equal(s.memory_mib, 0);
    unsigned v, m;
    sbx_spec_shape(&s, NULL, &v, &m); /* no template known: the defaults */
    assert_int_equal(v, SBX_VCPUS_DEFAULT);
    assert_int_equal(m, SBX_MEM_DEFAULT_MIB);
    struct tpl_info t = {.vcpus = 2, .memory_mib = 512};
    sbx_spec_shape(&s, &t, &v, &m); /* the template's */
    assert_int_equal(v, 2);
    assert_int_equal(m, 512);
    t = (struct tpl_info){.vcpus = 999, .memory_mib = 1}; /* kept within a client's bounds */
    sbx_spec_shape(&s, &t, &v, &m);
    assert_int_equal(v, SBX_VCPUS_MAX);
    assert_int_equal(m, SBX_MEM_MIN_MIB);
    assert_int_equal(s.timeout_s, SBX_TIMEOUT_DEFAULT_S);
    assert_string_equal(s.on_timeout, "suspend");
    assert_string_equal(s.env_json, "{}");
    assert_string_equal(s.network_json, "{\"mode\":\"none\"}");
    sbx_spec_clear(&s);
    assert_int_equal(parse("{\"template\":\"python\",\"vcpus\":4,\"memory_mib\":1024,"
                           "\"env\":{\"B\":\"2\",\"A\":\"1\"},\"timeout\":0,\"on_timeout\":\"delete\","
                           "\"network\":{\"allow\":[\"*.pypi.org\",\"10.0.0.0/8\"],\"mode\":\"allowlist\"}}",
                           &s, &err), 0);
    assert_string_equal(s.env_json, "{\"A\":\"1\",\"B\":\"2\"}");
    t = (struct tpl_info){.vcpus = 2, .memory_mib = 512};
    sbx_spec_shape(&s, &t, &v, &m); /* the body's size wins over the template's */
    assert_int_equal(v, 4);
    assert_int_equal(m, 1024);
    assert_string_equal(s.network_json, "{\"allow\":[\"*.pypi.org\",\"10.0.0.0/8\"],\"mode\":\"allowlist\"}");
    assert_int_equal(s.timeout_s, 0);
    sbx_spec_clear(&s);
}

static void test_spec_rejects(void **state)
{
    (void)state;
    static const struct {
        const char *body, *code, *mentions;
    } bad[] = {
        {"{", "invalid_json", NULL},
        {"[]", "invalid_json", NULL},
        {"{}x", "invalid_json", NULL},
        {"{\"a\":1,\"a\":2}", "invalid_json", NULL},
        {"{\"tmplate\":\"x\"}", "unknown_field", "tmplate"},
        {"{\"template\":\"\"}", "invalid_request", "template"},
        {"{\"vcpus\":0}", "invalid_request", "vcpus"},
        {"{\"vcpus\":true}", "invalid_request", "vcpus"},
        {"{\"memory_mib\":99999999999}", "invalid_request", "memory_mib"},
        {"{\"timeout\":2592001}", "invalid_request", "timeout"},
        {"{\"on_timeout\":5}", "invalid_request", "on_timeout"},
        {"{\"env\":{\"\":\"x\"}}", "invalid_request", "env"},
        {"{\"env\":{\"A-B\":\"x\"}}", "invalid_request", "env"},
        {"{\"metadata\":{\"k\":null}}", "invalid_request", "metadata"},
        {"{\"network\":\"open\"}", "invalid_request", "network"},
        {"{\"network\":{}}", "invalid_request", "network.mode"},
        {"{\"network\":{\"mode\":\"allowlist\",\"allow\":[1]}}", "invalid_request", "allow[0]"},
        {"{\"network\":{\"mode\":\"allowlist\",\"allow\":[\"a b\"]}}", "invalid_request", "allow[0]"},
        {"{\"network\":{\"mode\":\"open\",\"x\":1}}", "unknown_field", "network.x"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        struct sbx_spec s;
        struct spaced_err err;
        assert_int_equal(parse(bad[i].body, &s, &err), -1);
        assert_int_equal(err.status, 400);
        if (strcmp(err.code, bad[i].code) != 0)
            fail_msg("%s: got %s (%s), want %s", bad[i].body, err.code, err.message, bad[i].code);
        if (bad[i].mentions && !strstr(err.message, bad[i].mentions))
            fail_msg("%s: message \"%s\" does not name %s", bad[i].body, err.message, bad[i].mentions);
        assert_null(s.env_json);
    }
    /* too many metadata pairs */
    json_t *m = json_object();
    for (int i = 0; i <= SBX_META_MAX; i++) {
        char k[16];
        snprintf(k, sizeof k, "k%d", i);
        json_object_set_new(m, k, json_string("v"));
    }
    json_t *body = json_pack("{s:o}", "metadata", m);
    char *text = json_dumps(body, 0);
    struct sbx_spec s;
    struct spaced_err err;
    assert_int_equal(parse(text, &s, &err), -1);
    free(text);
    json_decref(body);
}

static void test_ids(void **state)
{
    (void)state;
    assert_true(sbx_id_valid("sb0123456789abcdef"));
    assert_false(sbx_id_valid("sb0123456789ABCDEF"));
    assert_false(sbx_id_valid("sb0123456789abcde"));
    assert_false(sbx_id_valid("xx0123456789abcdef"));
    assert_false(sbx_id_valid("sb0123456789abcdeg"));
    assert_false(sbx_id_valid(NULL));
    char id[32];
    assert_int_equal(spaced_random_id(id, "sb", 16), 0);
    assert_true(sbx_id_valid(id));
}

static void test_op_json(void **state)
{
    (void)state;
    struct store_op op = {.id = "op1", .tenant = "t", .kind = "create", .target = "sb1",
                          .state = "failed", .error_code = "vm_failed", .progress = 10,
                          .created_ms = 1700000000123};
    op.error_message = (char *)"boom";
    json_t *j = op_to_json(&op);
    assert_string_equal(json_string_value(json_object_get(j, "sandbox_id")), "sb1");
    assert_true(json_is_null(json_object_get(j, "template")));
    assert_string_equal(json_string_value(json_object_get(json_object_get(j, "error"), "message")), "boom");
    assert_string_equal(json_string_value(json_object_get(j, "created_at")), "2023-11-14T22:13:20.123Z");
    assert_true(json_is_null(json_object_get(j, "finished_at")));
    json_decref(j);
    struct store_op tb = {.id = "op2", .kind = "template_build", .target = "mytpl", .state = "pending"};
    j = op_to_json(&tb);
    assert_string_equal(json_string_value(json_object_get(j, "template")), "mytpl");
    assert_true(json_is_null(json_object_get(j, "error")));
    json_decref(j);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_transition_table),
        cmocka_unit_test(test_spec_defaults_and_canonical),
        cmocka_unit_test(test_spec_rejects),
        cmocka_unit_test(test_ids),
        cmocka_unit_test(test_op_json),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
