/* tpl_fetch.c: templates that travel between the nodes of a cluster (tpl.h, "templates
 * that travel"). A template built on one node has its image's SHA-256, size, template.json
 * and the nodes holding it in the store's templates row (tpl_build.c). A node asked for a
 * sandbox of a template it lacks fetches the image from a live node that has it, over the
 * node API (GET /internal/templates/<name>/image, behind the node token), as a blob
 * (tpl_blob.h: hashed and written on a worker thread) named by its digest,
 * <data>/images/sha256-<hex>.ext4, published only when its size and SHA-256 are the
 * recorded ones; then the template's template.json: from then on it is a template built
 * here. Creates on the node waiting for the same template share one fetch. An image is
 * never written over: a template deleted and built again under the same name has another
 * digest, hence another file, and sandboxes of the old one keep theirs. */
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/http/http.h"
#include "daemon/store/store.h"
#include "tpl_blob.h"
#include "log.h"
#include "tpl_digest.h"
#include "tpl_internal.h"

/* A node is a source while its heartbeat is younger than this (cluster.h's
 * CLUSTER_DEAD_MS; the template module sits below cluster/). */
#define FETCH_SOURCE_DEAD_MS 10000
/* Until the first byte, and between bytes. */
#define FETCH_TIMEOUT_S 60

const char *tpl_self_node(const struct spaced *sp)
{
    /* Only a node daemon has an id and an advertised address (cluster.c checks both). */
    return sp->opt.node_id && sp->opt.advertise ? sp->opt.node_id : "";
}

bool tpl_nodes_next(const char **cursor, char *id, size_t cap)
{
    const char *p = *cursor;
    while (p && *p) {
        size_t len = strcspn(p, ",");
        const char *at = p;
        p += len;
        if (*p == ',')
            p++;
        if (len && len < cap) {
            memcpy(id, at, len);
            id[len] = '\0';
            *cursor = p;
            return true;
        }
    }
    *cursor = p;
    return false;
}

bool tpl_nodes_have(const char *nodes, const char *id)
{
    char one[STORE_ID_MAX];
    for (const char *p = nodes; id[0] && tpl_nodes_next(&p, one, sizeof one);)
        if (strcmp(one, id) == 0)
            return true;
    return false;
}

/* ---- lookup ------------------------------------------------------------------------------ */

int tpl_lookup_fetchable(struct spaced *sp, const char *tenant, const char *name, struct tpl_info *out,
                         struct spaced_err *err)
{
    if (tpl_lookup(sp, tenant, name, out, err) == 0)
        return 0;
    const char *self = tpl_self_node(sp);
    struct store_tpl row;
    if (!self[0] || !name || !tpl_name_valid(name) || store_tpl_get(sp->store, name, &row) != 0)
        return -1;
    int rc = -1;
    json_t *meta = row.meta ? json_loads(row.meta, 0, NULL) : NULL;
    if (strcmp(row.state, "ready") == 0 && (!tenant || strcmp(row.tenant, tenant) == 0) &&
        tpl_digest_valid(row.digest) && row.nodes[0] && row.size_bytes > 0 && json_is_object(meta) &&
        !tpl_nodes_have(row.nodes, self)) {
        memset(out, 0, sizeof *out);
        snprintf(out->name, sizeof out->name, "%s", name);
        snprintf(out->dir, sizeof out->dir, "%s/templates/%s", sp->opt.data_dir, name);
        tpl_image_path(sp, row.digest, out->rootfs, sizeof out->rootfs);
        snprintf(out->tenant, sizeof out->tenant, "%s", row.tenant);
        tpl_meta_fill(out, meta);
        out->remote = true;
        out->size_bytes = row.size_bytes;
        rc = 0;
    }
    json_decref(meta);
    store_tpl_clear(&row);
    return rc;
}

/* ---- fetching ------------------------------------------------------------------------------ */

struct waiter {
    struct waiter *next;
    tpl_fetch_done done;
    void *arg;
};

struct tpl_fetch {
    struct tpl_fetch *next;       /* registry list */
    struct spaced *sp;
    char name[64];
    char digest[TPL_DIGEST_HEX];  /* the recorded one */
    int64_t size;                 /* the recorded size: more bytes are refused */
    char *meta;                   /* template.json to publish (owned) */
    char source[STORE_ID_MAX];
    char url[256];
    int64_t started_ms;
    struct tpl_blob *blob;        /* the image's transfer (NULL once over) */
    struct waiter *waiters;
    bool ended;
};

/* Unlinks f from the registry. */
static void fetch_unlink(struct tpl_fetch *f)
{
    for (struct tpl_fetch **pp = &f->sp->tpl->fetches; *pp; pp = &(*pp)->next)
        if (*pp == f) {
            *pp = f->next;
            break;
        }
    f->next = NULL;
}

static void fetch_free(struct tpl_fetch *f)
{
    fetch_unlink(f);
    tpl_blob_cancel(f->blob);
    while (f->waiters) {
        struct waiter *w = f->waiters;
        f->waiters = w->next;
        free(w);
    }
    free(f->meta);
    free(f);
}

void tpl_fetches_free(struct tpl_registry *r)
{
    while (r->fetches) {
        fetch_free(r->fetches); /* its waiters are dropped: no callback at exit */
    }
}

/* Writes the template's template.json (the row's, with the digest it was verified
 * against), which makes the template present here: its image is the blob. */
static int publish_meta(struct spaced *sp, const char *name, const char *meta_json, const char *digest)
{
    char dir[TPL_PATH_MAX], meta[TPL_PATH_MAX + 32], meta_tmp[TPL_PATH_MAX + 48];
    snprintf(dir, sizeof dir, "%s/templates/%s", sp->opt.data_dir, name);
    snprintf(meta, sizeof meta, "%s/template.json", dir);
    snprintf(meta_tmp, sizeof meta_tmp, "%s/template.json.fetch", dir);
    json_t *j = json_loads(meta_json, 0, NULL);
    int rc = json_is_object(j) && json_object_set_new(j, "sha256", json_string(digest)) == 0 &&
                     spaced_mkdir_p(dir) == 0 && json_dump_file(j, meta_tmp, JSON_INDENT(2)) == 0 &&
                     rename(meta_tmp, meta) == 0
                 ? 0
                 : -1;
    json_decref(j);
    if (rc != 0)
        unlink(meta_tmp);
    return rc;
}

/* This node holds the image now: it becomes a source for others too. */
static void record_holder(struct spaced *sp, const char *name, const char *digest)
{
    struct store_tpl row;
    const char *self = tpl_self_node(sp);
    if (store_tpl_get(sp->store, name, &row) != 0)
        return;
    size_t len = strlen(row.nodes);
    if (strcmp(row.digest, digest) == 0 && !tpl_nodes_have(row.nodes, self) &&
        len + 1 + strlen(self) < sizeof row.nodes) {
        snprintf(row.nodes + len, sizeof row.nodes - len, "%s%s", len ? "," : "", self);
        if (store_tpl_put(sp->store, &row) != 0)
            log_warn("template.fetch", "template=%s msg=\"cannot record this node as a holder: %s\"", name,
                     store_errmsg(sp->store));
    }
    store_tpl_clear(&row);
}

/* The blob layer's codes, said of a template image. */
static const char *template_code(const char *code)
{
    if (strcmp(code, "blob_digest_mismatch") == 0)
        return "template_digest_mismatch";
    if (strcmp(code, "blob_fetch_failed") == 0)
        return "template_fetch_failed";
    if (strcmp(code, "blob_source_unavailable") == 0)
        return "template_source_unavailable";
    return code;
}

/* The transfer is over (err NULL: the blob is verified at its path): the template is
 * published, every waiter told, f freed. */
static void on_blob_done(void *arg, const struct spaced_err *berr)
{
    struct tpl_fetch *f = arg;
    f->blob = NULL; /* freed by the blob layer after this returns */
    f->ended = true;
    struct spaced_err fail = {0};
    if (berr) {
        fail = *berr;
        snprintf(fail.code, sizeof fail.code, "%s", template_code(berr->code));
    } else if (publish_meta(f->sp, f->name, f->meta, f->digest) != 0) {
        spaced_err_set(&fail, 500, "host_io", "template %s: cannot write its template.json: %s", f->name,
                       strerror(errno));
    }
    long long ms = (long long)(spaced_now_ms() - f->started_ms);
    if (fail.status) {
        char q[400];
        log_warn("template.fetch", "template=%s source=%s result=failed code=%s ms=%lld msg=%s", f->name,
                 f->source, fail.code, ms, log_quote(fail.message, q, sizeof q));
    } else {
        log_info("template.fetch", "template=%s source=%s result=verified sha256=%s bytes=%lld ms=%lld", f->name,
                 f->source, f->digest, (long long)f->size, ms);
        record_holder(f->sp, f->name, f->digest);
    }
    /* Out of the registry before the waiters hear: one that creates again starts anew. */
    fetch_unlink(f);
    struct waiter *w = f->waiters;
    f->waiters = NULL;
    while (w) {
        struct waiter *n = w->next;
        w->done(w->arg, fail.status ? &fail : NULL);
        free(w);
        w = n;
    }
    fetch_free(f);
}

/* The first live node of the row's holders other than this one: 0 with f->source and
 * f->url, or -1 with err. */
static int pick_source(struct tpl_fetch *f, const char *nodes, struct spaced_err *err)
{
    const char *self = tpl_self_node(f->sp);
    int64_t now = spaced_now_ms();
    char id[STORE_ID_MAX];
    struct store_node n;
    for (const char *p = nodes; tpl_nodes_next(&p, id, sizeof id);)
        if (strcmp(id, self) != 0 && store_node_get(f->sp->store, id, &n) == 0 &&
            now - n.heartbeat_ms < FETCH_SOURCE_DEAD_MS) {
            snprintf(f->source, sizeof f->source, "%s", id);
            snprintf(f->url, sizeof f->url, "%s", n.url);
            return 0;
        }
    return spaced_err_set(err, 503, "template_source_unavailable",
                          "template %s: its image is only on node(s) %s, none of them live; it cannot be fetched "
                          "until one reports again", f->name, nodes);
}

/* A new fetch of template `name` from its row: f (in the registry), 1 when the image
 * was already here under its digest (published now, no fetch), or -1 with err. */
static int fetch_new(struct spaced *sp, const char *name, struct tpl_fetch **out, struct spaced_err *err)
{
    struct store_tpl row;
    if (store_tpl_get(sp->store, name, &row) != 0)
        return spaced_err_set(err, 400, "unknown_template", "template \"%s\" does not exist", name);
    struct tpl_fetch *f = calloc(1, sizeof *f);
    if (!f) {
        store_tpl_clear(&row);
        return spaced_err_set(err, 500, "internal", "out of memory");
    }
    f->sp = sp;
    f->started_ms = spaced_now_ms();
    snprintf(f->name, sizeof f->name, "%s", name);
    snprintf(f->digest, sizeof f->digest, "%s", row.digest);
    f->size = row.size_bytes;
    f->meta = row.meta;
    row.meta = NULL;
    char nodes[STORE_NODES_MAX];
    snprintf(nodes, sizeof nodes, "%s", row.nodes);
    bool usable = strcmp(row.state, "ready") == 0 && tpl_digest_valid(row.digest) && row.size_bytes > 0 && f->meta;
    store_tpl_clear(&row);
    char dest[TPL_PATH_MAX], target[128];
    struct stat st;
    int rc = usable ? 0
                    : spaced_err_set(err, 400, "unknown_template",
                                     "template %s has no recorded image to fetch (not ready, or built before "
                                     "images were hashed)", name);
    if (rc == 0)
        tpl_image_path(sp, f->digest, dest, sizeof dest);
    if (rc == 0 && stat(dest, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == f->size) {
        /* These bytes are here already (only ever a verified blob has this name): the
         * template needs only its template.json. */
        rc = publish_meta(sp, name, f->meta, f->digest) == 0
                 ? 1
                 : spaced_err_set(err, 500, "host_io", "template %s: cannot write its template.json: %s", name,
                                  strerror(errno));
        if (rc == 1)
            log_info("template.fetch", "template=%s result=present sha256=%s", name, f->digest);
    }
    if (rc == 0)
        rc = pick_source(f, nodes, err);
    if (rc == 0) {
        char dir[TPL_PATH_MAX + 16];
        snprintf(dir, sizeof dir, "%s/images", sp->opt.data_dir);
        if (spaced_mkdir_p(dir) != 0)
            rc = spaced_err_set(err, 500, "host_io", "template %s: cannot create %s: %s", name, dir,
                                strerror(errno));
    }
    if (rc == 0) {
        char what[96];
        snprintf(target, sizeof target, "/internal/templates/%s/image", name);
        snprintf(what, sizeof what, "template %s's image", name);
        struct tpl_blob_req req = {.url = f->url, .target = target, .token = sp->opt.node_token,
                                   .sha256 = f->digest, .size = f->size, .dest = dest, .what = what,
                                   .source = f->source, .timeout_s = FETCH_TIMEOUT_S};
        if (!(f->blob = tpl_blob_fetch(sp->base, &req, on_blob_done, f, err))) {
            snprintf(err->code, sizeof err->code, "%s", template_code(err->code));
            rc = -1;
        }
    }
    if (rc != 0) {
        fetch_free(f);
        return rc;
    }
    log_info("template.fetch", "template=%s source=%s url=%s sha256=%s size_bytes=%lld result=started", name,
             f->source, f->url, f->digest, (long long)f->size);
    f->next = sp->tpl->fetches;
    sp->tpl->fetches = f;
    *out = f;
    return 0;
}

int tpl_fetch(struct spaced *sp, const char *name, tpl_fetch_done done, void *arg, struct spaced_err *err)
{
    struct tpl_info t;
    if (tpl_lookup(sp, NULL, name, &t, NULL) == 0)
        return 1;
    struct tpl_fetch *f = sp->tpl->fetches;
    while (f && (f->ended || strcmp(f->name, name) != 0))
        f = f->next;
    if (!f) {
        int rc = fetch_new(sp, name, &f, err);
        if (rc != 0)
            return rc;
    }
    struct waiter *w = calloc(1, sizeof *w);
    if (!w)
        return spaced_err_set(err, 500, "internal", "out of memory");
    w->done = done;
    w->arg = arg;
    w->next = f->waiters;
    f->waiters = w;
    return 0;
}

void tpl_fetch_cancel(struct spaced *sp, void *arg)
{
    for (struct tpl_fetch *f = sp->tpl ? sp->tpl->fetches : NULL; f; f = f->next)
        for (struct waiter **pp = &f->waiters; *pp;)
            if ((*pp)->arg == arg) {
                struct waiter *w = *pp;
                *pp = w->next;
                free(w);
            } else {
                pp = &(*pp)->next;
            }
}

/* ---- copies of templates deleted or built again elsewhere ---------------------------------- */

struct copy_use {
    const char *name;
    const char *dir;
    unsigned n;
};

static void count_copy_user(const char *template_name, const char *const *layers, unsigned n, void *arg)
{
    struct copy_use *u = arg;
    size_t dl = strlen(u->dir);
    bool uses = strcmp(template_name, u->name) == 0;
    for (unsigned i = 0; i < n && !uses; i++)
        uses = strncmp(layers[i], u->dir, dl) == 0 && layers[i][dl] == '/';
    u->n += uses;
}

static bool fetching(struct spaced *sp, const char *name)
{
    for (struct tpl_fetch *f = sp->tpl->fetches; f; f = f->next)
        if (!f->ended && strcmp(f->name, name) == 0)
            return true;
    return false;
}

/* Whether the copy of `name` here, whose template.json records `local` (a digest), is
 * one the store no longer names: its row is gone or deleted, or ready with another
 * image. A store that cannot be read says no. */
static bool copy_stale(struct spaced *sp, const char *name, const char *local)
{
    struct store_tpl row;
    int rc = store_tpl_get(sp->store, name, &row);
    if (rc == STORE_NOTFOUND)
        return true;
    if (rc != 0)
        return false;
    bool stale = strcmp(row.state, "deleted") == 0 ||
                 (strcmp(row.state, "ready") == 0 && strcmp(row.digest, local) != 0);
    store_tpl_clear(&row);
    return stale;
}

void tpl_copies_sweep(struct spaced *sp)
{
    if (!tpl_self_node(sp)[0])
        return; /* a single host's delete removes its own files */
    char tdir[TPL_PATH_MAX];
    snprintf(tdir, sizeof tdir, "%s/templates", sp->opt.data_dir);
    DIR *dp = opendir(tdir);
    struct dirent *e;
    while (dp && (e = readdir(dp))) {
        struct tpl_info bt;
        if (!tpl_name_valid(e->d_name) || tpl_builtin_peek(sp, e->d_name, &bt) || fetching(sp, e->d_name))
            continue;
        char dir[TPL_PATH_MAX + 80], meta[TPL_PATH_MAX + 100];
        snprintf(dir, sizeof dir, "%s/%.64s", tdir, e->d_name);
        snprintf(meta, sizeof meta, "%s/template.json", dir);
        json_t *j = json_load_file(meta, 0, NULL);
        char local[TPL_DIGEST_HEX] = "";
        const char *d = json_string_value(json_object_get(j, "sha256"));
        if (tpl_digest_valid(d))
            snprintf(local, sizeof local, "%s", d);
        json_decref(j);
        if (!local[0] || !copy_stale(sp, e->d_name, local))
            continue; /* built before digests (a single host's), or current */
        struct copy_use u = {e->d_name, dir, 0};
        tpl_users_each(sp, count_copy_user, &u);
        if (u.n) {
            log_info("template.gc", "template=%s copy=stale action=keep sandboxes=%u", e->d_name, u.n);
            continue; /* removed when the last one goes (tpl_user_gone sweeps again) */
        }
        log_info("template.gc", "template=%s sha256=%s copy=stale action=remove", e->d_name, local);
        tpl_snapshots_forget(sp, e->d_name);
        spaced_rm_rf(dir);
    }
    if (dp)
        closedir(dp);
}

/* ---- serving (the node API) ---------------------------------------------------------------- */

void tpl_image_serve(struct spaced *sp, struct http_req *req, const char *name)
{
    /* Only another node asks: it presents the node token. Anyone else learns nothing,
     * not even whether the template exists (a node daemon's own guard answers 403
     * before this; a control or a single host has no such route for clients). */
    if (!tpl_blob_token_ok(req, sp->opt.node_token)) {
        http_reply_error(req, 404, "not_found", "no route for %s %s", http_req_method(req), http_req_path(req));
        return;
    }
    /* What tpl_lookup finds is the image whose digest the row records (a stale copy of
     * an earlier template of that name is not): its digest-named file. */
    struct tpl_info t;
    char what[96];
    snprintf(what, sizeof what, "template %.64s image", name);
    if (tpl_lookup(sp, NULL, name, &t, NULL) != 0 || t.builtin || tpl_blob_serve(req, t.rootfs, what) != 0)
        http_reply_error(req, 404, "not_found", "template %.64s has no image on this node", name);
}
