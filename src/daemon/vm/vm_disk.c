/* vm_disk: qcow2 overlays made by `qemu-img create`, run as a child watched by the loop,
 * and the argument QEMU's tools need to read an overlay without trusting it.
 *
 * The child's exit is observed through a pidfd, so creating an overlay never blocks
 * spaced (qemu-img itself takes a few ms). Its stderr goes to a pipe read once it has
 * exited, so a failure carries qemu-img's own message.
 *
 * No host tool trusts an image header a VM could have written (docs/security.md): a
 * qcow2 that a QEMU process held read-write (a template's frozen overlay, a build VM's
 * overlay) could name any host file as its backing file, and a raw image the guest
 * filled could carry a qcow2 header. So every qemu-img run here names the format of
 * every file, never opens a backing file to learn a size (`create -u` with the size of
 * the raw image at the bottom of the chain, which spaced wrote itself), and reads an
 * overlay only through --image-opts naming each layer of the chain explicitly. */
#include "vm.h"
#include "vm_internal.h"
#include "vm_spawn.h"

#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* One running qemu-img. Owned by itself: freed after the callback (or by
 * vm_disk_job_cancel, which makes no callback). */
struct vm_disk_job {
    pid_t pid;
    int pidfd;
    int err_fd;  /* read end of qemu-img's stderr */
    struct event *ev;
    char *out;   /* the file qemu-img writes: removed on failure or cancel */
    const char *what; /* "qemu-img create", for the failure message */
    bool freeze; /* on success, out becomes root-owned 0444 (vm_jail_freeze) */
    vm_done_cb cb;
    void *arg;
};

static void job_free(struct vm_disk_job *j)
{
    event_free(j->ev);
    close(j->pidfd);
    close(j->err_fd);
    free(j->out);
    free(j);
}

static void job_done(evutil_socket_t fd, short what, void *arg)
{
    struct vm_disk_job *j = arg;
    (void)fd;
    (void)what;
    int status = 0;
    char buf[512] = "";
    waitpid(j->pid, &status, 0);
    ssize_t n = read(j->err_fd, buf, sizeof(buf) - 1);
    buf[n > 0 ? n : 0] = 0;
    for (char *c = buf; *c; c++)
        if (*c == '\n')
            *c = ' ';
    bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    char msg[600];
    snprintf(msg, sizeof(msg), "%s failed: %s", j->what, buf[0] ? buf : "no message");
    if (ok && j->freeze && vm_jail_freeze(j->out) < 0) {
        ok = false;
        snprintf(msg, sizeof(msg), "cannot make %s read-only: %s", j->out, strerror(errno));
    }
    if (!ok)
        unlink(j->out);
    vm_done_cb cb = j->cb;
    void *cb_arg = j->arg;
    job_free(j);
    cb(NULL, ok ? VM_OK : VM_E_IO, ok ? NULL : msg, cb_arg);
}

/* Runs argv (qemu-img, writing `out`) as a child whose exit the loop observes through a
 * pidfd. VM_OK (*job set if job != NULL; cb follows) or VM_E_IO (no callback). */
static int job_start(struct event_base *base, char *const argv[], const char *out,
                     const char *what, bool freeze, vm_done_cb cb, void *arg,
                     struct vm_disk_job **job)
{
    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC) < 0)
        return VM_E_IO;
    struct vm_disk_job *j = calloc(1, sizeof(*j));
    if (!j || !(j->out = strdup(out))) {
        free(j);
        close(pfd[0]);
        close(pfd[1]);
        return VM_E_IO;
    }
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
        free(j->out);
        free(j);
        return VM_E_IO;
    }
    j->what = what;
    j->freeze = freeze;
    j->cb = cb;
    j->arg = arg;
    event_add(j->ev, NULL);
    if (job)
        *job = j;
    return VM_OK;
}

void vm_disk_job_cancel(struct vm_disk_job *j)
{
    if (!j)
        return;
    kill(j->pid, SIGKILL);
    waitpid(j->pid, NULL, 0);
    unlink(j->out);
    job_free(j);
}

static bool format_ok(const char *f)
{
    return f && (strcmp(f, "raw") == 0 || strcmp(f, "qcow2") == 0);
}

/* Checks a chain (nearest layer first, a raw image last, every layer an existing file)
 * and puts the raw image's size, the virtual size of every layer, in *size. */
static int chain_check(const struct vm_disk_layer *chain, unsigned n, uint64_t *size)
{
    if (!chain || n == 0 || n > VM_DISK_BACKING_MAX)
        return VM_E_INVAL;
    for (unsigned i = 0; i < n; i++)
        if (!chain[i].path || !format_ok(chain[i].format) ||
            (strcmp(chain[i].format, "raw") == 0) != (i == n - 1))
            return VM_E_INVAL;
    for (unsigned i = 0; i < n; i++)
        if (access(chain[i].path, R_OK) < 0)
            return VM_E_NOENT;
    struct stat st;
    if (stat(chain[n - 1].path, &st) < 0 || !S_ISREG(st.st_mode))
        return VM_E_NOENT;
    *size = (uint64_t)st.st_size;
    return VM_OK;
}

int vm_disk_overlay_create(struct event_base *base, const struct vm_disk_layer *chain,
                           unsigned n_chain, const char *overlay, vm_done_cb cb, void *arg,
                           struct vm_disk_job **job)
{
    uint64_t size = 0;
    int rc = overlay ? chain_check(chain, n_chain, &size) : VM_E_INVAL;
    if (rc != VM_OK)
        return rc;
    /* qemu-img resolves a relative backing name against the overlay's directory; the
     * absolute path is what the caller meant. The name recorded in the header is for
     * humans only: QEMU gets the chain node by node (vm.h). */
    char abs[4096], sz[32];
    if (!realpath(chain[0].path, abs))
        return VM_E_NOENT;
    snprintf(sz, sizeof sz, "%" PRIu64, size);
    /* -u: do not open the backing file (it may be a qcow2 a VM wrote, whose own backing
     * name would be followed); the size is given instead. */
    char *const argv[] = { "qemu-img", "create", "-q", "-f", "qcow2", "-F",
                           (char *)chain[0].format, "-b", abs, "-u", (char *)overlay, sz,
                           NULL };
    return job_start(base, argv, overlay, "qemu-img create", false, cb, arg, job);
}

/* ---- remembered overlays ----------------------------------------------------------- */

/* What qemu-img writes above depends only on its arguments: chain[0]'s format and
 * absolute path and the raw image's size (-u: no layer is opened; qcow2 headers carry no
 * time). So the overlay made for one set of arguments is remembered (its bytes: a few
 * hundred KiB) and copied for the next overlay asking for the same set, which costs a
 * file write instead of a process start (tens of ms on a loaded host). */
#define VM_DISK_PROTOS 4            /* argument sets remembered; the least recently used goes */
#define VM_DISK_PROTO_MAX (2u << 20) /* a bigger overlay is not remembered */

struct vm_disk_proto {
    char *key;      /* the arguments (proto_key), NULL when the slot is free */
    uint8_t *bytes; /* the overlay qemu-img made for them */
    size_t len;
    mode_t mode;
    uint64_t used;  /* last use (protos->clock) */
};

struct vm_disk_protos {
    struct vm_disk_proto p[VM_DISK_PROTOS];
    uint64_t clock;
};

struct vm_disk_protos *vm_disk_protos_new(void) { return calloc(1, sizeof(struct vm_disk_protos)); }

static void proto_clear(struct vm_disk_proto *p)
{
    free(p->key);
    free(p->bytes);
    memset(p, 0, sizeof(*p));
}

void vm_disk_protos_free(struct vm_disk_protos *ps)
{
    for (unsigned i = 0; ps && i < VM_DISK_PROTOS; i++)
        proto_clear(&ps->p[i]);
    free(ps);
}

/* The qemu-img arguments of an overlay over chain, as one string (malloc'd), or NULL. */
static char *proto_key(const struct vm_disk_layer *chain, unsigned n)
{
    uint64_t size = 0;
    char abs[4096], *key = NULL;
    if (chain_check(chain, n, &size) != VM_OK || !realpath(chain[0].path, abs) ||
        asprintf(&key, "%s\n%s\n%" PRIu64, chain[0].format, abs, size) < 0)
        return NULL;
    return key;
}

static struct vm_disk_proto *proto_find(struct vm_disk_protos *ps, const char *key)
{
    for (unsigned i = 0; i < VM_DISK_PROTOS; i++)
        if (ps->p[i].key && strcmp(ps->p[i].key, key) == 0)
            return &ps->p[i];
    return NULL;
}

void vm_disk_overlay_remember(struct vm_disk_protos *ps, const struct vm_disk_layer *chain,
                              unsigned n_chain, const char *overlay)
{
    char *key = ps ? proto_key(chain, n_chain) : NULL;
    if (!key)
        return;
    struct vm_disk_proto *p = proto_find(ps, key);
    if (!p) { /* a free slot, else the least recently used one */
        p = &ps->p[0];
        for (unsigned i = 0; i < VM_DISK_PROTOS && p->key; i++)
            if (!ps->p[i].key || ps->p[i].used < p->used)
                p = &ps->p[i];
    }
    proto_clear(p);
    struct stat st;
    int fd = open(overlay, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size <= 0 ||
        (uint64_t)st.st_size > VM_DISK_PROTO_MAX || !(p->bytes = malloc((size_t)st.st_size)) ||
        read(fd, p->bytes, (size_t)st.st_size) != st.st_size) {
        proto_clear(p);
        free(key);
    } else {
        p->key = key;
        p->len = (size_t)st.st_size;
        p->mode = st.st_mode & 0777;
        p->used = ++ps->clock;
    }
    if (fd >= 0)
        close(fd);
}

int vm_disk_overlay_copy(struct vm_disk_protos *ps, const struct vm_disk_layer *chain,
                         unsigned n_chain, const char *overlay)
{
    char *key = ps && overlay ? proto_key(chain, n_chain) : NULL;
    struct vm_disk_proto *p = key ? proto_find(ps, key) : NULL;
    free(key);
    if (!p)
        return VM_E_NOENT;
    p->used = ++ps->clock;
    int fd = open(overlay, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, p->mode);
    bool ok = fd >= 0 && write(fd, p->bytes, p->len) == (ssize_t)p->len;
    if (fd >= 0 && close(fd) != 0)
        ok = false;
    if (!ok && fd >= 0)
        unlink(overlay);
    return ok ? VM_OK : VM_E_IO;
}

/* Appends s to out[*len..cap) with every ',' doubled (QEMU's option syntax). */
static int opts_put(char *out, size_t cap, size_t *len, const char *s, bool escape)
{
    for (; *s; s++) {
        size_t need = (escape && *s == ',') ? 2 : 1;
        if (*len + need >= cap)
            return -1;
        out[(*len)++] = *s;
        if (need == 2)
            out[(*len)++] = ',';
    }
    out[*len] = '\0';
    return 0;
}

int vm_disk_image_opts(const char *overlay, const struct vm_disk_layer *chain, unsigned n_chain,
                       char *out, size_t cap)
{
    uint64_t size;
    if (!overlay || cap == 0 || chain_check(chain, n_chain, &size) == VM_E_INVAL)
        return -1;
    size_t len = 0;
    char prefix[8 * (VM_DISK_BACKING_MAX + 1) + 1] = "";
    out[0] = '\0';
    for (unsigned i = 0; i <= n_chain; i++) {
        const char *fmt = i == 0 ? "qcow2" : chain[i - 1].format;
        const char *path = i == 0 ? overlay : chain[i - 1].path;
        if ((i && opts_put(out, cap, &len, ",", false)) ||
            opts_put(out, cap, &len, prefix, false) ||
            opts_put(out, cap, &len, "driver=", false) || opts_put(out, cap, &len, fmt, false) ||
            opts_put(out, cap, &len, ",", false) || opts_put(out, cap, &len, prefix, false) ||
            opts_put(out, cap, &len, "file.driver=file,", false) ||
            opts_put(out, cap, &len, prefix, false) ||
            opts_put(out, cap, &len, "file.filename=", false) ||
            opts_put(out, cap, &len, path, true))
            return -1;
        strcat(prefix, "backing.");
    }
    return 0;
}

/* true if `path` is a qcow2 whose header asks for no external data file: with that
 * feature (incompatible bit 2, QEMU 4.0+) the header names a file QEMU opens for the
 * data, and --image-opts cannot pin it away. */
static bool qcow2_header_safe(const char *path)
{
    uint8_t h[80];
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    ssize_t n = fd >= 0 ? pread(fd, h, sizeof h, 0) : -1;
    if (fd >= 0)
        close(fd);
    if (n < 72 || memcmp(h, "QFI\xfb", 4) != 0)
        return false;
    uint32_t version = (uint32_t)h[4] << 24 | (uint32_t)h[5] << 16 | (uint32_t)h[6] << 8 | h[7];
    if (version == 2)
        return true;
    if (version != 3 || n < 80)
        return false;
    return (h[79] & 0x04) == 0; /* incompatible_features, big-endian u64 at 72 */
}

/* The --image-opts argument of a flatten of overlay over chain into opts[cap], after
 * checking that no qcow2 of it (the overlay, and the chain's own qcow2 layers: copies of
 * overlays a VM wrote) asks for an external data file. 0 or -1. */
static int flatten_opts(const char *overlay, const struct vm_disk_layer *chain,
                        unsigned n_chain, char *opts, size_t cap)
{
    if (vm_disk_image_opts(overlay, chain, n_chain, opts, cap) < 0 || !qcow2_header_safe(overlay))
        return -1;
    for (unsigned i = 0; i < n_chain; i++)
        if (strcmp(chain[i].format, "qcow2") == 0 && !qcow2_header_safe(chain[i].path))
            return -1;
    return 0;
}

int vm_disk_flatten_spawn(const char *overlay, const struct vm_disk_layer *chain,
                          unsigned n_chain, const char *out_raw, pid_t *pid)
{
    char opts[4 * 4096 + 512];
    if (!out_raw || flatten_opts(overlay, chain, n_chain, opts, sizeof opts) < 0)
        return VM_E_INVAL;
    char *argv[] = {"qemu-img", "convert", "-q", "--image-opts", opts, "-O", "raw",
                    (char *)out_raw, NULL};
    int e = posix_spawnp(pid, "qemu-img", NULL, NULL, argv, environ);
    errno = e;
    return e == 0 ? VM_OK : VM_E_IO;
}

int vm_disk_flatten(struct event_base *base, const char *overlay,
                    const struct vm_disk_layer *chain, unsigned n_chain, const char *out_raw,
                    vm_done_cb cb, void *arg, struct vm_disk_job **job)
{
    char opts[(VM_DISK_BACKING_MAX + 1) * 4096 + 512];
    if (!out_raw || flatten_opts(overlay, chain, n_chain, opts, sizeof opts) < 0)
        return VM_E_INVAL;
    /* -n is not given: the output is a new file (sparse, -S default), never a layer. */
    char *const argv[] = {"qemu-img", "convert", "-q", "--image-opts", opts, "-O", "raw",
                          (char *)out_raw, NULL};
    return job_start(base, argv, out_raw, "qemu-img convert", true, cb, arg, job);
}
