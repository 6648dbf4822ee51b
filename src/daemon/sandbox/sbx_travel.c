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
 * Fetching side: a create from a snapshot whose capture is not here and whose row names
 * another holder fetches every part (tpl_blob: streamed, size and SHA-256 checked) into
 * captures/.fetch-<snapshot>-<sandbox>/ (the capture collection skips dot names), writes
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

#define TRAVEL_FILES_MAX 16
#define TRAVEL_NAME_MAX 16
#define TRAVEL_SIZE_MAX ((int64_t)1 << 42) /* 4 TiB: no memory or disk is larger */
/* A holder is a source while its heartbeat is younger than this (cluster.h's
 * CLUSTER_DEAD_MS; cluster/ sits above sandbox/, so the value is repeated, not included). */
#define TRAVEL_SOURCE_DEAD_MS 10000
#define TRAVEL_TIMEOUT_S 60 /* until a part's first byte, and between bytes */

static const char *const own_files[] = {"snapshot.json", "state", "mem", "disk.qcow2", "disk.raw", "template", NULL};

struct travel_file {
    char name[TRAVEL_NAME_MAX];
    char path[SBX_PATH_MAX];      /* holder: where it is */
    int64_t size;
    char sha256[TPL_DIGEST_HEX];
};

struct travel_parts {
    struct travel_file f[TRAVEL_FILES_MAX];
    unsigned n;
    unsigned chain[VM_DISK_BACKING_MAX]; /* index into f */
    char format[VM_DISK_BACKING_MAX][8];
    unsigned nchain;
};

/* Part names: a capture's own file, or layer0..layer15. */
static bool name_ok(const char *n)
{
    for (const char *const *o = own_files; *o; o++)
        if (strcmp(n, *o) == 0)
            return true;
    size_t len = strlen(n);
    if (len < 6 || len > 7 || strncmp(n, "layer", 5) != 0 || strspn(n + 5, "0123456789") != len - 5)
        return false;
    return atoi(n + 5) < VM_DISK_BACKING_MAX && (len == 6 || n[5] != '0');
}

static bool snap_id_ok(const char *id)
{
    return id && strlen(id) == 18 && strncmp(id, "sn", 2) == 0 && strspn(id + 2, "0123456789abcdef") == 16;
}

static int find_part(const struct travel_parts *p, const char *name)
{
    for (unsigned i = 0; i < p->n; i++)
        if (strcmp(p->f[i].name, name) == 0)
            return (int)i;
    return -1;
}

/* Parses and checks a row's parts: 0, or -1 (anything unexpected). */
static int parts_parse(const char *s, struct travel_parts *out)
{
    memset(out, 0, sizeof *out);
    json_t *j = json_loads(s, 0, NULL), *files = json_object_get(j, "files"), *chain = json_object_get(j, "chain");
    int rc = json_is_array(files) && json_is_array(chain) && json_array_size(files) <= TRAVEL_FILES_MAX &&
                     json_array_size(chain) >= 1 && json_array_size(chain) <= VM_DISK_BACKING_MAX
                 ? 0 : -1;
    size_t i;
    json_t *e;
    json_array_foreach(rc == 0 ? files : NULL, i, e) {
        const char *name = json_string_value(json_object_get(e, "name"));
        const char *sha = json_string_value(json_object_get(e, "sha256"));
        json_t *size = json_object_get(e, "size");
        if (!name || !name_ok(name) || find_part(out, name) >= 0 || !sha || !tpl_digest_valid(sha) ||
            !json_is_integer(size) || json_integer_value(size) < 0 || json_integer_value(size) > TRAVEL_SIZE_MAX) {
            rc = -1;
            break;
        }
        struct travel_file *f = &out->f[out->n++];
        snprintf(f->name, sizeof f->name, "%s", name);
        snprintf(f->sha256, sizeof f->sha256, "%s", sha);
        f->size = json_integer_value(size);
    }
    json_array_foreach(rc == 0 ? chain : NULL, i, e) {
        const char *part = json_string_value(json_object_get(e, "part"));
        const char *fmt = json_string_value(json_object_get(e, "format"));
        int k = part ? find_part(out, part) : -1;
        if (k < 0 || !fmt || (strcmp(fmt, "qcow2") != 0 && strcmp(fmt, "raw") != 0)) {
            rc = -1;
            break;
        }
        out->chain[out->nchain] = (unsigned)k;
        snprintf(out->format[out->nchain++], sizeof out->format[0], "%s", fmt);
    }
    if (rc == 0 && (find_part(out, "snapshot.json") < 0 || find_part(out, "state") < 0))
        rc = -1;
    json_decref(j);
    return rc;
}

bool sbx_travel_parts_ok(const char *parts)
{
    struct travel_parts p;
    return parts && parts_parse(parts, &p) == 0;
}

/* ---- the holder: hashing the parts when a snapshot is taken -------------------------- */

struct sbx_travel_rec {
    struct sbx_travel_rec *next;  /* sbx_table.travel_recs */
    struct spaced *sp;
    char op[STORE_ID_MAX];
    struct store_snap row;
    char dir[SBX_PATH_MAX];
    struct travel_parts parts;
    unsigned next_file;
    struct tpl_digest_job *job;
    struct event *kick;           /* the next step, from the loop (owned) */
};

static void rec_free(struct sbx_travel_rec *t)
{
    for (struct sbx_travel_rec **pp = &t->sp->sbx->travel_recs; *pp; pp = &(*pp)->next)
        if (*pp == t) {
            *pp = t->next;
            break;
        }
    tpl_digest_job_free(t->job);
    if (t->kick)
        event_free(t->kick);
    free(t);
}

void sbx_travel_forget(struct sbx_table *tbl)
{
    while (tbl->travel_recs)
        rec_free(tbl->travel_recs); /* their ops resume as "interrupted" */
}

static char *parts_json(const struct travel_parts *p)
{
    json_t *files = json_array(), *chain = json_array();
    for (unsigned i = 0; i < p->n; i++)
        json_array_append_new(files, json_pack("{s:s, s:I, s:s}", "name", p->f[i].name, "size",
                                               (json_int_t)p->f[i].size, "sha256", p->f[i].sha256));
    for (unsigned i = 0; i < p->nchain; i++)
        json_array_append_new(chain, json_pack("{s:s, s:s}", "part", p->f[p->chain[i]].name, "format",
                                               p->format[i]));
    json_t *j = json_pack("{s:o, s:o}", "files", files, "chain", chain);
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    return s;
}

static void rec_end(struct sbx_travel_rec *t, const char *why)
{
    struct spaced *sp = t->sp;
    char op[STORE_ID_MAX], msg[600] = "";
    snprintf(op, sizeof op, "%s", t->op);
    char *js = why ? NULL : parts_json(&t->parts);
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

static void rec_step(evutil_socket_t fd, short what, void *arg);

static void on_hashed(void *arg, int rc, int err, const char *hex, int64_t size)
{
    struct sbx_travel_rec *t = arg;
    struct travel_file *f = &t->parts.f[t->next_file];
    t->job = NULL; /* done: tpl_digest frees its own job after this callback */
    if (rc != 0) {
        char why[SBX_PATH_MAX + 100];
        snprintf(why, sizeof why, "cannot hash %s: %s", f->path, strerror(err));
        rec_end(t, why);
        return;
    }
    snprintf(f->sha256, sizeof f->sha256, "%s", hex);
    f->size = size;
    t->next_file++;
    struct timeval now = {0, 0};
    if (event_add(t->kick, &now) != 0)
        rec_end(t, "cannot schedule the next hash");
}

/* Hashes the next part (worker thread; inline when no thread starts), or ends. */
static void rec_step(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct sbx_travel_rec *t = arg;
    if (t->next_file >= t->parts.n) {
        rec_end(t, NULL);
        return;
    }
    const char *path = t->parts.f[t->next_file].path;
    if ((t->job = tpl_digest_start(t->sp->base, path, on_hashed, t)))
        return;
    char hex[TPL_DIGEST_HEX];
    int64_t size = 0;
    int rc = tpl_digest_file(path, 0, hex, &size);
    on_hashed(t, rc, errno, hex, size);
}

/* Lists the capture's files and chain layers into t->parts: 0 or -1. */
static int rec_list(struct sbx_travel_rec *t)
{
    struct travel_parts *p = &t->parts;
    struct stat st;
    for (const char *const *o = own_files; *o; o++) {
        char path[SBX_PATH_MAX];
        if (snprintf(path, sizeof path, "%s/%s", t->dir, *o) >= (int)sizeof path)
            return -1;
        if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
            continue;
        snprintf(p->f[p->n].name, sizeof p->f[0].name, "%s", *o);
        snprintf(p->f[p->n++].path, sizeof p->f[0].path, "%s", path);
    }
    struct sbx_chain c;
    char cp[SBX_PATH_MAX + 16];
    snprintf(cp, sizeof cp, "%s/chain.json", t->dir);
    if (sbx_chain_read(cp, &c) < 0)
        return -1;
    size_t dl = strlen(t->dir);
    for (unsigned i = 0; i < c.n; i++) {
        char name[TRAVEL_NAME_MAX];
        if (strncmp(c.path[i], t->dir, dl) == 0 && c.path[i][dl] == '/')
            snprintf(name, sizeof name, "%.15s", c.path[i] + dl + 1); /* the capture's own disk */
        else
            snprintf(name, sizeof name, "layer%u", i);
        int k = find_part(p, name);
        if (k < 0) {
            if (p->n >= TRAVEL_FILES_MAX || !name_ok(name))
                return -1;
            k = (int)p->n++;
            snprintf(p->f[k].name, sizeof p->f[0].name, "%s", name);
            memcpy(p->f[k].path, c.path[i], sizeof p->f[k].path);
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
    struct timeval now = {0, 0};
    if (rec_list(t) < 0 || !(t->kick = evtimer_new(sp->base, rec_step, t)) || event_add(t->kick, &now) != 0) {
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
    struct travel_parts p;
    bool ok = snap_id_ok(id) && part && name_ok(part) && store_snap_get(sp->store, id, &row) == 0 &&
              strcmp(row.state, "ready") == 0 && strcmp(row.node, sp->sbx->node_id) == 0 &&
              parts_parse(row.parts, &p) == 0 && find_part(&p, part) >= 0;
    snprintf(what, sizeof what, "part %.16s of snapshot %.20s", part ? part : "", ok ? id : "(unknown)");
    if (ok) {
        sbx_capture_dir(sp, id, dir, sizeof dir);
        if (strncmp(part, "layer", 5) != 0) {
            snprintf(path, sizeof path, "%s/%s", dir, part);
        } else { /* the chain's layer, by this node's chain.json */
            struct sbx_chain c;
            unsigned i = (unsigned)atoi(part + 5);
            snprintf(path, sizeof path, "%s/chain.json", dir);
            if (sbx_chain_read(path, &c) == 0 && i < c.n)
                snprintf(path, sizeof path, "%s", c.path[i]);
            else
                path[0] = '\0';
        }
    }
    if (!path[0] || tpl_blob_serve(req, path, what) != 0)
        http_reply_error(req, 404, "not_found", "%s is not on this node", what);
}

/* ---- the fetching node ------------------------------------------------------------------ */

struct sbx_travel {
    struct sbx *s;
    sbx_travel_done done;
    char snap[STORE_ID_MAX];
    char node[STORE_ID_MAX];
    char tmp[SBX_PATH_MAX];       /* captures/.fetch-<snap>-<sandbox> */
    struct travel_parts parts;
    unsigned next_file;
    int64_t bytes;
    int64_t started_ms;
    struct tpl_blob *blob;
};

static void fetch_end(struct sbx_travel *t, const struct spaced_err *err)
{
    struct sbx *s = t->s;
    sbx_travel_done done = t->done;
    char q[400];
    if (err) {
        spaced_rm_rf(t->tmp);
        log_warn("snapshot.fetch", "snapshot=%s sandbox=%s source=%s result=failed code=%s bytes=%lld msg=%s",
                 t->snap, s->rec.id, t->node, err->code, (long long)t->bytes,
                 log_quote(err->message, q, sizeof q));
    } else {
        log_info("snapshot.fetch", "snapshot=%s sandbox=%s source=%s result=verified parts=%u bytes=%lld ms=%lld",
                 t->snap, s->rec.id, t->node, t->parts.n, (long long)t->bytes,
                 (long long)(spaced_now_ms() - t->started_ms));
    }
    s->travel = NULL;
    free(t);
    done(s, err);
}

/* Every part verified: chain.json with this node's paths, then the directory in place. */
static void fetch_publish(struct sbx_travel *t)
{
    struct spaced_err e = {0};
    char final[SBX_PATH_MAX - TRAVEL_NAME_MAX - 1], p[SBX_PATH_MAX + 32];
    sbx_capture_dir(t->s->sp, t->snap, final, sizeof final);
    struct sbx_chain c = {.n = t->parts.nchain};
    for (unsigned i = 0; i < t->parts.nchain; i++) {
        snprintf(c.path[i], sizeof c.path[i], "%s/%s", final, t->parts.f[t->parts.chain[i]].name);
        snprintf(c.format[i], sizeof c.format[i], "%s", t->parts.format[i]);
    }
    snprintf(p, sizeof p, "%s/chain.json", t->tmp);
    struct stat st;
    if (sbx_chain_write(p, &c) < 0)
        spaced_err_set(&e, 500, "host_io", "cannot write %s", p);
    else if (stat(final, &st) == 0) /* another create fetched it meanwhile: theirs is used */
        spaced_rm_rf(t->tmp);
    else if (rename(t->tmp, final) < 0)
        spaced_err_set(&e, 500, "host_io", "cannot rename %s to %s: %s", t->tmp, final, strerror(errno));
    fetch_end(t, e.status ? &e : NULL);
}

static void fetch_next(struct sbx_travel *t);

/* tpl_blob's blob_* codes in a snapshot's words (snapshot_digest_mismatch, ...). */
static void snapshot_code(const char *code, char *out, size_t cap)
{
    if (strncmp(code, "blob_", 5) == 0)
        snprintf(out, cap, "snapshot_%s", code + 5);
    else
        snprintf(out, cap, "%s", code);
}

static void on_part(void *arg, const struct spaced_err *err)
{
    struct sbx_travel *t = arg;
    t->blob = NULL;
    if (err) {
        struct spaced_err e;
        char code[sizeof e.code];
        snapshot_code(err->code, code, sizeof code);
        spaced_err_set(&e, err->status, code, "snapshot %s: %s", t->snap, err->message);
        fetch_end(t, &e);
        return;
    }
    char p[SBX_PATH_MAX + 32];
    snprintf(p, sizeof p, "%s/%s", t->tmp, t->parts.f[t->next_file].name);
    chmod(p, 0444); /* read-only like a capture taken here (its RAM file is mapped by every fork) */
    t->bytes += t->parts.f[t->next_file].size;
    t->next_file++;
    fetch_next(t);
}

/* Asks the holder for the next part: 0, or -1 with err (the create fails). */
static int start_part(struct sbx_travel *t, struct spaced_err *err)
{
    const struct travel_file *f = &t->parts.f[t->next_file];
    char target[128], dst[SBX_PATH_MAX + 32];
    snprintf(target, sizeof target, "/internal/snapshots/%s/parts/%s", t->snap, f->name);
    snprintf(dst, sizeof dst, "%s/%s", t->tmp, f->name);
    struct spaced *sp = t->s->sp;
    struct store_node n;
    if (store_node_get(sp->store, t->node, &n) != 0 || spaced_now_ms() - n.heartbeat_ms >= TRAVEL_SOURCE_DEAD_MS)
        return spaced_err_set(err, 503, "snapshot_source_unavailable",
                              "snapshot %s is only on node %s, which is not live", t->snap, t->node);
    char what[96];
    snprintf(what, sizeof what, "part %s of snapshot %s", f->name, t->snap);
    struct tpl_blob_req req = {.url = n.url, .target = target, .token = sp->opt.node_token,
                               .sha256 = f->sha256, .size = f->size, .dest = dst, .what = what,
                               .source = t->node, .timeout_s = TRAVEL_TIMEOUT_S};
    t->blob = tpl_blob_fetch(sp->base, &req, on_part, t, err);
    if (t->blob)
        return 0;
    struct spaced_err e = *err; /* not formatted into itself */
    char code[sizeof e.code];
    snapshot_code(e.code, code, sizeof code);
    spaced_err_set(err, e.status, code, "snapshot %s: %s", t->snap, e.message);
    return -1;
}

static void fetch_next(struct sbx_travel *t)
{
    struct spaced_err e;
    if (t->next_file >= t->parts.n)
        fetch_publish(t);
    else if (start_part(t, &e) < 0)
        fetch_end(t, &e);
}

int sbx_travel_need(struct sbx *s, sbx_travel_done done, struct spaced_err *err)
{
    struct spaced *sp = s->sp;
    char dir[SBX_PATH_MAX], p[SBX_PATH_MAX + 32];
    sbx_capture_dir(sp, s->rec.source, dir, sizeof dir);
    snprintf(p, sizeof p, "%s/snapshot.json", dir);
    if (access(p, F_OK) == 0 || !snap_id_ok(s->rec.source))
        return 0; /* here, or a fork's capture (never travels) */
    struct store_snap row;
    int rc = store_snap_get(sp->store, s->rec.source, &row);
    if (rc == STORE_NOTFOUND || (rc == 0 && (!row.node[0] || strcmp(row.node, sp->sbx->node_id) == 0)))
        return 0; /* gone, or ours: sbx_fork_source says what is missing */
    if (rc != 0)
        return spaced_err_set(err, 503, "store_unavailable", "reading snapshot %s: the store failed",
                              s->rec.source);
    struct sbx_travel *t = calloc(1, sizeof *t);
    if (!t)
        return spaced_err_set(err, 500, "internal", "out of memory");
    if (!row.parts[0] || parts_parse(row.parts, &t->parts) < 0) {
        free(t);
        return spaced_err_set(err, 503, "snapshot_not_transferable", "snapshot %s is on node %s and its "
                              "parts were not recorded (taken before snapshots travelled?): create from it "
                              "on that node", row.id, row.node);
    }
    t->s = s;
    t->done = done;
    t->started_ms = spaced_now_ms();
    snprintf(t->snap, sizeof t->snap, "%s", row.id);
    snprintf(t->node, sizeof t->node, "%s", row.node);
    char top[SBX_PATH_MAX - 2 * STORE_ID_MAX - 16];
    sbx_capture_dir(sp, NULL, top, sizeof top);
    snprintf(t->tmp, sizeof t->tmp, "%s/.fetch-%s-%s", top, row.id, s->rec.id);
    spaced_rm_rf(t->tmp);
    if (spaced_mkdir_p(t->tmp) < 0) {
        spaced_err_set(err, 500, "host_io", "cannot create %s: %s", t->tmp, strerror(errno));
        free(t);
        return -1;
    }
    int64_t total = 0;
    for (unsigned i = 0; i < t->parts.n; i++)
        total += t->parts.f[i].size;
    log_info("snapshot.fetch", "snapshot=%s sandbox=%s source=%s parts=%u bytes=%lld result=started", t->snap,
             s->rec.id, t->node, t->parts.n, (long long)total);
    s->travel = t;
    /* The first part is asked for now: a holder that is not live fails the create here. */
    if (start_part(t, err) < 0) {
        log_warn("snapshot.fetch", "snapshot=%s sandbox=%s source=%s result=failed code=%s", t->snap, s->rec.id,
                 t->node, err->code);
        spaced_rm_rf(t->tmp);
        s->travel = NULL;
        free(t);
        return -1;
    }
    return 1;
}

void sbx_travel_cancel(struct sbx *s)
{
    struct sbx_travel *t = s->travel;
    if (!t)
        return;
    tpl_blob_cancel(t->blob);
    spaced_rm_rf(t->tmp);
    s->travel = NULL;
    free(t);
}
