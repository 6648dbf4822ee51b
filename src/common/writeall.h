/* writeall: every byte of a buffer written to a descriptor, for the blocking writes the
 * programs make to files and pipes (a fetched blob's temporary file, a terminal, a FUSE
 * reply). write(2) may take fewer bytes than asked, or be interrupted by a signal before
 * taking any; this retries both, and stops on the first real error. Not for nonblocking
 * descriptors (EAGAIN is an error here). */
#ifndef SPACE_WRITEALL_H
#define SPACE_WRITEALL_H

#include <stddef.h>

/* Writes p[0..n) to fd. 0, or -1 with errno (a write that took 0 bytes: EIO). */
int writeall_fd(int fd, const void *p, size_t n);

#endif
