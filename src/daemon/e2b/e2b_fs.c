/* e2b_fs: filesystem.Filesystem on the agent's stat/list/mkdir/remove/rename/watch ops.
 *
 * Paths arrive absolute or relative to the user's home and are resolved here, so every
 * response carries absolute paths. WatchDir streams the agent's watch events; the
 * polling watchers (CreateWatcher & co., used by the Python sync SDK) keep the same
 * agent watch open in the sandbox's box and buffer its events until fetched. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/agentc/agentc.h"
#include "daemon/spaced.h"
#include "e2b_fsmsg.h"
#include "e2b_internal.h"
#include "e2b_util.h"

#define WATCHER_EVENTS_MAX 10000 /* buffered events per polling watcher */
#define WATCHER_BYTES_MAX (1u << 20) /* and their weight (agentc_json_weight) */
#define WATCHERS_MAX 64          /* polling watchers per sandbox */

/* Resolves `path` for the call's user into a new request {"op":op,"path":abs,"user"}.
 * Replies with the error and returns NULL on failure. */
static json_t *path_request(struct e2b_call *c, const char *op, const char *key,
                            const char *path, char **abs_out)
{
    struct e2b_err err = {0};
    char *abs = e2b_path_resolve(path, c->home, &err);
    if (!abs) {
        e2b_call_fail(c, &err);
        return NULL;
    }
    json_t *r = json_pack("{s:s, s:s, s:s}", "op", op, key, abs, "user", c->user);
    if (abs_out)
        *abs_out = abs;
    else
        free(abs);
    if (!r) {
        e2b_err_set(&err, E2B_INVALID_ARGUMENT, "path is not valid UTF-8");
        e2b_call_fail(c, &err);
    }
    return r;
}

/* Replies {"entry": EntryInfo} from a result event. */
static void reply_entry(struct e2b_call *c, json_t *result, json_t *entries,
                        const struct e2b_err *err)
{
    (void)entries;
    if (err) {
        e2b_call_fail(c, err);
        return;
    }
    json_t *entry = e2b_stat_entry(json_object_get(result, "stat"));
    if (!entry) {
        struct e2b_err e2;
        e2b_err_set(&e2, E2B_INTERNAL, "the agent returned a malformed stat");
        e2b_call_fail(c, &e2);
        return;
    }
    e2b_call_reply(c, json_pack("{s:o}", "entry", entry));
}

static void reply_empty(struct e2b_call *c, json_t *result, json_t *entries,
                        const struct e2b_err *err)
{
    (void)result;
    (void)entries;
    if (err)
        e2b_call_fail(c, err);
    else
        e2b_call_reply(c, json_object());
}

/* Runs a {path}-only request through the agent. */
static void path_op(struct e2b_call *c, const char *op, e2b_agent_done done, const char *extra)
{
    struct e2b_err err = {0};
    const char *path;
    if (e2b_fs_parse_path(c->msg, &path, &err) < 0) {
        e2b_call_fail(c, &err);
        return;
    }
    json_t *r = path_request(c, op, "path", path, NULL);
    if (!r)
        return;
    if (extra)
        json_object_set_new(r, extra, json_true());
    e2b_agent_call(c, r, done);
    json_decref(r);
}

void e2b_fs_stat(struct e2b_call *c)
{
    path_op(c, "stat", reply_entry, NULL);
}

void e2b_fs_make_dir(struct e2b_call *c)
{
    path_op(c, "mkdir", reply_entry, "parents");
}

/* envd removes with Go's os.RemoveAll: a path that is already gone is a success. */
static void reply_removed(struct e2b_call *c, json_t *result, json_t *entries,
                          const struct e2b_err *err)
{
    reply_empty(c, result, entries, err && err->code == E2B_NOT_FOUND ? NULL : err);
}

void e2b_fs_remove(struct e2b_call *c)
{
    path_op(c, "remove", reply_removed, "recursive");
}

void e2b_fs_move(struct e2b_call *c)
{
    struct e2b_err err = {0};
    const char *src, *dst;
    if (e2b_fs_parse_move(c->msg, &src, &dst, &err) < 0) {
        e2b_call_fail(c, &err);
        return;
    }
    char *to = e2b_path_resolve(dst, c->home, &err);
    if (!to) {
        e2b_call_fail(c, &err);
        return;
    }
    json_t *r = path_request(c, "rename", "from", src, NULL);
    if (r) {
        json_object_set_new(r, "to", json_string(to));
        e2b_agent_call(c, r, reply_entry);
        json_decref(r);
    }
    free(to);
}

static void reply_list(struct e2b_call *c, json_t *result, json_t *entries,
                       const struct e2b_err *err)
{
    (void)result;
    if (err) {
        e2b_call_fail(c, err);
        return;
    }
    json_t *out = json_array();
    size_t i;
    json_t *st;
    json_array_foreach(entries, i, st) {
        json_t *e = e2b_stat_entry(st);
        if (e)
            json_array_append_new(out, e);
    }
    e2b_entries_sort(out);
    e2b_call_reply(c, json_pack("{s:o}", "entries", out));
}

void e2b_fs_list_dir(struct e2b_call *c)
{
    struct e2b_err err = {0};
    const char *path;
    uint32_t depth;
    if (e2b_fs_parse_list(c->msg, &path, &depth, &err) < 0) {
        e2b_call_fail(c, &err);
        return;
    }
    json_t *r = path_request(c, "list", "path", path, NULL);
    if (!r)
        return;
    json_object_set_new(r, "depth", json_integer(depth > 16 ? 16 : depth));
    e2b_agent_call(c, r, reply_list);
    json_decref(r);
}

/* ---- watches ------------------------------------------------------------------------ */

/* Maps an agent watch "fs" event to an E2B event type. */
static enum e2b_fs_event event_type(const char *op)
{
    static const struct {
        const char *op;
        enum e2b_fs_event type;
    } map[] = {{"create", E2B_EVENT_CREATE}, {"write", E2B_EVENT_WRITE},
               {"remove", E2B_EVENT_REMOVE}, {"rename", E2B_EVENT_RENAME},
               {"chmod", E2B_EVENT_CHMOD}};
    for (size_t i = 0; op && i < sizeof map / sizeof map[0]; i++)
        if (strcmp(map[i].op, op) == 0)
            return map[i].type;
    return E2B_EVENT_UNSPECIFIED;
}

/* A FilesystemEvent from an agent "fs" event, or NULL to skip it. The agent adds a
 * "stat" only when includeEntry asked for it (and the entry still existed). */
static json_t *fs_event(json_t *ev)
{
    const char *name = json_string_value(json_object_get(ev, "name"));
    enum e2b_fs_event t = event_type(json_string_value(json_object_get(ev, "op")));
    if (!name || t == E2B_EVENT_UNSPECIFIED)
        return NULL;
    json_t *st = json_object_get(ev, "stat");
    return e2b_fs_event_json(name, t, st ? e2b_stat_entry(st) : NULL);
}

/* The SDK validates the watched path before the stream starts; the agent's watch does
 * too (missing -> not_found, not a directory -> invalid_argument). */
static json_t *watch_request(struct e2b_call *c, struct e2b_fs_watch *w)
{
    struct e2b_err err = {0};
    if (e2b_fs_parse_watch(c->msg, w, &err) < 0) {
        e2b_call_fail(c, &err);
        return NULL;
    }
    json_t *r = path_request(c, "watch", "path", w->path, NULL);
    if (r && w->recursive)
        json_object_set_new(r, "recursive", json_true());
    if (r && w->include_entry)
        json_object_set_new(r, "stat", json_true());
    return r;
}

/* WatchDir: one stream per agent watch channel. */
struct wstream {
    struct e2b_call *call;
    struct agentc_chan *ch;
    bool started;
    struct e2b_err err;
};

static void wstream_release(struct wstream *w)
{
    if (!w->call && !w->ch)
        free(w);
}

static void ws_event(void *arg, json_t *ev)
{
    struct wstream *w = arg;
    if (!w->call)
        return;
    const char *type = json_string_value(json_object_get(ev, "type"));
    if (strcmp(type, "watching") == 0 && !w->started) {
        w->started = true;
        e2b_stream_send(w->call, e2b_fs_watch_msg("start", json_object()));
    } else if (strcmp(type, "fs") == 0 && w->started) {
        json_t *fe = fs_event(ev);
        if (fe)
            e2b_stream_send(w->call, e2b_fs_watch_msg("filesystem", fe));
    }
}

static void ws_error(void *arg, const char *code, const char *message)
{
    struct wstream *w = arg;
    if (w->err.code == E2B_OK)
        e2b_agent_err(&w->err, code, message);
}

static void ws_close(void *arg)
{
    struct wstream *w = arg;
    w->ch = NULL;
    if (w->call) {
        struct e2b_call *c = w->call;
        w->call = NULL;
        c->cancel = NULL;
        if (w->err.code == E2B_OK)
            e2b_err_set(&w->err, E2B_UNAVAILABLE, "the watch ended (sandbox stopped?)");
        e2b_stream_finish(c, &w->err);
    }
    wstream_release(w);
}

static const struct agentc_chan_ops wstream_ops = {
    .on_event = ws_event,
    .on_error = ws_error,
    .on_close = ws_close,
};

static void ws_cancel(struct e2b_call *c, bool deadline)
{
    (void)deadline;
    struct wstream *w = c->impl;
    w->call = NULL;
    if (w->ch) {
        agentc_close(w->ch);
        w->ch = NULL;
    }
    wstream_release(w);
}

static json_t *watch_keepalive(void)
{
    return e2b_fs_watch_msg("keepalive", json_object());
}

void e2b_fs_watch_dir(struct e2b_call *c)
{
    struct e2b_fs_watch fw;
    json_t *r = watch_request(c, &fw);
    if (!r)
        return;
    struct e2b_err err = {0};
    struct agentc *a = e2b_call_agent(c);
    struct wstream *w = calloc(1, sizeof *w);
    char why[128] = "sandbox is not running";
    if (!a || !w || !(w->ch = agentc_open(a, r, &wstream_ops, w, 0, why, sizeof why))) {
        json_decref(r);
        free(w);
        e2b_err_set(&err, E2B_UNAVAILABLE, "%s", why);
        e2b_call_fail(c, &err);
        return;
    }
    json_decref(r);
    w->call = c;
    c->impl = w;
    c->cancel = ws_cancel;
    c->keepalive_msg = watch_keepalive;
}

/* Polling watchers. */
struct e2b_watcher {
    struct e2b_box *box;
    char id[32];
    struct agentc_chan *ch;    /* NULL once the watch ended */
    json_t *events;            /* buffered FilesystemEvents (owned) */
    size_t events_bytes;       /* their weight */
    struct e2b_call *creating; /* CreateWatcher waiting for "watching" */
    struct e2b_err err;
    struct e2b_watcher *next;
};

static void watcher_unlink(struct e2b_watcher *w)
{
    for (struct e2b_watcher **pp = &w->box->watchers; *pp; pp = &(*pp)->next)
        if (*pp == w) {
            *pp = w->next;
            break;
        }
    json_decref(w->events);
    free(w);
}

static void wt_event(void *arg, json_t *ev)
{
    struct e2b_watcher *w = arg;
    const char *type = json_string_value(json_object_get(ev, "type"));
    if (strcmp(type, "watching") == 0 && w->creating) {
        struct e2b_call *c = w->creating;
        w->creating = NULL;
        c->cancel = NULL;
        e2b_call_reply(c, json_pack("{s:s}", "watcherId", w->id));
    } else if (strcmp(type, "fs") == 0 && json_array_size(w->events) < WATCHER_EVENTS_MAX) {
        json_t *fe = fs_event(ev);
        size_t weight = fe ? agentc_json_weight(fe) : 0;
        if (fe && w->events_bytes + weight <= WATCHER_BYTES_MAX) {
            json_array_append_new(w->events, fe);
            w->events_bytes += weight;
        } else {
            json_decref(fe);
        }
    }
}

static void wt_error(void *arg, const char *code, const char *message)
{
    struct e2b_watcher *w = arg;
    if (w->err.code == E2B_OK)
        e2b_agent_err(&w->err, code, message);
}

static void wt_close(void *arg)
{
    struct e2b_watcher *w = arg;
    w->ch = NULL;
    if (w->creating) {
        struct e2b_call *c = w->creating;
        w->creating = NULL;
        c->cancel = NULL;
        if (w->err.code == E2B_OK)
            e2b_err_set(&w->err, E2B_UNAVAILABLE, "the watch ended");
        e2b_call_fail(c, &w->err);
        watcher_unlink(w);
    }
}

static const struct agentc_chan_ops watcher_ops = {
    .on_event = wt_event,
    .on_error = wt_error,
    .on_close = wt_close,
};

static void wt_cancel(struct e2b_call *c, bool deadline)
{
    (void)deadline;
    struct e2b_watcher *w = c->impl;
    w->creating = NULL;
    if (w->ch)
        agentc_close(w->ch);
    watcher_unlink(w);
}

static struct e2b_watcher *watcher_find(struct e2b_call *c, struct e2b_err *err)
{
    const char *id;
    if (e2b_fs_parse_watcher_id(c->msg, &id, err) < 0)
        return NULL;
    for (struct e2b_watcher *w = c->box->watchers; w; w = w->next)
        if (strcmp(w->id, id) == 0 && !w->creating)
            return w;
    e2b_err_set(err, E2B_NOT_FOUND, "watcher %.64s not found", id);
    return NULL;
}

void e2b_fs_create_watcher(struct e2b_call *c)
{
    struct e2b_fs_watch fw;
    json_t *r = watch_request(c, &fw);
    if (!r)
        return;
    struct e2b_err err = {0};
    unsigned n = 0;
    for (struct e2b_watcher *x = c->box->watchers; x; x = x->next)
        n++;
    struct agentc *a = e2b_call_agent(c);
    struct e2b_watcher *w = n < WATCHERS_MAX ? calloc(1, sizeof *w) : NULL;
    char why[128] = "too many watchers or sandbox not running";
    if (!a || !w || spaced_random_id(w->id, "w", 16) < 0 || !(w->events = json_array()) ||
        !(w->ch = agentc_open(a, r, &watcher_ops, w, 0, why, sizeof why))) {
        json_decref(r);
        if (w)
            json_decref(w->events);
        free(w);
        e2b_err_set(&err, n < WATCHERS_MAX ? E2B_UNAVAILABLE : E2B_RESOURCE_EXHAUSTED, "%s", why);
        e2b_call_fail(c, &err);
        return;
    }
    json_decref(r);
    w->box = c->box;
    w->next = c->box->watchers;
    c->box->watchers = w;
    w->creating = c;
    c->impl = w;
    c->cancel = wt_cancel;
}

void e2b_fs_get_watcher_events(struct e2b_call *c)
{
    struct e2b_err err = {0};
    struct e2b_watcher *w = watcher_find(c, &err);
    if (!w) {
        e2b_call_fail(c, &err);
        return;
    }
    json_t *events = w->events;
    w->events = json_array();
    w->events_bytes = 0;
    e2b_call_reply(c, json_pack("{s:o}", "events", events));
}

void e2b_fs_remove_watcher(struct e2b_call *c)
{
    struct e2b_err err = {0};
    struct e2b_watcher *w = watcher_find(c, &err);
    if (!w) {
        e2b_call_fail(c, &err);
        return;
    }
    if (w->ch)
        agentc_close(w->ch);
    watcher_unlink(w);
    e2b_call_reply(c, json_object());
}

void e2b_box_watchers_free(struct e2b_box *b, bool agent_gone)
{
    while (b->watchers) {
        struct e2b_watcher *w = b->watchers;
        if (w->ch && !agent_gone)
            agentc_close(w->ch);
        w->ch = NULL;
        if (w->creating) {
            struct e2b_call *c = w->creating;
            w->creating = NULL;
            c->cancel = NULL;
            e2b_err_set(&w->err, E2B_UNAVAILABLE, "sandbox deleted");
            e2b_call_fail(c, &w->err);
        }
        watcher_unlink(w);
    }
}
