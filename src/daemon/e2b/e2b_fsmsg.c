/* e2b_fsmsg: parse filesystem.Filesystem requests, build EntryInfo and events. */
#include "e2b_fsmsg.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "e2b_pbjson.h"

#define F(c) ((struct e2b_pb_field){c, NULL})
#define F2(c, s) ((struct e2b_pb_field){c, s})

static const struct e2b_pb_enum file_type_enum[] = {
    {"FILE_TYPE_UNSPECIFIED", E2B_FILE_UNSPECIFIED},
    {"FILE_TYPE_FILE", E2B_FILE_FILE},
    {"FILE_TYPE_DIRECTORY", E2B_FILE_DIRECTORY},
    {"FILE_TYPE_SYMLINK", E2B_FILE_SYMLINK},
    {NULL, 0},
};

static const struct e2b_pb_enum event_enum[] = {
    {"EVENT_TYPE_UNSPECIFIED", E2B_EVENT_UNSPECIFIED},
    {"EVENT_TYPE_CREATE", E2B_EVENT_CREATE},
    {"EVENT_TYPE_WRITE", E2B_EVENT_WRITE},
    {"EVENT_TYPE_REMOVE", E2B_EVENT_REMOVE},
    {"EVENT_TYPE_RENAME", E2B_EVENT_RENAME},
    {"EVENT_TYPE_CHMOD", E2B_EVENT_CHMOD},
    {NULL, 0},
};

/* A required, non-empty string field. */
static int required(json_t *req, struct e2b_pb_field f, const char **out, struct e2b_err *err)
{
    *out = NULL;
    if (e2b_pb_string(req, f, out, err) < 0)
        return -1;
    if (!*out || !**out)
        return e2b_err_set(err, E2B_INVALID_ARGUMENT, "field %s is required", f.camel);
    return 0;
}

int e2b_fs_parse_path(json_t *req, const char **path, struct e2b_err *err)
{
    return required(req, F("path"), path, err);
}

int e2b_fs_parse_move(json_t *req, const char **src, const char **dst, struct e2b_err *err)
{
    if (required(req, F("source"), src, err) < 0)
        return -1;
    return required(req, F("destination"), dst, err);
}

int e2b_fs_parse_list(json_t *req, const char **path, uint32_t *depth, struct e2b_err *err)
{
    if (required(req, F("path"), path, err) < 0)
        return -1;
    *depth = 0;
    if (e2b_pb_u32(req, F("depth"), depth, err) < 0)
        return -1;
    if (*depth == 0)
        *depth = 1;
    return 0;
}

int e2b_fs_parse_watch(json_t *req, struct e2b_fs_watch *out, struct e2b_err *err)
{
    memset(out, 0, sizeof *out);
    if (required(req, F("path"), &out->path, err) < 0 ||
        e2b_pb_bool(req, F("recursive"), &out->recursive, err) < 0 ||
        e2b_pb_bool(req, F2("includeEntry", "include_entry"), &out->include_entry, err) < 0 ||
        e2b_pb_bool(req, F2("allowNetworkMounts", "allow_network_mounts"),
                    &out->allow_network_mounts, err) < 0)
        return -1;
    return 0;
}

int e2b_fs_parse_watcher_id(json_t *req, const char **id, struct e2b_err *err)
{
    return required(req, F2("watcherId", "watcher_id"), id, err);
}

void e2b_fs_permissions(enum e2b_file_type type, bool is_link, uint32_t mode, char *out)
{
    static const char rwx[] = "rwxrwxrwx";
    if (is_link)
        mode = 0777;
    out[0] = is_link || type == E2B_FILE_SYMLINK ? 'L' : type == E2B_FILE_DIRECTORY ? 'd' : '-';
    for (int i = 0; i < 9; i++)
        out[1 + i] = (mode & (1u << (8 - i))) ? rwx[i] : '-';
    out[10] = '\0';
}

json_t *e2b_fs_entry_json(const struct e2b_entry *e)
{
    char perms[11], ts[48];
    e2b_fs_permissions(e->type, e->is_link, e->mode, perms);
    e2b_pb_timestamp(e->mtime_sec, e->mtime_nsec, ts, sizeof ts);
    const char *type = e2b_pb_enum_name(file_type_enum, (int)e->type);
    json_t *j = json_pack("{s:s, s:s, s:s, s:o, s:I, s:s, s:s, s:s, s:s}", "name",
                          e->name ? e->name : "", "type", type ? type : "FILE_TYPE_UNSPECIFIED",
                          "path", e->path ? e->path : "", "size", e2b_pb_int64((int64_t)e->size),
                          "mode", (json_int_t)(e->mode & 0777), "permissions", perms, "owner",
                          e->owner ? e->owner : "", "group", e->group ? e->group : "",
                          "modifiedTime", ts);
    if (j && e->symlink_target)
        json_object_set_new(j, "symlinkTarget", json_string(e->symlink_target));
    if (j && json_object_size(e->metadata))
        json_object_set(j, "metadata", e->metadata);
    return j;
}

const char *e2b_fs_event_name(enum e2b_fs_event type)
{
    const char *n = e2b_pb_enum_name(event_enum, (int)type);
    return n ? n : "EVENT_TYPE_UNSPECIFIED";
}

json_t *e2b_fs_event_json(const char *name, enum e2b_fs_event type, json_t *entry)
{
    json_t *ev = json_pack("{s:s, s:s}", "name", name ? name : "", "type",
                           e2b_fs_event_name(type));
    if (ev && entry)
        json_object_set_new(ev, "entry", entry);
    else
        json_decref(entry);
    return ev;
}

json_t *e2b_fs_watch_msg(const char *kind, json_t *body)
{
    if (!body)
        return NULL;
    return json_pack("{s:o}", kind, body);
}

int e2b_walk_order(const char *a, const char *b)
{
    while (*a && *a == *b) {
        a++;
        b++;
    }
    if (*a == *b)
        return 0;
    /* A path ends before anything under it, and "/" (going down) before any other byte
     * of a longer name: "d/a", "d/a/x", "d/a-b". */
    if (!*a || (*a == '/' && *b))
        return -1;
    if (!*b || *b == '/')
        return 1;
    return (unsigned char)*a < (unsigned char)*b ? -1 : 1;
}

static int entry_cmp(const void *x, const void *y)
{
    const char *a = json_string_value(json_object_get(*(json_t *const *)x, "path"));
    const char *b = json_string_value(json_object_get(*(json_t *const *)y, "path"));
    return e2b_walk_order(a ? a : "", b ? b : "");
}

int e2b_entries_sort(json_t *entries)
{
    size_t n = json_array_size(entries);
    if (n < 2)
        return 0;
    json_t **v = malloc(n * sizeof *v);
    if (!v)
        return -1;
    for (size_t i = 0; i < n; i++)
        v[i] = json_incref(json_array_get(entries, i));
    qsort(v, n, sizeof *v, entry_cmp);
    json_array_clear(entries);
    for (size_t i = 0; i < n; i++)
        json_array_append_new(entries, v[i]);
    free(v);
    return 0;
}
