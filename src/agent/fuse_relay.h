/* agent_fuse: the `mount` op's FUSE relay (fuse_relay.c says how it works and what it
 * bounds). Prefix agent_fuse_. */
#ifndef SPACE_AGENT_FUSE_RELAY_H
#define SPACE_AGENT_FUSE_RELAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Largest FUSE message either way: 128 KiB of data (the max_write space-volfs offers)
 * plus headers, the same bound as space-volfs's VOLFS_MSG_MAX. The kernel wants a read
 * buffer at least this big. */
#define AGENT_FUSE_MSG_MAX (128 * 1024 + 4096)
#define AGENT_FUSE_HDR_MIN 16     /* sizeof(struct fuse_out_header) */
#define AGENT_FUSE_MOUNTS_MAX 8   /* mounts per guest (spaced allows as many) */

/* Whether dev is the device of a live mount (any path to it: the mount point, a bind
 * mount of it, a link into it). agent_resolve keeps the agent's own file ops off it. */
bool agent_fuse_is_volume(dev_t dev);

/* The length of the reply starting at p[n]: 0 when fewer than 4 bytes are there yet,
 * (size_t)-1 when the header announces less than a header or more than
 * AGENT_FUSE_MSG_MAX, else the length (which may exceed n: wait for more). */
size_t agent_fuse_reply_len(const uint8_t *p, size_t n);

#endif
