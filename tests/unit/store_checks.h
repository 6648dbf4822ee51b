/* store_checks.h: behavioural checks of a store backend, shared by the tests of every
 * backend so that all of them are held to the same semantics.
 *
 * Both backends sit behind the same store.h functions; the includer only says where its
 * store lives by defining, before including:
 *   checks_open()         struct store *: opens the backend's store for the current test
 *                         (store_open of a SQLite path or a PostgreSQL URL), or fails it
 *   checks_open_quiet(err, cap)
 *                         struct store *: the same without failing (used in forked children)
 * and gets static check_* functions (cmocka test bodies) to list in its own main().
 *
 * What is checked: every table's round trip, uniqueness (STORE_CONFLICT), NOTFOUND,
 * filters and keyset pagination, transactions and rollback, and crash consistency (a
 * writer killed with SIGKILL mid-transaction and mid-stream of commits). */
#ifndef SPACE_TEST_STORE_CHECKS_H
#define SPACE_TEST_STORE_CHECKS_H

#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "daemon/store/store.h"

static void fill_sbx(struct store_sbx *s, const char *id, const char *tenant, const char *tpl,
                     const char *state, const char *meta)
{
    memset(s, 0, sizeof *s);
    snprintf(s->id, sizeof s->id, "%s", id);
    snprintf(s->tenant, sizeof s->tenant, "%s", tenant);
    snprintf(s->template_name, sizeof s->template_name, "%s", tpl);
    s->vcpus = 1;
    s->memory_mib = 256;
    s->env_json = (char *)"{}";
    s->metadata_json = (char *)meta;
    s->network_json = (char *)"{\"mode\":\"none\"}";
    snprintf(s->on_timeout, sizeof s->on_timeout, "suspend");
    snprintf(s->desired, sizeof s->desired, "running");
    snprintf(s->state, sizeof s->state, "%s", state);
    snprintf(s->run_dir, sizeof s->run_dir, "/run/%s", id);
    s->created_ms = s->updated_ms = 1000;
}

static void check_tenants_and_keys(void **state)
{
    (void)state;
    struct store *st = checks_open();
    struct store_tenant t = {.id = "tn1", .name = "team", .created_ms = 5};
    assert_int_equal(store_tenant_put(st, &t), 0);
    assert_int_equal(store_tenant_put(st, &t), STORE_CONFLICT);
    struct store_tenant got;
    assert_int_equal(store_tenant_by_name(st, "team", &got), 0);
    assert_string_equal(got.id, "tn1");
    assert_int_equal(store_tenant_get(st, "nope", &got), STORE_NOTFOUND);

    struct store_key k = {.id = "ak1", .tenant = "tn1", .hash = "abc", .prefix = "space_12", .admin = true,
                          .created_ms = 1};
    assert_int_equal(store_key_put(st, &k), 0);
    struct store_key kk;
    assert_int_equal(store_key_by_hash(st, "abc", &kk), 0);
    assert_string_equal(kk.id, "ak1");
    assert_true(kk.admin);
    assert_int_equal(kk.revoked_ms, 0);
    assert_int_equal(store_key_revoke(st, "ak1", 77), 0);
    assert_int_equal(store_key_revoke(st, "ak1", 78), STORE_NOTFOUND); /* already revoked */
    assert_int_equal(store_key_revoke(st, "ak2", 78), STORE_NOTFOUND);
    assert_int_equal(store_key_get(st, "ak1", &kk), 0);
    assert_int_equal(kk.revoked_ms, 77);
    assert_int_equal(store_key_by_hash(st, "zzz", &kk), STORE_NOTFOUND);
    store_close(st);
}

static int count_cb(const struct store_sbx *s, void *arg)
{
    char *ids = arg;
    strcat(ids, s->id);
    strcat(ids, ",");
    return 0;
}

static void check_sandboxes_list(void **state)
{
    (void)state;
    struct store *st = checks_open();
    struct store_sbx s;
    fill_sbx(&s, "sb1", "A", "base", "running", "{\"grp\":\"x\",\"n\":\"1\"}");
    assert_int_equal(store_sbx_put(st, &s), 0);
    fill_sbx(&s, "sb2", "A", "python", "paused", "{\"grp\":\"y\"}");
    assert_int_equal(store_sbx_put(st, &s), 0);
    fill_sbx(&s, "sb3", "A", "base", "deleted", "{\"grp\":\"x\"}");
    assert_int_equal(store_sbx_put(st, &s), 0);
    fill_sbx(&s, "sb4", "B", "base", "running", "{\"grp\":\"x\"}");
    assert_int_equal(store_sbx_put(st, &s), 0);
    fill_sbx(&s, "sb5", "A", "base", "running", "{\"grp\":\"x\",\"n\":\"2\"}");
    assert_int_equal(store_sbx_put(st, &s), 0);
    /* upsert changes state and keeps one row */
    fill_sbx(&s, "sb1", "A", "base", "stopped", "{\"grp\":\"x\",\"n\":\"1\"}");
    s.failure = (char *)"why";
    s.private_ports = true;
    s.auto_resume = true;
    assert_int_equal(store_sbx_put(st, &s), 0);

    struct store_sbx got;
    assert_int_equal(store_sbx_get(st, "sb1", &got), 0);
    assert_string_equal(got.state, "stopped");
    assert_string_equal(got.failure, "why");
    assert_string_equal(got.network_json, "{\"mode\":\"none\"}");
    assert_true(got.private_ports);
    assert_true(got.auto_resume);
    store_sbx_clear(&got);
    assert_int_equal(store_sbx_get(st, "sb4", &got), 0);
    assert_false(got.private_ports);
    assert_false(got.auto_resume);
    store_sbx_clear(&got);
    assert_int_equal(store_sbx_get(st, "zz", &got), STORE_NOTFOUND);

    char ids[256] = "";
    bool more;
    struct store_sbx_filter f = {.tenant = "A", .limit = 100};
    assert_int_equal(store_sbx_list(st, &f, count_cb, ids, &more), 0);
    assert_string_equal(ids, "sb1,sb2,sb5,"); /* tenant B and deleted rows hidden */
    assert_false(more);

    ids[0] = '\0';
    f.limit = 2;
    assert_int_equal(store_sbx_list(st, &f, count_cb, ids, &more), 0);
    assert_string_equal(ids, "sb1,sb2,");
    assert_true(more);
    ids[0] = '\0';
    f.after_id = "sb2";
    assert_int_equal(store_sbx_list(st, &f, count_cb, ids, &more), 0);
    assert_string_equal(ids, "sb5,");
    assert_false(more);

    ids[0] = '\0';
    struct store_sbx_filter g = {.tenant = "A", .limit = 100, .metadata_json = "{\"grp\":\"x\"}"};
    assert_int_equal(store_sbx_list(st, &g, count_cb, ids, &more), 0);
    assert_string_equal(ids, "sb1,sb5,");
    ids[0] = '\0';
    g.metadata_json = "{\"grp\":\"x\",\"n\":\"2\"}";
    assert_int_equal(store_sbx_list(st, &g, count_cb, ids, &more), 0);
    assert_string_equal(ids, "sb5,");
    g.metadata_json = "[1]";
    assert_int_equal(store_sbx_list(st, &g, count_cb, ids, &more), -1);

    ids[0] = '\0';
    struct store_sbx_filter h = {.tenant = "A", .limit = 100, .state = "deleted"};
    assert_int_equal(store_sbx_list(st, &h, count_cb, ids, &more), 0);
    assert_string_equal(ids, "sb3,");
    ids[0] = '\0';
    struct store_sbx_filter t = {.tenant = "A", .limit = 100, .template_name = "python"};
    assert_int_equal(store_sbx_list(st, &t, count_cb, ids, &more), 0);
    assert_string_equal(ids, "sb2,");

    ids[0] = '\0';
    assert_int_equal(store_sbx_each_live(st, count_cb, ids), 0);
    assert_string_equal(ids, "sb1,sb2,sb4,sb5,");
    store_close(st);
}

static int op_ids(const struct store_op *o, void *arg)
{
    strcat(arg, o->id);
    strcat(arg, ",");
    return 0;
}

static void fill_op(struct store_op *o, const char *id, const char *tenant, const char *state,
                    const char *idem, int64_t created)
{
    memset(o, 0, sizeof *o);
    snprintf(o->id, sizeof o->id, "%s", id);
    snprintf(o->tenant, sizeof o->tenant, "%s", tenant);
    snprintf(o->kind, sizeof o->kind, "create");
    snprintf(o->target, sizeof o->target, "sb1");
    snprintf(o->state, sizeof o->state, "%s", state);
    snprintf(o->idem_key, sizeof o->idem_key, "%s", idem);
    o->created_ms = created;
}

static void check_operations(void **state)
{
    (void)state;
    struct store *st = checks_open();
    struct store_op o;
    fill_op(&o, "op1", "A", "running", "k1", 10);
    assert_int_equal(store_op_put(st, &o), 0);
    fill_op(&o, "op2", "A", "pending", "", 20);
    assert_int_equal(store_op_put(st, &o), 0);
    fill_op(&o, "op3", "A", "succeeded", "", 30);
    assert_int_equal(store_op_put(st, &o), 0);
    fill_op(&o, "op4", "A", "pending", "k1", 40); /* same tenant + key: refused */
    assert_int_equal(store_op_put(st, &o), STORE_CONFLICT);
    fill_op(&o, "op5", "B", "pending", "k1", 50); /* other tenant, same key: fine */
    assert_int_equal(store_op_put(st, &o), 0);

    struct store_op got;
    assert_int_equal(store_op_by_idem(st, "A", "k1", &got), 0);
    assert_string_equal(got.id, "op1");
    store_op_clear(&got);
    assert_int_equal(store_op_by_idem(st, "A", "", &got), STORE_NOTFOUND);

    /* terminal update persists error fields */
    fill_op(&o, "op1", "A", "failed", "k1", 10);
    snprintf(o.error_code, sizeof o.error_code, "vm_failed");
    o.error_message = (char *)"it broke";
    o.progress = 40;
    o.finished_ms = 99;
    assert_int_equal(store_op_put(st, &o), 0);
    assert_int_equal(store_op_get(st, "op1", &got), 0);
    assert_string_equal(got.state, "failed");
    assert_string_equal(got.error_message, "it broke");
    assert_int_equal(got.progress, 40);
    assert_int_equal(got.finished_ms, 99);
    store_op_clear(&got);

    char ids[128] = "";
    assert_int_equal(store_op_each_open(st, op_ids, ids), 0);
    assert_string_equal(ids, "op2,op5,");
    ids[0] = '\0';
    assert_int_equal(store_op_list(st, "A", NULL, 10, op_ids, ids), 0);
    assert_string_equal(ids, "op3,op2,op1,");
    ids[0] = '\0';
    assert_int_equal(store_op_list(st, "A", "sb1", 1, op_ids, ids), 0);
    assert_string_equal(ids, "op3,");

    /* Ops of one millisecond keep submission order (seq), whatever their random ids. */
    fill_op(&o, "opz", "C", "pending", "", 60);
    o.seq = 1;
    assert_int_equal(store_op_put(st, &o), 0);
    fill_op(&o, "opa", "C", "pending", "", 60);
    o.seq = 2;
    assert_int_equal(store_op_put(st, &o), 0);
    ids[0] = '\0';
    assert_int_equal(store_op_each_open(st, op_ids, ids), 0);
    assert_string_equal(ids, "op2,op5,opz,opa,");
    ids[0] = '\0';
    assert_int_equal(store_op_list(st, "C", NULL, 10, op_ids, ids), 0);
    assert_string_equal(ids, "opa,opz,");
    store_close(st);
}

static int ses_ids(const struct store_session *s, void *arg)
{
    strcat(arg, s->id);
    return 0;
}

static int tpl_names(const struct store_tpl *t, void *arg)
{
    strcat(arg, t->name);
    return 0;
}

static void check_sessions_templates_tx(void **state)
{
    (void)state;
    struct store *st = checks_open();
    struct store_session s = {.id = "ss1", .tenant = "A", .sandbox = "sb1", .spec_json = (char *)"{}",
                              .state = "running", .exit_code = -1};
    assert_int_equal(store_session_put(st, &s), 0);
    s.exit_code = 3;
    snprintf(s.state, sizeof s.state, "exited");
    assert_int_equal(store_session_put(st, &s), 0);
    struct store_session g;
    assert_int_equal(store_session_get(st, "ss1", &g), 0);
    assert_int_equal(g.exit_code, 3);
    assert_string_equal(g.state, "exited");
    store_session_clear(&g);
    char ids[64] = "";
    assert_int_equal(store_session_each(st, "sb1", ses_ids, ids), 0);
    assert_string_equal(ids, "ss1");
    assert_int_equal(store_session_delete(st, "ss1"), 0);
    assert_int_equal(store_session_get(st, "ss1", &g), STORE_NOTFOUND);

    struct store_tpl t = {.name = "base", .state = "ready", .dir = "/x"};
    assert_int_equal(store_tpl_put(st, &t), 0);
    struct store_tpl tg;
    assert_int_equal(store_tpl_get(st, "base", &tg), 0);
    assert_string_equal(tg.dir, "/x");
    store_tpl_clear(&tg);
    ids[0] = '\0';
    assert_int_equal(store_tpl_each(st, tpl_names, ids), 0);
    assert_string_equal(ids, "base");

    /* rollback discards everything written since begin */
    assert_int_equal(store_begin(st), 0);
    struct store_sbx sb;
    fill_sbx(&sb, "sbtx", "A", "base", "running", "{}");
    assert_int_equal(store_sbx_put(st, &sb), 0);
    store_rollback(st);
    struct store_sbx got;
    assert_int_equal(store_sbx_get(st, "sbtx", &got), STORE_NOTFOUND);
    assert_int_equal(store_begin(st), 0);
    assert_int_equal(store_sbx_put(st, &sb), 0);
    assert_int_equal(store_commit(st), 0);
    assert_int_equal(store_sbx_get(st, "sbtx", &got), 0);
    store_sbx_clear(&got);
    store_close(st);
}

/* A child writes; it dies by SIGKILL (no close, no atexit). The parent reopens. */
static int node_ids(const struct store_node *n, void *arg)
{
    strcat(arg, n->id);
    strcat(arg, ",");
    return 0;
}

/* The runtime each node row reaches store_node_usage with (placement reads it there). */
static int node_runtimes(const struct store_node *n, const struct store_node_use *u, void *arg)
{
    (void)u;
    strcat(arg, n->id);
    strcat(arg, "=");
    strcat(arg, n->runtime);
    strcat(arg, ";");
    return 0;
}

/* Nodes (multi-node roles): upsert by id, lookup, id order; a sandbox keeps its node; a
 * node's runtime (migration 17) as its heartbeat last wrote it. */
static void check_nodes(void **state)
{
    (void)state;
    struct store *st = checks_open();
    struct store_node n = {.id = "node-b", .url = "http://127.0.0.1:1", .vcpus = 4, .memory_mib = 2048,
                           .heartbeat_ms = 10, .started_ms = 5, .runtime = "QEMU 7.2/tcg/max"};
    assert_int_equal(store_node_put(st, &n), 0);
    snprintf(n.id, sizeof n.id, "node-a");
    assert_int_equal(store_node_put(st, &n), 0);
    n.heartbeat_ms = 20;
    snprintf(n.url, sizeof n.url, "http://127.0.0.1:2");
    assert_int_equal(store_node_put(st, &n), 0);
    struct store_node got;
    assert_int_equal(store_node_get(st, "node-a", &got), 0);
    assert_int_equal(got.heartbeat_ms, 20);
    assert_string_equal(got.url, "http://127.0.0.1:2");
    assert_int_equal(got.vcpus, 4);
    assert_int_equal(got.memory_mib, 2048);
    assert_string_equal(got.runtime, "QEMU 7.2/tcg/max");
    assert_int_equal(store_node_get(st, "node-c", &got), STORE_NOTFOUND);
    /* A heartbeat after an upgrade of the node's QEMU writes the new runtime; a node of an
     * earlier version writes none ("" = unknown). */
    snprintf(n.runtime, sizeof n.runtime, "QEMU 8.0/tcg/max");
    assert_int_equal(store_node_put(st, &n), 0);
    snprintf(n.id, sizeof n.id, "node-b");
    n.runtime[0] = '\0';
    assert_int_equal(store_node_put(st, &n), 0);
    char rts[128] = "";
    assert_int_equal(store_node_usage(st, node_runtimes, rts), 0);
    assert_string_equal(rts, "node-a=QEMU 8.0/tcg/max;node-b=;");
    snprintf(n.id, sizeof n.id, "node-a");
    snprintf(n.runtime, sizeof n.runtime, "QEMU 7.2/tcg/max");
    char ids[64] = "";
    assert_int_equal(store_node_each(st, node_ids, ids), 0);
    assert_string_equal(ids, "node-a,node-b,");
    /* Draining is the operator's: a heartbeat (a put) never clears it. */
    assert_int_equal(store_node_set_draining(st, "node-a", true), 0);
    n.heartbeat_ms = 30;
    assert_int_equal(store_node_put(st, &n), 0);
    assert_int_equal(store_node_get(st, "node-a", &got), 0);
    assert_true(got.draining);
    assert_int_equal(got.heartbeat_ms, 30);
    assert_int_equal(store_node_set_draining(st, "node-a", false), 0);
    assert_int_equal(store_node_get(st, "node-a", &got), 0);
    assert_false(got.draining);
    assert_int_equal(store_node_set_draining(st, "node-c", true), STORE_NOTFOUND);
    snprintf(n.id, sizeof n.id, "node-c");
    assert_int_equal(store_node_put(st, &n), 0);
    assert_int_equal(store_node_delete(st, "node-c"), 0);
    assert_int_equal(store_node_delete(st, "node-c"), STORE_NOTFOUND);
    assert_int_equal(store_node_get(st, "node-c", &got), STORE_NOTFOUND);

    struct store_sbx s, g;
    fill_sbx(&s, "sb1", "A", "base", "running", NULL);
    snprintf(s.node, sizeof s.node, "node-b");
    assert_int_equal(store_sbx_put(st, &s), 0);
    assert_int_equal(store_sbx_get(st, "sb1", &g), 0);
    assert_string_equal(g.node, "node-b");
    store_sbx_clear(&g);
    store_close(st);
}

/* A suspended sandbox moved off its node (sandbox/sbx_move.c): the conditional move, and
 * the old node's late writes change nothing once the row names another node. */
static void check_sandbox_move(void **state)
{
    (void)state;
    struct store *st = checks_open();
    struct store_sbx s, g;
    fill_sbx(&s, "sbm", "A", "base", "suspended", NULL);
    snprintf(s.desired, sizeof s.desired, "suspended");
    snprintf(s.node, sizeof s.node, "na");
    s.parts = (char *)"{\"node\":\"na\"}";
    assert_int_equal(store_sbx_put(st, &s), 0);
    /* wrong source node, wrong parts: nothing moves */
    assert_int_equal(store_sbx_move(st, "sbm", "nx", "nb", s.parts, s.parts, 5), STORE_NOTFOUND);
    assert_int_equal(store_sbx_move(st, "sbm", "na", "nb", "{}", s.parts, 5), STORE_NOTFOUND);
    /* a verb queued (desired running): not movable */
    snprintf(s.desired, sizeof s.desired, "running");
    assert_int_equal(store_sbx_put(st, &s), 0);
    assert_int_equal(store_sbx_move(st, "sbm", "na", "nb", s.parts, s.parts, 5), STORE_NOTFOUND);
    snprintf(s.desired, sizeof s.desired, "suspended");
    assert_int_equal(store_sbx_put(st, &s), 0);
    assert_int_equal(store_sbx_move(st, "sbm", "na", "nb", s.parts, s.parts, 5), 0);
    assert_int_equal(store_sbx_move(st, "sbm", "na", "nb", s.parts, s.parts, 5), STORE_NOTFOUND);
    /* the old node's record, written late, is refused and changes nothing */
    snprintf(s.state, sizeof s.state, "restoring");
    assert_int_equal(store_sbx_put(st, &s), STORE_MOVED);
    assert_int_equal(store_sbx_get(st, "sbm", &g), 0);
    assert_string_equal(g.node, "nb");
    assert_string_equal(g.state, "suspended");
    assert_string_equal(g.parts, "{\"node\":\"na\"}");
    assert_int_equal(g.updated_ms, 5);
    store_sbx_clear(&g);
    /* the new node writes it; handing it back clears the parts */
    snprintf(s.node, sizeof s.node, "nb");
    snprintf(s.state, sizeof s.state, "suspended");
    assert_int_equal(store_sbx_put(st, &s), 0);
    assert_int_equal(store_sbx_move(st, "sbm", "nb", "na", s.parts, NULL, 6), 0);
    assert_int_equal(store_sbx_get(st, "sbm", &g), 0);
    assert_string_equal(g.node, "na");
    assert_null(g.parts);
    store_sbx_clear(&g);
    store_close(st);
}

/* Keeps the use of the last node row (the checks have one node each). */
static int use_of(const struct store_node *n, const struct store_node_use *u, void *arg)
{
    (void)n;
    *(struct store_node_use *)arg = *u;
    return 0;
}

/* Node reservations: a reservation fits when the node's capacity minus its VM-holding
 * sandboxes (suspended, stopped, deleted and failed ones hold nothing) minus its other
 * reservations leaves room; draining (except for a resume), silent and unknown nodes take
 * none; usage sums both; release and expiry free the room. */
static void check_reservations(void **state)
{
    (void)state;
    struct store *st = checks_open();
    struct store_node n = {.id = "nr", .url = "http://127.0.0.1:1", .vcpus = 4, .memory_mib = 2048,
                           .heartbeat_ms = 5000};
    assert_int_equal(store_node_put(st, &n), 0);
    struct store_sbx s;
    const char *states[] = {"running", "paused", "suspended", "stopped", "deleted", "failed"};
    for (int i = 0; i < 6; i++) {
        char id[16];
        snprintf(id, sizeof id, "sbr%d", i);
        fill_sbx(&s, id, "A", "base", states[i], NULL); /* 1 vCPU, 256 MiB each */
        snprintf(s.node, sizeof s.node, "nr");
        assert_int_equal(store_sbx_put(st, &s), 0);
    }
    /* used: running + paused = 2 vCPUs, 512 MiB; 2 vCPUs and 1536 MiB free. */
    struct store_resv r = {.id = "rv1", .node = "nr", .vcpus = 1, .memory_mib = 1024, .created_ms = 100};
    assert_int_equal(store_resv_take(st, &r, 5000), 0);
    r = (struct store_resv){.id = "rv2", .node = "nr", .vcpus = 1, .memory_mib = 1024, .created_ms = 200};
    assert_int_equal(store_resv_take(st, &r, 5000), STORE_FULL); /* 512 MiB left */
    r.memory_mib = 512;
    assert_int_equal(store_resv_take(st, &r, 5001), STORE_FULL); /* silent since 5000 */
    assert_int_equal(store_node_set_draining(st, "nr", true), 0);
    assert_int_equal(store_resv_take(st, &r, 5000), STORE_FULL);
    /* A sandbox already on the node coming back (resume) is not a new one: a draining
     * node takes it when it fits, and it still counts. */
    struct store_resv back = {.id = "rvb", .node = "nr", .vcpus = 1, .memory_mib = 512, .created_ms = 300,
                              .resume = true};
    assert_int_equal(store_resv_take(st, &back, 5000), 0);
    back = (struct store_resv){.id = "rvc", .node = "nr", .vcpus = 1, .memory_mib = 1, .created_ms = 300,
                               .resume = true};
    assert_int_equal(store_resv_take(st, &back, 5000), STORE_FULL); /* nothing left */
    assert_int_equal(store_resv_release(st, "rvb"), 0);
    assert_int_equal(store_node_set_draining(st, "nr", false), 0);
    assert_int_equal(store_resv_take(st, &r, 5000), 0); /* exactly full now */
    snprintf(r.node, sizeof r.node, "nowhere");
    assert_int_equal(store_resv_take(st, &r, 0), STORE_NOTFOUND);
    /* A failed take leaves no transaction open behind it. */
    fill_sbx(&s, "sbafter", "A", "base", "stopped", NULL);
    assert_int_equal(store_sbx_put(st, &s), 0);

    struct store_node_use u = {0};
    assert_int_equal(store_node_usage(st, use_of, &u), 0);
    assert_int_equal(u.used_vcpus, 2);
    assert_int_equal(u.used_memory_mib, 512);
    assert_int_equal(u.reserved_vcpus, 2);
    assert_int_equal(u.reserved_memory_mib, 1536);
    int64_t gone = -1;
    assert_int_equal(store_resv_expire(st, "nr", 150, &gone), 0); /* rv1 (100) only */
    assert_int_equal(gone, 1);
    assert_int_equal(store_resv_release(st, "rv2"), 0);
    assert_int_equal(store_resv_release(st, "rv2"), 0); /* gone either way */
    assert_int_equal(store_node_usage(st, use_of, &u), 0);
    assert_int_equal(u.reserved_vcpus, 0);
    assert_int_equal(u.reserved_memory_mib, 0);
    store_close(st);
}

/* Forks a racer. In the parent: NULL, *pid set. In the child: its own handle, once the
 * parent has closed go[1] (so that every racer starts at once); with `ready`, the child
 * writes 'o' there once its handle is open and 'r' as it starts. A child that cannot
 * get that far exits 20. */
static struct store *fork_racer(int go[2], int ready[2], pid_t *pid)
{
    *pid = fork();
    assert_true(*pid >= 0);
    if (*pid > 0)
        return NULL;
    close(go[1]);
    char err[128], c;
    struct store *mine = checks_open_quiet(err, sizeof err);
    if (!mine || (ready && write(ready[1], "o", 1) != 1) || read(go[0], &c, 1) != 0 ||
        (ready && write(ready[1], "r", 1) != 1))
        _exit(20);
    return mine;
}

/* Six processes, each on its own handle, reserve 1 vCPU on a node with 2 free at the same
 * moment: exactly two succeed, whatever the interleaving (the node row's lock). */
static void check_reservations_race(void **state)
{
    (void)state;
    struct store *st = checks_open();
    struct store_node n = {.id = "nrace", .url = "http://127.0.0.1:1", .vcpus = 3, .memory_mib = 4096,
                           .heartbeat_ms = 5000};
    assert_int_equal(store_node_put(st, &n), 0);
    struct store_sbx s;
    fill_sbx(&s, "sbrace", "A", "base", "running", NULL);
    snprintf(s.node, sizeof s.node, "nrace");
    assert_int_equal(store_sbx_put(st, &s), 0);
    int go[2];
    assert_int_equal(pipe(go), 0);
    enum { RACERS = 6 };
    pid_t pids[RACERS];
    for (int i = 0; i < RACERS; i++) {
        struct store *mine = fork_racer(go, NULL, &pids[i]);
        if (mine) {
            struct store_resv r = {.node = "nrace", .vcpus = 1, .memory_mib = 64, .created_ms = 1};
            snprintf(r.id, sizeof r.id, "rvrace%d", i);
            int rc = store_resv_take(mine, &r, 5000);
            store_close(mine);
            _exit(rc == 0 ? 0 : rc == STORE_FULL ? 10 : 22);
        }
    }
    close(go[0]);
    usleep(200 * 1000); /* let every child connect before the start */
    close(go[1]);
    int won = 0, full = 0;
    for (int i = 0; i < RACERS; i++) {
        int status;
        assert_int_equal(waitpid(pids[i], &status, 0), pids[i]);
        assert_true(WIFEXITED(status));
        if (WEXITSTATUS(status) == 0)
            won++;
        else if (WEXITSTATUS(status) == 10)
            full++;
        else
            fail_msg("racer %d exited %d", i, WEXITSTATUS(status));
    }
    assert_int_equal(won, 2);
    assert_int_equal(full, RACERS - 2);
    struct store_node_use u = {0};
    assert_int_equal(store_node_usage(st, use_of, &u), 0);
    assert_int_equal(u.used_vcpus + u.reserved_vcpus, 3);
    store_close(st);
}

/* Quotas: a tenant without a row has none (the daemon's defaults apply); a row is
 * upserted; usage counts the tenant's sandboxes that are not deleted (their vCPUs,
 * memory and disk summed) and its templates that are not deleted, nobody else's;
 * store_quota_lock works inside a transaction and leaves the limits alone. */
static void check_quotas(void **state)
{
    (void)state;
    struct store *st = checks_open();
    struct store_quota q;
    assert_int_equal(store_quota_get(st, "A", &q), STORE_NOTFOUND);
    struct store_quota_vals u;
    assert_int_equal(store_quota_usage(st, "A", &u), 0);
    assert_int_equal(u.sandboxes + u.vcpus + u.memory_mib + u.disk_mib + u.templates + u.snapshots, 0);

    struct store_sbx s;
    const char *states[] = {"creating", "running", "paused", "suspended", "failed", "deleted"};
    for (int i = 0; i < 6; i++) {
        char id[16];
        snprintf(id, sizeof id, "sb%d", i);
        fill_sbx(&s, id, "A", "base", states[i], NULL);
        s.vcpus = 2;
        s.memory_mib = 512;
        s.disk_mib = 1024;
        assert_int_equal(store_sbx_put(st, &s), 0);
    }
    fill_sbx(&s, "sbB", "B", "base", "running", NULL);
    assert_int_equal(store_sbx_put(st, &s), 0);
    struct store_tpl t = {.name = "a1", .tenant = "A", .state = "ready", .dir = "/x"};
    assert_int_equal(store_tpl_put(st, &t), 0);
    snprintf(t.name, sizeof t.name, "a2");
    snprintf(t.state, sizeof t.state, "deleted");
    assert_int_equal(store_tpl_put(st, &t), 0);
    snprintf(t.name, sizeof t.name, "b1");
    snprintf(t.tenant, sizeof t.tenant, "B");
    assert_int_equal(store_tpl_put(st, &t), 0);

    assert_int_equal(store_quota_usage(st, "A", &u), 0);
    assert_int_equal(u.sandboxes, 5);
    assert_int_equal(u.vcpus, 10);
    assert_int_equal(u.memory_mib, 2560);
    assert_int_equal(u.disk_mib, 5120);
    assert_int_equal(u.templates, 1);
    assert_int_equal(u.snapshots, 0);
    struct store_sbx g;
    assert_int_equal(store_sbx_get(st, "sb1", &g), 0);
    assert_int_equal(g.disk_mib, 1024);
    store_sbx_clear(&g);

    assert_int_equal(store_begin(st), 0);
    assert_int_equal(store_quota_lock(st, "A"), 0);
    assert_int_equal(store_commit(st), 0);
    assert_int_equal(store_quota_get(st, "A", &q), 0);
    assert_int_equal(q.limit.sandboxes, STORE_QUOTA_DEFAULT);
    assert_int_equal(q.limit.snapshots, STORE_QUOTA_DEFAULT);

    q.limit = (struct store_quota_vals){.sandboxes = 3, .vcpus = 0, .memory_mib = 4096, .disk_mib = -1,
                                        .templates = 2, .snapshots = 7};
    q.updated_ms = 99;
    assert_int_equal(store_quota_put(st, &q), 0);
    assert_int_equal(store_begin(st), 0);
    assert_int_equal(store_quota_lock(st, "A"), 0); /* an existing row keeps its limits */
    assert_int_equal(store_commit(st), 0);
    struct store_quota got;
    assert_int_equal(store_quota_get(st, "A", &got), 0);
    assert_string_equal(got.tenant, "A");
    assert_int_equal(got.limit.sandboxes, 3);
    assert_int_equal(got.limit.vcpus, 0);
    assert_int_equal(got.limit.memory_mib, 4096);
    assert_int_equal(got.limit.disk_mib, -1);
    assert_int_equal(got.limit.templates, 2);
    assert_int_equal(got.limit.snapshots, 7);
    assert_int_equal(got.updated_ms, 99);
    assert_int_equal(store_quota_get(st, "B", &got), STORE_NOTFOUND);
    store_close(st);
}

/* Snapshots: round trip, lookup by id or name within the tenant only, listing per
 * tenant, deletion, the quota usage, and a sandbox's source. */
static void check_snapshots(void **state)
{
    (void)state;
    struct store *st = checks_open();
    struct store_snap a = {.id = "sn01", .tenant = "A", .name = "first", .source = "sb1",
                           .template_name = "base", .vcpus = 2, .memory_mib = 512, .nic = true,
                           .state = "creating", .created_ms = 5};
    assert_int_equal(store_snap_put(st, &a), 0);
    snprintf(a.state, sizeof a.state, "ready");
    a.size_bytes = 123456789012LL;
    snprintf(a.node, sizeof a.node, "node-a"); /* a travelling snapshot's holder and parts */
    snprintf(a.parts, sizeof a.parts, "{\"files\":[],\"chain\":[]}");
    assert_int_equal(store_snap_put(st, &a), 0); /* the upsert updates state and size */
    struct store_snap b = {.id = "sn02", .tenant = "A", .source = "sb2", .template_name = "base",
                           .state = "ready"};
    assert_int_equal(store_snap_put(st, &b), 0);
    struct store_snap c = {.id = "sn03", .tenant = "B", .name = "first", .state = "ready"};
    assert_int_equal(store_snap_put(st, &c), 0);

    struct store_snap g;
    assert_int_equal(store_snap_get(st, "sn01", &g), 0);
    assert_string_equal(g.name, "first");
    assert_string_equal(g.template_name, "base");
    assert_int_equal(g.vcpus, 2);
    assert_int_equal(g.memory_mib, 512);
    assert_true(g.nic);
    assert_string_equal(g.state, "ready");
    assert_int_equal(g.size_bytes, 123456789012LL);
    assert_int_equal(g.created_ms, 5);
    assert_string_equal(g.node, "node-a");
    assert_string_equal(g.parts, "{\"files\":[],\"chain\":[]}");
    assert_int_equal(store_snap_find(st, "A", "first", &g), 0);
    assert_string_equal(g.id, "sn01");
    assert_int_equal(store_snap_find(st, "B", "first", &g), 0);
    assert_string_equal(g.id, "sn03");
    assert_int_equal(store_snap_find(st, "A", "sn02", &g), 0);
    assert_int_equal(store_snap_find(st, "B", "sn02", &g), STORE_NOTFOUND); /* tenancy */
    assert_int_equal(store_snap_find(st, "A", "", &g), STORE_NOTFOUND); /* "" is no name */

    struct store_quota_vals u;
    assert_int_equal(store_quota_usage(st, "A", &u), 0);
    assert_int_equal(u.snapshots, 2);
    assert_int_equal(store_snap_delete(st, "sn02"), 0);
    assert_int_equal(store_snap_delete(st, "sn02"), STORE_NOTFOUND);
    assert_int_equal(store_quota_usage(st, "A", &u), 0);
    assert_int_equal(u.snapshots, 1);

    struct store_sbx s;
    fill_sbx(&s, "sbS", "A", "base", "creating", NULL);
    snprintf(s.source, sizeof s.source, "sn01");
    assert_int_equal(store_sbx_put(st, &s), 0);
    struct store_sbx gs;
    assert_int_equal(store_sbx_get(st, "sbS", &gs), 0);
    assert_string_equal(gs.source, "sn01");
    store_sbx_clear(&gs);
    store_close(st);
}

/* Template routes: one per tenant and name (another tenant's request for the same name is
 * another row), replaced by a new request, expired by age. */
static void check_tpl_routes(void **state)
{
    (void)state;
    struct store *st = checks_open();
    struct store_tpl_route a = {.tenant = "A", .name = "web", .node = "node-a", .created_ms = 10};
    struct store_tpl_route b = {.tenant = "B", .name = "web", .node = "node-b", .created_ms = 20};
    assert_int_equal(store_tpl_route_put(st, &a), 0);
    assert_int_equal(store_tpl_route_put(st, &b), 0);
    struct store_tpl_route g;
    assert_int_equal(store_tpl_route_get(st, "A", "web", &g), 0);
    assert_string_equal(g.node, "node-a");
    assert_string_equal(g.tenant, "A");
    assert_string_equal(g.name, "web");
    assert_int_equal(g.created_ms, 10);
    assert_int_equal(store_tpl_route_get(st, "B", "web", &g), 0);
    assert_string_equal(g.node, "node-b");
    assert_int_equal(store_tpl_route_get(st, "A", "other", &g), STORE_NOTFOUND);
    assert_int_equal(store_tpl_route_get(st, "C", "web", &g), STORE_NOTFOUND);
    snprintf(a.node, sizeof a.node, "node-c"); /* a new request for the name */
    a.created_ms = 30;
    assert_int_equal(store_tpl_route_put(st, &a), 0);
    assert_int_equal(store_tpl_route_get(st, "A", "web", &g), 0);
    assert_string_equal(g.node, "node-c");
    assert_int_equal(store_tpl_route_expire(st, 25), 0); /* B's (20) goes, A's (30) stays */
    assert_int_equal(store_tpl_route_get(st, "B", "web", &g), STORE_NOTFOUND);
    assert_int_equal(store_tpl_route_get(st, "A", "web", &g), 0);
    store_close(st);
}

/* ---- template deletion against creates ---- */

static void put_tpl(struct store *st, const char *name, const char *tenant, const char *state, const char *spec)
{
    struct store_tpl t = {.created_ms = 1, .updated_ms = 1};
    snprintf(t.name, sizeof t.name, "%s", name);
    snprintf(t.tenant, sizeof t.tenant, "%s", tenant);
    snprintf(t.state, sizeof t.state, "%s", state);
    snprintf(t.dir, sizeof t.dir, "/t/%s", name);
    t.spec_json = (char *)spec;
    assert_int_equal(store_tpl_put(st, &t), 0);
}

static void put_user(struct store *st, const char *id, const char *tpl, const char *state, const char *node)
{
    struct store_sbx s;
    fill_sbx(&s, id, "A", tpl, state, NULL);
    snprintf(s.node, sizeof s.node, "%s", node);
    assert_int_equal(store_sbx_put(st, &s), 0);
}

static void assert_tpl_state(struct store *st, const char *name, const char *state)
{
    struct store_tpl t;
    assert_int_equal(store_tpl_get(st, name, &t), 0);
    assert_string_equal(t.state, state);
    store_tpl_clear(&t);
}

/* A racer (fork_racer) deleting template `name` of tenant A: exits 0 (deleted), 10 (in
 * use), 11 (not found) or 20+ (failed). */
static pid_t fork_tpl_delete(const char *name, int go[2], int ready[2])
{
    pid_t pid;
    struct store *mine = fork_racer(go, ready, &pid);
    if (!mine)
        return pid;
    int rc = store_tpl_delete_unused(mine, name, "A", 2000, NULL);
    store_close(mine);
    _exit(rc == 0 ? 0 : rc == STORE_IN_USE ? 10 : rc == STORE_NOTFOUND ? 11 : 22);
}

static int exit_code(pid_t pid)
{
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    return WEXITSTATUS(status);
}

/* store_tpl_delete_unused and store_tpl_hold: what a delete counts and what it leaves;
 * a delete waits for a create holding the template and counts its sandbox, or goes on
 * when that create wrote nothing; a create after a delete finds the template gone; and
 * with creates and a delete racing, every outcome keeps the invariant (deleted => no
 * sandbox of it; in use => still ready). Both sides on separate handles (processes). */
static void check_tpl_delete_vs_create(void **state)
{
    (void)state;
    struct store *st = checks_open();
    struct store_tpl_users u;
    put_tpl(st, "td", "A", "ready", "{\"base\":\"base\"}");
    assert_int_equal(store_tpl_delete_unused(st, "td", "B", 2000, &u), STORE_NOTFOUND); /* not B's */
    assert_int_equal(store_tpl_delete_unused(st, "nosuch", "A", 2000, &u), STORE_NOTFOUND);
    /* Sandboxes on any node count, in any state but deleted. */
    const char *ids[] = {"sbtd1", "sbtd2", "sbtd3"}, *node[] = {"node-b", "node-a", "node-a"},
               *live[] = {"suspended", "failed", "creating"};
    for (int i = 0; i < 3; i++)
        put_user(st, ids[i], "td", live[i], node[i]);
    put_user(st, "sbtd4", "td", "deleted", "node-c");
    put_user(st, "sbtd5", "other", "running", "node-d");
    assert_int_equal(store_tpl_delete_unused(st, "td", "A", 2000, &u), STORE_IN_USE);
    assert_int_equal(u.sandboxes, 3);
    assert_int_equal(u.builds, 0);
    assert_string_equal(u.nodes, "node-a,node-b");
    assert_tpl_state(st, "td", "ready");
    for (int i = 0; i < 3; i++)
        put_user(st, ids[i], "td", "deleted", node[i]);
    /* So do builds with it as their base (and only while they build); a template being
     * built is not deleted. */
    put_tpl(st, "tdchild", "A", "building", "{\"base\":\"td\",\"name\":\"tdchild\"}");
    put_tpl(st, "tdother", "A", "building", "{\"base\":\"base\",\"name\":\"tdother\"}");
    assert_int_equal(store_tpl_delete_unused(st, "td", "A", 2000, &u), STORE_IN_USE);
    assert_int_equal(u.sandboxes, 0);
    assert_int_equal(u.builds, 1);
    assert_int_equal(store_tpl_delete_unused(st, "tdchild", "A", 2000, &u), STORE_NOT_READY);
    put_tpl(st, "tdchild", "A", "failed", "{\"base\":\"td\",\"name\":\"tdchild\"}");
    assert_int_equal(store_tpl_delete_unused(st, "tdchild", "A", 2000, &u), 0); /* a failed one goes */
    assert_tpl_state(st, "tdchild", "deleted");
    /* Unused now: deleted, once. A create then finds it gone. */
    assert_int_equal(store_tpl_delete_unused(st, "td", "A", 2000, NULL), 0);
    assert_tpl_state(st, "td", "deleted");
    assert_int_equal(store_tpl_delete_unused(st, "td", "A", 2000, &u), STORE_NOTFOUND);
    assert_int_equal(store_begin(st), 0);
    assert_int_equal(store_tpl_hold(st, "td"), STORE_NOTFOUND);
    assert_int_equal(store_tpl_hold(st, "nosuch"), STORE_NOTFOUND);
    assert_int_equal(store_tpl_hold(st, "tdother"), STORE_NOTFOUND); /* not ready */
    store_rollback(st);

    /* A create holding the template: the delete (another process) waits for its commit,
     * then counts its sandbox. Then one that rolls back: the delete goes on. */
    put_tpl(st, "tdr", "A", "ready", NULL);
    for (int commit = 1; commit >= 0; commit--) {
        int go[2], ready[2];
        assert_int_equal(pipe(go), 0);
        assert_int_equal(pipe(ready), 0);
        pid_t pid = fork_tpl_delete("tdr", go, ready);
        close(go[0]);
        close(ready[1]);
        char c;
        assert_int_equal(read(ready[0], &c, 1), 1); /* its handle is open (SQLite: before our lock) */
        assert_int_equal(store_begin(st), 0);
        assert_int_equal(store_tpl_hold(st, "tdr"), 0);
        close(go[1]);
        assert_int_equal(read(ready[0], &c, 1), 1);
        close(ready[0]);
        usleep(300 * 1000);
        siginfo_t early = {0}; /* still waiting for the lock: not exited (asserted after our
                                  commit, so that a failure leaves no transaction open) */
        assert_int_equal(waitid(P_PID, (id_t)pid, &early, WEXITED | WNOHANG | WNOWAIT), 0);
        if (commit) {
            put_user(st, "sbtdr", "tdr", "creating", "node-a");
            assert_int_equal(store_commit(st), 0);
            assert_int_equal(early.si_pid, 0);
            assert_int_equal(exit_code(pid), 10);
            assert_tpl_state(st, "tdr", "ready");
            put_user(st, "sbtdr", "tdr", "deleted", "node-a");
        } else {
            store_rollback(st);
            assert_int_equal(early.si_pid, 0);
            assert_int_equal(exit_code(pid), 0);
            assert_tpl_state(st, "tdr", "deleted");
        }
    }

    /* Five creates and one delete at the same moment, each on its own handle. */
    put_tpl(st, "tdx", "A", "ready", NULL);
    int go[2];
    assert_int_equal(pipe(go), 0);
    enum { CREATORS = 5 };
    pid_t pids[CREATORS + 1];
    for (int i = 0; i < CREATORS; i++) {
        struct store *mine = fork_racer(go, NULL, &pids[i]);
        if (mine) {
            if (store_begin(mine) != 0)
                _exit(21);
            int rc = store_tpl_hold(mine, "tdx");
            char id[24];
            snprintf(id, sizeof id, "sbtdx%d", i);
            struct store_sbx s;
            fill_sbx(&s, id, "A", "tdx", "creating", NULL);
            if (rc == 0 && (store_sbx_put(mine, &s) != 0 || store_commit(mine) != 0))
                _exit(21);
            if (rc != 0)
                store_rollback(mine);
            store_close(mine);
            _exit(rc == 0 ? 0 : rc == STORE_NOTFOUND ? 11 : 22);
        }
    }
    pids[CREATORS] = fork_tpl_delete("tdx", go, NULL);
    close(go[0]);
    usleep(200 * 1000); /* every child connected */
    close(go[1]);
    int created = 0;
    for (int i = 0; i < CREATORS; i++) {
        int rc = exit_code(pids[i]);
        assert_true(rc == 0 || rc == 11);
        created += rc == 0;
    }
    int deleted = exit_code(pids[CREATORS]);
    struct store_sbx_filter f = {.tenant = "A", .template_name = "tdx", .limit = 100};
    bool more;
    char listed[256] = "";
    assert_int_equal(store_sbx_list(st, &f, count_cb, listed, &more), 0);
    int rows = 0;
    for (const char *p = listed; (p = strstr(p, "sbtdx")); p++)
        rows++;
    assert_int_equal(rows, created);
    if (deleted == 0) {
        assert_int_equal(created, 0);
        assert_tpl_state(st, "tdx", "deleted");
    } else {
        assert_int_equal(deleted, 10);
        assert_true(created > 0);
        assert_tpl_state(st, "tdx", "ready");
    }
    store_close(st);
}

static void check_crash_mid_transaction(void **state)
{
    (void)state;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        char err[128];
        struct store *st = checks_open_quiet(err, sizeof err);
        struct store_sbx s;
        fill_sbx(&s, "sbcommitted", "A", "base", "running", "{}");
        if (!st || store_sbx_put(st, &s) != 0)
            _exit(1);
        store_begin(st);
        fill_sbx(&s, "sbtorn", "A", "base", "running", "{}");
        store_sbx_put(st, &s);
        struct store_op o;
        fill_op(&o, "optorn", "A", "pending", "", 1);
        store_op_put(st, &o);
        raise(SIGKILL);
        _exit(2);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    struct store *st = checks_open();
    struct store_sbx got;
    struct store_op op;
    assert_int_equal(store_sbx_get(st, "sbcommitted", &got), 0);
    store_sbx_clear(&got);
    assert_int_equal(store_sbx_get(st, "sbtorn", &got), STORE_NOTFOUND);
    assert_int_equal(store_op_get(st, "optorn", &op), STORE_NOTFOUND);
    store_close(st);
}

/* Runs write_one(st, i) for i = 0, 1, ... in a child process on a handle of its own;
 * the child acknowledges each call that returned 0 on a pipe, like spaced answering 202,
 * and is SIGKILLed at an arbitrary point after 40. Returns the last acknowledged i. */
static int crash_writer(int (*write_one)(struct store *st, int i))
{
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        char err[128];
        struct store *st = checks_open_quiet(err, sizeof err);
        if (!st)
            _exit(1);
        for (int i = 0;; i++) {
            if (write_one(st, i))
                _exit(3);
            if (write(fds[1], &i, sizeof i) != (ssize_t)sizeof i)
                _exit(4);
        }
    }
    close(fds[1]);
    int last = -1, v;
    while (last < 40 && read(fds[0], &v, sizeof v) == (ssize_t)sizeof v)
        last = v;
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    close(fds[0]);
    assert_true(last >= 40);
    return last;
}

static int write_acknowledged(struct store *st, int i)
{
    struct store_sbx s;
    struct store_op o;
    char id[32];
    snprintf(id, sizeof id, "sbk%06d", i);
    fill_sbx(&s, id, "K", "base", "creating", "{}");
    snprintf(id, sizeof id, "opk%06d", i);
    fill_op(&o, id, "K", "pending", "", i);
    return store_begin(st) || store_sbx_put(st, &s) || store_op_put(st, &o) || store_commit(st);
}

/* Every acknowledged row survives a SIGKILL. */
static void check_crash_loses_nothing_acknowledged(void **state)
{
    (void)state;
    int last = crash_writer(write_acknowledged);
    struct store *st = checks_open();
    for (int i = 0; i <= last; i++) {
        char id[32];
        struct store_sbx s;
        struct store_op o;
        snprintf(id, sizeof id, "sbk%06d", i);
        assert_int_equal(store_sbx_get(st, id, &s), 0);
        store_sbx_clear(&s);
        snprintf(id, sizeof id, "opk%06d", i);
        assert_int_equal(store_op_get(st, id, &o), 0);
        store_op_clear(&o);
    }
    store_close(st);
}

static int write_lazy_then_durable(struct store *st, int i)
{
    struct store_session ss = {.sandbox = "sbL", .tenant = "L", .state = "running",
                               .spec_json = (char *)"{}", .exit_code = -1};
    struct store_op o;
    struct store_sbx s;
    char id[32];
    snprintf(ss.id, sizeof ss.id, "ssl%06d", i);
    snprintf(id, sizeof id, "opl%06d", i);
    fill_op(&o, id, "L", "running", "", i);
    snprintf(id, sizeof id, "sbm%06d", i); /* a claimed pooled VM's run dir */
    fill_sbx(&s, id, "L", "base", "creating", "{}");
    if (store_sbx_put_lazy(st, &s) != 0)
        return -1;
    snprintf(id, sizeof id, "sbl%06d", i);
    fill_sbx(&s, id, "L", "base", "creating", "{}");
    return store_session_put(st, &ss) || store_op_put_lazy(st, &o) || store_begin(st) ||
           store_sbx_put(st, &s) || store_commit(st);
}

/* The writes made without an fsync (session rows, op progress and running state, sandbox
 * rows written lazily: store.h "Durability") are
 * still in the database after a SIGKILL once the call returned, and the handle is durable
 * again after them: the transaction that follows each survives too. */
static void check_crash_keeps_lazy_writes(void **state)
{
    (void)state;
    int last = crash_writer(write_lazy_then_durable);
    struct store *st = checks_open();
    for (int i = 0; i <= last; i++) {
        char id[32];
        struct store_session ss;
        struct store_op o;
        struct store_sbx s;
        snprintf(id, sizeof id, "ssl%06d", i);
        assert_int_equal(store_session_get(st, id, &ss), 0);
        store_session_clear(&ss);
        snprintf(id, sizeof id, "opl%06d", i);
        assert_int_equal(store_op_get(st, id, &o), 0);
        store_op_clear(&o);
        snprintf(id, sizeof id, "sbl%06d", i);
        assert_int_equal(store_sbx_get(st, id, &s), 0);
        store_sbx_clear(&s);
        snprintf(id, sizeof id, "sbm%06d", i);
        assert_int_equal(store_sbx_get(st, id, &s), 0);
        store_sbx_clear(&s);
    }
    store_close(st);
}


#endif
