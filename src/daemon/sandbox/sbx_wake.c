/* sbx_wake.c: auto-resume, the one "wait until running" path behind every API call that
 * needs a sandbox's VM (sbx.h, sbx_wake_wait).
 *
 * A sandbox created with "auto_resume": true that is paused or suspended (by its timeout
 * or by a client) is woken by the next call that needs its agent: the caller parks on a
 * waiter here, one OP_WAKE is submitted for the sandbox (a second caller finds the
 * desired state running already and only waits: concurrent calls share one resume), and
 * every waiter of the sandbox hears once, from the loop, that it is running with its
 * agent connected (then the caller carries on as if it had never waited) or why not.
 *
 * How a waiter learns the outcome: a state-change listener (sbx_listen) wakes the
 * sandbox's waiters as soon as its state moves, and each waiter also polls every
 * SBX_WAKE_POLL_MS, which covers an agent that reconnects without a state change (a
 * restarted spaced re-adopting the VM). Both only schedule the waiter's timer: the
 * outcome is decided and delivered from the timer, never from inside sbx_set_state
 * (the caller's continuation opens agent channels and submits ops: not something to do
 * in the middle of a state change). The wait is bounded by SBX_WAKE_WAIT_S, longer than
 * a restore's own agent deadline (sbx_act.c), so a stuck wake ends in 503 (retry safe:
 * the wake goes on) rather than a request hanging.
 *
 * Waiters live in the sandbox table (sbx_internal.h), keyed by sandbox id, not pointer:
 * a sandbox deleted meanwhile is a failed wait, never a dangling pointer. */
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "sbx_internal.h"

#define SBX_WAKE_POLL_MS 500

struct sbx_waiter {
    struct spaced *sp;
    char id[STORE_ID_MAX];
    sbx_wake_fn fn;
    void *arg;
    int64_t deadline_ms;
    struct event *timer;      /* owned */
    struct sbx_waiter *next;  /* table list */
};

static void waiter_unlink_free(struct sbx_table *t, struct sbx_waiter *w)
{
    for (struct sbx_waiter **pp = &t->waiters; *pp; pp = &(*pp)->next)
        if (*pp == w) {
            *pp = w->next;
            break;
        }
    event_free(w->timer);
    free(w);
}

/* Delivers the outcome: the waiter is gone before fn runs (fn may wait again). */
static void waiter_end(struct sbx_waiter *w, const struct spaced_err *err)
{
    struct spaced *sp = w->sp;
    sbx_wake_fn fn = w->fn;
    void *arg = w->arg;
    waiter_unlink_free(sp->sbx, w);
    fn(sp, err == NULL, err, arg);
}

static void waiter_arm(struct sbx_waiter *w, int ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    event_add(w->timer, &tv);
}

/* Where the sandbox is with respect to the wait: 1 running with its agent, 0 still on its
 * way, -1 never getting there by this wake (err says why). */
static int wake_progress(struct sbx *s, const char *id, struct spaced_err *err)
{
    if (!s)
        return spaced_err_set(err, 409, "not_running",
                              "sandbox %s was deleted while it was resuming", id);
    if (sbx_agent(s))
        return 1;
    switch (s->state) {
    case SBX_FAILED:
        return spaced_err_set(err, 409, "not_running", "auto-resume of sandbox %s failed: %s",
                              id, s->rec.failure ? s->rec.failure : "the sandbox failed");
    case SBX_STOPPING:
    case SBX_STOPPED:
    case SBX_DELETING:
    case SBX_DELETED:
        return spaced_err_set(err, 409, "not_running",
                              "sandbox %s is %s: it was not resumed", id,
                              sbx_state_name(s->state));
    default:
        break;
    }
    /* A wake that failed put the desired state back, as did a later pause or suspend. */
    if (s->desired != SBX_RUNNING)
        return spaced_err_set(err, 409, "not_running",
                              "sandbox %s is %s (heading to %s): it was not resumed", id,
                              sbx_state_name(s->state), sbx_state_name(s->desired));
    return 0;
}

static void on_waiter_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct sbx_waiter *w = arg;
    struct spaced_err err;
    int p = wake_progress(sbx_find(w->sp, NULL, w->id), w->id, &err);
    if (p == 0 && spaced_now_ms() >= w->deadline_ms) {
        spaced_err_set(&err, 503, "resume_timeout",
                       "sandbox %s did not finish resuming within %d s; retry shortly", w->id,
                       SBX_WAKE_WAIT_S);
        p = -1;
    }
    if (p == 0) {
        waiter_arm(w, SBX_WAKE_POLL_MS);
        return;
    }
    if (p > 0)
        log_info("sandbox.autoresume", "sandbox=%s event=ready", w->id);
    waiter_end(w, p > 0 ? NULL : &err);
}

/* Listener: a state change of a sandbox with waiters gets them looked at now. */
static void on_state(struct spaced *sp, struct sbx *s, enum sbx_state old, enum sbx_state now,
                     void *arg)
{
    (void)old;
    (void)now;
    (void)arg;
    for (struct sbx_waiter *w = sp->sbx->waiters; w; w = w->next)
        if (strcmp(w->id, s->rec.id) == 0)
            waiter_arm(w, 0);
}

/* Whether a call on s may wait for a wake, and whether it must submit one. */
static bool wake_eligible(const struct sbx *s, bool *submit)
{
    *submit = false;
    if (!s->rec.auto_resume)
        return false;
    if (s->desired == SBX_PAUSED || s->desired == SBX_SUSPENDED) {
        *submit = true; /* after any queued pause/suspend: the op queue keeps the order */
        return true;
    }
    if (s->desired != SBX_RUNNING)
        return false;
    switch (s->state) { /* heading to running already: a wake (or adoption) is under way */
    case SBX_RUNNING:
    case SBX_PAUSING:
    case SBX_PAUSED:
    case SBX_RESUMING:
    case SBX_SUSPENDING:
    case SBX_SUSPENDED:
    case SBX_RESTORING:
        return true;
    default:
        return false;
    }
}

struct sbx_waiter *sbx_wake_wait(struct spaced *sp, struct sbx *s, sbx_wake_fn fn, void *arg,
                                 struct spaced_err *err)
{
    err->status = 0;
    bool submit;
    if (!wake_eligible(s, &submit))
        return NULL;
    struct sbx_table *t = sp->sbx;
    if (!t->wake_listening) {
        if (sbx_listen(sp, on_state, NULL) < 0) {
            spaced_err_set(err, 500, "internal", "no listener slot left for auto-resume");
            return NULL;
        }
        t->wake_listening = true;
    }
    struct sbx_waiter *w = calloc(1, sizeof *w);
    if (w)
        w->timer = evtimer_new(sp->base, on_waiter_timer, w);
    if (!w || !w->timer) {
        free(w);
        spaced_err_set(err, 503, "unavailable", "out of memory");
        return NULL;
    }
    if (submit) {
        struct store_op op;
        if (sbx_submit(sp, s->rec.tenant, OP_WAKE, s->rec.id, &op, err) < 0) {
            event_free(w->timer);
            free(w);
            return NULL;
        }
        log_info("sandbox.autoresume", "sandbox=%s event=wake op=%s from=%s", s->rec.id, op.id,
                 sbx_state_name(s->state));
        store_op_clear(&op);
    }
    w->sp = sp;
    snprintf(w->id, sizeof w->id, "%s", s->rec.id);
    w->fn = fn;
    w->arg = arg;
    w->deadline_ms = spaced_now_ms() + SBX_WAKE_WAIT_S * 1000LL;
    w->next = t->waiters;
    t->waiters = w;
    waiter_arm(w, SBX_WAKE_POLL_MS);
    return w;
}

void sbx_wake_cancel(struct spaced *sp, struct sbx_waiter *w)
{
    if (w)
        waiter_unlink_free(sp->sbx, w);
}

void sbx_wake_free_all(struct sbx_table *t)
{
    while (t->waiters) {
        struct spaced_err err;
        spaced_err_set(&err, 503, "unavailable", "spaced is shutting down");
        waiter_end(t->waiters, &err);
    }
}
