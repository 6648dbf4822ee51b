/* agent_thread: the one way the agent starts a helper thread (spawns, pipe relays).
 * Prefix agent_thread_. */
#ifndef SPACE_AGENT_THREAD_H
#define SPACE_AGENT_THREAD_H

#include <stddef.h>

/* Starts fn(arg) on a detached thread with a stack of `stack` bytes and every signal
 * blocked: SIGCHLD and the rest must stay pending for the loop's signalfd (a spawned
 * child unblocks its own mask). 0, or -1 with errno (fn will not run). */
int agent_thread_start(void *(*fn)(void *), void *arg, size_t stack);

#endif
