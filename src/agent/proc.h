/* agent_proc: processes started by `exec`. They belong to the agent, not to a channel:
 * when the host goes away they keep running detached (unless started with "confirm" and
 * not yet confirmed: then they are killed), their output waits in a bounded per-stream
 * buffer (then the process blocks on its full pipe), and `attach` picks them up again.
 * Output is read from a process only while there is room in that buffer, and the
 * buffer is emptied only as the host grants credit, so memory stays bounded however
 * fast a process writes. The ops themselves are declared in ops.h; exec.c builds and
 * runs the spawn and hands the result here (the agent_proc_ start functions below). */
#ifndef SPACE_AGENT_PROC_H
#define SPACE_AGENT_PROC_H

#include <jansson.h>
#include <stdbool.h>
#include <sys/types.h>

#include "agent/conn.h"

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
/* That environment (borrowed), or NULL. */
json_t *agent_proc_env(void);

/* ---- for exec.c: a process's start ---- */

struct proc;
/* Processes running or starting (exec's limit is AGENT_PROC_MAX). */
unsigned agent_proc_running(void);
/* A process whose spawn is in flight, channel ch attached (the channel is the process's
 * from now on: stdin and a pty resize are kept until the start); confirm: exec's
 * "confirm". Takes info (what `ps` shows) on success; NULL on OOM. */
struct proc *agent_proc_new_starting(struct agent_chan *ch, json_t *info, bool pty, bool confirm);
/* The spawn failed: reported on p's channel (if it still has one: ERROR err with msg,
 * then CLOSE), p freed. */
void agent_proc_start_failed(struct proc *p, int err, const char *msg);
/* The spawn succeeded: p takes the loop's descriptors (out_fd; err_fd and in_fd, -1 if
 * none; relayed: pipe relays, else out_fd is the PTY master and in_fd a dup of it) and
 * its chosen cwd, is listed, and reports "started". */
void agent_proc_started(struct proc *p, pid_t pid, const char *cwd, int out_fd, int err_fd,
                        int in_fd, bool relayed);

#endif
