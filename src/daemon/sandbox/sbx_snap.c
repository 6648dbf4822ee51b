/* sbx_snap.c: persistent snapshots of running sandboxes (POST /v1/sandboxes/{id}/snapshots,
 * /v1/snapshots).
 *
 * A snapshot is a fork's capture that is kept (sbx_fork.c does the capturing: one
 * OP_SNAPSHOT op on the sandbox, the guest stopped only for the capture): the directory
 * <data_dir>/captures/<snapshot id>/ holds the memory (a RAM file that creates from the
 * snapshot map copy-on-write, like a template's) + device state, the disk overlay copy
 * and chain.json, and the store row (store_snap) says whose it is. The row is
 * written "creating" with the op (quota: one snapshot, checked in that transaction) and
 * becomes "ready" with its size when the capture is complete; a failed or interrupted
 * capture removes it.
 *
 * A create whose "template" names no template but a ready snapshot of the tenant (id or
 * name) restores from it like a fork (store_sbx.source = the snapshot id), with the
 * snapshot's template (env, user, start command) and shape.
 *
 * Deleting a snapshot removes its row at once; its directory goes with the next capture
 * collection (sbx_fork_gc) that finds no sandbox standing on it: a sandbox made from it
 * names it as source and has its disk layer in its chain, so nothing in use is removed.
 * The directory and the row survive the source sandbox's deletion and spaced's restarts. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/quota/quota.h"
#include "log.h"
#include "sbx_internal.h"

bool sbx_policy_nic(const char *network_json)
{
    json_t *p = network_json ? json_loads(network_json, 0, NULL) : NULL;
    const char *mode = json_string_value(json_object_get(p, "mode"));
    bool yes = mode && strcmp(mode, "none") != 0;
    json_decref(p);
    return yes;
}

static int write_snapshot(struct spaced *sp, const struct store_op *op, void *arg,
                          struct spaced_err *err)
{
    struct store_snap *r = arg;
    struct store_quota_vals want = {.snapshots = 1};
    if (quota_check(sp, op->tenant, &want, err) != 0)
        return -1;
    struct store_snap other;
    if (r->name[0] && store_snap_find(sp->store, op->tenant, r->name, &other) == 0)
        return spaced_err_set(err, 409, "conflict", "a snapshot named %s exists already (%s)",
                              r->name, other.id);
    r->created_ms = op->created_ms;
    return store_snap_put(sp->store, r) == 0 ? 0 : -1;
}

int sbx_submit_snapshot(struct spaced *sp, const char *tenant, const char *sandbox_id,
                        const char *name, struct store_op *out, struct store_snap *snap,
                        struct spaced_err *err)
{
    memset(out, 0, sizeof *out);
    memset(snap, 0, sizeof *snap);
    struct sbx *s = sbx_find(sp, tenant, sandbox_id);
    if (!s)
        return spaced_err_set(err, 404, "not_found", "sandbox %.64s not found", sandbox_id);
    if (sbx_capture_check(s, err) < 0)
        return -1;
    struct sbx_fork *f = calloc(1, sizeof *f);
    if (!f || spaced_random_id(snap->id, "sn", 16) < 0) {
        free(f);
        return spaced_err_set(err, 500, "internal", "out of memory or random source failed");
    }
    snprintf(snap->tenant, sizeof snap->tenant, "%s", tenant);
    snprintf(snap->name, sizeof snap->name, "%s", name ? name : "");
    snprintf(snap->source, sizeof snap->source, "%s", sandbox_id);
    snprintf(snap->template_name, sizeof snap->template_name, "%s", s->rec.template_name);
    snap->vcpus = s->rec.vcpus;
    snap->memory_mib = s->rec.memory_mib;
    snap->nic = sbx_policy_nic(s->rec.network_json);
    snprintf(snap->state, sizeof snap->state, "creating");
    struct op_intent in = {.write = write_snapshot, .arg = snap};
    if (op_enqueue(sp, tenant, OP_SNAPSHOT, sandbox_id, &in, out, err) < 0) {
        free(f);
        return -1;
    }
    snprintf(f->op_id, sizeof f->op_id, "%s", out->id);
    snprintf(f->tenant, sizeof f->tenant, "%s", tenant);
    snprintf(f->parent, sizeof f->parent, "%s", sandbox_id);
    snprintf(f->capture, sizeof f->capture, "%s", snap->id);
    snprintf(f->snapshot, sizeof f->snapshot, "%s", snap->id);
    sbx_job_add(sp, f);
    log_info("snapshot.state", "snapshot=%s tenant=%s sandbox=%s state=creating", snap->id,
             tenant, sandbox_id);
    return 0;
}

static int64_t file_bytes(const char *dir, const char *leaf)
{
    char p[SBX_PATH_MAX + 32];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", dir, leaf);
    return stat(p, &st) == 0 ? (int64_t)st.st_blocks * 512 : 0;
}

void sbx_snap_captured(struct sbx_fork *f, int err, const char *msg)
{
    struct spaced *sp = f->sp;
    char op[STORE_ID_MAX], id[STORE_ID_MAX], dir[SBX_PATH_MAX], why[600] = "";
    snprintf(op, sizeof op, "%s", f->op_id);
    snprintf(id, sizeof id, "%s", f->snapshot);
    sbx_capture_dir(sp, id, dir, sizeof dir);
    struct store_snap r;
    if (err != VM_OK)
        snprintf(why, sizeof why, "the capture failed: %s", msg ? msg : vm_error_code(err));
    else if (store_snap_get(sp->store, id, &r) != 0)
        snprintf(why, sizeof why, "the snapshot's row is gone or unreadable (deleted meanwhile?)");
    if (!why[0]) {
        r.size_bytes = file_bytes(dir, "state") + file_bytes(dir, "mem") +
                       file_bytes(dir, "disk.qcow2") + file_bytes(dir, "disk.raw");
        /* A cluster node hashes the parts first, so other nodes can fetch them. */
        bool travels = sp->sbx->node_id[0] != '\0';
        if (travels && sbx_travel_record(sp, op, &r) == 0) {
            sbx_job_free(f);
            return; /* sbx_travel_record finishes the op */
        }
        snprintf(r.state, sizeof r.state, "ready");
        if (travels)
            snprintf(why, sizeof why, "cannot start hashing the snapshot's parts");
        else if (store_snap_put(sp->store, &r) != 0)
            snprintf(why, sizeof why, "the store refused the snapshot's row");
    }
    sbx_job_free(f);
    if (why[0]) {
        sbx_snap_abandon(sp, id);
        spaced_rm_rf(dir);
        op_finish(sp, op, false, "snapshot_failed", why);
        return;
    }
    log_info("snapshot.state", "snapshot=%s state=ready size_bytes=%lld", id,
             (long long)r.size_bytes);
    op_progress(sp, op, 100, id);
    op_finish(sp, op, true, NULL, NULL);
}

void sbx_snap_abandon(struct spaced *sp, const char *snap_id)
{
    if (store_snap_delete(sp->store, snap_id) < 0)
        log_warn("snapshot.state", "snapshot=%s msg=\"cannot remove the row of a failed snapshot\"",
                 snap_id);
}

struct interrupted {
    struct spaced *sp;
    const struct store_op *op;
};

static int drop_creating(const struct store_snap *r, void *arg)
{
    struct interrupted *in = arg;
    if (strcmp(r->state, "creating") == 0 && strcmp(r->source, in->op->target) == 0 &&
        r->created_ms == in->op->created_ms)
        sbx_snap_abandon(in->sp, r->id);
    return 0;
}

void sbx_snap_interrupted(struct spaced *sp, const struct store_op *op)
{
    struct interrupted in = {sp, op};
    store_snap_each(sp->store, op->tenant, drop_creating, &in);
}

bool sbx_snap_kept(struct spaced *sp, const char *id)
{
    struct store_snap r;
    return store_snap_get(sp->store, id, &r) != STORE_NOTFOUND; /* a store error keeps it */
}

/* ---- creating a sandbox from a snapshot ------------------------------------------------ */

int sbx_snap_for_create(struct spaced *sp, const char *tenant, const char *id_or_name,
                        bool nic, struct store_snap *out, struct spaced_err *err)
{
    int rc = store_snap_find(sp->store, tenant, id_or_name, out);
    if (rc == STORE_NOTFOUND)
        return 0;
    if (rc != 0)
        return spaced_err_set(err, 503, "store_unavailable", "looking up snapshot %.64s: the "
                              "store failed", id_or_name);
    if (strcmp(out->state, "ready") != 0)
        return spaced_err_set(err, 409, "invalid_state", "snapshot %s is not ready yet (%s)",
                              out->id, out->state);
    if (out->nic != nic)
        return spaced_err_set(err, 400, "invalid_request", "snapshot %s was taken %s a network "
                              "device: network.mode must be %s", out->id,
                              out->nic ? "with" : "without",
                              out->nic ? "\"open\" or \"allowlist\"" : "\"none\"");
    /* Its memory restores only into the VM runtime that saved it (vm/vm_sig.h): the
     * capture's own record when it is here, else the one its holder hashed. */
    char dir[SBX_PATH_MAX], p[SBX_PATH_MAX + 32], saved[VM_SIG_MAX], what[STORE_ID_MAX + 16];
    sbx_capture_dir(sp, out->id, dir, sizeof dir);
    snprintf(p, sizeof p, "%s/snapshot.json", dir);
    snprintf(what, sizeof what, "snapshot %s", out->id);
    if (access(p, F_OK) == 0)
        return sbx_runtime_check_dir(sp, dir, what, err) < 0 ? -1 : 1;
    sbx_parts_runtime(out->parts, saved, sizeof saved);
    return sbx_runtime_check(sp, saved, what, err) < 0 ? -1 : 1;
}

/* ---- API ------------------------------------------------------------------------------- */

json_t *sbx_snap_to_json(const struct store_snap *r)
{
    char created[32];
    spaced_fmt_time(r->created_ms, created);
    return json_pack("{s:s, s:s?, s:s, s:s, s:s, s:i, s:i, s:s, s:I, s:s, s:s?}", "id", r->id,
                     "name", r->name[0] ? r->name : NULL, "tenant", r->tenant, "source_sandbox",
                     r->source, "template", r->template_name, "vcpus", (int)r->vcpus,
                     "memory_mib", (int)r->memory_mib, "state", r->state, "size_bytes",
                     (json_int_t)r->size_bytes, "created_at", created, "node",
                     r->node[0] ? r->node : NULL);
}

int sbx_snap_delete(struct spaced *sp, const char *tenant, const char *id_or_name,
                    struct spaced_err *err)
{
    struct store_snap r;
    int rc = store_snap_find(sp->store, tenant, id_or_name, &r);
    if (rc == STORE_NOTFOUND)
        return spaced_err_set(err, 404, "not_found", "snapshot %.64s not found", id_or_name);
    if (rc == 0 && strcmp(r.state, "ready") != 0)
        return spaced_err_set(err, 409, "invalid_state", "snapshot %s is still being taken",
                              r.id);
    if (rc != 0 || store_snap_delete(sp->store, r.id) < 0)
        return spaced_err_set(err, 503, "store_unavailable", "deleting snapshot %s: the store "
                              "failed", id_or_name);
    log_info("snapshot.state", "snapshot=%s tenant=%s state=deleted", r.id, tenant);
    return 0;
}
