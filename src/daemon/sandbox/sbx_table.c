/* sbx_table.c: the in-memory table of live sandboxes, their persisted record, state
 * changes (persist + log + listeners), timeouts and the API representation.
 *
 * The record in memory is the truth: a write the store refuses (database down) leaves
 * it unsaved, and the tick writes it again with backoff until it is stored, also after
 * the sandbox was deleted and left the table. A sandbox never stays "creating" in the
 * store because the database was away when it came up. */
#include <event2/event.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/agentc/agentc.h"
#include "daemon/auth/auth.h"
#include "daemon/vm/vm.h"
#include "daemon/vm/vm_greet.h"
#include "log.h"
#include "sbx_internal.h"

struct sbx_table *sbx_table_new(struct spaced *sp)
{
    (void)sp;
    struct sbx_table *t = calloc(1, sizeof *t);
    if (t)
        t->node_id = "";
    return t;
}

void sbx_set_owner(struct spaced *sp, sbx_owner_fn owns, const char *node_id)
{
    sp->sbx->owns = owns;
    sp->sbx->node_id = node_id ? node_id : "";
}

static void sbx_free(struct sbx *s)
{
    sbx_travel_cancel(s);
    sbx_move_cancel(s);
    if (s->vm)
        vm_detach(s->vm);
    sbx_agent_free(s);
    if (s->timer)
        event_free(s->timer);
    sbx_gw_free(s);
    vmg_free(s->greet);
    free(s->create);
    store_sbx_clear(&s->rec);
    free(s);
}

void sbx_table_free(struct sbx_table *t)
{
    if (!t)
        return;
    sbx_wake_free_all(t);
    while (t->head) {
        struct sbx *s = t->head;
        t->head = s->next;
        sbx_free(s);
    }
    while (t->unsaved) {
        struct sbx_unsaved *u = t->unsaved;
        t->unsaved = u->next;
        store_sbx_clear(&u->rec);
        free(u);
    }
    vm_disk_protos_free(t->disks);
    sbx_fork_forget(t);
    sbx_travel_forget(t);
    free(t);
}

static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

struct sbx *sbx_table_add(struct spaced *sp, const struct store_sbx *rec)
{
    struct sbx *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->sp = sp;
    s->rec = *rec;
    s->rec.env_json = dup_or_null(rec->env_json);
    s->rec.metadata_json = dup_or_null(rec->metadata_json);
    s->rec.network_json = dup_or_null(rec->network_json);
    s->rec.volumes_json = dup_or_null(rec->volumes_json);
    s->rec.parts = dup_or_null(rec->parts);
    s->rec.failure = dup_or_null(rec->failure);
    int st = sbx_state_parse(rec->state), de = sbx_state_parse(rec->desired);
    s->state = st < 0 ? SBX_FAILED : (enum sbx_state)st;
    s->desired = de < 0 ? SBX_RUNNING : (enum sbx_state)de;
    s->next = sp->sbx->head;
    sp->sbx->head = s;
    return s;
}

static int load_one(const struct store_sbx *rec, void *arg)
{
    struct spaced *sp = arg;
    if (sp->sbx->owns && !sp->sbx->owns(sp, rec))
        return 0; /* another node daemon's (--role=node) */
    struct store_sbx r = *rec; /* heap fields borrowed: sbx_table_add copies them */
    sbx_move_fix_run_dir(sp, &r);
    return sbx_table_add(sp, &r) ? 0 : 1;
}

int sbx_table_load(struct spaced *sp)
{
    return store_sbx_each_live(sp->store, load_one, sp);
}

/* Keeps the unsaved record of a sandbox leaving the table (moved out of s). */
static void keep_unsaved(struct sbx_table *t, struct sbx *s)
{
    struct sbx_unsaved *u = calloc(1, sizeof *u);
    if (!u) {
        log_error("store.error", "sandbox=%s msg=\"out of memory: its record stays unsaved\"",
                  s->rec.id);
        spaced_retry_mark(&s->sp->store_retry, &s->unsaved, false); /* given up: no longer waited for */
        return;
    }
    u->rec = s->rec;
    memset(&s->rec, 0, sizeof s->rec);
    struct sbx_unsaved **pp = &t->unsaved;
    while (*pp)
        pp = &(*pp)->next;
    *pp = u;
}

void sbx_table_remove(struct spaced *sp, struct sbx *s)
{
    for (struct sbx **pp = &sp->sbx->head; *pp; pp = &(*pp)->next)
        if (*pp == s) {
            *pp = s->next;
            sbx_resv_release(s);
            tpl_fetch_cancel(sp, s); /* a create waiting for a template's image */
            if (s->unsaved)
                keep_unsaved(sp->sbx, s);
            sbx_free(s);
            return;
        }
}

struct sbx *sbx_find(struct spaced *sp, const char *tenant, const char *id)
{
    if (!id)
        return NULL;
    for (struct sbx *s = sp->sbx->head; s; s = s->next)
        if (strcmp(s->rec.id, id) == 0)
            return s->state == SBX_DELETED || (tenant && strcmp(s->rec.tenant, tenant) != 0) ? NULL : s;
    return NULL;
}

bool sbx_known(const char *id, void *sp)
{
    return sbx_find(sp, NULL, id) != NULL || sbx_move_holds_net(sp, id);
}

const char *sbx_id(const struct sbx *s) { return s->rec.id; }
const char *sbx_tenant(const struct sbx *s) { return s->rec.tenant; }
enum sbx_state sbx_state(const struct sbx *s) { return s->state; }
enum sbx_state sbx_desired(const struct sbx *s) { return s->desired; }
const struct store_sbx *sbx_record(const struct sbx *s) { return &s->rec; }
bool sbx_busy(const struct sbx *s)
{
    return s->op_id[0] != '\0' || s->recovering || s->awaiting_capture;
}

struct agentc *sbx_agent(struct sbx *s)
{
    return s->state == SBX_RUNNING && s->agent_ready ? s->agent : NULL;
}

void sbx_each(struct spaced *sp, void (*fn)(struct sbx *s, void *arg), void *arg)
{
    struct sbx *next;
    for (struct sbx *s = sp->sbx->head; s; s = next) {
        next = s->next;
        fn(s, arg);
    }
}

int sbx_listen(struct spaced *sp, sbx_state_fn fn, void *arg)
{
    struct sbx_table *t = sp->sbx;
    if (t->nlisteners == SBX_LISTENERS_MAX)
        return -1;
    t->listeners[t->nlisteners].fn = fn;
    t->listeners[t->nlisteners].arg = arg;
    t->nlisteners++;
    return 0;
}

void sbx_set_desired(struct sbx *s, enum sbx_state desired)
{
    s->desired = desired;
    snprintf(s->rec.desired, sizeof s->rec.desired, "%s", sbx_state_name(desired));
}

/* Writes rec. The first failure of an unsaved change is logged, and its storing once
 * the store is back, not every retry. Returns 0 when stored. */
static int record_write(struct spaced *sp, const struct store_sbx *rec, bool *unsaved, bool lazy)
{
    int rc = lazy ? store_sbx_put_lazy(sp->store, rec) : store_sbx_put(sp->store, rec);
    if (rc == STORE_MOVED) { /* moved to another node (sbx_move.c): never written back */
        log_warn("sandbox.move", "sandbox=%s op=persist state=%s write=refused reason=row_names_another_node",
                 rec->id, rec->state);
        spaced_retry_mark(&sp->store_retry, unsaved, false);
        return -1;
    }
    if (rc != 0) {
        char q[300];
        if (!*unsaved)
            log_error("store.error", "sandbox=%s op=persist state=%s msg=%s retry=until_stored",
                      rec->id, rec->state, log_quote(store_errmsg(sp->store), q, sizeof q));
        spaced_retry_mark(&sp->store_retry, unsaved, true);
        spaced_retry_failed(&sp->store_retry);
        return -1;
    }
    spaced_retry_ok(&sp->store_retry);
    if (*unsaved)
        log_info("sandbox.saved", "sandbox=%s state=%s", rec->id, rec->state);
    spaced_retry_mark(&sp->store_retry, unsaved, false);
    return 0;
}

static int persist(struct sbx *s, bool lazy)
{
    s->rec.updated_ms = spaced_now_ms();
    if (s->unsaved && !spaced_retry_due(&s->sp->store_retry))
        return -1; /* already waiting for the store: the tick writes it */
    return record_write(s->sp, &s->rec, &s->unsaved, lazy);
}

int sbx_persist(struct sbx *s) { return persist(s, false); }

int sbx_persist_lazy(struct sbx *s) { return persist(s, true); }

void sbx_table_retry(struct spaced *sp)
{
    struct sbx_table *t = sp->sbx;
    if (!spaced_retry_due(&sp->store_retry))
        return;
    for (struct sbx *s = t->head; s; s = s->next) {
        if (!s->unsaved)
            continue;
        if (record_write(sp, &s->rec, &s->unsaved, false) != 0)
            return;
        sbx_resv_stored(s);
    }
    while (t->unsaved) {
        struct sbx_unsaved *u = t->unsaved;
        bool unsaved = true;
        if (record_write(sp, &u->rec, &unsaved, false) != 0)
            return;
        t->unsaved = u->next;
        store_sbx_clear(&u->rec);
        free(u);
    }
}

/* The state in the record, not yet stored; returns the state before. */
static enum sbx_state state_change(struct sbx *s, enum sbx_state state, const char *failure)
{
    enum sbx_state old = s->state;
    s->state = state;
    snprintf(s->rec.state, sizeof s->rec.state, "%s", sbx_state_name(state));
    free(s->rec.failure);
    s->rec.failure = failure ? strdup(failure) : NULL;
    return old;
}

/* After the change is stored (or left to the retry): the log line and the listeners. */
static void state_announce(struct sbx *s, enum sbx_state old, const char *failure)
{
    enum sbx_state state = s->state;
    char why[300];
    log_event(state == SBX_FAILED ? LOG_WARN : LOG_INFO, "sandbox.state",
              "sandbox=%s tenant=%s from=%s to=%s desired=%s%s%s", s->rec.id, s->rec.tenant,
              sbx_state_name(old), sbx_state_name(state), sbx_state_name(s->desired),
              failure ? " failure=" : "", failure ? log_quote(failure, why, sizeof why) : "");
    /* A deleted sandbox may have been the last user of an old snapshot version. */
    if (state == SBX_DELETED && old != state)
        tpl_user_gone(s->sp);
    struct sbx_table *t = s->sp->sbx;
    for (unsigned i = 0; i < t->nlisteners && old != state; i++)
        t->listeners[i].fn(s->sp, s, old, state, t->listeners[i].arg);
}

void sbx_set_state(struct sbx *s, enum sbx_state state, const char *failure)
{
    enum sbx_state old = state_change(s, state, failure);
    if (sbx_persist(s) == 0)
        sbx_resv_stored(s);
    state_announce(s, old, failure);
    if (state == SBX_SUSPENDED || state == SBX_STOPPED)
        sbx_move_record(s); /* back to suspended after a failed verb, or recovered */
}

/* op_intent_fn: the sandbox row, in its op's transaction. */
static int write_row(struct spaced *sp, const struct store_op *op, void *arg,
                     struct spaced_err *err)
{
    (void)op;
    (void)err;
    return store_sbx_put(sp->store, arg) == 0 ? 0 : -1;
}

void sbx_set_state_succeed(struct sbx *s, enum sbx_state state, const char *op_id)
{
    enum sbx_state old = state_change(s, state, NULL);
    s->rec.updated_ms = spaced_now_ms();
    struct op_intent in = {.write = write_row, .arg = &s->rec};
    if (op_id[0] && !s->unsaved && op_finish_with(s->sp, op_id, true, NULL, NULL, &in) == 0) {
        sbx_resv_stored(s);
    } else { /* apart, as sbx_set_state then op_finish (a no-op if it is finished) */
        if (sbx_persist(s) == 0)
            sbx_resv_stored(s);
        if (op_id[0])
            op_finish(s->sp, op_id, true, NULL, NULL);
    }
    state_announce(s, old, NULL);
    if (state == SBX_SUSPENDED || state == SBX_STOPPED)
        sbx_move_record(s); /* hashed after this; recorded when done */
}

void sbx_path(const struct sbx *s, const char *leaf, char *out, size_t cap)
{
    snprintf(out, cap, "%s/sandboxes/%s%s%s", s->sp->opt.data_dir, s->rec.id, leaf ? "/" : "",
             leaf ? leaf : "");
}

int sbx_set_timeout(struct spaced *sp, struct sbx *s, int64_t timeout_s, const char *on_timeout,
                    struct spaced_err *err)
{
    (void)sp;
    if (timeout_s < 0 || timeout_s > SBX_TIMEOUT_MAX_S)
        return spaced_err_set(err, 400, "invalid_request", "timeout must be in 0..%lld",
                              (long long)SBX_TIMEOUT_MAX_S);
    if (on_timeout && strcmp(on_timeout, "suspend") != 0 && strcmp(on_timeout, "delete") != 0)
        return spaced_err_set(err, 400, "invalid_request",
                              "on_timeout must be \"suspend\" or \"delete\"");
    s->rec.timeout_s = timeout_s;
    s->rec.deadline_ms = timeout_s ? spaced_now_ms() + timeout_s * 1000 : 0;
    if (on_timeout)
        snprintf(s->rec.on_timeout, sizeof s->rec.on_timeout, "%s", on_timeout);
    if (sbx_persist(s) < 0)
        return spaced_err_set(err, 500, "internal", "cannot store the new timeout");
    log_info("sandbox.timeout", "sandbox=%s timeout_s=%lld on_timeout=%s", s->rec.id,
             (long long)timeout_s, s->rec.on_timeout);
    return 0;
}

int sbx_set_network(struct sbx *s, const json_t *policy, struct spaced_err *err)
{
    char *text = policy ? json_dumps(policy, JSON_COMPACT) : NULL;
    if (policy && !text)
        return spaced_err_set(err, 500, "internal", "out of memory");
    char *old = s->rec.network_json;
    s->rec.network_json = text;
    if (sbx_persist(s) < 0) {
        s->rec.network_json = old;
        free(text);
        return spaced_err_set(err, 500, "internal", "cannot store the new network policy");
    }
    free(old);
    return 0;
}

static json_t *json_time(int64_t ms)
{
    char buf[32];
    return ms ? json_string(spaced_fmt_time(ms, buf)) : json_null();
}

static json_t *json_doc(const char *text, const char *fallback)
{
    json_t *v = text ? json_loads(text, 0, NULL) : NULL;
    return v ? v : json_loads(fallback, 0, NULL);
}

json_t *sbx_record_to_json(const struct store_sbx *r)
{
    return json_pack("{s:s, s:s, s:s, s:s, s:I, s:I, s:o, s:o, s:o, s:o, s:{s:b}, s:I, s:s, s:b, s:o, s:o, s:o, s:o, s:o}",
                     "id", r->id, "template", r->template_name, "state", r->state,
                     "desired_state", r->desired, "vcpus", (json_int_t)r->vcpus,
                     "memory_mib", (json_int_t)r->memory_mib, "env", json_doc(r->env_json, "{}"),
                     "metadata", json_doc(r->metadata_json, "{}"),
                     "network", json_doc(r->network_json, "{\"mode\":\"none\"}"),
                     "volumes", json_doc(r->volumes_json, "[]"),
                     "ports", "public", !r->private_ports,
                     "timeout", (json_int_t)r->timeout_s, "on_timeout", r->on_timeout,
                     "auto_resume", r->auto_resume,
                     "expires_at", json_time(r->deadline_ms),
                     "failure", r->failure ? json_string(r->failure) : json_null(),
                     "created_at", json_time(r->created_ms), "updated_at", json_time(r->updated_ms),
                     "node", r->node[0] ? json_string(r->node) : json_null());
}

json_t *sbx_to_json(const struct sbx *s)
{
    json_t *j = sbx_record_to_json(&s->rec);
    char tok[AUTH_TOKEN_MAX];
    if (j && sbx_traffic_token(s, tok, sizeof tok) == 1)
        json_object_set_new(json_object_get(j, "ports"), "traffic_access_token", json_string(tok));
    if (j && s->vm && vm_room_waiting(s->vm)) /* running, but not moving: say why */
        json_object_set_new(j, "stalled", json_string("the host's disk is full: the guest is stopped "
                                                      "until there is room, then continues"));
    return j;
}
