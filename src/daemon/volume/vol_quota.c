/* vol_quota.c: measuring a tenant's volume bytes and charging uploads (vol_quota.h). */
#include "vol_quota.h"

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/quota/quota.h"
#include "daemon/store/store.h"
#include "vol_share.h"

/* The uploads of one tenant running now: the bytes they may still add together. */
struct vol_charge {
    char tenant[STORE_ID_MAX];
    int64_t left;           /* -1: unlimited */
    unsigned users;         /* uploads holding it */
    struct vol_charge **head; /* the list it is on: &sp->vol_charges */
    struct spaced *sp;
    struct vol_charge *next;
};

/* Scratch of one vol_quota_usage walk (nftw passes its callback no argument); holds
 * nothing between calls. spaced runs one loop: no lock. */
static int64_t walk_sum;

static int add_file(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)path;
    (void)ftw;
    if (flag == FTW_F && S_ISREG(st->st_mode))
        walk_sum += st->st_size;
    return 0;
}

int64_t vol_quota_usage(struct spaced *sp, const char *tenant)
{
    char dir[600];
    for (const char *p = tenant; *p; p++) /* as vol.c's ids: never a path of ours otherwise */
        if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-", *p))
            return 0;
    int n = snprintf(dir, sizeof dir, "%s/volumes/%s", sp->opt.data_dir, tenant);
    if (!tenant[0] || n < 0 || (size_t)n >= sizeof dir)
        return 0;
    walk_sum = 0;
    nftw(dir, add_file, 32, FTW_PHYS | FTW_MOUNT); /* links are counted, never followed */
    return walk_sum;
}

int vol_quota_left(struct spaced *sp, const char *tenant, int64_t *left,
                   struct spaced_err *err)
{
    struct store_quota_vals lim;
    if (quota_limits(sp, tenant, &lim, err) != 0)
        return -1;
    if (lim.volume_mib <= 0) {
        *left = -1;
        return 0;
    }
    int64_t room = (lim.volume_mib << 20) - vol_quota_usage(sp, tenant);
    *left = room > 0 ? room : 0;
    return 0;
}

struct vol_charge *vol_quota_begin(struct spaced *sp, const char *tenant, int64_t replaced,
                                   struct spaced_err *err)
{
    struct vol_charge *c = sp->vol_charges;
    while (c && strcmp(c->tenant, tenant) != 0)
        c = c->next;
    if (!c) {
        int64_t left;
        if (vol_quota_left(sp, tenant, &left, err) != 0)
            return NULL;
        if (!(c = calloc(1, sizeof *c))) {
            spaced_err_set(err, 503, "unavailable", "out of memory");
            return NULL;
        }
        snprintf(c->tenant, sizeof c->tenant, "%s", tenant);
        c->left = left;
        c->head = &sp->vol_charges;
        c->sp = sp;
        c->next = sp->vol_charges;
        sp->vol_charges = c;
    }
    if (c->left >= 0)
        c->left += replaced;
    c->users++;
    return c;
}

int vol_quota_take(struct vol_charge *c, int64_t n, struct spaced_err *err)
{
    if (c->left < 0)
        return 0;
    if (n > c->left)
        return spaced_err_set(err, 507, "quota_exceeded",
                              "quota exceeded: volume_mib, %lld bytes left in the tenant's "
                              "volumes, this upload needs more (delete files or volumes, or ask "
                              "an admin to raise the quota)", (long long)c->left);
    c->left -= n;
    vol_share_add(c->sp, c->tenant, n); /* the tenant's live mounts see the bytes too */
    return 0;
}

void vol_quota_end(struct vol_charge *c)
{
    if (!c || --c->users > 0)
        return;
    for (struct vol_charge **p = c->head; *p; p = &(*p)->next)
        if (*p == c) {
            *p = c->next;
            break;
        }
    free(c);
}
