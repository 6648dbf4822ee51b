/* vm_harness: helpers shared by the VM integration test and the VM benchmark: finding
 * the guest artifacts, running the loop until something happened, and waiting for the
 * agent's HELLO frame (the definition of "agent ready" used by both).
 *
 * Header-only (static functions) because each unit test and each bench program is a separate
 * programs with no shared object of their own. */
#ifndef SPACE_VM_HARNESS_H
#define SPACE_VM_HARNESS_H

#include <errno.h>
#include <limits.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "daemon/vm/vm.h"
#include "frame.h"

struct vmh_guest {
    char kernel[512];
    char initramfs[512];
    char rootfs[512];
};

/* Locates kernel, agent initramfs and base rootfs under $SPACE_GUEST (default
 * build/guest); $SPACE_INITRAMFS overrides the initramfs. Returns NULL when all exist,
 * else a message saying what is missing and how to build it. */
static const char *vmh_find_guest(struct vmh_guest *g)
{
    static char why[700];
    const char *dir = getenv("SPACE_GUEST") ? getenv("SPACE_GUEST") : "build/guest";
    const char *ird = getenv("SPACE_INITRAMFS");
    snprintf(g->kernel, sizeof(g->kernel), "%s/vmlinux", dir);
    if (ird)
        snprintf(g->initramfs, sizeof(g->initramfs), "%s", ird);
    else
        snprintf(g->initramfs, sizeof(g->initramfs), "%s/initramfs.cpio", dir);
    snprintf(g->rootfs, sizeof(g->rootfs), "%s/templates/base/rootfs.ext4", dir);
    char *files[] = { g->kernel, g->initramfs, g->rootfs };
    for (int i = 0; i < 3; i++) {
        char abs[PATH_MAX];
        if (realpath(files[i], abs) && strlen(abs) < sizeof(g->kernel))
            strcpy(files[i], abs); /* the jail exposes files at their absolute paths */
        if (access(files[i], R_OK) < 0) {
            snprintf(why, sizeof(why), "%s missing (run `make templates` to build the guest)",
                     files[i]);
            return why;
        }
    }
    return NULL;
}

static double vmh_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void vmh_tick(evutil_socket_t fd, short what, void *arg)
{
}

/* Runs the loop until *flag becomes nonzero or timeout_ms passes. Returns *flag. */
static int vmh_run_until(struct event_base *base, volatile int *flag, double timeout_ms)
{
    double end = vmh_now_ms() + timeout_ms;
    struct event *t = evtimer_new(base, vmh_tick, NULL);
    while (!*flag && vmh_now_ms() < end) {
        double left = end - vmh_now_ms();
        struct timeval tv = { (long)(left / 1000), (long)((long)left % 1000) * 1000 };
        evtimer_add(t, &tv);
        event_base_loop(base, EVLOOP_ONCE);
    }
    event_free(t);
    return *flag;
}

/* Waits (on the loop) for the agent's HELLO frame on fd. Owned by the caller; fd is
 * closed by vmh_hello_stop. */
struct vmh_hello {
    struct event *ev;
    struct event *retry; /* re-sends our HELLO until answered */
    int fd;
    uint8_t buf[8192];
    size_t len;
    int got;          /* 1: HELLO received, -1: stream error/EOF */
    double at_ms;     /* vmh_now_ms() when it arrived */
};

static void vmh_hello_read(evutil_socket_t fd, short what, void *arg)
{
    struct vmh_hello *h = arg;
    ssize_t n = read(h->fd, h->buf + h->len, sizeof(h->buf) - h->len);
    if (n <= 0) {
        if (n == 0 || (errno != EAGAIN && errno != EINTR))
            h->got = -1;
        return;
    }
    h->len += (size_t)n;
    struct frame f;
    size_t used;
    const char *why;
    if (frame_parse(h->buf, h->len, &f, &used, &why) == FRAME_PARSE_OK && h->got == 0) {
        h->got = f.type == FRAME_HELLO ? 1 : -1;
        h->at_ms = vmh_now_ms();
        event_del(h->ev);
        event_del(h->retry);
    } else if (h->len == sizeof(h->buf)) {
        h->got = -1;
    }
}

/* The agent answers the host's HELLO with its own (docs/agent-protocol.md). A HELLO that
 * reaches the guest while the agent is still closing the previous connection's port is
 * discarded by the guest driver, so it is repeated until answered (a second HELLO just
 * restarts the agent's session). */
static void vmh_hello_send(struct vmh_hello *h)
{
    static const char body[] = "{\"version\":1,\"min_version\":1,\"software\":\"vm-harness\"}";
    uint8_t msg[FRAME_HEADER_SIZE + sizeof(body)];
    frame_encode_header(msg, FRAME_CONTROL_CHANNEL, FRAME_HELLO, FRAME_STREAM_NONE,
                        sizeof(body) - 1);
    memcpy(msg + FRAME_HEADER_SIZE, body, sizeof(body) - 1);
    if (write(h->fd, msg, FRAME_HEADER_SIZE + sizeof(body) - 1) < 0)
        h->got = -1;
}

static void vmh_hello_retry(evutil_socket_t fd, short what, void *arg)
{
    struct vmh_hello *h = arg;
    if (h->got == 0)
        vmh_hello_send(h);
}

static void vmh_hello_start(struct vmh_hello *h, struct event_base *base, int fd)
{
    memset(h, 0, sizeof(*h));
    h->fd = fd;
    h->ev = event_new(base, fd, EV_READ | EV_PERSIST, vmh_hello_read, h);
    h->retry = event_new(base, -1, EV_PERSIST, vmh_hello_retry, h);
    struct timeval tv = { 2, 0 };
    event_add(h->ev, NULL);
    event_add(h->retry, &tv);
    vmh_hello_send(h);
}

static void vmh_hello_stop(struct vmh_hello *h)
{
    if (h->retry)
        event_free(h->retry);
    h->retry = NULL;
    if (h->ev)
        event_free(h->ev);
    if (h->fd >= 0)
        close(h->fd);
    h->ev = NULL;
    h->fd = -1;
}

/* Synchronous overlay creation for tests: runs the loop until qemu-img finished. */
struct vmh_done {
    int done;
    int err;
    char msg[512];
};

static void vmh_done_cb(struct vm *vm, int err, const char *msg, void *arg)
{
    struct vmh_done *d = arg;
    d->done = 1;
    d->err = err;
    snprintf(d->msg, sizeof(d->msg), "%s", msg ? msg : "");
}

static int vmh_overlay(struct event_base *base, const char *backing, const char *fmt,
                       const char *overlay)
{
    struct vmh_done d = { 0 };
    int r = vm_disk_overlay_create(base, backing, fmt, overlay, vmh_done_cb, &d);
    if (r)
        return r;
    vmh_run_until(base, &d.done, 30000);
    if (d.err)
        fprintf(stderr, "overlay: %s\n", d.msg);
    return d.done ? d.err : VM_E_TIMEOUT;
}

#endif
