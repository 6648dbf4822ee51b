/* vol: named volumes, per tenant: directories on the host, read and written by the API
 * without a sandbox (api/routes_volumes.c), and mounted into sandboxes (vol_mount.h: the
 * guest agent relays FUSE to a jailed space-volfs per mount).
 *
 * Layout: <data_dir>/volumes/<tenant>/<name>/ is the volume's content; the directory is
 * the whole truth (no store row), so a volume lives until deleted, across sandbox
 * deletions and spaced restarts.
 *
 * Paths inside a volume come from clients and, once volumes are mounted, the content
 * comes from guests: a volume may hold symlinks to anything. Every path is resolved from
 * the volume's directory fd with openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
 * RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV) and O_NOFOLLOW: "..", absolute paths and any
 * symlink on the way or at the end are refused (400 invalid_path / 400 symlink), so no
 * request reads, writes or deletes outside the volume.
 *
 * Limits: VOL_MAX_PER_TENANT volumes (403 quota_exceeded), VOL_FILE_MAX bytes per
 * uploaded file (413). Prefix vol_. */
#ifndef SPACE_VOL_H
#define SPACE_VOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "daemon/spaced.h"

typedef struct json_t json_t;

#define VOL_NAME_MAX 63
#define VOL_MAX_PER_TENANT 100
#define VOL_FILE_MAX (1LL << 30)
#define VOL_PATH_MAX 1024 /* a path inside a volume */

/* Name rule: 1..63 of [a-z0-9._-], starting with a letter or digit. */
bool vol_name_valid(const char *name);

/* 201-style create: 0, or -1 with err (400 invalid_name, 409 exists, 403 quota_exceeded,
 * 500). */
int vol_create(struct spaced *sp, const char *tenant, const char *name, struct spaced_err *err);
/* {"name","created_at"} of one volume, or NULL with err (404). New reference. */
json_t *vol_get(struct spaced *sp, const char *tenant, const char *name, struct spaced_err *err);
/* [{"name","created_at"}...] sorted by name. New reference (NULL: out of memory). */
json_t *vol_list(struct spaced *sp, const char *tenant);
/* Deletes the volume and everything in it (at once for the client: vol_trash.h; symlinks
 * are removed, never followed); 409
 * volume_in_use naming the sandbox while a live sandbox mounts it (sp->vol_user). */
int vol_delete(struct spaced *sp, const char *tenant, const char *name, struct spaced_err *err);

/* The volume's directory on the host into out[cap]: 0, or -1 with err (404 no such
 * volume of this tenant, 400 bad name). */
int vol_dir(struct spaced *sp, const char *tenant, const char *name, char *out, size_t cap,
            struct spaced_err *err);

/* A string naming this very volume directory ("<inode>-<birth ns>", birth 0 where the
 * filesystem keeps none): it changes when the volume is deleted and made again under the
 * same name (unless, without birth times, the new directory reuses the inode). 0, or -1
 * with err (404). */
int vol_ident(struct spaced *sp, const char *tenant, const char *name, char *out, size_t cap,
              struct spaced_err *err);

/* Opens `path` ("/a/b", relative to the volume's root) with flags (O_NOFOLLOW and
 * O_CLOEXEC added). mkdirs: create the missing parent directories first. Returns the fd,
 * or -1 with err (404 no such volume or file, 400 invalid_path / symlink, 409 is a
 * directory, 500). */
int vol_open(struct spaced *sp, const char *tenant, const char *name, const char *path,
             int flags, bool mkdirs, struct spaced_err *err);
/* Removes the file or directory at path; a directory that is not empty only when
 * recursive (else 409 not_empty), then all of it at once (vol_trash.h: renamed away on
 * the loop, deleted by a thread). 0 or -1 with err. */
int vol_remove(struct spaced *sp, const char *tenant, const char *name, const char *path,
               bool recursive, struct spaced_err *err);
/* Makes the directory at path with mode (the missing directories above it too when
 * parents). 0, or -1 with err (409 exists, 404 a parent missing, 400 as vol_open). */
int vol_mkdir(struct spaced *sp, const char *tenant, const char *name, const char *path,
              bool parents, mode_t mode, struct spaced_err *err);
/* The entries of the directory at path: [{"name","type","size"}] (type file, dir,
 * symlink, other), sorted by name. NULL with err. */
json_t *vol_list_dir(struct spaced *sp, const char *tenant, const char *name, const char *path,
                     struct spaced_err *err);

#endif
