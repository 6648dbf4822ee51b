/* sbx_gwwait.c: a VM start that needs the egress gateway waits for it, bounded.
 *
 * spaced restarts a gateway that died (net_gw.c: at once when it had been serving) and,
 * once the new one answers, attaches every sandbox again. A VM started in between would
 * have nothing answering in its namespace (DNS refused, connections reset) until that
 * resync, while its create, start, restore or wake already reported success. So an
 * action whose VM gets a NIC asks first whether the gateway is up (net_gateway_up); if
 * not, the action waits (the sandbox stays busy; the event loop does not), checking every
 * SBX_GW_POLL_MS, and starts over through its resume function once the gateway is back.
 * The bound, SBX_GW_WAIT_MS, counts from the action's first wait; past it the action
 * fails with 503 gateway_unavailable (sbx_act.c). */
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "daemon/net/net.h"
#include "log.h"
#include "sbx_internal.h"

#define SBX_GW_POLL_MS 20

struct sbx_gw_wait {
    struct event *ev;            /* the poll timer */
    int64_t deadline_ms;         /* 0: this action has not waited yet */
    int64_t since_ms;            /* the current wait's start, 0 when not waiting */
    char snap[SBX_PATH_MAX];     /* the resume's argument */
    bool has_snap;               /* snap is set (else NULL) */
    sbx_gw_resume_fn resume;
};

static void on_poll(evutil_socket_t fd, short what, void *arg)
{
    struct sbx *s = arg;
    struct sbx_gw_wait *w = s->gw;
    (void)fd;
    (void)what;
    if (!s->op_id[0])
        return; /* the action ended meanwhile */
    struct net *n = net_get(s->sp);
    if (n && !net_gateway_up(n) && clock_mono_ms() < w->deadline_ms) {
        struct timeval tv = {0, SBX_GW_POLL_MS * 1000};
        evtimer_add(w->ev, &tv);
        return;
    }
    /* Back (or out of time): the resume asks again and goes on, or fails. */
    w->resume(s, w->has_snap ? w->snap : NULL);
}

enum sbx_gw sbx_gw_check(struct sbx *s, const char *snap, sbx_gw_resume_fn resume)
{
    struct net *n = net_get(s->sp);
    struct sbx_gw_wait *w = s->gw;
    int64_t now = clock_mono_ms();
    if (!n || net_gateway_up(n)) {
        if (w && w->since_ms)
            log_info("sandbox.gateway_wait", "sandbox=%s result=up waited_ms=%lld", s->rec.id,
                     (long long)(now - w->since_ms));
        if (w)
            w->since_ms = 0;
        return SBX_GW_GO; /* no network module: the claim says why */
    }
    if (!w && !(w = s->gw = calloc(1, sizeof *s->gw)))
        return SBX_GW_DOWN;
    if (!w->deadline_ms)
        w->deadline_ms = now + SBX_GW_WAIT_MS;
    if (now >= w->deadline_ms) {
        log_warn("sandbox.gateway_wait", "sandbox=%s op=%s result=gave_up waited_ms=%d",
                 s->rec.id, op_kind_name(s->op_kind), SBX_GW_WAIT_MS);
        w->since_ms = 0;
        return SBX_GW_DOWN;
    }
    if (!w->since_ms) {
        w->since_ms = now;
        log_info("sandbox.gateway_wait", "sandbox=%s op=%s result=waiting max_ms=%lld",
                 s->rec.id, op_kind_name(s->op_kind), (long long)(w->deadline_ms - now));
    }
    if (!w->ev && !(w->ev = evtimer_new(s->sp->base, on_poll, s)))
        return SBX_GW_DOWN;
    w->has_snap = snap != NULL;
    if (snap)
        snprintf(w->snap, sizeof w->snap, "%s", snap);
    w->resume = resume;
    struct timeval tv = {0, SBX_GW_POLL_MS * 1000};
    evtimer_add(w->ev, &tv);
    return SBX_GW_WAIT;
}

void sbx_gw_reset(struct sbx *s)
{
    if (!s->gw)
        return;
    if (s->gw->ev)
        evtimer_del(s->gw->ev);
    s->gw->deadline_ms = 0;
    s->gw->since_ms = 0;
}

void sbx_gw_free(struct sbx *s)
{
    if (!s->gw)
        return;
    if (s->gw->ev)
        event_free(s->gw->ev);
    free(s->gw);
    s->gw = NULL;
}
