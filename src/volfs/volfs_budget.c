/* volfs_budget.c: how many bytes a mount may add to its volume (volfs.h:
 * volfs_set_budget). Sizes, not blocks: a sparse write at a far offset counts its whole
 * apparent size, as the files API's quota (spaced) measures volumes by file sizes too. */
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>

#include "volfs_internal.h"

void volfs_set_budget(struct volfs *v, int64_t bytes)
{
    v->budget = bytes < 0 ? -1 : bytes;
    v->grown = 0;
}

int volfs_budget_grow(struct volfs *v, int64_t growth)
{
    if (v->budget < 0 || growth <= 0)
        return 0;
    return v->grown > v->budget - growth ? -ENOSPC : 0;
}

void volfs_budget_add(struct volfs *v, int64_t delta)
{
    v->grown += delta;
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
    return v->grown >= v->budget ? 0 : v->budget - v->grown;
}
