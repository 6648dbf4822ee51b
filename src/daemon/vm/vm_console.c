/* vm_console: copies the guest serial console (QEMU's console socket) into a bounded
 * run_dir/console.log, and reads its tail for failure reports.
 *
 * Bound: when console.log reaches half of cfg.console_max it is renamed console.log.1
 * (replacing the previous one) and a fresh file starts, so at most console_max bytes are
 * kept and the newest output is never the part dropped. QEMU drops console output while
 * nobody is connected, so a stalled spaced never stalls the guest. */
#include "vm_internal.h"

#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "log.h"

#define CONSOLE_DEFAULT_MAX (1024 * 1024)

static size_t half_max(const struct vm *vm)
{
    return (vm->cfg.console_max ? vm->cfg.console_max : CONSOLE_DEFAULT_MAX) / 2;
}

static int open_log(struct vm *vm)
{
    char p[4096];
    struct stat st;
    if (vm_path(vm, "console.log", p, sizeof(p)) < 0)
        return -1;
    vm->log_fd = open(p, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    vm->log_size = vm->log_fd >= 0 && fstat(vm->log_fd, &st) == 0 ? (size_t)st.st_size : 0;
    return vm->log_fd >= 0 ? 0 : -1;
}

static void rotate(struct vm *vm)
{
    char cur[4096], old[4096];
    if (vm_path(vm, "console.log", cur, sizeof(cur)) < 0 ||
        vm_path(vm, "console.log.1", old, sizeof(old)) < 0)
        return;
    close(vm->log_fd);
    vm->log_fd = -1;
    rename(cur, old);
    open_log(vm);
}

static void append(struct vm *vm, const char *buf, size_t n)
{
    if (vm->log_fd < 0 && open_log(vm) < 0)
        return;
    if (vm->log_size + n > half_max(vm))
        rotate(vm);
    if (vm->log_fd >= 0 && write(vm->log_fd, buf, n) == (ssize_t)n)
        vm->log_size += n;
}

/* Reads what is available; returns 0 on EOF/error (connection finished). */
static int pump(struct vm *vm)
{
    char buf[8192];
    for (int i = 0; i < 16; i++) {
        ssize_t n = read(vm->con_fd, buf, sizeof(buf));
        if (n > 0) {
            append(vm, buf, (size_t)n);
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            return 1;
        return 0;
    }
    return 1;
}

static void on_console(evutil_socket_t fd, short what, void *arg)
{
    struct vm *vm = arg;
    if (!pump(vm))
        vm_console_close(vm);
}

void vm_console_attach(struct vm *vm)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    char p[4096];
    if (vm_path(vm, "console.sock", p, sizeof(p)) < 0 || strlen(p) >= sizeof(sa.sun_path))
        return;
    memcpy(sa.sun_path, p, strlen(p) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return;
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        close(fd);
        return;
    }
    evutil_make_socket_nonblocking(fd);
    vm->con_fd = fd;
    vm->con_ev = event_new(vm->base, fd, EV_READ | EV_PERSIST, on_console, vm);
    if (!vm->con_ev) {
        vm_console_close(vm);
        return;
    }
    event_add(vm->con_ev, NULL);
}

void vm_console_drain(struct vm *vm)
{
    if (vm->con_fd >= 0)
        pump(vm);
}

void vm_console_close(struct vm *vm)
{
    if (vm->con_ev)
        event_free(vm->con_ev);
    vm->con_ev = NULL;
    if (vm->con_fd >= 0)
        close(vm->con_fd);
    vm->con_fd = -1;
    if (vm->log_fd >= 0)
        close(vm->log_fd);
    vm->log_fd = -1;
}

/* Last bytes of run_dir/<name>, starting after a line break when the read was cut. */
static size_t file_tail(const char *run_dir, const char *name, char *out, size_t cap)
{
    char p[4096];
    if (cap == 0)
        return 0;
    out[0] = 0;
    if (snprintf(p, sizeof(p), "%s/%s", run_dir, name) >= (int)sizeof(p))
        return 0;
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    struct stat st;
    size_t n = 0;
    if (fstat(fd, &st) == 0 && st.st_size > 0) {
        size_t want = cap - 1;
        off_t off = st.st_size > (off_t)want ? st.st_size - (off_t)want : 0;
        ssize_t r = pread(fd, out, want, off);
        n = r > 0 ? (size_t)r : 0;
        out[n] = 0;
        if (off > 0) {
            char *nl = memchr(out, '\n', n);
            if (nl) {
                size_t skip = (size_t)(nl + 1 - out);
                memmove(out, nl + 1, n - skip + 1);
                n -= skip;
            }
        }
    }
    close(fd);
    /* NUL bytes from the guest would cut the report short: make them visible. */
    for (size_t i = 0; i < n; i++)
        if (out[i] == 0)
            out[i] = '?';
    return n;
}

size_t vm_console_tail(const struct vm *vm, char *out, size_t cap)
{
    return file_tail(vm->cfg.run_dir, "console.log", out, cap);
}

size_t vm_qemu_log_tail(const struct vm *vm, char *out, size_t cap)
{
    return file_tail(vm->cfg.run_dir, "qemu.log", out, cap);
}

void vm_qemu_log_bound(const struct vm *vm)
{
    char p[4096];
    struct stat st;
    /* Allocated blocks, not st_size: a QEMU started by an older spaced may write at its
     * own offset (no O_APPEND), leaving a sparse file whose size says nothing. */
    if (vm_path(vm, "qemu.log", p, sizeof(p)) < 0 || stat(p, &st) < 0 ||
        (uint64_t)st.st_blocks * 512 <= VM_QEMU_LOG_MAX)
        return;
    if (truncate(p, 0) == 0)
        log_warn("vm.qemu_log", "id=%s msg=\"qemu.log passed %d bytes: emptied\"", vm->cfg.id,
                 VM_QEMU_LOG_MAX);
}
