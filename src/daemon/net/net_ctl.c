/* net_ctl.c: one JSON-line request/reply on space-gateway's control socket (gw_ctl.h).
 * Synchronous on purpose: the gateway answers from memory on a local socket (its
 * `attach` runs `nft` and takes a few ms), and the callers must know the outcome before
 * they reply to the API or hand the tap to QEMU. The timeouts bound a hung gateway. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "daemon/net/net_internal.h"

#define CTL_TIMEOUT_S 5
#define CTL_REPLY_MAX (4u * 1024 * 1024) /* a full decision log fits */

static int ctl_connect(const char *path, char *err, size_t errlen)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof sa.sun_path) {
        snprintf(err, errlen, "control socket path too long");
        return -1;
    }
    memcpy(sa.sun_path, path, strlen(path) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(err, errlen, "socket: %s", strerror(errno));
        return -1;
    }
    struct timeval tv = {.tv_sec = CTL_TIMEOUT_S};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        snprintf(err, errlen, "gateway not reachable at %s: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

static int send_all(int fd, const char *p, size_t len)
{
    while (len) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Reads one line (without the newline) into a heap buffer the caller frees. */
static char *read_line(int fd, char *err, size_t errlen)
{
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (len + 1 >= cap) {
            char *nb = cap >= CTL_REPLY_MAX ? NULL : realloc(buf, cap * 2);
            if (!nb) {
                snprintf(err, errlen, "gateway reply too long");
                break;
            }
            buf = nb;
            cap *= 2;
        }
        ssize_t n = recv(fd, buf + len, cap - len - 1, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            snprintf(err, errlen, "gateway closed or timed out: %s", n ? strerror(errno) : "EOF");
            break;
        }
        char *nl = memchr(buf + len, '\n', (size_t)n);
        len += (size_t)n;
        if (nl) {
            *nl = 0;
            return buf;
        }
    }
    free(buf);
    return NULL;
}

json_t *net_ctl_call(const char *path, const json_t *req, char *err, size_t errlen)
{
    char *line = json_dumps(req, JSON_COMPACT);
    if (!line) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    json_t *reply = NULL;
    int fd = ctl_connect(path, err, errlen);
    if (fd >= 0) {
        size_t len = strlen(line);
        line[len] = '\n'; /* json_dumps output has its NUL here; sent as the terminator */
        if (send_all(fd, line, len + 1) != 0)
            snprintf(err, errlen, "sending to the gateway: %s", strerror(errno));
        else {
            char *text = read_line(fd, err, errlen);
            if (text) {
                reply = json_loads(text, 0, NULL);
                if (!json_is_object(reply)) {
                    json_decref(reply);
                    reply = NULL;
                    snprintf(err, errlen, "gateway answered something that is not a JSON object");
                }
                free(text);
            }
        }
        close(fd);
    }
    free(line);
    return reply;
}
