/* Sessions (session/sess.c) whose agent connection ends under them, with a real session
 * table, sandbox table and SQLite store, and the real agentc talking to a fake agent on
 * a socketpair (agentc_fake.h): the sandbox stays running, as it does when spaced
 * reconnects to a VM whose agent stream broke (sbx_act.c on_agent_closed).
 *
 * The hang this guards against: the exec went out, the connection ended before the
 * agent's "started" event, and the session stayed `starting` with no pid forever; only a
 * known pid is re-attached after a reconnect, so nothing ever woke its attach stream.
 * Now it ends `lost` with a clear error at once. A session whose process had started
 * stays re-attachable by its pid. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "agentc_fake.h"
#include "daemon/sandbox/sbx_internal.h"
#include "daemon/session/sess.h"
#include "daemon/session/sess_internal.h"
#include "daemon/session/sess_req.h"
#include "daemon/spaced.h"
#include "daemon/store/store.h"

struct fx {
    char dir[64];
    char db[96];
    struct spaced sp;
    struct sess_table *sess;
    struct sbx *x;
    struct fake f;
};

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof *f);
    if (!f)
        return -1;
    snprintf(f->dir, sizeof f->dir, "/tmp/test_sess_agent.XXXXXX");
    if (!mkdtemp(f->dir))
        return -1;
    snprintf(f->db, sizeof f->db, "%s/space.db", f->dir);
    char err[256];
    f->sp.base = event_base_new();
    f->sp.store = store_open(f->db, err, sizeof err);
    f->sp.sbx = f->sp.store ? sbx_table_new(&f->sp) : NULL;
    if (!f->sp.base || !f->sp.sbx)
        return -1;
    struct store_sbx rec = {.vcpus = 1, .memory_mib = 256};
    snprintf(rec.id, sizeof rec.id, "sbtest");
    snprintf(rec.tenant, sizeof rec.tenant, "tn1");
    snprintf(rec.state, sizeof rec.state, "running");
    snprintf(rec.desired, sizeof rec.desired, "running");
    if (store_sbx_put(f->sp.store, &rec) < 0 || !(f->x = sbx_table_add(&f->sp, &rec)))
        return -1;
    sbx_set_state(f->x, SBX_RUNNING, NULL);
    if (!(f->sess = sess_table_new(&f->sp)))
        return -1;
    fake_start_on(&f->f, f->sp.base);
    f->x->agent = f->f.c; /* what sess_agent() finds */
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;
    sess_table_free(f->sess);
    if (f->x->agent)
        agentc_free(f->x->agent);
    f->x->agent = NULL;
    close(f->f.peer);
    sbx_table_free(f->sp.sbx);
    store_close(f->sp.store);
    event_base_free(f->sp.base);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", f->dir);
    int rc = system(cmd);
    free(f);
    return rc == 0 ? 0 : -1;
}

/* A session created and started (its exec OPEN read by the fake agent); returns it and
 * the channel id the agent saw. */
static struct sess *started(struct fx *f, uint32_t *chan)
{
    handshake(&f->f);
    struct sess_spec spec;
    struct spaced_err err;
    static const char body[] = "{\"argv\":[\"sleep\",\"100\"]}";
    assert_int_equal(sess_req_create(body, sizeof body - 1, &spec, &err), 0);
    char token[SESS_TOKEN_LEN + 1];
    struct sess *s = sess_create(f->sess, "tn1", "sbtest", &spec, token, &err);
    assert_non_null(s);
    assert_int_equal(sess_start(s, f->f.c, &err), 0);
    assert_int_equal(sess_state(s), SESS_STARTING);
    char pl[4096];
    struct frame fr;
    do
        assert_true(fake_recv(&f->f, &fr, pl, sizeof pl));
    while (fr.type != FRAME_OPEN);
    assert_non_null(strstr(pl, "\"exec\""));
    *chan = fr.channel;
    return s;
}

/* The agent's stream ends (EOF on the socket), as a broken virtio-serial stream does. */
static void drop_connection(struct fx *f)
{
    shutdown(f->f.peer, SHUT_RDWR);
    for (int i = 0; i < 200 && !f->f.closed; i++) {
        pump(&f->f);
        usleep(1000);
    }
    assert_true(f->f.closed);
    agentc_free(f->x->agent); /* what sbx does on on_closed, before reconnecting */
    f->x->agent = NULL;
}

static void test_dropped_before_started_ends_lost(void **state)
{
    struct fx *f = *state;
    uint32_t chan;
    struct sess *s = started(f, &chan);
    drop_connection(f);
    /* Before: still `starting`, pid 0, and nothing would ever end it. */
    assert_int_equal(sess_state(s), SESS_LOST);
    json_t *j = sess_to_json(s);
    json_t *e = json_object_get(j, "error");
    assert_non_null(e);
    assert_string_equal(json_string_value(json_object_get(e, "code")), "agent_disconnected");
    json_decref(j);
}

static void test_dropped_after_started_stays_reattachable(void **state)
{
    struct fx *f = *state;
    uint32_t chan;
    struct sess *s = started(f, &chan);
    fake_json(&f->f, chan, FRAME_EVENT, "{\"type\":\"started\",\"pid\":42}");
    for (int i = 0; i < 100 && sess_state(s) != SESS_RUNNING; i++)
        pump(&f->f);
    assert_int_equal(sess_state(s), SESS_RUNNING);
    drop_connection(f);
    /* Detached, not ended: the next connection re-attaches pid 42. */
    assert_int_equal(sess_state(s), SESS_STARTING);
}

int main(void)
{
    (void)open_rec; /* agentc_fake.h's helpers this test has no use for */
    (void)fake_start;
    (void)fake_stop;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_dropped_before_started_ends_lost, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dropped_after_started_stays_reattachable, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
