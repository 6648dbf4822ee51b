/* test_vm_memmap: splitting a migration stream into a RAM file + a stream without its
 * pages (vm_memmap_split), on streams built here in QEMU 7.2's format.
 *
 * Checked: ram0's pages land at their offsets (data, zero records, a later zero record
 * over an earlier page), other blocks' pages stay in the stream naming their block, the
 * device state after the RAM section is copied as is; and the stream, which a sandbox's
 * QEMU wrote, is refused (never a crash or a write outside the file) when it is
 * truncated anywhere, names an unknown block, a page outside its block, a RAM block of
 * the wrong size, a page encoding the parser does not know, or another section inside
 * the RAM section. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "daemon/vm/vm_memmap.h"

#define PG 4096
#define RAM_PAGES 16
#define RAM_BYTES ((uint64_t)RAM_PAGES * PG)
#define F_ZERO 0x02
#define F_SIZE 0x04
#define F_PAGE 0x08
#define F_EOS 0x10
#define F_CONT 0x20

struct buf {
    unsigned char *p;
    size_t n, cap;
};

static void put(struct buf *b, const void *p, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2;
        b->p = realloc(b->p, b->cap);
        assert_non_null(b->p);
    }
    memcpy(b->p + b->n, p, n);
    b->n += n;
}

static void put8(struct buf *b, uint8_t v)
{
    put(b, &v, 1);
}

static void put32(struct buf *b, uint32_t v)
{
    unsigned char x[4] = {v >> 24, v >> 16, v >> 8, v};
    put(b, x, 4);
}

static void put64(struct buf *b, uint64_t v)
{
    put32(b, (uint32_t)(v >> 32));
    put32(b, (uint32_t)v);
}

static void putname(struct buf *b, const char *s)
{
    put8(b, (uint8_t)strlen(s));
    put(b, s, strlen(s));
}

static void page(struct buf *b, uint64_t off, int flags, const char *block, int fill)
{
    put64(b, off | (uint64_t)flags);
    if (!(flags & F_CONT))
        putname(b, block);
    if (flags & F_ZERO) {
        put8(b, (uint8_t)fill);
    } else {
        unsigned char pg[PG];
        memset(pg, fill, sizeof pg);
        put(b, pg, sizeof pg);
    }
}

/* Header, configuration, the RAM section's start with blocks ram0 (ram_len) and rom. */
static void head(struct buf *b, uint64_t ram_len)
{
    put32(b, 0x5145564d);
    put32(b, 3);
    put8(b, 0x07);
    put32(b, 7);
    put(b, "microvm", 7);
    put8(b, 0x01);
    put32(b, 2);
    putname(b, "ram");
    put32(b, 0);
    put32(b, 4);
    put64(b, (ram_len + PG) | F_SIZE);
    putname(b, "ram0");
    put64(b, ram_len);
    putname(b, "rom");
    put64(b, PG);
    put64(b, F_EOS);
    put8(b, 0x7e);
    put32(b, 2);
}

static void section(struct buf *b, uint8_t type)
{
    put8(b, type);
    put32(b, 2);
}

static void section_end(struct buf *b)
{
    put64(b, F_EOS);
    put8(b, 0x7e);
    put32(b, 2);
}

static const char DEVICES[] = "\x01" "device-state" "\x04" "{\"json\":1}";

/* The valid stream: pages of ram0 in both sections, a rom page between them. */
static void good_stream(struct buf *b)
{
    head(b, RAM_BYTES);
    section(b, 0x02);
    page(b, 0 * PG, F_PAGE, "ram0", 0x11);
    page(b, 1 * PG, F_ZERO | F_CONT, NULL, 0);
    page(b, 2 * PG, F_PAGE | F_CONT, NULL, 0x22);
    page(b, 0, F_PAGE, "rom", 0x33);
    page(b, 15 * PG, F_PAGE, "ram0", 0x44);
    page(b, 5 * PG, F_ZERO | F_CONT, NULL, 0x55); /* a non-zero fill byte */
    section_end(b);
    section(b, 0x03);
    page(b, 0, F_ZERO, "ram0", 0); /* over page 0's data: must become zero again */
    section_end(b);
    put(b, DEVICES, sizeof DEVICES - 1);
}

static int mfd(const char *name, const struct buf *b)
{
    int fd = memfd_create(name, MFD_CLOEXEC);
    assert_true(fd >= 0);
    if (b) {
        assert_int_equal(write(fd, b->p, b->n), (ssize_t)b->n);
        assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
    }
    return fd;
}

/* Runs the split of b; returns its result, the outputs in *mem / *out (caller frees). */
static int split(const struct buf *b, unsigned char **mem, struct buf *out, char *err,
                 size_t errlen)
{
    int in = mfd("in", b), m = mfd("mem", NULL), o = mfd("out", NULL);
    int r = vm_memmap_split(in, m, RAM_BYTES, o, err, errlen);
    struct stat st;
    assert_int_equal(fstat(o, &st), 0);
    out->n = out->cap = (size_t)st.st_size;
    out->p = malloc(out->n + 1);
    assert_int_equal(pread(o, out->p, out->n, 0), (ssize_t)out->n);
    assert_int_equal(fstat(m, &st), 0);
    assert_true(st.st_size <= (off_t)RAM_BYTES); /* never written past the RAM */
    *mem = calloc(1, RAM_BYTES);
    assert_true(pread(m, *mem, RAM_BYTES, 0) >= 0);
    close(in);
    close(m);
    close(o);
    return r;
}

static void assert_page(const unsigned char *mem, unsigned pg, int fill)
{
    for (unsigned i = 0; i < PG; i++)
        if (mem[(size_t)pg * PG + i] != fill)
            fail_msg("page %u byte %u is %#x, want %#x", pg, i, mem[(size_t)pg * PG + i], fill);
}

static void test_split(void **state)
{
    (void)state;
    struct buf b = {0}, out, want = {0};
    unsigned char *mem;
    char err[200] = "";
    good_stream(&b);
    assert_int_equal(split(&b, &mem, &out, err, sizeof err), 0);
    assert_page(mem, 0, 0);
    assert_page(mem, 1, 0);
    assert_page(mem, 2, 0x22);
    assert_page(mem, 5, 0x55);
    assert_page(mem, 15, 0x44);
    assert_page(mem, 3, 0);
    /* The stream without ram0: the rom page names its block, the END section is empty. */
    head(&want, RAM_BYTES);
    section(&want, 0x02);
    page(&want, 0, F_PAGE, "rom", 0x33);
    section_end(&want);
    section(&want, 0x03);
    section_end(&want);
    put(&want, DEVICES, sizeof DEVICES - 1);
    assert_int_equal(out.n, want.n);
    assert_memory_equal(out.p, want.p, want.n);
    free(mem);
    free(out.p);
    free(want.p);
    free(b.p);
}

/* Records of rom around a dropped ram0 record: the copies are encoded against what the
 * loading QEMU, which never sees ram0's records, read last: rom's first record after
 * ram0 (which names rom) continues the last copied one, and an unnamed rom record
 * follows it correctly. */
static void test_continue_copied(void **state)
{
    (void)state;
    struct buf b = {0}, out;
    unsigned char *mem;
    char err[200] = "";
    head(&b, RAM_BYTES);
    section(&b, 0x02);
    page(&b, 0, F_PAGE, "rom", 0x33);
    page(&b, 0, F_PAGE, "ram0", 0x11);
    section_end(&b);
    section(&b, 0x03);
    page(&b, 0, F_ZERO, "rom", 0);
    page(&b, 0, F_ZERO | F_CONT, NULL, 0);
    section_end(&b);
    assert_int_equal(split(&b, &mem, &out, err, sizeof err), 0);
    assert_page(mem, 0, 0x11);
    /* In the END section both rom records continue the PART section's rom record. */
    struct buf want = {0};
    head(&want, RAM_BYTES);
    section(&want, 0x02);
    page(&want, 0, F_PAGE, "rom", 0x33);
    section_end(&want);
    section(&want, 0x03);
    page(&want, 0, F_ZERO | F_CONT, NULL, 0);
    page(&want, 0, F_ZERO | F_CONT, NULL, 0);
    section_end(&want);
    assert_int_equal(out.n, want.n);
    assert_memory_equal(out.p, want.p, want.n);
    free(want.p);
    free(mem);
    free(out.p);
    free(b.p);
}

static void expect_refused(struct buf *b, const char *why)
{
    struct buf out;
    unsigned char *mem;
    char err[200] = "";
    assert_int_equal(split(b, &mem, &out, err, sizeof err), -1);
    if (!strstr(err, why))
        fail_msg("error \"%s\" does not say \"%s\"", err, why);
    free(mem);
    free(out.p);
    free(b->p);
    memset(b, 0, sizeof *b);
}

static void test_refused(void **state)
{
    (void)state;
    struct buf b = {0};
    head(&b, RAM_BYTES); /* a page just past the end of ram0 */
    section(&b, 0x02);
    page(&b, RAM_BYTES, F_PAGE, "ram0", 1);
    expect_refused(&b, "outside RAM block ram0");
    head(&b, RAM_BYTES); /* past the end of a small block */
    section(&b, 0x02);
    page(&b, PG, F_ZERO, "rom", 0);
    expect_refused(&b, "outside RAM block rom");
    head(&b, RAM_BYTES);
    section(&b, 0x02);
    page(&b, 0, F_PAGE, "nope", 1);
    expect_refused(&b, "unknown RAM block");
    head(&b, RAM_BYTES);
    section(&b, 0x02);
    page(&b, 0, F_PAGE | F_CONT, NULL, 1);
    expect_refused(&b, "continues no block");
    head(&b, RAM_BYTES / 2);
    expect_refused(&b, "missing or not");
    head(&b, RAM_BYTES);
    section(&b, 0x02);
    put64(&b, 0x40); /* XBZRLE */
    expect_refused(&b, "unsupported RAM page record");
    head(&b, RAM_BYTES);
    put8(&b, 0x02);
    put32(&b, 3); /* a part of another section */
    expect_refused(&b, "before the RAM section ended");
    head(&b, RAM_BYTES);
    b.p[4 + 3] = 2; /* version */
    expect_refused(&b, "not a QEMU migration stream");
}

/* Every truncation of the valid stream fails cleanly. */
static void test_truncated(void **state)
{
    (void)state;
    struct buf b = {0};
    good_stream(&b);
    size_t dev = b.n - (sizeof DEVICES - 1);
    for (size_t n = 0; n < dev; n++) {
        struct buf t = {.p = b.p, .n = n}, out;
        unsigned char *mem;
        char err[200] = "";
        if (split(&t, &mem, &out, err, sizeof err) != -1)
            fail_msg("a stream cut at %zu of %zu was accepted", n, dev);
        free(mem);
        free(out.p);
    }
    free(b.p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split),
        cmocka_unit_test(test_continue_copied),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_truncated),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
