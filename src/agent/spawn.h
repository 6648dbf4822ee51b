/* agent_spawn: starting a command's process without copying the agent.
 *
 * fork() copies the agent's page tables and marks its memory copy-on-write, and the
 * agent then takes a fault on each page it writes until the child has exec'd; under TCG
 * every one of those steps is emulated, and a fork+exec of /bin/true timed inside the
 * guest cost a multiple of a CLONE_VM spawn (docs/benchmarks.md, "What shaped these
 * numbers"). So the child is a clone(CLONE_VM | CLONE_VFORK) on a stack of its own, as
 * posix_spawn does: it shares the agent's memory and the calling thread waits until it
 * has exec'd or exited. posix_spawn itself cannot be used: it has no step for a
 * controlling terminal nor for a user switch.
 *
 * Sharing memory restricts the child to system calls on what the parent prepared: no
 * malloc, no environ, and no glibc setuid()/setgroups() (in a process with threads they
 * signal every thread of the agent to switch too); those are raw system calls here, and
 * the PATH search is done by hand on the request's own environment. The child's code is
 * not instrumented by the sanitizers (it runs on a stack they do not know).
 * Prefix agent_spawn_. */
#ifndef SPACE_AGENT_SPAWN_H
#define SPACE_AGENT_SPAWN_H

#include <stdbool.h>
#include <sys/types.h>

#include "agent/users.h"

/* What failed, for the error message: the step the child had reached. */
enum agent_spawn_stage {
    AGENT_SPAWN_START = -1, /* the clone itself */
    AGENT_SPAWN_STDIO = 0,  /* session, controlling terminal, stdio */
    AGENT_SPAWN_USER = 1,   /* groups, gid, uid */
    AGENT_SPAWN_CWD = 2,    /* chdir */
    AGENT_SPAWN_EXEC = 3,   /* the exec, after the PATH search */
};

struct agent_spawn {
    char *const *argv;             /* NULL-terminated; argv[0] searched in envp's PATH */
    char *const *envp;             /* NULL-terminated "K=V": the whole environment */
    const char *cwd;
    const struct agent_user *user; /* groups, gid and uid to switch to */
    bool pty;                      /* out_fd is a PTY slave: made the controlling tty */
    int in_fd, out_fd, err_fd;     /* become 0, 1, 2 (may be the same descriptor) */
};

/* Starts s in a new session with every signal unblocked and at its default action.
 * Returns the child's pid once it has exec'd, or -1 with errno and *stage saying what
 * failed (a child that failed before its exec has been reaped). Descriptors other than
 * 0, 1, 2 are inherited as fork() would: callers open theirs close-on-exec. */
pid_t agent_spawn_start(const struct agent_spawn *s, enum agent_spawn_stage *stage);

#endif
