/* vm_greet: boot or restore a VM and wait for its agent's answer (see vm_greet.h). */
#include "vm_greet.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>

struct vmg {
    struct event_base *base;
    const struct vmg_ops *ops;
    void *arg;
    struct vm *vm;           /* the VM being greeted (borrowed), NULL when idle or tests */
    struct vmg_params p;
    bool active;
    unsigned tried;          /* connections that got no answer in retry_ms */
    struct event *retry;     /* owned: per-connection wait */
    struct event *deadline;  /* owned: overall wait */
};

static void vmg_idle(struct vmg *g)
{
    g->active = false;
    g->vm = NULL;
    evtimer_del(g->retry);
    evtimer_del(g->deadline);
}

static void vmg_fail(struct vmg *g, int err, const char *msg)
{
    struct vm *vm = g->vm;
    vmg_idle(g);
    if (g->ops->on_fail)
        g->ops->on_fail(g->arg, vm, err, msg); /* last: it may free g */
}

static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
    struct vmg *g = arg;
    char m[96];
    (void)fd;
    (void)what;
    snprintf(m, sizeof m, "the agent did not answer within %u ms", g->p.deadline_ms);
    vmg_fail(g, VM_E_TIMEOUT, m);
}

static void on_retry(evutil_socket_t fd, short what, void *arg)
{
    struct vmg *g = arg;
    (void)fd;
    (void)what;
    /* Paused, stopping or gone: whatever comes next is the VM's own news, not ours. */
    if (g->vm && vm_state(g->vm) != VM_STATE_RUNNING)
        return;
    if (g->p.attempts && ++g->tried >= g->p.attempts) {
        char m[96];
        snprintf(m, sizeof m, "the agent never answered HELLO (%u connections)", g->tried);
        vmg_fail(g, VM_E_TIMEOUT, m);
        return;
    }
    if (g->ops->on_retry)
        g->ops->on_retry(g->arg, g->vm);
    /* on_agent follows: the caller greets the fresh connection and calls vmg_sent */
    int err = g->vm && g->active ? vm_agent_reconnect(g->vm) : VM_OK;
    if (err != VM_OK)
        vmg_fail(g, err, "cannot open a fresh agent connection");
}

struct vmg *vmg_new(struct event_base *base, const struct vmg_ops *ops, void *arg)
{
    struct vmg *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    g->base = base;
    g->ops = ops;
    g->arg = arg;
    g->retry = evtimer_new(base, on_retry, g);
    g->deadline = evtimer_new(base, on_deadline, g);
    if (!g->retry || !g->deadline) {
        vmg_free(g);
        return NULL;
    }
    return g;
}

void vmg_free(struct vmg *g)
{
    if (!g)
        return;
    if (g->retry)
        event_free(g->retry);
    if (g->deadline)
        event_free(g->deadline);
    free(g);
}

void vmg_begin(struct vmg *g, struct vm *vm, const struct vmg_params *p)
{
    vmg_idle(g);
    g->vm = vm;
    g->p = *p;
    g->tried = 0;
    g->active = true;
    if (p->deadline_ms) {
        struct timeval tv = {p->deadline_ms / 1000, (p->deadline_ms % 1000) * 1000};
        evtimer_add(g->deadline, &tv);
    }
}

struct vm *vmg_start(struct vmg *g, const struct vm_config *cfg, const char *snapshot_dir,
                     int paused, const struct vmg_params *p, const struct vm_callbacks *cbs,
                     void *arg, int *err, char *msg, size_t msglen)
{
    struct vm *vm = snapshot_dir ? vm_restore(g->base, cfg, snapshot_dir, paused, cbs, arg, err,
                                              msg, msglen)
                                 : vm_boot(g->base, cfg, cbs, arg, err, msg, msglen);
    if (vm)
        vmg_begin(g, vm, p);
    return vm;
}

void vmg_sent(struct vmg *g)
{
    if (!g->active || !g->p.retry_ms)
        return;
    struct timeval tv = {g->p.retry_ms / 1000, (g->p.retry_ms % 1000) * 1000};
    evtimer_add(g->retry, &tv);
}

void vmg_answered(struct vmg *g) { vmg_idle(g); }

void vmg_stop(struct vmg *g) { vmg_idle(g); }

bool vmg_active(const struct vmg *g) { return g->active; }
