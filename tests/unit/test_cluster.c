/* Unit tests for the multi-node roles (src/daemon/cluster): role names, option checks
 * per role, which rows a role owns, and node capacity accounting (liveness from the
 * heartbeat, use summed over VM-holding sandboxes plus reservations), the placement
 * score (a pure function, table-driven), the shapes nodes report, and placement with
 * reservations on a real (SQLite) store (both backends' reservation semantics, races
 * included: tests/unit/store_checks.h). The
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

static void note(const struct store_node *n, const struct store_node_use *u, bool live, void *arg)
{
    struct seen *s = arg;
    size_t len = strlen(s->text);
    snprintf(s->text + len, sizeof s->text - len, "%s:%lld/%lld+%lld/%lld:%s;", n->id, (long long)u->used_vcpus,
             (long long)u->used_memory_mib, (long long)u->reserved_vcpus, (long long)u->reserved_memory_mib,
             live ? "live" : "dead");
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

/* The score is a pure function of one node's numbers: table of cases, each with what it
 * shows. Capacity 8 vCPUs / 8192 MiB unless said; the sandbox is 1 vCPU / 1024 MiB. */
static void test_score(void **state)
{
    (void)state;
    static const struct {
        const char *what;
        struct cluster_cand c;
        double want; /* -1: takes none */
    } cases[] = {
        {"empty node: 7/8 vCPUs, 7/8 memory left", {8, 8192, 8, 8192, true, false, false, 0, false, false}, 0.875},
        {"fraction, not absolute: the scarcer resource counts (memory 1/8 left)",
         {8, 8192, 8, 2048, true, false, false, 0, false, false}, 0.125},
        {"a small node as free as a big one scores the same", {2, 2048, 2, 2048, true, false, false, 0, false, false}, 0.5},
        {"exact fit leaves 0", {1, 1024, 1, 1024, true, false, false, 0, false, false}, 0},
        {"too few vCPUs", {8, 8192, 0, 8192, true, false, false, 0, false, false}, -1},
        {"too little memory", {8, 8192, 8, 1023, true, false, false, 0, false, false}, -1},
        {"overcommitted already (negative free)", {8, 8192, -2, 8192, true, false, false, 0, false, false}, -1},
        {"not live", {8, 8192, 8, 8192, false, false, false, 0, false, false}, -1},
        {"draining", {8, 8192, 8, 8192, true, true, false, 0, false, false}, -1},
        {"no capacity reported", {0, 0, 0, 0, true, false, false, 0, false, false}, -1},
        {"snapshot of the template at this shape", {8, 8192, 8, 8192, true, false, true, 0, false, false},
         0.875 + CLUSTER_SCORE_SNAPSHOT},
        {"warm clone ready (with its snapshot)", {8, 8192, 8, 8192, true, false, true, 2, false, false},
         0.875 + CLUSTER_SCORE_SNAPSHOT + CLUSTER_SCORE_WARM},
        {"locality never makes room", {8, 8192, 0, 8192, true, false, true, 3, false, false}, -1},
        {"holds the built template's image (others fetch it first)",
         {8, 8192, 8, 8192, true, false, false, 0, true, false}, 0.875 + CLUSTER_SCORE_IMAGE},
        {"an image never makes room", {8, 8192, 8, 1000, true, false, false, 0, true, false}, -1},
        {"another VM runtime than the saved state's: takes none, however local",
         {8, 8192, 8, 8192, true, false, true, 2, true, true}, -1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        double got = cluster_score(&cases[i].c, 1, 1024);
        if (got < cases[i].want - 1e-9 || got > cases[i].want + 1e-9)
            fail_msg("%s: score %f, want %f", cases[i].what, got, cases[i].want);
    }
    /* A warm clone on a busier node beats an idle node without one, unless the busy
     * node is much fuller: the weights are relative to the free fraction. */
    struct cluster_cand warm = {8, 8192, 4, 4096, true, false, true, 1, false, false}, idle = {8, 8192, 8, 8192, true, false, false, 0, false, false};
    assert_true(cluster_score(&warm, 1, 1024) > cluster_score(&idle, 1, 1024));
}

/* What nodes report: "tpl/VxM:W" entries, found by template and exact shape (a NIC and a
 * no-NIC snapshot of one shape are two entries: their clones add up); malformed entries
 * are ignored; an entry that does not fit is left out whole. */
static void test_shapes(void **state)
{
    (void)state;
    static const struct {
        const char *shapes, *tpl;
        unsigned v, m;
        bool snap;
        unsigned warm;
    } cases[] = {
        {"", "base", 1, 256, false, 0},
        {"base/1x256:0", "base", 1, 256, true, 0},
        {"base/1x256:2,base/1x256:1", "base", 1, 256, true, 3},
        {"base/1x256:2", "base", 1, 512, false, 0},
        {"base/1x256:2", "bas", 1, 256, false, 0},
        {"python/2x1024:1,base/1x256:4", "python", 2, 1024, true, 1},
        {"base/1x256:x,/1x256:1,base/1x256,base/1x256:1junk", "base", 1, 256, false, 0},
        {"base/1x256:1,", "base", 1, 256, true, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        bool snap;
        unsigned warm;
        cluster_shapes_find(cases[i].shapes, cases[i].tpl, cases[i].v, cases[i].m, &snap, &warm);
        if (snap != cases[i].snap || warm != cases[i].warm)
            fail_msg("\"%s\" %s/%ux%u: snapshot %d warm %u", cases[i].shapes, cases[i].tpl, cases[i].v,
                     cases[i].m, snap, warm);
    }
    char buf[32] = "";
    cluster_shapes_add(buf, sizeof buf, "base", 1, 256, 2);
    cluster_shapes_add(buf, sizeof buf, "python", 2, 1024, 0);
    assert_string_equal(buf, "base/1x256:2,python/2x1024:0");
    cluster_shapes_add(buf, sizeof buf, "x", 1, 1, 1); /* 9 more bytes: would not fit */
    assert_string_equal(buf, "base/1x256:2,python/2x1024:0");
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
    struct cluster cl = {0};
    sp.cluster = &cl;

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
    assert_string_equal(s.text, "a:3/768+0/0:live;b:1/128+0/0:dead;");

    /* a: 5 vCPUs / 7424 MiB free of 8/8192 (5/8 is the scarcer fraction); c: 4 / 4096
     * free of 4/4096, all of it. By fraction c wins, although a has more absolute free
     * memory; b is dead (never chosen). */
    struct store_node c = {.id = "c", .url = "http://127.0.0.1:3", .vcpus = 4, .memory_mib = 4096,
                           .heartbeat_ms = now};
    assert_int_equal(store_node_put(sp.store, &c), 0);
    struct cluster_want w = {"base", 1, 256, "", ""};
    struct cluster_pick p;
    assert_int_equal(cluster_pick(&sp, &w, &p), 0);
    assert_string_equal(p.node.id, "c");
    assert_int_equal(p.free_vcpus, 4);
    assert_int_equal(p.free_memory_mib, 4096);
    assert_int_equal(store_resv_release(sp.store, p.resv_id), 0);

    /* A built template's image: its holders score CLUSTER_SCORE_IMAGE more; a node
     * without it stays eligible and wins when emptier by more than that (a: 4/8 left
     * after the sandbox + 0.2 = 0.7 < c's 3/4). */
    struct cluster_want built = {"mine", 1, 256, "c", ""};
    assert_int_equal(cluster_pick(&sp, &built, &p), 0);
    assert_string_equal(p.node.id, "c");
    assert_true(p.score > 0.75 + CLUSTER_SCORE_IMAGE - 1e-9 && p.score < 0.75 + CLUSTER_SCORE_IMAGE + 1e-9);
    assert_int_equal(store_resv_release(sp.store, p.resv_id), 0);
    snprintf(built.holders, sizeof built.holders, "b,a");
    assert_int_equal(cluster_pick(&sp, &built, &p), 0);
    assert_string_equal(p.node.id, "c");
    assert_true(p.score > 0.75 - 1e-9 && p.score < 0.75 + 1e-9);
    assert_int_equal(store_resv_release(sp.store, p.resv_id), 0);

    /* Template locality: a warm clone of base 1x256 on a outweighs c's extra room. */
    snprintf(a.shapes, sizeof a.shapes, "python/1x256:3,base/1x256:1");
    assert_int_equal(store_node_put(sp.store, &a), 0);
    assert_int_equal(cluster_pick(&sp, &w, &p), 0);
    assert_string_equal(p.node.id, "a");
    assert_int_equal(store_resv_release(sp.store, p.resv_id), 0);

    /* A saved state (a travelling snapshot, a suspended sandbox that moves) goes only to a
     * node running the VM runtime that saved it (vm/vm_sig.h): c is emptier but runs
     * another QEMU; a node reporting none (an earlier version) is no candidate either.
     * None running it: refused, found (live nodes were considered) but runtime_found
     * false, which the control answers with 409 snapshot_incompatible. */
    snprintf(a.runtime, sizeof a.runtime, "QEMU 7.2/tcg/max");
    snprintf(c.runtime, sizeof c.runtime, "QEMU 8.0/tcg/max");
    assert_int_equal(store_node_put(sp.store, &a), 0);
    assert_int_equal(store_node_put(sp.store, &c), 0);
    struct cluster_want saved = {"sn0123456789abcdef", 1, 256, "", "QEMU 7.2/tcg/max"};
    assert_int_equal(cluster_pick(&sp, &saved, &p), 0);
    assert_string_equal(p.node.id, "a");
    assert_true(p.runtime_found);
    assert_int_equal(store_resv_release(sp.store, p.resv_id), 0);
    snprintf(saved.runtime, sizeof saved.runtime, "QEMU 8.0/tcg/max");
    assert_int_equal(cluster_pick(&sp, &saved, &p), 0);
    assert_string_equal(p.node.id, "c");
    assert_int_equal(store_resv_release(sp.store, p.resv_id), 0);
    snprintf(saved.runtime, sizeof saved.runtime, "QEMU 9.0/tcg/max");
    assert_int_equal(cluster_pick(&sp, &saved, &p), 1);
    assert_true(p.found);
    assert_false(p.runtime_found);
    saved.memory_mib = 1 << 20; /* none has room either: still "no runtime", the cause */
    assert_int_equal(cluster_pick(&sp, &saved, &p), 1);
    assert_false(p.runtime_found);
    snprintf(saved.runtime, sizeof saved.runtime, "QEMU 7.2/tcg/max"); /* runs it, no room */
    assert_int_equal(cluster_pick(&sp, &saved, &p), 1);
    assert_true(p.runtime_found);
    assert_string_equal(p.node.id, "a");
    a.runtime[0] = c.runtime[0] = '\0';
    assert_int_equal(store_node_put(sp.store, &a), 0);
    assert_int_equal(store_node_put(sp.store, &c), 0);
    saved.memory_mib = 256;
    assert_int_equal(cluster_pick(&sp, &saved, &p), 1);
    assert_false(p.runtime_found);

    /* Reservations count as used until released: three creates of 2 vCPUs on c (4
     * free) and a (5 free) fit four times in all (c twice, a twice); the fifth is refused
     * and names the largest free shape (a, 1 vCPU). */
    w = (struct cluster_want){"other", 2, 256, "", ""};
    char ids[5][STORE_ID_MAX];
    int placed = 0;
    for (int i = 0; i < 5; i++) {
        int rc = cluster_pick(&sp, &w, &p);
        if (rc == 0)
            snprintf(ids[placed++], sizeof ids[0], "%s", p.resv_id);
        else {
            assert_int_equal(rc, 1);
            assert_true(p.found);
            assert_string_equal(p.node.id, "a");
            assert_int_equal(p.free_vcpus, 1);
        }
    }
    assert_int_equal(placed, 4);
    s.text[0] = '\0';
    assert_int_equal(cluster_nodes_usage(&sp, note, &s), 0);
    assert_string_equal(s.text, "a:3/768+4/512:live;b:1/128+0/0:dead;c:0/0+4/512:live;");
    for (int i = 0; i < placed; i++)
        assert_int_equal(store_resv_release(sp.store, ids[i]), 0);
    assert_int_equal(cluster_pick(&sp, &w, &p), 0); /* room again */
    assert_int_equal(store_resv_release(sp.store, p.resv_id), 0);

    /* cluster_place keeps its reservation listed until released; a draining node is
     * skipped; nothing live: found is false. */
    assert_int_equal(store_node_set_draining(sp.store, "c", true), 0);
    w = (struct cluster_want){"", 1, 4096, "", ""};
    assert_int_equal(cluster_pick(&sp, &w, &p), 0);
    assert_string_equal(p.node.id, "a");
    struct cluster_resv *r = calloc(1, sizeof *r);
    assert_non_null(r);
    snprintf(r->id, sizeof r->id, "%s", p.resv_id);
    cl.resv = r;
    cluster_resv_release(&sp, r);
    assert_null(cl.resv);
    int64_t n = -1;
    assert_int_equal(store_resv_expire(sp.store, "a", now + 1000000, &n), 0);
    assert_int_equal(n, 0); /* released: nothing left to expire */

    c.heartbeat_ms = a.heartbeat_ms = now - CLUSTER_DEAD_MS - 1;
    assert_int_equal(store_node_put(sp.store, &a), 0);
    assert_int_equal(store_node_put(sp.store, &c), 0);
    assert_int_equal(cluster_pick(&sp, &w, &p), 1);
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
        cmocka_unit_test(test_score),
        cmocka_unit_test(test_shapes),
        cmocka_unit_test(test_capacity_and_placement),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
