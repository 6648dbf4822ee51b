/* volfs: the host side of a volume mount, a FUSE server over one directory.
 *
 * A volume is a directory on the host. A guest mounts it through FUSE: its agent relays
 * whole FUSE messages between /dev/fuse and a virtio-serial port, and this server
 * answers them from the directory. Every byte of a message comes from the guest, which
 * is hostile: volfs_handle checks the header's length against the message, every
 * operation's argument size, that every name is NUL-terminated inside the message and is
 * one path component (no '/', not "." or ".."), every node id and file handle against
 * its own tables, and every size and offset against its limits; a bad value gets an
 * errno reply (EINVAL, EBADF, ENAMETOOLONG...), a message whose framing is broken gets
 * none (the caller drops the connection).
 *
 * Paths: nothing is ever resolved by path from the root. Every node holds an O_PATH fd;
 * a name is resolved relative to its parent's fd with openat2(RESOLVE_BENEATH |
 * RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV) and O_NOFOLLOW, so a
 * symlink planted in the volume (by a guest, or by a second sandbox mounting it) is
 * stored and read back as a symlink (READLINK) and never followed by the host, and no
 * operation reaches outside the directory, whatever the guest sends. A regular file is
 * opened again through its parent and name (an O_PATH fd cannot be reopened without
 * /proc's magic links), and the result must be the same inode (else ESTALE).
 *
 * Semantics the guest sees: no caching (entry and attribute timeouts 0, every open
 * FOPEN_DIRECT_IO), so two sandboxes mounting one volume see each other's writes at
 * once: they share one POSIX directory, with no locking across sandboxes (flock/fcntl
 * locks stay local to a sandbox's kernel). Files show as owned by whoever asks (the
 * request's uid/gid) and permission checks are the server's, which allows everything:
 * the volume belongs to the tenant, not to a guest user. chown is accepted and ignored;
 * setuid/setgid bits are dropped; only regular files, directories and symlinks can be
 * made (MKNOD of anything else is EPERM). Shared writable mmap of a file is not
 * supported (direct I/O). A mount may have a byte budget (volfs_set_budget): past it,
 * writes that grow files fail with ENOSPC.
 *
 * Ops: INIT, LOOKUP, FORGET, BATCH_FORGET, GETATTR, SETATTR, OPEN, READ, WRITE, RELEASE,
 * FLUSH, FSYNC, OPENDIR, READDIR, RELEASEDIR, FSYNCDIR, CREATE, MKDIR, MKNOD, UNLINK,
 * RMDIR, RENAME, RENAME2, SYMLINK, READLINK, LINK, STATFS, ACCESS, DESTROY; anything else
 * is ENOSYS.
 *
 * Not thread-safe: one server per mount, one message at a time. Prefix volfs_. */
#ifndef SPACE_VOLFS_H
#define SPACE_VOLFS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define VOLFS_MAX_IO (128 * 1024)            /* max_read / max_write told in INIT */
#define VOLFS_MSG_MAX (VOLFS_MAX_IO + 4096)  /* largest request accepted */
#define VOLFS_REPLY_MAX (VOLFS_MAX_IO + 4096) /* reply buffer volfs_handle needs */
#define VOLFS_NODES_MAX 16384                /* nodes the guest may hold (lookups) */
#define VOLFS_HANDLES_MAX 4096               /* open files and directories */

struct volfs;

/* A server on the directory root_fd (taken: closed by volfs_free). NULL on allocation
 * failure (root_fd is closed then too). */
struct volfs *volfs_new(int root_fd);
void volfs_free(struct volfs *v);

/* Byte budget: how much this mount may grow its volume (the tenant's volume quota left
 * when the mount started, daemon/volume/vol_quota.h), -1 (the default) for no limit.
 * Growth is counted by file sizes: a WRITE past a file's end, a SETATTR that extends it;
 * truncating, unlinking or replacing (rename, open with O_TRUNC) a file with one link
 * counts its bytes back. A request that would pass the budget fails with ENOSPC and
 * changes nothing; STATFS shows the budget left as the free space. Starts counting from
 * zero. */
void volfs_set_budget(struct volfs *v, int64_t bytes);
/* Counts growth in the int64 at offset 0 of the shared memory open on fd (a memfd spaced
 * gives every mount of one tenant, with the same budget) instead of in this mount
 * alone, so the tenant's mounts together stay within the budget. Each space-volfs
 * answers one request at a time, checking then adding: together they pass it by at most
 * one request's growth per mount. 0, or -1 with errno. */
int volfs_share_budget(struct volfs *v, int fd);

/* Handles one request message msg[len] (fuse_in_header + arguments) and writes the
 * reply (fuse_out_header + payload) to out[cap], cap >= VOLFS_REPLY_MAX. Returns the
 * reply's length, 0 when the request has no reply (FORGET, BATCH_FORGET), or -1 when
 * the message cannot be answered: shorter than a header, its header's length is not
 * len, or larger than VOLFS_MSG_MAX (the caller then ends the connection). */
ssize_t volfs_handle(struct volfs *v, const void *msg, size_t len, void *out, size_t cap);

/* Serves the byte stream fd (the guest's relay: whole FUSE messages back to back, each
 * framed by its header's length) until EOF, DESTROY, or a message volfs_handle refuses.
 * Returns 0 at EOF or DESTROY, -1 on a refused message or an I/O error. */
int volfs_serve(struct volfs *v, int fd);

/* True once DESTROY was handled (the mount is gone: the caller stops serving). */
int volfs_destroyed(const struct volfs *v);

/* Counts for tests: live nodes (the root included) and open handles. */
unsigned volfs_nodes(const struct volfs *v);
unsigned volfs_handles(const struct volfs *v);

#endif
