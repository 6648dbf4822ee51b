/* volfs_node.c: the node table (what the guest's kernel holds by node id), the handle
 * table (open files and directories), and the only way a name becomes an fd: openat2 on
 * the parent's fd, beneath it, following no symlink and no magic link (volfs.h). */
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "volfs_internal.h"

#define VOLFS_RESOLVE (RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | \
                       RESOLVE_NO_XDEV)

int volfs_open_beneath(int dirfd, const char *name, int flags, mode_t mode)
{
    struct open_how how = {.flags = (uint64_t)(flags | O_NOFOLLOW | O_CLOEXEC),
                           .mode = (flags & O_CREAT) ? mode : 0, .resolve = VOLFS_RESOLVE};
    long fd = syscall(SYS_openat2, dirfd, name, &how, sizeof how);
    return fd < 0 ? -errno : (int)fd;
}

struct volfs_node *volfs_node_get(struct volfs *v, uint64_t id)
{
    if (id == 0 || id > VOLFS_NODES_MAX || v->nodes[id - 1].fd < 0)
        return NULL;
    return &v->nodes[id - 1];
}

int volfs_name(const char *p, size_t avail, size_t *used)
{
    const char *nul = memchr(p, '\0', avail);
    if (!nul)
        return -EINVAL;
    size_t n = (size_t)(nul - p);
    if (n > NAME_MAX)
        return -ENAMETOOLONG;
    if (n == 0 || memchr(p, '/', n) || strcmp(p, ".") == 0 || strcmp(p, "..") == 0)
        return -EINVAL;
    *used = n + 1;
    return 0;
}

int volfs_node_stat(const struct volfs_node *n, struct stat *st)
{
    return fstatat(n->fd, "", st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) == 0 ? 0 : -errno;
}

int volfs_dir_fd(struct volfs *v, uint64_t id)
{
    struct volfs_node *n = volfs_node_get(v, id);
    struct stat st;
    if (!n)
        return -EBADF;
    int rc = volfs_node_stat(n, &st);
    if (rc < 0)
        return rc;
    return S_ISDIR(st.st_mode) ? n->fd : -ENOTDIR;
}

static void set_name(struct volfs_node *n, uint64_t parent, const char *name)
{
    n->parent = parent;
    snprintf(n->name, sizeof n->name, "%s", name);
}

static struct volfs_node *find_inode(struct volfs *v, dev_t dev, ino_t ino, uint64_t *id)
{
    for (unsigned i = 0; i < VOLFS_NODES_MAX; i++)
        if (v->nodes[i].fd >= 0 && v->nodes[i].dev == dev && v->nodes[i].ino == ino) {
            *id = i + 1;
            return &v->nodes[i];
        }
    return NULL;
}

int volfs_lookup(struct volfs *v, uint64_t parent, const char *name, uint64_t *id,
                 struct stat *st)
{
    int dfd = volfs_dir_fd(v, parent);
    if (dfd < 0)
        return dfd;
    int fd = volfs_open_beneath(dfd, name, O_PATH, 0);
    if (fd < 0)
        return fd;
    if (fstatat(fd, "", st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) != 0) {
        int e = -errno;
        close(fd);
        return e;
    }
    struct volfs_node *n = find_inode(v, st->st_dev, st->st_ino, id);
    if (n) { /* one node per inode: hard links and repeated lookups share it */
        close(fd);
        n->nlookup++;
        set_name(n, parent, name);
        return 0;
    }
    for (unsigned i = 0; i < VOLFS_NODES_MAX; i++) {
        if (v->nodes[i].fd >= 0)
            continue;
        n = &v->nodes[i];
        n->fd = fd;
        n->nlookup = 1;
        n->dev = st->st_dev;
        n->ino = st->st_ino;
        set_name(n, parent, name);
        v->nnodes++;
        *id = i + 1;
        return 0;
    }
    close(fd);
    return -ENFILE;
}

void volfs_forget(struct volfs *v, uint64_t id, uint64_t count)
{
    struct volfs_node *n = volfs_node_get(v, id);
    if (!n || id == FUSE_ROOT_ID)
        return;
    n->nlookup = count >= n->nlookup ? 0 : n->nlookup - count;
    if (n->nlookup)
        return;
    close(n->fd);
    n->fd = -1;
    v->nnodes--;
}

int volfs_node_open(struct volfs *v, struct volfs_node *n, int flags)
{
    struct stat want, got;
    int rc = volfs_node_stat(n, &want);
    if (rc < 0)
        return rc;
    int fd;
    if (S_ISDIR(want.st_mode)) {
        fd = volfs_open_beneath(n->fd, ".", flags | O_DIRECTORY, 0);
    } else if (S_ISREG(want.st_mode)) {
        int dfd = volfs_dir_fd(v, n->parent);
        fd = dfd < 0 ? dfd : volfs_open_beneath(dfd, n->name, flags, 0);
    } else {
        return -ELOOP; /* symlinks and specials are never opened */
    }
    if (fd < 0)
        return fd == -ENOENT ? -ESTALE : fd;
    if (fstat(fd, &got) != 0 || got.st_dev != want.st_dev || got.st_ino != want.st_ino) {
        close(fd); /* the name now holds another file */
        return -ESTALE;
    }
    return fd;
}

void volfs_renamed(struct volfs *v, uint64_t newparent, const char *newname)
{
    int dfd = volfs_dir_fd(v, newparent);
    struct stat st;
    uint64_t id;
    if (dfd < 0 || fstatat(dfd, newname, &st, AT_SYMLINK_NOFOLLOW) != 0)
        return;
    struct volfs_node *n = find_inode(v, st.st_dev, st.st_ino, &id);
    if (n)
        set_name(n, newparent, newname);
}

uint64_t volfs_fh_new(struct volfs *v, int fd, bool is_dir)
{
    for (unsigned i = 0; i < VOLFS_HANDLES_MAX; i++) {
        struct volfs_fh *f = &v->fhs[i];
        if (f->fd >= 0)
            continue;
        f->dir = is_dir ? fdopendir(fd) : NULL;
        if (is_dir && !f->dir)
            break;
        f->fd = fd;
        f->is_dir = is_dir;
        v->nfhs++;
        return i + 1;
    }
    close(fd);
    return 0;
}

struct volfs_fh *volfs_fh_get(struct volfs *v, uint64_t fh)
{
    if (fh == 0 || fh > VOLFS_HANDLES_MAX || v->fhs[fh - 1].fd < 0)
        return NULL;
    return &v->fhs[fh - 1];
}

void volfs_fh_close(struct volfs *v, uint64_t fh)
{
    struct volfs_fh *f = volfs_fh_get(v, fh);
    if (!f)
        return;
    if (f->dir)
        closedir(f->dir);
    else
        close(f->fd);
    f->fd = -1;
    f->dir = NULL;
    v->nfhs--;
}
