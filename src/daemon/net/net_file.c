/* net_file.c: the net module's record files: the ids that name them, and their durable
 * writes (net_internal.h). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "daemon/net/net_internal.h"
#include "log.h"

bool net_id_ok(const char *id, size_t max)
{
    size_t n = id ? strlen(id) : 0;
    if (n == 0 || n > max)
        return false;
    for (; *id; id++)
        if (!((*id >= 'a' && *id <= 'z') || (*id >= 'A' && *id <= 'Z') ||
              (*id >= '0' && *id <= '9') || *id == '-' || *id == '_'))
            return false;
    return true;
}

int net_json_save(const char *path, const json_t *o)
{
    char tmp[PATH_MAX + 16];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    int rc = fd >= 0 && json_dumpfd(o, fd, JSON_COMPACT) == 0 && fsync(fd) == 0 ? 0 : -1;
    if (fd >= 0)
        close(fd);
    if (rc == 0 && rename(tmp, path) != 0)
        rc = -1;
    if (rc != 0) {
        char q[PATH_MAX + 32];
        log_error("net.record_write", "path=%s errno=%d", log_quote(path, q, sizeof q), errno);
        unlink(tmp);
    }
    return rc;
}
