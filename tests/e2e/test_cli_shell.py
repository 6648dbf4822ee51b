"""The `space` CLI's terminal commands, driven like a person drives them: the real CLI
runs in a tmux pane (a real terminal with a size, raw mode, keys) against a real spaced
with a real VM, and what the person would see is read back with `tmux capture-pane`.

  space shell ID        typed commands run (`echo hi-$((6*7))` shows hi-42), the window
                        size follows tmux (stty size), Ctrl-C interrupts the guest's
                        `sleep`, Ctrl-D ends the guest's `cat`, `exit 3` makes the CLI
                        exit 3, and the local terminal is back in cooked mode afterwards
  Ctrl-] / attach       detaching leaves the session running; `space attach` gets it
                        back, with output produced while nobody was attached
  kill -9 / SIGTERM     a CLI that dies or is told to stop: the session keeps running and
                        `space attach` shows what it printed meanwhile
  exec -t               a command on a terminal; stdin not a terminal -> no raw mode
  logs                  the console log (the agent's lines after the restore); the route's
                        errors (401, 404 for another tenant, 400 for a bad tail)
  --json                the API's documents (ls, create, verbs)
  completion bash       sourced into bash: `complete -p space`, and what _space offers
                        for commands, subcommands, options and sandbox ids"""
import json
import os
import re
import shutil
import signal
import subprocess
import time

import pytest

from test_cli import SPACE, cli, create, ok  # noqa: F401 (cli is a fixture)

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None,
                                reason="tmux is not installed (scripts/install-deps.sh)")


class Pane:
    """One tmux server (private socket) with one window running bash, sized rows x cols,
    no status line (so the pane is the whole window)."""

    def __init__(self, tmp_path, env, rows=30, cols=100):
        self.sock = str(tmp_path / "tmux.sock")
        self.env = dict(env, TERM="xterm-256color", PS1="local$ ", HISTFILE="/dev/null")
        self.tmux("-f", "/dev/null", "new-session", "-d", "-s", "t", "-x", str(cols), "-y", str(rows),
                  "bash --norc --noprofile")
        self.tmux("set-option", "-g", "status", "off")
        self.tmux("set-option", "-g", "window-size", "manual")

    def tmux(self, *args):
        return subprocess.run(["tmux", "-S", self.sock, *args], check=True, env=self.env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30).stdout.decode()

    def type(self, text):
        """Types text literally, then Enter."""
        self.tmux("send-keys", "-t", "t", "-l", text)
        self.tmux("send-keys", "-t", "t", "Enter")

    def key(self, name):
        self.tmux("send-keys", "-t", "t", name)

    def screen(self):
        return self.tmux("capture-pane", "-p", "-J", "-t", "t", "-S", "-2000")

    def wait_for(self, pattern, timeout=120):
        rx = re.compile(pattern, re.M)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.screen()
            m = rx.search(text)
            if m:
                return m
            time.sleep(0.3)
        pytest.fail("%r never showed in the pane; it shows:\n%s" % (pattern, self.screen()))

    def clear(self):
        self.tmux("clear-history", "-t", "t")

    def cli_pid(self):
        """The pid of the `space` process running in the pane's bash."""
        bash = int(self.tmux("display-message", "-p", "-t", "t", "#{pane_pid}").strip())
        for _ in range(100):
            out = subprocess.run(["pgrep", "-P", str(bash), "-x", "space"], stdout=subprocess.PIPE)
            if out.stdout.strip():
                return int(out.stdout.split()[0])
            time.sleep(0.1)
        pytest.fail("no space process under the pane's bash")

    def close(self):
        subprocess.run(["tmux", "-S", self.sock, "kill-server"], env=self.env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@pytest.fixture
def pane(cli, tmp_path):
    p = Pane(tmp_path, cli.env)
    yield p
    p.close()


@pytest.fixture(scope="module")
def sandbox(cli):
    sid = create(cli)
    yield sid
    cli("rm", sid)


def shell(pane, sid, *args):
    """Starts `space shell` in the pane and waits for the guest shell to answer."""
    pane.type("%s shell %s %s; echo cli-rc=$?" % (SPACE, " ".join(args), sid))
    pane.type("echo ready-$((40+2))")
    pane.wait_for(r"^ready-42")


def cooked(pane):
    """The pane's terminal is back in canonical mode with echo."""
    pane.type("stty -a | tr ' ' '\\n' | grep -xE -- '-?(icanon|echo)' | tr '\\n' ,; echo")
    pane.wait_for(r"^icanon,echo,$|^echo,icanon,$", 30)


def test_shell_keys_resize_exit(pane, sandbox):
    shell(pane, sandbox)
    pane.type("echo hi-$((6*7))")
    pane.wait_for(r"^hi-42")

    pane.type("stty size")
    pane.wait_for(r"^30 100\s*$")
    pane.tmux("resize-window", "-t", "t", "-x", "120", "-y", "40")
    time.sleep(1)
    pane.type("stty size")
    pane.wait_for(r"^40 120\s*$")

    # Ctrl-C goes to the guest's terminal: it interrupts sleep, not the CLI.
    pane.type("sleep 100")
    time.sleep(2)
    start = time.monotonic()
    pane.key("C-c")
    pane.type("echo back-$((1+1))")
    pane.wait_for(r"^back-2", 60)
    assert time.monotonic() - start < 60

    # Ctrl-D is end of input for the guest's cat.
    pane.type("cat")
    time.sleep(3)  # typeahead before cat runs would go to the guest shell's line editor
    pane.type("typed-into-cat")
    pane.wait_for(r"^typed-into-cat\s*\n(.*\n)?typed-into-cat", 30)
    pane.key("C-d")
    pane.type("echo cat-done-$((2+3))")
    pane.wait_for(r"^cat-done-5")

    pane.type("exit 3")
    pane.wait_for(r"^cli-rc=3")
    cooked(pane)


def test_detach_and_attach(pane, cli, sandbox):
    shell(pane, sandbox)
    pane.type("(sleep 4; echo while-detached-$((3*3))) &")
    pane.key("C-]")
    m = pane.wait_for(r"detached; session (\S+) keeps running: space attach \S+ \S+\s*\n(.*\n)*cli-rc=0")
    sess = m.group(1)
    cooked(pane)
    time.sleep(6)
    p = cli("attach", "sb0000000000000000")  # a clear error, the terminal untouched
    assert p.returncode == 1 and b"HTTP 404" in p.stderr, p
    pane.clear()
    pane.type("%s attach %s %s; echo cli-rc=$?" % (SPACE, sandbox, sess))
    pane.wait_for(r"while-detached-9")
    pane.type("echo again-$((5+5))")
    pane.wait_for(r"^again-10")
    pane.type("exit 4")
    pane.wait_for(r"^cli-rc=4")


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_killed_cli_loses_nothing(pane, sandbox, sig):
    shell(pane, sandbox)
    pane.type("(sleep 5; echo while-gone-$((4*4))) &")
    time.sleep(1)
    os.kill(pane.cli_pid(), sig)
    if sig == signal.SIGTERM:
        pane.wait_for(r"interrupted; session \S+ keeps running(.*\n)*cli-rc=143")
        cooked(pane)
    else:
        pane.wait_for(r"^cli-rc=137")
        pane.type("stty sane")
    time.sleep(7)
    pane.clear()
    # Without a session id: the sandbox's newest running terminal session.
    pane.type("%s attach %s; echo cli-rc=$?" % (SPACE, sandbox))
    pane.wait_for(r"while-gone-16")
    pane.type("exit 6")
    pane.wait_for(r"^cli-rc=6")


def test_exec_t(pane, cli, sandbox):
    pane.type("%s exec -t %s -- sh -c 'tty; stty size; exit 7'; echo cli-rc=$?" % (SPACE, sandbox))
    pane.wait_for(r"^/dev/pts/\d+\s*\n30 100\s*\n(.*\n)*cli-rc=7")
    cooked(pane)
    # stdin not a terminal: no raw mode; the input still reaches the guest's terminal.
    p = cli("exec", "-t", sandbox, "--", "sh", "-c", "read l; echo got-$l; exit 5", input=b"piped\n")
    assert p.returncode == 5 and b"got-piped" in p.stdout, p


def test_logs(cli, spaced, sandbox):
    out = ok(cli("logs", sandbox))
    assert b"space-agent" in out, out[-2000:]  # a restored VM: the agent, not the boot
    tail = ok(cli("logs", sandbox, "--tail", "100"))
    assert 0 < len(tail) <= 100 and out.endswith(tail), (tail, out[-200:])
    p = cli("logs", "sb0000000000000000")
    assert p.returncode == 1 and b"HTTP 404" in p.stderr, p
    assert spaced.request("GET", "/v1/sandboxes/%s/logs" % sandbox, key=None).status == 401
    other = spaced.request("POST", "/v1/keys", {"tenant": "cli-logs-other"}).json["secret"]
    r = spaced.request("GET", "/v1/sandboxes/%s/logs" % sandbox, key=other)
    assert r.status == 404 and r.error_code() == "not_found", r
    for bad in ("0", "-1", "x", "1048577"):
        r = spaced.request("GET", "/v1/sandboxes/%s/logs?tail=%s" % (sandbox, bad))
        assert r.status == 400 and r.error_code() == "invalid_request", (bad, r)
    r = spaced.request("GET", "/v1/sandboxes/%s/logs?tail=1048576" % sandbox)
    assert r.status == 200 and r.headers.get("content-type", "").startswith("text/plain"), r


def test_json(cli, sandbox):
    doc = json.loads(ok(cli("--json", "ls")))
    assert sandbox in [s["id"] for s in doc["sandboxes"]], doc
    sid = create(cli)
    doc = json.loads(ok(cli("pause", sid, "--json")))
    assert doc["operation"]["kind"] == "pause" and doc["operation"]["state"] == "succeeded", doc
    out = ok(cli("--json", "create", "--template", "base", "--timeout", "0"))
    made = json.loads(out)["sandbox"]
    assert made["state"] == "running" and made["template"] == "base", made
    for s in (sid, made["id"]):
        assert json.loads(ok(cli("--json", "rm", s)))["operation"]["kind"] == "delete"
    # A remote command's own --json is its own (after the sandbox id).
    assert ok(cli("exec", sandbox, "echo", "--json")) == b"--json\n"


def test_bash_completion(cli, sandbox, tmp_path):
    script = tmp_path / "space.bash"
    script.write_bytes(ok(cli("completion", "bash")))
    probe = r"""
source "$1"
complete -p space
comp() { COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); COMPREPLY=(); _space; echo "${COMPREPLY[*]}"; }
comp space ""
comp space sh
comp space template ""
comp space network x ""
comp space exec -
comp space --json at
comp space rm ""
"""
    env = dict(cli.env, PATH=os.path.dirname(SPACE) + ":" + os.environ.get("PATH", ""))
    p = subprocess.run(["bash", "--norc", "--noprofile", "-c", probe, "probe", str(script)],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, timeout=120)
    lines = p.stdout.decode().splitlines()
    assert p.returncode == 0 and len(lines) == 8, p
    assert lines[0] == "complete -F _space space"
    assert {"create", "ls", "shell", "attach", "logs", "exec", "completion"} <= set(lines[1].split())
    assert lines[2] == "shell"
    assert lines[3].split() == ["ls", "build"]
    assert lines[4].split() == ["none", "open", "allow", "log"]
    assert {"-i", "-t", "-u", "-w"} <= set(lines[5].split())
    assert lines[6] == "attach"
    assert sandbox in lines[7].split(), lines[7]
    assert cli("completion", "zsh").returncode == 2
