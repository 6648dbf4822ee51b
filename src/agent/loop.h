/* agent_loop: the agent's event loop (epoll). Everything in the agent is nonblocking and
 * driven from here: the host connection, process output and input (PTYs directly, pipes
 * through their relay threads' sockets, relay.h), inotify, SIGCHLD (signalfd) and retry
 * timers (timerfd). The loop is the agent's only thread apart from those relays.
 *
 * A watch is owned by whoever embeds it; the loop only points at it. Removing a watch
 * (agent_loop_del) from inside any callback is safe: pending events for it in the
 * current batch are dropped. */
#ifndef SPACE_AGENT_LOOP_H
#define SPACE_AGENT_LOOP_H

#include <stdbool.h>
#include <stdint.h>

struct agent_watch;
typedef void (*agent_watch_fn)(struct agent_watch *w, uint32_t events);

struct agent_watch {
    int fd;              /* watched descriptor (not owned by the loop) */
    uint32_t events;     /* EPOLLIN/EPOLLOUT currently requested */
    bool added;          /* registered with epoll */
    agent_watch_fn fn;   /* called with the ready events (EPOLLIN/OUT/HUP/ERR) */
    void *arg;           /* owner's context */
};

/* Creates the loop. 0 or -1 (errno). */
int agent_loop_init(void);
/* Closes it (watches must have been removed). */
void agent_loop_fini(void);

/* Sets the interest of w (fd, fn, arg filled in) to `events`, adding it if needed;
 * events 0 keeps it registered but quiet. 0 or -1 (errno). */
int agent_loop_set(struct agent_watch *w, uint32_t events);
/* Unregisters w (no-op if not added). Does not close the fd. */
void agent_loop_del(struct agent_watch *w);

/* Sets a function called after every batch of events (the serve layer flushes output
 * to the host there, once per batch instead of once per frame). NULL for none. */
void agent_loop_on_batch(void (*fn)(void));

/* Runs until agent_loop_stop(). Returns 0, or -1 if epoll failed. */
int agent_loop_run(void);
void agent_loop_stop(void);

#endif
