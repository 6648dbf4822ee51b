/* sbx_jail: whether and how spaced jails sandbox QEMUs (vm.h struct vm_jail).
 *
 * The default (opt.jail == -1) decides from the host: on when spaced runs as root, the
 * `nobody` user exists and /sys/fs/cgroup is writable. `--jail` insists (spaced refuses
 * to start when it cannot work), `--no-jail` turns it off. A jailed QEMU runs as nobody,
 * in its own mount and PID namespaces, in the cgroup space/space-<vm id> with cpu.max =
 * vcpus CPUs, memory.max = memory + QEMU overhead and a pids limit. Sandbox VMs, pooled
 * VMs and template *build* VMs (which run a tenant's steps) are jailed. Template
 * snapshot VMs are not: their RAM file becomes the copy-on-write base every clone maps,
 * so it must stay owned by root, out of reach of the uid the clones run as. */
#ifndef SPACE_SBX_JAIL_H
#define SPACE_SBX_JAIL_H

struct spaced;
struct vm_config;

/* Settles sp->opt.jail (-1 = decide from the host) and the uid/gid; logs the outcome.
 * Returns -1 with a message on stderr when --jail was asked for and cannot work. */
int sbx_jail_resolve(struct spaced *sp);

/* Fills cfg->jail for a sandbox VM from cfg->vcpus (set those first); no-op when off. */
void sbx_jail_fill(const struct spaced *sp, struct vm_config *cfg);

#endif
