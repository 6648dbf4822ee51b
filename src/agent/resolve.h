/* agent_resolve: path resolution that never enters a volume mount. Prefix agent_resolve.
 *
 * Why: a volume mount's FUSE requests are relayed by the agent's own loop
 * (fuse_relay.c), so a file op of the agent that reaches a mounted file waits for a
 * reply only that same loop could relay: the agent hangs. A lexical check of the path
 * is not enough, since a symlink anywhere (/tmp/l -> /mnt/vol, /tmp/l -> /mnt/vol/dir,
 * /tmp/d/l -> ../mnt/vol in the middle of a path, chains of links) or a bind mount of
 * the volume leads into it.
 *
 * How: the path is walked one component at a time, as the kernel would, but in user
 * space: each component is opened O_PATH|O_NOFOLLOW in its parent, which is already
 * known to be off every volume (a lookup there never reaches FUSE, and an O_PATH open of
 * the object a name leads to, a volume's root included, sends FUSE nothing), then its
 * device is read with statx(AT_STATX_DONT_SYNC), which FUSE answers from the inode
 * without a request. A component on a volume's device (agent_fuse_is_volume) stops the
 * walk: EXDEV. Links are followed by their text (at most AGENT_RESOLVE_LINKS_MAX),
 * with the kernel's meaning of ".." after a link (the link target's parent).
 *
 * The result is a path of real directories, every one off the volumes, which the op
 * then uses. A guest process that swaps one of them for a link in the instant between
 * the walk and the op can still make the agent wait; such a process could as well stop
 * the agent outright (kill -STOP, as root in its own guest), so only the tenant's own
 * sandbox is at stake; what the guest sets up beforehand (links, bind mounts) is always
 * caught. */
#ifndef SPACE_AGENT_RESOLVE_H
#define SPACE_AGENT_RESOLVE_H

#include <stdbool.h>
#include <sys/stat.h>

#define AGENT_RESOLVE_LINKS_MAX 40   /* as the kernel's limit (ELOOP past it) */

/* Resolves the absolute normalised path `in` into out[PATH_MAX]: every link followed,
 * the last component's only if follow_last (else the last component is the link
 * itself). A component that does not exist ends the walk: the rest of the path is
 * appended as it stands ("." dropped; ".." there is ENOENT, as the kernel's walk would
 * fail on the missing directory), so an op that creates finds its real parent.
 * 0, or -1 with errno: EXDEV (the path leads into a volume mount), ELOOP, ENOTDIR,
 * ENAMETOOLONG, ENOENT (an empty link, or ".." below a missing directory), or what an
 * open or readlink of a component failed with. */
int agent_resolve(const char *in, bool follow_last, char *out);

/* fstatat(dirfd, name, AT_SYMLINK_NOFOLLOW) for a name in a directory that is off the
 * volumes: -1 with EXDEV, without asking FUSE anything, when name is a volume's mount
 * point (or a bind mount of one). For directory walks (list, recursive remove and
 * watch). */
int agent_resolve_lstatat(int dirfd, const char *name, struct stat *st);

/* lstat(path) of an absolute normalised path, through agent_resolve (no link followed
 * for the last component): -1 with EXDEV when it is on a volume. */
int agent_resolve_lstat(const char *path, struct stat *st);

#endif
