/* cluster_place.c: where a create goes (control role). Every node is scored from its
 * row (capacity, heartbeat, draining, the shapes it reported) and its use (sandboxes
 * holding VMs plus reservations, summed by the store); the sandbox's size is then
 * reserved in the database on the best node with one conditional insert under the
 * node's row lock (store_resv_take), so control daemons placing at the same moment never
 * both take a node's last room: the loser tries the next node, and when none is left the
 * client gets 503 no_capacity naming the largest free shape. See cluster.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster_internal.h"
#include "daemon/spaced.h"
#include "daemon/store/store.h"
#include "daemon/template/tpl.h"
#include "log.h"

/* ---- scoring (pure) --------------------------------------------------------------------- */

double cluster_score(const struct cluster_cand *c, unsigned vcpus, unsigned memory_mib)
{
    if (!c->live || c->draining || c->other_runtime || !c->cap_vcpus || !c->cap_memory_mib)
        return -1;
    long long fv = c->free_vcpus - vcpus, fm = c->free_memory_mib - memory_mib;
    if (fv < 0 || fm < 0)
        return -1;
    double v = (double)fv / c->cap_vcpus, m = (double)fm / c->cap_memory_mib;
    double s = v < m ? v : m;
    if (c->snapshot)
        s += CLUSTER_SCORE_SNAPSHOT;
    if (c->warm)
        s += CLUSTER_SCORE_WARM;
    if (c->image)
        s += CLUSTER_SCORE_IMAGE;
    return s;
}

/* Parses one "tpl/VxM:W" entry of [p, end); false if it is malformed. */
static bool shape_parse(const char *p, const char *end, char *tpl, size_t cap, unsigned *v, unsigned *m,
                        unsigned *w)
{
    const char *slash = memchr(p, '/', (size_t)(end - p));
    if (!slash || slash == p || (size_t)(slash - p) >= cap)
        return false;
    memcpy(tpl, p, (size_t)(slash - p));
    tpl[slash - p] = '\0';
    char rest[64];
    size_t n = (size_t)(end - slash - 1);
    if (n >= sizeof rest)
        return false;
    memcpy(rest, slash + 1, n);
    rest[n] = '\0';
    int used = 0;
    return sscanf(rest, "%ux%u:%u%n", v, m, w, &used) == 3 && (size_t)used == n;
}

void cluster_shapes_find(const char *shapes, const char *tpl, unsigned vcpus, unsigned memory_mib,
                         bool *snapshot, unsigned *warm)
{
    *snapshot = false;
    *warm = 0;
    for (const char *p = shapes; p && *p;) {
        const char *end = strchr(p, ',');
        if (!end)
            end = p + strlen(p);
        char name[STORE_ID_MAX];
        unsigned v, m, w;
        if (shape_parse(p, end, name, sizeof name, &v, &m, &w) && strcmp(name, tpl) == 0 && v == vcpus &&
            m == memory_mib) {
            *snapshot = true;
            *warm += w;
        }
        p = *end ? end + 1 : end;
    }
}

void cluster_shapes_add(char *shapes, size_t cap, const char *tpl, unsigned vcpus, unsigned memory_mib,
                        unsigned warm)
{
    char entry[STORE_ID_MAX + 48];
    int n = snprintf(entry, sizeof entry, "%s%s/%ux%u:%u", shapes[0] ? "," : "", tpl, vcpus, memory_mib, warm);
    size_t len = strlen(shapes);
    if (n > 0 && (size_t)n < sizeof entry && len + (size_t)n < cap)
        memcpy(shapes + len, entry, (size_t)n + 1);
}

/* ---- the nodes as placement sees them ---------------------------------------------------- */

struct usage_cb {
    void (*fn)(const struct store_node *, const struct store_node_use *, bool, void *);
    void *arg;
    int64_t now_ms;
};

static int usage_row(const struct store_node *n, const struct store_node_use *u, void *arg)
{
    struct usage_cb *c = arg;
    c->fn(n, u, c->now_ms - n->heartbeat_ms < CLUSTER_DEAD_MS, c->arg);
    return 0;
}

int cluster_nodes_usage(struct spaced *sp,
                        void (*fn)(const struct store_node *n, const struct store_node_use *u, bool live,
                                   void *arg),
                        void *arg)
{
    struct usage_cb c = {fn, arg, spaced_now_ms()};
    return store_node_usage(sp->store, usage_row, &c);
}

struct scored {
    struct store_node node;
    struct cluster_cand cand;
    double score;
};

struct scan {
    const struct cluster_want *w;
    struct scored *v;
    size_t n, cap;
    bool oom;
};

static void collect(const struct store_node *n, const struct store_node_use *u, bool live, void *arg)
{
    struct scan *s = arg;
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 8;
        struct scored *v = realloc(s->v, cap * sizeof *v);
        if (!v) {
            s->oom = true;
            return;
        }
        s->v = v;
        s->cap = cap;
    }
    struct scored *e = &s->v[s->n++];
    e->node = *n;
    e->cand = (struct cluster_cand){
        .cap_vcpus = n->vcpus,
        .cap_memory_mib = n->memory_mib,
        .free_vcpus = (long long)n->vcpus - u->used_vcpus - u->reserved_vcpus,
        .free_memory_mib = (long long)n->memory_mib - u->used_memory_mib - u->reserved_memory_mib,
        .live = live,
        .draining = n->draining,
    };
    cluster_shapes_find(n->shapes, s->w->template_name, s->w->vcpus, s->w->memory_mib, &e->cand.snapshot,
                        &e->cand.warm);
    e->cand.image = tpl_nodes_have(s->w->holders, n->id);
    /* A saved VM state loads only into the runtime that saved it (vm/vm_sig.h); a node
     * reporting none (an earlier version, a failed probe) cannot be known to run it. */
    e->cand.other_runtime = s->w->runtime[0] && strcmp(n->runtime, s->w->runtime) != 0;
    e->score = cluster_score(&e->cand, s->w->vcpus, s->w->memory_mib);
}

/* Best score first; ties by id (the rows come in id order, qsort is not stable). */
static int by_score(const void *a, const void *b)
{
    const struct scored *x = a, *y = b;
    if (x->score != y->score)
        return x->score > y->score ? -1 : 1;
    return strcmp(x->node.id, y->node.id);
}

static void describe(struct cluster_pick *out, const struct scored *e)
{
    out->runtime_found = !e->cand.other_runtime;
    out->node = e->node;
    out->free_vcpus = e->cand.free_vcpus;
    out->free_memory_mib = e->cand.free_memory_mib;
    out->score = e->score;
    out->found = true;
}

int cluster_pick(struct spaced *sp, const struct cluster_want *w, struct cluster_pick *out)
{
    memset(out, 0, sizeof *out);
    struct scan s = {.w = w};
    if (cluster_nodes_usage(sp, collect, &s) != 0 || s.oom) {
        free(s.v);
        return -1;
    }
    qsort(s.v, s.n, sizeof *s.v, by_score);
    int rc = 1;
    for (size_t i = 0; i < s.n && s.v[i].score >= 0; i++) {
        struct store_resv r = {.vcpus = w->vcpus, .memory_mib = w->memory_mib, .created_ms = spaced_now_ms()};
        snprintf(r.node, sizeof r.node, "%s", s.v[i].node.id);
        if (spaced_random_id(r.id, "rv", 16) != 0) {
            rc = -1;
            break;
        }
        int t = store_resv_take(sp->store, &r, r.created_ms - CLUSTER_DEAD_MS + 1);
        if (t == 0) {
            describe(out, &s.v[i]);
            snprintf(out->resv_id, sizeof out->resv_id, "%s", r.id);
            rc = 0;
            break;
        }
        if (t != STORE_FULL && t != STORE_NOTFOUND) {
            rc = -1;
            break;
        }
        /* Another control daemon took the room (or the node went silent, was drained or
         * removed) since the scan: this node's numbers are stale, try the next. */
        log_info("cluster.place", "node=%s reserve=lost", r.node);
        s.v[i].cand.free_vcpus = s.v[i].cand.free_memory_mib = 0;
    }
    /* The refusal names the live, undrained node with the most free memory: of those
     * running the wanted runtime when any does (the others could never take it). */
    for (size_t i = 0; rc == 1 && i < s.n; i++) {
        const struct scored *e = &s.v[i];
        if (!e->cand.live || e->cand.draining || (out->runtime_found && e->cand.other_runtime))
            continue;
        if (!e->cand.other_runtime && !out->runtime_found) /* the first that runs it */
            out->found = false;                              /* (describe sets both) */
        if (!out->found || e->cand.free_memory_mib > out->free_memory_mib ||
            (e->cand.free_memory_mib == out->free_memory_mib && e->cand.free_vcpus > out->free_vcpus))
            describe(out, e);
    }
    free(s.v);
    return rc;
}

/* ---- the control's side of a create ------------------------------------------------------- */

void cluster_resv_release(struct spaced *sp, struct cluster_resv *r)
{
    if (!r)
        return;
    for (struct cluster_resv **pp = &sp->cluster->resv; *pp; pp = &(*pp)->next)
        if (*pp == r) {
            *pp = r->next;
            break;
        }
    /* A failure here leaves the row to the node's heartbeat (CLUSTER_RESV_TTL_MS). */
    if (store_resv_release(sp->store, r->id) != 0)
        log_warn("cluster.place", "node=%s reservation=%s release=failed msg=\"%s\"", r->node, r->id,
                 store_errmsg(sp->store));
    free(r);
}

struct cluster_resv *cluster_resv_keep(struct spaced *sp, const struct cluster_pick *p)
{
    struct cluster_resv *r = calloc(1, sizeof *r);
    if (!r) {
        store_resv_release(sp->store, p->resv_id);
        return NULL;
    }
    snprintf(r->id, sizeof r->id, "%s", p->resv_id);
    snprintf(r->node, sizeof r->node, "%s", p->node.id);
    r->next = sp->cluster->resv;
    sp->cluster->resv = r;
    return r;
}

int cluster_place(struct spaced *sp, struct http_req *req, const struct cluster_want *w,
                  const struct cluster_fwd *fwd, struct store_node *to, struct cluster_resv **resv)
{
    struct cluster_pick p;
    int rc = cluster_pick(sp, w, &p);
    if (rc < 0) {
        cluster_reply_fail(req, fwd, 503, "store_unavailable", "placing the sandbox: %s", store_errmsg(sp->store));
        return -1;
    }
    if (!p.found) {
        cluster_reply_fail(req, fwd, 503, "no_node", "no node takes new sandboxes: none reported in the "
                           "last %d s, or every live one is draining", CLUSTER_DEAD_MS / 1000);
        return -1;
    }
    if (rc == 1 && !p.runtime_found) {
        cluster_reply_fail(req, fwd, 409, "snapshot_incompatible",
                           "snapshot %s was saved by %s; no live node that takes new sandboxes runs it: it "
                           "cannot be restored on this cluster now (a node with that QEMU release, "
                           "accelerator and CPU must report and not be draining)",
                           w->template_name, w->runtime);
        return -1;
    }
    if (rc == 1) {
        cluster_reply_fail(req, fwd, 503, "no_capacity",
                           "no node has %u vCPUs and %u MiB free; largest free shape: %lld vCPUs and "
                           "%lld MiB on node %s",
                           w->vcpus, w->memory_mib, p.free_vcpus > 0 ? p.free_vcpus : 0,
                           p.free_memory_mib > 0 ? p.free_memory_mib : 0, p.node.id);
        return -1;
    }
    struct cluster_resv *r = cluster_resv_keep(sp, &p);
    if (!r) {
        cluster_reply_fail(req, fwd, 500, "internal", "out of memory");
        return -1;
    }
    *resv = r;
    *to = p.node;
    log_info("cluster.place", "node=%s template=%s vcpus=%u memory_mib=%u free_vcpus=%lld "
             "free_memory_mib=%lld score=%.3f reservation=%s", p.node.id, w->template_name[0] ?
             w->template_name : "-", w->vcpus, w->memory_mib, p.free_vcpus, p.free_memory_mib, p.score, r->id);
    return 0;
}
