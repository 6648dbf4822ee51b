"""The `space` CLI (build/<variant>/space) against a real spaced with real VMs: every
command of docs/cli.md, checked through its output and exit status and against the API.

  create (prints the id once running), ls (id, state, template), exec (streams stdout
  and stderr apart, exits with the command's status, -i feeds stdin), cp both ways (files
  and '-'), pause/resume/suspend/restore/stop/start, rm, API errors (one line, status
  1), network (show, live change, log), template ls/build, and the progress line that
  long operations draw when stderr is a terminal (plain lines when it is not).
  The terminal commands (shell, exec -t, attach), logs, --json and completion are in
  test_cli_shell.py."""
import os
import pty
import re
import select
import subprocess

import pytest

from spacedlib import BUILD

SPACE = os.path.join(BUILD, "space")
ID_RE = re.compile(rb"^sb[0-9a-f]{16}\n$")


@pytest.fixture(scope="module")
def cli(spaced):
    if not os.access(SPACE, os.X_OK):
        pytest.fail("%s is missing: build it with `make SAN=1 programs`" % SPACE)
    env = dict(os.environ, SPACE_URL=spaced.url, SPACE_API_KEY=spaced.admin_key)

    def run(*args, input=b"", timeout=900, stderr=subprocess.PIPE):
        return subprocess.run([SPACE, *args], input=input, stdout=subprocess.PIPE, stderr=stderr,
                              timeout=timeout, env=env)
    run.env = env
    return run


def ok(p):
    assert p.returncode == 0, (p.returncode, p.stdout[-2000:], p.stderr and p.stderr[-2000:])
    return p.stdout


def listed(cli, sid):
    """The `space ls` row of sid as (id, state, template), or None."""
    for line in ok(cli("ls")).decode().splitlines()[1:]:
        cols = line.split()
        if cols and cols[0] == sid:
            return cols[0], cols[1], cols[2]
    return None


def create(cli, *opts):
    out = ok(cli("create", "--template", "base", "--timeout", "0", *opts))
    assert ID_RE.match(out), out
    return out.decode().strip()


def test_lifecycle_exec_cp(cli, spaced, tmp_path):
    assert re.search(rb"^base\s+ready\s+yes", ok(cli("template", "ls")), re.M)
    sid = create(cli, "--cpus", "1", "--memory", "256")
    assert listed(cli, sid) == (sid, "running", "base")
    assert spaced.request("GET", "/v1/sandboxes/" + sid).json["sandbox"]["state"] == "running"

    p = cli("exec", sid, "--", "sh", "-c", "echo out; echo err >&2; exit 3")
    assert (p.returncode, p.stdout, p.stderr) == (3, b"out\n", b"err\n")
    p = cli("exec", "-i", sid, "--", "tr", "a-z", "A-Z", input=b"piped in\n")
    assert (p.returncode, p.stdout) == (0, b"PIPED IN\n"), p
    assert cli("exec", sid, "--", "no-such-program").returncode == 127
    # the template's default user and workdir, unless -u / -w say otherwise
    assert ok(cli("exec", sid, "--", "sh", "-c", "id -un; pwd")) == b"user\n/home/user\n"
    assert ok(cli("exec", "-u", "root", "-w", "/tmp", sid, "--", "sh", "-c", "id -un; pwd")) == b"root\n/tmp\n"
    assert cli("exec", "--frob", sid, "--", "true").returncode == 2

    data = os.urandom(3 * 1024 * 1024 + 5)
    up, down = tmp_path / "up.bin", tmp_path / "down.bin"
    up.write_bytes(data)
    ok(cli("cp", str(up), sid + ":/tmp/d/f.bin"))
    ok(cli("cp", sid + ":/tmp/d/f.bin", str(down)))
    assert down.read_bytes() == data
    ok(cli("cp", "-", sid + ":/tmp/stdin.txt", input=b"from stdin\n"))
    assert ok(cli("cp", sid + ":/tmp/stdin.txt", "-")) == b"from stdin\n"
    p = cli("cp", sid + ":/tmp/missing", str(down))
    assert p.returncode == 1 and b"HTTP 404" in p.stderr, p

    for verb, state in (("pause", "paused"), ("resume", "running"), ("suspend", "suspended"),
                        ("restore", "running"), ("stop", "stopped"), ("start", "running")):
        ok(cli(verb, sid))
        assert listed(cli, sid)[1] == state, verb
    assert ok(cli("exec", sid, "--", "echo", "back")) == b"back\n"

    p = cli("resume", sid)
    assert p.returncode == 1 and b"HTTP 409" in p.stderr and p.stderr.count(b"\n") == 1, p
    # Created without a network: no NIC, and none can be added live.
    assert ok(cli("network", sid)) == b"mode: none\nnic: no\n"
    p = cli("network", sid, "open")
    assert p.returncode == 1 and b"nic_change_needed, HTTP 409" in p.stderr, p
    ok(cli("rm", sid))
    assert listed(cli, sid) is None
    p = cli("exec", sid, "--", "true")
    assert p.returncode == 1 and b"HTTP 404" in p.stderr, p


def test_network_policy_changes_live(cli, spaced):
    """TEST-NET CIDRs only: nothing here makes the gateway resolve or dial anything."""
    if os.geteuid() != 0:
        pytest.skip("sandbox networking needs spaced to run as root (namespaces, taps)")
    if not os.access(os.path.join(BUILD, "space-gateway"), os.X_OK):
        pytest.skip("space-gateway is not built beside spaced (make SAN=1 programs)")
    sid = create(cli, "--allow", "203.0.113.0/24")
    assert ok(cli("network", sid)).decode() == "mode: allowlist\nnic: yes\nallow: 203.0.113.0/24\n"
    out = ok(cli("network", sid, "allow", "198.51.100.0/24", "192.0.2.7/32")).decode()
    assert out.startswith("mode: allowlist\n") and "allow: 198.51.100.0/24\nallow: 192.0.2.7/32\n" in out
    pol = spaced.request("GET", "/v1/sandboxes/%s/network" % sid).json
    assert pol["mode"] == "allowlist" and pol["allow"] == ["198.51.100.0/24", "192.0.2.7/32"], pol
    assert ok(cli("network", sid, "open")).decode().startswith("mode: open\n")
    assert spaced.request("GET", "/v1/sandboxes/" + sid).json["sandbox"]["network"]["mode"] == "open"
    ok(cli("network", sid, "log"))
    p = cli("network", sid, "allow", "not a name!")
    assert p.returncode == 1 and b"HTTP 400" in p.stderr, p
    assert cli("network", sid, "sideways").returncode == 2
    ok(cli("rm", sid))


def test_template_build(cli, tmp_path):
    """A template from a Dockerfile-like file (-f): RUN, ENV, WORKDIR, USER and COPY (a
    file and a directory beside the file) reach the image and its sandboxes' defaults."""
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "hello.sh").write_text("#!/bin/sh\necho hello from app\n")
    (tmp_path / "app" / "hello.sh").chmod(0o755)
    (tmp_path / "notes.txt").write_text("copied\n")
    (tmp_path / "Spacefile").write_text(
        "# built by test_cli\n"
        "FROM base\n"
        "RUN echo built-by-cli > /etc/motd && \\\n"
        "    mkdir -p /srv/work\n"
        "ENV GREETING=\"hi there\"\n"
        "COPY app/ /opt/app/\n"
        "COPY --chown=user notes.txt /srv/work/\n"
        "WORKDIR /srv/work\n"
        "USER user\n")
    out = ok(cli("template", "build", "clitpl", "-f", str(tmp_path / "Spacefile"), timeout=1800))
    assert out == b"clitpl\n"
    assert re.search(rb"^clitpl\s+ready\s+no", ok(cli("template", "ls")), re.M)
    out = ok(cli("create", "--template", "clitpl", "--timeout", "0"))
    sid = out.decode().strip()
    assert ok(cli("exec", sid, "--", "cat", "/etc/motd")) == b"built-by-cli\n"
    assert ok(cli("exec", sid, "--", "/opt/app/hello.sh")) == b"hello from app\n"
    got = ok(cli("exec", sid, "--", "sh", "-c", 'echo "$GREETING"; pwd; id -un; cat notes.txt; stat -c %U notes.txt'))
    assert got == b"hi there\n/srv/work\nuser\ncopied\nuser\n", got
    ok(cli("rm", sid))
    p = cli("template", "build", "bad", "-f", str(tmp_path / "app" / "hello.sh"))
    assert p.returncode == 2 and b"line 2: the first instruction must be FROM" in p.stderr, p  # line 1 is a comment (#!)
    p = cli("template", "build", "clitpl", "--from", "base", "--run", "true")
    assert p.returncode == 1 and b"HTTP 409" in p.stderr, p


def on_terminal(cli, *args):
    """Runs the CLI with stderr on a pseudo-terminal; returns (status, stdout, what the
    terminal showed)."""
    master, slave = pty.openpty()
    p = subprocess.Popen([SPACE, *args], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=slave, env=cli.env)
    os.close(slave)
    shown = b""
    while True:
        r, _, _ = select.select([master], [], [], 1)
        if r:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the last writer closed the terminal
                break
            if not chunk:
                break
            shown += chunk
        elif p.poll() is not None:
            break
    out = p.stdout.read()
    p.wait(timeout=60)
    os.close(master)
    return p.returncode, out, shown.decode(errors="replace")


def test_progress_on_a_terminal(cli, tmp_path):
    rc, out, shown = on_terminal(cli, "create", "--template", "base", "--timeout", "0")
    assert rc == 0 and ID_RE.match(out), (rc, out, shown)
    sid = out.decode().strip()
    assert re.search(r"creating %s: succeeded 100%%" % sid, shown), shown
    big = tmp_path / "big.bin"
    big.write_bytes(b"\x5a" * (8 << 20))
    rc, _, shown = on_terminal(cli, "cp", str(big), sid + ":/home/user/big.bin")
    assert rc == 0 and "upload /home/user/big.bin: 8.0/8.0 MiB 100%" in shown, shown
    rc, _, shown = on_terminal(cli, "rm", sid)
    assert rc == 0 and "delete %s: succeeded" % sid in shown, shown
    # Not a terminal: a plain line per stage with the time elapsed, no escape sequences.
    sid = create(cli)
    p = cli("rm", sid)
    assert p.returncode == 0 and re.search(rb"^delete %s: succeeded 100%% \(\d+\.\ds\)\n\Z" % sid.encode(),
                                           p.stderr, re.M), p
    assert b"\r" not in p.stderr and b"\033" not in p.stderr, p


def test_fork_and_snapshots(cli):
    sid = create(cli)
    ok(cli("exec", sid, "--", "sh", "-c", "echo carried > ~/f"))
    forks = ok(cli("fork", sid, "-n", "2")).decode().split()
    assert len(forks) == 2 and all(ID_RE.match((f + "\n").encode()) for f in forks), forks
    for f in forks:
        assert ok(cli("exec", f, "--", "sh", "-c", "cat ~/f")) == b"carried\n"
    bad = cli("fork", sid, "-n", "0")
    assert bad.returncode == 2 and b"-n" in bad.stderr, bad
    snap = ok(cli("snapshot", "create", sid, "--name", "cli-snap")).decode().strip()
    assert snap.startswith("sn"), snap
    rows = ok(cli("snapshot", "ls")).decode().splitlines()
    assert rows[0].split()[:3] == ["ID", "NAME", "STATE"]
    assert any(r.split()[:3] == [snap, "cli-snap", "ready"] for r in rows[1:]), rows
    ok(cli("rm", sid))
    restored = ok(cli("create", "--template", "cli-snap", "--timeout", "0")).decode().strip()
    assert ok(cli("exec", restored, "--", "sh", "-c", "cat ~/f")) == b"carried\n"
    assert ok(cli("snapshot", "rm", "cli-snap")) == b"snapshot cli-snap deleted\n"
    missing = cli("snapshot", "rm", "cli-snap")
    assert missing.returncode == 1 and b"not found" in missing.stderr, missing
    ok(cli("rm", restored, *forks))
