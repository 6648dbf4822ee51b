/* tpl_pin.c: pinning built-in template images, so a rebuild never changes a disk that
 * sandbox overlays and snapshot versions back onto.
 *
 * guest/build-template.sh replaces <guest-dir>/templates/NAME/rootfs.ext4 by rename
 * when it rebuilds a template. A qcow2 overlay names its backing file by path, so an
 * overlay made on the old image would read the new one's blocks: a corrupt disk. spaced
 * therefore never hands out the guest-dir path: the image is hard-linked to
 * <data-dir>/images/NAME-<key16>.ext4 (key: the template.json build_key, or the file's
 * identity when it has none) and that path is what sandboxes and snapshots use. The
 * link keeps the old inode alive after a rebuild's rename; a rebuilt image has a new key
 * and gets a new link. A hard link costs nothing, but needs the data dir on the guest
 * dir's filesystem; elsewhere the guest-dir path is used as before (logged once).
 * Pins no sandbox chain, snapshot version or current key names any more are removed by
 * the snapshot sweep (tpl_pins_sweep).
 *
 * Built and fetched templates' images are named by their SHA-256 in the same directory,
 * sha256-<hex>.ext4 (tpl_image_path): the same bytes always have the same name and a
 * name never gets other bytes. The sweep removes one when no template here records that
 * digest and no sandbox chain or snapshot version uses it. */
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "tpl_internal.h"

/* The pin's file name for template t as it is now: NAME-<key16>.ext4. */
static int pin_name(const struct tpl_info *t, const char *guest_rootfs, char *out, size_t cap)
{
    char meta[TPL_PATH_MAX + 32];
    snprintf(meta, sizeof meta, "%s/template.json", t->dir);
    json_t *j = json_load_file(meta, 0, NULL);
    const char *key = json_string_value(json_object_get(j, "build_key"));
    char k[17];
    if (key && strlen(key) >= 16 && strspn(key, "0123456789abcdef") >= 16) {
        snprintf(k, sizeof k, "%.16s", key);
    } else {
        struct stat st;
        if (stat(guest_rootfs, &st) != 0) {
            json_decref(j);
            return -1;
        }
        snprintf(k, sizeof k, "%08lx%08lx", (unsigned long)st.st_ino & 0xffffffffUL,
                 (unsigned long)st.st_mtim.tv_sec & 0xffffffffUL);
    }
    json_decref(j);
    snprintf(out, cap, "%s-%s.ext4", t->name, k);
    return 0;
}

void tpl_pin_builtin(struct spaced *sp, struct tpl_info *t)
{
    static bool warned; /* log once per process, not per template */
    char leaf[128], pin[TPL_PATH_MAX + 160], tmp[TPL_PATH_MAX + 170], dir[TPL_PATH_MAX];
    if (!t->builtin || pin_name(t, t->rootfs, leaf, sizeof leaf) < 0)
        return;
    snprintf(dir, sizeof dir, "%s/images", sp->opt.data_dir);
    size_t n = (size_t)snprintf(pin, sizeof pin, "%s/%s", dir, leaf);
    if (n >= sizeof t->rootfs)
        return; /* a data dir path this long cannot name the pin: keep the guest path */
    if (access(pin, R_OK) != 0) {
        snprintf(tmp, sizeof tmp, "%s.tmp", pin);
        unlink(tmp);
        if (spaced_mkdir_p(dir) != 0 || link(t->rootfs, tmp) != 0 || rename(tmp, pin) != 0) {
            if (!warned)
                log_warn("template.pin", "template=%s errno=%d msg=\"cannot hard-link the image into "
                         "the data dir (another filesystem?): sandboxes back onto the guest dir's "
                         "file, which a template rebuild replaces\"", t->name, errno);
            warned = true;
            unlink(tmp);
            return;
        }
        log_info("template.pin", "template=%s image=%s", t->name, leaf);
    }
    memcpy(t->rootfs, pin, n + 1);
}

/* ---- images named by digest ---------------------------------------------------------------- */

#define IMAGE_PREFIX "sha256-"
#define IMAGE_SUFFIX ".ext4"

int tpl_image_path(const struct spaced *sp, const char *hex, char *out, size_t cap)
{
    int n = snprintf(out, cap, "%s/images/" IMAGE_PREFIX "%s" IMAGE_SUFFIX, sp->opt.data_dir, hex);
    return n > 0 && (size_t)n < cap ? 0 : -1;
}

int tpl_image_link(struct spaced *sp, const char *from, const char *cas)
{
    char dir[TPL_PATH_MAX + 16], tmp[TPL_PATH_MAX + 16];
    snprintf(dir, sizeof dir, "%s/images", sp->opt.data_dir);
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.link", cas) >= sizeof tmp)
        return -1;
    unlink(tmp);
    if (spaced_mkdir_p(dir) != 0 || link(from, tmp) != 0 || rename(tmp, cas) != 0) {
        log_warn("template.pin", "image=%s errno=%d msg=\"cannot hard-link %s under its digest (another "
                 "filesystem?): sandboxes use the template's own file\"", cas, errno, from);
        unlink(tmp);
        return -1;
    }
    log_info("template.pin", "image=%s from=%s", cas, from);
    return 0;
}

/* Whether a template in the data dir names the digest-named image `leaf` as its image
 * (its template.json records that digest). */
static bool image_current(struct spaced *sp, const char *leaf)
{
    size_t lp = strlen(IMAGE_PREFIX);
    char hex[72];
    snprintf(hex, sizeof hex, "%.64s", leaf + lp);
    char tdir[TPL_PATH_MAX];
    snprintf(tdir, sizeof tdir, "%s/templates", sp->opt.data_dir);
    DIR *dp = opendir(tdir);
    struct dirent *e;
    bool found = false;
    while (dp && !found && (e = readdir(dp))) {
        if (!tpl_name_valid(e->d_name))
            continue;
        char meta[TPL_PATH_MAX + 300];
        snprintf(meta, sizeof meta, "%s/%.64s/template.json", tdir, e->d_name);
        json_t *j = json_load_file(meta, 0, NULL);
        const char *d = json_string_value(json_object_get(j, "sha256"));
        found = d && strcmp(d, hex) == 0;
        json_decref(j);
    }
    if (dp)
        closedir(dp);
    return found;
}

/* Adds dir's version.json rootfs path to `keep`. */
static void keep_version_rootfs(const char *vdir, json_t *keep)
{
    char p[TPL_PATH_MAX + 340];
    snprintf(p, sizeof p, "%s/version.json", vdir);
    json_t *j = json_load_file(p, 0, NULL);
    json_t *path = json_object_get(json_object_get(json_object_get(j, "inputs"), "rootfs"), "path");
    if (json_is_string(path))
        json_array_append(keep, path);
    json_decref(j);
}

static bool listed(const json_t *arr, const char *s)
{
    size_t i;
    json_t *v;
    json_array_foreach(arr, i, v) {
        if (strcmp(json_string_value(v), s) == 0)
            return true;
    }
    return false;
}

void tpl_pins_sweep(struct spaced *sp, const json_t *live_paths, json_t *version_dirs)
{
    char dir[TPL_PATH_MAX];
    snprintf(dir, sizeof dir, "%s/images", sp->opt.data_dir);
    DIR *dp = opendir(dir);
    if (!dp)
        return;
    json_t *keep = json_array();
    size_t i;
    json_t *v;
    json_array_foreach(version_dirs, i, v) keep_version_rootfs(json_string_value(v), keep);
    tpl_snapshots_rootfs(sp, keep);
    struct dirent *e;
    while ((e = readdir(dp))) {
        const char *dash = strrchr(e->d_name, '-');
        if (e->d_name[0] == '.' || !dash)
            continue;
        char name[64], path[TPL_PATH_MAX + 300];
        if (strncmp(e->d_name, IMAGE_PREFIX, strlen(IMAGE_PREFIX)) == 0) {
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            size_t len = strlen(e->d_name);
            if (len < strlen(IMAGE_SUFFIX) || strcmp(e->d_name + len - strlen(IMAGE_SUFFIX), IMAGE_SUFFIX) != 0 ||
                listed(keep, path) || listed(live_paths, path) || image_current(sp, e->d_name))
                continue; /* a temporary link, or needed */
            log_info("template.gc", "image=%s action=remove", e->d_name);
            unlink(path);
            continue;
        }
        snprintf(name, sizeof name, "%.*s", (int)(dash - e->d_name), e->d_name);
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct tpl_info t;
        if (tpl_name_valid(name) && tpl_lookup(sp, NULL, name, &t, NULL) == 0 &&
            strcmp(t.rootfs, path) == 0)
            continue; /* the current pin */
        if (listed(keep, path) || listed(live_paths, path))
            continue;
        log_info("template.gc", "image=%s action=remove", e->d_name);
        unlink(path);
    }
    closedir(dp);
    json_decref(keep);
}
