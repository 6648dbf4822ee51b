/* tpl_fetch.c: templates that travel between the nodes of a cluster (tpl.h, "templates
 * that travel"). A template built on one node has its image's SHA-256, size, template.json
 * and the nodes holding it in the store's templates row (tpl_build.c). A node asked for a
 * sandbox of a template it lacks fetches the image from a live node that has it, over the
 * node API (GET /internal/templates/<name>/image, behind the node token), streams it to a
 * temporary file in the template's directory while hashing it, and publishes it only when
 * its size and SHA-256 are the recorded ones (template.json first, the image last, as a
 * build does): from then on it is a template built here. Creates on the node waiting for
 * the same template share one fetch. */
#include <errno.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdarg.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/http/http.h"
#include "daemon/store/store.h"
#include "http_hdr.h"
#include "log.h"
#include "tpl_digest.h"
#include "tpl_internal.h"

/* A node is a source while its heartbeat is younger than this (cluster.h's
 * CLUSTER_DEAD_MS; the template module sits below cluster/). */
#define FETCH_SOURCE_DEAD_MS 10000
/* Until the first byte, and between bytes. */
#define FETCH_TIMEOUT_S 60
#define SERVE_CHUNK (64 * 1024)
#define SERVE_PENDING_MAX (1u << 20)

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
        snprintf(out->rootfs, sizeof out->rootfs, "%s/rootfs.ext4", out->dir);
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
    char dir[TPL_PATH_MAX];
    char tmp[TPL_PATH_MAX + 32];
    int fd;
    int64_t got;
    int64_t started_ms;
    struct tpl_digest *hash;
    struct evhttp_connection *conn;
    struct evhttp_request *out;   /* owned by conn once made */
    struct waiter *waiters;
    struct event *reap;           /* frees f from the loop once ended (owned) */
    struct spaced_err fail;       /* the first failure (status 0: none) */
    bool ended;
};

/* Unlinks f from the registry and frees it (not from inside an evhttp callback). */
static void fetch_free(struct tpl_fetch *f)
{
    for (struct tpl_fetch **pp = &f->sp->tpl->fetches; *pp; pp = &(*pp)->next)
        if (*pp == f) {
            *pp = f->next;
            break;
        }
    if (f->conn)
        evhttp_connection_free(f->conn);
    if (f->reap)
        event_free(f->reap); /* pending or not: a fetch freed at exit is never reaped twice */
    if (f->fd >= 0)
        close(f->fd);
    if (f->tmp[0])
        unlink(f->tmp);
    tpl_digest_free(f->hash);
    while (f->waiters) {
        struct waiter *w = f->waiters;
        f->waiters = w->next;
        free(w);
    }
    free(f->meta);
    free(f);
}

static void fetch_free_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    fetch_free(arg);
}

void tpl_fetches_free(struct tpl_registry *r)
{
    while (r->fetches) {
        fetch_free(r->fetches); /* its waiters are dropped: no callback at exit */
    }
}

static void fetch_failf(struct tpl_fetch *f, int status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void fetch_failf(struct tpl_fetch *f, int status, const char *code, const char *fmt, ...)
{
    if (f->fail.status)
        return;
    char msg[sizeof f->fail.message];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    spaced_err_set(&f->fail, status, code, "%s", msg);
}

/* Writes template.json (from the row) then renames the verified image into place. */
static int publish(struct tpl_fetch *f)
{
    char meta[TPL_PATH_MAX + 32], meta_tmp[TPL_PATH_MAX + 48], final[TPL_PATH_MAX + 32];
    snprintf(meta, sizeof meta, "%s/template.json", f->dir);
    snprintf(meta_tmp, sizeof meta_tmp, "%s/template.json.fetch", f->dir);
    snprintf(final, sizeof final, "%s/rootfs.ext4", f->dir);
    json_t *j = json_loads(f->meta, 0, NULL);
    int rc = j && json_dump_file(j, meta_tmp, JSON_INDENT(2)) == 0 && rename(meta_tmp, meta) == 0 &&
                     fsync(f->fd) == 0 && rename(f->tmp, final) == 0
                 ? 0
                 : -1;
    json_decref(j);
    if (rc == 0)
        f->tmp[0] = '\0'; /* published: not unlinked */
    else
        unlink(meta_tmp);
    return rc;
}

/* This node holds the image now: it becomes a source for others too. */
static void record_holder(struct tpl_fetch *f)
{
    struct store_tpl row;
    const char *self = tpl_self_node(f->sp);
    if (store_tpl_get(f->sp->store, f->name, &row) != 0)
        return;
    size_t len = strlen(row.nodes);
    if (strcmp(row.digest, f->digest) == 0 && !tpl_nodes_have(row.nodes, self) &&
        len + 1 + strlen(self) < sizeof row.nodes) {
        snprintf(row.nodes + len, sizeof row.nodes - len, "%s%s", len ? "," : "", self);
        if (store_tpl_put(f->sp->store, &row) != 0)
            log_warn("template.fetch", "template=%s msg=\"cannot record this node as a holder: %s\"", f->name,
                     store_errmsg(f->sp->store));
    }
    store_tpl_clear(&row);
}

/* The fetch is over (f->fail says how): every waiter is told, then f goes. */
static void fetch_end(struct tpl_fetch *f)
{
    if (f->ended)
        return;
    f->ended = true;
    char got[TPL_DIGEST_HEX] = "";
    if (!f->fail.status) {
        tpl_digest_final(f->hash, got);
        f->hash = NULL;
        if (f->got != f->size)
            fetch_failf(f, 502, "template_fetch_failed",
                        "template %s: node %s sent %lld bytes of its image, %lld were recorded", f->name,
                        f->source, (long long)f->got, (long long)f->size);
        else if (strcmp(got, f->digest) != 0)
            fetch_failf(f, 502, "template_digest_mismatch",
                        "template %s: the image fetched from node %s has SHA-256 %.16s..., not the "
                        "recorded %.16s...; it was discarded (no VM used it)", f->name, f->source, got, f->digest);
        else if (publish(f) != 0)
            fetch_failf(f, 500, "host_io", "template %s: cannot publish the fetched image in %s: %s", f->name,
                        f->dir, strerror(errno));
    }
    long long ms = (long long)(spaced_now_ms() - f->started_ms);
    if (f->fail.status) {
        char q[400];
        log_warn("template.fetch", "template=%s source=%s result=failed code=%s bytes=%lld ms=%lld msg=%s",
                 f->name, f->source, f->fail.code, (long long)f->got, ms,
                 log_quote(f->fail.message, q, sizeof q));
    } else {
        log_info("template.fetch", "template=%s source=%s result=verified sha256=%s bytes=%lld ms=%lld", f->name,
                 f->source, f->digest, (long long)f->got, ms);
        record_holder(f);
    }
    /* Nothing unverified stays (a waiter that creates again starts a new fetch, which
     * must find neither this file nor this fetch: `ended` hides it). */
    close(f->fd);
    f->fd = -1;
    if (f->tmp[0])
        unlink(f->tmp);
    f->tmp[0] = '\0';
    struct waiter *w = f->waiters;
    f->waiters = NULL;
    while (w) {
        struct waiter *n = w->next;
        w->done(w->arg, f->fail.status ? &f->fail : NULL);
        free(w);
        w = n;
    }
    /* evhttp's connection is not freed inside its own callback: from the loop. */
    struct timeval now = {0, 0};
    if (!f->reap || event_add(f->reap, &now) != 0)
        log_warn("template.fetch", "template=%s msg=\"cannot schedule the fetch's end: kept until exit\"", f->name);
}

static void on_chunk(struct evhttp_request *req, void *arg)
{
    struct tpl_fetch *f = arg;
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    bool ok = evhttp_request_get_response_code(req) == 200; /* an error's body is no image */
    char buf[SERVE_CHUNK];
    int n;
    while ((n = evbuffer_remove(in, buf, sizeof buf)) > 0) {
        if (f->fail.status || !ok)
            continue; /* drained, not kept */
        if (f->got + n > f->size) {
            fetch_failf(f, 502, "template_fetch_failed",
                        "template %s: node %s sent more than the recorded %lld bytes of its image", f->name,
                        f->source, (long long)f->size);
            continue;
        }
        tpl_digest_update(f->hash, buf, (size_t)n);
        for (int off = 0; off < n;) {
            ssize_t w = write(f->fd, buf + off, (size_t)(n - off));
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0) {
                fetch_failf(f, 500, "host_io", "template %s: cannot write %s: %s", f->name, f->tmp,
                            strerror(errno));
                break;
            }
            off += (int)w;
        }
        f->got += n;
    }
}

static void on_done(struct evhttp_request *req, void *arg)
{
    struct tpl_fetch *f = arg;
    f->out = NULL;
    int status = req ? evhttp_request_get_response_code(req) : 0;
    if (req && status == 200)
        on_chunk(req, f);
    if (status == 0)
        fetch_failf(f, 502, "template_source_unavailable",
                    "template %s: node %s (%s), which holds its image, did not answer", f->name, f->source, f->url);
    else if (status != 200)
        fetch_failf(f, 502, "template_fetch_failed", "template %s: node %s answered %d for its image", f->name,
                    f->source, status);
    fetch_end(f);
}

/* The first live node of the row's holders other than this one: 0 with f->source and
 * f->url, or -1 with f->fail. */
static int pick_source(struct tpl_fetch *f, const char *nodes)
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
    return spaced_err_set(&f->fail, 503, "template_source_unavailable",
                          "template %s: its image is only on node(s) %s, none of them live; it cannot be fetched "
                          "until one reports again", f->name, nodes);
}

/* Connects to the source and asks for the image: 0, or -1 with f->fail. */
static int fetch_send(struct tpl_fetch *f)
{
    struct evhttp_uri *u = evhttp_uri_parse(f->url);
    const char *host = u ? evhttp_uri_get_host(u) : NULL;
    int port = u ? evhttp_uri_get_port(u) : -1;
    char target[128], hostport[300];
    snprintf(target, sizeof target, "/internal/templates/%s/image", f->name);
    snprintf(hostport, sizeof hostport, "%s:%d", host ? host : "", port);
    if (!host || port <= 0) {
        evhttp_uri_free(u);
        return spaced_err_set(&f->fail, 502, "template_source_unavailable",
                              "template %s: node %s has an unusable address %s", f->name, f->source, f->url);
    }
    f->conn = evhttp_connection_base_new(f->sp->base, NULL, host, (unsigned short)port);
    evhttp_uri_free(u);
    f->out = f->conn ? evhttp_request_new(on_done, f) : NULL;
    if (!f->out)
        return spaced_err_set(&f->fail, 500, "internal", "out of memory");
    evhttp_connection_set_timeout(f->conn, FETCH_TIMEOUT_S);
    evhttp_request_set_chunked_cb(f->out, on_chunk);
    struct evkeyvalq *h = evhttp_request_get_output_headers(f->out);
    evhttp_add_header(h, "Host", hostport);
    evhttp_add_header(h, "Connection", "close");
    evhttp_add_header(h, HH_NODE_TOKEN_HEADER, f->sp->opt.node_token ? f->sp->opt.node_token : "");
    if (evhttp_make_request(f->conn, f->out, EVHTTP_REQ_GET, target) != 0) {
        evhttp_request_free(f->out);
        f->out = NULL;
        return spaced_err_set(&f->fail, 502, "template_source_unavailable",
                              "template %s: cannot connect to node %s (%s)", f->name, f->source, f->url);
    }
    return 0;
}

/* A new fetch of template `name` from its row: f, or NULL with err. */
static struct tpl_fetch *fetch_new(struct spaced *sp, const char *name, struct spaced_err *err)
{
    struct store_tpl row;
    if (store_tpl_get(sp->store, name, &row) != 0) {
        spaced_err_set(err, 400, "unknown_template", "template \"%s\" does not exist", name);
        return NULL;
    }
    struct tpl_fetch *f = calloc(1, sizeof *f);
    if (!f || !(f->hash = tpl_digest_new())) {
        free(f);
        store_tpl_clear(&row);
        spaced_err_set(err, 500, "internal", "out of memory");
        return NULL;
    }
    f->sp = sp;
    f->fd = -1;
    f->reap = evtimer_new(sp->base, fetch_free_cb, f);
    f->started_ms = spaced_now_ms();
    snprintf(f->name, sizeof f->name, "%s", name);
    snprintf(f->digest, sizeof f->digest, "%s", row.digest);
    f->size = row.size_bytes;
    f->meta = row.meta;
    row.meta = NULL;
    snprintf(f->dir, sizeof f->dir, "%s/templates/%s", sp->opt.data_dir, name);
    snprintf(f->tmp, sizeof f->tmp, "%s/rootfs.ext4.fetch", f->dir);
    char nodes[STORE_NODES_MAX];
    snprintf(nodes, sizeof nodes, "%s", row.nodes);
    bool usable = strcmp(row.state, "ready") == 0 && tpl_digest_valid(row.digest) && row.size_bytes > 0 && f->meta;
    store_tpl_clear(&row);
    int rc = usable ? pick_source(f, nodes)
                    : spaced_err_set(&f->fail, 400, "unknown_template",
                                     "template %s has no recorded image to fetch (not ready, or built before "
                                     "images were hashed)", name);
    if (rc == 0 && (spaced_mkdir_p(f->dir) != 0 ||
                    (f->fd = open(f->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) < 0))
        rc = spaced_err_set(&f->fail, 500, "host_io", "template %s: cannot create %s: %s", name, f->tmp,
                            strerror(errno));
    if (rc == 0)
        rc = fetch_send(f);
    if (rc != 0) {
        *err = f->fail;
        if (f->fd < 0)
            f->tmp[0] = '\0'; /* not ours to unlink */
        f->next = NULL;
        fetch_free(f);
        return NULL;
    }
    log_info("template.fetch", "template=%s source=%s url=%s sha256=%s size_bytes=%lld result=started", name,
             f->source, f->url, f->digest, (long long)f->size);
    f->next = sp->tpl->fetches;
    sp->tpl->fetches = f;
    return f;
}

int tpl_fetch(struct spaced *sp, const char *name, tpl_fetch_done done, void *arg, struct spaced_err *err)
{
    struct tpl_info t;
    if (tpl_lookup(sp, NULL, name, &t, NULL) == 0)
        return 1;
    struct tpl_fetch *f = sp->tpl->fetches;
    while (f && (f->ended || strcmp(f->name, name) != 0))
        f = f->next;
    if (!f && !(f = fetch_new(sp, name, err)))
        return -1;
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

/* ---- serving (the node API) ---------------------------------------------------------------- */

struct serve {
    int fd;
};

static void serve_closed(struct http_req *req, void *arg)
{
    (void)req;
    struct serve *s = arg;
    close(s->fd);
    free(s);
}

static void serve_pump(struct http_req *req, void *arg)
{
    struct serve *s = arg;
    char buf[SERVE_CHUNK];
    while (http_stream_pending(req) < SERVE_PENDING_MAX) {
        ssize_t n = read(s->fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            http_req_on_close(req, NULL, NULL);
            serve_closed(req, s);
            if (n < 0)
                http_reply_abort(req, "template image read failed");
            else
                http_stream_end(req);
            return;
        }
        http_stream_write(req, buf, (size_t)n);
    }
    http_stream_on_drain(req, serve_pump, s);
}

void tpl_image_serve(struct spaced *sp, struct http_req *req, const char *name)
{
    /* Only another node asks: it presents the node token. Anyone else learns nothing,
     * not even whether the template exists (a node daemon's own guard answers 403
     * before this; a control or a single host has no such route for clients). */
    const char *tok = http_req_header(req, HH_NODE_TOKEN_HEADER), *want = sp->opt.node_token;
    if (!want || !want[0] || !tok || strlen(tok) != strlen(want) || CRYPTO_memcmp(tok, want, strlen(want)) != 0) {
        http_reply_error(req, 404, "not_found", "no route for %s %s", http_req_method(req), http_req_path(req));
        return;
    }
    struct store_tpl row;
    bool ready = tpl_name_valid(name) && store_tpl_get(sp->store, name, &row) == 0;
    if (ready) {
        ready = strcmp(row.state, "ready") == 0;
        store_tpl_clear(&row);
    }
    char path[TPL_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/templates/%s/rootfs.ext4", sp->opt.data_dir, ready ? name : "");
    struct serve *s = ready ? calloc(1, sizeof *s) : NULL;
    struct stat st;
    if (s && ((s->fd = open(path, O_RDONLY | O_CLOEXEC)) < 0 || fstat(s->fd, &st) != 0 || !S_ISREG(st.st_mode))) {
        if (s->fd >= 0)
            close(s->fd);
        free(s);
        s = NULL;
    }
    if (!s) {
        http_reply_error(req, 404, "not_found", "template %.64s has no image on this node", name);
        return;
    }
    log_info("template.serve", "template=%s bytes=%lld peer=%s", name, (long long)st.st_size, http_req_peer(req));
    if (http_stream_start(req, 200, "application/octet-stream", st.st_size) < 0) {
        close(s->fd);
        free(s);
        http_reply_error(req, 500, "internal", "cannot start the transfer");
        return;
    }
    http_req_on_close(req, serve_closed, s);
    serve_pump(req, s);
}
