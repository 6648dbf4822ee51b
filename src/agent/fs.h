/* agent_fs: filesystem helpers shared by the file ops (files.c, xfer.c, watch.c). */
#ifndef SPACE_AGENT_FS_H
#define SPACE_AGENT_FS_H

#include <jansson.h>
#include <stdbool.h>
#include <sys/stat.h>

#include "agent/users.h"

#define AGENT_XATTR_VALUE_MAX 4096   /* bytes of one extended attribute value */
#define AGENT_XATTR_MAX       64     /* attributes one write may set */

/* The protocol's stat object for the file at `real` (its lstat in *st; real is off the
 * volumes, resolve.h: it is read again for xattrs and a link's target) as named by
 * `shown` (the path the request gave, which may go through links): name, path, type,
 * size, mode, uid, gid, owner, group, mtime_ns, symlink_target, and xattrs ("user."
 * attributes with UTF-8 values) when there are any. New reference, NULL on OOM. */
json_t *agent_fs_stat_json(const char *shown, const char *real, const struct stat *st);

/* Creates directory `path` and missing parents with `mode`, owned by u (only the ones
 * it creates). path is resolved (agent_resolve): its parents are real directories, and
 * path itself, if a link, is not followed. 0, or -1 with errno (EEXIST if something was
 * at path and must_create; ENOTDIR if that was no directory). */
int agent_fs_mkdirs(const char *path, mode_t mode, const struct agent_user *u, bool must_create);

/* The parent directory part of an absolute normalised path into out[PATH_MAX] ("/" for
 * top-level names). */
void agent_fs_dirname(const char *path, char *out);

#endif
