/* vol_mount: one volume mounted into one running sandbox. Prefix volm_.
 *
 * Transport: the guest agent's `mount` op (docs/agent-protocol.md) mounts FUSE at the
 * path and relays the kernel's requests over that op's channel, on the agent connection
 * every sandbox already has: no extra virtio device, so template snapshots and warm
 * pool VMs stay valid and a volume is mounted into a restored VM like into a booted one.
 * Here each mount gets a `space-volfs DIR` process serving the volume's directory on
 * one end of a socketpair; the other end is relayed to and from the channel.
 *
 * space-volfs runs jailed like the sandbox's QEMU (vm_spawn: new mount, PID, network and
 * IPC namespaces, a read-only root holding the libraries, the space-volfs binary and the
 * volume's directory bound read-write, nothing else of the host; the VM's uid, no
 * supplementary groups, no_new_privs). It keeps CAP_DAC_OVERRIDE and CAP_FOWNER, and
 * nothing else, so it can use files a mount of another sandbox (another uid) or the
 * files API (root) made: what it can reach is only what its mount namespace shows.
 *
 * Bounds (the guest is hostile): bytes from the guest are granted back (manual credit)
 * only once space-volfs has taken them off the socket, so at most the channel's window
 * (256 KiB) waits here; replies are read from the socket only while less than
 * VOLM_QUEUE_MAX waits toward the agent, and the socket's input buffer is capped at
 * VOLM_READ_MAX. space-volfs bounds every message itself (volfs.h).
 *
 * Life: a mount ends when the channel closes (the agent connection went: a snapshot
 * restore, a suspend, a spaced restart; or the guest unmounted) or when space-volfs
 * exits; space-volfs is killed then. The sandbox mounts its volumes again on every new
 * agent connection (sandbox/sbx_vol.c). */
#ifndef SPACE_VOL_MOUNT_H
#define SPACE_VOL_MOUNT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct event_base;
struct agentc;
struct vm_jail;
struct volm;

#define VOLM_QUEUE_MAX (256u * 1024u) /* reply bytes queued toward the agent */
#define VOLM_READ_MAX (64u * 1024u)   /* socket input buffered before it is moved */
#define VOLM_MOUNTS_MAX 8             /* volumes one sandbox may mount */

struct volm_spec {
    const char *dir;          /* the volume's directory on the host */
    const char *guest_path;   /* where the guest mounts it */
    const char *volfs;        /* the space-volfs binary */
    const char *jail_root;    /* an empty directory for the jail's root (made if absent) */
    const struct vm_jail *jail; /* the VM's jail (enabled, uid, gid); NULL or disabled:
                                   unjailed, only with --no-jail */
    const char *label;        /* for logs: "<sandbox>:<volume>" */
    bool has_budget;          /* the mount may grow the volume by at most budget bytes */
    int64_t budget;           /* (space-volfs DIR MAX_BYTES: ENOSPC past it; vol_quota.h) */
    struct vol_share *share;  /* with a budget: the tenant's share it counts growth in
                                 (vol_share.h; budget is then the share's), or NULL */
};

/* Starts space-volfs and sends the `mount` request on agent. The mount takes over the
 * caller's reference to spec->share (left when the mount is freed). NULL with err on
 * failure (nothing left running; the share's reference is still the caller's). */
struct volm *volm_start(struct event_base *base, struct agentc *agent,
                        const struct volm_spec *spec, char *err, size_t errlen);

/* false once the mount ended (channel closed or space-volfs gone): free it. */
bool volm_live(const struct volm *m);

/* Ends the mount (CLOSE to the agent, which unmounts), kills space-volfs, frees. */
void volm_free(struct volm *m);

/* Bytes this mount holds in spaced (for tests: stays within the bounds above). */
size_t volm_buffered(const struct volm *m);

/* Whether the absolute guest path p is acceptable as a mount point: normalised (no "."
 * or ".." components, no "//", no trailing "/"), not "/", not under /proc, /sys or /dev,
 * under 256 bytes. Returns NULL if so, else why (a static string). */
const char *volm_path_problem(const char *p);

#endif
