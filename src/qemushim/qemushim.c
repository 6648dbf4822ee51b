/* space-qemu-shim.so: preloaded (LD_PRELOAD) into the QEMU of a template clone only, so
 * that it opens the template's RAM file read-only.
 *
 * Why: a clone maps the template RAM file private copy-on-write (memory-backend-file
 * share=off), which needs only read access, but QEMU 7.2 (Debian 12) opens the file with
 * O_RDWR regardless (physmem.c file_ram_open: `readonly ? O_RDONLY : O_RDWR`), and its
 * `readonly=on` also maps the memory PROT_READ as a ROM, which the guest cannot run on
 * (8.2 adds rom=off for that). The file is root-owned 0444 and bind-mounted read-only in
 * the clone's jail, so that O_RDWR open would fail; this shim turns O_RDWR into O_RDONLY
 * for exactly the one path named by SPACE_QEMU_RO_PATH and changes nothing else.
 * A private PROT_READ|PROT_WRITE mapping of a read-only descriptor is legal, so the guest
 * runs unchanged. QEMU 7.2 truncates the file only when it is empty (never the case: it
 * holds the template's memory) and punches holes (ram_block_discard_range) only on
 * discards, which fail on a read-only descriptor instead of zeroing the template.
 *
 * The shim is not the security boundary: the kernel is. A QEMU taken over by its guest
 * cannot open the file for writing (wrong uid, 0444, read-only mount); the shim only lets
 * an honest QEMU start. If it did not load, the open would fail and the restore with it.
 *
 * The symbols are those /usr/bin/qemu-system-x86_64 imports (`nm -D`: open64, openat64,
 * __open64_2) plus their non-64 twins. The calls go straight to the openat system call:
 * no dlsym, no allocation, nothing that could recurse. Built without sanitizers and
 * without _FORTIFY_SOURCE (whose inline wrappers would collide with these definitions). */
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

int __open_2(const char *path, int flags);
int __open64_2(const char *path, int flags);

static const char *ro_path;

__attribute__((constructor)) static void shim_init(void)
{
    ro_path = getenv("SPACE_QEMU_RO_PATH");
}

/* flags with O_RDWR turned into O_RDONLY when path is the read-only file and nothing
 * asks to create or truncate it. */
static int shim_flags(const char *path, int flags)
{
    if (ro_path && path && strcmp(path, ro_path) == 0 && (flags & O_ACCMODE) == O_RDWR &&
        !(flags & (O_CREAT | O_TRUNC)))
        return (flags & ~O_ACCMODE) | O_RDONLY;
    return flags;
}

static int shim_openat(int dirfd, const char *path, int flags, mode_t mode)
{
    return (int)syscall(SYS_openat, dirfd, path, shim_flags(path, flags), mode);
}

/* The mode argument exists only for O_CREAT and O_TMPFILE (open(2)). */
#define SHIM_MODE(flags, mode)                                                    \
    do {                                                                          \
        if ((flags) & O_CREAT || ((flags) & O_TMPFILE) == O_TMPFILE) {            \
            va_list ap;                                                           \
            va_start(ap, flags);                                                  \
            mode = va_arg(ap, mode_t);                                            \
            va_end(ap);                                                           \
        }                                                                         \
    } while (0)

int open(const char *path, int flags, ...)
{
    mode_t mode = 0;
    SHIM_MODE(flags, mode);
    return shim_openat(AT_FDCWD, path, flags, mode);
}

int open64(const char *path, int flags, ...)
{
    mode_t mode = 0;
    SHIM_MODE(flags, mode);
    return shim_openat(AT_FDCWD, path, flags, mode);
}

int openat(int dirfd, const char *path, int flags, ...)
{
    mode_t mode = 0;
    SHIM_MODE(flags, mode);
    return shim_openat(dirfd, path, flags, mode);
}

int openat64(int dirfd, const char *path, int flags, ...)
{
    mode_t mode = 0;
    SHIM_MODE(flags, mode);
    return shim_openat(dirfd, path, flags, mode);
}

int __open_2(const char *path, int flags) { return shim_openat(AT_FDCWD, path, flags, 0); }
int __open64_2(const char *path, int flags) { return shim_openat(AT_FDCWD, path, flags, 0); }
