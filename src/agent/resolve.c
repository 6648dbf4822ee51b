/* resolve.c: the component-by-component walk that stays off volume mounts; see resolve.h. */
#include "agent/resolve.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "agent/fuse_relay.h"

/* The type of the object fd (O_PATH) refers to; -1 with EXDEV if it is on a volume.
 * AT_STATX_DONT_SYNC: FUSE fills this from the inode it has, sending no request (local
 * file systems ignore the flag). */
static int resolve_check(int fd, const char *name, mode_t *type)
{
    struct statx sx;
    if (statx(fd, name, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT | AT_STATX_DONT_SYNC,
              STATX_TYPE, &sx) < 0)
        return -1;
    if (agent_fuse_is_volume(makedev(sx.stx_dev_major, sx.stx_dev_minor))) {
        errno = EXDEV;
        return -1;
    }
    *type = sx.stx_mode & S_IFMT;
    return 0;
}

/* Appends component c (of length n) to the canonical path out (length *o). */
static int resolve_push(char *out, size_t *o, const char *c, size_t n)
{
    if (*o + (*o > 1) + n + 1 > PATH_MAX) {
        errno = ENAMETOOLONG;
        return -1;
    }
    if (*o > 1)
        out[(*o)++] = '/';
    memcpy(out + *o, c, n);
    *o += n;
    out[*o] = '\0';
    return 0;
}

/* Drops the last component of the canonical path out. */
static void resolve_pop(char *out, size_t *o)
{
    while (*o > 1 && out[*o - 1] != '/')
        (*o)--;
    if (*o > 1)
        (*o)--;
    out[*o] = '\0';
}

/* The part from p on does not exist: appended as it stands. */
static int resolve_missing(const char *p, char *out, size_t *o)
{
    while (*p) {
        size_t n = strcspn(p, "/");
        if (n == 2 && p[0] == '.' && p[1] == '.') {
            errno = ENOENT;
            return -1;
        }
        if (n && !(n == 1 && p[0] == '.') && resolve_push(out, o, p, n) < 0)
            return -1;
        p += n;
        p += strspn(p, "/");
    }
    return 0;
}

int agent_resolve(const char *in, bool follow_last, char *out)
{
    char todo[PATH_MAX], next_todo[PATH_MAX];
    if (snprintf(todo, sizeof todo, "%s", in) >= (int)sizeof todo) {
        errno = ENAMETOOLONG;
        return -1;
    }
    size_t o = 1;
    out[0] = '/';
    out[1] = '\0';
    int dir = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC), links = 0, rc = -1;
    const char *p = todo;
    if (dir < 0)
        return -1;
    for (;;) {
        p += strspn(p, "/");
        if (!*p) {
            rc = 0;
            break;
        }
        size_t n = strcspn(p, "/");
        const char *rest = p + n + strspn(p + n, "/");
        bool last = *rest == '\0';
        char name[NAME_MAX + 1];
        if (n > NAME_MAX) {
            errno = ENAMETOOLONG;
            break;
        }
        memcpy(name, p, n);
        name[n] = '\0';
        if (strcmp(name, ".") == 0) {
            p = rest;
            continue;
        }
        int fd = openat(dir, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0) {
            if (errno == ENOENT)
                rc = resolve_missing(p, out, &o);
            break;
        }
        mode_t type;
        if (resolve_check(fd, "", &type) < 0) {
            close(fd);
            break;
        }
        if (type == S_IFLNK && (!last || follow_last)) {
            char target[PATH_MAX];
            ssize_t t = readlinkat(fd, "", target, sizeof target - 1);
            close(fd);
            if (t < 0)
                break;
            if (t == 0 || ++links > AGENT_RESOLVE_LINKS_MAX) {
                errno = t == 0 ? ENOENT : ELOOP;
                break;
            }
            target[t] = '\0';
            if (snprintf(next_todo, sizeof next_todo, "%s/%s", target, rest) >= (int)sizeof next_todo) {
                errno = ENAMETOOLONG;
                break;
            }
            memcpy(todo, next_todo, sizeof todo);
            p = todo;
            if (target[0] == '/') { /* absolute: start again at / */
                int root = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
                if (root < 0)
                    break;
                close(dir);
                dir = root;
                o = 1;
                out[1] = '\0';
            }
            continue;
        }
        if (strcmp(name, "..") == 0)
            resolve_pop(out, &o);
        else if (resolve_push(out, &o, name, n) < 0) {
            close(fd);
            break;
        }
        if (last) {
            close(fd);
            rc = 0;
            break;
        }
        if (type != S_IFDIR) {
            close(fd);
            errno = ENOTDIR;
            break;
        }
        close(dir);
        dir = fd;
        p = rest;
    }
    int e = errno;
    close(dir);
    errno = e;
    return rc;
}

int agent_resolve_lstatat(int dirfd, const char *name, struct stat *st)
{
    mode_t type;
    int fd = openat(dirfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -1;
    /* Checked through the O_PATH descriptor, then stat'ed through it too: the name may
     * be swapped meanwhile, the object it was is what is checked and reported. */
    int rc = resolve_check(fd, "", &type) == 0 && fstatat(fd, "", st, AT_EMPTY_PATH) == 0 ? 0 : -1;
    int e = errno;
    close(fd);
    errno = e;
    return rc;
}

int agent_resolve_lstat(const char *path, struct stat *st)
{
    char real[PATH_MAX];
    if (agent_resolve(path, false, real) < 0)
        return -1;
    return lstat(real, st);
}
