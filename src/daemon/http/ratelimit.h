/* ratelimit: token buckets per client, in a table whose memory is bounded.
 *
 * Each client (a string the caller chooses: "key:<key id>", "ip:<address>") has a
 * bucket holding at most `burst` tokens that refills at `rate` tokens per second; a
 * request takes one token or is refused with the time until the next token exists.
 *
 * Memory: the table holds at most `max_buckets` buckets, kept in least-recently-used
 * order. A bucket that has refilled to `burst` is indistinguishable from a new one, so
 * it can be dropped at no cost: every call drops up to two such idle buckets from the
 * cold end, and a new client takes the coldest bucket's place when that one is idle.
 * When the table is full of clients that are all still busy, a new client is charged
 * to one shared overflow bucket instead: a flood of fresh identities (cycled keys or
 * source addresses) then shares a single budget and cannot push a busy client's bucket
 * out to get a full one back.
 *
 * Time is passed in by the caller (milliseconds, any monotonic origin), so the logic is
 * testable without sleeping. Not thread-safe: one event loop owns a table. */
#ifndef SPACE_RATELIMIT_H
#define SPACE_RATELIMIT_H

#include <stddef.h>
#include <stdint.h>

struct rl_table;

#define RL_MAX_BUCKETS_DEFAULT 16384
#define RL_KEY_MAX 96 /* longer client keys are truncated (still distinct enough: ids, IPs) */

/* Configuration; copied by rl_new. */
struct rl_config {
    double rate;          /* tokens added per second (> 0) */
    double burst;         /* bucket capacity (>= 1) */
    size_t max_buckets;   /* table bound; 0 = RL_MAX_BUCKETS_DEFAULT */
};

/* Counters for metrics and tests. */
struct rl_stats {
    size_t buckets;       /* buckets in the table now */
    uint64_t allowed;     /* requests that got a token */
    uint64_t limited;     /* requests refused */
    uint64_t overflowed;  /* requests charged to the shared overflow bucket */
    uint64_t evicted;     /* idle buckets dropped */
};

/* Returns NULL if the configuration is invalid (rate <= 0, burst < 1) or memory is
 * short. Caller owns the table. */
struct rl_table *rl_new(const struct rl_config *cfg);
/* NULL is accepted. */
void rl_free(struct rl_table *t);

/* Takes one token from client `key` at time now_ms. Returns 0 if the request may
 * proceed, else the milliseconds until a token will be available (>= 1). */
int64_t rl_take(struct rl_table *t, const char *key, int64_t now_ms);

void rl_stats(const struct rl_table *t, struct rl_stats *out);

#endif
