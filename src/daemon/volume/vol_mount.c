/* vol_mount.c: a volume mounted into a sandbox, the relay between the agent's `mount`
 * channel and a jailed space-volfs (vol_mount.h). */
#include "vol_mount.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "daemon/agentc/agentc.h"
#include "daemon/vm/vm_spawn.h"
#include "log.h"
#include "vol_share.h"

/* The descriptor number space-volfs finds the shared budget counter at. */
#define VOLM_SHARE_FD 3

struct volm {
    struct agentc_chan *ch;   /* the agent's mount channel, NULL once closed */
    struct bufferevent *bev;  /* our end of the socketpair (owned) */
    pid_t pid;                /* space-volfs, 0 once reaped */
    int pidfd;                /* its pidfd, -1 if none */
    struct event *exit_ev;    /* pidfd readable: it exited */
    size_t ungranted;         /* guest bytes given to the socket, credit not yet returned */
    bool live;
    struct vol_share *share;  /* the budget counter space-volfs shares (a reference) */
    char label[160];
};

const char *volm_path_problem(const char *p)
{
    static const char *const banned[] = {"/proc", "/sys", "/dev"};
    size_t n = p ? strlen(p) : 0;
    if (n < 2 || p[0] != '/')
        return "must be an absolute path other than /";
    if (n >= 256)
        return "must be under 256 bytes";
    if (p[n - 1] == '/' || strstr(p, "//") || strstr(p, "/./") || strstr(p, "/../") ||
        (n >= 2 && strcmp(p + n - 2, "/.") == 0) || (n >= 3 && strcmp(p + n - 3, "/..") == 0))
        return "must be normalised (no //, /./, /../ or trailing /)";
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)p[i] < 0x20 || p[i] == ',')
            return "must not hold control characters or commas";
    for (size_t i = 0; i < sizeof banned / sizeof banned[0]; i++) {
        size_t b = strlen(banned[i]);
        if (strncmp(p, banned[i], b) == 0 && (p[b] == '\0' || p[b] == '/'))
            return "must not be /proc, /sys, /dev or below them";
    }
    return NULL;
}

/* The mount ended (either side): closes the channel, kills space-volfs. Idempotent. */
static void volm_end(struct volm *m, const char *why)
{
    if (!m->live)
        return;
    m->live = false;
    log_info("volume.mount", "mount=%s event=ended why=\"%s\"", m->label, why);
    if (m->ch) {
        agentc_close(m->ch);
        m->ch = NULL;
    }
    if (m->bev)
        bufferevent_disable(m->bev, EV_READ | EV_WRITE);
    if (m->pid > 0)
        kill(m->pid, SIGKILL);
}

/* ---- guest -> space-volfs -------------------------------------------------------------- */

static void chan_data(void *arg, enum frame_stream stream, const uint8_t *buf, size_t len)
{
    struct volm *m = arg;
    if (stream != FRAME_STREAM_OUT || !m->live)
        return;
    /* Within the credit we granted: at most one window ever waits in the output buffer. */
    bufferevent_write(m->bev, buf, len);
    m->ungranted += len;
}

/* The socket took everything queued: the guest may send that much again. */
static void sock_written(struct bufferevent *bev, void *arg)
{
    struct volm *m = arg;
    (void)bev;
    while (m->ch && m->ungranted) {
        uint32_t g = m->ungranted > FRAME_MAX_CREDIT ? FRAME_MAX_CREDIT : (uint32_t)m->ungranted;
        agentc_grant(m->ch, FRAME_STREAM_OUT, g);
        m->ungranted -= g;
    }
}

/* ---- space-volfs -> guest -------------------------------------------------------------- */

static void sock_read(struct bufferevent *bev, void *arg)
{
    struct volm *m = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    uint8_t tmp[16384];
    size_t n;
    while (m->ch && (n = evbuffer_get_length(in)) > 0 && agentc_queued(m->ch) < VOLM_QUEUE_MAX) {
        int got = evbuffer_remove(in, tmp, n < sizeof tmp ? n : sizeof tmp);
        if (got <= 0 || agentc_write(m->ch, tmp, (size_t)got) < 0)
            return volm_end(m, "agent channel refused data");
    }
    if (m->ch && agentc_queued(m->ch) >= VOLM_QUEUE_MAX)
        bufferevent_disable(bev, EV_READ); /* until on_drain */
}

static void chan_drain(void *arg)
{
    struct volm *m = arg;
    if (!m->live)
        return;
    bufferevent_enable(m->bev, EV_READ);
    sock_read(m->bev, m);
}

static void sock_event(struct bufferevent *bev, short what, void *arg)
{
    (void)bev;
    volm_end(arg, what & BEV_EVENT_EOF ? "space-volfs closed its end" : "socket error");
}

/* ---- the channel ----------------------------------------------------------------------- */

static void chan_error(void *arg, const char *code, const char *message)
{
    struct volm *m = arg;
    char q[300];
    log_warn("volume.mount", "mount=%s event=agent_error code=%s msg=%s", m->label, code,
             log_quote(message, q, sizeof q));
}

static void chan_close(void *arg)
{
    struct volm *m = arg;
    m->ch = NULL; /* agentc frees it after this */
    volm_end(m, "agent closed the mount");
}

static const struct agentc_chan_ops volm_ops = {
    .on_data = chan_data, .on_error = chan_error, .on_close = chan_close,
    .on_drain = chan_drain};

static void volfs_exited(evutil_socket_t fd, short what, void *arg)
{
    struct volm *m = arg;
    (void)fd;
    (void)what;
    if (m->pid > 0 && waitpid(m->pid, NULL, WNOHANG) == m->pid)
        m->pid = 0;
    volm_end(m, "space-volfs exited");
}

/* ---- start and end --------------------------------------------------------------------- */

static int spawn_volfs(const struct volm_spec *spec, int fd, pid_t *pid, char *err,
                       size_t errlen)
{
    char budget[24], share_fd[8];
    snprintf(budget, sizeof budget, "%lld", (long long)spec->budget);
    snprintf(share_fd, sizeof share_fd, "%d", VOLM_SHARE_FD);
    bool shared = spec->has_budget && spec->share;
    char *argv[] = {(char *)spec->volfs, (char *)spec->dir, spec->has_budget ? budget : NULL,
                    shared ? share_fd : NULL, NULL};
    char *envp[] = {"PATH=/usr/bin:/bin", NULL};
    struct vm_spawn s = {.argv = argv, .envp = envp, .log_fd = 2, .jail = spec->jail,
                         .jail_root = spec->jail_root, .serve_fd = fd,
                         .cgroup_fds = {-1, -1, -1}};
    for (int i = 0; i < VM_FD_COUNT; i++)
        s.fds[i] = -1;
    if (shared)
        s.fds[VOLM_SHARE_FD] = vol_share_fd(spec->share);
    if (spec->jail && spec->jail->enabled) {
        if (mkdir(spec->jail_root, 0700) < 0 && errno != EEXIST) {
            snprintf(err, errlen, "jail root %s: %s", spec->jail_root, strerror(errno));
            return -1;
        }
        s.paths[s.n_paths++] = (struct vm_spawn_path){spec->volfs, 0};
        s.paths[s.n_paths++] = (struct vm_spawn_path){spec->dir, 1};
        s.keep_caps = (1ULL << CAP_DAC_OVERRIDE) | (1ULL << CAP_FOWNER);
    }
    return vm_spawn(&s, pid, err, errlen) == 0 ? 0 : -1;
}

struct volm *volm_start(struct event_base *base, struct agentc *agent,
                        const struct volm_spec *spec, char *err, size_t errlen)
{
    int sv[2];
    struct volm *m = calloc(1, sizeof *m);
    if (!m) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    m->pidfd = -1;
    snprintf(m->label, sizeof m->label, "%s", spec->label);
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
        snprintf(err, errlen, "socketpair: %s", strerror(errno));
        free(m);
        return NULL;
    }
    int rc = spawn_volfs(spec, sv[1], &m->pid, err, errlen);
    close(sv[1]);
    if (rc < 0) {
        close(sv[0]);
        free(m);
        return NULL;
    }
    m->live = true;
    evutil_make_socket_nonblocking(sv[0]);
    m->bev = bufferevent_socket_new(base, sv[0], BEV_OPT_CLOSE_ON_FREE);
    if (!m->bev) {
        close(sv[0]);
        snprintf(err, errlen, "out of memory");
        volm_free(m);
        return NULL;
    }
    bufferevent_setcb(m->bev, sock_read, sock_written, sock_event, m);
    bufferevent_setwatermark(m->bev, EV_READ, 0, VOLM_READ_MAX);
    bufferevent_enable(m->bev, EV_READ | EV_WRITE);
    m->pidfd = vm_pidfd_open(m->pid);
    if (m->pidfd >= 0) {
        m->exit_ev = event_new(base, m->pidfd, EV_READ, volfs_exited, m);
        if (m->exit_ev)
            event_add(m->exit_ev, NULL);
    }
    json_t *req = json_pack("{s:s, s:s}", "op", "mount", "path", spec->guest_path);
    m->ch = req ? agentc_open(agent, req, &volm_ops, m, AGENTC_MANUAL_CREDIT, err, errlen) : NULL;
    json_decref(req);
    if (!m->ch) {
        volm_free(m);
        return NULL;
    }
    m->share = spec->share;
    log_info("volume.mount", "mount=%s event=started pid=%d", m->label, (int)m->pid);
    return m;
}

bool volm_live(const struct volm *m) { return m->live; }

size_t volm_buffered(const struct volm *m)
{
    if (!m->bev)
        return 0;
    return evbuffer_get_length(bufferevent_get_output(m->bev)) +
           evbuffer_get_length(bufferevent_get_input(m->bev)) +
           (m->ch ? agentc_queued(m->ch) : 0);
}

void volm_free(struct volm *m)
{
    if (!m)
        return;
    volm_end(m, "released");
    if (m->exit_ev)
        event_free(m->exit_ev);
    if (m->pid > 0) {
        /* SIGKILLed by volm_end: reaped now (it dies at once, a few ms at most). */
        waitpid(m->pid, NULL, 0);
    }
    if (m->pidfd >= 0)
        close(m->pidfd);
    if (m->bev)
        bufferevent_free(m->bev);
    vol_share_leave(m->share);
    free(m);
}
