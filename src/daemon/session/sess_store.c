/* sess_store.c: sessions in the store, so spaced restarted after a crash (even kill -9)
 * still knows every session it acknowledged.
 *
 * The row's spec document holds what memory held: the exec request, options, the
 * token's digest and expiry, the pid, stdin state and the event-id ceiling. Output is
 * not stored (it lives in the ring and, while spaced is down, in the agent's per-process
 * buffers): after a restart a running session re-attaches by pid and continues, with
 * event ids above the stored ceiling so an id never names two different events; a client
 * resuming from an id before the restart gets 410. A row read back is validated like any
 * input: a malformed one is logged and dropped. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/sandbox/sbx.h"
#include "daemon/session/sess_internal.h"
#include "daemon/store/store.h"
#include "log.h"

static void hex32(const uint8_t in[32], char out[65])
{
    static const char hx[] = "0123456789abcdef";
    for (int i = 0; i < 32; i++) {
        out[2 * i] = hx[in[i] >> 4];
        out[2 * i + 1] = hx[in[i] & 15];
    }
    out[64] = '\0';
}

static int unhex32(const char *in, uint8_t out[32])
{
    if (!in || strlen(in) != 64)
        return -1;
    for (int i = 0; i < 64; i++) {
        const char *p = strchr("0123456789abcdef", in[i]);
        if (!p || !*p)
            return -1;
        int v = (int)(p - "0123456789abcdef");
        out[i / 2] = (uint8_t)(i % 2 ? (out[i / 2] << 4) | v : v);
    }
    return 0;
}

int sess_persist(struct sess *s)
{
    struct spaced *sp = sess_table_spaced(s->t);
    char digest[65];
    hex32(s->tok.digest, digest);
    json_t *doc = json_pack(
        "{s:O,s:b,s:b,s:I,s:I,s:s,s:I,s:I,s:b,s:b,s:I,s:I,s:I}", "exec", s->spec.exec, "stdin",
        s->spec.stdin_open, "pty", s->spec.pty, "timeout", (json_int_t)s->spec.timeout_s,
        "token_ttl", (json_int_t)s->spec.token_ttl_s, "token_sha256", digest, "token_expires",
        (json_int_t)s->tok.expires, "pid", (json_int_t)s->pid, "stdin_closed", s->stdin_closed,
        "timed_out", s->timed_out, "id_ceiling", (json_int_t)s->id_ceiling, "started_ms",
        (json_int_t)s->started_ms, "finished_ms", (json_int_t)s->finished_ms);
    if (doc && s->err_code[0])
        json_object_set_new(doc, "error", json_pack("{s:s,s:s}", "code", s->err_code,
                                                    "message", s->err_msg));
    struct store_session row = {0};
    snprintf(row.id, sizeof row.id, "%s", s->id);
    snprintf(row.tenant, sizeof row.tenant, "%s", s->tenant);
    snprintf(row.sandbox, sizeof row.sandbox, "%s", s->sbx);
    snprintf(row.state, sizeof row.state, "%s", sess_state_name(s->state));
    row.spec_json = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
    row.exit_code = s->state == SESS_EXITED ? s->exit_code : -1;
    row.exit_signal = s->exit_signal;
    row.created_ms = s->created_ms;
    row.updated_ms = spaced_now_ms();
    int rc = row.spec_json ? store_session_put(sp->store, &row) : -1;
    if (rc != 0)
        log_error("session.store", "session=%s msg=%s", s->id,
                  row.spec_json ? store_errmsg(sp->store) : "out of memory");
    free(row.spec_json);
    json_decref(doc);
    return rc == 0 ? 0 : -1;
}

void sess_unpersist(struct sess *s)
{
    struct spaced *sp = sess_table_spaced(s->t);
    if (store_session_delete(sp->store, s->id) != 0)
        log_warn("session.store", "session=%s msg=%s", s->id, store_errmsg(sp->store));
}

static int state_parse(const char *name)
{
    for (int i = 0; i <= SESS_LOST; i++)
        if (!strcmp(name, sess_state_name((enum sess_state)i)))
            return i;
    return -1;
}

static int64_t int_field(json_t *doc, const char *k, int64_t lo, int64_t hi, int *bad)
{
    json_t *v = json_object_get(doc, k);
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi) {
        *bad = 1;
        return lo;
    }
    return json_integer_value(v);
}

/* Fills a fresh session from a row's document; -1 if anything is malformed. */
static int restore_fields(struct sess *s, const struct store_session *row, json_t *doc)
{
    int bad = 0;
    json_t *exec = json_object_get(doc, "exec");
    const char *op = json_string_value(json_object_get(exec, "op"));
    int st = state_parse(row->state);
    if (!op || strcmp(op, "exec") || st < 0 || strlen(row->id) != 2 + SESS_ID_HEX ||
        unhex32(json_string_value(json_object_get(doc, "token_sha256")), s->tok.digest) < 0)
        return -1;
    memcpy(s->id, row->id, sizeof s->id); /* length checked above */
    s->spec.exec = json_incref(exec);
    s->spec.stdin_open = json_is_true(json_object_get(doc, "stdin"));
    s->spec.pty = json_is_true(json_object_get(doc, "pty"));
    s->spec.timeout_s = int_field(doc, "timeout", 0, SESS_TIMEOUT_MAX_S, &bad);
    s->spec.token_ttl_s = int_field(doc, "token_ttl", 1, SESS_TOKEN_TTL_MAX_S, &bad);
    s->tok.expires = (time_t)int_field(doc, "token_expires", 0, INT64_MAX / 2, &bad);
    s->pid = int_field(doc, "pid", 0, INT32_MAX, &bad);
    s->stdin_closed = json_is_true(json_object_get(doc, "stdin_closed"));
    s->timed_out = json_is_true(json_object_get(doc, "timed_out"));
    s->id_ceiling = (uint64_t)int_field(doc, "id_ceiling", 1, INT64_MAX / 2, &bad);
    s->started_ms = int_field(doc, "started_ms", 0, INT64_MAX, &bad);
    s->finished_ms = int_field(doc, "finished_ms", 0, INT64_MAX, &bad);
    s->created_ms = row->created_ms;
    s->state = (enum sess_state)st;
    s->exit_code = row->exit_code >= 0 && row->exit_code <= 255 ? row->exit_code : -1;
    s->exit_signal = row->exit_signal >= 1 && row->exit_signal <= 64 ? row->exit_signal : 0;
    json_t *err = json_object_get(doc, "error");
    snprintf(s->err_code, sizeof s->err_code, "%s",
             json_string_value(json_object_get(err, "code")) ?: "");
    snprintf(s->err_msg, sizeof s->err_msg, "%s",
             json_string_value(json_object_get(err, "message")) ?: "");
    return bad ? -1 : 0;
}

/* Puts back what a reader of a restored session should see first. */
static void restore_events(struct sess *s)
{
    evlog_ring_renumber(&s->ring, s->id_ceiling);
    s->id_ceiling += SESS_ID_STRIDE;
    json_t *ev = NULL;
    enum evlog_kind kind = EVLOG_EXIT;
    if (s->state == SESS_STARTING || s->state == SESS_RUNNING) {
        if (s->pid > 0) {
            s->state = SESS_STARTING; /* detached: re-attached by pid */
        } else {
            s->state = SESS_LOST;
            s->finished_ms = spaced_now_ms();
            snprintf(s->err_code, sizeof s->err_code, "lost");
            snprintf(s->err_msg, sizeof s->err_msg,
                     "spaced restarted before the process reported its start");
        }
    }
    if (s->state == SESS_EXITED)
        ev = json_pack("{s:o,s:o}", "code",
                       s->exit_code >= 0 ? json_integer(s->exit_code) : json_null(), "signal",
                       s->exit_signal ? json_integer(s->exit_signal) : json_null());
    else if (s->state == SESS_FAILED || s->state == SESS_LOST) {
        kind = EVLOG_ERROR;
        ev = json_pack("{s:s,s:s}", "code", s->err_code[0] ? s->err_code : "lost", "message",
                       s->err_msg);
    }
    char *text = ev ? json_dumps(ev, JSON_COMPACT) : NULL;
    if (text)
        evlog_ring_append(&s->ring, kind, text, strlen(text), evlog_ring_next_id(&s->ring));
    free(text);
    json_decref(ev);
}

/* Rows are only read while the store iterates them (writing to a table under an open
 * SELECT is undefined in SQLite); rows to drop are collected and deleted afterwards. */
struct restore_ctx {
    struct sess_table *t;
    json_t *drop; /* ids of malformed rows (owned) */
};

static int restore_row(const struct store_session *row, void *arg)
{
    struct restore_ctx *rc = arg;
    json_error_t je;
    json_t *doc = row->spec_json ? json_loads(row->spec_json, 0, &je) : NULL;
    struct sess *s = sess_alloc(rc->t, row->tenant, row->sandbox);
    if (!s || !json_is_object(doc) || restore_fields(s, row, doc) < 0) {
        log_warn("session.restore", "session=%s msg=%s", row->id,
                 s ? "malformed stored session dropped" : "out of memory");
        if (s) {
            json_array_append_new(rc->drop, json_string(row->id));
            sess_free(s);
        }
        json_decref(doc);
        return 0;
    }
    json_decref(doc);
    restore_events(s);
    sess_link_in(rc->t, s);
    log_info("session.restore", "session=%s sandbox=%s state=%s", s->id, s->sbx,
             sess_state_name(s->state));
    return 0;
}

static void restore_sandbox(struct sbx *x, void *arg)
{
    struct restore_ctx *rc = arg;
    struct spaced *sp = sess_table_spaced(rc->t);
    if (store_session_each(sp->store, sbx_id(x), restore_row, rc) < 0)
        log_error("session.restore", "sandbox=%s msg=%s", sbx_id(x), store_errmsg(sp->store));
}

void sess_restore_all(struct sess_table *t)
{
    struct spaced *sp = sess_table_spaced(t);
    struct restore_ctx rc = {.t = t, .drop = json_array()};
    if (!rc.drop)
        return;
    sbx_each(sp, restore_sandbox, &rc);
    size_t i;
    json_t *id;
    json_array_foreach(rc.drop, i, id)
        store_session_delete(sp->store, json_string_value(id));
    json_decref(rc.drop);
    /* Store the new id ceilings and states (only restored sessions exist yet). */
    for (struct sess *s = sess_table_first(t); s; s = s->nx)
        sess_persist(s);
}
