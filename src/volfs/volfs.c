/* volfs.c: the server object, message framing and INIT (volfs.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "volfs_internal.h"

/* The protocol this server speaks: 7.31 (what Debian's 6.1 guest kernel and later
 * accept); a kernel asking for less gets its own minor back. */
#define VOLFS_MINOR 31

struct volfs *volfs_new(int root_fd)
{
    struct volfs *v = calloc(1, sizeof *v);
    if (v) {
        v->nodes = calloc(VOLFS_NODES_MAX, sizeof *v->nodes);
        v->fhs = calloc(VOLFS_HANDLES_MAX, sizeof *v->fhs);
    }
    int fd = root_fd < 0 ? -1 : openat(root_fd, ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (root_fd >= 0)
        close(root_fd);
    if (!v || !v->nodes || !v->fhs || fd < 0) {
        if (fd >= 0)
            close(fd);
        if (v) {
            free(v->nodes);
            free(v->fhs);
        }
        free(v);
        return NULL;
    }
    v->budget = -1;
    v->used = &v->grown;
    for (unsigned i = 0; i < VOLFS_NODES_MAX; i++)
        v->nodes[i].fd = -1;
    for (unsigned i = 0; i < VOLFS_HANDLES_MAX; i++)
        v->fhs[i].fd = -1;
    struct stat st;
    fstat(fd, &st);
    v->nodes[0] = (struct volfs_node){.fd = fd, .nlookup = 1, .dev = st.st_dev,
                                      .ino = st.st_ino};
    v->nnodes = 1;
    return v;
}

void volfs_free(struct volfs *v)
{
    if (!v)
        return;
    for (unsigned i = 0; i < VOLFS_HANDLES_MAX; i++)
        volfs_fh_close(v, i + 1);
    for (unsigned i = 0; i < VOLFS_NODES_MAX; i++)
        if (v->nodes[i].fd >= 0)
            close(v->nodes[i].fd);
    free(v->nodes);
    free(v->fhs);
    free(v);
}

int volfs_destroyed(const struct volfs *v) { return v->destroyed; }
unsigned volfs_nodes(const struct volfs *v) { return v->nnodes; }
unsigned volfs_handles(const struct volfs *v) { return v->nfhs; }

/* INIT: version negotiation and the limits; no cache-enabling flag is ever offered. */
static int op_init(struct volfs *v, struct volfs_req *r)
{
    const struct fuse_init_in *in = (const void *)r->arg;
    if (r->arglen < 16) /* major, minor, max_readahead, flags: every kernel sends these */
        return -EINVAL;
    if (in->major != FUSE_KERNEL_VERSION)
        return -EPROTO;
    struct fuse_init_out *o = (void *)r->out;
    memset(o, 0, sizeof *o);
    o->major = FUSE_KERNEL_VERSION;
    o->minor = in->minor < VOLFS_MINOR ? in->minor : VOLFS_MINOR;
    o->max_readahead = 0;
    o->flags = 0;
    o->max_background = 16;
    o->congestion_threshold = 12;
    o->max_write = VOLFS_MAX_IO;
    o->time_gran = 1;
    /* Kernels before 7.23 read only the first 24 bytes. */
    r->outlen = o->minor < 23 ? FUSE_COMPAT_22_INIT_OUT_SIZE : sizeof *o;
    v->inited = true;
    return 0;
}

ssize_t volfs_handle(struct volfs *v, const void *msg, size_t len, void *out, size_t cap)
{
    const struct fuse_in_header *h = msg;
    if (len < sizeof *h || len > VOLFS_MSG_MAX || h->len != len || cap < VOLFS_REPLY_MAX)
        return -1;
    struct fuse_out_header *oh = out;
    struct volfs_req r = {.h = h, .arg = (const char *)msg + sizeof *h,
                          .arglen = len - sizeof *h, .out = (char *)out + sizeof *oh,
                          .outcap = cap - sizeof *oh};
    int rc;
    if (h->opcode == FUSE_INIT)
        rc = op_init(v, &r);
    else if (!v->inited || v->destroyed)
        rc = -EIO; /* nothing before INIT, nothing after DESTROY */
    else
        rc = volfs_op(v, &r);
    if (rc == VOLFS_NOREPLY)
        return 0;
    if (rc < 0)
        r.outlen = 0;
    oh->len = (uint32_t)(sizeof *oh + r.outlen);
    oh->error = rc < 0 ? rc : 0;
    oh->unique = h->unique;
    return (ssize_t)oh->len;
}
