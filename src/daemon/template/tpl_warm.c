/* tpl_warm.c: the first-use work of every clone, done once in the template VM before its
 * memory snapshot (tpl_internal.h tpl_warm_start).
 *
 * A clone restored from the snapshot starts with the template VM's memory, page cache
 * included, in a QEMU whose TCG translation cache is empty. Whatever the template VM
 * never did, every clone does for the first time on its critical path: the create's
 * refresh looked the default user up in /etc/passwd (a disk read through the whole
 * virtio-blk path: 50-80 ms of a create on this TCG host, most of what the platform
 * added to a bare restore), and the first command loaded /bin/sh and its libraries from
 * disk. So before the snapshot the template VM gets:
 *   1. a refresh naming the template's default user and workdir (no env, no hostname, no
 *      token: those are each clone's own, set by its own refresh; the agent's parsed
 *      /etc/passwd and /etc/group and their pages stay in the snapshot);
 *   2. `true` run as a client's command would be (the user's shell, the workdir).
 * A failure is logged and the snapshot is taken anyway: it is then colder, not wrong
 * (each clone's refresh still checks its user). */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "daemon/agentc/agentc.h"
#include "log.h"
#include "tpl_internal.h"

struct tpl_warm {
    struct agentc *agent;         /* borrowed */
    const struct tpl_defaults *d; /* borrowed */
    tpl_warm_done done;
    void *arg;
    struct agentc_chan *ch; /* the step in flight */
    unsigned step;          /* index into the steps below */
    unsigned failed;        /* steps that answered with an error */
    int64_t t0_ms;          /* clock_mono_ms() at the start, for the log */
    char label[96];         /* for the log: the template's snapshot */
};

#define WARM_STEPS 2

static json_t *step_request(const struct tpl_warm *w)
{
    if (w->step == 0)
        return json_pack("{s:s, s:s, s:s}", "op", "refresh", "user", w->d->user, "workdir",
                         w->d->workdir);
    if (w->step == 1)
        return json_pack("{s:s, s:s, s:s, s:s, s:s}", "op", "exec", "cmd", "true", "user",
                         w->d->user, "cwd", w->d->workdir, "tag", "template-warm");
    return NULL;
}

static void on_error(void *arg, const char *code, const char *message)
{
    struct tpl_warm *w = arg;
    char q[160];
    w->failed++;
    log_warn("template.warm", "snapshot=%s step=%u code=%s msg=%s", w->label, w->step, code,
             log_quote(message, q, sizeof q));
}

static int next_step(struct tpl_warm *w);

static void on_close(void *arg)
{
    struct tpl_warm *w = arg;
    w->ch = NULL;
    w->step++;
    if (next_step(w) == 0)
        return;
    log_info("template.warm", "snapshot=%s result=%s steps=%u failed=%u ms=%lld", w->label,
             w->failed || w->step < WARM_STEPS ? "partial" : "ok", w->step, w->failed,
             (long long)(clock_mono_ms() - w->t0_ms));
    w->done(w->arg); /* may free w */
}

static const struct agentc_chan_ops warm_ops = {.on_error = on_error, .on_close = on_close};

/* Opens the current step's channel: 0, or -1 when there is none left (or it cannot be
 * sent: logged, and the rest is skipped). */
static int next_step(struct tpl_warm *w)
{
    json_t *req = step_request(w);
    if (!req)
        return -1;
    char err[128] = "";
    w->ch = agentc_open(w->agent, req, &warm_ops, w, 0, err, sizeof err);
    json_decref(req);
    if (!w->ch)
        log_warn("template.warm", "snapshot=%s step=%u msg=\"cannot send: %s\"", w->label,
                 w->step, err);
    return w->ch ? 0 : -1;
}

struct tpl_warm *tpl_warm_start(struct agentc *agent, const struct tpl_defaults *d,
                                const char *label, tpl_warm_done done, void *arg)
{
    struct tpl_warm *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    *w = (struct tpl_warm){.agent = agent, .d = d, .done = done, .arg = arg};
    snprintf(w->label, sizeof w->label, "%s", label);
    w->t0_ms = clock_mono_ms();
    if (next_step(w) < 0) {
        free(w);
        return NULL;
    }
    return w;
}

void tpl_warm_free(struct tpl_warm *w)
{
    if (!w)
        return;
    if (w->ch)
        agentc_close(w->ch);
    free(w);
}
