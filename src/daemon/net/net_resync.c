/* net_resync.c: after the gateway (re)starts, every sandbox's attach, policy and
 * credentials are sent to it again, from the event loop, without blocking it.
 *
 * Each attach makes the gateway run `nft` (40-200 ms). Sent with synchronous calls from
 * one loop callback, as before this file, N sandboxes stopped spaced's loop for N times
 * that: every API call and health probe waited for the whole resync (docs/architecture.md
 * has the figures). Here one request is in flight at a time, on a non-blocking
 * connection (net_ctl_async); its reply comes back as a loop event, and between two
 * requests the loop serves everything else.
 *
 * The walk: first net_on_gateway_up's function (the tenants' rules: a few synchronous
 * requests the gateway answers from memory, before any sandbox's), then a snapshot of the
 * sandbox ids taken at the start, newest first. Only ids are kept across loop turns: each
 * step looks its record up again and builds its request from the record as it is then.
 * For each record with a namespace: attach (an attachment the gateway already has is
 * live: it answers "exists" and gets the policy instead), then the credentials if any.
 *
 * Changes made meanwhile by net.c's synchronous paths (claim, policy, credentials,
 * release):
 *  - Order. The gateway serves its connections in whatever order its loop sees them, so
 *    an attach of ours still in flight could land after a policy change (the old policy
 *    back) or after a release's detach (a deleted sandbox attached again). Those paths
 *    call net_resync_settle first: it finishes our request (blocking for the rest of one
 *    request at most), and our next one waits for the loop, after theirs.
 *  - Generations. Every change bumps its record's gen (net_rec_touch). A record whose gen
 *    moved while its requests were under way is done again from its attach (up to
 *    REDO_MAX times), so what the resync leaves in the gateway is the record's latest
 *    state however the requests interleaved. A record a claim attached since the walk
 *    began (claimed_gen) is skipped: the claim sent this gateway everything. A released
 *    one is dropped.
 *
 * A failed step (unreachable, timed out, refused) retries the record from its attach
 * RETRY_MS later, RETRY_MAX times; a supervised gateway found dead ends the walk instead
 * (its restart starts a new one). A start while a walk runs (the gateway restarted
 * again) starts over once the request in flight is answered. The end is logged as
 * `net.resync attached=N ms=T` (attached: the records the new gateway now serves). */
#include <event2/event.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "daemon/net/net_internal.h"
#include "log.h"

#define RETRY_MAX 3   /* retries of a record whose attach or credentials failed */
#define RETRY_MS 100  /* between them: a gateway busy or starting */
#define REDO_MAX 3    /* sends of a record again because it changed meanwhile */

enum resync_step { STEP_ATTACH, STEP_POLICY, STEP_CREDS, STEP_DONE };

struct net_resync {
    struct net *n;
    struct event *ev;             /* runs the next step from the loop (now, or a retry later) */
    struct net_ctl_async *req;    /* the request in flight, or NULL */
    json_t *sent;                 /* its body (owned), for the reply's log line */
    bool running;
    bool again;                   /* started again meanwhile: start over after the reply */
    bool tenants_sent;            /* net_on_gateway_up's function has run for this walk */
    char (*ids)[NET_ID_MAX + 1];  /* the snapshot (owned) */
    size_t count, pos;            /* ids[pos] is the record being sent */
    uint64_t start_gen;           /* n->gen when the walk began */
    uint64_t rec_gen;             /* the current record's gen when its attach was built */
    enum resync_step step;
    int tries, redos;             /* of the current record */
    unsigned attached, failed, redone;
    int64_t t0_ms;
};

static void resync_step_cb(evutil_socket_t fd, short what, void *arg);

struct net_resync *net_resync_new(struct net *n)
{
    struct net_resync *rs = calloc(1, sizeof *rs);
    if (!rs)
        return NULL;
    rs->n = n;
    rs->ev = evtimer_new(n->base, resync_step_cb, rs);
    if (!rs->ev) {
        free(rs);
        return NULL;
    }
    return rs;
}

static void drop_request(struct net_resync *rs)
{
    net_ctl_async_cancel(rs->req);
    rs->req = NULL;
    json_decref(rs->sent);
    rs->sent = NULL;
}

void net_resync_free(struct net_resync *rs)
{
    if (!rs)
        return;
    drop_request(rs);
    event_free(rs->ev);
    free(rs->ids);
    free(rs);
}

bool net_resync_running(const struct net_resync *rs)
{
    return rs && rs->running;
}

static void schedule(struct net_resync *rs, int delay_ms)
{
    struct timeval tv = {.tv_sec = delay_ms / 1000, .tv_usec = (delay_ms % 1000) * 1000};
    evtimer_del(rs->ev);
    if (delay_ms)
        evtimer_add(rs->ev, &tv);
    else
        event_active(rs->ev, EV_TIMEOUT, 0);
}

/* A new walk over the records as they are now; its first step runs from the loop. */
static void begin(struct net_resync *rs)
{
    size_t count = 0;
    for (struct net_rec *r = rs->n->recs; r; r = r->next)
        count++;
    free(rs->ids);
    rs->ids = count ? calloc(count, sizeof *rs->ids) : NULL;
    if (count && !rs->ids) {
        log_error("net.resync", "error=\"out of memory\"");
        count = 0;
    }
    size_t i = 0;
    for (struct net_rec *r = rs->n->recs; r && i < count; r = r->next)
        memcpy(rs->ids[i++], r->id, sizeof r->id);
    rs->count = count;
    rs->pos = 0;
    rs->step = STEP_ATTACH;
    rs->tries = rs->redos = 0;
    rs->attached = rs->failed = rs->redone = 0;
    rs->start_gen = rs->n->gen;
    rs->tenants_sent = false;
    rs->again = false;
    rs->running = true;
    rs->t0_ms = clock_mono_ms();
    schedule(rs, 0);
}

void net_resync_start(struct net_resync *rs)
{
    if (rs->req)
        rs->again = true; /* after the reply (the request cannot be taken back) */
    else
        begin(rs);
}

void net_resync_settle(struct net_resync *rs)
{
    if (rs && rs->req)
        net_ctl_async_wait(rs->req); /* on_reply runs; the next step waits for the loop */
}

static void next_record(struct net_resync *rs)
{
    rs->pos++;
    rs->step = STEP_ATTACH;
    rs->tries = rs->redos = 0;
}

static void finish(struct net_resync *rs, const char *event)
{
    log_info(event, "attached=%u ms=%lld failed=%u redone=%u of=%zu", rs->attached,
             (long long)(clock_mono_ms() - rs->t0_ms), rs->failed, rs->redone, rs->count);
    rs->running = false;
    free(rs->ids);
    rs->ids = NULL;
    rs->count = rs->pos = 0;
}

static void on_reply(json_t *rep, const char *err, void *arg);

/* Sends the current step's request (req stolen). */
static void send_step(struct net_resync *rs, json_t *req)
{
    rs->sent = req;
    rs->req = req ? net_ctl_async(rs->n->base, rs->n->ctl, req, on_reply, rs) : NULL;
    if (!rs->req) {
        json_decref(req);
        rs->sent = NULL;
        log_error("net.resync", "sandbox=%s error=\"out of memory\"", rs->ids[rs->pos]);
        schedule(rs, RETRY_MS); /* the same step again */
    }
}

/* The record to send, or NULL when there is nothing to send for it (gone, no NIC, no
 * namespace yet: its first claim attaches it). path gets its namespace. */
static struct net_rec *current(struct net_resync *rs, char *path, size_t cap)
{
    struct net_rec *r = net_rec_find(rs->n, rs->ids[rs->pos]);
    if (!r || !r->nic)
        return NULL;
    net_rec_ns_path(rs->n, r->id, path, cap);
    int fd = net_ns_open(path);
    if (fd < 0)
        return NULL;
    close(fd);
    return r;
}

/* One step: the next request of the walk, or its end. */
static void walk(struct net_resync *rs)
{
    struct net *n = rs->n;
    if (!rs->tenants_sent) {
        rs->tenants_sent = true;
        if (n->gateway_up)
            n->gateway_up(n->gateway_up_arg); /* the tenants' rules before the sandboxes */
    }
    for (; rs->pos < rs->count; next_record(rs)) {
        char path[NET_NS_PATH_MAX];
        struct net_rec *r = current(rs, path, sizeof path);
        if (!r)
            continue;
        if (r->claimed_gen > rs->start_gen) {
            rs->attached++; /* its claim attached it to this gateway meanwhile */
            continue;
        }
        if (rs->step != STEP_ATTACH && r->gen != rs->rec_gen && rs->redos < REDO_MAX) {
            rs->redos++; /* changed while ours were in flight: send it as it is now */
            rs->redone++;
            rs->step = STEP_ATTACH;
        }
        if (rs->step == STEP_CREDS && !json_array_size(r->creds))
            rs->step = STEP_DONE;
        if (rs->step == STEP_DONE) {
            rs->attached++;
            continue;
        }
        if (rs->step == STEP_ATTACH)
            rs->rec_gen = r->gen;
        send_step(rs, rs->step == STEP_ATTACH   ? net_req_attach(r, path)
                      : rs->step == STEP_POLICY ? net_req_policy(r)
                                                : net_req_creds(r));
        return;
    }
    finish(rs, "net.resync");
}

static void resync_step_cb(evutil_socket_t fd, short what, void *arg)
{
    struct net_resync *rs = arg;
    (void)fd;
    (void)what;
    if (rs->running && !rs->req)
        walk(rs);
}

static void on_reply(json_t *rep, const char *err, void *arg)
{
    struct net_resync *rs = arg;
    char code[48];
    bool ok = net_reply_ok(rs->sent, rep, err, code, sizeof code);
    rs->req = NULL;
    json_decref(rs->sent);
    rs->sent = NULL;
    json_decref(rep);
    if (rs->again) {
        begin(rs);
        return;
    }
    if (ok || (rs->step == STEP_ATTACH && strcmp(code, "exists") == 0)) {
        rs->step = !ok ? STEP_POLICY : rs->step == STEP_CREDS ? STEP_DONE : STEP_CREDS;
        schedule(rs, 0);
        return;
    }
    if (rs->n->gw && !net_gw_up(rs->n->gw)) {
        finish(rs, "net.resync_stopped"); /* gateway gone: its restart starts a new walk */
        return;
    }
    if (rs->tries++ < RETRY_MAX) {
        rs->step = STEP_ATTACH;
        schedule(rs, RETRY_MS);
        return;
    }
    log_warn("net.resync_failed", "sandbox=%s tries=%d", rs->ids[rs->pos], rs->tries);
    rs->failed++;
    next_record(rs);
    schedule(rs, 0);
}
