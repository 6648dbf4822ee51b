/* readall.c: see readall.h. */
#include "readall.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

char *readall_fd(int fd, size_t max, size_t *len)
{
    struct stat st;
    *len = 0;
    if (fstat(fd, &st) < 0)
        return NULL;
    if (!S_ISREG(st.st_mode)) {
        errno = EINVAL;
        return NULL;
    }
    if (st.st_size < 0 || (unsigned long long)st.st_size > max) {
        errno = EFBIG;
        return NULL;
    }
    size_t size = (size_t)st.st_size, got = 0;
    char *buf = malloc(size + 1);
    if (!buf)
        return NULL;
    while (got < size) {
        ssize_t n = read(fd, buf + got, size - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) { /* shrank or failed: never hand out a partial file */
            int e = n < 0 ? errno : EIO;
            free(buf);
            errno = e;
            return NULL;
        }
        got += (size_t)n;
    }
    buf[got] = '\0';
    *len = got;
    return buf;
}
