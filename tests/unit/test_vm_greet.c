/* test_vm_greet: the greeter's timers without a VM (vm_greet.h). The caller's side is
 * played by the test: "sending a HELLO" is calling vmg_sent, "the agent answered" is
 * vmg_answered, and with no VM (vmg_begin with NULL) on_retry stands for the fresh
 * connection and greets it again. Checked: the deadline reports once, an answer or a stop
 * silences it, an unanswered connection is replaced after retry_ms and the attempts
 * limit ends it, the greeter can be freed from on_fail, and a VM that cannot start leaves
 * it idle. Waits are short (tens of ms); only orderings and counts are checked. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <event2/event.h>
#include <string.h>

#include "daemon/vm/vm_greet.h"

struct rec {
    struct vmg *g;
    unsigned retries, fails;
    int err;
    char msg[128];
    unsigned answer_at_retry; /* answer when on_retry ran this many times (0: never) */
    int free_in_fail;
};

static struct event_base *base;

static void on_retry(void *arg, struct vm *vm)
{
    struct rec *r = arg;
    assert_null(vm);
    r->retries++;
    vmg_sent(r->g); /* the fresh connection is greeted */
    if (r->answer_at_retry && r->retries == r->answer_at_retry)
        vmg_answered(r->g);
}

static void on_fail(void *arg, struct vm *vm, int err, const char *msg)
{
    struct rec *r = arg;
    r->fails++;
    r->err = err;
    snprintf(r->msg, sizeof r->msg, "%s", msg);
    assert_false(vmg_active(r->g));
    if (r->free_in_fail) {
        vmg_free(r->g);
        r->g = NULL;
    }
}

static const struct vmg_ops ops = {on_retry, on_fail};

static void run_ms(unsigned ms)
{
    struct timeval tv = {0, ms * 1000};
    event_base_loopexit(base, &tv);
    event_base_dispatch(base);
}

static void setup_rec(struct rec *r)
{
    memset(r, 0, sizeof *r);
    r->g = vmg_new(base, &ops, r);
    assert_non_null(r->g);
}

static void test_deadline_once(void **state)
{
    struct rec r;
    setup_rec(&r);
    struct vmg_params p = {0, 0, 30};
    vmg_begin(r.g, NULL, &p);
    vmg_sent(r.g); /* no retry_ms: only the deadline counts */
    assert_true(vmg_active(r.g));
    run_ms(150);
    assert_int_equal(r.fails, 1);
    assert_int_equal(r.retries, 0);
    assert_int_equal(r.err, VM_E_TIMEOUT);
    assert_non_null(strstr(r.msg, "30 ms"));
    vmg_free(r.g);
}

static void test_answer_and_stop_silence(void **state)
{
    struct rec r;
    setup_rec(&r);
    struct vmg_params p = {20, 0, 40};
    vmg_begin(r.g, NULL, &p);
    vmg_sent(r.g);
    vmg_answered(r.g);
    assert_false(vmg_active(r.g));
    run_ms(100);
    vmg_begin(r.g, NULL, &p); /* reusable */
    vmg_sent(r.g);
    vmg_stop(r.g);
    vmg_sent(r.g); /* idle: a no-op */
    run_ms(100);
    assert_int_equal(r.fails, 0);
    assert_int_equal(r.retries, 0);
    vmg_free(r.g);
}

static void test_retry_until_attempts(void **state)
{
    struct rec r;
    setup_rec(&r);
    struct vmg_params p = {10, 3, 0};
    vmg_begin(r.g, NULL, &p);
    vmg_sent(r.g);
    run_ms(300);
    /* 3 connections, each unanswered: 2 fresh ones after the first, then the end */
    assert_int_equal(r.retries, 2);
    assert_int_equal(r.fails, 1);
    assert_int_equal(r.err, VM_E_TIMEOUT);
    assert_non_null(strstr(r.msg, "never answered HELLO"));
    vmg_free(r.g);
}

static void test_answer_after_retry(void **state)
{
    struct rec r;
    setup_rec(&r);
    r.answer_at_retry = 2;
    struct vmg_params p = {10, 0, 0};
    vmg_begin(r.g, NULL, &p);
    vmg_sent(r.g);
    run_ms(200);
    assert_int_equal(r.retries, 2);
    assert_int_equal(r.fails, 0);
    assert_false(vmg_active(r.g));
    vmg_free(r.g);
}

static void test_free_in_fail(void **state)
{
    struct rec r;
    setup_rec(&r);
    r.free_in_fail = 1;
    struct vmg_params p = {10, 1, 0};
    vmg_begin(r.g, NULL, &p);
    vmg_sent(r.g);
    run_ms(100);
    assert_int_equal(r.fails, 1);
    assert_null(r.g); /* ASan: nothing touched it after */
}

static void test_start_fails_idle(void **state)
{
    struct rec r;
    setup_rec(&r);
    struct vm_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.id = "bad id!"; /* refused before anything starts */
    cfg.vcpus = 1;
    cfg.mem_mib = 128;
    cfg.kernel = "/nonexistent";
    cfg.run_dir = "/nonexistent";
    cfg.net.tap_fd = -1;
    struct vmg_params p = {0, 0, 20};
    int err = 0;
    char msg[128] = "";
    static const struct vm_callbacks cbs;
    assert_null(vmg_start(r.g, &cfg, NULL, 0, &p, &cbs, NULL, &err, msg, sizeof msg));
    assert_int_not_equal(err, VM_OK);
    assert_false(vmg_active(r.g));
    run_ms(60);
    assert_int_equal(r.fails, 0);
    vmg_free(r.g);
}

int main(void)
{
    base = event_base_new();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_deadline_once),
        cmocka_unit_test(test_answer_and_stop_silence),
        cmocka_unit_test(test_retry_until_attempts),
        cmocka_unit_test(test_answer_after_retry),
        cmocka_unit_test(test_free_in_fail),
        cmocka_unit_test(test_start_fails_idle),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    event_base_free(base);
    return rc;
}
