/* e2b_fsmsg: the messages of envd's `filesystem.Filesystem` service in protobuf-JSON.
 *
 * Same conventions as e2b_procmsg: parsed strings are borrowed from the request object,
 * built JSON is owned by the caller. EntryInfo is emitted the way the SDK needs it:
 * `type` one of the three real FILE_TYPE_* names (others make the SDK drop the entry),
 * `size` as an int64 string, `mode` the permission bits only, `permissions` Go-style
 * ("-rw-r--r--"), `modifiedTime` RFC 3339. */
#ifndef SPACE_E2B_FSMSG_H
#define SPACE_E2B_FSMSG_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "e2b_error.h"

enum e2b_file_type {
    E2B_FILE_UNSPECIFIED = 0,
    E2B_FILE_FILE = 1,
    E2B_FILE_DIRECTORY = 2,
    E2B_FILE_SYMLINK = 3,
};

enum e2b_fs_event {
    E2B_EVENT_UNSPECIFIED = 0,
    E2B_EVENT_CREATE = 1,
    E2B_EVENT_WRITE = 2,
    E2B_EVENT_REMOVE = 3,
    E2B_EVENT_RENAME = 4,
    E2B_EVENT_CHMOD = 5,
};

/* One file's metadata, as the agent reported it. Strings are borrowed. */
struct e2b_entry {
    const char *name;            /* last path element */
    const char *path;            /* absolute path */
    enum e2b_file_type type;
    uint64_t size;
    uint32_t mode;               /* st_mode; only the permission bits are emitted */
    const char *owner, *group;   /* names (or numbers as text); NULL -> "" */
    int64_t mtime_sec;
    long mtime_nsec;
    const char *symlink_target;  /* NULL unless a symlink */
    bool is_link;                /* a symlink: type and mode are its target's */
    json_t *metadata;            /* string map (borrowed), NULL or empty for none */
};

/* WatchDirRequest / CreateWatcherRequest. */
struct e2b_fs_watch {
    const char *path;
    bool recursive;
    bool include_entry;
    bool allow_network_mounts;
};

/* {path} of Stat, MakeDir, Remove: path required and non-empty. */
int e2b_fs_parse_path(json_t *req, const char **path, struct e2b_err *err);
/* MoveRequest {source, destination}. */
int e2b_fs_parse_move(json_t *req, const char **src, const char **dst, struct e2b_err *err);
/* ListDirRequest {path, depth}; depth 0 becomes 1. */
int e2b_fs_parse_list(json_t *req, const char **path, uint32_t *depth, struct e2b_err *err);
int e2b_fs_parse_watch(json_t *req, struct e2b_fs_watch *out, struct e2b_err *err);
/* {watcherId} of GetWatcherEvents / RemoveWatcher. */
int e2b_fs_parse_watcher_id(json_t *req, const char **id, struct e2b_err *err);

/* Go's FileMode.String() for the type and permission bits: "drwxr-xr-x" (a symlink,
 * is_link: "Lrwxrwxrwx", as Linux links have every bit). out >= 11. */
void e2b_fs_permissions(enum e2b_file_type type, bool is_link, uint32_t mode, char *out);
/* Orders ListDir entries (EntryInfo objects, by "path") as envd's walk returns them:
 * each directory's entries by name, bytewise, a directory followed by what is under it.
 * Returns -1 on OOM (the array is left as it was). */
int e2b_entries_sort(json_t *entries);
/* That order between two paths: <0, 0, >0. */
int e2b_walk_order(const char *a, const char *b);
/* EntryInfo JSON. NULL on OOM or a non-UTF-8 name. */
json_t *e2b_fs_entry_json(const struct e2b_entry *e);
/* FilesystemEvent {name, type, entry?} (entry stolen, may be NULL). */
json_t *e2b_fs_event_json(const char *name, enum e2b_fs_event type, json_t *entry);
/* {"filesystem": FilesystemEvent} / {"start":{}} / {"keepalive":{}} for WatchDir streams. */
json_t *e2b_fs_watch_msg(const char *kind, json_t *body);
const char *e2b_fs_event_name(enum e2b_fs_event type);

#endif
