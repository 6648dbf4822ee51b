/* tpl_internal.h: registry internals shared by tpl.c and tpl_snapshot.c. */
#ifndef SPACE_TPL_INTERNAL_H
#define SPACE_TPL_INTERNAL_H

#include "tpl.h"

struct tpl_snap;  /* one (template, shape) snapshot, built or being built */
struct tpl_build; /* one template build in flight (tpl_build.c) */

struct tpl_registry {
    char kernel[TPL_PATH_MAX];    /* <guest-dir>/vmlinux */
    char initramfs[TPL_PATH_MAX]; /* <guest-dir>/initramfs.cpio */
    struct tpl_snap *snaps;       /* list, owned */
    struct tpl_build *builds;     /* builds in flight, owned */
};

void tpl_snapshots_free(struct tpl_registry *r);
/* Kills template VMs an earlier spaced on data_dir left running (called once at start,
 * before this spaced starts any). */
void tpl_kill_stale_vms(const char *data_dir);
/* Ends every build in flight (their VMs are killed: a build cannot be resumed). */
void tpl_builds_free(struct tpl_registry *r);
/* Number of ready snapshot shapes of template `name` (for the API). */
unsigned tpl_snapshots_ready(struct spaced *sp, const char *name);

#endif
