/* quota: per-tenant limits on what a tenant may hold at once (sandboxes and their vCPUs,
 * memory and disk; templates; snapshots; the bytes in its volumes), checked when a
 * sandbox is created or a template build is submitted; the volume bytes are enforced
 * where volumes are written (volume/vol_quota.h).
 *
 * Limits: the tenant's row in the store (store_quota, set by an admin through
 * PUT /v1/tenants/{tenant}/quota), where each value STORE_QUOTA_DEFAULT follows the
 * daemon's --quota-* option; 0 means unlimited (the options' default, so a daemon
 * started without them limits nothing).
 *
 * Atomicity: quota_check runs inside the caller's transaction, right before the caller
 * writes the new sandbox or template row, and takes the tenant's quota lock first
 * (store_quota_lock): two concurrent creates of one tenant, on one daemon (one event
 * loop, SQLite's write lock) or on replicas sharing PostgreSQL (a row lock), are
 * serialised, and the second sees the first one's row. So a burst never overshoots.
 *
 * Over quota: 403 "quota_exceeded", naming the resource, the limit, the current use and
 * what the request asks for. 403 and not 429: waiting does not help, only deleting
 * something or a higher limit does (429 is the rate limiter's, with Retry-After). The
 * E2B API answers 429 instead, as E2B does for too many concurrent sandboxes
 * (e2b_api.c). */
#ifndef SPACE_QUOTA_H
#define SPACE_QUOTA_H

#include <jansson.h>

#include "daemon/spaced.h"
#include "daemon/store/store.h"

/* The tenant's effective limits: its row's values, defaults filled in from the options.
 * 0, or -1 with err (500: the store failed). */
int quota_limits(struct spaced *sp, const char *tenant, struct store_quota_vals *out,
                 struct spaced_err *err);

/* Inside a transaction the caller opened (store_begin), before it writes: locks the
 * tenant's quota and checks that usage plus `want` stays within every limit. 0, or -1
 * with err (403 quota_exceeded, or 500 if the store failed); the caller rolls back. */
int quota_check(struct spaced *sp, const char *tenant, const struct store_quota_vals *want,
                struct spaced_err *err);

/* {"tenant": id, "limits": {...}, "usage": {...}} with a key per resource ("sandboxes",
 * "vcpus", "memory_mib", "disk_mib", "templates", "snapshots", "volume_mib"); a limit 0
 * is unlimited. volume_bytes: the tenant's volume bytes as measured on disk
 * (volume/vol_quota.h: measured by the caller, so that this module, which the volume
 * module asks for limits, needs nothing of it).
 * NULL with err when the store fails. New reference. */
json_t *quota_json(struct spaced *sp, const char *tenant, int64_t volume_bytes,
                   struct spaced_err *err);

/* Applies a PUT body to q->limit: an object whose keys are resources (above), each an
 * integer >= 0 (0 = unlimited) or null (back to the daemon default); absent keys keep
 * their value. 0, or -1 with err (400 naming the bad field). */
int quota_apply_json(const json_t *body, struct store_quota *q, struct spaced_err *err);

#endif
