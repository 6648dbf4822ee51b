/* vol.c: volumes as directories, and every path inside one resolved beneath it (vol.h). */
#include "vol.h"
#include "vol_trash.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define VOL_RESOLVE (RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | \
                     RESOLVE_NO_XDEV)

bool vol_name_valid(const char *name)
{
    size_t n = name ? strlen(name) : 0;
    if (n == 0 || n > VOL_NAME_MAX || !((name[0] >= 'a' && name[0] <= 'z') ||
                                        (name[0] >= '0' && name[0] <= '9')))
        return false;
    for (size_t i = 0; i < n; i++)
        if (!strchr("abcdefghijklmnopqrstuvwxyz0123456789._-", name[i]))
            return false;
    return true;
}

/* <data_dir>/volumes/<tenant>[/<name>] into out; false if the tenant id could not be a
 * directory name (never for ids auth makes) or the path is too long. */
static bool vol_path(const struct spaced *sp, const char *tenant, const char *name, char *out,
                     size_t cap)
{
    for (const char *p = tenant; *p; p++)
        if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-", *p))
            return false;
    int n = snprintf(out, cap, "%s/volumes/%s%s%s", sp->opt.data_dir, tenant, name ? "/" : "",
                     name ? name : "");
    return tenant[0] && n > 0 && (size_t)n < cap;
}

/* The volume's directory (O_PATH), or -1 with err 404 / 400. */
static int vol_root(struct spaced *sp, const char *tenant, const char *name,
                    struct spaced_err *err)
{
    char path[600];
    if (!vol_name_valid(name))
        return spaced_err_set(err, 400, "invalid_name",
                              "volume names are 1..%d of a-z 0-9 . _ -, starting with a letter "
                              "or digit", VOL_NAME_MAX);
    if (!vol_path(sp, tenant, name, path, sizeof path))
        return spaced_err_set(err, 500, "internal", "bad tenant id");
    int fd = open(path, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return spaced_err_set(err, 404, "not_found", "volume %s not found", name);
    return fd;
}

static json_t *vol_json(int dirfd, const char *name)
{
    struct statx sx;
    int64_t ms = 0;
    if (statx(dirfd, name, AT_SYMLINK_NOFOLLOW, STATX_BTIME | STATX_MTIME, &sx) == 0)
        ms = (sx.stx_mask & STATX_BTIME) ? sx.stx_btime.tv_sec * 1000LL + sx.stx_btime.tv_nsec / 1000000
                                         : sx.stx_mtime.tv_sec * 1000LL + sx.stx_mtime.tv_nsec / 1000000;
    char buf[32];
    return json_pack("{s:s, s:s}", "name", name, "created_at", spaced_fmt_time(ms, buf));
}

static int count_volumes(const char *tenant_dir)
{
    DIR *d = opendir(tenant_dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        n += e->d_name[0] != '.';
    if (d)
        closedir(d);
    return n;
}

int vol_create(struct spaced *sp, const char *tenant, const char *name, struct spaced_err *err)
{
    char tdir[600], vdir[600];
    if (!vol_name_valid(name))
        return vol_root(sp, tenant, name, err); /* the 400 naming the rule */
    if (!vol_path(sp, tenant, NULL, tdir, sizeof tdir) ||
        !vol_path(sp, tenant, name, vdir, sizeof vdir) || spaced_mkdir_p(tdir) != 0)
        return spaced_err_set(err, 500, "internal", "cannot make the tenant's volume directory");
    if (count_volumes(tdir) >= VOL_MAX_PER_TENANT)
        return spaced_err_set(err, 403, "quota_exceeded", "volumes: limit %d reached",
                              VOL_MAX_PER_TENANT);
    if (mkdir(vdir, 0700) != 0)
        return errno == EEXIST ? spaced_err_set(err, 409, "exists", "volume %s exists", name)
                               : spaced_err_set(err, 500, "internal", "mkdir: %s", strerror(errno));
    return 0;
}

json_t *vol_get(struct spaced *sp, const char *tenant, const char *name, struct spaced_err *err)
{
    int fd = vol_root(sp, tenant, name, err);
    if (fd < 0)
        return NULL;
    close(fd);
    char tdir[600];
    vol_path(sp, tenant, NULL, tdir, sizeof tdir);
    int dfd = open(tdir, O_PATH | O_DIRECTORY | O_CLOEXEC);
    json_t *j = dfd >= 0 ? vol_json(dfd, name) : NULL;
    if (dfd >= 0)
        close(dfd);
    if (!j)
        spaced_err_set(err, 500, "internal", "cannot read volume %s", name);
    return j;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(json_string_value(json_object_get(*(json_t *const *)a, "name")),
                  json_string_value(json_object_get(*(json_t *const *)b, "name")));
}

/* The array's objects sorted by "name" (jansson has no sort). */
static json_t *sorted(json_t *arr)
{
    size_t n = json_array_size(arr);
    json_t **v = n ? calloc(n, sizeof *v) : NULL;
    json_t *out = json_array();
    for (size_t i = 0; v && i < n; i++)
        v[i] = json_array_get(arr, i);
    if (v)
        qsort(v, n, sizeof *v, by_name);
    for (size_t i = 0; v && out && i < n; i++)
        json_array_append(out, v[i]);
    free(v);
    json_decref(arr);
    return out;
}

json_t *vol_list(struct spaced *sp, const char *tenant)
{
    char tdir[600];
    json_t *arr = json_array();
    if (!arr || !vol_path(sp, tenant, NULL, tdir, sizeof tdir))
        return arr;
    DIR *d = opendir(tdir);
    for (struct dirent *e; d && (e = readdir(d));)
        if (vol_name_valid(e->d_name))
            json_array_append_new(arr, vol_json(dirfd(d), e->d_name));
    if (d)
        closedir(d);
    return sorted(arr);
}

int vol_delete(struct spaced *sp, const char *tenant, const char *name, struct spaced_err *err)
{
    int fd = vol_root(sp, tenant, name, err);
    if (fd < 0)
        return -1;
    close(fd);
    char user[64];
    if (sp->vol_user && sp->vol_user(sp, tenant, name, user, sizeof user))
        return spaced_err_set(err, 409, "volume_in_use", "volume %s is mounted by sandbox %s "
                              "(delete the sandbox first)", name, user);
    char tdir[600];
    int tfd = vol_path(sp, tenant, NULL, tdir, sizeof tdir)
                  ? open(tdir, O_PATH | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW) : -1;
    int rc = tfd >= 0 ? vol_trash_move(sp, tfd, name) : -1;
    int e = errno;
    if (tfd >= 0)
        close(tfd);
    if (rc != 0)
        return spaced_err_set(err, 500, "internal", "volume %s could not be removed: %s", name,
                              strerror(e));
    return 0;
}

int vol_dir(struct spaced *sp, const char *tenant, const char *name, char *out, size_t cap,
            struct spaced_err *err)
{
    int fd = vol_root(sp, tenant, name, err);
    if (fd < 0)
        return -1;
    close(fd);
    if (!vol_path(sp, tenant, name, out, cap))
        return spaced_err_set(err, 500, "internal", "volume path too long");
    return 0;
}

int vol_ident(struct spaced *sp, const char *tenant, const char *name, char *out, size_t cap,
              struct spaced_err *err)
{
    int fd = vol_root(sp, tenant, name, err);
    if (fd < 0)
        return -1;
    struct statx sx;
    int rc = statx(fd, "", AT_EMPTY_PATH, STATX_INO | STATX_BTIME, &sx);
    close(fd);
    if (rc != 0)
        return spaced_err_set(err, 500, "internal", "volume %s: statx: %s", name, strerror(errno));
    long long bt = (sx.stx_mask & STATX_BTIME) ? sx.stx_btime.tv_sec * 1000000000LL +
                                                     sx.stx_btime.tv_nsec : 0;
    int n = snprintf(out, cap, "%llu-%lld", (unsigned long long)sx.stx_ino, bt);
    return n < 0 || (size_t)n >= cap ? spaced_err_set(err, 500, "internal", "no room") : 0;
}

/* The path relative to the volume's root ("." for "/"), or NULL after err 400. */
static const char *rel_path(const char *path, struct spaced_err *err)
{
    if (!path || path[0] != '/' || strlen(path) >= VOL_PATH_MAX) {
        spaced_err_set(err, 400, "invalid_path",
                       "path must be absolute inside the volume (\"/dir/file\"), under %d bytes",
                       VOL_PATH_MAX);
        return NULL;
    }
    while (*path == '/')
        path++;
    return *path ? path : ".";
}

/* openat2 beneath dirfd, errors as API errors. */
static int open_beneath(int dirfd, const char *rel, int flags, mode_t mode, const char *shown,
                        struct spaced_err *err)
{
    struct open_how how = {.flags = (uint64_t)(flags | O_NOFOLLOW | O_CLOEXEC),
                           .mode = (flags & O_CREAT) ? mode : 0, .resolve = VOL_RESOLVE};
    long fd = syscall(SYS_openat2, dirfd, rel, &how, sizeof how);
    if (fd >= 0)
        return (int)fd;
    switch (errno) {
    case ENOENT: return spaced_err_set(err, 404, "not_found", "no such file: %.200s", shown);
    case EXDEV:
        return spaced_err_set(err, 400, "invalid_path", "%.200s leaves the volume", shown);
    case ELOOP:
        return spaced_err_set(err, 400, "symlink",
                              "%.200s goes through a symlink (volume paths follow none)", shown);
    case EISDIR: return spaced_err_set(err, 409, "is_directory", "%.200s is a directory", shown);
    case ENXIO: /* a FIFO opened for writing with no reader (O_NONBLOCK), a device gone */
        return spaced_err_set(err, 409, "not_a_file", "%.200s is not a regular file", shown);
    case ENOTDIR:
        return spaced_err_set(err, 400, "invalid_path", "a parent of %.200s is not a directory",
                              shown);
    default:
        return spaced_err_set(err, 500, "internal", "%.200s: %s", shown, strerror(errno));
    }
}

/* Creates the missing directories of rel's parent, one component at a time, each
 * resolved beneath the one before (so ".." or a symlink on the way is refused). */
static int make_parents(int root, const char *rel, const char *shown, struct spaced_err *err)
{
    err->status = 0;
    char buf[VOL_PATH_MAX];
    snprintf(buf, sizeof buf, "%s", rel);
    char *last = strrchr(buf, '/');
    if (!last)
        return 0;
    *last = '\0';
    int cur = dup(root);
    char *save = NULL;
    for (char *c = strtok_r(buf, "/", &save); c && cur >= 0; c = strtok_r(NULL, "/", &save)) {
        int fd = open_beneath(cur, c, O_PATH | O_DIRECTORY, 0, shown, err);
        if (fd < 0 && err->status == 404 && (mkdirat(cur, c, 0755) == 0 || errno == EEXIST))
            fd = open_beneath(cur, c, O_PATH | O_DIRECTORY, 0, shown, err);
        close(cur);
        cur = fd;
    }
    if (cur < 0)
        return err->status ? -1 : spaced_err_set(err, 500, "internal", "out of descriptors");
    close(cur);
    return 0;
}

int vol_open(struct spaced *sp, const char *tenant, const char *name, const char *path,
             int flags, bool mkdirs, struct spaced_err *err)
{
    const char *rel = rel_path(path, err);
    int root = rel ? vol_root(sp, tenant, name, err) : -1;
    if (root < 0)
        return -1;
    /* O_NONBLOCK: a FIFO a guest left must not block the loop in open (a read open
     * waits for a writer); the caller then refuses anything but a regular file. On
     * regular files and directories it changes nothing. (O_PATH opens nothing and
     * openat2 takes no other flag with it.) */
    int fd = mkdirs && make_parents(root, rel, path, err) < 0
                 ? -1 : open_beneath(root, rel, (flags & O_PATH) ? flags : flags | O_NONBLOCK,
                                     0644, path, err);
    close(root);
    return fd;
}

/* The parent directory of path (O_PATH, resolved beneath the volume; missing ones made
 * first when mkdirs) and its last component in leaf[VOL_PATH_MAX]: the fd, or -1 with
 * err. The leaf is then used as itself (unlinkat and mkdirat never follow a link). */
static int open_parent(struct spaced *sp, const char *tenant, const char *name,
                       const char *path, bool mkdirs, char *leaf, struct spaced_err *err)
{
    const char *rel = rel_path(path, err);
    if (rel && strcmp(rel, ".") == 0)
        return spaced_err_set(err, 400, "invalid_path", "the volume's root is not a file "
                                                        "(DELETE /v1/volumes/{name} removes it)");
    int root = rel ? vol_root(sp, tenant, name, err) : -1;
    if (root < 0)
        return -1;
    if (mkdirs && make_parents(root, rel, path, err) < 0) {
        close(root);
        return -1;
    }
    char parent[VOL_PATH_MAX];
    snprintf(parent, sizeof parent, "%s", rel);
    char *slash = strrchr(parent, '/');
    snprintf(leaf, VOL_PATH_MAX, "%s", slash ? slash + 1 : rel);
    if (slash)
        *slash = '\0';
    int pfd = open_beneath(root, slash ? parent : ".", O_PATH | O_DIRECTORY, 0, path, err);
    close(root);
    if (pfd >= 0 && (!leaf[0] || strcmp(leaf, "..") == 0 || strcmp(leaf, ".") == 0)) {
        close(pfd);
        return spaced_err_set(err, 400, "invalid_path", "%.200s is not a file name", path);
    }
    return pfd;
}

int vol_remove(struct spaced *sp, const char *tenant, const char *name, const char *path,
               bool recursive, struct spaced_err *err)
{
    char leaf[VOL_PATH_MAX];
    int pfd = open_parent(sp, tenant, name, path, false, leaf, err);
    if (pfd < 0)
        return -1;
    int rc = unlinkat(pfd, leaf, 0);
    if (rc != 0 && errno == EISDIR)
        rc = unlinkat(pfd, leaf, AT_REMOVEDIR);
    if (rc != 0 && (errno == ENOTEMPTY || errno == EEXIST) && recursive)
        rc = vol_trash_move(sp, pfd, leaf); /* leaf is a directory: renamed, not followed */
    int e = errno;
    close(pfd);
    if (rc == 0)
        return 0;
    if (e == ENOENT)
        return spaced_err_set(err, 404, "not_found", "no such file: %.200s", path);
    if (e == ENOTEMPTY)
        return spaced_err_set(err, 409, "not_empty", "directory %.200s is not empty", path);
    return spaced_err_set(err, 500, "internal", "%.200s: %s", path, strerror(e));
}

int vol_mkdir(struct spaced *sp, const char *tenant, const char *name, const char *path,
              bool parents, mode_t mode, struct spaced_err *err)
{
    char leaf[VOL_PATH_MAX];
    int pfd = open_parent(sp, tenant, name, path, parents, leaf, err);
    if (pfd < 0)
        return -1;
    int rc = mkdirat(pfd, leaf, mode & 07777);
    int e = errno;
    close(pfd);
    if (rc == 0)
        return 0;
    if (e == EEXIST)
        return spaced_err_set(err, 409, "exists", "%.200s exists", path);
    return spaced_err_set(err, 500, "internal", "%.200s: %s", path, strerror(e));
}

json_t *vol_list_dir(struct spaced *sp, const char *tenant, const char *name, const char *path,
                     struct spaced_err *err)
{
    int fd = vol_open(sp, tenant, name, path, O_RDONLY | O_DIRECTORY, false, err);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    json_t *arr = json_array();
    for (struct dirent *e; arr && (e = readdir(d));) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        struct stat st;
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0)
            continue;
        const char *type = S_ISREG(st.st_mode) ? "file" : S_ISDIR(st.st_mode) ? "dir"
                           : S_ISLNK(st.st_mode) ? "symlink" : "other";
        json_array_append_new(arr, json_pack("{s:s, s:s, s:I}", "name", e->d_name, "type", type,
                                             "size", (json_int_t)st.st_size));
    }
    closedir(d);
    return sorted(arr);
}
