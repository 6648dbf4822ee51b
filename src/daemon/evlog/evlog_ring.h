/* evlog_ring: a bounded, replayable event log: the events of one command session
 * (session/) or of one template build (template/tpl_log.c). A leaf module (it includes
 * nothing of the daemon), so that both can use it without a cycle between them. Prefix
 * evlog_.
 *
 * Every event a session produces (start, stdout, stderr, exit) is appended here with a
 * consecutive id (1, 2, 3...). Attached readers walk the log by id and a reader that
 * reattaches with `Last-Event-ID: N` continues at N+1, so nothing is lost or repeated
 * as long as N+1 is still retained.
 *
 * Why bounded and how: the log holds at most `cap` bytes of cost (payload plus a fixed
 * per-record overhead). Records that some reader has already been sent may be evicted
 * to make room for new ones; records nobody has been sent yet are never evicted. The
 * session grants the guest output credit only up to evlog_ring_room(), so when no one
 * reads, the guest process blocks on its pipe instead of spaced dropping bytes. A reader
 * asking for an evicted id gets EVLOG_RING_GONE (410 at the API).
 *
 * Consecutive output of one stream that no reader has seen yet is merged into one record
 * (up to EVLOG_EVENT_MAX bytes), so a guest that writes one byte at a time does not make
 * one record per byte. Records a reader has seen are sealed and never change, which is
 * what makes an id name the same bytes forever.
 *
 * Not thread-safe; owned by its session (or build log) on the event loop thread. */
#ifndef SPACE_EVLOG_RING_H
#define SPACE_EVLOG_RING_H

#include <stddef.h>
#include <stdint.h>

/* Largest payload of one stdout/stderr record; bigger writes become several records. */
#define EVLOG_EVENT_MAX 16384
/* Bytes of cost charged per record on top of its payload (roughly its heap overhead). */
#define EVLOG_REC_OVERHEAD 64

enum evlog_kind {
    EVLOG_START = 0,  /* payload: JSON {"pid":N} */
    EVLOG_STDOUT = 1, /* payload: raw bytes */
    EVLOG_STDERR = 2, /* payload: raw bytes */
    EVLOG_EXIT = 3,   /* payload: JSON {"code":N|null,"signal":N|null} */
    EVLOG_ERROR = 4,  /* payload: JSON {"code":"...","message":"..."}; session failed */
    /* Template build logs (tpl_log.h) reuse the ring with two more control kinds: */
    EVLOG_STAGE = 5,  /* payload: JSON {"stage":"...","progress":N,"elapsed_ms":N} */
    EVLOG_END = 6,    /* payload: JSON {"state":"succeeded|failed","error":{...}|null} */
};

/* One event. Owned by the ring; valid until the next append or evict. */
struct evlog_rec {
    uint64_t id;            /* consecutive event id, first is 1 */
    enum evlog_kind kind; /* what the payload is */
    size_t len;             /* payload bytes */
    size_t alloc;           /* payload bytes allocated (>= len) */
    uint64_t before;        /* cost of every record appended before this one */
    uint8_t *data;          /* payload (heap, owned by the record) */
};

struct evlog_ring {
    struct evlog_rec *recs; /* circular array of `slots` records (heap, owned) */
    size_t slots;          /* allocated entries in recs (power of two) */
    size_t head;           /* index of the oldest retained record */
    size_t count;          /* retained records */
    uint64_t first_id;     /* id of the oldest retained record (next_id when empty) */
    uint64_t next_id;      /* id the next new record gets */
    uint64_t sealed;       /* records with id <= sealed were handed to a reader */
    size_t cost;           /* sum over retained records of len + EVLOG_REC_OVERHEAD */
    uint64_t total;        /* the same sum over every record ever appended */
    size_t cap;            /* cost budget */
};

enum evlog_ring_pos {
    EVLOG_RING_OK = 0,     /* the wanted id is retained, or is the next one to come */
    EVLOG_RING_GONE = 1,   /* the wanted id was evicted */
    EVLOG_RING_FUTURE = 2, /* the reader claims to have seen an id never issued */
};

/* Initialises an empty ring with a cost budget of cap bytes. Returns 0 or -1 (ENOMEM). */
int evlog_ring_init(struct evlog_ring *r, size_t cap);

/* Makes an empty ring issue ids from `next` on (a session restored after a restart of
 * spaced, so ids never repeat). Readers asking for anything older get EVLOG_RING_GONE.
 * Ignored unless the ring is empty. */
void evlog_ring_renumber(struct evlog_ring *r, uint64_t next);

/* Frees every record and the array; the ring must be re-initialised before reuse. */
void evlog_ring_free(struct evlog_ring *r);

/* Appends len bytes of `kind`. Data kinds may be split into several records or merged
 * into the unsealed tail; control kinds always make one record. `keep` is the lowest id
 * any attached reader still needs (use evlog_ring_next_id() when no reader is attached):
 * only records below both keep and the sealed mark are evicted to stay within cap.
 * Appending never fails for lack of budget (so start/exit always fit); the caller's
 * credit accounting is what keeps cost near cap. Returns 0, or -1 on allocation
 * failure (the ring is unchanged except for records already added). */
int evlog_ring_append(struct evlog_ring *r, enum evlog_kind kind, const void *data,
                     size_t len, uint64_t keep);

/* Marks every record up to and including id as seen by a reader (sealed: immutable,
 * evictable). Ids beyond the newest record are clamped. */
void evlog_ring_seal(struct evlog_ring *r, uint64_t id);

/* Where a reader that has seen everything up to `last` (0 = nothing) would continue. */
enum evlog_ring_pos evlog_ring_resume(const struct evlog_ring *r, uint64_t last);

/* The record with this id, or NULL if it is evicted or not yet issued. */
const struct evlog_rec *evlog_ring_get(const struct evlog_ring *r, uint64_t id);

/* Id of the oldest retained record (== next id when empty). */
uint64_t evlog_ring_first_id(const struct evlog_ring *r);

/* Id the next new record will get; a reader at this id is up to date. */
uint64_t evlog_ring_next_id(const struct evlog_ring *r);

/* Output bytes the session may still let the guest send: cap minus the cost of records
 * that cannot be evicted (those at or after min(keep, sealed + 1)), 0 when over budget. */
size_t evlog_ring_room(const struct evlog_ring *r, uint64_t keep);

#endif
