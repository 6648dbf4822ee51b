/* fsroom: free space on a file system, as an unprivileged writer sees it (statvfs's
 * f_bavail: root's reserved blocks are not counted; spaced runs as root, but what it
 * must leave free is what the rest of the host can use).
 *
 * Used where spaced decides before it writes much (vm_room.c: a save; store_sqlite.c:
 * the store's reserve). */
#ifndef SPACE_FSROOM_H
#define SPACE_FSROOM_H

/* Bytes free on the file system of path, or of the directory that would hold it while
 * path does not exist (a file about to be made or just removed); -1 when neither can be
 * asked. */
long long fsroom_avail(const char *path);

#endif
