/* space-volfs: serves one volume directory to one guest mount over a byte stream.
 *
 *     space-volfs DIR        serves DIR on fd 0 (a connected socket: the guest agent's
 *                            relay of /dev/fuse), until the mount goes away
 *
 * volfs.h says what it serves and what it checks. spaced starts one per mounted volume
 * of a sandbox, jailed like QEMU, its fd 0 relayed to the guest agent's `mount` channel
 * (daemon/volume/vol_mount.h). */
#include <fcntl.h>
#include <stdio.h>

#include "volfs/volfs.h"

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: space-volfs DIR  (serves DIR on fd 0)\n");
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
    int rc = volfs_serve(v, 0);
    volfs_free(v);
    return rc == 0 ? 0 : 1;
}
