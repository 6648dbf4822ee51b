/* vm_memmap: splits a migration stream into a flat RAM file + a stream without those
 * pages (see vm_memmap.h for why).
 *
 * The QEMU 7.2 stream (migration/savevm.c, migration/ram.c) as a stopped guest's precopy
 * writes it, and what is done with each part:
 *
 *   be32 "QEVM", be32 3                                      copied
 *   0x07 configuration: be32 len, machine name               copied (a subsection: refused)
 *   0x01 section start: be32 id, u8 len "ram", be32 instance, be32 version
 *        be64 total|MEM_SIZE, per block {u8 len, name, be64 length}, be64 EOS
 *        0x7e footer: be32 id                                copied; the block list kept
 *   0x02 part / 0x03 end of that id: page records up to EOS, footer
 *        record: be64 offset|flags, [u8 len, block name unless CONTINUE],
 *        ZERO: u8 fill / PAGE: 4096 bytes                    ram0's pages: to the RAM
 *                                                            file; others: copied
 *   after the RAM section's end: device state, EOF, JSON     copied as is
 *
 * Any other section before the RAM section ended (another iterative device), or any
 * other page flag (XBZRLE, compressed, RDMA hooks) makes the split fail. */
#include "vm_memmap.h"
#include "vm_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MM_MAGIC 0x5145564dU /* "QEVM" */
#define MM_VERSION 3U
#define MM_SEC_EOF 0x04
#define MM_SEC_START 0x01
#define MM_SEC_PART 0x02
#define MM_SEC_END 0x03
#define MM_SEC_SUBSECTION 0x05
#define MM_SEC_CONFIG 0x07
#define MM_SEC_FOOTER 0x7e
#define MM_F_ZERO 0x02
#define MM_F_MEM_SIZE 0x04
#define MM_F_PAGE 0x08
#define MM_F_EOS 0x10
#define MM_F_CONTINUE 0x20
#define MM_PAGE 4096U
#define MM_FLAG_MASK ((uint64_t)MM_PAGE - 1)
#define MM_BLOCKS_MAX 32
#define MM_RAM_BLOCK "ram0"
#define MM_BUF (1U << 20)

struct mm_block {
    char name[256];
    uint64_t len;
};

struct mm {
    int in, out, mem;
    uint64_t mem_bytes;
    unsigned char *ibuf, *obuf, *run; /* input, output stream, pending RAM file run */
    size_t ipos, ilen, olen, runlen;
    uint64_t runoff;           /* RAM file offset of run[0] */
    uint8_t *written;          /* one bit per RAM page: written to the file already */
    struct mm_block blocks[MM_BLOCKS_MAX];
    unsigned n_blocks;
    int last_in, last_out;     /* block of the last record read / copied; -1: none */
    char *err;
    size_t errlen;
};

static int mm_fail(struct mm *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int mm_fail(struct mm *m, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->err, m->errlen, fmt, ap);
    va_end(ap);
    return -1;
}

/* ---- input ------------------------------------------------------------------------------ */

/* The next chunk of the capture into ibuf: 0, 1 at its end when eof_ok, or -1 (mm_fail)
 * on an error or an end that comes early. */
static int rd_chunk(struct mm *m, bool eof_ok)
{
    ssize_t n;
    do
        n = read(m->in, m->ibuf, MM_BUF);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return mm_fail(m, "reading the capture: %s", strerror(errno));
    if (n == 0)
        return eof_ok ? 1 : mm_fail(m, "the capture's stream ends early");
    m->ipos = 0;
    m->ilen = (size_t)n;
    return 0;
}

static int rd_fill(struct mm *m)
{
    return m->ipos < m->ilen ? 0 : rd_chunk(m, false);
}

/* Hands out the next n bytes of input: dst may be NULL (skip). */
static int rd(struct mm *m, void *dst, size_t n)
{
    while (n) {
        if (rd_fill(m) < 0)
            return -1;
        size_t k = m->ilen - m->ipos < n ? m->ilen - m->ipos : n;
        if (dst) {
            memcpy(dst, m->ibuf + m->ipos, k);
            dst = (unsigned char *)dst + k;
        }
        m->ipos += k;
        n -= k;
    }
    return 0;
}

static int rd_u8(struct mm *m, uint8_t *v)
{
    return rd(m, v, 1);
}

static int rd_be32(struct mm *m, uint32_t *v)
{
    unsigned char b[4];
    if (rd(m, b, 4) < 0)
        return -1;
    *v = (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
    return 0;
}

static int rd_be64(struct mm *m, uint64_t *v)
{
    uint32_t hi, lo;
    if (rd_be32(m, &hi) < 0 || rd_be32(m, &lo) < 0)
        return -1;
    *v = (uint64_t)hi << 32 | lo;
    return 0;
}

/* A u8-length-prefixed string (QEMU's idstr) into out (NUL-terminated, 256 bytes). */
static int rd_name(struct mm *m, char out[256])
{
    uint8_t len;
    if (rd_u8(m, &len) < 0 || rd(m, out, len) < 0)
        return -1;
    out[len] = '\0';
    return 0;
}

/* ---- output ----------------------------------------------------------------------------- */

static int write_all(int fd, const void *p, size_t n, off_t *off)
{
    const unsigned char *b = p;
    while (n) {
        ssize_t k = off ? pwrite(fd, b, n, *off) : write(fd, b, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        b += k;
        n -= (size_t)k;
        if (off)
            *off += k;
    }
    return 0;
}

static int wr_flush(struct mm *m)
{
    if (m->olen && write_all(m->out, m->obuf, m->olen, NULL) < 0)
        return mm_fail(m, "writing the mapped capture's state: %s", strerror(errno));
    m->olen = 0;
    return 0;
}

static int wr(struct mm *m, const void *p, size_t n)
{
    if (m->olen + n > MM_BUF && wr_flush(m) < 0)
        return -1;
    if (n > MM_BUF)
        return write_all(m->out, p, n, NULL) < 0 ? mm_fail(m, "writing the state: %s",
                                                          strerror(errno)) : 0;
    memcpy(m->obuf + m->olen, p, n);
    m->olen += n;
    return 0;
}

static int wr_u8(struct mm *m, uint8_t v)
{
    return wr(m, &v, 1);
}

static int wr_be32(struct mm *m, uint32_t v)
{
    unsigned char b[4] = {v >> 24, v >> 16, v >> 8, v};
    return wr(m, b, 4);
}

static int wr_be64(struct mm *m, uint64_t v)
{
    return wr_be32(m, (uint32_t)(v >> 32)) < 0 ? -1 : wr_be32(m, (uint32_t)v);
}

static int wr_name(struct mm *m, const char *s)
{
    size_t n = strlen(s);
    return wr_u8(m, (uint8_t)n) < 0 ? -1 : wr(m, s, n);
}

/* Copies n bytes of input to the output. */
static int copy(struct mm *m, size_t n)
{
    while (n) {
        if (rd_fill(m) < 0)
            return -1;
        size_t k = m->ilen - m->ipos < n ? m->ilen - m->ipos : n;
        if (wr(m, m->ibuf + m->ipos, k) < 0)
            return -1;
        m->ipos += k;
        n -= k;
    }
    return 0;
}

/* ---- the RAM file ------------------------------------------------------------------------ */

static int run_flush(struct mm *m)
{
    off_t off = (off_t)m->runoff;
    if (m->runlen && write_all(m->mem, m->run, m->runlen, &off) < 0)
        return mm_fail(m, "writing the capture's RAM file: %s", strerror(errno));
    m->runlen = 0;
    return 0;
}

/* The page at offset off of ram0 becomes the next input page (fill < 0) or a page of
 * the byte fill. Consecutive pages are written as one run. */
static int mem_page(struct mm *m, uint64_t off, int fill)
{
    uint64_t pg = off / MM_PAGE;
    bool seen = m->written[pg / 8] & (1U << (pg % 8));
    if (fill == 0 && !seen) /* the file is a hole there: already zero */
        return 0;
    if (m->runlen && (m->runoff + m->runlen != off || m->runlen == MM_BUF) && run_flush(m) < 0)
        return -1;
    if (!m->runlen)
        m->runoff = off;
    if (fill >= 0)
        memset(m->run + m->runlen, fill, MM_PAGE);
    else if (rd(m, m->run + m->runlen, MM_PAGE) < 0)
        return -1;
    m->runlen += MM_PAGE;
    m->written[pg / 8] |= (uint8_t)(1U << (pg % 8));
    return 0;
}

/* ---- sections ---------------------------------------------------------------------------- */

static int block_find(const struct mm *m, const char *name)
{
    for (unsigned i = 0; i < m->n_blocks; i++)
        if (strcmp(m->blocks[i].name, name) == 0)
            return (int)i;
    return -1;
}

/* The RAM section's start: its block list, copied. */
static int ram_setup(struct mm *m)
{
    uint64_t v, total, sum = 0;
    if (rd_be64(m, &v) < 0)
        return -1;
    total = v & ~MM_FLAG_MASK;
    if ((v & MM_FLAG_MASK) != MM_F_MEM_SIZE)
        return mm_fail(m, "the RAM section does not start with its block list");
    if (wr_be64(m, v) < 0)
        return -1;
    while (sum < total) {
        struct mm_block *b = &m->blocks[m->n_blocks];
        if (m->n_blocks == MM_BLOCKS_MAX)
            return mm_fail(m, "more than %d RAM blocks", MM_BLOCKS_MAX);
        if (rd_name(m, b->name) < 0 || rd_be64(m, &b->len) < 0)
            return -1;
        if (!b->name[0] || block_find(m, b->name) >= 0 || b->len == 0 || b->len % MM_PAGE ||
            b->len > total - sum)
            return mm_fail(m, "RAM block %.64s: empty, repeated or of a bad length", b->name);
        sum += b->len;
        m->n_blocks++;
        if (wr_name(m, b->name) < 0 || wr_be64(m, b->len) < 0)
            return -1;
    }
    int r = block_find(m, MM_RAM_BLOCK);
    if (r < 0 || m->blocks[r].len != m->mem_bytes)
        return mm_fail(m, "the stream's RAM block %s is missing or not %llu bytes",
                       MM_RAM_BLOCK, (unsigned long long)m->mem_bytes);
    if (rd_be64(m, &v) < 0)
        return -1;
    if (v != MM_F_EOS)
        return mm_fail(m, "unexpected data after the RAM block list");
    return wr_be64(m, v);
}

/* One page record of a RAM part/end section whose header word is v. */
static int ram_record(struct mm *m, uint64_t v)
{
    uint64_t flags = v & MM_FLAG_MASK, off = v & ~MM_FLAG_MASK;
    uint64_t kind = flags & ~(uint64_t)MM_F_CONTINUE;
    if (kind != MM_F_ZERO && kind != MM_F_PAGE)
        return mm_fail(m, "unsupported RAM page record (flags %#llx)", (unsigned long long)flags);
    if (!(flags & MM_F_CONTINUE)) {
        char name[256];
        if (rd_name(m, name) < 0)
            return -1;
        m->last_in = block_find(m, name);
        if (m->last_in < 0)
            return mm_fail(m, "a page of the unknown RAM block %.64s", name);
    } else if (m->last_in < 0) {
        return mm_fail(m, "a page record continues no block");
    }
    const struct mm_block *b = &m->blocks[m->last_in];
    if (off > b->len - MM_PAGE)
        return mm_fail(m, "a page at %#llx is outside RAM block %s (%llu bytes)",
                       (unsigned long long)off, b->name, (unsigned long long)b->len);
    uint8_t fill = 0;
    if (strcmp(b->name, MM_RAM_BLOCK) == 0) {
        if (kind == MM_F_ZERO)
            return rd_u8(m, &fill) < 0 ? -1 : mem_page(m, off, fill);
        return mem_page(m, off, -1);
    }
    /* Another block's page stays in the stream, encoded against what the loading QEMU
     * read last, the last copied record (records of ram0 in between are gone): it
     * continues that one's block or names its own. */
    bool cont = m->last_out == m->last_in;
    if (wr_be64(m, off | kind | (cont ? MM_F_CONTINUE : 0)) < 0 ||
        (!cont && wr_name(m, b->name) < 0))
        return -1;
    m->last_out = m->last_in;
    return copy(m, kind == MM_F_ZERO ? 1 : MM_PAGE);
}

/* A RAM part or end section after its header: records up to EOS, then the footer. */
static int ram_part(struct mm *m, uint32_t id)
{
    for (;;) {
        uint64_t v;
        if (rd_be64(m, &v) < 0)
            return -1;
        if (v == MM_F_EOS)
            break;
        if (ram_record(m, v) < 0)
            return -1;
    }
    uint8_t t;
    uint32_t fid;
    if (wr_be64(m, MM_F_EOS) < 0 || rd_u8(m, &t) < 0 || rd_be32(m, &fid) < 0)
        return -1;
    if (t != MM_SEC_FOOTER || fid != id)
        return mm_fail(m, "the RAM section %u has no footer", id);
    return wr_u8(m, t) < 0 ? -1 : wr_be32(m, fid);
}

/* Header, configuration, the RAM section's start. Returns the RAM section's id via *id. */
static int stream_head(struct mm *m, uint32_t *id)
{
    uint32_t magic, version, len, inst, ver;
    uint8_t t;
    char name[256];
    if (rd_be32(m, &magic) < 0 || rd_be32(m, &version) < 0)
        return -1;
    if (magic != MM_MAGIC || version != MM_VERSION)
        return mm_fail(m, "not a QEMU migration stream of version %u", MM_VERSION);
    if (wr_be32(m, magic) < 0 || wr_be32(m, version) < 0 || rd_u8(m, &t) < 0)
        return -1;
    if (t == MM_SEC_CONFIG) {
        if (rd_be32(m, &len) < 0)
            return -1;
        if (len > 255)
            return mm_fail(m, "machine name of %u bytes", len);
        if (wr_u8(m, t) < 0 || wr_be32(m, len) < 0 || copy(m, len) < 0 || rd_u8(m, &t) < 0)
            return -1;
        if (t == MM_SEC_SUBSECTION)
            return mm_fail(m, "the configuration has subsections (capabilities?)");
    }
    if (t != MM_SEC_START || rd_be32(m, id) < 0 || rd_name(m, name) < 0 ||
        rd_be32(m, &inst) < 0 || rd_be32(m, &ver) < 0)
        return mm_fail(m, "the stream does not start with a section");
    if (strcmp(name, "ram") != 0)
        return mm_fail(m, "the first section is %.64s, not ram", name);
    if (wr_u8(m, t) < 0 || wr_be32(m, *id) < 0 || wr_name(m, name) < 0 || wr_be32(m, inst) < 0 ||
        wr_be32(m, ver) < 0 || ram_setup(m) < 0 || rd_u8(m, &t) < 0 || rd_be32(m, &len) < 0)
        return -1;
    if (t != MM_SEC_FOOTER || len != *id)
        return mm_fail(m, "the RAM section's start has no footer");
    return wr_u8(m, t) < 0 ? -1 : wr_be32(m, len);
}

static int stream_split(struct mm *m)
{
    uint32_t id = 0, sid;
    uint8_t t;
    if (stream_head(m, &id) < 0)
        return -1;
    do {
        if (rd_u8(m, &t) < 0)
            return -1;
        if ((t != MM_SEC_PART && t != MM_SEC_END) || rd_be32(m, &sid) < 0 || sid != id)
            return mm_fail(m, "a section other than RAM (type %u) before the RAM section ended", t);
        if (wr_u8(m, t) < 0 || wr_be32(m, sid) < 0 || ram_part(m, id) < 0)
            return -1;
    } while (t != MM_SEC_END);
    /* The rest (device state, EOF, the JSON description) as it is. */
    for (;;) {
        if (m->ipos == m->ilen) {
            int r = rd_chunk(m, true);
            if (r < 0)
                return -1;
            if (r == 1)
                break;
        }
        if (copy(m, m->ilen - m->ipos) < 0)
            return -1;
    }
    return run_flush(m) < 0 ? -1 : wr_flush(m);
}

int vm_memmap_split(int in_fd, int mem_fd, uint64_t mem_bytes, int out_fd, char *err,
                    size_t errlen)
{
    struct mm m = {.in = in_fd, .out = out_fd, .mem = mem_fd, .mem_bytes = mem_bytes,
                   .last_in = -1, .last_out = -1, .err = err, .errlen = errlen};
    int r = -1;
    if (mem_bytes == 0 || mem_bytes % MM_PAGE || mem_bytes > ((uint64_t)1 << 40)) {
        snprintf(err, errlen, "bad RAM size %llu", (unsigned long long)mem_bytes);
        return -1;
    }
    m.ibuf = malloc(MM_BUF);
    m.obuf = malloc(MM_BUF);
    m.run = malloc(MM_BUF);
    m.written = calloc(mem_bytes / MM_PAGE / 8 + 1, 1);
    if (!m.ibuf || !m.obuf || !m.run || !m.written)
        snprintf(err, errlen, "out of memory");
    else if (ftruncate(mem_fd, (off_t)mem_bytes) < 0)
        snprintf(err, errlen, "sizing the capture's RAM file: %s", strerror(errno));
    else
        r = stream_split(&m);
    free(m.ibuf);
    free(m.obuf);
    free(m.run);
    free(m.written);
    return r;
}

/* ---- a capture directory ---------------------------------------------------------------- */

/* snapshot.json of dir with kind "mapped" and the new state size (the rest as written by
 * the capture). 0 or -1. */
static int meta_mapped(const char *dir, long long state_bytes)
{
    char p[4096];
    snprintf(p, sizeof p, "%s/snapshot.json", dir);
    json_t *j = json_load_file(p, JSON_REJECT_DUPLICATES, NULL);
    int r = -1;
    if (j && json_object_set_new(j, "kind", json_string("mapped")) == 0 &&
        json_object_set_new(j, "state_bytes", json_integer(state_bytes)) == 0) {
        char *s = json_dumps(j, JSON_INDENT(1));
        r = s ? vm_write_file_atomic(p, s, strlen(s)) : -1;
        free(s);
    }
    json_decref(j);
    return r;
}

int vm_memmap_capture(const char *dir, unsigned mem_mib, char *err, size_t errlen)
{
    char state[4096], mem[4096], mem_tmp[4096], out_tmp[4096];
    if (snprintf(state, sizeof state, "%s/state", dir) >= (int)sizeof state ||
        snprintf(mem, sizeof mem, "%s/mem", dir) >= (int)sizeof mem ||
        snprintf(mem_tmp, sizeof mem_tmp, "%s/mem.tmp", dir) >= (int)sizeof mem_tmp ||
        snprintf(out_tmp, sizeof out_tmp, "%s/state.map.tmp", dir) >= (int)sizeof out_tmp) {
        snprintf(err, errlen, "capture path too long");
        return -1;
    }
    unlink(mem_tmp);
    unlink(out_tmp);
    int in = open(state, O_RDONLY | O_CLOEXEC);
    int mfd = open(mem_tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    int ofd = open(out_tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    struct stat st;
    int r = -1;
    if (in < 0 || mfd < 0 || ofd < 0)
        snprintf(err, errlen, "opening the capture's files: %s", strerror(errno));
    else if (vm_memmap_split(in, mfd, (uint64_t)mem_mib << 20, ofd, err, errlen) < 0)
        ;
    else if (fsync(mfd) < 0 || fsync(ofd) < 0 || fstat(ofd, &st) < 0)
        snprintf(err, errlen, "syncing the mapped capture: %s", strerror(errno));
    /* Root-owned 0444 before it is in place: every restore maps it private and read-only,
     * like a template's RAM file; no clone may ever write it. */
    else if (vm_jail_freeze(mem_tmp) < 0 || vm_jail_freeze(out_tmp) < 0)
        snprintf(err, errlen, "making the mapped capture read-only: %s", strerror(errno));
    /* The full stream is replaced last but one and snapshot.json last: a crash in between
     * leaves a state whose size snapshot.json does not match, which a restore refuses. */
    else if (rename(mem_tmp, mem) < 0 || rename(out_tmp, state) < 0)
        snprintf(err, errlen, "putting the mapped capture in place: %s", strerror(errno));
    else if (meta_mapped(dir, (long long)st.st_size) < 0)
        snprintf(err, errlen, "rewriting the capture's snapshot.json failed");
    else
        r = 0;
    if (in >= 0)
        close(in);
    if (mfd >= 0)
        close(mfd);
    if (ofd >= 0)
        close(ofd);
    if (r < 0) {
        unlink(mem_tmp);
        unlink(out_tmp);
    }
    return r;
}
