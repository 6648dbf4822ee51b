/* volfs_internal.h: the server's tables, shared by volfs.c (framing, dispatch, INIT),
 * volfs_node.c (nodes, handles, resolution) and volfs_ops.c (the operations). */
#ifndef SPACE_VOLFS_INTERNAL_H
#define SPACE_VOLFS_INTERNAL_H

#include <dirent.h>
#include <limits.h>
#include <linux/fuse.h>
#include <stdbool.h>
#include <sys/stat.h>

#include "volfs.h"

/* A file the guest's kernel knows by node id (index + 1; the root is FUSE_ROOT_ID). */
struct volfs_node {
    int fd;                    /* O_PATH|O_NOFOLLOW, -1 = free slot */
    uint64_t nlookup;          /* lookups not yet forgotten */
    dev_t dev;
    ino_t ino;
    uint64_t parent;           /* node id of a directory holding it as `name`; 0: root */
    char name[NAME_MAX + 1];   /* its last known name there (reopening goes through it) */
};

/* An open file or directory (fh = index + 1). */
struct volfs_fh {
    int fd;                    /* -1 = free slot */
    DIR *dir;                  /* directories: owns fd */
    bool is_dir;
};

struct volfs {
    struct volfs_node *nodes;  /* [VOLFS_NODES_MAX] */
    struct volfs_fh *fhs;      /* [VOLFS_HANDLES_MAX] */
    unsigned nnodes, nfhs;     /* slots in use */
    bool inited, destroyed;
    int64_t budget;            /* bytes this mount may add (volfs_set_budget); -1: no limit */
    int64_t grown;             /* bytes it added since (net: freed bytes count back) */
    int64_t *used;             /* where growth is counted: &grown, or the counter shared
                                  by the tenant's mounts (volfs_share_budget) */
};

/* One request being answered: its header and the bytes after it, the reply payload. */
struct volfs_req {
    const struct fuse_in_header *h;
    const char *arg;           /* after the header */
    size_t arglen;
    char *out;                 /* reply payload (after fuse_out_header) */
    size_t outcap;
    size_t outlen;             /* set by the op */
};

/* Operations return 0 (reply with out[outlen]), a negative errno (error reply), or
 * VOLFS_NOREPLY. */
#define VOLFS_NOREPLY 1

/* ---- volfs_node.c ---- */
/* openat2 of the single component name under dirfd, beneath it, following no symlink
 * (O_NOFOLLOW, RESOLVE_NO_SYMLINKS, RESOLVE_NO_MAGICLINKS, RESOLVE_NO_XDEV) with
 * O_CLOEXEC; the fd or a negative errno. */
int volfs_open_beneath(int dirfd, const char *name, int flags, mode_t mode);
struct volfs_node *volfs_node_get(struct volfs *v, uint64_t id);
/* Validates name: NUL-terminated within avail bytes, 1..NAME_MAX bytes, one component.
 * Returns 0 with *used = bytes including the NUL, or -EINVAL / -ENAMETOOLONG. */
int volfs_name(const char *p, size_t avail, size_t *used);
/* Resolves name under directory node `parent` and counts one lookup: *id and *st. */
int volfs_lookup(struct volfs *v, uint64_t parent, const char *name, uint64_t *id,
                 struct stat *st);
/* Drops n lookups of node id (freeing it at zero; never the root). */
void volfs_forget(struct volfs *v, uint64_t id, uint64_t n);
/* A new fd on node with open flags (O_NOFOLLOW and O_CLOEXEC added), the same inode. */
int volfs_node_open(struct volfs *v, struct volfs_node *n, int flags);
int volfs_node_stat(const struct volfs_node *n, struct stat *st);
/* The directory fd of node id (must be a directory), or a negative errno. */
int volfs_dir_fd(struct volfs *v, uint64_t id);
/* After a rename: the node (if known) now named newname in newparent. */
void volfs_renamed(struct volfs *v, uint64_t newparent, const char *newname);
/* Handles: a new one owning fd (a directory stream when is_dir); 0 when the table is
 * full (fd is closed then). */
uint64_t volfs_fh_new(struct volfs *v, int fd, bool is_dir);
struct volfs_fh *volfs_fh_get(struct volfs *v, uint64_t fh);
void volfs_fh_close(struct volfs *v, uint64_t fh);

/* ---- volfs_budget.c ---- */
/* 0 if the mount may add `growth` bytes now, else -ENOSPC (nothing charged). */
int volfs_budget_grow(struct volfs *v, int64_t growth);
/* Charges delta bytes (negative: freed). */
void volfs_budget_add(struct volfs *v, int64_t delta);
/* The bytes removing or replacing name in dirfd frees: its size when it is a regular
 * file with one link, else 0. Read before the operation, credited after it succeeded. */
int64_t volfs_budget_freed(int dirfd, const char *name);
/* Bytes still allowed (-1: no limit). */
int64_t volfs_budget_left(const struct volfs *v);

/* ---- volfs_ops.c ---- */
/* Runs the operation of r->h->opcode; ENOSYS for unknown ones. */
int volfs_op(struct volfs *v, struct volfs_req *r);
/* fuse_attr of st, owned by the asking uid/gid. */
void volfs_attr(const struct stat *st, const struct fuse_in_header *h, struct fuse_attr *a);

#endif
