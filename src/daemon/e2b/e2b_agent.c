/* e2b_agent: one-shot agent requests for unary envd methods (stat, list, mkdir, remove,
 * rename, ps), the agent->E2B error mapping, and agent stat objects as EntryInfo.
 *
 * A request and its call can end in either order (client gone, agent done), so the
 * pending request is a `struct pending` freed by whichever lets go last. */
#include <stdlib.h>
#include <string.h>

#include "daemon/agentc/agentc.h"
#include "e2b_fsmsg.h"
#include "e2b_internal.h"

#define LIST_MAX 100000 /* entries collected for one ListDir */
#define LIST_BYTES_MAX (64u << 20) /* their weight (agentc_json_weight): more fails the call */

struct pending {
    struct e2b_call *call;     /* NULL once the client went away */
    struct agentc_chan *ch;    /* NULL once closed */
    e2b_agent_done done;
    json_t *result;            /* last result/stat EVENT (owned) */
    json_t *entries;           /* list entries (owned) */
    size_t entries_bytes;      /* their weight */
    struct e2b_err err;        /* first agent ERROR */
};

void e2b_agent_err(struct e2b_err *err, const char *code, const char *message)
{
    static const struct {
        const char *agent;
        enum e2b_code code;
    } map[] = {
        {"invalid_argument", E2B_INVALID_ARGUMENT}, {"not_found", E2B_NOT_FOUND},
        {"permission_denied", E2B_PERMISSION_DENIED}, {"already_exists", E2B_ALREADY_EXISTS},
        {"exists_not_dir", E2B_INVALID_ARGUMENT},   {"is_dir", E2B_INVALID_ARGUMENT},
        {"not_empty", E2B_FAILED_PRECONDITION},     {"no_space", E2B_RESOURCE_EXHAUSTED},
        {"too_many", E2B_RESOURCE_EXHAUSTED},       {"unsupported", E2B_UNIMPLEMENTED},
        {"disconnected", E2B_UNAVAILABLE},
    };
    enum e2b_code c = E2B_INTERNAL;
    for (size_t i = 0; code && i < sizeof map / sizeof map[0]; i++)
        if (strcmp(map[i].agent, code) == 0)
            c = map[i].code;
    e2b_err_set(err, c, "%.200s", message && *message ? message : code ? code : "agent error");
}

json_t *e2b_stat_entry(json_t *st)
{
    if (!json_is_object(st))
        return NULL;
    const char *type = json_string_value(json_object_get(st, "type"));
    struct e2b_entry e = {
        .name = json_string_value(json_object_get(st, "name")),
        .path = json_string_value(json_object_get(st, "path")),
        .owner = json_string_value(json_object_get(st, "owner")),
        .group = json_string_value(json_object_get(st, "group")),
        .symlink_target = json_string_value(json_object_get(st, "symlink_target")),
    };
    if (!type || !e.name || !e.path)
        return NULL;
    json_int_t mode = json_integer_value(json_object_get(st, "mode"));
    /* As envd: a symlink has its final target's type and mode, and symlinkTarget is
     * that target's absolute path; a dangling link is UNSPECIFIED, its target itself.
     * FILE_TYPE_SYMLINK is never sent: SDKs of envd's earlier protocol reject it. */
    e.is_link = strcmp(type, "symlink") == 0;
    if (e.is_link) {
        json_t *t = json_object_get(st, "target");
        const char *tt = json_string_value(json_object_get(t, "type"));
        const char *tp = json_string_value(json_object_get(t, "path"));
        type = tt ? tt : "";
        mode = json_integer_value(json_object_get(t, "mode"));
        e.symlink_target = tp ? tp : e.path;
    }
    /* "other" (fifo, socket, device) is reported as a file: the SDK drops entries of
     * any type it does not know. */
    e.type = strcmp(type, "dir") == 0 ? E2B_FILE_DIRECTORY
             : !type[0]               ? E2B_FILE_UNSPECIFIED
                                      : E2B_FILE_FILE;
    json_int_t size = json_integer_value(json_object_get(st, "size"));
    json_int_t mtime = json_integer_value(json_object_get(st, "mtime_ns"));
    e.size = size > 0 ? (uint64_t)size : 0;
    e.mode = (uint32_t)(mode & 07777);
    e.mtime_sec = mtime / 1000000000;
    e.mtime_nsec = (long)(mtime % 1000000000);
    if (e.mtime_nsec < 0)
        e.mtime_nsec = 0;
    e.metadata = e2b_xattrs_metadata(json_object_get(st, "xattrs"));
    json_t *j = e2b_fs_entry_json(&e);
    json_decref(e.metadata);
    return j;
}

json_t *e2b_xattrs_metadata(json_t *xattrs)
{
    const char *k;
    json_t *v, *out = NULL;
    size_t plen = strlen(E2B_XATTR_PREFIX);
    json_object_foreach(xattrs, k, v) {
        if (strncmp(k, E2B_XATTR_PREFIX, plen) != 0 || !k[plen] || !json_is_string(v))
            continue;
        if (out || (out = json_object()))
            json_object_set(out, k + plen, v);
    }
    return out;
}

static void pending_release(struct pending *p)
{
    if (p->call || p->ch)
        return;
    json_decref(p->result);
    json_decref(p->entries);
    free(p);
}

static void on_event(void *arg, json_t *ev)
{
    struct pending *p = arg;
    const char *type = json_string_value(json_object_get(ev, "type"));
    if (strcmp(type, "entries") == 0) {
        json_t *list = json_object_get(ev, "entries");
        size_t w = agentc_json_weight(list);
        if (p->entries_bytes + w > LIST_BYTES_MAX) {
            if (p->err.code == E2B_OK)
                e2b_err_set(&p->err, E2B_RESOURCE_EXHAUSTED,
                            "the listing is larger than %u MiB", LIST_BYTES_MAX >> 20);
            json_array_clear(p->entries);
            p->entries_bytes = LIST_BYTES_MAX; /* nothing more is kept */
            return;
        }
        if (json_is_array(list) && json_array_size(p->entries) < LIST_MAX) {
            json_array_extend(p->entries, list);
            p->entries_bytes += w;
        }
        return;
    }
    if (strcmp(type, "result") == 0 || strcmp(type, "stat") == 0) {
        json_decref(p->result);
        p->result = json_incref(ev);
    }
}

static void on_error(void *arg, const char *code, const char *message)
{
    struct pending *p = arg;
    if (p->err.code == E2B_OK)
        e2b_agent_err(&p->err, code, message);
}

static void on_close(void *arg)
{
    struct pending *p = arg;
    p->ch = NULL;
    if (p->call) {
        struct e2b_call *c = p->call;
        p->call = NULL;
        c->cancel = NULL;
        c->impl = NULL;
        if (p->err.code == E2B_OK && !p->result)
            e2b_err_set(&p->err, E2B_UNAVAILABLE, "the sandbox agent closed the request");
        p->done(c, p->result, p->entries, p->err.code == E2B_OK ? NULL : &p->err);
    }
    pending_release(p);
}

static const struct agentc_chan_ops pending_ops = {
    .on_event = on_event,
    .on_error = on_error,
    .on_close = on_close,
};

/* The client went away: cancel the agent request. */
static void pending_cancel(struct e2b_call *c, bool deadline)
{
    (void)deadline;
    struct pending *p = c->impl;
    p->call = NULL;
    if (p->ch) {
        agentc_close(p->ch);
        p->ch = NULL;
    }
    pending_release(p);
}

void e2b_agent_call(struct e2b_call *c, json_t *request, e2b_agent_done done)
{
    struct e2b_err err = {0};
    struct agentc *a = e2b_call_agent(c);
    struct pending *p = calloc(1, sizeof *p);
    if (!a || !p || !(p->entries = json_array())) {
        free(p);
        e2b_err_set(&err, a ? E2B_INTERNAL : E2B_UNAVAILABLE,
                    a ? "out of memory" : "sandbox is not running");
        done(c, NULL, NULL, &err);
        return;
    }
    char why[128];
    p->ch = agentc_open(a, request, &pending_ops, p, 0, why, sizeof why);
    if (!p->ch) {
        json_decref(p->entries);
        free(p);
        e2b_err_set(&err, E2B_UNAVAILABLE, "agent: %s", why);
        done(c, NULL, NULL, &err);
        return;
    }
    p->call = c;
    p->done = done;
    c->impl = p;
    c->cancel = pending_cancel;
}
