/* readall: a whole regular file into memory, for the small files the programs read at
 * once (console assets, Spacefiles, uploaded template archives). The caller opens the
 * file its own way (O_NOFOLLOW, openat2 beneath a directory) and keeps the policy; this
 * module only refuses what is not a regular file or exceeds the caller's bound before a
 * byte is allocated, and never returns a partial file (one that shrank while read). */
#ifndef SPACE_READALL_H
#define SPACE_READALL_H

#include <stddef.h>

/* Reads all of the regular file open on fd (fd is not closed). Returns a malloc'd
 * buffer NUL-terminated after *len bytes, or NULL with errno: EINVAL (not a regular
 * file), EFBIG (larger than max), EIO (shorter than its size said), ENOMEM, or
 * fstat/read's own. */
char *readall_fd(int fd, size_t max, size_t *len);

#endif
