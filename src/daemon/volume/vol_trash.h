/* vol_trash: removing a directory tree of a volume without holding spaced's loop.
 *
 * A volume or a directory in one may hold any number of files (guests write them), and
 * removing them one by one takes as long as there are. So a removal is a rename, atomic
 * and immediate on the loop, into <data_dir>/volumes/.trash/ (the same filesystem; no
 * tenant id starts with '.'), and the tree is deleted there by a detached thread that
 * shares nothing with the loop. The client sees the path gone at once; the bytes leave
 * the tenant's volume usage (vol_quota.h) at once, the disk frees as the thread goes.
 * A restart finishes what a killed spaced left in the trash (vol_trash_sweep). Prefix
 * vol_trash_. */
#ifndef SPACE_VOL_TRASH_H
#define SPACE_VOL_TRASH_H

#include "daemon/spaced.h"

/* Moves the entry `leaf` of the directory open on dirfd into the trash and starts its
 * deletion. 0, or -1 with errno (the entry is then where it was). */
int vol_trash_move(struct spaced *sp, int dirfd, const char *leaf);

/* Starts deleting whatever the trash holds (left by a spaced that was killed while
 * removing). Once at start. */
void vol_trash_sweep(struct spaced *sp);

#endif
