/* fuzz_volfs: volfs_handle (src/volfs/volfs.h) on what a hostile guest's relay could
 * send: the input is a stream of FUSE messages, each framed by its header's length as
 * volfs_serve frames them, served after an INIT on a scratch directory. Every reply
 * must be a well-formed header for the same request (length within the buffer, error 0
 * or a negative errno) and the server must stay within its node and handle limits. The
 * scratch directory is remade every 512 inputs, so files the inputs create do not pile
 * up. */
#include <fcntl.h>
#include <linux/fuse.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "volfs/volfs.h"

static char dir[64];
static struct volfs *V;
static unsigned uses;
static char out[VOLFS_REPLY_MAX];
static char msg[VOLFS_MSG_MAX];

static void fresh(void)
{
    char cmd[96];
    volfs_free(V);
    if (dir[0]) {
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        if (system(cmd) != 0)
            __builtin_trap();
    }
    snprintf(dir, sizeof dir, "/tmp/fuzz_volfs.XXXXXX");
    if (!mkdtemp(dir))
        __builtin_trap();
    V = volfs_new(open(dir, O_PATH | O_DIRECTORY));
    if (!V)
        __builtin_trap();
    struct {
        struct fuse_in_header h;
        struct fuse_init_in i;
    } init = {{.len = sizeof init, .opcode = FUSE_INIT, .unique = 1}, {.major = 7, .minor = 31}};
    if (volfs_handle(V, &init, sizeof init, out, sizeof out) <= 0)
        __builtin_trap();
}

static void check(ssize_t n, const struct fuse_in_header *h)
{
    if (n == 0)
        return;
    const struct fuse_out_header *oh = (const void *)out;
    if (n < (ssize_t)sizeof *oh || (size_t)n > sizeof out || oh->len != (uint32_t)n ||
        oh->unique != h->unique || oh->error > 0 || oh->error < -4095 ||
        (oh->error && n != (ssize_t)sizeof *oh))
        __builtin_trap();
    if (volfs_nodes(V) > VOLFS_NODES_MAX || volfs_handles(V) > VOLFS_HANDLES_MAX)
        __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!V || uses++ % 512 == 0 || volfs_destroyed(V))
        fresh();
    size_t at = 0;
    while (size - at >= sizeof(struct fuse_in_header)) {
        uint32_t len;
        memcpy(&len, data + at, sizeof len);
        if (len < sizeof(struct fuse_in_header) || len > size - at) {
            /* as volfs_serve would: the stream ends; the message as given is refused */
            size_t rest = size - at < sizeof msg ? size - at : sizeof msg;
            memcpy(msg, data + at, rest);
            if (volfs_handle(V, msg, rest, out, sizeof out) != -1)
                __builtin_trap();
            break;
        }
        memcpy(msg, data + at, len); /* aligned, as the stream loop's buffer is */
        check(volfs_handle(V, msg, len, out, sizeof out), (const void *)msg);
        at += len;
    }
    return 0;
}
