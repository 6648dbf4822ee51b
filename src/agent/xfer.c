/* xfer.c: `read` and `write`: file content streamed under credits, never held whole. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "agent/fs.h"
#include "agent/ops.h"
#include "agent/req.h"

/* An upload's IN window, granted when the target is open (the protocol starts every
 * stream at FRAME_WINDOW_INITIAL). Bytes are written to the file as each frame arrives,
 * so the window costs the agent no memory; it only lets the host keep more frames in
 * flight, which under TCG's long guest round trips is what limits an upload's rate
 * (as FILES_DOWNLOAD_WINDOW does the other way). */
#define XFER_WRITE_WINDOW (2048u * 1024)

/* A `read` in progress. */
struct xfer_read {
    int fd;
    off_t off;         /* next byte to send */
    uint64_t left;     /* bytes still to send (to EOF if larger than the file) */
};

static void read_end(struct agent_chan *ch, struct xfer_read *r)
{
    close(r->fd);
    free(r);
    agent_chan_close(ch);
}

static void read_pump(struct agent_chan *ch)
{
    struct xfer_read *r = ch->impl;
    uint8_t buf[FRAME_MAX_PAYLOAD];
    size_t room;
    while (r->left && (room = agent_chan_room(ch, FRAME_STREAM_OUT)) > 0) {
        size_t want = room < r->left ? room : (size_t)r->left;
        ssize_t n = pread(r->fd, buf, want, r->off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            agent_chan_errno(ch, errno, "read");
            return read_end(ch, r);
        }
        if (n == 0)
            break;
        agent_chan_data(ch, FRAME_STREAM_OUT, buf, (size_t)n);
        r->off += n;
        r->left -= (uint64_t)n;
        if ((size_t)n < want)
            break; /* short read: end of file */
    }
    if (r->left && room == 0)
        return; /* wait for credit or for the output queue to drain */
    agent_chan_eof(ch, FRAME_STREAM_OUT);
    read_end(ch, r);
}

static void read_on_close(struct agent_chan *ch)
{
    struct xfer_read *r = ch->impl;
    close(r->fd);
    free(r);
}

static const struct agent_chan_ops read_ops = {
    .on_writable = read_pump,
    .on_close = read_on_close,
};

void agent_op_read(struct agent_chan *ch, json_t *req)
{
    struct agent_user u;
    char shown[PATH_MAX], path[PATH_MAX];
    long long offset, length;
    if (agent_req_user(ch, req, &u) < 0 || agent_req_path(ch, req, "path", &u, true, shown, path) < 0 ||
        agent_req_int(ch, req, "offset", 0, INT64_MAX, 0, &offset) < 0 ||
        agent_req_int(ch, req, "length", 0, INT64_MAX, INT64_MAX, &length) < 0)
        return agent_chan_close(ch);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        return agent_chan_fail_errno(ch, e, shown);
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        if (S_ISDIR(st.st_mode))
            return agent_chan_fail(ch, FRAME_E_IS_DIR, "%s is a directory", shown);
        return agent_chan_fail(ch, FRAME_E_INVALID_ARGUMENT, "%s is not a regular file", shown);
    }
    struct xfer_read *r = malloc(sizeof *r);
    if (!r) {
        close(fd);
        return agent_chan_fail(ch, FRAME_E_INTERNAL, "out of memory");
    }
    *r = (struct xfer_read){.fd = fd, .off = (off_t)offset, .left = (uint64_t)length};
    agent_chan_event(ch, json_pack("{s:s, s:o}", "type", "stat", "stat", agent_fs_stat_json(shown, path, &st)));
    ch->impl = r;
    ch->ops = &read_ops;
    read_pump(ch);
}

/* A `write` in progress. Plain files are written to `tmp` and renamed at EOF, so a
 * broken upload leaves the old content; appends, special targets and "in_place"
 * writes (E2B's, which keep the inode) go direct. */
struct xfer_write {
    int fd;
    char path[PATH_MAX];   /* target (resolved) */
    char shown[PATH_MAX];  /* target as the request named it */
    char tmp[PATH_MAX];    /* temporary file, "" when writing the target directly */
};

static void write_free(struct xfer_write *w, bool keep)
{
    close(w->fd);
    if (w->tmp[0] && !keep)
        unlink(w->tmp);
    free(w);
}

static void write_on_data(struct agent_chan *ch, const uint8_t *p, size_t n)
{
    struct xfer_write *w = ch->impl;
    for (size_t done = 0; done < n;) {
        ssize_t k = write(w->fd, p + done, n - done);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0) {
            agent_chan_errno(ch, errno, w->shown);
            write_free(w, false);
            return agent_chan_close(ch);
        }
        done += (size_t)k;
    }
    agent_chan_grant(ch, (uint32_t)n);
}

static void write_on_eof(struct agent_chan *ch)
{
    struct xfer_write *w = ch->impl;
    struct stat st;
    if (w->tmp[0] && rename(w->tmp, w->path) < 0) {
        agent_chan_errno(ch, errno, w->shown);
        write_free(w, false);
        return agent_chan_close(ch);
    }
    json_t *res = lstat(w->path, &st) == 0 ? json_pack("{s:o}", "stat", agent_fs_stat_json(w->shown, w->path, &st)) : NULL;
    write_free(w, true);
    agent_op_result(ch, res);
}

static void write_on_close(struct agent_chan *ch)
{
    write_free(ch->impl, false);
}

static const struct agent_chan_ops write_ops = {
    .on_data = write_on_data,
    .on_eof = write_on_eof,
    .on_close = write_on_close,
};

/* Opens the destination of a write: fills w->fd (and w->tmp). 0 or -1 with errno. */
static int write_open(struct xfer_write *w, const struct agent_user *u, long long mode,
                      bool append, bool in_place)
{
    char dir[PATH_MAX];
    struct stat st;
    agent_fs_dirname(w->path, dir);
    if (agent_fs_mkdirs(dir, 0755, u, false) < 0)
        return -1;
    bool exists = lstat(w->path, &st) == 0;
    if (!exists && errno != ENOENT)
        return -1;
    if (exists && S_ISDIR(st.st_mode)) {
        errno = EISDIR;
        return -1;
    }
    /* Keep the mode of a file being replaced unless the request sets one. */
    mode_t m = mode >= 0 ? (mode_t)mode : exists ? st.st_mode & 07777 : 0644;
    if (!append && !in_place && (!exists || S_ISREG(st.st_mode))) {
        if (snprintf(w->tmp, sizeof w->tmp, "%s%s.space-upload-XXXXXX", dir,
                     strcmp(dir, "/") ? "/" : "") >= (int)sizeof w->tmp) {
            errno = ENAMETOOLONG;
            return -1;
        }
        w->fd = mkostemp(w->tmp, O_CLOEXEC);
        if (w->fd < 0)
            return -1;
    } else {
        w->tmp[0] = '\0';
        w->fd = open(w->path, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOCTTY |
                     (append ? O_APPEND : O_TRUNC), m);
        if (w->fd < 0)
            return -1;
        if (exists)
            return 0; /* existing target: keep its owner and mode */
    }
    if (fchown(w->fd, u->uid, u->gid) < 0 || fchmod(w->fd, m) < 0)
        return -1;
    return 0;
}

/* The request's optional "xattrs" {name: value}: "user." names, string values of at
 * most AGENT_XATTR_VALUE_MAX bytes, at most AGENT_XATTR_MAX. 0, or -1 after ERROR. */
static int write_xattrs_check(struct agent_chan *ch, json_t *xa)
{
    const char *k;
    json_t *v;
    if (!xa || json_is_null(xa))
        return 0;
    if (!json_is_object(xa) || json_object_size(xa) > AGENT_XATTR_MAX) {
        agent_chan_error(ch, FRAME_E_INVALID_ARGUMENT, "xattrs must be an object of at most %d",
                         AGENT_XATTR_MAX);
        return -1;
    }
    json_object_foreach(xa, k, v) {
        if (strncmp(k, "user.", 5) != 0 || strlen(k) < 6 || strlen(k) > 255 || !json_is_string(v) ||
            json_string_length(v) > AGENT_XATTR_VALUE_MAX) {
            agent_chan_error(ch, FRAME_E_INVALID_ARGUMENT,
                             "xattr \"%.64s\": names are user.<name> (<= 255 bytes), values "
                             "strings of <= %d bytes", k, AGENT_XATTR_VALUE_MAX);
            return -1;
        }
    }
    return 0;
}

/* Drops the "user." xattrs of a file rewritten in place, so it starts without any, as a
 * file written through a temporary does. 0 or -1 with errno. */
static int write_xattrs_clear(int fd)
{
    char names[4096];
    ssize_t n = flistxattr(fd, names, sizeof names);
    for (ssize_t off = 0; n > 0 && off < n; off += (ssize_t)strlen(names + off) + 1)
        if (strncmp(names + off, "user.", 5) == 0 && fremovexattr(fd, names + off) < 0 &&
            errno != ENODATA)
            return -1;
    return 0;
}

/* Sets the checked xattrs on the file being written. 0 or -1 with errno. */
static int write_xattrs_apply(int fd, json_t *xa)
{
    const char *k;
    json_t *v;
    json_object_foreach(xa, k, v) {
        if (fsetxattr(fd, k, json_string_value(v), json_string_length(v), 0) < 0)
            return -1;
    }
    return 0;
}

void agent_op_write(struct agent_chan *ch, json_t *req)
{
    struct agent_user u;
    long long mode;
    bool append, in_place;
    struct xfer_write *w = calloc(1, sizeof *w);
    if (!w)
        return agent_chan_fail(ch, FRAME_E_INTERNAL, "out of memory");
    w->fd = -1;
    if (agent_req_user(ch, req, &u) < 0 || agent_req_path(ch, req, "path", &u, true, w->shown, w->path) < 0 ||
        agent_req_int(ch, req, "mode", 0, 07777, -1, &mode) < 0 ||
        agent_req_bool(ch, req, "append", false, &append) < 0 ||
        agent_req_bool(ch, req, "in_place", false, &in_place) < 0 ||
        write_xattrs_check(ch, json_object_get(req, "xattrs")) < 0) {
        free(w);
        return agent_chan_close(ch);
    }
    json_t *xa = json_object_get(req, "xattrs");
    if (write_open(w, &u, mode, append, in_place) < 0 ||
        (in_place && !append && !w->tmp[0] && write_xattrs_clear(w->fd) < 0) ||
        (json_is_object(xa) && write_xattrs_apply(w->fd, xa) < 0)) {
        agent_chan_errno(ch, errno, w->shown);
        if (w->fd >= 0)
            write_free(w, false);
        else
            free(w);
        return agent_chan_close(ch);
    }
    ch->impl = w;
    ch->ops = &write_ops;
    agent_chan_grant(ch, XFER_WRITE_WINDOW - FRAME_WINDOW_INITIAL);
}
