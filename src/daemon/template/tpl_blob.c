/* tpl_blob.c: one file fetched from another node, verified by size and SHA-256, and the
 * serving side (tpl_blob.h). */
#include <errno.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/http/http.h"
#include "daemon/store/store.h"
#include "http_hdr.h"
#include "log.h"
#include "tpl_blob.h"
#include "tpl_digest.h"

/* Until the first byte, and between bytes. */
#define BLOB_TIMEOUT_S 60
#define BLOB_CHUNK (64 * 1024)
#define BLOB_PENDING_MAX (1u << 20)

struct tpl_blob {
    struct spaced *sp;
    tpl_blob_done done;           /* NULL once cancelled or ended */
    void *arg;
    char prefix[24];
    char source[STORE_ID_MAX];
    char url[256];
    char target[256];
    char dst[1024];
    char digest[TPL_DIGEST_HEX];  /* the recorded one */
    int64_t size;                 /* the recorded size: more bytes are refused */
    int64_t got;
    int fd;
    struct tpl_digest *hash;
    struct evhttp_connection *conn;
    struct event *reap;           /* frees b from the loop once ended (owned) */
    struct spaced_err fail;       /* the first failure (status 0: none) */
};

static void blob_free(struct tpl_blob *b)
{
    if (b->conn)
        evhttp_connection_free(b->conn); /* a pending request goes with it, unanswered */
    if (b->reap)
        event_free(b->reap);
    if (b->fd >= 0)
        close(b->fd);
    if (b->dst[0])
        unlink(b->dst);
    tpl_digest_free(b->hash);
    free(b);
}

static void reap_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    blob_free(arg);
}

static void failf(struct tpl_blob *b, int status, const char *what, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void failf(struct tpl_blob *b, int status, const char *what, const char *fmt, ...)
{
    if (b->fail.status)
        return;
    char msg[sizeof b->fail.message], code[64];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (strcmp(what, "host_io") == 0 || strcmp(what, "internal") == 0)
        snprintf(code, sizeof code, "%s", what);
    else
        snprintf(code, sizeof code, "%s_%s", b->prefix, what);
    spaced_err_set(&b->fail, status, code, "%s", msg);
}

/* The transfer is over: verified (dst kept) or not (dst removed); done is told, and b is
 * freed from the loop (evhttp's connection is never freed inside its own callback). */
static void blob_end(struct tpl_blob *b)
{
    if (!b->done)
        return;
    if (!b->fail.status) {
        char got[TPL_DIGEST_HEX];
        tpl_digest_final(b->hash, got);
        b->hash = NULL;
        if (b->got != b->size)
            failf(b, 502, "fetch_failed", "node %s sent %lld bytes of %s, %lld were recorded", b->source,
                  (long long)b->got, b->target, (long long)b->size);
        else if (strcmp(got, b->digest) != 0)
            failf(b, 502, "digest_mismatch", "%s fetched from node %s has SHA-256 %.16s..., not the recorded "
                  "%.16s...; it was discarded", b->target, b->source, got, b->digest);
        else if (fsync(b->fd) != 0)
            failf(b, 500, "host_io", "cannot write %s: %s", b->dst, strerror(errno));
    }
    close(b->fd);
    b->fd = -1;
    if (!b->fail.status)
        b->dst[0] = '\0'; /* verified: the caller's now */
    tpl_blob_done done = b->done;
    b->done = NULL;
    if (b->dst[0])
        unlink(b->dst);
    b->dst[0] = '\0';
    struct timeval now = {0, 0};
    if (!b->reap || event_add(b->reap, &now) != 0)
        log_warn("blob.fetch", "target=%s msg=\"cannot schedule the fetch's end: kept until exit\"", b->target);
    done(b->arg, b->fail.status ? &b->fail : NULL);
}

static void on_chunk(struct evhttp_request *req, void *arg)
{
    struct tpl_blob *b = arg;
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    bool ok = evhttp_request_get_response_code(req) == 200; /* an error's body is not the file */
    char buf[BLOB_CHUNK];
    int n;
    while ((n = evbuffer_remove(in, buf, sizeof buf)) > 0) {
        if (b->fail.status || !ok || !b->done)
            continue; /* drained, not kept */
        if (n > b->size - b->got) {
            failf(b, 502, "fetch_failed", "node %s sent more than the recorded %lld bytes of %s", b->source,
                  (long long)b->size, b->target);
            continue;
        }
        tpl_digest_update(b->hash, buf, (size_t)n);
        for (int off = 0; off < n;) {
            ssize_t w = write(b->fd, buf + off, (size_t)(n - off));
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0) {
                failf(b, 500, "host_io", "cannot write %s: %s", b->dst, strerror(errno));
                break;
            }
            off += (int)w;
        }
        b->got += n;
    }
}

static void on_done(struct evhttp_request *req, void *arg)
{
    struct tpl_blob *b = arg;
    int status = req ? evhttp_request_get_response_code(req) : 0;
    if (req && status == 200)
        on_chunk(req, b);
    if (status == 0)
        failf(b, 503, "source_unavailable", "node %s (%s) did not answer for %s", b->source, b->url, b->target);
    else if (status != 200)
        failf(b, 502, "fetch_failed", "node %s answered %d for %s", b->source, status, b->target);
    blob_end(b);
}

/* Connects to the source and asks for the file: 0, or -1 with b->fail. */
static int blob_send(struct tpl_blob *b)
{
    struct evhttp_uri *u = evhttp_uri_parse(b->url);
    const char *host = u ? evhttp_uri_get_host(u) : NULL;
    int port = u ? evhttp_uri_get_port(u) : -1;
    char hostport[300];
    snprintf(hostport, sizeof hostport, "%s:%d", host ? host : "", port);
    if (!host || port <= 0 || port > 65535) {
        evhttp_uri_free(u);
        failf(b, 503, "source_unavailable", "node %s has an unusable address %s", b->source, b->url);
        return -1;
    }
    b->conn = evhttp_connection_base_new(b->sp->base, NULL, host, (unsigned short)port);
    evhttp_uri_free(u);
    struct evhttp_request *out = b->conn ? evhttp_request_new(on_done, b) : NULL;
    if (!out) {
        failf(b, 500, "internal", "out of memory");
        return -1;
    }
    evhttp_connection_set_timeout(b->conn, BLOB_TIMEOUT_S);
    evhttp_request_set_chunked_cb(out, on_chunk);
    struct evkeyvalq *h = evhttp_request_get_output_headers(out);
    evhttp_add_header(h, "Host", hostport);
    evhttp_add_header(h, "Connection", "close");
    evhttp_add_header(h, HH_NODE_TOKEN_HEADER, b->sp->opt.node_token ? b->sp->opt.node_token : "");
    if (evhttp_make_request(b->conn, out, EVHTTP_REQ_GET, b->target) != 0) {
        failf(b, 503, "source_unavailable", "cannot connect to node %s (%s)", b->source, b->url);
        return -1; /* evhttp freed the request */
    }
    return 0;
}

struct tpl_blob *tpl_blob_fetch(struct spaced *sp, const char *node_id, const char *target, const char *dst,
                                int64_t size, const char *sha256, const char *code_prefix, tpl_blob_done done,
                                void *arg, struct spaced_err *err)
{
    struct tpl_blob *b = calloc(1, sizeof *b);
    if (!b || !(b->hash = tpl_digest_new())) {
        free(b);
        spaced_err_set(err, 500, "internal", "out of memory");
        return NULL;
    }
    b->sp = sp;
    b->fd = -1;
    b->done = done;
    b->arg = arg;
    b->size = size;
    snprintf(b->prefix, sizeof b->prefix, "%s", code_prefix);
    snprintf(b->source, sizeof b->source, "%s", node_id);
    snprintf(b->target, sizeof b->target, "%s", target);
    snprintf(b->digest, sizeof b->digest, "%s", sha256);
    b->reap = evtimer_new(sp->base, reap_cb, b);
    struct store_node n;
    int rc = 0;
    if (size < 0 || !tpl_digest_valid(sha256) || strlen(dst) >= sizeof b->dst)
        failf(b, 500, "internal", "%s: no valid recorded size and SHA-256 to verify against", target), rc = -1;
    else if (store_node_get(sp->store, node_id, &n) != 0 || spaced_now_ms() - n.heartbeat_ms >= TPL_BLOB_SOURCE_DEAD_MS)
        failf(b, 503, "source_unavailable", "%s is only on node %s, which is not live", target, node_id), rc = -1;
    if (rc == 0) {
        snprintf(b->url, sizeof b->url, "%s", n.url);
        if ((b->fd = open(dst, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) < 0) {
            failf(b, 500, "host_io", "cannot create %s: %s", dst, strerror(errno));
            rc = -1;
        } else {
            snprintf(b->dst, sizeof b->dst, "%s", dst);
            rc = blob_send(b);
        }
    }
    if (rc != 0) {
        *err = b->fail;
        blob_free(b);
        return NULL;
    }
    return b;
}

void tpl_blob_cancel(struct tpl_blob *b)
{
    if (!b)
        return;
    if (b->done) {
        b->done = NULL;
        blob_free(b); /* not inside an evhttp callback: the caller is not one */
    }
    /* else: ended, its reap is scheduled */
}

/* ---- serving ----------------------------------------------------------------------------- */

bool tpl_blob_peer_ok(struct spaced *sp, struct http_req *req)
{
    const char *tok = http_req_header(req, HH_NODE_TOKEN_HEADER), *want = sp->opt.node_token;
    if (!want || !want[0] || !tok || strlen(tok) != strlen(want) || CRYPTO_memcmp(tok, want, strlen(want)) != 0) {
        http_reply_error(req, 404, "not_found", "no route for %s %s", http_req_method(req), http_req_path(req));
        return false;
    }
    return true;
}

static void serve_closed(struct http_req *req, void *arg)
{
    (void)req;
    int *fd = arg;
    close(*fd);
    free(fd);
}

static void serve_pump(struct http_req *req, void *arg)
{
    int *fd = arg;
    char buf[BLOB_CHUNK];
    while (http_stream_pending(req) < BLOB_PENDING_MAX) {
        ssize_t n = read(*fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            http_req_on_close(req, NULL, NULL);
            serve_closed(req, fd);
            if (n < 0)
                http_reply_abort(req, "read failed");
            else
                http_stream_end(req);
            return;
        }
        http_stream_write(req, buf, (size_t)n);
    }
    http_stream_on_drain(req, serve_pump, fd);
}

void tpl_blob_serve(struct http_req *req, const char *path, const char *what)
{
    int *fd = malloc(sizeof *fd);
    struct stat st;
    if (fd && ((*fd = open(path, O_RDONLY | O_CLOEXEC)) < 0 || fstat(*fd, &st) != 0 || !S_ISREG(st.st_mode))) {
        if (*fd >= 0)
            close(*fd);
        free(fd);
        fd = NULL;
    }
    if (!fd) {
        http_reply_error(req, 404, "not_found", "%s is not on this node", what);
        return;
    }
    log_info("blob.serve", "what=%s bytes=%lld peer=%s", what, (long long)st.st_size, http_req_peer(req));
    if (http_stream_start(req, 200, "application/octet-stream", st.st_size) < 0) {
        close(*fd);
        free(fd);
        http_reply_error(req, 500, "internal", "cannot start the transfer");
        return;
    }
    http_req_on_close(req, serve_closed, fd);
    serve_pump(req, fd);
}
