/* tpl: templates — what a sandbox starts from — and their memory snapshots.
 *
 * A template is a directory holding `rootfs.ext4` (raw ext4 image, the read-only base of
 * every sandbox disk) and `template.json` ({"name","description","vcpus","memory_mib"},
 * all optional). Built-in templates are found under <guest-dir>/templates/<name>/ (built
 * by guest/build-template.sh); templates built through the API live in
 * <data-dir>/templates/<name>/ (tpl_build.c); the kernel and initramfs every VM boots are
 * <guest-dir>/vmlinux and <guest-dir>/initramfs.cpio.
 *
 * Snapshots (see vm.h): for each (template, vcpus, memory_mib) shape a sandbox asks for,
 * the first create cold-boots and meanwhile a template VM is booted on its own overlay
 * with file-backed RAM, snapshotted once its agent says hello, and kept under
 * <data-dir>/templates/<name>/<vcpus>x<mem>[-net]/ {disk.qcow2, snap/, ready}. Later creates of
 * that shape restore from it. Built once per data dir; reused across restarts. */
#ifndef SPACE_TPL_H
#define SPACE_TPL_H

#include <stdbool.h>
#include <stddef.h>

#include "daemon/spaced.h"

struct vm_config;
typedef struct json_t json_t;

#define TPL_PATH_MAX 512

struct tpl_info {
    char name[64];
    char dir[TPL_PATH_MAX];    /* template directory */
    char rootfs[TPL_PATH_MAX + 16]; /* dir/rootfs.ext4 */
    char description[256];
    bool builtin;              /* found under the guest dir */
};

/* Template names: [a-z0-9_-], 1..48 bytes, not starting with '-' or '.'. */
bool tpl_name_valid(const char *name);

struct tpl_registry *tpl_registry_new(struct spaced *sp);
void tpl_registry_free(struct tpl_registry *r);

/* Template `name` if it exists and its rootfs is present: 0 and *out filled; else -1
 * with err (400 unknown_template). tenant is for tenant-built templates (unused yet). */
int tpl_lookup(struct spaced *sp, const char *tenant, const char *name, struct tpl_info *out,
               struct spaced_err *err);

/* The snapshot for (name, vcpus, mem, nic): true with snap_dir and overlay (the frozen
 * disk to back a clone's overlay, qcow2) filled when ready. Otherwise false, and a
 * background build starts if none is running or failed before. `nic`: clones with a
 * network device need a snapshot taken with one (net_claim_template), clones without
 * one a snapshot without. */
bool tpl_snapshot(struct spaced *sp, const struct tpl_info *t, unsigned vcpus, unsigned mem_mib,
                  bool nic, char *snap_dir, size_t snap_cap, char *overlay, size_t overlay_cap);

/* Fills the parts of a VM config that come from the host (kernel, initramfs, qemu,
 * accel, jail); strings stay valid while the registry lives. Returns -1 with err when
 * the kernel or initramfs is missing. */
int tpl_vm_base(struct spaced *sp, struct vm_config *cfg, struct spaced_err *err);

/* Template builds (tpl_build.c). start: carries out template_build op `op_id` for the
 * store row `name` (spec {"from","steps"}), finishing the op itself. interrupted: marks a
 * build cut by a restart as failed. */
int tpl_build_start(struct spaced *sp, const char *op_id, const char *name);
void tpl_build_interrupted(struct spaced *sp, const char *name);

/* GET /v1/templates: {"templates":[...]} / one {"name","state","builtin",...}. */
json_t *tpl_list_json(struct spaced *sp);
json_t *tpl_get_json(struct spaced *sp, const char *name);

#endif
