/* vol_share: one volume budget shared by all of a tenant's live mounts.
 *
 * Each mount's space-volfs refuses growth past its budget (volfs.h). Given separately,
 * every mount would get all that was left of the tenant's quota, and N sandboxes writing
 * at once could pass it N times over. So the first mount of a tenant makes a share: the
 * bytes left then (the budget) and a counter of growth in a memfd that every mount of the
 * tenant maps (space-volfs DIR BUDGET FD); later mounts join it while any is live. The
 * files API's uploads add their bytes to it too (vol_quota.c), so guests see them. Bytes
 * freed through the files API are not given back to a live share (conservative): the
 * next share, after the tenant's last mount ends, measures the volumes again. Prefix
 * vol_share_. */
#ifndef SPACE_VOL_SHARE_H
#define SPACE_VOL_SHARE_H

#include <stdint.h>

#include "daemon/spaced.h"

struct vol_share;

/* The tenant's live share, joined (a reference taken), or a new one whose budget is
 * `left` (the tenant's bytes left now, >= 0). NULL when out of memory or memfd. */
struct vol_share *vol_share_join(struct spaced *sp, const char *tenant, int64_t left);
/* The memfd holding the counter (to hand to space-volfs; stays the share's) and the
 * budget every member enforces. */
int vol_share_fd(const struct vol_share *s);
int64_t vol_share_budget(const struct vol_share *s);
/* Drops a reference; the last one frees the share. NULL is fine. */
void vol_share_leave(struct vol_share *s);
/* Counts bytes written outside the mounts (an upload) against the tenant's live share,
 * if it has one. */
void vol_share_add(struct spaced *sp, const char *tenant, int64_t bytes);

#endif
