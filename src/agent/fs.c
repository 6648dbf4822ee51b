/* fs.c: stat objects, mkdir -p with ownership; see fs.h. */
#include "agent/fs.h"
#include "agent/resolve.h"

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/xattr.h>
#include <unistd.h>

static const char *fs_type(mode_t m)
{
    if (S_ISREG(m))
        return "file";
    if (S_ISDIR(m))
        return "dir";
    if (S_ISLNK(m))
        return "symlink";
    return "other";
}

/* The "user." extended attributes of path with text values, as an object; NULL when it
 * has none (the common case costs one llistxattr). */
static json_t *fs_user_xattrs(const char *path)
{
    char names[4096];
    ssize_t n = llistxattr(path, names, sizeof names);
    json_t *out = NULL;
    for (ssize_t off = 0; n > 0 && off < n; off += (ssize_t)strlen(names + off) + 1) {
        const char *name = names + off;
        char value[AGENT_XATTR_VALUE_MAX];
        ssize_t vn;
        if (strncmp(name, "user.", 5) != 0 ||
            (vn = lgetxattr(path, name, value, sizeof value)) < 0)
            continue;
        json_t *v = json_stringn(value, (size_t)vn); /* NULL unless valid UTF-8 */
        if (v && (out || (out = json_object())))
            json_object_set_new(out, name, v);
        else
            json_decref(v);
    }
    return out;
}

json_t *agent_fs_stat_json(const char *shown, const char *path, const struct stat *st)
{
    char owner[64], group[64];
    const char *slash = strrchr(shown, '/');
    const char *name = slash && slash[1] ? slash + 1 : shown;
    json_t *o = json_pack("{s:s, s:s, s:s, s:I, s:i, s:I, s:I, s:s, s:s, s:I}", "name", name,
                          "path", shown, "type", fs_type(st->st_mode), "size",
                          (json_int_t)st->st_size, "mode", (int)(st->st_mode & 07777), "uid",
                          (json_int_t)st->st_uid, "gid", (json_int_t)st->st_gid, "owner",
                          agent_user_name(st->st_uid, owner, sizeof owner), "group",
                          agent_group_name(st->st_gid, group, sizeof group), "mtime_ns",
                          (json_int_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec);
    json_t *xa = o && !S_ISLNK(st->st_mode) ? fs_user_xattrs(path) : NULL;
    if (xa)
        json_object_set_new(o, "xattrs", xa);
    if (o && S_ISLNK(st->st_mode)) {
        char target[PATH_MAX];
        ssize_t n = readlink(path, target, sizeof target - 1);
        if (n >= 0) {
            target[n] = '\0';
            json_object_set_new(o, "symlink_target", json_stringn(target, (size_t)n));
        }
        /* Where the link finally leads and what is there (E2B reports a link as its
         * target's type); absent for a dangling link, a loop, or a link into a volume
         * mount (whose attributes only the agent's own loop could fetch: resolve.h). */
        char resolved[PATH_MAX];
        struct stat ts;
        if (agent_resolve(path, true, resolved) == 0 && stat(resolved, &ts) == 0)
            json_object_set_new(o, "target",
                                json_pack("{s:s, s:s, s:i}", "path", resolved, "type",
                                          fs_type(ts.st_mode), "mode", (int)(ts.st_mode & 07777)));
    }
    return o;
}

void agent_fs_dirname(const char *path, char *out)
{
    const char *slash = strrchr(path, '/');
    size_t n = slash && slash != path ? (size_t)(slash - path) : 1;
    memcpy(out, path, n);
    out[n] = '\0';
}

int agent_fs_mkdirs(const char *path, mode_t mode, const struct agent_user *u, bool must_create)
{
    struct stat st;
    /* lstat: a link is not followed (it may lead into a volume); a link where a
     * directory is wanted is "exists" (must_create) or ENOTDIR. */
    if (lstat(path, &st) == 0) {
        if (must_create) {
            errno = EEXIST;
            return -1;
        }
        if (!S_ISDIR(st.st_mode)) {
            errno = ENOTDIR;
            return -1;
        }
        return 0;
    }
    if (errno != ENOENT)
        return -1;
    char parent[PATH_MAX];
    agent_fs_dirname(path, parent);
    if (strcmp(parent, path) != 0 && agent_fs_mkdirs(parent, 0755, u, false) < 0)
        return -1;
    if (mkdir(path, mode) < 0)
        return errno == EEXIST && !must_create ? 0 : -1;
    /* Created as root: hand it to the user (errors here would leave a dir the user
     * cannot use, so they count). */
    if (lchown(path, u->uid, u->gid) < 0 || chmod(path, mode) < 0)
        return -1;
    return 0;
}
