/* tpl_digest.c: SHA-256 of template images, inline or on a worker thread; see
 * tpl_digest.h. */
#include "tpl_digest.h"

#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#define DIGEST_CHUNK (1u << 20)

bool tpl_digest_valid(const char *s)
{
    if (!s || strlen(s) != 64)
        return false;
    return strspn(s, "0123456789abcdef") == 64;
}

struct tpl_digest {
    EVP_MD_CTX *ctx;
};

struct tpl_digest *tpl_digest_new(void)
{
    struct tpl_digest *h = calloc(1, sizeof *h);
    if (!h)
        return NULL;
    h->ctx = EVP_MD_CTX_new();
    if (!h->ctx || EVP_DigestInit_ex(h->ctx, EVP_sha256(), NULL) != 1) {
        tpl_digest_free(h);
        return NULL;
    }
    return h;
}

void tpl_digest_update(struct tpl_digest *h, const void *data, size_t len)
{
    if (len)
        EVP_DigestUpdate(h->ctx, data, len);
}

void tpl_digest_final(struct tpl_digest *h, char out[TPL_DIGEST_HEX])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned n = 0;
    out[0] = '\0';
    if (EVP_DigestFinal_ex(h->ctx, md, &n) == 1 && n == 32)
        for (unsigned i = 0; i < n; i++)
            snprintf(out + 2 * i, 3, "%02x", md[i]);
    tpl_digest_free(h);
}

void tpl_digest_free(struct tpl_digest *h)
{
    if (!h)
        return;
    EVP_MD_CTX_free(h->ctx);
    free(h);
}

/* tpl_digest_file, stopping with ECANCELED between chunks once *stop is set (NULL: never). */
static int digest_file(const char *path, int64_t max, char out[TPL_DIGEST_HEX], int64_t *size,
                       const atomic_bool *stop)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    struct tpl_digest *h = tpl_digest_new();
    char *buf = malloc(DIGEST_CHUNK);
    int rc = 0, e = 0;
    int64_t total = 0;
    if (!h || !buf) {
        rc = -1;
        e = ENOMEM;
    }
    while (rc == 0) {
        if (stop && atomic_load(stop)) {
            rc = -1;
            e = ECANCELED;
            break;
        }
        ssize_t n = read(fd, buf, DIGEST_CHUNK);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = -1;
            e = errno;
        } else if (n == 0) {
            break;
        } else if (max > 0 && (total += n) > max) {
            rc = -1;
            e = EFBIG;
        } else {
            if (max <= 0)
                total += n;
            tpl_digest_update(h, buf, (size_t)n);
        }
    }
    free(buf);
    close(fd);
    if (rc == 0) {
        tpl_digest_final(h, out);
        *size = total;
        return out[0] ? 0 : -1;
    }
    tpl_digest_free(h);
    errno = e;
    return -1;
}

int tpl_digest_file(const char *path, int64_t max, char out[TPL_DIGEST_HEX], int64_t *size)
{
    return digest_file(path, max, out, size, NULL);
}

/* ---- on a worker thread ------------------------------------------------------------------ */

struct tpl_digest_job {
    pthread_t thread;
    int efd;
    struct event *ev;
    tpl_digest_done done;
    void *arg;
    char *path;
    atomic_bool stop;  /* set by tpl_digest_job_free: the thread ends at its next chunk */
    /* written by the thread before it signals efd */
    int rc, err;
    int64_t size;
    char hex[TPL_DIGEST_HEX];
};

static void *job_main(void *arg)
{
    struct tpl_digest_job *j = arg;
    j->rc = digest_file(j->path, 0, j->hex, &j->size, &j->stop);
    j->err = j->rc < 0 ? errno : 0;
    uint64_t one = 1;
    ssize_t w = write(j->efd, &one, sizeof one); /* the loop wakes; nothing to do if not */
    (void)w;
    return NULL;
}

static void job_end(struct tpl_digest_job *j)
{
    pthread_join(j->thread, NULL);
    event_free(j->ev);
    close(j->efd);
    free(j->path);
    free(j);
}

static void on_job_done(evutil_socket_t fd, short what, void *arg)
{
    struct tpl_digest_job *j = arg;
    (void)fd;
    (void)what;
    tpl_digest_done done = j->done;
    void *darg = j->arg;
    int rc = j->rc, err = j->err;
    int64_t size = j->size;
    char hex[TPL_DIGEST_HEX];
    memcpy(hex, j->hex, sizeof hex);
    job_end(j);
    done(darg, rc, err, hex, size);
}

struct tpl_digest_job *tpl_digest_start(struct event_base *base, const char *path, tpl_digest_done done,
                                        void *arg)
{
    struct tpl_digest_job *j = calloc(1, sizeof *j);
    if (!j)
        return NULL;
    j->done = done;
    j->arg = arg;
    j->path = strdup(path);
    j->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    j->ev = j->efd >= 0 ? event_new(base, j->efd, EV_READ, on_job_done, j) : NULL;
    if (!j->path || !j->ev || event_add(j->ev, NULL) != 0 ||
        pthread_create(&j->thread, NULL, job_main, j) != 0) {
        if (j->ev)
            event_free(j->ev);
        if (j->efd >= 0)
            close(j->efd);
        free(j->path);
        free(j);
        return NULL;
    }
    return j;
}

void tpl_digest_job_free(struct tpl_digest_job *j)
{
    if (!j)
        return;
    atomic_store(&j->stop, true); /* the join waits for one chunk at most */
    job_end(j);
}
