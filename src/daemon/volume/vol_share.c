/* vol_share.c: see vol_share.h. */
#include "vol_share.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "daemon/store/store.h"

struct vol_share {
    char tenant[STORE_ID_MAX];
    int fd;                   /* memfd: one int64, growth since the share was made */
    int64_t *used;            /* its mapping */
    int64_t budget;
    unsigned refs;
    struct vol_share **head;  /* &sp->vol_shares */
    struct vol_share *next;
};

static struct vol_share *find(struct spaced *sp, const char *tenant)
{
    for (struct vol_share *s = sp->vol_shares; s; s = s->next)
        if (strcmp(s->tenant, tenant) == 0)
            return s;
    return NULL;
}

struct vol_share *vol_share_join(struct spaced *sp, const char *tenant, int64_t left)
{
    struct vol_share *s = find(sp, tenant);
    if (s) {
        s->refs++;
        return s;
    }
    if (!(s = calloc(1, sizeof *s)))
        return NULL;
    s->fd = memfd_create("space-vol-budget", MFD_CLOEXEC);
    if (s->fd < 0 || ftruncate(s->fd, sizeof(int64_t)) != 0 ||
        (s->used = mmap(NULL, sizeof(int64_t), PROT_READ | PROT_WRITE, MAP_SHARED, s->fd, 0)) ==
            MAP_FAILED) {
        if (s->fd >= 0)
            close(s->fd);
        free(s);
        return NULL;
    }
    snprintf(s->tenant, sizeof s->tenant, "%s", tenant);
    s->budget = left < 0 ? 0 : left;
    s->refs = 1;
    s->head = &sp->vol_shares;
    s->next = sp->vol_shares;
    sp->vol_shares = s;
    return s;
}

int vol_share_fd(const struct vol_share *s)
{
    return s->fd;
}

int64_t vol_share_budget(const struct vol_share *s)
{
    return s->budget;
}

void vol_share_leave(struct vol_share *s)
{
    if (!s || --s->refs > 0)
        return;
    for (struct vol_share **pp = s->head; *pp; pp = &(*pp)->next)
        if (*pp == s) {
            *pp = s->next;
            break;
        }
    munmap(s->used, sizeof(int64_t));
    close(s->fd);
    free(s);
}

void vol_share_add(struct spaced *sp, const char *tenant, int64_t bytes)
{
    struct vol_share *s = find(sp, tenant);
    if (s && bytes > 0)
        __atomic_add_fetch(s->used, bytes, __ATOMIC_SEQ_CST);
}
