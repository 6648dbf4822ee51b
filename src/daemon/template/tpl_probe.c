/* tpl_probe.c: bringing a template VM to "ready": start the template's start command
 * (detached, as a service) and run its ready check until it exits 0.
 *
 * The same procedure runs in the build VM (a template whose service never becomes ready
 * fails its build, with the check's output) and in the template VM whose memory becomes
 * the snapshot (so clones restore with the service already up and ready). Neither VM
 * has had a `refresh` with env (the snapshot VM's warm-up, tpl_warm.c, sends none), so the
 * requests carry the template's default env themselves. */
#include <event2/event.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/agentc/agentc.h"
#include "log.h"
#include "tpl_internal.h"

#define TPL_READY_TIMEOUT_S 300 /* TCG boots and services are slow; be generous */
#define TPL_READY_RETRY_MS 500
#define TPL_PROBE_TAIL 1024

struct tpl_probe {
    struct spaced *sp;
    struct agentc *agent;            /* borrowed: the VM's connection */
    const struct tpl_defaults *d;    /* borrowed: outlives the probe (caller's) */
    tpl_probe_done done;
    void *arg;
    struct agentc_chan *ch;          /* start or ready exec in flight, NULL between tries */
    struct event *retry;             /* next ready try, or the first callback */
    struct event *deadline;          /* whole probe */
    unsigned tries;
    int exit_code;                   /* of the last ready try; -1 = none / error */
    char tail[TPL_PROBE_TAIL + 1];   /* last output of the last ready try */
    size_t taillen;
    bool failed_start;
};

static void finish(struct tpl_probe *p, const char *failure)
{
    tpl_probe_done done = p->done;
    void *arg = p->arg;
    if (p->ch)
        agentc_close(p->ch);
    p->ch = NULL;
    event_del(p->retry);
    event_del(p->deadline);
    done(arg, failure); /* may free p */
}

static void try_ready(struct tpl_probe *p);

static void later(struct tpl_probe *p, int ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    event_add(p->retry, &tv);
}

/* ---- the start command ---------------------------------------------------------------- */

static void start_event(void *arg, json_t *ev)
{
    struct tpl_probe *p = arg;
    if (strcmp(json_string_value(json_object_get(ev, "type")), "started") != 0)
        return;
    agentc_close(p->ch); /* detach: it keeps running, in the snapshot too */
    p->ch = NULL;
    later(p, 0);
}

static void start_error(void *arg, const char *code, const char *message)
{
    struct tpl_probe *p = arg;
    snprintf(p->tail, sizeof p->tail, "%s: %s", code, message);
    p->failed_start = true;
}

static void start_close(void *arg)
{
    struct tpl_probe *p = arg;
    p->ch = NULL;
    char why[TPL_PROBE_TAIL + 64];
    snprintf(why, sizeof why, "the start command did not start: %s",
             p->failed_start ? p->tail : "the agent closed the request");
    finish(p, why);
}

static const struct agentc_chan_ops start_ops = {
    .on_event = start_event, .on_error = start_error, .on_close = start_close};

/* ---- the ready check ------------------------------------------------------------------ */

static void ready_event(void *arg, json_t *ev)
{
    struct tpl_probe *p = arg;
    if (strcmp(json_string_value(json_object_get(ev, "type")), "exit") != 0)
        return;
    json_t *code = json_object_get(ev, "code");
    p->exit_code = json_is_integer(code) ? (int)json_integer_value(code) : -1;
}

static void ready_data(void *arg, enum frame_stream st, const uint8_t *buf, size_t len)
{
    struct tpl_probe *p = arg;
    (void)st;
    tpl_tail_append(p->tail, &p->taillen, TPL_PROBE_TAIL, buf, len);
}

static void ready_error(void *arg, const char *code, const char *message)
{
    struct tpl_probe *p = arg;
    p->exit_code = -1;
    tpl_tail_set_error(p->tail, &p->taillen, TPL_PROBE_TAIL, code, message);
}

static void ready_close(void *arg)
{
    struct tpl_probe *p = arg;
    p->ch = NULL;
    if (p->exit_code == 0) {
        finish(p, NULL);
        return;
    }
    later(p, TPL_READY_RETRY_MS);
}

static const struct agentc_chan_ops ready_ops = {
    .on_event = ready_event, .on_data = ready_data, .on_error = ready_error, .on_close = ready_close};

static json_t *with_env(json_t *req, const struct tpl_defaults *d)
{
    if (req)
        json_object_set(req, "env", d->env);
    return req;
}

static void try_ready(struct tpl_probe *p)
{
    if (!p->d->ready) {
        finish(p, NULL);
        return;
    }
    p->tries++;
    p->exit_code = -1;
    p->taillen = 0;
    p->tail[0] = '\0';
    json_t *req = with_env(json_pack("{s:s, s:s, s:s, s:s, s:s}", "op", "exec", "cmd", p->d->ready,
                                     "user", p->d->user, "cwd", p->d->workdir, "tag",
                                     "template-ready"),
                           p->d);
    char err[128] = "";
    p->ch = req ? agentc_open(p->agent, req, &ready_ops, p, 0, err, sizeof err) : NULL;
    json_decref(req);
    if (!p->ch) {
        char why[192];
        snprintf(why, sizeof why, "cannot run the ready check: %s", err[0] ? err : "out of memory");
        finish(p, why);
    }
}

static void on_retry(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    try_ready(arg);
}

static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
    struct tpl_probe *p = arg;
    (void)fd;
    (void)what;
    char why[TPL_PROBE_TAIL + 160];
    snprintf(why, sizeof why, "the ready check did not pass within %d s (%u tries; last exit %d): %s",
             TPL_READY_TIMEOUT_S, p->tries, p->exit_code, p->tail);
    finish(p, why);
}

struct tpl_probe *tpl_probe_start(struct spaced *sp, struct agentc *agent,
                                  const struct tpl_defaults *d, tpl_probe_done done, void *arg)
{
    struct tpl_probe *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->sp = sp;
    p->agent = agent;
    p->d = d;
    p->done = done;
    p->arg = arg;
    p->retry = evtimer_new(sp->base, on_retry, p);
    p->deadline = evtimer_new(sp->base, on_deadline, p);
    if (!p->retry || !p->deadline) {
        tpl_probe_free(p);
        return NULL;
    }
    struct timeval tv = {TPL_READY_TIMEOUT_S, 0};
    event_add(p->deadline, &tv);
    if (!d->start) {
        later(p, 0); /* results always come from the loop */
        return p;
    }
    json_t *req = with_env(tpl_start_request(d), d);
    char err[128] = "";
    p->ch = req ? agentc_open(agent, req, &start_ops, p, 0, err, sizeof err) : NULL;
    json_decref(req);
    if (!p->ch) {
        log_warn("template.probe", "msg=\"cannot send the start command: %s\"", err);
        tpl_probe_free(p);
        return NULL;
    }
    return p;
}

void tpl_probe_free(struct tpl_probe *p)
{
    if (!p)
        return;
    if (p->ch)
        agentc_close(p->ch);
    if (p->retry)
        event_free(p->retry);
    if (p->deadline)
        event_free(p->deadline);
    free(p);
}
