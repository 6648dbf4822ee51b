/* buf.c: byte FIFO; see buf.h. */
#include "agent/buf.h"

#include <stdlib.h>
#include <string.h>

static size_t buf_total, buf_peak;

size_t agent_buf_total(void)
{
    return buf_total;
}

size_t agent_buf_peak(void)
{
    return buf_peak;
}

int agent_buf_add(struct agent_buf *b, const void *p, size_t n)
{
    if (n == 0)
        return 0;
    if (b->off + b->len + n > b->cap) {
        /* Compact first: FIFOs are mostly drained from the front. */
        if (b->off) {
            memmove(b->data, b->data + b->off, b->len);
            b->off = 0;
        }
        if (b->len + n > b->cap) {
            size_t cap = b->cap ? b->cap : 4096;
            while (cap < b->len + n)
                cap *= 2;
            uint8_t *d = realloc(b->data, cap);
            if (!d)
                return -1;
            b->data = d;
            b->cap = cap;
        }
    }
    memcpy(b->data + b->off + b->len, p, n);
    b->len += n;
    buf_total += n;
    if (buf_total > buf_peak)
        buf_peak = buf_total;
    return 0;
}

void agent_buf_drop(struct agent_buf *b, size_t n)
{
    b->off += n;
    b->len -= n;
    buf_total -= n;
    if (b->len == 0) {
        b->off = 0;
        /* Give back storage a burst grew, so idle channels hold no memory. */
        if (b->cap > 256 * 1024)
            agent_buf_free(b);
    }
}

void agent_buf_free(struct agent_buf *b)
{
    buf_total -= b->len;
    free(b->data);
    memset(b, 0, sizeof *b);
}
