/* watch.c: `watch`, filesystem events from inotify until the host closes the channel.
 * Recursive watches add a watch for every directory below, and for new ones as they
 * appear. Reading inotify pauses while the output queue to the host is congested (the
 * kernel queue then overflows and the host gets an "overflow" event). Nothing on a volume
 * mount is watched or stat'ed (resolve.h): a recursive watch skips a mount point below. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <dirent.h>
#include <unistd.h>

#include "agent/fs.h"
#include "agent/loop.h"
#include "agent/ops.h"
#include "agent/req.h"
#include "agent/resolve.h"

#define WATCH_MASK (IN_CREATE | IN_MODIFY | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | \
                    IN_ATTRIB | IN_DELETE_SELF | IN_ONLYDIR)
#define WATCH_MAX_DIRS 8192

/* A watched directory: inotify's wd and its path relative to the watch root. */
struct watch_dir {
    int wd;
    char *rel;             /* "" for the root (owned) */
};

struct watch {
    struct agent_chan *ch;
    int fd;                       /* inotify instance */
    struct agent_watch w;
    char root[PATH_MAX];          /* resolved (resolve.h) */
    char shown[PATH_MAX];         /* as the request named it, for stat objects */
    bool recursive;
    bool stat;                    /* add the entry's stat object to events */
    struct watch_dir *dirs;       /* owned array */
    size_t ndirs, cap;
};

static void watch_free(struct watch *wt)
{
    agent_loop_del(&wt->w);
    close(wt->fd);
    for (size_t i = 0; i < wt->ndirs; i++)
        free(wt->dirs[i].rel);
    free(wt->dirs);
    free(wt);
}

static const char *watch_rel(struct watch *wt, int wd)
{
    for (size_t i = 0; i < wt->ndirs; i++)
        if (wt->dirs[i].wd == wd)
            return wt->dirs[i].rel;
    return NULL;
}

/* Adds dir root/rel (and, if recursive, everything below). Errors below the root are
 * skipped (a directory may vanish while we walk); only the root's failure counts. */
static int watch_add(struct watch *wt, const char *rel)
{
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s%s%s", wt->root, rel[0] ? "/" : "", rel) >= (int)sizeof path)
        return -1;
    if (wt->ndirs >= WATCH_MAX_DIRS) {
        errno = ENOSPC;
        return -1;
    }
    /* A directory below the root (found by the walk, or created since) may be a
     * volume's mount point by now: checked without asking FUSE, and skipped. The root
     * was resolved by agent_req_path. */
    struct stat st;
    if (rel[0] && (agent_resolve_lstat(path, &st) < 0 || !S_ISDIR(st.st_mode)))
        return -1;
    int wd = inotify_add_watch(wt->fd, path, WATCH_MASK);
    if (wd < 0)
        return -1;
    if (!watch_rel(wt, wd)) {
        if (wt->ndirs == wt->cap) {
            size_t cap = wt->cap ? wt->cap * 2 : 16;
            struct watch_dir *d = realloc(wt->dirs, cap * sizeof *d);
            if (!d)
                return -1;
            wt->dirs = d;
            wt->cap = cap;
        }
        char *r = strdup(rel);
        if (!r)
            return -1;
        wt->dirs[wt->ndirs++] = (struct watch_dir){.wd = wd, .rel = r};
    }
    if (!wt->recursive)
        return 0;
    DIR *d = opendir(path);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        if (de->d_type != DT_DIR || strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        char sub[PATH_MAX];
        if (snprintf(sub, sizeof sub, "%s%s%s", rel, rel[0] ? "/" : "", de->d_name) < (int)sizeof sub)
            watch_add(wt, sub);
    }
    if (d)
        closedir(d);
    return 0;
}

static const char *watch_op(uint32_t mask)
{
    if (mask & (IN_CREATE | IN_MOVED_TO))
        return "create";
    if (mask & IN_MODIFY)
        return "write";
    if (mask & (IN_DELETE | IN_DELETE_SELF))
        return "remove";
    if (mask & IN_MOVED_FROM)
        return "rename";
    if (mask & IN_ATTRIB)
        return "chmod";
    return NULL;
}

static void watch_event(struct watch *wt, const struct inotify_event *ev)
{
    if (ev->mask & IN_Q_OVERFLOW) {
        agent_chan_event(wt->ch, json_pack("{s:s}", "type", "overflow"));
        return;
    }
    const char *rel = watch_rel(wt, ev->wd), *op = watch_op(ev->mask);
    if (!rel || !op)
        return;
    char name[PATH_MAX];
    const char *leaf = ev->len ? ev->name : "";
    if (snprintf(name, sizeof name, "%s%s%s", rel, rel[0] && leaf[0] ? "/" : "", leaf) >= (int)sizeof name)
        return;
    json_t *fs = json_pack("{s:s, s:s, s:s}", "type", "fs", "name", name, "op", op);
    char full[PATH_MAX], shown[PATH_MAX];
    struct stat st;
    /* Best effort: the entry may be gone again by now (then the event has no stat). */
    if (fs && wt->stat &&
        snprintf(full, sizeof full, "%s%s%s", wt->root, strcmp(wt->root, "/") && name[0] ? "/" : "",
                 name) < (int)sizeof full &&
        snprintf(shown, sizeof shown, "%s%s%s", wt->shown, strcmp(wt->shown, "/") && name[0] ? "/" : "",
                 name) < (int)sizeof shown &&
        agent_resolve_lstat(full, &st) == 0)
        json_object_set_new(fs, "stat", agent_fs_stat_json(shown, full, &st));
    agent_chan_event(wt->ch, fs);
    if (wt->recursive && (ev->mask & IN_ISDIR) && (ev->mask & (IN_CREATE | IN_MOVED_TO)))
        watch_add(wt, name);
}

static void watch_readable(struct agent_watch *aw, uint32_t events)
{
    struct watch *wt = aw->arg;
    if (agent_conn_congested(wt->ch->conn)) {
        agent_loop_set(&wt->w, 0); /* on_writable turns it back on */
        return;
    }
    char buf[16384] __attribute__((aligned(__alignof__(struct inotify_event))));
    ssize_t n = read(wt->fd, buf, sizeof buf);
    for (ssize_t off = 0; n > 0 && off + (ssize_t)sizeof(struct inotify_event) <= n;) {
        const struct inotify_event *ev = (const struct inotify_event *)(buf + off);
        watch_event(wt, ev);
        off += (ssize_t)sizeof *ev + ev->len;
    }
}

static void watch_on_writable(struct agent_chan *ch)
{
    struct watch *wt = ch->impl;
    agent_loop_set(&wt->w, EPOLLIN);
}

static void watch_on_close(struct agent_chan *ch)
{
    watch_free(ch->impl);
}

static const struct agent_chan_ops watch_ops = {
    .on_writable = watch_on_writable,
    .on_close = watch_on_close,
};

void agent_op_watch(struct agent_chan *ch, json_t *req)
{
    struct agent_user u;
    struct watch *wt = calloc(1, sizeof *wt);
    if (!wt)
        return agent_chan_fail(ch, FRAME_E_INTERNAL, "out of memory");
    wt->fd = -1;
    if (agent_req_user(ch, req, &u) < 0 || agent_req_path(ch, req, "path", &u, true, wt->shown, wt->root) < 0 ||
        agent_req_bool(ch, req, "recursive", false, &wt->recursive) < 0 ||
        agent_req_bool(ch, req, "stat", false, &wt->stat) < 0) {
        free(wt);
        return agent_chan_close(ch);
    }
    wt->ch = ch;
    wt->fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    wt->w = (struct agent_watch){.fd = wt->fd, .fn = watch_readable, .arg = wt};
    if (wt->fd < 0 || watch_add(wt, "") < 0 || agent_loop_set(&wt->w, EPOLLIN) < 0) {
        agent_chan_errno(ch, errno, wt->shown);
        if (wt->fd >= 0)
            watch_free(wt);
        else
            free(wt);
        return agent_chan_close(ch);
    }
    ch->impl = wt;
    ch->ops = &watch_ops;
    agent_chan_event(ch, json_pack("{s:s}", "type", "watching"));
}
