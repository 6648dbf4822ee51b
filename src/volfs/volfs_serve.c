/* volfs_serve.c: the stream loop of volfs_serve (volfs.h). A message's length comes
 * from its own header; one that announces less than a header or more than
 * VOLFS_MSG_MAX ends the stream before its body is read (no allocation is sized by the
 * guest). */
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "volfs_internal.h"
#include "writeall.h"

/* Reads exactly n bytes: 1, 0 at EOF before the first byte, -1 on error or a cut. */
static int read_full(int fd, char *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return r == 0 && got == 0 ? 0 : -1;
        got += (size_t)r;
    }
    return 1;
}

int volfs_serve(struct volfs *v, int fd)
{
    char *in = malloc(VOLFS_MSG_MAX), *out = malloc(VOLFS_REPLY_MAX);
    int rc = in && out ? 0 : -1;
    while (rc == 0 && !v->destroyed) {
        int got = read_full(fd, in, sizeof(struct fuse_in_header));
        if (got <= 0) {
            rc = got;
            break;
        }
        uint32_t len = ((const struct fuse_in_header *)in)->len;
        if (len < sizeof(struct fuse_in_header) || len > VOLFS_MSG_MAX ||
            (len > sizeof(struct fuse_in_header) &&
             read_full(fd, in + sizeof(struct fuse_in_header),
                       len - sizeof(struct fuse_in_header)) != 1)) {
            rc = -1;
            break;
        }
        ssize_t n = volfs_handle(v, in, len, out, VOLFS_REPLY_MAX);
        if (n < 0 || (n > 0 && writeall_fd(fd, out, (size_t)n) < 0))
            rc = -1;
    }
    free(in);
    free(out);
    return rc;
}
