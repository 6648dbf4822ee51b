/* tpl_blob.c: a content-addressed blob fetched from another node, hashed and written on
 * a worker thread; see tpl_blob.h.
 *
 * Threads: the loop owns the HTTP side (connection, size bound, pausing) and everything
 * after the worker has finished; the worker owns the file descriptor and the digest.
 * They share only the chunk queue and the worker's result, under `mu`. The worker tells
 * the loop through an eventfd (queue drained below the low mark, or finished); the loop
 * ends a fetch only from that event, never from inside an evhttp callback (evhttp's
 * connection cannot be freed there). */
#include "tpl_blob.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/http/http.h"
#include "daemon/spaced.h"
#include "log.h"
#include "http_hdr.h"
#include "tpl_digest.h"
#include "writeall.h"

#define BLOB_CHUNK_MAX (256u * 1024)
#define BLOB_PATH_MAX 4096

struct chunk {
    struct chunk *next;
    size_t len;
    char data[];
};

struct tpl_blob {
    struct event_base *base;
    tpl_blob_done done;
    void *arg;
    char what[128], source[64], url[256], target[256], expect[TPL_DIGEST_HEX];
    char dest[BLOB_PATH_MAX], tmp[BLOB_PATH_MAX + 16];
    int64_t size;
    int64_t got; /* bytes accepted on the loop (handed to the worker) */
    struct evhttp_connection *conn;
    struct evhttp_request *out; /* owned by conn; NULL once its callback ran */
    bool paused;                /* reading from the holder is disabled */
    struct spaced_err fail;     /* the loop's first failure (status 0: none) */
    int efd;                    /* worker -> loop */
    struct event *wake;
    pthread_t thread;
    bool thread_started;
    /* shared with the worker, under mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct chunk *head, **tail;
    size_t queued;
    bool eof;      /* no more chunks will come */
    bool stop;     /* drop what is queued and finish now */
    bool finished; /* the worker is done: werr, wop and hex are final */
    int werr;      /* errno of the worker's failure (0: none) */
    const char *wop;
    char hex[TPL_DIGEST_HEX];
};

static void poke(int efd)
{
    uint64_t one = 1;
    ssize_t w = write(efd, &one, sizeof one); /* a full counter still wakes the loop */
    (void)w;
}

/* ---- the worker ---------------------------------------------------------------------------- */

static void *worker_main(void *arg)
{
    struct tpl_blob *b = arg;
    int err = 0;
    const char *op = NULL;
    /* Opened here, not on the loop: even an open can block (a FIFO, a hung mount).
     * O_NOFOLLOW and the type check: the bytes go into a regular file of ours. */
    int fd = open(b->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
    struct stat st;
    if (fd < 0) {
        err = errno;
        op = "create";
    } else if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        err = EINVAL;
        op = "create (not a regular file)";
    }
    struct tpl_digest *h = err ? NULL : tpl_digest_new();
    if (!err && !h) {
        err = ENOMEM;
        op = "hash";
    }
    bool stopped = false;
    for (;;) {
        pthread_mutex_lock(&b->mu);
        while (!b->head && !b->eof && !b->stop)
            pthread_cond_wait(&b->cv, &b->mu);
        stopped = b->stop;
        struct chunk *c = stopped ? NULL : b->head;
        if (c && !(b->head = c->next))
            b->tail = &b->head;
        pthread_mutex_unlock(&b->mu);
        if (!c)
            break; /* stopped, or the end of the stream */
        if (!err) {
            tpl_digest_update(h, c->data, c->len);
            if (writeall_fd(fd, c->data, c->len) != 0) {
                err = errno ? errno : EIO;
                op = "write";
            }
        }
        pthread_mutex_lock(&b->mu);
        bool was_high = b->queued >= TPL_BLOB_QUEUE_LOW;
        b->queued -= c->len;
        bool low = was_high && b->queued < TPL_BLOB_QUEUE_LOW;
        pthread_mutex_unlock(&b->mu);
        free(c);
        if (low)
            poke(b->efd); /* the loop may resume reading */
    }
    char hex[TPL_DIGEST_HEX] = "";
    if (!err && !stopped && fsync(fd) != 0) {
        err = errno;
        op = "fsync";
    }
    if (h && !err && !stopped) {
        tpl_digest_final(h, hex);
        h = NULL;
    }
    tpl_digest_free(h);
    if (fd >= 0)
        close(fd);
    pthread_mutex_lock(&b->mu);
    b->werr = err;
    b->wop = op;
    memcpy(b->hex, hex, sizeof hex);
    b->finished = true;
    pthread_mutex_unlock(&b->mu);
    poke(b->efd);
    return NULL;
}

/* Tells the worker there is no more (stop: drop what is queued too). */
static void worker_end(struct tpl_blob *b, bool stop)
{
    pthread_mutex_lock(&b->mu);
    b->eof = true;
    b->stop = b->stop || stop;
    pthread_cond_signal(&b->cv);
    pthread_mutex_unlock(&b->mu);
}

/* ---- the loop ------------------------------------------------------------------------------ */

static void blob_free(struct tpl_blob *b)
{
    if (b->thread_started) {
        worker_end(b, true);
        pthread_join(b->thread, NULL);
    }
    if (b->conn)
        evhttp_connection_free(b->conn); /* drops a request still in flight, no callback */
    if (b->wake)
        event_free(b->wake);
    if (b->efd >= 0)
        close(b->efd);
    while (b->head) {
        struct chunk *c = b->head;
        b->head = c->next;
        free(c);
    }
    if (b->tmp[0])
        unlink(b->tmp);
    pthread_cond_destroy(&b->cv);
    pthread_mutex_destroy(&b->mu);
    free(b);
}

static void failf(struct tpl_blob *b, int status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void failf(struct tpl_blob *b, int status, const char *code, const char *fmt, ...)
{
    if (b->fail.status)
        return;
    char msg[sizeof b->fail.message];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    spaced_err_set(&b->fail, status, code, "%s", msg);
}

static void set_reading(struct tpl_blob *b, bool on)
{
    struct bufferevent *bev = b->conn ? evhttp_connection_get_bufferevent(b->conn) : NULL;
    if (!bev || b->paused == !on)
        return;
    b->paused = !on;
    if (on) {
        bufferevent_enable(bev, EV_READ);
        /* Bytes that arrived while paused wait in its input: hand them to evhttp now. */
        if (evbuffer_get_length(bufferevent_get_input(bev)))
            bufferevent_trigger(bev, EV_READ, BEV_TRIG_DEFER_CALLBACKS);
    } else {
        bufferevent_disable(bev, EV_READ);
    }
}

/* The worker has finished and the transfer is over (or failed): verify, publish, tell. */
static void blob_end(struct tpl_blob *b)
{
    pthread_join(b->thread, NULL);
    b->thread_started = false;
    if (!b->fail.status) {
        if (b->werr)
            failf(b, 500, "host_io", "%s: cannot %s %s: %s", b->what, b->wop ? b->wop : "write", b->tmp,
                  strerror(b->werr));
        else if (b->got != b->size)
            failf(b, 502, "blob_fetch_failed", "%s: node %s sent %lld bytes, %lld were expected", b->what,
                  b->source, (long long)b->got, (long long)b->size);
        else if (strcmp(b->hex, b->expect) != 0)
            failf(b, 502, "blob_digest_mismatch",
                  "%s: the bytes fetched from node %s have SHA-256 %.16s..., not the expected %.16s...; "
                  "they were discarded (nothing used them)", b->what, b->source, b->hex, b->expect);
        else if (rename(b->tmp, b->dest) != 0)
            failf(b, 500, "host_io", "%s: cannot rename the verified bytes to %s: %s", b->what, b->dest,
                  strerror(errno));
        else
            b->tmp[0] = '\0'; /* published: not unlinked */
    }
    if (b->tmp[0])
        unlink(b->tmp);
    b->tmp[0] = '\0';
    b->done(b->arg, b->fail.status ? &b->fail : NULL);
    blob_free(b);
}

static void on_wake(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    struct tpl_blob *b = arg;
    uint64_t n;
    ssize_t r = read(fd, &n, sizeof n);
    (void)r;
    pthread_mutex_lock(&b->mu);
    bool finished = b->finished;
    size_t queued = b->queued;
    pthread_mutex_unlock(&b->mu);
    if (finished && (!b->out || b->fail.status)) {
        blob_end(b); /* a request still in flight (a refused holder) is dropped with conn */
        return;
    }
    if (b->paused && queued < TPL_BLOB_QUEUE_LOW && !b->fail.status)
        set_reading(b, true);
}

static void on_chunk(struct evhttp_request *req, void *arg)
{
    struct tpl_blob *b = arg;
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    bool ok = evhttp_request_get_response_code(req) == 200; /* an error's body is no blob */
    size_t len;
    while ((len = evbuffer_get_length(in)) > 0) {
        if (b->fail.status || !ok) {
            evbuffer_drain(in, len); /* not kept */
            continue;
        }
        size_t n = len < BLOB_CHUNK_MAX ? len : BLOB_CHUNK_MAX;
        if (b->got + (int64_t)n > b->size) {
            failf(b, 502, "blob_fetch_failed", "%s: node %s sent more than the expected %lld bytes", b->what,
                  b->source, (long long)b->size);
            evbuffer_drain(in, len);
            set_reading(b, false); /* nothing more is read: the fetch ends from on_wake */
            worker_end(b, true);
            return;
        }
        struct chunk *c = malloc(sizeof *c + n);
        if (!c) {
            failf(b, 500, "internal", "out of memory");
            worker_end(b, true);
            continue;
        }
        c->next = NULL;
        c->len = (size_t)evbuffer_remove(in, c->data, n);
        b->got += (int64_t)c->len;
        pthread_mutex_lock(&b->mu);
        *b->tail = c;
        b->tail = &c->next;
        b->queued += c->len;
        size_t queued = b->queued;
        pthread_cond_signal(&b->cv);
        pthread_mutex_unlock(&b->mu);
        if (queued > TPL_BLOB_QUEUE_HIGH)
            set_reading(b, false);
    }
}

static void on_done(struct evhttp_request *req, void *arg)
{
    struct tpl_blob *b = arg;
    b->out = NULL;
    int status = req ? evhttp_request_get_response_code(req) : 0;
    if (req && status == 200)
        on_chunk(req, b);
    if (status == 0)
        failf(b, 502, "blob_source_unavailable", "%s: node %s (%s) did not answer", b->what, b->source, b->url);
    else if (status != 200)
        failf(b, 502, "blob_fetch_failed", "%s: node %s answered %d", b->what, b->source, status);
    worker_end(b, b->fail.status != 0);
    poke(b->efd); /* ends from on_wake once the worker has finished, outside evhttp */
}

static int start_request(struct tpl_blob *b, const char *token, int timeout_s, struct spaced_err *err)
{
    struct evhttp_uri *u = evhttp_uri_parse(b->url);
    const char *host = u ? evhttp_uri_get_host(u) : NULL;
    int port = u ? evhttp_uri_get_port(u) : -1;
    char hostport[300];
    snprintf(hostport, sizeof hostport, "%s:%d", host ? host : "", port);
    if (!host || port <= 0) {
        if (u) /* evhttp_uri_free(NULL) crashes */
            evhttp_uri_free(u);
        return spaced_err_set(err, 502, "blob_source_unavailable", "%s: node %s has an unusable address %s",
                              b->what, b->source, b->url);
    }
    b->conn = evhttp_connection_base_new(b->base, NULL, host, (unsigned short)port);
    evhttp_uri_free(u);
    b->out = b->conn ? evhttp_request_new(on_done, b) : NULL;
    if (!b->out)
        return spaced_err_set(err, 500, "internal", "out of memory");
    evhttp_connection_set_timeout(b->conn, timeout_s > 0 ? timeout_s : 60);
    evhttp_request_set_chunked_cb(b->out, on_chunk);
    struct evkeyvalq *h = evhttp_request_get_output_headers(b->out);
    evhttp_add_header(h, "Host", hostport);
    evhttp_add_header(h, "Connection", "close");
    evhttp_add_header(h, HH_NODE_TOKEN_HEADER, token ? token : "");
    if (evhttp_make_request(b->conn, b->out, EVHTTP_REQ_GET, b->target) != 0) {
        evhttp_request_free(b->out);
        b->out = NULL;
        return spaced_err_set(err, 502, "blob_source_unavailable", "%s: cannot connect to node %s (%s)",
                              b->what, b->source, b->url);
    }
    return 0;
}

struct tpl_blob *tpl_blob_fetch(struct event_base *base, const struct tpl_blob_req *req, tpl_blob_done done,
                                void *arg, struct spaced_err *err)
{
    const char *slash = req->dest ? strrchr(req->dest, '/') : NULL;
    if (!slash || !tpl_digest_valid(req->sha256) || req->size <= 0 || !req->url || !req->target ||
        strlen(req->dest) >= BLOB_PATH_MAX) {
        spaced_err_set(err, 500, "internal", "bad blob fetch request");
        return NULL;
    }
    struct tpl_blob *b = calloc(1, sizeof *b);
    if (!b) {
        spaced_err_set(err, 500, "internal", "out of memory");
        return NULL;
    }
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->cv, NULL);
    b->tail = &b->head;
    b->base = base;
    b->done = done;
    b->arg = arg;
    b->size = req->size;
    snprintf(b->what, sizeof b->what, "%s", req->what ? req->what : "blob");
    snprintf(b->source, sizeof b->source, "%s", req->source ? req->source : "?");
    snprintf(b->url, sizeof b->url, "%s", req->url);
    snprintf(b->target, sizeof b->target, "%s", req->target);
    snprintf(b->expect, sizeof b->expect, "%s", req->sha256);
    snprintf(b->dest, sizeof b->dest, "%s", req->dest);
    snprintf(b->tmp, sizeof b->tmp, "%.*s/.%s.fetch", (int)(slash - req->dest), req->dest, slash + 1);
    b->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    b->wake = b->efd >= 0 ? event_new(base, b->efd, EV_READ | EV_PERSIST, on_wake, b) : NULL;
    int rc = b->wake && event_add(b->wake, NULL) == 0
                 ? 0
                 : spaced_err_set(err, 500, "internal", "cannot set up the fetch's wake-up");
    if (rc == 0 && pthread_create(&b->thread, NULL, worker_main, b) != 0)
        rc = spaced_err_set(err, 500, "internal", "cannot start the fetch's writer thread");
    b->thread_started = rc == 0;
    if (rc == 0)
        rc = start_request(b, req->token, req->timeout_s, err);
    if (rc != 0) {
        blob_free(b);
        return NULL;
    }
    return b;
}

void tpl_blob_cancel(struct tpl_blob *b)
{
    if (b)
        blob_free(b);
}

int64_t tpl_blob_received(const struct tpl_blob *b)
{
    return b->got;
}

/* ---- serving ------------------------------------------------------------------------------- */

#define SERVE_CHUNK (64 * 1024)
#define SERVE_PENDING_MAX (1u << 20)

bool tpl_blob_token_ok(const struct http_req *req, const char *want)
{
    const char *tok = http_req_header(req, HH_NODE_TOKEN_HEADER);
    return want && want[0] && tok && strlen(tok) == strlen(want) && CRYPTO_memcmp(tok, want, strlen(want)) == 0;
}

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
                http_reply_abort(req, "blob read failed");
            else
                http_stream_end(req);
            return;
        }
        http_stream_write(req, buf, (size_t)n);
    }
    http_stream_on_drain(req, serve_pump, s);
}

int tpl_blob_serve(struct http_req *req, const char *path, const char *what)
{
    struct serve *s = calloc(1, sizeof *s);
    struct stat st;
    if (!s)
        return -1;
    if ((s->fd = open(path, O_RDONLY | O_CLOEXEC)) < 0 || fstat(s->fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        if (s->fd >= 0)
            close(s->fd);
        free(s);
        return -1;
    }
    log_info("blob.serve", "what=\"%s\" bytes=%lld peer=%s", what, (long long)st.st_size, http_req_peer(req));
    if (http_stream_start(req, 200, "application/octet-stream", st.st_size) < 0) {
        close(s->fd);
        free(s);
        http_reply_error(req, 500, "internal", "cannot start the transfer");
        return 0;
    }
    http_req_on_close(req, serve_closed, s);
    serve_pump(req, s);
    return 0;
}
