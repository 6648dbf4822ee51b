/* vol_quota: the byte quota on a tenant's volumes ("volume_mib", quota/quota.h), enforced
 * where volume bytes are written. Prefix vol_quota_.
 *
 * Usage is measured, not stored: the apparent sizes of the regular files in all of the
 * tenant's volumes (a walk of <data_dir>/volumes/<tenant> that follows no link), since
 * guests change volumes behind spaced's back. Sizes rather than blocks, so a sparse file
 * counts what it claims and a guest cannot hide bytes in holes.
 *
 * Two writers, two mechanisms:
 *   - the files APIs (native PUT /v1/volumes/{name}/files, E2B's PUT /volumecontent):
 *     an upload takes a charge (vol_quota_begin) holding the bytes left; each chunk is
 *     taken from it, and one that does not fit fails the upload with 507 quota_exceeded
 *     (a Content-Length that cannot fit is refused before the file is touched). The
 *     uploads of one tenant running at once share one charge, so together they stay
 *     within the quota; the usage is measured again once none is running.
 *   - sandboxes (space-volfs): a tenant's live mounts share one budget, the bytes left
 *     when the first of them started (vol_share.h), and its growth counter (ENOSPC past
 *     it), to which uploads add their bytes too. Together they may pass it by at most
 *     one FUSE request's growth per mount. A mount that starts over the quota can read,
 *     overwrite in place and delete, but not grow anything.
 * A tenant over its quota can always delete to get back under it. */
#ifndef SPACE_VOL_QUOTA_H
#define SPACE_VOL_QUOTA_H

#include <stdint.h>

#include "daemon/spaced.h"

/* The bytes in the tenant's volumes (0 when it has none). */
int64_t vol_quota_usage(struct spaced *sp, const char *tenant);

/* The bytes the tenant may still add to its volumes into *left: -1 when its quota is
 * unlimited, else max(0, limit - usage). 0, or -1 with err (the store failed). */
int vol_quota_left(struct spaced *sp, const char *tenant, int64_t *left,
                   struct spaced_err *err);

struct vol_charge;
/* Starts an upload's charge; `replaced` is the size of the file it overwrites (its
 * bytes are freed). NULL with err (500 store, 503 memory). */
struct vol_charge *vol_quota_begin(struct spaced *sp, const char *tenant, int64_t replaced,
                                   struct spaced_err *err);
/* Takes n bytes from the charge: 0, or -1 with err 507 quota_exceeded (nothing taken). */
int vol_quota_take(struct vol_charge *c, int64_t n, struct spaced_err *err);
/* Ends the charge (NULL is fine). */
void vol_quota_end(struct vol_charge *c);

#endif
