/* agent_proc: processes started by `exec`. They belong to the agent, not to a channel:
 * when the host goes away they keep running detached, their output waits in a bounded
 * per-stream buffer (then the process blocks on its full pipe), and `attach` picks them
 * up again. Output is read from a process only while there is room in that buffer,
 * and the buffer is emptied only as the host grants credit, so memory stays bounded
 * however fast a process writes. The ops themselves are declared in ops.h. */
#ifndef SPACE_AGENT_PROC_H
#define SPACE_AGENT_PROC_H

#include <jansson.h>

#define AGENT_PROC_MAX       1024            /* running processes */
#define AGENT_PROC_KEEP      64              /* exited, not yet reported, kept for attach */
#define AGENT_PROC_OUTBUF    (64 * 1024)     /* buffered output per stream */

/* Reaps every exited child (waitpid(-1)): ours are reported, orphans re-parented to
 * PID 1 are just collected. Called on SIGCHLD. */
void agent_proc_reap(void);

/* Processes known (running or kept after exit). */
unsigned agent_proc_count(void);

/* Replaces the sandbox default environment added to every later exec (takes env, an
 * object of strings, or NULL for none). */
void agent_proc_set_env(json_t *env);

#endif
