/* tpl_digest: the content digest of a built template's image (SHA-256 of rootfs.ext4),
 * what lets it travel between nodes (tpl_fetch.c): computed once when a build publishes
 * the image, recorded in template.json ("sha256") and in the store's templates row, and
 * checked by a node that fetched the image before the image is used.
 *
 * An image may be gigabytes: tpl_digest_start hashes it on a worker thread and reports
 * on the loop. The rest is pure (unit-tested). Prefix tpl_digest_. */
#ifndef SPACE_TPL_DIGEST_H
#define SPACE_TPL_DIGEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct event_base;

#define TPL_DIGEST_HEX 65 /* 64 lowercase hex digits + NUL */

/* Whether s is 64 lowercase hex digits. */
bool tpl_digest_valid(const char *s);

/* Incremental SHA-256 (a fetch hashes the bytes as they arrive). new: NULL when out of
 * memory. final: writes the hex digest into out and frees h. free: frees h unfinished
 * (NULL accepted). */
struct tpl_digest;
struct tpl_digest *tpl_digest_new(void);
void tpl_digest_update(struct tpl_digest *h, const void *data, size_t len);
void tpl_digest_final(struct tpl_digest *h, char out[TPL_DIGEST_HEX]);
void tpl_digest_free(struct tpl_digest *h);

/* Hashes the file at path (blocking): 0 with out and *size filled, or -1 with errno set
 * (a file longer than max bytes: EFBIG; max 0 = no bound). */
int tpl_digest_file(const char *path, int64_t max, char out[TPL_DIGEST_HEX], int64_t *size);

/* Hashes path on a worker thread; done(arg, rc, hex, size) runs once on base's loop
 * (rc as tpl_digest_file, errno in err). Returns a job (tpl_digest_job_free stops the
 * thread at its next 1 MiB chunk, waits for it and drops the callback: call it only when
 * the result is no longer wanted), or
 * NULL when no thread could start (the caller hashes inline). */
typedef void (*tpl_digest_done)(void *arg, int rc, int err, const char *hex, int64_t size);
struct tpl_digest_job;
struct tpl_digest_job *tpl_digest_start(struct event_base *base, const char *path, tpl_digest_done done,
                                        void *arg);
void tpl_digest_job_free(struct tpl_digest_job *j);

#endif
