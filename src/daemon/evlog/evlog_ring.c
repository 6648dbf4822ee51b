/* evlog_ring.c: bounded replayable event log (sessions, build logs); see evlog_ring.h. */
#include "daemon/evlog/evlog_ring.h"

#include <stdlib.h>
#include <string.h>

#define EVLOG_RING_MIN_SLOTS 16

int evlog_ring_init(struct evlog_ring *r, size_t cap)
{
    memset(r, 0, sizeof *r);
    r->recs = calloc(EVLOG_RING_MIN_SLOTS, sizeof *r->recs);
    if (!r->recs)
        return -1;
    r->slots = EVLOG_RING_MIN_SLOTS;
    r->first_id = 1;
    r->next_id = 1;
    r->cap = cap;
    return 0;
}

void evlog_ring_renumber(struct evlog_ring *r, uint64_t next)
{
    if (r->count == 0 && next > r->next_id) {
        r->first_id = r->next_id = next;
        r->sealed = next - 1;
    }
}

void evlog_ring_free(struct evlog_ring *r)
{
    for (size_t i = 0; i < r->count; i++)
        free(r->recs[(r->head + i) & (r->slots - 1)].data);
    free(r->recs);
    memset(r, 0, sizeof *r);
}

static struct evlog_rec *ring_at(const struct evlog_ring *r, size_t i)
{
    return &r->recs[(r->head + i) & (r->slots - 1)];
}

static int data_kind(enum evlog_kind k)
{
    return k == EVLOG_STDOUT || k == EVLOG_STDERR;
}

/* Drops the oldest record while it is evictable and the ring is over budget. */
static void ring_evict(struct evlog_ring *r, uint64_t keep, size_t incoming)
{
    uint64_t limit = keep < r->sealed + 1 ? keep : r->sealed + 1;
    while (r->count > 0 && r->cost + incoming > r->cap) {
        struct evlog_rec *old = ring_at(r, 0);
        if (old->id >= limit)
            break;
        r->cost -= old->len + EVLOG_REC_OVERHEAD;
        free(old->data);
        memset(old, 0, sizeof *old);
        r->head = (r->head + 1) & (r->slots - 1);
        r->count--;
        r->first_id++;
    }
}

static int ring_grow(struct evlog_ring *r)
{
    size_t n = r->slots * 2;
    struct evlog_rec *recs = calloc(n, sizeof *recs);
    if (!recs)
        return -1;
    for (size_t i = 0; i < r->count; i++)
        recs[i] = *ring_at(r, i);
    free(r->recs);
    r->recs = recs;
    r->slots = n;
    r->head = 0;
    return 0;
}

/* Adds bytes to the unsealed tail record of the same kind; returns bytes taken. */
static size_t ring_merge(struct evlog_ring *r, enum evlog_kind kind, const uint8_t *p,
                         size_t len)
{
    if (r->count == 0 || !data_kind(kind))
        return 0;
    struct evlog_rec *t = ring_at(r, r->count - 1);
    if (t->kind != kind || t->id <= r->sealed || t->len >= EVLOG_EVENT_MAX)
        return 0;
    size_t n = EVLOG_EVENT_MAX - t->len;
    if (n > len)
        n = len;
    if (t->len + n > t->alloc) {
        size_t want = t->alloc * 2;
        if (want < t->len + n)
            want = t->len + n;
        if (want > EVLOG_EVENT_MAX)
            want = EVLOG_EVENT_MAX;
        uint8_t *d = realloc(t->data, want);
        if (!d)
            return 0;
        t->data = d;
        t->alloc = want;
    }
    memcpy(t->data + t->len, p, n);
    t->len += n;
    r->cost += n;
    r->total += n;
    return n;
}

static int ring_push(struct evlog_ring *r, enum evlog_kind kind, const uint8_t *p,
                     size_t len, uint64_t keep)
{
    ring_evict(r, keep, len + EVLOG_REC_OVERHEAD);
    if (r->count == r->slots && ring_grow(r) < 0)
        return -1;
    /* Allocate at least one byte so an empty control payload still has a buffer. */
    uint8_t *d = malloc(len ? len : 1);
    if (!d)
        return -1;
    if (len)
        memcpy(d, p, len);
    struct evlog_rec *t = ring_at(r, r->count);
    t->id = r->next_id++;
    t->kind = kind;
    t->len = len;
    t->alloc = len ? len : 1;
    t->before = r->total;
    t->data = d;
    r->count++;
    r->cost += len + EVLOG_REC_OVERHEAD;
    r->total += len + EVLOG_REC_OVERHEAD;
    return 0;
}

int evlog_ring_append(struct evlog_ring *r, enum evlog_kind kind, const void *data,
                     size_t len, uint64_t keep)
{
    const uint8_t *p = data;
    if (!data_kind(kind))
        return ring_push(r, kind, p, len, keep);
    while (len > 0) {
        size_t n = ring_merge(r, kind, p, len);
        if (n == 0) {
            n = len < EVLOG_EVENT_MAX ? len : EVLOG_EVENT_MAX;
            if (ring_push(r, kind, p, n, keep) < 0)
                return -1;
        }
        p += n;
        len -= n;
    }
    return 0;
}

void evlog_ring_seal(struct evlog_ring *r, uint64_t id)
{
    if (id >= r->next_id)
        id = r->next_id - 1;
    if (id > r->sealed)
        r->sealed = id;
}

enum evlog_ring_pos evlog_ring_resume(const struct evlog_ring *r, uint64_t last)
{
    if (last >= r->next_id)
        return EVLOG_RING_FUTURE;
    if (last + 1 < r->first_id)
        return EVLOG_RING_GONE;
    return EVLOG_RING_OK;
}

const struct evlog_rec *evlog_ring_get(const struct evlog_ring *r, uint64_t id)
{
    if (id < r->first_id || id >= r->next_id)
        return NULL;
    return ring_at(r, (size_t)(id - r->first_id));
}

uint64_t evlog_ring_first_id(const struct evlog_ring *r)
{
    return r->first_id;
}

uint64_t evlog_ring_next_id(const struct evlog_ring *r)
{
    return r->next_id;
}

size_t evlog_ring_room(const struct evlog_ring *r, uint64_t keep)
{
    uint64_t limit = keep < r->sealed + 1 ? keep : r->sealed + 1;
    uint64_t pinned;
    const struct evlog_rec *rec = evlog_ring_get(r, limit);
    if (rec)
        pinned = r->total - rec->before;
    else if (limit < r->first_id)
        pinned = r->cost;
    else
        pinned = 0;
    return pinned >= r->cap ? 0 : (size_t)(r->cap - pinned);
}
