/* pool: warm pool of paused template clones (see pool.h).
 *
 * Fill is sequential: one overlay + restore in flight at a time, so a refill never
 * competes with itself for the host's CPUs (under TCG a restore is CPU-bound).
 *
 * Warm-up: a freshly restored QEMU has executed none of the guest's code yet; under TCG
 * every path runs through the translator the first time, which made the first agent
 * handshake after a claim take ~350 ms. So each pooled VM runs until its agent has
 * answered a HELLO on a connection the pool keeps and has run what every sandbox runs
 * first (a refresh and a command, see warm_ops), and is paused only then. The claim
 * hands that live connection to the caller, whose own HELLO restarts the agent session
 * on the same stream (docs/agent-protocol.md), without waiting for the agent to notice a
 * new host. */
#include "pool.h"
#include "b64.h"
#include "clock.h"
#include "frame.h"
#include "log.h"
#include "vm_greet.h"
#include "vm_internal.h"

#include <errno.h>
#include <event2/event.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

/* After a claim, the refill waits for pool_kick (the claimer's create has ended), or at
 * most this long (ms), so its jailed spawn does not block the loop inside the claim. */
#define POOL_REFILL_DELAY_MS 2000
/* After pool_kick, the refill waits this long (ms) more: the client's first command
 * follows its create's answer at once, and a refill started then (qemu-img, the spawn, a
 * CPU-bound restore) made it 1.7x slower (bench_ab.py --pool, tcg, quiet host). */
#define POOL_KICK_DELAY_MS 250

/* Longest wait between fill attempts after failures in a row (seconds). */
#define POOL_RETRY_MAX_S 60

/* How often a pool above its floor checks for surplus (ms). */
#define POOL_SHRINK_CHECK_MS 10000

/* After a claim that found no ready VM, the refill waits this long (ms) at most: the
 * claimer restores meanwhile (a CPU-bound restore the fill would compete with), and its
 * create's end kicks the refill sooner (pool_kick). */
#define POOL_MISS_DELAY_MS 2000

/* One pooled VM. Owned by the pool until claimed. */
struct pool_entry {
    struct pool_entry *next;
    struct pool *p;
    struct vm_config cfg; /* deep copy; cfg.net.tap_fd (from prepare) is owned until QEMU
                             has its own copy (vm_restore), then closed and -1 */
    struct vm *vm;        /* NULL while the overlay is being made */
    int ready;            /* restored and paused */
    struct vm_disk_job *overlay_job; /* qemu-img making the overlay, until on_overlay */
    int agent_fd;         /* warm-up connection to the agent, handed over at claim */
    struct event *agent_ev; /* owned: reads the agent's HELLO during warm-up */
    struct vmg *greet;    /* owned: the warm-up's HELLO, retried on a fresh connection */
    int warm_greeted;     /* the agent answered this connection's HELLO */
    unsigned warm_open;   /* warm-up channels (bit per WARM_CH_*) not yet closed */
    uint8_t in[1024];     /* warm-up input not yet parsed */
    size_t in_len;
    pool_discard_cb discard; /* copied from the pool */
    void *arg;
};

struct pool {
    struct event_base *base;
    char *snapshot_dir, *template_overlay; /* owned */
    struct vm_config base_cfg;             /* deep copy */
    unsigned size;
    pool_prepare_cb prepare;
    pool_discard_cb discard;
    void *arg;
    struct pool_entry *entries;            /* owned list */
    int filling;                           /* an entry is being made */
    unsigned fails;                        /* fills failed in a row (0 after a success);
                                              while > 0 only the backoff timer refills */
    int freeing;
    struct event *refill;                  /* owned */
    int64_t refill_due_ms;                 /* when the pending refill timer fires */
    pool_cap_cb cap;                       /* NULL: fixed size */
    int64_t claims_ms[POOL_DEMAND_MAX];    /* clock_mono_ms() of recent claims (ring) */
    unsigned nclaims;                      /* claims recorded, ever */
};

unsigned pool_count(const struct pool *p)
{
    unsigned n = 0;
    for (const struct pool_entry *e = p->entries; e; e = e->next)
        n++;
    return n;
}

unsigned pool_demand(const int64_t *claims_ms, unsigned nclaims, int64_t now_ms, unsigned size,
                     unsigned cap)
{
    int64_t since = now_ms - POOL_DEMAND_WINDOW_S * 1000;
    unsigned recent = 0, kept = nclaims < POOL_DEMAND_MAX ? nclaims : POOL_DEMAND_MAX;
    for (unsigned i = 0; i < kept; i++)
        recent += claims_ms[i] >= since;
    unsigned want = recent > size ? recent : size;
    return want < cap ? want : cap > size ? cap : size;
}

unsigned pool_target(struct pool *p)
{
    return p->cap ? pool_demand(p->claims_ms, p->nclaims, clock_mono_ms(), p->size, p->cap(p->arg))
                  : p->size;
}

unsigned pool_recent(const struct pool *p)
{
    /* pool_demand with no floor and no ceiling is the count itself */
    return pool_demand(p->claims_ms, p->nclaims, clock_mono_ms(), 0, POOL_DEMAND_MAX);
}

unsigned pool_ceiling(struct pool *p) { return p->cap ? p->cap(p->arg) : p->size; }

static void entry_unlink(struct pool *p, struct pool_entry *e)
{
    for (struct pool_entry **pp = &p->entries; *pp; pp = &(*pp)->next) {
        if (*pp == e) {
            *pp = e->next;
            return;
        }
    }
}

/* The entry's VM is gone (or never started): remove its overlay, tell the owner. */
static void entry_agent_close(struct pool_entry *e)
{
    if (e->agent_ev)
        event_free(e->agent_ev);
    e->agent_ev = NULL;
    if (e->agent_fd >= 0)
        close(e->agent_fd);
    e->agent_fd = -1;
}

/* Closes the entry's tap fd (prepare's), once QEMU holds its own or will never run. */
static void entry_tap_close(struct pool_entry *e)
{
    if (e->cfg.net.tap_fd >= 0)
        close(e->cfg.net.tap_fd);
    e->cfg.net.tap_fd = -1;
}

static void entry_discard(struct pool *p, struct pool_entry *e)
{
    entry_unlink(p, e);
    entry_tap_close(e);
    entry_agent_close(e);
    vmg_free(e->greet);
    e->greet = NULL;
    if (e->cfg.disk)
        unlink(e->cfg.disk);
    if (p->discard)
        p->discard(e->cfg.id, e->cfg.run_dir, p->arg);
    vm_config_free(&e->cfg);
    free(e);
}

/* Refill now, or after delay_ms, or earlier when a refill is already due sooner (a later
 * kick never postpones one: the shrink check or a miss must not push back the refill a
 * create's end asked for). During a backoff (fails > 0) the pending backoff timer is the
 * only way in: a claim or an exit must not retry early. */
static void kick_after(struct pool *p, unsigned delay_ms)
{
    if (p->freeing || p->fails)
        return;
    int64_t due = clock_mono_ms() + delay_ms;
    if (delay_ms && event_pending(p->refill, EV_TIMEOUT, NULL) && p->refill_due_ms <= due)
        return;
    struct timeval tv = {delay_ms / 1000, (delay_ms % 1000) * 1000};
    p->refill_due_ms = due;
    if (delay_ms)
        event_add(p->refill, &tv);
    else
        event_active(p->refill, EV_TIMEOUT, 0);
}

static void kick(struct pool *p) { kick_after(p, 0); }

void pool_kick(struct pool *p) { kick_after(p, POOL_KICK_DELAY_MS); }

/* A fill failed: try again after 1, 2, 4 ... POOL_RETRY_MAX_S seconds, so a template
 * that cannot be restored (or a host out of namespaces or disk) costs a restore a minute
 * instead of a busy loop, and a passing problem does not leave the pool empty for good.
 * Creates fall back to a plain restore meanwhile and report its error. */
static void backoff(struct pool *p, const char *why)
{
    unsigned s = p->fails < 6 ? 1u << p->fails : POOL_RETRY_MAX_S;
    if (s > POOL_RETRY_MAX_S)
        s = POOL_RETRY_MAX_S;
    p->fails++;
    struct timeval tv = {.tv_sec = s};
    p->refill_due_ms = clock_mono_ms() + (int64_t)s * 1000;
    log_warn("pool.backoff", "failures=%u retry_in_s=%u msg=\"%s\"", p->fails, s, why);
    if (!p->freeing)
        event_add(p->refill, &tv);
}

static void on_entry_ready(struct vm *vm, int err, const char *msg, void *arg)
{
    struct pool_entry *e = arg;
    if (err) {
        char q[600];
        log_warn("pool.fill", "id=%s err=%s msg=%s", e->cfg.id, vm_error_code(err),
                 log_quote(msg, q, sizeof(q)));
    } /* on failure on_exit follows and discards the entry; else on_entry_agent is next */
}

static void on_entry_paused(struct vm *vm, int err, const char *msg, void *arg)
{
    struct pool_entry *e = arg;
    if (err) {
        vm_kill_reason(vm, VM_EXIT_CRASHED, "pool: pausing a warmed-up VM failed");
        return;
    }
    e->ready = 1;
    e->p->filling = 0;
    e->p->fails = 0;
    kick(e->p);
}

/* Warm-up, after the HELLO: the operations every sandbox's first moments run, so their
 * guest code (kernel and agent paths, /bin/sh) is translated here and not in the
 * claimer's critical path (under TCG a clone executes nothing it did not translate
 * itself: the first refresh took ~90 ms and the first command ~200 ms in a fresh clone,
 * ~20 ms once warm). The claimer's refresh later sets the real clock, identity and more
 * entropy; these channels are closed before the pause, and its HELLO resets the session. */
#define WARM_CH_EXEC 1
#define WARM_CH_REFRESH 3
#define WARM_ALL ((1u << WARM_CH_EXEC) | (1u << WARM_CH_REFRESH))

static int warm_send(int fd, uint32_t ch, const char *json)
{
    uint8_t msg[FRAME_HEADER_SIZE + 256];
    size_t n = strlen(json);
    if (n > sizeof(msg) - FRAME_HEADER_SIZE)
        return -1;
    frame_encode_header(msg, ch, FRAME_OPEN, FRAME_STREAM_NONE, (uint32_t)n);
    memcpy(msg + FRAME_HEADER_SIZE, json, n);
    return write(fd, msg, FRAME_HEADER_SIZE + n) == (ssize_t)(FRAME_HEADER_SIZE + n) ? 0 : -1;
}

static int warm_ops(struct pool_entry *e)
{
    uint8_t rnd[32];
    char b64[64], req[200];
    struct timespec now;
    if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
        return -1;
    b64_encode(rnd, sizeof(rnd), b64);
    clock_gettime(CLOCK_REALTIME, &now);
    snprintf(req, sizeof(req), "{\"op\":\"refresh\",\"time_ns\":%lld,\"entropy\":\"%s\"}",
             (long long)now.tv_sec * 1000000000LL + now.tv_nsec, b64);
    e->warm_open = WARM_ALL;
    return warm_send(e->agent_fd, WARM_CH_EXEC, "{\"op\":\"exec\",\"cmd\":\"true\"}") == 0 &&
                   warm_send(e->agent_fd, WARM_CH_REFRESH, req) == 0
               ? 0
               : -1;
}

/* Once the agent answered the HELLO, the warm-up's commands get this long in all (ms)
 * and no fresh connection: under load a fresh clone's first `sh -c true` can take longer
 * than VMG_RETRY_MS, and a reconnect then dropped a live warm-up, whose late output on
 * the fresh connection failed the next one ("unexpected agent output in warm-up"; the
 * pool stayed empty, in backoff, while creates restored instead). */
#define POOL_WARM_MS 60000
static const struct vmg_params warm_run = {0, 0, POOL_WARM_MS};

/* One frame of the warm-up: 0 to go on, 1 when it is complete, -1 on a protocol breach. */
static int warm_frame(struct pool_entry *e, const struct frame *f)
{
    if (!e->warm_greeted) {
        if (f->type != FRAME_HELLO)
            return -1;
        e->warm_greeted = 1;
        vmg_begin(e->greet, e->vm, &warm_run); /* greeted: only the deadline is left */
        return warm_ops(e);
    }
    if (f->channel == 0)
        return f->type == FRAME_HELLO ? 0 : -1; /* a late answer to an older HELLO */
    if (f->channel != WARM_CH_EXEC && f->channel != WARM_CH_REFRESH)
        return -1;
    if (f->type == FRAME_CLOSE)
        e->warm_open &= ~(1u << f->channel);
    /* EVENT, EOF, ERROR on a warm-up channel: its outcome does not matter */
    return e->warm_open ? 0 : 1;
}

static void on_entry_agent_input(evutil_socket_t fd, short what, void *arg)
{
    struct pool_entry *e = arg;
    ssize_t n = read(fd, e->in + e->in_len, sizeof(e->in) - e->in_len);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
        vm_kill_reason(e->vm, VM_EXIT_CRASHED, "pool: agent connection closed in warm-up");
        return;
    }
    if (n < 0)
        return;
    e->in_len += (size_t)n;
    size_t off = 0;
    int rc = 0;
    while (rc == 0) {
        struct frame f;
        size_t used;
        const char *why;
        enum frame_parse_result r = frame_parse(e->in + off, e->in_len - off, &f, &used, &why);
        if (r == FRAME_PARSE_MORE)
            break;
        rc = r == FRAME_PARSE_OK ? warm_frame(e, &f) : -1;
        off += used;
    }
    memmove(e->in, e->in + off, e->in_len - off);
    e->in_len -= off;
    /* done with bytes left over, or a frame too big for the buffer: not our agent */
    if (rc < 0 || (rc == 1 && e->in_len) || (rc == 0 && e->in_len == sizeof(e->in))) {
        vm_kill_reason(e->vm, VM_EXIT_CRASHED, "pool: unexpected agent output in warm-up");
        return;
    }
    if (rc == 0)
        return;
    /* Warm-up done: stop reading, so whatever comes next is the claimer's. */
    event_free(e->agent_ev);
    e->agent_ev = NULL;
    vmg_answered(e->greet);
    if (vm_pause(e->vm, on_entry_paused, e) != VM_OK)
        vm_kill_reason(e->vm, VM_EXIT_CRASHED, "pool: cannot pause a warmed-up VM");
}

/* A HELLO can be lost (vm_greet.h): no answer to it within VMG_RETRY_MS means a fresh
 * connection and a new greeting (a fresh connection, so no late answer to the old HELLO
 * can reach the claimer); give up after WARM_ATTEMPTS. After the answer, warm_run. */
#define WARM_ATTEMPTS 12

static void on_warm_retry(void *arg, struct vm *vm)
{
    (void)vm;
    entry_agent_close(arg);
}

static void on_warm_fail(void *arg, struct vm *vm, int err, const char *msg)
{
    struct pool_entry *e = arg;
    (void)err;
    char m[160];
    entry_agent_close(e);
    snprintf(m, sizeof m, "pool: warm-up: %s", msg);
    vm_kill_reason(vm, VM_EXIT_CRASHED, m);
}

static const struct vmg_ops warm_greet_ops = {on_warm_retry, on_warm_fail};
static const struct vmg_params warm_greet = {VMG_RETRY_MS, WARM_ATTEMPTS, 0};

static void on_entry_agent(struct vm *vm, int fd, void *arg)
{
    static const char hello[] = "{\"version\":1,\"min_version\":1,\"software\":\"spaced-pool\"}";
    struct pool_entry *e = arg;
    uint8_t msg[FRAME_HEADER_SIZE + sizeof(hello)];
    entry_agent_close(e);
    e->agent_fd = fd;
    e->in_len = 0;
    e->warm_greeted = 0;
    e->warm_open = 0;
    frame_encode_header(msg, FRAME_CONTROL_CHANNEL, FRAME_HELLO, FRAME_STREAM_NONE,
                        sizeof(hello) - 1);
    memcpy(msg + FRAME_HEADER_SIZE, hello, sizeof(hello) - 1);
    e->agent_ev = event_new(e->p->base, fd, EV_READ | EV_PERSIST, on_entry_agent_input, e);
    if (!e->agent_ev || write(fd, msg, FRAME_HEADER_SIZE + sizeof(hello) - 1) < 0) {
        vm_kill_reason(vm, VM_EXIT_CRASHED, "pool: cannot greet the agent");
        return;
    }
    event_add(e->agent_ev, NULL);
    vmg_sent(e->greet);
}

static void on_entry_exit(struct vm *vm, enum vm_exit_reason r, const char *msg,
                          const char *tail, void *arg)
{
    struct pool_entry *e = arg;
    struct pool *p = e->p;
    int failed_fill = !e->ready;
    if (failed_fill)
        p->filling = 0;
    entry_discard(p, e);
    if (failed_fill && !p->freeing)
        backoff(p, "a pooled VM exited before it was ready");
    else
        kick(p);
}

static const struct vm_callbacks entry_cbs = { on_entry_ready, on_entry_agent, on_entry_exit };

static void on_overlay(struct vm *unused, int err, const char *msg, void *arg)
{
    struct pool_entry *e = arg;
    struct pool *p = e->p;
    e->overlay_job = NULL; /* it frees itself after this callback */
    char m[600];
    int verr = err;
    if (!err && !p->freeing && !(e->greet = vmg_new(p->base, &warm_greet_ops, e))) {
        verr = VM_E_IO;
        snprintf(m, sizeof(m), "out of memory");
    } else if (!err && !p->freeing) {
        e->vm = vmg_start(e->greet, &e->cfg, p->snapshot_dir, 0, &warm_greet, &entry_cbs, e,
                          &verr, m, sizeof(m));
    }
    entry_tap_close(e); /* QEMU holds its own copy from the spawn */
    if (!e->vm) {
        char q[700];
        if (!p->freeing)
            log_warn("pool.fill", "id=%s err=%s msg=%s", e->cfg.id, vm_error_code(verr),
                     log_quote(err ? msg : m, q, sizeof(q)));
        p->filling = 0;
        entry_discard(p, e);
        if (!p->freeing)
            backoff(p, err ? "making the overlay failed" : "restore failed");
    }
}

/* Above the target (demand fell, or the budget is taken by another pool): the oldest
 * ready VM goes (its exit kicks the next check); above the floor, checks again later. */
static int shrink(struct pool *p, unsigned have, unsigned target)
{
    if (have > p->size && !p->freeing)
        kick_after(p, POOL_SHRINK_CHECK_MS);
    if (have <= target)
        return 0;
    struct pool_entry *old = NULL;
    for (struct pool_entry *e = p->entries; e; e = e->next)
        if (e->ready && vm_state(e->vm) == VM_STATE_PAUSED)
            old = e;
    if (!old)
        return 0;
    log_info("pool.shrink", "id=%s have=%u target=%u", old->cfg.id, have, target);
    vm_kill_reason(old->vm, VM_EXIT_KILLED, "pool: surplus to recent demand");
    return 1;
}

static void refill(evutil_socket_t fd, short what, void *arg)
{
    struct pool *p = arg;
    unsigned have = pool_count(p), target = pool_target(p);
    if (p->freeing || shrink(p, have, target) || p->filling || have >= target)
        return;
    struct pool_entry *e = calloc(1, sizeof(*e));
    struct vm_config cfg = p->base_cfg;
    if (!e || p->prepare(&cfg, p->arg) != 0) {
        free(e);
        backoff(p, "preparing a pooled VM failed");
        return;
    }
    if (vm_config_copy(&e->cfg, &cfg) < 0) {
        if (cfg.net.tap_fd >= 0)
            close(cfg.net.tap_fd);
        if (p->discard)
            p->discard(cfg.id, cfg.run_dir, p->arg);
        free(e);
        backoff(p, "out of memory");
        return;
    }
    e->p = p;
    e->agent_fd = -1;
    e->discard = p->discard;
    e->arg = p->arg;
    e->next = p->entries;
    p->entries = e;
    p->filling = 1;
    if (vm_disk_overlay_create(p->base, e->cfg.backing, e->cfg.n_backing, e->cfg.disk,
                               on_overlay, e, &e->overlay_job) != VM_OK) {
        p->filling = 0;
        entry_discard(p, e);
        backoff(p, "cannot start qemu-img");
    }
}

struct pool *pool_new(struct event_base *base, const struct pool_config *cfg)
{
    struct pool *p = calloc(1, sizeof(*p));
    if (!p)
        return NULL;
    p->base = base;
    p->size = cfg->size;
    p->prepare = cfg->prepare;
    p->discard = cfg->discard;
    p->arg = cfg->prepare_arg;
    p->cap = cfg->cap;
    p->snapshot_dir = strdup(cfg->snapshot_dir);
    p->template_overlay = strdup(cfg->template_overlay);
    p->refill = event_new(base, -1, 0, refill, p);
    if (!p->snapshot_dir || !p->template_overlay || !p->refill || !cfg->prepare ||
        vm_config_copy(&p->base_cfg, &cfg->base) < 0) {
        free(p->snapshot_dir);
        free(p->template_overlay);
        if (p->refill)
            event_free(p->refill);
        free(p);
        return NULL;
    }
    kick(p);
    return p;
}

/* Resumed after a claim: the caller's callbacks take over, with the warm connection. */
static void on_claim_resumed(struct vm *vm, int err, const char *msg, void *arg)
{
    int fd = (int)(intptr_t)arg;
    if (err) {
        close(fd);
        vm_kill_reason(vm, VM_EXIT_CRASHED, "resume of a pooled VM failed");
        return;
    }
    vm->state = VM_STATE_RUNNING;
    if (vm->cbs.on_ready)
        vm->cbs.on_ready(vm, VM_OK, NULL, vm->arg);
    if (vm->detached || vm->state == VM_STATE_EXITED || !vm->cbs.on_agent)
        close(fd);
    else
        vm->cbs.on_agent(vm, fd, vm->arg);
}

struct vm *pool_claim(struct pool *p, const struct vm_callbacks *cbs, void *arg)
{
    struct pool_entry *e = p->entries, *pick = NULL;
    for (; e; e = e->next)
        if (e->ready && vm_state(e->vm) == VM_STATE_PAUSED)
            pick = e; /* the oldest ready one: entries are pushed at the head */
    /* Demand, met or not: a burst that empties the pool raises its target by every
     * create that had to restore, not only by those the pool served. */
    p->claims_ms[p->nclaims++ % POOL_DEMAND_MAX] = clock_mono_ms();
    if (!pick) {
        kick_after(p, POOL_MISS_DELAY_MS); /* the target may have grown */
        return NULL;
    }
    struct vm *vm = pick->vm;
    int fd = pick->agent_fd;
    pick->agent_fd = -1;
    entry_unlink(p, pick);
    entry_agent_close(pick);
    vmg_free(pick->greet);
    vm_config_free(&pick->cfg);
    free(pick);
    vm->cbs = *cbs;
    vm->arg = arg;
    if (vm_resume(vm, on_claim_resumed, (void *)(intptr_t)fd) != VM_OK) {
        close(fd);
        /* on_exit reaches the caller, who owns the VM now */
        vm_kill_reason(vm, VM_EXIT_CRASHED, "resume of a pooled VM failed");
    }
    /* Refill once the claimer's create has ended (pool_kick), or a little later: starting
     * the next clone (qemu-img, the jailed spawn on the loop, then a CPU-bound restore)
     * right now would compete with this one's resume, handshake and refresh, which is
     * the latency the pool exists to cut. */
    kick_after(p, POOL_REFILL_DELAY_MS);
    return vm;
}

unsigned pool_ready(const struct pool *p)
{
    unsigned n = 0;
    for (const struct pool_entry *e = p->entries; e; e = e->next)
        n += e->ready;
    return n;
}

void pool_free(struct pool *p)
{
    if (!p)
        return;
    p->freeing = 1;
    /* An asynchronous kill would report through on_entry_exit after p is gone, so the
     * pooled VMs are killed synchronously and silently. */
    while (p->entries) {
        struct pool_entry *e = p->entries;
        /* qemu-img still running: stopped here, since pool_free runs when spaced stops
         * and no loop turn would ever report its end (entry_discard removes the overlay) */
        vm_disk_job_cancel(e->overlay_job);
        e->overlay_job = NULL;
        if (e->vm)
            vm_kill_sync(e->vm);
        entry_discard(p, e);
    }
    event_free(p->refill);
    vm_config_free(&p->base_cfg);
    free(p->snapshot_dir);
    free(p->template_overlay);
    free(p);
}
