/* tpl_internal.h: registry internals shared by the tpl_*.c files. */
#ifndef SPACE_TPL_INTERNAL_H
#define SPACE_TPL_INTERNAL_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "tpl.h"

struct tpl_snap;  /* one (template, shape, fingerprint) snapshot version (tpl_snapshot.c) */
struct tpl_build; /* one template build in flight (tpl_build.c) */
struct tpl_log;   /* the output of one build (tpl_log.h) */
struct tpl_fetch; /* one image being fetched from another node (tpl_fetch.c) */
struct tpl_base_wait; /* a build waiting for its base's image (tpl_build.c) */
struct event;

#define TPL_SNAP_RETRY_MS 30000 /* first wait before a failed snapshot is built again */
#define TPL_COPIES_SWEEP_S 10   /* a node's sweep for copies deleted elsewhere */

struct tpl_registry {
    char kernel[TPL_PATH_MAX];    /* <guest-dir>/vmlinux */
    char initramfs[TPL_PATH_MAX]; /* <guest-dir>/initramfs.cpio */
    struct tpl_snap *snaps;       /* list, owned */
    struct tpl_build *builds;     /* builds in flight, owned */
    struct tpl_log *logs;         /* build logs, newest first, owned (tpl_log.h) */
    struct tpl_fetch *fetches;    /* images being fetched from other nodes (tpl_fetch.c) */
    struct tpl_base_wait *base_waits; /* builds waiting for a base being fetched (owned) */
    struct event *gc;             /* deferred snapshot-version sweep (owned) */
    struct event *gc_tick;        /* a node's periodic sweep: copies deleted elsewhere (owned) */
    tpl_users_fn users;           /* tpl_set_users, NULL = no sandboxes */
    int64_t snap_retry_ms;        /* first wait before a failed snapshot is built again */
};

/* Fills t's description and shape from a template.json document. */
void tpl_meta_fill(struct tpl_info *t, const json_t *meta);
/* On a node: removes copies of built templates whose row is gone, deleted, or names
 * another image now (deleted or built again on another node), when no sandbox here uses
 * them; their digest-named images go with the pin sweep once unused (tpl_fetch.c). */
void tpl_copies_sweep(struct spaced *sp);
/* Ends every fetch in flight, telling no waiter (spaced is stopping). */
void tpl_fetches_free(struct tpl_registry *r);

/* Calls r->users (see tpl_users_fn), if one is registered. */
void tpl_users_each(struct spaced *sp, tpl_use_fn use, void *arg);

void tpl_snapshots_free(struct tpl_registry *r);
/* Kills template VMs an earlier spaced on data_dir left running (called once at start,
 * before this spaced starts any). */
void tpl_kill_stale_vms(const char *data_dir);
/* Ends every build in flight (their VMs are killed: a build cannot be resumed). */
void tpl_builds_free(struct tpl_registry *r);
/* Number of ready snapshot versions of template `name` at the current fingerprint. */
unsigned tpl_snapshots_ready(struct spaced *sp, const char *name);
/* True while a snapshot of template `name` is being built. */
bool tpl_snapshots_busy(struct spaced *sp, const char *name);
/* Forgets template `name`'s snapshots (its directory is about to be removed). */
void tpl_snapshots_forget(struct spaced *sp, const char *name);
/* {"version","shape","state","in_use"} for each snapshot version on disk (API). */
json_t *tpl_snapshots_json(struct spaced *sp, const char *name);
/* Removes snapshot versions no sandbox uses and that are not current (soon, from the
 * loop). r: the registry (NULL: sp->tpl; given while spaced is still being set up). */
void tpl_snapshots_gc_soon(struct spaced *sp, struct tpl_registry *r);
/* Adds the rootfs path of every snapshot version this process knows to `arr`. */
void tpl_snapshots_rootfs(struct spaced *sp, json_t *arr);

/* Built-in images pinned in the data dir (tpl_pin.c). pin: points t->rootfs at the
 * pinned hard link of a built-in's image (made if missing; unchanged when it cannot be).
 * sweep: removes pins that are not current and that neither `live_paths` (disk chains of
 * live sandboxes) nor the snapshot versions in `version_dirs` (paths) name. */
void tpl_pin_builtin(struct spaced *sp, struct tpl_info *t);
/* Images named by their content (tpl_pin.c): <data>/images/sha256-<hex>.ext4 for a
 * SHA-256 `hex` (0, or -1 when it does not fit cap). link: makes that name a hard link of
 * `from` (whose digest the caller knows): 0, or -1 (another filesystem: the caller keeps
 * using `from`). Bytes under such a name are never replaced; the sweep removes a name no
 * template here, sandbox chain or snapshot version needs. */
int tpl_image_path(const struct spaced *sp, const char *hex, char *out, size_t cap);
int tpl_image_link(struct spaced *sp, const char *from, const char *cas);
void tpl_pins_sweep(struct spaced *sp, const json_t *live_paths, json_t *version_dirs);

/* True while a build in flight uses template `name` as its base. */
bool tpl_builds_use(struct spaced *sp, const char *name);

/* What a template gives its sandboxes and build steps (template.json). */
struct tpl_defaults {
    json_t *env;                /* {"K":"V"} (owned), never NULL after load */
    char user[64];              /* default "root" */
    char workdir[TPL_PATH_MAX]; /* default "/" */
    char *start;                /* start command or NULL (owned) */
    char *ready;                /* ready check or NULL (owned) */
};
/* Reads dir/template.json's defaults, start and ready (missing file/fields: defaults). */
void tpl_defaults_load(const char *dir, struct tpl_defaults *out);
/* The same from a template.json document (a template built on another node: its row's). */
void tpl_defaults_from(const json_t *meta, struct tpl_defaults *out);
void tpl_defaults_clear(struct tpl_defaults *d);

/* Starting a template's start command and waiting for its ready check on a VM's agent
 * (tpl_probe.c): used by the build (to fail early) and by the snapshot (to gate it).
 * done(arg, NULL) when ready, done(arg, "why") otherwise; called once, from the loop,
 * never from inside tpl_probe_start. */
struct tpl_probe;
typedef void (*tpl_probe_done)(void *arg, const char *failure);
struct tpl_probe *tpl_probe_start(struct spaced *sp, struct agentc *agent,
                                  const struct tpl_defaults *d, tpl_probe_done done, void *arg);
/* Cancels a probe (no callback follows); call it before freeing the agent connection
 * the probe uses. NULL is a no-op. */
void tpl_probe_free(struct tpl_probe *p);
/* Warming the template VM before its memory snapshot (tpl_warm.c): a refresh with the
 * template's default user and workdir, then `true` run as a command, so clones restore
 * with what their first refresh and command need already in memory. done(arg) once it
 * has ended, well or not (failures are logged), from the loop, never from inside
 * tpl_warm_start. NULL if nothing could be sent (logged; go on without). label names the
 * snapshot in the log. tpl_warm_free cancels (no callback follows); NULL is a no-op. */
struct tpl_warm;
typedef void (*tpl_warm_done)(void *arg);
struct tpl_warm *tpl_warm_start(struct agentc *agent, const struct tpl_defaults *d,
                                const char *label, tpl_warm_done done, void *arg);
void tpl_warm_free(struct tpl_warm *w);

/* The exec request for a start command as a detached service (output to a log file). */
json_t *tpl_start_request(const struct tpl_defaults *d);

/* The last output of an exec request, kept for error messages: `tail` has room for cap + 1
 * bytes and holds *len of them, NUL-terminated. append: adds buf[0..n), dropping the oldest
 * bytes beyond cap. set_error: replaces it with "code: message" (cut at cap). */
void tpl_tail_append(char *tail, size_t *len, size_t cap, const uint8_t *buf, size_t n);
void tpl_tail_set_error(char *tail, size_t *len, size_t cap, const char *code,
                        const char *message);

#endif
