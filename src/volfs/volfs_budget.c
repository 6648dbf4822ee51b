/* volfs_budget.c: how many bytes a mount may add to its volume (volfs.h:
 * volfs_set_budget). Sizes, not blocks: a sparse write at a far offset counts its whole
 * apparent size, as the files API's quota (spaced) measures volumes by file sizes too. */
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "volfs_internal.h"

void volfs_set_budget(struct volfs *v, int64_t bytes)
{
    v->budget = bytes < 0 ? -1 : bytes;
    v->grown = 0;
}

int volfs_share_budget(struct volfs *v, int fd)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return -1;
    if (st.st_size < (off_t)sizeof(int64_t)) {
        errno = EINVAL;
        return -1;
    }
    void *p = mmap(NULL, sizeof(int64_t), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED)
        return -1;
    v->used = p; /* mapped for the process's life */
    return 0;
}

static int64_t used_now(const struct volfs *v)
{
    return __atomic_load_n(v->used, __ATOMIC_SEQ_CST);
}

int volfs_budget_grow(struct volfs *v, int64_t growth)
{
    if (v->budget < 0 || growth <= 0)
        return 0;
    return used_now(v) > v->budget - growth ? -ENOSPC : 0;
}

void volfs_budget_add(struct volfs *v, int64_t delta)
{
    __atomic_add_fetch(v->used, delta, __ATOMIC_SEQ_CST);
}

int64_t volfs_budget_freed(int dirfd, const char *name)
{
    struct stat st;
    if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode) ||
        st.st_nlink != 1)
        return 0;
    return st.st_size;
}

int64_t volfs_budget_left(const struct volfs *v)
{
    if (v->budget < 0)
        return -1;
    int64_t used = used_now(v);
    return used >= v->budget ? 0 : v->budget - used;
}
