/* tpl.c: the template registry (directories under <guest-dir>/templates), host VM
 * settings shared by every VM spaced starts, and the API representation. */
#include "tpl.h"

#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/store/store.h"
#include "daemon/vm/vm.h"
#include "tpl_internal.h"

struct tpl_registry *tpl_registry_new(struct spaced *sp)
{
    struct tpl_registry *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    snprintf(r->kernel, sizeof r->kernel, "%s/vmlinux", sp->opt.guest_dir);
    snprintf(r->initramfs, sizeof r->initramfs, "%s/initramfs.cpio", sp->opt.guest_dir);
    tpl_kill_stale_vms(sp->opt.data_dir);
    return r;
}

void tpl_registry_free(struct tpl_registry *r)
{
    if (!r)
        return;
    tpl_snapshots_free(r);
    tpl_builds_free(r);
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

/* Reads <dir>/template.json's description, if any. */
static void read_meta(struct tpl_info *t)
{
    char path[TPL_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/template.json", t->dir);
    json_t *j = json_load_file(path, 0, NULL);
    const char *d = json_string_value(json_object_get(j, "description"));
    snprintf(t->description, sizeof t->description, "%s", d ? d : "");
    json_decref(j);
}

int tpl_lookup(struct spaced *sp, const char *tenant, const char *name, struct tpl_info *out,
               struct spaced_err *err)
{
    (void)tenant;
    memset(out, 0, sizeof *out);
    if (!name || !tpl_name_valid(name))
        return spaced_err_set(err, 400, "unknown_template",
                              "template name \"%.64s\" is not valid ([a-z0-9_-], at most 48)", name);
    snprintf(out->name, sizeof out->name, "%s", name);
    /* Built-in (guest dir) first, then built through the API (data dir). */
    for (int builtin = 1; builtin >= 0; builtin--) {
        snprintf(out->dir, sizeof out->dir, "%s/templates/%s",
                 builtin ? sp->opt.guest_dir : sp->opt.data_dir, name);
        snprintf(out->rootfs, sizeof out->rootfs, "%s/rootfs.ext4", out->dir);
        out->builtin = builtin;
        if (access(out->rootfs, R_OK) == 0) {
            read_meta(out);
            return 0;
        }
    }
    return spaced_err_set(err, 400, "unknown_template",
                          "template \"%s\" does not exist or is not built (no rootfs.ext4 under "
                          "%s/templates/%s; run guest/build-template.sh or POST /v1/templates)",
                          name, sp->opt.guest_dir, name);
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
    cfg->net.tap_fd = -1;
    return 0;
}

static json_t *tpl_json(struct spaced *sp, const struct tpl_info *t)
{
    return json_pack("{s:s, s:s, s:b, s:s, s:I, s:n}", "name", t->name, "state", "ready", "builtin",
                     t->builtin, "description", t->description, "snapshots",
                     (json_int_t)tpl_snapshots_ready(sp, t->name), "failure");
}

/* Adds every template found under <root>/templates not yet in `arr`. */
static void scan_templates(struct spaced *sp, const char *root, json_t *arr, json_t *seen)
{
    char dir[TPL_PATH_MAX];
    snprintf(dir, sizeof dir, "%s/templates", root);
    struct dirent **names = NULL;
    int n = scandir(dir, &names, NULL, alphasort);
    for (int i = 0; i < n; i++) {
        struct tpl_info t;
        const char *nm = names[i]->d_name;
        if (nm[0] != '.' && !json_object_get(seen, nm) && tpl_lookup(sp, NULL, nm, &t, NULL) == 0) {
            json_array_append_new(arr, tpl_json(sp, &t));
            json_object_set_new(seen, nm, json_true());
        }
        free(names[i]);
    }
    free(names);
}

/* Builds recorded in the store that have no image (yet): building or failed. */
static int add_unbuilt(const struct store_tpl *t, void *arg)
{
    json_t **ctx = arg; /* {arr, seen} */
    if (json_object_get(ctx[1], t->name))
        return 0;
    json_array_append_new(ctx[0], json_pack("{s:s, s:s, s:b, s:s, s:I, s:o}", "name", t->name,
                                            "state", t->state, "builtin", 0, "description", "",
                                            "snapshots", (json_int_t)0, "failure",
                                            t->failure ? json_string(t->failure) : json_null()));
    json_object_set_new(ctx[1], t->name, json_true());
    return 0;
}

json_t *tpl_list_json(struct spaced *sp)
{
    json_t *arr = json_array(), *seen = json_object();
    scan_templates(sp, sp->opt.guest_dir, arr, seen);
    scan_templates(sp, sp->opt.data_dir, arr, seen);
    json_t *ctx[2] = {arr, seen};
    store_tpl_each(sp->store, add_unbuilt, ctx);
    json_decref(seen);
    return json_pack("{s:o}", "templates", arr);
}

json_t *tpl_get_json(struct spaced *sp, const char *name)
{
    json_t *all = tpl_list_json(sp), *found = NULL;
    size_t i;
    json_t *t;
    json_array_foreach(json_object_get(all, "templates"), i, t) {
        if (strcmp(json_string_value(json_object_get(t, "name")), name) == 0)
            found = json_pack("{s:O}", "template", t);
    }
    json_decref(all);
    return found;
}
