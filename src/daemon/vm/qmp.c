/* qmp: the QMP client's I/O side: greeting and capability negotiation, an output queue
 * that can carry a file descriptor with a command, id matching, per-command timeouts.
 *
 * Re-entrancy: user callbacks may call qmp_free() (typically from on_close). While a
 * dispatch is running (`depth` > 0) qmp_free only marks the client dead and releases it
 * when the outermost dispatch unwinds. */
#include "qmp.h"
#include "vm.h"

#include <errno.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* A queued outgoing command. `fd` rides on the first byte sent (SCM_RIGHTS). */
struct qmp_out {
    struct qmp_out *next;
    char *buf;   /* owned: serialized command + "\n" */
    size_t len;
    size_t off;  /* bytes already sent */
    int fd;      /* descriptor to pass, or -1 (borrowed: the caller keeps it) */
    int needs_ready; /* 1: wait for capability negotiation before sending */
};

/* A command awaiting its reply. */
struct qmp_pending {
    struct qmp_pending *next;
    uint64_t id;
    qmp_reply_cb cb;
    void *arg;
    struct event *timer; /* owned; NULL without timeout */
    struct qmp *q;
};

struct qmp {
    struct event_base *base;
    int fd;
    struct event *rd, *wr;      /* owned */
    char *in;                   /* owned: partial input line, QMP_LINE_MAX + 1 bytes */
    size_t in_len;
    struct qmp_out *out_head, *out_tail; /* owned queue */
    struct qmp_pending *pending;         /* owned list */
    uint64_t next_id;
    int ready;      /* capabilities negotiated */
    int closed;     /* on_close delivered (or being delivered) */
    int depth;      /* nested dispatches in progress */
    int dead;       /* qmp_free called during a dispatch */
    struct qmp_handlers h;
    void *arg;
};

static void destroy(struct qmp *q);

static void out_free(struct qmp_out *o)
{
    free(o->buf);
    free(o);
}

static void pending_free(struct qmp_pending *p)
{
    if (p->timer)
        event_free(p->timer);
    free(p);
}

static struct qmp_pending *pending_take(struct qmp *q, uint64_t id)
{
    for (struct qmp_pending **pp = &q->pending; *pp; pp = &(*pp)->next) {
        if ((*pp)->id == id) {
            struct qmp_pending *p = *pp;
            *pp = p->next;
            return p;
        }
    }
    return NULL;
}

/* Ends the connection once: fails every pending command, then tells the owner. */
static void close_conn(struct qmp *q, const char *why)
{
    if (q->closed)
        return;
    q->closed = 1;
    event_del(q->rd);
    event_del(q->wr);
    q->depth++;
    while (q->pending && !q->dead) {
        struct qmp_pending *p = q->pending;
        q->pending = p->next;
        if (p->cb)
            p->cb(q, VM_E_EXITED, why, NULL, p->arg);
        pending_free(p);
    }
    if (!q->dead && q->h.on_close)
        q->h.on_close(q, why, q->arg);
    q->depth--;
}

static int flush_out(struct qmp *q)
{
    while (q->out_head) {
        struct qmp_out *o = q->out_head;
        if (o->needs_ready && !q->ready)
            break;
        struct iovec iov = { .iov_base = o->buf + o->off, .iov_len = o->len - o->off };
        union {
            char buf[CMSG_SPACE(sizeof(int))];
            struct cmsghdr align;
        } ctl;
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
        if (o->fd >= 0 && o->off == 0) {
            memset(&ctl, 0, sizeof(ctl));
            mh.msg_control = ctl.buf;
            mh.msg_controllen = sizeof(ctl.buf);
            struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
            c->cmsg_level = SOL_SOCKET;
            c->cmsg_type = SCM_RIGHTS;
            c->cmsg_len = CMSG_LEN(sizeof(int));
            memcpy(CMSG_DATA(c), &o->fd, sizeof(int));
        }
        ssize_t n = sendmsg(q->fd, &mh, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EAGAIN || errno == EINTR) {
                event_add(q->wr, NULL);
                return 0;
            }
            return -1;
        }
        o->off += (size_t)n;
        if (o->off < o->len) {
            event_add(q->wr, NULL);
            return 0;
        }
        q->out_head = o->next;
        if (!q->out_head)
            q->out_tail = NULL;
        out_free(o);
    }
    event_del(q->wr);
    return 0;
}

static int enqueue(struct qmp *q, json_t *msg, int fd, int needs_ready)
{
    char *s = json_dumps(msg, JSON_COMPACT);
    if (!s)
        return -1;
    size_t n = strlen(s);
    struct qmp_out *o = calloc(1, sizeof(*o));
    char *buf = malloc(n + 2);
    if (!o || !buf) {
        free(o);
        free(buf);
        free(s);
        return -1;
    }
    memcpy(buf, s, n);
    buf[n] = '\n';
    free(s);
    o->buf = buf;
    o->len = n + 1;
    o->fd = fd;
    o->needs_ready = needs_ready;
    if (!needs_ready && q->out_head && q->out_head->off == 0) {
        /* Negotiation jumps the queue of commands waiting for it. */
        o->next = q->out_head;
        q->out_head = o;
    } else if (q->out_tail)
        q->out_tail->next = o;
    else
        q->out_head = o;
    q->out_tail = o;
    return 0;
}

static void on_caps_reply(struct qmp *q, int err, const char *msg, json_t *ret, void *arg)
{
    if (err) {
        close_conn(q, "qmp_capabilities refused");
        return;
    }
    q->ready = 1;
    if (flush_out(q) < 0) {
        close_conn(q, "monitor write failed");
        return;
    }
    if (q->h.on_ready)
        q->h.on_ready(q, q->arg);
}

static int send_command(struct qmp *q, const char *cmd, json_t *args, int pass_fd,
                        unsigned timeout_ms, qmp_reply_cb cb, void *arg, int needs_ready);

static void dispatch(struct qmp *q, struct qmp_msg *m)
{
    switch (m->kind) {
    case QMP_MSG_GREETING:
        if (q->ready || send_command(q, "qmp_capabilities", NULL, -1, 0, on_caps_reply,
                                     NULL, 0) < 0)
            close_conn(q, "unexpected greeting");
        return;
    case QMP_MSG_EVENT:
        if (q->h.on_event)
            q->h.on_event(q, m->event, m->data, q->arg);
        return;
    case QMP_MSG_RETURN:
    case QMP_MSG_ERROR: {
        /* A reply without a known id is either late (its command timed out) or forged;
         * both are dropped. */
        struct qmp_pending *p = m->has_id ? pending_take(q, m->id) : NULL;
        if (!p)
            return;
        if (p->cb && m->kind == QMP_MSG_RETURN) {
            p->cb(q, 0, NULL, m->ret, p->arg);
        } else if (p->cb) {
            char msg[512];
            snprintf(msg, sizeof(msg), "%s: %s", m->err_class, m->err_desc);
            p->cb(q, VM_E_QMP, msg, NULL, p->arg);
        }
        pending_free(p);
        return;
    }
    }
}

/* Splits the input buffer into lines and dispatches each. */
static void process_lines(struct qmp *q)
{
    size_t start = 0;
    for (size_t i = 0; i < q->in_len && !q->closed && !q->dead; i++) {
        if (q->in[i] != '\n')
            continue;
        struct qmp_msg m;
        char err[128];
        if (qmp_parse(q->in + start, i - start, &m, err, sizeof(err)) < 0) {
            char why[160];
            snprintf(why, sizeof(why), "malformed QMP line: %s", err);
            close_conn(q, why);
            return;
        }
        dispatch(q, &m);
        qmp_msg_clear(&m);
        start = i + 1;
    }
    if (q->closed || q->dead)
        return;
    memmove(q->in, q->in + start, q->in_len - start);
    q->in_len -= start;
    if (q->in_len > QMP_LINE_MAX)
        close_conn(q, "QMP line too long");
}

static void on_read(evutil_socket_t fd, short what, void *arg)
{
    struct qmp *q = arg;
    q->depth++;
    ssize_t n = read(q->fd, q->in + q->in_len, QMP_LINE_MAX + 1 - q->in_len);
    if (n == 0)
        close_conn(q, "monitor closed");
    else if (n < 0 && errno != EAGAIN && errno != EINTR)
        close_conn(q, "monitor read error");
    else if (n > 0) {
        q->in_len += (size_t)n;
        process_lines(q);
    }
    q->depth--;
    if (q->dead && q->depth == 0)
        destroy(q);
}

static void on_write(evutil_socket_t fd, short what, void *arg)
{
    struct qmp *q = arg;
    q->depth++;
    if (flush_out(q) < 0)
        close_conn(q, "monitor write failed");
    q->depth--;
    if (q->dead && q->depth == 0)
        destroy(q);
}

static void on_timeout(evutil_socket_t fd, short what, void *arg)
{
    struct qmp_pending *p = arg;
    struct qmp *q = p->q;
    if (!pending_take(q, p->id))
        return;
    q->depth++;
    if (p->cb)
        p->cb(q, VM_E_TIMEOUT, "QMP command timed out", NULL, p->arg);
    pending_free(p);
    q->depth--;
    if (q->dead && q->depth == 0)
        destroy(q);
}

static int send_command(struct qmp *q, const char *cmd, json_t *args, int pass_fd,
                        unsigned timeout_ms, qmp_reply_cb cb, void *arg, int needs_ready)
{
    if (q->closed || q->dead) {
        json_decref(args);
        return -1;
    }
    struct qmp_pending *p = calloc(1, sizeof(*p));
    json_t *msg = json_pack("{s:s, s:I}", "execute", cmd, "id", (json_int_t)q->next_id);
    if (!p || !msg) {
        free(p);
        json_decref(msg);
        json_decref(args);
        return -1;
    }
    if (args && json_object_set_new(msg, "arguments", args) < 0) {
        free(p);
        json_decref(msg);
        return -1;
    }
    if (enqueue(q, msg, pass_fd, needs_ready) < 0) {
        free(p);
        json_decref(msg);
        return -1;
    }
    json_decref(msg);
    p->id = q->next_id++;
    p->cb = cb;
    p->arg = arg;
    p->q = q;
    if (timeout_ms) {
        struct timeval tv = { timeout_ms / 1000, (timeout_ms % 1000) * 1000 };
        p->timer = evtimer_new(q->base, on_timeout, p);
        if (p->timer)
            evtimer_add(p->timer, &tv);
    }
    p->next = q->pending;
    q->pending = p;
    /* Sending happens from the loop (write event), so no reply or failure can reach the
     * caller's callback before this call has returned. */
    event_active(q->wr, EV_WRITE, 0);
    return 0;
}

int qmp_command(struct qmp *q, const char *cmd, json_t *args, int pass_fd,
                unsigned timeout_ms, qmp_reply_cb cb, void *arg)
{
    return send_command(q, cmd, args, pass_fd, timeout_ms, cb, arg, 1);
}

struct qmp *qmp_new(struct event_base *base, int fd, const struct qmp_handlers *h, void *arg)
{
    struct qmp *q = calloc(1, sizeof(*q));
    if (!q) {
        close(fd);
        return NULL;
    }
    q->base = base;
    q->fd = fd;
    q->h = *h;
    q->arg = arg;
    q->next_id = 1;
    evutil_make_socket_nonblocking(fd);
    q->in = malloc(QMP_LINE_MAX + 1);
    q->rd = event_new(base, fd, EV_READ | EV_PERSIST, on_read, q);
    q->wr = event_new(base, fd, EV_WRITE, on_write, q);
    if (!q->in || !q->rd || !q->wr) {
        destroy(q);
        return NULL;
    }
    event_add(q->rd, NULL);
    return q;
}

int qmp_is_ready(const struct qmp *q)
{
    return q->ready && !q->closed;
}

static void destroy(struct qmp *q)
{
    while (q->pending) {
        struct qmp_pending *p = q->pending;
        q->pending = p->next;
        pending_free(p);
    }
    while (q->out_head) {
        struct qmp_out *o = q->out_head;
        q->out_head = o->next;
        out_free(o);
    }
    if (q->rd)
        event_free(q->rd);
    if (q->wr)
        event_free(q->wr);
    if (q->fd >= 0)
        close(q->fd);
    free(q->in);
    free(q);
}

void qmp_free(struct qmp *q)
{
    if (!q)
        return;
    if (q->depth > 0) {
        q->dead = 1;
        event_del(q->rd);
        event_del(q->wr);
        return;
    }
    destroy(q);
}
