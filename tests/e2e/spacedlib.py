"""Shared helpers of the e2e suite (imported by conftest.py and the tests; a uniquely
named module, so tests/e2e and tests/netsec can be collected in one pytest run):
a real spaced on a free port with its own data directory.

Every data and guest directory a test run makes lives under one run directory
(RUN_DIR, a fresh /tmp/spt* per pytest process, shared with child processes and with a
second import of this module through SPACE_TEST_RUN_DIR). A process whose command line
names RUN_DIR belongs to this run and to no other run on the machine; at the end of the
session check_leftovers() fails the run loudly if any is still alive, and kills it.

Environment:
  SPACE_BUILD  directory holding the spaced binary (default build/san)
  SPACE_GUEST  guest directory with vmlinux, initramfs.cpio, templates/ (default build/guest)
  SPACE_TEST_KEEP  set: keep RUN_DIR (logs of stopped daemons are removed anyway)
"""
import base64
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.path.abspath(os.environ.get("SPACE_BUILD", os.path.join(ROOT, "build", "san")))
GUEST = os.path.abspath(os.environ.get("SPACE_GUEST", os.path.join(ROOT, "build", "guest")))
SPACED = os.path.join(BUILD, "spaced")


def _run_dir():
    d = os.environ.get("SPACE_TEST_RUN_DIR")
    if not d or not os.path.isdir(d):
        # Short (Unix socket paths under it are limited to 108 bytes) and unique.
        d = tempfile.mkdtemp(prefix="spt", dir="/tmp")
        os.environ["SPACE_TEST_RUN_DIR"] = d
    return d


RUN_DIR = _run_dir()

# LeakSanitizer suppressions for spaced: none. Route modules free their contexts at exit
# (router_on_shutdown), so anything leaked fails the test that stops spaced.
_LSAN_SUPP = os.path.join(RUN_DIR, "lsan.supp")
with open(_LSAN_SUPP, "w") as _f:
    _f.write("")
SPACED_ENV = dict(os.environ, LSAN_OPTIONS="suppressions=%s:print_suppressions=0" % _LSAN_SUPP)


def _cmdline(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return None


def _ancestors():
    """This process and its parents (never to be killed)."""
    out, pid = set(), os.getpid()
    while pid > 1 and pid not in out:
        out.add(pid)
        try:
            with open("/proc/%d/stat" % pid) as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return out


def procs_naming(path):
    """[(pid, argv)] of live processes whose command line names `path` (a directory:
    matched as `path/` anywhere in an argument, or the argument itself)."""
    mine = _ancestors()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in mine:
            continue
        argv = _cmdline(int(name))
        if argv and any(a == path or (path + "/") in a for a in argv):
            found.append((int(name), argv))
    return found


def kill_procs(procs):
    for pid, _ in procs:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def check_leftovers(session):
    """pytest_sessionfinish body shared by the e2e, e2b and netsec conftests: every
    process of this run (QEMU, space-gateway, spaced, qemu-img...) must be gone once all
    fixtures are torn down. Leftovers are listed in red, killed, and fail the run."""
    left = procs_naming(RUN_DIR)
    if left:
        kill_procs(left)
        lines = ["%d %s" % (pid, " ".join(argv)[:400]) for pid, argv in left]
        tr = session.config.pluginmanager.get_plugin("terminalreporter")
        msg = ("%d process(es) of this test run outlived their tests (killed now); "
               "a fixture or spaced failed to end them:\n%s" % (len(left), "\n".join(lines)))
        if tr:
            tr.ensure_newline()
            tr.write_sep("!", "LEFTOVER PROCESSES", red=True, bold=True)
            tr.write_line(msg, red=True)
        else:
            print(msg)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    if not os.environ.get("SPACE_TEST_KEEP") and os.path.isdir(RUN_DIR):
        shutil.rmtree(RUN_DIR, ignore_errors=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Response:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers
        self.body = body

    @property
    def json(self):
        return json.loads(self.body)

    def error_code(self):
        return self.json["error"]["code"]

    def __repr__(self):
        return "<%d %s>" % (self.status, self.body[:300])


class Spaced:
    """One spaced process. On stop(cleanup=True) everything it left (sandbox QEMUs,
    template VMs, its gateway, namespaces, the data dir) is ended and removed, unless a
    later Spaced still runs on the same data dir (a restart test): that one cleans up."""

    live = []  # every Spaced whose process was started and not yet stopped

    def __init__(self, guest_dir, data_dir=None):
        self.guest_dir = guest_dir
        self.data_dir = data_dir or tempfile.mkdtemp(prefix="spd", dir=RUN_DIR)
        self.port = None
        self.proc = None
        self.log_path = os.path.join(self.data_dir, "spaced.log")

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.port

    @property
    def admin_key(self):
        with open(os.path.join(self.data_dir, "admin.key")) as f:
            return f.read().strip()

    def start(self, extra=(), env=None):
        """Starts spaced (extra: more arguments; env: variables added to SPACED_ENV, kept
        for later restarts of this daemon unless a new env is given)."""
        if env is not None:
            self.env = dict(env)
        if not os.access(SPACED, os.X_OK):
            pytest.fail("spaced binary %s is missing: build it with `make SAN=1 programs`" % SPACED)
        self.port = free_port()
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [SPACED, "--listen", "127.0.0.1:%d" % self.port, "--data-dir", self.data_dir,
             "--guest-dir", self.guest_dir, *extra],
            stdout=log, stderr=log, stdin=subprocess.DEVNULL, env=dict(SPACED_ENV, **getattr(self, "env", {})))
        log.close()
        if self not in Spaced.live:
            Spaced.live.append(self)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail("spaced exited with %s at start; log:\n%s" % (self.proc.returncode, self._abandon()))
            try:
                if self.request("GET", "/healthz", key=None).status == 200:
                    return self
            except OSError:
                time.sleep(0.05)
        pytest.fail("spaced did not answer /healthz within 30 s; log:\n%s" % self._abandon())

    def _abandon(self):
        """A start that failed: nothing may outlive it. Returns the log's tail."""
        if self.proc.poll() is None:
            self.kill9()
        log = self.log()
        self.cleanup()
        return log

    def log(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()[-6000:]
        except OSError:
            return ""

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self, cleanup=True):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill9()
        failed = self.proc and self.proc.returncode not in (0, -signal.SIGKILL)
        log = self.log() if failed else ""
        if cleanup:
            self.cleanup()
        if failed:
            # ASan reports and crashes must fail the test run, not vanish; what it left
            # running is ended first (above).
            raise AssertionError("spaced exited with %s; log:\n%s" % (self.proc.returncode, log))

    def cleanup(self):
        """Ends and removes what this instance left, unless another live instance uses
        the same data dir."""
        if self in Spaced.live:
            Spaced.live.remove(self)
        if any(o.data_dir == self.data_dir and o.proc and o.proc.poll() is None for o in Spaced.live):
            return
        self.kill_processes()
        self.remove_netns()
        shutil.rmtree(self.data_dir, ignore_errors=True)

    def kill_processes(self):
        """Ends every process naming this data dir: sandbox and template QEMUs (also one
        whose pid file was never written, or was overwritten by a rebuild), qemu-img, and
        the gateway spaced leaves running while sandboxes have a NIC (for the next spaced
        to adopt; nothing will adopt this one). Found by command line, not pid files."""
        kill_procs(procs_naming(self.data_dir))

    def remove_netns(self):
        """Unmounts the namespaces of this instance's sandboxes (named by the records in
        <data_dir>/net/; the pool's namespaces are never mounted)."""
        recs = os.path.join(self.data_dir, "net")
        for name in os.listdir(recs) if os.path.isdir(recs) else []:
            if name.endswith(".json"):
                ns = "/run/netns/space-" + name[:-len(".json")]
                if os.path.exists(ns):
                    subprocess.run(["umount", ns], capture_output=True)
                    try:
                        os.unlink(ns)
                    except OSError:
                        pass

    def request(self, method, path, body=None, key="admin", headers=None, raw=None, timeout=90):
        h = dict(headers or {})
        if key == "admin":
            key = self.admin_key
        if key is not None:
            h.setdefault("Authorization", "Bearer " + key)
        data = raw
        if body is not None:
            data = json.dumps(body).encode()
            h.setdefault("Content-Type", "application/json")
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            conn.request(method, path, body=data, headers=h)
            r = conn.getresponse()
            return Response(r.status, {k.lower(): v for k, v in r.getheaders()}, r.read())
        finally:
            conn.close()

    def wait_op(self, op_id, timeout=300, key="admin"):
        """Long-polls an operation until it is terminal; returns the operation object."""
        deadline = time.monotonic() + timeout
        while True:
            r = self.request("GET", "/v1/operations/%s?wait=30" % op_id, key=key)
            assert r.status == 200, r
            op = r.json["operation"]
            if op["state"] in ("succeeded", "failed", "canceled"):
                return op
            if time.monotonic() > deadline:
                raise AssertionError("operation %s still %s after %d s" % (op_id, op["state"], timeout))

    def create(self, body=None, key="admin", headers=None):
        r = self.request("POST", "/v1/sandboxes", body if body is not None else {}, key=key, headers=headers)
        assert r.status == 202, r
        return r.json


def poll(fn, timeout=180, every=0.5):
    """Calls fn until it returns a truthy value, and returns that; fails after timeout
    seconds."""
    deadline = time.monotonic() + timeout
    while True:
        v = fn()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError("condition not met within %d s (last: %r)" % (timeout, v))
        time.sleep(every)


def session_output(sp, sid, cmd, timeout=300):
    """Runs cmd in sandbox sid through a session, reading its attach stream to the end;
    returns (stdout bytes, exit code; None if it never started). cmd: a shell command, or
    a whole session body (a dict: argv, env, cwd...)."""
    body = cmd if isinstance(cmd, dict) else {"cmd": cmd}
    r = sp.request("POST", "/v1/sandboxes/%s/sessions" % sid, body)
    assert r.status == 201, r
    r = sp.request("GET", r.json["attach_url"], timeout=timeout)
    assert r.status == 200, r
    out, code, event = b"", None, None
    for line in r.body.decode().splitlines():
        if line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            d = json.loads(line[5:])
            if event == "stdout":
                out += base64.b64decode(d["data"])
            elif event == "exit":
                code = d["code"]
    return out, code


def sse_events(resp):
    """Yields (id, event, data) for each event of the server-sent event stream read from
    resp (an http.client response) until the server ends it: id an int or None, data the
    event's data parsed as JSON. Comment lines are skipped."""
    ev_id, name, data = None, None, []
    while True:
        line = resp.readline()
        if not line:
            return
        line = line.rstrip(b"\r\n")
        if not line:
            if name:
                yield ev_id, name, json.loads(b"\n".join(data))
            ev_id, name, data = None, None, []
        elif line.startswith(b":"):
            continue
        else:
            field, _, value = line.partition(b":")
            value = value[1:] if value.startswith(b" ") else value
            if field == b"id":
                ev_id = int(value)
            elif field == b"event":
                name = value.decode()
            elif field == b"data":
                data.append(value)


def stop_all(daemons):
    """Stops every daemon, newest first (a restart test's successor on a shared data dir
    is stopped before its predecessor's cleanup runs), even when one of them fails; then
    raises the first failure."""
    errors = []
    for s in reversed(daemons):
        try:
            s.stop()
        except AssertionError as e:
            errors.append(e)
    if errors:
        raise errors[0]


def make_fake_guest():
    """A guest dir with a template whose rootfs exists but no kernel: creates are
    accepted and then fail fast, without QEMU."""
    d = tempfile.mkdtemp(prefix="spg", dir=RUN_DIR)
    os.makedirs(os.path.join(d, "templates", "fake"))
    with open(os.path.join(d, "templates", "fake", "rootfs.ext4"), "wb") as f:
        f.write(b"\0" * 4096)
    with open(os.path.join(d, "templates", "fake", "template.json"), "w") as f:
        json.dump({"name": "fake", "description": "API tests only: cannot boot"}, f)
    return d


def vm_missing():
    """Why real VMs cannot run here, or None."""
    need = [os.path.join(GUEST, "vmlinux"), os.path.join(GUEST, "initramfs.cpio"),
            os.path.join(GUEST, "templates", "base", "rootfs.ext4")]
    missing = [p for p in need if not os.path.exists(p)]
    if missing:
        return "guest artifacts missing (%s): run `make guest templates`" % ", ".join(missing)
    if not shutil.which("qemu-system-x86_64") or not shutil.which("qemu-img"):
        return "qemu-system-x86_64 / qemu-img not installed (scripts/install-deps.sh)"
    return None
