"""Shared helpers of the e2e suite (imported by conftest.py and the tests; a uniquely
named module, so tests/e2e and tests/netsec can be collected in one pytest run):
a real spaced on a free port with its own data directory.

Environment:
  SPACE_BUILD  directory holding the spaced binary (default build/san)
  SPACE_GUEST  guest directory with vmlinux, initramfs.cpio, templates/ (default build/guest)
"""
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

# Route contexts registered once at start-up live as long as the process by design;
# LeakSanitizer must not turn them into a failed exit status. Anything else leaked
# still fails the test that stops spaced.
_LSAN_SUPP = os.path.join(tempfile.gettempdir(), "space-e2e-lsan.supp")
with open(_LSAN_SUPP, "w") as _f:
    _f.write("leak:routes_sessions_register\nleak:routes_files_register\nleak:routes_network_register\nleak:net_get\nleak:e2b_register\n")
SPACED_ENV = dict(os.environ, LSAN_OPTIONS="suppressions=%s:print_suppressions=0" % _LSAN_SUPP)


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
    """One spaced process. Sandboxes' QEMU processes are killed on stop(cleanup=True)."""

    def __init__(self, guest_dir, data_dir=None):
        self.guest_dir = guest_dir
        self.data_dir = data_dir or tempfile.mkdtemp(prefix="spd")
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

    def start(self, extra=()):
        if not os.access(SPACED, os.X_OK):
            pytest.fail("spaced binary %s is missing: build it with `make SAN=1 programs`" % SPACED)
        self.port = free_port()
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [SPACED, "--listen", "127.0.0.1:%d" % self.port, "--data-dir", self.data_dir,
             "--guest-dir", self.guest_dir, *extra],
            stdout=log, stderr=log, stdin=subprocess.DEVNULL, env=SPACED_ENV)
        log.close()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail("spaced exited with %s at start; log:\n%s" % (self.proc.returncode, self.log()))
            try:
                if self.request("GET", "/healthz", key=None).status == 200:
                    return self
            except OSError:
                time.sleep(0.05)
        pytest.fail("spaced did not answer /healthz within 30 s; log:\n%s" % self.log())

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
        if self.proc and self.proc.returncode not in (0, -signal.SIGKILL):
            # ASan reports and crashes must fail the test run, not vanish.
            raise AssertionError("spaced exited with %s; log:\n%s" % (self.proc.returncode, self.log()))
        if cleanup:
            self.kill_vms()
            self.kill_gateway()
            self.remove_netns()
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def kill_vms(self):
        run = os.path.join(self.data_dir, "run")
        for d in os.listdir(run) if os.path.isdir(run) else []:
            try:
                with open(os.path.join(run, d, "qemu.pid")) as f:
                    os.kill(int(f.read().strip()), signal.SIGKILL)
            except (OSError, ValueError):
                pass

    def kill_gateway(self):
        """spaced leaves its gateway running while sandboxes have a NIC (for the next
        spaced to adopt): nothing will adopt this one."""
        try:
            with open(os.path.join(self.data_dir, "gateway", "gateway.pid")) as f:
                os.kill(int(f.read().strip()), signal.SIGKILL)
        except (OSError, ValueError):
            pass

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


def make_fake_guest():
    """A guest dir with a template whose rootfs exists but no kernel: creates are
    accepted and then fail fast, without QEMU."""
    d = tempfile.mkdtemp(prefix="spg")
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
