/* ratelimit.c: token buckets in a bounded hash table with LRU eviction; see ratelimit.h. */
#include "ratelimit.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* Idle buckets dropped from the cold end per rl_take: enough to shrink the table
 * faster than one call can grow it. */
#define RL_EVICT_PER_CALL 2

struct rl_bucket {
    char key[RL_KEY_MAX];          /* client identity, NUL-terminated (maybe truncated) */
    uint64_t hash;                 /* of key */
    double tokens;                 /* level at last_ms */
    int64_t last_ms;               /* when tokens was last brought up to date */
    struct rl_bucket *hnext;       /* hash chain */
    struct rl_bucket *newer, *older; /* LRU list: table->newest ... table->oldest */
};

struct rl_table {
    struct rl_config cfg;
    struct rl_bucket **slots;      /* owned array of chains (nslots, a power of two) */
    size_t nslots;
    size_t count;
    struct rl_bucket *newest, *oldest; /* every bucket is owned through this list */
    struct rl_bucket overflow;     /* shared by new clients while the table is full */
    struct rl_stats st;
};

static uint64_t key_hash(const char *s)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ULL;
    }
    return h;
}

struct rl_table *rl_new(const struct rl_config *cfg)
{
    if (!cfg || !(cfg->rate > 0) || !(cfg->burst >= 1))
        return NULL;
    struct rl_table *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->cfg = *cfg;
    if (!t->cfg.max_buckets)
        t->cfg.max_buckets = RL_MAX_BUCKETS_DEFAULT;
    t->nslots = 16;
    while (t->nslots < t->cfg.max_buckets && t->nslots < ((size_t)1 << 24))
        t->nslots <<= 1;
    t->slots = calloc(t->nslots, sizeof *t->slots);
    if (!t->slots) {
        free(t);
        return NULL;
    }
    t->overflow.tokens = t->cfg.burst;
    return t;
}

void rl_free(struct rl_table *t)
{
    if (!t)
        return;
    struct rl_bucket *b = t->newest;
    while (b) {
        struct rl_bucket *next = b->older;
        free(b);
        b = next;
    }
    free(t->slots);
    free(t);
}

/* Brings b's level up to now (a clock that went backwards adds nothing). */
static void refill(const struct rl_table *t, struct rl_bucket *b, int64_t now_ms)
{
    if (now_ms > b->last_ms) {
        b->tokens += (double)(now_ms - b->last_ms) * t->cfg.rate / 1000.0;
        if (b->tokens > t->cfg.burst)
            b->tokens = t->cfg.burst;
        b->last_ms = now_ms;
    }
}

static void lru_unlink(struct rl_table *t, struct rl_bucket *b)
{
    if (b->newer)
        b->newer->older = b->older;
    else
        t->newest = b->older;
    if (b->older)
        b->older->newer = b->newer;
    else
        t->oldest = b->newer;
    b->newer = b->older = NULL;
}

static void lru_push_newest(struct rl_table *t, struct rl_bucket *b)
{
    b->older = t->newest;
    b->newer = NULL;
    if (t->newest)
        t->newest->newer = b;
    t->newest = b;
    if (!t->oldest)
        t->oldest = b;
}

static void bucket_remove(struct rl_table *t, struct rl_bucket *b)
{
    struct rl_bucket **pp = &t->slots[b->hash & (t->nslots - 1)];
    while (*pp != b)
        pp = &(*pp)->hnext;
    *pp = b->hnext;
    lru_unlink(t, b);
    t->count--;
    free(b);
}

/* Drops idle (full) buckets from the cold end. */
static void evict_idle(struct rl_table *t, int64_t now_ms)
{
    for (int i = 0; i < RL_EVICT_PER_CALL && t->oldest; i++) {
        struct rl_bucket *b = t->oldest;
        refill(t, b, now_ms);
        if (b->tokens < t->cfg.burst)
            return;
        bucket_remove(t, b);
        t->st.evicted++;
    }
}

/* The bucket for key: found, created full, or the shared overflow bucket. */
static struct rl_bucket *bucket_for(struct rl_table *t, const char *key, int64_t now_ms)
{
    char k[RL_KEY_MAX];
    size_t n = strnlen(key, sizeof k - 1);
    memcpy(k, key, n);
    k[n] = '\0';
    uint64_t h = key_hash(k);
    struct rl_bucket **slot = &t->slots[h & (t->nslots - 1)];
    for (struct rl_bucket *b = *slot; b; b = b->hnext) {
        if (b->hash == h && strcmp(b->key, k) == 0) {
            lru_unlink(t, b);
            lru_push_newest(t, b);
            return b;
        }
    }
    struct rl_bucket *b = t->count < t->cfg.max_buckets ? calloc(1, sizeof *b) : NULL;
    if (!b) {
        t->st.overflowed++;
        return &t->overflow;
    }
    memcpy(b->key, k, n + 1);
    b->hash = h;
    b->tokens = t->cfg.burst;
    b->last_ms = now_ms;
    b->hnext = *slot;
    *slot = b;
    lru_push_newest(t, b);
    t->count++;
    return b;
}

int64_t rl_take(struct rl_table *t, const char *key, int64_t now_ms)
{
    evict_idle(t, now_ms);
    struct rl_bucket *b = bucket_for(t, key, now_ms);
    refill(t, b, now_ms);
    if (b->tokens >= 1.0) {
        b->tokens -= 1.0;
        t->st.allowed++;
        return 0;
    }
    t->st.limited++;
    int64_t wait = (int64_t)ceil((1.0 - b->tokens) * 1000.0 / t->cfg.rate);
    return wait < 1 ? 1 : wait;
}

void rl_stats(const struct rl_table *t, struct rl_stats *out)
{
    *out = t->st;
    out->buckets = t->count;
}
