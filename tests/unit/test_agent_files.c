/* test_agent_files: the agent's file ops through agentc: streamed write/read of a
 * 64 MiB file, stat/list/mkdir/remove/rename with their errors, ownership, watch, and
 * the path rules (normalisation, NUL bytes, above /), user xattrs on write and stat. */
#include "test_agent_harness.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "agent/req.h"
#include "agent/users.h"

static uint8_t pattern(uint64_t off)
{
    return (uint8_t)(off ^ (off >> 8) ^ (off >> 16) ^ (off >> 24));
}

static json_t *op_path(const char *op, const char *path)
{
    return json_pack("{s:s, s:s}", "op", op, "path", path);
}

/* Upload 64 MiB under the agent's credits, then download it, checking every byte. */
static void test_large_write_read(void **state)
{
    const uint64_t total = 64u << 20;
    struct ah h;
    ah_start(&h);
    char path[128];
    snprintf(path, sizeof path, "%s/big/nested/file.bin", h.dir);

    struct col w;
    col_open(&h, &w, json_pack("{s:s, s:s, s:i}", "op", "write", "path", path, "mode", 0600), 0, true);
    uint8_t chunk[256 * 1024];
    uint64_t sent = 0;
    size_t max_queued = 0;
    while (sent < total) {
        /* Keep at most one chunk queued: backpressure toward our "client". */
        if (agentc_queued(w.ch) > 0) {
            w.drained = false;
            ah_wait(&h, &w.drained);
            continue;
        }
        for (size_t i = 0; i < sizeof chunk; i++)
            chunk[i] = pattern(sent + i);
        assert_int_equal(agentc_write(w.ch, chunk, sizeof chunk), 0);
        sent += sizeof chunk;
        if (agentc_queued(w.ch) > max_queued)
            max_queued = agentc_queued(w.ch);
    }
    assert_int_equal(agentc_eof(w.ch), 0);
    ah_wait(&h, &w.closed);
    assert_string_equal(w.code, "");
    json_t *res = col_find(&w, "result");
    assert_non_null(res);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(res, "stat"), "size")), total);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(res, "stat"), "mode")), 0600);
    assert_true(max_queued <= sizeof chunk);
    col_free(&w);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_size, total);

    struct col r;
    col_open(&h, &r, op_path("read", path), 0, false);
    uint64_t want = 0;
    for (uint64_t off = 0; off < total; off++)
        want = want * 31 + pattern(off);
    ah_wait(&h, &r.closed);
    assert_string_equal(r.code, "");
    assert_true(r.eof[FRAME_STREAM_OUT]);
    assert_int_equal(r.len[FRAME_STREAM_OUT], total);
    assert_true(r.sum == want);
    json_t *st_ev = col_find(&r, "stat");
    assert_int_equal(json_integer_value(json_object_get(json_object_get(st_ev, "stat"), "size")), total);
    col_free(&r);

    json_t *hl = ah_ok(&h, json_pack("{s:s}", "op", "health"));
    json_int_t peak = json_integer_value(json_object_get(hl, "buffered_peak"));
    print_message("agent buffered_peak=%lld bytes for 64 MiB up + down\n", (long long)peak);
    assert_true(peak < 4 * 1024 * 1024);
    json_decref(hl);
    ah_stop(&h);
}

static void test_read_range_and_errors(void **state)
{
    struct ah h;
    ah_start(&h);
    char path[128], code[64];
    snprintf(path, sizeof path, "%s/f.txt", h.dir);
    FILE *f = fopen(path, "w");
    fputs("hello world", f);
    fclose(f);
    char *out;
    size_t n;
    json_t *r = ah_call(&h, json_pack("{s:s, s:s, s:i, s:i}", "op", "read", "path", path, "offset",
                                      6, "length", 3), &out, &n, code);
    assert_non_null(r);
    assert_int_equal(n, 3);
    assert_memory_equal(out, "wor", 3);
    free(out);
    json_decref(r);
    ah_expect_error(&h, op_path("read", h.dir), FRAME_E_IS_DIR);
    ah_expect_error(&h, op_path("read", "/nonexistent/x"), FRAME_E_NOT_FOUND);
    ah_expect_error(&h, op_path("read", "/dev/null"), FRAME_E_INVALID_ARGUMENT);
    ah_expect_error(&h, json_pack("{s:s, s:s, s:i}", "op", "read", "path", path, "offset", -1),
                    FRAME_E_INVALID_ARGUMENT);
    /* writing over a directory, into a path below a file */
    ah_expect_error(&h, op_path("write", h.dir), FRAME_E_IS_DIR);
    char below[160];
    snprintf(below, sizeof below, "%s/sub", path);
    ah_expect_error(&h, op_path("write", below), FRAME_E_NOT_DIR);
    ah_stop(&h);
}

/* write in append mode; write as another user owns the file and the parents made */
static void test_write_modes(void **state)
{
    struct ah h;
    ah_start(&h);
    char path[128];
    snprintf(path, sizeof path, "%s/u/d/owned.txt", h.dir);
    struct col w;
    col_open(&h, &w, json_pack("{s:s, s:s, s:s}", "op", "write", "path", path, "user", "nobody"), 0, true);
    assert_int_equal(agentc_write(w.ch, "abc", 3), 0);
    assert_int_equal(agentc_eof(w.ch), 0);
    ah_wait(&h, &w.closed);
    json_t *st = json_object_get(col_find(&w, "result"), "stat");
    assert_string_equal(json_string_value(json_object_get(st, "owner")), "nobody");
    assert_int_equal(json_integer_value(json_object_get(st, "mode")), 0644);
    col_free(&w);
    char dir[128];
    snprintf(dir, sizeof dir, "%s/u/d", h.dir);
    struct stat sb;
    assert_int_equal(stat(dir, &sb), 0);
    assert_int_equal(sb.st_uid, 65534);

    col_open(&h, &w, json_pack("{s:s, s:s, s:b}", "op", "write", "path", path, "append", 1), 0, true);
    assert_int_equal(agentc_write(w.ch, "def", 3), 0);
    assert_int_equal(agentc_eof(w.ch), 0);
    ah_wait(&h, &w.closed);
    col_free(&w);
    char buf[16] = {0};
    int fd = open(path, O_RDONLY);
    assert_int_equal(read(fd, buf, sizeof buf), 6);
    close(fd);
    assert_string_equal(buf, "abcdef");

    /* A cancelled upload leaves the old content and no temporary file. */
    col_open(&h, &w, op_path("write", path), 0, true);
    assert_int_equal(agentc_write(w.ch, "partial", 7), 0);
    json_t *hl = ah_ok(&h, json_pack("{s:s}", "op", "health")); /* the DATA has been handled */
    json_decref(hl);
    agentc_close(w.ch);
    hl = ah_ok(&h, json_pack("{s:s}", "op", "health"));
    json_decref(hl);
    col_free(&w);
    fd = open(path, O_RDONLY);
    memset(buf, 0, sizeof buf);
    assert_int_equal(read(fd, buf, sizeof buf), 6);
    close(fd);
    json_t *ls = ah_ok(&h, op_path("list", dir));
    assert_int_equal(json_integer_value(json_object_get(ls, "count")), 1);
    json_decref(ls);
    ah_stop(&h);
}

static void test_dir_ops(void **state)
{
    struct ah h;
    ah_start(&h);
    char a[128], c[160], f[200], g[200];
    snprintf(a, sizeof a, "%s/a", h.dir);
    snprintf(c, sizeof c, "%s/b/c", a);
    snprintf(f, sizeof f, "%s/f.txt", c);
    snprintf(g, sizeof g, "%s/g.txt", c);

    json_t *r = ah_ok(&h, op_path("mkdir", c));
    assert_string_equal(json_string_value(json_object_get(json_object_get(r, "stat"), "type")), "dir");
    json_decref(r);
    ah_expect_error(&h, op_path("mkdir", c), FRAME_E_ALREADY_EXISTS);
    char nested[200];
    snprintf(nested, sizeof nested, "%s/x/y", h.dir);
    ah_expect_error(&h, json_pack("{s:s, s:s, s:b}", "op", "mkdir", "path", nested, "parents", 0),
                    FRAME_E_NOT_FOUND);
    FILE *fp = fopen(f, "w");
    fputs("12345", fp);
    fclose(fp);
    char under_file[220];
    snprintf(under_file, sizeof under_file, "%s/z", f);
    ah_expect_error(&h, op_path("mkdir", f), FRAME_E_NOT_DIR);
    ah_expect_error(&h, op_path("mkdir", under_file), FRAME_E_NOT_DIR);

    r = ah_ok(&h, op_path("stat", f));
    json_t *st = json_object_get(r, "stat");
    assert_int_equal(json_integer_value(json_object_get(st, "size")), 5);
    assert_string_equal(json_string_value(json_object_get(st, "name")), "f.txt");
    assert_string_equal(json_string_value(json_object_get(st, "type")), "file");
    assert_string_equal(json_string_value(json_object_get(st, "owner")), "root");
    json_decref(r);

    char link[200];
    snprintf(link, sizeof link, "%s/link", a);
    assert_int_equal(symlink(f, link), 0);
    r = ah_ok(&h, op_path("stat", link));
    st = json_object_get(r, "stat");
    assert_string_equal(json_string_value(json_object_get(st, "type")), "symlink");
    assert_string_equal(json_string_value(json_object_get(st, "symlink_target")), f);
    json_decref(r);

    /* list: depth 1 sees b and link; depth 3 also b/c and b/c/f.txt */
    r = ah_ok(&h, op_path("list", a));
    assert_int_equal(json_integer_value(json_object_get(r, "count")), 2);
    json_decref(r);
    struct col k;
    col_open(&h, &k, json_pack("{s:s, s:s, s:i}", "op", "list", "path", a, "depth", 3), 0, true);
    ah_wait(&h, &k.closed);
    assert_int_equal(json_integer_value(json_object_get(col_find(&k, "result"), "count")), 4);
    json_t *entries = json_object_get(col_find(&k, "entries"), "entries");
    bool saw_f = false;
    size_t i;
    json_t *e;
    json_array_foreach(entries, i, e)
        saw_f |= strcmp(json_string_value(json_object_get(e, "path")), f) == 0;
    assert_true(saw_f);
    col_free(&k);
    ah_expect_error(&h, op_path("list", f), FRAME_E_NOT_DIR);
    ah_expect_error(&h, json_pack("{s:s, s:s, s:i}", "op", "list", "path", a, "depth", 0),
                    FRAME_E_INVALID_ARGUMENT);

    r = ah_ok(&h, json_pack("{s:s, s:s, s:s}", "op", "rename", "from", f, "to", g));
    assert_string_equal(json_string_value(json_object_get(json_object_get(r, "stat"), "name")), "g.txt");
    json_decref(r);
    ah_expect_error(&h, op_path("stat", f), FRAME_E_NOT_FOUND);
    ah_expect_error(&h, json_pack("{s:s, s:s, s:s}", "op", "rename", "from", f, "to", g),
                    FRAME_E_NOT_FOUND);

    ah_expect_error(&h, op_path("remove", a), FRAME_E_NOT_EMPTY);
    json_decref(ah_ok(&h, op_path("remove", g)));
    json_decref(ah_ok(&h, json_pack("{s:s, s:s, s:b}", "op", "remove", "path", a, "recursive", 1)));
    ah_expect_error(&h, op_path("stat", a), FRAME_E_NOT_FOUND);
    ah_expect_error(&h, op_path("remove", "/"), FRAME_E_INVALID_ARGUMENT);
    ah_stop(&h);
}

/* Paths: relative to home, normalised, NUL and "above /" refused, unknown user. */
static void test_paths(void **state)
{
    char out[PATH_MAX];
    const char *why;
    assert_int_equal(agent_path_resolve("x/./y//z/../w", "/home/u", out, sizeof out, &why), 0);
    assert_string_equal(out, "/home/u/x/y/w");
    assert_int_equal(agent_path_resolve("../../etc", "/home/u", out, sizeof out, &why), 0);
    assert_string_equal(out, "/etc");
    assert_int_equal(agent_path_resolve("/a/..", "/h", out, sizeof out, &why), 0);
    assert_string_equal(out, "/");
    assert_int_equal(agent_path_resolve("/..", "/h", out, sizeof out, &why), -1);
    assert_int_equal(agent_path_resolve("", "/h", out, sizeof out, &why), -1);
    assert_int_equal(agent_path_resolve("/abcdef", "/h", out, 5, &why), -1);

    struct ah h;
    ah_start(&h);
    char rel[PATH_MAX], abs[PATH_MAX];
    /* root's home is /root: a relative path climbing out of it */
    snprintf(rel, sizeof rel, "..%s/./rel.txt", h.dir);
    snprintf(abs, sizeof abs, "%s/rel.txt", h.dir);
    FILE *f = fopen(abs, "w");
    fclose(f);
    json_t *r = ah_ok(&h, op_path("stat", rel));
    assert_string_equal(json_string_value(json_object_get(json_object_get(r, "stat"), "path")), abs);
    json_decref(r);
    ah_expect_error(&h, op_path("stat", "../../../../.."), FRAME_E_INVALID_ARGUMENT);
    ah_expect_error(&h, op_path("stat", ""), FRAME_E_INVALID_ARGUMENT);
    ah_expect_error(&h, json_pack("{s:s, s:s#}", "op", "stat", "path", "a\0b", (size_t)3),
                    FRAME_E_INVALID_ARGUMENT);
    ah_expect_error(&h, json_pack("{s:s, s:i}", "op", "stat", "path", 1), FRAME_E_INVALID_ARGUMENT);
    ah_expect_error(&h, json_pack("{s:s, s:s, s:s}", "op", "stat", "path", "/", "user", "ghost"),
                    FRAME_E_NOT_FOUND);
    ah_stop(&h);
}

static bool has_fs_event(struct col *k, const char *name, const char *op)
{
    size_t i;
    json_t *e;
    json_array_foreach(k->events, i, e) {
        const char *n = json_string_value(json_object_get(e, "name"));
        const char *o = json_string_value(json_object_get(e, "op"));
        if (n && o && !strcmp(n, name) && !strcmp(o, op))
            return true;
    }
    return false;
}

static void test_watch(void **state)
{
    struct ah h;
    ah_start(&h);
    char sub[128], p[200];
    snprintf(sub, sizeof sub, "%s/sub", h.dir);
    assert_int_equal(mkdir(sub, 0755), 0);
    struct col k;
    col_open(&h, &k, json_pack("{s:s, s:s, s:b}", "op", "watch", "path", h.dir, "recursive", 1), 0, true);
    ah_wait(&h, &k.started);
    snprintf(p, sizeof p, "%s/top.txt", h.dir);
    FILE *f = fopen(p, "w");
    fputs("x", f);
    fclose(f);
    snprintf(p, sizeof p, "%s/inner.txt", sub);
    f = fopen(p, "w");
    fclose(f);
    assert_int_equal(unlink(p), 0);
    snprintf(p, sizeof p, "%s/newdir", h.dir);
    assert_int_equal(mkdir(p, 0755), 0);
    /* wait for the last of them (events arrive in order) */
    while (!has_fs_event(&k, "newdir", "create"))
        ah_step(&h);
    snprintf(p, sizeof p, "%s/newdir/deep.txt", h.dir);
    f = fopen(p, "w");
    fclose(f);
    while (!has_fs_event(&k, "newdir/deep.txt", "create"))
        ah_step(&h);
    assert_true(has_fs_event(&k, "top.txt", "create"));
    assert_true(has_fs_event(&k, "top.txt", "write"));
    assert_true(has_fs_event(&k, "sub/inner.txt", "create"));
    assert_true(has_fs_event(&k, "sub/inner.txt", "remove"));
    agentc_close(k.ch);
    col_free(&k);
    ah_expect_error(&h, op_path("watch", "/nonexistent"), FRAME_E_NOT_FOUND);
    snprintf(p, sizeof p, "%s/top.txt", h.dir);
    ah_expect_error(&h, op_path("watch", p), FRAME_E_NOT_DIR);
    json_t *hl = ah_ok(&h, json_pack("{s:s}", "op", "health"));
    assert_int_equal(json_integer_value(json_object_get(hl, "channels")), 1); /* health only */
    json_decref(hl);
    ah_stop(&h);
}

/* write "xattrs": set on the file, reported by stat/list; bad names refused; watch
 * with "stat" adds the entry's stat to events. */
static void test_xattrs_and_watch_stat(void **state)
{
    struct ah h;
    ah_start(&h);
    char path[128];
    snprintf(path, sizeof path, "%s/meta.txt", h.dir);
    struct col k;
    col_open(&h, &k, json_pack("{s:s, s:s, s:b}", "op", "watch", "path", h.dir, "stat", 1), 0, true);
    ah_wait(&h, &k.started);
    struct col w;
    col_open(&h, &w, json_pack("{s:s, s:s, s:{s:s, s:s}}", "op", "write", "path", path, "xattrs",
                               "user.e2b.owner", "alice", "user.e2b.build", "42"), 0, true);
    assert_int_equal(agentc_write(w.ch, "m", 1), 0);
    assert_int_equal(agentc_eof(w.ch), 0);
    ah_wait(&h, &w.closed);
    assert_string_equal(w.code, "");
    json_t *xa = json_object_get(json_object_get(col_find(&w, "result"), "stat"), "xattrs");
    assert_string_equal(json_string_value(json_object_get(xa, "user.e2b.owner")), "alice");
    assert_string_equal(json_string_value(json_object_get(xa, "user.e2b.build")), "42");
    col_free(&w);
    json_t *st = ah_ok(&h, op_path("stat", path));
    xa = json_object_get(json_object_get(st, "stat"), "xattrs");
    assert_int_equal(json_object_size(xa), 2);
    json_decref(st);
    /* a file without any has no "xattrs" at all */
    snprintf(path, sizeof path, "%s/plain.txt", h.dir);
    col_open(&h, &w, op_path("write", path), 0, true);
    assert_int_equal(agentc_eof(w.ch), 0);
    ah_wait(&h, &w.closed);
    assert_null(json_object_get(json_object_get(col_find(&w, "result"), "stat"), "xattrs"));
    col_free(&w);
    ah_expect_error(&h, json_pack("{s:s, s:s, s:{s:s}}", "op", "write", "path", path, "xattrs",
                                  "trusted.x", "v"), FRAME_E_INVALID_ARGUMENT);
    ah_expect_error(&h, json_pack("{s:s, s:s, s:{s:i}}", "op", "write", "path", path, "xattrs",
                                  "user.x", 1), FRAME_E_INVALID_ARGUMENT);
    ah_expect_error(&h, json_pack("{s:s, s:s, s:s}", "op", "write", "path", path, "xattrs", "x"),
                    FRAME_E_INVALID_ARGUMENT);
    /* the watch reported plain.txt with its stat */
    json_t *ev, *found = NULL;
    size_t i;
    while (!found) {
        json_array_foreach(k.events, i, ev)
            if (!strcmp(json_string_value(json_object_get(ev, "name")) ?: "", "plain.txt") &&
                json_object_get(ev, "stat"))
                found = ev;
        if (!found)
            ah_step(&h);
    }
    assert_string_equal(json_string_value(json_object_get(json_object_get(found, "stat"), "path")), path);
    agentc_close(k.ch);
    col_free(&k);
    ah_stop(&h);
}

/* E2B's uploads: written in place (a hard link sees the new content, the inode stays),
 * the given xattrs replacing the file's "user." ones. Symlinks in a stat name where they
 * finally lead and what is there; a dangling one has no target. */
static void test_in_place_and_links(void **state)
{
    struct ah h;
    ah_start(&h);
    char path[128], hard[160], sym[160], dangling[160];
    snprintf(path, sizeof path, "%s/h.txt", h.dir);
    snprintf(hard, sizeof hard, "%s/h2.txt", h.dir);
    struct col w;
    col_open(&h, &w, json_pack("{s:s, s:s, s:{s:s}}", "op", "write", "path", path, "xattrs",
                               "user.e2b.old", "1"), 0, true);
    assert_int_equal(agentc_write(w.ch, "one", 3), 0);
    assert_int_equal(agentc_eof(w.ch), 0);
    ah_wait(&h, &w.closed);
    col_free(&w);
    assert_int_equal(link(path, hard), 0);
    struct stat before, after;
    assert_int_equal(stat(path, &before), 0);
    col_open(&h, &w, json_pack("{s:s, s:s, s:b, s:{s:s}}", "op", "write", "path", path,
                               "in_place", 1, "xattrs", "user.e2b.new", "2"), 0, true);
    assert_int_equal(agentc_write(w.ch, "two", 3), 0);
    assert_int_equal(agentc_eof(w.ch), 0);
    ah_wait(&h, &w.closed);
    assert_string_equal(w.code, "");
    json_t *xa = json_object_get(json_object_get(col_find(&w, "result"), "stat"), "xattrs");
    assert_int_equal(json_object_size(xa), 1);
    assert_string_equal(json_string_value(json_object_get(xa, "user.e2b.new")), "2");
    col_free(&w);
    assert_int_equal(stat(path, &after), 0);
    assert_int_equal(after.st_ino, before.st_ino);
    char buf[8] = {0};
    int fd = open(hard, O_RDONLY);
    assert_int_equal(read(fd, buf, sizeof buf), 3);
    close(fd);
    assert_string_equal(buf, "two");
    /* rewritten in place without xattrs: it has none left, as a replaced file */
    col_open(&h, &w, json_pack("{s:s, s:s, s:b}", "op", "write", "path", path, "in_place", 1), 0, true);
    assert_int_equal(agentc_eof(w.ch), 0);
    ah_wait(&h, &w.closed);
    assert_null(json_object_get(json_object_get(col_find(&w, "result"), "stat"), "xattrs"));
    col_free(&w);

    snprintf(sym, sizeof sym, "%s/to-dir", h.dir);
    snprintf(dangling, sizeof dangling, "%s/dangling", h.dir);
    assert_int_equal(symlink(".", sym), 0);
    assert_int_equal(symlink("missing", dangling), 0);
    json_t *st = ah_ok(&h, op_path("stat", sym));
    json_t *o = json_object_get(st, "stat"), *t = json_object_get(o, "target");
    assert_string_equal(json_string_value(json_object_get(o, "type")), "symlink");
    assert_string_equal(json_string_value(json_object_get(o, "symlink_target")), ".");
    assert_string_equal(json_string_value(json_object_get(t, "type")), "dir");
    char real[PATH_MAX];
    assert_non_null(realpath(h.dir, real));
    assert_string_equal(json_string_value(json_object_get(t, "path")), real);
    json_decref(st);
    st = ah_ok(&h, op_path("stat", dangling));
    assert_null(json_object_get(json_object_get(st, "stat"), "target"));
    json_decref(st);
    ah_stop(&h);
}

/* /etc/passwd and /etc/group parsing (the agent's own: static binaries have no NSS). */
static void test_users(void **state)
{
    char dir[] = "/tmp/space-users.XXXXXX", path[64];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/passwd", dir);
    FILE *f = fopen(path, "w");
    fputs("# comment\nroot:x:0:0:root:/root:/bin/bash\nbroken line\nbad:x:notanumber:1::/:\n"
          "alice:x:1000:1000:Alice:/home/alice:/bin/zsh\nsvc:x:999:999::::\n", f);
    fclose(f);
    snprintf(path, sizeof path, "%s/group", dir);
    f = fopen(path, "w");
    fputs("root:x:0:\nalice:x:1000:\nwheel:x:10:bob,alice\ndocker:x:998:alice\nother:x:5:bob\n", f);
    fclose(f);
    agent_users_set_dir(dir);
    struct agent_user u;
    assert_int_equal(agent_user_lookup("alice", &u), 0);
    assert_int_equal(u.uid, 1000);
    assert_int_equal(u.gid, 1000);
    assert_string_equal(u.home, "/home/alice");
    assert_string_equal(u.shell, "/bin/zsh");
    assert_int_equal(u.ngroups, 3); /* primary, wheel, docker */
    assert_int_equal(u.groups[1], 10);
    assert_int_equal(u.groups[2], 998);
    assert_int_equal(agent_user_lookup("svc", &u), 0);
    assert_string_equal(u.home, "/");
    assert_string_equal(u.shell, "/bin/sh");
    assert_int_equal(agent_user_lookup("bad", &u), -1);
    assert_int_equal(agent_user_lookup("ghost", &u), -1);
    assert_int_equal(errno, ENOENT);
    assert_int_equal(agent_user_lookup("", &u), -1);
    assert_int_equal(agent_user_lookup("ali:ce", &u), -1);
    char name[64];
    assert_string_equal(agent_user_name(1000, name, sizeof name), "alice");
    assert_string_equal(agent_user_name(4242, name, sizeof name), "4242");
    assert_string_equal(agent_group_name(998, name, sizeof name), "docker");
    /* a changed file is re-read */
    snprintf(path, sizeof path, "%s/passwd", dir);
    f = fopen(path, "a");
    fputs("carol:x:1001:1001::/home/carol:/bin/sh\n", f);
    fclose(f);
    assert_int_equal(agent_user_lookup("carol", &u), 0);
    agent_users_set_dir("/etc");
    char cmd[96];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_large_write_read), cmocka_unit_test(test_read_range_and_errors),
        cmocka_unit_test(test_write_modes),      cmocka_unit_test(test_dir_ops),
        cmocka_unit_test(test_paths),            cmocka_unit_test(test_watch),
        cmocka_unit_test(test_users),            cmocka_unit_test(test_xattrs_and_watch_stat),
        cmocka_unit_test(test_in_place_and_links),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
