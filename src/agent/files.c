/* files.c: stat, list, mkdir, remove, rename (synchronous: local disk, short calls).
 * Every path is resolved by agent_req_path and every directory walked is read through
 * agent_resolve_lstatat, so nothing here reaches a volume mount (resolve.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "agent/fs.h"
#include "agent/ops.h"
#include "agent/req.h"
#include "agent/resolve.h"

#define LIST_MAX_ENTRIES 100000
#define LIST_MAX_DEPTH   16
#define LIST_BATCH_BYTES 40000   /* estimated JSON bytes per "entries" event (< 64 KiB) */
#define REMOVE_MAX_DEPTH 256     /* directories open at once in a recursive remove (ELOOP past it) */

/* Common start of every file op: the user, then one path field (resolved, its last link
 * followed if follow_last). */
static int files_begin(struct agent_chan *ch, json_t *req, const char *key, bool follow_last,
                       struct agent_user *u, char *shown, char *path)
{
    if (agent_req_user(ch, req, u) < 0 ||
        agent_req_path(ch, req, key, u, follow_last, shown, path) < 0) {
        agent_chan_close(ch);
        return -1;
    }
    return 0;
}

/* Sends the stat of path (named shown) as the result, or its errno error. */
static void files_result_stat(struct agent_chan *ch, const char *shown, const char *path)
{
    struct stat st;
    if (lstat(path, &st) < 0)
        return agent_chan_fail_errno(ch, errno, shown);
    agent_op_result(ch, json_pack("{s:o}", "stat", agent_fs_stat_json(shown, path, &st)));
}

void agent_op_stat(struct agent_chan *ch, json_t *req)
{
    struct agent_user u;
    char shown[PATH_MAX], path[PATH_MAX];
    if (files_begin(ch, req, "path", false, &u, shown, path) == 0)
        files_result_stat(ch, shown, path);
}

/* A list in progress: entries accumulate in `batch` and go out as "entries" events. */
struct list_walk {
    struct agent_chan *ch;
    json_t *batch;         /* current batch (owned) */
    size_t batch_bytes;    /* estimated JSON size of batch */
    size_t count;          /* entries sent or batched */
    int max_depth;
};

static void list_flush(struct list_walk *w)
{
    if (json_array_size(w->batch) == 0)
        return;
    agent_chan_event(w->ch, json_pack("{s:s, s:O}", "type", "entries", "entries", w->batch));
    json_array_clear(w->batch);
    w->batch_bytes = 0;
}

/* Walks dir (depth 1 = its own entries). Returns 0, or -1 with errno. A volume's mount
 * point is left out (agent_resolve_lstatat: its attributes would be a FUSE request). */
static int list_dir(struct list_walk *w, const char *dir, const char *shown_dir, int depth)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    struct dirent *de;
    int rc = 0;
    while (rc == 0 && (errno = 0, de = readdir(d))) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        char path[PATH_MAX], shown[PATH_MAX];
        struct stat st;
        if (snprintf(path, sizeof path, "%s%s%s", dir, strcmp(dir, "/") ? "/" : "", de->d_name) >=
                (int)sizeof path ||
            snprintf(shown, sizeof shown, "%s%s%s", shown_dir, strcmp(shown_dir, "/") ? "/" : "",
                     de->d_name) >= (int)sizeof shown ||
            agent_resolve_lstatat(dirfd(d), de->d_name, &st) < 0)
            continue; /* vanished, unreachable or a volume: a listing is a snapshot anyway */
        if (++w->count > LIST_MAX_ENTRIES) {
            errno = E2BIG;
            rc = -1;
            break;
        }
        json_t *e = agent_fs_stat_json(shown, path, &st);
        if (e) {
            /* JSON escaping can make a byte 6 bytes (\u00XX): estimate the worst. */
            w->batch_bytes += 300 + 12 * strlen(path);
            json_array_append_new(w->batch, e);
        }
        if (w->batch_bytes > LIST_BATCH_BYTES)
            list_flush(w);
        if (S_ISDIR(st.st_mode) && depth < w->max_depth && list_dir(w, path, shown, depth + 1) < 0 &&
            errno == E2BIG)
            rc = -1;
    }
    if (rc == 0 && errno != 0)
        rc = -1;
    int e = errno;
    closedir(d);
    errno = e;
    return rc;
}

void agent_op_list(struct agent_chan *ch, json_t *req)
{
    struct agent_user u;
    char shown[PATH_MAX], path[PATH_MAX];
    long long depth;
    if (files_begin(ch, req, "path", true, &u, shown, path) < 0)
        return;
    if (agent_req_int(ch, req, "depth", 1, LIST_MAX_DEPTH, 1, &depth) < 0)
        return agent_chan_close(ch);
    struct stat st;
    if (stat(path, &st) < 0)
        return agent_chan_fail_errno(ch, errno, shown);
    if (!S_ISDIR(st.st_mode))
        return agent_chan_fail(ch, FRAME_E_NOT_DIR, "%s: not a directory", shown);
    struct list_walk w = {.ch = ch, .batch = json_array(), .max_depth = (int)depth};
    if (!w.batch)
        return agent_chan_fail(ch, FRAME_E_INTERNAL, "out of memory");
    int rc = list_dir(&w, path, shown, 1);
    int e = errno;
    list_flush(&w);
    json_decref(w.batch);
    if (rc < 0 && e == E2BIG)
        return agent_chan_fail(ch, FRAME_E_TOO_MANY, "more than %d entries", LIST_MAX_ENTRIES);
    if (rc < 0)
        return agent_chan_fail_errno(ch, e, shown);
    agent_op_result(ch, json_pack("{s:I}", "count", (json_int_t)w.count));
}

void agent_op_mkdir(struct agent_chan *ch, json_t *req)
{
    struct agent_user u;
    char shown[PATH_MAX], path[PATH_MAX];
    bool parents;
    long long mode;
    if (files_begin(ch, req, "path", false, &u, shown, path) < 0)
        return;
    if (agent_req_bool(ch, req, "parents", true, &parents) < 0 ||
        agent_req_int(ch, req, "mode", 0, 07777, 0755, &mode) < 0)
        return agent_chan_close(ch);
    int rc;
    if (parents) {
        rc = agent_fs_mkdirs(path, (mode_t)mode, &u, true);
    } else {
        rc = mkdir(path, (mode_t)mode);
        if (rc == 0 && (lchown(path, u.uid, u.gid) < 0 || chmod(path, (mode_t)mode) < 0))
            rc = -1;
    }
    if (rc < 0 && errno == EEXIST) {
        /* What is there, links followed: a file is exists_not_dir; a directory, a
         * dangling link or a link into a volume (not looked at) already_exists. */
        char real[PATH_MAX];
        struct stat st;
        errno = agent_resolve(path, true, real) == 0 && stat(real, &st) == 0 &&
                        !S_ISDIR(st.st_mode)
                    ? ENOTDIR
                    : EEXIST;
    }
    if (rc < 0)
        return agent_chan_fail_errno(ch, errno, shown);
    files_result_stat(ch, shown, path);
}

/* Removes everything below the directory dirfd (which it closes), then nothing else:
 * like nftw(FTW_DEPTH | FTW_PHYS | FTW_MOUNT) but through agent_resolve_lstatat, so a
 * volume's mount point below is not even stat'ed (it fails as any mount point does,
 * EBUSY). Entries on another device are not entered. 0, or -1 with errno. */
static int remove_below(int dirfd, dev_t dev, int depth)
{
    DIR *d = fdopendir(dirfd);
    if (!d) {
        close(dirfd);
        return -1;
    }
    struct dirent *de;
    int rc = 0;
    while (rc == 0 && (errno = 0, de = readdir(d))) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        struct stat st;
        if (agent_resolve_lstatat(dirfd, de->d_name, &st) < 0) {
            if (errno == EXDEV)
                errno = EBUSY;
            rc = errno == ENOENT ? 0 : -1;
            continue;
        }
        if (!S_ISDIR(st.st_mode)) {
            rc = unlinkat(dirfd, de->d_name, 0) < 0 && errno != ENOENT ? -1 : 0;
            continue;
        }
        if (st.st_dev == dev) {
            if (depth >= REMOVE_MAX_DEPTH) {
                errno = ELOOP;
                rc = -1;
                continue;
            }
            int sub = openat(dirfd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (sub < 0 || remove_below(sub, dev, depth + 1) < 0) {
                rc = -1;
                continue;
            }
        }
        rc = unlinkat(dirfd, de->d_name, AT_REMOVEDIR) < 0 ? -1 : 0;
    }
    if (rc == 0 && errno != 0)
        rc = -1;
    int e = errno;
    closedir(d);
    errno = e;
    return rc;
}

void agent_op_remove(struct agent_chan *ch, json_t *req)
{
    struct agent_user u;
    char shown[PATH_MAX], path[PATH_MAX];
    bool recursive;
    if (files_begin(ch, req, "path", false, &u, shown, path) < 0)
        return;
    if (agent_req_bool(ch, req, "recursive", false, &recursive) < 0)
        return agent_chan_close(ch);
    if (strcmp(path, "/") == 0)
        return agent_chan_fail(ch, FRAME_E_INVALID_ARGUMENT, "refusing to remove /");
    struct stat st;
    if (lstat(path, &st) < 0)
        return agent_chan_fail_errno(ch, errno, shown);
    int rc;
    if (!S_ISDIR(st.st_mode))
        rc = unlink(path);
    else if (recursive) {
        int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        rc = fd < 0 || remove_below(fd, st.st_dev, 1) < 0 ? -1 : rmdir(path);
    } else
        rc = rmdir(path);
    if (rc < 0)
        return agent_chan_fail_errno(ch, errno == EEXIST ? ENOTEMPTY : errno, shown);
    agent_op_result(ch, NULL);
}

void agent_op_rename(struct agent_chan *ch, json_t *req)
{
    struct agent_user u;
    char from[PATH_MAX], to[PATH_MAX], from_shown[PATH_MAX], to_shown[PATH_MAX];
    if (files_begin(ch, req, "from", false, &u, from_shown, from) < 0)
        return;
    if (agent_req_path(ch, req, "to", &u, false, to_shown, to) < 0)
        return agent_chan_close(ch);
    if (rename(from, to) < 0)
        return agent_chan_fail_errno(ch, errno, from_shown);
    files_result_stat(ch, to_shown, to);
}
