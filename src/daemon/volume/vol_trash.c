/* vol_trash.c: see vol_trash.h. */
#include "vol_trash.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"

static int trash_dir(struct spaced *sp, char *out, size_t cap)
{
    int n = snprintf(out, cap, "%s/volumes/.trash", sp->opt.data_dir);
    if (n < 0 || (size_t)n >= cap) {
        errno = ENAMETOOLONG;
        return -1;
    }
    char vols[PATH_MAX];
    snprintf(vols, sizeof vols, "%s/volumes", sp->opt.data_dir);
    if ((mkdir(vols, 0700) != 0 && errno != EEXIST) || (mkdir(out, 0700) != 0 && errno != EEXIST))
        return -1;
    return 0;
}

/* The thread: spaced_rm_rf (nftw with FTW_PHYS: links are removed, never followed)
 * keeps no state between calls, so it runs here as on the loop. */
static void *rm_main(void *arg)
{
    char *path = arg;
    spaced_rm_rf(path);
    free(path);
    return NULL;
}

static void rm_start(const char *path)
{
    char *copy = strdup(path);
    pthread_attr_t attr;
    pthread_t t;
    if (!copy || pthread_attr_init(&attr) != 0) {
        free(copy);
        return; /* left in the trash: the next start's sweep deletes it */
    }
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &attr, rm_main, copy) != 0) {
        log_warn("volume.trash", "msg=\"no thread for a removal; left for the next start\"");
        free(copy);
    }
    pthread_attr_destroy(&attr);
}

int vol_trash_move(struct spaced *sp, int dirfd, const char *leaf)
{
    char dir[PATH_MAX], name[64], path[PATH_MAX + 64];
    if (trash_dir(sp, dir, sizeof dir) < 0 || spaced_random_id(name, "rm", 16) < 0)
        return -1;
    int tfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    if (tfd < 0)
        return -1;
    int rc = renameat(dirfd, leaf, tfd, name);
    int e = errno;
    close(tfd);
    if (rc != 0) {
        errno = e;
        return -1;
    }
    snprintf(path, sizeof path, "%s/%s", dir, name);
    rm_start(path);
    return 0;
}

void vol_trash_sweep(struct spaced *sp)
{
    char vols[PATH_MAX], dir[PATH_MAX + 16], old[PATH_MAX + 300];
    int n = snprintf(vols, sizeof vols, "%s/volumes", sp->opt.data_dir);
    if (n < 0 || (size_t)n >= sizeof vols)
        return;
    /* Renamed first: removals from now on make a new trash the sweep cannot race. */
    snprintf(dir, sizeof dir, "%s/.trash", vols);
    snprintf(old, sizeof old, "%s-%lld", dir, (long long)spaced_now_ms());
    (void)rename(dir, old);
    DIR *d = opendir(vols);
    for (struct dirent *e; d && (e = readdir(d));) {
        if (strncmp(e->d_name, ".trash-", 7) != 0)
            continue; /* also one an earlier sweep was deleting when spaced was killed */
        snprintf(old, sizeof old, "%s/%s", vols, e->d_name);
        log_info("volume.trash", "path=%s msg=\"deleting what an earlier run left\"", e->d_name);
        rm_start(old);
    }
    if (d)
        closedir(d);
}
