/* sbx_parts.c: a set of files that travels between the nodes of a cluster, named,
 * sized and hashed in the store (docs/multinode.md): a snapshot's capture (sbx_travel.c)
 * or a suspended or stopped sandbox's files (sbx_move.c).
 *
 * The record, JSON in a row:
 *   {"node": N, "runtime": R, "files": [{"name": F, "size": B, "sha256": H}, ...],
 *    "chain": [{"part": F, "format": "qcow2"|"raw"}, ...]}
 * where "node" (optional: a snapshot row has its own column) is the node holding the
 * files, "runtime" (optional) the VM runtime that saved the state among them (vm/
 * vm_sig.h: its snapshot.json's; absent for a stopped sandbox's disk and for states saved
 * before runtimes were recorded, which go anywhere as before): the control moves them,
 * and a node fetches them, only where that runtime runs; a file's name is one of a fixed
 * set (snapshot.json, state, mem, disk.qcow2, disk.raw, template, and creds: a moving
 * sandbox's credential rules, sbx_move.c) or layer<i> for the
 * i-th layer of a disk chain outside the set,
 * and "chain" lists the read-only layers a disk stands on, nearest first.
 *
 * Here: parsing with every value checked (only the row's values are trusted as limits),
 * hashing the files one after another on a worker thread (tpl_digest), and fetching them
 * from the holder one after another (tpl_blob: streamed, size and SHA-256 checked,
 * published only when both match). Prefix sbx_parts_. */
#include <errno.h>
#include <event2/event.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "daemon/template/tpl_blob.h"
#include "daemon/template/tpl_digest.h"
#include "log.h"
#include "sbx_internal.h"

#define PARTS_SIZE_MAX ((int64_t)1 << 42) /* 4 TiB: no memory or disk is larger */
/* A holder is a source while its heartbeat is younger than this (cluster.h's
 * CLUSTER_DEAD_MS; cluster/ sits above sandbox/, so the value is repeated, not included). */
#define PARTS_SOURCE_DEAD_MS 10000
#define PARTS_TIMEOUT_S 60 /* until a part's first byte, and between bytes */

static const char *const own_files[] = {"snapshot.json", "state", "mem", "disk.qcow2", "disk.raw", "template",
                                        "creds", NULL};

const char *const *sbx_parts_own_names(void) { return own_files; }

bool sbx_parts_name_ok(const char *n)
{
    for (const char *const *o = own_files; *o; o++)
        if (strcmp(n, *o) == 0)
            return true;
    size_t len = strlen(n);
    if (len < 6 || len > 7 || strncmp(n, "layer", 5) != 0 || strspn(n + 5, "0123456789") != len - 5)
        return false;
    return atoi(n + 5) < VM_DISK_BACKING_MAX && (len == 6 || n[5] != '0');
}

int sbx_parts_find(const struct sbx_parts *p, const char *name)
{
    for (unsigned i = 0; i < p->n; i++)
        if (strcmp(p->f[i].name, name) == 0)
            return (int)i;
    return -1;
}

int sbx_parts_parse(const char *s, struct sbx_parts *out)
{
    memset(out, 0, sizeof *out);
    json_t *j = s ? json_loads(s, 0, NULL) : NULL;
    json_t *files = json_object_get(j, "files"), *chain = json_object_get(j, "chain");
    json_t *node = json_object_get(j, "node"), *rt = json_object_get(j, "runtime");
    int rc = json_is_array(files) && json_is_array(chain) && json_array_size(files) <= SBX_PARTS_MAX &&
                     json_array_size(chain) >= 1 && json_array_size(chain) <= VM_DISK_BACKING_MAX &&
                     (!node || (json_is_string(node) && json_string_length(node) < sizeof out->node)) &&
                     (!rt || (json_is_string(rt) && vm_sig_valid(json_string_value(rt))))
                 ? 0 : -1;
    if (rc == 0 && node)
        snprintf(out->node, sizeof out->node, "%s", json_string_value(node));
    if (rc == 0 && rt)
        snprintf(out->runtime, sizeof out->runtime, "%s", json_string_value(rt));
    size_t i;
    json_t *e;
    json_array_foreach(rc == 0 ? files : NULL, i, e) {
        const char *name = json_string_value(json_object_get(e, "name"));
        const char *sha = json_string_value(json_object_get(e, "sha256"));
        json_t *size = json_object_get(e, "size");
        if (!name || !sbx_parts_name_ok(name) || sbx_parts_find(out, name) >= 0 || !sha ||
            !tpl_digest_valid(sha) || !json_is_integer(size) || json_integer_value(size) < 0 ||
            json_integer_value(size) > PARTS_SIZE_MAX) {
            rc = -1;
            break;
        }
        struct sbx_part *f = &out->f[out->n++];
        snprintf(f->name, sizeof f->name, "%s", name);
        snprintf(f->sha256, sizeof f->sha256, "%s", sha);
        f->size = json_integer_value(size);
    }
    json_array_foreach(rc == 0 ? chain : NULL, i, e) {
        const char *part = json_string_value(json_object_get(e, "part"));
        const char *fmt = json_string_value(json_object_get(e, "format"));
        int k = part ? sbx_parts_find(out, part) : -1;
        if (k < 0 || !fmt || (strcmp(fmt, "qcow2") != 0 && strcmp(fmt, "raw") != 0)) {
            rc = -1;
            break;
        }
        out->chain[out->nchain] = (unsigned)k;
        snprintf(out->format[out->nchain++], sizeof out->format[0], "%s", fmt);
    }
    json_decref(j);
    return rc;
}

char *sbx_parts_json(const struct sbx_parts *p)
{
    json_t *files = json_array(), *chain = json_array();
    for (unsigned i = 0; i < p->n; i++)
        json_array_append_new(files, json_pack("{s:s, s:I, s:s}", "name", p->f[i].name, "size",
                                               (json_int_t)p->f[i].size, "sha256", p->f[i].sha256));
    for (unsigned i = 0; i < p->nchain; i++)
        json_array_append_new(chain, json_pack("{s:s, s:s}", "part", p->f[p->chain[i]].name, "format",
                                               p->format[i]));
    json_t *j = json_pack("{s:o, s:o}", "files", files, "chain", chain);
    if (j && p->node[0])
        json_object_set_new(j, "node", json_string(p->node));
    if (j && p->runtime[0])
        json_object_set_new(j, "runtime", json_string(p->runtime));
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    return s;
}

void sbx_parts_runtime(const char *parts, char *out, size_t cap)
{
    struct sbx_parts p;
    snprintf(out, cap, "%s", parts && sbx_parts_parse(parts, &p) == 0 ? p.runtime : "");
}

int sbx_parts_add(struct sbx_parts *p, const char *name, const char *path)
{
    if (p->n >= SBX_PARTS_MAX || !sbx_parts_name_ok(name) || sbx_parts_find(p, name) >= 0 ||
        strlen(path) >= sizeof p->f[0].path)
        return -1;
    snprintf(p->f[p->n].name, sizeof p->f[0].name, "%s", name);
    snprintf(p->f[p->n++].path, sizeof p->f[0].path, "%s", path);
    return 0;
}

/* ---- hashing ---------------------------------------------------------------------------- */

struct sbx_parts_hash {
    struct spaced *sp;
    struct sbx_parts *parts;
    unsigned next_file;
    struct tpl_digest_job *job;
    struct event *kick;           /* the next step, from the loop (owned) */
    sbx_parts_hashed done;
    void *arg;
};

void sbx_parts_hash_cancel(struct sbx_parts_hash *h)
{
    if (!h)
        return;
    tpl_digest_job_free(h->job);
    if (h->kick)
        event_free(h->kick);
    free(h);
}

static void hash_end(struct sbx_parts_hash *h, const char *why)
{
    sbx_parts_hashed done = h->done;
    void *arg = h->arg;
    sbx_parts_hash_cancel(h);
    done(arg, why);
}

static void on_hashed(void *arg, int rc, int err, const char *hex, int64_t size)
{
    struct sbx_parts_hash *h = arg;
    struct sbx_part *f = &h->parts->f[h->next_file];
    h->job = NULL; /* done: tpl_digest frees its own job after this callback */
    if (rc != 0) {
        char why[SBX_PATH_MAX + 100];
        snprintf(why, sizeof why, "cannot hash %s: %s", f->path, strerror(err));
        hash_end(h, why);
        return;
    }
    snprintf(f->sha256, sizeof f->sha256, "%s", hex);
    f->size = size;
    h->next_file++;
    struct timeval now = {0, 0};
    if (event_add(h->kick, &now) != 0)
        hash_end(h, "cannot schedule the next hash");
}

/* Hashes the next part (worker thread; inline when no thread starts), or ends. */
static void hash_step(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct sbx_parts_hash *h = arg;
    if (h->next_file >= h->parts->n) {
        hash_end(h, NULL);
        return;
    }
    const char *path = h->parts->f[h->next_file].path;
    if ((h->job = tpl_digest_start(h->sp->base, path, on_hashed, h)))
        return;
    char hex[TPL_DIGEST_HEX];
    int64_t size = 0;
    int rc = tpl_digest_file(path, 0, hex, &size);
    on_hashed(h, rc, errno, hex, size);
}

struct sbx_parts_hash *sbx_parts_hash(struct spaced *sp, struct sbx_parts *p, sbx_parts_hashed done, void *arg)
{
    struct sbx_parts_hash *h = calloc(1, sizeof *h);
    if (!h)
        return NULL;
    *h = (struct sbx_parts_hash){.sp = sp, .parts = p, .done = done, .arg = arg};
    struct timeval now = {0, 0};
    if (!(h->kick = evtimer_new(sp->base, hash_step, h)) || event_add(h->kick, &now) != 0) {
        sbx_parts_hash_cancel(h);
        return NULL;
    }
    return h;
}

/* ---- fetching --------------------------------------------------------------------------- */

struct sbx_parts_fetch {
    struct spaced *sp;
    struct sbx_parts parts;
    char node[STORE_ID_MAX];
    char route[128];              /* the holder's route, the part's name appended */
    char dir[SBX_PATH_MAX];       /* where the parts go, by their names */
    char what[96];                /* "snapshot sn...", for messages */
    char code[16];                /* "snapshot": codes snapshot_digest_mismatch... */
    unsigned next_file;
    int64_t bytes;
    struct tpl_blob *blob;
    sbx_parts_fetched done;
    void *arg;
};

/* tpl_blob's blob_* codes in the caller's words (snapshot_digest_mismatch, ...). */
static void reword(const struct sbx_parts_fetch *f, const struct spaced_err *in, struct spaced_err *out)
{
    struct spaced_err e = *in; /* not formatted into itself */
    char code[sizeof e.code];
    if (strncmp(e.code, "blob_", 5) == 0)
        snprintf(code, sizeof code, "%.15s_%.31s", f->code, e.code + 5);
    else
        snprintf(code, sizeof code, "%s", e.code);
    spaced_err_set(out, e.status, code, "%s: %s", f->what, e.message);
}

static int start_part(struct sbx_parts_fetch *f, struct spaced_err *err);

static void fetch_end(struct sbx_parts_fetch *f, const struct spaced_err *err)
{
    sbx_parts_fetched done = f->done;
    void *arg = f->arg;
    int64_t bytes = f->bytes;
    free(f);
    done(arg, err, bytes);
}

static void on_part(void *arg, const struct spaced_err *err)
{
    struct sbx_parts_fetch *f = arg;
    f->blob = NULL;
    struct spaced_err e;
    if (err) {
        reword(f, err, &e);
        fetch_end(f, &e);
        return;
    }
    char p[SBX_PATH_MAX + 32];
    snprintf(p, sizeof p, "%s/%s", f->dir, f->parts.f[f->next_file].name);
    /* Read-only like a capture taken here (its RAM file is mapped by every fork); credential
     * rules hold secrets: their owner's only, like the network records they go into. */
    chmod(p, strcmp(f->parts.f[f->next_file].name, "creds") == 0 ? 0600 : 0444);
    f->bytes += f->parts.f[f->next_file].size;
    f->next_file++;
    if (f->next_file >= f->parts.n)
        fetch_end(f, NULL);
    else if (start_part(f, &e) < 0)
        fetch_end(f, &e);
}

/* Asks the holder for the next part: 0, or -1 with err. */
static int start_part(struct sbx_parts_fetch *f, struct spaced_err *err)
{
    const struct sbx_part *p = &f->parts.f[f->next_file];
    char target[192], dst[SBX_PATH_MAX + 32];
    snprintf(target, sizeof target, "%s%s", f->route, p->name);
    snprintf(dst, sizeof dst, "%s/%s", f->dir, p->name);
    struct store_node n;
    if (store_node_get(f->sp->store, f->node, &n) != 0 ||
        spaced_now_ms() - n.heartbeat_ms >= PARTS_SOURCE_DEAD_MS)
    {
        spaced_err_set(err, 503, "source_unavailable", "%s is only on node %s, which is not live", f->what,
                       f->node);
        snprintf(err->code, sizeof err->code, "%s_source_unavailable", f->code);
        return -1;
    }
    char what[128];
    snprintf(what, sizeof what, "part %s of %s", p->name, f->what);
    struct tpl_blob_req req = {.url = n.url, .target = target, .token = f->sp->opt.node_token,
                               .sha256 = p->sha256, .size = p->size, .dest = dst, .what = what,
                               .source = f->node, .timeout_s = PARTS_TIMEOUT_S};
    struct spaced_err e;
    f->blob = tpl_blob_fetch(f->sp->base, &req, on_part, f, &e);
    if (f->blob)
        return 0;
    reword(f, &e, err);
    return -1;
}

struct sbx_parts_fetch *sbx_parts_fetch(struct spaced *sp, const struct sbx_parts *p,
                                        const struct sbx_parts_from *from, sbx_parts_fetched done, void *arg,
                                        struct spaced_err *err)
{
    struct sbx_parts_fetch *f = calloc(1, sizeof *f);
    if (!f) {
        spaced_err_set(err, 500, "internal", "out of memory");
        return NULL;
    }
    *f = (struct sbx_parts_fetch){.sp = sp, .parts = *p, .done = done, .arg = arg};
    snprintf(f->node, sizeof f->node, "%s", from->node);
    snprintf(f->route, sizeof f->route, "%s", from->route);
    snprintf(f->dir, sizeof f->dir, "%s", from->dir);
    snprintf(f->what, sizeof f->what, "%s", from->what);
    snprintf(f->code, sizeof f->code, "%s", from->code);
    if (p->n == 0) {
        free(f);
        spaced_err_set(err, 500, "internal", "%s has no parts", from->what);
        return NULL;
    }
    /* The first part is asked for now: a holder that is not live fails here. */
    if (start_part(f, err) < 0) {
        free(f);
        return NULL;
    }
    return f;
}

void sbx_parts_fetch_cancel(struct sbx_parts_fetch *f)
{
    if (!f)
        return;
    tpl_blob_cancel(f->blob);
    free(f);
}

/* ---- serving ---------------------------------------------------------------------------- */

int sbx_parts_layer_path(const char *chain_file, const char *part, char *out, size_t cap)
{
    struct sbx_chain c;
    unsigned i = (unsigned)atoi(part + 5);
    if (strncmp(part, "layer", 5) != 0 || sbx_chain_read(chain_file, &c) != 0 || i >= c.n)
        return -1;
    snprintf(out, cap, "%s", c.path[i]);
    return 0;
}
