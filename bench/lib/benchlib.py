"""Shared pieces of the Python benchmarks (bench/*.py): paths, percentiles, and a release
spaced of the benchmark's own on a free loopback port with a fresh data dir.

Paths: SPACE_BUILD (default build/) holds spaced, SPACE_GUEST (default build/guest) the
guest files, as for the end-to-end tests."""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "clients", "python"))
from space import Client  # noqa: E402

BUILD = os.environ.get("SPACE_BUILD", os.path.join(ROOT, "build"))
GUEST = os.environ.get("SPACE_GUEST", os.path.join(BUILD, "guest"))


def pct(xs, p):
    """The p-th percentile (nearest rank) of xs; 0 for an empty list."""
    if not xs:
        return 0.0
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100.0 * (len(xs) - 1))))]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Daemon:
    """A release spaced on a free port with its own data dir (kept across restarts)."""

    def __init__(self, prefix="bench", build=None, guest=None):
        self.data = tempfile.mkdtemp(prefix=prefix, dir="/tmp")
        self.proc = None
        self.build = build or BUILD  # another checkout's build (bench_ab.py)
        self.guest = guest or GUEST

    def start(self, pool=0, extra=(), env=None):
        """Starts spaced (extra: more arguments; env: more environment variables) and
        returns its /healthz answer."""
        self.port = free_port()
        self.log = open(os.path.join(self.data, "spaced.log"), "ab")
        self.proc = subprocess.Popen(
            [os.path.join(self.build, "spaced"), "--listen", "127.0.0.1:%d" % self.port,
             "--data-dir", self.data, "--guest-dir", self.guest, "--pool", str(pool)] + list(extra),
            stdout=self.log, stderr=subprocess.STDOUT, env=dict(os.environ, **(env or {})))
        url = "http://127.0.0.1:%d" % self.port
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(url + "/healthz", timeout=2) as r:
                    health = json.load(r)
                break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit("spaced did not start; see %s/spaced.log" % self.data)
                time.sleep(0.1)
        with open(os.path.join(self.data, "admin.key")) as f:
            self.client = Client(url, f.read().strip(), timeout=600)
        return health

    def metric(self, name):
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % self.port, timeout=10) as r:
            for line in r.read().decode().splitlines():
                if line.startswith(name + " "):
                    return float(line.split()[1])
        return 0.0

    def stop(self):
        if self.proc:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.log.close()
            self.proc = None

    def remove(self):
        shutil.rmtree(self.data, ignore_errors=True)


def wait_snapshot(c, template="base"):
    """The first create of a shape makes the template's memory snapshot (in the
    background); later creates restore from it. Returns once it exists."""
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        t = c.request("GET", "/v1/templates/" + template)["template"]
        if t.get("snapshots", 0) >= 1:
            return
        time.sleep(0.5)
    raise SystemExit("the %s template's snapshot never became ready" % template)
