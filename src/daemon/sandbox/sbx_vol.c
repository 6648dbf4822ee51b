/* sbx_vol.c: the volumes a sandbox mounts: the create field, the check that they are the
 * tenant's, the mounts on each agent connection (volume/vol_mount.h) and the answer to
 * "is this volume in use" that vol_delete asks (409 volume_in_use).
 *
 * Two sandboxes may mount one volume: each gets its own space-volfs on the same
 * directory, which caches nothing (volfs.h), so each sees the other's writes at once,
 * with no locking between them. */
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/agentc/agentc.h"
#include "daemon/volume/vol.h"
#include "daemon/volume/vol_quota.h"
#include "daemon/volume/vol_share.h"
#include "log.h"
#include "sbx_internal.h"

int sbx_vol_spec(json_t *v, char **out, struct spaced_err *err)
{
    *out = NULL;
    if (!v || (json_is_array(v) && json_array_size(v) == 0))
        return 0;
    if (!json_is_array(v) || json_array_size(v) > VOLM_MOUNTS_MAX)
        return spaced_err_set(err, 400, "invalid_request",
                              "volumes must be an array of at most %d {\"name\", \"path\"}",
                              VOLM_MOUNTS_MAX);
    size_t i, j;
    json_t *m;
    json_array_foreach(v, i, m) {
        const char *name = json_string_value(json_object_get(m, "name"));
        const char *path = json_string_value(json_object_get(m, "path"));
        if (!json_is_object(m) || json_object_size(m) != 2 || !name || !path)
            return spaced_err_set(err, 400, "invalid_request",
                                  "volumes[%zu] must be {\"name\": str, \"path\": str}", i);
        if (!vol_name_valid(name))
            return spaced_err_set(err, 400, "invalid_request", "volumes[%zu].name \"%.64s\" is "
                                  "not a volume name", i, name);
        const char *why = volm_path_problem(path);
        if (why || strlen(path) != json_string_length(json_object_get(m, "path")))
            return spaced_err_set(err, 400, "invalid_request", "volumes[%zu].path \"%.100s\" %s",
                                  i, path, why ? why : "must not hold NUL");
        for (j = 0; j < i; j++) {
            const char *p2 = json_string_value(json_object_get(json_array_get(v, j), "path"));
            size_t a = strlen(p2), b = strlen(path);
            /* the same path, or one inside the other (a mount would hide the other) */
            if ((a <= b && strncmp(path, p2, a) == 0 && (path[a] == '/' || !path[a])) ||
                (b < a && strncmp(p2, path, b) == 0 && p2[b] == '/'))
                return spaced_err_set(err, 400, "invalid_request",
                                      "volumes[%zu].path \"%.100s\" overlaps volumes[%zu]", i, path, j);
        }
    }
    if (!(*out = json_dumps(v, JSON_COMPACT)))
        return spaced_err_set(err, 500, "internal", "out of memory");
    return 0;
}

int sbx_vol_check(struct spaced *sp, const char *tenant, const char *volumes_json,
                  struct spaced_err *err)
{
    json_t *v = volumes_json ? json_loads(volumes_json, 0, NULL) : NULL;
    size_t i;
    json_t *m;
    char dir[PATH_MAX];
    int rc = 0;
    json_array_foreach(v, i, m) {
        if (vol_dir(sp, tenant, json_string_value(json_object_get(m, "name")), dir, sizeof dir,
                    err) < 0) {
            rc = -1;
            break;
        }
    }
    json_decref(v);
    return rc;
}

bool sbx_vol_user(struct spaced *sp, const char *tenant, const char *name, char *id,
                  size_t idlen)
{
    for (struct sbx *s = sp->sbx ? sp->sbx->head : NULL; s; s = s->next) {
        if (s->state == SBX_DELETED || strcmp(s->rec.tenant, tenant) != 0 || !s->rec.volumes_json)
            continue;
        json_t *v = json_loads(s->rec.volumes_json, 0, NULL);
        size_t i;
        json_t *m;
        bool hit = false;
        json_array_foreach(v, i, m)
            hit |= strcmp(json_string_value(json_object_get(m, "name")), name) == 0;
        json_decref(v);
        if (hit) {
            snprintf(id, idlen, "%s", s->rec.id);
            return true;
        }
    }
    return false;
}

/* space-volfs beside the spaced binary (written to p[cap]), NULL if absent. */
static const char *volfs_path(char *p, size_t cap)
{
    static const char leaf[] = "space-volfs";
    ssize_t n = readlink("/proc/self/exe", p, cap - sizeof leaf - 1);
    char *slash = n > 0 ? (p[n] = 0, strrchr(p, '/')) : NULL;
    if (!slash)
        return NULL;
    memcpy(slash + 1, leaf, sizeof leaf);
    return access(p, X_OK) == 0 ? p : NULL;
}

void sbx_vol_attach(struct sbx *s)
{
    if (!s->rec.volumes_json || !s->agent || !s->vm)
        return;
    json_t *v = json_loads(s->rec.volumes_json, 0, NULL);
    char bin[PATH_MAX], dir[PATH_MAX], root[PATH_MAX], label[160], err[300];
    size_t i;
    json_t *m;
    json_array_foreach(v, i, m) {
        if (i >= VOLM_MOUNTS_MAX)
            break;
        if (s->mounts[i] && volm_live(s->mounts[i]))
            continue;
        volm_free(s->mounts[i]);
        s->mounts[i] = NULL;
        const char *name = json_string_value(json_object_get(m, "name"));
        const char *path = json_string_value(json_object_get(m, "path"));
        struct spaced_err e;
        snprintf(label, sizeof label, "%s:%s", s->rec.id, name ? name : "?");
        snprintf(root, sizeof root, "%s/volfs-root", s->rec.run_dir);
        if (!volfs_path(bin, sizeof bin)) {
            log_warn("volume.mount", "mount=%s event=failed msg=\"space-volfs is missing beside "
                     "spaced\"", label);
            break;
        }
        if (!name || !path || vol_dir(s->sp, s->rec.tenant, name, dir, sizeof dir, &e) < 0) {
            log_warn("volume.mount", "mount=%s event=failed msg=\"the volume is gone\"", label);
            continue;
        }
        /* The tenant's volume quota left, as the budget its mounts share (vol_share.h).
         * Unknown (the store failed): nothing, rather than no limit. */
        int64_t left;
        if (vol_quota_left(s->sp, s->rec.tenant, &left, &e) < 0) {
            char q[400];
            log_warn("volume.mount", "mount=%s event=no_budget msg=%s", label,
                     log_quote(e.message, q, sizeof q));
            left = 0;
        }
        struct vol_share *share = left >= 0 ? vol_share_join(s->sp, s->rec.tenant, left) : NULL;
        if (left >= 0 && !share) {
            log_warn("volume.mount", "mount=%s event=failed msg=\"no shared budget\"", label);
            continue;
        }
        struct volm_spec spec = {.dir = dir, .guest_path = path, .volfs = bin,
                                 .jail_root = root, .jail = vm_jail_of(s->vm), .label = label,
                                 .has_budget = left >= 0,
                                 .budget = share ? vol_share_budget(share) : left, .share = share};
        s->mounts[i] = volm_start(s->sp->base, s->agent, &spec, err, sizeof err);
        if (!s->mounts[i]) {
            vol_share_leave(share);
            char q[400];
            log_warn("volume.mount", "mount=%s event=failed msg=%s", label,
                     log_quote(err, q, sizeof q));
        }
    }
    json_decref(v);
}

void sbx_vol_release(struct sbx *s)
{
    for (int i = 0; i < VOLM_MOUNTS_MAX; i++) {
        volm_free(s->mounts[i]);
        s->mounts[i] = NULL;
    }
}

void sbx_agent_free(struct sbx *s)
{
    sbx_vol_release(s);
    agentc_free(s->agent);
    s->agent = NULL;
    s->refresh_after = NULL; /* dropped with the connection, without callbacks */
}
