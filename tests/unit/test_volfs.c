/* volfs (src/volfs/volfs.h) on a temporary directory, driven with hand-made FUSE
 * messages as a hostile guest would send them: the file operations round trip; names
 * that are not one component, missing NULs, unknown node ids and handles, oversized
 * reads and writes and broken framing are refused; symlinks planted in the volume
 * (absolute, to /etc, to a directory outside) are stored and read back as links and
 * never followed: nothing outside the directory is opened, listed or created; nodes and
 * handles are released; a renamed file can still be opened by its node; the stream
 * loop frames messages by their headers; a byte budget is kept (ENOSPC past it). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/fuse.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "volfs/volfs.h"

static char dir[64];
static struct volfs *V;
static char msg[VOLFS_MSG_MAX + 64];
static char out[VOLFS_REPLY_MAX];
static uint64_t unique;

/* Sends opcode on nodeid with arg[alen] then the strings s1, s2 (NULL: none, each with
 * its NUL); returns the reply's error (0 or -errno); the payload is at out + 16. */
static int call(uint32_t opcode, uint64_t nodeid, const void *arg, size_t alen, const char *s1,
                const char *s2)
{
    struct fuse_in_header *h = (void *)msg;
    size_t len = sizeof *h;
    if (alen)
        memcpy(msg + len, arg, alen);
    len += alen;
    for (const char *s = s1; s; s = s == s1 ? s2 : NULL) {
        memcpy(msg + len, s, strlen(s) + 1);
        len += strlen(s) + 1;
    }
    *h = (struct fuse_in_header){.len = (uint32_t)len, .opcode = opcode, .unique = ++unique,
                                 .nodeid = nodeid, .uid = 1000, .gid = 1000};
    ssize_t n = volfs_handle(V, msg, len, out, sizeof out);
    if (n == 0)
        return 0; /* no reply (forget) */
    assert_true(n >= (ssize_t)sizeof(struct fuse_out_header));
    const struct fuse_out_header *oh = (const void *)out;
    assert_int_equal(oh->len, n);
    assert_int_equal(oh->unique, unique);
    return oh->error;
}

static void *payload(void) { return out + sizeof(struct fuse_out_header); }

static uint64_t lookup(uint64_t parent, const char *name, int want)
{
    assert_int_equal(call(FUSE_LOOKUP, parent, NULL, 0, name, NULL), want);
    return want ? 0 : ((struct fuse_entry_out *)payload())->nodeid;
}

/* CREATE name under parent: the new node (*fh its handle). */
static uint64_t create(uint64_t parent, const char *name, uint32_t mode, uint64_t *fh)
{
    struct fuse_create_in in = {.flags = O_RDWR | O_CREAT, .mode = S_IFREG | mode, .umask = 022};
    assert_int_equal(call(FUSE_CREATE, parent, &in, sizeof in, name, NULL), 0);
    struct fuse_entry_out *e = payload();
    struct fuse_open_out *o = (void *)(e + 1);
    assert_int_equal(o->open_flags & FOPEN_DIRECT_IO, FOPEN_DIRECT_IO);
    *fh = o->fh;
    return e->nodeid;
}

static int write_at(uint64_t fh, uint64_t off, const char *data)
{
    struct fuse_write_in in = {.fh = fh, .offset = off, .size = (uint32_t)strlen(data)};
    return call(FUSE_WRITE, 0, &in, sizeof in, data, NULL);
}

/* READ into buf (NUL-terminated); the reply's error. */
static int read_at(uint64_t fh, uint64_t off, uint32_t size, char *buf)
{
    struct fuse_read_in in = {.fh = fh, .offset = off, .size = size};
    int rc = call(FUSE_READ, 0, &in, sizeof in, NULL, NULL);
    const struct fuse_out_header *oh = (const void *)out;
    size_t n = oh->len - sizeof *oh;
    memcpy(buf, payload(), n);
    buf[n] = '\0';
    return rc;
}

static uint64_t open_node(uint64_t node, uint32_t flags, int want)
{
    struct fuse_open_in in = {.flags = flags};
    assert_int_equal(call(FUSE_OPEN, node, &in, sizeof in, NULL, NULL), want);
    return want ? 0 : ((struct fuse_open_out *)payload())->fh;
}

static void release(uint64_t fh)
{
    struct fuse_release_in in = {.fh = fh};
    assert_int_equal(call(FUSE_RELEASE, 0, &in, sizeof in, NULL, NULL), 0);
}

static int setup(void **state)
{
    snprintf(dir, sizeof dir, "/tmp/test_volfs.XXXXXX");
    assert_non_null(mkdtemp(dir));
    V = volfs_new(open(dir, O_PATH | O_DIRECTORY));
    assert_non_null(V);
    struct fuse_init_in in = {.major = 7, .minor = 37, .max_readahead = 65536};
    assert_int_equal(call(FUSE_INIT, 0, &in, sizeof in, NULL, NULL), 0);
    struct fuse_init_out *o = payload();
    assert_int_equal(o->major, 7);
    assert_int_equal(o->minor, 31);
    assert_int_equal(o->max_write, VOLFS_MAX_IO);
    assert_int_equal(o->flags, 0); /* nothing that caches */
    return 0;
}

static int teardown(void **state)
{
    volfs_free(V);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
    return 0;
}

static void test_files_round_trip(void **state)
{
    uint64_t fh;
    uint64_t a = create(FUSE_ROOT_ID, "a.txt", 0644, &fh);
    assert_int_equal(write_at(fh, 0, "hello volume"), 0);
    assert_int_equal(((struct fuse_write_out *)payload())->size, 12);
    char buf[VOLFS_MAX_IO + 1];
    assert_int_equal(read_at(fh, 6, 100, buf), 0);
    assert_string_equal(buf, "volume");
    release(fh);
    /* the host sees the file */
    char path[128], data[64] = "";
    snprintf(path, sizeof path, "%s/a.txt", dir);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    assert_non_null(fgets(data, sizeof data, f));
    fclose(f);
    assert_string_equal(data, "hello volume");
    /* getattr: the asker owns it */
    struct fuse_getattr_in gi = {0};
    assert_int_equal(call(FUSE_GETATTR, a, &gi, sizeof gi, NULL, NULL), 0);
    struct fuse_attr_out *ao = payload();
    assert_int_equal(ao->attr.size, 12);
    assert_int_equal(ao->attr.uid, 1000);
    assert_int_equal(ao->attr_valid, 0);
    /* setattr: truncate, chmod without setuid */
    struct fuse_setattr_in si = {.valid = FATTR_SIZE | FATTR_MODE, .size = 5, .mode = 04755};
    assert_int_equal(call(FUSE_SETATTR, a, &si, sizeof si, NULL, NULL), 0);
    ao = payload();
    assert_int_equal(ao->attr.size, 5);
    assert_int_equal(ao->attr.mode & 07777, 0755);
    /* mkdir, lookup inside, unlink, rmdir */
    struct fuse_mkdir_in mi = {.mode = 0755};
    assert_int_equal(call(FUSE_MKDIR, FUSE_ROOT_ID, &mi, sizeof mi, "d", NULL), 0);
    uint64_t d = ((struct fuse_entry_out *)payload())->nodeid;
    uint64_t fh2;
    create(d, "in", 0600, &fh2);
    release(fh2);
    assert_int_equal(lookup(d, "in", 0) != 0, 1);
    assert_int_equal(call(FUSE_RMDIR, FUSE_ROOT_ID, NULL, 0, "d", NULL), -ENOTEMPTY);
    assert_int_equal(call(FUSE_UNLINK, d, NULL, 0, "in", NULL), 0);
    assert_int_equal(call(FUSE_RMDIR, FUSE_ROOT_ID, NULL, 0, "d", NULL), 0);
    /* statfs, access, flush/fsync on a handle */
    assert_int_equal(call(FUSE_STATFS, FUSE_ROOT_ID, NULL, 0, NULL, NULL), 0);
    struct fuse_access_in ai = {.mask = 7};
    assert_int_equal(call(FUSE_ACCESS, a, &ai, sizeof ai, NULL, NULL), 0);
    fh = open_node(a, O_RDWR, 0);
    struct fuse_fsync_in fi = {.fh = fh};
    assert_int_equal(call(FUSE_FSYNC, a, &fi, sizeof fi, NULL, NULL), 0);
    struct fuse_flush_in fl = {.fh = fh};
    assert_int_equal(call(FUSE_FLUSH, a, &fl, sizeof fl, NULL, NULL), 0);
    release(fh);
    assert_int_equal(volfs_handles(V), 0);
    /* anything else: ENOSYS */
    assert_int_equal(call(FUSE_GETXATTR, a, &gi, sizeof gi, NULL, NULL), -ENOSYS);
}

static void test_names_refused(void **state)
{
    lookup(FUSE_ROOT_ID, "..", -EINVAL);
    lookup(FUSE_ROOT_ID, ".", -EINVAL);
    lookup(FUSE_ROOT_ID, "", -EINVAL);
    lookup(FUSE_ROOT_ID, "a/../../etc", -EINVAL);
    lookup(FUSE_ROOT_ID, "/etc", -EINVAL);
    char longname[NAME_MAX + 2];
    memset(longname, 'x', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    lookup(FUSE_ROOT_ID, longname, -ENAMETOOLONG);
    /* a name whose NUL is missing (the message ends first) */
    struct fuse_in_header *h = (void *)msg;
    memcpy(msg + sizeof *h, "abc", 3);
    *h = (struct fuse_in_header){.len = sizeof *h + 3, .opcode = FUSE_LOOKUP, .unique = 1,
                                 .nodeid = FUSE_ROOT_ID};
    assert_int_equal(volfs_handle(V, msg, h->len, out, sizeof out), 16);
    assert_int_equal(((struct fuse_out_header *)out)->error, -EINVAL);
    struct fuse_mkdir_in mi = {.mode = 0755};
    assert_int_equal(call(FUSE_MKDIR, FUSE_ROOT_ID, &mi, sizeof mi, "..", NULL), -EINVAL);
    struct fuse_rename_in ri = {.newdir = FUSE_ROOT_ID};
    assert_int_equal(call(FUSE_RENAME, FUSE_ROOT_ID, &ri, sizeof ri, "x", "../x"), -EINVAL);
}

static void test_symlinks_never_followed(void **state)
{
    char path[160];
    snprintf(path, sizeof path, "%s/shadow", dir);
    assert_int_equal(symlink("/etc/passwd", path), 0);
    snprintf(path, sizeof path, "%s/etc", dir);
    assert_int_equal(symlink("/etc", path), 0);
    snprintf(path, sizeof path, "%s/up", dir);
    assert_int_equal(symlink("..", path), 0);
    /* the link is a link */
    uint64_t s = lookup(FUSE_ROOT_ID, "shadow", 0);
    assert_true(S_ISLNK(((struct fuse_entry_out *)payload())->attr.mode));
    open_node(s, O_RDONLY, -ELOOP);
    assert_int_equal(call(FUSE_READLINK, s, NULL, 0, NULL, NULL), 0);
    assert_int_equal(((struct fuse_out_header *)out)->len, 16 + strlen("/etc/passwd"));
    /* nothing under a link to a directory outside */
    uint64_t e = lookup(FUSE_ROOT_ID, "etc", 0);
    lookup(e, "passwd", -ENOTDIR);
    struct fuse_open_in oi = {.flags = O_RDONLY};
    assert_int_equal(call(FUSE_OPENDIR, e, &oi, sizeof oi, NULL, NULL), -ENOTDIR);
    uint64_t up = lookup(FUSE_ROOT_ID, "up", 0);
    lookup(up, "etc", -ENOTDIR);
    /* creating through a link name fails rather than writing its target */
    struct fuse_create_in ci = {.flags = O_RDWR | O_CREAT, .mode = S_IFREG | 0644};
    assert_int_equal(call(FUSE_CREATE, FUSE_ROOT_ID, &ci, sizeof ci, "shadow", NULL), -ELOOP);
    struct fuse_setattr_in si = {.valid = FATTR_SIZE, .size = 0};
    assert_int_equal(call(FUSE_SETATTR, s, &si, sizeof si, NULL, NULL), -ELOOP);
    /* a guest-made symlink is stored as text, and a hard link to it links the link */
    assert_int_equal(call(FUSE_SYMLINK, FUSE_ROOT_ID, NULL, 0, "mine", "/etc/shadow"), 0);
    uint64_t m = ((struct fuse_entry_out *)payload())->nodeid;
    struct fuse_link_in li = {.oldnodeid = m};
    assert_int_equal(call(FUSE_LINK, FUSE_ROOT_ID, &li, sizeof li, "mine2", NULL), 0);
    struct stat st;
    snprintf(path, sizeof path, "%s/mine2", dir);
    assert_int_equal(lstat(path, &st), 0);
    assert_true(S_ISLNK(st.st_mode));
    /* no devices or FIFOs */
    struct fuse_mknod_in ni = {.mode = S_IFIFO | 0644};
    assert_int_equal(call(FUSE_MKNOD, FUSE_ROOT_ID, &ni, sizeof ni, "fifo", NULL), -EPERM);
    ni.mode = S_IFCHR | 0644;
    assert_int_equal(call(FUSE_MKNOD, FUSE_ROOT_ID, &ni, sizeof ni, "dev", NULL), -EPERM);
    ni.mode = S_IFREG | 0644;
    assert_int_equal(call(FUSE_MKNOD, FUSE_ROOT_ID, &ni, sizeof ni, "plain", NULL), 0);
}

static void test_hostile_ids_sizes_framing(void **state)
{
    struct fuse_getattr_in gi = {0};
    assert_int_equal(call(FUSE_GETATTR, 0, &gi, sizeof gi, NULL, NULL), -EBADF);
    assert_int_equal(call(FUSE_GETATTR, 77, &gi, sizeof gi, NULL, NULL), -EBADF);
    assert_int_equal(call(FUSE_GETATTR, UINT64_MAX, &gi, sizeof gi, NULL, NULL), -EBADF);
    assert_int_equal(call(FUSE_GETATTR, FUSE_ROOT_ID, &gi, 4, NULL, NULL), -EINVAL);
    lookup(12345, "x", -EBADF);
    uint64_t fh;
    uint64_t a = create(FUSE_ROOT_ID, "f", 0644, &fh);
    char buf[VOLFS_MAX_IO + 1];
    assert_int_equal(read_at(fh + 1, 0, 10, buf), -EBADF);
    assert_int_equal(read_at(UINT64_MAX, 0, 10, buf), -EBADF);
    assert_int_equal(read_at(fh, 0, VOLFS_MAX_IO + 1, buf), -EINVAL);
    assert_int_equal(read_at(fh, UINT64_MAX, 10, buf), -EINVAL);
    /* a write announcing more bytes than it carries */
    struct fuse_write_in wi = {.fh = fh, .offset = 0, .size = 100};
    assert_int_equal(call(FUSE_WRITE, a, &wi, sizeof wi, "short", NULL), -EINVAL);
    wi.size = 5;
    wi.offset = (uint64_t)INT64_MAX;
    assert_int_equal(call(FUSE_WRITE, a, &wi, sizeof wi, "short", NULL), -EINVAL);
    /* a directory handle is not a file handle and the reverse */
    struct fuse_open_in oi = {0};
    assert_int_equal(call(FUSE_OPENDIR, FUSE_ROOT_ID, &oi, sizeof oi, NULL, NULL), 0);
    uint64_t dh = ((struct fuse_open_out *)payload())->fh;
    assert_int_equal(read_at(dh, 0, 10, buf), -EBADF);
    struct fuse_read_in ri = {.fh = fh, .size = 4096};
    assert_int_equal(call(FUSE_READDIR, FUSE_ROOT_ID, &ri, sizeof ri, NULL, NULL), -EBADF);
    release(dh);
    release(fh);
    /* batch forget announcing more entries than it carries */
    struct {
        struct fuse_batch_forget_in in;
        struct fuse_forget_one one;
    } bf = {{.count = 1000000}, {.nodeid = a, .nlookup = 1}};
    assert_int_equal(call(FUSE_BATCH_FORGET, 0, &bf, sizeof bf, NULL, NULL), 0);
    assert_int_equal(volfs_nodes(V), 1);
    /* framing: header length disagreeing with the message, short, oversized */
    struct fuse_in_header *h = (void *)msg;
    *h = (struct fuse_in_header){.len = 100, .opcode = FUSE_GETATTR, .unique = 9,
                                 .nodeid = FUSE_ROOT_ID};
    assert_int_equal(volfs_handle(V, msg, sizeof *h + sizeof gi, out, sizeof out), -1);
    assert_int_equal(volfs_handle(V, msg, 10, out, sizeof out), -1);
    h->len = VOLFS_MSG_MAX + 1;
    assert_int_equal(volfs_handle(V, msg, VOLFS_MSG_MAX + 1, out, sizeof out), -1);
    /* nothing after DESTROY */
    assert_int_equal(call(FUSE_DESTROY, 0, NULL, 0, NULL, NULL), 0);
    assert_true(volfs_destroyed(V));
    assert_int_equal(call(FUSE_GETATTR, FUSE_ROOT_ID, &gi, sizeof gi, NULL, NULL), -EIO);
}

static void test_nodes_handles_rename_readdir(void **state)
{
    uint64_t fh;
    uint64_t a = create(FUSE_ROOT_ID, "old", 0644, &fh);
    assert_int_equal(write_at(fh, 0, "kept"), 0);
    release(fh);
    /* one node per inode: a second lookup shares it */
    assert_int_equal(lookup(FUSE_ROOT_ID, "old", 0), a);
    struct fuse_rename2_in r2 = {.newdir = FUSE_ROOT_ID, .flags = 0x80};
    assert_int_equal(call(FUSE_RENAME2, FUSE_ROOT_ID, &r2, sizeof r2, "old", "new"), -EINVAL);
    r2.flags = RENAME_NOREPLACE;
    assert_int_equal(call(FUSE_RENAME2, FUSE_ROOT_ID, &r2, sizeof r2, "old", "new"), 0);
    /* the node opens under its new name */
    fh = open_node(a, O_RDONLY, 0);
    char buf[64];
    assert_int_equal(read_at(fh, 0, 64, buf), 0);
    assert_string_equal(buf, "kept");
    release(fh);
    /* a name replaced by another file is stale, not the other file */
    char p1[128], p2[128];
    snprintf(p1, sizeof p1, "%s/other", dir);
    snprintf(p2, sizeof p2, "%s/new", dir);
    FILE *f = fopen(p1, "w");
    assert_non_null(f);
    fclose(f);
    assert_int_equal(rename(p1, p2), 0);
    open_node(a, O_RDONLY, -ESTALE);
    /* forget releases the node */
    struct fuse_forget_in fo = {.nlookup = 2};
    assert_int_equal(call(FUSE_FORGET, a, &fo, sizeof fo, NULL, NULL), 0);
    assert_int_equal(volfs_nodes(V), 1);
    /* readdir in small pieces: every name once */
    for (int i = 0; i < 20; i++) {
        char n[16];
        snprintf(n, sizeof n, "f%02d", i);
        create(FUSE_ROOT_ID, n, 0644, &fh);
        release(fh);
    }
    struct fuse_open_in oi = {0};
    assert_int_equal(call(FUSE_OPENDIR, FUSE_ROOT_ID, &oi, sizeof oi, NULL, NULL), 0);
    uint64_t dh = ((struct fuse_open_out *)payload())->fh;
    unsigned seen = 0, calls = 0;
    uint64_t off = 0;
    for (;;) {
        struct fuse_read_in ri = {.fh = dh, .offset = off, .size = 100};
        assert_int_equal(call(FUSE_READDIR, FUSE_ROOT_ID, &ri, sizeof ri, NULL, NULL), 0);
        size_t len = ((struct fuse_out_header *)out)->len - 16, at = 0;
        if (len == 0)
            break;
        calls++;
        while (at < len) {
            struct fuse_dirent *d = (void *)((char *)payload() + at);
            if (d->name[0] == 'f' && d->namelen == 3)
                seen++;
            off = d->off;
            at += FUSE_DIRENT_SIZE(d);
        }
    }
    assert_int_equal(seen, 20);
    assert_true(calls > 3);
    struct fuse_release_in rl = {.fh = dh};
    assert_int_equal(call(FUSE_RELEASEDIR, FUSE_ROOT_ID, &rl, sizeof rl, NULL, NULL), 0);
    assert_int_equal(volfs_handles(V), 0);
}

/* A byte budget: writes and extensions past it fail with ENOSPC and change nothing (a
 * sparse write far out counts its apparent size); truncating, unlinking, replacing and
 * O_TRUNC give bytes back; statfs shows what is left. */
/* Two mounts of one tenant share a budget (daemon/volume/vol_share.h): growth made by
 * the other mount (its space-volfs adds to the shared counter) leaves this one less. */
static void test_shared_budget(void **state)
{
    (void)state;
    int fd = memfd_create("budget", MFD_CLOEXEC);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, 8), 0);
    int64_t *other = mmap(NULL, 8, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    assert_true(other != MAP_FAILED);
    volfs_set_budget(V, 10);
    assert_int_equal(volfs_share_budget(V, fd), 0);
    uint64_t fh;
    create(FUSE_ROOT_ID, "a", 0644, &fh);
    assert_int_equal(write_at(fh, 0, "1234"), 0);
    assert_int_equal(*other, 4); /* this mount's growth, seen by the others */
    __atomic_add_fetch(other, 5, __ATOMIC_SEQ_CST); /* the other mount wrote 5 bytes */
    assert_int_equal(write_at(fh, 4, "ab"), -ENOSPC); /* 4 + 5 + 2 > 10 */
    assert_int_equal(write_at(fh, 4, "a"), 0);        /* exactly 10 */
    assert_int_equal(call(FUSE_STATFS, FUSE_ROOT_ID, NULL, 0, NULL, NULL), 0);
    assert_int_equal(((struct fuse_statfs_out *)payload())->st.bavail, 0);
    __atomic_sub_fetch(other, 5, __ATOMIC_SEQ_CST); /* the other freed its bytes */
    assert_int_equal(write_at(fh, 5, "bcd"), 0);
    release(fh);
    assert_int_equal(*other, 8);
    /* a descriptor too small to hold the counter is refused */
    int small = memfd_create("small", MFD_CLOEXEC);
    assert_int_equal(volfs_share_budget(V, small), -1);
    close(small);
    munmap(other, 8);
    close(fd);
}

static void test_budget(void **state)
{
    volfs_set_budget(V, 10);
    uint64_t fh;
    uint64_t a = create(FUSE_ROOT_ID, "a", 0644, &fh);
    assert_int_equal(write_at(fh, 0, "12345678"), 0);
    assert_int_equal(write_at(fh, 8, "abc"), -ENOSPC);      /* 11 > 10 */
    assert_int_equal(write_at(fh, 0, "ABCDEFGH"), 0);        /* rewriting adds nothing */
    assert_int_equal(write_at(fh, 8, "ab"), 0);              /* exactly 10 */
    assert_int_equal(write_at(fh, 1000000, "x"), -ENOSPC);   /* sparse: its size counts */
    struct fuse_setattr_in si = {.valid = FATTR_SIZE, .size = 4096};
    assert_int_equal(call(FUSE_SETATTR, a, &si, sizeof si, NULL, NULL), -ENOSPC);
    struct stat st;
    char path[128];
    snprintf(path, sizeof path, "%s/a", dir);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_size, 10);
    si.size = 4; /* truncating frees 6 */
    assert_int_equal(call(FUSE_SETATTR, a, &si, sizeof si, NULL, NULL), 0);
    assert_int_equal(write_at(fh, 4, "xyzuvw"), 0);
    assert_int_equal(write_at(fh, 10, "!"), -ENOSPC);
    release(fh);
    /* statfs: nothing left */
    assert_int_equal(call(FUSE_STATFS, FUSE_ROOT_ID, NULL, 0, NULL, NULL), 0);
    assert_int_equal(((struct fuse_statfs_out *)payload())->st.bavail, 0);
    /* O_TRUNC frees the file's 10 bytes */
    fh = open_node(a, O_RDWR | O_TRUNC, 0);
    assert_int_equal(write_at(fh, 0, "0123456789"), 0);
    release(fh);
    /* a second file cannot grow until the first is unlinked */
    uint64_t fh2;
    create(FUSE_ROOT_ID, "b", 0644, &fh2);
    assert_int_equal(write_at(fh2, 0, "q"), -ENOSPC);
    assert_int_equal(call(FUSE_UNLINK, FUSE_ROOT_ID, NULL, 0, "a", NULL), 0);
    assert_int_equal(write_at(fh2, 0, "qqqqq"), 0);
    release(fh2);
    /* renaming b over c frees c's bytes; renaming a file onto itself frees nothing */
    uint64_t fh3;
    create(FUSE_ROOT_ID, "c", 0644, &fh3);
    assert_int_equal(write_at(fh3, 0, "ccccc"), 0);
    release(fh3);
    struct fuse_rename_in ri = {.newdir = FUSE_ROOT_ID};
    char same[] = "c"; /* a distinct pointer: call() walks s1 then s2 */
    assert_int_equal(call(FUSE_RENAME, FUSE_ROOT_ID, &ri, sizeof ri, "c", same), 0);
    assert_int_equal(call(FUSE_STATFS, FUSE_ROOT_ID, NULL, 0, NULL, NULL), 0);
    assert_int_equal(((struct fuse_statfs_out *)payload())->st.bavail, 0);
    assert_int_equal(call(FUSE_RENAME, FUSE_ROOT_ID, &ri, sizeof ri, "b", "c"), 0);
    fh = open_node(lookup(FUSE_ROOT_ID, "c", 0), O_RDWR | O_APPEND, 0);
    assert_int_equal(write_at(fh, 0, "12345"), 0);       /* appended: 10 in all */
    assert_int_equal(write_at(fh, 0, "6"), -ENOSPC);     /* O_APPEND: at the end, not 0 */
    release(fh);
    /* no budget: no limit */
    volfs_set_budget(V, -1);
    fh = open_node(lookup(FUSE_ROOT_ID, "c", 0), O_RDWR, 0);
    assert_int_equal(write_at(fh, 100000, "x"), 0);
    release(fh);
}

static void test_serve_stream(void **state)
{
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    /* two GETATTRs back to back, then EOF */
    struct {
        struct fuse_in_header h;
        struct fuse_getattr_in g;
    } m = {{.len = sizeof m, .opcode = FUSE_GETATTR, .unique = 5, .nodeid = FUSE_ROOT_ID}, {0}};
    assert_int_equal(write(sv[1], &m, sizeof m), sizeof m);
    m.h.unique = 6;
    assert_int_equal(write(sv[1], &m, sizeof m), sizeof m);
    shutdown(sv[1], SHUT_WR);
    assert_int_equal(volfs_serve(V, sv[0]), 0);
    struct fuse_out_header oh;
    struct fuse_attr_out ao;
    for (uint64_t u = 5; u <= 6; u++) {
        assert_int_equal(read(sv[1], &oh, sizeof oh), sizeof oh);
        assert_int_equal(oh.unique, u);
        assert_int_equal(oh.error, 0);
        assert_int_equal(read(sv[1], &ao, sizeof ao), sizeof ao);
        assert_true(S_ISDIR(ao.attr.mode));
    }
    close(sv[0]);
    close(sv[1]);
    /* a header announcing a huge message ends the stream before its body */
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    m.h.len = 0xffffffffu;
    assert_int_equal(write(sv[1], &m, sizeof m), sizeof m);
    assert_int_equal(volfs_serve(V, sv[0]), -1);
    close(sv[0]);
    close(sv[1]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_files_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_names_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_symlinks_never_followed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hostile_ids_sizes_framing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nodes_handles_rename_readdir, setup, teardown),
        cmocka_unit_test_setup_teardown(test_budget, setup, teardown),
        cmocka_unit_test_setup_teardown(test_shared_budget, setup, teardown),
        cmocka_unit_test_setup_teardown(test_serve_stream, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
