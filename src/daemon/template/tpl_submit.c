/* tpl_submit.c: template builds as operations of the engine (op.h): submitting one
 * (the templates row and the op in one transaction) and the template_build executor. */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "daemon/ops/op.h"
#include "daemon/quota/quota.h"
#include "tpl_internal.h"

/* A build request: its spec (JSON text) and base template. */
struct building {
    const char *spec_json;
    char base[STORE_ID_MAX];
};

/* The templates row (state "building"); a new name counts against the quota. The base
 * is held in the same transaction: a delete of it that committed first refuses the build,
 * and one from now on waits and counts it (tpl_hold). */
static int write_building(struct spaced *sp, const struct store_op *op, void *arg,
                          struct spaced_err *err)
{
    const struct building *b = arg;
    struct store_tpl t = {.created_ms = op->created_ms, .updated_ms = op->created_ms};
    snprintf(t.name, sizeof t.name, "%s", op->target);
    snprintf(t.tenant, sizeof t.tenant, "%s", op->tenant);
    snprintf(t.state, sizeof t.state, "building");
    snprintf(t.dir, sizeof t.dir, "%s/templates/%s", sp->opt.data_dir, op->target);
    /* The builder (a cluster node): its build log is asked of it; it holds the image. */
    snprintf(t.nodes, sizeof t.nodes, "%s", tpl_self_node(sp));
    t.spec_json = (char *)b->spec_json;
    /* A rebuild of the tenant's own failed template reuses its row: nothing new. */
    struct store_tpl old;
    bool fresh = true;
    if (store_tpl_get(sp->store, op->target, &old) == 0) {
        fresh = strcmp(old.tenant, op->tenant) != 0 || strcmp(old.state, "deleted") == 0;
        store_tpl_clear(&old);
    }
    struct store_quota_vals want = {.templates = fresh ? 1 : 0};
    if (quota_check(sp, op->tenant, &want, err) != 0 || (b->base[0] && tpl_hold(sp, b->base, err) != 0))
        return -1;
    return store_tpl_put(sp->store, &t) == 0 ? 0 : -1;
}

int tpl_submit_build(struct spaced *sp, const char *tenant, const char *name,
                     const char *spec_json, struct store_op *out, struct spaced_err *err)
{
    if (op_target_open(sp, name))
        return spaced_err_set(err, 409, "conflict", "template %s is already being built", name);
    struct building b = {.spec_json = spec_json};
    json_t *spec = json_loads(spec_json, 0, NULL);
    snprintf(b.base, sizeof b.base, "%s", json_string_value(json_object_get(spec, "base")) ?: "");
    json_decref(spec);
    struct op_intent in = {.write = write_building, .arg = &b};
    return op_enqueue(sp, tenant, OP_TEMPLATE_BUILD, name, &in, out, err);
}

static void exec_run(struct spaced *sp, const struct store_op *op, void *arg)
{
    (void)arg;
    tpl_build_start(sp, op->id, op->target);
}

/* A build cannot be resumed half-way: its build VM died with spaced. */
static bool exec_resumable(struct spaced *sp, const struct store_op *op, void *arg)
{
    (void)arg;
    tpl_build_interrupted(sp, op->target);
    return false;
}

static const struct op_executor tpl_executor = {.run = exec_run, .resumable = exec_resumable};

void tpl_ops_register(struct spaced *sp)
{
    op_register(sp->ops, OP_TEMPLATE_BUILD, &tpl_executor, NULL);
}
