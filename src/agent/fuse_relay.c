/* fuse_relay.c: `mount`: a volume mounted in the guest through FUSE, whose requests are
 * relayed to the host over the op's channel (the host's space-volfs answers them).
 *
 * {"op":"mount","path":"/mnt/data"} creates the directory, opens /dev/fuse, mounts
 * `fuse` there (fd=N,rootmode=40000,user_id=0,group_id=0,allow_other; nosuid, nodev),
 * sends EVENT {"type":"mounted"} and then relays: each FUSE request the kernel queues
 * (one read of /dev/fuse, at most AGENT_FUSE_MSG_MAX bytes) goes out as DATA OUT; the
 * host's DATA IN is a byte stream of whole FUSE replies, each framed by its header's
 * length, and each is written to /dev/fuse in one write as the kernel requires. Bounds:
 * /dev/fuse is read only while the previous request has left (so at most one request
 * waits here, plus the OUT credit in flight), and IN bytes are held until their reply is
 * complete, which the IN window (256 KiB) bounds; a reply header announcing less than a
 * header or more than AGENT_FUSE_MSG_MAX ends the mount (host bug).
 *
 * The mount lives as long as the channel: when the host closes it, ends IN, or the
 * connection goes (a snapshot restore, a spaced restart: the host mounts again on the
 * next connection), the agent detaches the mount (MNT_DETACH) and closes /dev/fuse, so
 * the kernel fails every pending and later request (ENOTCONN) instead of hanging. The
 * kernel ending the mount (umount in the guest) reads as ENODEV: EOF OUT, then CLOSE.
 *
 * The agent itself must never touch a mounted path: its file ops would wait for a
 * reply only this same loop can relay. Each mount's device is kept (read at mount time
 * without a FUSE request) so that agent_resolve can refuse every path that leads onto
 * it, however it gets there (resolve.h; docs/agent-protocol.md "mount"). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "agent/fs.h"
#include "agent/fuse_relay.h"
#include "agent/loop.h"
#include "agent/ops.h"
#include "agent/req.h"

struct fuse_relay {
    struct agent_chan *ch;   /* our channel */
    int fd;                  /* /dev/fuse of this mount (nonblocking), owned */
    struct agent_watch w;
    struct agent_buf out;    /* one request read from /dev/fuse, not yet sent */
    struct agent_buf in;     /* reply bytes from the host, up to one incomplete reply */
    bool dev_gone;           /* /dev/fuse said ENODEV: the mount is gone */
    dev_t dev;               /* the mount's device (its files' st_dev) */
    char path[PATH_MAX];     /* the mount point */
    struct fuse_relay *next; /* fuse_mounts list */
};

static struct fuse_relay *fuse_mounts;
static unsigned fuse_count;

bool agent_fuse_is_volume(dev_t dev)
{
    for (struct fuse_relay *r = fuse_mounts; r; r = r->next)
        if (r->dev == dev)
            return true;
    return false;
}

size_t agent_fuse_reply_len(const uint8_t *p, size_t n)
{
    if (n < 4)
        return 0;
    uint32_t len;
    memcpy(&len, p, 4); /* fuse_out_header.len, host byte order (same machine) */
    if (len < AGENT_FUSE_HDR_MIN || len > AGENT_FUSE_MSG_MAX)
        return (size_t)-1;
    return len;
}

/* Unmounts, closes, unlinks from the list and frees. */
static void relay_free(struct fuse_relay *r)
{
    agent_loop_del(&r->w);
    umount2(r->path, MNT_DETACH);
    close(r->fd);
    agent_buf_free(&r->out);
    agent_buf_free(&r->in);
    for (struct fuse_relay **pp = &fuse_mounts; *pp; pp = &(*pp)->next)
        if (*pp == r) {
            *pp = r->next;
            break;
        }
    fuse_count--;
    free(r);
}

static void relay_fail(struct fuse_relay *r, const char *code, const char *msg)
{
    struct agent_chan *ch = r->ch;
    agent_chan_error(ch, code, "mount %s: %s", r->path, msg);
    relay_free(r);
    agent_chan_close(ch);
}

/* Writes every complete reply to /dev/fuse, granting its bytes back. 0 or -1 (failed). */
static int relay_flush_in(struct fuse_relay *r)
{
    while (r->in.len) {
        size_t len = agent_fuse_reply_len(agent_buf_peek(&r->in), r->in.len);
        if (len == (size_t)-1) {
            relay_fail(r, FRAME_E_PROTOCOL, "reply length out of range");
            return -1;
        }
        if (len == 0 || r->in.len < len)
            return 0;
        ssize_t w = write(r->fd, agent_buf_peek(&r->in), len);
        /* ENOENT: the request was interrupted meanwhile; the reply is simply dropped. */
        if (w < 0 && errno != ENOENT && errno != ENODEV) {
            char m[80];
            snprintf(m, sizeof m, "writing a reply: %s", strerror(errno));
            relay_fail(r, FRAME_E_INVALID_ARGUMENT, m);
            return -1;
        }
        agent_buf_drop(&r->in, len);
        agent_chan_grant(r->ch, (uint32_t)len);
    }
    return 0;
}

/* Moves what credits and buffers allow; may end the mount (and free r). */
static void relay_service(struct fuse_relay *r)
{
    if (relay_flush_in(r) < 0)
        return;
    static uint8_t tmp[AGENT_FUSE_MSG_MAX];
    while (!r->dev_gone && r->out.len == 0) {
        ssize_t n = read(r->fd, tmp, sizeof tmp);
        if (n < 0 && (errno == EINTR || errno == ENOENT))
            continue;
        if (n < 0 && errno == EAGAIN)
            break;
        if (n <= 0) {
            r->dev_gone = true; /* ENODEV: unmounted in the guest */
            break;
        }
        if (agent_buf_add(&r->out, tmp, (size_t)n) < 0)
            return relay_fail(r, FRAME_E_INTERNAL, "out of memory");
    }
    size_t room;
    while (r->out.len && (room = agent_chan_room(r->ch, FRAME_STREAM_OUT)) > 0) {
        size_t n = r->out.len < room ? r->out.len : room;
        agent_chan_data(r->ch, FRAME_STREAM_OUT, agent_buf_peek(&r->out), n);
        agent_buf_drop(&r->out, n);
    }
    if (r->dev_gone && r->out.len == 0) {
        struct agent_chan *ch = r->ch;
        agent_chan_eof(ch, FRAME_STREAM_OUT);
        relay_free(r);
        return agent_chan_close(ch);
    }
    agent_loop_set(&r->w, r->out.len == 0 ? EPOLLIN : 0);
}

static void relay_ready(struct agent_watch *w, uint32_t events)
{
    (void)events;
    relay_service(w->arg);
}

static void relay_on_data(struct agent_chan *ch, const uint8_t *p, size_t n)
{
    struct fuse_relay *r = ch->impl;
    /* Bounded by the IN window: the host never has more than it in flight. */
    if (agent_buf_add(&r->in, p, n) < 0)
        return relay_fail(r, FRAME_E_INTERNAL, "out of memory");
    relay_service(r);
}

static void relay_on_eof(struct agent_chan *ch)
{
    struct fuse_relay *r = ch->impl;
    relay_free(r);
    agent_chan_close(ch);
}

static void relay_on_writable(struct agent_chan *ch) { relay_service(ch->impl); }
static void relay_on_close(struct agent_chan *ch) { relay_free(ch->impl); }

static const struct agent_chan_ops relay_ops = {
    .on_data = relay_on_data,
    .on_eof = relay_on_eof,
    .on_writable = relay_on_writable,
    .on_close = relay_on_close,
};

void agent_op_mount(struct agent_chan *ch, json_t *req)
{
    struct agent_user root = {.uid = 0, .gid = 0};
    snprintf(root.home, sizeof root.home, "/");
    char path[PATH_MAX];
    if (agent_req_path(ch, req, "path", &root, true, NULL, path) < 0)
        return agent_chan_close(ch);
    if (strcmp(path, "/") == 0)
        return agent_chan_fail(ch, FRAME_E_INVALID_ARGUMENT, "mount: path must not be /");
    if (fuse_count >= AGENT_FUSE_MOUNTS_MAX)
        return agent_chan_fail(ch, FRAME_E_TOO_MANY, "%d mounts are open", AGENT_FUSE_MOUNTS_MAX);
    if (agent_fs_mkdirs(path, 0755, &root, false) < 0 && errno != EEXIST)
        return agent_chan_fail_errno(ch, errno, "mount: creating the mount point");
    int fd = open("/dev/fuse", O_RDWR | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return agent_chan_fail_errno(ch, errno, "mount: /dev/fuse (is fuse.ko loaded?)");
    char opts[128];
    snprintf(opts, sizeof opts, "fd=%d,rootmode=40000,user_id=0,group_id=0,allow_other", fd);
    if (mount("space-volume", path, "fuse", MS_NOSUID | MS_NODEV, opts) < 0) {
        int e = errno;
        close(fd);
        return agent_chan_fail_errno(ch, e, "mount");
    }
    /* The new mount's device, read as agent_resolve reads devices: AT_STATX_DONT_SYNC
     * sends FUSE nothing (the host has not even answered INIT yet). */
    struct statx sx;
    struct fuse_relay *r = NULL;
    if (statx(AT_FDCWD, path, AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT | AT_STATX_DONT_SYNC, STATX_TYPE,
              &sx) < 0 || !(r = calloc(1, sizeof *r))) {
        int e = errno; /* statx's, or calloc's ENOMEM */
        umount2(path, MNT_DETACH);
        close(fd);
        return agent_chan_fail_errno(ch, e, "mount: reading the mount's device");
    }
    r->dev = makedev(sx.stx_dev_major, sx.stx_dev_minor);
    r->ch = ch;
    r->fd = fd;
    snprintf(r->path, sizeof r->path, "%s", path);
    r->w = (struct agent_watch){.fd = fd, .fn = relay_ready, .arg = r};
    r->next = fuse_mounts;
    fuse_mounts = r;
    fuse_count++;
    ch->impl = r;
    ch->ops = &relay_ops;
    agent_chan_event(ch, json_pack("{s:s, s:s}", "type", "mounted", "path", path));
    relay_service(r);
}
