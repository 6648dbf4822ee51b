/* sbx_submit.c: submitting sandbox operations to the engine (op.h), intent first: the
 * sandbox row (new, or its new desired state) is written in the op's own transaction. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "daemon/quota/quota.h"
#include "daemon/template/tpl.h"
#include "log.h"
#include "sbx_internal.h"

/* A sandbox disk's virtual size: its template image's, in MiB rounded up (0 if unknown:
 * the create then fails later, when the disk is made). */
static unsigned disk_mib(const char *image)
{
    struct stat stt;
    if (stat(image, &stt) != 0 || stt.st_size <= 0)
        return 0;
    return (unsigned)(((uint64_t)stt.st_size + (1u << 20) - 1) >> 20);
}

/* The new sandbox row, stamped with its op's time; the quota check shares the
 * transaction (quota.h), and so does the template's row: read as ready before, it may
 * have been deleted since (on another node, or through another control), and a delete
 * from now on waits for this row and counts it (tpl_hold). */
static int write_new_sandbox(struct spaced *sp, const struct store_op *op, void *arg,
                             struct spaced_err *err)
{
    struct store_sbx *rec = arg;
    rec->created_ms = rec->updated_ms = op->created_ms;
    rec->deadline_ms = rec->timeout_s ? op->created_ms + rec->timeout_s * 1000 : 0;
    struct store_quota_vals want = {.sandboxes = 1, .vcpus = rec->vcpus,
                                    .memory_mib = rec->memory_mib, .disk_mib = rec->disk_mib};
    if (quota_check(sp, op->tenant, &want, err) != 0 || tpl_hold(sp, rec->template_name, err) != 0)
        return -1;
    return store_sbx_put(sp->store, rec) == 0 ? 0 : -1;
}

int sbx_submit_create(struct spaced *sp, const char *tenant, const struct sbx_spec *spec,
                      const char *idem_key, const char *body_hash, struct store_op *out,
                      struct spaced_err *err)
{
    int rc = op_idem_replay(sp, tenant, idem_key, body_hash, out, err);
    if (rc != 0)
        return rc;
    struct tpl_info t;
    struct store_snap snap = {0};
    /* A template built on another node is fetched when the create runs (tpl_fetch). */
    if (tpl_lookup_fetchable(sp, tenant, spec->template_name, &t, err) < 0) {
        /* no such template: a snapshot of the tenant's (sbx_snap.c) */
        int found = sbx_snap_for_create(sp, tenant, spec->template_name,
                                        sbx_policy_nic(spec->network_json), &snap, err);
        if (found <= 0 || tpl_lookup(sp, tenant, snap.template_name, &t, err) < 0)
            return -1;
    }
    if (sbx_vol_check(sp, tenant, spec->volumes_json, err) < 0)
        return -1;
    struct store_sbx rec;
    memset(&rec, 0, sizeof rec);
    if (spaced_random_id(rec.id, "sb", 16) < 0)
        return spaced_err_set(err, 500, "internal", "random source failed");
    snprintf(rec.tenant, sizeof rec.tenant, "%s", tenant);
    snprintf(rec.template_name, sizeof rec.template_name, "%s", spec->template_name);
    sbx_spec_shape(spec, &t, &rec.vcpus, &rec.memory_mib);
    rec.env_json = spec->env_json;
    rec.metadata_json = spec->metadata_json;
    rec.network_json = spec->network_json;
    rec.volumes_json = spec->volumes_json;
    rec.private_ports = spec->private_ports;
    rec.auto_resume = spec->auto_resume;
    rec.timeout_s = spec->timeout_s;
    snprintf(rec.on_timeout, sizeof rec.on_timeout, "%s", spec->on_timeout);
    snprintf(rec.desired, sizeof rec.desired, "%s", sbx_state_name(SBX_RUNNING));
    snprintf(rec.state, sizeof rec.state, "%s", sbx_state_name(SBX_CREATING));
    snprintf(rec.run_dir, sizeof rec.run_dir, "%s/run/%s", sp->opt.data_dir, rec.id);
    snprintf(rec.node, sizeof rec.node, "%s", sp->sbx->node_id);
    rec.disk_mib = t.remote ? (unsigned)(((uint64_t)t.size_bytes + (1u << 20) - 1) >> 20) : disk_mib(t.rootfs);
    if (snap.id[0]) { /* restored from the snapshot: its template and shape */
        snprintf(rec.template_name, sizeof rec.template_name, "%s", snap.template_name);
        snprintf(rec.source, sizeof rec.source, "%s", snap.id);
        rec.vcpus = snap.vcpus;
        rec.memory_mib = snap.memory_mib;
    }
    struct op_intent in = {.write = write_new_sandbox, .arg = &rec, .idem_key = idem_key,
                           .body_hash = body_hash};
    if (op_enqueue(sp, tenant, OP_CREATE, rec.id, &in, out, err) < 0)
        return -1;
    /* rec's JSON strings belong to spec; the table copies them. The engine runs the op
     * from the loop, after this. */
    if (!sbx_table_add(sp, &rec))
        return spaced_err_set(err, 500, "internal", "out of memory");
    log_info("sandbox.state", "sandbox=%s tenant=%s from=none to=creating desired=running template=%s",
             rec.id, tenant, rec.template_name);
    return 0;
}

/* The sandbox row with its new desired state (already set in memory). */
static int write_desired(struct spaced *sp, const struct store_op *op, void *arg,
                         struct spaced_err *err)
{
    (void)err;
    struct store_sbx rec = *sbx_record(arg);
    rec.updated_ms = op->created_ms;
    return store_sbx_put(sp->store, &rec) == 0 ? 0 : -1;
}

int sbx_submit(struct spaced *sp, const char *tenant, enum op_kind kind, const char *sandbox_id,
               struct store_op *out, struct spaced_err *err)
{
    memset(out, 0, sizeof *out);
    struct sbx *s = sbx_find(sp, tenant, sandbox_id);
    if (!s)
        return spaced_err_set(err, 404, "not_found", "sandbox %.64s not found", sandbox_id);
    enum sbx_state target;
    struct spaced_err terr;
    if (sbx_transition(sbx_desired(s), sbx_state(s), kind, &target, &terr) < 0)
        return spaced_err_set(err, terr.status, terr.code, "sandbox %s: %s", sandbox_id, terr.message);
    /* A suspended sandbox's memory comes back only into the VM runtime that saved it
     * (vm/vm_sig.h): refused before its op exists, the sandbox stays suspended. Files of a
     * sandbox moved here are checked before they are fetched (sbx_move_need). */
    if (target == SBX_RUNNING && sbx_desired(s) == SBX_SUSPENDED && !s->vm) {
        char dir[SBX_PATH_MAX], what[STORE_ID_MAX + 40];
        sbx_path(s, "suspend", dir, sizeof dir);
        snprintf(what, sizeof what, "the saved state of sandbox %s", sandbox_id);
        if (sbx_runtime_check_dir(sp, dir, what, err) < 0)
            return -1;
    }
    /* A VM coming back needs room on a cluster node, checked before the op exists. */
    bool had_resv = s->resv_id[0] != '\0';
    if (sbx_resv_take(s, target, err) < 0)
        return -1;
    enum sbx_state old_desired = sbx_desired(s);
    sbx_set_desired(s, target);
    /* A delete cancels the sandbox's still-pending ops in the same transaction. */
    struct op_intent in = {.write = write_desired, .arg = s, .supersede = kind == OP_DELETE};
    if (op_enqueue(sp, tenant, kind, sandbox_id, &in, out, err) < 0) {
        sbx_set_desired(s, old_desired);
        if (!had_resv)
            sbx_resv_release(s);
        return -1;
    }
    sbx_resv_for(s, out->id);
    return 0;
}
