/* agent_init: the agent's duties as the guest's PID 1, before and after serving.
 *
 * Boot: mount /dev (devtmpfs), /proc, /sys; load the virtio modules listed in
 * /modules/order (from /modules/<name>.ko, finit_module); mount the ext4 root /dev/vda
 * at /newroot, move /dev /proc /sys into it and switch to it (MS_MOVE + chroot: the
 * initramfs is rootfs and cannot be pivoted away); then mount /dev/pts, /dev/shm, /tmp,
 * /run, bring up lo and eth0 (agent_net_up), set the hostname, and find the virtio-serial port named
 * "space.agent" (/sys/class/virtio-ports/x/name -> /dev/x).
 * Orphans are reaped by the serve loop (SIGCHLD), forever. */
#ifndef SPACE_AGENT_INIT_H
#define SPACE_AGENT_INIT_H

#include <stddef.h>

#define AGENT_PORT_NAME "space.agent"

/* Boots the guest as described above and writes the port's device path into
 * port[cap]. Failures of optional steps are logged; returns -1 only if no port was
 * found (nothing can be served). */
int agent_init_boot(char *port, size_t cap);

/* Terminates every process (TERM, then KILL after 2 s), syncs, remounts / read-only
 * and powers off. Does not return. */
void agent_init_poweroff(void) __attribute__((noreturn));

#endif
