/* vm_disk: qcow2 overlays made by `qemu-img create`, run as a child watched by the loop.
 *
 * The child's exit is observed through a pidfd, so creating an overlay never blocks
 * spaced (qemu-img itself takes a few ms). Its stderr goes to a pipe read once it has
 * exited, so a failure carries qemu-img's own message. */
#include "vm.h"
#include "vm_spawn.h"

#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* One running qemu-img. Owned by itself: freed after the callback. */
struct disk_job {
    pid_t pid;
    int pidfd;
    int err_fd; /* read end of qemu-img's stderr */
    struct event *ev;
    char *overlay;
    vm_done_cb cb;
    void *arg;
};

static void job_done(evutil_socket_t fd, short what, void *arg)
{
    struct disk_job *j = arg;
    int status = 0;
    char buf[512] = "";
    waitpid(j->pid, &status, 0);
    ssize_t n = read(j->err_fd, buf, sizeof(buf) - 1);
    buf[n > 0 ? n : 0] = 0;
    for (char *c = buf; *c; c++)
        if (*c == '\n')
            *c = ' ';
    int ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (!ok)
        unlink(j->overlay);
    char msg[600];
    snprintf(msg, sizeof(msg), "qemu-img create failed: %s", buf[0] ? buf : "no message");
    event_free(j->ev);
    close(j->pidfd);
    close(j->err_fd);
    j->cb(NULL, ok ? VM_OK : VM_E_IO, ok ? NULL : msg, j->arg);
    free(j->overlay);
    free(j);
}

int vm_disk_overlay_create(struct event_base *base, const char *backing,
                           const char *backing_format, const char *overlay,
                           vm_done_cb cb, void *arg)
{
    if (!backing || !overlay || !backing_format ||
        (strcmp(backing_format, "raw") && strcmp(backing_format, "qcow2")))
        return VM_E_INVAL;
    /* qemu-img resolves a relative backing name against the overlay's directory; the
     * absolute path is what the caller meant. */
    char abs[4096];
    if (access(backing, R_OK) < 0 || !realpath(backing, abs))
        return VM_E_NOENT;
    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC) < 0)
        return VM_E_IO;
    struct disk_job *j = calloc(1, sizeof(*j));
    if (!j || !(j->overlay = strdup(overlay))) {
        free(j);
        close(pfd[0]);
        close(pfd[1]);
        return VM_E_IO;
    }
    char *const argv[] = { "qemu-img", "create", "-q", "-f", "qcow2", "-F",
                           (char *)backing_format, "-b", abs, (char *)overlay, NULL };
    pid_t pid = fork();
    if (pid == 0) {
        int nul = open("/dev/null", O_RDWR);
        if (nul < 0 || dup2(nul, 0) < 0 || dup2(nul, 1) < 0 || dup2(pfd[1], 2) < 0)
            _exit(127);
        execvp(argv[0], argv);
        _exit(127);
    }
    close(pfd[1]);
    j->pid = pid;
    j->err_fd = pfd[0];
    j->pidfd = pid > 0 ? vm_pidfd_open(pid) : -1;
    j->ev = j->pidfd >= 0 ? event_new(base, j->pidfd, EV_READ, job_done, j) : NULL;
    if (!j->ev) {
        if (pid > 0) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
        }
        if (j->pidfd >= 0)
            close(j->pidfd);
        close(pfd[0]);
        free(j->overlay);
        free(j);
        return VM_E_IO;
    }
    j->cb = cb;
    j->arg = arg;
    event_add(j->ev, NULL);
    return VM_OK;
}
