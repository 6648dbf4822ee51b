/* spawn.c: a command's process started by clone(CLONE_VM | CLONE_VFORK); see spawn.h. */
#include "agent/spawn.h"

#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdint.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define SPAWN_STACK (32 * 1024) /* the child's: a path buffer and a few frames */
#define SPAWN_DEFAULT_PATH "/bin:/usr/bin" /* execvp's when the environment has no PATH */

/* The child's code: runs on memory the sanitizers have not seen as a stack. */
#define SPAWN_CHILD __attribute__((no_sanitize("address", "undefined")))

/* Shared with the child (CLONE_VM): its input, and the failure it reports. */
struct spawn_job {
    const struct agent_spawn *s;
    const char *path;    /* the PATH to search */
    char **sh_argv;      /* {"/bin/sh", <file>, argv[1..], NULL} for a file without #! */
    int stage;           /* written by the child when it fails */
    int err;
};

SPAWN_CHILD static size_t spawn_len(const char *p)
{
    size_t n = 0;
    while (p[n])
        n++;
    return n;
}

/* execve, and as execvp does, a file the kernel will not run (ENOEXEC: a script without
 * #!) is run by /bin/sh. Returns only on failure (errno). */
SPAWN_CHILD static void spawn_execve(struct spawn_job *j, const char *file)
{
    execve(file, j->s->argv, j->s->envp);
    if (errno == ENOEXEC && j->sh_argv) {
        j->sh_argv[1] = (char *)file;
        execve("/bin/sh", j->sh_argv, j->s->envp);
        errno = ENOEXEC;
    }
}

/* execvpe's search (glibc's rules: an empty PATH element is the current directory, a
 * directory that cannot hold the file is skipped, EACCES is reported if nothing ran
 * and one file was there but not executable). Returns only on failure (errno). */
SPAWN_CHILD static void spawn_execvp(struct spawn_job *j)
{
    const char *file = j->s->argv[0];
    size_t flen = spawn_len(file);
    if (flen == 0) {
        errno = ENOENT;
        return;
    }
    for (size_t i = 0; i < flen; i++)
        if (file[i] == '/')
            return spawn_execve(j, file);
    char buf[PATH_MAX];
    bool denied = false;
    for (const char *p = j->path;; p++) {
        size_t dlen = 0;
        while (p[dlen] && p[dlen] != ':')
            dlen++;
        if (dlen + 1 + flen < sizeof buf) {
            size_t n = 0;
            for (; n < dlen; n++)
                buf[n] = p[n];
            if (dlen)
                buf[n++] = '/';
            for (size_t i = 0; i <= flen; i++)
                buf[n + i] = file[i];
            spawn_execve(j, buf);
            switch (errno) {
            case EACCES:
                denied = true;
                break;
            case ENOENT: case ENOTDIR: case ENODEV: case ESTALE: case ETIMEDOUT: case ENAMETOOLONG:
                break;
            default:
                return; /* found, but it cannot run: say why */
            }
        }
        p += dlen;
        if (!*p)
            break;
    }
    errno = denied ? EACCES : ENOENT;
}

/* The child: every step a system call on what the parent prepared. */
SPAWN_CHILD static int spawn_child(void *arg)
{
    struct spawn_job *j = arg;
    const struct agent_spawn *s = j->s;
    int stage = AGENT_SPAWN_STDIO;
    /* Ignored signals stay ignored across exec (the agent ignores SIGPIPE); caught ones
     * are reset by the exec itself. This copy of the dispositions is the child's own
     * (no CLONE_SIGHAND). */
    for (int sig = 1; sig < NSIG; sig++) {
        /* Raw: glibc's signal() refuses the two real-time signals it keeps for itself
         * (32, 33), and one ignored by whoever started the agent would stay ignored. */
        struct {
            void *handler;
            unsigned long flags;
            void *restorer;
            uint64_t mask;
        } dfl = {SIG_DFL, 0, NULL, 0};
        syscall(SYS_rt_sigaction, sig, &dfl, NULL, sizeof dfl.mask);
    }
    sigset_t all;
    sigfillset(&all);
    sigprocmask(SIG_UNBLOCK, &all, NULL);
    if (setsid() < 0)
        goto fail;
    if (s->pty && ioctl(s->out_fd, TIOCSCTTY, 0) < 0)
        goto fail;
    if (dup2(s->in_fd, 0) < 0 || dup2(s->out_fd, 1) < 0 || dup2(s->err_fd, 2) < 0)
        goto fail;
    stage = AGENT_SPAWN_USER;
    /* Raw calls: glibc's would switch every thread of the agent (spawn.h). */
    if (syscall(SYS_setgroups, (size_t)s->user->ngroups, s->user->groups) < 0 ||
        syscall(SYS_setgid, s->user->gid) < 0 || syscall(SYS_setuid, s->user->uid) < 0)
        goto fail;
    stage = AGENT_SPAWN_CWD;
    if (chdir(s->cwd) < 0)
        goto fail;
    stage = AGENT_SPAWN_EXEC;
    spawn_execvp(j);
fail:
    j->err = errno;
    j->stage = stage; /* the parent reads these once we are gone (CLONE_VFORK) */
    _exit(127);
}

/* The PATH of envp, or execvp's default. */
static const char *spawn_path(char *const *envp)
{
    for (size_t i = 0; envp[i]; i++) {
        const char *e = envp[i];
        if (e[0] == 'P' && e[1] == 'A' && e[2] == 'T' && e[3] == 'H' && e[4] == '=')
            return e + 5;
    }
    return SPAWN_DEFAULT_PATH;
}

pid_t agent_spawn_start(const struct agent_spawn *s, enum agent_spawn_stage *stage)
{
    size_t argc = 0;
    while (s->argv[argc])
        argc++;
    struct spawn_job j = {.s = s, .path = spawn_path(s->envp), .stage = -1};
    /* Made here: the child may not allocate. Without it a #!-less script fails ENOEXEC. */
    j.sh_argv = calloc(argc + 2, sizeof *j.sh_argv);
    if (j.sh_argv) {
        j.sh_argv[0] = "/bin/sh";
        for (size_t i = 1; i < argc; i++)
            j.sh_argv[i + 1] = s->argv[i];
    }
    _Alignas(16) char stack[SPAWN_STACK];
    pid_t pid = clone(spawn_child, stack + sizeof stack, CLONE_VM | CLONE_VFORK | SIGCHLD, &j);
    int e = errno;
    *stage = AGENT_SPAWN_START;
    if (pid > 0 && j.stage >= 0) {
        waitpid(pid, NULL, 0);
        e = j.err;
        *stage = (enum agent_spawn_stage)j.stage;
        pid = -1;
    }
    free(j.sh_argv);
    errno = e;
    return pid;
}
