/* test_vm_disk: no qemu-img spaced runs trusts an image header a VM could have written.
 *
 * The hostile image is a qcow2 whose header names a FIFO as its backing file: qemu-img
 * opening that name would block forever in open(2), and a FIFO with a reader is visible
 * (opening its write end without blocking succeeds only then). So "never opened" is
 * checked directly, and a regression shows as a run that does not finish in time
 * (bounded: the test then unblocks the FIFO itself) instead of a hang. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <event2/event.h>

#include "daemon/vm/vm.h"

#define DEADLINE_S 20 /* qemu-img takes milliseconds; a TCG-loaded host, seconds */

static char work[64], fifo[128], base_raw[128], hostile[128];

/* Runs a command (no shell); asserts it succeeded. */
static void run(char *const argv[])
{
    pid_t pid = fork();
    if (pid == 0) {
        execvp(argv[0], argv);
        _exit(127);
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* true if some process has the FIFO open for reading now. */
static bool fifo_has_reader(void)
{
    int fd = open(fifo, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd >= 0)
        close(fd); /* also lets a blocked reader go: it sees EOF */
    return fd >= 0;
}

static int setup(void **state)
{
    (void)state;
    snprintf(work, sizeof work, "/tmp/test-vm-disk-XXXXXX");
    assert_non_null(mkdtemp(work));
    snprintf(fifo, sizeof fifo, "%s/canary.fifo", work);
    snprintf(base_raw, sizeof base_raw, "%s/rootfs,1.raw", work); /* a comma to escape */
    snprintf(hostile, sizeof hostile, "%s/frozen.qcow2", work);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    FILE *f = fopen(base_raw, "w");
    assert_non_null(f);
    fputs("hello from the base", f);
    fclose(f);
    assert_int_equal(truncate(base_raw, 1000000), 0);
    /* What a compromised QEMU could leave in a template's frozen overlay: a header
     * naming a file of its choice (-u: made without opening it). */
    char *const mk[] = {"qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b", fifo,
                        "-u", hostile, "1000000", NULL};
    run(mk);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char *const rm[] = {"rm", "-rf", work, NULL};
    run(rm);
    return 0;
}

static uint64_t be64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

struct done {
    int done, err;
    char msg[600];
};

static void on_done(struct vm *vm, int err, const char *msg, void *arg)
{
    struct done *d = arg;
    (void)vm;
    d->done = 1;
    d->err = err;
    snprintf(d->msg, sizeof d->msg, "%s", msg ? msg : "");
}

static struct event_base *loop_base;

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    if (*(int *)arg)
        event_base_loopbreak(loop_base);
}

/* Runs the qemu-img job just started on base (reporting to d) to its end (at most
 * DEADLINE_S, then 5 s more to reap a stuck qemu-img), frees base; *reader: whether the
 * FIFO had a reader meanwhile. */
static void run_job(struct event_base *base, struct done *d, bool *reader)
{
    struct event *tick = event_new(base, -1, EV_PERSIST, on_tick, &d->done);
    struct timeval every = {0, 20000}, limit = {DEADLINE_S, 0};
    event_add(tick, &every);
    event_base_loopexit(base, &limit);
    event_base_dispatch(base);
    *reader = fifo_has_reader(); /* unblocks a regressed qemu-img, too */
    if (!d->done) {
        struct timeval more = {5, 0};
        event_base_loopexit(base, &more);
        event_base_dispatch(base); /* reap it */
    }
    event_free(tick);
    event_base_free(base);
}

/* vm_disk_overlay_create(chain -> out), run to its end (run_job). */
static struct done make_overlay(const struct vm_disk_layer *chain, unsigned n, const char *out,
                                bool *reader)
{
    struct event_base *base = loop_base = event_base_new();
    struct done d = {0};
    assert_int_equal(vm_disk_overlay_create(base, chain, n, out, on_done, &d, NULL), VM_OK);
    run_job(base, &d, reader);
    return d;
}

/* A clone's overlay on the hostile frozen overlay: made without opening any layer. */
static void test_overlay_opens_no_layer(void **state)
{
    (void)state;
    char clone[128];
    snprintf(clone, sizeof clone, "%s/clone.qcow2", work);
    struct vm_disk_layer chain[2] = {{hostile, "qcow2"}, {base_raw, "raw"}};
    bool reader = true;
    struct done d = make_overlay(chain, 2, clone, &reader);
    assert_false(reader);
    assert_true(d.done);
    assert_int_equal(d.err, VM_OK);
    /* its virtual size is the raw image's (rounded up to a sector), read from the new
     * header, which spaced wrote */
    uint8_t h[32];
    int fd = open(clone, O_RDONLY);
    assert_true(fd >= 0);
    assert_int_equal(pread(fd, h, sizeof h, 0), (ssize_t)sizeof h);
    close(fd);
    assert_memory_equal(h, "QFI\xfb", 4);
    assert_int_equal(be64(h + 24), 1000448);
}

/* The whole file, malloc'd (*len bytes). */
static uint8_t *slurp(const char *path, size_t *len)
{
    struct stat st;
    int fd = open(path, O_RDONLY);
    assert_true(fd >= 0 && fstat(fd, &st) == 0 && st.st_size > 0);
    uint8_t *b = malloc((size_t)st.st_size);
    assert_non_null(b);
    assert_int_equal(read(fd, b, (size_t)st.st_size), st.st_size);
    close(fd);
    *len = (size_t)st.st_size;
    return b;
}

static void assert_same_file(const char *a, const char *b)
{
    size_t la, lb;
    uint8_t *x = slurp(a, &la), *y = slurp(b, &lb);
    assert_int_equal(la, lb);
    assert_memory_equal(x, y, la);
    free(x);
    free(y);
}

/* A remembered overlay is copied only for the same qemu-img arguments, byte for byte what
 * qemu-img writes for them; another raw size or chain head is not served from it; the
 * least recently used set goes first. */
static void test_overlay_remembered(void **state)
{
    (void)state;
    char made[128], copy[128], again[128], other_raw[128];
    snprintf(made, sizeof made, "%s/made.qcow2", work);
    snprintf(copy, sizeof copy, "%s/copy.qcow2", work);
    snprintf(again, sizeof again, "%s/again.qcow2", work);
    struct vm_disk_layer chain[2] = {{hostile, "qcow2"}, {base_raw, "raw"}};
    struct vm_disk_protos *ps = vm_disk_protos_new();
    assert_non_null(ps);
    assert_int_equal(vm_disk_overlay_copy(ps, chain, 2, copy), VM_E_NOENT);
    assert_int_equal(access(copy, F_OK), -1);
    bool reader = true;
    struct done d = make_overlay(chain, 2, made, &reader);
    assert_false(reader);
    assert_int_equal(d.err, VM_OK);
    vm_disk_overlay_remember(ps, chain, 2, made);
    assert_int_equal(vm_disk_overlay_copy(ps, chain, 2, copy), VM_OK);
    assert_same_file(made, copy);
    d = make_overlay(chain, 2, again, &reader); /* what qemu-img writes now */
    assert_int_equal(d.err, VM_OK);
    assert_same_file(again, copy);
    struct stat st, want;
    assert_int_equal(stat(copy, &st), 0);
    assert_int_equal(stat(made, &want), 0);
    assert_int_equal(st.st_mode & 07777, want.st_mode & 07777);
    /* Another size of the raw image is another overlay (its virtual size). */
    assert_int_equal(truncate(base_raw, 2000000), 0);
    assert_int_equal(vm_disk_overlay_copy(ps, chain, 2, copy), VM_E_NOENT);
    assert_int_equal(truncate(base_raw, 1000000), 0);
    assert_int_equal(vm_disk_overlay_copy(ps, chain, 2, copy), VM_OK);
    /* Another chain head is another overlay; a bad chain is never served. */
    struct vm_disk_layer raw_only[1] = {{base_raw, "raw"}};
    struct vm_disk_layer bad[2] = {{base_raw, "raw"}, {hostile, "qcow2"}};
    assert_int_equal(vm_disk_overlay_copy(ps, raw_only, 1, copy), VM_E_NOENT);
    assert_int_equal(vm_disk_overlay_copy(ps, bad, 2, copy), VM_E_NOENT);
    /* Four more argument sets (raw images of other names) push out the least recently
     * used: the first set. */
    for (int i = 0; i < 4; i++) {
        snprintf(other_raw, sizeof other_raw, "%s/raw%d.img", work, i);
        FILE *f = fopen(other_raw, "w");
        assert_non_null(f);
        fclose(f);
        assert_int_equal(truncate(other_raw, 1000000), 0);
        struct vm_disk_layer one[1] = {{other_raw, "raw"}};
        vm_disk_overlay_remember(ps, one, 1, made);
        assert_int_equal(vm_disk_overlay_copy(ps, one, 1, copy), VM_OK);
    }
    assert_int_equal(vm_disk_overlay_copy(ps, chain, 2, copy), VM_E_NOENT);
    vm_disk_protos_free(ps);
}

/* Bad chains are refused before anything runs. */
static void test_overlay_bad_chain(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    struct done d = {0};
    char clone[128], missing[128];
    snprintf(clone, sizeof clone, "%s/clone2.qcow2", work);
    snprintf(missing, sizeof missing, "%s/missing.raw", work);
    struct vm_disk_layer raw_first[2] = {{base_raw, "raw"}, {hostile, "qcow2"}};
    struct vm_disk_layer no_raw[1] = {{hostile, "qcow2"}};
    struct vm_disk_layer bad_fmt[1] = {{base_raw, "vmdk"}};
    struct vm_disk_layer gone[1] = {{missing, "raw"}};
    assert_int_equal(vm_disk_overlay_create(base, raw_first, 2, clone, on_done, &d, NULL), VM_E_INVAL);
    assert_int_equal(vm_disk_overlay_create(base, no_raw, 1, clone, on_done, &d, NULL), VM_E_INVAL);
    assert_int_equal(vm_disk_overlay_create(base, bad_fmt, 1, clone, on_done, &d, NULL), VM_E_INVAL);
    assert_int_equal(vm_disk_overlay_create(base, NULL, 0, clone, on_done, &d, NULL), VM_E_INVAL);
    assert_int_equal(vm_disk_overlay_create(base, gone, 1, clone, on_done, &d, NULL), VM_E_NOENT);
    assert_int_equal(access(clone, F_OK), -1);
    event_base_free(base);
}

/* The --image-opts string: each node's driver and file named, backings pinned, commas
 * doubled, and a short buffer refused rather than cut. */
static void test_image_opts(void **state)
{
    (void)state;
    struct vm_disk_layer chain[2] = {{hostile, "qcow2"}, {base_raw, "raw"}};
    char out[2048], want[2048];
    assert_int_equal(vm_disk_image_opts("/x/top,a.qcow2", chain, 2, out, sizeof out), 0);
    snprintf(want, sizeof want,
             "driver=qcow2,file.driver=file,file.filename=/x/top,,a.qcow2,"
             "backing.driver=qcow2,backing.file.driver=file,backing.file.filename=%s,"
             "backing.backing.driver=raw,backing.backing.file.driver=file,"
             "backing.backing.file.filename=%s/rootfs,,1.raw", hostile, work);
    assert_string_equal(out, want);
    assert_int_equal(vm_disk_image_opts("/x/top.qcow2", chain, 2, out, 40), -1);
}

/* Waits for pid at most DEADLINE_S; returns its status, or -1 (killed) on timeout. */
static int wait_bounded(pid_t pid)
{
    int st;
    for (int i = 0; i < DEADLINE_S * 50; i++) {
        if (waitpid(pid, &st, WNOHANG) == pid)
            return st;
        usleep(20000);
    }
    fifo_has_reader();
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    return -1;
}

/* A build VM's overlay naming the FIFO as its backing flattens over the pinned base. */
static void test_flatten_pinned(void **state)
{
    (void)state;
    char out[128];
    snprintf(out, sizeof out, "%s/flat.raw", work);
    struct vm_disk_layer base = {base_raw, "raw"};
    pid_t pid;
    assert_int_equal(vm_disk_flatten_spawn(hostile, &base, 1, out, &pid), VM_OK);
    int st = wait_bounded(pid);
    assert_false(fifo_has_reader());
    assert_true(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    char buf[32] = "";
    FILE *f = fopen(out, "r");
    assert_non_null(f);
    assert_int_equal(fread(buf, 1, 19, f), 19);
    fclose(f);
    assert_string_equal(buf, "hello from the base");
}

/* A header asking for an external data file (a name --image-opts cannot pin) is
 * refused before qemu-img runs; so is a file that is not a qcow2 at all. */
static void test_flatten_refuses_data_file(void **state)
{
    (void)state;
    char df[128], opt[300], img[128], out[128];
    snprintf(df, sizeof df, "%s/data.bin", work);
    snprintf(img, sizeof img, "%s/datafile.qcow2", work);
    snprintf(out, sizeof out, "%s/flat2.raw", work);
    snprintf(opt, sizeof opt, "data_file=%s", df);
    char *const mk[] = {"qemu-img", "create", "-q", "-f", "qcow2", "-o", opt, img, "1M", NULL};
    run(mk);
    struct vm_disk_layer base = {base_raw, "raw"};
    pid_t pid = 0;
    assert_int_equal(vm_disk_flatten_spawn(img, &base, 1, out, &pid), VM_E_INVAL);
    assert_int_equal(vm_disk_flatten_spawn(base_raw, &base, 1, out, &pid), VM_E_INVAL);
    assert_int_equal(pid, 0);
    assert_int_equal(access(out, F_OK), -1);
}

/* Runs vm_disk_flatten(overlay over chain -> out) to its end (run_job). */
static struct done flatten(const char *overlay, const struct vm_disk_layer *chain, unsigned n,
                           const char *out, bool *reader)
{
    struct event_base *base = loop_base = event_base_new();
    struct done d = {0};
    struct vm_disk_job *job = NULL;
    assert_int_equal(vm_disk_flatten(base, overlay, chain, n, out, on_done, &d, &job), VM_OK);
    assert_non_null(job);
    run_job(base, &d, reader);
    return d;
}

/* A capture's chain (its overlay copy naming the FIFO, over a middle qcow2 holding data,
 * over the raw base) flattens, asynchronously, into one raw image holding both layers'
 * data, read-only; the FIFO is never opened. */
static void test_flatten_async_chain(void **state)
{
    (void)state;
    char mid[128], out[128], cmd[512];
    snprintf(mid, sizeof mid, "%s/mid.qcow2", work);
    snprintf(out, sizeof out, "%s/flat3.raw", work);
    char *const mk[] = {"qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b", base_raw,
                        mid, "1000000", NULL};
    run(mk);
    snprintf(cmd, sizeof cmd, "write -P 0x4d 4096 4096");
    char *const io[] = {"qemu-io", "-f", "qcow2", "-c", cmd, mid, NULL};
    run(io);
    struct vm_disk_layer chain[] = {{mid, "qcow2"}, {base_raw, "raw"}};
    bool reader = true;
    struct done d = flatten(hostile, chain, 2, out, &reader);
    assert_false(reader);
    assert_true(d.done);
    assert_int_equal(d.err, VM_OK);
    struct stat st;
    assert_int_equal(stat(out, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0444);
    assert_true(st.st_size >= 1000000); /* the virtual size, in whole sectors */
    char buf[4096 + 32];
    FILE *f = fopen(out, "r");
    assert_non_null(f);
    assert_int_equal(fread(buf, 1, sizeof buf, f), sizeof buf);
    fclose(f);
    assert_memory_equal(buf, "hello from the base", 19); /* the base shows through */
    assert_int_equal((unsigned char)buf[4096], 0x4d);      /* the middle layer's write */
    assert_int_equal((unsigned char)buf[4096 + 31], 0x4d);
}

/* A middle layer asking for an external data file is refused before qemu-img runs (not
 * only the top one): no callback, no output. A failing qemu-img (a layer that is not
 * what its format says) calls back with its message and leaves no output. Cancel kills a
 * run and removes its output, with no callback. */
static void test_flatten_async_refusals(void **state)
{
    (void)state;
    char df[128], opt[300], img[128], out[128], fake[128];
    snprintf(df, sizeof df, "%s/data2.bin", work);
    snprintf(img, sizeof img, "%s/datafile2.qcow2", work);
    snprintf(fake, sizeof fake, "%s/fake.qcow2", work);
    snprintf(out, sizeof out, "%s/flat4.raw", work);
    snprintf(opt, sizeof opt, "data_file=%s", df);
    char *const mk[] = {"qemu-img", "create", "-q", "-f", "qcow2", "-o", opt, img, "1M", NULL};
    run(mk);
    struct event_base *base = event_base_new();
    struct done d = {0};
    struct vm_disk_layer chain[] = {{img, "qcow2"}, {base_raw, "raw"}};
    struct vm_disk_job *job = NULL;
    assert_int_equal(vm_disk_flatten(base, hostile, chain, 2, out, on_done, &d, &job),
                     VM_E_INVAL);
    assert_null(job);
    assert_int_equal(access(out, F_OK), -1);
    /* a canceled run: no callback, no output */
    assert_int_equal(vm_disk_flatten(base, hostile, chain + 1, 1, out, on_done, &d, &job), VM_OK);
    vm_disk_job_cancel(job);
    assert_int_equal(access(out, F_OK), -1);
    event_base_free(base);
    assert_false(d.done);
    /* qemu-img fails: the middle "qcow2" is a qcow2 header with garbage after it */
    FILE *f = fopen(fake, "w");
    assert_non_null(f);
    uint8_t h[104] = {'Q', 'F', 'I', 0xfb, 0, 0, 0, 3};
    h[20] = 0xff; /* cluster_bits 0xffffffff at 20: invalid */
    h[21] = 0xff;
    h[22] = 0xff;
    h[23] = 0xff;
    assert_int_equal(fwrite(h, 1, sizeof h, f), sizeof h);
    fclose(f);
    struct vm_disk_layer bad[] = {{fake, "qcow2"}, {base_raw, "raw"}};
    bool reader;
    d = flatten(hostile, bad, 2, out, &reader);
    assert_true(d.done);
    assert_int_equal(d.err, VM_E_IO);
    assert_non_null(strstr(d.msg, "qemu-img convert failed"));
    assert_int_equal(access(out, F_OK), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_overlay_opens_no_layer),
        cmocka_unit_test(test_overlay_bad_chain),
        cmocka_unit_test(test_overlay_remembered),
        cmocka_unit_test(test_image_opts),
        cmocka_unit_test(test_flatten_pinned),
        cmocka_unit_test(test_flatten_refuses_data_file),
        cmocka_unit_test(test_flatten_async_chain),
        cmocka_unit_test(test_flatten_async_refusals),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
