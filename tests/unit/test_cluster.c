/* Unit tests for the multi-node roles (src/daemon/cluster): role names, option checks
 * per role, which rows a role owns, and node capacity accounting (liveness from the
 * heartbeat, use summed over VM-holding sandboxes) and placement (most free memory
 * among the nodes where the sandbox fits, creates in flight counted) on a real (SQLite)
 * store. The
 * forwarding itself runs end to end in tests/e2e/test_cluster.py. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "daemon/cluster/cluster.h"
#include "daemon/cluster/cluster_internal.h"
#include "daemon/spaced.h"
#include "daemon/store/store.h"

static void test_roles(void **state)
{
    (void)state;
    assert_int_equal(cluster_role_parse("all"), CLUSTER_ALL);
    assert_int_equal(cluster_role_parse("control"), CLUSTER_CONTROL);
    assert_int_equal(cluster_role_parse("node"), CLUSTER_NODE);
    assert_int_equal(cluster_role_parse("Node"), -1);
    assert_int_equal(cluster_role_parse(""), -1);
    assert_string_equal(cluster_role_name(CLUSTER_CONTROL), "control");
    assert_string_equal(cluster_role_name(7), "?");
}

static int check(struct spaced *sp, const char *want_in_err)
{
    char err[320] = "";
    int rc = cluster_check_opts(sp, err, sizeof err);
    if (want_in_err && !strstr(err, want_in_err))
        fail_msg("error \"%s\" lacks \"%s\"", err, want_in_err);
    return rc;
}

static void test_options_per_role(void **state)
{
    (void)state;
    struct spaced sp;
    memset(&sp, 0, sizeof sp);
    assert_int_equal(check(&sp, NULL), 0); /* all: nothing needed */

    sp.opt.role = CLUSTER_NODE;
    sp.opt.store_url = "/var/lib/space/space.db";
    assert_int_equal(check(&sp, "PostgreSQL"), -1);
    sp.opt.store_url = "postgresql:///space?host=/run/pg";
    assert_int_equal(check(&sp, "SPACE_NODE_TOKEN"), -1);
    sp.opt.node_token = "short";
    assert_int_equal(check(&sp, "SPACE_NODE_TOKEN"), -1);
    sp.opt.node_token = "0123456789abcdef0123";
    assert_int_equal(check(&sp, "--node-id"), -1);
    sp.opt.node_id = "bad id";
    assert_int_equal(check(&sp, "--node-id"), -1);
    sp.opt.node_id = "node-1.zone_a";
    assert_int_equal(check(&sp, "--advertise"), -1);
    sp.opt.advertise = "127.0.0.1:7070";
    assert_int_equal(check(&sp, "--advertise"), -1);
    sp.opt.advertise = "http://10.0.0.5:7070";
    assert_int_equal(check(&sp, NULL), 0);
    assert_true(sp.opt.node_vcpus >= 1); /* host defaults filled */
    assert_true(sp.opt.node_memory_mib >= 1);

    struct spaced ctl;
    memset(&ctl, 0, sizeof ctl);
    ctl.opt.role = CLUSTER_CONTROL;
    ctl.opt.store_url = "host=db dbname=space";
    ctl.opt.node_token = sp.opt.node_token;
    assert_int_equal(check(&ctl, NULL), 0); /* control needs no node id or address */
}

static void test_ownership(void **state)
{
    (void)state;
    struct spaced sp;
    memset(&sp, 0, sizeof sp);
    struct store_sbx mine = {.node = "n1"}, other = {.node = "n2"}, single = {.node = ""};
    assert_true(cluster_owns_sbx(&sp, &other)); /* all: every row */
    assert_string_equal(cluster_node_id(&sp), "");
    assert_true(cluster_runs_sandboxes(&sp));
    sp.opt.role = CLUSTER_NODE;
    sp.opt.node_id = "n1";
    assert_true(cluster_owns_sbx(&sp, &mine));
    assert_false(cluster_owns_sbx(&sp, &other));
    assert_false(cluster_owns_sbx(&sp, &single));
    assert_string_equal(cluster_node_id(&sp), "n1");
    sp.opt.role = CLUSTER_CONTROL;
    assert_false(cluster_owns_sbx(&sp, &mine));
    assert_false(cluster_runs_sandboxes(&sp));
    assert_string_equal(cluster_node_id(&sp), "");
}

struct seen {
    char text[256];
};

static void note(const struct store_node *n, unsigned vcpus, unsigned memory_mib, bool live, void *arg)
{
    struct seen *s = arg;
    size_t len = strlen(s->text);
    snprintf(s->text + len, sizeof s->text - len, "%s:%u/%u:%s;", n->id, vcpus, memory_mib, live ? "live" : "dead");
}

static void put_sbx(struct store *st, const char *id, const char *node, const char *state, unsigned vcpus,
                    unsigned mem)
{
    struct store_sbx s = {.vcpus = vcpus, .memory_mib = mem};
    snprintf(s.id, sizeof s.id, "%s", id);
    snprintf(s.tenant, sizeof s.tenant, "t");
    snprintf(s.template_name, sizeof s.template_name, "base");
    snprintf(s.on_timeout, sizeof s.on_timeout, "suspend");
    snprintf(s.desired, sizeof s.desired, "running");
    snprintf(s.state, sizeof s.state, "%s", state);
    snprintf(s.node, sizeof s.node, "%s", node);
    assert_int_equal(store_sbx_put(st, &s), 0);
}

static void test_capacity_and_placement(void **state)
{
    (void)state;
    char dir[] = "/tmp/test_cluster.XXXXXX", path[64], err[256];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/space.db", dir);
    struct spaced sp;
    memset(&sp, 0, sizeof sp);
    sp.store = store_open(path, err, sizeof err);
    assert_non_null(sp.store);

    int64_t now = spaced_now_ms();
    struct store_node a = {.id = "a", .url = "http://127.0.0.1:1", .vcpus = 8, .memory_mib = 8192,
                           .heartbeat_ms = now};
    struct store_node b = {.id = "b", .url = "http://127.0.0.1:2", .vcpus = 8, .memory_mib = 8192,
                           .heartbeat_ms = now - CLUSTER_DEAD_MS - 1000};
    assert_int_equal(store_node_put(sp.store, &a), 0);
    assert_int_equal(store_node_put(sp.store, &b), 0);
    put_sbx(sp.store, "sb1", "a", "running", 2, 512);
    put_sbx(sp.store, "sb2", "a", "paused", 1, 256);     /* paused VMs keep their memory */
    put_sbx(sp.store, "sb3", "a", "suspended", 4, 4096); /* on disk: holds nothing */
    put_sbx(sp.store, "sb4", "a", "failed", 4, 4096);
    put_sbx(sp.store, "sb5", "b", "creating", 1, 128);
    put_sbx(sp.store, "sb6", "", "running", 1, 128);     /* single-host row: no node */
    put_sbx(sp.store, "sb7", "b", "deleted", 1, 128);

    struct seen s = {""};
    assert_int_equal(cluster_nodes_usage(&sp, note, &s), 0);
    assert_string_equal(s.text, "a:3/768:live;b:1/128:dead;");

    /* Placement: a has 5 vCPUs / 7424 MiB free, c 4 / 4096, b is dead (never chosen). */
    struct store_node c = {.id = "c", .url = "http://127.0.0.1:3", .vcpus = 4, .memory_mib = 4096,
                           .heartbeat_ms = now};
    assert_int_equal(store_node_put(sp.store, &c), 0);
    struct cluster_pick p;
    assert_int_equal(cluster_pick(&sp, 1, 256, &p), 0);
    assert_string_equal(p.node.id, "a");
    assert_int_equal(p.free_memory_mib, 7424);
    assert_int_equal(p.free_vcpus, 5);
    assert_int_equal(cluster_pick(&sp, 1, 8000, &p), 1); /* fits nowhere: names the most free */
    assert_true(p.found);
    assert_string_equal(p.node.id, "a");
    assert_int_equal(cluster_pick(&sp, 6, 256, &p), 1);
    assert_int_equal(cluster_pick(&sp, 4, 4096, &p), 0);
    assert_string_equal(p.node.id, "a");

    /* A create in flight to a counts there before its row exists. */
    struct cluster cl = {0};
    struct cluster_resv *r = calloc(1, sizeof *r);
    assert_non_null(r);
    snprintf(r->node, sizeof r->node, "a");
    r->vcpus = 1;
    r->memory_mib = 4000;
    cl.resv = r;
    sp.cluster = &cl;
    assert_int_equal(cluster_pick(&sp, 1, 256, &p), 0);
    assert_string_equal(p.node.id, "c");
    cluster_resv_release(&sp, r);
    assert_null(cl.resv);
    assert_int_equal(cluster_pick(&sp, 1, 256, &p), 0);
    assert_string_equal(p.node.id, "a");
    sp.cluster = NULL;

    c.heartbeat_ms = a.heartbeat_ms = now - CLUSTER_DEAD_MS - 1;
    assert_int_equal(store_node_put(sp.store, &a), 0);
    assert_int_equal(store_node_put(sp.store, &c), 0);
    assert_int_equal(cluster_pick(&sp, 1, 256, &p), 1);
    assert_false(p.found); /* nobody live */
    store_close(sp.store);
    char cmd[96];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roles),
        cmocka_unit_test(test_options_per_role),
        cmocka_unit_test(test_ownership),
        cmocka_unit_test(test_capacity_and_placement),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
