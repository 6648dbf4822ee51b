/* tpl.c: the template registry (built-ins under <guest-dir>/templates, tenants' builds
 * under <data-dir>/templates with their owner in the store), host VM settings shared by
 * every VM spaced starts, template defaults, the API representation and deletion. */
#include "tpl.h"

#include <dirent.h>
#include <errno.h>
#include <event2/event.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/agentc/agentc.h"
#include "daemon/store/store.h"
#include "daemon/vm/vm.h"
#include "log.h"
#include "tpl_digest.h"
#include "tpl_internal.h"
#include "tpl_log.h"

static void on_gc_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    tpl_snapshots_gc_soon(arg, NULL);
}

struct tpl_registry *tpl_registry_new(struct spaced *sp)
{
    struct tpl_registry *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    snprintf(r->kernel, sizeof r->kernel, "%s/vmlinux", sp->opt.guest_dir);
    snprintf(r->initramfs, sizeof r->initramfs, "%s/initramfs.cpio", sp->opt.guest_dir);
    r->snap_retry_ms = TPL_SNAP_RETRY_MS;
    tpl_kill_stale_vms(sp->opt.data_dir);
    tpl_snapshots_gc_soon(sp, r); /* first loop turn: the sandbox table is loaded by then */
    /* A node also learns of templates deleted or built again through other nodes: it
     * sweeps now and then (tpl_copies_sweep). */
    struct timeval every = {TPL_COPIES_SWEEP_S, 0};
    if (tpl_self_node(sp)[0] && (r->gc_tick = event_new(sp->base, -1, EV_PERSIST, on_gc_tick, sp)))
        event_add(r->gc_tick, &every);
    return r;
}

void tpl_set_users(struct spaced *sp, tpl_users_fn users) { sp->tpl->users = users; }

void tpl_set_snapshot_retry(struct spaced *sp, int64_t first_ms) { sp->tpl->snap_retry_ms = first_ms; }

void tpl_users_each(struct spaced *sp, tpl_use_fn use, void *arg)
{
    if (sp->tpl && sp->tpl->users)
        sp->tpl->users(sp, use, arg);
}

void tpl_user_gone(struct spaced *sp) { tpl_snapshots_gc_soon(sp, NULL); }

void tpl_registry_free(struct tpl_registry *r)
{
    if (!r)
        return;
    tpl_snapshots_free(r);
    tpl_builds_free(r);
    tpl_fetches_free(r);
    tpl_logs_free(r);
    if (r->gc)
        event_free(r->gc);
    if (r->gc_tick)
        event_free(r->gc_tick);
    free(r);
}

bool tpl_name_valid(const char *n)
{
    size_t len = strlen(n);
    if (len == 0 || len > 48 || n[0] == '.' || n[0] == '-')
        return false;
    for (const char *p = n; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-' || *p == '_'))
            return false;
    return true;
}

/* ---- files ----------------------------------------------------------------------------- */

void tpl_tail_append(char *tail, size_t *len, size_t cap, const uint8_t *buf, size_t n)
{
    if (n > cap) {
        buf += n - cap;
        n = cap;
    }
    if (*len + n > cap) {
        size_t drop = *len + n - cap;
        memmove(tail, tail + drop, *len - drop);
        *len -= drop;
    }
    memcpy(tail + *len, buf, n);
    *len += n;
    tail[*len] = '\0';
}

void tpl_tail_set_error(char *tail, size_t *len, size_t cap, const char *code,
                        const char *message)
{
    snprintf(tail, cap + 1, "%s: %s", code, message);
    *len = strlen(tail);
}

/* ---- lookup ---------------------------------------------------------------------------- */

/* A positive integer field of o no larger than max, else 0 (absent or out of range:
 * the caller's default applies). */
static unsigned uint_field(const json_t *o, const char *name, unsigned max)
{
    json_t *v = json_object_get(o, name);
    json_int_t n = json_is_integer(v) ? json_integer_value(v) : 0;
    return n > 0 && n <= (json_int_t)max ? (unsigned)n : 0;
}

void tpl_meta_fill(struct tpl_info *t, const json_t *j)
{
    const char *d = json_string_value(json_object_get(j, "description"));
    snprintf(t->description, sizeof t->description, "%s", d ? d : "");
    t->vcpus = uint_field(j, "vcpus", 1024);
    t->memory_mib = uint_field(j, "memory_mib", 1u << 20);
}

/* Reads <dir>/template.json's description and shape (vcpus, memory_mib), if any. */
static void read_meta(struct tpl_info *t)
{
    char path[TPL_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/template.json", t->dir);
    json_t *j = json_load_file(path, 0, NULL);
    tpl_meta_fill(t, j);
    json_decref(j);
}

/* Fills *out for a template found in dir `root`/templates/name with a rootfs. */
static bool found_at(const char *root, const char *name, bool builtin, struct tpl_info *out)
{
    snprintf(out->name, sizeof out->name, "%s", name);
    snprintf(out->dir, sizeof out->dir, "%s/templates/%s", root, name);
    snprintf(out->rootfs, sizeof out->rootfs, "%s/rootfs.ext4", out->dir);
    out->builtin = builtin;
    if (access(out->rootfs, R_OK) != 0)
        return false;
    read_meta(out);
    return true;
}

/* A template built here or fetched (data dir): its template.json records the image's
 * SHA-256, and the image used is the digest-named <data>/images/sha256-<hex>.ext4, made
 * by hard link from the build's rootfs.ext4 when missing (a data dir from before images
 * were named by digest, or a fresh build). Bytes under that name never change, so a
 * sandbox's chain stays on the exact image it was created from whatever happens to the
 * template's name later. Without a digest (built before images were hashed) or when the
 * link cannot be made: rootfs.ext4 itself, as before. */
static bool found_built(struct spaced *sp, const char *name, struct tpl_info *out)
{
    if (!found_at(sp->opt.data_dir, name, false, out) && access(out->dir, R_OK) != 0)
        return false;
    char meta[TPL_PATH_MAX + 32], legacy[TPL_PATH_MAX + 32];
    snprintf(meta, sizeof meta, "%s/template.json", out->dir);
    snprintf(legacy, sizeof legacy, "%s/rootfs.ext4", out->dir);
    json_t *j = json_load_file(meta, 0, NULL);
    const char *digest = json_string_value(json_object_get(j, "sha256"));
    char cas[TPL_PATH_MAX];
    bool ok = false;
    if (tpl_digest_valid(digest) && tpl_image_path(sp, digest, cas, sizeof cas) == 0 &&
        (access(cas, R_OK) == 0 || (access(legacy, R_OK) == 0 && tpl_image_link(sp, legacy, cas) == 0))) {
        snprintf(out->rootfs, sizeof out->rootfs, "%s", cas);
        ok = true;
    } else {
        ok = access(legacy, R_OK) == 0; /* out->rootfs is the legacy path */
    }
    if (ok)
        tpl_meta_fill(out, j);
    json_decref(j);
    return ok;
}

/* Whether t's template.json records the image digest `digest`. */
static bool local_digest_is(const struct tpl_info *t, const char *digest)
{
    char path[TPL_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/template.json", t->dir);
    json_t *j = json_load_file(path, 0, NULL);
    const char *d = json_string_value(json_object_get(j, "sha256"));
    bool same = d && strcmp(d, digest) == 0;
    json_decref(j);
    return same;
}

bool tpl_builtin_peek(struct spaced *sp, const char *name, struct tpl_info *out)
{
    memset(out, 0, sizeof *out);
    return name && tpl_name_valid(name) && found_at(sp->opt.guest_dir, name, true, out);
}

int tpl_lookup(struct spaced *sp, const char *tenant, const char *name, struct tpl_info *out,
               struct spaced_err *err)
{
    memset(out, 0, sizeof *out);
    if (!name || !tpl_name_valid(name))
        return spaced_err_set(err, 400, "unknown_template",
                              "template name \"%.64s\" is not valid ([a-z0-9_-], at most 48)",
                              name ? name : "");
    /* Built-ins (guest dir) first: nobody can shadow them. Their image is used through
     * its pin in the data dir, which a rebuild does not change (tpl_pin.c). */
    if (found_at(sp->opt.guest_dir, name, true, out)) {
        tpl_pin_builtin(sp, out);
        return 0;
    }
    struct store_tpl row;
    if (store_tpl_get(sp->store, name, &row) == 0) {
        bool mine = strcmp(row.state, "ready") == 0 && (!tenant || strcmp(row.tenant, tenant) == 0);
        char digest[sizeof row.digest];
        snprintf(digest, sizeof digest, "%s", row.digest);
        snprintf(out->tenant, sizeof out->tenant, "%s", row.tenant);
        store_tpl_clear(&row);
        /* A copy whose template.json names another digest than the row is a stale one
         * (the name was deleted and built again elsewhere): not this template. */
        if (mine && found_built(sp, name, out) && (!digest[0] || local_digest_is(out, digest)))
            return 0;
    }
    memset(out, 0, sizeof *out);
    return spaced_err_set(err, 400, "unknown_template",
                          "template \"%s\" does not exist or is not built (GET /v1/templates "
                          "lists the ones you can use)", name);
}

int tpl_vm_base(struct spaced *sp, struct vm_config *cfg, struct spaced_err *err)
{
    struct tpl_registry *r = sp->tpl;
    if (access(r->kernel, R_OK) != 0)
        return spaced_err_set(err, 503, "guest_missing",
                              "guest kernel %s is missing (run `make guest`)", r->kernel);
    if (access(r->initramfs, R_OK) != 0)
        return spaced_err_set(err, 503, "guest_missing",
                              "guest initramfs %s is missing (run `make guest`)", r->initramfs);
    cfg->kernel = r->kernel;
    cfg->initramfs = r->initramfs;
    cfg->qemu = sp->opt.qemu;
    cfg->accel = (enum vm_accel)sp->opt.accel;
    cfg->runtime = sp->runtime;
    cfg->net.tap_fd = -1;
    return 0;
}

/* ---- defaults ---------------------------------------------------------------------------- */

void tpl_defaults_load(const char *dir, struct tpl_defaults *out)
{
    char path[TPL_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/template.json", dir);
    json_t *j = json_load_file(path, 0, NULL);
    tpl_defaults_from(j, out);
    json_decref(j);
}

void tpl_defaults_from(const json_t *j, struct tpl_defaults *out)
{
    memset(out, 0, sizeof *out);
    json_t *d = json_object_get(j, "defaults");
    json_t *env = json_object_get(d, "env");
    out->env = json_is_object(env) ? json_deep_copy(env) : json_object();
    const char *user = json_string_value(json_object_get(d, "user"));
    const char *wd = json_string_value(json_object_get(d, "workdir"));
    snprintf(out->user, sizeof out->user, "%s", user && user[0] ? user : "root");
    snprintf(out->workdir, sizeof out->workdir, "%s", wd && wd[0] == '/' ? wd : "/");
    const char *start = json_string_value(json_object_get(j, "start"));
    const char *ready = json_string_value(json_object_get(j, "ready"));
    out->start = start && start[0] ? strdup(start) : NULL;
    out->ready = ready && ready[0] ? strdup(ready) : NULL;
}

void tpl_defaults_clear(struct tpl_defaults *d)
{
    json_decref(d->env);
    free(d->start);
    free(d->ready);
    memset(d, 0, sizeof *d);
}

json_t *tpl_start_request(const struct tpl_defaults *d)
{
    /* Idempotent: the pid file lives in /tmp (tmpfs, so in the memory snapshot and
     * empty after a cold boot), and a start command still running is not started again;
     * so it can be sent after every boot, restore or adoption alike. A service must not
     * block on a full stdout pipe nobody reads (the agent buffers only 64 KiB of a
     * detached process): its output goes to a file. */
    static const char wrap[] =
        "p=/tmp/.space-start.pid\n"
        "if [ -s $p ] && kill -0 \"$(cat $p)\" 2>/dev/null; then exit 0; fi\n"
        "echo $$ >$p\n"
        "exec </dev/null >>/tmp/space-start.log 2>&1\n";
    size_t n = sizeof wrap + strlen(d->start);
    char *cmd = malloc(n);
    if (!cmd)
        return NULL;
    snprintf(cmd, n, "%s%s", wrap, d->start);
    json_t *req = json_pack("{s:s, s:s, s:s, s:s, s:s}", "op", "exec", "cmd", cmd, "user", d->user,
                            "cwd", d->workdir, "tag", "template-start");
    free(cmd);
    return req;
}

int tpl_sandbox_refresh(struct spaced *sp, const char *template_name, const char *sandbox_env_json,
                        json_t *req)
{
    struct tpl_info t;
    struct tpl_defaults d = {0};
    /* A template gone since the sandbox was made: its env and user are gone with it. */
    bool found = tpl_lookup(sp, NULL, template_name, &t, NULL) == 0;
    if (found)
        tpl_defaults_load(t.dir, &d);
    json_t *env = d.env ? json_incref(d.env) : json_object();
    json_t *own = sandbox_env_json ? json_loads(sandbox_env_json, 0, NULL) : NULL;
    if (env && json_is_object(own))
        json_object_update(env, own);
    json_decref(own);
    int rc = env && json_object_set_new(req, "env", env) == 0 ? 0 : -1;
    if (rc == 0 && found &&
        (json_object_set_new(req, "user", json_string(d.user)) < 0 ||
         json_object_set_new(req, "workdir", json_string(d.workdir)) < 0))
        rc = -1;
    tpl_defaults_clear(&d);
    return rc;
}

void tpl_start_in_sandbox(struct spaced *sp, const char *template_name, const char *sandbox_id,
                          struct agentc *agent)
{
    struct tpl_info t;
    if (!agent || tpl_lookup(sp, NULL, template_name, &t, NULL) < 0)
        return;
    struct tpl_defaults d;
    tpl_defaults_load(t.dir, &d);
    if (d.start) {
        /* No env in the request: the sandbox's refresh env (template env + its own) is
         * the base of every exec, and a request env would override the sandbox's. */
        json_t *req = tpl_start_request(&d);
        char err[128] = "";
        struct agentc_chan *ch = req ? agentc_open(agent, req, NULL, NULL, 0, err, sizeof err) : NULL;
        json_decref(req);
        if (ch)
            agentc_close(ch); /* detach: the start command keeps running */
        else
            log_warn("template.start", "sandbox=%s template=%s msg=\"cannot start: %s\"", sandbox_id,
                     template_name, err);
    }
    tpl_defaults_clear(&d);
}

/* ---- API representation ---------------------------------------------------------------- */

/* meta: the template.json to read (NULL: t's directory's). */
static json_t *tpl_json(struct spaced *sp, const struct tpl_info *t, const json_t *meta)
{
    struct tpl_defaults d;
    if (meta)
        tpl_defaults_from(meta, &d);
    else
        tpl_defaults_load(t->dir, &d);
    json_t *j = json_pack("{s:s, s:s, s:b, s:s, s:I, s:n, s:{s:O, s:s, s:s}, s:o, s:o}", "name",
                          t->name, "state", "ready", "builtin", t->builtin, "description",
                          t->description, "snapshots", (json_int_t)tpl_snapshots_ready(sp, t->name),
                          "failure", "defaults", "env", d.env, "workdir", d.workdir, "user", d.user,
                          "start", d.start ? json_string(d.start) : json_null(), "ready",
                          d.ready ? json_string(d.ready) : json_null());
    tpl_defaults_clear(&d);
    return j;
}

static void scan_builtins(struct spaced *sp, json_t *arr)
{
    char dir[TPL_PATH_MAX];
    snprintf(dir, sizeof dir, "%s/templates", sp->opt.guest_dir);
    struct dirent **names = NULL;
    int n = scandir(dir, &names, NULL, alphasort);
    for (int i = 0; i < n; i++) {
        struct tpl_info t;
        const char *nm = names[i]->d_name;
        if (tpl_name_valid(nm) && found_at(sp->opt.guest_dir, nm, true, &t))
            json_array_append_new(arr, tpl_json(sp, &t, NULL));
        free(names[i]);
    }
    free(names);
}

struct list_ctx {
    struct spaced *sp;
    const char *tenant;
    json_t *arr;
};

/* The tenant's templates recorded in the store: ready ones from their directory,
 * building or failed ones from the row. */
static int add_row(const struct store_tpl *row, void *arg)
{
    struct list_ctx *c = arg;
    struct tpl_info t;
    if (strcmp(row->tenant, c->tenant) != 0 || strcmp(row->state, "deleted") == 0)
        return 0;
    if (found_at(c->sp->opt.guest_dir, row->name, true, &t))
        return 0; /* a stale row shadowed by a built-in */
    if (strcmp(row->state, "ready") == 0 && found_at(c->sp->opt.data_dir, row->name, false, &t)) {
        json_array_append_new(c->arr, tpl_json(c->sp, &t, NULL));
        return 0;
    }
    json_t *meta = strcmp(row->state, "ready") == 0 && row->meta ? json_loads(row->meta, 0, NULL) : NULL;
    if (json_is_object(meta)) { /* built on another node: its recorded template.json */
        memset(&t, 0, sizeof t);
        snprintf(t.name, sizeof t.name, "%s", row->name);
        tpl_meta_fill(&t, meta);
        json_array_append_new(c->arr, tpl_json(c->sp, &t, meta));
        json_decref(meta);
        return 0;
    }
    json_decref(meta);
    json_array_append_new(c->arr, json_pack("{s:s, s:s, s:b, s:s, s:I, s:o}", "name", row->name,
                                            "state", row->state, "builtin", 0, "description", "",
                                            "snapshots", (json_int_t)0, "failure",
                                            row->failure ? json_string(row->failure) : json_null()));
    return 0;
}

json_t *tpl_list_json(struct spaced *sp, const char *tenant)
{
    struct list_ctx c = {sp, tenant, json_array()};
    scan_builtins(sp, c.arr);
    store_tpl_each(sp->store, add_row, &c);
    return json_pack("{s:o}", "templates", c.arr);
}

json_t *tpl_get_json(struct spaced *sp, const char *tenant, const char *name)
{
    json_t *all = tpl_list_json(sp, tenant), *found = NULL;
    size_t i;
    json_t *t;
    json_array_foreach(json_object_get(all, "templates"), i, t) {
        if (strcmp(json_string_value(json_object_get(t, "name")), name) == 0) {
            json_t *one = json_deep_copy(t);
            json_object_set_new(one, "versions", tpl_snapshots_json(sp, name));
            found = json_pack("{s:o}", "template", one);
            break;
        }
    }
    json_decref(all);
    return found;
}

/* ---- deletion ------------------------------------------------------------------------- */

struct use_ctx {
    const char *name;
    unsigned n;
};

static void count_user(const char *template_name, const char *const *layers, unsigned n,
                       void *arg)
{
    struct use_ctx *u = arg;
    (void)layers;
    (void)n;
    if (strcmp(template_name, u->name) == 0)
        u->n++;
}

static int in_use_err(struct spaced_err *err, const char *name, long long sandboxes, const char *nodes)
{
    return spaced_err_set(err, 409, "template_in_use",
                          "%lld sandbox(es)%s%s were created from template %s (in any state but deleted); "
                          "delete them first: their disks are backed by its image",
                          sandboxes, nodes[0] ? " on node(s) " : "", nodes, name);
}

static int build_uses_err(struct spaced_err *err, const char *name)
{
    return spaced_err_set(err, 409, "template_in_use",
                          "a template build uses %s as its base; retry when it is done", name);
}

/* Marks the row deleted unless a sandbox or build anywhere uses it (checked in the
 * same transaction: store_tpl_delete_unused). */
static int mark_deleted(struct spaced *sp, const char *tenant, const char *name, struct spaced_err *err)
{
    struct store_tpl_users u;
    switch (store_tpl_delete_unused(sp->store, name, tenant, spaced_now_ms(), &u)) {
    case 0:
        return 0;
    case STORE_NOTFOUND:
        return spaced_err_set(err, 404, "not_found", "template %.64s not found", name);
    case STORE_NOT_READY:
        return spaced_err_set(err, 409, "conflict", "template %s is being built; wait for the build", name);
    case STORE_IN_USE:
        return u.sandboxes ? in_use_err(err, name, (long long)u.sandboxes, u.nodes) : build_uses_err(err, name);
    default:
        return spaced_err_set(err, 500, "store_failed", "cannot record the deletion: %s",
                              store_errmsg(sp->store));
    }
}

int tpl_delete(struct spaced *sp, const char *tenant, const char *name, json_t **out,
               struct spaced_err *err)
{
    struct tpl_info t;
    *out = NULL;
    if (!tpl_name_valid(name))
        return spaced_err_set(err, 404, "not_found", "template %.64s not found", name);
    if (found_at(sp->opt.guest_dir, name, true, &t))
        return spaced_err_set(err, 409, "conflict", "template %s is built in and cannot be deleted",
                              name);
    struct store_tpl row;
    if (store_tpl_get(sp->store, name, &row) != 0)
        return spaced_err_set(err, 404, "not_found", "template %.64s not found", name);
    int rc = 0;
    struct use_ctx use = {name, 0};
    /* What only this daemon knows first (its sandboxes, builds and snapshots); what
     * every node shares is checked when the row is marked. */
    if (strcmp(row.tenant, tenant) != 0 || strcmp(row.state, "deleted") == 0)
        rc = spaced_err_set(err, 404, "not_found", "template %.64s not found", name);
    else if (strcmp(row.state, "building") == 0)
        rc = spaced_err_set(err, 409, "conflict", "template %s is being built; wait for the build", name);
    else if ((tpl_users_each(sp, count_user, &use), use.n > 0))
        rc = in_use_err(err, name, use.n, tpl_self_node(sp));
    else if (tpl_builds_use(sp, name))
        rc = build_uses_err(err, name);
    else if (tpl_snapshots_busy(sp, name))
        rc = spaced_err_set(err, 409, "conflict",
                            "a memory snapshot of template %s is being made; retry in a minute", name);
    store_tpl_clear(&row);
    if (rc != 0 || (rc = mark_deleted(sp, tenant, name, err)) != 0)
        return rc;
    tpl_snapshots_forget(sp, name);
    char dir[TPL_PATH_MAX];
    snprintf(dir, sizeof dir, "%s/templates/%s", sp->opt.data_dir, name);
    spaced_rm_rf(dir);
    tpl_snapshots_gc_soon(sp, NULL); /* its digest-named image, unless a sandbox uses it */
    log_info("template.deleted", "template=%s tenant=%s", name, tenant);
    *out = json_pack("{s:{s:s, s:s, s:b}}", "template", "name", name, "state", "deleted", "builtin", 0);
    return 0;
}

int tpl_hold(struct spaced *sp, const char *name, struct spaced_err *err)
{
    struct tpl_info t;
    if (tpl_builtin_peek(sp, name, &t))
        return 0;
    int rc = store_tpl_hold(sp->store, name);
    if (rc == STORE_NOTFOUND)
        return spaced_err_set(err, 409, "template_deleted",
                              "template %s was deleted while this request was being accepted; build it "
                              "again or use another template", name);
    return rc == 0 ? 0 : spaced_err_store(err, sp->store, "checking the template");
}
