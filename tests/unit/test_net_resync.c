/* The resync after a gateway restart (src/daemon/net/net_resync.c), against a stand-in
 * gateway on a thread that serves requests the way the real one may: it holds chosen
 * attaches HOLD_MS before answering (the real one runs `nft`) and serves any connection
 * that arrives meanwhile first (the real one's loop serves whichever is ready), so a
 * request sent later can land earlier. It keeps its table of attachments and a log of
 * what it served.
 *
 * test_resync_in_flight_change: while the resync's attach of a sandbox is held, the
 * event loop keeps running (net_gateway_resync returns at once); a policy change of that
 * very sandbox, a release of another one while its attach is held, a claim and a
 * restart of the resync all happen mid-walk. The gateway ends with every change
 * (the new policy, no attachment for the released sandbox), the tenants' rules are sent
 * before any sandbox, the claimed sandbox is not sent again by the restarted walk, and a
 * refused attach is retried. Needs root (namespaces, taps, mounts) and says so when it
 * skips. Everything happens in namespaces this test creates (prefix sprs<pid>-). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <event2/event.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "clock.h"
#include "daemon/net/net.h"
#include "daemon/net/net_internal.h"

#define HOLD_MS 300

static char prefix[32];
static char datadir[64];

/* ---- the stand-in gateway ----------------------------------------------------------- */

struct fake {
    int lfd;
    int stop[2];              /* written to end the thread */
    pthread_mutex_t mu;       /* guards everything below */
    json_t *attached;         /* {sandbox: policy} */
    json_t *log;              /* ["op id", ...] in the order served */
    char hold_id[64];         /* the next attach of this sandbox is held ("" none) */
    char fail_id[64];         /* the next attach of this sandbox is refused */
    bool holding;             /* an attach is being held now */
};

static json_t *fail_reply(const char *code)
{
    return json_pack("{s:b, s:{s:s, s:s}}", "ok", 0, "error", "code", code, "message", code);
}

/* What the gateway does with req, under f->mu. */
static json_t *apply(struct fake *f, const json_t *req)
{
    const char *op = json_string_value(json_object_get(req, "op"));
    const char *id = json_string_value(json_object_get(req, "sandbox"));
    const char *tenant = json_string_value(json_object_get(req, "tenant"));
    json_array_append_new(f->log, json_sprintf("%s %s", op ? op : "?", id ? id : tenant ? tenant : "-"));
    bool known = id && json_object_get(f->attached, id);
    if (!op || strcmp(op, "ping") == 0 || (strcmp(op, "creds") == 0 && !id))
        return json_pack("{s:b}", "ok", 1);
    if (!id)
        return fail_reply("bad_request");
    if (strcmp(op, "attach") == 0) {
        if (strcmp(f->fail_id, id) == 0) {
            f->fail_id[0] = 0;
            return fail_reply("netns");
        }
        if (known)
            return fail_reply("exists");
        json_object_set(f->attached, id, json_object_get(req, "policy"));
    } else if (!known) {
        return fail_reply("not_found");
    } else if (strcmp(op, "policy") == 0) {
        json_object_set(f->attached, id, json_object_get(req, "policy"));
    } else if (strcmp(op, "detach") == 0) {
        json_object_del(f->attached, id);
    }
    return json_pack("{s:b}", "ok", 1);
}

static void serve(struct fake *f, int c, bool may_hold);

/* Holds an attach: what connects meanwhile is served before it. */
static void hold(struct fake *f)
{
    int64_t t0 = clock_mono_ms();
    for (;;) {
        int64_t left = HOLD_MS - (clock_mono_ms() - t0);
        struct pollfd p = {.fd = f->lfd, .events = POLLIN};
        if (left <= 0)
            break;
        if (poll(&p, 1, (int)left) == 1)
            serve(f, accept(f->lfd, NULL, NULL), false);
    }
}

static void serve(struct fake *f, int c, bool may_hold)
{
    char line[65536];
    size_t len = 0;
    ssize_t r;
    if (c < 0)
        return;
    while (len < sizeof line - 1 && (r = read(c, line + len, sizeof line - 1 - len)) > 0) {
        len += (size_t)r;
        if (memchr(line, '\n', len))
            break;
    }
    line[len] = 0;
    json_t *req = json_loads(line, JSON_DISABLE_EOF_CHECK, NULL);
    const char *op = json_string_value(json_object_get(req, "op"));
    const char *id = json_string_value(json_object_get(req, "sandbox"));
    pthread_mutex_lock(&f->mu);
    bool held = may_hold && op && id && strcmp(op, "attach") == 0 && strcmp(f->hold_id, id) == 0;
    if (held) {
        f->hold_id[0] = 0;
        f->holding = true;
    }
    pthread_mutex_unlock(&f->mu);
    if (held)
        hold(f);
    pthread_mutex_lock(&f->mu);
    f->holding = false;
    json_t *rep = apply(f, req);
    pthread_mutex_unlock(&f->mu);
    char *out = json_dumps(rep, JSON_COMPACT);
    if (out && (write(c, out, strlen(out)) < 0 || write(c, "\n", 1) != 1))
        perror("fake gateway");
    free(out);
    json_decref(rep);
    json_decref(req);
    close(c);
}

static void *fake_run(void *arg)
{
    struct fake *f = arg;
    for (;;) {
        struct pollfd p[2] = {{.fd = f->lfd, .events = POLLIN}, {.fd = f->stop[0], .events = POLLIN}};
        if (poll(p, 2, -1) < 0)
            continue;
        if (p[1].revents)
            return NULL;
        if (p[0].revents & POLLIN)
            serve(f, accept(f->lfd, NULL, NULL), true);
    }
}

static void fake_start(struct fake *f, const char *path, pthread_t *th)
{
    memset(f, 0, sizeof *f);
    pthread_mutex_init(&f->mu, NULL);
    f->attached = json_object();
    f->log = json_array();
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    f->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_int_equal(bind(f->lfd, (struct sockaddr *)&sa, sizeof sa), 0);
    assert_int_equal(listen(f->lfd, 16), 0);
    assert_int_equal(pipe(f->stop), 0);
    assert_int_equal(pthread_create(th, NULL, fake_run, f), 0);
}

static void fake_stop(struct fake *f, pthread_t th)
{
    assert_int_equal(write(f->stop[1], "x", 1), 1);
    pthread_join(th, NULL);
    close(f->stop[0]);
    close(f->stop[1]);
    close(f->lfd);
    json_decref(f->attached);
    json_decref(f->log);
    pthread_mutex_destroy(&f->mu);
}

/* The gateway restarted: it knows nothing. Returns where its log goes on from. */
static size_t fake_forget(struct fake *f)
{
    pthread_mutex_lock(&f->mu);
    json_object_clear(f->attached);
    size_t at = json_array_size(f->log);
    pthread_mutex_unlock(&f->mu);
    return at;
}

static void fake_hold(struct fake *f, const char *id)
{
    pthread_mutex_lock(&f->mu);
    snprintf(f->hold_id, sizeof f->hold_id, "%s", id);
    pthread_mutex_unlock(&f->mu);
}

static bool fake_holding(struct fake *f)
{
    pthread_mutex_lock(&f->mu);
    bool h = f->holding;
    pthread_mutex_unlock(&f->mu);
    return h;
}

/* The policy's first allow rule the gateway has for id, or "" when it has no
 * attachment (copied to out). */
static const char *fake_policy(struct fake *f, const char *id, char *out, size_t cap)
{
    pthread_mutex_lock(&f->mu);
    json_t *p = json_object_get(f->attached, id);
    const char *rule = json_string_value(json_array_get(json_object_get(p, "allow"), 0));
    snprintf(out, cap, "%s", p ? (rule ? rule : "?") : "");
    pthread_mutex_unlock(&f->mu);
    return out;
}

/* How many log entries from `from` on are exactly `entry`; *first gets the index of the
 * first one (or -1). */
static int fake_count(struct fake *f, size_t from, const char *entry, long *first)
{
    int n = 0;
    if (first)
        *first = -1;
    pthread_mutex_lock(&f->mu);
    for (size_t i = from; i < json_array_size(f->log); i++)
        if (strcmp(json_string_value(json_array_get(f->log, i)), entry) == 0) {
            if (first && *first < 0)
                *first = (long)i;
            n++;
        }
    pthread_mutex_unlock(&f->mu);
    return n;
}

/* ---- the test ------------------------------------------------------------------------ */

/* Runs the loop until cond(f) (or 10 s). */
static void loop_until(struct event_base *base, struct fake *f, bool (*cond)(struct fake *f))
{
    int64_t end = clock_mono_ms() + 10000;
    while (!cond(f) && clock_mono_ms() < end) {
        event_base_loop(base, EVLOOP_NONBLOCK);
        usleep(1000);
    }
    assert_true(cond(f));
}

static struct net *resync_net;
static bool resync_done(struct fake *f)
{
    (void)f;
    return !net_resync_running(resync_net->resync);
}

static void tenants_up(void *arg)
{
    char err[128];
    json_t *req = json_pack("{s:s, s:s, s:[]}", "op", "creds", "tenant", "tn-marker", "rules");
    json_decref(net_ctl_call(arg, req, err, sizeof err));
    json_decref(req);
}

static void claim(struct net *n, const char *id, const char *policy)
{
    struct net_lease l;
    struct spaced_err err;
    if (net_claim(n, id, "tn1", policy, &l, &err) != 0)
        fail_msg("claim %s: %s", id, err.message);
    close(l.tap_fd);
}

static void test_resync_in_flight_change(void **state)
{
    (void)state;
    if (geteuid() != 0) {
        fprintf(stderr, "SKIP: needs root (network namespaces, taps, mounts)\n");
        skip();
    }
    char ctl[100], rule[64];
    snprintf(ctl, sizeof ctl, "%s/fake-gw.sock", datadir);
    struct fake f;
    pthread_t th;
    fake_start(&f, ctl, &th);
    struct event_base *base = event_base_new();
    char err[512];
    struct net_opts o = {.data_dir = datadir, .ns_prefix = prefix, .gateway_ctl = ctl};
    struct net *n = resync_net = net_new(base, &o, err, sizeof err);
    if (!n)
        fail_msg("net_new: %s", err);
    net_on_gateway_up(n, tenants_up, ctl);
    loop_until(base, &f, resync_done);
    const char *p1 = "{\"mode\":\"allowlist\",\"allow\":[\"one.test\"]}";
    /* Claimed A, B, C, D: the resync walks them newest first, D C B A. */
    claim(n, "sbrsA", p1);
    claim(n, "sbrsB", p1);
    claim(n, "sbrsC", p1);
    claim(n, "sbrsD", p1);

    /* The gateway restarts; D's attach is held. The resync does not hold the loop. */
    size_t from = fake_forget(&f);
    fake_hold(&f, "sbrsD");
    int64_t t0 = clock_mono_ms();
    net_gateway_resync(n);
    assert_true(clock_mono_ms() - t0 < HOLD_MS / 2);
    loop_until(base, &f, fake_holding);

    /* D's policy changes while its attach (with the old one) is in flight. */
    struct spaced_err e;
    json_t *p2 = json_pack("{s:s, s:[s]}", "mode", "allowlist", "allow", "two.test");
    assert_int_equal(net_set_policy(n, "sbrsD", "tn1", p2, &e), 0);
    json_decref(p2);
    /* The tenants' rules went first, D's attach was served before the new policy. */
    long tenant_at, attach_at, policy_at;
    assert_int_equal(fake_count(&f, from, "creds tn-marker", &tenant_at), 1);
    fake_count(&f, from, "attach sbrsD", &attach_at);
    fake_count(&f, from, "policy sbrsD", &policy_at);
    assert_true(tenant_at >= 0 && attach_at > tenant_at && policy_at > attach_at);

    /* C is released while its attach is in flight. */
    fake_hold(&f, "sbrsC");
    loop_until(base, &f, fake_holding);
    net_release(n, "sbrsC");

    /* While B's attach is held, the gateway restarts again (the walk starts over after
     * B's reply) and A is claimed (a VM start): the new walk leaves A alone. */
    fake_hold(&f, "sbrsB");
    loop_until(base, &f, fake_holding);
    net_gateway_resync(n);
    pthread_mutex_lock(&f.mu);
    size_t restart = json_array_size(f.log); /* B's held attach is logged when answered */
    pthread_mutex_unlock(&f.mu);
    claim(n, "sbrsA", NULL);
    loop_until(base, &f, resync_done);

    /* What the gateway ends with: every change, whatever the order of the requests. */
    assert_string_equal(fake_policy(&f, "sbrsD", rule, sizeof rule), "two.test");
    assert_string_equal(fake_policy(&f, "sbrsC", rule, sizeof rule), "");
    assert_string_equal(fake_policy(&f, "sbrsB", rule, sizeof rule), "one.test");
    assert_string_equal(fake_policy(&f, "sbrsA", rule, sizeof rule), "one.test");
    /* C: nothing attached it after its detach. */
    long detach_at, c_attach_at;
    assert_int_equal(fake_count(&f, from, "detach sbrsC", &detach_at), 1);
    fake_count(&f, (size_t)detach_at, "attach sbrsC", &c_attach_at);
    assert_int_equal(c_attach_at, -1);
    /* A: attached by its claim only; the restarted walk, which began before the claim
     * attached it, sent it nothing. */
    assert_int_equal(fake_count(&f, restart, "attach sbrsA", NULL), 1);
    assert_int_equal(fake_count(&f, restart, "policy sbrsA", NULL), 0);

    /* A restart with nothing in flight starts at once and sends everything again; an
     * attach the gateway refuses is retried. */
    from = fake_forget(&f);
    pthread_mutex_lock(&f.mu);
    snprintf(f.fail_id, sizeof f.fail_id, "sbrsB");
    pthread_mutex_unlock(&f.mu);
    net_gateway_resync(n);
    loop_until(base, &f, resync_done);
    assert_string_equal(fake_policy(&f, "sbrsD", rule, sizeof rule), "two.test");
    assert_string_equal(fake_policy(&f, "sbrsB", rule, sizeof rule), "one.test");
    assert_string_equal(fake_policy(&f, "sbrsA", rule, sizeof rule), "one.test");
    assert_string_equal(fake_policy(&f, "sbrsC", rule, sizeof rule), "");
    assert_int_equal(fake_count(&f, from, "attach sbrsB", NULL), 2);

    net_release(n, "sbrsA");
    net_release(n, "sbrsB");
    net_release(n, "sbrsD");
    net_free(n);
    event_base_free(base);
    fake_stop(&f, th);
}

int main(void)
{
    snprintf(prefix, sizeof prefix, "sprs%d-", (int)getpid());
    snprintf(datadir, sizeof datadir, "/tmp/space-test-netrs-%d", (int)getpid());
    mkdir(datadir, 0700);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resync_in_flight_change),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", datadir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", datadir);
    return rc;
}
