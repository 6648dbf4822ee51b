/* loop.c: epoll event loop; see loop.h. */
#include "agent/loop.h"

#include <errno.h>
#include <stddef.h>
#include <sys/epoll.h>
#include <unistd.h>

#define LOOP_BATCH 64

static int loop_fd = -1;
static bool loop_stopping;
/* The batch being dispatched, so agent_loop_del can cancel events already fetched. */
static struct epoll_event loop_batch[LOOP_BATCH];
static int loop_batch_n;
static void (*loop_after_batch)(void);

int agent_loop_init(void)
{
    loop_fd = epoll_create1(EPOLL_CLOEXEC);
    loop_stopping = false;
    return loop_fd < 0 ? -1 : 0;
}

void agent_loop_fini(void)
{
    if (loop_fd >= 0)
        close(loop_fd);
    loop_fd = -1;
    loop_batch_n = 0;
}

int agent_loop_set(struct agent_watch *w, uint32_t events)
{
    if (w->added && w->events == events)
        return 0;
    struct epoll_event ev = {.events = events, .data.ptr = w};
    if (epoll_ctl(loop_fd, w->added ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, w->fd, &ev) < 0)
        return -1;
    w->added = true;
    w->events = events;
    return 0;
}

void agent_loop_del(struct agent_watch *w)
{
    if (!w->added)
        return;
    epoll_ctl(loop_fd, EPOLL_CTL_DEL, w->fd, NULL);
    w->added = false;
    w->events = 0;
    for (int i = 0; i < loop_batch_n; i++)
        if (loop_batch[i].data.ptr == w)
            loop_batch[i].data.ptr = NULL;
}

void agent_loop_on_batch(void (*fn)(void))
{
    loop_after_batch = fn;
}

int agent_loop_run(void)
{
    loop_stopping = false;
    while (!loop_stopping) {
        int n = epoll_wait(loop_fd, loop_batch, LOOP_BATCH, -1);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        loop_batch_n = n;
        for (int i = 0; i < n; i++) {
            struct agent_watch *w = loop_batch[i].data.ptr;
            if (w)
                w->fn(w, loop_batch[i].events);
        }
        loop_batch_n = 0;
        if (loop_after_batch)
            loop_after_batch();
    }
    return 0;
}

void agent_loop_stop(void)
{
    loop_stopping = true;
}
