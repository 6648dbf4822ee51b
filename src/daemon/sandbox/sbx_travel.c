/* sbx_travel.c: sandbox snapshots that travel between the nodes of a cluster
 * (docs/multinode.md, "Sandbox snapshots that travel").
 *
 * A snapshot is a capture directory on the node that took it (sbx_snap.c, sbx_fork.c):
 * snapshot.json, the device state (state), the RAM file (mem), the disk overlay copy
 * (disk.qcow2, or disk.raw once flattened), `template`, and chain.json naming the
 * read-only layers under that overlay by this node's paths (the template snapshot
 * version's frozen overlay, the pinned image). Those layers are byte-for-byte what the
 * guest's memory expects: another node's copy of "the same" template snapshot was booted
 * separately and differs, so every layer travels with the snapshot.
 *
 * Holder side: when a node's capture is complete, every part is hashed (SHA-256, on a
 * worker thread, one after another) before the snapshot becomes ready: the row gets the
 * holder (`node`) and `parts`, JSON
 *   {"files": [{"name": N, "size": B, "sha256": H}, ...],
 *    "chain": [{"part": N, "format": "qcow2"|"raw"}, ...]}
 * where a file's name is one of the capture's own (snapshot.json, state, mem, disk.qcow2,
 * disk.raw, template) or layer<i> for the chain's i-th layer outside the capture. The
 * node serves them (GET /internal/snapshots/{id}/parts/{name}, node token only).
 *
 * The record also names the VM runtime that saved the capture (vm/vm_sig.h, from its
 * snapshot.json): a node running another refuses to fetch it (409 snapshot_incompatible,
 * before a byte moves), and the control places such creates only on nodes running it.
 *
 * Fetching side: a create from a snapshot whose capture is not here and whose row names
 * another holder fetches every part (sbx_parts.c: streamed, size and SHA-256 checked) into
 * captures/.fetch-<snapshot>/ (the capture collection skips dot names; one fetch per
 * snapshot on a node, shared by the creates waiting for it), writes
 * chain.json with this node's paths, then renames the directory to captures/<snapshot>:
 * from then on it is a capture like one taken here and the restore is a fork's. Any
 * failure removes the directory and fails the create, which has booted nothing. Only
 * the row's values are trusted as limits; every name, size, count and format read from
 * it is checked before use. Prefix sbx_travel_. */
#include <errno.h>
#include <event2/event.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/http/http.h"
#include "daemon/ops/op.h"
#include "daemon/store/store.h"
#include "daemon/template/tpl_blob.h"
#include "daemon/template/tpl_digest.h"
#include "log.h"
#include "sbx_internal.h"

static bool snap_id_ok(const char *id)
{
    return id && strlen(id) == 18 && strncmp(id, "sn", 2) == 0 && strspn(id + 2, "0123456789abcdef") == 16;
}

/* A snapshot's record: sbx_parts_parse's checks, snapshot.json and state present, and
 * no creds (a moving sandbox's credential rules, sbx_move.c: never a snapshot's). */
static int parts_parse(const char *s, struct sbx_parts *out)
{
    return sbx_parts_parse(s, out) == 0 && sbx_parts_find(out, "snapshot.json") >= 0 &&
                   sbx_parts_find(out, "state") >= 0 && sbx_parts_find(out, "creds") < 0
               ? 0 : -1;
}

bool sbx_travel_parts_ok(const char *parts)
{
    struct sbx_parts p;
    return parts && parts_parse(parts, &p) == 0;
}

/* ---- the holder: hashing the parts when a snapshot is taken -------------------------- */

struct sbx_travel_rec {
    struct sbx_travel_rec *next;  /* sbx_table.travel_recs */
    struct spaced *sp;
    char op[STORE_ID_MAX];
    struct store_snap row;
    char dir[SBX_PATH_MAX];
    struct sbx_parts parts;
    struct sbx_parts_hash *hash;
};

static void rec_free(struct sbx_travel_rec *t)
{
    for (struct sbx_travel_rec **pp = &t->sp->sbx->travel_recs; *pp; pp = &(*pp)->next)
        if (*pp == t) {
            *pp = t->next;
            break;
        }
    sbx_parts_hash_cancel(t->hash);
    free(t);
}

static void rec_end(void *arg, const char *why)
{
    struct sbx_travel_rec *t = arg;
    t->hash = NULL; /* it ended: freed by sbx_parts_hash */
    struct spaced *sp = t->sp;
    char op[STORE_ID_MAX], msg[600] = "";
    snprintf(op, sizeof op, "%s", t->op);
    char *js = why ? NULL : sbx_parts_json(&t->parts);
    if (why)
        snprintf(msg, sizeof msg, "%s", why);
    else if (!js || strlen(js) >= sizeof t->row.parts)
        snprintf(msg, sizeof msg, "the snapshot's parts do not fit their record");
    else {
        snprintf(t->row.parts, sizeof t->row.parts, "%s", js);
        snprintf(t->row.state, sizeof t->row.state, "ready");
        if (store_snap_put(sp->store, &t->row) != 0)
            snprintf(msg, sizeof msg, "the store refused the snapshot's row");
    }
    free(js);
    char id[STORE_ID_MAX], dir[SBX_PATH_MAX];
    snprintf(id, sizeof id, "%s", t->row.id);
    snprintf(dir, sizeof dir, "%s", t->dir);
    int64_t size = t->row.size_bytes;
    rec_free(t);
    if (msg[0]) {
        sbx_snap_abandon(sp, id);
        spaced_rm_rf(dir);
        op_finish(sp, op, false, "snapshot_failed", msg);
        return;
    }
    log_info("snapshot.state", "snapshot=%s state=ready size_bytes=%lld travel=hashed", id, (long long)size);
    op_progress(sp, op, 100, id);
    op_finish(sp, op, true, NULL, NULL);
}

/* Lists the capture's files and chain layers into t->parts: 0 or -1. */
static int rec_list(struct sbx_travel_rec *t)
{
    struct sbx_parts *p = &t->parts;
    struct stat st;
    for (const char *const *o = sbx_parts_own_names(); *o; o++) {
        char path[SBX_PATH_MAX];
        if (strcmp(*o, "creds") == 0)
            continue; /* a moving sandbox's, never a snapshot's */
        if (snprintf(path, sizeof path, "%s/%s", t->dir, *o) >= (int)sizeof path)
            return -1;
        if (stat(path, &st) == 0 && S_ISREG(st.st_mode) && sbx_parts_add(p, *o, path) < 0)
            return -1;
    }
    /* Which runtime can restore it (vm_sig.h): others are not sent to fetch it. */
    if (vm_sig_of_snapshot(t->dir, p->runtime, sizeof p->runtime) < 0)
        return -1;
    struct sbx_chain c;
    char cp[SBX_PATH_MAX + 16];
    snprintf(cp, sizeof cp, "%s/chain.json", t->dir);
    if (sbx_chain_read(cp, &c) < 0)
        return -1;
    size_t dl = strlen(t->dir);
    for (unsigned i = 0; i < c.n; i++) {
        char name[SBX_PART_NAME_MAX];
        if (strncmp(c.path[i], t->dir, dl) == 0 && c.path[i][dl] == '/')
            snprintf(name, sizeof name, "%.15s", c.path[i] + dl + 1); /* the capture's own disk */
        else
            snprintf(name, sizeof name, "layer%u", i);
        int k = sbx_parts_find(p, name);
        if (k < 0) {
            if (sbx_parts_add(p, name, c.path[i]) < 0)
                return -1;
            k = (int)p->n - 1;
        }
        p->chain[p->nchain] = (unsigned)k;
        snprintf(p->format[p->nchain++], sizeof p->format[0], "%s", c.format[i]);
    }
    return p->nchain ? 0 : -1;
}

int sbx_travel_record(struct spaced *sp, const char *op_id, const struct store_snap *row)
{
    struct sbx_travel_rec *t = calloc(1, sizeof *t);
    if (!t)
        return -1;
    t->sp = sp;
    snprintf(t->op, sizeof t->op, "%s", op_id);
    t->row = *row;
    snprintf(t->row.node, sizeof t->row.node, "%s", sp->sbx->node_id);
    sbx_capture_dir(sp, row->id, t->dir, sizeof t->dir);
    t->next = sp->sbx->travel_recs;
    sp->sbx->travel_recs = t;
    if (rec_list(t) < 0 || !(t->hash = sbx_parts_hash(sp, &t->parts, rec_end, t))) {
        rec_free(t);
        return -1;
    }
    log_info("snapshot.state", "snapshot=%s state=hashing parts=%u", row->id, t->parts.n);
    return 0;
}

/* ---- the holder: serving the parts --------------------------------------------------- */

void sbx_travel_serve(struct spaced *sp, struct http_req *req, const char *id, const char *part)
{
    if (!tpl_blob_token_ok(req, sp->opt.node_token)) { /* learns nothing, not even whether it exists */
        http_reply_error(req, 404, "not_found", "no route for %s %s", http_req_method(req), http_req_path(req));
        return;
    }
    char what[80], dir[SBX_PATH_MAX], path[SBX_PATH_MAX + 32] = "";
    struct store_snap row;
    struct sbx_parts p;
    bool ok = snap_id_ok(id) && part && sbx_parts_name_ok(part) && store_snap_get(sp->store, id, &row) == 0 &&
              strcmp(row.state, "ready") == 0 && strcmp(row.node, sp->sbx->node_id) == 0 &&
              parts_parse(row.parts, &p) == 0 && sbx_parts_find(&p, part) >= 0;
    snprintf(what, sizeof what, "part %.16s of snapshot %.20s", part ? part : "", ok ? id : "(unknown)");
    if (ok) {
        sbx_capture_dir(sp, id, dir, sizeof dir);
        if (strncmp(part, "layer", 5) != 0) {
            snprintf(path, sizeof path, "%s/%s", dir, part);
        } else { /* the chain's layer, by this node's chain.json */
            char cp[SBX_PATH_MAX + 16];
            snprintf(cp, sizeof cp, "%s/chain.json", dir);
            if (sbx_parts_layer_path(cp, part, path, sizeof path) < 0)
                path[0] = '\0';
        }
    }
    if (!path[0] || tpl_blob_serve(req, path, what) != 0)
        http_reply_error(req, 404, "not_found", "%s is not on this node", what);
}

/* ---- the fetching node ------------------------------------------------------------------ */

/* One fetch of a snapshot's parts on this node, shared by every create waiting for it
 * (sbx_table.travel_fetches). */
struct travel_fetch {
    struct travel_fetch *next;
    struct spaced *sp;
    char snap[STORE_ID_MAX];
    char node[STORE_ID_MAX];
    char tmp[SBX_PATH_MAX];       /* captures/.fetch-<snap> */
    struct sbx_parts parts;
    int64_t started_ms;
    struct sbx_parts_fetch *fetch; /* NULL once ended */
    struct sbx_travel *waiters;
};

/* A create waiting for a fetch (s->travel). */
struct sbx_travel {
    struct sbx *s;
    sbx_travel_done done;
    struct travel_fetch *f;
    struct sbx_travel *next;
};

static void fetch_unlist(struct travel_fetch *f)
{
    for (struct travel_fetch **pp = &f->sp->sbx->travel_fetches; *pp; pp = &(*pp)->next)
        if (*pp == f) {
            *pp = f->next;
            return;
        }
}

/* The fetch ended: every waiter's done, one at a time (a done may delete another waiter,
 * which then leaves the list through sbx_travel_cancel). */
static void fetch_end(struct travel_fetch *f, const struct spaced_err *err, int64_t bytes)
{
    char q[400];
    fetch_unlist(f);
    f->fetch = NULL;
    if (err) {
        spaced_rm_rf(f->tmp);
        log_warn("snapshot.fetch", "snapshot=%s source=%s result=failed code=%s bytes=%lld msg=%s", f->snap,
                 f->node, err->code, (long long)bytes, log_quote(err->message, q, sizeof q));
    } else {
        log_info("snapshot.fetch", "snapshot=%s source=%s result=verified parts=%u bytes=%lld ms=%lld", f->snap,
                 f->node, f->parts.n, (long long)bytes, (long long)(spaced_now_ms() - f->started_ms));
    }
    while (f->waiters) {
        struct sbx_travel *w = f->waiters;
        f->waiters = w->next;
        struct sbx *s = w->s;
        sbx_travel_done done = w->done;
        s->travel = NULL;
        free(w);
        done(s, err);
    }
    free(f);
}

/* Every part verified: chain.json with this node's paths, then the directory in place. */
static void on_fetched(void *arg, const struct spaced_err *err, int64_t bytes)
{
    struct travel_fetch *f = arg;
    f->fetch = NULL;
    if (err) {
        fetch_end(f, err, bytes);
        return;
    }
    struct spaced_err e = {0};
    char final[SBX_PATH_MAX - SBX_PART_NAME_MAX - 1], p[SBX_PATH_MAX + 32];
    sbx_capture_dir(f->sp, f->snap, final, sizeof final);
    struct sbx_chain c = {.n = f->parts.nchain};
    for (unsigned i = 0; i < f->parts.nchain; i++) {
        snprintf(c.path[i], sizeof c.path[i], "%s/%s", final, f->parts.f[f->parts.chain[i]].name);
        snprintf(c.format[i], sizeof c.format[i], "%s", f->parts.format[i]);
    }
    snprintf(p, sizeof p, "%s/chain.json", f->tmp);
    struct stat st;
    if (sbx_chain_write(p, &c) < 0)
        spaced_err_set(&e, 500, "host_io", "cannot write %s", p);
    else if (stat(final, &st) == 0) /* in place already (taken here meanwhile?): that one is used */
        spaced_rm_rf(f->tmp);
    else if (rename(f->tmp, final) < 0)
        spaced_err_set(&e, 500, "host_io", "cannot rename %s to %s: %s", f->tmp, final, strerror(errno));
    fetch_end(f, e.status ? &e : NULL, bytes);
}

/* Starts the one fetch of snapshot `row` on this node: f, or NULL with err. */
static struct travel_fetch *fetch_start(struct spaced *sp, const struct store_snap *row, struct spaced_err *err)
{
    struct travel_fetch *f = calloc(1, sizeof *f);
    if (!f) {
        spaced_err_set(err, 500, "internal", "out of memory");
        return NULL;
    }
    if (!row->parts[0] || parts_parse(row->parts, &f->parts) < 0) {
        free(f);
        spaced_err_set(err, 503, "snapshot_not_transferable", "snapshot %s is on node %s and its "
                       "parts were not recorded (taken before snapshots travelled?): create from it "
                       "on that node", row->id, row->node);
        return NULL;
    }
    char what[STORE_ID_MAX + 16];
    snprintf(what, sizeof what, "snapshot %s", row->id);
    if (sbx_runtime_check(sp, f->parts.runtime, what, err) < 0) { /* before a byte moves */
        log_warn("snapshot.fetch", "snapshot=%s source=%s result=refused code=%s", row->id, row->node, err->code);
        free(f);
        return NULL;
    }
    f->sp = sp;
    f->started_ms = spaced_now_ms();
    snprintf(f->snap, sizeof f->snap, "%s", row->id);
    snprintf(f->node, sizeof f->node, "%s", row->node);
    char top[SBX_PATH_MAX - STORE_ID_MAX - 16];
    sbx_capture_dir(sp, NULL, top, sizeof top);
    snprintf(f->tmp, sizeof f->tmp, "%s/.fetch-%s", top, row->id);
    spaced_rm_rf(f->tmp);
    if (spaced_mkdir_p(f->tmp) < 0) {
        spaced_err_set(err, 500, "host_io", "cannot create %s: %s", f->tmp, strerror(errno));
        free(f);
        return NULL;
    }
    int64_t total = 0;
    for (unsigned i = 0; i < f->parts.n; i++)
        total += f->parts.f[i].size;
    log_info("snapshot.fetch", "snapshot=%s source=%s parts=%u bytes=%lld result=started", f->snap, f->node,
             f->parts.n, (long long)total);
    char route[128];
    snprintf(route, sizeof route, "/internal/snapshots/%s/parts/", f->snap);
    struct sbx_parts_from from = {.node = f->node, .route = route, .dir = f->tmp, .what = what,
                                  .code = "snapshot"};
    /* The first part is asked for now: a holder that is not live fails the create here. */
    if (!(f->fetch = sbx_parts_fetch(sp, &f->parts, &from, on_fetched, f, err))) {
        log_warn("snapshot.fetch", "snapshot=%s source=%s result=failed code=%s", f->snap, f->node, err->code);
        spaced_rm_rf(f->tmp);
        free(f);
        return NULL;
    }
    f->next = sp->sbx->travel_fetches;
    sp->sbx->travel_fetches = f;
    return f;
}

int sbx_travel_need(struct sbx *s, sbx_travel_done done, struct spaced_err *err)
{
    struct spaced *sp = s->sp;
    char dir[SBX_PATH_MAX], p[SBX_PATH_MAX + 32];
    sbx_capture_dir(sp, s->rec.source, dir, sizeof dir);
    snprintf(p, sizeof p, "%s/snapshot.json", dir);
    if (access(p, F_OK) == 0 || !snap_id_ok(s->rec.source))
        return 0; /* here, or a fork's capture (never travels) */
    struct sbx_travel *w = calloc(1, sizeof *w);
    if (!w)
        return spaced_err_set(err, 500, "internal", "out of memory");
    struct travel_fetch *f = sp->sbx->travel_fetches;
    while (f && strcmp(f->snap, s->rec.source) != 0)
        f = f->next;
    if (f) {
        log_info("snapshot.fetch", "snapshot=%s sandbox=%s result=joined", f->snap, s->rec.id);
    } else {
        struct store_snap row;
        int rc = store_snap_get(sp->store, s->rec.source, &row);
        if (rc == STORE_NOTFOUND || (rc == 0 && (!row.node[0] || strcmp(row.node, sp->sbx->node_id) == 0))) {
            free(w);
            return 0; /* gone, or ours: sbx_fork_source says what is missing */
        }
        if (rc != 0) {
            free(w);
            return spaced_err_set(err, 503, "store_unavailable", "reading snapshot %s: the store failed",
                                  s->rec.source);
        }
        if (!(f = fetch_start(sp, &row, err))) {
            free(w);
            return -1;
        }
    }
    *w = (struct sbx_travel){.s = s, .done = done, .f = f, .next = f->waiters};
    f->waiters = w;
    s->travel = w;
    return 1;
}

void sbx_travel_cancel(struct sbx *s)
{
    struct sbx_travel *w = s->travel;
    if (!w)
        return;
    struct travel_fetch *f = w->f;
    for (struct sbx_travel **pp = &f->waiters; *pp; pp = &(*pp)->next)
        if (*pp == w) {
            *pp = w->next;
            break;
        }
    s->travel = NULL;
    free(w);
    if (f->waiters || !f->fetch)
        return; /* others wait for it, or it ended (fetch_end frees it) */
    sbx_parts_fetch_cancel(f->fetch);
    spaced_rm_rf(f->tmp);
    fetch_unlist(f);
    free(f);
}

void sbx_travel_forget(struct sbx_table *tbl)
{
    while (tbl->travel_recs)
        rec_free(tbl->travel_recs); /* their ops resume as "interrupted" */
}
