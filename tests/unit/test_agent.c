/* test_agent: the agent's serve loop as a host process, driven through agentc:
 * processes (output, stdin, pipes ending with the process, signals, exit status, PTY, 100 at once, backpressure,
 * reattach after disconnect) and system ops (health, refresh, unknown ops). */
#include "test_agent_harness.h"

#include <fcntl.h>
#include <sys/stat.h>

/* exec with argv: stdout, stderr, exit code. */
static void test_exec_output(void **state)
{
    struct ah h;
    ah_start(&h);
    struct col k;
    col_open(&h, &k, json_pack("{s:s, s:[sss]}", "op", "exec", "argv", "sh", "-c",
                               "echo out; echo err >&2; exit 7"), 0, true);
    ah_wait(&h, &k.closed);
    assert_true(k.started);
    assert_string_equal(k.buf[FRAME_STREAM_OUT], "out\n");
    assert_string_equal(k.buf[FRAME_STREAM_ERR], "err\n");
    assert_true(k.eof[FRAME_STREAM_OUT] && k.eof[FRAME_STREAM_ERR]);
    assert_int_equal(col_exit(&k), 7);
    col_free(&k);

    /* cmd form, cwd, env, user */
    col_open(&h, &k, json_pack("{s:s, s:s, s:s, s:{s:s}, s:s}", "op", "exec", "cmd",
                               "echo $FOO $HOME $(pwd) $(id -un)", "cwd", "/tmp", "env", "FOO",
                               "bar", "user", "nobody"), 0, true);
    ah_wait(&h, &k.closed);
    assert_non_null(k.buf[FRAME_STREAM_OUT]);
    assert_non_null(strstr(k.buf[FRAME_STREAM_OUT], "bar "));
    assert_non_null(strstr(k.buf[FRAME_STREAM_OUT], " /tmp nobody\n"));
    assert_int_equal(col_exit(&k), 0);
    col_free(&k);
    ah_stop(&h);
}

static void test_exec_errors(void **state)
{
    struct ah h;
    ah_start(&h);
    ah_expect_error(&h, json_pack("{s:s, s:[s]}", "op", "exec", "argv", "/nonexistent/binary"),
                    FRAME_E_NOT_FOUND);
    ah_expect_error(&h, json_pack("{s:s, s:[s], s:s}", "op", "exec", "argv", "true", "user",
                                  "no-such-user"), FRAME_E_NOT_FOUND);
    ah_expect_error(&h, json_pack("{s:s, s:[s], s:s}", "op", "exec", "argv", "true", "cwd",
                                  "/nonexistent"), FRAME_E_NOT_FOUND);
    ah_expect_error(&h, json_pack("{s:s, s:[]}", "op", "exec", "argv"), FRAME_E_INVALID_ARGUMENT);
    ah_expect_error(&h, json_pack("{s:s, s:[i]}", "op", "exec", "argv", 5), FRAME_E_INVALID_ARGUMENT);
    ah_expect_error(&h, json_pack("{s:s, s:s, s:[s]}", "op", "exec", "cmd", "true", "argv", "true"),
                    FRAME_E_INVALID_ARGUMENT);
    ah_expect_error(&h, json_pack("{s:s, s:s, s:{s:i}}", "op", "exec", "cmd", "true", "env", "A", 1),
                    FRAME_E_INVALID_ARGUMENT);
    ah_expect_error(&h, json_pack("{s:s, s:s, s:i}", "op", "exec", "cmd", "true", "pty", 3),
                    FRAME_E_INVALID_ARGUMENT);
    ah_expect_error(&h, json_pack("{s:s}", "op", "frobnicate"), FRAME_E_UNSUPPORTED);
    ah_expect_error(&h, json_pack("{s:i}", "op", 3), FRAME_E_INVALID_ARGUMENT);
    ah_expect_error(&h, json_pack("{s:s, s:i}", "op", "attach", "pid", 999999), FRAME_E_NOT_FOUND);
    ah_stop(&h);
}

/* The spawn (spawn.c, a CLONE_VM child): signals all default and unblocked in the
 * command; argv[0] searched in the request's PATH as execvp does (a file that is not
 * executable is skipped, a script without #! runs under /bin/sh); the user switch is
 * the child's alone, never the agent's (here: the test process). */
static void test_exec_spawn(void **state)
{
    struct ah h;
    ah_start(&h);
    col_expect_stdout(&h, json_pack("{s:s, s:[sss]}", "op", "exec", "argv", "sh", "-c",
                                    "grep -E '^Sig(Blk|Ign)' /proc/self/status"),
                      "SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n");

    char dir[] = "/tmp/test_agent_spawn_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char a[128], b[128], fa[160], fb[160], path[320];
    snprintf(a, sizeof a, "%s/a", dir);
    snprintf(b, sizeof b, "%s/b", dir);
    snprintf(fa, sizeof fa, "%s/hello", a);
    snprintf(fb, sizeof fb, "%s/hello", b);
    assert_int_equal(mkdir(a, 0755), 0);
    assert_int_equal(mkdir(b, 0755), 0);
    for (int i = 0; i < 2; i++) {
        FILE *f = fopen(i ? fb : fa, "w");
        assert_non_null(f);
        fputs(i ? "echo from b\n" : "echo from a\n", f); /* no #!: /bin/sh runs it */
        fclose(f);
    }
    assert_int_equal(chmod(fa, 0644), 0);
    assert_int_equal(chmod(fb, 0755), 0);
    /* a/hello is not executable: skipped; the empty element is the cwd (not searched
     * here: no hello in /). */
    snprintf(path, sizeof path, "/nonexistent::%s:%s", a, b);
    col_expect_stdout(&h, json_pack("{s:s, s:[s], s:{s:s}}", "op", "exec", "argv", "hello",
                                    "env", "PATH", path), "from b\n");
    /* Only a file that is not executable: EACCES, not "not found". */
    snprintf(path, sizeof path, "%s", a);
    ah_expect_error(&h, json_pack("{s:s, s:[s], s:{s:s}}", "op", "exec", "argv", "hello",
                                  "env", "PATH", path), FRAME_E_PERMISSION_DENIED);
    ah_expect_error(&h, json_pack("{s:s, s:[s], s:{s:s}}", "op", "exec", "argv", "no-such-cmd",
                                  "env", "PATH", path), FRAME_E_NOT_FOUND);

    uid_t uid = getuid(), euid = geteuid();
    gid_t gid = getgid();
    if (euid == 0)
        col_expect_stdout(&h, json_pack("{s:s, s:[ss], s:s}", "op", "exec", "argv", "id", "-un",
                                        "user", "nobody"), "nobody\n");
    assert_int_equal(getuid(), uid);
    assert_int_equal(geteuid(), euid);
    assert_int_equal(getgid(), gid);
    unlink(fa);
    unlink(fb);
    rmdir(a);
    rmdir(b);
    rmdir(dir);
    ah_stop(&h);
}

/* stdin streaming and close (EOF) */
static void test_exec_stdin(void **state)
{
    struct ah h;
    ah_start(&h);
    struct col k;
    col_open(&h, &k, json_pack("{s:s, s:[s], s:b}", "op", "exec", "argv", "wc", "stdin", 1), 0, true);
    static char chunk[100000];
    memset(chunk, 'x', sizeof chunk);
    for (int i = 0; i < 10; i++)
        assert_int_equal(agentc_write(k.ch, chunk, sizeof chunk), 0);
    assert_int_equal(agentc_eof(k.ch), 0);
    assert_int_equal(agentc_write(k.ch, "late", 4), -1);
    ah_wait(&h, &k.closed);
    assert_int_equal(col_exit(&k), 0);
    unsigned lines, words, bytes;
    assert_int_equal(sscanf(k.buf[FRAME_STREAM_OUT], "%u %u %u", &lines, &words, &bytes), 3);
    assert_int_equal(bytes, 1000000);
    col_free(&k);
    ah_stop(&h);
}

/* The pipes' relay threads (relay.c) end with the process: a background child that
 * keeps stdout open does not hold back the exit, and a process that stops reading its
 * stdin while the host keeps writing still exits (the rest of the input is dropped). */
static void test_exec_pipe_ends(void **state)
{
    struct ah h;
    ah_start(&h);
    struct col k;
    time_t t0 = time(NULL);
    col_open(&h, &k, json_pack("{s:s, s:s}", "op", "exec", "cmd", "sleep 20 & echo up"), 0, true);
    ah_wait(&h, &k.closed);
    assert_string_equal(k.buf[FRAME_STREAM_OUT], "up\n");
    assert_int_equal(col_exit(&k), 0);
    assert_true(time(NULL) - t0 < 15); /* not after the sleep */
    col_free(&k);

    col_open(&h, &k, json_pack("{s:s, s:s, s:b}", "op", "exec", "cmd", "head -c 5", "stdin", 1),
             0, true);
    static char chunk[100000];
    memset(chunk, 'y', sizeof chunk);
    for (int i = 0; i < 10 && !k.closed; i++) {
        if (agentc_write(k.ch, chunk, sizeof chunk) < 0)
            break;
        ah_step(&h);
    }
    ah_wait(&h, &k.closed);
    assert_string_equal(k.buf[FRAME_STREAM_OUT], "yyyyy");
    assert_int_equal(col_exit(&k), 0);
    col_free(&k);
    ah_stop(&h);
}

/* signals reach the process group; exit reports the signal */
static void test_exec_signal(void **state)
{
    struct ah h;
    ah_start(&h);
    struct col k;
    col_open(&h, &k, json_pack("{s:s, s:s}", "op", "exec", "cmd", "sleep 1000 & wait"), 0, true);
    ah_wait(&h, &k.started);
    json_t *bad = json_pack("{s:s, s:i}", "op", "signal", "signal", 999);
    assert_int_equal(agentc_ctrl(k.ch, bad), 0);
    json_decref(bad);
    json_t *rs = json_pack("{s:s, s:i, s:i}", "op", "resize", "rows", 10, "cols", 10);
    assert_int_equal(agentc_ctrl(k.ch, rs), 0); /* no pty: error, channel stays */
    json_decref(rs);
    json_t *sig = json_pack("{s:s, s:i}", "op", "signal", "signal", SIGTERM);
    assert_int_equal(agentc_ctrl(k.ch, sig), 0);
    json_decref(sig);
    ah_wait(&h, &k.closed);
    assert_string_equal(k.code, FRAME_E_INVALID_ARGUMENT); /* the bad signal number */
    assert_int_equal(col_exit(&k), -1000 - SIGTERM);
    col_free(&k);
    ah_stop(&h);
}

/* PTY: a terminal with the requested size, resize, input echo */
static void test_exec_pty(void **state)
{
    struct ah h;
    ah_start(&h);
    struct col k;
    col_open(&h, &k, json_pack("{s:s, s:s, s:{s:i, s:i}}", "op", "exec", "cmd",
                               "test -t 0 && stty size; read x; stty size; echo got:$x", "pty",
                               "rows", 30, "cols", 100), 0, true);
    while (!k.buf[FRAME_STREAM_OUT] || !strstr(k.buf[FRAME_STREAM_OUT], "30 100"))
        ah_step(&h);
    json_t *rs = json_pack("{s:s, s:i, s:i}", "op", "resize", "rows", 40, "cols", 120);
    assert_int_equal(agentc_ctrl(k.ch, rs), 0);
    json_decref(rs);
    assert_int_equal(agentc_write(k.ch, "hello\n", 6), 0);
    ah_wait(&h, &k.closed);
    assert_int_equal(col_exit(&k), 0);
    assert_non_null(strstr(k.buf[FRAME_STREAM_OUT], "40 120"));
    assert_non_null(strstr(k.buf[FRAME_STREAM_OUT], "got:hello"));
    assert_int_equal(k.len[FRAME_STREAM_ERR], 0);
    col_free(&k);
    ah_stop(&h);
}

/* A terminal client resizes right after its exec, before "started": the size is kept and
 * set once the pty is the process's (it was refused with "resize needs a pty" while the
 * spawn was in flight, and `space shell` failed). */
static void test_exec_pty_resize_at_once(void **state)
{
    struct ah h;
    ah_start(&h);
    struct col k;
    col_open(&h, &k, json_pack("{s:s, s:s, s:{s:i, s:i}}", "op", "exec", "cmd",
                               "read x; stty size", "pty", "rows", 30, "cols", 100), 0, true);
    json_t *rs = json_pack("{s:s, s:i, s:i}", "op", "resize", "rows", 40, "cols", 120);
    assert_int_equal(agentc_ctrl(k.ch, rs), 0); /* queued behind the OPEN: no "started" yet */
    json_decref(rs);
    assert_int_equal(agentc_write(k.ch, "go\n", 3), 0);
    ah_wait(&h, &k.closed);
    assert_int_equal(col_exit(&k), 0);
    assert_string_equal(k.code, "");
    assert_non_null(strstr(k.buf[FRAME_STREAM_OUT], "40 120"));
    col_free(&k);
    ah_stop(&h);
}

/* 100 processes alive at once, each with its own stdin and output */
static void test_exec_many(void **state)
{
    enum { N = 100 };
    struct ah h;
    ah_start(&h);
    static struct col k[N];
    for (int i = 0; i < N; i++)
        col_open(&h, &k[i], json_pack("{s:s, s:s, s:b}", "op", "exec", "cmd", "read x; echo $x",
                                      "stdin", 1), 0, true);
    for (int i = 0; i < N; i++)
        ah_wait(&h, &k[i].started);
    json_t *ps = ah_ok(&h, json_pack("{s:s}", "op", "ps"));
    assert_int_equal(json_array_size(json_object_get(ps, "processes")), N);
    json_decref(ps);
    for (int i = N - 1; i >= 0; i--) {
        char line[32];
        int n = snprintf(line, sizeof line, "line%d\n", i);
        assert_int_equal(agentc_write(k[i].ch, line, (size_t)n), 0);
    }
    for (int i = 0; i < N; i++) {
        char want[32];
        snprintf(want, sizeof want, "line%d\n", i);
        ah_wait(&h, &k[i].closed);
        assert_string_equal(k[i].buf[FRAME_STREAM_OUT], want);
        assert_int_equal(col_exit(&k[i]), 0);
        col_free(&k[i]);
    }
    ah_stop(&h);
}

static json_t *health(struct ah *h)
{
    return ah_ok(h, json_pack("{s:s}", "op", "health"));
}

/* Bytes process pid has written (/proc/PID/io wchar). */
static long long proc_wchar(pid_t pid)
{
    char path[64], line[128];
    snprintf(path, sizeof path, "/proc/%d/io", (int)pid);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    long long n = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "wchar: %lld", &n) == 1)
            break;
    fclose(f);
    assert_true(n >= 0);
    return n;
}

/* A process writing 50 MiB while the host grants credit slowly (and at first not at
 * all): the agent's buffers stay bounded and every byte arrives. */
static void test_backpressure(void **state)
{
    struct ah h;
    ah_start(&h);
    struct col k;
    const size_t total = 50u << 20;
    col_open(&h, &k, json_pack("{s:s, s:[ssss]}", "op", "exec", "argv", "head", "-c", "52428800",
                               "/dev/zero"), AGENTC_MANUAL_CREDIT, false);
    /* Without grants only the initial window arrives, then the process blocks. */
    while (k.len[FRAME_STREAM_OUT] < FRAME_WINDOW_INITIAL)
        ah_step(&h);
    json_t *hl = health(&h);
    assert_true(json_integer_value(json_object_get(hl, "buffered")) < 1024 * 1024);
    json_decref(hl);
    assert_int_equal(k.len[FRAME_STREAM_OUT], FRAME_WINDOW_INITIAL);
    /* ... blocked, through the pipe's relay thread (relay.c): what it wrote is the window
     * plus the buffers on the way (loop 64 KiB, thread 64 KiB, socket, pipe 64 KiB). */
    ah_step(&h);
    ah_step(&h);
    json_int_t pid = json_integer_value(json_object_get(json_array_get(k.events, 0), "pid"));
    assert_true(pid > 0);
    long long wrote = proc_wchar((pid_t)pid);
    print_message("blocked process wrote %lld bytes with a %d-byte window\n", wrote,
                  FRAME_WINDOW_INITIAL);
    assert_true(wrote < 1024 * 1024);
    /* Then grant in small steps, as a slow HTTP client would drain. */
    size_t granted = FRAME_WINDOW_INITIAL;
    while (!k.closed) {
        if (granted - k.len[FRAME_STREAM_OUT] < 32768 && granted < total) {
            agentc_grant(k.ch, FRAME_STREAM_OUT, 65536);
            granted += 65536;
        }
        ah_step(&h);
    }
    assert_int_equal(k.len[FRAME_STREAM_OUT], total);
    assert_int_equal(col_exit(&k), 0);
    hl = health(&h);
    json_int_t peak = json_integer_value(json_object_get(hl, "buffered_peak"));
    print_message("agent buffered_peak=%lld bytes for a 50 MiB stream\n", (long long)peak);
    assert_true(peak < 2 * 1024 * 1024);
    json_decref(hl);
    col_free(&k);
    ah_stop(&h);
}

/* A process keeps running when the host disconnects; its output waits (bounded) and
 * a new connection attaches and gets all of it plus the exit. */
static void test_detach_attach(void **state)
{
    struct ah h;
    ah_start_mode(&h, true);
    char fifo[128], cmd[256];
    snprintf(fifo, sizeof fifo, "%s/go", h.dir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    snprintf(cmd, sizeof cmd, "echo first; cat %s; seq 1 30000", fifo);
    struct col k;
    col_open(&h, &k, json_pack("{s:s, s:s, s:s}", "op", "exec", "cmd", cmd, "tag", "t1"), 0, true);
    while (!k.buf[FRAME_STREAM_OUT])
        ah_step(&h);
    int pid = (int)json_integer_value(json_object_get(col_find(&k, "started"), "pid"));
    assert_true(pid > 0);
    agentc_free(h.c); /* host goes away; no callbacks after free */
    col_free(&k);

    /* Output produced while nobody is attached (~170 KB: more than the buffers). */
    int fd = open(fifo, O_WRONLY);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "", 0), 0);
    close(fd);

    ah_reconnect(&h);
    json_t *ps = ah_ok(&h, json_pack("{s:s}", "op", "ps"));
    json_t *p0 = json_array_get(json_object_get(ps, "processes"), 0);
    assert_int_equal(json_integer_value(json_object_get(p0, "pid")), pid);
    assert_string_equal(json_string_value(json_object_get(p0, "tag")), "t1");
    assert_false(json_is_true(json_object_get(p0, "attached")));
    json_decref(ps);

    col_open(&h, &k, json_pack("{s:s, s:i}", "op", "attach", "pid", pid), 0, true);
    ah_wait(&h, &k.closed);
    assert_non_null(col_find(&k, "attached"));
    assert_int_equal(col_exit(&k), 0);
    /* every line 1..30000 in order */
    size_t want_len = 0;
    for (int i = 1; i <= 30000; i++)
        want_len += (size_t)snprintf(NULL, 0, "%d\n", i);
    assert_int_equal(k.len[FRAME_STREAM_OUT], want_len);
    assert_true(strncmp(k.buf[FRAME_STREAM_OUT], "1\n2\n3\n", 6) == 0);
    assert_non_null(strstr(k.buf[FRAME_STREAM_OUT], "\n29999\n30000\n"));
    col_free(&k);
    ah_stop(&h);
}

/* Starts `sleep 1000` (exec with confirm as given); returns its pid. */
static int start_sleeper(struct ah *h, struct col *k, bool confirm)
{
    col_open(h, k, json_pack("{s:s, s:[sss], s:b}", "op", "exec", "argv", "sh", "-c", "sleep 1000",
                             "confirm", confirm), 0, true);
    ah_wait(h, &k->started);
    int pid = (int)json_integer_value(json_object_get(col_find(k, "started"), "pid"));
    assert_true(pid > 0);
    return pid;
}

/* Attaches to pid and returns how it ended (col_exit), killing it first if kill_it. */
static int attach_exit(struct ah *h, int pid, bool kill_it)
{
    struct col k;
    col_open(h, &k, json_pack("{s:s, s:i}", "op", "attach", "pid", pid), 0, true);
    ah_wait(h, &k.started);
    if (kill_it) {
        json_t *sig = json_pack("{s:s, s:i}", "op", "signal", "signal", 15);
        assert_int_equal(agentc_ctrl(k.ch, sig), 0);
        json_decref(sig);
    }
    ah_wait(h, &k.closed);
    int code = col_exit(&k);
    col_free(&k);
    return code;
}

/* exec "confirm": a process whose channel ends before the host's CTRL confirm (the host
 * never recorded its pid: a lost "started", a restart of spaced) is killed, by a CLOSE
 * or by the connection going; a confirmed one, one without "confirm" and one re-attached
 * by pid live on, detached, as before (the rule the session layer relies on). */
static void test_exec_confirm(void **state)
{
    struct ah h;
    ah_start_mode(&h, true);
    struct col lost, confirmed, plain, closed;
    int lost_pid = start_sleeper(&h, &lost, true);
    int confirmed_pid = start_sleeper(&h, &confirmed, true);
    json_t *c = json_pack("{s:s}", "op", "confirm");
    assert_int_equal(agentc_ctrl(confirmed.ch, c), 0);
    json_decref(c);
    int plain_pid = start_sleeper(&h, &plain, false);
    int closed_pid = start_sleeper(&h, &closed, true);
    agentc_close(closed.ch); /* a CLOSE before the confirm kills too */
    col_free(&closed);
    assert_int_equal(attach_exit(&h, closed_pid, false), -1000 - SIGKILL);
    /* the connection goes (as when spaced restarts), then a new one */
    agentc_free(h.c);
    col_free(&lost);
    col_free(&confirmed);
    col_free(&plain);
    ah_reconnect(&h);
    assert_int_equal(attach_exit(&h, lost_pid, false), -1000 - SIGKILL);
    assert_int_equal(attach_exit(&h, confirmed_pid, true), -1000 - SIGTERM);
    assert_int_equal(attach_exit(&h, plain_pid, true), -1000 - SIGTERM);
    ah_stop(&h);
}

/* Closing an exec channel detaches (the process lives); attach moves a process. */
static void test_close_detaches(void **state)
{
    struct ah h;
    ah_start(&h);
    struct col k, k2;
    col_open(&h, &k, json_pack("{s:s, s:s, s:b}", "op", "exec", "cmd", "read x; echo x=$x",
                               "stdin", 1), 0, true);
    ah_wait(&h, &k.started);
    int pid = (int)json_integer_value(json_object_get(col_find(&k, "started"), "pid"));
    agentc_close(k.ch);
    col_open(&h, &k2, json_pack("{s:s, s:i}", "op", "attach", "pid", pid), 0, true);
    ah_wait(&h, &k2.started);
    assert_int_equal(agentc_write(k2.ch, "42\n", 3), 0);
    ah_wait(&h, &k2.closed);
    assert_string_equal(k2.buf[FRAME_STREAM_OUT], "x=42\n");
    assert_int_equal(col_exit(&k2), 0);
    assert_false(k.closed); /* no callbacks after agentc_close */
    col_free(&k);
    col_free(&k2);
    ah_stop(&h);
}

static void test_refresh_health(void **state)
{
    struct ah h;
    ah_start(&h);
    json_t *before = health(&h);
    const char *boot = json_string_value(json_object_get(before, "boot_id"));
    assert_int_equal(strlen(boot), 32);
    assert_string_equal(json_string_value(json_object_get(before, "status")), "ok");
    json_t *r = ah_ok(&h, json_pack("{s:s, s:I, s:s, s:s, s:{s:s}, s:s}", "op", "refresh",
                                    "time_ns", (json_int_t)1700000000000000000LL, "entropy",
                                    "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=", "hostname",
                                    "clone-1", "env", "SANDBOX_VAR", "v1", "token", "tok"));
    /* As a host process the clock, RNG and hostname are left alone, and say so. */
    assert_int_equal(json_array_size(json_object_get(r, "skipped")), 3);
    assert_int_equal(json_array_size(json_object_get(r, "applied")), 2);
    assert_string_not_equal(json_string_value(json_object_get(r, "boot_id")), boot);
    json_decref(r);
    json_decref(before);
    ah_expect_error(&h, json_pack("{s:s, s:s}", "op", "refresh", "entropy", "AAEC"),
                    FRAME_E_INVALID_ARGUMENT);
    ah_expect_error(&h, json_pack("{s:s, s:s}", "op", "refresh", "hostname", "bad host"),
                    FRAME_E_INVALID_ARGUMENT);
    ah_expect_error(&h, json_pack("{s:s, s:{s:i}}", "op", "refresh", "env", "X", 1),
                    FRAME_E_INVALID_ARGUMENT);
    struct col k;
    col_open(&h, &k, json_pack("{s:s, s:s, s:{s:s}}", "op", "exec", "cmd", "echo $SANDBOX_VAR $R",
                               "env", "R", "r"), 0, true);
    ah_wait(&h, &k.closed);
    assert_string_equal(k.buf[FRAME_STREAM_OUT], "v1 r\n");
    col_free(&k);
    json_t *after = health(&h);
    assert_true(json_is_true(json_object_get(after, "token_set")));
    json_decref(after);
    ah_stop(&h);
}

/* refresh user/workdir: the sandbox's default user for requests naming none, starting in
 * the workdir; another user starts at home; a missing user or relative workdir is
 * refused and changes nothing. */
static void test_refresh_default_user(void **state)
{
    struct ah h;
    ah_start(&h);
    ah_expect_error(&h, json_pack("{s:s, s:s}", "op", "refresh", "user", "no-such-user"),
                    FRAME_E_NOT_FOUND);
    ah_expect_error(&h, json_pack("{s:s, s:s, s:s}", "op", "refresh", "user", "nobody", "workdir",
                                  "tmp"), FRAME_E_INVALID_ARGUMENT);
    /* the refusals changed nothing */
    col_expect_stdout(&h, json_pack("{s:s, s:s}", "op", "exec", "cmd", "id -un"), "root\n");

    json_decref(ah_ok(&h, json_pack("{s:s, s:s, s:s}", "op", "refresh", "user", "nobody",
                                    "workdir", "/tmp")));
    col_expect_stdout(&h, json_pack("{s:s, s:s}", "op", "exec", "cmd", "echo $(id -un) $(pwd)"),
                      "nobody /tmp\n");
    char want[300];
    struct stat st;
    snprintf(want, sizeof want, "root %s\n", stat("/root", &st) == 0 ? "/root" : "/");
    col_expect_stdout(&h, json_pack("{s:s, s:s, s:s}", "op", "exec", "cmd", "echo $(id -un) $(pwd)",
                                    "user", "root"), want);
    ah_stop(&h);
}

static void test_shutdown(void **state)
{
    struct ah h;
    ah_start(&h);
    json_t *r = ah_ok(&h, json_pack("{s:s}", "op", "shutdown"));
    json_decref(r);
    ah_wait(&h, &h.closed); /* the serve loop ended and closed the connection */
    ah_stop(&h);
}

/* metrics: the guest's CPU, memory and disk figures, plausible and self-consistent. */
static void test_metrics(void **state)
{
    struct ah h;
    ah_start(&h);
    for (int i = 0; i < 2; i++) { /* the second is a delta since the first */
        json_t *r = ah_ok(&h, json_pack("{s:s}", "op", "metrics"));
        json_int_t total = json_integer_value(json_object_get(r, "mem_total"));
        json_int_t used = json_integer_value(json_object_get(r, "mem_used"));
        double pct = json_real_value(json_object_get(r, "cpu_used_pct"));
        assert_true(json_integer_value(json_object_get(r, "cpu_count")) >= 1);
        assert_true(pct >= 0 && pct <= 100);
        assert_true(total > 0 && used > 0 && used <= total);
        assert_true(json_integer_value(json_object_get(r, "mem_cache")) >= 0);
        assert_true(json_integer_value(json_object_get(r, "disk_total")) > 0);
        assert_true(json_integer_value(json_object_get(r, "disk_used")) <=
                    json_integer_value(json_object_get(r, "disk_total")));
        json_decref(r);
    }
    ah_stop(&h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_metrics),
        cmocka_unit_test(test_exec_output),    cmocka_unit_test(test_exec_errors),
        cmocka_unit_test(test_exec_spawn),
        cmocka_unit_test(test_exec_stdin),     cmocka_unit_test(test_exec_pipe_ends),
        cmocka_unit_test(test_exec_signal),
        cmocka_unit_test(test_exec_pty),       cmocka_unit_test(test_exec_pty_resize_at_once),
        cmocka_unit_test(test_exec_many),
        cmocka_unit_test(test_backpressure),   cmocka_unit_test(test_detach_attach),
        cmocka_unit_test(test_close_detaches), cmocka_unit_test(test_exec_confirm),
        cmocka_unit_test(test_refresh_health),
        cmocka_unit_test(test_refresh_default_user),
        cmocka_unit_test(test_shutdown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
