/* tpl: templates — what a sandbox starts from — and their memory snapshots.
 *
 * A template is a directory holding `rootfs.ext4` (raw ext4 image, the read-only base of
 * every sandbox disk) and `template.json` (docs/templates.md: name, description, vcpus,
 * memory_mib, defaults {env, workdir, user}, start, ready, spec). Built-in templates are
 * found under <guest-dir>/templates/<name>/ (built by guest/build-template.sh) and are
 * visible to every tenant; templates built through the API live in
 * <data-dir>/templates/<name>/ (tpl_build.c) and belong to the tenant that built them
 * (the store's templates row): other tenants never see them. Names are one namespace for
 * the whole host (a taken name is 409 at build time). The kernel and initramfs every VM
 * boots are <guest-dir>/vmlinux and <guest-dir>/initramfs.cpio.
 *
 * Snapshots (see vm.h): for each (template, vcpus, memory_mib, nic) shape a sandbox asks
 * for, the first create cold-boots and meanwhile a template VM is booted on its own
 * overlay with file-backed RAM, its start command started and its ready check passed,
 * then snapshotted. A snapshot is a *version*, keyed by a fingerprint of what it was made
 * from (kernel, initramfs, rootfs, template.json, shape), kept in
 * <data-dir>/templates/<name>/snapshots/<v>x<m>[-net]-<fp16>/ {disk.qcow2, snap/, ready,
 * version.json}. When the guest or the template changes, the next create gets a new
 * version; an old one is removed only once no sandbox's disk chain (in any state but
 * deleted) names it. A built-in's image is used through a hard link in
 * <data-dir>/images/ (tpl_pin.c), so rebuilding it never changes existing disks.
 *
 * The template module knows no sandbox (sandbox/ sits above it and includes it): what
 * the sandboxes use is asked of the tpl_users_fn main.c registers (sbx_template_users),
 * and the sandbox module says when one is gone (tpl_user_gone). Prefix tpl_. */
#ifndef SPACE_TPL_H
#define SPACE_TPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon/spaced.h"
#include "daemon/store/store.h"

struct vm_config;
struct agentc;
typedef struct json_t json_t;

#define TPL_PATH_MAX 512

struct tpl_info {
    char name[64];
    char dir[TPL_PATH_MAX];    /* template directory */
    char rootfs[TPL_PATH_MAX + 16]; /* dir/rootfs.ext4, or (built-ins) its pin in the data dir */
    char description[256];
    char tenant[STORE_ID_MAX]; /* owner; "" for built-ins */
    bool builtin;              /* found under the guest dir */
    unsigned vcpus, memory_mib;/* template.json's shape for its sandboxes; 0 = not given */
    bool remote;               /* tpl_lookup_fetchable: the image is on other nodes only; rootfs
                                * is where tpl_fetch will put it */
    int64_t size_bytes;        /* remote: the image's recorded size */
};

/* Template names: [a-z0-9_-], 1..48 bytes, not starting with '-' or '.'. */
bool tpl_name_valid(const char *name);

struct tpl_registry *tpl_registry_new(struct spaced *sp);
void tpl_registry_free(struct tpl_registry *r);

/* ---- what sandboxes use ------------------------------------------------------------ */

/* A tpl_users_fn calls use(template_name, layers, n, use_arg) once for every sandbox that
 * is not deleted, with the read-only layers under its disk (paths, nearest first; n = 0
 * while it has none yet). The sweep keeps every snapshot version and pinned image a
 * layer lies in, and a template any sandbox names cannot be deleted. tpl_set_users: the
 * provider (main.c: sbx_template_users); none set = no sandboxes (tests). */
typedef void (*tpl_use_fn)(const char *template_name, const char *const *layers, unsigned n,
                           void *use_arg);
typedef void (*tpl_users_fn)(struct spaced *sp, tpl_use_fn use, void *use_arg);
void tpl_set_users(struct spaced *sp, tpl_users_fn users);
/* A sandbox is gone (deleted): it may have been the last user of an old snapshot version,
 * so the sweep runs soon (from the loop). */
void tpl_user_gone(struct spaced *sp);

/* Built-in template `name` (guest dir) if its rootfs is present: true with *out filled,
 * nothing pinned or built (a control daemon sizing a create it forwards). */
bool tpl_builtin_peek(struct spaced *sp, const char *name, struct tpl_info *out);

/* Template `name` if it exists, its rootfs is present and `tenant` may use it (built-ins:
 * everyone; built ones: their tenant; tenant NULL: internal, any): 0 and *out filled.
 * Else -1 with err (400 unknown_template, the same whether the name is absent or
 * another tenant's, so existence never leaks). */
int tpl_lookup(struct spaced *sp, const char *tenant, const char *name, struct tpl_info *out,
               struct spaced_err *err);

/* The snapshot for (template, vcpus, mem, nic) at the current fingerprint: true with
 * snap_dir and overlay (the frozen disk to back a clone's overlay, qcow2) filled when
 * ready. Otherwise false, and a background build starts if none is running (one that
 * failed at this fingerprint is tried again after a backoff, 30 s doubling to 1 h).
 * `nic`: clones with a network device need a snapshot taken with one
 * (net_claim_template), clones without one a snapshot without. */
bool tpl_snapshot(struct spaced *sp, const struct tpl_info *t, unsigned vcpus, unsigned mem_mib,
                  bool nic, char *snap_dir, size_t snap_cap, char *overlay, size_t overlay_cap);

/* The first wait before a failed snapshot build is tried again (default 30 s; tests
 * shorten it). */
void tpl_set_snapshot_retry(struct spaced *sp, int64_t first_ms);

/* Calls fn(template, vcpus, memory_mib, snap_dir, arg) for every snapshot version this
 * process knows to be ready (made or found since it started: a version on disk is found
 * by the first create of its shape), snap_dir as tpl_snapshot gives it (the warm pool's
 * key). What a node reports for placement (cluster.c). */
void tpl_snapshots_each_ready(struct spaced *sp,
                              void (*fn)(const char *name, unsigned vcpus, unsigned mem_mib,
                                         const char *snap_dir, void *arg),
                              void *arg);

/* Fills the parts of a VM config that come from the host (kernel, initramfs, qemu,
 * accel, jail); strings stay valid while the registry lives. Returns -1 with err when
 * the kernel or initramfs is missing. */
int tpl_vm_base(struct spaced *sp, struct vm_config *cfg, struct spaced_err *err);

/* ---- what sandboxes of a template get (template.json) ------------------------------- */

/* What a sandbox's agent gets from its template in `refresh`, added to `req`: "env", the
 * template's default env (template.json defaults.env) overridden by the sandbox's own
 * (`sandbox_env_json`, a JSON object or NULL), and "user" / "workdir", whom requests that
 * name no user run as and where their commands start. 0, or -1 when out of memory. */
int tpl_sandbox_refresh(struct spaced *sp, const char *template_name, const char *sandbox_env_json,
                        json_t *req);

/* Starts the template's start command (if it has one) in a cold-booted sandbox, detached,
 * as the template's default user, in its workdir, with its env; its output goes to
 * /tmp/space-start.log in the guest. Restored sandboxes already run it (it was started
 * before the snapshot). Fire and forget: a failure is logged. */
void tpl_start_in_sandbox(struct spaced *sp, const char *template_name, const char *sandbox_id,
                          struct agentc *agent);

/* ---- templates that travel between nodes (tpl_fetch.c) ------------------------------- */

/* A built template's image has a SHA-256 (tpl_digest.h) recorded with its size, its
 * template.json and the nodes holding it in the store's templates row. A node that lacks
 * the image fetches it from a live holder over the node API and uses it only once its
 * size and digest are the recorded ones; it is a holder from then on. Built-ins are on
 * every node and never travel. */

/* This daemon's node id when it is a cluster node, else "". */
const char *tpl_self_node(const struct spaced *sp);
/* Whether the ',' separated node list `nodes` names id. Pure. */
bool tpl_nodes_have(const char *nodes, const char *id);
/* The next id of a ',' separated node list at *cursor into id (cap bytes), skipping empty
 * and overlong entries, and advances *cursor: false at the end. Pure. */
bool tpl_nodes_next(const char **cursor, char *id, size_t cap);

/* As tpl_lookup, and on a node also a ready built template whose image is only on other
 * nodes: 0 with out->remote set (shape and description from the row's template.json,
 * out->rootfs where the fetch will put it); tpl_fetch before using it. */
int tpl_lookup_fetchable(struct spaced *sp, const char *tenant, const char *name, struct tpl_info *out,
                         struct spaced_err *err);

/* Makes template `name`'s image present here: 1 when it already is; 0 when a fetch
 * started or one in flight was joined: done(arg, NULL) once the image is verified and
 * published, done(arg, err) when it failed (502 template_digest_mismatch: other bytes
 * than recorded, discarded; 502 template_fetch_failed; 503 template_source_unavailable:
 * no live holder), called from the loop, never from inside tpl_fetch; -1 with err when
 * none can start. tpl_fetch_cancel: arg no longer wants to hear (no callback follows). */
typedef void (*tpl_fetch_done)(void *arg, const struct spaced_err *err);
int tpl_fetch(struct spaced *sp, const char *name, tpl_fetch_done done, void *arg, struct spaced_err *err);
void tpl_fetch_cancel(struct spaced *sp, void *arg);

/* GET /internal/templates/{name}/image (node API): streams a built template's image to a
 * request carrying the node token; 404 (revealing nothing) to any other. */
struct http_req;
void tpl_image_serve(struct spaced *sp, struct http_req *req, const char *name);

/* ---- builds, listing, deletion ------------------------------------------------------- */

/* Template builds are operations of the engine (op.h, target = template name).
 * tpl_submit_build (tpl_submit.c): writes the templates row (state "building", spec_json,
 * a new name checked against the tenant's quota: 403 quota_exceeded) and the op in one
 * transaction, holding the spec's base (tpl_hold: 409 template_deleted when it was
 * deleted meanwhile); 409 "conflict" if a build of that name is already open. 0 + *out,
 * or -1.
 * tpl_ops_register (main.c, once): registers the template_build executor: run =
 * tpl_build_start; on recovery a build is never resumed (tpl_build_interrupted marks the
 * row failed and the engine fails the op with "interrupted"). */
int tpl_submit_build(struct spaced *sp, const char *tenant, const char *name,
                     const char *spec_json, struct store_op *out, struct spaced_err *err);
void tpl_ops_register(struct spaced *sp);

/* Template builds (tpl_build.c). start: carries out template_build op `op_id` for the
 * store row `name` (spec validated by tpl_spec_check), finishing the op itself.
 * interrupted: marks a build cut by a restart as failed. */
int tpl_build_start(struct spaced *sp, const char *op_id, const char *name);
void tpl_build_interrupted(struct spaced *sp, const char *name);

/* Validates a build request body (tpl_spec.c; format docs/templates.md) for `tenant`:
 * 0, or -1 with err (400 naming the bad field, 409 when the name is taken). On success
 * a "base" field holds the base template's name (a "from" alias is renamed). */
int tpl_spec_check(struct spaced *sp, const char *tenant, json_t *spec, struct spaced_err *err);
/* The top-level fields a build request may have (NULL-terminated). */
extern const char *const tpl_spec_fields[];
#define TPL_SPEC_BODY_MAX (16u * 1024 * 1024) /* request body, base64 file contents included */
#define TPL_COPY_MAX (8u * 1024 * 1024)       /* one copy step's decoded content */
#define TPL_COPY_TOTAL_MAX (10u * 1024 * 1024) /* all copy steps of one spec */
#define TPL_STEPS_MAX 64
#define TPL_BUILD_MEM_MIB 512 /* a build VM's memory (1 vCPU); placement reserves it */

/* GET /v1/templates for `tenant`: {"templates":[...]} (built-ins and the tenant's own) /
 * one {"template": {...}} or NULL when absent or another tenant's. */
json_t *tpl_list_json(struct spaced *sp, const char *tenant);
json_t *tpl_get_json(struct spaced *sp, const char *tenant, const char *name);

/* DELETE /v1/templates/{name}: removes a template `tenant` built, its image and every
 * snapshot version. 404 if absent or another tenant's, 409 for a built-in, a template
 * being built or snapshotted, or one any sandbox (not deleted) or build still uses
 * (template_in_use): on a cluster node, sandboxes and builds on every node count. The
 * row is marked deleted by store_tpl_delete_unused, atomically against the creates and
 * builds that tpl_hold the template. On success *out is its representation with state
 * "deleted" (new reference). */
int tpl_delete(struct spaced *sp, const char *tenant, const char *name, json_t **out,
               struct spaced_err *err);

/* Inside the transaction that writes a sandbox, or a template build, made from template
 * `name` (before committing it): 0 when `name` is a built-in (never deleted) or its row
 * is still ready, which it stays until commit (store_tpl_hold); otherwise -1 with err:
 * 409 template_deleted when a delete committed first, 503 when the store failed. */
int tpl_hold(struct spaced *sp, const char *name, struct spaced_err *err);

#endif
