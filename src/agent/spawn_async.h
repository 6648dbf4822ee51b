/* agent_spawn_async: agent_spawn_start run on a thread of its own, its result handed back
 * to the loop.
 *
 * Why: the spawn is a clone(CLONE_VM | CLONE_VFORK), which suspends the calling thread
 * until the child has exec'd (spawn.h). The exec, the chdir before it and the PATH search
 * read the file system, and a path on a volume mount is answered through FUSE, which only
 * the loop relays (fuse_relay.c). Spawned from the loop, a command on a mount (argv[0], a
 * PATH directory or its cwd) waited for the loop while the loop waited for it: the agent
 * and the sandbox hung. A thread per spawn keeps the vfork (no page-table copy) and leaves
 * the loop free to relay the exec's FUSE requests.
 *
 * The result comes back through a pipe the loop watches; `done` runs on the loop. A child
 * that exits before the loop has heard of its pid is reaped by the loop's reaper as an
 * unknown pid: agent_spawn_async_reaped keeps such statuses while spawns are in flight so
 * the caller can claim them (agent_spawn_async_claim). Prefix agent_spawn_async_. */
#ifndef SPACE_AGENT_SPAWN_ASYNC_H
#define SPACE_AGENT_SPAWN_ASYNC_H

#include <stdbool.h>
#include <sys/types.h>

#include "agent/spawn.h"

struct agent_spawn_async;
/* On the loop: the spawn's result (pid > 0, or -1 with err and stage as agent_spawn_start
 * reports them). The job is freed after this returns. */
typedef void (*agent_spawn_async_fn)(void *arg, pid_t pid, int err, enum agent_spawn_stage stage);

/* Starts s on a new thread. s, and everything it points to, must stay valid until fn has
 * run. `prepare`, if not NULL, runs on that thread first (it may touch user paths: e.g. a
 * default cwd's stat). 0, or -1 (errno; fn will not run). */
int agent_spawn_async_start(const struct agent_spawn *s, void (*prepare)(void *arg),
                            agent_spawn_async_fn fn, void *arg);

/* Spawns started and not yet delivered. */
unsigned agent_spawn_async_pending(void);

/* From the loop's reaper, for a pid it knows nothing of: kept (bounded) while spawns are
 * in flight, since it may be a child whose spawn has not been delivered yet. */
void agent_spawn_async_reaped(pid_t pid, int status);
/* The status of pid if the reaper kept one (then forgotten): true and *status set. */
bool agent_spawn_async_claim(pid_t pid, int *status);

#endif
