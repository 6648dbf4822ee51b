/* jail: how spaced jails every QEMU it starts (vm.h struct vm_jail and
 * struct vm_jail_policy). Prefix jail_.
 *
 * Its own folder, below sandbox/ and template/: every QEMU spaced starts is jailed the
 * same way, whoever starts it, so the policy belongs to none of them (it once lived in
 * sandbox/ and made template/ include the sandbox module).
 *
 * The jail is required: sandbox VMs, pooled VMs, template build VMs (a tenant's steps)
 * and template snapshot VMs (a template's start command) are all jailed, and a VM
 * started without a jail fails (VM_E_JAIL) instead of running as root. When the jail
 * cannot work (spaced not root, /sys/fs/cgroup not writable, the uid range taken by a
 * host user, the QEMU shim missing) spaced refuses to start and says why. `--no-jail` is
 * the development escape: QEMU then runs unjailed as spaced's user, logged as a warning
 * at start and for every VM. `--jail` is accepted and means the default.
 *
 * A jailed QEMU runs under its own uid and gid from `--jail-uids BASE:COUNT` (default
 * 2000000000:65536, a range no Debian user or group has; spaced refuses a range that
 * holds an entry of the host's user or group database), in its own mount, PID, network
 * (empty) and IPC namespaces, in the cgroup space/space-<vm id> with cpu.max = vcpus
 * CPUs, memory.max = memory + QEMU overhead and a pids limit. Clones map the template's
 * RAM file, root-owned 0444 and bound read-only, through space-qemu-shim.so (next to the
 * spaced binary, or SPACE_QEMU_SHIM), which makes QEMU open it read-only. The role
 * `control` starts no VMs and needs none of this. */
#ifndef SPACE_JAIL_H
#define SPACE_JAIL_H

#include <stdbool.h>

struct spaced;
struct vm_config;

/* Settles sp->opt.jail, makes sp->jailer (the policy and uid allocator every VM of this
 * process starts under; vm.h struct vm_jailer) and logs the outcome. starts_vms:
 * whether this process's role starts VMs at all (main.c asks cluster/; false turns the
 * jail off, there is nothing to jail). Returns -1 with a message on stderr when the jail
 * is wanted and cannot work. */
int jail_resolve(struct spaced *sp, bool starts_vms);

/* Fills cfg->jail for a VM from cfg->vcpus (set those first): sp->jailer, and a uid of
 * its own from the range; with --no-jail only the jailer (which then allows it). */
void jail_fill(const struct spaced *sp, struct vm_config *cfg);

#endif
