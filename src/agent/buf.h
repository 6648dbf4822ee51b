/* agent_buf: a growable byte FIFO (queued output to the host, process stdin, process
 * output). Owns its storage; a zeroed struct is an empty buffer. */
#ifndef SPACE_AGENT_BUF_H
#define SPACE_AGENT_BUF_H

#include <stddef.h>
#include <stdint.h>

struct agent_buf {
    uint8_t *data;   /* malloc'd storage (owned), NULL when never used */
    size_t off;      /* first unread byte */
    size_t len;      /* unread bytes from off */
    size_t cap;      /* allocated bytes */
};

/* Appends n bytes (copied). 0, or -1 on allocation failure (buffer unchanged). */
int agent_buf_add(struct agent_buf *b, const void *p, size_t n);
/* Drops the first n (<= len) bytes. */
void agent_buf_drop(struct agent_buf *b, size_t n);
/* First unread byte (valid until the next add/drop). */
static inline const uint8_t *agent_buf_peek(const struct agent_buf *b)
{
    return b->data + b->off;
}
/* Frees the storage; the buffer is empty and reusable afterwards. */
void agent_buf_free(struct agent_buf *b);

/* Unread bytes held in all agent_bufs of the process now, and the most ever held
 * (reported by the `health` op; the backpressure tests check it stays bounded). */
size_t agent_buf_total(void);
size_t agent_buf_peak(void);

#endif
