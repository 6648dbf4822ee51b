/* volfs_ops.c: the FUSE operations (volfs.h lists them and their semantics). Each one
 * checks its argument size first (ARG), then every name, node id, handle, size and
 * offset it takes from the guest. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#include "volfs_internal.h"

/* The fixed argument struct of an op, or EINVAL when the message is shorter. */
#define ARG(type, var)                                       \
    const type *var = (const type *)r->arg;                  \
    if (r->arglen < sizeof(type))                            \
        return -EINVAL

#ifndef SYS_fchmodat2
#define SYS_fchmodat2 452 /* Linux 6.6; glibc 2.36 does not name it yet */
#endif

/* What may be set by the guest: permission bits, never setuid/setgid. */
#define VOLFS_MODE_MASK 01777

void volfs_attr(const struct stat *st, const struct fuse_in_header *h, struct fuse_attr *a)
{
    memset(a, 0, sizeof *a);
    a->ino = st->st_ino;
    a->size = (uint64_t)st->st_size;
    a->blocks = (uint64_t)st->st_blocks;
    a->atime = (uint64_t)st->st_atim.tv_sec;
    a->mtime = (uint64_t)st->st_mtim.tv_sec;
    a->ctime = (uint64_t)st->st_ctim.tv_sec;
    a->atimensec = (uint32_t)st->st_atim.tv_nsec;
    a->mtimensec = (uint32_t)st->st_mtim.tv_nsec;
    a->ctimensec = (uint32_t)st->st_ctim.tv_nsec;
    a->mode = st->st_mode;
    a->nlink = (uint32_t)st->st_nlink;
    a->uid = h->uid; /* the volume is the tenant's: whoever asks owns it */
    a->gid = h->gid;
    a->blksize = (uint32_t)st->st_blksize;
}

/* Reply payload of `size` bytes, zeroed; NULL if it does not fit (never for these). */
static void *reply(struct volfs_req *r, size_t size)
{
    if (size > r->outcap)
        return NULL;
    memset(r->out, 0, size);
    r->outlen = size;
    return r->out;
}

/* fuse_entry_out for node id (no caching: timeouts 0). */
static int entry(struct volfs_req *r, uint64_t id, const struct stat *st)
{
    struct fuse_entry_out *e = reply(r, sizeof *e);
    e->nodeid = id;
    volfs_attr(st, r->h, &e->attr);
    return 0;
}

/* Looks up name under parent and answers its entry (after a create of some kind). */
static int lookup_entry(struct volfs *v, struct volfs_req *r, uint64_t parent, const char *name)
{
    uint64_t id;
    struct stat st;
    int rc = volfs_lookup(v, parent, name, &id, &st);
    return rc < 0 ? rc : entry(r, id, &st);
}

/* The name at the start of the arguments after `skip` bytes. */
static int name_at(const struct volfs_req *r, size_t skip, const char **name, size_t *used)
{
    if (r->arglen <= skip)
        return -EINVAL;
    *name = r->arg + skip;
    return volfs_name(*name, r->arglen - skip, used);
}

/* The name after `skip` bytes of arguments and the fd of the request's node, which must be
 * a directory: the target of the ops that make or remove a name. fd or -errno. */
static int named_in_dir(struct volfs *v, const struct volfs_req *r, size_t skip,
                        const char **name)
{
    size_t used;
    int rc = name_at(r, skip, name, &used);
    return rc < 0 ? rc : volfs_dir_fd(v, r->h->nodeid);
}

static int op_lookup(struct volfs *v, struct volfs_req *r)
{
    const char *name;
    size_t used;
    int rc = name_at(r, 0, &name, &used);
    return rc < 0 ? rc : lookup_entry(v, r, r->h->nodeid, name);
}

static int op_forget(struct volfs *v, struct volfs_req *r)
{
    ARG(struct fuse_forget_in, in);
    volfs_forget(v, r->h->nodeid, in->nlookup);
    return VOLFS_NOREPLY;
}

static int op_batch_forget(struct volfs *v, struct volfs_req *r)
{
    ARG(struct fuse_batch_forget_in, in);
    size_t room = (r->arglen - sizeof *in) / sizeof(struct fuse_forget_one);
    const struct fuse_forget_one *one = (const void *)(r->arg + sizeof *in);
    for (size_t i = 0; i < in->count && i < room; i++)
        volfs_forget(v, one[i].nodeid, one[i].nlookup);
    return VOLFS_NOREPLY;
}

static int stat_node(struct volfs *v, uint64_t id, struct stat *st)
{
    struct volfs_node *n = volfs_node_get(v, id);
    return n ? volfs_node_stat(n, st) : -EBADF;
}

static int attr_reply(struct volfs *v, struct volfs_req *r)
{
    struct stat st;
    int rc = stat_node(v, r->h->nodeid, &st);
    if (rc < 0)
        return rc;
    struct fuse_attr_out *o = reply(r, sizeof *o);
    volfs_attr(&st, r->h, &o->attr);
    return 0;
}

static int op_getattr(struct volfs *v, struct volfs_req *r)
{
    ARG(struct fuse_getattr_in, in);
    (void)in;
    return attr_reply(v, r);
}

static struct timespec set_time(uint32_t valid, uint32_t now_bit, uint32_t set_bit,
                                uint64_t sec, uint32_t nsec)
{
    if (valid & now_bit)
        return (struct timespec){0, UTIME_NOW};
    if ((valid & set_bit) && nsec < 1000000000u && sec <= INT64_MAX)
        return (struct timespec){(time_t)sec, nsec};
    return (struct timespec){0, UTIME_OMIT};
}

/* An fd to change node's data or times: the handle the kernel named, else a new one. */
static int setattr_fd(struct volfs *v, const struct fuse_setattr_in *in, struct volfs_node *n,
                      int flags, bool *owned)
{
    struct volfs_fh *f = (in->valid & FATTR_FH) ? volfs_fh_get(v, in->fh) : NULL;
    *owned = !f;
    if (f && !f->is_dir)
        return f->fd;
    return volfs_node_open(v, n, flags);
}

static int op_setattr(struct volfs *v, struct volfs_req *r)
{
    ARG(struct fuse_setattr_in, in);
    struct volfs_node *n = volfs_node_get(v, r->h->nodeid);
    if (!n)
        return -EBADF;
    bool owned;
    if ((in->valid & FATTR_MODE) &&
        syscall(SYS_fchmodat2, n->fd, "", in->mode & VOLFS_MODE_MASK, AT_EMPTY_PATH) != 0)
        return -errno;
    if (in->valid & FATTR_SIZE) {
        if (in->size > INT64_MAX)
            return -EFBIG;
        int fd = setattr_fd(v, in, n, O_WRONLY, &owned);
        if (fd < 0)
            return fd;
        struct stat st;
        int rc = fstat(fd, &st) == 0 ? 0 : -errno;
        int64_t delta = rc == 0 ? (int64_t)in->size - st.st_size : 0;
        if (rc == 0)
            rc = volfs_budget_grow(v, delta);
        if (rc == 0)
            rc = ftruncate(fd, (off_t)in->size) == 0 ? 0 : -errno;
        if (owned)
            close(fd);
        if (rc < 0)
            return rc;
        volfs_budget_add(v, delta);
    }
    if (in->valid & (FATTR_ATIME | FATTR_MTIME | FATTR_ATIME_NOW | FATTR_MTIME_NOW)) {
        struct timespec ts[2] = {
            set_time(in->valid, FATTR_ATIME_NOW, FATTR_ATIME, in->atime, in->atimensec),
            set_time(in->valid, FATTR_MTIME_NOW, FATTR_MTIME, in->mtime, in->mtimensec)};
        if (utimensat(n->fd, "", ts, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) != 0)
            return -errno;
    }
    /* FATTR_UID/GID: ownership is the asker's (volfs.h), nothing to store. */
    return attr_reply(v, r);
}

/* Open flags the guest may ask for: access mode, append, truncate, sync variants. */
static int open_flags(uint32_t f)
{
    return (int)(f & (O_ACCMODE | O_APPEND | O_TRUNC | O_SYNC | O_DSYNC | O_NONBLOCK));
}

static int open_reply(struct volfs *v, struct volfs_req *r, int fd, bool is_dir, size_t at)
{
    uint64_t fh = volfs_fh_new(v, fd, is_dir);
    if (!fh)
        return -ENFILE;
    struct fuse_open_out *o = (void *)(r->out + at);
    memset(o, 0, sizeof *o);
    o->fh = fh;
    o->open_flags = is_dir ? 0 : FOPEN_DIRECT_IO; /* no page cache: sandboxes share */
    r->outlen = at + sizeof *o;
    return 0;
}

static int op_open(struct volfs *v, struct volfs_req *r)
{
    ARG(struct fuse_open_in, in);
    struct volfs_node *n = volfs_node_get(v, r->h->nodeid);
    if (!n)
        return -EBADF;
    struct stat st;
    int rc = volfs_node_stat(n, &st);
    if (rc < 0)
        return rc;
    if (!S_ISREG(st.st_mode))
        return S_ISDIR(st.st_mode) ? -EISDIR : -ELOOP;
    int fd = volfs_node_open(v, n, open_flags(in->flags));
    if (fd >= 0 && (in->flags & O_TRUNC))
        volfs_budget_add(v, -st.st_size); /* the inode's bytes are gone, whatever its links */
    return fd < 0 ? fd : open_reply(v, r, fd, false, 0);
}

static int op_opendir(struct volfs *v, struct volfs_req *r)
{
    ARG(struct fuse_open_in, in);
    (void)in;
    int dfd = volfs_dir_fd(v, r->h->nodeid);
    if (dfd < 0)
        return dfd;
    int fd = volfs_node_open(v, volfs_node_get(v, r->h->nodeid), O_RDONLY);
    return fd < 0 ? fd : open_reply(v, r, fd, true, 0);
}

static struct volfs_fh *file_fh(struct volfs *v, uint64_t fh)
{
    struct volfs_fh *f = volfs_fh_get(v, fh);
    return f && !f->is_dir ? f : NULL;
}

static int op_read(struct volfs *v, struct volfs_req *r)
{
    ARG(struct fuse_read_in, in);
    struct volfs_fh *f = file_fh(v, in->fh);
    if (!f)
        return -EBADF;
    if (in->size > VOLFS_MAX_IO || in->size > r->outcap || in->offset > INT64_MAX)
        return -EINVAL;
    ssize_t n = pread(f->fd, r->out, in->size, (off_t)in->offset);
    if (n < 0)
        return -errno;
    r->outlen = (size_t)n;
    return 0;
}

static int op_write(struct volfs *v, struct volfs_req *r)
{
    ARG(struct fuse_write_in, in);
    struct volfs_fh *f = file_fh(v, in->fh);
    if (!f)
        return -EBADF;
    size_t data = r->arglen - sizeof *in;
    if (in->size > VOLFS_MAX_IO || in->size > data || in->offset > (uint64_t)INT64_MAX - in->size)
        return -EINVAL;
    /* What the write adds: past the file's end (an O_APPEND fd writes at the end whatever
     * the offset says). */
    struct stat st;
    int fl = fcntl(f->fd, F_GETFL);
    if (fstat(f->fd, &st) != 0 || fl < 0)
        return -errno;
    int64_t at = (fl & O_APPEND) ? st.st_size : (int64_t)in->offset;
    int rc = volfs_budget_grow(v, at + (int64_t)in->size - st.st_size);
    if (rc < 0)
        return rc;
    ssize_t n = pwrite(f->fd, r->arg + sizeof *in, in->size, (off_t)in->offset);
    if (n < 0)
        return -errno;
    if (at + n > st.st_size)
        volfs_budget_add(v, at + n - st.st_size);
    struct fuse_write_out *o = reply(r, sizeof *o);
    o->size = (uint32_t)n;
    return 0;
}

static int op_release(struct volfs *v, struct volfs_req *r)
{
    ARG(struct fuse_release_in, in);
    volfs_fh_close(v, in->fh);
    return 0;
}

static int op_flush(struct volfs *v, struct volfs_req *r)
{
    ARG(struct fuse_flush_in, in);
    return volfs_fh_get(v, in->fh) ? 0 : -EBADF;
}

static int op_fsync(struct volfs *v, struct volfs_req *r)
{
    ARG(struct fuse_fsync_in, in);
    struct volfs_fh *f = volfs_fh_get(v, in->fh);
    if (!f)
        return -EBADF;
    int rc = (in->fsync_flags & FUSE_FSYNC_FDATASYNC) ? fdatasync(f->fd) : fsync(f->fd);
    return rc == 0 ? 0 : -errno;
}

static int op_readdir(struct volfs *v, struct volfs_req *r)
{
    ARG(struct fuse_read_in, in);
    struct volfs_fh *f = volfs_fh_get(v, in->fh);
    if (!f || !f->is_dir)
        return -EBADF;
    size_t cap = in->size < r->outcap ? in->size : r->outcap;
    if (in->offset > (uint64_t)LONG_MAX)
        return -EINVAL;
    if (in->offset == 0)
        rewinddir(f->dir);
    else
        seekdir(f->dir, (long)in->offset); /* an offset this server gave out (d_off) */
    size_t used = 0;
    for (;;) {
        long at = telldir(f->dir);
        errno = 0;
        struct dirent *d = readdir(f->dir);
        if (!d) {
            if (errno)
                return -errno;
            break;
        }
        size_t nl = strlen(d->d_name);
        size_t sz = FUSE_DIRENT_ALIGN(FUSE_NAME_OFFSET + nl);
        if (used + sz > cap) {
            seekdir(f->dir, at); /* this entry goes in the next READDIR */
            break;
        }
        struct fuse_dirent *e = (void *)(r->out + used);
        memset(e, 0, sz);
        e->ino = d->d_ino;
        e->off = (uint64_t)telldir(f->dir);
        e->namelen = (uint32_t)nl;
        e->type = d->d_type;
        memcpy(e->name, d->d_name, nl);
        used += sz;
    }
    r->outlen = used;
    return 0;
}

static int op_create(struct volfs *v, struct volfs_req *r)
{
    ARG(struct fuse_create_in, in);
    const char *name;
    int dfd = named_in_dir(v, r, sizeof *in, &name);
    if (dfd < 0)
        return dfd;
    int64_t freed = (in->flags & O_TRUNC) ? volfs_budget_freed(dfd, name) : 0;
    int fd = volfs_open_beneath(dfd, name,
                                open_flags(in->flags) | O_CREAT | (int)(in->flags & O_EXCL),
                                in->mode & ~in->umask & VOLFS_MODE_MASK & ~S_ISVTX);
    if (fd < 0)
        return fd;
    volfs_budget_add(v, -freed);
    uint64_t id;
    struct stat st;
    int rc = volfs_lookup(v, r->h->nodeid, name, &id, &st);
    if (rc < 0) {
        close(fd);
        return rc;
    }
    entry(r, id, &st);
    rc = open_reply(v, r, fd, false, sizeof(struct fuse_entry_out));
    if (rc < 0)
        volfs_forget(v, id, 1);
    return rc;
}

static int op_mkdir(struct volfs *v, struct volfs_req *r)
{
    ARG(struct fuse_mkdir_in, in);
    const char *name;
    int dfd = named_in_dir(v, r, sizeof *in, &name);
    if (dfd < 0)
        return dfd;
    if (mkdirat(dfd, name, in->mode & ~in->umask & VOLFS_MODE_MASK) != 0)
        return -errno;
    return lookup_entry(v, r, r->h->nodeid, name);
}

static int op_mknod(struct volfs *v, struct volfs_req *r)
{
    ARG(struct fuse_mknod_in, in);
    const char *name;
    int dfd = named_in_dir(v, r, sizeof *in, &name);
    if (dfd < 0)
        return dfd;
    if (!S_ISREG(in->mode))
        return -EPERM; /* no devices, FIFOs or sockets in a volume */
    int fd = volfs_open_beneath(dfd, name, O_WRONLY | O_CREAT | O_EXCL,
                                in->mode & ~in->umask & VOLFS_MODE_MASK & ~S_ISVTX);
    if (fd < 0)
        return fd;
    close(fd);
    return lookup_entry(v, r, r->h->nodeid, name);
}

static int op_remove(struct volfs *v, struct volfs_req *r, int flags)
{
    const char *name;
    int dfd = named_in_dir(v, r, 0, &name);
    if (dfd < 0)
        return dfd;
    int64_t freed = volfs_budget_freed(dfd, name);
    if (unlinkat(dfd, name, flags) != 0)
        return -errno;
    volfs_budget_add(v, -freed);
    return 0;
}

static int do_rename(struct volfs *v, struct volfs_req *r, uint64_t newdir, unsigned flags,
                     size_t skip)
{
    if (flags & ~(unsigned)(RENAME_NOREPLACE | RENAME_EXCHANGE))
        return -EINVAL;
    const char *oldname = NULL, *newname = NULL;
    size_t u1, u2;
    int rc = name_at(r, skip, &oldname, &u1);
    if (rc == 0)
        rc = name_at(r, skip + u1, &newname, &u2);
    int ofd = rc < 0 ? rc : volfs_dir_fd(v, r->h->nodeid);
    int nfd = ofd < 0 ? ofd : volfs_dir_fd(v, newdir);
    if (nfd < 0)
        return nfd;
    /* A replaced file's bytes are freed, unless it is the moved file itself. */
    struct stat os, ns;
    int64_t freed = 0;
    if (!(flags & RENAME_EXCHANGE) && fstatat(ofd, oldname, &os, AT_SYMLINK_NOFOLLOW) == 0 &&
        fstatat(nfd, newname, &ns, AT_SYMLINK_NOFOLLOW) == 0 &&
        (os.st_dev != ns.st_dev || os.st_ino != ns.st_ino))
        freed = volfs_budget_freed(nfd, newname);
    if (renameat2(ofd, oldname, nfd, newname, flags) != 0)
        return -errno;
    volfs_budget_add(v, -freed);
    volfs_renamed(v, newdir, newname);
    if (flags & RENAME_EXCHANGE)
        volfs_renamed(v, r->h->nodeid, oldname);
    return 0;
}

static int op_rename(struct volfs *v, struct volfs_req *r)
{
    ARG(struct fuse_rename_in, in);
    return do_rename(v, r, in->newdir, 0, sizeof *in);
}

static int op_rename2(struct volfs *v, struct volfs_req *r)
{
    ARG(struct fuse_rename2_in, in);
    return do_rename(v, r, in->newdir, in->flags, sizeof *in);
}

static int op_symlink(struct volfs *v, struct volfs_req *r)
{
    /* name, then target: the target is the guest's text, stored, never followed here. */
    const char *name, *target;
    size_t u1, u2;
    int rc = name_at(r, 0, &name, &u1);
    if (rc < 0)
        return rc;
    target = r->arg + u1;
    if (r->arglen <= u1 || !memchr(target, '\0', r->arglen - u1) || !target[0])
        return -EINVAL;
    u2 = strlen(target);
    if (u2 >= PATH_MAX)
        return -ENAMETOOLONG;
    int dfd = volfs_dir_fd(v, r->h->nodeid);
    if (dfd < 0)
        return dfd;
    if (symlinkat(target, dfd, name) != 0)
        return -errno;
    return lookup_entry(v, r, r->h->nodeid, name);
}

static int op_readlink(struct volfs *v, struct volfs_req *r)
{
    struct volfs_node *n = volfs_node_get(v, r->h->nodeid);
    if (!n)
        return -EBADF;
    size_t cap = r->outcap < PATH_MAX ? r->outcap : PATH_MAX;
    ssize_t len = readlinkat(n->fd, "", r->out, cap);
    if (len < 0)
        return errno == ENOENT ? -EINVAL : -errno;
    r->outlen = (size_t)len;
    return 0;
}

static int op_link(struct volfs *v, struct volfs_req *r)
{
    ARG(struct fuse_link_in, in);
    const char *name;
    size_t used;
    struct volfs_node *old = volfs_node_get(v, in->oldnodeid);
    int rc = old ? name_at(r, sizeof *in, &name, &used) : -EBADF;
    int ndfd = rc < 0 ? rc : volfs_dir_fd(v, r->h->nodeid);
    int odfd = ndfd < 0 ? ndfd : volfs_dir_fd(v, old->parent);
    if (odfd < 0)
        return odfd;
    /* Through the old name (AT_EMPTY_PATH would need CAP_DAC_READ_SEARCH); flags 0: a
     * symlink is linked as itself. */
    if (linkat(odfd, old->name, ndfd, name, 0) != 0)
        return -errno;
    return lookup_entry(v, r, r->h->nodeid, name);
}

static int op_statfs(struct volfs *v, struct volfs_req *r)
{
    struct statfs s;
    if (fstatfs(v->nodes[0].fd, &s) != 0)
        return -errno;
    struct fuse_statfs_out *o = reply(r, sizeof *o);
    o->st.blocks = s.f_blocks;
    o->st.bfree = s.f_bfree;
    o->st.bavail = s.f_bavail;
    o->st.files = s.f_files;
    o->st.ffree = s.f_ffree;
    o->st.bsize = (uint32_t)s.f_bsize;
    o->st.namelen = NAME_MAX;
    o->st.frsize = (uint32_t)s.f_frsize;
    int64_t left = volfs_budget_left(v);
    uint64_t lb = left >= 0 && s.f_bsize > 0 ? (uint64_t)left / (uint64_t)s.f_bsize : UINT64_MAX;
    if (lb < o->st.bavail)
        o->st.bavail = lb; /* df in the guest shows the quota left */
    if (lb < o->st.bfree)
        o->st.bfree = lb;
    return 0;
}

static int op_access(struct volfs *v, struct volfs_req *r)
{
    ARG(struct fuse_access_in, in);
    (void)in;
    return volfs_node_get(v, r->h->nodeid) ? 0 : -EBADF; /* everything is allowed */
}

int volfs_op(struct volfs *v, struct volfs_req *r)
{
    switch (r->h->opcode) {
    case FUSE_LOOKUP: return op_lookup(v, r);
    case FUSE_FORGET: return op_forget(v, r);
    case FUSE_BATCH_FORGET: return op_batch_forget(v, r);
    case FUSE_GETATTR: return op_getattr(v, r);
    case FUSE_SETATTR: return op_setattr(v, r);
    case FUSE_OPEN: return op_open(v, r);
    case FUSE_READ: return op_read(v, r);
    case FUSE_WRITE: return op_write(v, r);
    case FUSE_RELEASE:
    case FUSE_RELEASEDIR: return op_release(v, r);
    case FUSE_FLUSH: return op_flush(v, r);
    case FUSE_FSYNC:
    case FUSE_FSYNCDIR: return op_fsync(v, r);
    case FUSE_OPENDIR: return op_opendir(v, r);
    case FUSE_READDIR: return op_readdir(v, r);
    case FUSE_CREATE: return op_create(v, r);
    case FUSE_MKDIR: return op_mkdir(v, r);
    case FUSE_MKNOD: return op_mknod(v, r);
    case FUSE_UNLINK: return op_remove(v, r, 0);
    case FUSE_RMDIR: return op_remove(v, r, AT_REMOVEDIR);
    case FUSE_RENAME: return op_rename(v, r);
    case FUSE_RENAME2: return op_rename2(v, r);
    case FUSE_SYMLINK: return op_symlink(v, r);
    case FUSE_READLINK: return op_readlink(v, r);
    case FUSE_LINK: return op_link(v, r);
    case FUSE_STATFS: return op_statfs(v, r);
    case FUSE_ACCESS: return op_access(v, r);
    case FUSE_DESTROY:
        v->destroyed = true;
        return 0;
    default: return -ENOSYS;
    }
}
