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

#include "daemon/vm/vm.h"
#include "tpl_internal.h"

struct tpl_registry *tpl_registry_new(struct spaced *sp)
{
    struct tpl_registry *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    snprintf(r->kernel, sizeof r->kernel, "%s/vmlinux", sp->opt.guest_dir);
    snprintf(r->initramfs, sizeof r->initramfs, "%s/initramfs.cpio", sp->opt.guest_dir);
    return r;
}

void tpl_registry_free(struct tpl_registry *r)
{
    if (!r)
        return;
    tpl_snapshots_free(r);
    free(r);
}

static bool name_ok(const char *n)
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
    if (!name_ok(name))
        return spaced_err_set(err, 400, "unknown_template",
                              "template name \"%.64s\" is not valid ([a-z0-9_-], at most 48)", name);
    snprintf(out->name, sizeof out->name, "%s", name);
    snprintf(out->dir, sizeof out->dir, "%s/templates/%s", sp->opt.guest_dir, name);
    snprintf(out->rootfs, sizeof out->rootfs, "%s/rootfs.ext4", out->dir);
    out->builtin = true;
    if (access(out->rootfs, R_OK) != 0)
        return spaced_err_set(err, 400, "unknown_template",
                              "template \"%s\" does not exist or is not built (no %s; run "
                              "guest/build-template.sh)", name, out->rootfs);
    read_meta(out);
    return 0;
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
    return json_pack("{s:s, s:s, s:b, s:s, s:I}", "name", t->name, "state", "ready", "builtin",
                     t->builtin, "description", t->description, "snapshots",
                     (json_int_t)tpl_snapshots_ready(sp, t->name));
}

json_t *tpl_list_json(struct spaced *sp)
{
    json_t *arr = json_array();
    char dir[TPL_PATH_MAX];
    snprintf(dir, sizeof dir, "%s/templates", sp->opt.guest_dir);
    struct dirent **names = NULL;
    int n = scandir(dir, &names, NULL, alphasort);
    for (int i = 0; i < n; i++) {
        struct tpl_info t;
        if (names[i]->d_name[0] != '.' && tpl_lookup(sp, NULL, names[i]->d_name, &t, NULL) == 0)
            json_array_append_new(arr, tpl_json(sp, &t));
        free(names[i]);
    }
    free(names);
    return json_pack("{s:o}", "templates", arr);
}

json_t *tpl_get_json(struct spaced *sp, const char *name)
{
    struct tpl_info t;
    if (tpl_lookup(sp, NULL, name, &t, NULL) < 0)
        return NULL;
    return json_pack("{s:o}", "template", tpl_json(sp, &t));
}
