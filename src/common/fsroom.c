/* fsroom.c: see fsroom.h. */
#include "fsroom.h"

#include <stdio.h>
#include <string.h>
#include <sys/statvfs.h>

long long fsroom_avail(const char *path)
{
    struct statvfs v;
    if (statvfs(path, &v) < 0) {
        char dir[4096];
        const char *slash = strrchr(path, '/');
        int n = !slash ? snprintf(dir, sizeof dir, ".")
                : slash == path ? snprintf(dir, sizeof dir, "/")
                : snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
        if (n < 0 || (size_t)n >= sizeof dir || statvfs(dir, &v) < 0)
            return -1;
    }
    return (long long)v.f_bavail * (long long)v.f_frsize;
}
