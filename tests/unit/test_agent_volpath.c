/* test_agent_volpath: the agent's file ops never enter a volume mount, however the path
 * gets there (resolve.h). agent_resolve's walk is checked against the kernel's meaning
 * of links (chains, relative and absolute targets, ".." after a link, loops, a missing
 * tail); then a real FUSE mount made by the agent's own `mount` op (its requests go to
 * this test, which never answers them, as a host would not while the agent waits on
 * itself) is reached through links planted beside it: a file link, a directory link,
 * a link in the middle of a path, a chain. Every file op through them must answer (the
 * refusal invalid_argument) and the agent must still run a command afterwards; before
 * the fix the first of them blocked the agent for good. The mount part needs root and
 * /dev/fuse (it mounts on this host) and skips, saying so, without them. */
#include "test_agent_harness.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/mount.h>
#include <sys/stat.h>

#include "agent/resolve.h"
#include "agent/users.h"

#define BUF (2 * PATH_MAX) /* room for a PATH_MAX base plus a suffix */

/* A scratch tree for the resolver: real/dir/file and links around it. */
static void mkfile(const char *dir, const char *name)
{
    char p[2 * BUF];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(fd >= 0);
    close(fd);
}

static void mklink(const char *dir, const char *name, const char *target)
{
    char p[BUF];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    assert_int_equal(symlink(target, p), 0);
}

/* agent_resolve(base/in) must give base/want (or fail with errno want_err). */
static void expect(const char *base, const char *in, bool follow, const char *want, int want_err)
{
    char path[BUF], out[PATH_MAX], full[BUF];
    snprintf(path, sizeof path, "%s/%s", base, in);
    errno = 0;
    int rc = agent_resolve(path, follow, out);
    if (want_err) {
        if (rc == 0 || errno != want_err)
            print_error("%s: rc %d errno %d (%s), want errno %d\n", in, rc, errno, rc ? "" : out, want_err);
        assert_int_equal(rc, -1);
        assert_int_equal(errno, want_err);
        return;
    }
    if (rc < 0)
        print_error("%s: %s\n", in, strerror(errno));
    assert_int_equal(rc, 0);
    snprintf(full, sizeof full, "%s/%s", base, want);
    assert_string_equal(out, full);
}

static void test_resolve_walk(void **state)
{
    char tmpl[] = "/tmp/test-volpath-XXXXXX", base[PATH_MAX], p[BUF];
    assert_non_null(mkdtemp(tmpl));
    assert_non_null(realpath(tmpl, base)); /* /tmp itself may be a link */
    snprintf(p, sizeof p, "%s/real", base);
    assert_int_equal(mkdir(p, 0755), 0);
    snprintf(p, sizeof p, "%s/real/dir", base);
    assert_int_equal(mkdir(p, 0755), 0);
    mkfile(p, "file");
    char abs_real[BUF];
    snprintf(abs_real, sizeof abs_real, "%s/real", base);
    mklink(base, "l", "real");                    /* relative */
    mklink(base, "abs", abs_real);                /* absolute */
    mklink(base, "chain1", "chain2");             /* chain into the absolute one */
    mklink(base, "chain2", "abs/dir");
    mklink(base, "up", "real/dir/..");            /* ".." after a link: its target's parent */
    mklink(base, "fl", "real/dir/file");          /* a file link */
    mklink(base, "loop1", "loop2");
    mklink(base, "loop2", "loop1");
    mklink(base, "dangling", "nothere/x");
    mklink(base, "dotdot_missing", "nothere/../real");
    mklink(base, "empty_parent", "real/dir/file/x");

    expect(base, "l/dir/file", true, "real/dir/file", 0);
    expect(base, "l", false, "l", 0);              /* the last link itself */
    expect(base, "l", true, "real", 0);
    expect(base, "abs/dir", true, "real/dir", 0);
    expect(base, "chain1/file", true, "real/dir/file", 0);
    expect(base, "chain1", false, "chain1", 0);
    expect(base, "up/dir/file", true, "real/dir/file", 0);
    expect(base, "fl", true, "real/dir/file", 0);
    expect(base, "loop1", true, NULL, ELOOP);
    expect(base, "loop1", false, "loop1", 0);
    expect(base, "real/dir/file/x", true, NULL, ENOTDIR);
    expect(base, "empty_parent", true, NULL, ENOTDIR);
    /* a missing tail is kept as it stands, below the real parent */
    expect(base, "l/new/a/b", true, "real/new/a/b", 0);
    expect(base, "dangling", true, "nothere/x", 0);
    expect(base, "dotdot_missing", true, NULL, ENOENT);
    /* no volume is mounted: a path on another file system is fine */
    char out[PATH_MAX];
    assert_int_equal(agent_resolve("/proc/self", false, out), 0);
    assert_string_equal(out, "/proc/self");
    snprintf(p, sizeof p, "rm -rf '%s'", base);
    assert_int_equal(system(p), 0);
}

/* ---- a real mount, reached through links -------------------------------------------- */

/* A bound on the wait for one answer: a hang guard (the agent blocked in FUSE never
 * answers), not a timing assertion. */
#define VOLPATH_HANG_SECONDS 60

struct mnt {
    struct ah h;
    struct col k;           /* the mount channel: its OUT is the kernel's FUSE requests */
    char dir[PATH_MAX];     /* the mount point */
};

/* Runs the loop until c is closed (or, if or_started, has started); on a hang kills the
 * agent and detaches the mount (so the test process is not left with a child stuck in
 * FUSE), then fails. */
static void mnt_wait(struct mnt *m, const struct col *c, bool or_started, const char *what)
{
    time_t start = time(NULL);
    while (!c->closed && !(or_started && c->started)) {
        if (time(NULL) - start > VOLPATH_HANG_SECONDS) {
            kill(m->h.agent, SIGKILL);
            umount2(m->dir, MNT_DETACH);
            fail_msg("%s: no answer in %d s: the agent waits on its own mount", what,
                     VOLPATH_HANG_SECONDS);
        }
        ah_step(&m->h);
    }
}

/* Sends req (taken) and expects the error `code` (or success if code is NULL: a watch
 * that started, or any other op's result, returned; caller decrefs). */
static json_t *mnt_op(struct mnt *m, json_t *req, const char *code)
{
    char *s = json_dumps(req, JSON_COMPACT);
    const char *op = json_string_value(json_object_get(req, "op"));
    bool watch = !strcmp(op, "watch");
    struct col c;
    if (!strcmp(op, "write")) {
        col_open(&m->h, &c, req, 0, true);
        assert_int_equal(agentc_eof(c.ch), 0);
    } else {
        col_open(&m->h, &c, req, 0, true);
    }
    mnt_wait(m, &c, watch, s);
    if (strcmp(c.code, code ? code : ""))
        print_error("%s: got \"%s\", want %s\n", s, c.code, code ? code : "success");
    assert_string_equal(c.code, code ? code : "");
    json_t *r = json_incref(col_find(&c, "result"));
    if (!c.closed)
        agentc_close(c.ch);
    col_free(&c);
    free(s);
    return r;
}

static json_t *op2(const char *op, const char *k1, const char *v1)
{
    return json_pack("{s:s, s:s}", "op", op, k1, v1);
}

static void test_ops_through_links_into_a_mount(void **state)
{
    if (geteuid() != 0 || access("/dev/fuse", R_OK | W_OK) != 0) {
        print_message("skipped: mounting FUSE on this host needs root and /dev/fuse\n");
        skip();
    }
    /* The agent's user files are read on its loop too: they live in etc/ here, which
     * the test points into the mount later. */
    char etc[] = "/tmp/test-volpath-etc-XXXXXX", pw[PATH_MAX];
    assert_non_null(mkdtemp(etc));
    snprintf(pw, sizeof pw, "cp /etc/passwd /etc/group '%s'/", etc);
    assert_int_equal(system(pw), 0);
    agent_users_set_dir(etc); /* the agent child inherits it */
    struct mnt m;
    ah_start(&m.h);
    const char *d = m.h.dir;
    char p[BUF], q[BUF];
    snprintf(m.dir, sizeof m.dir, "%s/vols/mnt", d);
    col_open(&m.h, &m.k, op2("mount", "path", m.dir), 0, true);
    while (!col_find(&m.k, "mounted")) {
        if (m.k.closed) {
            print_message("skipped: this host refuses the FUSE mount (%s)\n", m.k.code);
            col_free(&m.k);
            ah_stop(&m.h);
            skip();
        }
        ah_step(&m.h);
    }
    /* Links planted beside the mount, as a guest's own command would. */
    snprintf(p, sizeof p, "%s/l", d);
    assert_int_equal(symlink(m.dir, p), 0);                   /* to the mount point */
    snprintf(p, sizeof p, "%s/ld", d);
    snprintf(q, sizeof q, "%s/sub", m.dir);
    assert_int_equal(symlink(q, p), 0);                       /* to a dir inside */
    snprintf(p, sizeof p, "%s/lf", d);
    snprintf(q, sizeof q, "%s/file", m.dir);
    assert_int_equal(symlink(q, p), 0);                       /* to a file inside */
    snprintf(p, sizeof p, "%s/mid", d);
    assert_int_equal(mkdir(p, 0755), 0);
    snprintf(p, sizeof p, "%s/mid/up", d);
    assert_int_equal(symlink("../vols", p), 0);               /* in the middle of a path */
    snprintf(p, sizeof p, "%s/c1", d);
    assert_int_equal(symlink("c2", p), 0);                    /* a chain */
    snprintf(p, sizeof p, "%s/c2", d);
    assert_int_equal(symlink("l", p), 0);

    static const char *const into[] = {"l", "l/x", "ld", "lf", "mid/up/mnt/file", "c1/file", "c1"};
    for (size_t i = 0; i < sizeof into / sizeof into[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", d, into[i]);
        snprintf(q, sizeof q, "%s/moved", d);
        json_decref(mnt_op(&m, op2("read", "path", p), FRAME_E_INVALID_ARGUMENT));
        json_decref(mnt_op(&m, op2("list", "path", p), FRAME_E_INVALID_ARGUMENT));
        json_decref(mnt_op(&m, op2("write", "path", p), FRAME_E_INVALID_ARGUMENT));
        json_decref(mnt_op(&m, op2("watch", "path", p), FRAME_E_INVALID_ARGUMENT));
        if (strchr(into[i], '/')) { /* below a link: the op itself would land inside */
            json_decref(mnt_op(&m, op2("stat", "path", p), FRAME_E_INVALID_ARGUMENT));
            json_decref(mnt_op(&m, op2("mkdir", "path", p), FRAME_E_INVALID_ARGUMENT));
            json_decref(mnt_op(&m, op2("remove", "path", p), FRAME_E_INVALID_ARGUMENT));
            json_decref(mnt_op(&m, json_pack("{s:s, s:s, s:s}", "op", "rename", "from", p, "to", q),
                               FRAME_E_INVALID_ARGUMENT));
        }
    }
    /* The links themselves are fine: a stat names no target (its attributes would be a
     * FUSE request), a mkdir over one exists, a rename moves the link. */
    snprintf(p, sizeof p, "%s/lf", d);
    json_t *r = mnt_op(&m, op2("stat", "path", p), NULL);
    assert_string_equal(json_string_value(json_object_get(json_object_get(r, "stat"), "type")), "symlink");
    assert_null(json_object_get(json_object_get(r, "stat"), "target"));
    json_decref(r);
    json_decref(mnt_op(&m, op2("mkdir", "path", p), FRAME_E_ALREADY_EXISTS));
    snprintf(q, sizeof q, "%s/lf2", d);
    json_decref(mnt_op(&m, json_pack("{s:s, s:s, s:s}", "op", "rename", "from", p, "to", q), NULL));
    /* Replies name paths as the request did, even through a link to a directory. */
    snprintf(p, sizeof p, "%s/ml", d);
    snprintf(q, sizeof q, "%s/mid", d);
    assert_int_equal(symlink(q, p), 0);
    r = mnt_op(&m, op2("list", "path", p), NULL);
    assert_int_equal(json_integer_value(json_object_get(r, "count")), 1);
    json_decref(r);
    snprintf(p, sizeof p, "%s/ml/up", d);
    r = mnt_op(&m, op2("stat", "path", p), NULL);
    assert_string_equal(json_string_value(json_object_get(json_object_get(r, "stat"), "path")), p);
    json_decref(r);
    /* The mount point is left out of a listing of its parent (and of a deep one). */
    snprintf(p, sizeof p, "%s/vols", d);
    r = mnt_op(&m, op2("list", "path", p), NULL);
    assert_int_equal(json_integer_value(json_object_get(r, "count")), 0);
    json_decref(r);
    r = mnt_op(&m, json_pack("{s:s, s:s, s:i}", "op", "list", "path", d, "depth", 4), NULL);
    assert_true(json_integer_value(json_object_get(r, "count")) > 0);
    json_decref(r);
    /* A recursive watch skips it; a recursive remove stops at it, as at any mount. */
    json_decref(mnt_op(&m, json_pack("{s:s, s:s, s:b}", "op", "watch", "path", d, "recursive", 1), NULL));
    snprintf(p, sizeof p, "%s/vols", d);
    json_decref(mnt_op(&m, json_pack("{s:s, s:s, s:b}", "op", "remove", "path", p, "recursive", 1),
                       FRAME_E_INTERNAL));
    /* /etc/passwd (here etc/passwd) made a link into the mount: every request naming a
     * user (all default to root) fails at once instead of hanging; put back, they work. */
    snprintf(pw, sizeof pw, "%s/passwd", etc);
    snprintf(q, sizeof q, "%s.real", pw);
    assert_int_equal(rename(pw, q), 0);
    snprintf(p, sizeof p, "%s/passwd", m.dir);
    assert_int_equal(symlink(p, pw), 0);
    json_decref(mnt_op(&m, op2("stat", "path", d), FRAME_E_INTERNAL));
    json_decref(mnt_op(&m, json_pack("{s:s, s:[s]}", "op", "exec", "argv", "true"), FRAME_E_INTERNAL));
    assert_int_equal(unlink(pw), 0);
    assert_int_equal(rename(q, pw), 0);
    json_decref(mnt_op(&m, op2("stat", "path", d), NULL));
    /* Closing the channel detaches the mount (fuse_relay.c); then the agent still runs
     * a command. */
    agentc_close(m.k.ch);
    col_free(&m.k);
    col_expect_stdout(&m.h, json_pack("{s:s, s:[sss]}", "op", "exec", "argv", "sh", "-c", "echo alive"),
                      "alive\n");
    struct statx st, parent; /* DONT_SYNC: no FUSE request even if the mount were left */
    snprintf(p, sizeof p, "%s/vols", d);
    assert_int_equal(statx(AT_FDCWD, m.dir, AT_STATX_DONT_SYNC, STATX_TYPE, &st), 0);
    assert_int_equal(statx(AT_FDCWD, p, AT_STATX_DONT_SYNC, STATX_TYPE, &parent), 0);
    assert_true(st.stx_dev_major == parent.stx_dev_major && st.stx_dev_minor == parent.stx_dev_minor);
    ah_stop(&m.h);
    agent_users_set_dir("/etc");
    snprintf(pw, sizeof pw, "rm -rf '%s'", etc);
    assert_int_equal(system(pw), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resolve_walk),
        cmocka_unit_test(test_ops_through_links_into_a_mount),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
