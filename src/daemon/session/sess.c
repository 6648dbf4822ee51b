/* sess.c: the session table, the process's agent channel and output credit; see sess.h.
 * SSE readers and stdin uploads are in sess_reader.c. */
#include "daemon/session/sess_internal.h"

#include <event2/event.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/agentc/agentc.h"
#include "daemon/sandbox/sbx.h"
#include "daemon/metrics/metrics.h"
#include "log.h"

#define SESS_GC_PERIOD_S 30

struct sess_table {
    struct spaced *sp;         /* daemon context (borrowed) */
    struct sess *head;         /* sessions, oldest first (owned) */
    struct sess *tail;
    struct event *gc;          /* periodic cleanup timer (owned) */
};

static void sess_on_event(void *arg, json_t *ev);
static void sess_on_data(void *arg, enum frame_stream st, const uint8_t *buf, size_t len);
static void sess_on_eof(void *arg, enum frame_stream st);
static void sess_on_error(void *arg, const char *code, const char *message);
static void sess_on_close(void *arg);
static void sess_on_drain(void *arg);

static const struct agentc_chan_ops sess_chan_ops = {
    .on_event = sess_on_event,
    .on_data = sess_on_data,
    .on_eof = sess_on_eof,
    .on_error = sess_on_error,
    .on_close = sess_on_close,
    .on_drain = sess_on_drain,
};

const char *sess_state_name(enum sess_state s)
{
    static const char *const names[] = {"created", "starting", "running",
                                        "exited",  "failed",   "lost"};
    return (unsigned)s <= SESS_LOST ? names[s] : "unknown";
}

const char *sess_id(const struct sess *s) { return s->id; }
const char *sess_tenant(const struct sess *s) { return s->tenant; }
const char *sess_sandbox(const struct sess *s) { return s->sbx; }
enum sess_state sess_state(const struct sess *s) { return s->state; }

bool sess_finished(const struct sess *s)
{
    return s->state == SESS_EXITED || s->state == SESS_FAILED || s->state == SESS_LOST;
}

uint64_t sess_keep(const struct sess *s)
{
    uint64_t keep = evlog_ring_next_id(&s->ring);
    for (const struct sess_reader *r = s->readers; r; r = r->nx)
        if (r->next < keep)
            keep = r->next;
    return keep;
}

/* ---- events into the ring -------------------------------------------------------------- */

static void sess_append(struct sess *s, enum evlog_kind kind, const void *data, size_t len)
{
    if (evlog_ring_append(&s->ring, kind, data, len, sess_keep(s)) < 0)
        log_error("session.oom", "session=%s bytes=%zu", s->id, len);
    /* Ids must never repeat, even across a restart of spaced: the stored ceiling stays
     * above every id issued (one store write per SESS_ID_STRIDE events). */
    if (evlog_ring_next_id(&s->ring) >= s->id_ceiling) {
        s->id_ceiling = evlog_ring_next_id(&s->ring) + SESS_ID_STRIDE;
        sess_persist(s);
    }
}

static void sess_append_json(struct sess *s, enum evlog_kind kind, json_t *obj)
{
    char *text = obj ? json_dumps(obj, JSON_COMPACT) : NULL;
    if (text)
        sess_append(s, kind, text, strlen(text));
    free(text);
    json_decref(obj);
}

/* Reports the number of unfinished sessions to /metrics. */
static void sess_report(struct sess_table *t)
{
    int64_t open = 0;
    for (struct sess *s = t->head; s; s = s->nx)
        open += !sess_finished(s);
    if (t->sp->metrics)
        metrics_sessions_set(t->sp->metrics, open);
}

static void sess_set_done(struct sess *s, enum sess_state st)
{
    s->state = st;
    s->finished_ms = spaced_now_ms();
    if (s->timer)
        evtimer_del(s->timer);
    sess_stdin_abort(s, "the process has ended");
    sess_report(s->t);
}

/* Ends the session as failed/lost with an `error` event readers see. */
static void sess_fail(struct sess *s, enum sess_state st, const char *code, const char *msg)
{
    if (sess_finished(s))
        return;
    snprintf(s->err_code, sizeof s->err_code, "%s", code);
    snprintf(s->err_msg, sizeof s->err_msg, "%s", msg);
    sess_set_done(s, st);
    sess_append_json(s, EVLOG_ERROR, json_pack("{s:s,s:s}", "code", code, "message", msg));
    sess_persist(s); /* the final state, after its event */
    log_info("session.end", "session=%s sandbox=%s state=%s code=%s", s->id, s->sbx,
             sess_state_name(st), code);
    sess_readers_pump(s);
}

/* ---- agent channel ----------------------------------------------------------------------- */

/* Each channel's callbacks get a link, not the session: a link outlives its session or
 * its agent connection as needed. sbx frees an agentc without channel callbacks when the
 * VM exits, so a channel may vanish silently; its link is then orphaned (s = NULL) and
 * any late callback is ignored. Owned by the channel: freed at its on_close, or at once
 * when we close the channel ourselves. */
struct sess_link {
    struct sess *s; /* NULL once the session let go of the channel */
};

/* Closes the channel while its agent connection is known to be alive. */
static void sess_drop_chan(struct sess *s)
{
    if (s->chan) {
        agentc_close(s->chan);
        free(s->link);
    }
    s->chan = NULL;
    s->link = NULL;
}

/* Lets go of a channel whose agent connection may already be freed: never touch it. */
static void sess_forget_chan(struct sess *s)
{
    if (s->link)
        s->link->s = NULL;
    s->chan = NULL;
    s->link = NULL;
}

/* Whether the agent announces the exec field "confirm" (docs/agent-protocol.md exec). */
static bool sess_agent_confirms(struct agentc *agent)
{
    json_t *v;
    size_t i;
    json_array_foreach(json_object_get(agentc_hello(agent), "features"), i, v)
        if (json_is_string(v) && !strcmp(json_string_value(v), "confirm"))
            return true;
    return false;
}

/* Opens the exec channel (first attach) or re-attaches a detached process. */
static int sess_open_chan(struct sess *s, struct agentc *agent, struct spaced_err *err)
{
    if (s->chan)
        return 0;
    if (sess_finished(s))
        return spaced_err_set(err, 409, "session_finished", "session %s has %s", s->id,
                              sess_state_name(s->state));
    if (!agent)
        return spaced_err_set(err, 409, "not_running",
                              "sandbox %s is not running; resume or wake it first", s->sbx);
    json_t *req;
    if (s->state == SESS_CREATED) {
        /* The process is the agent's to kill until we have stored its pid (sess_on_event
         * confirms then): if the "started" is lost with the connection, or spaced
         * restarts before storing it, nothing could reach the process again. */
        s->confirm = sess_agent_confirms(agent);
        req = s->confirm ? json_deep_copy(s->spec.exec) : json_incref(s->spec.exec);
        if (req && s->confirm)
            json_object_set_new(req, "confirm", json_true());
        /* Stored as starting before the exec goes out: a spaced restarted from here on
         * finds it lost (sess_store.c) instead of running the command a second time. */
        s->state = SESS_STARTING;
        if (sess_persist(s) < 0) {
            s->state = SESS_CREATED;
            json_decref(req);
            return spaced_err_set(err, 500, "internal", "cannot record the session's start");
        }
    } else if (s->pid > 0)
        req = json_pack("{s:s,s:I}", "op", "attach", "pid", (json_int_t)s->pid);
    else {
        sess_fail(s, SESS_LOST, "lost", "the agent connection ended before the process started");
        return spaced_err_set(err, 409, "session_finished", "session %s was lost", s->id);
    }
    char why[160] = "";
    struct sess_link *link = req ? malloc(sizeof *link) : NULL;
    if (link) {
        link->s = s;
        s->chan = agentc_open(agent, req, &sess_chan_ops, link, AGENTC_MANUAL_CREDIT, why,
                              sizeof why);
    }
    json_decref(req);
    if (!s->chan) {
        free(link);
        if (s->state == SESS_STARTING && s->pid == 0) { /* the exec never went out */
            s->state = SESS_CREATED;
            sess_persist(s);
        }
        return spaced_err_set(err, 503, "unavailable", "cannot reach the sandbox's agent: %s",
                              why[0] ? why : "out of memory");
    }
    s->link = link;
    /* Every stream of a fresh channel starts with the protocol's initial window. */
    for (int i = 0; i < FRAME_STREAM_COUNT; i++) {
        s->credit[i] = FRAME_WINDOW_INITIAL;
        s->eof[i] = false;
    }
    if (s->state == SESS_STARTING && s->pid == 0)
        log_info("session.start", "session=%s sandbox=%s", s->id, s->sbx);
    /* stdin was closed on the previous channel; close it on this one too. */
    if (s->stdin_closed && s->spec.stdin_open)
        agentc_eof(s->chan);
    return 0;
}

void sess_credit(struct sess *s)
{
    static const enum frame_stream streams[] = {FRAME_STREAM_OUT, FRAME_STREAM_ERR};
    if (!s->chan)
        return;
    size_t room = evlog_ring_room(&s->ring, sess_keep(s));
    uint64_t held = (uint64_t)s->credit[FRAME_STREAM_OUT] + s->credit[FRAME_STREAM_ERR];
    if (room <= held)
        return;
    uint64_t avail = room - held;
    for (size_t i = 0; i < 2; i++) {
        enum frame_stream st = streams[i];
        /* Top a window up only once half of it is used, so grants stay few and large. */
        if (s->eof[st] || s->credit[st] > FRAME_WINDOW_INITIAL / 2)
            continue;
        uint64_t g = FRAME_WINDOW_INITIAL - s->credit[st];
        if (g > avail)
            g = avail;
        if (g < 4096)
            continue;
        if (agentc_grant(s->chan, st, (uint32_t)g) == 0) {
            s->credit[st] += (uint32_t)g;
            avail -= g;
        }
    }
}

static bool json_small_int(json_t *v, json_int_t lo, json_int_t hi)
{
    return json_is_integer(v) && json_integer_value(v) >= lo && json_integer_value(v) <= hi;
}

static void sess_on_event(void *arg, json_t *ev)
{
    struct sess *s = ((struct sess_link *)arg)->s;
    if (!s)
        return;
    const char *type = json_string_value(json_object_get(ev, "type"));
    json_t *pid = json_object_get(ev, "pid");
    if ((!strcmp(type, "started") || !strcmp(type, "attached")) &&
        json_small_int(pid, 1, INT32_MAX)) {
        if (s->state == SESS_STARTING && s->pid == 0) {
            s->pid = json_integer_value(pid);
            s->started_ms = spaced_now_ms();
            sess_append_json(s, EVLOG_START, json_pack("{s:I}", "pid", (json_int_t)s->pid));
            sess_persist(s); /* the pid is what a restarted spaced re-attaches by */
            /* Stored: the agent may let the process outlive this channel now. */
            json_t *c = s->confirm ? json_pack("{s:s}", "op", "confirm") : NULL;
            if (c && s->chan && agentc_ctrl(s->chan, c) < 0)
                log_warn("session.confirm", "session=%s: cannot send", s->id);
            json_decref(c);
            if (s->spec.timeout_s > 0)
                evtimer_add(s->timer, &(struct timeval){.tv_sec = s->spec.timeout_s});
            sess_readers_pump(s);
        }
        /* "attached" after a reconnect: same process, no new start event. */
        if (s->state == SESS_STARTING)
            s->state = SESS_RUNNING;
    } else if (!strcmp(type, "exit") && !sess_finished(s)) {
        json_t *code = json_object_get(ev, "code"), *sig = json_object_get(ev, "signal");
        s->exit_code = json_small_int(code, 0, 255) ? (int)json_integer_value(code) : -1;
        s->exit_signal = json_small_int(sig, 1, 64) ? (int)json_integer_value(sig) : 0;
        sess_set_done(s, SESS_EXITED);
        sess_append_json(s, EVLOG_EXIT,
                         json_pack("{s:o,s:o}", "code",
                                   s->exit_code >= 0 ? json_integer(s->exit_code) : json_null(),
                                   "signal",
                                   s->exit_signal ? json_integer(s->exit_signal) : json_null()));
        sess_persist(s); /* the final state, after its event */
        log_info("session.exit", "session=%s sandbox=%s code=%d signal=%d", s->id, s->sbx,
                 s->exit_code, s->exit_signal);
        sess_readers_pump(s);
    }
}

static void sess_on_data(void *arg, enum frame_stream st, const uint8_t *buf, size_t len)
{
    struct sess *s = ((struct sess_link *)arg)->s;
    if (!s)
        return;
    if (st != FRAME_STREAM_OUT && st != FRAME_STREAM_ERR)
        return;
    s->credit[st] = s->credit[st] > len ? s->credit[st] - (uint32_t)len : 0;
    sess_append(s, st == FRAME_STREAM_OUT ? EVLOG_STDOUT : EVLOG_STDERR, buf, len);
    sess_readers_pump(s);
    sess_credit(s);
}

static void sess_on_eof(void *arg, enum frame_stream st)
{
    struct sess *s = ((struct sess_link *)arg)->s;
    if (!s)
        return;
    if (st < FRAME_STREAM_COUNT)
        s->eof[st] = true;
}

static void sess_on_error(void *arg, const char *code, const char *message)
{
    struct sess *s = ((struct sess_link *)arg)->s;
    if (!s)
        return;
    if (!strcmp(code, FRAME_E_DISCONNECTED))
        return; /* on_close follows; the process may still run: detached */
    if (s->state == SESS_STARTING) {
        /* exec refused (binary or cwd not found...) or attach found no such process. */
        sess_fail(s, s->pid > 0 ? SESS_LOST : SESS_FAILED, code, message);
        return;
    }
    log_warn("session.agent_error", "session=%s code=%s", s->id, code);
}

static void sess_on_close(void *arg)
{
    struct sess_link *link = arg;
    struct sess *s = link->s;
    free(link);
    if (!s)
        return;
    s->chan = NULL;
    s->link = NULL;
    sess_stdin_abort(s, "the agent connection to the process ended");
    if (!sess_finished(s) && s->state == SESS_RUNNING)
        s->state = SESS_STARTING; /* detached: re-attach by pid when next used */
    else if (s->state == SESS_STARTING && s->pid == 0)
        /* The exec went out but its "started" never came back: whether the process runs
         * is unknown and it has no pid to re-attach by, and only a pid is re-attached
         * (sess_gc, sess_on_sbx). Left `starting`, its attach streams waited forever. */
        sess_fail(s, SESS_LOST, "agent_disconnected",
                  s->confirm ? "the agent connection ended before the process was reported "
                               "started; if it had begun, the agent ended it"
                             : "the agent connection ended before the process was reported "
                               "started; it may or may not have run");
}

static void sess_on_drain(void *arg)
{
    struct sess *s = ((struct sess_link *)arg)->s;
    if (s)
        sess_stdin_drained(s);
}

/* The sandbox's live agent, or NULL. */
static struct agentc *sess_agent(struct sess *s)
{
    struct sbx *x = sbx_find(s->t->sp, s->tenant, s->sbx);
    return x ? sbx_agent(x) : NULL;
}

static void sess_timeout(evutil_socket_t fd, short what, void *arg)
{
    struct sess *s = arg;
    if (sess_finished(s))
        return;
    s->timed_out = true;
    log_info("session.timeout", "session=%s sandbox=%s", s->id, s->sbx);
    sess_signal(s, sess_agent(s), 9, NULL);
}

/* ---- control ----------------------------------------------------------------------------- */

int sess_running(struct sess *s, struct agentc *agent, struct spaced_err *err)
{
    if (s->state == SESS_CREATED)
        return spaced_err_set(err, 409, "not_started",
                              "session %s has not started: attach to it first (GET its "
                              "attach_url)",
                              s->id);
    return sess_open_chan(s, agent, err);
}

static int sess_ctrl(struct sess *s, struct agentc *agent, json_t *ctrl, struct spaced_err *err)
{
    int rc = -1;
    if (!ctrl)
        spaced_err_set(err, 500, "internal", "out of memory");
    else if (sess_running(s, agent, err) == 0)
        rc = agentc_ctrl(s->chan, ctrl) == 0
                 ? 0
                 : spaced_err_set(err, 503, "unavailable",
                                  "the sandbox's agent connection is down");
    json_decref(ctrl);
    return rc;
}

int sess_signal(struct sess *s, struct agentc *agent, int sig, struct spaced_err *err)
{
    return sess_ctrl(s, agent, json_pack("{s:s,s:i}", "op", "signal", "signal", sig), err);
}

int sess_resize(struct sess *s, struct agentc *agent, unsigned rows, unsigned cols,
                struct spaced_err *err)
{
    if (!s->spec.pty)
        return spaced_err_set(err, 409, "no_pty", "session %s has no terminal (create it with pty)",
                              s->id);
    return sess_ctrl(s, agent,
                     json_pack("{s:s,s:I,s:I}", "op", "resize", "rows", (json_int_t)rows, "cols",
                               (json_int_t)cols),
                     err);
}

int sess_close_stdin(struct sess *s, struct agentc *agent, struct spaced_err *err)
{
    if (!s->spec.stdin_open)
        return spaced_err_set(err, 409, "no_stdin",
                              "session %s was created without stdin (set \"stdin\": true)", s->id);
    if (sess_running(s, agent, err) < 0)
        return -1;
    if (!s->stdin_closed && agentc_eof(s->chan) < 0)
        return spaced_err_set(err, 503, "unavailable", "the sandbox's agent connection is down");
    s->stdin_closed = true;
    sess_persist(s);
    return 0;
}

int sess_start(struct sess *s, struct agentc *agent, struct spaced_err *err)
{
    if (sess_finished(s))
        return 0; /* replay only */
    return sess_open_chan(s, agent, err);
}

/* ---- table ------------------------------------------------------------------------------- */

void sess_free(struct sess *s)
{
    sess_readers_end(s);
    sess_stdin_abort(s, "the session was removed");
    sess_forget_chan(s);
    if (s->timer)
        event_free(s->timer);
    evlog_ring_free(&s->ring);
    sess_spec_clear(&s->spec);
    free(s);
}

static void sess_unlink(struct sess_table *t, struct sess *s)
{
    struct sess **pp = &t->head, *prev = NULL;
    while (*pp && *pp != s) {
        prev = *pp;
        pp = &(*pp)->nx;
    }
    if (!*pp)
        return;
    *pp = s->nx;
    if (t->tail == s)
        t->tail = prev;
}

/* Sandbox state changes. Pause keeps the agent connection, so channels stay. Entering
 * suspending/stopping/deleting, the connection is still alive: close our channels
 * cleanly. After the VM has exited (suspended, stopped, failed, deleted) sbx has freed
 * the connection already: forget channels without touching them. A process survives
 * suspend/restore (re-attached by pid once running again), not stop, failure or delete. */
static void sess_on_sbx(struct spaced *sp, struct sbx *x, enum sbx_state old,
                        enum sbx_state now, void *arg)
{
    struct sess_table *t = arg;
    const char *id = sbx_id(x);
    struct sess *nx;
    for (struct sess *s = t->head; s; s = nx) {
        nx = s->nx;
        if (strcmp(s->sbx, id))
            continue;
        if (now == SBX_SUSPENDING || now == SBX_STOPPING || now == SBX_DELETING)
            sess_drop_chan(s);
        else if (now == SBX_SUSPENDED || now == SBX_STOPPED || now == SBX_FAILED ||
                 now == SBX_DELETED)
            sess_forget_chan(s);
        if (now == SBX_RUNNING && !sess_finished(s) && s->state != SESS_CREATED) {
            sess_open_chan(s, sbx_agent(x), NULL);
        } else if (s->state == SESS_RUNNING && !s->chan) {
            s->state = SESS_STARTING; /* detached until the sandbox runs again */
        }
        if (now == SBX_STOPPING || now == SBX_STOPPED || now == SBX_FAILED) {
            char msg[96];
            snprintf(msg, sizeof msg, "the sandbox is %s; its processes ended",
                     sbx_state_name(now));
            sess_fail(s, SESS_LOST, "sandbox_stopped", msg);
        } else if (now == SBX_DELETING || now == SBX_DELETED) {
            sess_fail(s, SESS_LOST, "sandbox_deleted", "the sandbox was deleted");
            if (now == SBX_DELETED) {
                sess_unlink(t, s);
                sess_unpersist(s);
                sess_free(s);
            }
        }
    }
}

int sess_delete(struct sess *s, struct agentc *agent, struct spaced_err *err)
{
    struct sess_table *t = s->t;
    struct spaced_err why;
    /* sess_signal re-attaches a detached process first, so it is reached too; a paused
     * sandbox keeps the channel, and the kill waits in it for the resume. A signal that
     * cannot be sent leaves a process nobody could reach again: refuse instead. */
    if (!sess_finished(s) && s->state != SESS_CREATED && sess_signal(s, agent, 9, &why) < 0 &&
        !sess_finished(s))
        return spaced_err_set(err, why.status, why.code,
                              "session %s still has a process that cannot be killed now (%s); "
                              "try again once the sandbox runs, or delete the sandbox",
                              s->id, why.message);
    sess_drop_chan(s);
    log_info("session.delete", "session=%s sandbox=%s state=%s", s->id, s->sbx,
             sess_state_name(s->state));
    sess_unlink(t, s);
    sess_unpersist(s);
    sess_free(s);
    sess_report(t);
    return 0;
}

static void sess_gc(evutil_socket_t fd, short what, void *arg)
{
    struct sess_table *t = arg;
    int64_t now = spaced_now_ms();
    struct sess *nx;
    for (struct sess *s = t->head; s; s = nx) {
        nx = s->nx;
        sess_readers_keepalive(s);
        /* A detached process whose sandbox runs again (e.g. after a restart of spaced,
         * which adopts running VMs without a state change) is picked up here. */
        if (s->state == SESS_STARTING && s->pid > 0 && !s->chan)
            sess_open_chan(s, sess_agent(s), NULL);
        bool gone = sbx_find(t->sp, s->tenant, s->sbx) == NULL;
        bool old = sess_finished(s) && now - s->finished_ms > SESS_KEEP_FINISHED_MS;
        if (gone)
            sess_fail(s, SESS_LOST, "sandbox_deleted", "the sandbox no longer exists");
        if ((gone || old) && !s->readers) {
            sess_unlink(t, s);
            sess_unpersist(s);
            sess_free(s);
        }
    }
}

struct sess_table *sess_table_new(struct spaced *sp)
{
    struct sess_table *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->sp = sp;
    t->gc = event_new(sp->base, -1, EV_PERSIST, sess_gc, t);
    if (!t->gc || sbx_listen(sp, sess_on_sbx, t) < 0) {
        if (t->gc)
            event_free(t->gc);
        free(t);
        return NULL;
    }
    evtimer_add(t->gc, &(struct timeval){.tv_sec = SESS_GC_PERIOD_S});
    sess_restore_all(t);
    return t;
}

void sess_table_free(struct sess_table *t)
{
    if (!t)
        return;
    while (t->head) {
        struct sess *s = t->head;
        struct sess_link *link = s->link;
        t->head = s->nx;
        sess_free(s);
        /* No channel calls back any more (see sess.h): its callback arg goes too. */
        free(link);
    }
    event_free(t->gc);
    free(t);
}

struct sess *sess_alloc(struct sess_table *t, const char *tenant, const char *sbx_id)
{
    struct sess *s = calloc(1, sizeof *s);
    if (!s || evlog_ring_init(&s->ring, EVLOG_RING_CAP) < 0) {
        free(s);
        return NULL;
    }
    s->t = t;
    snprintf(s->tenant, sizeof s->tenant, "%s", tenant);
    snprintf(s->sbx, sizeof s->sbx, "%s", sbx_id);
    s->exit_code = -1;
    s->timer = evtimer_new(t->sp->base, sess_timeout, s);
    if (!s->timer) {
        sess_free(s);
        return NULL;
    }
    return s;
}

void sess_link_in(struct sess_table *t, struct sess *s)
{
    if (t->tail)
        t->tail->nx = s;
    else
        t->head = s;
    t->tail = s;
    sess_report(t); /* created, or restored after a restart */
}

struct sess *sess_create(struct sess_table *t, const char *tenant, const char *sbx_id,
                         struct sess_spec *spec, char token_out[SESS_TOKEN_LEN + 1],
                         struct spaced_err *err)
{
    unsigned n = 0;
    for (struct sess *s = t->head; s; s = s->nx)
        n += !strcmp(s->sbx, sbx_id);
    if (n >= SESS_PER_SANDBOX_MAX) {
        spaced_err_set(err, 429, "too_many_requests",
                       "sandbox %s already has %u sessions; wait for some to finish", sbx_id, n);
        return NULL;
    }
    struct sess *s = sess_alloc(t, tenant, sbx_id);
    if (!s) {
        spaced_err_set(err, 500, "internal", "out of memory");
        return NULL;
    }
    s->created_ms = spaced_now_ms();
    s->id_ceiling = 1 + SESS_ID_STRIDE;
    if (spaced_random_id(s->id, SESS_ID_PREFIX, SESS_ID_HEX) < 0 ||
        sess_token_mint(&s->tok, (time_t)(s->created_ms / 1000 + spec->token_ttl_s),
                        token_out) < 0) {
        sess_free(s);
        spaced_err_set(err, 500, "internal", "cannot create the session (CSPRNG failed)");
        return NULL;
    }
    s->spec = *spec;
    memset(spec, 0, sizeof *spec);
    s->stdin_closed = !s->spec.stdin_open;
    /* Acknowledged only once stored: a restarted spaced must still know it. */
    if (sess_persist(s) < 0) {
        sess_free(s);
        spaced_err_set(err, 500, "internal", "cannot record the session in the store");
        return NULL;
    }
    sess_link_in(t, s);
    log_info("session.create", "session=%s sandbox=%s tenant=%s", s->id, s->sbx, s->tenant);
    return s;
}

struct sess *sess_find(struct sess_table *t, const char *tenant, const char *sbx_id,
                       const char *id)
{
    for (struct sess *s = t->head; s; s = s->nx)
        if (!strcmp(s->id, id) && (!tenant || !strcmp(s->tenant, tenant)) &&
            (!sbx_id || !strcmp(s->sbx, sbx_id)))
            return s;
    return NULL;
}

enum sess_token_check sess_check_token(const struct sess *s, const char *token)
{
    return sess_token_verify(&s->tok, token, (time_t)(spaced_now_ms() / 1000));
}

int sess_new_token(struct sess *s, int64_t ttl_s, char token_out[SESS_TOKEN_LEN + 1],
                   int64_t *expires_ms, struct spaced_err *err)
{
    int64_t exp = spaced_now_ms() / 1000 + ttl_s;
    if (sess_token_mint(&s->tok, (time_t)exp, token_out) < 0)
        return spaced_err_set(err, 500, "internal", "cannot mint a token (CSPRNG failed)");
    *expires_ms = exp * 1000;
    if (sess_persist(s) < 0)
        return spaced_err_set(err, 500, "internal", "cannot record the new token in the store");
    return 0;
}

static json_t *time_or_null(int64_t ms)
{
    char buf[32];
    return ms > 0 ? json_string(spaced_fmt_time(ms, buf)) : json_null();
}

json_t *sess_to_json(const struct sess *s)
{
    char url[192];
    snprintf(url, sizeof url, "/v1/sandboxes/%s/sessions/%s/attach", s->sbx, s->id);
    json_t *o = json_pack(
        "{s:s,s:s,s:s,s:o,s:o,s:o,s:b,s:b,s:b,s:s,s:I,s:I,s:o,s:o,s:o,s:o,s:o}", "id", s->id,
        "sandbox_id", s->sbx, "state", sess_state_name(s->state), "pid",
        s->pid > 0 ? json_integer(s->pid) : json_null(), "exit_code",
        s->state == SESS_EXITED && s->exit_code >= 0 ? json_integer(s->exit_code) : json_null(),
        "exit_signal", s->exit_signal ? json_integer(s->exit_signal) : json_null(), "timed_out",
        s->timed_out, "pty", s->spec.pty, "stdin", s->spec.stdin_open, "attach_url", url,
        "attached", (json_int_t)s->nreaders, "last_event_id",
        (json_int_t)(evlog_ring_next_id(&s->ring) - 1), "error",
        s->err_code[0] ? json_pack("{s:s,s:s}", "code", s->err_code, "message", s->err_msg)
                       : json_null(),
        "token_expires_at", time_or_null((int64_t)s->tok.expires * 1000), "created_at",
        time_or_null(s->created_ms), "started_at", time_or_null(s->started_ms), "finished_at",
        time_or_null(s->finished_ms));
    if (!o)
        return NULL;
    json_t *exec = s->spec.exec;
    if (json_object_get(exec, "argv"))
        json_object_set(o, "argv", json_object_get(exec, "argv"));
    else
        json_object_set(o, "cmd", json_object_get(exec, "cmd"));
    return o;
}

json_t *sess_list_json(struct sess_table *t, const char *tenant, const char *sbx_id)
{
    json_t *arr = json_array();
    for (struct sess *s = t->head; arr && s; s = s->nx)
        if (!strcmp(s->tenant, tenant) && !strcmp(s->sbx, sbx_id))
            json_array_append_new(arr, sess_to_json(s));
    return arr ? json_pack("{s:o}", "sessions", arr) : NULL;
}

void sess_count(const struct sess_table *t, unsigned counts[SESS_LOST + 1])
{
    memset(counts, 0, sizeof(unsigned) * (SESS_LOST + 1));
    for (const struct sess *s = t->head; s; s = s->nx)
        counts[s->state]++;
}

struct spaced *sess_table_spaced(const struct sess_table *t)
{
    return t->sp;
}

struct sess *sess_table_first(const struct sess_table *t)
{
    return t->head;
}
