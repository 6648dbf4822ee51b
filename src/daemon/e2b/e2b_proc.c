/* e2b_proc: process.Process on the agent's exec/attach/ps channels.
 *
 * A process the SDK started (or re-attached) is a `struct e2b_proc` in its sandbox's
 * box, holding the agent channel. Streams (Start, Connect) subscribe to it; output is
 * fanned out to every subscriber and dropped when there is none (envd does the same:
 * Connect shows output from then on). Credit is given back to the agent only when every
 * subscriber's HTTP client keeps up, so a slow client stalls the guest process instead
 * of growing spaced's memory. A cancelled stream never kills its process; a Start
 * stream whose Connect-Timeout-Ms expires does (as envd does).
 *
 * When the agent connection goes away (pause/suspend), channels close: subscribers get
 * `unavailable`, the process record stays with its pid and no channel, and the next
 * call naming that pid re-attaches it (agent op "attach"). Calls for a pid we have no
 * record of (started before a daemon restart, or by the sessions API) attach too. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/agentc/agentc.h"
#include "e2b_internal.h"
#include "e2b_procmsg.h"
#include "e2b_util.h"

struct sub {
    struct e2b_call *call;
    struct e2b_proc *p;
    bool is_start;     /* the Start stream that launched the process */
    bool waiting;      /* drain callback registered */
    struct sub *next;
};

typedef void (*proc_fn)(struct e2b_call *c, struct e2b_proc *p);

struct waiter {
    struct e2b_call *call;
    struct e2b_proc *p;
    proc_fn fn;
    struct waiter *next;
};

struct e2b_proc {
    struct e2b_box *box;
    uint32_t pid;              /* 0 until "started" */
    char *tag;                 /* StartRequest.tag (owned) or NULL */
    bool ready;                /* started or attached: pid valid, channel live */
    bool exited;
    bool pty;
    struct agentc_chan *ch;    /* NULL when detached */
    struct sub *subs;
    struct waiter *waiters;
    uint32_t owed[FRAME_STREAM_COUNT]; /* OUT/ERR bytes not yet credited back */
    struct e2b_err err;        /* first agent ERROR on the channel */
    json_t *retry;             /* exec request with /bin/sh for /bin/bash, until started */
    struct e2b_proc *next;
};

static const struct agentc_chan_ops proc_ops;

static void proc_free(struct e2b_proc *p)
{
    for (struct e2b_proc **pp = &p->box->procs; *pp; pp = &(*pp)->next)
        if (*pp == p) {
            *pp = p->next;
            break;
        }
    free(p->tag);
    json_decref(p->retry);
    free(p);
}

static struct e2b_proc *proc_new(struct e2b_box *box, uint32_t pid)
{
    struct e2b_proc *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->box = box;
    p->pid = pid;
    p->next = box->procs;
    box->procs = p;
    return p;
}

/* ---- credit ------------------------------------------------------------------------- */

static void proc_credit(struct e2b_proc *p);

static void on_sub_drain(struct http_req *req, void *arg)
{
    (void)req;
    struct sub *s = arg;
    s->waiting = false;
    proc_credit(s->p);
}

/* Gives the agent back what it sent once no subscriber is above the high-water mark. */
static void proc_credit(struct e2b_proc *p)
{
    if (!p->ch)
        return;
    for (struct sub *s = p->subs; s; s = s->next) {
        if (http_stream_pending(s->call->req) > E2B_HIGH_WATER) {
            if (!s->waiting) {
                s->waiting = true;
                http_stream_on_drain(s->call->req, on_sub_drain, s);
            }
            return;
        }
    }
    for (int st = FRAME_STREAM_OUT; st <= FRAME_STREAM_ERR; st++)
        if (p->owed[st]) {
            agentc_grant(p->ch, (enum frame_stream)st, p->owed[st]);
            p->owed[st] = 0;
        }
}

/* ---- subscribers ---------------------------------------------------------------------- */

static void sub_unlink(struct sub *s)
{
    for (struct sub **pp = &s->p->subs; *pp; pp = &(*pp)->next)
        if (*pp == s) {
            *pp = s->next;
            break;
        }
}

/* Ends one subscriber's stream (err NULL: success) and forgets it. */
static void sub_finish(struct sub *s, const struct e2b_err *err)
{
    struct e2b_call *c = s->call;
    sub_unlink(s);
    c->cancel = NULL;
    c->impl = NULL;
    free(s);
    e2b_stream_finish(c, err);
}

static void sub_cancel(struct e2b_call *c, bool deadline)
{
    struct sub *s = c->impl;
    struct e2b_proc *p = s->p;
    /* envd runs a Start stream's process only as long as its Connect-Timeout-Ms. */
    if (deadline && s->is_start && p->ch && !p->exited) {
        json_t *ctrl = json_pack("{s:s, s:i}", "op", "signal", "signal", 9);
        agentc_ctrl(p->ch, ctrl);
        json_decref(ctrl);
    }
    sub_unlink(s);
    free(s);
    proc_credit(p);
}

static json_t *proc_keepalive(void)
{
    return e2b_proc_ev_keepalive();
}

static struct sub *sub_add(struct e2b_proc *p, struct e2b_call *c, bool is_start)
{
    struct sub *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->call = c;
    s->p = p;
    s->is_start = is_start;
    s->next = p->subs;
    p->subs = s;
    c->impl = s;
    c->cancel = sub_cancel;
    c->keepalive_msg = proc_keepalive;
    return s;
}

/* ---- waiters (unary calls on a process being attached) -------------------------------- */

static void waiter_unlink(struct waiter *w)
{
    for (struct waiter **pp = &w->p->waiters; *pp; pp = &(*pp)->next)
        if (*pp == w) {
            *pp = w->next;
            break;
        }
}

static void waiter_cancel(struct e2b_call *c, bool deadline)
{
    (void)deadline;
    struct waiter *w = c->impl;
    waiter_unlink(w);
    free(w);
}

/* Runs (or fails) every waiter once the process is ready or lost. */
static void run_waiters(struct e2b_proc *p, const struct e2b_err *err)
{
    while (p->waiters) {
        struct waiter *w = p->waiters;
        p->waiters = w->next;
        struct e2b_call *c = w->call;
        proc_fn fn = w->fn;
        free(w);
        c->cancel = NULL;
        c->impl = NULL;
        if (err)
            e2b_call_fail(c, err);
        else
            fn(c, p);
    }
}

/* ---- agent channel callbacks ------------------------------------------------------------ */

static void broadcast(struct e2b_proc *p, json_t *msg)
{
    for (struct sub *s = p->subs; s; s = s->next)
        e2b_stream_send(s->call, json_incref(msg));
    json_decref(msg);
}

static void on_event(void *arg, json_t *ev)
{
    struct e2b_proc *p = arg;
    const char *type = json_string_value(json_object_get(ev, "type"));
    if (strcmp(type, "started") == 0 || strcmp(type, "attached") == 0) {
        json_int_t pid = json_integer_value(json_object_get(ev, "pid"));
        if (pid <= 0 || pid > UINT32_MAX)
            return;
        p->pid = (uint32_t)pid;
        p->ready = true;
        json_decref(p->retry);
        p->retry = NULL;
        if (json_is_true(json_object_get(ev, "pty")))
            p->pty = true;
        broadcast(p, e2b_proc_ev_start(p->pid));
        run_waiters(p, NULL);
    } else if (strcmp(type, "exit") == 0) {
        json_t *code = json_object_get(ev, "code"), *sig = json_object_get(ev, "signal");
        int signal = json_is_integer(sig) ? (int)json_integer_value(sig) : 0;
        int status = json_is_integer(code) ? (int)json_integer_value(code) : -1;
        p->exited = true;
        broadcast(p, e2b_proc_ev_end(status, signal > 0 ? signal : 0));
        while (p->subs)
            sub_finish(p->subs, NULL);
    }
}

static void on_data(void *arg, enum frame_stream stream, const uint8_t *buf, size_t len)
{
    struct e2b_proc *p = arg;
    enum e2b_proc_stream s = p->pty                           ? E2B_STREAM_PTY
                             : stream == FRAME_STREAM_ERR ? E2B_STREAM_STDERR
                                                          : E2B_STREAM_STDOUT;
    if (p->subs)
        broadcast(p, e2b_proc_ev_data(s, buf, len));
    if (stream == FRAME_STREAM_OUT || stream == FRAME_STREAM_ERR)
        p->owed[stream] += (uint32_t)len;
    proc_credit(p);
}

static void on_error(void *arg, const char *code, const char *message)
{
    struct e2b_proc *p = arg;
    if (p->err.code == E2B_OK)
        e2b_agent_err(&p->err, code, message);
}

static int proc_open(struct e2b_call *c, struct e2b_proc *p, json_t *request,
                     struct e2b_err *err);

static void on_close(void *arg)
{
    struct e2b_proc *p = arg;
    p->ch = NULL;
    memset(p->owed, 0, sizeof p->owed);
    /* The SDK always runs `/bin/bash -l -c <cmd>`; minimal templates (busybox) have only
     * /bin/sh, which understands the same flags. */
    if (!p->ready && p->retry && p->err.code == E2B_NOT_FOUND && p->subs) {
        json_t *r = p->retry;
        p->retry = NULL;
        struct e2b_err err = {0};
        int rc = proc_open(p->subs->call, p, r, &err);
        json_decref(r);
        if (rc == 0)
            return;
    }
    struct e2b_err err = p->err;
    if (err.code == E2B_OK)
        e2b_err_set(&err, E2B_UNAVAILABLE, "lost the process's output (sandbox paused?)");
    if (!p->ready && err.code == E2B_NOT_FOUND && p->pid)
        e2b_err_set(&err, E2B_NOT_FOUND, "process with pid %u not found", p->pid);
    while (p->subs)
        sub_finish(p->subs, &err);
    run_waiters(p, &err);
    /* Keep a detached live process so a later call can re-attach it by pid. */
    if (p->exited || !p->ready || p->err.code != E2B_OK)
        proc_free(p);
    else
        p->ready = false;
}

static const struct agentc_chan_ops proc_ops = {
    .on_event = on_event,
    .on_data = on_data,
    .on_error = on_error,
    .on_close = on_close,
};

/* Opens `request` as p's channel. */
static int proc_open(struct e2b_call *c, struct e2b_proc *p, json_t *request,
                     struct e2b_err *err)
{
    struct agentc *a = e2b_call_agent(c);
    char why[128] = "sandbox is not running";
    p->err.code = E2B_OK;
    if (!a || !(p->ch = agentc_open(a, request, &proc_ops, p, AGENTC_MANUAL_CREDIT, why,
                                    sizeof why)))
        return e2b_err_set(err, E2B_UNAVAILABLE, "%s", why);
    return 0;
}

static int proc_attach(struct e2b_call *c, struct e2b_proc *p, struct e2b_err *err)
{
    json_t *r = json_pack("{s:s, s:I}", "op", "attach", "pid", (json_int_t)p->pid);
    int rc = r ? proc_open(c, p, r, err) : e2b_err_set(err, E2B_INTERNAL, "out of memory");
    json_decref(r);
    return rc;
}

/* The process a selector names, or NULL (tags only match processes we started). */
static struct e2b_proc *proc_find(struct e2b_box *box, const struct e2b_proc_selector *sel)
{
    for (struct e2b_proc *p = box->procs; p; p = p->next) {
        if (sel->by_tag ? (p->tag && strcmp(p->tag, sel->tag) == 0)
                        : (p->pid == sel->pid && p->pid != 0))
            return p;
    }
    return NULL;
}

/* Finds or attaches the selected process; with a channel, runs fn now or when ready. */
static void with_proc(struct e2b_call *c, const struct e2b_proc_selector *sel, proc_fn fn)
{
    struct e2b_err err = {0};
    struct e2b_proc *p = proc_find(c->box, sel);
    if (!p && sel->by_tag) {
        e2b_err_set(&err, E2B_NOT_FOUND, "process with tag %.64s not found", sel->tag);
        e2b_call_fail(c, &err);
        return;
    }
    if (!p && !(p = proc_new(c->box, sel->pid))) {
        e2b_err_set(&err, E2B_INTERNAL, "out of memory");
        e2b_call_fail(c, &err);
        return;
    }
    if (p->ready && p->ch) {
        fn(c, p);
        return;
    }
    if (!p->ch && proc_attach(c, p, &err) < 0) {
        if (!p->subs && !p->waiters)
            proc_free(p);
        e2b_call_fail(c, &err);
        return;
    }
    struct waiter *w = calloc(1, sizeof *w);
    if (!w) {
        e2b_err_set(&err, E2B_INTERNAL, "out of memory");
        e2b_call_fail(c, &err);
        return;
    }
    w->call = c;
    w->p = p;
    w->fn = fn;
    w->next = p->waiters;
    p->waiters = w;
    c->impl = w;
    c->cancel = waiter_cancel;
}

/* ---- methods ----------------------------------------------------------------------------- */

void e2b_proc_start(struct e2b_call *c)
{
    struct e2b_err err = {0};
    struct e2b_proc_start st;
    if (e2b_proc_parse_start(c->msg, &st, &err) < 0) {
        e2b_call_fail(c, &err);
        return;
    }
    char *cwd = e2b_path_resolve(st.cwd ? st.cwd : "~", c->home, &err);
    if (!cwd) {
        e2b_call_fail(c, &err);
        return;
    }
    json_t *argv = json_array();
    json_array_append_new(argv, json_string(st.cmd));
    if (st.args)
        json_array_extend(argv, st.args);
    json_t *r = json_pack("{s:s, s:o, s:s, s:s, s:b}", "op", "exec", "argv", argv, "cwd", cwd,
                          "user", c->user, "stdin", st.stdin_mode != 0);
    free(cwd);
    if (r && st.envs)
        json_object_set(r, "env", st.envs);
    if (r && st.tag)
        json_object_set_new(r, "tag", json_string(st.tag));
    if (r && st.has_pty)
        json_object_set_new(r, "pty", json_pack("{s:I, s:I}", "rows", (json_int_t)st.rows,
                                                "cols", (json_int_t)st.cols));
    struct e2b_proc *p = r ? proc_new(c->box, 0) : NULL;
    if (!p || (st.tag && !(p->tag = strdup(st.tag)))) {
        json_decref(r);
        if (p)
            proc_free(p);
        e2b_err_set(&err, E2B_INVALID_ARGUMENT, "cannot build the exec request (bad UTF-8?)");
        e2b_call_fail(c, &err);
        return;
    }
    p->pty = st.has_pty;
    if (strcmp(st.cmd, "/bin/bash") == 0 && (p->retry = json_deep_copy(r)))
        json_array_set_new(json_object_get(p->retry, "argv"), 0, json_string("/bin/sh"));
    int rc = proc_open(c, p, r, &err);
    json_decref(r);
    if (rc < 0 || !sub_add(p, c, true)) {
        if (p->ch)
            agentc_close(p->ch);
        proc_free(p);
        if (err.code == E2B_OK)
            e2b_err_set(&err, E2B_INTERNAL, "out of memory");
        e2b_call_fail(c, &err);
    }
}

/* Connect: subscribe; the start event comes now if the process is ready, else when the
 * attach (or the start) completes. */
static void connect_ready(struct e2b_call *c, struct e2b_proc *p)
{
    if (!sub_add(p, c, false)) {
        struct e2b_err err;
        e2b_err_set(&err, E2B_INTERNAL, "out of memory");
        e2b_call_fail(c, &err);
        return;
    }
    e2b_stream_send(c, e2b_proc_ev_start(p->pid));
}

void e2b_proc_connect(struct e2b_call *c)
{
    struct e2b_err err = {0};
    struct e2b_proc_selector sel;
    if (e2b_proc_parse_selector(c->msg, &sel, &err) < 0) {
        e2b_call_fail(c, &err);
        return;
    }
    with_proc(c, &sel, connect_ready);
}

static void send_input(struct e2b_call *c, struct e2b_proc *p)
{
    struct e2b_err err = {0};
    struct e2b_proc_input in;
    if (e2b_proc_parse_input(c->msg, &in, &err) < 0) {
        e2b_call_fail(c, &err);
        return;
    }
    if (agentc_queued(p->ch) > 16 * E2B_HIGH_WATER)
        e2b_err_set(&err, E2B_RESOURCE_EXHAUSTED, "the process is not reading its input");
    else if (in.len && agentc_write(p->ch, in.data, in.len) < 0)
        e2b_err_set(&err, E2B_FAILED_PRECONDITION, "stdin of process %u is closed", p->pid);
    free(in.data);
    if (err.code != E2B_OK)
        e2b_call_fail(c, &err);
    else
        e2b_call_reply(c, json_object());
}

static void send_signal(struct e2b_call *c, struct e2b_proc *p)
{
    struct e2b_proc_selector sel;
    int sig = 9;
    struct e2b_err err = {0};
    e2b_proc_parse_signal(c->msg, &sel, &sig, &err);
    json_t *ctrl = json_pack("{s:s, s:i}", "op", "signal", "signal", sig);
    int rc = agentc_ctrl(p->ch, ctrl);
    json_decref(ctrl);
    if (rc < 0) {
        e2b_err_set(&err, E2B_UNAVAILABLE, "cannot signal process %u", p->pid);
        e2b_call_fail(c, &err);
        return;
    }
    e2b_call_reply(c, json_object());
}

static void close_stdin(struct e2b_call *c, struct e2b_proc *p)
{
    agentc_eof(p->ch);
    e2b_call_reply(c, json_object());
}

static void update(struct e2b_call *c, struct e2b_proc *p)
{
    struct e2b_proc_selector sel;
    bool has_pty;
    uint32_t cols = 0, rows = 0;
    struct e2b_err err = {0};
    e2b_proc_parse_update(c->msg, &sel, &has_pty, &cols, &rows, &err);
    if (has_pty) {
        json_t *ctrl = json_pack("{s:s, s:I, s:I}", "op", "resize", "rows", (json_int_t)rows,
                                 "cols", (json_int_t)cols);
        agentc_ctrl(p->ch, ctrl);
        json_decref(ctrl);
    }
    e2b_call_reply(c, json_object());
}

/* Unary methods on one process: validate the request fully first, then act. */
static void unary(struct e2b_call *c, proc_fn fn)
{
    struct e2b_err err = {0};
    struct e2b_proc_selector sel;
    struct e2b_proc_input in;
    bool has_pty;
    uint32_t cols, rows;
    int sig, rc;
    if (fn == send_input) {
        rc = e2b_proc_parse_input(c->msg, &in, &err);
        if (rc == 0) {
            free(in.data);
            sel = in.sel;
        }
    } else if (fn == send_signal) {
        rc = e2b_proc_parse_signal(c->msg, &sel, &sig, &err);
    } else if (fn == update) {
        rc = e2b_proc_parse_update(c->msg, &sel, &has_pty, &cols, &rows, &err);
    } else {
        rc = e2b_proc_parse_selector(c->msg, &sel, &err);
    }
    if (rc < 0) {
        e2b_call_fail(c, &err);
        return;
    }
    with_proc(c, &sel, fn);
}

void e2b_proc_send_input(struct e2b_call *c)
{
    unary(c, send_input);
}

void e2b_proc_send_signal(struct e2b_call *c)
{
    unary(c, send_signal);
}

void e2b_proc_close_stdin(struct e2b_call *c)
{
    unary(c, close_stdin);
}

void e2b_proc_update(struct e2b_call *c)
{
    unary(c, update);
}

/* List: the agent's ps, running processes only, config always present. */
static void list_done(struct e2b_call *c, json_t *result, json_t *entries,
                      const struct e2b_err *err)
{
    (void)entries;
    if (err) {
        e2b_call_fail(c, err);
        return;
    }
    json_t *out = json_array();
    size_t i;
    json_t *pr;
    json_array_foreach(json_object_get(result, "processes"), i, pr) {
        json_int_t pid = json_integer_value(json_object_get(pr, "pid"));
        if (json_is_true(json_object_get(pr, "exited")) || pid <= 0 || pid > UINT32_MAX)
            continue;
        json_t *argv = json_object_get(pr, "argv");
        const char *cmd = json_string_value(json_object_get(pr, "cmd"));
        json_t *args = json_array();
        if (json_is_array(argv) && json_array_size(argv) > 0) {
            cmd = json_string_value(json_array_get(argv, 0));
            for (size_t k = 1; k < json_array_size(argv); k++)
                if (json_is_string(json_array_get(argv, k)))
                    json_array_append(args, json_array_get(argv, k));
        } else if (cmd) {
            json_array_append_new(args, json_string("-c"));
            json_array_append_new(args, json_string(cmd));
            cmd = "/bin/sh";
        }
        json_t *info = e2b_proc_info((uint32_t)pid,
                                     json_string_value(json_object_get(pr, "tag")), cmd, args,
                                     NULL, json_string_value(json_object_get(pr, "cwd")));
        json_decref(args);
        if (info)
            json_array_append_new(out, info);
    }
    e2b_call_reply(c, json_pack("{s:o}", "processes", out));
}

void e2b_proc_list(struct e2b_call *c)
{
    json_t *r = json_pack("{s:s}", "op", "ps");
    e2b_agent_call(c, r, list_done);
    json_decref(r);
}

void e2b_box_procs_free(struct e2b_box *b, bool agent_gone)
{
    struct e2b_err err;
    e2b_err_set(&err, E2B_UNAVAILABLE, "sandbox deleted");
    while (b->procs) {
        struct e2b_proc *p = b->procs;
        if (p->ch && !agent_gone)
            agentc_close(p->ch);
        p->ch = NULL;
        while (p->subs)
            sub_finish(p->subs, &err);
        run_waiters(p, &err);
        proc_free(p);
    }
}
