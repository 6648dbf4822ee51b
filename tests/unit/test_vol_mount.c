/* test_vol_mount: the relay between a guest's `mount` channel and space-volfs
 * (daemon/volume/vol_mount.c) holds bounded memory whichever side stalls, ends the mount
 * when space-volfs goes, and mount paths are checked.
 *
 * The real agentc runs against the scripted fake agent (agentc_fake.h); "space-volfs"
 * is replaced by small programs (unjailed: a unit test is not root), one that never
 * reads its socket, one that writes to it without end, one that exits at once. The
 * agent-side bound (a reply's length) is checked through agent_fuse_reply_len. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "agent/fuse_relay.h"
#include "clock.h"
#include "agentc_fake.h"
#include "daemon/volume/vol_mount.h"

static char script_dir[] = "/tmp/test-volm-XXXXXX";

/* A program at script_dir/name running `body` (sh), made executable. */
static const char *script(const char *name, const char *body)
{
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", script_dir, name);
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fprintf(fp, "#!/bin/sh\n%s\n", body);
    fclose(fp);
    assert_int_equal(chmod(path, 0755), 0);
    return path;
}

/* Starts a mount whose "space-volfs" is prog, and reads its OPEN. Returns the channel. */
static struct volm *start(struct fake *f, const char *prog, uint32_t *id)
{
    char pl[4096], err[300];
    handshake(f);
    struct volm_spec spec = {.dir = "arg", .guest_path = "/mnt/v", .volfs = prog,
                             .jail_root = script_dir, .jail = NULL, .label = "test:v"};
    struct volm *m = volm_start(f->base, f->c, &spec, err, sizeof err);
    assert_non_null(m);
    struct frame fr;
    assert_true(fake_recv(f, &fr, pl, sizeof pl));
    assert_int_equal(fr.type, FRAME_OPEN);
    assert_non_null(strstr(pl, "\"op\":\"mount\""));
    assert_non_null(strstr(pl, "\"path\":\"/mnt/v\""));
    *id = fr.channel;
    return m;
}

/* Runs the loop for ms milliseconds, reading what agentc sends (CREDIT grants added to
 * *granted when given) and, when chunk is given, sending DATA OUT on channel id as long
 * as the credit allows (*sent counts it). Returns the peak of volm_buffered. */
static size_t run_for(struct fake *f, struct volm *m, int ms, uint32_t id, const uint8_t *chunk,
                      uint64_t *sent, uint64_t *granted)
{
    size_t peak = 0;
    int64_t end = clock_mono_ms() + ms;
    do {
        if (chunk && *sent + FRAME_MAX_PAYLOAD <= FRAME_WINDOW_INITIAL + *granted) {
            fake_send(f, id, FRAME_DATA, FRAME_STREAM_OUT, chunk, FRAME_MAX_PAYLOAD);
            *sent += FRAME_MAX_PAYLOAD;
        }
        pump(f);
        size_t b = volm_buffered(m);
        peak = b > peak ? b : peak;
        struct pollfd p = {.fd = f->peer, .events = POLLIN};
        if (poll(&p, 1, 1) == 1) {
            char pl[FRAME_MAX_PAYLOAD + 1];
            struct frame fr;
            uint32_t g;
            assert_true(fake_recv(f, &fr, pl, sizeof pl));
            if (granted && fr.type == FRAME_CREDIT && frame_credit_value(&fr, &g) == 0)
                *granted += g;
        }
    } while (clock_mono_ms() < end);
    return peak;
}

/* Guest -> space-volfs with a space-volfs that never reads: the guest is granted credit
 * only for what the socket took, so once the socket is full it stalls, and spaced holds
 * at most one window meanwhile. */
static void test_stalled_volfs_bounds_the_guest(void **state)
{
    struct fake f;
    fake_start(&f);
    uint32_t id;
    struct volm *m = start(&f, script("sleeper", "exec sleep 30"), &id);
    static uint8_t chunk[FRAME_MAX_PAYLOAD];
    memset(chunk, 'q', sizeof chunk);
    uint64_t sent = 0, granted = 0;
    size_t peak = run_for(&f, m, 1500, id, chunk, &sent, &granted);
    uint64_t granted_then = granted;
    size_t peak2 = run_for(&f, m, 700, id, chunk, &sent, &granted);
    assert_true(peak <= FRAME_WINDOW_INITIAL && peak2 <= FRAME_WINDOW_INITIAL);
    assert_int_equal(granted, granted_then);               /* stalled: no more credit */
    assert_true(sent + FRAME_MAX_PAYLOAD > FRAME_WINDOW_INITIAL + granted); /* used it all */
    assert_true(sent < 16u * 1024 * 1024);                 /* the socket's buffer, no more */
    assert_true(volm_live(m));
    volm_free(m); /* kills the sleeper; the fake gets CLOSE */
    char pl[FRAME_MAX_PAYLOAD + 1];
    struct frame fr;
    do
        assert_true(fake_recv(&f, &fr, pl, sizeof pl));
    while (fr.type != FRAME_CLOSE);
    assert_int_equal(fr.channel, id);
    fake_stop(&f);
}

/* space-volfs -> guest with a guest that grants no credit: spaced stops reading the
 * socket once VOLM_QUEUE_MAX waits toward the agent. */
static void test_stalled_guest_bounds_volfs(void **state)
{
    struct fake f;
    fake_start(&f);
    uint32_t id;
    struct volm *m = start(&f, script("talker", "exec yes xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx >&0"), &id);
    size_t peak = run_for(&f, m, 1500, 0, NULL, NULL, NULL);
    assert_true(peak >= VOLM_QUEUE_MAX / 2); /* it did fill up: the bound is what held */
    assert_true(peak <= VOLM_QUEUE_MAX + VOLM_READ_MAX + 16384);
    assert_true(volm_live(m));
    volm_free(m);
    fake_stop(&f);
}

/* space-volfs exiting ends the mount: the agent gets CLOSE (and unmounts). */
static void test_volfs_exit_closes_the_channel(void **state)
{
    struct fake f;
    fake_start(&f);
    uint32_t id;
    struct volm *m = start(&f, script("quitter", "exit 0"), &id);
    char pl[FRAME_MAX_PAYLOAD + 1];
    struct frame fr;
    do
        assert_true(fake_recv(&f, &fr, pl, sizeof pl));
    while (fr.type != FRAME_CLOSE);
    assert_int_equal(fr.channel, id);
    assert_false(volm_live(m));
    volm_free(m);
    fake_stop(&f);
}

static void test_mount_paths(void **state)
{
    const char *ok[] = {"/mnt/data", "/data", "/home/user/v", "/devices", "/procx/a"};
    const char *bad[] = {NULL, "", "/", "mnt", "/mnt/", "/mnt//a", "/mnt/./a", "/mnt/../a",
                         "/mnt/.", "/mnt/..", "/proc", "/proc/x", "/sys", "/sys/fs", "/dev",
                         "/dev/shm", "/mnt/a,b", "/mnt/\n"};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
        assert_null(volm_path_problem(ok[i]));
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_non_null(volm_path_problem(bad[i]));
    char long_path[300];
    memset(long_path, 'a', sizeof long_path);
    long_path[0] = '/';
    long_path[sizeof long_path - 1] = '\0';
    assert_non_null(volm_path_problem(long_path));
}

/* The agent frames the host's replies by their header: a length below a header or above
 * AGENT_FUSE_MSG_MAX is refused before anything is buffered for it. */
static void test_agent_reply_len(void **state)
{
    uint8_t b[8] = {0};
    uint32_t v;
    assert_int_equal(agent_fuse_reply_len(b, 3), 0);
    v = 16;
    memcpy(b, &v, 4);
    assert_int_equal(agent_fuse_reply_len(b, 4), 16);
    v = 15;
    memcpy(b, &v, 4);
    assert_int_equal(agent_fuse_reply_len(b, 4), (size_t)-1);
    v = AGENT_FUSE_MSG_MAX;
    memcpy(b, &v, 4);
    assert_int_equal(agent_fuse_reply_len(b, 8), AGENT_FUSE_MSG_MAX);
    v = AGENT_FUSE_MSG_MAX + 1;
    memcpy(b, &v, 4);
    assert_int_equal(agent_fuse_reply_len(b, 8), (size_t)-1);
    v = 0xffffffffu;
    memcpy(b, &v, 4);
    assert_int_equal(agent_fuse_reply_len(b, 8), (size_t)-1);
}

static int setup(void **state)
{
    return mkdtemp(script_dir) ? 0 : -1;
}

static int teardown(void **state)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", script_dir);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
    (void)open_rec; /* agentc_fake.h's channel recorder: the mount makes its own channel */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stalled_volfs_bounds_the_guest),
        cmocka_unit_test(test_stalled_guest_bounds_volfs),
        cmocka_unit_test(test_volfs_exit_closes_the_channel),
        cmocka_unit_test(test_mount_paths),
        cmocka_unit_test(test_agent_reply_len),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
