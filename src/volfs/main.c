/* space-volfs: serves one volume directory to one guest mount over a byte stream.
 *
 *     space-volfs DIR [MAX_BYTES [FD]]  serves DIR on fd 0 (a connected socket: the
 *                                   guest agent's relay of /dev/fuse), until the mount
 *                                   goes away; with MAX_BYTES, the mount may grow the
 *                                   volume by at most that many bytes (ENOSPC past it);
 *                                   with FD, growth is counted in the memory open there,
 *                                   shared with the tenant's other mounts (volfs.h)
 *
 * volfs.h says what it serves and what it checks. spaced starts one per mounted volume
 * of a sandbox, jailed like QEMU, its fd 0 relayed to the guest agent's `mount` channel
 * (daemon/volume/vol_mount.h), MAX_BYTES the tenant's volume quota left (vol_quota.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>

#include "volfs/volfs.h"

int main(int argc, char **argv)
{
    char *end = NULL, *fdend = NULL;
    long long max = -1, fd = -1;
    errno = 0;
    if (argc >= 3)
        max = strtoll(argv[2], &end, 10);
    if (argc == 4)
        fd = strtoll(argv[3], &fdend, 10);
    if (argc < 2 || argc > 4 || (argc >= 3 && (!argv[2][0] || *end || max < 0)) ||
        (argc == 4 && (!argv[3][0] || *fdend || fd < 3 || fd > 1024)) || errno) {
        fprintf(stderr, "usage: space-volfs DIR [MAX_BYTES [FD]]  (serves DIR on fd 0)\n");
        return 2;
    }
    int root = open(argv[1], O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (root < 0) {
        perror(argv[1]);
        return 1;
    }
    struct volfs *v = volfs_new(root);
    if (!v) {
        fprintf(stderr, "space-volfs: out of memory\n");
        return 1;
    }
    volfs_set_budget(v, max);
    if (fd >= 0 && volfs_share_budget(v, (int)fd) != 0) {
        perror("space-volfs: shared budget");
        volfs_free(v);
        return 1;
    }
    int rc = volfs_serve(v, 0);
    volfs_free(v);
    return rc == 0 ? 0 : 1;
}
