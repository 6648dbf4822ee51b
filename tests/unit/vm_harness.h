/* vm_harness: helpers shared by the VM integration test and the VM benchmark: finding
 * the guest artifacts, running the loop until something happened, waiting for the
 * agent's HELLO frame (the definition of "agent ready" used by both), the VM callbacks
 * that record what happened to one VM, and a sandbox-like config on its own overlay.
 *
 * Header-only (static functions) because each unit test and each bench program is a
 * separate program with no shared object of their own. The including program sets
 * vmh_base, vmh_guest (vmh_find_guest) and vmh_work (a scratch directory) first. */
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

static struct event_base *vmh_base; /* the program's loop */
static struct vmh_guest vmh_guest;  /* its guest artifacts */
static char vmh_work[64];           /* its scratch directory (run dirs, overlays) */

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
    struct vm_disk_layer chain[2] = {{backing, fmt}, {vmh_guest.rootfs, "raw"}};
    int raw = strcmp(fmt, "raw") == 0;
    int r = vm_disk_overlay_create(base, raw ? &chain[0] : chain, raw ? 1 : 2, overlay,
                                   vmh_done_cb, &d, NULL);
    if (r)
        return r;
    vmh_run_until(base, &d.done, 30000);
    if (d.err)
        fprintf(stderr, "overlay: %s\n", d.msg);
    return d.done ? d.err : VM_E_TIMEOUT;
}

/* ---- one VM's observed life --------------------------------------------------------- */

/* Everything the callbacks observed for one VM (the callbacks' arg). */
struct vmh_obs {
    int ready;             /* on_ready came */
    int ready_err;         /* its error */
    char ready_msg[1200];
    double ready_at;       /* vmh_now_ms() then */
    struct vmh_hello hello; /* HELLO exchange on the latest agent connection */
    int exited;            /* on_exit came */
    enum vm_exit_reason reason;
    char exit_msg[1200];
    char tail[2048];       /* console tail at exit */
    double exit_at;
};

static void vmh_on_ready(struct vm *vm, int err, const char *msg, void *arg)
{
    struct vmh_obs *o = arg;
    o->ready = 1;
    o->ready_err = err;
    o->ready_at = vmh_now_ms();
    snprintf(o->ready_msg, sizeof(o->ready_msg), "%s", msg ? msg : "");
}

static void vmh_on_agent(struct vm *vm, int fd, void *arg)
{
    struct vmh_obs *o = arg;
    vmh_hello_stop(&o->hello);
    vmh_hello_start(&o->hello, vmh_base, fd);
}

static void vmh_on_exit(struct vm *vm, enum vm_exit_reason r, const char *msg, const char *tail,
                        void *arg)
{
    struct vmh_obs *o = arg;
    o->exited = 1;
    o->reason = r;
    o->exit_at = vmh_now_ms();
    snprintf(o->exit_msg, sizeof(o->exit_msg), "%s", msg ? msg : "");
    snprintf(o->tail, sizeof(o->tail), "%s", tail ? tail : "");
    vmh_hello_stop(&o->hello);
}

static const struct vm_callbacks vmh_cbs = { vmh_on_ready, vmh_on_agent, vmh_on_exit };

static void vmh_obs_init(struct vmh_obs *o)
{
    memset(o, 0, sizeof(*o));
    o->hello.fd = -1;
}

/* Kills the VM and waits for its on_exit. Returns o->exited. */
static int vmh_kill_wait(struct vm *vm, struct vmh_obs *o)
{
    vm_kill(vm);
    vmh_run_until(vmh_base, &o->exited, 30000);
    return o->exited;
}

/* ---- a sandbox-like VM config ------------------------------------------------------- */

/* VM `id` with its own run dir and overlay (in vmh_work) over the base rootfs, or over
 * backing_overlay (a template's frozen qcow2 overlay) when given; 1 vCPU, 256 MiB. */
struct vmh_box {
    char id[32];
    char run[128];
    char disk[160];
    struct vm_config cfg; /* points into the box and vmh_guest */
};

/* Returns 0, or -1 when the overlay cannot be made. */
static int vmh_box_init(struct vmh_box *b, const char *id, const char *backing_overlay)
{
    memset(b, 0, sizeof(*b));
    snprintf(b->id, sizeof(b->id), "%s", id);
    snprintf(b->run, sizeof(b->run), "%s/%s", vmh_work, id);
    snprintf(b->disk, sizeof(b->disk), "%s/%s.qcow2", vmh_work, id);
    mkdir(b->run, 0700);
    const char *below = backing_overlay ? backing_overlay : vmh_guest.rootfs;
    if (vmh_overlay(vmh_base, below, backing_overlay ? "qcow2" : "raw", b->disk) != 0)
        return -1;
    b->cfg = (struct vm_config){
        .id = b->id, .vcpus = 1, .mem_mib = 256, .accel = VM_ACCEL_AUTO,
        .kernel = vmh_guest.kernel, .initramfs = vmh_guest.initramfs, .disk = b->disk,
        .run_dir = b->run, .net.tap_fd = -1,
    };
    unsigned n = 0;
    if (backing_overlay)
        b->cfg.backing[n++] = (struct vm_disk_layer){ backing_overlay, "qcow2" };
    b->cfg.backing[n++] = (struct vm_disk_layer){ vmh_guest.rootfs, "raw" };
    b->cfg.n_backing = n;
    return 0;
}

/* pool_prepare_cb (vm/pool.h): ids <arg><n> (arg: a prefix string), run dir and overlay
 * path in vmh_work. */
static int vmh_pool_prepare(struct vm_config *cfg, void *arg)
{
    static unsigned seq;
    static char id[32], run[128], disk[160];
    snprintf(id, sizeof(id), "%s%u", (const char *)arg, seq++);
    snprintf(run, sizeof(run), "%s/%s", vmh_work, id);
    snprintf(disk, sizeof(disk), "%s/%s.qcow2", vmh_work, id);
    mkdir(run, 0700);
    cfg->id = id;
    cfg->run_dir = run;
    cfg->disk = disk;
    return 0;
}

#endif
